// aieflow DAG kernels: residual Add, LayerNorm, activations and softmax on one AI Engine tile, written against the
// public AIE API (UG1529) and the ADF kernel-class interface (UG1079 / UG1603).
//
// Both work on row-major buffers [rows][features] (what the memory-tile read tilers deliver) and
// compute exactly what aieflow's emulator computes (ops/add.py, ops/layernorm.py), bit for bit:
//
//   ResidualAdd: y = srs((a << SHIFT_A) + (b << SHIFT_B), SHIFT)   one SRS, output rounding/saturation
//                (then max(y, 0) when a ReLU is fused into the add)
//   ScaleShift:  y = srs(x m + (c << SHIFT_T), SHIFT) per feature (a standalone BatchNorm, ops/scale_shift.py)
//   LayerNorm:   the integer algorithm of ops/layernorm.py: S1, S2, V = n S2 - S1^2 (+ eps) for a group of 16
//                rows, their normalised integer square roots r and 16-bit reciprocals 2^46 / r at once in 16
//                lanes (row_recip.h), then per row z = round_even(D inv / 2^s), y = srs(z gamma + beta, SHIFT).
//   Activation, Softmax: ops/activation.py's table / interpolation and softmax: vector forms (aie::parallel_lookup,
//                vector interpolation and softmax rows) where the config says so, else activation_fixed.h.
//   MaskedMean:  y = round(sum of the kept tokens' codes / their count) per sample (ops/masked_mean.py), 0 where
//                the run-time mask keeps none.
//   MatMul:      y = srs(sum_k a_ik b_kj, SHIFT) per sample (ops/matmul.py): exact products summed in 64-bit
//                accumulator lanes, one SRS with the output's rounding / saturation (bf16: the same loop in
//                accfloat lanes, one rounding to bf16; the same class, TO = bfloat16); a long K split over a
//                cascade of tiles: MatMulFirst / MatMulMiddle / MatMulLast, the partial sums on the cascade.
// Every SRS is followed by narrow.h's range of an output type narrower than its container (OUT_LO /
// OUT_HI / OUT_WRAP in the config, absent otherwise).
#pragma once

#include <adf.h>
#include <aie_api/aie.hpp>
#include <aie_api/aie_adf.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "activation_fixed.h"
#include "narrow.h"
#include "row_recip.h"

namespace aieflow {

// [S][A][B] -> [S][B][A] in tile memory: a port whose block the memory tile moves in whole 32-bit
// words (AIE-ML DMAs address words, AM020) and the kernel transposes element by element.
template <typename T, unsigned S, unsigned A, unsigned B>
inline void transpose_block(const T* __restrict src, T* __restrict dst) {
    for (unsigned s = 0; s < S; ++s)
        for (unsigned a = 0; a < A; ++a)
            for (unsigned b = 0; b < B; ++b) dst[(s * B + b) * A + a] = src[(s * A + a) * B + b];
}

// ---------------------------------------------------------------------------- residual Add
// Config (generated in layers.h):
//   struct add_cfg { using TA, TB, TO; using ACC = acc32 | acc64; static constexpr unsigned SIZE;
//                    static constexpr int SHIFT_A, SHIFT_B, SHIFT; static constexpr bool RELU; RND; SAT;
//                    per port P in A, B, OUT: bool P_T (transpose in memory), unsigned P_S, P_A, P_B; };
template <class C>
class ResidualAdd {
    using TA = typename C::TA;
    using TB = typename C::TB;
    using TO = typename C::TO;
    using ACC = typename C::ACC;
    static constexpr unsigned L = 16;  // lanes per step: 16 x 32/64-bit accumulator lanes
    static constexpr unsigned FULL = C::SIZE / L * L;
    alignas(32) TA ta_[C::A_T ? C::SIZE : 1];
    alignas(32) TB tb_[C::B_T ? C::SIZE : 1];
    alignas(32) TO to_[C::OUT_T ? C::SIZE : 1];

    static aie::vector<TO, L> step(const aie::vector<TA, L>& va, const aie::vector<TB, L>& vb) {
        aie::accum<ACC, L> acc;
        acc.from_vector(va, C::SHIFT_A);  // align a to the common grid (exact upshift)
        aie::accum<ACC, L> acb;
        acb.from_vector(vb, C::SHIFT_B);
        acc = aie::add(acc, acb);  // exact: the accumulator is wide enough (chosen by aieflow)
        // one shift-round-saturate, then the range of an output type narrower than TO (narrow.h)
        const aie::vector<TO, L> v = aieflow_narrow::narrow<C>(acc.template to_vector<TO>(C::SHIFT));
        if constexpr (C::RELU) return aie::max(v, aie::zeros<TO, L>());  // a ReLU fused into the add
        return v;
    }

public:
    void run(adf::input_buffer<TA>& __restrict a, adf::input_buffer<TB>& __restrict b,
             adf::output_buffer<TO>& __restrict out) {
        aie::set_rounding(C::RND);
        aie::set_saturation(C::SAT);
        if constexpr (C::A_T) transpose_block<TA, C::A_S, C::A_A, C::A_B>(a.data(), ta_);
        if constexpr (C::B_T) transpose_block<TB, C::B_S, C::B_A, C::B_B>(b.data(), tb_);
        const TA* __restrict pa = C::A_T ? ta_ : a.data();
        const TB* __restrict pb = C::B_T ? tb_ : b.data();
        TO* __restrict po = C::OUT_T ? to_ : out.data();
        for (unsigned i = 0; i < FULL; i += L)
            aie::store_v(po + i, step(aie::load_v<L>(pa + i), aie::load_v<L>(pb + i)));
        if constexpr (C::SIZE % L != 0) {  // the last, partial vector
            aie::vector<TA, L> va = aie::zeros<TA, L>();
            aie::vector<TB, L> vb = aie::zeros<TB, L>();
            for (unsigned j = 0; j < C::SIZE - FULL; ++j) {
                va.set(pa[FULL + j], j);
                vb.set(pb[FULL + j], j);
            }
            const aie::vector<TO, L> vo = step(va, vb);
            for (unsigned j = 0; j < C::SIZE - FULL; ++j) po[FULL + j] = vo.get(j);
        }
        if constexpr (C::OUT_T) transpose_block<TO, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() { REGISTER_FUNCTION(ResidualAdd::run); }
};

// ---------------------------------------------------------------------------- ConstAdd
// Config (generated in layers.h):
//   struct ca_cfg { using TA, TB, TO; using ACC = acc32 | acc64; static constexpr unsigned ROWS, N, MQ;
//                   static constexpr int SHIFT_A, SHIFT_B, SHIFT; RND; SAT; per port P in IN, OUT: bool P_T, ... };
// y = x + C (ops/add_const.py): ResidualAdd's step with operand B the constant's codes (a kernel parameter of
// MQ rows x N), row r of the part reading row r % MQ (whole samples per part).
template <class C>
class ConstAdd {
    using TA = typename C::TA;
    using TB = typename C::TB;
    using TO = typename C::TO;
    using ACC = typename C::ACC;
    static constexpr unsigned L = 16;
    static constexpr unsigned FULL = C::N / L * L;
    alignas(32) TB c_[C::MQ * C::N];
    alignas(32) TA ti_[C::IN_T ? C::ROWS * C::N : 1];
    alignas(32) TO to_[C::OUT_T ? C::ROWS * C::N : 1];

