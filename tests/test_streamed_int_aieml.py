"""Integer Dense layers with streamed weights on AIE-ML (VEK280) and AIE-MLv2 (VEK385), issue 24.

An int8 / int16 / a16w8 layer with ``weights: streamed`` runs on the memory-tile GEMM of
``gemm/aieml.py`` (the generation's integer ``aie::mmul`` shape and accumulator from the catalog:
UG1529 "Matrix Multiplication", AIE-ML 8b x 8b 4x8x8 and 16b x 16b 4x4x4, AIE-MLv2 8x8x8 and 4x4x8),
which leaves the exact sums in C (int32, or int64 when k x max|a*b| exceeds int32), and the PL
epilogue that applies the resident kernel's bias, accumulator wrap, SRS and ReLU.  So the layer's
values must not depend on where its weights live: the streamed design's ``predict`` equals the
resident design's for the same layer on the same board, and both equal an exact-integer reference
written here (Python ints: matmul, bias << bias_shift, wrap to acc_bits, round half to even by the
remainder, saturate, ReLU; no aieflow import).  The generated C++ (GEMM on the shim, PL mover /
write-back, epilogue) is compared bit for bit on x86 on rows at the type limits (VEK280 int8, VEK385
int8 on the v2 8 x 8 x 8 mmul; VEK385 int16 through the segmented chain);
a mutated epilogue (no ReLU) is caught; a segmented chain (resident + streamed) verifies per segment.
"""

from __future__ import annotations

import dataclasses
import shutil

import jsonschema
import numpy as np
import pytest
import torch
from hw_tools import make, needs_ap_types, no_venv_env

import aieflow
from aieflow.design_schema import schema
from aieflow.devices import get_device
from aieflow.errors import PlanError
from aieflow.gemm.dense import plan_streamed
from aieflow.gemm.dense_design import StreamedDenseDesign
from aieflow.gemm.dense_design import load as load_streamed
from aieflow.gemm.segmented import SegmentedDesign

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

IN, OUT = 72, 40
# UG1529 "Matrix Multiplication" table, typed by hand (the catalog's sources): the integer mmul the
# memory-tile GEMM tiles Cr with, and the accumulator lane width (acc32 for 8 x 8 bits, acc64 for 16-bit)
MMUL = {("vek280", "int8"): ((4, 8, 8), 32), ("vek280", "int16"): ((4, 4, 4), 64),
        ("vek385", "int8"): ((8, 8, 8), 32), ("vek385", "int16"): ((4, 4, 8), 64)}


def _linear(k: int = IN, n: int = OUT, seed: int = 0, relu: bool = True, bias: bool = True) -> torch.nn.Module:
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = [torch.nn.Linear(k, n, bias=bias)]
    if relu:
        layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


def _compile(device: str, precision: str, weights: str = "streamed", orientation: str | None = None,
             relu: bool = True, bias: bool = True):
    model = _linear(relu=relu, bias=bias)
    x = torch.randn(16, IN) * 2
    cfg = {"precision": precision, "layers": {"0": {"weights": weights}}}
    d = aieflow.compile(model, device=device, example_input=x, config=cfg)
    if orientation and d.plan.orientation != orientation:
        plan = plan_streamed(d.graph, d.device, d.config, d.node, d.plan.reason, orientation=orientation)
        d = StreamedDenseDesign(d.graph, d.device, d.config, plan, d.source)
    return d


