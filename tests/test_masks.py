"""Attention masks (issue 19): constant boolean / 0-or--inf masks and causal attention folded into the
softmax (ops/activation.py "masked softmax": masked positions give exactly 0, the kept ones the softmax
of the kept scores).  The codes against an independent plain-Python reference, the import against
PyTorch, a masked nn.MultiheadAttention bit-exact on x86 (VEK280 int8) with a mutated kernel caught,
and the refusals by name."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aieflow
from aieflow.errors import AieflowError
from aieflow.frontends.torch_frontend import import_torch
from aieflow.numerics.types import FixedType, Rounding, Saturation
from aieflow.ops.activation import exp_table, softmax_codes
from aieflow.passes.quantise import float_activations

T, E = 16, 32


def _ref_masked(x, keep, table, sd, frac_out, hi):
    """One row at a time in Python integers: max, exp entries, sum and reciprocal over the kept keys."""
    out = []
    for row, k in zip(x, keep, strict=True):
        kept = [int(v) for v, ok in zip(row, k, strict=True) if ok]
        m = max(kept)
        e = [int(table[min((m - int(v)) >> sd, len(table) - 1)]) if ok else 0 for v, ok in zip(row, k, strict=True)]
        s = sum(e)
        inv = ((1 << 46) + s // 2) // s
        out.append([min(hi, (v * inv + (1 << (45 - frac_out))) >> (46 - frac_out)) for v in e])
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("width, frac", [(8, 4), (16, 10)])
def test_masked_softmax_codes_match_an_integer_reference(width, frac):
    rng = np.random.default_rng(width)
    tx = FixedType(width, frac, True, Rounding.CONV_EVEN, Saturation.SATURATE)
    out = FixedType(width, width - 1, True, Rounding.CONV_EVEN, Saturation.SATURATE)
    table, sd = exp_table(tx)
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    keep = np.tril(np.ones((T, T), dtype=np.uint8))  # causal
    keep[3] = rng.integers(0, 2, T)
    keep[3, 5] = 1
    for x in (rng.integers(lo, hi + 1, (T, T)), np.full((T, T), hi), np.where(np.eye(T) > 0, lo, hi),
              np.where(keep > 0, lo, hi)):  # random, ties, a masked maximum, kept minimum vs masked maxima
        got = softmax_codes(x, table, sd, out, keep)
        want = _ref_masked(x, keep, table, sd, out.frac, out.max_code)
        assert np.array_equal(got, want)
        assert np.all(got[keep == 0] == 0)


class MaskedMha(nn.Module):
    def __init__(self, kind="causal"):
        super().__init__()
        self.att = nn.MultiheadAttention(E, 2, batch_first=True)
        if kind == "causal":
            mask = nn.Transformer.generate_square_subsequent_mask(T)  # 0 / -inf
        else:  # boolean: True = not allowed (nn.MultiheadAttention's convention)
            mask = torch.from_numpy(np.random.default_rng(7).random((T, T)) < 0.3)
            mask[:, 0] = False
        self.register_buffer("mask", mask)

    def forward(self, x):
        return self.att(x, x, x, attn_mask=self.mask, need_weights=False)[0]


class MaskedSdpa(nn.Module):
    def __init__(self, causal=True):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(E, E) for _ in range(3))
        self.causal = causal
        keep = torch.from_numpy(np.random.default_rng(8).random((T, T)) < 0.6)  # True = takes part (SDPA)
        keep[:, 2] = True
        self.register_buffer("keep", keep)

    def forward(self, x):
        if self.causal:
            return F.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x), is_causal=True)
        return F.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x), attn_mask=self.keep)


class MaskedEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(E, 2, 64, batch_first=True, norm_first=True, activation="gelu")
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(T))

    def forward(self, x):
        return self.enc(x, src_mask=self.mask)


def _data(seed=0, n=64):
    return np.random.default_rng(seed).standard_normal((n, T, E)).astype(np.float32)


MODELS = [lambda: MaskedMha("causal"), lambda: MaskedMha("bool"), lambda: MaskedSdpa(True),
          lambda: MaskedSdpa(False), MaskedEncoder]


@pytest.mark.parametrize("make", MODELS)
def test_masked_attention_imports_and_predicts_as_pytorch(make):
    torch.manual_seed(0)
    m, x = make().eval(), _data()
    g = import_torch(m, torch.from_numpy(x[:2])).graph
    with torch.enable_grad():
        ref = m(torch.from_numpy(x)).detach().numpy()
    assert np.abs(float_activations(g, x)[g.outputs[0]] - ref).max() < 1e-5
    sms = [n for n in g.nodes if n.op == "softmax"]
    assert len(sms) >= 1 and all(n.params["keep"].shape == (T, T) for n in sms)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": 2})
    assert np.abs(d.predict(x[:16]) - ref[:16]).max() <= 0.1 * np.abs(ref).max()


def test_masked_attention_verifies_bit_exact_and_a_kernel_ignoring_the_mask_is_caught():
    torch.manual_seed(1)
    m, x = MaskedMha("causal").eval(), _data(1)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": 2})
    assert "KEEP[256]" in d.files["src/layers.h"]
    v = d.verify(samples=4)
    assert v.ok, v.verdict()
    src = d.files["src/kernels/dag_kernels.h"]
    bad_src = src.replace("C::MASKED ? C::KEEP + (row % C::MQ) * C::N : nullptr", "nullptr")
    assert bad_src != src
    bad = dataclasses.replace(d, files={**d.files, "src/kernels/dag_kernels.h": bad_src})
    assert not bad.verify(samples=4).ok


def _refused(model, *words):
    with pytest.raises(AieflowError) as e:
        import_torch(model.eval(), torch.from_numpy(_data(n=2)))
    for w in words:
        assert w in str(e.value), str(e.value)


class PaddedMha(nn.Module):
    """nn.MultiheadAttention with a constant key padding mask (keys 12.. padded in every sample)
    and optionally a causal attn_mask."""

    def __init__(self, n=2, causal=False, kind="bool"):
        super().__init__()
        self.att = nn.MultiheadAttention(E, 2, batch_first=True)
        pad = torch.zeros(n, T, dtype=torch.bool)
        pad[:, 12:] = True
        self.register_buffer("pad", pad if kind == "bool" else torch.zeros(n, T).masked_fill(pad, float("-inf")))
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(T) if causal else None)

    def forward(self, x):
        return self.att(x, x, x, key_padding_mask=self.pad, attn_mask=self.mask, need_weights=False)[0]


class PaddedEncoder(nn.Module):
    def __init__(self, n=2, stack=False, nested=False):
        super().__init__()
        layer = nn.TransformerEncoderLayer(E, 2, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=nested) if stack else layer
        pad = torch.zeros(n, T, dtype=torch.bool)
        pad[:, 10:] = True
        self.register_buffer("pad", pad)

    def forward(self, x):
        return self.enc(x, src_key_padding_mask=self.pad)


@pytest.mark.parametrize("make,kept", [(lambda: PaddedMha(), 12 * T), (lambda: PaddedMha(kind="float"), 12 * T),
                                       (lambda: PaddedMha(causal=True), 12 * 13 // 2 + 4 * 12),
                                       (lambda: PaddedEncoder(), 10 * T),
                                       (lambda: PaddedEncoder(stack=True), 10 * T)])
def test_constant_key_padding_masks_import_and_predict_as_pytorch(make, kept):
    torch.manual_seed(4)
    m, x = make().eval(), _data(4, n=2)  # the buffer's batch: 2 samples
    g = import_torch(m, torch.from_numpy(x)).graph
    with torch.no_grad():  # no fast-path difference here (nested tensors are off)
        ref = m(torch.from_numpy(x)).numpy()
    assert np.abs(float_activations(g, x)[g.outputs[0]] - ref).max() < 1e-5
    sms = [n for n in g.nodes if n.op == "softmax"]
    assert sms and all(int(n.params["keep"].sum()) == kept for n in sms)  # padded keys (and causal) masked
    d = aieflow.compile(m, device="vek280", example_input=x, calibration=_data(5, n=64),
                        config={"precision": "int8", "batch": 2})
    assert np.abs(d.predict(x) - ref).max() <= 0.1 * np.abs(ref).max()


def test_unmapped_masks_are_refused_by_name():
    m = PaddedMha()
    m.pad[1, 3] = True  # another padding in the second sample: a per-sample (run-time) mask
    _refused(m, "'att'", "key padding mask whose rows differ", "forward()'s second input")

    m = PaddedMha(kind="float")
    m.pad[:, 0] = -1.0
    _refused(m, "'att'", "float key padding mask", "other than 0 and -inf")

    m = PaddedMha()
    m.pad[:, :] = True  # every key padded
    _refused(m, "'att'", "every key of query row 0")

    _refused(PaddedEncoder(stack=True, nested=True), "'enc'", "enable_nested_tensor=True",
             "enable_nested_tensor=False")

    m = MaskedMha("causal")
    m.mask = torch.full((T, T), -0.5)  # a bias on the scores, not a mask
    _refused(m, "'att'", "other than 0 and -inf")

    m = MaskedMha("bool")
    m.mask = torch.zeros(T, T, dtype=torch.bool)
    m.mask[4] = True  # query row 4 keeps no key
    _refused(m, "'att'", "every key of query row 4")

    class Computed(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.b = nn.Linear(E, E), nn.Linear(E, T)

        def forward(self, x):
            q = self.q(x)
            return F.scaled_dot_product_attention(q, q, q, attn_mask=self.b(x))  # a bias computed from x

    _refused(Computed(), "scaled_dot_product_attention", "computed in forward()", "register_buffer")


def test_masks_scale_consistently_with_pytorch_scores():
    """The 1 / sqrt(d) scale and the mask meet in the same scores: the float graph's masked positions are 0."""
    torch.manual_seed(2)
    m, x = MaskedSdpa(True).eval(), _data(2, n=4)
    g = import_torch(m, torch.from_numpy(x[:2])).graph
    acts = float_activations(g, x)
    sm = next(n for n in g.nodes if n.op == "softmax")
    p = acts[sm.outputs[0]]
    assert np.all(p[:, np.triu(np.ones((T, T)), 1) > 0] == 0)
    assert np.allclose(p.sum(axis=-1), 1.0)
    q = m.q(torch.from_numpy(x)) / math.sqrt(E)
    s = (q @ m.k(torch.from_numpy(x)).transpose(-2, -1)).detach().numpy()
    assert np.allclose(acts[sm.inputs[0]], s, atol=1e-5)


