// aieflow CNN: scalar numerics shared by the AI Engine kernels and the PL (HLS) kernels.
// Plain C++ (no AIE or HLS types), so both sides compute the same table index and rounding.
#pragma once

#include <cmath>
#include <cstdint>

namespace aieflow_cnn {

// The ten rounding modes of aie::rounding_mode / aieflow.numerics.types.Rounding, given the floor q
// of the exact value and where its remainder lies (inexact, above a half, exactly a half).
enum class rnd : int {
    floor = 0, ceil, symmetric_floor, symmetric_ceil, positive_inf, negative_inf, symmetric_inf,
    symmetric_zero, conv_even, conv_odd
};

inline int64_t round_from_floor(int64_t q, bool inexact, bool gt_half, bool tie, rnd mode) {
    switch (mode) {
        case rnd::floor: return q;
        case rnd::ceil: return q + (inexact ? 1 : 0);
        case rnd::symmetric_floor: return q + ((inexact && q < 0) ? 1 : 0);
        case rnd::symmetric_ceil: return q + ((inexact && q >= 0) ? 1 : 0);
        default: break;
    }
    bool tie_up = false;
    switch (mode) {
        case rnd::positive_inf: tie_up = tie; break;
        case rnd::negative_inf: tie_up = false; break;
        case rnd::symmetric_inf: tie_up = tie && q >= 0; break;
        case rnd::symmetric_zero: tie_up = tie && q < 0; break;
        case rnd::conv_even: tie_up = tie && (q & 1) != 0; break;
        case rnd::conv_odd: tie_up = tie && (q & 1) == 0; break;
        default: break;
    }
    return q + ((gt_half || tie_up) ? 1 : 0);
}

// num / den (den > 0) rounded by mode: the integer average of a pooling window.
inline int64_t round_divide(int64_t num, int64_t den, rnd mode) {
    int64_t q = num / den;
    int64_t r = num - q * den;
    if (r < 0) {  // C++ truncates toward zero; make q the floor
        q -= 1;
        r += den;
    }
    return round_from_floor(q, r != 0, 2 * r > den, 2 * r == den, mode);
}

// Float-scale requantisation (aieflow numerics/requant.py apply()): the accumulator saturated to int32,
// times the channel's multiplier (exact: |a m| < 2^62), rounded half to even by 2^shift and saturated to
// int32, the zero point added after rounding, saturated to the codes [lo, hi].
inline int64_t requant(int64_t acc, int64_t mult, int shift, int64_t zp, int64_t lo, int64_t hi) {
    const int64_t i32_lo = -2147483647LL - 1, i32_hi = 2147483647LL;
    const int64_t a = acc < i32_lo ? i32_lo : (acc > i32_hi ? i32_hi : acc);
    int64_t r = round_divide(a * mult, int64_t(1) << shift, rnd::conv_even);
    r = r < i32_lo ? i32_lo : (r > i32_hi ? i32_hi : r);
    const int64_t q = r + zp;
    return q < lo ? lo : (q > hi ? hi : q);
}

// Index of a float input into a lookup table over [-limit, limit): clamp(round(x * scale) + offset),
// with x * scale evaluated exactly in double (scale is a power of two) after clamping |x| to 2^40.
inline int lut_index(float x, double scale, int offset, int size, rnd mode) {
    double v = static_cast<double>(x);
    if (v != v) v = 0.0;  // NaN: the emulator rejects it; keep the index defined
    const double big = 1099511627776.0;  // 2^40
    v = v < -big ? -big : (v > big ? big : v);
    const double y = v * scale;
    const double q = std::floor(y);
    const double d = y - q;
    const int64_t r = round_from_floor(static_cast<int64_t>(q), d != 0.0, d > 0.5, d == 0.5, mode);
    int64_t idx = r + offset;
    if (idx < 0) idx = 0;
    if (idx > size - 1) idx = size - 1;
    return static_cast<int>(idx);
}

}  // namespace aieflow_cnn
