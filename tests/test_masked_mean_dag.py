"""Masked mean pooling mapped onto the array (issue 19, dag_kernels.h MaskedMean): a tagger whose pooled
tokens feed a Dense head compiles on the DAG path, its masked mean's codes equal an independent integer
reference, the generated C++ verifies bit-exact against predict on x86 (VEK280 int8 and int16, VEK385;
random paddings, a fully padded sample, samples keeping one token; vector and scalar feature loops), a
kernel that counts the dropped tokens in the divisor fails that verify, and the kernel's cost is the
count of its code (docs/performance.md)."""

from __future__ import annotations

import dataclasses

import jsonschema
import numpy as np
import pytest
import torch
from test_masked_mean import F_IN, T, _data, _padding, _pool_a, _pool_b, _reference, _reference_bf16
from torch import nn

import aieflow
from aieflow import design_schema
from aieflow.dag.perf import masked_mean_cycles
from aieflow.design import load
from aieflow.devices import get_device


class PooledTagger(nn.Module):
    """Particle embedding, masked mean pooling over the particles, a class head (the tagger's shape)."""

    def __init__(self, pool, features):
        super().__init__()
        self.pool = pool
        self.embed = nn.Linear(F_IN, features)
        self.head = nn.Linear(features, 5)

    def forward(self, x, mask):
        return self.head(self.pool(self.embed(x), mask))


CASES = [  # device, precision, features (16: the vector sums; 24: the scalar loop), pooling form
    ("vek280", "int8", 16, _pool_a),
    ("vek280", "int16", 16, _pool_b),
    ("vek280", "int8", 24, _pool_b),
    ("vek385", "int8", 24, _pool_a),
]


@pytest.mark.parametrize(("device", "precision", "features", "pool"), CASES)
def test_masked_mean_maps_and_verifies_bit_exact_on_x86(device, precision, features, pool):
    torch.manual_seed(11)
    m, x, pad = PooledTagger(pool, features).eval(), _data(11, 64), _padding(11, 64, full=True)
    d = aieflow.compile(m, device=device, example_input=x[:1], calibration=(x, pad),
                        config={"precision": precision, "batch": 16})
    assert type(d).__name__ == "DagDesign" and d.resources()["plio_in"] == 2
    (node,) = [n for n in d.graph.nodes if n.op == "masked_mean"]
    assert f"aieflow::MaskedMean<aieflow_design::{node.name}_cfg>" in d.files["src/graph.h"]
    assert f"T = {T}, N = {features}" in d.files["src/layers.h"]
    # predict's codes of the pooling against the reference written from the definition (Fractions)
    keep = (~pad).astype(np.uint8)
    tr = d.trace(d.quantise_input(x), mask=d.quantise_mask(pad, x.shape[0]))
    got, codes = tr[node.outputs[0]], tr[node.inputs[0]]
    assert np.array_equal(codes, np.round(codes))  # the Dense's codes (the emulator may carry them as floats)
    codes = codes.astype(np.int64)
    assert np.array_equal(got, _reference(codes, keep))
    assert np.all(got[2] == 0) and np.array_equal(got[0], codes[0, 0])  # none kept; one kept
    # the generated C++: the same samples (the fully padded one, those keeping one token) bit-exact
    v = d.verify(x[:32], mask=pad[:32])  # two graph iterations
    assert v.ok, v.verdict()
    ref = m(torch.from_numpy(x[3:]), torch.from_numpy(pad[3:])).detach().numpy()  # no sample keeping none
    assert np.abs(d.predict(x[3:], mask=pad[3:]) - ref).max() <= (0.1 if precision == "int8" else 0.01) * np.abs(ref).max()


