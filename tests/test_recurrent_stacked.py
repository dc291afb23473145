"""Stacked recurrent layers (torch num_layers > 1, GRU -> LSTM): per-layer mappings with summed
resources, the pipelined latency model, the target's choice, and the generated design run on x86
bit for bit against the emulator (which is itself checked against PyTorch)."""

from __future__ import annotations

import itertools
import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import aieflow  # noqa: E402
from aieflow.errors import AieflowError, PlanError  # noqa: E402
from aieflow.recurrent.design import RecurrentDesign, compile_recurrent  # noqa: E402
from aieflow.recurrent.model import head_stage  # noqa: E402
from aieflow.recurrent.plan import RecurrentDims, RecurrentOptions, plan_recurrent  # noqa: E402
from aieflow.recurrent.select import costed_points  # noqa: E402
from aieflow.recurrent.stack import (  # noqa: E402
    StackedMapping,
    choose_stack,
    estimate_stack,
    first_and_interval,
    plan_stack,
    stack_bounds,
    stack_point,
    stack_violations,
)

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


class _Stack(torch.nn.Module):
    """``cells`` recurrent modules in sequence (a str: one module with num_layers), then a head."""

    def __init__(self, cells, n_in: int, n_h, layers: int = 1, head: int = 0, sequence: bool = False):
        super().__init__()
        if isinstance(cells, str):
            self.rnns = torch.nn.ModuleList([getattr(torch.nn, cells)(n_in, n_h, num_layers=layers, batch_first=True)])
        else:
            sizes = [n_in, *n_h]
            self.rnns = torch.nn.ModuleList(getattr(torch.nn, c)(sizes[i], sizes[i + 1], batch_first=True) for i, c in enumerate(cells))
        width = n_h if isinstance(n_h, int) else n_h[-1]
        self.fc = torch.nn.Linear(width, head) if head else None
        self.sequence = sequence

    def forward(self, x):
        for r in self.rnns:
            x, _ = r(x)
        if self.sequence:
            return x
        last = x[:, -1]
        return self.fc(last) if self.fc is not None else last


