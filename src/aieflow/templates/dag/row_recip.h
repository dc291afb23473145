// aieflow: per-row reciprocals of 16 rows at once in 16 vector lanes (AIE API, UG1529), exactly the
// integers the emulation defines:
//
//   LayerNorm (ops/layernorm.py step 3): u = Q << 2G in [2^60, 2^62) (or 0), r = floor(sqrt(u)),
//                inv = floor((2^46 + floor(r / 2)) / r)            (0 when u = 0)
//   Softmax   (ops/activation.py softmax_codes): s in [2^15, 2^28),
//                inv = floor((2^46 + floor(s / 2)) / s), returned as half = inv >> 1 and odd = inv & 1
//                (inv reaches 2^31 at s = 2^15: not an int32)
//
// Each result is an estimate from a fixed-point Newton iteration (int32 lanes, products in 64-bit
// accumulator lanes, SRS rounding floor) followed by an exact integer correction:
//
//   fix_quotient<R>(num, d, q0): q = floor(num / d) for d > 0 from any q0 with |q0 - q| <= R.  R rounds
//   "q -= 1 where num - q d < 0" bring a q0 above q down to q and never go below it (num - q d >= 0 for
//   every q <= floor(num / d)); then R rounds "q += 1 where num - q d >= d" bring a q0 below q up to q
//   and never above it (num - q d < d at q).  The residual num - q d is exact (64-bit lanes: |q d| and
//   num below 2^63) and only its sign is read (an SRS by 40, floor: negative iff the residual is).
//   fix_isqrt<R>(u, r0): r = floor(sqrt(u)) from any r0 in [0, 2^31) with |r0 - r| <= R, the same way
//   with "u - r^2 < 0" and "u - r^2 >= 2 r + 1" (= (r + 1)^2 <= u, without forming r + 1 = 2^31).
//
// So the results are exact whenever the estimates are within R = 3 of the answer.  The estimates'
// error (measured over every boundary and 2,000,000 random arguments, tests/test_row_recip.py, which
// also runs this code exhaustively over every softmax sum and over dense samples of u):
//   isqrt: the Newton estimate of r within 8, one residual step r + (u - r^2) / (2 r) within 1;
//   LayerNorm inv from y 2^15 within 1; softmax half from y 2^(16 + c) / 2 within 2.
// Bound argument: after the iterations the relative error of y is the fixed point's (a few 2^-29),
// so y 2^15 (LayerNorm inv, r in [2^30, 2^31)) is off by under 2^-12 plus the truncation and the
// difference between r and sqrt(u) (< 1 / 2^30 relative): under 2; the softmax half = y 2^(c + 15)
// with c <= 14, off by under 2^29 * 2^-27 = 4 at most from y's error, 2 measured.
#pragma once

#include <aie_api/aie.hpp>

