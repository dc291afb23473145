// aieflow x86 shim: aie::mmul<M, K, N, TypeA, TypeB, AccumTag>.
//
// A is an M x K row-major vector<TypeA, M*K>, B is a K x N row-major vector<TypeB, K*N>, C is
// an M x N row-major accumulator<AccumTag, M*N>.
//
// Integer: every product is exact and C[i][j] (+)= sum_k A[i][k] * B[k][j] is wrapped to the
// accumulator lane width (wrapping after each addition or once at the end is the same value).
//
// Floating point (float x float, bfloat16 x bfloat16, float16 x float16, accfloat): for each C element and for
// k = 0 .. K-1 in order, c = float(c + float(a * b)), i.e. each product and each addition is
// rounded to binary32 separately, starting from c = +0.0 for mul() and from the current C for
// mac().  bfloat16 x bfloat16 and float16 x float16 products are exact in binary32.  The real hardware evaluation
// order (and, on AIE-ML, the bfloat16-based emulation of float x float) is not documented; this
// sequential order is an aieflow assumption shared with aieflow's Python emulator.
#pragma once

#include <type_traits>

#include "accum.hpp"
#include "config.hpp"
#include "ops.hpp"
#include "types.hpp"
#include "vector.hpp"

namespace aieflow_shim::detail {

struct mmul_shape {
    unsigned m, k, n;
};

enum class operand_class { i4, i8, i16, i32, bf16, f16, f32, other };

template <typename T>
constexpr operand_class operand_class_of() {
    if constexpr (std::is_same_v<T, float>) return operand_class::f32;
    else if constexpr (is_bfloat16_v<T>) return operand_class::bf16;
    else if constexpr (is_float16_v<T>) return operand_class::f16;
    else if constexpr (int4_elem<T>) return operand_class::i4;
    else if constexpr (int_elem<T> && sizeof(T) == 1) return operand_class::i8;
    else if constexpr (int_elem<T> && sizeof(T) == 2) return operand_class::i16;
    else if constexpr (int_elem<T> && sizeof(T) == 4) return operand_class::i32;
    else return operand_class::other;
}

template <unsigned Count>
constexpr bool shape_in(const mmul_shape (&list)[Count], unsigned m, unsigned k, unsigned n) {
    for (const auto& s : list)
        if (s.m == m && s.k == k && s.n == n) return true;
    return false;
}

// Supported shapes, from the UG1529 "Matrix Multiplication" tables.  Entries marked (*) are not
// in the table as far as aieflow could verify and are accepted to be permissive; (f) marks the
// float rows, whose published list could not be fully verified either.
// clang-format off
inline constexpr mmul_shape aie1_8x8[]   = {{4,8,4},{4,16,4},{8,8,4},{2,8,8},{4,8,8},{1,16,8},{2,16,8},{4,16,8}};
inline constexpr mmul_shape aie1_16x8[]  = {{4,4,4},{8,4,4},{4,8,4},{4,4,8}};
inline constexpr mmul_shape aie1_8x16[]  = {{4,4,8},{4,4,4},{8,8,1}};
inline constexpr mmul_shape aie1_16x16[] = {{4,4,4},{2,4,8},{4,4,8},{4,2,8},{8,8,1},
                                            {2,2,8} /* (*) */,{4,2,4} /* (*) */};
inline constexpr mmul_shape aie1_32x16[] = {{2,4,8},{4,4,4},{4,2,4},{2,2,4},{2,4,4},{4,4,2},{2,2,8}};
inline constexpr mmul_shape aie1_16x32[] = {{4,2,2},{2,4,8},{4,4,4}};
inline constexpr mmul_shape aie1_32x32[] = {{4,2,4},{2,2,2},{2,4,2},{2,8,2},{4,2,2},{4,4,2},{2,4,4},{4,4,1}};
inline constexpr mmul_shape aie1_f32[]   = {{4,2,4},{2,2,2},{2,4,2},  // (f) documented start of the row
                                            {4,4,4},{2,4,8},{4,2,8},{4,4,2},{2,8,2},{4,2,2},{2,4,4},{4,4,1}};  // (f) (*)

inline constexpr mmul_shape aieml_8x4[]   = {{4,16,8},{8,16,8},{4,32,8}};  // UG1529 / XD100 8b x 4b
inline constexpr mmul_shape aieml_8x8[]   = {{4,8,4},{4,16,4},{8,8,4},{2,8,8},{4,8,8},{8,8,8},{2,16,8},{4,16,8}};
inline constexpr mmul_shape aieml_16x8[]  = {{4,4,4},{8,4,4},{4,8,4},{4,4,8},{8,4,8},{4,8,8} /* (*) */};
inline constexpr mmul_shape aieml_8x16[]  = {{4,4,8},{4,4,4}};
inline constexpr mmul_shape aieml_16x16[] = {{4,4,4},{2,4,8},{4,4,8},{4,2,8},{8,4,4} /* (*) */};
inline constexpr mmul_shape aieml_32x16[] = {{2,4,8},{4,4,4},{4,2,4} /* (*) */,{8,2,4} /* (*) */};
inline constexpr mmul_shape aieml_16x32[] = {{2,4,8},{4,4,4},{4,2,4} /* (*) */};
inline constexpr mmul_shape aieml_32x32[] = {{4,2,4},{4,4,4} /* (*) */};
inline constexpr mmul_shape aieml_bf16[]  = {{4,8,4},{8,8,4},{4,16,4} /* (*) */,{4,16,8} /* (*) */,
                                             {2,8,8} /* (*) */,{4,8,8} /* (*) */};
inline constexpr mmul_shape aieml_f32[]   = {{4,8,4},  // emulated with bfloat16 operations
                                             {8,8,4} /* (*) */,{4,16,4} /* (*) */,{4,16,8} /* (*) */,
                                             {2,8,8} /* (*) */,{4,8,8} /* (*) */};

// AIE-MLv2 (__AIE_ARCH__ 21): UG1529 "Matrix Multiplication Modes", AIE-MLv2 row, native and
// emulated shapes alike.  AIE-ML's 8b x 4b 4x16x8 and 16b x 16b 4x4x4 are not in it.
inline constexpr mmul_shape mlv2_8x4[]   = {{4,16,16},{8,8,8}};
inline constexpr mmul_shape mlv2_8x8[]   = {{4,8,8},{8,8,8}};
inline constexpr mmul_shape mlv2_16x8[]  = {{8,2,8},{8,4,8},{4,4,8},{4,8,8}};
inline constexpr mmul_shape mlv2_8x16[]  = {{8,2,8},{4,4,8}};
inline constexpr mmul_shape mlv2_16x16[] = {{4,2,8},{8,2,8},{2,4,8},{4,4,8},{8,1,8}};
inline constexpr mmul_shape mlv2_32x16[] = {{4,2,8},{2,4,8},{4,4,8},{4,1,8}};
inline constexpr mmul_shape mlv2_16x32[] = {{4,4,8}};
inline constexpr mmul_shape mlv2_32x32[] = {{4,2,8},{4,4,4},{4,4,8},{8,2,8},{4,1,8}};
inline constexpr mmul_shape mlv2_bf16[]  = {{4,8,4},{4,8,8},{8,8,8},{8,1,8}};
inline constexpr mmul_shape mlv2_f16[]   = {{4,8,8},{4,8,4},{8,8,8},{8,1,8}};  // float16: 4x8x8 native
inline constexpr mmul_shape mlv2_f32[]   = {{4,8,4}};
// clang-format on

template <typename TA, typename TB>
constexpr bool mmul_shape_supported(unsigned m, unsigned k, unsigned n) {
    constexpr operand_class a = operand_class_of<TA>(), b = operand_class_of<TB>();
    using oc = operand_class;
    if constexpr (!is_aie_ml) {
        if constexpr (a == oc::i8 && b == oc::i8) return shape_in(aie1_8x8, m, k, n);
        else if constexpr (a == oc::i16 && b == oc::i8) return shape_in(aie1_16x8, m, k, n);
        else if constexpr (a == oc::i8 && b == oc::i16) return shape_in(aie1_8x16, m, k, n);
        else if constexpr (a == oc::i16 && b == oc::i16) return shape_in(aie1_16x16, m, k, n);
        else if constexpr (a == oc::i32 && b == oc::i16) return shape_in(aie1_32x16, m, k, n);
        else if constexpr (a == oc::i16 && b == oc::i32) return shape_in(aie1_16x32, m, k, n);
        else if constexpr (a == oc::i32 && b == oc::i32) return shape_in(aie1_32x32, m, k, n);
        else if constexpr (a == oc::f32 && b == oc::f32) return shape_in(aie1_f32, m, k, n);
        else return false;
    } else if constexpr (is_aie_mlv2) {
        if constexpr (a == oc::i8 && b == oc::i4) return shape_in(mlv2_8x4, m, k, n);
        else if constexpr (a == oc::i8 && b == oc::i8) return shape_in(mlv2_8x8, m, k, n);
        else if constexpr (a == oc::i16 && b == oc::i8) return shape_in(mlv2_16x8, m, k, n);
        else if constexpr (a == oc::i8 && b == oc::i16) return shape_in(mlv2_8x16, m, k, n);
        else if constexpr (a == oc::i16 && b == oc::i16) return shape_in(mlv2_16x16, m, k, n);
        else if constexpr (a == oc::i32 && b == oc::i16) return shape_in(mlv2_32x16, m, k, n);
        else if constexpr (a == oc::i16 && b == oc::i32) return shape_in(mlv2_16x32, m, k, n);
        else if constexpr (a == oc::i32 && b == oc::i32) return shape_in(mlv2_32x32, m, k, n);
        else if constexpr (a == oc::bf16 && b == oc::bf16) return shape_in(mlv2_bf16, m, k, n);
        else if constexpr (a == oc::f16 && b == oc::f16) return shape_in(mlv2_f16, m, k, n);
        else if constexpr (a == oc::f32 && b == oc::f32) return shape_in(mlv2_f32, m, k, n);
        else return false;
    } else {
        if constexpr (a == oc::i8 && b == oc::i4) return shape_in(aieml_8x4, m, k, n);
        else if constexpr (a == oc::i8 && b == oc::i8) return shape_in(aieml_8x8, m, k, n);
        else if constexpr (a == oc::i16 && b == oc::i8) return shape_in(aieml_16x8, m, k, n);
        else if constexpr (a == oc::i8 && b == oc::i16) return shape_in(aieml_8x16, m, k, n);
        else if constexpr (a == oc::i16 && b == oc::i16) return shape_in(aieml_16x16, m, k, n);
        else if constexpr (a == oc::i32 && b == oc::i16) return shape_in(aieml_32x16, m, k, n);
        else if constexpr (a == oc::i16 && b == oc::i32) return shape_in(aieml_16x32, m, k, n);
        else if constexpr (a == oc::i32 && b == oc::i32) return shape_in(aieml_32x32, m, k, n);
        else if constexpr (a == oc::bf16 && b == oc::bf16) return shape_in(aieml_bf16, m, k, n);
        else if constexpr (a == oc::f32 && b == oc::f32) return shape_in(aieml_f32, m, k, n);
        else return false;
    }
}

}  // namespace aieflow_shim::detail

