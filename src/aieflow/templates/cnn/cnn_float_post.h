// aieflow: the floating-point post layers of a CNN stage (an activation, or a softmax over a Dense
// head's outputs), run by the stage's last tile on its stored values.  Bit for bit the emulator's
// definitions in aieflow/ops/activation.py:
//
//   fp32 (AIE1): apply_f32 / softmax_f32 / exp_f32 / expm1_f32.  Only float32 +, -, *, one
//                division, comparisons, float <-> int conversions and exact scalings by powers of
//                two built from their bit patterns: no libm call, so the x86 build and the emulator
//                agree bit for bit (with -ffp-contract=off: no fused multiply-add).  exp is
//                Cody-Waite range reduction (C1 + C2 = ln 2) and Cephes' expf polynomial.
//   bf16 (AIE-ML / AIE-MLv2): apply_bf16_table / softmax_bf16, the scheme of the DAG's
//                ActivationBf16 (dag_kernels_bf16.h): a table of bf16 results over a window of
//                exponents, a rule y = C0 or bf16(C1 x + C0) outside it; softmax d = bf16(x - max),
//                e = the exp table, sequential float sum, one reciprocal, y = bf16(e inv).
//
// Scalar code: the AIE API has no vector exp, and one value at a time keeps the order of the
// float32 operations the emulator's.  Float -> bf16 conversions round to nearest, ties to even
// (docs/numerics.md "bf16").  The constants are float32 values written as hexadecimal literals
// (tests/test_cnn_float_post.py checks them against ops/activation.py).
#pragma once

#include <aie_api/aie.hpp>

#include <cstdint>
#include <cstring>
#include <limits>

