// aieflow x86 shim: bfloat16 scalar type (global scope, as in the real tools).
//
// Storage: the upper 16 bits of an IEEE-754 binary32 (1 sign, 8 exponent, 7 mantissa bits).
// float -> bfloat16 rounds to nearest, ties to even.  bfloat16 -> float is exact.
// Shim assumptions (not stated in the public docs):
//   * NaN inputs stay NaN: the sign and top 7 mantissa bits are kept and the quiet bit (bit 6)
//     is forced so that truncation cannot turn a NaN into an infinity.
//   * Subnormal inputs are rounded like normal ones (no flush-to-zero).
//   * Arithmetic between bfloat16 values happens in float (the class converts implicitly to
//     float); compound assignments round the float result back with the same RNE rule
//     (half_float.hpp, shared with float16).
#pragma once

#include <bit>
#include <concepts>
#include <type_traits>
#include <cstdint>

#include "config.hpp"
#include "half_float.hpp"

class bfloat16 : public aieflow_shim::detail::half_float<bfloat16> {
public:
    constexpr bfloat16() = default;
    bfloat16(float f) : half_float(f) {}  // NOLINT(google-explicit-constructor)
    bfloat16(double d) : bfloat16(static_cast<float>(d)) {}  // via float (double rounding)
    template <std::integral I>
    bfloat16(I v) : bfloat16(static_cast<float>(v)) {}  // via float

    static float to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

    static std::uint16_t round_from_float(float f) {
        const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a (quiet) NaN
            return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
        }
        // Round to nearest even on bit 16: add 0x7fff plus the lowest kept bit.  A carry out of
        // the mantissa correctly bumps the exponent (and saturates to infinity at the top).
        const std::uint32_t keep_lsb = (u >> 16) & 1u;
        return static_cast<std::uint16_t>((u + 0x7fffu + keep_lsb) >> 16);
    }
};

static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>, "bfloat16 is 16 bits of storage");

namespace aieflow_shim::detail {
template <typename T>
inline constexpr bool is_bfloat16_v = std::is_same_v<std::remove_cv_t<T>, bfloat16>;
}  // namespace aieflow_shim::detail
