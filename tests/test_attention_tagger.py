"""The jet tagger bit-exact on x86 as a whole model (issue 19 "Must hold"), beyond VEK280 int8 (the
benchmark's run) and bf16 (tests/test_attention_bf16.py): VEK280 int16 and VEK385 int8.  The
benchmark's tagger (benchmarks/attention.py, one definition) with one encoder block, which keeps
every op kind: the ReLU embedding, LayerNorm, 2-head attention (Q K^T, softmax, A V), residual
Adds, a GELU MLP, mean pooling, a Linear head and softmax; and with the benchmark's two stacked
blocks (the second block reads the first's quantised output).  One x86 build per configuration
(minutes on the loaded 2-core machine, then cached), 2 edge-value samples and 2 of the tagger's data."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

import aieflow
from aieflow.dag.design import DagDesign

TOLERANCE = {"int8": 0.1, "int16": 0.01}  # as tests/test_attention.py: of the output's largest magnitude


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