namespace aieflow_fpost {

// ops/activation.py FP32_FUNCTIONS, in order
enum fn : int { relu = 0, leaky_relu, elu, selu, sigmoid, tanh_, hard_sigmoid, hard_swish, silu, clip };

constexpr float LOG2E = 0x1.715476p+0f;
constexpr float C1 = 0x1.63p-1f;
constexpr float C2 = -0x1.bd0106p-13f;
constexpr float P0 = 0x1.a0d2cep-13f, P1 = 0x1.6e879cp-10f, P2 = 0x1.111210p-7f, P3 = 0x1.555382p-5f,
                P4 = 0x1.555554p-3f, P5 = 0x1.0p-1f;
constexpr float EXP_HI = 0x1.64p+6f;   // 89: above, +inf
constexpr float EXP_LO = -0x1.a0p+6f;  // -104: below, 0

// 2^n for a normal n (-126..127), from its bit pattern
inline float pow2(int n) {
    const std::uint32_t u = std::uint32_t(n + 127) << 23;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}

// n (as a float) and q = p(r) - 1 of x in [EXP_LO, EXP_HI]
inline void exp_steps(float x, float& k, float& q) {
    const float t = x * LOG2E;
    const float s = t + 0.5f;
    k = float(int(s));
    if (k > s) k = k - 1.0f;  // floor
    const float kc1 = k * C1;
    float r = x - kc1;
    const float kc2 = k * C2;
    r = r - kc2;
    const float z = r * r;
    float p = P0 * r;
    p = p + P1;
    p = p * r;
    p = p + P2;
    p = p * r;
    p = p + P3;
    p = p * r;
    p = p + P4;
    p = p * r;
    p = p + P5;
    p = p * z;
    q = p + r;
}

inline float exp_f32(float x) {
    if (x != x) return x;
    if (x > EXP_HI) return std::numeric_limits<float>::infinity();
    if (x < EXP_LO) return 0.0f;
    float k, q;
    exp_steps(x, k, q);
    const int n = int(k), n1 = n >> 1;  // arithmetic shift: floor
    const float y = (q + 1.0f) * pow2(n1);
    return y * pow2(n - n1);
}

inline float expm1_f32(float x) {
    if (x != x) return x;
    if (x > EXP_HI) return std::numeric_limits<float>::infinity();
    if (x < EXP_LO) return -1.0f;
    float k, q;
    exp_steps(x, k, q);
    return k == 0.0f ? q : exp_f32(x) - 1.0f;
}

inline float sigmoid_f32(float x) {
    const float ax = x < 0.0f ? -x : x;
    const float e = exp_f32(-ax);
    const float d = 1.0f + e;
    return x >= 0.0f ? 1.0f / d : e / d;
}

inline float min_f(float a, float b) { return b < a ? b : a; }
inline float max_f(float a, float b) { return b > a ? b : a; }

// The fp32 activation f (fn) with its two constants A, B (ops/activation.py fp32_params).
inline float activation_f32(int f, float a, float b, float x) {
    if (x != x) return x;
    switch (f) {
        case relu: return x > 0.0f ? x : 0.0f;
        case leaky_relu: return x >= 0.0f ? x : a * x;
        case elu: return x > 0.0f ? x : a * expm1_f32(min_f(x, 0.0f));
        case selu: return x > 0.0f ? a * x : b * expm1_f32(min_f(x, 0.0f));
        case sigmoid: return sigmoid_f32(x);
        case tanh_: {
            const float ax = x < 0.0f ? -x : x;
            const float q = expm1_f32(-2.0f * ax);
            const float t = -q / (q + 2.0f);
            return x < 0.0f ? -t : t;
        }
        case hard_sigmoid: return min_f(max_f(a * x + b, 0.0f), 1.0f);
        case hard_swish: return x * min_f(max_f(a * x + 0.5f, 0.0f), 1.0f);
        case silu: return x * sigmoid_f32(x);
        default: return min_f(max_f(x, a), b);  // clip
    }
}

// ---------------------------------------------------------------------------- bf16
inline std::uint16_t bits(bfloat16 v) {
    std::uint16_t u;
    std::memcpy(&u, &v, sizeof(u));
    return u;
}
inline bfloat16 from_bits(std::uint16_t u) {
    bfloat16 v;
    std::memcpy(static_cast<void*>(&v), &u, sizeof(u));  // bfloat16 is 16 bits of storage
    return v;
}

// NaN passes; +-0 their own result (rules 4, 5); exponents E_LO..E_HI read T[sign][e - E_LO][m];
// below / above the window rules 0, 1 / 2, 3 (negative, positive): y = C0 or bf16(C1 x + C0).
// The table T and rules C1 / C0 of one bf16 activation (a post layer's POST_*, or the fused tanh of
// a bf16 convolution's epilogue: ACT_*, cnn_kernels.h act::bf16_table).
template <int ELO, int EHI>
inline bfloat16 lookup_bf16_table(bfloat16 x, const std::int32_t* T, const float* C1, const float* C0) {
    constexpr unsigned NE = EHI - ELO + 1;
    const std::uint16_t u = bits(x);
    const unsigned e = (u >> 7) & 0xFFu, s = u >> 15, m = u & 0x7Fu;
    if (e == 0xFFu && m != 0) return x;  // NaN
    unsigned r;
    if ((u & 0x7FFFu) == 0) {
        r = 5 - s;
    } else if (e < unsigned(ELO)) {
        r = 1 - s;
    } else if (e > unsigned(EHI)) {
        r = 3 - s;
    } else {
        return from_bits(std::uint16_t(T[(s * NE + (e - ELO)) * 128u + m]));
    }
    if (C1[r] == 0.0f) return bfloat16(C0[r]);
    const float p = C1[r] * static_cast<float>(x);
    return bfloat16(p + C0[r]);
}

template <class C>
inline bfloat16 lookup_bf16(bfloat16 x) {
    return lookup_bf16_table<C::POST_ELO, C::POST_EHI>(x, C::POST_T, C::POST_C1, C::POST_C0);
}

// ---------------------------------------------------------------------------- the post layer
// C::POST: 1 an activation of the n values, 2 a softmax over them; C::POST_FLOAT: 1 fp32, 2 bf16.
// A softmax writes e_i into y first (exact: e_i is a value of y's type), then y_i = e_i inv.
template <class C, class T>
inline void post(const T* __restrict x, T* __restrict y, unsigned n) {
    constexpr bool BF16 = C::POST_FLOAT == 2;
    if constexpr (C::POST == 1) {
        for (unsigned i = 0; i < n; ++i) {
            if constexpr (BF16) {
                y[i] = lookup_bf16<C>(x[i]);
            } else {
                y[i] = activation_f32(C::POST_FN, C::POST_A, C::POST_B, x[i]);
            }
        }
    } else {
        float m = static_cast<float>(x[0]);
        for (unsigned i = 1; i < n; ++i) m = static_cast<float>(x[i]) > m ? static_cast<float>(x[i]) : m;
        float s = 0.0f;
        for (unsigned i = 0; i < n; ++i) {
            const float d = static_cast<float>(x[i]) - m;
            if constexpr (BF16) {
                y[i] = lookup_bf16<C>(bfloat16(d));
            } else {
                y[i] = exp_f32(d);
            }
            s = s + static_cast<float>(y[i]);
        }
        const float inv = 1.0f / s;
        for (unsigned i = 0; i < n; ++i) y[i] = T(static_cast<float>(y[i]) * inv);
    }
}

}  // namespace aieflow_fpost
