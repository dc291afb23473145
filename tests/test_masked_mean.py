"""Masked mean pooling over tokens with a run-time key padding mask (issue 19, ops/masked_mean.py):
the two PyTorch forms import and compute as PyTorch (random paddings, one token kept), the emulated
codes equal an independent integer reference (int8 / int16, random paddings, one key kept, a fully
padded sample, ties, extreme codes), predict follows PyTorch, and what is not done is refused by name
(other forms of the pooling, float precisions, the chain planner, AIE1).  The mapping: test_masked_mean_dag.py."""

from __future__ import annotations

import struct
from fractions import Fraction

import numpy as np
import pytest
import torch
from cases import refused
from float_reference import bf16, f32
from torch import nn

import aieflow
from aieflow.errors import AieflowError
from aieflow.frontends.torch_frontend import import_torch
from aieflow.passes.quantise import float_activations

T, E, F_IN = 12, 16, 8


def _pool_a(h, mask):
    keep = ~mask
    return (h * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)


def _pool_b(h, mask):
    return h.masked_fill(mask[..., None], 0).sum(1) / (~mask).sum(1, keepdim=True)


def _pool_a_spelt(h, mask):  # the same form, other spellings
    keep = torch.logical_not(mask)
    return torch.sum(keep.unsqueeze(-1).float() * h, dim=-2) / keep.float().sum(dim=1, keepdim=True)


def _pool_b_spelt(h, mask):
    return torch.sum(h.masked_fill(mask[:, :, None], 0.0), 1) / mask.logical_not().sum(-1, keepdim=True)


class Tagger(nn.Module):
    """A small masked jet tagger: embedding, one encoder layer reading the mask, masked mean pooling."""

    def __init__(self, pool=_pool_a, encoder=True):
        super().__init__()
        self.pool = pool
        self.embed = nn.Linear(F_IN, E)
        self.enc = nn.TransformerEncoderLayer(E, 2, 32, dropout=0.0, batch_first=True) if encoder else None
        self.head = nn.Linear(E, 5)

    def forward(self, x, mask):
        h = self.embed(x)
        if self.enc is not None:
            h = self.enc(h, src_key_padding_mask=mask)
        return self.head(self.pool(h, mask))


def _data(seed, n):
    return np.random.default_rng(seed).standard_normal((n, T, F_IN)).astype(np.float32)