    static aie::vector<TO, L> step(const aie::vector<TA, L>& va, const aie::vector<TB, L>& vb) {
        aie::accum<ACC, L> acc;
        acc.from_vector(va, C::SHIFT_A);  // exact upshifts onto the common grid
        aie::accum<ACC, L> acb;
        acb.from_vector(vb, C::SHIFT_B);
        acc = aie::add(acc, acb);  // exact
        return aieflow_narrow::narrow<C>(acc.template to_vector<TO>(C::SHIFT));
    }

public:
    explicit ConstAdd(const std::vector<TB>& c) {
        for (unsigned i = 0; i < C::MQ * C::N; ++i) c_[i] = i < c.size() ? c[i] : TB(0);
    }

    void run(adf::input_buffer<TA>& __restrict in, adf::output_buffer<TO>& __restrict out) {
        aie::set_rounding(C::RND);
        aie::set_saturation(C::SAT);
        if constexpr (C::IN_T) transpose_block<TA, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const TA* __restrict x = C::IN_T ? ti_ : in.data();
        TO* __restrict y = C::OUT_T ? to_ : out.data();
        for (unsigned r = 0; r < C::ROWS; ++r, x += C::N, y += C::N) {
            const TB* __restrict c = c_ + (r % C::MQ) * C::N;
            for (unsigned i = 0; i < FULL; i += L) aie::store_v(y + i, step(aie::load_v<L>(x + i), aie::load_v<L>(c + i)));
            if constexpr (C::N % L != 0) {  // the row's last, partial vector
                aie::vector<TA, L> va = aie::zeros<TA, L>();
                aie::vector<TB, L> vb = aie::zeros<TB, L>();
                for (unsigned j = 0; j < C::N - FULL; ++j) {
                    va.set(x[FULL + j], j);
                    vb.set(c[FULL + j], j);
                }
                const aie::vector<TO, L> vo = step(va, vb);
                for (unsigned j = 0; j < C::N - FULL; ++j) y[FULL + j] = vo.get(j);
            }
        }
        if constexpr (C::OUT_T) transpose_block<TO, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(ConstAdd::run);
        REGISTER_PARAMETER(c_);
    }
};

// ---------------------------------------------------------------------------- ScaleShift
// Config (generated in layers.h):
//   struct ss_cfg { using TI, TS, TT, TO; using ACC = acc32 | acc64; static constexpr unsigned ROWS, N;
//                   static constexpr int SHIFT_T, SHIFT; RND; SAT; per port P in IN, OUT: bool P_T, ... };
// y = srs(x m + (c << SHIFT_T), SHIFT) per feature (ops/scale_shift.py: a standalone BatchNorm): the exact
// products x m (aie::mul, UG1529), the shift's codes c upshifted onto their grid (from_vector), one exact add,
// one SRS with the output's rounding / saturation; m and c are kernel parameters of N values (padded to whole
// vectors with zeros).
template <class C>
class ScaleShift {
    using TI = typename C::TI;
    using TS = typename C::TS;
    using TT = typename C::TT;
    using TO = typename C::TO;
    using ACC = typename C::ACC;
    static constexpr unsigned L = 16;
    static constexpr unsigned FULL = C::N / L * L;
    static constexpr unsigned NV = (C::N + L - 1) / L * L;
    alignas(32) TS m_[NV];
    alignas(32) TT c_[NV];
    alignas(32) TI ti_[C::IN_T ? C::ROWS * C::N : 1];
    alignas(32) TO to_[C::OUT_T ? C::ROWS * C::N : 1];

    static aie::vector<TO, L> step(const aie::vector<TI, L>& vx, const aie::vector<TS, L>& vm,
                                   const aie::vector<TT, L>& vc) {
        aie::accum<ACC, L> acc = aie::mul<ACC>(vx, vm);  // exact products on the grid of frac_x + frac_s
        aie::accum<ACC, L> acc_c;
        acc_c.from_vector(vc, C::SHIFT_T);  // exact upshift of the shift's codes onto that grid
        acc = aie::add(acc, acc_c);         // exact: the accumulator is wide enough (chosen by aieflow)
        return aieflow_narrow::narrow<C>(acc.template to_vector<TO>(C::SHIFT));
    }

public:
    ScaleShift(const std::vector<TS>& m, const std::vector<TT>& c) {
        for (unsigned i = 0; i < NV; ++i) {
            m_[i] = i < m.size() ? m[i] : TS(0);
            c_[i] = i < c.size() ? c[i] : TT(0);
        }
    }

    void run(adf::input_buffer<TI>& __restrict in, adf::output_buffer<TO>& __restrict out) {
        aie::set_rounding(C::RND);
        aie::set_saturation(C::SAT);
        if constexpr (C::IN_T) transpose_block<TI, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const TI* __restrict x = C::IN_T ? ti_ : in.data();
        TO* __restrict y = C::OUT_T ? to_ : out.data();
        for (unsigned r = 0; r < C::ROWS; ++r, x += C::N, y += C::N) {
            for (unsigned i = 0; i < FULL; i += L)
                aie::store_v(y + i, step(aie::load_v<L>(x + i), aie::load_v<L>(m_ + i), aie::load_v<L>(c_ + i)));
            if constexpr (C::N % L != 0) {  // the row's last, partial vector
                aie::vector<TI, L> vx = aie::zeros<TI, L>();
                for (unsigned j = 0; j < C::N - FULL; ++j) vx.set(x[FULL + j], j);
                const aie::vector<TO, L> vo = step(vx, aie::load_v<L>(m_ + FULL), aie::load_v<L>(c_ + FULL));
                for (unsigned j = 0; j < C::N - FULL; ++j) y[FULL + j] = vo.get(j);
            }
        }
        if constexpr (C::OUT_T) transpose_block<TO, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(ScaleShift::run);
        REGISTER_PARAMETER(m_);
        REGISTER_PARAMETER(c_);
    }
};

// ---------------------------------------------------------------------------- LayerNorm
// Config (generated in layers.h):
//   struct ln_cfg { using TI, TO; static constexpr unsigned ROWS, N; static constexpr long long EPS;
//                   static constexpr int SHIFT; RND; SAT;
//                   per port P in IN, OUT: bool P_T (transpose in memory), unsigned P_S, P_A, P_B; };
namespace ln_detail {
constexpr int P_BITS = 46;  // reciprocal 2^P / r, r in [2^30, 2^31): a 16-bit inverse
constexpr int Z_FRAC = 20;  // fractional bits of z
constexpr int SPLIT = 20;   // z gamma + beta = hi 2^SPLIT + lo, both int32, for the vector SRS

// bits of q (0 for 0): a binary search, 6 steps
inline int bit_length(std::uint64_t q) {
    int b = 0;
    for (int s = 32; s > 0; s >>= 1) {
        if ((q >> s) != 0) {
            q >>= s;
            b += s;
        }
    }
    return b + (q != 0 ? 1 : 0);
}

// v / 2^s rounded to nearest, ties to even (s > 0); v << -s when s <= 0 (exact)
inline std::int64_t round_even_shift(std::int64_t v, int s) {
    if (s <= 0) return static_cast<std::int64_t>(static_cast<std::uint64_t>(v) << -s);
    const std::int64_t q = v >> s;  // floor (arithmetic shift)
    const std::int64_t rem = v - static_cast<std::int64_t>(static_cast<std::uint64_t>(q) << s);
    const std::int64_t half = std::int64_t(1) << (s - 1);
    return (rem > half || (rem == half && (q & 1) != 0)) ? q + 1 : q;
}
}  // namespace ln_detail

// Exact sum of the 16 lanes of a 64-bit accumulator: each lane split as hi 2^31 + lo with
// floor rounding (lo in [0, 2^31), both int32), then summed in scalar 64-bit arithmetic.
template <unsigned L>
inline std::int64_t lane_sum(const aie::accum<acc64, L>& acc) {
    aie::set_rounding(aie::rounding_mode::floor);
    const aie::vector<int32, L> hi = acc.template to_vector<int32>(31);
    aie::accum<acc64, L> h;
    h.from_vector(hi, 31);
    const aie::vector<int32, L> lo = aie::sub(acc, h).template to_vector<int32>(0);
    std::int64_t s = 0;
    for (unsigned j = 0; j < L; ++j) s += (static_cast<std::int64_t>(hi.get(j)) << 31) + lo.get(j);
    return s;
}

template <class C>
class LayerNorm {
    using TI = typename C::TI;
    using TO = typename C::TO;
    static constexpr unsigned L = 16;
    static constexpr unsigned NV = (C::N + L - 1) / L * L;  // features padded to whole vectors
    // the vector path: rows of whole, 32-byte aligned vectors, n fits int16 (d = n x - S1 fits int32)
    static constexpr bool VEC = C::N % L == 0 && (C::N * sizeof(TI)) % 32 == 0 && (C::N * sizeof(TO)) % 32 == 0 &&
                                C::N < 32768;
    alignas(32) int16 gamma_[C::N];
    alignas(32) std::int64_t beta_[C::N];
    alignas(32) int32 hi_[NV];  // (z gamma + beta) >> SPLIT of the current row (scalar path); z (vector path)
    alignas(32) int32 lo_[NV];  // its low SPLIT bits (non-negative)
    alignas(32) int32 bhi_[NV];  // beta >> SPLIT
    alignas(32) int32 blo_[NV];  // beta's low SPLIT bits
    alignas(32) TI ti_[C::IN_T ? C::ROWS * C::N : 1];
    alignas(32) TO to_[C::OUT_T ? C::ROWS * C::N : 1];
    // per group of 16 rows: S1, G, u >> 31, u mod 2^31 and the reciprocal inv
    alignas(32) std::int64_t s1_[L];
    alignas(32) int32 g_[L];
    alignas(32) int32 uh_[L];
    alignas(32) int32 ul_[L];
    alignas(32) int32 inv_[L];

