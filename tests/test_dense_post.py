"""Activations and softmax fused into the Dense kernel before them (ops/post.py, dense.h DensePost):
a Dense chain with an activation between layers and a softmax head maps as a chain on every
generation (AIE1 included, which has no memory tiles for a standalone kernel's links), verifies
bit-exact on x86, and its plan, memory and cycle model account for the post."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

import aieflow
from aieflow.design import Design
from aieflow.errors import ConfigError

# perf/activation.py's assumed constants, typed here from its docstrings: table 4 cycles per
# value, interpolation 12; softmax 2 + 4 + 8 per value and 300 per row; a copy 2 per value.
TABLE, INTERP, SM_VALUE, SM_ROW, COPY = 4, 12, 14, 300, 2


def _tagger(mid=nn.Sigmoid):
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), mid(), nn.Linear(32, 5),
                         nn.Softmax(dim=-1)).eval()


def _data(n=128, seed=3):
    return np.random.default_rng(seed).standard_normal((n, 16)).astype(np.float32)


def _softmax_ref(x: np.ndarray, table: np.ndarray, sd: int, fo: int, hi: int) -> np.ndarray:
    """The integer softmax as activation_fixed.h's header states it, one value at a time."""
    out = np.zeros(x.shape, dtype=np.int64)
    for r, row in enumerate(x.astype(np.int64).tolist()):
        m = max(row)
        e = [int(table[min((m - v) >> sd, len(table) - 1)]) for v in row]
        s = sum(e)
        inv = ((1 << 46) + s // 2) // s
        out[r] = [min(hi, (ei * inv + (1 << (45 - fo))) >> (46 - fo)) for ei in e]
    return out


@pytest.mark.parametrize("device, precision", [("vck190", "int8"), ("vek280", "int16"), ("vek385", "int8")])
def test_tagger_with_softmax_head_maps_as_a_chain_and_verifies_bit_exact(device, precision):
    x = _data()
    d = aieflow.compile(_tagger(nn.Tanh if precision == "int16" else nn.Sigmoid), device=device,
                        example_input=x[:8], calibration=x, config={"precision": precision, "batch": 4})
    assert type(d) is Design  # the chain, not the DAG mapping
    layers = d.layers()
    assert [n.plan.post for n in layers] == ["", "interp" if precision == "int16" else "table", "softmax"]
    assert layers[-1].plan.cas_num == 1
    est = d.estimate()
    assert est.tiles_used == sum(n.plan.tiles for n in layers)  # no tile of their own
    # no link of their own: the memory tiles are the chain's links between Dense layers (AIE-ML)
    assert est.memory_tiles_used <= sum(n.plan.link == "memtile" for n in layers)
    if device == "vck190":
        assert est.memory_tiles_used == 0
    head = d.files["src/layers.h"]
    assert "POST = 2" in head and "POST = 1" in head and "src/kernels/activation_fixed.h" in d.files
    v = d.verify(samples=48)  # edge-value rows first, then random codes
    assert v.ok, v.verdict()
    v2 = d.verify(x[:20] * 6.0)  # saturating logits
    assert v2.ok, v2.verdict()
    # the composition: the softmax node reads the Dense output codes (independent integer softmax)
    tr = d.trace(d.quantise_input(x[:16]))
    sm = next(n for n in d.graph.nodes if n.op == "softmax")
    t = sm.types
    want = _softmax_ref(tr[sm.inputs[0]], sm.params["table"], t.index_shift, t.output.frac, t.output.max_code)
    assert np.array_equal(tr[sm.outputs[0]].astype(np.int64), want)
    assert np.allclose(d.predict(x[:16]).sum(axis=1), 1.0, atol=0.05)


def test_post_memory_and_cycles_are_accounted():
    x = _data()
    d = aieflow.compile(_tagger(), device="vck190", example_input=x[:8], calibration=x, config={"batch": 4})
    mid, head = d.layers()[1], d.layers()[2]
    sig = next(n for n in d.graph.nodes if n.op == "activation")
    sm = next(n for n in d.graph.nodes if n.op == "softmax")
    # memory: the int32 table and one output buffer of SRS codes (and a softmax's row scratch)
    p = mid.plan
    assert p.memory.post >= 4 * sig.params["table"].size + p.batch_pad * p.n_slice
    assert head.plan.memory.post >= 4 * sm.params["table"].size + head.plan.batch_pad * head.plan.n_slice + 4 * 5
    assert p.memory.total <= 32768 and head.plan.memory.total <= 32768  # AIE1 data memory
    # cycles: the post on the tile that stores the output, by the documented constants
    from aieflow.perf.kernel import layer_kernel_cycles

    role = "single" if p.cas_len == 1 else "last"
    k = layer_kernel_cycles(p, mid.types, False, d.device)[role]
    assert k.post == p.batch * p.n_slice * TABLE
    q = head.plan
    k = layer_kernel_cycles(q, head.types, False, d.device)["single" if q.cas_len == 1 else "last"]
    assert k.post == q.batch * (5 * SM_VALUE + SM_ROW) + q.batch * (5 + q.n_slice) * COPY
    bare = layer_kernel_cycles(dataclasses.replace(q, post=""), head.types, False, d.device)
    assert k.cycles == pytest.approx(bare["single" if q.cas_len == 1 else "last"].cycles + k.post)


def test_softmax_head_refuses_more_than_one_cascade_row_by_name():
    x = _data()
    model = nn.Sequential(nn.Linear(16, 64), nn.Softmax(dim=-1)).eval()
    with pytest.raises(ConfigError, match=r"cas_num=2.*softmax '1'.*last tile") as e:
        aieflow.compile(model, device="vek280", example_input=x[:8], calibration=x,
                        config={"layers": {"0": {"parallelism": {"cas_num": 2}}}})
    assert e.value.layer == "0" and "cas_num: 1" in e.value.hint
    d = aieflow.compile(model, device="vek280", example_input=x[:8], calibration=x,
                        config={"layers": {"0": {"parallelism": {"cas_len": 2}}}})
    assert (d.layers()[0].plan.cas_len, d.layers()[0].plan.cas_num) == (2, 1)  # the post in the last column
    assert d.verify(samples=24).ok


def test_a_searched_target_respects_the_softmax_row_and_compiles_to_its_estimate():
    x = _data()
    d = aieflow.compile(_tagger(), device="vek280", example_input=x[:8], calibration=x,
                        config={"target": "latency", "batch": 4})
    assert d.layers()[-1].plan.cas_num == 1
    ex = aieflow.explore(_tagger(), device="vek280", example_input=x[:8], calibration=x,
                         config={"target": "latency", "batch": 4})
    chosen = ex.chosen
    assert chosen.latency_ns == pytest.approx(d.estimate().latency_ns)


def test_a_standalone_activation_stays_a_dag_kernel_where_it_cannot_fuse():
    """An activation whose Dense output is also read elsewhere (fan-out) is not fused: the DAG
    mapping runs it standalone (AIE-ML), and AIE1 says why it cannot map."""

    class Fan(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 32)

        def forward(self, x):
            h = self.a(x)
            return self.b(torch.sigmoid(h)) + h

    x = _data()
    d = aieflow.compile(Fan().eval(), device="vek280", example_input=x[:8], calibration=x, config={"batch": 8})
    assert type(d).__name__ == "DagDesign"
    from aieflow.errors import PlanError

    with pytest.raises(PlanError, match="memory tiles"):
        aieflow.compile(Fan().eval(), device="vck190", example_input=x[:8], calibration=x)