@pytest.mark.parametrize(("device", "features", "pool"), [("vek280", 16, _pool_b), ("vek385", 24, _pool_a)])
def test_bf16_masked_mean_maps_and_verifies_bit_exact_on_x86(device, features, pool):
    """bf16 on VEK280 (16 features: the vector sums in accfloat lanes) and VEK385 (24: the scalar float loop):
    the pooling's values equal the reference written from the definition (test_masked_mean.py), the generated
    C++ bit-exact with predict on x86 (a fully padded sample, samples keeping one token), predict within the
    documented bf16 tolerance of float32 PyTorch (docs/numerics.md: max |y - torch| <= 2^-6 max |torch|)."""
    torch.manual_seed(14)
    m, x, pad = PooledTagger(pool, features).eval(), _data(14, 64), _padding(14, 64, full=True)
    d = aieflow.compile(m, device=device, example_input=x[:1], calibration=(x, pad),
                        config={"precision": "bf16", "batch": 16})
    (node,) = [n for n in d.graph.nodes if n.op == "masked_mean"]
    assert str(node.types) == "bf16" and all(str(d.plan.node(n).types.output) == "bf16" for n in d.plan.compute
                                              if d.plan.node(n).op == "dense")
    assert f"aieflow::MaskedMean<aieflow_design::{node.name}_cfg>" in d.files["src/graph.h"]
    assert "using TI = bfloat16;" in d.files["src/layers.h"]
    tr = d.trace(d.quantise_input(x), mask=d.quantise_mask(pad, x.shape[0]))
    got = tr[node.outputs[0]]
    assert np.array_equal(got, _reference_bf16(tr[node.inputs[0]], (~pad).astype(np.uint8)))
    assert not got[2].any() and np.array_equal(got[0], tr[node.inputs[0]][0, 0])  # none kept; one kept
    v = d.verify(x[:32], mask=pad[:32])  # two graph iterations
    assert v.ok, v.verdict()
    with torch.no_grad():
        ref = m(torch.from_numpy(x[3:]), torch.from_numpy(pad[3:])).numpy()  # no sample keeping none
    assert np.abs(d.predict(x[3:], mask=pad[3:]) - ref).max() <= 2.0**-6 * np.abs(ref).max()


def test_a_kernel_counting_the_dropped_tokens_fails_verify():
    torch.manual_seed(12)
    m, x, pad = PooledTagger(_pool_a, 16).eval(), _data(12, 64), _padding(12, 64, full=True)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                        config={"precision": "int8", "batch": 16})
    src = d.files["src/kernels/dag_kernels.h"]
    bad_src = src.replace("k += m[t] != 0 ? 1 : 0;", "k += 1;")  # the divisor counts every token
    assert bad_src != src
    bad = dataclasses.replace(d, files={**d.files, "src/kernels/dag_kernels.h": bad_src})
    v = bad.verify(x[:16], mask=pad[:16])
    assert not v.ok and v.mismatches > 0, v.verdict()


def test_the_kernel_cost_is_the_count_of_its_code(tmp_path):
    # per sample: 2 cycles per token for the kept count; the sums: 1 cycle per token and 16 features
    # (vector) or 2 per token and feature (scalar); per feature a 100-cycle divide and 2 for the lane
    assert masked_mean_cycles(2, 12, 16) == 2 * (12 * 2 + 12 * 1 + 16 * (100 + 2))
    assert masked_mean_cycles(3, 12, 24) == 3 * (12 * 2 + 24 * 12 * 2 + 24 * (100 + 2))
    torch.manual_seed(13)
    m, x, pad = PooledTagger(_pool_a, 16).eval(), _data(13, 32), _padding(13, 32)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                        config={"precision": "int8", "batch": 16})
    (node,) = [n for n in d.graph.nodes if n.op == "masked_mean"]
    rp = d.plan.rows[node.name]
    assert (rp.rows, rp.per_sample, rp.features) == (16, 1, 16) and 16 % rp.parts == 0
    stage = {s["name"]: s for s in d.to_json()["performance"]["stages"]}[node.name]
    cycles = stage["occupancy_ns"] * get_device("vek280").clock_hz / 1e9
    samples = 16 // rp.parts
    # the kernel call (16 cycles), the body, three ports' lock acquire (3) and release (1)
    assert cycles == pytest.approx(16 + samples * (12 * 2 + 12 + 16 * 102) + 3 * 4)
    # design.json holds it (the schema, a saved design loads and predicts the same codes)
    jsonschema.validate(d.to_json(), design_schema.schema())
    d.save(tmp_path / "d")
    e = load(tmp_path / "d")
    assert np.array_equal(e.predict(x, mask=pad, raw=True), d.predict(x, mask=pad, raw=True))