    static aie::vector<int16, L> widen(const TI* p) {
        if constexpr (sizeof(TI) == 2) {
            return aie::load_v<L>(p);
        } else {
            aie::accum<acc32, L> a;
            a.from_vector(aie::load_v<L>(p), 0);
            return a.template to_vector<int16>(0);  // exact: int8 codes fit int16
        }
    }

public:
    LayerNorm(const std::vector<int16>& g, const std::vector<std::int64_t>& b) {
        for (unsigned i = 0; i < C::N; ++i) {
            gamma_[i] = i < g.size() ? g[i] : int16(0);
            beta_[i] = i < b.size() ? b[i] : std::int64_t(0);
        }
        for (unsigned i = 0; i < NV; ++i) {
            const std::int64_t v = i < C::N ? beta_[i] : 0;
            bhi_[i] = static_cast<int32>(v >> ln_detail::SPLIT);
            blo_[i] = static_cast<int32>(v & ((std::int64_t(1) << ln_detail::SPLIT) - 1));
            hi_[i] = lo_[i] = 0;
        }
        for (unsigned k = 0; k < L; ++k) {
            s1_[k] = 0;
            g_[k] = uh_[k] = ul_[k] = inv_[k] = 0;
        }
    }

    void run(adf::input_buffer<TI>& __restrict in, adf::output_buffer<TO>& __restrict out) {
        using namespace ln_detail;
        aie::set_saturation(C::SAT);
        if constexpr (C::IN_T) transpose_block<TI, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const TI* __restrict x = C::IN_T ? ti_ : in.data();
        TO* __restrict y = C::OUT_T ? to_ : out.data();
        constexpr std::int64_t n = C::N;
        for (unsigned row0 = 0; row0 < C::ROWS; row0 += L) {
            const unsigned rows = C::ROWS - row0 < L ? C::ROWS - row0 : L;
            // 1. the statistics of up to 16 rows: S1, Q = n S2 - S1^2 + E, G, u = Q << 2G split for the lanes
            for (unsigned k = 0; k < L; ++k) {
                std::int64_t s1 = 0, s2 = 0;
                if (k < rows) {
                    const TI* xr = x + k * C::N;
                    if constexpr (VEC) {  // S1, S2: 16 lanes of 64-bit accumulators, exact
                        aie::accum<acc64, L> a1 = aie::zeros<acc64, L>();
                        aie::accum<acc64, L> a2 = aie::zeros<acc64, L>();
                        const aie::vector<int16, L> one = aie::broadcast<int16, L>(1);
                        for (unsigned i = 0; i < C::N; i += L) {
                            const aie::vector<int16, L> v = widen(xr + i);
                            a1 = aie::mac(a1, v, one);
                            a2 = aie::mac(a2, v, v);
                        }
                        s1 = lane_sum(a1);
                        s2 = lane_sum(a2);
                    } else {
                        for (unsigned i = 0; i < C::N; ++i) {
                            const std::int64_t v = xr[i];
                            s1 += v;
                            s2 += v * v;
                        }
                    }
                }
                const std::int64_t q = k < rows ? n * s2 - s1 * s1 + C::EPS : 0;  // n^2 (var + eps) in codes, exact
                const int g = (62 - bit_length(static_cast<std::uint64_t>(q))) / 2;
                const std::uint64_t u = static_cast<std::uint64_t>(q) << (2 * g);  // [2^60, 2^62) or 0
                s1_[k] = s1;
                g_[k] = g;
                uh_[k] = static_cast<int32>(u >> 31);
                ul_[k] = static_cast<int32>(u & 0x7fffffffu);
            }
            // 2. the 16 rows' reciprocal square roots at once: inv = round(2^46 / isqrt(u)), exact (row_recip.h)
            aieflow_recip::layernorm_inv16(uh_, ul_, inv_);
            aie::set_saturation(C::SAT);
            // 3. the normalisation, row by row
            for (unsigned k = 0; k < rows; ++k, x += C::N, y += C::N) {
                const std::int64_t s1 = s1_[k];
                const int g = g_[k];
                const std::int64_t inv = inv_[k];
                const int shift = P_BITS - g - Z_FRAC;
                if constexpr (VEC) {
                    if (shift > 0 && shift < 64) {  // z = round_even(d inv / 2^shift) by the API's SRS
                        aie::set_rounding(aie::rounding_mode::conv_even);
                        const aie::vector<int32, L> s1v = aie::broadcast<int32, L>(static_cast<int32>(s1));
                        for (unsigned i = 0; i < C::N; i += L) {
                            aie::accum<acc64, L> d = aie::mul<acc64>(widen(x + i), static_cast<int16>(n));
                            aie::accum<acc64, L> m;
                            m.from_vector(s1v, 0);
                            d = aie::sub(d, m);  // n x - S1, exact, fits int32
                            const aie::accum<acc64, L> zd =
                                aie::mul<acc64>(d.template to_vector<int32>(0), static_cast<int32>(inv));
                            aie::store_v(hi_ + i, zd.template to_vector<int32>(shift));
                        }
                        // y = srs(z gamma + beta, SHIFT): z gamma in 64-bit lanes, beta rebuilt from hi / lo
                        aie::set_rounding(C::RND);
                        for (unsigned i = 0; i < C::N; i += L) {
                            aie::accum<acc64, L> acc = aie::mul<acc64>(aie::load_v<L>(hi_ + i), aie::load_v<L>(gamma_ + i));
                            aie::accum<acc64, L> bh;
                            bh.from_vector(aie::load_v<L>(bhi_ + i), SPLIT);
                            aie::accum<acc64, L> bl;
                            bl.from_vector(aie::load_v<L>(blo_ + i), 0);
                            acc = aie::add(aie::add(acc, bh), bl);
                            aie::store_v(y + i, aieflow_narrow::narrow<C>(acc.template to_vector<TO>(C::SHIFT)));
                        }
                        continue;
                    }
                }
                for (unsigned i = 0; i < C::N; ++i) {  // scalar path (and any row whose shift is <= 0)
                    const std::int64_t d = n * static_cast<std::int64_t>(x[i]) - s1;
                    const std::int64_t z = round_even_shift(d * inv, shift);
                    const std::int64_t v = z * gamma_[i] + beta_[i];  // < 2^48: exact in 64-bit lanes
                    hi_[i] = static_cast<int32>(v >> SPLIT);
                    lo_[i] = static_cast<int32>(v & ((std::int64_t(1) << SPLIT) - 1));
                }
                // y = srs(v, SHIFT): v rebuilt exactly in 64-bit accumulator lanes, SRS by the modes
                aie::set_rounding(C::RND);
                for (unsigned i = 0; i < NV; i += L) {
                    aie::accum<acc64, L> acc;
                    acc.from_vector(aie::load_v<L>(hi_ + i), SPLIT);
                    aie::accum<acc64, L> low;
                    low.from_vector(aie::load_v<L>(lo_ + i), 0);
                    acc = aie::add(acc, low);
                    const aie::vector<TO, L> vo = aieflow_narrow::narrow<C>(acc.template to_vector<TO>(C::SHIFT));
                    if constexpr (C::N % L == 0 && (C::N * sizeof(TO)) % 32 == 0) {
                        aie::store_v(y + i, vo);  // rows start 32-byte aligned
                    } else {
                        for (unsigned j = 0; i + j < C::N; ++j) y[i + j] = vo.get(j);
                    }
                }
            }
        }
        if constexpr (C::OUT_T) transpose_block<TO, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(LayerNorm::run);
        REGISTER_PARAMETER(gamma_);
        REGISTER_PARAMETER(beta_);
    }
};

// ---------------------------------------------------------------------------- Activation
// Config (generated in layers.h):
//   struct act_cfg { using TI, TO; static constexpr unsigned SIZE, TABLE; static constexpr int MIN, SEG,
//                    LO, HI; static constexpr unsigned LUT_P, LUT_V; static constexpr bool VEC, POLY;
//                    static constexpr int PS, PT; per port P in IN, OUT: bool P_T, unsigned P_S, P_A, P_B; };
// Three forms, each the emulation's definition (activation_fixed.h) bit for bit:
//   LUT_P > 0 (8-bit input, full table, AIE-ML family): aie::parallel_lookup of 32 lanes from an int16
//     aie::lut<LUT_P> holding the output codes, index x - MIN (bias -MIN, saturating: every code is in
//     range); the table laid out as UG1603 documents (blocks of LUT_V values, each twice, two copies).
//   VEC (16-bit input, interpolation): per 16 lanes the index i = (x >> SEG) - (MIN >> SEG) and r = x mod
//     2^SEG in vector registers (MIN is a multiple of 2^SEG), the two knots T[i], T[i + 1] read by a scalar
//     loop (AIE-ML has no gather for int32 knots of 1025 entries), then T[i] (2^SEG - r) + T[i + 1] r in
//     64-bit lanes (= T[i] 2^SEG + (T[i + 1] - T[i]) r, exact), one SRS by SEG rounding positive_inf
//     (floor(v / 2^SEG + 1/2): the emulation's + 2^(SEG-1) >> SEG), then max LO / min HI.
//   POLY (the polynomial GELU, I-BERT's i-GELU): activation_fixed.h igelu per element on the scalar unit,
//     the table its three constants.
//   otherwise the scalar loop of activation_fixed.h.
template <class C>
class Activation {
    using TI = typename C::TI;
    using TO = typename C::TO;
    static constexpr unsigned LANES = 32;
    static constexpr unsigned LUT_WORDS = C::LUT_P ? 2 * ((C::TABLE + C::LUT_V - 1) / C::LUT_V) * C::LUT_V : 1;
    alignas(32) int32 table_[C::TABLE];
    alignas(32) int16 lab_[LUT_WORDS];  // the lookup table's two copies (UG1603 layout)
    alignas(32) int16 lcd_[LUT_WORDS];
    alignas(32) int32 ka_[C::VEC ? 16 : 1];  // the interpolation's knots of 16 lanes
    alignas(32) int32 kb_[C::VEC ? 16 : 1];
    alignas(32) TI ti_[C::IN_T ? C::SIZE : 1];
    alignas(32) TO to_[C::OUT_T ? C::SIZE : 1];

