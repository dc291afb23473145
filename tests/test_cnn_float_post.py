"""The CNN's floating-point post layers (issue 25 item 4): fp32 on AIE1, bf16 on AIE-ML / AIE-MLv2.

ops/activation.py defines what the kernels (templates/cnn/cnn_float_post.h) compute; this file checks

- the fp32 definition (exp, expm1, the activations, softmax) bit for bit against a reference written
  here from the documented sequence of float32 operations (scalar numpy float32 steps, Python's
  ``math.floor`` and ``math.ldexp`` for the floor and the scaling by 2^n, the constants read from the
  header's hexadecimal literals), on random and extreme inputs (+-0, subnormals, +-inf, NaN, the
  overflow / underflow edges, +-1e30);
- its error against float64 (the bounds docs/conv.md states);
- the bf16 tables of Selu (new slopes) and softmax's exp on every finite bf16 input, and the bf16
  softmax with rounding ties, against a bit-pattern bf16 rounding written here;
- the header compiled with g++ against the x86 shim equals the emulator bit for bit, and a mutated
  header (the floor of the range reduction dropped) does not.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from aieflow.ops import activation as A

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "src" / "aieflow" / "templates" / "cnn" / "cnn_float_post.h"
INCLUDE = ROOT / "src" / "aieflow" / "x86" / "include"
CXX = shutil.which("g++")
F = np.float32

# ---------------------------------------------------------------- the reference (independent of ops/)


def _hex_constants() -> dict[str, float]:
    text = HEADER.read_text()
    return {m[0]: float.fromhex(m[1]) for m in re.findall(r"\b(\w+) = (-?0x[0-9a-fA-F.]+p[-+]?\d+)f", text)}


K = _hex_constants()
POLY = [F(K[f"P{i}"]) for i in range(6)]


def r_exp_parts(x: np.float32) -> tuple[int, np.float32]:
    s = F(F(x * F(K["LOG2E"])) + F(0.5))
    k = F(math.floor(float(s)))
    r = F(x - F(k * F(K["C1"])))
    r = F(r - F(k * F(K["C2"])))
    z = F(r * r)
    p = F(F(POLY[0] * r) + POLY[1])
    for c in POLY[2:]:
        p = F(F(p * r) + c)
    return int(k), F(F(p * z) + r)


def r_exp(x: np.float32) -> np.float32:
    if x != x:
        return x
    if x > F(89.0):
        return F(np.inf)
    if x < F(-104.0):
        return F(0.0)
    n, q = r_exp_parts(x)
    return F(math.ldexp(float(F(q + F(1.0))), n))  # exact in double, one rounding to float32


def r_expm1(x: np.float32) -> np.float32:
    if x != x or x > F(89.0):
        return r_exp(x)
    if x < F(-104.0):
        return F(-1.0)
    n, q = r_exp_parts(x)
    return q if n == 0 else F(r_exp(x) - F(1.0))


SELU_ALPHA, SELU_GAMMA = 1.6732632423543772, 1.0507009873554805


def r_act(f: str, x: np.float32) -> np.float32:
    if x != x:
        return x
    one, zero = F(1.0), F(0.0)
    if f == "relu":
        return x if x > zero else zero
    if f == "leaky_relu":
        return x if x >= zero else F(F(0.01) * x)
    if f == "elu":
        return x if x > zero else F(F(1.0) * r_expm1(min(x, zero)))
    if f == "selu":
        return F(F(SELU_GAMMA) * x) if x > zero else F(F(SELU_GAMMA * SELU_ALPHA) * r_expm1(min(x, zero)))
    if f in ("sigmoid", "silu"):
        e = r_exp(F(-abs(x)))
        d = F(one + e)
        s = F(one / d) if x >= zero else F(e / d)
        return s if f == "sigmoid" else F(x * s)
    if f == "tanh":
        q = r_expm1(F(F(-2.0) * F(abs(x))))
        t = F(-q / F(q + F(2.0)))
        return -t if x < zero else t
    if f == "hard_sigmoid":
        return min(max(F(F(F(1 / 6) * x) + F(0.5)), zero), one)
    if f == "hard_swish":
        return F(x * min(max(F(F(F(1 / 6) * x) + F(0.5)), zero), one))
    if f == "clip":
        return min(max(x, F(0.0)), F(6.0))
    raise AssertionError(f)


def r_softmax(row: np.ndarray) -> np.ndarray:
    m = row[0]
    for v in row[1:]:
        m = v if v > m else m
    e = [r_exp(F(v - m)) for v in row]
    s = F(0.0)
    for v in e:
        s = F(s + v)
    inv = F(F(1.0) / s)
    return np.array([F(v * inv) for v in e], dtype=np.float32)


def bf16(x) -> np.ndarray:
    """float32 -> bf16 (nearest, ties to even) on the bit pattern, as float32."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    y = r.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(np.asarray(x, dtype=np.float32)), np.float32(np.nan), y).astype(np.float32)


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


