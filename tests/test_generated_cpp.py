"""The generated C++ compiles warning-free against the x86 shim of the AIE API / ADF.

This checks syntax and types of every kernel instantiation and of the ADF graph (it does not run
them: executing the kernels bit-exactly against the emulator is the x86 harness's job).
"""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources

import numpy as np
import pytest
from cases import GENERATION_PRECISIONS

import aieflow
from aieflow.model_zoo import torch_mlp

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ is not installed; cannot compile generated C++")
SHIM = resources.files("aieflow").joinpath("x86/include")
FLAGS = ["-std=c++20", "-O0", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off"]

CASES = GENERATION_PRECISIONS


@pytest.mark.parametrize("device,precision", CASES)
def test_generated_project_compiles_against_shim(tmp_path, device, precision):
    net = torch_mlp([40, 72, 19, 6], seed=1)
    x = np.random.default_rng(0).standard_normal((64, 40)).astype(np.float32)
    cfg = {"precision": precision, "layers": {"0": {"parallelism": {"cas_len": 3, "cas_num": 2}}}}
    d = aieflow.compile(net, device=device, example_input=x[:16], calibration=x, config=cfg)
    out = d.save(tmp_path / "design")
    src = out / "project" / "src"
    arch = str(d.device.generation.arch_macro)
    # graph.cpp includes every kernel class, weight header and the graph: one syntax pass covers all.
    units = [src / "graph.cpp", *sorted((src / "kernels").glob("*.cc"))]
    for unit in units:
        r = subprocess.run(
            [GXX, *FLAGS, "-fsyntax-only", f"-D__AIE_ARCH__={arch}", f"-I{SHIM}", f"-I{src}", f"-I{src / 'kernels'}", str(unit)],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, f"{unit.name}:\n{r.stderr[:3000]}"
    roles = {t for t in ("DenseSingle", "DenseFirst", "DenseMiddle", "DenseLast") if t in d.files["src/graph.h"]}
    assert {"DenseFirst", "DenseMiddle", "DenseLast"} <= roles  # the cascade roles were all instantiated


def test_shim_rejects_a_broken_kernel(tmp_path):
    """The compile check can fail: an undeclared shift constant is an error."""
    net = torch_mlp([16, 8], seed=0)
    x = np.zeros((8, 16), dtype=np.float32) + 0.5
    d = aieflow.compile(net, device="vek280", example_input=x, config={"precision": "int8"})
    out = d.save(tmp_path / "design")
    src = out / "project" / "src"
    layers = (src / "layers.h").read_text().replace("int SHIFT =", "int SHIFT_TYPO =")
    (src / "layers.h").write_text(layers)
    r = subprocess.run(
        [GXX, *FLAGS, "-fsyntax-only", "-D__AIE_ARCH__=20", f"-I{SHIM}", f"-I{src}", f"-I{src / 'kernels'}", str(src / "graph.cpp")],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "SHIFT" in r.stderr