    template <unsigned L>
    static aie::vector<TO, L> narrow_to(const aie::vector<int32, L>& v) {  // values already in TO's range
        aie::accum<acc64, L> a;
        a.from_vector(v, 0);
        return a.template to_vector<TO>(0);
    }

public:
    explicit Activation(const std::vector<int32>& t) {
        for (unsigned i = 0; i < C::TABLE; ++i) table_[i] = i < t.size() ? t[i] : int32(0);
        for (unsigned p = 0; p < LUT_WORDS; ++p) {  // entry i at (i / V) 2V + i % V and V further on
            const unsigned i = (p / (2 * C::LUT_V)) * C::LUT_V + p % C::LUT_V;
            lab_[p] = lcd_[p] = C::LUT_P && i < C::TABLE ? static_cast<int16>(table_[i]) : int16(0);
        }
        for (unsigned j = 0; j < (C::VEC ? 16u : 1u); ++j) ka_[j] = kb_[j] = 0;
    }

    void run(adf::input_buffer<TI>& __restrict in, adf::output_buffer<TO>& __restrict out) {
        if constexpr (C::IN_T) transpose_block<TI, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const TI* __restrict x = C::IN_T ? ti_ : in.data();
        TO* __restrict y = C::OUT_T ? to_ : out.data();
        unsigned done = 0;
        if constexpr (C::LUT_P > 0) {
            const aie::lut<C::LUT_P, int16> lut(C::TABLE, lab_, lcd_);
            aie::parallel_lookup<TI, aie::lut<C::LUT_P, int16>> look(lut, 0, -C::MIN);
            for (; done + LANES <= C::SIZE; done += LANES) {
                const aie::vector<int16, LANES> v = look.fetch(aie::load_v<LANES>(x + done));
                if constexpr (sizeof(TO) == 2) {
                    aie::store_v(y + done, v);
                } else {
                    aie::accum<acc32, LANES> a;
                    a.from_vector(v, 0);
                    aie::store_v(y + done, a.template to_vector<TO>(0));  // exact: table entries are TO codes
                }
            }
        } else if constexpr (C::VEC) {
            constexpr unsigned L = 16;
            aie::set_rounding(aie::rounding_mode::positive_inf);
            aie::set_saturation(aie::saturation_mode::saturate);
            const aie::vector<int16, L> one = aie::broadcast<int16, L>(static_cast<int16>(1 << C::SEG));
            for (; done + L <= C::SIZE; done += L) {
                const aie::vector<int16, L> v = aie::load_v<L>(x + done);
                const aie::vector<int16, L> hi = aie::downshift(v, C::SEG);  // floor(x / 2^SEG)
                const aie::vector<int16, L> r = aie::sub(v, aie::upshift(hi, C::SEG));
                for (unsigned j = 0; j < L; ++j) {
                    const int k = hi.get(j) - (C::MIN >> C::SEG);
                    ka_[j] = table_[k];
                    kb_[j] = table_[k + 1];
                }
                aie::accum<acc64, L> acc = aie::mul<acc64>(aie::load_v<L>(ka_), aie::sub(one, r));
                acc = aie::mac(acc, aie::load_v<L>(kb_), r);
                aie::vector<int32, L> w = acc.template to_vector<int32>(C::SEG);
                w = aie::min(aie::max(w, static_cast<int32>(C::LO)), static_cast<int32>(C::HI));
                aie::store_v(y + done, narrow_to<L>(w));
            }
        }
        if constexpr (C::POLY) {
            for (; done < C::SIZE; ++done)
                y[done] = static_cast<TO>(aieflow_act::igelu(x[done], C::PS, C::PT, table_, C::LO, C::HI));
        }
        for (unsigned i = done; i < C::SIZE; ++i)
            y[i] = static_cast<TO>(aieflow_act::lookup(table_, static_cast<std::int64_t>(x[i]) - C::MIN, C::SEG, C::LO,
                                                       C::HI));
        if constexpr (C::OUT_T) transpose_block<TO, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(Activation::run);
        REGISTER_PARAMETER(table_);
    }
};

// ---------------------------------------------------------------------------- Softmax
// Config (generated in layers.h):
//   struct sm_cfg { using TI, TO; static constexpr unsigned ROWS, N, TABLE; static constexpr int SD, FO, HI;
//                   static constexpr bool MASKED; unsigned MQ; unsigned char KEEP[MQ * N] (row r keeps key j
//                   where KEEP[(r % MQ) N + j]: a compile-time attention mask, ROWS a multiple of MQ);
//                   static constexpr bool VEC, IEXP; static constexpr int UP;
//                   per port P in IN, OUT: bool P_T, unsigned P_S, P_A, P_B; };
// IEXP (the integer softmax): e = activation_fixed.h iexp(m - x) per element on the scalar unit instead of the
// table read (the table holds its five constants), in both forms below; the rest unchanged.
// VEC (rows of whole 16-lane vectors, SoftmaxVec below).  Otherwise (and a constant mask alone, MASKED) the
// scalar softmax_row of activation_fixed.h.  Both the emulation's definition bit for bit.

// The vector rows of Softmax and SoftmaxPadded: per row the maximum by aie::max + reduce_max, the table index
// min((m - x) >> SD, TABLE - 1) in int32 lanes, the exp entries read by a scalar loop (a data-dependent load
// per element), S by aie::add + reduce_add (S < 2^28), for a group of 16 rows (their exp entries kept); the 16
// reciprocals at once in vector lanes (row_recip.h softmax_inv16, exact), then per row e inv in 64-bit lanes
// (inv <= 2^31 does not fit int32: (e (inv >> 1)) 2 + e (inv & 1)), one SRS by 46 - FO rounding positive_inf
// (the emulation's + 2^(45-FO) >> (46-FO)), min HI.
// KEYED (a run-time key padding mask: SoftmaxPadded): lane j of row r is kept where the sample's mask byte
// mask[(r / RS) MP + j] and (MASKED) KEEP[(r % MQ) N + j] are both nonzero (aie::min of the bytes, aie::ge 1:
// an aie::mask per 16 lanes); the maximum is over the kept lanes (aie::select puts the lowest code in the
// others), a dropped lane's index is 0 (a valid table read) and its exp entry is set to 0 (aie::select), so S
// sums the kept entries and a dropped key's output is exactly 0.  A row keeping no key has S = 0: its lane of
// the reciprocal pass takes S = 2^15 (any S in range) and every e is 0, so every output is 0, as the emulation.
template <class C, bool KEYED>
struct SoftmaxVec {
    using TI = typename C::TI;
    using TO = typename C::TO;
    static constexpr unsigned L = 16;