EDGES = np.array([0.0, -0.0, 1e-45, -1e-45, 1.2e-38, -1.2e-38, 1e-30, -1e-30, 2.0**-12, -(2.0**-12), 0.34657, -0.34657,
                  0.3466, -0.3466, 0.5, -0.5, 1.0, -1.0, 9.0, -9.0, 20.0, -20.0, 87.0, -87.0, 88.72, 88.73, 88.9, 89.0,
                  89.01, -103.9, -104.0, -104.01, 150.0, -150.0, 1e30, -1e30, np.inf, -np.inf, np.nan], dtype=np.float32)


def _inputs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    wide = rng.uniform(-110, 95, n)
    small = rng.standard_normal(n) * 3
    tiny = rng.choice([-1, 1], n) * np.exp(rng.uniform(-90, 0, n))
    return np.concatenate([EDGES, wide, small, tiny]).astype(np.float32)


# ---------------------------------------------------------------- fp32: definition = reference


def test_the_header_constants_are_the_definitions():
    assert F(K["LOG2E"]) == F(A.EXP_LOG2E) and F(K["C1"]) == F(A.EXP_C1) and F(K["C2"]) == F(A.EXP_C2)
    assert POLY == [F(p) for p in A.EXP_P]
    assert (F(K["EXP_HI"]), F(K["EXP_LO"])) == (F(A.EXP_HI), F(A.EXP_LO))
    assert K["C1"] + K["C2"] == pytest.approx(math.log(2.0), rel=1e-9)  # Cody-Waite split of ln 2
    assert (K["C1"] * 512).is_integer()  # 9 significant bits: n C1 exact for |n| < 2^15


def test_fp32_exp_and_expm1_equal_the_reference_bit_for_bit():
    x = _inputs(1500, 1)
    assert _same(A.exp_f32(x), [r_exp(v) for v in x]).all()
    assert _same(A.expm1_f32(x), [r_expm1(v) for v in x]).all()


@pytest.mark.parametrize("function", A.FP32_FUNCTIONS)
def test_fp32_activation_equals_the_reference_bit_for_bit(function):
    x = _inputs(400, 2 + A.FP32_FUNCTIONS.index(function))
    got = A.apply_f32(function, {}, x)
    want = np.array([r_act(function, v) for v in x], dtype=np.float32)
    bad = ~_same(got, want)
    assert not bad.any(), (function, x[bad][:5], got[bad][:5], want[bad][:5])


def test_fp32_softmax_equals_the_reference_bit_for_bit():
    rng = np.random.default_rng(5)
    rows = [rng.standard_normal(10) * s for s in (0.1, 1, 10, 60, 300)]
    rows += [np.array([0.0, 0.0, 0.0]), np.array([-np.inf, 1.0, 2.0]), np.array([1e30, -1e30, 0.0]),
             np.array([-200.0, 0.0]), np.array([5.0])]
    for row in rows:
        row = row.astype(np.float32)
        assert _same(A.softmax_f32(row), r_softmax(row)).all(), row


def test_fp32_errors_against_float64_are_the_documented_bounds():
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-103, 88.7, 200_000), rng.uniform(-1, 1, 100_000)]).astype(np.float32)
    exact = np.exp(x.astype(np.float64))
    normal = exact > np.finfo(np.float32).tiny
    rel = np.abs(A.exp_f32(x)[normal] - exact[normal]) / exact[normal]
    assert rel.max() < 1.5 * 2.0**-24  # docs/conv.md: exp within 1.5 x 2^-24 relative
    xs = np.concatenate([rng.uniform(-20, 20, 100_000), -np.exp(rng.uniform(-60, 3, 50_000))]).astype(np.float32)
    for f in ("elu", "selu", "sigmoid", "tanh", "silu", "leaky_relu"):
        ref = A.evaluate(f, {}, xs.astype(np.float64))
        err = np.abs(A.apply_f32(f, {}, xs) - ref) / np.maximum(np.abs(ref), 1e-30)
        assert err.max() < 2.5e-7, f  # a few float32 roundings, no cancellation (expm1 near 0)
    sm = rng.standard_normal((200, 10)).astype(np.float32) * 8
    assert np.abs(A.softmax_f32(sm) - A.softmax_reference(sm)).max() < 3e-7


# ---------------------------------------------------------------- bf16: the tables on every bf16 input


def _all_bf16() -> np.ndarray:
    u = np.arange(1 << 16, dtype=np.uint32)
    x = (u << 16).view(np.float32)
    return x[np.isfinite(x)]


def test_bf16_selu_and_exp_tables_are_the_rounded_functions_on_every_input():
    x = _all_bf16()
    for f, ref in (("selu", lambda v: SELU_GAMMA * np.where(v > 0, v, SELU_ALPHA * np.expm1(np.minimum(v, 0)))),
                   ("elu", lambda v: np.where(v > 0, v, np.expm1(np.minimum(v, 0))))):
        table, window, rules = A.bf16_table(f, {})
        assert table.size <= A.BF16_TABLE_LIMIT, f
        with np.errstate(over="ignore"):
            want = bf16(ref(x.astype(np.float64)).astype(np.float32))
        assert _same(A.apply_bf16_table(x, table, window, rules), want).all(), f
    table, window, rules = A.bf16_table("exp", {}, negative_only=True)
    neg = x[x <= 0]
    assert _same(A.apply_bf16_table(neg, table, window, rules), bf16(np.exp(neg.astype(np.float64)).astype(np.float32))).all()


def test_bf16_softmax_against_a_reference_with_rounding_ties():
    table, window, rules = A.bf16_table("exp", {}, negative_only=True)

    def ref(row):
        m = row.max()
        d = bf16((row - m).astype(np.float32))
        e = bf16(np.exp(d.astype(np.float64)).astype(np.float32))
        s = F(0.0)
        for v in e:
            s = F(s + v)
        return bf16((e * F(F(1.0) / s)).astype(np.float32))

    # 0.5 - 256 = -255.5 is halfway between the bf16 values -255 and -256: ties to even gives -256
    assert bf16(np.float32(-255.5)) == F(-256.0) and bf16(np.float32(-254.5)) == F(-254.0)
    rng = np.random.default_rng(11)
    rows = [np.array([256.0, 0.5, 1.5, 255.0]), np.array([0.0, -1e30, 3.0]), np.array([-100.0, 100.0])]
    rows += [bf16(rng.standard_normal(10).astype(np.float32) * s) for s in (0.5, 4, 40)]
    for row in rows:
        row = bf16(np.asarray(row, dtype=np.float32))
        assert _same(A.softmax_bf16(row, table, window, rules), ref(row)).all(), row


# ---------------------------------------------------------------- the header on x86 = the emulator

DRIVER = r"""
#include <aie_api/aie.hpp>
#include <cstdio>
#include <cstring>
#include <vector>
#include "cnn_float_post.h"

struct SmF32 { static constexpr int POST = 2, POST_FLOAT = 1, POST_FN = 0; static constexpr float POST_A = 0, POST_B = 0; };
%(bf16)s

static float f32(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static unsigned u32(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }

int main(int, char** argv) {
    const int mode = argv[1][0] - '0';  // 0 fp32 activation, 1 fp32 softmax rows, 2 bf16 selu, 3 bf16 softmax rows
    unsigned n = 0, cols = 1, fn = 0, ua = 0, ub = 0;
    if (std::scanf("%%u %%u %%u %%x %%x", &n, &cols, &fn, &ua, &ub) != 5) return 2;
    std::vector<float> x(n), y(n);
    for (unsigned i = 0; i < n; ++i) { unsigned u = 0; if (std::scanf("%%x", &u) != 1) return 2; x[i] = f32(u); }
    if (mode == 0) {
        for (unsigned i = 0; i < n; ++i) y[i] = aieflow_fpost::activation_f32(int(fn), f32(ua), f32(ub), x[i]);
    } else if (mode == 1) {
        for (unsigned r = 0; r < n / cols; ++r) aieflow_fpost::post<SmF32>(&x[r * cols], &y[r * cols], cols);
    } else {
        std::vector<bfloat16> bx(n), by(n);
        for (unsigned i = 0; i < n; ++i) bx[i] = bfloat16(x[i]);
        for (unsigned r = 0; r < n / cols; ++r) {
            if (mode == 2) aieflow_fpost::post<ActBf16>(&bx[r * cols], &by[r * cols], cols);
            else aieflow_fpost::post<SmBf16>(&bx[r * cols], &by[r * cols], cols);
        }
        for (unsigned i = 0; i < n; ++i) y[i] = static_cast<float>(by[i]);
    }
    for (unsigned i = 0; i < n; ++i) std::printf("%%08x\n", u32(y[i]));
    return 0;
}
"""


