// ap_fixed-style arithmetic on integer codes, for the recurrent kernels (AIE) and the PL FSM.
//
// A value is an int64 code with a number of fractional bits; a type is (width, frac, signed,
// rounding, overflow).  cast() is an ap_fixed assignment: round the dropped bits with the type's
// rounding mode, then its overflow mode (WRAP, SAT, SAT_SYM).  These are the definitions of
// aieflow's numerics/fixed.py (cast, round_shift, round_div, saturate, wrap), written once in plain
// C++ (int64 only, no __int128) so that the same file compiles for the AI Engine, for Vitis HLS and
// on x86.  Operands stay below 2^62 for widths up to 32 bits (checked by the Python planner).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace rnn {

// float32 -> bf16 -> float32: round to nearest, ties to even on bit 16 (numerics/fixed.py to_bf16,
// the x86 shim's bfloat16); a NaN stays a quiet NaN; subnormals rounded like normal values.  On
// the float32 bit pattern (integer operations only), so the AI Engine aggregator, the PL FSM (HLS
// has no bfloat16 type) and x86 share one definition: a bf16 recurrent layer's state h and its
// dense head's sums (docs/recurrent.md "bf16").
inline float round_bf16(float v) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        u = (u | 0x00400000u) & 0xffff0000u;
    } else {
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    }
    float r;
    std::memcpy(&r, &u, sizeof r);
    return r;
}

enum rounding : int { R_FLOOR, R_CEIL, R_SYM_FLOOR, R_SYM_CEIL, R_POS_INF, R_NEG_INF, R_SYM_INF, R_SYM_ZERO,
                      R_CONV_EVEN, R_CONV_ODD };
enum overflow : int { S_WRAP, S_SAT, S_SAT_SYM };

struct fxtype {
    int width;
    int frac;
    bool is_signed;
    int rnd;
    int sat;
};

inline int64_t round_from_floor(int64_t q, bool inexact, bool gt_half, bool tie, int r) {
    switch (r) {
        case R_FLOOR: return q;
        case R_CEIL: return q + (inexact ? 1 : 0);
        case R_SYM_FLOOR: return q + ((inexact && q < 0) ? 1 : 0);
        case R_SYM_CEIL: return q + ((inexact && q >= 0) ? 1 : 0);
        default: break;
    }
    bool up = false;
    switch (r) {
        case R_POS_INF: up = tie; break;
        case R_NEG_INF: up = false; break;
        case R_SYM_INF: up = tie && q >= 0; break;
        case R_SYM_ZERO: up = tie && q < 0; break;
        case R_CONV_EVEN: up = tie && (q & 1) != 0; break;
        default: up = tie && (q & 1) == 0; break;  // R_CONV_ODD
    }
    return q + ((gt_half || up) ? 1 : 0);
}

// The same on a float64 floor (table indices of float inputs).
inline double round_from_floor_d(double q, bool inexact, bool gt_half, bool tie, int r) {
    switch (r) {
        case R_FLOOR: return q;
        case R_CEIL: return q + (inexact ? 1 : 0);
        case R_SYM_FLOOR: return q + ((inexact && q < 0) ? 1 : 0);
        case R_SYM_CEIL: return q + ((inexact && q >= 0) ? 1 : 0);
        default: break;
    }
    const bool odd = std::fmod(q, 2.0) != 0;
    bool up = false;
    switch (r) {
        case R_POS_INF: up = tie; break;
        case R_NEG_INF: up = false; break;
        case R_SYM_INF: up = tie && q >= 0; break;
        case R_SYM_ZERO: up = tie && q < 0; break;
        case R_CONV_EVEN: up = tie && odd; break;
        default: up = tie && !odd; break;
    }
    return q + ((gt_half || up) ? 1 : 0);
}

// c / 2^shift rounded (shift < 0: exact left shift).
inline int64_t round_shift(int64_t c, int shift, int r) {
    if (shift == 0) return c;
    if (shift < 0) return static_cast<int64_t>(static_cast<uint64_t>(c) << -shift);
    if (shift >= 64) {  // |value| <= 1/2: keep the sign, the floor and the tie (numerics/fixed.py)
        const bool tie = shift == 64 && c == INT64_MIN;
        c = tie ? -2 : (c > 0) - (c < 0);
        shift = 2;
    }
    const int64_t q = c >> shift;
    const uint64_t rem = static_cast<uint64_t>(c) & ((shift == 64 ? 0 : (uint64_t(1) << shift)) - 1);
    const uint64_t half = uint64_t(1) << (shift - 1);
    return round_from_floor(q, rem != 0, rem > half, rem == half, r);
}

