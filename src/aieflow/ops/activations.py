"""Sigmoid and tanh for recurrent layers: exact functions and lookup tables, in one place.

A lookup table (``TableSpec``) is what FPGA flows such as hls4ml, and the PL side of AI Engine
designs, actually compute; reproducing a design bit for bit means reproducing its table exactly:
its size, input range, how the index is rounded from the input, the entries' type and how the
entries were evaluated.  Definitions (``shared/spec/rnn-semantics.md``,
``shared/spec/espcn-super-resolution.md``):

* index ``= N/2 + R(x * N / (2 L))``, clamped to ``[0, N-1]``, for a table of ``N`` entries
  covering ``[-L, L)``; ``R`` is the index rounding (hls4ml: C ``int()``, toward zero).  With a
  fixed-point input the value is formed exactly and the index is a C ``int`` (32-bit wrap, as
  ap_fixed's ``to_int``).  One hls4ml detail: its ap_fixed division ``x * N / 16`` truncates at the
  input's resolution, so for inputs with negative fractional bits (steps coarser than 1) the
  quotient's low bits are lost before ``int()``; ``trunc`` reproduces that.  A float input is
  rounded exactly in float64 (the scale ``N / 2L`` must be a dyadic rational).
* entry ``i`` is ``f((i - N/2) * 2L / N)`` converted to the entry type with its rounding and
  overflow.  ``evaluation="float32-c"`` evaluates ``f`` as hls4ml's C++ does: the abscissa computed
  in double and stored as float, ``sigmoid = 1.0 / (1 + expf(-x))`` (float add, double divide,
  float result), ``tanh = tanhf(x)``; aieflow uses correctly rounded ``expf`` / ``tanhf``.  glibc's
  ``tanhf`` is not always correctly rounded, so a table whose entry type resolves one float32 ulp
  could differ from hls4ml's on some platform; the default hls4ml tables are checked entry by
  entry against hls4ml's own C++ in the tests.  ``evaluation="float64"`` evaluates ``f`` in double.

Presets: ``hls4ml`` (1024 entries, ``ap_fixed<18,8>`` TRN/WRAP, sigmoid over [-8, 8), tanh over
[-4, 4), index truncated toward zero) and ``espcn-thesis`` (tanh only: 1024 entries over [-4, 4),
entries rounded to ``ap_fixed<12,4>``, index ``512 + round(x * 128)`` with C ``round`` = half away
from zero).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..numerics import fixed
from ..numerics.types import FixedType, Rounding, parse_type

FUNCTIONS = ("sigmoid", "tanh")
EVALUATIONS = ("float32-c", "float64")

# Index rounding names a user may write, and what they mean.
INDEX_ROUNDINGS: Mapping[str, Rounding] = {
    "trunc": Rounding.SYM_FLOOR,  # C int(): toward zero (hls4ml)
    "floor": Rounding.FLOOR,
    "round": Rounding.SYM_INF,  # C round(): half away from zero
    "half_even": Rounding.CONV_EVEN,
    "half_up": Rounding.POS_INF,
}
_ROUNDING_NAMES = {v: k for k, v in INDEX_ROUNDINGS.items()}
_INT32 = 32


@dataclass(frozen=True)
class ExactActivation:
    """The function itself: float64 evaluation, rounded into the consumer's type."""

    function: str

    @property
    def label(self) -> str:
        return "exact"


