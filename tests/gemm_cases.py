"""Operands and the reference product for the GEMM tests (the reference is numpy's int64 matmul:
nothing from aieflow but the operand ranges of its types)."""

from __future__ import annotations

import numpy as np

from aieflow.gemm.dtypes import TYPES


def reference(a, b) -> np.ndarray:
    return np.asarray(a, dtype=np.int64) @ np.asarray(b, dtype=np.int64)


def operands(dtype: str, m: int, n: int, k: int, kind: str, seed: int = 0):
    """A (m, k) and B (k, n) of ``dtype``: "random", "max", "min" (largest positive products for a
    signed type: lo x lo) or "mixed" extremes."""
    t = TYPES[dtype]
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.integers(t.lo, t.hi + 1, (m, k)), rng.integers(t.lo, t.hi + 1, (k, n))
    if kind in ("max", "min"):
        v = t.hi if kind == "max" else t.lo
        return np.full((m, k), v), np.full((k, n), v)
    return rng.choice([t.lo, t.hi], (m, k)), rng.choice([t.lo, t.hi], (k, n))