inline int64_t round_div(int64_t num, int64_t den, int r) {
    int64_t q = num / den;
    if ((num % den != 0) && ((num < 0) != (den < 0))) --q;  // floor
    const int64_t rem = num - q * den;
    return round_from_floor(q, rem != 0, 2 * rem > den, 2 * rem == den, r);
}

inline int64_t wrap(int64_t c, int bits, bool is_signed) {
    if (bits >= 64) return c;
    const uint64_t m = (uint64_t(1) << bits) - 1;
    const uint64_t u = static_cast<uint64_t>(c) & m;
    if (is_signed && (u >> (bits - 1)) != 0) return static_cast<int64_t>(u | ~m);
    return static_cast<int64_t>(u);
}

inline int64_t max_code(const fxtype& t) {
    return t.is_signed ? (int64_t(1) << (t.width - 1)) - 1 : (int64_t(1) << t.width) - 1;
}
inline int64_t min_code(const fxtype& t) { return t.is_signed ? -(int64_t(1) << (t.width - 1)) : 0; }

inline int64_t saturate(int64_t c, const fxtype& t) {
    if (t.sat == S_WRAP) return wrap(c, t.width, t.is_signed);
    const int64_t hi = max_code(t);
    const int64_t lo = (t.sat == S_SAT_SYM && t.is_signed) ? -hi : min_code(t);
    return c > hi ? hi : c < lo ? lo : c;
}

// ap_fixed assignment of the exact value c * 2^-frac to type t.
inline int64_t cast(int64_t c, int frac, const fxtype& t) {
    const int shift = frac - t.frac;
    if (shift >= 0) return saturate(round_shift(c, shift, t.rnd), t);
    const int left = -shift;
    if (t.sat == S_WRAP) {
        if (left >= t.width) return 0;
        const int64_t low = c & ((int64_t(1) << (t.width - left)) - 1);
        return wrap(static_cast<int64_t>(static_cast<uint64_t>(low) << left), t.width, t.is_signed);
    }
    const int64_t hi = max_code(t);
    const int64_t lo = (t.sat == S_SAT_SYM && t.is_signed) ? -hi : min_code(t);
    const int64_t hi_in = hi >> left;
    const int64_t lo_in = -((-lo) >> left);
    if (c > hi_in) return hi;
    if (c < lo_in) return lo;
    return static_cast<int64_t>(static_cast<uint64_t>(c) << left);
}

// A lookup table over [-L, L): index = N/2 + R(x * p / q), clamped (ops/activations.py).
struct table_index {
    int64_t p, q;    // index steps per unit of input: p / q (dyadic)
    int64_t span;    // 2 L when it is an integer, else 0
    int size;
    int rnd;
    bool trunc;      // hls4ml's truncating ap_fixed division for coarse inputs
};

inline int index_of_code(int64_t c, int frac, const table_index& t) {
    int64_t raw;
    if (frac < 0 && t.trunc && t.span != 0)
        raw = static_cast<int64_t>(static_cast<uint64_t>(round_div(c * t.size, t.span, R_SYM_FLOOR)) << -frac);
    else if (frac >= 0)
        raw = round_div(c * t.p, t.q << frac, t.rnd);
    else
        raw = round_div(static_cast<int64_t>(static_cast<uint64_t>(c * t.p) << -frac), t.q, t.rnd);
    raw = wrap(raw, 32, true);
    const int64_t idx = wrap(raw + t.size / 2, 32, true);
    return static_cast<int>(idx < 0 ? 0 : idx > t.size - 1 ? t.size - 1 : idx);
}

inline int index_of_float(float x, const table_index& t) {
    double y = static_cast<double>(x);
    const double lim = 1099511627776.0;  // 2^40
    y = (y < -lim ? -lim : y > lim ? lim : y) * (static_cast<double>(t.p) / static_cast<double>(t.q));
    const double q = std::floor(y);
    const double d = y - q;
    const double r = round_from_floor_d(q, d != 0, d > 0.5, d == 0.5, t.rnd) + t.size / 2;
    return static_cast<int>(r < 0 ? 0 : r > t.size - 1 ? t.size - 1 : r);
}

inline float sigmoid_exact(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }
inline float tanh_exact(float x) { return static_cast<float>(std::tanh(static_cast<double>(x))); }

}  // namespace rnn
