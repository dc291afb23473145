"""Element types of the GEMM designs and the width of C each one needs.

The micro-tile is 8 x 8 for every type (Cr fills all accumulator registers, spec "Micro-kernel");
what changes per type is the ``aie::mmul`` shape that tiles it (UG1529, AIE row), the MAC rate
(catalog) and whether the exact sums fit an int32 C.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class GemmType:
    name: str  # user-facing dtype of A and B
    np_dtype: str
    aie_type: str  # AIE scalar type spelling (kernel side)
    c_type: str  # <cstdint> spelling (PL / host side)
    bits: int
    pair: tuple[str, str]  # key of the catalog's MAC rate
    mmul: tuple[int, int, int]  # (M, K, N) of aie::mmul tiling the micro-tile (UG1529, AIE)
    acc: str  # accumulator tag
    acc_bits: int  # native accumulator lane width on AIE1 (32 = accfloat)
    is_float: bool
    lo: int  # value range (integers; unused for floats)
    hi: int

    @property
    def bytes(self) -> int:
        return self.bits // 8

    @property
    def pl_holds_bits(self) -> bool:
        """The PL and host hold the elements as bit patterns (``c_type``, bf16: std::uint16_t) of the
        AI Engine's type (``aie_type``, bfloat16): the PLIOs and memory tiles carry ``aie_type``."""
        return self.is_float and self.aie_type != self.c_type

    @property
    def max_product(self) -> int:
        """Largest |a * b| of two values of this type (the bound on one partial sum term)."""
        return max(self.lo * self.lo, self.hi * self.hi, abs(self.lo * self.hi))


# AIE1 aie::mmul shapes (UG1529 table, AIE row): 8b x 8b 4x16x8 (two per 8 x 8 micro-tile: the
# spec's "two 64-element Ar vectors, four 32-element Br vectors" per 16-deep k step); 16b x 16b
# 4x4x8; float 4x2x4 (four per micro-tile, 2 x 2).
TYPES: dict[str, GemmType] = {
    "uint8": GemmType("uint8", "uint8", "uint8", "std::uint8_t", 8, ("i8", "i8"), (4, 16, 8), "acc48", 48,
                      False, 0, 255),
    "int8": GemmType("int8", "int8", "int8", "std::int8_t", 8, ("i8", "i8"), (4, 16, 8), "acc48", 48,
                     False, -128, 127),
    "int16": GemmType("int16", "int16", "int16", "std::int16_t", 16, ("i16", "i16"), (4, 4, 8), "acc48", 48,
                      False, -32768, 32767),
    "fp32": GemmType("fp32", "float32", "float", "float", 32, ("fp32", "fp32"), (4, 2, 4), "accfloat", 32,
                     True, 0, 0),
    # bf16 (AIE-ML / AIE-MLv2 only: AIE1 has no bf16 MACs, refused in api.gemm): A and B are bf16, held
    # on the PL / host side as their 16-bit patterns (std::uint16_t; plain C++ has no bfloat16) and
    # read by the AI Engine as bfloat16; products exact in fp32, sums in accfloat lanes, C float32.
    # The mmul shape is the generation's (catalog), set by aieml.ml_type; (0, 0, 0) here.
    "bf16": GemmType("bf16", "float32", "bfloat16", "std::uint16_t", 16, ("bf16", "bf16"), (0, 0, 0), "accfloat",
                     32, True, 0, 0),
}


@dataclass(frozen=True)
class OutputType:
    """What C holds: ``int32``, ``int64`` (exact sums wider than int32: each Cr leaves the AI Engine
    as two int32 halves, hi = floor(sum / 2^16) and lo = sum - hi * 2^16) or ``float32``."""

    name: str  # int32 | int64 | float32
    c_type: str
    wide: bool  # Cr as (hi, lo) int32 pairs
    reason: str


def get_type(dtype: str) -> GemmType:
    try:
        return TYPES[str(dtype).lower()]
    except KeyError:
        raise ConfigError(f"unsupported GEMM dtype {dtype!r}; choose one of {', '.join(TYPES)}") from None


def output_type(t: GemmType, k: int, requested: str | None = None) -> OutputType:
    """The narrowest C that holds every exact sum of ``k`` products (or the ``requested`` one,
    checked)."""
    if t.is_float:
        if requested not in (None, "auto", "float32", "fp32"):
            raise ConfigError(f"dtype {t.name} produces a float32 C, not {requested}",
                              hint="leave --output out (C is float32: each k block's accfloat sums, added in float32)")
        return OutputType("float32", "float", False, f"{t.name} accumulates in accfloat lanes; C is float32")
    worst = k * t.max_product
    if worst > INT64_MAX:
        raise ConfigError(f"k = {k:,}: sums of up to {k:,} x {t.max_product:,} = {worst:,} exceed int64",
                          hint="split k into several GEMM calls")
    fits32 = worst <= INT32_MAX
    why = (f"k x max|a*b| = {k:,} x {t.max_product:,} = {worst:,} "
           f"{'<=' if fits32 else '>'} int32 max {INT32_MAX:,}")
    if requested in (None, "auto"):
        requested = "int32" if fits32 else "int64"
    if requested == "int32":
        if not fits32:
            raise ConfigError(
                f"{t.name} GEMM with k = {k:,} may overflow an int32 C: {why}",
                hint="use output='int64' (--output int64): C then accumulates exactly in 64 bits",
            )
        return OutputType("int32", "std::int32_t", False, why)
    if requested == "int64":
        return OutputType("int64", "std::int64_t", True, why + "; Cr leaves the AI Engine as (hi, lo) int32 pairs")
    raise ConfigError(f"unsupported GEMM output {requested!r} for {t.name}; choose int32 or int64")
