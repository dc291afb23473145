"""What the GEMM design computes, bit for bit (``GemmDesign.predict``).

Integers: exact sums (the plan guarantees that no accumulator lane and no C element can overflow),
so C is the int64 matrix product cast to C's type.  fp32 and bf16: the order of the design's roundings:
for each k block, each Cr lane starts at +0.0 and adds float32(a * b) for k in order (one rounding
per product and per addition, as the shim's aie::mmul; the real VLIW order is undocumented), and the
write-back adds the block into C (which starts at +0.0) with one more rounding.  bf16: A and B hold
bf16 values (checked: a value that is not one is refused), every product of two bf16 values is
exact in float32 (8 + 8 significand bits), so the same float32 order gives what the kernel's
bfloat16 x bfloat16 -> accfloat mmul computes; C stays float32 (docs/gemm.md "bf16").
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .plan import GemmPlan

C_DTYPES = {"int32": np.int32, "int64": np.int64, "float32": np.float32}


def check_operands(plan: GemmPlan, a, b) -> tuple[np.ndarray, np.ndarray]:
    """A (m x k) and B (k x n) in the design's element type; values must fit it exactly."""
    t = plan.dtype
    out = []
    for name, x, shape in (("A", a, (plan.m, plan.k)), ("B", b, (plan.k, plan.n))):
        x = np.asarray(x)
        if x.shape != shape:
            raise ConfigError(f"{name} has shape {x.shape}; the design computes A ({plan.m} x {plan.k}) x "
                              f"B ({plan.k} x {plan.n})")
        if t.is_float:
            x = np.ascontiguousarray(x, dtype=np.float32)
            if t.name == "bf16" and (x.view(np.uint32) & np.uint32(0xFFFF)).any():
                i = tuple(int(v) for v in np.argwhere(x.view(np.uint32) & np.uint32(0xFFFF))[0])
                raise ConfigError(f"{name}{list(i)} = {float(x[i])!r} is not a bf16 value; the design's elements are bf16",
                                  hint="round A and B to bf16 first (aieflow.numerics.fixed.to_bf16: nearest, ties "
                                       "to even)")
            out.append(x)
            continue
        if x.dtype.kind == "f" and not np.array_equal(x, np.round(x)):
            raise ConfigError(f"{name} holds non-integer values; the design's elements are {t.name}")
        if x.size and (x.min() < t.lo or x.max() > t.hi):
            raise ConfigError(f"{name} holds values outside {t.name} [{t.lo}, {t.hi}]")
        out.append(np.ascontiguousarray(x, dtype=np.dtype(t.np_dtype)))
    return out[0], out[1]


def operand_bytes(dtype: str, x: np.ndarray) -> bytes:
    """``A.bin`` / ``B.bin``: the elements as the host and PL hold them (bf16: the upper 16 bits of
    each float32, std::uint16_t; others: their own dtype), native little-endian."""
    if dtype == "bf16":
        return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> np.uint32(16)).astype("<u2").tobytes()
    return np.ascontiguousarray(x).tobytes()


def gemm(plan: GemmPlan, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C = A B as the design computes it (operands already checked)."""
    cdt = C_DTYPES[plan.output.name]
    if not plan.dtype.is_float:
        return (a.astype(np.int64) @ b.astype(np.int64)).astype(cdt)
    c = np.zeros((plan.m, plan.n), dtype=np.float32)
    kc = plan.blocks.kc
    for pc in range(0, plan.k, kc):
        acc = np.zeros_like(c)
        for p in range(pc, min(pc + kc, plan.k)):
            acc += a[:, p : p + 1] * b[p : p + 1, :]
        c += acc
    return c
