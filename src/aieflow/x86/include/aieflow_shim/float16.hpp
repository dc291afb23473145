// aieflow x86 shim: float16 scalar type (global scope, as in the real tools; AIE-MLv2 only).
//
// Storage: IEEE-754 binary16 (1 sign, 5 exponent, 10 mantissa bits; UG1603 "Data Types").
// float -> float16 is GCC's _Float16 conversion: round to nearest, ties to even, subnormals kept,
// overflow to infinity (from 65520 on), NaN stays NaN.  float16 -> float is exact.
// Shim assumptions (UG1529 documents neither the rounding of a conversion to float16 nor its
// subnormal handling): the IEEE default above, the same as aieflow's emulator (numerics/fixed.py
// to_fp16).  Arithmetic in float as for bfloat16 (half_float.hpp).
#pragma once

#include <bit>
#include <concepts>
#include <cstdint>
#include <type_traits>

#include "config.hpp"
#include "half_float.hpp"

class float16 : public aieflow_shim::detail::half_float<float16> {
public:
    constexpr float16() = default;
    float16(float f) : half_float(f) {}  // NOLINT(google-explicit-constructor)
    float16(double d) : float16(static_cast<float>(d)) {}  // via float (double rounding)
    template <std::integral I>
    float16(I v) : float16(static_cast<float>(v)) {}  // via float

    static float to_float(std::uint16_t b) { return static_cast<float>(std::bit_cast<_Float16>(b)); }
    static std::uint16_t round_from_float(float f) { return std::bit_cast<std::uint16_t>(static_cast<_Float16>(f)); }
};

static_assert(sizeof(float16) == 2 && std::is_trivially_copyable_v<float16>, "float16 is 16 bits of storage");

namespace aieflow_shim::detail {
template <typename T>
inline constexpr bool is_float16_v = std::is_same_v<std::remove_cv_t<T>, float16>;
}  // namespace aieflow_shim::detail
