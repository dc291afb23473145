"""bf16 attention with a run-time key padding mask (issue 19, VEK280): the emulated softmax rows against
an independent float reference that rounds as the hardware does (bf16 round to nearest even of float32
values, the exp rounded once to float32 and once to bf16, a sequential float32 sum), random paddings
with a fully padded sample and a sample keeping one key; predict within tolerance of PyTorch; an
all-False mask gives the unmasked design's values; the x86 run bit for bit (dag_kernels_bf16.h
SoftmaxPaddedBf16); a constant attention mask with it stays refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mask_reference import Mha as _Mha
from torch import nn

import aieflow
from aieflow.errors import AieflowError

T, E = 12, 16


def Mha(causal=False):
    return _Mha(T, E, causal)


class Unmasked(nn.Module):
    def __init__(self, src: Mha):
        super().__init__()
        self.att, self.fc = src.att, src.fc

    def forward(self, x):
        return self.fc(self.att(x, x, x, need_weights=False)[0])


def _case(seed: int, n: int = 32):
    """Inputs and a random padding (True = padded): sample 0 pads every key, sample 1 keeps key 5 only,
    sample 2 keeps every key."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, T, E)).astype(np.float32)
    pad = rng.random((n, T)) < rng.uniform(0.1, 0.9, (n, 1))
    pad[0] = True
    pad[1] = True
    pad[1, 5] = False
    pad[2] = False
    return x, pad


def _bf16(v):
    """float32 -> bf16 (kept in float32), round to nearest, ties to even."""
    b = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return (r.astype(np.uint32) << 16).view(np.float32)


def _ref_row(x, keep):
    if not keep.any():
        return np.zeros_like(x)
    m = np.float32(x[keep].max())
    e = np.zeros(x.shape, dtype=np.float32)
    for i in np.flatnonzero(keep):
        d = _bf16(np.float32(x[i] - m))
        e[i] = _bf16(np.float32(np.exp(np.float64(d))))
    s = np.float32(0.0)
    for v in e:
        s = np.float32(s + v)
    inv = np.float32(np.float32(1.0) / s)
    return _bf16((e * inv).astype(np.float32))


@pytest.fixture(scope="module")
def model_and_data():
    torch.manual_seed(21)
    return Mha().eval(), *_case(21)


def test_emulated_bf16_rows_round_as_the_hardware(model_and_data):
    m, x, pad = model_and_data
    em = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=(x, pad), config={"precision": "bf16"})
    tr = em.trace(em.quantise_input(x), mask=em.quantise_mask(pad, x.shape[0]))
    nodes = [n for n in em.graph.nodes if n.op == "softmax"]
    assert len(nodes) == 2 and all(len(n.inputs) == 2 for n in nodes)
    for node in nodes:
        s, p = tr[node.inputs[0]], tr[node.outputs[0]]
        for i in range(x.shape[0]):
            want = np.stack([_ref_row(s[i, r], ~pad[i]) for r in range(T)])
            assert np.array_equal(p[i].view(np.uint32), want.view(np.uint32)), (node.name, i)
        assert np.all(p[0] == 0)  # every key padded: +0.0 everywhere
        assert np.all(np.delete(p[1], 5, axis=1) == 0) and np.all(p[1][:, 5] == 1.0)  # one key kept: 1
    with torch.enable_grad():
        ref = m(torch.from_numpy(x), torch.from_numpy(pad)).detach().numpy()
    y = em.predict(x, mask=pad)
    kept = ~pad.all(axis=1)  # PyTorch's output of a fully padded sample is not compared
    assert np.abs(y[kept] - ref[kept]).max() <= 0.02 * np.abs(ref[kept]).max()
    none = np.zeros_like(pad)
    plain = aieflow.emulate(Unmasked(m).eval(), device="vek280", example_input=x[:1], calibration=x,
                            config={"precision": "bf16"})
    rt = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=(x, none), config={"precision": "bf16"})
    assert np.array_equal(rt.predict(x, mask=none), plain.predict(x))


def test_bf16_masked_attention_verifies_bit_exact_on_x86(model_and_data):
    m, x, pad = model_and_data
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                        config={"precision": "bf16", "batch": 8})
    assert type(d).__name__ == "DagDesign" and d.resources()["plio_in"] == 2
    assert "SoftmaxPaddedBf16<" in d.files["src/graph.h"]
    assert d.files["src/layers.h"].count("(SoftmaxPaddedBf16)") == 2  # both heads' softmaxes read the mask
    v = d.verify(x[:16], mask=pad[:16])
    assert v.ok, v.verdict()


def test_bf16_with_a_constant_mask_beside_the_run_time_one_is_refused_by_name():
    torch.manual_seed(22)
    x, pad = _case(22, 8)
    with pytest.raises(AieflowError) as e:
        aieflow.emulate(Mha(causal=True).eval(), device="vek280", example_input=x[:1], calibration=(x, pad),
                        config={"precision": "bf16"})
    assert "attention mask" in str(e.value) and "int8 / int16" in str(e.value)