def _padding(seed, n, full=False):
    """Random per-sample paddings (True = padded): sample 0 keeps one key, sample 1 all, sample 3 one key
    in the middle; the others random subsets (jet-like prefixes and scattered keys); sample 2 none
    with ``full``."""
    rng = np.random.default_rng(seed)
    k = rng.integers(1, T + 1, n)
    pad = np.arange(T)[None, :] >= k[:, None]
    pad[n // 2:] = rng.random((n - n // 2, T)) < 0.5  # scattered padding
    pad[n // 2:, rng.integers(0, T)] = False
    pad[0], pad[1], pad[3] = True, False, True
    pad[0, 0] = pad[3, 5] = False
    if full:
        pad[2] = True
    return pad


@pytest.mark.parametrize("pool", [_pool_a, _pool_b, _pool_a_spelt, _pool_b_spelt])
@pytest.mark.parametrize("encoder", [True, False])
def test_masked_mean_imports_and_computes_as_pytorch(pool, encoder):
    torch.manual_seed(1)
    m, x, pad = Tagger(pool, encoder).eval(), _data(1, 32), _padding(1, 32)
    g = import_torch(m, torch.from_numpy(x[:2])).graph
    (mm,) = [n for n in g.nodes if n.op == "masked_mean"]
    assert mm.inputs == (mm.inputs[0], g.inputs[1]) and g.tensors[mm.outputs[0]].shape == (E,)
    assert not any(n.op in ("dense",) and n.inputs[0] == g.inputs[1] for n in g.nodes)
    with torch.enable_grad():  # PyTorch's autograd path (no nested-tensor fast path)
        ref = m(torch.from_numpy(x), torch.from_numpy(pad)).detach().numpy()
    got = float_activations(g, x, (~pad).astype(np.uint8))[g.outputs[0]]
    assert np.abs(got - ref).max() < 1e-5


def _round_half_even(q: Fraction) -> int:
    f = q.numerator // q.denominator
    r = q - f
    return f + (1 if r > Fraction(1, 2) or (r == Fraction(1, 2) and f % 2) else 0)


def _reference(codes, keep):
    """y[n][e] = round_half_even(sum of the kept codes / kept count), 0 for a sample keeping none; Python
    integers and Fractions."""
    out = []
    for row, k in zip(codes.tolist(), keep.tolist(), strict=True):
        kept = [r for r, ok in zip(row, k, strict=True) if ok]
        out.append([0] * len(row[0]) if not kept else
                   [_round_half_even(Fraction(sum(r[e] for r in kept), len(kept))) for e in range(len(row[0]))])
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("precision", ["int8", "int16"])
def test_emulated_masked_mean_equals_an_independent_integer_reference(precision):
    torch.manual_seed(2)
    m, x, pad = Tagger().eval(), _data(2, 48), _padding(2, 48, full=True)
    em = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                         config={"precision": precision})
    keep = (~pad).astype(np.uint8)
    tr = em.trace(em.quantise_input(x), mask=em.quantise_mask(pad, x.shape[0]))
    (node,) = [n for n in em.graph.nodes if n.op == "masked_mean"]
    assert node.types == em.graph.tensors[node.inputs[0]].dtype  # the output keeps the input's type
    got = tr[node.outputs[0]]
    assert np.array_equal(got, _reference(tr[node.inputs[0]], keep))
    assert np.all(got[2] == 0)  # the fully padded sample
    assert np.array_equal(got[0], tr[node.inputs[0]][0, 0])  # one key kept: its codes
    # edge codes through the layer itself: ties both ways, the type's extremes, random codes
    fam = aieflow.ops.registry.family("masked_mean")
    t = node.types
    lo, hi = -(1 << (t.width - 1)), (1 << (t.width - 1)) - 1
    rng = np.random.default_rng(3)
    codes = rng.integers(lo, hi + 1, (64, T, E))
    codes[:8] = rng.choice([lo, hi, lo + 1, hi - 1, -1, 0, 1], (8, T, E))
    codes[8, :2] = [[1] * E, [2] * E]  # 1.5 -> 2
    codes[9, :2] = [[-1] * E, [-2] * E]  # -1.5 -> -2
    codes[10, :2] = [[1] * E, [0] * E]  # 0.5 -> 0
    codes[11, :4] = [[3] * E, [2] * E, [0] * E, [0] * E]  # 1.25 -> 1
    keeps = (rng.random((64, T)) < rng.random((64, 1))).astype(np.uint8)
    keeps[8:12] = 0
    keeps[8:11, :2] = keeps[11, :4] = 1
    keeps[12], keeps[13], keeps[14, 7] = 0, 1, 1
    y = fam.emulate(node, codes, keeps)
    want = _reference(codes, keeps)
    assert np.array_equal(y, want)
    assert (list(want[8:12, 0]), list(want[12])) == ([2, -2, 0, 1], [0] * E)


def _reference_bf16(x, keep):
    """The bf16 rule written from docs/attention.md with Python floats and ``float_reference`` (struct and
    integers): per feature a float32 sum from +0.0 over the kept tokens in increasing t, inv = float32(1 / k),
    y = bf16(float32(sum inv)); +0.0 for a sample keeping none."""
    out = np.zeros((x.shape[0], x.shape[2]), dtype=np.float32)
    for n in range(x.shape[0]):
        kept = [t for t in range(x.shape[1]) if keep[n, t]]
        if not kept:
            continue
        inv = f32(1.0 / len(kept))
        for e in range(x.shape[2]):
            acc = 0.0
            for t in kept:
                acc = f32(acc + float(x[n, t, e]))
            out[n, e] = bf16(acc * inv)  # the double product of two float32 values is exact: f32 rounds it once
    return out


def test_emulated_bf16_masked_mean_equals_an_independent_reference():
    """bf16 (VEK280): the layer's emulation against the reference on random values at three scales, random
    keep rates, and crafted rows: the order of the float32 sum (2^24 + 1 rounds to 2^24 before -2^24 comes),
    the sum overflowing to inf, -0.0 tokens (+0.0 from the +0.0 start), an inf and a NaN token, subnormal
    values, a seventh whose reciprocal's rounding shows, one token kept (its value), none kept (+0.0)."""
    torch.manual_seed(6)
    m, x, pad = Tagger().eval(), _data(6, 32), _padding(6, 32, full=True)
    em = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=(x, pad), config={"precision": "bf16"})
    (node,) = [n for n in em.graph.nodes if n.op == "masked_mean"]
    assert str(node.types) == "bf16"
    tr = em.trace(em.quantise_input(x), mask=em.quantise_mask(pad, x.shape[0]))
    assert np.array_equal(tr[node.outputs[0]], _reference_bf16(tr[node.inputs[0]], (~pad).astype(np.uint8)))
    rng = np.random.default_rng(7)
    scale = np.repeat([1.0, 1e30, 1e-38], 16)[:, None, None]
    v = np.vectorize(bf16, otypes=[np.float32])(rng.standard_normal((48, T, E)) * scale)
    keeps = (rng.random((48, T)) < rng.random((48, 1))).astype(np.uint8)
    big = struct.unpack("<f", struct.pack("<I", 0x7F7F0000))[0]  # the largest bf16
    keeps[:9] = 0
    keeps[:8, :3] = 1
    v[0, :3] = [[2.0**24] * E, [1.0] * E, [-(2.0**24)] * E]  # 0 (2^24 + 1 is a tie, to even), not 1 / 3
    v[1, :3] = big  # the float32 sum overflows: inf
    v[2, :3] = -0.0
    v[3, 1, 0], v[3, 2, 1] = np.inf, np.nan
    v[4, :7] = [[2400 / 4096] * E, [15 / 4096] * E] + [[0.0] * E] * 5  # 2415/4096 / 7: bf16(s float32(1/7))
    keeps[4, :7] = 1  # differs from bf16(float32(s / 7)) (the reciprocal's rounding shows)
    v[5, :3] = 2.0**-130  # subnormal float32 values (kept as float32 here; bf16 keeps their top bits)
    keeps[6, 1:] = 0  # one token kept: its value
    keeps[8] = 0  # none kept
    y = aieflow.ops.registry.family("masked_mean").emulate(node, v, keeps)
    want = _reference_bf16(v, keeps)
    assert np.array_equal(want.view(np.uint32), np.asarray(y, dtype=np.float32).view(np.uint32))
    assert np.all(want[0] == 0.0) and np.all(want[1] == np.inf) and not np.signbit(want[2]).any()
    assert want[3, 0] == np.inf and np.isnan(want[3, 1]) and np.array_equal(want[6], v[6, 0])
    assert not want[8].any() and not np.signbit(want[8]).any()