@dataclass(frozen=True)
class TableSpec:
    """A lookup table over ``[-limit, limit)``; see the module docstring for the definitions."""

    function: str
    size: int
    limit: Fraction
    index_rounding: Rounding
    entry: FixedType
    evaluation: str = "float32-c"
    preset: str = ""  # the preset it came from, for reports; "" for a custom table

    def __post_init__(self) -> None:
        where = f"activations.{self.function}"
        if self.function not in FUNCTIONS:
            raise ConfigError(f"unknown activation {self.function!r}; tables exist for {', '.join(FUNCTIONS)}")
        if not isinstance(self.size, int) or isinstance(self.size, bool) or not 2 <= self.size <= 1 << 20:
            raise ConfigError(f"{where}: table size must be an integer in 2..{1 << 20}, got {self.size!r}")
        if self.limit <= 0:
            raise ConfigError(f"{where}: the table range must be [-L, L) with L > 0, got L = {self.limit}")
        den = self.scale.denominator
        if den & (den - 1):
            raise ConfigError(
                f"{where}: size / range = {self.scale} is not a dyadic rational, so the index "
                "x * size / range could not be formed exactly",
                hint="choose the range so that size / (2 L) is an integer times a power of two",
            )
        if self.entry.width > 32:
            raise ConfigError(f"{where}: entry type {self.entry} is wider than 32 bits")
        if self.evaluation not in EVALUATIONS:
            raise ConfigError(f"{where}: evaluation must be one of {', '.join(EVALUATIONS)}, got {self.evaluation!r}")

    @property
    def label(self) -> str:
        return self.preset or "table"

    @property
    def scale(self) -> Fraction:
        """Index steps per unit of input: N / (2 L)."""
        return Fraction(self.size) / (2 * self.limit)

    @property
    def offset(self) -> int:
        return self.size // 2

    def codes(self) -> np.ndarray:
        """Entry codes in :attr:`entry` (int64, read-only)."""
        return _entry_codes(self)

    def values(self) -> np.ndarray:
        """Entry values (float64, exact)."""
        return fixed.dequantize(self.codes(), self.entry)

    def index_of_codes(self, codes: np.ndarray, frac: int) -> np.ndarray:
        """Table index of fixed-point inputs ``codes * 2**-frac``: exact, with C-int wrap."""
        codes = np.asarray(codes, dtype=np.int64)
        p, q = self.scale.numerator, self.scale.denominator
        span = 2 * self.limit
        if frac < 0 and self.index_rounding is Rounding.SYM_FLOOR and span.denominator == 1:
            # hls4ml's ap_fixed ``x * N / 2L`` divides at the input's resolution (2**-frac > 1
            # here), truncating toward zero, before int() does: the quotient's low bits are lost.
            raw = fixed.round_div(codes * self.size, int(span), Rounding.SYM_FLOOR) << -frac
        elif frac >= 0 and (q << frac) & ((q << frac) - 1) == 0:  # a power of two: a shift
            raw = fixed.round_shift(codes * p, (q << frac).bit_length() - 1, self.index_rounding)
        elif frac >= 0:
            raw = fixed.round_div(codes * p, q << frac, self.index_rounding)
        else:
            raw = fixed.round_div((codes * p) << -frac, q, self.index_rounding)
        raw = fixed.wrap(raw, _INT32)
        idx = fixed.wrap(raw + self.offset, _INT32)
        return np.clip(idx, 0, self.size - 1)

    def index_of_floats(self, x: np.ndarray) -> np.ndarray:
        """Table index of float inputs, rounded exactly (the scale is dyadic)."""
        x = np.asarray(x, dtype=np.float64)
        if np.isnan(x).any():
            raise ConfigError(f"{self.function} table: input contains NaN")
        y = np.clip(x, -2.0**40, 2.0**40) * float(self.scale)  # exact: dyadic scale, no overflow
        q = np.floor(y)
        d = y - q
        r = fixed._round_from_floor(q, d != 0, d > 0.5, d == 0.5, self.index_rounding)
        return np.clip(r + self.offset, 0, self.size - 1).astype(np.int64)


@dataclass(frozen=True)
class NamedVariant:
    """How a layer function other than sigmoid / tanh is computed (``ops/activation.py``):
    ``softmax``: ``table`` (the exp table and the integer reciprocal, the default) or ``integer``
    (I-BERT's integer exp, no table); ``gelu``: ``table`` (the full table / interpolation, the
    default) or ``polynomial`` (I-BERT's i-GELU)."""

    function: str
    name: str

    @property
    def label(self) -> str:
        return self.name


# configurable layer functions beyond the recurrent tables: function -> its variants (default first)
VARIANTS: Mapping[str, tuple[str, ...]] = {"softmax": ("table", "integer"), "gelu": ("table", "polynomial")}

Activation = ExactActivation | TableSpec | NamedVariant


def _abscissae_c(spec: TableSpec) -> np.ndarray:
    """hls4ml's ``float in_val = 2 * L * (ii - float(N) / 2.0) / float(N)`` (double, then float)."""
    i = np.arange(spec.size, dtype=np.float64)
    return ((2.0 * float(spec.limit)) * (i - spec.size / 2.0) / float(spec.size)).astype(np.float32)


def _evaluate_c(function: str, x32: np.ndarray) -> np.ndarray:
    """hls4ml's float table functions; expf / tanhf correctly rounded (float64, then float)."""
    if function == "sigmoid":
        e = np.exp(-x32.astype(np.float64)).astype(np.float32)  # std::exp(float)
        denom = np.float32(1) + e  # int 1 + float: float addition
        return (1.0 / denom.astype(np.float64)).astype(np.float32)  # 1.0 / float: double, returned as float
    return np.tanh(x32.astype(np.float64)).astype(np.float32)


def exact(function: str, x: np.ndarray) -> np.ndarray:
    """sigmoid / tanh in float64."""
    x = np.asarray(x, dtype=np.float64)
    if function == "sigmoid":
        with np.errstate(over="ignore"):  # exp overflow: sigmoid is 0 there
            return 1.0 / (1.0 + np.exp(-x))
    return np.tanh(x)


