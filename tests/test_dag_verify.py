"""DAG designs run on x86 (issue 7 item 3): the generated project (Dense, residual Add, LayerNorm
kernels, memory-tile links with fan-out, skip paths and transposed reads) built against the shim
and compared bit for bit with the emulator on edge-value and random inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_dag_plan import CatSplit, MiniMixer, Residual

import aieflow
from aieflow.dag.design import DagDesign


def _compile(model, shape, precision, batch=8, seed=0):
    torch.manual_seed(seed)
    x = np.random.default_rng(seed).standard_normal((64, *shape)).astype(np.float32)
    d = aieflow.compile(model.eval(), device="vek280", example_input=x[:4], calibration=x,
                        config={"precision": precision, "batch": batch})
    assert isinstance(d, DagDesign)
    return d, x


@pytest.mark.parametrize("precision", ["int8", "int16"])
def test_residual_mlp_runs_bit_exact_on_x86(precision):
    d, x = _compile(Residual(), (32,), precision)
    v = d.verify(samples=48)  # 16 edge-value rows, then uniform random codes
    assert v.ok, v.verdict()
    assert v.values == 48 * 32
    v2 = d.verify(x[:20] * 3.0)  # the user's float samples, saturating some codes
    assert v2.ok, v2.verdict()


@pytest.mark.parametrize("precision", ["int8", "int16"])
def test_mixer_block_runs_bit_exact_on_x86(precision):
    # LayerNorm -> transpose -> Dense -> Dense -> transpose + skip; LayerNorm -> Dense -> Dense + skip
    d, x = _compile(MiniMixer(), (16, 32), precision, batch=2)
    v = d.verify(samples=24)
    assert v.ok, v.verdict()
    assert v.values == 24 * 16 * 32
    # the project holds what the emulator predicts for its example inputs: golden = predict
    assert "src/kernels/dag_kernels.h" in d.files and "data/golden_out_y.txt" in d.files


class KernelTransposes(torch.nn.Module):
    """A LayerNorm over the tokens (it receives the input in source layout and transposes in its
    memory) and a residual Add whose output is read transposed (it writes it transposed)."""

    def __init__(self):
        super().__init__()
        self.ln, self.a, self.t = torch.nn.LayerNorm(16), torch.nn.Linear(16, 16), torch.nn.Linear(32, 8)

    def forward(self, x):  # x: [16 tokens, 32 channels]
        h = self.ln(x.transpose(1, 2))
        return self.t((h + self.a(h)).transpose(1, 2))


@pytest.mark.parametrize("precision", ["int8", "int16"])
def test_kernel_side_transposes_run_bit_exact_on_x86(precision):
    d, x = _compile(KernelTransposes(), (16, 32), precision, batch=2)
    assert d.plan.rows["ln"].in_transposed == (True,) and d.plan.rows["add"].out_transposed
    assert not any(k.word_problems() for k in d.plan.links)  # every DMA pattern moves whole 32-bit words
    v = d.verify(samples=20)
    assert v.ok, v.verdict()
    assert v.values == 20 * 16 * 8


def test_concat_and_split_views_run_bit_exact_on_x86():
    # a concat written by a LayerNorm, the input PLIO and a Dense; read whole-transposed and as two slices
    d, x = _compile(CatSplit(), (8, 16), "int8", batch=2)
    v = d.verify(samples=20)
    assert v.ok, v.verdict()
    assert v.values == 20 * 8 * 48
    v2 = d.verify(x[:6] * 4.0)  # saturating codes through every writer
    assert v2.ok, v2.verdict()


def test_saved_dag_design_has_plan_links_and_estimate(tmp_path):
    d, _ = _compile(Residual(), (32,), "int8")
    out = d.save(tmp_path / "res")
    import json

    meta = json.loads((out / "design.json").read_text())
    assert meta["kind"] == "dag" and set(meta["nodes"]) == {"fc1", "fc2", "add"}
    assert len(meta["links"]) == 5 and meta["performance"]["interval_ns"] > 0
    assert (out / "project" / "src" / "graph.h").read_text().count("adf::shared_buffer<") >= 5
