"""The vector rows of the masked softmax (issue 19, dag_kernels.h SoftmaxVec KEYED in SoftmaxPadded): a
run-time key padding mask over 16-key rows takes the vector form.  Random paddings (not only prefixes),
a fully padded sample, a sample keeping one key, a causal attention mask combined; int8 and int16:
the emulated softmax codes against an independent integer reference (its own exp table from the
definition, Python integers), then the design's x86 run bit for bit against the emulation.  Also: the
kernel's config names the vector rows, and the cycle model follows the form."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mask_reference import Mha as _Mha
from mask_reference import exp_table, ref_row

import aieflow
from aieflow.perf import activation as pa

T, E = 16, 16


def Mha(causal=False):
    return _Mha(T, E, causal)


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
        table, sd = exp_table(tin.width, tin.frac)
        s, p = tr[node.inputs[0]], tr[node.outputs[0]]
        for i in range(x.shape[0]):
            want = [ref_row(s[i, r], rule[r] & keep[i], table, sd, tout.frac, tout.max_code) for r in range(T)]
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
