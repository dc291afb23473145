"""bf16 attention on VEK280 (issue 24 item 4, issue 19): the dynamic MatMul (Q K^T, A V) in bf16 and
a single-head transformer block compiled in bf16.

The MatMul's numerics (ops/matmul.py, docs/attention.md "bf16"): per output, a float32 sum from
+0.0 adds each product a_ik b_kj in increasing k with one float32 rounding per addition (a bf16
product is exact in float32 in the normal range), then one rounding to bf16, nearest, ties to even.
The reference here is written from that description with Python's struct and integer bf16
rounding, importing nothing from aieflow; a crafted row shows the order deciding the result.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest
import torch
from float_reference import bf16, f32
from test_attention import FEATURES, LinearContext, SingleHead, _data, _model
from test_attention_tagger import _benchmark

import aieflow
from aieflow.dag.design import DagDesign
from aieflow.ir import Node, frozen_map
from aieflow.numerics.types import FloatType
from aieflow.ops.matmul import MatMulTypes, emulate

TOLERANCE = 2.0**-6  # bf16 designs: max |y - torch| <= 2^-6 max |torch| (docs/numerics.md)




def ref_matmul(a: np.ndarray, b: np.ndarray, trans_b: bool) -> np.ndarray:
    """a [S, M, K] by b [S, K, N] (or [S, N, K] with trans_b), the kernel's order."""
    s_, m_, k_ = a.shape
    n_ = b.shape[1] if trans_b else b.shape[2]
    y = np.zeros((s_, m_, n_), dtype=np.float32)
    for s in range(s_):
        for i in range(m_):
            for j in range(n_):
                acc = 0.0
                for k in range(k_):
                    acc = f32(acc + f32(float(a[s, i, k]) * float(b[s, j, k] if trans_b else b[s, k, j])))
                y[s, i, j] = bf16(acc)
    return y


def _node(trans_b: bool) -> Node:
    t = FloatType("bf16")
    return Node("mm", "matmul", ("a", "b"), ("y",), attrs=frozen_map({"transpose_b": trans_b}),
                types=MatMulTypes(t, t, t, 0))


def _bf16_array(rng, shape, scale=1.0):
    return np.vectorize(bf16, otypes=[np.float32])(rng.standard_normal(shape) * scale)


@pytest.mark.parametrize("trans_b", [False, True])
def test_bf16_matmul_emulation_equals_the_independent_reference(trans_b):
    rng = np.random.default_rng(7)
    for scale in (1e-3, 1.0, 1e20):
        a = _bf16_array(rng, (2, 5, 24), scale)
        b = _bf16_array(rng, (2, 7, 24) if trans_b else (2, 24, 7))
        a[0, 0, :] = -0.0
        a[0, 1, 0] = bf16(3e38)  # products and sums past float32's range
        a[1, 2, :] = 2.0**-130  # subnormal operands: products underflow
        want, got = ref_matmul(a, b, trans_b), emulate(_node(trans_b), a, b)
        same = (want.view(np.uint32) == got.view(np.uint32)) | (np.isnan(want) & np.isnan(got))
        assert same.all(), (scale, np.argwhere(~same)[:3])


def test_the_summation_order_decides_a_crafted_row():
    """2^24 + 1 - 2^24: the kernel's order rounds 2^24 + 1 to 2^24 (a tie, to even), so the row gives
    0; the exact sum (and a float64 matmul) gives 1.  The emulator must give the kernel's 0."""
    a = np.array([[[2.0**24, 1.0, -(2.0**24)]]], dtype=np.float32)
    b = np.ones((1, 3, 1), dtype=np.float32)
    assert emulate(_node(False), a, b)[0, 0, 0] == 0.0 == ref_matmul(a, b, False)[0, 0, 0]
    assert (a.astype(np.float64) @ b.astype(np.float64))[0, 0, 0] == 1.0


