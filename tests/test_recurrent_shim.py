"""C++ test of the shim's free-running helpers (tests/shim_cases/freerun.cpp)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CXX = shutil.which("g++")


@pytest.mark.skipif(CXX is None, reason="g++ not found: the x86 shim tests need a C++20 compiler")
def test_freerun_helpers(tmp_path):
    exe = tmp_path / "freerun"
    flags = ["-std=c++20", "-O1", "-Wall", "-Wextra", "-Werror", "-D__AIE_ARCH__=10"]
    subprocess.run([CXX, *flags, f"-I{ROOT / 'src/aieflow/x86/include'}", str(ROOT / "tests/shim_cases/freerun.cpp"),
                    "-o", str(exe)], check=True, capture_output=True, text=True)
    res = subprocess.run([str(exe)], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr
