"""Softmax and GELU variants (issue 19): the measured error of each fixed-point variant against
float64, written as the markdown table of docs/attention.md.

    python benchmarks/softmax_gelu.py [--rows N] [--seed S]

Variants (ops/activation.py): softmax ``table`` (the exp table and the integer reciprocal, the
default) and ``integer`` (I-BERT's integer exp, arXiv:2101.01321); GELU ``table`` (8-bit: the full
table of exactly rounded codes; 16-bit: the 1024-segment interpolation) and ``polynomial``
(I-BERT's i-GELU).  Each is computed by aieflow's emulation (the definition the kernels follow
bit for bit, checked on x86 by tests/test_softmax_gelu_variants.py) through ``aieflow.compile``'s
quantiser, on the input / output types given in the table.  Softmax rows: ``--rows`` random rows of
16 logits (normal, sigma 2 and 6), rows at the input type's extremes, rows of ties; GELU: every input
code.  The error is the largest absolute difference from float64 softmax / erf GELU of the
dequantised input, in output units (so it includes the output's rounding, half an LSB).  No
machine dependence: pure integer arithmetic.
"""

from __future__ import annotations

import argparse

import numpy as np

from aieflow.numerics import fixed
from aieflow.numerics.types import FixedType
from aieflow.ops import activation as act

N = 16


def softmax_rows(tx: FixedType, rows: int, rng) -> np.ndarray:
    scale = 2.0 ** tx.frac
    r = [np.clip(np.round(rng.standard_normal((rows, N)) * s * scale), tx.min_code, tx.max_code) for s in (2.0, 6.0)]
    ext = rng.choice([tx.min_code, tx.max_code], size=(rows // 8, N))
    ties = np.repeat(rng.integers(tx.min_code, tx.max_code + 1, size=(rows // 8, 1)), N, axis=1)
    return np.concatenate([*r, ext, ties]).astype(np.int64)


def softmax_error(tx: FixedType, out: FixedType, variant: str, codes: np.ndarray) -> float:
    if variant == "integer":
        y = act.softmax_codes(codes, act.iexp_constants(), 0, out, iexp_up=act.iexp_up(tx.frac))
    else:
        table, sd = act.exp_table(tx)
        y = act.softmax_codes(codes, table, sd, out)
    ref = act.softmax_reference(fixed.dequantize(codes, tx))
    return float(np.abs(fixed.dequantize(y, out) - ref).max())


def gelu_error(tx: FixedType, out: FixedType, variant: str) -> float:
    codes = np.arange(tx.min_code, tx.max_code + 1, dtype=np.int64)
    if variant == "polynomial":
        y = act.igelu_codes(codes, tx, out, act.igelu_constants())
    else:
        table, seg = act.activation_table("gelu", {}, tx, out)
        y = act.apply_table(codes, table, seg, tx, out)
    ref = act.evaluate("gelu", {}, fixed.dequantize(codes, tx))
    return float(np.abs(fixed.dequantize(y, out) - ref).max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=19)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print("| function | input | output | variant | max abs error vs float64 | output LSB |")
    print("| --- | --- | --- | --- | ---: | ---: |")
    for tx, out in ((FixedType(8, 4), FixedType(8, 7)), (FixedType(16, 10), FixedType(16, 15))):
        codes = softmax_rows(tx, args.rows, rng)
        for variant in act.SOFTMAX_VARIANTS:
            e = softmax_error(tx, out, variant, codes)
            print(f"| softmax (16 logits) | {tx} | {out} | {variant} | {e:.6f} | {2.0 ** -out.frac:.6f} |")
    for tx, out in ((FixedType(8, 4), FixedType(8, 4)), (FixedType(16, 11), FixedType(16, 11))):
        for variant in act.GELU_VARIANTS:
            e = gelu_error(tx, out, variant)
            print(f"| GELU (erf) | {tx} | {out} | {variant} | {e:.6f} | {2.0 ** -out.frac:.6f} |")


if __name__ == "__main__":
    main()
