"""Attention (issue 19, first slice): the dynamic matmul op family against an independent integer
reference, PyTorch / ONNX import of hand-written attention, F.scaled_dot_product_attention and
nn.MultiheadAttention, the DAG MatMul kernel verified bit for bit on x86 (VEK280, VEK385), a mutated
kernel caught, and refusals by name."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aieflow
from aieflow.dag.design import DagDesign
from aieflow.errors import AieflowError
from aieflow.frontends.onnx_frontend import import_onnx
from aieflow.frontends.torch_frontend import import_torch
from aieflow.ir import Node, frozen_map
from aieflow.numerics.types import FixedType, Rounding, Saturation
from aieflow.ops.matmul import MatMulTypes, emulate, matmul_codes

TOKENS, FEATURES = 16, 32


# ----------------------------------------------------------------------------- models


class SingleHead(nn.Module):
    def __init__(self, d=FEATURES):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.d = d

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        a = torch.softmax(q @ k.transpose(-2, -1) * (1.0 / math.sqrt(self.d)), dim=-1)
        return self.o(a @ v)


class TwoHead(nn.Module):
    """Heads split with view / transpose, batched matmuls, merged with transpose / reshape."""

    def __init__(self, d=FEATURES, h=2):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.d, self.h = d, h

    def forward(self, x):
        t, h, dh = x.shape[1], self.h, self.d // self.h
        q = self.q(x).view(-1, t, h, dh).transpose(1, 2)
        k = self.k(x).view(-1, t, h, dh).transpose(1, 2)
        v = self.v(x).view(-1, t, h, dh).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), dim=-1)
        return self.o((a @ v).transpose(1, 2).reshape(-1, t, self.d))


class Sdpa(nn.Module):
    def __init__(self, d=FEATURES, **kw):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(d, d) for _ in range(3))
        self.kw = kw

    def forward(self, x):
        return F.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x), **self.kw)


class SdpaHeads(nn.Module):
    """F.scaled_dot_product_attention on [B, H, T, d] heads (the dynamo exporter takes 4-D SDPA only)."""

    def __init__(self, d=FEATURES, h=2):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.d, self.h = d, h

    def forward(self, x):
        t, dh = x.shape[1], self.d // self.h
        q, k, v = (f(x).view(-1, t, self.h, dh).transpose(1, 2) for f in (self.q, self.k, self.v))
        return self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(-1, t, self.d))


class Mha(nn.Module):
    def __init__(self, d=FEATURES, h=2, batch_first=True, mask=False):
        super().__init__()
        self.att = nn.MultiheadAttention(d, h, batch_first=batch_first)
        # mask "bias": an additive float mask that is a bias on the scores (not 0 / -inf): refused
        self.mask = torch.full((TOKENS, TOKENS), -0.5) if mask == "bias" else None

    def forward(self, x):
        y, _ = self.att(x, x, x, need_weights=False, attn_mask=self.mask)
        return y


class SharedKt(nn.Module):
    """K^T read by two products, so its transpose (two readers) is not folded into ``transpose_b``: the
    matmul reads a transposed view, as A (``kt @ v``, linear attention's K^T V context) and as B
    (``q @ kt``)."""

    def __init__(self, e=FEATURES, d=FEATURES):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(e, d) for _ in range(3))
        self.o = nn.Linear(d, e)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        kt = k.transpose(-2, -1)
        return self.o(q @ (kt @ v) + (q @ kt) @ v)


def _data(seed=0, n=64):
    return np.random.default_rng(seed).standard_normal((n, TOKENS, FEATURES)).astype(np.float32)


def _model(cls, seed=0, **kw):
    torch.manual_seed(seed)
    return cls(**kw).eval()


def _onnx(model, x, path, dynamo=False):
    torch.onnx.export(model, (torch.from_numpy(x[:4]),), str(path), opset_version=17, input_names=["x"],
                      output_names=["y"], dynamo=dynamo)
    return str(path)


def _mha(seed, **kw):
    """nn.MultiheadAttention with random (not the initial zero) in_proj and out_proj biases, so that the
    packed bias's split into Q / K / V is checked."""
    m = _model(Mha, seed=seed, **kw)
    with torch.no_grad():
        m.att.in_proj_bias.normal_(0, 0.5)
        m.att.out_proj.bias.normal_(0, 0.5)
    return m


# ----------------------------------------------------------------------------- emulation vs an integer reference


def _round_shift(v: int, s: int, mode: Rounding) -> int:
    """v / 2^s rounded, in Python integers (independent of aieflow.numerics)."""
    if s == 0:
        return v
    q, r = divmod(v, 1 << s)  # floor division: v = q 2^s + r, 0 <= r < 2^s
    half = 1 << (s - 1)
    if mode is Rounding.FLOOR:
        return q
    if mode is Rounding.POS_INF:
        return q + (r >= half)
    if mode is Rounding.CONV_EVEN:
        return q + (r > half or (r == half and q % 2 == 1))
    if mode is Rounding.SYM_INF:
        m = _round_shift(abs(v), s, Rounding.POS_INF)
        return m if v >= 0 else -m
    raise AssertionError(mode)


def _saturate(v: int, width: int, mode: Saturation) -> int:
    top = (1 << (width - 1)) - 1
    if mode is Saturation.SATURATE:
        return max(-top - 1, min(top, v))
    if mode is Saturation.SYMMETRIC:
        return max(-top, min(top, v))
    return (v + top + 1) % (1 << width) - top - 1


def _reference(a: np.ndarray, b: np.ndarray, trans_b: bool, shift: int, out: FixedType) -> np.ndarray:
    a2 = a.reshape(-1, *a.shape[-2:])
    b2 = b.reshape(-1, *b.shape[-2:])
    m, k = a2.shape[-2:]
    n = b2.shape[-2] if trans_b else b2.shape[-1]
    y = np.zeros((a2.shape[0], m, n), dtype=np.int64)
    for s in range(a2.shape[0]):
        for i in range(m):
            for j in range(n):
                acc = sum(int(a2[s, i, q]) * int(b2[s, j, q] if trans_b else b2[s, q, j]) for q in range(k))
                y[s, i, j] = _saturate(_round_shift(acc, shift, out.rounding), out.width, out.saturation)
    return y.reshape(*a.shape[:-1], n)


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("rounding", [Rounding.CONV_EVEN, Rounding.FLOOR, Rounding.POS_INF, Rounding.SYM_INF])
def test_matmul_codes_match_an_integer_reference(width, trans_b, rounding):
    rng = np.random.default_rng(width * 7 + trans_b)
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    shape_a, shape_b = (3, 2, 5, 7), ((3, 2, 6, 7) if trans_b else (3, 2, 7, 6))
    for trial in range(4):
        if trial == 0:  # extremes: every product at its largest magnitude, sums that saturate
            a = np.full(shape_a, lo, np.int64)
            b = np.where(rng.random(shape_b) < 0.5, lo, hi).astype(np.int64)
        else:
            a = rng.integers(lo, hi + 1, shape_a)
            b = rng.integers(lo, hi + 1, shape_b)
        for out_width, shift, sat in ((8, 9, Saturation.SATURATE), (16, 4, Saturation.SYMMETRIC),
                                      (16, 0, Saturation.WRAP), (32, 3, Saturation.SATURATE)):
            out = FixedType(out_width, 2, True, rounding, sat)
            t = MatMulTypes(FixedType(width, 3, True), FixedType(width, 1, True), out, shift)
            got = matmul_codes(a, b, t, trans_b)
            assert np.array_equal(got, _reference(a, b, trans_b, shift, out)), (trial, out_width, shift, sat)
            node = Node("mm", "matmul", ("a", "b"), ("y",), attrs=frozen_map({"transpose_b": trans_b}), types=t)
            assert np.array_equal(emulate(node, a, b), got)


# ----------------------------------------------------------------------------- import


@pytest.mark.parametrize("cls", [SingleHead, TwoHead, Sdpa, Mha])
def test_torch_import_matches_pytorch_and_folds_the_scale(cls):
    from aieflow.passes.quantise import float_activations

    m, x = _model(cls), _data(n=4)
    g = import_torch(m, torch.from_numpy(x)).graph
    y = float_activations(g, x)[g.outputs[0]]
    assert np.abs(y - m(torch.from_numpy(x)).detach().numpy()).max() < 1e-5
    ops = [n.op for n in g.nodes]
    assert "scale" not in ops and "transpose" not in ops and "reshape" not in ops
    mms = [n for n in g.nodes if n.op == "matmul"]
    heads = 2 if cls in (TwoHead, Mha) else 1
    assert len(mms) == 2 * heads and sum(bool(n.attrs["transpose_b"]) for n in mms) == heads
    assert all(len(g.tensors[n.outputs[0]].shape) == 2 for n in mms)  # heads split into 2-D products
    if cls is not Mha:  # the 1 / sqrt(d_head) went into the Q projection's weights
        q = next(n for n in g.nodes if n.name == "q")
        dh = FEATURES // heads
        assert np.allclose(q.params["weight"], m.q.weight.detach().numpy().T / math.sqrt(dh), rtol=1e-6)


@pytest.mark.parametrize("cls", [SingleHead, TwoHead])
def test_onnx_export_imports_to_the_same_float_graph(cls, tmp_path):
    from aieflow.passes.quantise import float_activations

    m, x = _model(cls), _data(n=4)
    g = import_onnx(_onnx(m, x, tmp_path / "att.onnx")).graph
    y = float_activations(g, x)[g.outputs[0]]
    assert np.abs(y - m(torch.from_numpy(x)).detach().numpy()).max() < 1e-5
    assert [n.op for n in g.nodes].count("matmul") == 2 * (2 if cls is TwoHead else 1)
    assert "scale" not in [n.op for n in g.nodes]


@pytest.mark.parametrize("model, words", [
    (lambda: _model(Sdpa, dropout_p=0.1), ["scaled_dot_product_attention", "dropout_p=0.1"]),
    (lambda: _model(Mha, batch_first=False), ["att", "batch_first"]),
    (lambda: nn.TransformerEncoderLayer(FEATURES, 2, 64, batch_first=False).eval(), ["TransformerEncoderLayer", "batch_first"]),
])
def test_unmapped_attention_is_refused_by_name(model, words):
    with pytest.raises(AieflowError) as e:
        import_torch(model(), torch.from_numpy(_data(n=2)))
    for w in words:
        assert w in str(e.value)


def test_a_scale_with_no_dense_to_absorb_it_is_refused():
    class Bad(nn.Module):
        def forward(self, x):
            return torch.softmax(x @ x.transpose(-2, -1) * 0.3, dim=-1)

    with pytest.raises(AieflowError, match="0.3"):
        import_torch(Bad().eval(), torch.from_numpy(_data(n=2)))


# ----------------------------------------------------------------------------- mapping and x86 verify

# measured on this branch, well inside: int8 err / max|y| <= 0.05, int16 <= 0.002
TOLERANCE = {"int8": 0.1, "int16": 0.01}


def _compile(model, x, precision, device, batch=2):
    d = aieflow.compile(model, device=device, example_input=x[:1], calibration=x,
                        config={"precision": precision, "batch": batch})
    assert isinstance(d, DagDesign)
    assert not any(link.word_problems() for link in d.plan.links)  # every DMA pattern moves whole words
    return d


def _close_to_pytorch(d, torch_model, x, precision):
    ref = torch_model(torch.from_numpy(x[:16])).detach().numpy()
    err = np.abs(d.predict(x[:16]) - ref).max()
    assert err <= TOLERANCE[precision] * np.abs(ref).max(), err


@pytest.mark.parametrize("precision, device", [("int8", "vek280"), ("int16", "vek385")])
def test_single_head_from_pytorch_verifies_bit_exact(precision, device):
    m, x = _model(SingleHead), _data()
    d = _compile(m, x, precision, device)
    _close_to_pytorch(d, m, x, precision)
    assert sum(d.plan.node(n).op == "matmul" for n in d.plan.compute) == 2
    v = d.verify(samples=6)  # edge-value rows first, then random codes
    assert v.ok, v.verdict()
    assert v.values == 6 * TOKENS * FEATURES


@pytest.mark.parametrize("precision, device", [("int16", "vek280"), ("int8", "vek385")])
def test_single_head_from_onnx_verifies_bit_exact(precision, device, tmp_path):
    m, x = _model(SingleHead, seed=1), _data(1)
    d = _compile(_onnx(m, x, tmp_path / "single.onnx"), x, precision, device)
    _close_to_pytorch(d, m, x, precision)
    v = d.verify(x[:4] * 2.0)  # the user's samples, some codes saturating
    assert v.ok, v.verdict()


def _with_kernel_edit(d, good: str, bad: str):
    """``d`` with ``good`` replaced by ``bad`` in its DAG kernels header (a mutation its verify must catch)."""
    src = d.files["src/kernels/dag_kernels.h"]
    edited = src.replace(good, bad)
    assert edited != src, good
    return dataclasses.replace(d, files={**d.files, "src/kernels/dag_kernels.h": edited})


def test_two_head_from_pytorch_verifies_and_a_mutated_kernel_is_caught():
    m, x = _model(TwoHead, seed=2), _data(2)
    d = _compile(m, x, "int8", "vek280")
    _close_to_pytorch(d, m, x, "int8")
    v = d.verify(samples=6)
    assert v.ok, v.verdict()
    # Q K^T of one head is 16 x 16 by 16 x 16: reading K untransposed is the same size, so only
    # the values can tell; the mutated kernel must fail verification
    assert not _with_kernel_edit(d, "C::TRANS_B ? pb[n * C::K + k] : pb[k * C::N + n]", "pb[k * C::N + n]").verify(
        samples=6).ok


def test_multihead_attention_module_verifies_bit_exact():
    m, x = _model(Mha, seed=3), _data(3)
    d = _compile(m, x, "int16", "vek280")
    _close_to_pytorch(d, m, x, "int16")
    v = d.verify(samples=4)
    assert v.ok, v.verdict()


def test_two_head_onnx_export_compiles_for_vek385_within_tolerance(tmp_path):
    m, x = _model(TwoHead, seed=4), _data(4)
    d = _compile(_onnx(m, x, tmp_path / "two.onnx"), x, "int8", "vek385")
    _close_to_pytorch(d, m, x, "int8")


def test_matmul_stage_costs_the_documented_constants():
    from aieflow.dag import perf

    m, x = _model(SingleHead), _data()
    d = _compile(m, x, "int8", "vek280")
    e = d.estimate()
    for name in d.plan.compute:
        node = d.plan.node(name)
        if node.op != "matmul":
            continue
        rp = d.plan.rows[name]
        k = FEATURES if node.attrs["transpose_b"] else TOKENS  # Q K^T reduces the features, A V the tokens
        n = TOKENS if node.attrs["transpose_b"] else FEATURES
        samples = rp.rows_per_part // TOKENS
        body = samples * (k * n * perf.COPY_CYCLES + TOKENS * math.ceil(n / 16) * (k * perf.MM_MAC_CYCLES
                                                                                  + perf.MM_OUT_CYCLES))
        assert perf.matmul_cycles(d.plan, name) == body
        stage = next(s for s in e.stages if s.name == name)
        assert stage.occupancy_ns > 0
    # the dynamic products count in the throughput: 2 x (Dense + matmul MACs) per interval
    macs = 2 * (4 * TOKENS * FEATURES * FEATURES + 2 * TOKENS * TOKENS * FEATURES)
    assert e.throughput_ops_per_s == pytest.approx(2 * macs / (e.interval_ns * 1e-9), rel=1e-9)


def test_matmul_on_aie1_and_in_a_chain_is_refused_by_name():
    m, x = _model(SingleHead), _data()
    with pytest.raises(AieflowError, match="memory tiles"):
        aieflow.compile(m, device="vck190", example_input=x[:1], calibration=x, config={"precision": "int8"})


def _tokens(t: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((4, t, FEATURES)).astype(np.float32)


def test_a_long_product_splits_one_sample_over_tiles_verifies_and_where_that_ends_is_refused():
    """A matmul part holds whole samples where they fit a tile (one 32-wide head on VEK280 int8:
    up to 128 tokens); past that, a whole fraction of one sample's rows, each part reading the
    sample's whole B (160 tokens: Q K^T's 160 x 160 output rows do not fit one tile), verified bit
    for bit on x86; at 512 tokens even the smallest run over the widest cascade over K does not fit
    (the cascade splits A and B, not the output rows) and the refusal names the layer, the product,
    the byte counts and the cascade (docs/attention.md "Long products")."""
    import re

    def compile_(t):
        torch.manual_seed(0)
        x = _tokens(t)
        return aieflow.compile(SingleHead().eval(), device="vek280", example_input=x[:1], calibration=x,
                               config={"precision": "int8", "batch": 1}), x

    d, _ = compile_(128)
    assert all(d.plan.rows[n].rows_per_part % 128 == 0 for n in d.plan.compute if d.plan.node(n).op == "matmul")
    d, x = compile_(160)
    mm = [d.plan.rows[n] for n in d.plan.compute if d.plan.node(n).op == "matmul"]
    assert len(mm) == 2 and all(rp.rows_per_part < 160 and 160 % rp.rows_per_part == 0 for rp in mm)
    assert all(rp.memory <= 65536 for rp in mm)
    assert not any(link.word_problems() for link in d.plan.links)
    v = d.verify(x[:2])  # the tokens differ (a constant-token row cannot show an attention error)
    assert v.ok, v.verdict()
    assert v.values == 2 * 160 * FEATURES
    with pytest.raises(AieflowError) as e:
        compile_(512)
    msg = str(e.value)
    assert e.value.layer == "matmul" and "512 x 32 by 32 x 512" in msg and "65536" in msg, msg
    whole, run = (int(b) for b in re.findall(r"needs (\d+) bytes.*?rows .*?\) (\d+)", msg)[0])
    # at least the int8 ping-pong output rows and A rows of one sample / of the 128-row run
    assert whole >= 2 * 512 * 512 + 2 * 512 * 32 and run >= 2 * 128 * 512 + 2 * 128 * 32 and run > 65536
    # K = 32 int8 splits into at most 8 slices of one 32-bit word; the 128 output rows alone overflow a tile
    casc = int(re.findall(r"cascade of 8 tiles along K \(K-slices of 4\) a part of 128 row\(s\) still needs (\d+)",
                          msg)[0])
    assert 65536 < 2 * 128 * 512 <= casc, msg


def test_attention_design_saves_loads_and_fits_the_schema(tmp_path):
    import json
    from importlib import resources

    import jsonschema

    m, x = _model(TwoHead, seed=5), _data(5)
    d = _compile(m, x, "int8", "vek280")
    d.save(tmp_path / "att")
    d2 = aieflow.load(tmp_path / "att")
    assert isinstance(d2, DagDesign)
    assert np.array_equal(d2.predict(x[:4]), d.predict(x[:4]))
    assert [d2.plan.node(n).types for n in d2.plan.compute] == [d.plan.node(n).types for n in d.plan.compute]
    schema = json.loads(resources.files("aieflow").joinpath("schema/design.schema.json").read_text())
    jsonschema.validate(d.to_json(), schema)


def test_rows_of_partial_vectors_verify_bit_exact():
    # 12 tokens x 24 features: Q K^T has N = 12, A V has N = 24, neither a whole number of 16 lanes
    # (the kernel's element-store path and zero padding lanes of B)
    torch.manual_seed(7)
    m = SingleHead(24).eval()
    x = np.random.default_rng(7).standard_normal((64, 12, 24)).astype(np.float32)
    d = _compile(m, x, "int16", "vek280")
    assert sorted(d.plan.node(n).attrs["transpose_b"] for n in d.plan.compute if d.plan.node(n).op == "matmul") == [
        False, True]
    ref = m(torch.from_numpy(x[:16])).detach().numpy()
    assert np.abs(d.predict(x[:16]) - ref).max() <= TOLERANCE["int16"] * np.abs(ref).max()
    v = d.verify(samples=4)
    assert v.ok, v.verdict()


# ----------------------------------------------------------------------------- ONNX exports of SDPA and MHA


def test_sdpa_onnx_export_folds_the_shape_computed_scale_and_verifies_bit_exact(tmp_path):
    # torch.onnx.export (TorchScript exporter, opset 17) writes SDPA's scale as
    # Shape -> Slice -> Cast -> Sqrt -> Div -> Cast -> Sqrt, multiplied into both Q and K^T
    import onnx

    from aieflow.passes.quantise import float_activations

    m, x = _model(Sdpa, seed=6), _data(6)
    path = _onnx(m, x, tmp_path / "sdpa.onnx")
    assert "Shape" in {n.op_type for n in onnx.load(path).graph.node}
    g = import_onnx(path).graph
    ref = m(torch.from_numpy(x[:4])).detach().numpy()
    assert np.abs(float_activations(g, x[:4])[g.outputs[0]] - ref).max() < 1e-5
    assert [n.op for n in g.nodes].count("matmul") == 2 and "scale" not in [n.op for n in g.nodes]
    d = _compile(path, x, "int16", "vek280")
    _close_to_pytorch(d, m, x, "int16")
    v = d.verify(samples=4)
    assert v.ok, v.verdict()


@pytest.mark.parametrize("cls, dynamo", [
    (Sdpa, False),  # the dynamo exporter refuses 3-D SDPA ("only 4D query, key, and value are supported")
    (SdpaHeads, False), (SdpaHeads, True), (Mha, False), (Mha, True)])
def test_sdpa_and_multihead_attention_onnx_exports_import_as_pytorch_computes(cls, dynamo, tmp_path):
    from aieflow.passes.quantise import float_activations

    m = _mha(8) if cls is Mha else _model(cls, seed=8)
    x = _data(8, n=4)
    g = import_onnx(_onnx(m, x, tmp_path / "att.onnx", dynamo=dynamo)).graph
    y = float_activations(g, x)[g.outputs[0]]
    assert np.abs(y - m(torch.from_numpy(x)).detach().numpy()).max() < 1e-5
    ops = [n.op for n in g.nodes]
    heads = 1 if cls is Sdpa else 2
    assert ops.count("matmul") == 2 * heads and ops.count("softmax") == heads
    assert "scale" not in ops and "reshape" not in ops and "transpose" not in ops
    # Q, K, V (and the output) projections are separate Dense layers; for nn.MultiheadAttention they are
    # cut from the packed in_proj, per role and head as the torch import cuts them; the exports scale Q
    # and K^T by d_head^(-1/4) each: the whole 1/sqrt(d_head) lands in Q (tests/test_onnx_mha_normalised.py)
    dense = [n for n in g.nodes if n.op == "dense"]
    assert len(dense) == (3 if cls is Sdpa else 4 if cls is SdpaHeads else 3 * heads + 1)
    if cls is Mha:
        w, dh = m.att.in_proj_weight.detach().numpy().T, FEATURES // heads
        factors = []
        for part in range(3 * heads):  # q, k, v columns of the packed weight, per head
            block = w[:, part * dh:(part + 1) * dh]
            found = [n.params["weight"] / block for n in dense if n.params["weight"].shape == block.shape]
            c = [r.flat[0] for r in found if np.allclose(r, r.flat[0], rtol=1e-5)]
            assert len(c) == 1, part
            factors.append(c[0])
        assert factors[:heads] == pytest.approx([1 / math.sqrt(dh)] * heads) and factors[heads:] == [1.0] * 2 * heads


def test_multihead_attention_onnx_export_verifies_bit_exact(tmp_path):
    # TorchScript exporter: tokens as [T, B, E], heads as [T, B H, d], in_proj packed
    m, x = _mha(9), _data(9)
    d = _compile(_onnx(m, x, tmp_path / "mha.onnx"), x, "int16", "vek280")
    _close_to_pytorch(d, m, x, "int16")
    assert sum(d.plan.node(n).op == "matmul" for n in d.plan.compute) == 4
    v = d.verify(samples=4)
    assert v.ok, v.verdict()


@pytest.mark.parametrize("kw, word", [({"mask": "bias"}, "bias on the scores"), ({"batch_first": False}, "batch_first")])
def test_unmapped_multihead_attention_export_is_refused_by_name(kw, word, tmp_path):
    m, x = _model(Mha, **kw), _data(n=4)
    with pytest.raises(AieflowError) as e:
        import_onnx(_onnx(m, x, tmp_path / "bad.onnx"))
    assert "MultiheadAttention" in str(e.value) and word in str(e.value)


def test_heads_writing_one_concat_share_the_memory_tile_channels():
    # at batch 8 each head's A V would take 4 parts (8 samples, at most 6 channels): 2 heads x 4 writers
    # into the heads' concat buffer exceed a memory tile's 6 channels; the plan caps each at 6 // 2
    m, x = _model(TwoHead, seed=10), _data(10)
    d = _compile(m, x, "int8", "vek280", batch=8)
    concat = next(n for n in d.plan.graph.nodes if n.op == "concat")
    parts = [d.plan.rows[n].parts for n in d.plan.compute if d.plan.node(n).outputs[0] in concat.inputs]
    assert len(parts) == 2 and sum(parts) <= d.device.memtile_channels
    assert max(d.plan.rows[n].parts for n in d.plan.compute if d.plan.node(n).op == "softmax") == 4


# ----------------------------------------------------------------------------- transposed operand views


def _transposed_products(d):
    """{matmul: (operand index, source tensor)} of the products that read a transposed view."""
    return {n: (k, o.tensor) for n in d.plan.compute if d.plan.node(n).op == "matmul"
            for k, o in enumerate(d.plan.operands[n]) if o.transposed}


def test_transposed_operands_are_read_by_the_kernel_and_verify_bit_exact():
    """``kt @ v`` and ``q @ kt`` with ``kt = k.transpose(-2, -1)`` read by both (not folded): the memory
    tile moves ``k`` as its projection wrote it (whole 32-bit words, no element-wise transposing DMA
    pattern) and the kernel reads it transposed (TRANS_A / TRANS_B); the products' codes equal a Python
    integer reference on ``k``'s codes transposed in numpy, and the C++ is bit-exact on x86 (VEK280
    int8).  Mutation: the kernel's transposed-A index read as row-major fails the x86 verify."""
    m, x = _model(SharedKt, seed=11), _data(11)
    d = _compile(m, x, "int8", "vek280")
    _close_to_pytorch(d, m, x, "int8")
    tp = _transposed_products(d)
    assert sorted(k for k, _ in tp.values()) == [0, 1] and {t for _, t in tp.values()} == {"k"}
    assert all(d.plan.operands[n][k].transpose_at == "consumer" for n, (k, _) in tp.items())
    layers = d.files["src/layers.h"]
    assert layers.count("TRANS_A = true") == 1 and layers.count("TRANS_B = true") == 1
    xs = np.concatenate([x[:3], np.full((1, TOKENS, FEATURES), 4.0, np.float32)])  # + a saturating sample
    tr = d.trace(d.quantise_input(xs))
    for name, (k, _) in tp.items():
        node = d.plan.node(name)
        a, b = (np.asarray(tr[t]) for t in d.plan.graph.node(name).inputs)
        kt = np.swapaxes(np.asarray(tr["k"]), -1, -2)  # the view, transposed here from k's codes
        a, b = (kt, b) if k == 0 else (a, kt)
        t = node.types
        want = _reference(a, b, bool(node.attrs.get("transpose_b", False)), t.shift, t.output)
        assert np.array_equal(np.asarray(tr[node.outputs[0]]), want), name
    v = d.verify(xs)
    assert v.ok, v.verdict()
    assert not _with_kernel_edit(d, "C::TRANS_A ? pa[k * C::M + m]", "C::TRANS_A ? pa[m * C::K + k]").verify(xs).ok


def test_a_transposed_operand_whose_rows_are_not_whole_words_is_refused_by_name():
    """18 features: int16 rows are whole 32-bit words (the memory tile moves them, the kernel transposes),
    int8 rows are not (nor is an element-wise transposing read of bytes): refused naming the layer,
    the operand, the tensor and the words."""
    x = np.random.default_rng(12).standard_normal((16, TOKENS, FEATURES)).astype(np.float32)
    m = _model(SharedKt, seed=12, d=18)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int16", "batch": 2})
    assert len(_transposed_products(d)) == 2 and not any(link.word_problems() for link in d.plan.links)
    with pytest.raises(AieflowError) as e:
        aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": 2})
    msg = str(e.value)
    assert e.value.layer.startswith("matmul") and "reads 'k' transposed" in msg and "18 elements" in msg, msg
    assert "32-bit words" in msg and "8-bit" in msg, msg


# ----------------------------------------------------------------------------- the cascade over K


class LinearContext(nn.Module):
    """Linear attention's context ``k^T v`` ([d, T] x [T, d]: K = the tokens), read back by ``q``."""

    def __init__(self, d=FEATURES):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        return self.o(q @ (k.transpose(-2, -1) @ v))


def test_a_long_reduction_splits_over_a_cascade_and_verifies_bit_exact():
    """``k^T v`` over 512 tokens on VEK280 int8: one tile cannot hold a sample's K = 512 (nor a run of its
    rows: each needs all of B), so the plan splits K over a cascade of 2 tiles, each holding a 256-slice
    of A (a transposed view, read in source layout) and of B, the partial acc64 sums on the cascade and the
    last tile converting once; the integer sums are the one-tile sums, so the emulation (the same codes as
    a Python-integer reference) is bit-exact with the x86 run.  The stage is costed from the slice and the
    catalog's cascade width.  Mutation: the last tile dropping the incoming partial sums fails the x86 run."""
    from aieflow.dag import perf
    from aieflow.perf.kernel import cascade_words

    torch.manual_seed(13)
    m = LinearContext().eval()
    x = np.random.default_rng(13).standard_normal((8, 512, FEATURES)).astype(np.float32)
    d = _compile(m, x, "int8", "vek280", batch=1)
    _close_to_pytorch(d, m, x[:4], "int8")
    name = next(n for n in d.plan.compute if d.plan.operands.get(n, ())[:1] and d.plan.operands[n][0].transposed)
    rp = d.plan.rows[name]
    assert rp.cascade == 2 and rp.tiles == 2 * rp.parts and rp.memory <= 65536
    assert "MatMulFirst" in d.files["src/kernels/matmul.cc"] and "MatMulLast" in d.files["src/kernels/matmul.cc"]
    assert d.files["src/graph.h"].count("adf::connect<adf::cascade>") >= rp.parts
    assert "2-tile cascade over K" in d.summary()
    assert d.to_json()["nodes"][name]["plan"]["cascade"] == 2
    # the codes: a Python-integer reference of k^T v from k's and v's codes
    xs = np.concatenate([x[:1], np.full((1, 512, FEATURES), 4.0, np.float32)])  # + a saturating sample
    tr = d.trace(d.quantise_input(xs))
    node = d.plan.node(name)
    want = _reference(np.swapaxes(np.asarray(tr["k"]), -1, -2), np.asarray(tr["v"]), False, node.types.shift,
                      node.types.output)
    assert np.array_equal(np.asarray(tr[node.outputs[0]]), want)
    # the stage: K / 2 per tile, the last tile reads 2 cascade words (512 bits, 16 acc64 lanes) per vector
    assert d.device.generation.cascade_bits == 512
    words = cascade_words(16, 64, 512)
    assert words == 2
    body = 256 * FEATURES * perf.COPY_CYCLES + FEATURES * 2 * (256 * perf.MM_MAC_CYCLES + words + perf.MM_OUT_CYCLES)
    assert perf.matmul_cycles(d.plan, name, d.device) == body
    v = d.verify(xs)
    assert v.ok, v.verdict()
    bad = _with_kernel_edit(d, "acc.insert(p, readincr_v<C::CASC_LANES>(cin));", "(void)readincr_v<C::CASC_LANES>(cin);")
    assert not bad.verify(xs).ok


def test_cascade_lengths_are_slices_of_whole_words():
    """K = 32: int8 slices of 4, 8, 16 (words of 4 bytes), int16 of 2 .. 16; K = 6 int8: none; bf16 (2-byte
    elements, as int16): K = 512 into 2 .. 32 tiles (powers of two: equal slices), K = 3: none."""
    from aieflow.dag.plan import cascade_refusal, matmul_cascades
    from aieflow.devices import get_device
    from aieflow.numerics.types import parse_type

    dev = get_device("vek280")

    def node(kind):
        t = parse_type(kind)
        return Node("mm", "matmul", ("a", "b"), ("y",), types=MatMulTypes(t, t, t, 0))

    assert matmul_cascades(node("fixed<8,3>"), 32, dev) == (1, 2, 4, 8)
    assert matmul_cascades(node("fixed<16,3>"), 32, dev) == (1, 2, 4, 8, 16)
    assert matmul_cascades(node("fixed<8,3>"), 6, dev) == (1,)
    assert "no split" in cascade_refusal(node("fixed<8,3>"), 6, dev)
    assert dev.columns >= 32
    assert matmul_cascades(node("bf16"), 512, dev) == (1, 2, 4, 8, 16, 32) and not cascade_refusal(node("bf16"), 512, dev)
    assert matmul_cascades(node("bf16"), 3, dev) == (1,) and "no split" in cascade_refusal(node("bf16"), 3, dev)