    static aie::vector<int32, L> widen(const TI* p) {
        aie::accum<acc32, L> a;  // 8- / 16-bit codes fit 32-bit lanes
        a.from_vector(aie::load_v<L>(p), 0);
        return a.template to_vector<int32>(0);  // exact
    }
    // the kept lanes i..i+15 of row r (KEYED)
    static aie::mask<L> kept(const uint8* __restrict mask, unsigned r, unsigned i) {
        aie::vector<uint8, L> k = aie::load_v<L>(mask + (r / C::RS) * C::MP + i);
        if constexpr (C::MASKED) k = aie::min(k, aie::load_unaligned_v<L>(C::KEEP + (r % C::MQ) * C::N + i));
        return aie::ge(k, uint8(1));
    }

    // e: 16 N int32, k: N int32, s, t, p, half, odd: 16 int32 each (tile memory); mask: KEYED only
    static void rows(const TI* __restrict x, TO* __restrict y, const int32* exp, int32* e, int32* k, int32* s_,
                     int32* t_, int32* p_, int32* half_, int32* odd_, const uint8* __restrict mask) {
        constexpr int RECIP = 46;
        const aie::vector<TI, L> lowest = aie::broadcast<TI, L>(std::numeric_limits<TI>::lowest());
        for (unsigned row0 = 0; row0 < C::ROWS; row0 += L) {
            const unsigned rows = C::ROWS - row0 < L ? C::ROWS - row0 : L;
            // 1. up to 16 rows: maximum, exp entries (kept in e), sum S in [2^15, 2^28) (or 0: no key kept)
            aie::set_saturation(aie::saturation_mode::saturate);
            for (unsigned j = 0; j < L; ++j) {
                std::int64_t s = std::int64_t(1) << 15;  // a lane without a row: any S in range
                if (j < rows) {
                    const unsigned r = row0 + j;
                    const TI* xr = x + j * C::N;
                    int32* er = e + j * C::N;
                    aie::vector<TI, L> mv = lowest;
                    for (unsigned i = 0; i < C::N; i += L) {
                        if constexpr (KEYED)
                            mv = aie::max(mv, aie::select(lowest, aie::load_v<L>(xr + i), kept(mask, r, i)));
                        else
                            mv = aie::max(mv, aie::load_v<L>(xr + i));
                    }
                    const aie::vector<int32, L> m = aie::broadcast<int32, L>(static_cast<int32>(aie::reduce_max(mv)));
                    for (unsigned i = 0; i < C::N; i += L) {
                        aie::vector<int32, L> d = aie::sub(m, widen(xr + i));
                        if constexpr (KEYED) d = aie::select(aie::zeros<int32, L>(), d, kept(mask, r, i));
                        if constexpr (C::IEXP)
                            aie::store_v(k + i, d);
                        else
                            aie::store_v(k + i, aie::min(aie::downshift(d, C::SD), static_cast<int32>(C::TABLE - 1)));
                    }
                    if constexpr (C::IEXP) {
                        for (unsigned i = 0; i < C::N; ++i) er[i] = static_cast<int32>(aieflow_act::iexp(k[i], C::UP, exp));
                    } else {
                        for (unsigned i = 0; i < C::N; ++i) er[i] = exp[k[i]];
                    }
                    aie::vector<int32, L> sv = aie::zeros<int32, L>();
                    for (unsigned i = 0; i < C::N; i += L) {
                        aie::vector<int32, L> ev = aie::load_v<L>(er + i);
                        if constexpr (KEYED) {
                            ev = aie::select(aie::zeros<int32, L>(), ev, kept(mask, r, i));
                            aie::store_v(er + i, ev);
                        }
                        sv = aie::add(sv, ev);
                    }
                    const std::int64_t sum = aie::reduce_add(sv);
                    if (sum > 0) s = sum;  // S = 0 (no key kept): every e is 0, the lane keeps 2^15
                }
                const int c = 30 - ln_detail::bit_length(static_cast<std::uint64_t>(s));
                s_[j] = static_cast<int32>(s);
                t_[j] = static_cast<int32>(s << c);  // [2^29, 2^30)
                p_[j] = int32(1) << c;
            }
            // 2. the 16 reciprocals 2 half + odd = floor((2^46 + S / 2) / S) at once, exact (row_recip.h)
            aieflow_recip::softmax_inv16(s_, t_, p_, half_, odd_);
            // 3. per row e inv in 64-bit lanes: 2 e half + e odd, one SRS
            aie::set_rounding(aie::rounding_mode::positive_inf);
            aie::set_saturation(aie::saturation_mode::saturate);
            for (unsigned j = 0; j < rows; ++j, x += C::N, y += C::N) {
                const int32 half = half_[j];
                const int32 odd = odd_[j];
                const int32* er = e + j * C::N;
                for (unsigned i = 0; i < C::N; i += L) {
                    const aie::vector<int32, L> ev = aie::load_v<L>(er + i);
                    aie::accum<acc64, L> acc = aie::mul<acc64>(ev, half);
                    acc = aie::add(acc, acc);
                    acc = aie::mac(acc, ev, odd);
                    const aie::vector<int32, L> w = aie::min(acc.template to_vector<int32>(RECIP - C::FO),
                                                             static_cast<int32>(C::HI));
                    aie::accum<acc64, L> a;
                    a.from_vector(w, 0);
                    aie::store_v(y + i, a.template to_vector<TO>(0));  // exact: 0 <= w <= HI
                }
            }
        }
    }
};

template <class C>
class Softmax {
    using TI = typename C::TI;
    using TO = typename C::TO;
    static constexpr unsigned L = 16;
    alignas(32) int32 exp_[C::TABLE];
    alignas(32) int32 e_[C::VEC ? L * C::N : C::N];  // VEC: the exp entries of a group of 16 rows
    alignas(32) int32 k_[C::VEC ? C::N : 1];
    // VEC, per group of 16 rows: S, S 2^c in [2^29, 2^30), 2^c, and the reciprocal as half / odd
    alignas(32) int32 s_[L];
    alignas(32) int32 t_[L];
    alignas(32) int32 p_[L];
    alignas(32) int32 half_[L];
    alignas(32) int32 odd_[L];
    alignas(32) TI ti_[C::IN_T ? C::ROWS * C::N : 1];
    alignas(32) TO to_[C::OUT_T ? C::ROWS * C::N : 1];

public:
    explicit Softmax(const std::vector<int32>& t) {
        for (unsigned i = 0; i < C::TABLE; ++i) exp_[i] = i < t.size() ? t[i] : int32(0);
        for (unsigned i = 0; i < (C::VEC ? L * C::N : C::N); ++i) e_[i] = 0;
        for (unsigned i = 0; i < (C::VEC ? C::N : 1u); ++i) k_[i] = 0;
        for (unsigned k = 0; k < L; ++k) s_[k] = t_[k] = p_[k] = half_[k] = odd_[k] = 0;
    }