namespace aieflow_recip {

constexpr unsigned L = 16;
constexpr unsigned R = 3;  // correction rounds (each direction)
using V32 = aie::vector<int32, L>;
using A64 = aie::accum<acc64, L>;

inline A64 acc(const V32& v, int shift) {
    A64 a;
    a.from_vector(v, shift);
    return a;
}

// floor(a / 2^s), saturated to int32 (the caller sets rounding floor and saturation saturate)
inline V32 srs(const A64& a, int s) { return a.template to_vector<int32>(s); }

inline aie::mask<L> negative(const A64& a) { return aie::lt(srs(a, 40), 0); }

// floor(num / d), d > 0 in every lane, from q0 within R of it (header comment)
inline V32 fix_quotient(const A64& num, const V32& d, V32 q) {
    for (unsigned i = 0; i < R; ++i) q = aie::select(q, aie::sub(q, 1), negative(aie::msc(num, q, d)));
    for (unsigned i = 0; i < R; ++i) {
        const A64 over = aie::sub(aie::msc(num, q, d), acc(d, 0));  // num - q d - d
        q = aie::select(q, aie::add(q, 1), aie::ge(srs(over, 40), 0));
    }
    return q;
}

// floor(sqrt(u)) from r0 within R of it (header comment)
inline V32 fix_isqrt(const A64& u, V32 r) {
    for (unsigned i = 0; i < R; ++i) r = aie::select(r, aie::sub(r, 1), negative(aie::msc(u, r, r)));
    const V32 one = aie::broadcast<int32, L>(1);
    for (unsigned i = 0; i < R; ++i) {
        const A64 over = aie::sub(aie::sub(aie::msc(u, r, r), acc(r, 1)), acc(one, 0));  // u - r^2 - 2r - 1
        r = aie::select(r, aie::add(r, 1), aie::ge(srs(over, 40), 0));
    }
    return r;
}

// LayerNorm: uh[j] = u >> 31 (in [2^29, 2^31), or 0 with u = 0), ul[j] = u & (2^31 - 1) of 16 rows;
// inv[j] = floor((2^46 + floor(r / 2)) / r), r = floor(sqrt(u)); 0 where u = 0.
// y ~ 1 / sqrt(x), x = uh / 2^31 in [1/4, 1), held as Y = y 2^29: seed y = 2.13 - 1.215 x (relative error
// under 0.087), four Newton steps y (3 - x y^2) / 2 (each squares the error, x 1.5).
inline void layernorm_inv16(const int32* uh, const int32* ul, int32* inv) {
    aie::set_rounding(aie::rounding_mode::floor);
    aie::set_saturation(aie::saturation_mode::saturate);
    const V32 x = aie::load_v<L>(uh);
    V32 y = aie::sub(aie::broadcast<int32, L>(1143535043), srs(aie::mul<acc64>(x, int32(652298158)), 31));
    for (int it = 0; it < 4; ++it) {
        const V32 y2 = srs(aie::mul<acc64>(y, y), 30);                      // y^2 2^28
        const V32 h = aie::sub(aie::broadcast<int32, L>(3 << 28), srs(aie::mul<acc64>(x, y2), 31));
        y = srs(aie::mul<acc64>(y, h), 29);                                  // y (3 - x y^2) / 2, 2^29
    }
    const A64 u = aie::add(acc(x, 31), acc(aie::load_v<L>(ul), 0));       // exact
    V32 r = srs(aie::mul<acc64>(x, y), 29);                                  // sqrt(x) 2^31 = sqrt(u)
    const V32 d = srs(aie::msc(u, r, r), 8);                                 // (u - r^2) / 2^8
    r = aie::add(r, srs(aie::mul<acc64>(d, y), 53));                         // + (u - r^2) / (2 r)
    r = aie::max(r, 0);
    r = fix_isqrt(u, r);
    const A64 num = aie::add(acc(aie::broadcast<int32, L>(1), 46), acc(aie::downshift(r, 1), 0));
    const V32 q = fix_quotient(num, r, srs(acc(y, 0), 14));                 // y 2^15 ~ 2^46 / r
    aie::store_v(inv, aie::select(q, aie::zeros<int32, L>(), aie::lt(x, 1)));
}

// Softmax: s[j] in [2^15, 2^28), t[j] = s[j] 2^c[j] in [2^29, 2^30), p[j] = 2^c[j] of 16 rows;
// half[j] = inv >> 1, odd[j] = inv & 1 with inv = floor((2^46 + floor(s / 2)) / s): half is the quotient by
// 2 s of the same numerator, odd whether the remainder reaches s.  y ~ 1 / x, x = t / 2^30 in [1/2, 1),
// Y = y 2^29: seed 48/17 - 32/17 x (relative error under 1/17), four Newton steps y (2 - x y).
inline void softmax_inv16(const int32* s, const int32* t, const int32* p, int32* half, int32* odd) {
    aie::set_rounding(aie::rounding_mode::floor);
    aie::set_saturation(aie::saturation_mode::saturate);
    const V32 x = aie::load_v<L>(t);
    V32 y = aie::sub(aie::broadcast<int32, L>(1515870810), srs(aie::mul<acc64>(x, int32(1010580540)), 30));
    for (int it = 0; it < 4; ++it) {
        const V32 h = aie::sub(aie::broadcast<int32, L>(1 << 30), srs(aie::mul<acc64>(x, y), 30));
        y = srs(aie::mul<acc64>(y, h), 29);
    }
    const V32 sv = aie::load_v<L>(s);
    const V32 d2 = aie::add(sv, sv);
    const A64 num = aie::add(acc(aie::broadcast<int32, L>(1), 46), acc(aie::downshift(sv, 1), 0));
    const V32 q = fix_quotient(num, d2, srs(aie::mul<acc64>(y, aie::load_v<L>(p)), 14));
    const A64 rest = aie::sub(aie::msc(num, q, d2), acc(sv, 0));             // remainder - s
    aie::store_v(half, q);
    aie::store_v(odd, aie::select(aie::zeros<int32, L>(), aie::broadcast<int32, L>(1), aie::ge(srs(rest, 40), 0)));
}

}  // namespace aieflow_recip
