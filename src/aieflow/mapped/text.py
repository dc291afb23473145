"""Text of the generated files: C array initialisers (weight headers, tables) and PLIO data lines,
the PLIO width every chain / DAG PLIO declares, and the range a narrow fixed-point output type is
held to (what the kernel templates print of a type).  Shared by every kind's emitter."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..names import Code
from ..numerics.types import FixedType, FloatType, NumericType, Saturation

PLIO_BITS = 64


def float_literal(v: float) -> str:
    """A float32 value as an exact C++ hexadecimal float literal (the float post layers' constants)."""
    f = float(np.float32(v))
    if not np.isfinite(f):  # ops/activation.py's rules and constants are finite
        raise AssertionError(f"a non-finite float constant {f} in a post layer")
    return ("-" if np.signbit(np.float32(v)) else "") + float.hex(abs(f)) + "f"


def values_per_word(t: NumericType) -> int:
    return max(1, PLIO_BITS // t.container_bits)


def _grid(count: int, per_line: int, item: str, sep: str, head: str, tail: str) -> str:
    """A %-format string of ``count`` items ``per_line`` to a line: ``head item sep item ... tail``,
    lines joined by newlines."""
    full, rest = divmod(count, per_line)
    lines = [head + sep.join([item] * per_line) + tail] * full
    if rest:
        lines.append(head + sep.join([item] * rest) + tail)
    return "\n".join(lines)


def _lines(values: np.ndarray, t: NumericType, per_line: int, sep: str, head: str, tail: str, float_spec: str) -> str:
    """``per_line`` values to a line, ``head item sep item ... tail``, lines joined by newlines:
    integers as ``str(int(v))``, floats as ``float_spec`` (every value finite).

    Weight headers hold millions of values, so nothing here makes a Python call per value: a
    small range of integers is printed by looking each value's text (with what follows it) up in a
    table of the range, anything else by one ``%`` with every value (formatted in C)."""
    flat = np.asarray(values).reshape(-1)
    if isinstance(t, FloatType):
        return _grid(flat.size, per_line, float_spec, sep, head, tail) % tuple(flat.astype(np.float64).tolist())
    if flat.dtype.kind not in "iub":  # integers held as floats: truncated, as int() does
        ints = list(map(int, flat.tolist()))
        return _grid(len(ints), per_line, "%d", sep, head, tail) % tuple(ints)
    lo, hi = (int(flat.min()), int(flat.max())) if flat.size else (0, 0)
    if hi - lo >= flat.size or hi - lo > 1 << 16:  # a table larger than the values it prints
        return _grid(flat.size, per_line, "%d", sep, head, tail) % tuple(flat.tolist())
    digits = [str(v) for v in range(lo, hi + 1)]
    within = np.array([d + sep for d in digits], dtype=object)
    index = flat.astype(np.int64) - lo
    items = within[index]
    if per_line <= flat.size:
        ends = np.array([d + tail + "\n" + head for d in digits], dtype=object)
        items[per_line - 1 :: per_line] = ends[index[per_line - 1 :: per_line]]
    items[-1] = digits[index[-1]] + tail
    return head + "".join(items.tolist())


def format_values(values: np.ndarray, t: NumericType, per_line: int) -> str:
    """PLIO text: ``per_line`` values to a line, separated by spaces (floats as ``%.9g``)."""
    if np.asarray(values).size == 0:
        return "\n"
    return _lines(values, t, per_line, " ", "", "", "%.9g") + "\n"


def c_array(values: np.ndarray, t: NumericType, per_line: int = 16) -> Code:
    """The body of a C array initialiser: ``per_line`` values to a line, each followed by a comma."""
    if values.size == 0:
        return Code("    0")
    if isinstance(t, FloatType) and not np.isfinite(values).all():
        # a non-finite value prints as 0.0f (rare: formatted one by one)
        flat = np.asarray(values, dtype=np.float64).reshape(-1).tolist()
        items = tuple(f"{v:.8e}f" if np.isfinite(v) else "0.0f" for v in flat)
        return Code(_grid(len(items), per_line, "%s", ", ", "    ", ",") % items)
    # scientific notation always has a '.', so every item is a valid float literal ("0f" is not)
    return Code(_lines(values, t, per_line, ", ", "    ", ",", "%.8ef"))


def narrow_output(t) -> dict[str, Any] | None:
    """A fixed-point output type narrower than its container (``fixed<12,4>`` in int16): the range
    the kernel applies after the SRS (``templates/kernels/narrow.h``: Dense, the DAG's Add / LayerNorm /
    MatMul, the CNN's conv stages); None when the container is the type."""
    if not isinstance(t, FixedType) or t.width >= t.container_bits:
        return None
    wrap = t.container_bits - t.width if t.saturation is Saturation.WRAP else 0
    lo = -t.max_code if (t.saturation is Saturation.SYMMETRIC and t.signed) else t.min_code
    return {"type": t.to_string(), "lo": lo, "hi": t.max_code, "wrap": wrap}