def test_bf16_single_head_on_vek280_is_close_to_pytorch_and_verifies_bit_exact():
    m, x = _model(SingleHead), _data()
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "bf16", "batch": 2})
    assert isinstance(d, DagDesign)
    mms = [n for n in d.plan.compute if d.plan.node(n).op == "matmul"]
    assert len(mms) == 2 and all(d.plan.node(n).types.output.name == "bf16" for n in mms)
    assert any(d.plan.node(n).op == "softmax" for n in d.plan.compute)
    layers = d.files["src/layers.h"]
    assert "using TO = bfloat16;" in layers and "aieflow::MatMul<aieflow_design::" in d.files["src/graph.h"]
    ref = m(torch.from_numpy(x[:16])).detach().numpy()
    err = np.abs(d.predict(x[:16]) - ref).max()
    assert err <= TOLERANCE * np.abs(ref).max(), err
    v = d.verify(samples=6)  # edge-value rows first, then random samples
    assert v.ok, v.verdict()
    assert v.values == 6 * 16 * 32
    # a kernel leaving out each output's first product: caught by the bit-exact comparison (reversing
    # the k order is not: on these rows the final bf16 rounding hides it; the order is pinned by the
    # emulator tests above)
    src = d.files["src/kernels/dag_kernels.h"]
    bad_src = src.replace("for (unsigned k = 0; k < C::K; ++k)\n                        acc = aie::mac(",
                          "for (unsigned k = 1; k < C::K; ++k)\n                        acc = aie::mac(")
    assert bad_src != src
    bad = dataclasses.replace(d, files={**d.files, "src/kernels/dag_kernels.h": bad_src})
    assert not bad.verify(samples=6).ok


def ref_cascade_matmul(a: np.ndarray, b: np.ndarray, tiles: int, round_partial: bool = False) -> np.ndarray:
    """a [M, K] by b [K, N] over a cascade of ``tiles`` tiles along K (docs/attention.md "Long products"):
    tile 0 starts each output's float32 sum at +0.0, each tile adds the exact products of its K-slice in
    increasing k with one float32 rounding per addition, continuing the sum the cascade brings (a float32
    passed on unrounded), and the last tile rounds once to bf16.  ``round_partial``: the last tile rounds
    the incoming sum to bf16 before adding (the mutation the x86 run must catch)."""
    m_, k_ = a.shape
    n_ = b.shape[1]
    kc = k_ // tiles
    y = np.zeros((m_, n_), dtype=np.float32)
    for i in range(m_):
        for j in range(n_):
            cascade = 0.0  # what tile 0 starts from
            for t in range(tiles):
                acc = bf16(cascade) if round_partial and t == tiles - 1 else cascade
                for k in range(t * kc, (t + 1) * kc):
                    acc = f32(acc + f32(float(a[i, k]) * float(b[k, j])))
                cascade = acc  # on to the next tile, unrounded
            y[i, j] = bf16(cascade)
    return y


def test_a_long_bf16_reduction_splits_over_a_cascade_and_verifies_bit_exact():
    """``k^T v`` over 512 tokens on VEK280 in bf16 (the shape of test_attention's int8 cascade test): K = 512
    does not fit one tile, so the plan splits it over a cascade of 2 tiles, the float32 partial sums crossing
    the cascade as accfloat lanes (16 per 512-bit cascade word) and the last tile rounding once to bf16.
    The product's values equal an independent reference of that order on a random and a large-valued sample
    (a reference rounding the partial to bf16 at the cascade differs on them); the model is within the bf16
    tolerance of PyTorch; one x86 build runs the two samples bit for bit.  Mutation (run by hand, a second
    build: docs/attention.md): the last tile rounding the incoming partial sums to bf16 fails the x86 run."""
    torch.manual_seed(13)
    m = LinearContext().eval()
    x = np.random.default_rng(13).standard_normal((8, 512, FEATURES)).astype(np.float32)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "bf16", "batch": 1})
    assert isinstance(d, DagDesign)
    with torch.no_grad():
        ref = m(torch.from_numpy(x[:4])).numpy()
    assert np.abs(d.predict(x[:4]) - ref).max() <= TOLERANCE * np.abs(ref).max()
    name = next(n for n in d.plan.compute if d.plan.operands.get(n, ())[:1] and d.plan.operands[n][0].transposed)
    node, rp = d.plan.node(name), d.plan.rows[name]
    assert node.types.output.name == "bf16" and rp.cascade == 2 and rp.memory <= 65536
    src = d.files[f"src/kernels/{name}.cc"]
    assert "MatMulFirst" in src and "MatMulLast" in src
    assert "CASC = 2, CASC_LANES = 16;" in d.files["src/layers.h"]  # 16 x 32-bit accfloat lanes per 512-bit word
    xs = np.concatenate([x[:1], x[1:2] * 64.0])
    tr = d.trace(d.quantise_input(xs))
    k, v, y = (np.asarray(tr[t], dtype=np.float32) for t in ("k", "v", node.outputs[0]))
    for s in range(len(xs)):
        want = ref_cascade_matmul(k[s].T, v[s], 2)
        assert np.array_equal(want.view(np.uint32), y[s].view(np.uint32)), s
        assert not np.array_equal(ref_cascade_matmul(k[s].T, v[s], 2, round_partial=True), y[s]), s
    r = d.verify(xs)
    assert r.ok, r.verdict()