    void run(adf::input_buffer<TI>& __restrict in, adf::output_buffer<TO>& __restrict out) {
        static_assert(!C::VEC || (C::IP == C::N && C::OP == C::N), "vector rows are whole words: never padded");
        static_assert(!C::VEC || !C::MASKED, "a constant mask alone takes the scalar rows");
        if constexpr (C::IN_T) transpose_block<TI, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const TI* __restrict x = C::IN_T ? ti_ : in.data();
        TO* __restrict y = C::OUT_T ? to_ : out.data();
        if constexpr (C::VEC) {
            SoftmaxVec<C, false>::rows(x, y, exp_, e_, k_, s_, t_, p_, half_, odd_, nullptr);
        } else {
            // rows IP / OP elements apart (padded to whole 32-bit words: the padding is not read, written zero)
            for (unsigned row = 0; row < C::ROWS; ++row, x += C::IP, y += C::OP) {
                const unsigned char* keep = C::MASKED ? C::KEEP + (row % C::MQ) * C::N : nullptr;  // attention mask
                if constexpr (C::IEXP)
                    aieflow_act::softmax_row_e(x, y, C::N, aieflow_act::ExpInt{exp_, C::UP}, C::FO, C::HI, e_, keep);
                else
                    aieflow_act::softmax_row(x, y, C::N, exp_, C::TABLE, C::SD, C::FO, C::HI, e_, keep);
                for (unsigned i = C::N; i < C::OP; ++i) y[i] = TO(0);
            }
        }
        if constexpr (C::OUT_T) transpose_block<TO, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(Softmax::run);
        REGISTER_PARAMETER(exp_);
    }
};

// ---------------------------------------------------------------------------- SoftmaxPadded
// A softmax with a run-time key padding mask (the graph's second input, its own PLIO): a second input
// buffer of one keep byte per key per sample of the part (ROWS / RS samples, [samples][N], 1 = kept).
// Config: Softmax's, RS, the rows of one sample, and MP >= N, the mask's row pitch (rows padded to whole
// 32-bit words: dag/plan.py mask_pitch; the padding is not read).  Row r's keep row is KEEP[(r % MQ) N + j] (the constant
// attention mask, when MASKED) AND mask[(r / RS) MP + j].  VEC: SoftmaxVec's rows with that keep row (KEYED);
// otherwise per row the keep bytes combined element by element, then softmax_row as the constant-mask
// kernel.  A row keeping no key has S = 0 and gives 0 everywhere (activation_fixed.h, SoftmaxVec), as the
// emulation.
template <class C>
class SoftmaxPadded {
    using TI = typename C::TI;
    using TO = typename C::TO;
    static constexpr unsigned L = 16;
    alignas(32) int32 exp_[C::TABLE];
    alignas(32) int32 e_[C::VEC ? L * C::N : C::N];  // VEC: the exp entries of a group of 16 rows
    alignas(32) int32 ki_[C::VEC ? C::N : 1];       // VEC: one row's table indices (or exp arguments)
    alignas(32) unsigned char k_[C::VEC ? 1 : C::N];  // scalar rows: one row's keep bytes
    alignas(32) int32 s_[L];
    alignas(32) int32 t_[L];
    alignas(32) int32 p_[L];
    alignas(32) int32 half_[L];
    alignas(32) int32 odd_[L];
    alignas(32) TI ti_[C::IN_T ? C::ROWS * C::N : 1];
    alignas(32) TO to_[C::OUT_T ? C::ROWS * C::N : 1];

public:
    explicit SoftmaxPadded(const std::vector<int32>& t) {
        for (unsigned i = 0; i < C::TABLE; ++i) exp_[i] = i < t.size() ? t[i] : int32(0);
        for (unsigned i = 0; i < (C::VEC ? L * C::N : C::N); ++i) e_[i] = 0;
        for (unsigned i = 0; i < (C::VEC ? C::N : 1u); ++i) ki_[i] = 0;
        for (unsigned i = 0; i < (C::VEC ? 1u : C::N); ++i) k_[i] = 0;
        for (unsigned k = 0; k < L; ++k) s_[k] = t_[k] = p_[k] = half_[k] = odd_[k] = 0;
    }

