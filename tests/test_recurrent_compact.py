"""The compact recurrent mapping (issue 22): the whole GRU / LSTM cell on one tile.

x86: the generated CompactCell (rnn_compact.h, rnn_vgates.h) against the emulator bit for bit on
VEK280 and VCK190, fixed point (hls4ml's default types, PTQ types, a type set that exercises AIE's
missing symmetric rounding) and fp32, vector and scalar gate math, stacks.  The emulator itself
against the exact-rational transcription of hls4ml's recurrence (test_recurrent_fixed_reference).
The cycle model against the constants and the emitted code, the search, the config key and its
refusals.
"""

from __future__ import annotations

import math
import re
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import aieflow  # noqa: E402
from aieflow.devices import get_device  # noqa: E402
from aieflow.errors import AieflowError, ConfigError, PlanError  # noqa: E402
from aieflow.ops import recurrent as rec  # noqa: E402
from aieflow.perf.kernel import KERNEL_CONSTANTS  # noqa: E402
from aieflow.recurrent import costs  # noqa: E402
from aieflow.recurrent.compact import vector_gates  # noqa: E402
from aieflow.recurrent.design import compile_recurrent, explore_recurrent  # noqa: E402
from aieflow.recurrent.model import estimate_closed, estimate_recurrent, step_stages  # noqa: E402
from aieflow.recurrent.plan import RecurrentDims, RecurrentOptions, plan_recurrent  # noqa: E402
from aieflow.recurrent.select import choose_mapping, costed_points  # noqa: E402

HAVE_GXX = shutil.which("g++") is not None
needs_gxx = pytest.mark.skipif(not HAVE_GXX, reason="g++ is not installed")
KEYS = ("input", "weight", "recurrent_weight", "bias", "recurrent_bias", "accum", "output")
HLS4ML = dict.fromkeys(KEYS, "fixed<16,6>")  # hls4ml's default ap_fixed<16,6> (TRN, WRAP) everywhere
COMPACT = RecurrentOptions(distribution="compact")