# -- ONNX exports of masked attention (the mask an Add of 0 / -inf or a Where before the Softmax) ----------------


class HandMasked(nn.Module):
    """Hand-written attention with masked_fill(-inf) of a constant causal mask."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(E, E), nn.Linear(E, E), nn.Linear(E, E)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        s = (self.q(x) @ self.k(x).transpose(-2, -1)) / math.sqrt(E)
        return torch.softmax(s.masked_fill(~self.mask, float("-inf")), dim=-1) @ self.v(x)


class MaskedSdpa4(MaskedSdpa):
    """MaskedSdpa on 4-D [B, 1, T, d] q, k, v (the dynamo exporter refuses 3-D SDPA itself)."""

    def forward(self, x):
        q, k, v = self.q(x)[:, None], self.k(x)[:, None], self.v(x)[:, None]
        if self.causal:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, 0]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.keep)[:, 0]


def _export(m, x, path, dynamo):
    torch.onnx.export(m, (torch.from_numpy(x[:2]),), str(path), opset_version=18 if dynamo else 17,
                      input_names=["x"], output_names=["y"], dynamo=dynamo)
    return str(path)


ONNX_MODELS = [("mha_causal", lambda: MaskedMha("causal")), ("mha_bool", lambda: MaskedMha("bool")),
               ("sdpa_causal", lambda: MaskedSdpa4(True)), ("sdpa_bool", lambda: MaskedSdpa4(False)),
               ("hand", HandMasked)]


@pytest.mark.parametrize("dynamo", [False, True])
@pytest.mark.parametrize("label,make", ONNX_MODELS)
def test_masked_attention_onnx_exports_import_as_onnxruntime_computes(label, make, dynamo, tmp_path):
    import onnxruntime as ort

    from aieflow.frontends.onnx_frontend import import_onnx

    torch.manual_seed(6)
    m, x = make().eval(), _data(6, n=2)  # the export's batch
    path = _export(m, x, tmp_path / f"{label}.onnx", dynamo)
    sess = ort.InferenceSession(path)
    ref = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    g = import_onnx(path).graph
    assert np.abs(float_activations(g, x)[g.outputs[0]] - ref).max() < 1e-5
    causal = np.tril(np.ones((T, T), dtype=bool))
    want = {"mha_causal": causal, "mha_bool": ~getattr(m, "mask", torch.ones(1)).numpy().astype(bool),
            "sdpa_causal": causal, "sdpa_bool": getattr(m, "keep", torch.ones(1)).numpy(), "hand": causal}[label]
    sms = [n for n in g.nodes if n.op == "softmax"]
    assert sms and all(n.params["keep"].astype(bool).tolist() == want.tolist() for n in sms)


def test_masked_mha_onnx_export_verifies_bit_exact(tmp_path):
    torch.manual_seed(7)
    m, x = MaskedMha("causal").eval(), _data(7)
    path = _export(m, x, tmp_path / "mha.onnx", True)
    d = aieflow.compile(path, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": 2})
    with torch.no_grad():
        ref = m(torch.from_numpy(x[:16])).numpy()
    assert np.abs(d.predict(x[:16]) - ref).max() <= 0.1 * np.abs(ref).max()
    v = d.verify(samples=4)
    assert v.ok, v.verdict()


def test_unmapped_onnx_masks_are_refused_by_name(tmp_path):
    from aieflow.frontends.onnx_frontend import import_onnx

    m = HandMasked()
    m.mask[5] = False  # query row 5 keeps no key
    with pytest.raises(AieflowError, match="every key of query row 5"):
        import_onnx(_export(m.eval(), _data(n=2), tmp_path / "a.onnx", False))

    class Biased(HandMasked):
        def forward(self, x):
            s = (self.q(x) @ self.k(x).transpose(-2, -1)) / math.sqrt(E)
            return torch.softmax(s.masked_fill(~self.mask, -5.0), dim=-1) @ self.v(x)

    with pytest.raises(AieflowError, match=r"\(Where\) fills the scores .* other than -inf"):
        import_onnx(_export(Biased().eval(), _data(n=2), tmp_path / "b.onnx", False))


def test_a_per_feature_bias_before_an_onnx_softmax_is_still_a_bias():
    """An Add of a [1, N] constant before a Softmax (a classifier head's bias) is not taken for a mask."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from aieflow.frontends.onnx_frontend import import_onnx

    rng = np.random.default_rng(9)
    w, b = rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((1, 5)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["s"]),
         helper.make_node("Softmax", ["s"], ["y"], axis=-1)], "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    imported = import_onnx(model if not isinstance(model, str) else onnx.load(model)).graph
    x = rng.standard_normal((4, 8)).astype(np.float32)
    s = x @ w + b
    ref = np.exp(s - s.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    assert np.abs(float_activations(imported, x)[imported.outputs[0]] - ref).max() < 1e-5
    assert all("keep" not in n.params for n in imported.nodes if n.op == "softmax")