@functools.lru_cache(maxsize=64)
def _entry_codes(spec: TableSpec) -> np.ndarray:
    if spec.evaluation == "float32-c":
        values = _evaluate_c(spec.function, _abscissae_c(spec)).astype(np.float64)
    else:
        i = np.arange(spec.size, dtype=np.float64)
        values = exact(spec.function, (i - spec.offset) / float(spec.scale))
    codes = fixed.quantize(values, spec.entry)
    codes.setflags(write=False)
    return codes


# ----------------------------------------------------------------------------- presets


def hls4ml_table(function: str, size: int = 1024, entry: FixedType | None = None) -> TableSpec:
    """hls4ml's default table (``nnet_activation.h``): sigmoid over [-8, 8), tanh over [-4, 4)."""
    return TableSpec(
        function,
        size,
        Fraction(8 if function == "sigmoid" else 4),
        Rounding.SYM_FLOOR,
        entry or parse_type("fixed<18,8,TRN,WRAP>"),
        "float32-c",
        "hls4ml",
    )


def espcn_table(function: str) -> TableSpec:
    """The ESPCN thesis's tanh table (espcn-super-resolution.md); it has no sigmoid."""
    if function != "tanh":
        raise ConfigError(
            "activations.sigmoid: the espcn-thesis preset defines a tanh table only",
            hint="use hls4ml, exact or an explicit table for sigmoid",
        )
    return TableSpec("tanh", 1024, Fraction(4), Rounding.SYM_INF, parse_type("fixed<12,4,RND>"), "float64", "espcn-thesis")


PRESETS = ("exact", "hls4ml", "espcn-thesis")
_TABLE_KEYS = ("size", "range", "index_rounding", "entry", "evaluation")


def parse_activation(function: str, raw: Any) -> Activation:
    """One ``activations.<function>`` value: a preset name or an explicit table mapping.

    An explicit table starts from the hls4ml table for that function; keys given replace its
    fields: ``size``, ``range`` (``[-L, L]`` or ``L``), ``index_rounding`` (trunc, floor, round,
    half_even, half_up), ``entry`` (a fixed-point type) and ``evaluation`` (float32-c, float64).
    """
    where = f"activations.{function}"
    if function in VARIANTS:
        name = raw.strip().lower() if isinstance(raw, str) else raw
        if name not in VARIANTS[function]:
            raise ConfigError(f"{where}: unknown variant {raw!r}; use one of {', '.join(VARIANTS[function])}")
        return NamedVariant(function, name)
    if function not in FUNCTIONS:
        raise ConfigError(f"activations: unknown function {function!r}; configurable: "
                          f"{', '.join((*FUNCTIONS, *VARIANTS))}")
    if isinstance(raw, str):
        name = raw.strip().lower()
        if name == "exact":
            return ExactActivation(function)
        if name == "hls4ml":
            return hls4ml_table(function)
        if name in ("espcn-thesis", "espcn"):
            return espcn_table(function)
        raise ConfigError(
            f"{where}: unknown activation {raw!r}; use one of {', '.join(PRESETS)} or a table "
            f"mapping with keys {', '.join(_TABLE_KEYS)}"
        )
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a preset name or a table mapping, got {raw!r}")
    unknown = set(raw) - set(_TABLE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(_TABLE_KEYS)}")
    base = hls4ml_table(function)
    size = raw.get("size", base.size)
    limit = _parse_limit(where, raw["range"]) if "range" in raw else base.limit
    rounding = base.index_rounding
    if "index_rounding" in raw:
        key = str(raw["index_rounding"]).lower()
        if key not in INDEX_ROUNDINGS:
            raise ConfigError(f"{where}.index_rounding: unknown {raw['index_rounding']!r}; use {', '.join(INDEX_ROUNDINGS)}")
        rounding = INDEX_ROUNDINGS[key]
    entry = base.entry
    if "entry" in raw:
        try:
            entry = parse_type(raw["entry"])
        except ConfigError as e:
            raise ConfigError(f"{where}.entry: {e}") from None
        if not isinstance(entry, FixedType):
            raise ConfigError(f"{where}.entry must be a fixed-point type, got {entry}")
    evaluation = str(raw.get("evaluation", base.evaluation))
    return TableSpec(function, size, limit, rounding, entry, evaluation, "")


def _parse_limit(where: str, raw: Any) -> Fraction:
    try:
        if isinstance(raw, list | tuple):
            if len(raw) != 2 or Fraction(raw[0]) != -Fraction(raw[1]):
                raise ConfigError(
                    f"{where}.range must be symmetric, [-L, L], got {list(raw)!r}",
                    hint="tables are indexed N/2 + round(x N / 2L): centre them on 0",
                )
            return Fraction(raw[1])
        return Fraction(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}.range must be a number L or [-L, L], got {raw!r}") from None