def _reference(node, xq: np.ndarray) -> np.ndarray:
    """Exact integers: x W + bias << bias_shift, wrapped to the accumulator's acc_bits, SRS by
    ``shift`` with round half to even (by the remainder), saturation to the output type, ReLU."""
    t = node.types
    assert t.output.rounding.value == "conv_even" and t.output.saturation.value == "saturate"
    acc = np.asarray(xq).reshape(xq.shape[0], -1).astype(object).dot(np.asarray(node.params["weight_q"]).astype(object))
    if node.params.get("bias_q") is not None:
        acc = acc + np.asarray(node.params["bias_q"]).astype(object) * (1 << t.bias_shift)
    out = np.empty(acc.shape, dtype=np.int64)
    m = 1 << t.acc_bits
    for idx, a in np.ndenumerate(acc):
        a = ((int(a) + m // 2) % m) - m // 2
        if t.shift:
            half = 1 << (t.shift - 1)
            q, r = a >> t.shift, a & ((1 << t.shift) - 1)
            q += 1 if (r > half or (r == half and q & 1)) else 0
        else:
            q = a
        q = min(max(q, t.output.min_code), t.output.max_code)
        out[idx] = max(q, 0) if node.attrs.get("activation") == "relu" else q
    return out


def _codes(node, samples: int, seed: int) -> np.ndarray:
    """Input codes: all minimum, all maximum, zeros, alternating extremes (both phases), then
    uniform random codes over the input type's range."""
    t = node.types.input
    lo, hi = t.min_code, t.max_code
    alt = np.where(np.arange(IN) % 2 == 0, lo, hi)
    head = [np.full(IN, lo), np.full(IN, hi), np.zeros(IN, np.int64), alt, alt[::-1].copy()]
    rng = np.random.default_rng(seed)
    body = rng.integers(lo, hi + 1, size=(samples - len(head), IN))
    return np.concatenate([np.array(head, dtype=np.int64), body]).astype(np.int64)


def _tie_rows(node, count: int = 4) -> np.ndarray:
    """One-hot rows c * e_j whose sum for some output lands exactly half-way between two codes with
    the lower one even and inside the output range: round half to even keeps it, rounding every
    tie up would not (so a wrong tie rule in the epilogue shows)."""
    t = node.types
    assert t.shift > 0
    w = np.asarray(node.params["weight_q"]).astype(np.int64)
    bias = np.asarray(node.params["bias_q"]).astype(np.int64) << t.bias_shift if node.params.get("bias_q") is not None \
        else np.zeros(w.shape[1], np.int64)
    lo, hi = t.input.min_code, t.input.max_code
    half = 1 << (t.shift - 1)
    rows = []
    for c in np.unique(np.linspace(lo, hi, 513).astype(np.int64)):
        acc = c * w + bias  # (in, out): row j is the sum for c * e_j (one product: no 64-bit wrap)
        if t.acc_bits < 63:
            m = 1 << t.acc_bits
            acc = (acc + m // 2) % m - m // 2
        q = acc >> t.shift
        hit = ((acc & ((1 << t.shift) - 1)) == half) & (q % 2 == 0) & (q >= 0) & (q < t.output.max_code)
        for j in np.unique(np.nonzero(hit)[0])[:count - len(rows)]:
            row = np.zeros(w.shape[0], np.int64)
            row[j] = c
            rows.append(row)
        if len(rows) >= count:
            break
    assert rows, "no tie found"
    return np.array(rows)


# ------------------------------------------------------------------ plan


@pytest.mark.parametrize("device, precision", [("vek280", "int8"), ("vek280", "int16"), ("vek280", "a16w8"),
                                               ("vek385", "int8"), ("vek385", "int16")])
def test_integer_layer_streams_on_the_memtile_gemm_with_the_generations_mmul(device, precision):
    d = _compile(device, precision)
    assert isinstance(d, StreamedDenseDesign)
    g = d.plan.gemm
    assert g.memtile and g.memtiles is not None
    mmul, acc = MMUL[(device, "int8" if precision == "int8" else "int16")]
    assert g.dtype.mmul == mmul and g.dtype.acc_bits == acc
    # exact sums in C: int32 while k x max|a*b| fits, else int64 (int16: 72 x 2^30 > 2^31 - 1)
    assert g.output.name == ("int32" if precision == "int8" else "int64")
    assert not d.plan.epilogue.is_float and d.plan.epilogue.acc_bits == d.node.types.acc_bits
    assert "STREAMED weights" in d.summary()


def test_a_layer_too_large_for_the_array_streams_on_vek280_by_itself():
    # 4096 x 4096 int8 = 16 MiB against 304 x 64 KB of tile memory: the resident planner fails, `auto` streams
    d = aieflow.compile(_linear(4096, 4096), device="vek280", example_input=torch.randn(8, 4096))
    assert isinstance(d, StreamedDenseDesign) and d.plan.gemm.memtile
    assert "do not fit on chip" in d.plan.reason
    assert d.plan.gemm.dtype.mmul == (4, 8, 8)


def test_fp32_on_aie_ml_is_refused_by_name():
    q = aieflow.emulate(_linear(32, 16), "vck190", torch.randn(8, 32), config={"precision": "fp32"})
    with pytest.raises(PlanError, match="vek280.*no native fp32") as e:
        plan_streamed(q.graph, get_device("vek280"), q.config, q.graph.node("0"), "test")
    assert e.value.layer == "0" and "vck190" in e.value.hint


# ------------------------------------------------------------------ numerics: where the weights live does not matter


@pytest.mark.parametrize("device, precision, orientation, relu, bias", [
    ("vek280", "int8", "xw", True, True),
    ("vek280", "int8", "wx", False, True),
    ("vek280", "int16", "wx", True, False),
    ("vek280", "a16w8", "xw", True, True),
    ("vek385", "int8", "wx", True, True),
    ("vek385", "int16", "xw", False, True),
])
def test_predict_equals_the_resident_layer_and_an_independent_reference(device, precision, orientation, relu, bias):
    s = _compile(device, precision, "streamed", orientation, relu, bias)
    r = _compile(device, precision, "resident", None, relu, bias)
    assert isinstance(s, StreamedDenseDesign) and not isinstance(r, StreamedDenseDesign)
    assert s.plan.orientation == orientation
    rn = r.graph.node("0")  # the same quantised layer
    for f in ("acc_bits", "shift", "bias_shift"):
        assert getattr(s.node.types, f) == getattr(rn.types, f)
    assert str(s.node.types.output) == str(rn.types.output)
    assert np.array_equal(s.node.params["weight_q"], rn.params["weight_q"])
    xq = np.concatenate([_codes(s.node, 40, seed=7), _tie_rows(s.node)])
    want = _reference(s.node, xq)
    got = np.asarray(s.run(xq)).reshape(want.shape)
    assert np.array_equal(got, want)
    assert np.array_equal(np.asarray(r.run(xq)).reshape(want.shape), want)
    assert len(np.unique(got)) > 4  # not a degenerate layer (all zeros / all saturated)


# ------------------------------------------------------------------ x86: one build per board


def test_x86_bit_exact_on_vek280_int8_and_a_mutated_epilogue_is_caught(tmp_path):
    d = _compile("vek280", "int8", orientation="xw")
    xq = np.concatenate([_codes(d.node, 9, seed=3), _tie_rows(d.node)])  # 13: not a multiple of the micro-tile's rows
    res = d.verify(xq=xq, cache_dir=tmp_path)
    assert res.ok, res.verdict()
    assert res.values == 13 * OUT
    assert np.array_equal(np.asarray(d.run(xq)).reshape(13, OUT), _reference(d.node, xq))
    bad = dict(d.files)
    bad["pl/dense_epilogue.h"] = bad["pl/dense_epilogue.h"].replace("constexpr bool RELU = true",
                                                                    "constexpr bool RELU = false")
    assert bad["pl/dense_epilogue.h"] != d.files["pl/dense_epilogue.h"]
    res = dataclasses.replace(d, files=bad).verify(xq=xq, cache_dir=tmp_path)
    assert not res.ok and res.mismatches > 0


def test_x86_bit_exact_on_vek385_int8(tmp_path):
    """The v2 8-bit GEMM (aie::mmul<8, 8, 8>, acc32: UG1529) with the PL epilogue on x86: rows at
    the type limits, ties and random codes against predict and the reference above."""
    d = _compile("vek385", "int8", orientation="wx")
    assert d.plan.gemm.dtype.mmul == (8, 8, 8) and d.plan.gemm.output.name == "int32"
    xq = np.concatenate([_codes(d.node, 7, seed=5), _tie_rows(d.node)])  # 11 rows
    assert np.array_equal(np.asarray(d.run(xq)).reshape(len(xq), OUT), _reference(d.node, xq))
    res = d.verify(xq=xq, cache_dir=tmp_path)
    assert res.ok and res.mismatches == 0, res.verdict()
    assert res.values == len(xq) * OUT


@needs_ap_types
def test_saved_vek280_project_system_run_is_bit_exact_and_reloads(tmp_path):
    from aieflow.vitis import ap_types_include

    d = _compile("vek280", "int8")
    out = d.save(tmp_path / "d")
    back = load_streamed(out)
    assert back.plan.gemm.blocks == d.plan.gemm.blocks and back.plan.gemm.dtype == d.plan.gemm.dtype
    proj = out / "project"
    xq = np.fromfile(proj / "data/X.bin", dtype=np.int8).astype(np.int64).reshape(-1, IN)
    want = _reference(d.node, xq)
    assert np.array_equal(np.fromfile(proj / "data/Y_golden.bin", dtype=np.int8).reshape(want.shape), want)
    work = tmp_path / "moved"
    shutil.copytree(proj, work)
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=no_venv_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Y bit-exact" in r.stdout.splitlines()
    assert np.array_equal(np.fromfile(work / "system_output/Y.bin", dtype=np.int8).reshape(want.shape), want)


def test_segmented_int16_chain_on_vek385_verifies_per_segment():
    """Resident 32 -> 40, then a streamed 40 -> 24 (int16: C is int64 on the v2 4x4x8 mmul)."""
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(32, 40), torch.nn.ReLU(), torch.nn.Linear(40, 24)).eval()
    x = torch.randn(16, 32) * 2
    d = aieflow.compile(model, device="vek385", example_input=x,
                        config={"precision": "int16", "layers": {"2": {"weights": "streamed"}}})
    assert isinstance(d, SegmentedDesign)
    assert [s.kind for s in d.specs] == ["resident", "streamed"]
    g = d.segments[1].plan.gemm
    assert g.memtile and g.dtype.mmul == (4, 4, 8) and g.output.name == "int64"
    codes = d.quantise_input(x.numpy())
    want = codes.reshape(len(codes), -1).astype(np.int64)
    for node in d.graph.nodes:  # the reference layer by layer, through the cut
        if node.op == "dense":
            want = _reference_chain_layer(node, want)
    assert np.array_equal(np.asarray(d.run(codes)).reshape(want.shape), want)
    assert np.array_equal(np.asarray(d.run_segments(codes)).reshape(want.shape), want)
    r = d.verify(samples=9)
    assert r.ok and all(c.ok and c.emulation_consistent for c in r.segments), r


def _reference_chain_layer(node, v: np.ndarray) -> np.ndarray:
    t = node.types
    assert v.shape[1] == int(node.attrs["in_features"]) and t.input.min_code <= v.min() <= v.max() <= t.input.max_code
    return _reference(node, v)


# ------------------------------------------------------------------ the model


@pytest.mark.parametrize("device, ddr_bytes, plio_bytes, dma_bytes", [
    # DDR: one 128-bit AXI beat per PL cycle (assumed), 16 B x PL clock / AIE clock from the catalog's
    # clocks: 312.5 MHz / 1.25 GHz (VEK280), 500 MHz / 1.0 GHz (VEK385); PLIO 128 bits at the PL clock,
    # capped by the switch / DMA stream (32-bit AIE-ML, 64-bit AIE-MLv2: AM020 / AM027); the memory
    # tile -> tile DMA moves one switch word per cycle (4 B on AIE-ML, 8 B on AIE-MLv2)
    ("vek280", 4.0, 4.0, 4.0),
    ("vek385", 8.0, 8.0, 8.0),
])
def test_the_streamed_cost_is_the_memtile_gemm_plus_the_epilogues_ddr_pass(device, ddr_bytes, plio_bytes, dma_bytes):
    d = _compile(device, "int8", orientation="xw")
    p, e = d.plan, d.estimate()
    g, b, lay = p.gemm, p.gemm.blocks, p.gemm.memtiles
    assert g.n_pc == 1 and g.n_jc == 1 and g.n_ic == 1  # one block: the memory-tile model in closed form
    start = 8  # DDR_ACCESS_CYCLES (the dense model's DMA start)
    elems = p.batch * OUT  # C (int32) read, Y (int8) written, the bias (int32) read
    assert e.epilogue_cycles == pytest.approx(3 * start + (elems * 4 + elems * 1 + OUT * 4) / ddr_bytes)
    assert e.gemm.packing_cycles == 0  # the memory tiles' DMA tilers pack: no packing pass
    a_in = max(b.mc * b.kc / ddr_bytes + start, lay.ac_bytes / plio_bytes)
    b_in = max(g.config.tiles_j * lay.lane_bytes / ddr_bytes + start, lay.bc_bytes / plio_bytes)
    br = lay.lane_bytes / dma_bytes
    assert e.gemm.breakdown["fill (first block's loads)"] == pytest.approx(max(a_in, b_in) + br)
    assert e.cycles == pytest.approx(e.gemm.cycles + e.epilogue_cycles)
    assert e.latency_ns == pytest.approx(e.cycles / d.device.clock_hz * 1e9)
    # design.json: the memory tiles the GEMM stages its blocks in are counted
    j = d.to_json()
    jsonschema.validate(j, schema())
    assert j["performance"]["memory_tiles_used"] == lay.ac_memtiles + lay.bc_memtiles > 0
