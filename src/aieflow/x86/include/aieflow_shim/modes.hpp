// aieflow x86 shim: rounding / saturation modes and the exact integer shift-round-saturate.
//
// Modes are global state of the AI Engine core (control register), so the shim keeps them in
// thread-local storage: every thread models one core.  A new thread starts in the hardware reset
// state, which the shim assumes to be rounding_mode::floor and saturation_mode::none (truncating
// shift, wrap-around), matching the intrinsics guides where mode 0 is "floor"/"no saturation".
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "config.hpp"

namespace aie {

// Enumerator values follow the hardware encodings published in the intrinsics guides
// (UG1078 for AIE: rnd_floor=0 .. rnd_conv_odd=7; UG1583 for AIE-ML: rnd_floor=0, rnd_ceil=1,
// rnd_sym_floor=2, rnd_sym_ceil=3, rnd_neg_inf=8 .. rnd_conv_odd=13).  symmetric_floor and
// symmetric_ceil only exist on AIE-ML and later, so naming them on AIE is a compile error.
enum class rounding_mode : unsigned {
#if AIEFLOW_SHIM_AIE_ML
    floor = 0,            // towards -inf (truncate)
    ceil = 1,             // towards +inf
    symmetric_floor = 2,  // towards zero
    symmetric_ceil = 3,   // away from zero
    negative_inf = 8,     // nearest, ties towards -inf
    positive_inf = 9,     // nearest, ties towards +inf
    symmetric_zero = 10,  // nearest, ties towards zero
    symmetric_inf = 11,   // nearest, ties away from zero
    conv_even = 12,       // nearest, ties to even
    conv_odd = 13,        // nearest, ties to odd
#else
    floor = 0,
    ceil = 1,
    positive_inf = 2,
    negative_inf = 3,
    symmetric_inf = 4,
    symmetric_zero = 5,
    conv_even = 6,
    conv_odd = 7,
#endif
};

enum class saturation_mode : unsigned {
    none = 0,       // wrap to the destination width (two's complement truncation)
    truncate = 0,   // alias of none
    saturate = 1,   // clamp to [min, max] of the destination type
    symmetric = 3,  // clamp to [-max, max] (unsigned destinations: [0, max])
};

}  // namespace aie

namespace aieflow_shim::detail {

struct mode_state {
    aie::rounding_mode rounding = aie::rounding_mode::floor;
    aie::saturation_mode saturation = aie::saturation_mode::none;
};

inline mode_state& modes() {
    static thread_local mode_state s;
    return s;
}

using i128 = __int128;
using u128 = unsigned __int128;

// Two's-complement wrap of v to `bits` bits (1..128).
inline constexpr i128 wrap_bits(i128 v, unsigned bits) {
    if (bits >= 128) return v;
    const unsigned sh = 128 - bits;
    return static_cast<i128>(static_cast<u128>(v) << sh) >> sh;  // C++20: arithmetic >>
}

// Arithmetic right shift by `shift` with rounding of the dropped bits (exact, no overflow for
// |v| < 2^120 and shift <= 120).
inline i128 shift_round(i128 v, unsigned shift, aie::rounding_mode mode) {
    if (shift == 0) return v;
    AIEFLOW_SHIM_CHECK(shift <= 120, "shift-round-saturate: shift %u out of range", shift);
    const i128 q = v >> shift;  // floor(v / 2^shift)
    const i128 r = v - static_cast<i128>(static_cast<u128>(q) << shift);  // 0 <= r < 2^shift
    const i128 half = static_cast<i128>(1) << (shift - 1);
    const bool exact = (r == 0);
    const bool neg = (v < 0);
    using rm = aie::rounding_mode;
    switch (mode) {
        case rm::floor:
            return q;
        case rm::ceil:
            return q + (exact ? 0 : 1);
#if AIEFLOW_SHIM_AIE_ML
        case rm::symmetric_floor:  // towards zero
            return (neg && !exact) ? q + 1 : q;
        case rm::symmetric_ceil:  // away from zero
            return (!neg && !exact) ? q + 1 : q;
#endif
        default:
            break;
    }
    // Round-to-nearest family: only the exact tie r == half depends on the mode.
    if (r < half) return q;
    if (r > half) return q + 1;
    switch (mode) {
        case rm::positive_inf:
            return q + 1;
        case rm::negative_inf:
            return q;
        case rm::symmetric_inf:
            return neg ? q : q + 1;
        case rm::symmetric_zero:
            return neg ? q + 1 : q;
        case rm::conv_even:
            return (q & 1) ? q + 1 : q;
        case rm::conv_odd:
            return (q & 1) ? q : q + 1;
        default:
            fatal("unknown rounding mode %u", static_cast<unsigned>(mode));
    }
}

// Saturate (or wrap) an exact integer into integral type T under the given mode.
template <typename T>
inline T saturate_to(i128 v, aie::saturation_mode mode) {
    static_assert(std::is_integral_v<T> && sizeof(T) <= 8, "integral destination expected");
    constexpr i128 hi = static_cast<i128>(std::numeric_limits<T>::max());
    constexpr i128 lo = static_cast<i128>(std::numeric_limits<T>::min());
    switch (mode) {
        case aie::saturation_mode::none: {
            // modular conversion (well defined in C++20)
            return static_cast<T>(static_cast<u128>(v));
        }
        case aie::saturation_mode::saturate:
            return static_cast<T>(v < lo ? lo : (v > hi ? hi : v));
        case aie::saturation_mode::symmetric: {
            const i128 slo = std::is_signed_v<T> ? -hi : 0;
            return static_cast<T>(v < slo ? slo : (v > hi ? hi : v));
        }
    }
    fatal("unknown saturation mode %u", static_cast<unsigned>(mode));
}

// Shift-round-saturate of one exact accumulator lane into T with the current global modes.
template <typename T>
inline T srs(i128 v, int shift) {
    AIEFLOW_SHIM_CHECK(shift >= 0, "shift-round-saturate: negative shift %d is not supported", shift);
    const i128 r = shift_round(v, static_cast<unsigned>(shift), modes().rounding);
    return saturate_to<T>(r, modes().saturation);
}

}  // namespace aieflow_shim::detail

namespace aie {

inline void set_rounding(rounding_mode m) { aieflow_shim::detail::modes().rounding = m; }
inline rounding_mode get_rounding() { return aieflow_shim::detail::modes().rounding; }
inline void set_saturation(saturation_mode m) { aieflow_shim::detail::modes().saturation = m; }
inline saturation_mode get_saturation() { return aieflow_shim::detail::modes().saturation; }

}  // namespace aie