def _data(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * 2.0


# ----------------------------------------------------------------------------- latency model


def _random_stacks(n: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        layers = int(rng.integers(2, 4))
        steps = int(rng.integers(1, 25))
        sizes = [int(v) for v in rng.integers(1, 40, size=layers + 1)]
        cells = rng.choice(["gru", "lstm"], size=layers)
        head = tuple(int(v) for v in rng.integers(1, 30, size=int(rng.integers(0, 3))))
        agg = str(rng.choice(["aie", "hybrid"]))
        dims = [RecurrentDims(str(c), sizes[i], sizes[i + 1], steps, head=head if i == layers - 1 else ())
                for i, c in enumerate(cells)]
        yield dims, RecurrentOptions(aggregation=agg, row_reuse=int(rng.integers(1, 4)))


def test_stack_interval_is_the_slowest_layer_and_latency_lies_between_its_bounds():
    """The estimate (the stage graph of the stack's mapped graph): the interval is the slowest
    layer's; the sequence latency is at least every layer's x path plus ``seq_len - 1`` of those
    intervals (the search's lower bound) and at most the step chain (the W path ahead of the loop
    in every layer, written out here)."""
    dev = aieflow.devices.get_device("vck190")
    ns = 1e9 / dev.clock_hz
    for dims, opts in _random_stacks(12, seed=5):
        layers = tuple(plan_recurrent(d, dev, opts) for d in dims)
        sim = estimate_stack(StackedMapping(layers), dev)
        alone = [first_and_interval(m, dev) for m in layers]
        slowest = max(a[1] for a in alone)
        head = head_stage(layers[-1], dev)
        chain = (sum(a[0] for a in alone) + (dims[0].seq_len - 1) * slowest + head.occupancy + head.delay) * ns
        assert sim.interval_ns == pytest.approx(slowest * ns, rel=1e-9)
        assert sim.interval_ns == pytest.approx(max(p.interval_ns for p in sim.layers), rel=1e-9)
        low, high, _ = stack_bounds(layers, dev)
        assert low * ns * (1 - 1e-9) <= sim.sequence_latency_ns <= high * ns * (1 + 1e-9)
        assert high * ns == pytest.approx(chain, rel=1e-9)
        # one more layer never makes a sample faster; a stack is slower than any of its layers alone
        assert sim.sequence_latency_ns > max(p.sequence_latency_ns for p in sim.layers[:-1])
        assert sim.tiles == sum(m.tiles for m in layers) and sim.interface_tiles == sum(m.interface_tiles for m in layers)
        assert sim.bound.startswith(f"layer {sim.slowest}:")


def test_the_search_bound_never_exceeds_the_simulated_figure():
    """On random stacks of the search's candidates (every layer's ``costed_points``, VCK190 and
    VEK280, 2 and 3 layers): the lower bound ``choose_stack`` prunes by never exceeds the stage
    graph's sequence latency, the step chain never falls below it, and the intervals agree."""
    rng = np.random.default_rng(17)
    for key in ("vck190", "vek280"):
        dev = aieflow.devices.get_device(key)
        dims = [RecurrentDims("gru", 3, 4, 7), RecurrentDims("lstm", 4, 5, 7), RecurrentDims("gru", 5, 3, 7, head=(2,))]
        per = [[p.mapping for p in costed_points(d, dev) if not p.mapping.grid] for d in dims]
        for _ in range(40):
            n = int(rng.integers(2, 4))
            ms = tuple(per[i][int(rng.integers(len(per[i])))] for i in range(3 - n, 3))
            low, high, interval = stack_bounds(ms, dev)
            p = stack_point(StackedMapping(ms), dev)
            cycles = p.latency_ns * dev.clock_hz / 1e9
            assert low <= cycles * (1 + 1e-12) and cycles <= high * (1 + 1e-12)
            assert p.interval_ns * dev.clock_hz / 1e9 == pytest.approx(interval, rel=1e-9)


def test_stacked_gru_and_lstm_against_a_hand_count():
    """A 2-layer GRU and a 2-layer LSTM stack on VEK280 (AIE aggregation: the output kernel relays
    layer 0's h to layer 1), counted by hand from the stages' occupancy + delay ``F``: step 0
    passes layer 0's W path (``w_mac``, ``w_route``), its ``aggregate``, its ``relay``, then layer 1's
    W path and ``aggregate`` (the U paths start from h = 0 and wait for nothing); every later step
    leaves one interval after the one before, the slowest layer's loop (h_in + u_mac + route +
    aggregate); the head follows the last step."""
    from aieflow.recurrent.model import step_stages

    dev = aieflow.devices.get_device("vek280")
    ns = 1e9 / dev.clock_hz
    for cell, sizes, steps in (("gru", (3, 6, 5), 5), ("lstm", (4, 5, 3), 4)):
        dims = [RecurrentDims(cell, sizes[0], sizes[1], steps), RecurrentDims(cell, sizes[1], sizes[2], steps, head=(2,))]
        ms = tuple(plan_recurrent(d, dev, RecurrentOptions(aggregation="aie")) for d in dims)
        f = [{s.name: s.occupancy + s.delay for s in (*w, *loop)} for w, loop in (step_stages(m, dev) for m in ms)]
        occ = [{s.name: s.occupancy for s in (*w, *loop)} for w, loop in (step_stages(m, dev) for m in ms)]
        relay = head_stage(ms[0], dev).parts["relay"]  # layer 0's output kernel: h over one stream hop
        loops = [g["h_in"] + g["u_mac"] + g["route"] + g["aggregate"] for g in f]
        interval = max(*loops, *(o["w_mac"] for o in occ), *(o["w_route"] for o in occ))
        first = (f[0]["w_mac"] + f[0]["w_route"] + f[0]["aggregate"] + relay
                 + f[1]["w_mac"] + f[1]["w_route"] + f[1]["aggregate"])
        head = head_stage(ms[1], dev)
        p = estimate_stack(StackedMapping(ms), dev)
        assert p.interval_ns == pytest.approx(interval * ns, rel=1e-9)
        assert p.sequence_latency_ns == pytest.approx((first + (steps - 1) * interval + head.occupancy + head.delay) * ns,
                                                      rel=1e-9)
        assert p.fill_ns == pytest.approx((first - interval) * ns, rel=1e-9)


def test_an_output_kernel_relay_is_charged_on_one_output_port_cores():
    """VEK280 (one output stream port per core): each AIE-aggregated layer's output leaves through
    its output kernel, one more stream hop of the padded h (32-bit words at the core port's 4 B per
    cycle, AM020; the fixed stream start and one switch hop of perf/movement.py).  The last
    layer's relay is in the head; an inner layer's is a stage of the stack's graph, in its bounds.
    VCK190 (two ports) has none."""
    from aieflow.perf import movement as mv

    vek = aieflow.devices.get_device("vek280")
    for dims, opts in _random_stacks(8, seed=11):
        opts = RecurrentOptions(aggregation="aie", row_reuse=opts.row_reuse)
        layers = tuple(plan_recurrent(d, vek, opts) for d in dims)
        sim = estimate_stack(StackedMapping(layers), vek)
        relay = [dict(head_stage(m, vek).parts)["relay"] for m in layers]
        # at least the n_h words of h, one 32-bit word per cycle, after the stream start and one hop
        assert all(r >= mv.STREAM_FIXED_CYCLES + mv.SWITCH_HOP_CYCLES + m.dims.n_h for r, m in zip(relay, layers, strict=True))
        low, high, _ = stack_bounds(layers, vek)
        ns = 1e9 / vek.clock_hz
        assert low * ns * (1 - 1e-9) <= sim.sequence_latency_ns <= high * ns * (1 + 1e-9)
        assert "relay" in sim.head_breakdown_ns
    vck = plan_recurrent(RecurrentDims("gru", 6, 20, 4), "vck190", RecurrentOptions(aggregation="aie"))
    assert "relay" not in dict(head_stage(vck, "vck190").parts) and vck.aggregator_tiles == 1


def test_stack_choice_is_the_fewest_tiles_meeting_the_budget_brute_force():
    """Every combination of the layers' mappings costed by the estimate (the stage graph):
    the search's pick and fastest stack are the brute force's."""
    dev = aieflow.devices.get_device("vck190")
    dims = [RecurrentDims("gru", 3, 4, 6), RecurrentDims("lstm", 4, 3, 6, head=(2,))]
    opts = RecurrentOptions(aggregation="aie")
    per = [[p.mapping for p in costed_points(d, dev, opts)] for d in dims]
    combos = [(sum(m.tiles for m in ms), stack_point(StackedMapping(ms), dev).latency_ns, ms)
              for ms in itertools.product(*per) if not stack_violations(ms, dev)]
    budget = sorted(c[1] for c in combos)[len(combos) // 3]
    ok = [c for c in combos if c[1] <= budget]
    ex = choose_stack(dims, dev, f"latency_ns <= {budget}", opts)
    best = min(ok, key=lambda c: (c[0], c[1]))
    assert ex.chosen.tiles == best[0] and ex.chosen.latency_ns == pytest.approx(best[1], rel=1e-9)
    assert ex.chosen.latency_ns <= budget
    assert ex.performance.sequence_latency_ns == pytest.approx(ex.chosen.latency_ns, rel=1e-9)
    fastest = choose_stack(dims, dev, "latency", opts)
    assert fastest.chosen.latency_ns == pytest.approx(min(c[1] for c in combos), rel=1e-9)
    with pytest.raises(PlanError, match="no plan meets"):
        choose_stack(dims, dev, f"latency_ns <= {min(c[1] for c in combos) * 0.5}", opts)


def test_stack_resources_are_summed_against_the_device():
    dims = [RecurrentDims("gru", 6, 40, 10), RecurrentDims("gru", 40, 40, 10)]
    alone = [plan_recurrent(d, "vck190") for d in dims]
    assert all(m.tiles <= 400 for m in alone) and sum(m.tiles for m in alone) > 400  # each fits, not both
    assert any("tiles in all" in v for v in stack_violations(alone, "vck190"))
    stack = plan_stack(dims, "vck190")
    assert not stack_violations(stack.layers, "vck190") and stack.tiles <= 400
    assert stack.notes and "do not fit together" in stack.notes[0]
    tiny = RecurrentDims("gru", 4, 4, 2)  # spread: at least 3 U + 3 W kernels each: 30 layers need > 144 tiles
    spread = (RecurrentOptions(distribution="row"), RecurrentOptions(distribution="column"))
    assert min(p.tiles for p in costed_points(tiny, "vek385", spread)) * 30 > 144
    with pytest.raises(PlanError, match="do not fit vek385 together|do not fit VEK385 together"):
        choose_stack([tiny] * 30, "vek385", "resources", spread)
    # compact layers take one tile and one interface tile each: 30 fit, 40 exceed the 36 interface columns
    assert choose_stack([tiny] * 30, "vek385", "resources").chosen.tiles == 30
    with pytest.raises(PlanError, match="do not fit"):
        choose_stack([tiny] * 40, "vek385", "resources")


# ----------------------------------------------------------------------------- generated designs on x86


CASES = [
    # id, cells, n_h, torch num_layers, precision, options (one, or per layer), head, whole sequence out
    ("gru2-fp32-hybrid", "GRU", 12, 2, "fp32", RecurrentOptions(aggregation="hybrid"), 3, False),
    ("lstm2-int16-aie-seq", "LSTM", 9, 2, "int16", RecurrentOptions(aggregation="aie"), 0, True),
    ("gru-lstm-int16-hybrid-then-aie-column", ("GRU", "LSTM"), (10, 7), 1, "int16",
     [RecurrentOptions(aggregation="hybrid"),
      RecurrentOptions(aggregation="aie", distribution="column", input_distribution="column", cas_len=2, input_cas_len=3,
                       row_reuse=7, input_row_reuse=7)], 2, False),
    ("gru3-fp32-aie", "GRU", 5, 3, "fp32", RecurrentOptions(aggregation="aie", row_reuse=2), 0, False),
]


@needs_gxx
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_stacked_design_is_bit_exact_on_x86(case):
    _, cells, n_h, layers, precision, opts, head, sequence = case
    torch.manual_seed(7)
    net = _Stack(cells, 4, n_h, layers, head, sequence).eval()
    x = _data((48, 5, 4), 1)
    d = compile_recurrent(net, "vck190", x[:4], {"precision": precision}, x, opts)
    assert d.stack is not None and len(d.layers) == len(d.stack.layers) >= 2
    if isinstance(opts, list):
        assert [m.aggregation for m in d.mappings] == [o.aggregation for o in opts]
        assert d.mappings[1].recurrent.cas_len == 2 and d.mappings[1].input.cas_len == 3
    result = d.verify(samples=14, seed=2)
    assert result.ok, result.verdict()
    out_width = head or (n_h if isinstance(n_h, int) else n_h[-1])
    assert result.values == 14 * out_width * (5 if sequence else 1)
    if precision == "fp32":  # the emulator the C++ matched is PyTorch's model to float tolerance
        np.testing.assert_allclose(d.predict(x.numpy()), net(x).detach().numpy(), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- design, target, errors


def test_stacked_design_reports_every_layer_saves_and_loads(tmp_path):
    torch.manual_seed(2)
    net = _Stack("GRU", 5, 8, 2, head=2).eval()
    x = _data((32, 6, 5), 3)
    d = aieflow.compile(net, device="vck190", example_input=x[:4], calibration=x,
                        config={"precision": "int16", "target": "latency_ns <= 20000"})
    assert isinstance(d, RecurrentDesign) and d.exploration is not None
    fewer = [p for p in d.exploration.front if p.latency_ns <= 20000 and p.tiles < d.exploration.chosen.tiles]
    assert not fewer and d.estimate().sequence_latency_ns <= 20000  # still the fewest tiles meeting the budget
    meta = d.to_json()
    assert [lay["name"] for lay in meta["layers"]] == ["rnns.0_l0", "rnns.0_l1"]  # torch num_layers=2
    assert [lay["tiles"] for lay in meta["layers"]] == [m.tiles for m in d.mappings]
    assert meta["performance"]["tiles"] == sum(m.tiles for m in d.mappings)
    assert "layer 0 rnns.0_l0" in d.summary() and "layer 1 rnns.0_l1" in d.summary()
    back = aieflow.load(d.save(tmp_path / "s"))
    assert back.stack == d.stack and back.files == d.files
    assert back.estimate().to_json() == d.estimate().to_json()
    np.testing.assert_array_equal(back.predict(x.numpy(), raw=True), d.predict(x.numpy(), raw=True))
    again = json.loads((back.save(tmp_path / "again") / "design.json").read_text())
    assert again == json.loads((tmp_path / "s" / "design.json").read_text())
    assert "<svg" in back.placement_svg()


def test_stack_errors_name_the_layer_and_the_fix():
    torch.manual_seed(0)
    net = _Stack("GRU", 3, 6, 2).eval()
    x = _data((16, 4, 3), 0)
    with pytest.raises(AieflowError, match="precision"):  # the quantiser refuses it before the mapping
        compile_recurrent(net, "vck190", x[:2], {"precision": "int16", "layers": {"rnns.0_l1": {"precision": "fp32"}}}, x)
    with pytest.raises(PlanError, match="per-layer recurrent options"):
        compile_recurrent(net, "vck190", x[:2], {"precision": "int16"}, x, [RecurrentOptions()] * 3)
