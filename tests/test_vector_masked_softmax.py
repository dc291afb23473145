"""The vector rows of the masked softmax (issue 19, dag_kernels.h SoftmaxVec KEYED in SoftmaxPadded): a
run-time key padding mask over 16-key rows takes the vector form.  Random paddings (not only prefixes),
a fully padded sample, a sample keeping one key, a causal attention mask combined; int8 and int16:
the emulated softmax codes against an independent integer reference (its own exp table from the
definition, Python integers), then the design's x86 run bit for bit against the emulation.  Also: the
kernel's config names the vector rows, and the cycle model follows the form."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import aieflow
from aieflow.perf import activation as pa

T, E = 16, 16


class Mha(nn.Module):
    def __init__(self, causal=False):
        super().__init__()
        self.att = nn.MultiheadAttention(E, 2, batch_first=True)
        self.fc = nn.Linear(E, 4)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(T) if causal else None)

    def forward(self, x, mask):
        return self.fc(self.att(x, x, x, key_padding_mask=mask, attn_mask=self.causal, need_weights=False)[0])


def _case(seed: int, n: int = 48):
    """Inputs and a random padding (True = padded, any keys): sample 0 pads every key, sample 1 keeps
    key 5 only, sample 2 keeps every key."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, T, E)).astype(np.float32)
    pad = rng.random((n, T)) < rng.uniform(0.1, 0.9, (n, 1))
    pad[0] = True
    pad[1] = True
    pad[1, 5] = False
    pad[2] = False
    return x, pad


def _exp_table(width, frac):
    """E[k] = round_half_even(exp(-t_k 2^-frac) 2^15), t_k the bucket's midpoint when SD > 0; ends at
    its first zero (docs/attention.md), in Python floats and ints."""
    sd = max(0, frac - 8)
    out = []
    for k in range((((1 << width) - 1) >> sd) + 1):
        t = (k << sd) + ((1 << (sd - 1)) if sd else 0)
        out.append(round(math.exp(-t / 2**frac) * 2**15))
        if out[-1] == 0:
            break
    return out, sd


def _ref_row(row, keep, table, sd, frac_out, hi):
    kept = [int(v) for v, ok in zip(row, keep, strict=True) if ok]
    if not kept:
        return [0] * len(row)
    m = max(kept)
    e = [table[min((m - int(v)) >> sd, len(table) - 1)] if ok else 0 for v, ok in zip(row, keep, strict=True)]
    s = sum(e)
    inv = ((1 << 46) + s // 2) // s
    return [min(hi, (v * inv + (1 << (45 - frac_out))) >> (46 - frac_out)) for v in e]


CASES = [("int8", False, 11), ("int16", True, 12)]


@pytest.mark.parametrize("precision,causal,seed", CASES)
def test_emulated_rows_of_16_keys_match_an_integer_reference(precision, causal, seed):
    torch.manual_seed(seed)
    m = Mha(causal).eval()
    x, pad = _case(seed)
    em = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                         config={"precision": precision})
    tr = em.trace(em.quantise_input(x), mask=em.quantise_mask(pad, x.shape[0]))
    keep = ~pad
    rule = np.tril(np.ones((T, T), dtype=bool)) if causal else np.ones((T, T), dtype=bool)
    nodes = [n for n in em.graph.nodes if n.op == "softmax"]
    assert len(nodes) == 2
    for node in nodes:
        tin, tout = node.types.input, node.types.output
        table, sd = _exp_table(tin.width, tin.frac)
        s, p = tr[node.inputs[0]], tr[node.outputs[0]]
        for i in range(x.shape[0]):
            want = [_ref_row(s[i, r], rule[r] & keep[i], table, sd, tout.frac, tout.max_code) for r in range(T)]
            assert np.array_equal(p[i], np.array(want)), (node.name, i)
        assert np.all(p[0] == 0)  # every key padded: every output 0
        # one key kept: it takes the whole row where the rule lets the row see it (causal: rows 5..15), the
        # other rows keep no key and give 0
        assert np.all(np.delete(p[1], 5, axis=1) == 0) and np.array_equal(p[1][:, 5] > 0, rule[:, 5])


@pytest.mark.parametrize("precision,causal,seed", CASES)
def test_masked_vector_rows_run_bit_exact_on_x86(precision, causal, seed):
    torch.manual_seed(seed)
    m = Mha(causal).eval()
    x, pad = _case(seed)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                        config={"precision": precision, "batch": 8})
    text = d.files["src/layers.h"]
    assert text.count("static constexpr unsigned RS = ") == 2  # both heads' softmaxes read the run-time mask
    assert text.count("static constexpr bool VEC = true;  // vector rows") == 2
    assert text.count(f"static constexpr bool MASKED = {'true' if causal else 'false'};") == 2
    v = d.verify(x[:16], mask=pad[:16])  # two graph iterations: samples 0..2 in the first
    assert v.ok, v.verdict()


def test_the_cycle_model_counts_the_keep_lanes():
    base = pa.softmax_vector_cycles(32, 16)
    rt = pa.softmax_vector_cycles(32, 16, runtime=True)
    both = pa.softmax_vector_cycles(32, 16, runtime=True, constant=True)
    assert rt - base == 32 * pa.SM_VEC_KEEP_CYCLES  # one 16-lane vector per row
    assert both - rt == 32 * pa.SM_VEC_CONST_KEEP_CYCLES
    assert pa.softmax_vector_cycles(32, 16, constant=True) == base  # no run-time mask: no keep lanes
    assert rt < pa.softmax_cycles(32, 16) + 32 * 16 * 2  # below the scalar rows + their keep bytes
    # a run-time mask takes the vector rows, a constant mask alone the scalar rows
    class Types:
        is_float = False
    assert pa.softmax_vectorised(Types, 16, masked=True, runtime=True)
    assert not pa.softmax_vectorised(Types, 16, masked=True)
    assert not pa.softmax_vectorised(Types, 12, masked=True, runtime=True)
