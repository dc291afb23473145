"""Tests of the header-only x86 shim of the AIE API / ADF subset (src/aieflow/x86/include).

The C++ programs in tests/shim_cases/ are compiled with g++ for AIE (__AIE_ARCH__=10) and AIE-ML
(__AIE_ARCH__=20) and their output is checked against references written here from the
documented semantics (Python integers and fractions, numpy), not against the shim's own code.

Builds are cached under the system temp directory, keyed by a hash of the compiler, the flags,
the shim headers and the test sources, so repeated runs only re-run the programs.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import math
import os
import random
import shutil
import struct
import subprocess
import tempfile
import threading
import zlib
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "src" / "aieflow" / "x86" / "include"
CASES = Path(__file__).resolve().parent / "shim_cases"
CXX = shutil.which("g++")
FLAGS = ["-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off"]
ARCHS = (10, 20)
PROGRAMS = ("srs", "mmul", "float", "io", "ops", "exec")

pytestmark = pytest.mark.skipif(
    CXX is None, reason="g++ not found: the x86 shim tests need a C++20 compiler"
)

# compile-only checks: name -> (source, extra flags, {arch: expected error substring or None})
COMPILE_CHECKS = {
    "good": ("compile_checks.cpp", ["-DCASE_GOOD"], {10: None, 20: None}),
    "bad_shape": (
        "compile_checks.cpp",
        ["-DCASE_BAD_SHAPE"],
        {10: "unsupported mmul shape", 20: "unsupported mmul shape"},
    ),
    "bad_shape_arch": (
        "compile_checks.cpp",
        ["-DCASE_BAD_SHAPE_ARCH"],
        {10: "unsupported mmul shape", 20: "unsupported mmul shape"},
    ),
    "sym_floor": ("compile_checks.cpp", ["-DCASE_SYM_FLOOR"], {10: "symmetric_floor", 20: None}),
    "bad_acc": (
        "compile_checks.cpp",
        ["-DCASE_BAD_ACC"],
        {10: "accumulator tag not allowed", 20: "accumulator tag not allowed"},
    ),
    "float_acc_int_operands": (
        "compile_checks.cpp",
        ["-DCASE_FLOAT_INT_ACC"],
        {10: "accumulator tag not allowed", 20: "accumulator tag not allowed"},
    ),
    "bf16_on_aie1": (
        "compile_checks.cpp",
        ["-DCASE_BF16_AIE1"],
        {10: "static assertion", 20: None},
    ),
    "graph": ("graph_check.cpp", [], {10: None, 20: None}),
}

HEADER_SNIPPETS = {
    "aie_hpp": "#include <aie_api/aie.hpp>\nint main() { return aie::zeros<int8, 16>()[0]; }\n",
    "aie_adf_hpp": (
        "#include <aie_api/aie_adf.hpp>\n"
        "void k(input_stream<int32>* s) { (void)readincr_v<4>(s); }\nint main() {}\n"
    ),
    "utils_hpp": (
        "#include <aie_api/utils.hpp>\nint main() { aie::print(aie::zeros<int16, 4>()); }\n"
    ),
    "adf_h_default_arch": (
        "#include <adf.h>\n"
        'static_assert(__AIE_ARCH__ == 20, "default architecture is AIE-ML");\n'
        'static_assert(AIEFLOW_SHIM, "AIEFLOW_SHIM is defined");\n'
        "static_assert(sizeof(int8) == 1 && sizeof(uint16) == 2 && sizeof(int64) == 8);\n"
        "int main() { aie::set_rounding(aie::rounding_mode::symmetric_ceil); }\n"
    ),
}


# ---------------------------------------------------------------------------------------------
# building (parallel, cached)
# ---------------------------------------------------------------------------------------------
def _cache_dir() -> Path:
    h = hashlib.sha256()
    h.update(subprocess.run([CXX, "--version"], capture_output=True, text=True).stdout.encode())
    h.update(" ".join(FLAGS).encode())
    for base in (INCLUDE, CASES):
        for p in sorted(base.rglob("*")):
            if p.is_file():
                h.update(str(p.relative_to(base)).encode())
                h.update(p.read_bytes())
    for name, text in sorted(HEADER_SNIPPETS.items()):
        h.update(name.encode() + text.encode())
    d = Path(tempfile.gettempdir()) / "aieflow-shim-tests" / h.hexdigest()[:20]
    d.mkdir(parents=True, exist_ok=True)
    return d


def _compile(cmd: list[str], record: Path, exe: Path | None) -> dict:
    """Run one compiler command unless its cached record exists (atomic, safe in parallel)."""
    if record.exists() and (exe is None or exe.exists()):
        return json.loads(record.read_text())
    tag = f".{os.getpid()}.{threading.get_ident()}.tmp"
    if exe is not None:
        cmd = [*cmd, "-o", str(exe) + tag]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if exe is not None and p.returncode == 0:
        os.replace(str(exe) + tag, exe)
    res = {"returncode": p.returncode, "stderr": p.stderr}
    Path(str(record) + tag).write_text(json.dumps(res))
    os.replace(str(record) + tag, record)
    return res


@pytest.fixture(scope="session")
def builds() -> dict:
    out = _cache_dir()
    jobs: dict = {}
    for prog in PROGRAMS:
        for arch in ARCHS:
            exe = out / f"{prog}_{arch}"
            cmd = [CXX, *FLAGS, f"-D__AIE_ARCH__={arch}", "-I", str(INCLUDE)]
            cmd += [str(CASES / f"{prog}.cpp")]
            jobs[("exe", prog, arch)] = (cmd, out / f"{prog}_{arch}.json", exe)
    for name, (src, extra, expect) in COMPILE_CHECKS.items():
        for arch in expect:
            cmd = [CXX, *FLAGS, f"-D__AIE_ARCH__={arch}", *extra, "-I", str(INCLUDE)]
            cmd += ["-fsyntax-only", str(CASES / src)]
            jobs[("check", name, arch)] = (cmd, out / f"check_{name}_{arch}.json", None)
    for name, text in HEADER_SNIPPETS.items():
        src = out / f"{name}.cpp"
        if not src.exists():
            tmp = out / f"{name}.{os.getpid()}.tmp"
            tmp.write_text(text)
            os.replace(tmp, src)
        cmd = [CXX, *FLAGS, "-I", str(INCLUDE), "-fsyntax-only", str(src)]
        jobs[("header", name, 0)] = (cmd, out / f"header_{name}.json", None)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        futs = {key: ex.submit(_compile, *job) for key, job in jobs.items()}
        results = {key: f.result() for key, f in futs.items()}
    for (kind, prog, arch), res in results.items():
        if kind == "exe":
            res["path"] = str(out / f"{prog}_{arch}")
    return results


def run(builds: dict, prog: str, arch: int, args=(), stdin: str = "", check: bool = True):
    res = builds[("exe", prog, arch)]
    if res["returncode"] != 0:
        pytest.fail(f"{prog}.cpp failed to compile for __AIE_ARCH__={arch}:\n{res['stderr']}")
    p = subprocess.run(
        [res["path"], *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    if check and p.returncode != 0:
        pytest.fail(f"{prog} {args} exited with {p.returncode}:\n{p.stderr}")
    return p


# ---------------------------------------------------------------------------------------------
# references from the documented semantics
# ---------------------------------------------------------------------------------------------
ROUNDINGS_AIE1 = [
    "floor",
    "ceil",
    "positive_inf",
    "negative_inf",
    "symmetric_inf",
    "symmetric_zero",
    "conv_even",
    "conv_odd",
]
ROUNDINGS_AIEML = ROUNDINGS_AIE1 + ["symmetric_floor", "symmetric_ceil"]
SATURATIONS = ["none", "truncate", "saturate", "symmetric"]
INT_TYPES = {
    "int8": (8, True),
    "uint8": (8, False),
    "int16": (16, True),
    "uint16": (16, False),
    "int32": (32, True),
    "uint32": (32, False),
}
# native accumulator lane widths: AIE has 48/80-bit lanes, AIE-ML 32/64-bit lanes
LANE_BITS = {
    10: {"acc32": 48, "acc48": 48, "acc64": 80, "acc80": 80},
    20: {"acc32": 32, "acc48": 64, "acc64": 64},
}


def wrap(v: int, bits: int, signed: bool = True) -> int:
    v %= 1 << bits
    if signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def round_shift(v: int, shift: int, mode: str) -> int:
    """v / 2**shift rounded to an integer as the named AIE rounding mode defines it."""
    x = Fraction(v, 1 << shift)
    lo, hi = math.floor(x), math.ceil(x)
    if lo == hi:
        return lo
    if mode == "floor":
        return lo
    if mode == "ceil":
        return hi
    if mode == "symmetric_floor":  # towards zero
        return lo if x > 0 else hi
    if mode == "symmetric_ceil":  # away from zero
        return hi if x > 0 else lo
    frac = x - lo
    if frac != Fraction(1, 2):
        return lo if frac < Fraction(1, 2) else hi
    return {
        "positive_inf": hi,
        "negative_inf": lo,
        "symmetric_inf": hi if x > 0 else lo,
        "symmetric_zero": lo if x > 0 else hi,
        "conv_even": lo if lo % 2 == 0 else hi,
        "conv_odd": lo if lo % 2 == 1 else hi,
    }[mode]


def saturate(v: int, bits: int, signed: bool, mode: str) -> int:
    lo = -(1 << (bits - 1)) if signed else 0
    hi = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    if mode in ("none", "truncate"):
        return wrap(v, bits, signed)
    if mode == "symmetric" and signed:
        lo = -hi
    return min(max(v, lo), hi)


def srs_ref(v: int, shift: int, rounding: str, sat: str, ty: str) -> int:
    bits, signed = INT_TYPES[ty]
    return saturate(round_shift(v, shift, rounding), bits, signed, sat)


def f32_bits(x) -> int:
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def bits_f32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]


def bf16_value(b: int) -> Fraction:
    """Exact value of a finite bfloat16 bit pattern (or 2**128 for the pattern after max)."""
    sign = -1 if b & 0x8000 else 1
    e, m = (b >> 7) & 0xFF, b & 0x7F
    if e == 0xFF:  # only reached as the rounding candidate above the largest finite value
        return sign * Fraction(2) ** 128
    if e == 0:
        return sign * Fraction(m, 1 << 7) * Fraction(2) ** -126
    return sign * (1 + Fraction(m, 1 << 7)) * Fraction(2) ** (e - 127)


def bf16_ref(f32: int) -> int:
    """float32 bits -> bfloat16 bits, round to nearest, ties to even (finite inputs / inf)."""
    if (f32 >> 23) & 0xFF == 0xFF:  # inf (NaN handled by the caller)
        return f32 >> 16
    x = Fraction(bits_f32(f32))
    down = f32 >> 16  # same sign, magnitude rounded down
    up = down + 1  # magnitude rounded up (may carry into the exponent / become inf)
    d_down, d_up = abs(x - bf16_value(down)), abs(bf16_value(up) - x)
    if d_down != d_up:
        return down if d_down < d_up else up
    return down if down % 2 == 0 else up


# ---------------------------------------------------------------------------------------------
# shift-round-saturate and accumulator wrap
# ---------------------------------------------------------------------------------------------
def _srs_cases(arch: int, rng: random.Random):
    roundings = ROUNDINGS_AIEML if arch >= 20 else ROUNDINGS_AIE1
    lines = []
    for tag, lane in LANE_BITS[arch].items():
        lane_min, lane_max = -(1 << (lane - 1)), (1 << (lane - 1)) - 1
        values = []
        # ties and the negative zero crossing: every value in [-12, 12] at small shifts
        values += [(v, s) for s in (1, 2, 3) for v in range(-12, 13)]
        values += [(v, 0) for v in (-300, -129, -128, -1, 0, 127, 128, 255, 256, 70000)]
        values += [(lane_min, 0), (lane_max, 0), (lane_min, 7), (lane_max, 7), (lane_max, 16)]
        values += [(lane_min, lane - 9), (lane_max, lane - 9), (-(1 << 20) - (1 << 9), 10)]
        for _ in range(12):
            s = rng.choice([0, 1, 4, 7, 8, 12, 15, 16, 20, 24, 31])
            values.append((rng.randint(lane_min, lane_max), s))
            values.append((rng.randint(-(1 << 24), 1 << 24), s))
        for rnd in roundings:
            for sat in SATURATIONS:
                for ty in INT_TYPES:
                    for v, s in values:
                        lines.append((tag, rnd, sat, ty, s, v))
    return lines


@pytest.mark.parametrize("arch", ARCHS)
def test_srs_all_modes(builds, arch):
    rng = random.Random(1234 + arch)
    cases = _srs_cases(arch, rng)
    stdin = "".join(f"srs {t} {r} {sa} {ty} {s} {v}\n" for t, r, sa, ty, s, v in cases)
    out = run(builds, "srs", arch, stdin=stdin).stdout.split()
    assert len(out) == len(cases)
    bad = []
    for (tag, rnd, sat, ty, s, v), got in zip(cases, out, strict=True):
        want = srs_ref(v, s, rnd, sat, ty)
        if int(got) != want:
            bad.append(f"{tag} {rnd} {sat} {ty} shift={s} value={v}: got {got}, want {want}")
    assert not bad, f"{len(bad)} mismatches, first ones:\n" + "\n".join(bad[:20])


def test_srs_tie_examples(builds):
    """A few hand-checked ties (value / 2**shift exactly halfway)."""
    cases = [
        # value, shift, rounding, expected
        (-6, 2, "conv_even", -2),  # -1.5
        (-10, 2, "conv_even", -2),  # -2.5
        (-6, 2, "conv_odd", -1),
        (-2, 2, "positive_inf", 0),  # -0.5
        (-2, 2, "negative_inf", -1),
        (-2, 2, "symmetric_inf", -1),
        (-2, 2, "symmetric_zero", 0),
        (2, 2, "symmetric_inf", 1),
        (2, 2, "symmetric_zero", 0),
        (-1, 2, "floor", -1),  # -0.25
        (-1, 2, "ceil", 0),
        (-1, 2, "symmetric_floor", 0),
        (-5, 2, "symmetric_ceil", -2),  # -1.25
    ]
    stdin = "".join(f"srs acc32 {r} none int16 {s} {v}\n" for v, s, r, _ in cases)
    got = [int(x) for x in run(builds, "srs", 20, stdin=stdin).stdout.split()]
    assert got == [e for *_, e in cases]
    for v, s, r, e in cases:  # the reference agrees with the hand-checked values
        assert round_shift(v, s, r) == e


@pytest.mark.parametrize("arch", ARCHS)
def test_accumulator_lane_widths_and_wrap(builds, arch):
    lanes = LANE_BITS[arch]
    cmds, want = [], []
    for tag, bits in lanes.items():
        cmds.append(f"bits {tag}")
        want.append(bits)
        for x in (2147483647, -2147483648, 123456789, -1, 1):
            for s in (0, 1, 8, 16, 17, 24, 32, 40, 48):
                cmds.append(f"fromvec {tag} {s} {x}")
                want.append(wrap(x << s, bits))
        for a, b, n in ((30000, 30000, 5), (-32768, 32767, 9), (32767, 32767, (1 << 18) + 3)):
            cmds.append(f"mac {tag} {a} {b} {n}")
            want.append(wrap(a * b * n, bits))
        for a, b, n in ((2147483647, 32767, 3), (-2147483648, -32768, 1000)):
            cmds.append(f"mac32 {tag} {a} {b} {n}")
            want.append(wrap(a * b * n, bits))
        top = (1 << (bits - 1)) - 1
        for x, y in ((top, 1), (-top - 1, -1), (top, top), (12345, -54321)):
            cmds.append(f"add {tag} {x} {y}")
            want.append(wrap(x + y, bits))
    out = run(builds, "srs", arch, stdin="\n".join(cmds) + "\n").stdout.split()
    got = [int(x) for x in out]
    assert len(got) == len(want)
    bad = [f"{c}: got {g}, want {w}" for c, g, w in zip(cmds, got, want, strict=True) if g != w]
    assert not bad, "\n".join(bad[:20])
    # the brief's headline cases: acc32 wraps at 32 bits on AIE-ML, acc48 at 48 bits on AIE
    assert lanes["acc32" if arch == 20 else "acc48"] == (32 if arch == 20 else 48)


# ---------------------------------------------------------------------------------------------
# mmul
# ---------------------------------------------------------------------------------------------
# variant -> (M, K, N, A range, B range, lane bits, output type)
MMUL_VARIANTS = {
    20: {
        "i8i8_4x8x8": (4, 8, 8, (-128, 127), (-128, 127), 32, "int8"),
        "i8i8_4x16x8": (4, 16, 8, (-128, 127), (-128, 127), 32, "int8"),
        "u8i8_4x8x8": (4, 8, 8, (0, 255), (-128, 127), 32, "int8"),
        "i16i8_4x4x8": (4, 4, 8, (-32768, 32767), (-128, 127), 32, "int16"),
        "i16i16_4x4x4": (4, 4, 4, (-32768, 32767), (-32768, 32767), 64, "int16"),
        "i16i16_4x4x4_acc32": (4, 4, 4, (-32768, 32767), (-32768, 32767), 32, "int16"),
        "i32i16_4x4x4": (4, 4, 4, (-(2**31), 2**31 - 1), (-32768, 32767), 64, "int16"),
    },
    10: {
        "i8i8_4x8x4": (4, 8, 4, (-128, 127), (-128, 127), 48, "int8"),
        "i8i8_2x8x8": (2, 8, 8, (-128, 127), (-128, 127), 48, "int8"),
        "i16i8_4x4x4": (4, 4, 4, (-32768, 32767), (-128, 127), 48, "int16"),
        "i16i16_4x4x4": (4, 4, 4, (-32768, 32767), (-32768, 32767), 48, "int16"),
        "i16i16_4x2x8": (4, 2, 8, (-32768, 32767), (-32768, 32767), 48, "int16"),
        "i32i16_4x4x4": (4, 4, 4, (-(2**31), 2**31 - 1), (-32768, 32767), 80, "int16"),
    },
}


@pytest.mark.parametrize(
    "arch,variant", [(a, v) for a in ARCHS for v in MMUL_VARIANTS[a]], ids=lambda x: str(x)
)
def test_mmul_integer_tiled(builds, arch, variant):
    M, K, N, (alo, ahi), (blo, bhi), lane, out_ty = MMUL_VARIANTS[arch][variant]
    rng = np.random.default_rng(zlib.crc32(f"{arch}/{variant}".encode()))
    Mt, Kt, Nt = 2, (8 if variant.endswith("acc32") else 3), 2
    A = rng.integers(alo, ahi, size=(Mt * M, Kt * K), endpoint=True, dtype=np.int64)
    B = rng.integers(blo, bhi, size=(Kt * K, Nt * N), endpoint=True, dtype=np.int64)
    A[0, :] = ahi  # extremes make 32-bit accumulators overflow for the acc32 variant
    B[:, 0] = bhi if ahi > 0 else blo
    rounding = "symmetric_inf" if arch == 10 else "conv_even"
    shift = (
        7 if out_ty == "int8" else 30 if variant.startswith("i32") else 8 if "i8" in variant else 14
    )
    stdin = f"{variant} {Mt} {Kt} {Nt} {shift} {rounding} saturate\n"
    stdin += " ".join(map(str, A.ravel())) + "\n" + " ".join(map(str, B.ravel())) + "\n"
    lines = run(builds, "mmul", arch, stdin=stdin).stdout.splitlines()
    exact = A.astype(object) @ B.astype(object)  # Python ints: no overflow
    want_raw = [wrap(int(v), lane) for v in exact.ravel()]
    got_raw = [int(x) for x in lines[0].split()]
    assert got_raw == want_raw
    want_out = [srs_ref(v, shift, rounding, "saturate", out_ty) for v in want_raw]
    assert [int(x) for x in lines[1].split()] == want_out
    assert lines[2] == f"lane_bits {lane}"
    if variant.endswith("acc32"):
        assert any(int(e) != w for e, w in zip(exact.ravel(), want_raw, strict=True)), (
            "test data should overflow the 32-bit accumulator"
        )


def _float_mmul_ref(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """c = float32(c + float32(a*b)) for k = 0..K-1 in order, starting from +0.0."""
    R, X = A.shape
    C = np.zeros((R, B.shape[1]), dtype=np.float32)
    for i in range(R):
        for j in range(B.shape[1]):
            c = np.float32(0.0)
            for k in range(X):
                c = np.float32(c + np.float32(A[i, k] * B[k, j]))
            C[i, j] = c
    return C


def _hex32(arr) -> str:
    return " ".join(f"{f32_bits(x):08x}" for x in np.asarray(arr, dtype=np.float32).ravel())


@pytest.mark.parametrize("arch", ARCHS)
def test_mmul_float_sequential_order(builds, arch):
    M, K, N = (4, 8, 4) if arch >= 20 else (4, 2, 4)
    Mt, Kt, Nt = 2, 4, 3
    rng = np.random.default_rng(7 + arch)
    A = rng.standard_normal((Mt * M, Kt * K)) * 2.0 ** rng.integers(-12, 12, (Mt * M, Kt * K))
    B = rng.standard_normal((Kt * K, Nt * N)) * 2.0 ** rng.integers(-12, 12, (Kt * K, Nt * N))
    A, B = A.astype(np.float32), B.astype(np.float32)
    stdin = f"fmmul {Mt} {Kt} {Nt} {_hex32(A)} {_hex32(B)}\n"
    got = run(builds, "float", arch, stdin=stdin).stdout.split()
    want = _float_mmul_ref(A, B)
    assert got == _hex32(want).split()
    # the order matters for this data: a float64 product rounded once differs somewhere
    assert not np.array_equal((A.astype(np.float64) @ B).astype(np.float32), want)


def test_mmul_bfloat16(builds):
    Mt, Kt, Nt = 2, 3, 2
    M, K, N = 4, 8, 4
    rng = np.random.default_rng(99)

    def bf16_values(shape):
        f = (rng.standard_normal(shape) * 4).astype(np.float32)
        bits = f.view(np.uint32) & np.uint32(0xFFFF0000)  # exact bfloat16 values
        return bits.view(np.float32)

    A, B = bf16_values((Mt * M, Kt * K)), bf16_values((Kt * K, Nt * N))
    stdin = f"bmmul {Mt} {Kt} {Nt} {_hex32(A)} {_hex32(B)}\n"
    lines = run(builds, "float", 20, stdin=stdin).stdout.splitlines()
    want = _float_mmul_ref(A, B)
    assert lines[0].split() == _hex32(want).split()
    assert [int(x, 16) for x in lines[1].split()] == [bf16_ref(f32_bits(x)) for x in want.ravel()]


# ---------------------------------------------------------------------------------------------
# bfloat16 conversion
# ---------------------------------------------------------------------------------------------
def test_bfloat16_conversion(builds):
    rng = random.Random(5)
    specials = {
        "zeros, +-1": [0x00000000, 0x80000000, 0x3F800000, 0xBF800000],
        "exact ties, even / odd kept bit": [0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000],
        "around ties, carry into exponent": [0x3F808001, 0x3F807FFF, 0x3F80FFFF, 0x3FFFFFFF],
        "overflow to infinity (and not)": [0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0xFF7FFFFF],
        "infinities": [0x7F800000, 0xFF800000],
        "subnormals": [0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x80008001],
    }
    pats = [p for group in specials.values() for p in group]
    pats += [rng.getrandbits(32) for _ in range(3000)]
    pats += [(rng.getrandbits(16) << 16) | 0x8000 for _ in range(300)]  # many ties
    nans = [0x7FC00000, 0xFFC00001, 0x7F800001, 0xFF800100, 0x7FFFFFFF]
    allp = pats + nans
    stdin = f"bf16 {len(allp)} " + " ".join(f"{p:08x}" for p in allp) + "\n"
    out = run(builds, "float", 20, stdin=stdin).stdout.splitlines()
    assert len(out) == len(allp)
    bad = []
    for p, line in zip(allp, out, strict=True):
        b, back = (int(x, 16) for x in line.split())
        assert back == b << 16, "bfloat16 -> float must be exact"
        is_nan = (p & 0x7F800000) == 0x7F800000 and (p & 0x007FFFFF) != 0
        if is_nan:
            ok = (b & 0x7F80) == 0x7F80 and (b & 0x7F) != 0 and (b >> 15) == (p >> 31)
        else:
            ok = b == bf16_ref(p)
        if not ok:
            bad.append(f"{p:08x} -> {b:04x}")
    assert not bad, "\n".join(bad[:20])


# ---------------------------------------------------------------------------------------------
# element-wise operations
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_vector_ops(builds, arch):
    rng = random.Random(11 + arch)
    a = [rng.randint(-128, 127) for _ in range(16)]
    b = [rng.randint(-128, 127) for _ in range(16)]
    c = [rng.randint(-32768, 32767) for _ in range(16)]
    a[0], b[0] = 127, 127  # overflowing add
    stdin = "\n".join(" ".join(map(str, v)) for v in (a, b, c)) + "\n"
    got = {}
    for line in run(builds, "ops", arch, stdin=stdin).stdout.splitlines():
        name, *vals = line.split()
        got[name] = [int(x) for x in vals]

    def w8(v: int) -> int:
        return wrap(v, 8)

    lane8 = 32 if arch == 20 else 48  # int8 x int8 default accumulator
    lane16 = 64 if arch == 20 else 48  # int16 x int16 default accumulator
    want = {
        "add": [w8(x + y) for x, y in zip(a, b, strict=True)],
        "sub": [w8(x - y) for x, y in zip(a, b, strict=True)],
        "adds": [w8(x + 100) for x in a],
        "max": [max(x, y) for x, y in zip(a, b, strict=True)],
        "min": [min(x, y) for x, y in zip(a, b, strict=True)],
        "maxs": [max(x, 0) for x in a],
        "mins": [min(x, 0) for x in a],
        "neg": [w8(-x) for x in a],
        "reduce_add": [w8(sum(a))],
        "reduce_add16": [wrap(sum(c), 16)],
        "reduce_max": [max(a)],
        "reduce_min": [min(a)],
        "concat": a[8:] + b[:8] + a[:8],
        "grow": [0] * 16 + a,
        "insert": a[:8] + b[12:16] + a[12:],
        "macc": [
            wrap(wrap(x * y - 3 * x - z * z, lane8), 32) for x, y, z in zip(a, b, c, strict=True)
        ],
        "accadd": [wrap(wrap(-32768 * z - z * z, lane16), 32) for z in c],
        "zeros": [0] * 8,
        "bcast": [-5] * 8,
    }
    assert got == want


# ---------------------------------------------------------------------------------------------
# kernel-side ADF I/O
# ---------------------------------------------------------------------------------------------
def _expected_stream_output():
    produced = [(100 + i, False) for i in range(4)] + [(-7, True)]
    va, vb = [1, 2, 3, 4], [11, 12, 13, 14]
    relayed = [(2 * v, t) for v, t in produced]
    relayed += [(y - x, i == 3) for i, (x, y) in enumerate(zip(va, vb, strict=True))]
    return ["left 0"] + [f"{v} {int(t)}" for v, t in relayed]


@pytest.mark.parametrize("arch", ARCHS)
def test_stream_fifo_order_and_tlast(builds, arch):
    out = run(builds, "io", arch, ["stream"]).stdout.splitlines()
    assert out == _expected_stream_output()


@pytest.mark.parametrize("arch", ARCHS)
def test_empty_stream_read_aborts(builds, arch):
    p = run(builds, "io", arch, ["empty"], check=False)
    assert p.returncode != 0
    assert "aieflow_shim: fatal: read from empty stream 'never_written'" in p.stderr
    assert p.stdout.splitlines() == _expected_stream_output()  # earlier output was flushed
    assert "not reached" not in p.stdout


@pytest.mark.parametrize("arch", ARCHS)
def test_cascade_passes_accumulator_unchanged(builds, arch):
    data = [(-1 if i % 2 else 1) * (2147483647 - i * 12345) for i in range(16)]
    tags = (64, 32) if arch == 20 else (80, 48)
    want = []
    for shift in (0, 40):
        for bits in tags:
            want.append("in_flight 16")
            want.append(" ".join([str(bits)] + [str(wrap(x << shift, bits)) for x in data]))
    assert run(builds, "io", arch, ["cascade"]).stdout.splitlines() == want


def _header(ptype: int, pid: int, row: int, col: int) -> int:
    h = (pid & 0x1F) | ((ptype & 0x7) << 12) | ((row & 0x1F) << 16) | ((col & 0x7F) << 21)
    if bin(h).count("1") % 2 == 0:  # odd parity over the whole 32-bit word
        h |= 1 << 31
    return h


@pytest.mark.parametrize("arch", ARCHS)
def test_packet_stream_headers(builds, arch):
    out = run(builds, "io", arch, ["pkt"]).stdout.splitlines()
    want = [
        f"{_header(5, 17, 3, 25):08x} 0",  # writeHeader(out, 5, getPacketid(out, 1)) from tile (25, 3)
        f"{_header(2, 9, 0, 0):08x} 0",  # the input packet's header, forwarded as data
        f"{11:08x} 0",
        f"{21:08x} 0",
        f"{31:08x} 1",
        f"{_header(7, 31, 31, 127):08x}",
        f"{_header(0, 0, 0, 0):08x}",
    ]
    assert out == want
    for line in want:
        assert bin(int(line.split()[0], 16)).count("1") % 2 == 1


@pytest.mark.parametrize("arch", ARCHS)
def test_buffer_kernel_with_vector_iterators(builds, arch):
    rng = random.Random(3 + arch)
    # the last four give exact ties after the shift: 3*256/512 = 1.5, 3*768/512 = 4.5
    x = [rng.randint(-32768, 32767) for _ in range(60)] + [256, -256, 768, -768]
    scale, shift = 3, 9
    stdin = " ".join(map(str, x)) + f"\n{scale} {shift}\n"
    got = [int(v) for v in run(builds, "io", arch, ["buffer"], stdin=stdin).stdout.split()]
    assert got == [srs_ref(v * scale, shift, "conv_even", "saturate", "int8") for v in x]


@pytest.mark.parametrize("arch", ARCHS)
def test_buffer_iterator_out_of_bounds_aborts(builds, arch):
    p = run(builds, "io", arch, ["oob"], check=False)
    assert p.returncode != 0
    assert "outside the buffer" in p.stderr
    assert "not reached" not in p.stdout


# ---------------------------------------------------------------------------------------------
# compile-time behaviour
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,arch",
    [(n, a) for n, (_, _, exp) in COMPILE_CHECKS.items() for a in exp],
    ids=lambda x: str(x),
)
def test_compile_checks(builds, name, arch):
    expected_error = COMPILE_CHECKS[name][2][arch]
    res = builds[("check", name, arch)]
    if expected_error is None:
        assert res["returncode"] == 0, res["stderr"]
    else:
        assert res["returncode"] != 0, f"{name} must not compile for __AIE_ARCH__={arch}"
        assert expected_error in res["stderr"], res["stderr"]


@pytest.mark.parametrize("name", sorted(HEADER_SNIPPETS))
def test_public_headers_standalone(builds, name):
    res = builds[("header", name, 0)]
    assert res["returncode"] == 0, res["stderr"]


# ---------------------------------------------------------------------------------------------
# graph executor (exec.cpp)
# ---------------------------------------------------------------------------------------------
def tiling_reference(bd, td, off, trav, boundary, rep):
    """UG1079 tiling semantics, written independently: numpy index grids, dimension 0 fastest."""
    rank = len(bd)
    lim = boundary if boundary is not None else bd
    tiles = list(np.ndindex(*[w for _, _, w in reversed(trav)])) if trav else [()]
    out = []
    for t in tiles:
        t = tuple(reversed(t))  # traversal entry 0 is the innermost loop
        origin = list(off)
        for (dim, stride, _), i in zip(trav, t, strict=True):
            origin[dim] += i * stride
        for e in np.ndindex(*reversed(td)):
            c = [origin[d] + e[rank - 1 - d] for d in range(rank)]
            if any(c[d] < 0 or c[d] >= lim[d] for d in range(rank)):
                out.append(-1)
            else:
                out.append(int(np.ravel_multi_index(tuple(reversed(c)), tuple(reversed(bd)))))
    return out * rep


@pytest.mark.parametrize("seed", range(40))
def test_tiling_addresses_match_reference(builds, seed):
    rng = random.Random(seed)
    rank = rng.choice([1, 2, 3])
    bd = [rng.randint(1, 9) for _ in range(rank)]
    td = [rng.randint(1, b) for b in bd]
    boundary = [rng.randint(1, b) for b in bd] if rng.random() < 0.5 else None
    trav = []
    for _ in range(rng.randint(0, rank)):
        dim = rng.randrange(rank)
        trav.append((dim, td[dim], rng.randint(1, 3)))
    # keep every element inside the buffer unless a boundary pads it
    off = [0] * rank
    if boundary is not None:
        off = [rng.randint(-2, 1) for _ in range(rank)]
    else:
        for d in range(rank):
            reach = td[d] + sum(s * (w - 1) for dim, s, w in trav if dim == d)
            if reach > bd[d]:
                trav = [(dim, s, w) for dim, s, w in trav if dim != d]
                td[d] = min(td[d], bd[d])
            off[d] = rng.randint(0, bd[d] - (td[d] + sum(s * (w - 1) for dim, s, w in trav if dim == d)))
    rep = rng.randint(1, 2)
    text = f"{rank}\n{' '.join(map(str, bd))}\n{' '.join(map(str, td))}\n{' '.join(map(str, off))}\n{len(trav)}\n"
    text += "".join(f"{d} {s} {w}\n" for d, s, w in trav)
    text += ("1 " + " ".join(map(str, boundary)) if boundary is not None else "0") + f"\n{rep}\n"
    got = [int(v) for v in run(builds, "exec", 20, ["tiling"], stdin=text).stdout.split()]
    assert got == tiling_reference(bd, td, off, trav, boundary, rep)


@pytest.mark.parametrize("arch", ARCHS)
def test_executor_runs_buffers_shared_buffer_cascade_stream(builds, tmp_path, arch):
    rng = np.random.default_rng(arch)
    iters = 3
    x = rng.integers(-1000, 1000, size=(iters, 32))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("\n".join(f"{a} {b}" for a, b in x.reshape(-1, 2)) + "\n")
    run(builds, "exec", arch, ["pipeline", str(tmp_path), str(tmp_path / "o")])
    lines = (tmp_path / "o" / "data" / "out.txt").read_text().splitlines()
    got = np.array([int(v) for v in lines]).reshape(iters, 32)
    for it in range(iters):
        y = x[it] + 5 + it  # AddOffset: offset 5 from the graph, plus its own run count
        expect = y.reshape(4, 8).T.reshape(-1)  # read column by column from the 8 x 4 buffer
        assert got[it].tolist() == expect.tolist()
    assert all(len(line.split()) == 1 for line in lines)  # plio_32_bits: one int32 per line


@pytest.mark.parametrize("arch", ARCHS)
def test_executor_keeps_one_mode_register_per_kernel(builds, tmp_path, arch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("1 2 3 4 5 6 7 8\n")
    run(builds, "exec", arch, ["modes", str(tmp_path), str(tmp_path / "o")])
    got = [int(v) for v in (tmp_path / "o" / "data" / "out.txt").read_text().split()]
    floor = 0
    conv_even = got[4]
    assert conv_even != floor
    # iteration 0: kernel b starts at the reset mode (floor), not at the mode kernel a set;
    # iteration 1: b finds the mode it set itself in iteration 0
    assert got[:4] == [floor, 2, 3, 4]
    assert got[4:] == [conv_even, 6, 7, 8]


@pytest.mark.parametrize(
    "mode, message",
    [
        ("unconnected", "k_a.out[0]"),
        ("cycle", "feedback loop through k_a, k_b"),
        ("short", "iteration 2 needs 4 values, only 0 left"),
        ("mismatch", "k_b.in[0]: expects 8 values, k_a.out[0] produced 4"),
    ],
)
def test_executor_rejects_bad_graphs(builds, tmp_path, mode, message):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("1 2 3 4 5 6 7 8\n")
    p = run(builds, "exec", 20, [mode, str(tmp_path), str(tmp_path / "o")], check=False)
    assert p.returncode != 0
    assert "aieflow_shim: fatal:" in p.stderr and message in p.stderr