class _Net(torch.nn.Module):
    """One recurrent layer (top tagging: 6 -> 20 with a 64 ReLU -> 1 head), or a stack of two."""

    def __init__(self, cell: str, n_in: int, n_h: int, head: bool = True, second: str | None = None, n_h2: int = 7):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(n_in, n_h, batch_first=True)
        self.rnn2 = getattr(torch.nn, second)(n_h, n_h2, batch_first=True) if second else None
        self.head = head
        width = n_h2 if second else n_h
        if head:
            self.fc1, self.relu, self.fc2 = torch.nn.Linear(width, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        if self.rnn2 is not None:
            out, _ = self.rnn2(out)
        return self.fc2(self.relu(self.fc1(out[:, -1]))) if self.head else out


def _compile(cell, device, precision="int16", types=None, n_in=6, n_h=20, steps=20, head=True, scale=1.0, seed=0,
             options=COMPACT, second=None, config=None):
    torch.manual_seed(seed)
    net = _Net(cell, n_in, n_h, head, second).eval()
    with torch.no_grad():
        for p in net.rnn.parameters():
            p.mul_(scale)  # large pre-activations: both table clamps, wrapping or saturating sums
    x = torch.randn(64, steps, n_in) * 2.0
    cfg = {"precision": precision, **(config or {})}
    if types:
        cfg.setdefault("layers", {})["rnn"] = dict(types)
    return compile_recurrent(net, device, x[:4], cfg, x, options), net, x


def _rnn_node(d):
    return next(n for n in d.graph.nodes if n.op in ("gru", "lstm"))


# ----------------------------------------------------------------------------- x86, bit for bit

X86_CASES = [
    # id, cell, device, precision, types, n_in, n_h, steps, head, weight scale
    ("gru-vek280-hls4ml-top-tagging", "GRU", "vek280", "int16", HLS4ML, 6, 20, 20, True, 3.0),
    # AIE: the gate sums' wraps folded into the truncating index's two roundings and select (issue 22)
    ("gru-vck190-hls4ml-top-tagging", "GRU", "vck190", "int16", HLS4ML, 6, 20, 20, True, 3.0),
    ("lstm-vek280-ptq-sequence", "LSTM", "vek280", "int16", None, 5, 13, 4, False, 2.0),
    # AIE has no symmetric floor: hls4ml's truncating index is two roundings and a select by sign
    ("gru-vck190-trunc-satsym", "GRU", "vck190", "int16",
     {**HLS4ML, "accum": "fixed<31,8,RND_MIN_INF,SAT_SYM>", "output": "fixed<12,2,TRN,SAT>"}, 1, 5, 5, False, 3.0),
    ("lstm-vck190-fp32", "LSTM", "vck190", "fp32", None, 6, 20, 20, True, 1.0),
    # 80 gate rows = five 16-lane groups: two blocks of the products' column loop (4 + 1 groups)
    ("lstm-vek280-hls4ml-two-blocks", "LSTM", "vek280", "int16", HLS4ML, 6, 20, 6, True, 3.0),
    # AIE-MLv2 (issue 24): 32-lane products (the catalog's 2 x 512-bit loads), 80 gate rows = 2.5 groups
    ("lstm-vek385-hls4ml", "LSTM", "vek385", "int16", HLS4ML, 6, 20, 6, True, 3.0),
]


@needs_gxx
@pytest.mark.parametrize("case", X86_CASES, ids=[c[0] for c in X86_CASES])
def test_compact_design_is_bit_exact_on_x86(case, tmp_path):
    _, cell, device, precision, types, n_in, n_h, steps, head, scale = case
    d, _, _ = _compile(cell, device, precision, types, n_in, n_h, steps, head, scale)
    m = d.mapping
    assert m.compact and m.tiles == 1 and "CompactCell" in d.files["src/graph.h"]
    if precision != "fp32":  # vector products, gate math and head where recurrent/compact.py proves them exact
        assert m.dims.kernels[0] in ("vector", "vector_round") and m.dims.gate_form
        assert "using Gates = rnn_l0::VGates" in d.files["src/rnn_config.h"]
        assert bool(m.dims.head_form) == head and ("using Head = rnn_l0::VHead" in d.files["src/rnn_config.h"]) == head
    else:
        assert not m.dims.gate_form and d.layer.attrs["fp32_lanes"] == 0  # the compact tile's sequential order
    result = d.verify(samples=12, cache_dir=tmp_path)
    assert result.ok, result.verdict()
    assert result.values == 12 * (1 if head else steps * n_h)


@needs_gxx
def test_scalar_gate_math_and_scalar_products_are_bit_exact(tmp_path):
    # 31 fractional bits in the accumulator: outside the vector gate math (and, forced, scalar products)
    types = {**HLS4ML, "accum": "fixed<32,1>", "output": "fixed<16,2>"}
    d, _, _ = _compile("GRU", "vek280", n_in=3, n_h=9, steps=4, head=False,
                       config={"layers": {"rnn": {**types, "mapping": {"distribution": "compact", "kernel": "scalar"}}}},
                       options=None)
    assert d.mapping.compact and not d.mapping.dims.gate_form and d.mapping.dims.kernels == ("scalar", "scalar")
    assert "using Gates = rnn_l0::Cell" in d.files["src/rnn_config.h"]
    assert "fractional bits" in vector_gates(_rnn_node(d), d.device, "x")
    assert d.verify(samples=8, cache_dir=tmp_path).ok


@needs_gxx
@pytest.mark.parametrize("second", [("compact", "vek280"), ("row", "vck190")])
def test_stacks_of_compact_tiles_are_bit_exact(second, tmp_path):
    kind, device = second
    opts = [COMPACT, COMPACT if kind == "compact" else RecurrentOptions(distribution="row", aggregation="aie")]
    d, _, _ = _compile("GRU", device, n_in=4, n_h=10, steps=5, head=True, second="LSTM", options=opts, scale=2.0)
    assert [m.compact for m in d.mappings] == [True, kind == "compact"]
    assert "c0.out[0]" in d.files["src/graph.h"]  # layer 1 reads layer 0's output stream
    result = d.verify(samples=8, cache_dir=tmp_path)
    assert result.ok, result.verdict()


# ----------------------------------------------------------------------------- predict = the reference


def _exact_reference(node, xq):
    from test_recurrent_fixed_reference import _reference

    n = node.attrs["hidden_size"]
    return np.asarray(_reference(node.op, node.types, node.params, xq, n))


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
@pytest.mark.parametrize("device", ["vek280", "vck190"])
def test_compact_predict_is_the_reference_bit_for_bit(cell, device):
    d, _, _ = _compile(cell, device, types=HLS4ML, n_in=4, n_h=9, steps=6, head=False, scale=3.0)
    node = _rnn_node(d)
    in_t = d.graph.tensors[d.graph.inputs[0]].dtype
    rng = np.random.default_rng(1)
    edges = np.array([in_t.min_code, in_t.max_code, 0, -1, 1])
    xq = np.concatenate([rng.choice(edges, (5, 6, 4)), rng.integers(in_t.min_code, in_t.max_code + 1, (40, 6, 4))])
    got = d.run(xq).reshape(xq.shape[0], 6, 9)
    assert np.array_equal(got, rec.emulate(node, xq))
    assert np.array_equal(got[:12], _exact_reference(node, xq[:12]))  # the exact-rational transcription of hls4ml
    spread, _, _ = _compile(cell, device, types=HLS4ML, n_in=4, n_h=9, steps=6, head=False, scale=3.0,
                            options=RecurrentOptions(distribution="row", aggregation="aie"))
    assert np.array_equal(got, spread.run(xq).reshape(got.shape))  # the mapping does not change fixed-point numbers


def test_fp32_compact_predict_is_the_sequential_order():
    d, net, x = _compile("GRU", "vck190", "fp32", n_in=5, n_h=8, steps=4, head=False)
    node = _rnn_node(d)
    assert node.attrs["fp32_lanes"] == 0
    xs = np.concatenate([x.numpy()[:8], np.zeros((1, 4, 5), np.float32), np.full((1, 4, 5), -7.5, np.float32)])
    got = d.predict(xs)
    want = rec.emulate(node.evolve(attrs={k: v for k, v in node.attrs.items() if k != "fp32_lanes"}), xs)
    assert np.array_equal(got.view(np.uint32), np.asarray(want, np.float32).view(np.uint32))
    np.testing.assert_allclose(got[:8], net(x[:8]).detach().numpy(), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- the cycle model


def test_cycle_model_counts_the_kernel_schedule():
    d, _, _ = _compile("GRU", "vek280", types=HLS4ML)
    m = d.mapping
    dev = get_device("vek280")
    gen = dev.generation
    dims = m.dims
    assert dims.kernels == ("vector_round", "vector_round") and dims.finish_ops == (3, 3)  # bias add + 16-bit wrap
    lane = 256 // 16  # one 256-bit load of int16 weights
    groups = math.ceil(60 / lane)  # 4: one block of lane groups per pass over the columns
    assert groups <= costs.COMPACT_GROUP_BLOCK
    # per column: one broadcast + per group a MAC-rate mul and an int32 add on the one vector slot; the
    # srs on the two move slots, the weight loads and x_k's on the two load units: the vector slot binds
    mac_rate = max(math.ceil(lane / gen.macs_per_cycle[("i16", "i16")]), 1)
    ii = max(1 + groups * (mac_rate + 1), math.ceil(groups / 2), math.ceil((groups + 1) / 2))
    assert ii == 9
    mac = (20 * ii + costs.ROW_LOOP_CYCLES) + (6 * ii + costs.ROW_LOOP_CYCLES)
    finish = 2 * groups * 3 * KERNEL_CONSTANTS.vector_op_cycles
    glanes, ops, modes, lookups, full, last, widened = dims.gate_form
    assert widened == (4096 + 8192) * 2  # int16 sigmoid / tanh entries for every raw index of the 16-bit accumulator
    gates = (math.ceil(20 / glanes) * costs.ROW_LOOP_CYCLES + (math.ceil(20 / glanes) - 1) * full + last
             + 20 * costs.COMPACT_STATE_COPY_CYCLES)
    # the list schedule lies between the vector slot's own work (every vector op, one slot; the gathers'
    # element loops on the one store unit) and issuing everything one after another
    seq = ops + modes + lookups * (glanes + costs.COMPACT_GATHER_FILL_CYCLES + 2)
    assert lookups * glanes < full <= seq and last <= full
    (x_in,), (cell,) = step_stages(m, dev)
    assert cell.parts["mac"] == mac and cell.parts["reduction"] == finish and cell.parts["broadcast"] == 6
    assert cell.parts["aggregation"] == pytest.approx(gates)
    assert cell.occupancy == pytest.approx(sum(cell.parts.values()))
    p = estimate_recurrent(m, dev)
    assert p.step_latency_ns == pytest.approx((6 + mac + finish + gates) / 1.25)
    assert p.interval_ns == pytest.approx(p.step_latency_ns)  # the loop, not x's PLIO, bounds the step
    assert p.sequence_latency_ns == pytest.approx(estimate_closed(m, dev).sequence_latency_ns)  # simulated = closed form
    assert sum(p.breakdown_ns.values()) == pytest.approx(p.step_latency_ns)
    assert p.breakdown_ns["return"] == p.breakdown_ns["routing"] == 0.0  # no PL round trip, no packets
    # the head (20 -> 64 ReLU -> 1) on int32 lanes: 20 -> 64 in lane form (per output group one MAC per input,
    # the 4 groups of 16 lanes one block in one loop, each group's finish), 64 -> 1 in dot form (per output one
    # element-wise MAC per lane group of inputs, the loop, the finish with the exact lane sum)
    hl, f0, f1, dot0, dot1 = dims.head_form
    assert (dot0, dot1) == (0, 1)
    # the dot form's finish, by hand: the bias upshift 1; saturation off 1, the low word 1, floor 1, hi 1; lo =
    # low - (hi << 16) 2; two reduce_adds over 16 lanes (4 levels of shuffle + add) and their broadcasts 2 x 9;
    # the rebuilt sum (upshift + add) 2; the output's rounding and saturation 2, its srs 1 and clamp 2
    assert f1 == 1 + 1 + 1 + 1 + 1 + 2 + 2 * (2 * 4 + 1) + 2 + 2 + 1 + 2
    assert hl == 16
    head = (4 * (20 + f0) + costs.ROW_LOOP_CYCLES + 1 * (4 + costs.ROW_LOOP_CYCLES + f1)
            + 1)  # + the output copied out
    assert p.head_breakdown_ns["head"] == pytest.approx(head / 1.25)
    assert p.head_ns < estimate_recurrent(plan_recurrent(dims, dev, RecurrentOptions(aggregation="aie")), dev).head_ns / 10


_VECTOR_OP = re.compile(r"aie::(add|sub|mul|mac|upshift|select)\(|aie::load_(unaligned)_v<|to_vector<int32>|rnnv::(wrap|clamp|va)<")


def test_gate_op_count_is_the_emitted_code():
    # the model's vector ops per lane group are counted by the generator; count them in the C++ it emitted
    # a 20-bit accumulator: widened tables too large for a tile, the clamped index; hls4ml's 16-bit one on
    # VEK280: widened tables, no clamp
    cases = [(c, dev, {**HLS4ML, "accum": "fixed<20,8,RND,SAT>"}) for c in ("GRU", "LSTM") for dev in ("vek280", "vck190")]
    for cell, device, types in cases + [("GRU", "vek280", HLS4ML), ("LSTM", "vek280", HLS4ML)]:
        d, _, _ = _compile(cell, device, types=types, n_h=12, steps=3, head=False)
        text = d.files["src/rnn_vgates.h"]
        body = text[text.index("static void step"):]
        lanes, ops, modes, lookups, full, last, widened = d.mapping.dims.gate_form
        assert (widened > 0) == (types is HLS4ML) == ("rnnv::gather<L>(VT" in body), (cell, device)
        assert ("cell::ACT_" in body) == (widened == 0)  # the clamped index reads rnn_cell.h's tables
        counted = 0
        for line in body.splitlines():
            for mt in _VECTOR_OP.finditer(line):
                kind = mt.group(1) or mt.group(2) or mt.group(3) or "srs"
                counted += {"wrap": 2, "clamp": 2, "select": 2}.get(kind, 1)
        assert counted == ops, (cell, device)
        assert body.count("aie::set_rounding") + body.count("aie::set_saturation") == modes
        assert body.count("rnnv::gather") == lookups == (3 if cell == "GRU" else 5)
        assert lanes == get_device(device).generation.macs_per_cycle[("i32", "i32")]
        # the schedule: no shorter than the one vector slot's work (every counted op but the shift-round-
        # saturates and upshifts to accumulators, which take the move slots) nor the gathers' element loops
        # on the one store unit; no longer than issuing every op, mode write and gather one after another
        srs = body.count("to_vector<int32>") + body.count("rnnv::va<")
        assert max(counted - srs, lookups * lanes) <= full <= counted + modes + lookups * (lanes + 4), (cell, device)


def test_list_schedule_follows_the_vliw_slots():
    v, mv, ld, st = ({"vector": 1}, {"move": 1}, {"load": 1}, {"store": 1})
    sched = costs.list_schedule
    assert costs.VLIW_SLOTS == {"scalar": 1, "move": 2, "load": 2, "store": 1, "vector": 1}  # WP552's 7-way word
    assert sched([((), ((v, 1),)), ((), ((v, 1),))]) == 2  # one vector slot
    assert sched([((), ((mv, 1),)), ((), ((mv, 1),)), ((), ((v, 1),)), ((), ((ld, 1),)), ((), ((ld, 1),))]) == 1
    assert sched([((), ((mv, 1),)), ((), ((mv, 1),)), ((), ((mv, 1),))]) == 2  # two move slots
    assert sched([((), ((v, 1),)), ((0,), ((mv, 1),)), ((1,), ((v, 1),))]) == 3  # a dependent chain issues back to back
    assert sched([((), ((v, 2),)), ((), ((v, 1),))]) == 3
    # a gather of 5 lanes: index store, 5 element cycles (2 loads + 1 store each), the fill, the vector reload
    g = costs.gather_segments(5)
    assert sched([((), g)]) == 1 + 5 + costs.COMPACT_GATHER_FILL_CYCLES + 1
    # a store-slot op beside it waits for the store unit, a vector op does not
    assert sched([((), g), ((), ((v, 1),))]) == sched([((), g)])
    assert sched([((), g), ((), ((st, 1),))]) == sched([((), g)])  # it fits into the fill
    assert sched([((), g), ((), ((st, 4),))]) == 1 + 5 + 4  # its stores after the gather's six


# ----------------------------------------------------------------------------- search, config, refusals


def test_search_weighs_compact_against_the_spread_mappings():
    d, _, _ = _compile("GRU", "vek280", types=HLS4ML)
    dims = d.mapping.dims
    pool = costed_points(dims, "vek280")
    compact = [p for p in pool if p.mapping.compact]
    assert len(compact) == 1 and compact[0].tiles == 1
    assert {p.mapping.recurrent.distribution for p in pool} == {"row", "column", "compact", "grid"}  # grid: issue 22
    fastest = choose_mapping(dims, "vek280", "latency").chosen
    assert fastest.latency_ns == min(p.latency_ns for p in pool)
    assert choose_mapping(dims, "vek280", "resources").chosen.mapping.compact  # the fewest tiles
    # a budget the compact tile meets: the fewest tiles meeting it is the compact tile
    assert choose_mapping(dims, "vek280", f"latency_ns <= {compact[0].latency_ns * 1.01}").chosen.mapping.compact


def test_explore_lists_compact_and_the_config_key_forces_it():
    torch.manual_seed(0)
    net = _Net("LSTM", 6, 20).eval()
    x = torch.randn(32, 20, 6)
    ex = explore_recurrent(net, "vck190", x[:4], {"precision": "int16", "target": "latency"}, x)
    assert any(p.mapping.compact for p in ex.front) and "compact: the whole cell on one tile" in ex.report()
    cfg = {"precision": "int16", "layers": {"rnn": {"mapping": {"distribution": "compact"}}}}
    d = aieflow.compile(net, device="vck190", example_input=x[:4], calibration=x, config=cfg)
    assert d.mapping.compact and d.to_json()["mapping"]["aggregation"] == "compact"
    assert "compact" in d.summary()


@pytest.mark.parametrize("mapping, where", [
    ({"distribution": "compact", "row_reuse": 2}, "mapping.row_reuse"),
    ({"distribution": "compact", "aggregation": "hybrid"}, "mapping.aggregation"),
    ({"distribution": "row", "input_distribution": "compact"}, "mapping.input_distribution"),
])
def test_config_keys_a_compact_tile_cannot_honour_are_refused_by_name(mapping, where):
    torch.manual_seed(0)
    net = _Net("GRU", 6, 8, head=False).eval()
    x = torch.randn(8, 3, 6)
    with pytest.raises(ConfigError, match=re.escape(f"layers.rnn.{where}")):
        compile_recurrent(net, "vek280", x[:4], {"precision": "int16", "layers": {"rnn": {"mapping": mapping}}}, x)


def test_compact_that_does_not_fit_one_tile_is_refused_by_name():
    # flavour tagging (6 -> 120): U alone is 120 x 360 int16 weights = 86 KB > 64 KB of one AIE-ML tile
    dims = RecurrentDims("gru", 6, 120, 15, pair=("i16", "i16"))
    with pytest.raises(PlanError, match=r"distribution compact does not map .* one tile's memory"):
        plan_recurrent(dims, "vek280", COMPACT)
    assert not any(p.mapping.compact for p in costed_points(dims, "vek280"))  # the search leaves it out
    with pytest.raises(PlanError, match="cannot honour: aggregation aie"):
        plan_recurrent(RecurrentDims("gru", 6, 20, 20), "vck190", RecurrentOptions(distribution="compact", aggregation="aie"))


def test_saved_compact_design_reloads(tmp_path):
    import json

    jsonschema = pytest.importorskip("jsonschema")
    from aieflow.design_schema import schema
    from aieflow.graph_io import json_default

    d, _, x = _compile("GRU", "vek280", types=HLS4ML, n_in=6, n_h=8, steps=5)
    jsonschema.validate(json.loads(json.dumps(d.to_json(), default=json_default)), schema())
    d.save(tmp_path / "d")
    back = aieflow.load(tmp_path / "d")
    assert back.mapping == d.mapping and back.files == d.files
    assert np.array_equal(back.predict(x[:6].numpy()), d.predict(x[:6].numpy()))
    assert back.estimate().sequence_latency_ns == pytest.approx(d.estimate().sequence_latency_ns)
    with pytest.raises(AieflowError):
        aieflow.load(tmp_path / "missing")
