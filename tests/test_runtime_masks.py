"""Run-time (per-sample) key padding masks (issue 19): forward(x, mask) with the mask a second model
input.  The import against PyTorch (random masks, rows keeping one key), the emulated softmax codes
against an independent integer reference per sample (a fully masked row gives 0), the run-time mask
against the unmasked and the constant-mask designs, a mutation (the mask of the wrong sample) caught,
and the refusals by name (mapping, float precisions, per-sample attn_mask, other uses of the input).
The ONNX exports of these models: tests/test_onnx_runtime_masks.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from cases import refused
from mask_reference import Mha as _Mha
from mask_reference import exp_table, ref_row
from torch import nn

import aieflow
from aieflow.frontends.torch_frontend import import_torch
from aieflow.passes.quantise import float_activations

T, E = 12, 16


def Mha(causal=False, heads=2):
    return _Mha(T, E, causal, heads)


class Encoder(nn.Module):
    def __init__(self, stack=False, nested=False):
        super().__init__()
        layer = nn.TransformerEncoderLayer(E, 2, 32, dropout=0.0, batch_first=True, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=nested) if stack else layer

    def forward(self, x, mask):
        return self.enc(x, src_key_padding_mask=mask)


class Constant(nn.Module):
    """Mha's layers with a constant key padding mask (a buffer) or none."""

    def __init__(self, src: Mha, pad=None):
        super().__init__()
        self.att, self.fc = src.att, src.fc
        self.register_buffer("pad", None if pad is None else torch.from_numpy(pad))

    def forward(self, x):
        return self.fc(self.att(x, x, x, key_padding_mask=self.pad, need_weights=False)[0])


def _data(seed=0, n=64):
    return np.random.default_rng(seed).standard_normal((n, T, E)).astype(np.float32)


def _padding(seed, n, full_rows=False):
    """Jet-like padding (True = padded): sample i keeps its first k_i keys, k_i in 1..T (1 included)."""
    rng = np.random.default_rng(seed)
    k = rng.integers(1, T + 1, n)
    k[:2] = (1, T)
    if full_rows:
        k[2] = 0
    return np.arange(T)[None, :] >= k[:, None]


def _float_mask(pad):
    return np.where(pad, -np.inf, 0.0).astype(np.float32)


@pytest.mark.parametrize("make,form", [(Mha, "bool"), (Mha, "float"), (lambda: Mha(causal=True), "bool"),
                                       (Encoder, "bool"), (lambda: Encoder(stack=True), "bool")])
def test_runtime_padding_imports_and_computes_as_pytorch(make, form):
    torch.manual_seed(1)
    m, x, pad = make().eval(), _data(1, 32), _padding(1, 32)
    mask = pad if form == "bool" else _float_mask(pad)
    g = import_torch(m, torch.from_numpy(x[:2])).graph
    assert len(g.inputs) == 2 and g.tensors[g.inputs[1]].shape == (T,)
    sms = [n for n in g.nodes if n.op == "softmax"]
    assert sms and all(n.inputs[1] == g.inputs[1] for n in sms)
    with torch.enable_grad():  # PyTorch's autograd path (no nested-tensor fast path)
        ref = m(torch.from_numpy(x), torch.from_numpy(mask)).detach().numpy()
    got = float_activations(g, x, (~pad).astype(np.uint8))[g.outputs[0]]
    assert np.abs(got - ref).max() < 1e-5


@pytest.mark.parametrize("precision", ["int8", "int16"])
def test_emulated_softmax_rows_match_an_integer_reference_per_sample(precision):
    torch.manual_seed(2)
    m, x = Mha(causal=True).eval(), _data(2, 48)
    pad = _padding(2, 48, full_rows=True)  # sample 2 pads every key
    em = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                         config={"precision": precision})
    keep = (~pad).astype(np.uint8)
    tr = em.trace(em.quantise_input(x), mask=em.quantise_mask(pad, x.shape[0]))
    acts = float_activations(import_torch(m, torch.from_numpy(x[:2])).graph, x, keep)
    assert all(np.isfinite(v).all() for v in acts.values())  # the float graph gives 0 on the padded sample
    assert all(np.all(acts[n.outputs[0]][2] == 0) for n in em.graph.nodes if n.op == "softmax")
    causal = np.tril(np.ones((T, T), dtype=bool))
    for node in (n for n in em.graph.nodes if n.op == "softmax"):
        tin, tout = node.types.input, node.types.output
        table, sd = exp_table(tin.width, tin.frac)
        s, p = tr[node.inputs[0]], tr[node.outputs[0]]
        for i in range(x.shape[0]):
            want = [ref_row(s[i, r], causal[r] & (keep[i] > 0), table, sd, tout.frac, tout.max_code)
                    for r in range(T)]
            assert np.array_equal(p[i], np.array(want)), (node.name, i)
        assert np.all(p[2] == 0)  # the fully padded sample: every output 0
        assert np.all(p[0][:, 1:] == 0) and np.all(p[0][:, 0] > 0)  # sample 0 keeps key 0 only


def test_runtime_mask_reproduces_the_unmasked_and_the_constant_designs():
    torch.manual_seed(3)
    m, x = Mha().eval(), _data(3, 64)
    cfg = {"precision": "int8"}
    none = np.zeros((64, T), dtype=bool)
    rt = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=(x, none), config=cfg)
    plain = aieflow.emulate(Constant(m).eval(), device="vek280", example_input=x[:1], calibration=x, config=cfg)
    assert np.array_equal(rt.predict(x, raw=True, mask=none), plain.predict(x, raw=True))
    row = np.zeros((1, T), dtype=bool)
    row[0, 7:] = True
    pads = np.repeat(row, 64, axis=0)
    rt = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=(x, pads), config=cfg)
    const = aieflow.emulate(Constant(m, row).eval(), device="vek280", example_input=x[:1], calibration=x, config=cfg)
    got = rt.predict(x, raw=True, mask=pads)
    assert np.array_equal(got, const.predict(x, raw=True))
    assert np.array_equal(got, rt.predict(x, raw=True, mask=_float_mask(pads)))  # the 0 / -inf form


