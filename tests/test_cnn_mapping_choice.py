"""``cnn.mapping: auto`` (issue 25, item 2: "the search chooses patches or row streaming"): both
mappings costed and the better one by the target taken, ties to whole frames.  The expected choice
is computed here from designs compiled with each mapping named explicitly (``cnn.mapping: stream`` /
``rows``), not from the auto code."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import aieflow  # noqa: E402
from aieflow.config import parse_config  # noqa: E402
from aieflow.errors import PlanError  # noqa: E402
from aieflow.points import point_config  # noqa: E402

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: verify builds C++20 with g++")


def _net(layers: int, channels: int) -> nn.Module:
    """``layers`` 3 x 3 convolutions of ``channels`` channels after a 3-channel input, ReLU between."""
    torch.manual_seed(0)
    mods: list[nn.Module] = [nn.Conv2d(3, channels, 3, padding=1)]
    for _ in range(layers - 1):
        mods += [nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1)]
    return nn.Sequential(*mods).eval()


def _compile(model, hw, **config):
    cal = np.random.default_rng(1).standard_normal((4, 3, *hw)).astype(np.float32)
    return aieflow.compile(model, "vck190", cal[:1], calibration=cal, config={"precision": "int8", **config})


def _figures(d):
    """(latency ns, interval per frame ns, tiles) of a design, from its design.json."""
    perf = d.to_json()["performance"]
    return perf["latency_ns"], perf["interval_ns"] / (perf["batch"] * perf["replicas"]), perf["tiles_used"]


# A deep, thin network: eight 1-channel convolutions of 16 x 16.  Whole frames pass stage to stage
# (a frame's latency is the sum of the stages), rows overlap within the frame.
DEEP = (_net(8, 1), (16, 16))
# Two 4-channel convolutions: whole frames win on every objective.
WIDE = (_net(2, 4), (16, 16))

OBJECTIVE = {"latency": lambda f: (f[0], f[2]), "throughput": lambda f: (f[1], f[2]),
             "resources": lambda f: (f[2], f[0], f[1])}


def _expected(model, hw, target):
    """The mapping the target prefers, from the two explicit compiles; a tie goes to stream."""
    stream = _compile(model, hw, cnn={"mapping": "stream"}, **({"target": target} if target else {}))
    rows = _compile(model, hw, cnn={"mapping": "rows"})
    s, r = _figures(stream), _figures(rows)
    key = OBJECTIVE[target] if target else (lambda f: (f[1], f[2]))  # no target: the most frames per second
    return ("rows" if key(r) < key(s) else "stream"), {"stream": s, "rows": r}


@pytest.mark.parametrize(("case", "target", "want"), [
    (DEEP, "latency", "rows"), (DEEP, "throughput", "stream"), (DEEP, None, "stream"),
    (WIDE, "latency", "stream"), (WIDE, "throughput", "stream"),
])
def test_auto_takes_the_better_mapping_by_the_target(case, target, want):
    model, hw = case
    expected, figures = _expected(model, hw, target)
    assert expected == want  # the sweep's finding: the cases cover both outcomes
    d = _compile(model, hw, **({"target": target} if target else {}))
    assert d.plan.mapping == expected
    assert _figures(d) == pytest.approx(figures[expected], rel=1e-12)  # the very design compiled explicitly
    other = "stream" if expected == "rows" else "rows"
    choice = d.to_json()["performance"]["mapping_choice"]
    assert choice.startswith(f"{expected} by ") and f"; {other}: latency {figures[other][0] / 1e3:,.1f} us" in choice
    assert f"mapping chosen (auto): {choice}" in d.summary()


def test_a_tile_budget_ranks_both_mappings():
    model, hw = DEEP
    _, figures = _expected(model, hw, "latency")
    budget = figures["rows"][2]
    d = _compile(model, hw, target=f"throughput, tiles <= {budget}")
    # within the budget: the stream plans of at most `budget` tiles and the rows plan, by interval per frame
    assert d.plan.tiles <= budget and "target throughput, tiles <= " in d.plan.choice
    assert _figures(d)[1] <= figures["rows"][1]


def test_an_explicit_mapping_is_never_overridden():
    model, hw = DEEP
    assert _compile(model, hw, target="latency").plan.mapping == "rows"
    d = _compile(model, hw, target="latency", cnn={"mapping": "stream"})
    assert d.plan.mapping == "stream" and not d.plan.choice and "mapping_choice" not in d.to_json()["performance"]
    model, hw = WIDE
    assert _compile(model, hw).plan.mapping == "stream"
    d = _compile(model, hw, cnn={"mapping": "rows"})
    assert d.plan.mapping == "rows" and "mapping chosen" not in d.summary()


def test_only_one_fits_and_neither_fits():
    d = _compile(_net(2, 4), (64, 64))  # a 64 x 64 frame of 4 channels is over a tile: rows only
    assert d.plan.mapping == "rows" and d.plan.choice.startswith("rows: whole frames do not fit (layer '0'")
    torch.manual_seed(0)
    wide = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1)).eval()  # one 512-wide row of 64 channels: 32 KB
    with pytest.raises(PlanError) as e:
        _compile(wide, (512, 512))
    text = str(e.value)
    assert "(whole frames, the stream mapping)" in text and "and the rows mapping: layer '0'" in text
    assert "in the rows mapping (a line buffer of 3 rows" in text


def test_explore_lists_the_rows_point_and_its_config_compiles_to_it():
    model, hw = DEEP
    cal = np.random.default_rng(1).standard_normal((4, 3, *hw)).astype(np.float32)
    base = {"precision": "int8", "target": "latency"}
    ex = aieflow.explore(model, "vck190", cal[:1], calibration=cal, config=base)
    rows = [p for p in ex.front if p.mapping == "rows"]
    assert len(rows) == 1 and ex.chosen == rows[0]  # the lowest latency, as compile picks
    cfg = point_config(ex, rows[0], parse_config(base))
    assert cfg["cnn"] == {"mapping": "rows"} and "target" not in cfg
    d = _compile(model, hw, **{k: v for k, v in cfg.items() if k != "precision"})
    lat, iv, tiles = _figures(d)
    assert (tiles, lat, iv) == (rows[0].tiles, pytest.approx(rows[0].latency_ns), pytest.approx(rows[0].interval_ns))


@needs_cxx
def test_an_auto_chosen_rows_design_verifies_bit_exact():
    model, hw = DEEP
    d = _compile(model, hw, target="latency")
    assert d.plan.mapping == "rows"
    v = d.verify(samples=2)
    assert v.ok and v.mismatches == 0 and v.values == 2 * 16 * 16