    void run(adf::input_buffer<TI>& __restrict in, adf::input_buffer<uint8>& __restrict mask,
             adf::output_buffer<TO>& __restrict out) {
        static_assert(!C::VEC || (C::IP == C::N && C::OP == C::N), "vector rows are whole words: never padded");
        if constexpr (C::IN_T) transpose_block<TI, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const TI* __restrict x = C::IN_T ? ti_ : in.data();
        TO* __restrict y = C::OUT_T ? to_ : out.data();
        const uint8* __restrict m = mask.data();
        if constexpr (C::VEC) {
            SoftmaxVec<C, true>::rows(x, y, exp_, e_, ki_, s_, t_, p_, half_, odd_, m);
        } else {
            // rows IP / OP elements apart (padded to whole 32-bit words: the padding is not read, written zero)
            for (unsigned row = 0; row < C::ROWS; ++row, x += C::IP, y += C::OP) {
                const uint8* mr = m + (row / C::RS) * C::MP;  // this row's sample (rows MP >= N bytes apart)
                for (unsigned j = 0; j < C::N; ++j)
                    k_[j] = static_cast<unsigned char>((mr[j] != 0) &&
                                                       (!C::MASKED || C::KEEP[(row % C::MQ) * C::N + j] != 0));
                if constexpr (C::IEXP)
                    aieflow_act::softmax_row_e(x, y, C::N, aieflow_act::ExpInt{exp_, C::UP}, C::FO, C::HI, e_, k_);
                else
                    aieflow_act::softmax_row(x, y, C::N, exp_, C::TABLE, C::SD, C::FO, C::HI, e_, k_);
                for (unsigned i = C::N; i < C::OP; ++i) y[i] = TO(0);
            }
        }
        if constexpr (C::OUT_T) transpose_block<TO, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(SoftmaxPadded::run);
        REGISTER_PARAMETER(exp_);
    }
};

// ---------------------------------------------------------------------------- MatMul
// Config (generated in layers.h):
//   struct mm_cfg { using TA, TB, TO; static constexpr unsigned S, M, K, N, KP, NP;
//                   static constexpr bool TRANS_A, TRANS_B; static constexpr int SHIFT; RND; SAT; };
// Per part: S samples, each A [M][K] (row-major; stored [K][M] when TRANS_A: a transposed view the memory
// tile moves as its producer wrote it, aieflow dag/plan.py _matmul_transpose) times B [K][N] (or B stored
// [N][K] when TRANS_B: Q K^T reads K as the projection wrote it) into y [M][N].  A's rows lie KP >= K
// elements apart (KP = K when TRANS_A) and y's NP >= N (rows padded to whole 32-bit words, aieflow
// dag/plan.py row_pitches): A's padding is not read, y's is written zero.  Per sample B is first copied into tile memory as
// TE [K][NV] (NV = N rounded up to 16 lanes, zero padded; transposed there when TRANS_B; int8 codes
// widened exactly to int16).  Then per output row and 16 columns: K aie::mac steps of the broadcast
// a_ik by the row k of B into 16 accumulator lanes, in increasing k, and one conversion:
//   integers (TE int16, acc64): exact (|a b| < 2^30, K < 2^33); to_vector<TO>(SHIFT) shift-rounds-
//                               saturates by the rounding / saturation mode registers;
//   bf16 (TO bfloat16; TE bfloat16, accfloat; the bf16 DAG's matmul layers): each lane starts at
//                               +0.0 and adds the exact bf16 x bf16 product with one float32 rounding per
//                               k; to_vector<bfloat16>() rounds to nearest even (ops/matmul.py).
template <class C>
class MatMul {
protected:
    using TA = typename C::TA;
    using TB = typename C::TB;
    using TO = typename C::TO;
    static constexpr bool FLOAT = std::is_same_v<TO, bfloat16>;
    using TE = std::conditional_t<FLOAT, bfloat16, int16>;  // B's element in tile memory
    using ACC = std::conditional_t<FLOAT, accfloat, acc64>;
    static constexpr unsigned L = 16;
    static constexpr unsigned NV = (C::N + L - 1) / L * L;
    alignas(32) TE bt_[C::K * NV];

    // CIN: every output vector's partial sums arrive on the cascade (C::CASC_LANES lanes per cascade
    // word) and the k steps continue them; COUT: the sums leave on the cascade, else one conversion
    // and the stores.
    template <bool CIN, bool COUT>
    void body(const TA* __restrict pa, const TB* __restrict pb, [[maybe_unused]] TO* __restrict po,
              [[maybe_unused]] input_cascade<ACC>* __restrict cin,
              [[maybe_unused]] output_cascade<ACC>* __restrict cout) {
        if constexpr (!FLOAT && !COUT) {
            aie::set_rounding(C::RND);
            aie::set_saturation(C::SAT);
        }
        static_assert(!C::TRANS_A || C::KP == C::K, "a transposed A is read unpadded");
        for (unsigned s = 0; s < C::S; ++s, pa += C::M * C::KP, pb += C::K * C::N) {
            for (unsigned k = 0; k < C::K; ++k)
                for (unsigned n = 0; n < C::N; ++n)
                    bt_[k * NV + n] = static_cast<TE>(C::TRANS_B ? pb[n * C::K + k] : pb[k * C::N + n]);
            for (unsigned m = 0; m < C::M; ++m) {
                for (unsigned j = 0; j < NV; j += L) {
                    aie::accum<ACC, L> acc = aie::zeros<ACC, L>();
                    if constexpr (CIN) {
                        for (unsigned p = 0; p < L / C::CASC_LANES; ++p)
                            acc.insert(p, readincr_v<C::CASC_LANES>(cin));
                    }
                    for (unsigned k = 0; k < C::K; ++k)
                        acc = aie::mac(acc, aie::broadcast<TE, L>(static_cast<TE>(C::TRANS_A ? pa[k * C::M + m]
                                                                                           : pa[m * C::KP + k])),
                                       aie::load_v<L>(bt_ + k * NV + j));
                    if constexpr (COUT) {
                        for (unsigned p = 0; p < L / C::CASC_LANES; ++p)
                            writeincr(cout, acc.template extract<C::CASC_LANES>(p));
                        continue;
                    }
                    aie::vector<TO, L> v;
                    if constexpr (FLOAT)
                        v = acc.template to_vector<bfloat16>();  // round to nearest even
                    else
                        v = aieflow_narrow::narrow<C>(acc.template to_vector<TO>(C::SHIFT));
                    if constexpr (C::N % L == 0 && C::NP == C::N) {
                        aie::store_v(po + j, v);  // rows of whole vectors: aligned stores
                    } else {
                        for (unsigned q = 0; q < L && j + q < C::N; ++q) po[j + q] = v.get(q);
                    }
                }
                if constexpr (!COUT) {
                    for (unsigned q = C::N; q < C::NP; ++q) po[q] = static_cast<TO>(0);  // the row's padding
                    po += C::NP;
                }
            }
        }
    }

public:
    MatMul() {
        for (unsigned i = 0; i < C::K * NV; ++i) bt_[i] = static_cast<TE>(0.0f);
    }