def _bf16_struct(name: str, post: int, table, window, rules) -> str:
    lit = lambda v: float(F(v)).hex() + "f" if v >= 0 or not np.signbit(v) else "-" + float(-F(v)).hex() + "f"  # noqa: E731
    return (f"struct {name} {{ static constexpr int POST = {post}, POST_FLOAT = 2, POST_ELO = {window[0]}, "
            f"POST_EHI = {window[1]};\n  static constexpr std::int32_t POST_T[{table.size}] = {{"
            + ", ".join(str(int(v)) for v in table) + "};\n"
            f"  static constexpr float POST_C1[6] = {{{', '.join(lit(v) for v in rules[:, 0])}}}, "
            f"POST_C0[6] = {{{', '.join(lit(v) for v in rules[:, 1])}}}; }};")


def _build(tmp: Path, header_text: str) -> Path:
    (tmp / "cnn_float_post.h").write_text(header_text)
    selu = A.bf16_table("selu", {})
    ex = A.bf16_table("exp", {}, negative_only=True)
    src = DRIVER % {"bf16": _bf16_struct("ActBf16", 1, *selu) + "\n" + _bf16_struct("SmBf16", 2, *ex)}
    (tmp / "driver.cpp").write_text(src)
    exe = tmp / "driver"
    subprocess.run([CXX, "-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", "-D__AIE_ARCH__=20",
                    f"-I{INCLUDE}", f"-I{tmp}", str(tmp / "driver.cpp"), "-o", str(exe)], check=True,
                   capture_output=True, text=True, timeout=300)
    return exe


def _run(exe: Path, mode: int, x: np.ndarray, cols: int = 1, fn: int = 0, a: float = 0.0, b: float = 0.0):
    bits = lambda v: int(np.asarray(v, dtype=np.float32).view(np.uint32))  # noqa: E731
    text = f"{x.size} {cols} {fn} {bits(a):x} {bits(b):x}\n" + "\n".join(f"{int(u):x}" for u in x.view(np.uint32))
    out = subprocess.run([str(exe), str(mode)], input=text, capture_output=True, text=True, timeout=60, check=True)
    return np.array([int(t, 16) for t in out.stdout.split()], dtype=np.uint32).view(np.float32)


def _mismatches(exe: Path) -> dict[str, int]:
    x = _inputs(300, 21)
    bad = {}
    for i, f in enumerate(A.FP32_FUNCTIONS):
        a, b = A.fp32_params(f, {})
        bad[f] = int((~_same(_run(exe, 0, x, fn=i, a=a, b=b), A.apply_f32(f, {}, x))).sum())
    rows = (np.random.default_rng(3).standard_normal((40, 10)) * 20).astype(np.float32)
    bad["softmax"] = int((~_same(_run(exe, 1, rows.reshape(-1), cols=10), A.softmax_f32(rows).reshape(-1))).sum())
    xb = _all_bf16()
    selu = A.bf16_table("selu", {})
    bad["bf16 selu"] = int((~_same(_run(exe, 2, xb), A.apply_bf16_table(xb, *selu))).sum())
    ex = A.bf16_table("exp", {}, negative_only=True)
    rb = np.concatenate([bf16(rows * 3), bf16(np.array([[256.0, 0.5, 1.5, 255.0] * 2 + [0.0, 1.0]], np.float32))])
    bad["bf16 softmax"] = int((~_same(_run(exe, 3, rb.reshape(-1), cols=10), A.softmax_bf16(rb, *ex).reshape(-1))).sum())
    return bad


@pytest.mark.skipif(CXX is None, reason="g++ not found")
def test_the_header_on_x86_equals_the_emulator_and_a_mutation_is_caught(tmp_path):
    text = HEADER.read_text()
    assert all(v == 0 for v in _mismatches(_build(tmp_path, text)).values())
    # mutation: the range reduction without its floor correction (n truncated toward zero)
    mutated = text.replace("if (k > s) k = k - 1.0f;  // floor", "")
    assert mutated != text
    (tmp_path / "m").mkdir()
    bad = _mismatches(_build(tmp_path / "m", mutated))
    assert bad["selu"] > 0 and bad["sigmoid"] > 0 and bad["softmax"] > 0
    assert bad["relu"] == 0 and bad["bf16 selu"] == 0  # untouched paths