namespace aie {

template <unsigned M, unsigned K, unsigned N, typename TypeA, typename TypeB = TypeA,
          typename AccumTag = accauto>
struct mmul {
    static_assert(aieflow_shim::detail::elem_type<TypeA> && aieflow_shim::detail::elem_type<TypeB>,
                  "aieflow shim: unsupported mmul operand types");
    static_assert(aieflow_shim::detail::acc_tag_allowed<TypeA, TypeB, AccumTag>(),
                  "aieflow shim: mmul accumulator tag not allowed for these operand types on this "
                  "architecture (AIE: acc48/acc80, AIE-ML: acc32/acc64, floating point: accfloat)");
    static_assert(aieflow_shim::detail::mmul_shape_supported<TypeA, TypeB>(M, K, N),
                  "aieflow shim: unsupported mmul shape MxKxN for these operand types on this "
                  "architecture (see the UG1529 matrix multiplication table)");

    using accum_tag = aieflow_shim::detail::resolve_acc_t<TypeA, TypeB, AccumTag>;
    using accum_type = accum<accum_tag, M * N>;
    using value_type = accum_tag;
    using type_A = TypeA;
    using type_B = TypeB;

    static constexpr unsigned size_A = M * K;
    static constexpr unsigned size_B = K * N;
    static constexpr unsigned size_C = M * N;