def test_predict_follows_pytorch_and_a_mask_of_the_wrong_sample_is_caught(monkeypatch):
    torch.manual_seed(4)
    m, x, pad = Encoder().eval(), _data(4, 64), _padding(4, 64)
    em = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                         config={"precision": "int16"})
    with torch.enable_grad():
        ref = m(torch.from_numpy(x), torch.from_numpy(pad)).detach().numpy()
    good = em.predict(x, mask=pad)
    assert np.abs(good - ref).max() <= 0.05 * np.abs(ref).max()
    import aieflow.ops.activation as act

    real = act.sample_keep
    monkeypatch.setattr(act, "sample_keep",
                        lambda node, s, mask: real(node, s, None if mask is None else np.roll(mask, 1, axis=0)))
    assert np.abs(em.predict(x, mask=pad) - ref).max() > 0.2 * np.abs(ref).max()


def test_what_is_not_done_is_refused_by_name():
    torch.manual_seed(5)
    m, x, pad = Mha().eval(), _data(5, 8), _padding(5, 8)
    # bf16 takes a run-time mask (tests/test_bf16_runtime_masks.py), not beside a constant attention mask
    refused(lambda: aieflow.emulate(Mha(causal=True).eval(), device="vek280", example_input=x[:1],
                                     calibration=(x, pad), config={"precision": "bf16"}),
             "attention mask", "int8 / int16 only")
    em = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=(x, pad), config={"precision": "int8"})
    refused(lambda: em.predict(x), "run-time key padding mask ('mask'", "mask=")
    refused(lambda: em.predict(x, mask=pad.astype(np.int64)), "boolean mask")
    refused(lambda: em.predict(x, mask=pad[:, :5]), "expects (8, 12)")
    refused(lambda: em.predict(x, mask=np.where(pad, -1.0, 0.0)), "other than 0 and -inf")
    plain = aieflow.emulate(Constant(m).eval(), device="vek280", example_input=x[:1], calibration=x,
                            config={"precision": "int8"})
    refused(lambda: plain.predict(x, mask=pad), "takes one input")
    refused(lambda: aieflow.emulate(Constant(m).eval(), device="vek280", example_input=x[:1], calibration=(x, pad),
                                     config={"precision": "int8"}), "takes one input")

    def imp(model):
        return lambda: import_torch(model.eval(), torch.from_numpy(x[:2]))

    refused(imp(Encoder(stack=True, nested=True)), "'enc'", "enable_nested_tensor=True")

    class PerSampleAttnMask(nn.Module):
        def __init__(self):
            super().__init__()
            self.att = nn.MultiheadAttention(E, 2, batch_first=True)

        def forward(self, x, mask):
            return self.att(x, x, x, attn_mask=mask, need_weights=False)[0]

    refused(imp(PerSampleAttnMask()), "second input 'mask' of shape (2, 12)", "key padding mask",
             "per-sample attn_mask")

    class SdpaMask(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(E, E)

        def forward(self, x, mask):
            q = self.q(x)
            return F.scaled_dot_product_attention(q, q, q, attn_mask=mask[:, None, :])

    refused(imp(SdpaMask()), "second input 'mask'", "key padding mask")

    class Gated(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(E, E)

        def forward(self, x, mask):
            return self.fc(x) * mask[..., None]

    refused(imp(Gated()), "second input 'mask'", "key padding mask")


class Tagger(nn.Module):
    """A small masked jet tagger: particle embedding, one encoder layer reading the padding mask,
    the first particle's token pooled, a class head."""

    def __init__(self, features=8, classes=5):
        super().__init__()
        self.embed = nn.Linear(features, E)
        self.enc = nn.TransformerEncoderLayer(E, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(E, classes)

    def forward(self, x, mask):
        return self.head(self.enc(self.embed(x), src_key_padding_mask=mask)[:, 0])


def test_masked_tagger_verifies_bit_exact_on_x86_and_a_mask_of_the_wrong_sample_is_caught():
    torch.manual_seed(7)
    m = Tagger().eval()
    x = np.random.default_rng(7).standard_normal((64, T, 8)).astype(np.float32)
    pad = _padding(7, 64)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                        config={"precision": "int8", "batch": 8})
    assert type(d).__name__ == "DagDesign" and d.resources()["plio_in"] == 2
    assert "in_mask" in d.files["src/graph.h"] and "data/in_mask.txt" in d.files
    assert d.files["src/layers.h"].count("static constexpr unsigned RS = ") == 2  # both heads' softmaxes
    with torch.enable_grad():
        ref = m(torch.from_numpy(x), torch.from_numpy(pad)).detach().numpy()
    assert np.abs(d.predict(x, mask=pad) - ref).max() <= 0.1 * np.abs(ref).max()
    v = d.verify(x[:16], mask=pad[:16])  # two graph iterations
    assert v.ok, v.verdict()
    src = d.files["src/kernels/dag_kernels.h"]
    bad_src = src.replace("m + (row / C::RS) * C::MP", "m + ((row / C::RS + 1) % (C::ROWS / C::RS)) * C::MP")
    assert bad_src != src
    bad = dataclasses.replace(d, files={**d.files, "src/kernels/dag_kernels.h": bad_src})
    assert not bad.verify(x[:16], mask=pad[:16]).ok