def test_predict_follows_pytorch():
    torch.manual_seed(4)
    m, x, pad = Tagger(_pool_b).eval(), _data(4, 64), _padding(4, 64)
    with torch.enable_grad():
        ref = m(torch.from_numpy(x), torch.from_numpy(pad)).detach().numpy()
    for precision, tol in (("int8", 0.1), ("int16", 0.01), ("bf16", 2.0**-6)):  # bf16: docs/numerics.md
        em = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                             config={"precision": precision})
        assert np.abs(em.predict(x, mask=pad) - ref).max() <= tol * np.abs(ref).max()


def test_what_is_not_done_is_refused_by_name():
    torch.manual_seed(5)
    x, pad = _data(5, 16), _padding(5, 16)
    refused(lambda: aieflow.emulate(Tagger(encoder=False).eval(), device="vck190", example_input=x[:1],  # bf16 maps
                                    calibration=(x, pad), config={"precision": "fp32"}),
            "masked mean pooling 'truediv'", "int8 / int16 / bf16 only")
    # the mapping (test_masked_mean_dag.py): on the DAG path only; the chain planner refuses the layer by name
    em = aieflow.emulate(Tagger(encoder=False).eval(), device="vek280", example_input=x[:1], calibration=(x, pad),
                         config={"precision": "int8"})
    (node,) = [n for n in em.graph.nodes if n.op == "masked_mean"]
    refused(lambda: aieflow.ops.registry.family("masked_mean").plan(node, None), "'truediv'", "DAG path only")
    refused(lambda: aieflow.compile(Tagger(encoder=False).eval(), device="vck190", example_input=x[:1],
                                     calibration=(x, pad), config={"precision": "int8", "batch": 8}),
             "memory tiles", "VCK190")

    others = {
        "fill": lambda h, mask: h.masked_fill(mask[..., None], 1.0).sum(1) / (~mask).sum(1, keepdim=True),
        "count": lambda h, mask: (h * (~mask)[..., None]).sum(1) / T,
        "no keepdim": lambda h, mask: (h * (~mask)[..., None]).sum(1) / (~mask).sum(1)[:, None],
        "weights": lambda h, mask: (h * (~mask)[..., None]).sum(1) / (~mask).sum(1, keepdim=True) + (~mask).sum(1, keepdim=True),
        "padding summed": lambda h, mask: (h * mask[..., None]).sum(1) / (~mask).sum(1, keepdim=True),
    }
    for why, pool in others.items():
        with pytest.raises(AieflowError) as e:
            import_torch(Tagger(pool).eval(), torch.from_numpy(x[:2]))
        for w in ("reads the model's second input 'mask'", "masked mean", "keepdim=True"):
            assert w in str(e.value), (why, str(e.value))
