"""The x86 shim's ``aie::lut`` / ``aie::parallel_lookup`` (x86/include/aieflow_shim/lut.hpp) against
UG1529 / UG1603's semantics written out here: the physical table layout (blocks of 128 bits on AIE-ML,
256 on AIE-MLv2, each written twice, in two arrays) built in Python, the index
``(x >> step_bits) + bias`` clamped (saturate) or reduced modulo the size (truncate)."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "src" / "aieflow" / "x86" / "include"
SOURCE = Path(__file__).resolve().parent / "shim_cases" / "lut.cpp"
CXX = shutil.which("g++")
FLAGS = ["-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror"]
ARCH = {20: (4, 128), 21: (8, 256)}  # __AIE_ARCH__ -> (parallel accesses, repeat bits)

pytestmark = pytest.mark.skipif(CXX is None, reason="g++ not found")


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[int, Path]:
    out = tmp_path_factory.mktemp("lut")
    exes = {}
    for arch, (p, _) in ARCH.items():
        exe = out / f"lut_{arch}"
        subprocess.run([CXX, *FLAGS, f"-D__AIE_ARCH__={arch}", f"-DAIEFLOW_LUT_P={p}", "-I", str(INCLUDE),
                        str(SOURCE), "-o", str(exe)], check=True, capture_output=True, text=True, timeout=300)
        exes[arch] = exe
    return exes


def layout(values: list[int], repeat_bits: int) -> list[int]:
    """The documented int16 layout: blocks of repeat_bits / 16 values, each block twice."""
    v = repeat_bits // 16
    out = []
    for b in range(0, len(values), v):
        block = values[b:b + v] + [0] * (v - len(values[b:b + v]))
        out += block + block
    return out


def fetch(exe: Path, bits: int, policy: int, table: list[int], step: int, bias: int, idx: list[int],
          ab: list[int], cd: list[int]) -> subprocess.CompletedProcess:
    text = " ".join(str(x) for x in [bits, policy, len(table), step, bias, *ab, *cd, len(idx), *idx])
    return subprocess.run([str(exe)], input=text, capture_output=True, text=True, timeout=60)


def reference(table: list[int], step: int, bias: int, x: int, policy: int) -> int:
    i = (x >> step) + bias  # Python's >> on negative ints: floor, the arithmetic shift
    i = min(max(i, 0), len(table) - 1) if policy == 0 else i % len(table)
    return table[i]


@pytest.mark.parametrize("arch", sorted(ARCH))
@pytest.mark.parametrize("bits,size,step,bias", [(8, 256, 0, 128), (8, 64, 2, 32), (8, 32, 0, 0),
                                                 (16, 1024, 6, 512), (16, 1024, 6, 513), (16, 64, 10, 32)])
def test_parallel_lookup_matches_the_documented_index(programs, arch, bits, size, step, bias):
    rng = random.Random(arch * 1000 + size + step + bias)
    table = [rng.randint(-32768, 32767) for _ in range(size)]
    lo, hi = (-128, 127) if bits == 8 else (-32768, 32767)
    idx = [lo, hi, 0, -1, 1] + [rng.randint(lo, hi) for _ in range(123)]
    phys = layout(table, ARCH[arch][1])
    for policy in (0, 1) if size & (size - 1) == 0 else (0,):
        p = fetch(programs[arch], bits, policy, table, step, bias, idx, phys, phys)
        assert p.returncode == 0, p.stderr
        got = [int(s) for s in p.stdout.split()]
        assert got == [reference(table, step, bias, x, policy) for x in idx]


@pytest.mark.parametrize("arch", sorted(ARCH))
def test_a_table_not_in_the_documented_layout_aborts(programs, arch):
    table = list(range(100, 164))
    plain = table + table  # stored linearly twice: the layout of neither generation
    p = fetch(programs[arch], 8, 0, table, 0, 0, list(range(32)), plain, plain)
    assert p.returncode != 0 and "not the documented layout" in p.stderr
    other = layout(table, 256 if arch == 20 else 128)  # the other generation's layout
    p = fetch(programs[arch], 8, 0, table, 0, 0, list(range(32)), other, other)
    assert p.returncode != 0


def test_lut_is_refused_on_aie1_and_with_the_wrong_access_count():
    for arch, p in ((10, 4), (20, 8), (21, 4)):
        r = subprocess.run([CXX, *FLAGS, f"-D__AIE_ARCH__={arch}", f"-DAIEFLOW_LUT_P={p}", "-I", str(INCLUDE),
                            "-fsyntax-only", str(SOURCE)], capture_output=True, text=True, timeout=300)
        assert r.returncode != 0 and "aie::lut" in r.stderr


def test_an_aie1_build_that_uses_no_lut_compiles(tmp_path):
    """aie.hpp includes lut.hpp; its AIE1 refusal fires on a use only, not on every AIE1 build (a
    non-dependent false assertion in the class template failed every AIE1 kernel)."""
    src = tmp_path / "plain.cpp"
    src.write_text("#include <adf.h>\nint main() { return 0; }\n")
    r = subprocess.run([CXX, *FLAGS, "-D__AIE_ARCH__=10", "-I", str(INCLUDE), "-fsyntax-only", str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