# ----------------------------------------------------------------------------- the jet tagger (issue 19)


def _benchmark_tagger():
    """The jet tagger of benchmarks/attention.py (one definition: the benchmark's) and its data."""
    bench = _benchmark()
    return bench.model(), bench.data(512)


BF16_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7F0000))[0]


def ref_token_mean(rows: np.ndarray) -> np.ndarray:
    """The bf16 token mean (a Dense T -> 1 of weights 2^-k, no bias): per row a float32 sum from +0.0
    of x_t 2^-k in increasing t (the product exact), one rounding per addition, then bf16."""
    t = rows.shape[-1]
    out = np.zeros(rows.shape[:-1], dtype=np.float32)
    for idx in np.ndindex(rows.shape[:-1]):
        acc = 0.0
        for v in rows[idx]:
            acc = f32(acc + float(v) / t)
        out[idx] = bf16(acc)
    return out


@pytest.fixture(scope="module")
def tagger_bf16():
    m, x = _benchmark_tagger()
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x, config={"precision": "bf16"})
    return m, x, d


def test_bf16_token_mean_equals_the_independent_reference(tagger_bf16):
    """The tagger's pooling Dense (weights 1/16) in bf16: random rows, and crafted rows where the
    float32 order shows (2^24 + 1 rounds away before the -2^24 comes) and values near bf16's limits."""
    from aieflow.ops.dense import emulate as dense_emulate

    _, _, d = tagger_bf16
    pool = next(n for n in d.graph.nodes if n.op == "dense" and n.params["weight_q"].shape[0] == 16
                and np.all(np.asarray(n.params["weight_q"], dtype=np.float64) == 1 / 16))
    assert pool.types.output.name == "bf16" and pool.params.get("bias_q") is None
    rng = np.random.default_rng(11)
    rows = np.concatenate([_bf16_array(rng, (40, 16)), _bf16_array(rng, (8, 16), 1e30),
                           _bf16_array(rng, (8, 16), 1e-36)])
    rows[0] = [2.0**28, 16.0, -(2.0**28)] + [0.0] * 13  # 2^24 + 1 - 2^24 after the weights: 0, not 1
    rows[1] = BF16_MAX  # the largest bf16 everywhere: the sum stays finite (no spurious overflow)
    rows[2] = -0.0  # all -0.0: +0.0 from the +0.0 start
    rows[3, 5] = np.inf
    want, got = ref_token_mean(rows), dense_emulate(pool, rows)[..., 0]
    assert want[0] == 0.0 and want[1] == BF16_MAX and want[2] == 0.0 and not np.signbit(want[2])
    assert want[3] == np.inf
    assert np.array_equal(want.view(np.uint32), np.asarray(got, dtype=np.float32).view(np.uint32))


def test_bf16_jet_tagger_on_vek280_predicts_verifies_and_reports(tagger_bf16):
    """The whole benchmark tagger (2 encoder blocks, 2 heads, GELU MLP, mean pooling, softmax head)
    in bf16 on VEK280: every computing layer bf16, within the documented bf16 tolerance of float32
    PyTorch (docs/numerics.md: max |y - torch| <= 2^-6 max |torch|), bit-exact on x86 (one build,
    4 samples: the verify's edge rows first), latency and throughput in the summary."""
    m, x, d = tagger_bf16
    assert isinstance(d, DagDesign)
    ops = [d.plan.node(n).op for n in d.plan.compute]
    assert all(d.plan.node(n).types.output.name == "bf16" for n in d.plan.compute)
    assert {"matmul", "softmax", "layernorm", "activation", "add", "dense"} <= set(ops)
    assert ops.count("matmul") == 8 and ops.count("softmax") == 5  # 2 blocks x 2 heads x 2, + the head
    assert any(d.plan.node(n).attrs.get("function") == "gelu" for n in d.plan.compute)
    with torch.no_grad():
        ref = m(torch.from_numpy(x[:64])).numpy()
    y = d.predict(x[:64])
    assert y.shape == ref.shape == (64, 1, 5)
    assert np.abs(y - ref).max() <= TOLERANCE * np.abs(ref).max(), np.abs(y - ref).max()
    e = d.estimate()
    assert e.latency_ns > e.interval_ns > 0 and e.batch == 8
    s = d.summary()
    assert f"latency {e.latency_ns / 1e3:,.2f} us" in s and f"interval {e.interval_ns / 1e3:,.2f} us" in s
    assert "samples/s" in s
    v = d.verify(samples=4)
    assert v.ok, v.verdict()
    assert v.values == 4 * 5