def parse_activations(raw: Any, where: str = "activations") -> Mapping[str, Activation]:
    """The ``activations: {sigmoid: ..., tanh: ...}`` mapping of a config (top level or layer)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping like {{sigmoid: hls4ml, tanh: exact}}, got {raw!r}")
    out = {}
    for k, v in raw.items():
        if k not in FUNCTIONS and k not in VARIANTS:
            raise ConfigError(f"{where}: unknown function {k!r}; configurable: {', '.join((*FUNCTIONS, *VARIANTS))}")
        out[k] = parse_activation(k, v)
    return out


def activation_to_json(a: Activation) -> Any:
    """The config / design.json form; round-trips through :func:`parse_activation`."""
    if isinstance(a, ExactActivation):
        return "exact"
    if isinstance(a, NamedVariant):
        return a.name
    if a.preset and a == (hls4ml_table(a.function) if a.preset == "hls4ml" else espcn_table(a.function)):
        return a.preset
    return {
        "size": a.size,
        "range": [_number(-a.limit), _number(a.limit)],
        "index_rounding": _ROUNDING_NAMES[a.index_rounding],
        "entry": a.entry.to_string(),
        "evaluation": a.evaluation,
    }


def _number(f: Fraction) -> float | str:
    """A float when it is exact (dyadic), else the fraction as text ("1/3")."""
    d = f.denominator
    return float(f) if d & (d - 1) == 0 else str(f)


def describe(a: Activation) -> str:
    """One line for reports."""
    if isinstance(a, ExactActivation):
        return f"{a.function}: exact"
    if isinstance(a, NamedVariant):
        return f"{a.function}: {a.name}"
    return (
        f"{a.function}: {a.label} table, {a.size} entries over [-{a.limit}, {a.limit}), "
        f"index {_ROUNDING_NAMES[a.index_rounding]}, entries {a.entry}"
    )


# ----------------------------------------------------------------------------- evaluation


def apply_fixed(a: Activation, codes: np.ndarray, frac: int, out: FixedType) -> np.ndarray:
    """Activation of fixed-point inputs, written into ``out`` (hls4ml: ``res[i] = (res_T) table[index]``)."""
    if isinstance(a, ExactActivation):
        x = fixed.dequantize(codes, FixedType(64, frac))
        return fixed.quantize(exact(a.function, x), out)
    codes = np.asarray(codes)
    if codes.size >= _MAP_MIN_INPUTS and codes.dtype.kind in "iu":
        lo, hi = int(codes.min()), int(codes.max())
        if -MAP_HALF <= lo and hi < MAP_HALF:  # the emulator's case: codes of a <= 16-bit type
            return code_map(a, int(frac), out)[np.add(codes, MAP_HALF, dtype=np.int64)]
    return _apply_table(a, codes, frac, out)


def _apply_table(a: TableSpec, codes: np.ndarray, frac: int, out: FixedType) -> np.ndarray:
    entries = a.codes()[a.index_of_codes(codes, frac)]
    return fixed.cast(entries, a.entry.frac, out)


# The table lookup is an element-wise function of the input code: for inputs of a type up to 16
# bits, it is evaluated once for every code (by _apply_table itself, so it is the same function)
# and then read by indexing, the emulator's per-step gate math.  Small inputs skip the map.
MAP_HALF = 1 << 15
_MAP_MIN_INPUTS = 1 << 13


@functools.lru_cache(maxsize=64)
def code_map(a: TableSpec, frac: int, out: FixedType, dtype: type = np.int64) -> np.ndarray:
    """The table's output code for every input code in ``[-MAP_HALF, MAP_HALF)`` (index ``code +
    MAP_HALF``), read-only; ``dtype`` int32 for callers whose ``out`` codes fit it."""
    table = _apply_table(a, np.arange(-MAP_HALF, MAP_HALF, dtype=np.int64), frac, out)
    if dtype is not np.int64:
        if out.min_code < np.iinfo(dtype).min or out.max_code > np.iinfo(dtype).max:
            raise ValueError(f"{out} codes do not fit {np.dtype(dtype).name}")
        table = table.astype(dtype)
    table.flags.writeable = False
    return table


def apply_float32(a: Activation, x: np.ndarray) -> np.ndarray:
    """Activation of float32 inputs: float64 evaluation rounded to float32, or the table entry."""
    if isinstance(a, ExactActivation):
        return exact(a.function, np.asarray(x, dtype=np.float32)).astype(np.float32)
    return a.values()[a.index_of_floats(x)].astype(np.float32)