    void run(adf::input_buffer<TA>& __restrict a, adf::input_buffer<TB>& __restrict b,
             adf::output_buffer<TO>& __restrict out) {
        this->template body<false, false>(a.data(), b.data(), out.data(), nullptr, nullptr);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(MatMul::run); }
};

// The cascade over K (aieflow dag/plan.py RowsPlan.cascade, docs/attention.md "Long products"): a part is
// C::CASC tiles along a cascade, tile j holding the K-slice [j K, (j+1) K) of the product (C::K is the
// slice): A's columns of the slice for the part's rows (its rows of a transposed A) and B's rows of the
// slice (its columns when TRANS_B).  The first tile starts each output vector's 16 lanes at zero, every
// other continues the partial sums the cascade brings in increasing k, every tile but the last sends them
// on, and the last converts them once and stores: the integer sums are the one-tile sums, exactly; bf16
// sums cross the cascade as accfloat lanes unrounded (AIE-ML reads 16 accfloat lanes per 512-bit cascade
// word, UG1583 get_scd_v16accfloat) and are continued in the one-tile order, so they are the one-tile sums.
template <class C>
class MatMulFirst : public MatMul<C> {
    using B = MatMul<C>;

public:
    void run(adf::input_buffer<typename B::TA>& __restrict a, adf::input_buffer<typename B::TB>& __restrict b,
             output_cascade<typename B::ACC>* __restrict cout) {
        this->template body<false, true>(a.data(), b.data(), nullptr, nullptr, cout);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(MatMulFirst::run); }
};

template <class C>
class MatMulMiddle : public MatMul<C> {
    using B = MatMul<C>;

public:
    void run(adf::input_buffer<typename B::TA>& __restrict a, adf::input_buffer<typename B::TB>& __restrict b,
             input_cascade<typename B::ACC>* __restrict cin, output_cascade<typename B::ACC>* __restrict cout) {
        this->template body<true, true>(a.data(), b.data(), nullptr, cin, cout);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(MatMulMiddle::run); }
};

template <class C>
class MatMulLast : public MatMul<C> {
    using B = MatMul<C>;

public:
    void run(adf::input_buffer<typename B::TA>& __restrict a, adf::input_buffer<typename B::TB>& __restrict b,
             input_cascade<typename B::ACC>* __restrict cin, adf::output_buffer<typename B::TO>& __restrict out) {
        this->template body<true, false>(a.data(), b.data(), out.data(), cin, nullptr);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(MatMulLast::run); }
};

// ---------------------------------------------------------------------------- MaskedMean
// Config (generated in layers.h):
//   struct mean_cfg { using TI; static constexpr unsigned S, T, N, MP; static constexpr aie::rounding_mode RND; };
// Masked mean pooling over tokens (aieflow ops/masked_mean.py), S samples per part: x [S][T][N] (row-major,
// the input's codes), the run-time key padding mask [S][MP] (one keep byte per token, 1 = kept; rows MP >= T
// bytes apart, the padding not read), y [S][N] in the input's type.  Per sample: k, the number of nonzero
// keep bytes; per feature the exact sum of the kept tokens' codes (16 lanes of an acc32 accumulator, aie::add
// of each kept row in increasing t: |sum| <= T 2^15 < 2^31) and y = round(sum / k), the exact quotient rounded
// once by RND (mean_round_divide); a sample keeping no token gives 0 everywhere, as the emulation.
// bf16 (TI = bfloat16, AIE-ML / AIE-MLv2; RND unused): per feature a float32 sum from +0.0 adding each kept
// token's value in increasing t (accfloat lanes, one float32 rounding per addition), inv = 1.0f / k once per
// sample, y = bf16(sum inv) (nearest, ties to even); a sample keeping no token gives +0.0.
// Features in whole 16-lane vectors (N % 16 == 0) take the vector sums, others a scalar loop.
inline std::int32_t mean_round_divide(std::int32_t num, std::int32_t den, aie::rounding_mode mode) {
    std::int32_t q = num / den;  // 32-bit: |num| <= T 2^15 < 2^31, 0 < den <= T
    std::int32_t r = num - q * den;
    if (r < 0) {  // C++ truncates toward zero: q the floor, r in [0, den)
        q -= 1;
        r += den;
    }
    const bool inexact = r != 0, above = 2 * r > den, tie = 2 * r == den;
    bool up = false;
    switch (mode) {
        case aie::rounding_mode::floor: up = false; break;
        case aie::rounding_mode::ceil: up = inexact; break;
        case aie::rounding_mode::symmetric_floor: up = inexact && q < 0; break;
        case aie::rounding_mode::symmetric_ceil: up = inexact && q >= 0; break;
        case aie::rounding_mode::positive_inf: up = above || tie; break;
        case aie::rounding_mode::negative_inf: up = above; break;
        case aie::rounding_mode::symmetric_inf: up = above || (tie && q >= 0); break;
        case aie::rounding_mode::symmetric_zero: up = above || (tie && q < 0); break;
        case aie::rounding_mode::conv_even: up = above || (tie && (q & 1) != 0); break;
        default: up = above || (tie && (q & 1) == 0); break;  // conv_odd
    }
    return q + (up ? 1 : 0);
}

template <class C>
class MaskedMean {
    using TI = typename C::TI;
    static constexpr unsigned L = 16;
    static constexpr bool VEC = C::N % L == 0;  // rows of whole 16-lane vectors (16-element aligned loads)
    static constexpr bool BF16 = std::is_same_v<TI, bfloat16>;
    static_assert(C::T < 65536, "the sums stay in 32 bits: T 2^15 < 2^31");

public:
    void run(adf::input_buffer<TI>& __restrict in, adf::input_buffer<uint8>& __restrict mask,
             adf::output_buffer<TI>& __restrict out) {
        const TI* __restrict x = in.data();
        const uint8* __restrict m = mask.data();
        TI* __restrict y = out.data();
        for (unsigned s = 0; s < C::S; ++s, x += C::T * C::N, m += C::MP, y += C::N) {
            std::int32_t k = 0;
            for (unsigned t = 0; t < C::T; ++t) k += m[t] != 0 ? 1 : 0;
            if (k == 0) {
                for (unsigned j = 0; j < C::N; ++j) y[j] = TI(0);
                continue;
            }
            if constexpr (BF16) {  // float32 sums (accfloat lanes), one reciprocal of the count, one rounding to bf16
                const float inv = 1.0f / static_cast<float>(k);
                if constexpr (VEC) {
                    for (unsigned j = 0; j < C::N; j += L) {
                        aie::accum<accfloat, L> acc = aie::zeros<accfloat, L>();
                        for (unsigned t = 0; t < C::T; ++t)
                            if (m[t] != 0) acc = aie::add(acc, aie::load_v<L>(x + t * C::N + j));
                        const aie::vector<float, L> sum = acc.template to_vector<float>();
                        for (unsigned q = 0; q < L; ++q) y[j + q] = static_cast<TI>(sum.get(q) * inv);
                    }
                } else {
                    for (unsigned j = 0; j < C::N; ++j) {
                        float sum = 0.0f;
                        for (unsigned t = 0; t < C::T; ++t)
                            if (m[t] != 0) sum = sum + static_cast<float>(x[t * C::N + j]);
                        y[j] = static_cast<TI>(sum * inv);
                    }
                }
            } else if constexpr (VEC) {
                for (unsigned j = 0; j < C::N; j += L) {
                    aie::accum<acc32, L> acc = aie::zeros<acc32, L>();
                    for (unsigned t = 0; t < C::T; ++t)
                        if (m[t] != 0) acc = aie::add(acc, aie::load_v<L>(x + t * C::N + j));
                    const aie::vector<int32, L> sum = acc.template to_vector<int32>(0);
                    for (unsigned q = 0; q < L; ++q)
                        y[j + q] = static_cast<TI>(mean_round_divide(sum.get(q), k, C::RND));
                }
            } else {
                for (unsigned j = 0; j < C::N; ++j) {
                    std::int32_t sum = 0;
                    for (unsigned t = 0; t < C::T; ++t)
                        if (m[t] != 0) sum += x[t * C::N + j];
                    y[j] = static_cast<TI>(mean_round_divide(sum, k, C::RND));
                }
            }
        }
    }
    static void registerKernelClass() { REGISTER_FUNCTION(MaskedMean::run); }
};

}  // namespace aieflow