    mmul() = default;
    mmul(const accum_type& acc) : c_(acc) {}  // NOLINT(google-explicit-constructor)
    template <typename T>
    explicit mmul(const vector<T, size_C>& v, int shift = 0) : c_(v, shift) {}

    // C = A * B
    void mul(const vector<TypeA, size_A>& a, const vector<TypeB, size_B>& b) {
        c_ = accum_type();
        mac(a, b);
    }

    // C += A * B
    void mac(const vector<TypeA, size_A>& a, const vector<TypeB, size_B>& b) {
        for (unsigned i = 0; i < M; ++i) {
            for (unsigned j = 0; j < N; ++j) {
                const unsigned c = i * N + j;
                if constexpr (accum_type::is_floating_point) {
                    float acc = c_.get(c);
                    for (unsigned k = 0; k < K; ++k) {
                        const float p = static_cast<float>(static_cast<float>(a[i * K + k]) *
                                                           static_cast<float>(b[k * N + j]));
                        acc = static_cast<float>(acc + p);
                    }
                    c_.set_float(c, acc);
                } else {
                    aieflow_shim::detail::i128 acc = static_cast<aieflow_shim::detail::i128>(c_.get(c));
                    for (unsigned k = 0; k < K; ++k) {
                        acc += static_cast<aieflow_shim::detail::i128>(a[i * K + k]) *
                               static_cast<aieflow_shim::detail::i128>(b[k * N + j]);
                        acc = aieflow_shim::detail::wrap_bits(acc, accum_type::lane_bits);
                    }
                    c_.set_exact(c, acc);
                }
            }
        }
    }

    accum_type to_accum() const { return c_; }
    operator accum_type() const { return c_; }  // NOLINT(google-explicit-constructor)

    template <typename T>
    vector<T, size_C> to_vector(int shift = 0) const {
        return c_.template to_vector<T>(shift);
    }

private:
    accum_type c_;
};

}  // namespace aie
