"""The jet tagger bit-exact on x86 as a whole model (issue 19 "Must hold"), beyond VEK280 int8 (the
benchmark's run) and bf16 (tests/test_attention_bf16.py): VEK280 int16 and VEK385 int8.  The
benchmark's tagger (benchmarks/attention.py, one definition) with one encoder block, which keeps
every op kind: the ReLU embedding, LayerNorm, 2-head attention (Q K^T, softmax, A V), residual
Adds, a GELU MLP, mean pooling, a Linear head and softmax; and with the benchmark's two stacked
blocks (the second block reads the first's quantised output).  One x86 build per configuration
(minutes on the loaded 2-core machine, then cached), 2 edge-value samples and 2 of the tagger's data.
The "Must hold" line itself, without x86 builds: the two-block tagger compiles for VEK280 / VEK385 in
int8 / int16 and VEK280 bf16, predicts within tolerance of PyTorch and reports its latency and throughput."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

import aieflow
from aieflow.dag.design import DagDesign

# of the output's largest magnitude: int8 / int16 as tests/test_attention.py, bf16 docs/numerics.md (2^-6)
TOLERANCE = {"int8": 0.1, "int16": 0.01, "bf16": 2.0**-6}


def _benchmark():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "attention.py"
    spec = importlib.util.spec_from_file_location("_aieflow_attention_benchmark_tagger", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.parametrize("blocks", [1, 2], ids=["one_block", "two_blocks"])
@pytest.mark.parametrize("device, precision", [("vek280", "int16"), ("vek385", "int8")])
def test_tagger_predicts_and_verifies_bit_exact_on_x86(device, precision, blocks):
    bench = _benchmark()
    m, x = bench.model("tagger", blocks=blocks), bench.data(512)
    d = aieflow.compile(m, device=device, example_input=x[:1], calibration=x, config={"precision": precision})
    assert isinstance(d, DagDesign)
    nodes = [d.plan.node(n) for n in d.plan.compute]
    ops = [n.op for n in nodes]
    assert all(n.types.output.width == int(precision[3:]) for n in nodes)  # every computing layer
    # per block 2 heads x (Q K^T, A V) and a softmax per head, + the head's softmax
    assert ops.count("matmul") == 4 * blocks and ops.count("softmax") == 2 * blocks + 1
    assert ops.count("layernorm") >= 2 * blocks
    assert {"layernorm", "add", "dense"} <= set(ops)
    assert any(n.op == "activation" and n.attrs.get("function") == "gelu" for n in nodes)
    # the mean pooling: a Dense over the 16 tokens to one row (frontends/pooling.py)
    assert any(n.op == "dense" and np.asarray(n.params["weight_q"]).shape == (bench.PARTICLES, 1) for n in nodes)
    with torch.no_grad():
        ref = m(torch.from_numpy(x[:64])).numpy()
    y = d.predict(x[:64])
    assert y.shape == ref.shape == (64, 1, bench.CLASSES)
    assert np.abs(y - ref).max() <= TOLERANCE[precision] * np.abs(ref).max(), np.abs(y - ref).max()
    # the verify's first samples are constant rows (every token the same: attention cannot show),
    # so the tagger's own data too (tokens that differ); one build, two runs
    for v in (d.verify(samples=2), d.verify(x[:2])):
        assert v.ok, v.verdict()
        assert v.values == 2 * bench.CLASSES


def _tagger_macs(bench, blocks: int) -> int:
    """Multiply-accumulates of one sample of the tagger, counted from its definition: the embedding, per
    block the Q / K / V / O projections, Q K^T and A V over the heads (together [P, E] by [E, P] and
    [P, P] by [P, E]), the MLP's two Linears; the mean over the particles (a weighted sum of P rows);
    the head."""
    p, f, e, c = bench.PARTICLES, bench.FEATURES, bench.EMBED, bench.CLASSES
    block = 4 * p * e * e + 2 * p * p * e + 2 * p * e * (2 * e)
    return p * f * e + blocks * block + p * e + e * c


@pytest.mark.parametrize("device, precision", [("vek280", "int8"), ("vek280", "int16"), ("vek385", "int8"),
                                               ("vek385", "int16"), ("vek280", "bf16")])
def test_two_block_tagger_compiles_predicts_and_reports_latency_and_throughput(device, precision):
    """Issue 19 "Must hold" as a test (benchmarks/attention.py reports the same figures): the benchmark's
    two-block tagger compiles for VEK280 / VEK385 in int8 / int16 (and bf16 on VEK280), predicts within
    the precision's tolerance of PyTorch, and its estimate gives a latency and a throughput that is
    2 x MACs x batch x replicas / interval with the MACs counted from the model here.  No x86 build
    (the test above verifies the tagger on x86)."""
    bench = _benchmark()
    m, x = bench.model("tagger", blocks=2), bench.data(512)
    d = aieflow.compile(m, device=device, example_input=x[:1], calibration=x, config={"precision": precision})
    assert isinstance(d, DagDesign) and d.device.key == device
    outs = [d.plan.node(n).types.output for n in d.plan.compute]  # every computing layer in the precision
    assert all(t.name == "bf16" if precision == "bf16" else t.width == int(precision[3:]) for t in outs)
    with torch.no_grad():
        ref = m(torch.from_numpy(x[:16])).numpy()
    y = d.predict(x[:16])
    assert y.shape == ref.shape == (16, 1, bench.CLASSES)
    assert np.abs(y - ref).max() <= TOLERANCE[precision] * np.abs(ref).max(), np.abs(y - ref).max()
    e = d.estimate()
    assert e.latency_ns >= e.interval_ns > 0 and e.batch >= 1 and e.replicas >= 1
    want = 2 * _tagger_macs(bench, 2) * e.batch * e.replicas / (e.interval_ns * 1e-9)
    assert e.throughput_ops_per_s == pytest.approx(want, rel=1e-9)
    s = d.summary()
    assert f"latency {e.latency_ns / 1e3:,.2f} us" in s and f"interval {e.interval_ns / 1e3:,.2f} us" in s
