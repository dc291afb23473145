"""The recurrent mapping keys of a config (``layers.<gru / lstm>.mapping``, recurrent/directives.py):
parsed and checked with errors naming the layer and key, applied by ``aieflow.compile``, the CLI's
``--config`` and ``explore``, and taken by a ``target`` search as constraints."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from onnx_files import export_onnx  # noqa: E402

import aieflow  # noqa: E402
from aieflow.cli import main  # noqa: E402
from aieflow.config import parse_config  # noqa: E402
from aieflow.errors import ConfigError, PlanError  # noqa: E402
from aieflow.recurrent.design import compile_recurrent  # noqa: E402
from aieflow.recurrent.directives import parse_layer  # noqa: E402
from aieflow.recurrent.plan import RecurrentOptions  # noqa: E402

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


class _Net(torch.nn.Module):
    def __init__(self, cell: str = "GRU", n_in: int = 4, n_h: int = 10, layers: int = 1, head: int = 0):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(n_in, n_h, num_layers=layers, batch_first=True)
        self.fc = torch.nn.Linear(n_h, head) if head else None

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1]) if self.fc is not None else out[:, -1]


def _data(shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 2.0


def _compile(mapping=None, precision="fp32", net=None, **top):
    torch.manual_seed(1)
    net = net or _Net().eval()
    x = _data((16, 5, 4))
    cfg = {"precision": precision, **top}
    if mapping is not None:
        cfg["layers"] = {"rnn": {"mapping": mapping}}
    return aieflow.compile(net, device="vck190", example_input=x[:2], config=cfg, calibration=x)


# ----------------------------------------------------------------------------- parsing


def test_keys_become_the_options_and_fixed_reuse_is_exact():
    d = parse_layer("rnn", {"distribution": "column", "cas_len": 2, "aggregation": "PL", "row_reuse": 3,
                            "input_row_reuse": "auto", "merge_fanin": 6, "plio_bits": 128, "kernel": "scalar"}, float_type=None)
    o = d.options
    assert (o.distribution, o.cas_len, o.aggregation, o.merge_fanin, o.plio_bits) == ("column", 2, "hybrid", 6, 128)
    assert (o.row_reuse, o.row_reuse_max) == (3, 3) and o.input_row_reuse == 1 and o.input_row_reuse_max is None
    assert d.kernel == "scalar" and "input_row_reuse" not in d.given
    assert parse_layer("rnn", {"input_cas_len": 3}, float_type=None).options.input_distribution == "column"  # implied
    assert parse_layer("rnn", {}, float_type="fp32").empty


@pytest.mark.parametrize("raw, match", [
    ({"distrbution": "row"}, r"layers\.rnn\.mapping: unknown key\(s\) distrbution"),
    ({"distribution": "diagonal"}, r"layers\.rnn\.mapping\.distribution: 'diagonal'; choose one of row, column"),
    ({"aggregation": 3}, r"layers\.rnn\.mapping\.aggregation"),
    ({"row_reuse": 0}, r"layers\.rnn\.mapping\.row_reuse must be a positive integer"),
    ({"cas_len": True}, r"layers\.rnn\.mapping\.cas_len must be a positive integer"),
    ({"plio_bits": 96}, r"layers\.rnn\.mapping\.plio_bits: 96; a PLIO is 32, 64 or 128"),
    ({"distribution": "row", "cas_len": 2}, r"layers\.rnn\.mapping\.cas_len: chains apply to distribution: column"),
    ({"kernel": "simd"}, r"layers\.rnn\.mapping\.kernel: 'simd'"),
])
def test_bad_keys_name_the_layer_and_the_key(raw, match):
    with pytest.raises(ConfigError, match=match):
        parse_layer("rnn", raw, float_type=None)


def test_fp32_rejects_mixed_distributions_and_scalar_kernels():
    with pytest.raises(ConfigError, match="one float summation order"):
        parse_layer("rnn", {"distribution": "row", "input_distribution": "column"}, float_type="fp32")
    with pytest.raises(ConfigError, match="scalar applies to fixed point"):
        parse_layer("rnn", {"kernel": "scalar"}, float_type="fp32")
    assert parse_layer("rnn", {"distribution": "column"}, float_type="fp32").options.input_distribution == "column"


def test_the_mapping_survives_the_config_round_trip():
    cfg = parse_config({"layers": {"rnn": {"mapping": {"distribution": "column", "cas_len": 2}}}})
    again = parse_config(cfg.to_json())
    assert dict(again.layer("rnn").mapping) == {"distribution": "column", "cas_len": 2}


# ----------------------------------------------------------------------------- compile, explore, target


def test_compile_applies_the_keys():
    d = _compile({"distribution": "column", "cas_len": 2, "aggregation": "aie", "row_reuse": 5})
    m = d.mapping
    assert (m.recurrent.distribution, m.input.distribution, m.aggregation) == ("column", "column", "aie")
    assert m.recurrent.cas_len == 2 and m.row_reuse == 5
    d = _compile({"aggregation": "hybrid", "row_reuse": 2, "input_row_reuse": 4, "merge_fanin": 6}, precision="int16")
    m = d.mapping
    assert (m.recurrent.distribution, m.row_reuse, m.input_row_reuse, m.u_fanin) == ("row", 2, 4, 6)
    assert json.loads(json.dumps(d.to_json()))["config"]["layers"]["rnn"]["mapping"]["merge_fanin"] == 6


def test_a_target_searches_only_what_the_keys_leave_open():
    free = _compile(None, target="latency")
    fixed = _compile({"aggregation": "aie", "row_reuse": 2}, target="latency")
    ex = fixed.exploration
    assert ex is not None and ex.candidates < free.exploration.candidates
    assert all(p.mapping.aggregation == "aie" and p.mapping.row_reuse == 2 for p in ex.front)
    assert fixed.mapping.aggregation == "aie" and fixed.mapping.row_reuse == 2
    # the latency budget is still honoured: fewest tiles among the constrained mappings that meet it
    budget = max(p.latency_ns for p in ex.front)
    d = _compile({"aggregation": "aie"}, target=f"latency_ns <= {budget}")
    assert d.exploration.chosen.latency_ns <= budget and d.mapping.aggregation == "aie"
    assert d.mapping.tiles == min(p.tiles for p in d.exploration.front if p.latency_ns <= budget)


def test_explore_takes_the_keys_as_constraints():
    torch.manual_seed(1)
    net = _Net().eval()
    x = _data((16, 5, 4))
    ex = aieflow.explore(net, device="vck190", example_input=x[:2], calibration=x,
                         config={"precision": "fp32", "layers": {"rnn": {"mapping": {"distribution": "column"}}}})
    assert ex.front and all(p.mapping.recurrent.distribution == "column" for p in ex.front)


def test_a_fixed_reuse_that_does_not_fit_is_a_clear_plan_error():
    net = _Net("GRU", 600, 64).eval()
    x = _data((4, 2, 600))
    cfg = {"precision": "int16", "layers": {"rnn": {"mapping": {"aggregation": "hybrid", "input_row_reuse": 64}}}}
    with pytest.raises(PlanError, match="W x rows per kernel at most 64"):
        aieflow.compile(net, device="vck190", example_input=x[:2], config=cfg, calibration=x)


def test_stacked_layers_share_the_module_key_and_a_layer_key_wins():
    torch.manual_seed(2)
    net = _Net("GRU", 4, 8, layers=2).eval()
    x = _data((16, 4, 4))
    cfg = {"precision": "int16", "layers": {"rnn": {"mapping": {"aggregation": "aie"}},
                                            "rnn_l1": {"mapping": {"aggregation": "hybrid", "row_reuse": 2}}}}
    d = aieflow.compile(net, device="vck190", example_input=x[:2], config=cfg, calibration=x)
    m0, m1 = d.mappings
    assert m0.aggregation == "aie" and (m1.aggregation, m1.row_reuse) == ("hybrid", 2)


def test_config_errors_for_recurrent_designs():
    torch.manual_seed(1)
    x = _data((16, 5, 4))
    with pytest.raises(ConfigError, match=r"layers\.fc\.mapping: the dense head"):
        aieflow.compile(_Net(head=2).eval(), device="vck190", example_input=x[:2], calibration=x,
                        config={"precision": "fp32", "layers": {"fc": {"mapping": {"aggregation": "aie"}}}})
    with pytest.raises(ConfigError, match="given twice"):
        compile_recurrent(_Net().eval(), "vck190", x[:2],
                          {"precision": "fp32", "layers": {"rnn": {"mapping": {"aggregation": "aie"}}}}, x,
                          RecurrentOptions(aggregation="hybrid"))
    # a narrow saturating accumulator whose partial sums could clamp: hls4ml's order only
    narrow = {"accum": "fixed<16,1,RND_CONV,SAT>"}
    with pytest.raises(ConfigError, match=r"kernel: vector is not bit-exact with hls4ml here: .*saturate"):
        aieflow.compile(_Net().eval(), device="vck190", example_input=x[:2], calibration=x,
                        config={"precision": "int16", "layers": {"rnn": {"mapping": {"kernel": "vector"}, **narrow}}})


# ----------------------------------------------------------------------------- the CLI


@needs_gxx
def test_cli_compile_reads_the_mapping_from_the_config_file(tmp_path, capsys):
    torch.manual_seed(5)
    net = _Net("GRU", 4, 10).eval()
    x = _data((24, 6, 4), seed=1).numpy()
    model = tmp_path / "gru.onnx"
    export_onnx(net, x[:1], model)
    name = next(n.name for n in aieflow.emulate(str(model), device="vck190", example_input=x[:1]).graph.nodes
                if n.op == "gru")
    np.save(tmp_path / "x.npy", x)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"precision: int16\nlayers:\n  '{name}':\n    mapping:\n      distribution: column\n"
                   "      input_distribution: row\n      cas_len: 2\n      aggregation: aie\n      kernel: scalar\n")
    out = tmp_path / "design"
    assert main(["compile", str(model), "--device", "vck190", "--config", str(cfg), "--calibration",
                 str(tmp_path / "x.npy"), "--out", str(out), "--quiet"]) == 0
    meta = json.loads((out / "design.json").read_text())
    m = meta["mapping_fields"]
    assert (m["recurrent"]["distribution"], m["recurrent"]["cas_len"], m["input"]["distribution"], m["aggregation"]) == \
        ("column", 2, "row", "aie")
    assert meta["kernels"][0]["u"] == meta["kernels"][0]["w"] == "scalar"
    assert main(["verify", str(out), "--samples", "5", "--quiet"]) == 0
    assert "verify: PASS, bit-exact" in capsys.readouterr().out
    cfg.write_text(f"layers:\n  '{name}':\n    mapping:\n      distribution: sideways\n")
    assert main(["compile", str(model), "--device", "vck190", "--config", str(cfg), "--calibration", str(tmp_path / "x.npy"),
                 "--out", str(tmp_path / "bad")]) != 0
    assert f"layers.{name}.mapping.distribution: 'sideways'" in capsys.readouterr().err


def test_a_search_that_finds_nothing_says_which_limit_stops_it():
    # with a target, the search over the fixed keys finds no legal mapping: the error carries the
    # planner's diagnosis (here: one row per kernel makes too many packet sources for the AIE
    # aggregator's merge), not just "no mapping fits"
    mapping = {"aggregation": "aie", "row_reuse": 1, "cas_len": 2}
    for layers in (1, 2):
        torch.manual_seed(1)
        net = _Net("GRU", 1, 32, layers=layers).eval()
        x = _data((16, 20, 1))
        with pytest.raises(PlanError, match=r"with these options: no column-wise aie mapping .* pktmerge of \d+ inputs > \d+"):
            aieflow.compile(net, device="vck190", example_input=x[:2], calibration=x,
                            config={"precision": "int16", "target": "latency", "layers": {"rnn": {"mapping": mapping}}})


def test_a_module_key_is_named_as_the_user_wrote_it_in_errors():
    # layers.rnn applies to both layers of a num_layers=2 module; the error names that key (and
    # the layer it failed on), not a layers.rnn_l0 key the user never wrote
    torch.manual_seed(2)
    net = _Net("GRU", 4, 8, layers=2).eval()
    x = _data((16, 4, 4))
    rnn = {"accum": "fixed<16,1,RND_CONV,SAT>", "mapping": {"kernel": "vector"}}
    with pytest.raises(ConfigError, match=r"^layer 'rnn_l0': layers\.rnn\.mapping\.kernel: vector is not bit-exact"):
        aieflow.compile(net, device="vck190", example_input=x[:2], calibration=x,
                        config={"precision": "int16", "layers": {"rnn": rnn}})
