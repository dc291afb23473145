"""Numeric types carried on every IR tensor and parameter.

A fixed-point value is an integer code ``q`` with real value ``q * 2**-frac``.  The type also
carries how values are *produced* into it (rounding and overflow), because on the AI Engine those
are properties of the shift-round-saturate (SRS) that writes the tensor, and the emulator has to
reproduce them exactly.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError


class Rounding(enum.Enum):
    """Rounding applied when low bits are dropped (SRS, float -> fixed).

    Names follow ``aie::rounding_mode`` (UG1529); ``SYM_FLOOR``/``SYM_CEIL`` exist on AIE-ML and
    later only (UG1583 rnd_sym_floor / rnd_sym_ceil).
    """

    FLOOR = "floor"  # towards -inf (truncate), ap_fixed TRN
    CEIL = "ceil"  # towards +inf
    SYM_FLOOR = "symmetric_floor"  # towards zero, ap_fixed TRN_ZERO
    SYM_CEIL = "symmetric_ceil"  # away from zero
    POS_INF = "positive_inf"  # half up (towards +inf), ap_fixed RND
    NEG_INF = "negative_inf"  # half down (towards -inf), ap_fixed RND_MIN_INF
    SYM_INF = "symmetric_inf"  # half away from zero, ap_fixed RND_INF
    SYM_ZERO = "symmetric_zero"  # half towards zero, ap_fixed RND_ZERO
    CONV_EVEN = "conv_even"  # half to even, ap_fixed RND_CONV, ONNX QuantizeLinear
    CONV_ODD = "conv_odd"  # half to odd


class Saturation(enum.Enum):
    """Overflow handling; names follow ``aie::saturation_mode``."""

    WRAP = "none"  # two's-complement wrap, ap_fixed WRAP
    SATURATE = "saturate"  # clamp to [min, max], ap_fixed SAT
    SYMMETRIC = "symmetric"  # clamp to [-max, max], ap_fixed SAT_SYM


_AP_ROUNDING = {
    "TRN": Rounding.FLOOR,
    "TRN_ZERO": Rounding.SYM_FLOOR,
    "RND": Rounding.POS_INF,
    "RND_ZERO": Rounding.SYM_ZERO,
    "RND_INF": Rounding.SYM_INF,
    "RND_MIN_INF": Rounding.NEG_INF,
    "RND_CONV": Rounding.CONV_EVEN,
}
_AP_SATURATION = {
    "WRAP": Saturation.WRAP,
    "SAT": Saturation.SATURATE,
    "SAT_SYM": Saturation.SYMMETRIC,
}
_AP_ROUNDING_NAME = {v: k for k, v in _AP_ROUNDING.items()}
# AIE rounding modes ap_fixed has no name for; accepted and printed under these names.
_EXTRA_ROUNDING = {"CEIL": Rounding.CEIL, "SYM_CEIL": Rounding.SYM_CEIL, "CONV_ODD": Rounding.CONV_ODD}
_ROUNDING_BY_NAME = {**_AP_ROUNDING, **_EXTRA_ROUNDING}
_AP_ROUNDING_NAME.update({v: k for k, v in _EXTRA_ROUNDING.items()})
_AP_SATURATION_NAME = {v: k for k, v in _AP_SATURATION.items()}


class IntegerCodes:
    """The code range of a ``width``-bit integer container, signed (two's complement) or not."""

    width: int
    signed: bool

    @property
    def min_code(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def max_code(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1


@dataclass(frozen=True)
class FixedType(IntegerCodes):
    """Two's-complement (or unsigned) fixed point: ``width`` bits, ``frac`` fractional bits.

    ``frac`` may be negative or exceed ``width`` (power-of-two scales of any size).
    """

    width: int
    frac: int
    signed: bool = True
    rounding: Rounding = Rounding.CONV_EVEN
    saturation: Saturation = Saturation.SATURATE

    def __post_init__(self) -> None:
        if not 1 <= self.width <= 80:
            raise ConfigError(f"fixed-point width {self.width} is outside 1..80 bits")

    @property
    def int_bits(self) -> int:
        """Integer bits including the sign bit (ap_fixed's I)."""
        return self.width - self.frac

    @property
    def scale(self) -> float:
        """Real value of one code step (2**-frac)."""
        return 2.0 ** (-self.frac)

    @property
    def container_bits(self) -> int:
        """Smallest AIE storage type holding the codes (8, 16, 32 or 64 bits)."""
        for bits in (8, 16, 32, 64):
            if self.width <= bits:
                return bits
        return 128

    @property
    def c_type(self) -> str:
        """AIE scalar type name (int8, uint8, int16, int32, ...)."""
        return f"{'' if self.signed else 'u'}int{self.container_bits}"

    def with_modes(self, rounding: Rounding, saturation: Saturation) -> FixedType:
        return FixedType(self.width, self.frac, self.signed, rounding, saturation)

    def to_string(self) -> str:
        """ap_fixed-style spelling, round-trips through :func:`parse_type`."""
        base = "fixed" if self.signed else "ufixed"
        rnd = _AP_ROUNDING_NAME[self.rounding]
        sat = _AP_SATURATION_NAME[self.saturation]
        return f"{base}<{self.width},{self.int_bits},{rnd},{sat}>"

    def __str__(self) -> str:
        return self.to_string()


# Float storage types: name -> the AIE API scalar type (UG1529 "Basic Types"; float16 on AIE-MLv2 only).
FLOAT_C_TYPES = {"fp32": "float", "bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class FloatType:
    """IEEE float32, bfloat16 or IEEE binary16 (``fp16``, AIE-MLv2's float16) storage."""

    name: str = "fp32"

    def __post_init__(self) -> None:
        if self.name not in FLOAT_C_TYPES:
            raise ConfigError(f"unknown float type {self.name!r}; use {', '.join(map(repr, FLOAT_C_TYPES))}")

    @property
    def container_bits(self) -> int:
        return 32 if self.name == "fp32" else 16

    @property
    def c_type(self) -> str:
        return FLOAT_C_TYPES[self.name]

    def to_string(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class AffineType(IntegerCodes):
    """Affine integer quantisation (ONNX ``QuantizeLinear`` / ``DequantizeLinear``, onnxruntime
    ``quantize_static``): codes ``q`` with real value ``scale * (q - zero_point)``.

    ``scale`` holds float32 values: one (per tensor) or one per channel of the last axis (a Dense
    weight's output features).  Values are produced into the type by rounding half to even and
    saturating to the code range, as ``QuantizeLinear`` does (``rounding`` / ``saturation``, fixed).
    Real values of the scale are exact binary fractions, so the requantisation between two such
    types is an exact rational the compiler approximates by an integer multiplier and a shift
    (:mod:`aieflow.numerics.requant`).
    """

    width: int
    signed: bool
    scale: tuple[float, ...]
    zero_point: int = 0

    def __post_init__(self) -> None:
        if self.width not in (8, 16, 32):
            raise ConfigError(f"affine quantisation to {self.width} bits; aieflow takes 8-, 16- and 32-bit codes")
        object.__setattr__(self, "scale", tuple(float(np.float32(s)) for s in self.scale))
        if not self.scale or not all(math.isfinite(s) and s > 0 for s in self.scale):
            raise ConfigError(f"affine scales must be positive finite float32 numbers, got {self.scale[:4]}")
        if not self.min_code <= self.zero_point <= self.max_code:
            raise ConfigError(f"zero point {self.zero_point} outside the {self.c_type} range")

    rounding = Rounding.CONV_EVEN
    saturation = Saturation.SATURATE

    @property
    def per_channel(self) -> bool:
        return len(self.scale) > 1

    @property
    def container_bits(self) -> int:
        return self.width

    @property
    def c_type(self) -> str:
        return f"{'' if self.signed else 'u'}int{self.width}"

    def to_string(self) -> str:
        """``affine<width,s|u,zero_point,scale[;scale...]>`` with hexadecimal floats (exact);
        round-trips through :func:`type_from_json`."""
        scales = ";".join(float(s).hex() for s in self.scale)
        return f"affine<{self.width},{'s' if self.signed else 'u'},{self.zero_point},{scales}>"

    def __str__(self) -> str:
        if self.per_channel:
            return f"{self.c_type} (zero point {self.zero_point}, {len(self.scale)} per-channel scales)"
        return f"{self.c_type} (scale {self.scale[0]:.8g}, zero point {self.zero_point})"


NumericType = FixedType | FloatType | AffineType

_AFFINE_RE = re.compile(r"^affine<(?P<w>\d+),(?P<s>[su]),(?P<z>-?\d+),(?P<scales>[^>]+)>$")

# Range of a fixed-point type a config gives (config.py checks it): its values must be normal
# float32 numbers (the format of the models' tensors and of the samples the host converts), so the
# step 2^-frac is at least 2^-126 and the largest magnitude, below 2^(int_bits - 1), at most 2^127.
MAX_FRAC_BITS = 126
MAX_INT_BITS = 128

_TYPE_RE = re.compile(
    r"^\s*(?P<kind>ap_fixed|ap_ufixed|fixed|ufixed|ap_int|ap_uint|int|uint)\s*"
    r"<\s*(?P<args>[^>]*)>\s*$"
)
_PLAIN_INT_RE = re.compile(r"^\s*(?P<u>u?)int(?P<w>8|16|32|64)\s*$")


def _mode_key(field: str) -> str:
    """A rounding / overflow field as aieflow names it: hls4ml and Vitis HLS write ``AP_RND_CONV`` /
    ``AP_SAT``, aieflow ``RND_CONV`` / ``SAT``; both are accepted."""
    key = field.strip().upper()
    return key[3:] if key.startswith("AP_") else key


def parse_type(text: str) -> NumericType:
    """Parse ``fixed<W,I[,Q[,O]]>``, ``ap_fixed<...>``, ``ufixed``, ``int<W>``, ``int8``, ``fp32``, ``bf16``, ``fp16``;
    the modes as ap_fixed names them (``RND_CONV``, ``SAT``) or as hls4ml writes them (``AP_RND_CONV``).

    hls4ml's spelling is accepted as it writes it: ``ap_fixed<18,7,AP_RND_CONV,AP_SAT>``,
    ``ap_fixed<8,3>``, ``ap_int<8>``, ``ap_uint<4>``; the modes map to the SRS modes of the same
    name (``AP_TRN`` floor, ``AP_TRN_ZERO`` towards zero, ``AP_RND`` half up, ``AP_RND_ZERO`` half
    towards zero, ``AP_RND_MIN_INF`` half down, ``AP_RND_INF`` half away from zero, ``AP_RND_CONV``
    half to even; ``AP_WRAP``, ``AP_SAT``, ``AP_SAT_SYM``) and ``AP_SAT_ZERO`` (no SRS equivalent)
    is refused by name.  Defaults for omitted modes follow ap_fixed (TRN, WRAP), because that is what
    a user writing an ap_fixed string means.
    """
    if not isinstance(text, str):
        raise ConfigError(f"numeric type must be a string, got {text!r}")
    t = text.strip()
    if t in ("fp32", "float", "float32"):
        return FloatType("fp32")
    if t in ("bf16", "bfloat16"):
        return FloatType("bf16")
    if t in ("fp16", "float16"):
        return FloatType("fp16")
    plain = _PLAIN_INT_RE.match(t)
    if plain:
        return FixedType(int(plain["w"]), 0, signed=not plain["u"])
    m = _TYPE_RE.match(t)
    if not m:
        raise ConfigError(
            f"cannot parse numeric type {text!r}; write e.g. 'fixed<16,6,RND_CONV,SAT>', "
            "'ufixed<8,0>', 'int8', 'fp32' or 'bf16'"
        )
    kind = m["kind"]
    args = [a.strip() for a in m["args"].split(",")]
    if not all(args):
        # An empty field ("fixed<16,,6>") would otherwise shift the later ones into the wrong slot.
        raise ConfigError(f"cannot parse numeric type {text!r}: empty field between commas")
    signed = "u" not in kind.replace("ap_", "")[:1]
    try:
        if kind in ("ap_int", "ap_uint", "int", "uint"):
            if len(args) != 1:
                raise ValueError
            width, int_bits, rest = int(args[0]), int(args[0]), []
        else:
            if len(args) < 2 or len(args) > 5:
                raise ValueError
            width, int_bits, rest = int(args[0]), int(args[1]), args[2:]
    except ValueError:
        raise ConfigError(
            f"cannot parse numeric type {text!r}: expected <width,integer_bits[,rounding[,overflow]]>"
        ) from None
    rounding, saturation = Rounding.FLOOR, Saturation.WRAP
    if rest:
        key = _mode_key(rest[0])
        if key not in _ROUNDING_BY_NAME:
            raise ConfigError(
                f"unknown rounding {rest[0]!r} in {text!r}; use one of {', '.join(_ROUNDING_BY_NAME)} "
                "(hls4ml's AP_ prefix, e.g. AP_RND_CONV, is accepted too)"
            )
        rounding = _ROUNDING_BY_NAME[key]
    if len(rest) > 1:
        key = _mode_key(rest[1])
        if key == "SAT_ZERO":
            raise ConfigError(
                f"overflow mode {rest[1].strip()} in {text!r} (overflow to zero) has no AI Engine equivalent; the SRS "
                "saturates or wraps: use SAT (AP_SAT), SAT_SYM (AP_SAT_SYM) or WRAP (AP_WRAP)"
            )
        if key not in _AP_SATURATION:
            raise ConfigError(
                f"unknown overflow {rest[1]!r} in {text!r}; use one of {', '.join(_AP_SATURATION)} "
                "(or AP_SAT, AP_SAT_SYM, AP_WRAP)"
            )
        saturation = _AP_SATURATION[key]
    if len(rest) > 2:
        # ap_fixed's N (saturation bits of WRAP) changes the values; ignoring it would be silent.
        try:
            n_bits = int(rest[2])
        except ValueError:
            n_bits = None
        if n_bits != 0:
            raise ConfigError(
                f"saturation-bits field {rest[2]!r} in {text!r} is not supported; omit it or use 0"
            )
    return FixedType(width, width - int_bits, signed, rounding, saturation)


def type_from_json(obj: str) -> NumericType:
    """A type as design.json / the saved graph write it: :func:`parse_type`'s spellings and
    :class:`AffineType` (which only a model's own quantisation gives, never a config)."""
    m = _AFFINE_RE.match(obj.strip()) if isinstance(obj, str) else None
    if m:
        try:
            scales = tuple(float.fromhex(v) for v in m["scales"].split(";"))
        except ValueError:
            raise ConfigError(f"cannot parse affine type {obj!r}") from None
        return AffineType(int(m["w"]), m["s"] == "s", scales, int(m["z"]))
    return parse_type(obj)
