// aieflow DAG kernels in bf16 (AIE-ML / AIE-MLv2): residual Add, scale and shift, LayerNorm, activations and softmax,
// written against the public AIE API (UG1529) and the ADF kernel-class interface (UG1603).
//
// Each computes exactly what aieflow's emulator computes (ops/add.py, ops/layernorm.py
// layernorm_bf16, ops/activation.py apply_bf16_table / softmax_bf16), bit for bit:
//
//   ResidualAddBf16: y = bf16(float32(a) + float32(b)), then max(y, 0) with a fused ReLU: bf16
//                    operands into an accfloat accumulator, one float add, to_vector<bfloat16>.
//   ConstAddBf16:    the same step with b a constant's bf16 values (a positional embedding, ops/add_const.py).
//   ScaleShiftBf16:  y = bf16(float32(float32(x) s) + t) per feature (a standalone BatchNorm, ops/scale_shift.py):
//                    aie::mul of the bf16 x and s into accfloat lanes, one float add of t, to_vector<bfloat16>.
//   LayerNormBf16:   per row, one float32 operation per step in a fixed order (sums in increasing i).
//   ActivationBf16:  a table of bf16 results over a window of exponents, a rule outside it.
//   SoftmaxBf16:     max, d = bf16(x - max), exp(d) by the activation scheme, sequential float sum,
//                    one reciprocal, y = bf16(e inv).
//   SoftmaxPaddedBf16: the same with a run-time key padding mask (a second uint8 buffer, one keep byte per key
//                    per sample): max over the kept x, a dropped key's e = +0.0, a row keeping none +0.0.
//   MatMul (bf16):   dag_kernels.h's MatMul on bfloat16 (ops/matmul.py): per output, +0.0 plus each exact
//                    bf16 product in increasing k, one float32 rounding per addition (accfloat lanes),
//                    then one rounding to bf16.
// Float -> bf16 conversions round to nearest, ties to even (docs/numerics.md "bf16").
#pragma once

#include <adf.h>
#include <aie_api/aie.hpp>
#include <aie_api/aie_adf.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dag_kernels.h"

namespace aieflow {

namespace bf16_detail {
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

// The activation scheme of ops/activation.py: NaN passes; +-0 their own result; exponents
// E_LO..E_HI read the table T[sign][e - E_LO][mantissa]; below / above the window a rule
// y = C0 (C1 == 0) or bf16((C1 x) + C0) per side and sign.
template <class C>
inline bfloat16 lookup(const std::uint16_t* table, bfloat16 x) {
    constexpr unsigned NE = C::E_HI - C::E_LO + 1;
    const std::uint16_t u = bits(x);
    const unsigned e = (u >> 7) & 0xFFu, s = u >> 15, m = u & 0x7Fu;
    if (e == 0xFFu && m != 0) return x;  // NaN
    unsigned r;
    if ((u & 0x7FFFu) == 0) {
        r = 5 - s;  // +-0
    } else if (e < C::E_LO) {
        r = 1 - s;
    } else if (e > C::E_HI) {
        r = 3 - s;
    } else {
        return from_bits(table[(s * NE + (e - C::E_LO)) * 128u + m]);
    }
    if (C::C1[r] == 0.0f) return bfloat16(C::C0[r]);
    const float p = C::C1[r] * static_cast<float>(x);
    return bfloat16(p + C::C0[r]);
}
}  // namespace bf16_detail

// ---------------------------------------------------------------------------- residual Add
// Config: struct { static constexpr unsigned SIZE; static constexpr bool RELU; per port P in A, B, OUT:
//                  bool P_T, unsigned P_S, P_A, P_B; };
template <class C>
class ResidualAddBf16 {
    static constexpr unsigned L = 16;  // 16 accfloat lanes
    static constexpr unsigned FULL = C::SIZE / L * L;
    alignas(32) bfloat16 ta_[C::A_T ? C::SIZE : 1];
    alignas(32) bfloat16 tb_[C::B_T ? C::SIZE : 1];
    alignas(32) bfloat16 to_[C::OUT_T ? C::SIZE : 1];

    static aie::vector<bfloat16, L> step(const aie::vector<bfloat16, L>& va, const aie::vector<bfloat16, L>& vb) {
        aie::accum<accfloat, L> acc;
        acc.from_vector(va);       // exact: bf16 -> float
        acc = aie::add(acc, vb);   // one float32 add per lane
        const aie::vector<bfloat16, L> v = acc.template to_vector<bfloat16>();  // round to bf16
        if constexpr (C::RELU) return aie::max(v, aie::zeros<bfloat16, L>());
        return v;
    }

public:
    void run(adf::input_buffer<bfloat16>& __restrict a, adf::input_buffer<bfloat16>& __restrict b,
             adf::output_buffer<bfloat16>& __restrict out) {
        if constexpr (C::A_T) transpose_block<bfloat16, C::A_S, C::A_A, C::A_B>(a.data(), ta_);
        if constexpr (C::B_T) transpose_block<bfloat16, C::B_S, C::B_A, C::B_B>(b.data(), tb_);
        const bfloat16* __restrict pa = C::A_T ? ta_ : a.data();
        const bfloat16* __restrict pb = C::B_T ? tb_ : b.data();
        bfloat16* __restrict po = C::OUT_T ? to_ : out.data();
        for (unsigned i = 0; i < FULL; i += L)
            aie::store_v(po + i, step(aie::load_v<L>(pa + i), aie::load_v<L>(pb + i)));
        if constexpr (C::SIZE % L != 0) {
            aie::vector<bfloat16, L> va = aie::zeros<bfloat16, L>();
            aie::vector<bfloat16, L> vb = aie::zeros<bfloat16, L>();
            for (unsigned j = 0; j < C::SIZE - FULL; ++j) {
                va.set(pa[FULL + j], j);
                vb.set(pb[FULL + j], j);
            }
            const aie::vector<bfloat16, L> vo = step(va, vb);
            for (unsigned j = 0; j < C::SIZE - FULL; ++j) po[FULL + j] = vo.get(j);
        }
        if constexpr (C::OUT_T) transpose_block<bfloat16, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() { REGISTER_FUNCTION(ResidualAddBf16::run); }
};

// ---------------------------------------------------------------------------- constant add
// Config: struct { static constexpr unsigned ROWS, N, MQ; ports IN, OUT: bool P_T, unsigned P_S, P_A, P_B; };
// y = bf16(float32(x) + float32(c)) (ops/add_const.py): ResidualAddBf16's step with operand B the constant's
// bf16 values (a kernel parameter of MQ rows x N), row r of the part reading row r % MQ (whole samples per part).
template <class C>
class ConstAddBf16 {
    static constexpr unsigned L = 16;  // 16 accfloat lanes
    static constexpr unsigned FULL = C::N / L * L;
    alignas(32) bfloat16 c_[C::MQ * C::N];
    alignas(32) bfloat16 ti_[C::IN_T ? C::ROWS * C::N : 1];
    alignas(32) bfloat16 to_[C::OUT_T ? C::ROWS * C::N : 1];

    static aie::vector<bfloat16, L> step(const aie::vector<bfloat16, L>& va, const aie::vector<bfloat16, L>& vb) {
        aie::accum<accfloat, L> acc;
        acc.from_vector(va);                                // exact: bf16 -> float
        acc = aie::add(acc, vb);                            // one float32 add per lane
        return acc.template to_vector<bfloat16>();          // round to bf16 (nearest even)
    }

public:
    explicit ConstAddBf16(const std::vector<bfloat16>& c) {
        for (unsigned i = 0; i < C::MQ * C::N; ++i) c_[i] = i < c.size() ? c[i] : bfloat16(0.0f);
    }

    void run(adf::input_buffer<bfloat16>& __restrict in, adf::output_buffer<bfloat16>& __restrict out) {
        if constexpr (C::IN_T) transpose_block<bfloat16, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const bfloat16* __restrict x = C::IN_T ? ti_ : in.data();
        bfloat16* __restrict y = C::OUT_T ? to_ : out.data();
        for (unsigned r = 0; r < C::ROWS; ++r, x += C::N, y += C::N) {
            const bfloat16* __restrict c = c_ + (r % C::MQ) * C::N;
            for (unsigned i = 0; i < FULL; i += L) aie::store_v(y + i, step(aie::load_v<L>(x + i), aie::load_v<L>(c + i)));
            if constexpr (C::N % L != 0) {  // the row's last, partial vector
                aie::vector<bfloat16, L> va = aie::zeros<bfloat16, L>();
                aie::vector<bfloat16, L> vb = aie::zeros<bfloat16, L>();
                for (unsigned j = 0; j < C::N - FULL; ++j) {
                    va.set(x[FULL + j], j);
                    vb.set(c[FULL + j], j);
                }
                const aie::vector<bfloat16, L> vo = step(va, vb);
                for (unsigned j = 0; j < C::N - FULL; ++j) y[FULL + j] = vo.get(j);
            }
        }
        if constexpr (C::OUT_T) transpose_block<bfloat16, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(ConstAddBf16::run);
        REGISTER_PARAMETER(c_);
    }
};

// ---------------------------------------------------------------------------- ScaleShift
// Config: struct { static constexpr unsigned ROWS, N; ports IN, OUT: bool P_T, unsigned P_S, P_A, P_B; };
// y = bf16(float32(float32(x) s) + t) per feature (ops/scale_shift.py): the product of two bf16 values is exact
// in binary32 (8 + 8 significand bits; the shim and the emulation round it once, which changes nothing unless it
// underflows binary32's normal range), one float32 add of the shift t, one rounding to bf16 (nearest even).  A
// separate aie::mul and aie::add, not a fused aie::mac: UG1529 does not document how aie::mac rounds on accfloat,
// and the two forms agree wherever the product is exact.  s and t are kernel parameters of N bf16 values (padded
// to whole vectors with zeros).
template <class C>
class ScaleShiftBf16 {
    static constexpr unsigned L = 16;  // 16 accfloat lanes
    static constexpr unsigned FULL = C::N / L * L;
    static constexpr unsigned NV = (C::N + L - 1) / L * L;
    alignas(32) bfloat16 s_[NV];
    alignas(32) bfloat16 t_[NV];
    alignas(32) bfloat16 ti_[C::IN_T ? C::ROWS * C::N : 1];
    alignas(32) bfloat16 to_[C::OUT_T ? C::ROWS * C::N : 1];

    static aie::vector<bfloat16, L> step(const aie::vector<bfloat16, L>& vx, const aie::vector<bfloat16, L>& vs,
                                         const aie::vector<bfloat16, L>& vt) {
        aie::accum<accfloat, L> acc = aie::mul<accfloat>(vx, vs);  // exact bf16 x bf16 products in float32
        acc = aie::add(acc, vt);                                    // one float32 add per lane
        return acc.template to_vector<bfloat16>();                  // round to bf16 (nearest even)
    }

public:
    ScaleShiftBf16(const std::vector<bfloat16>& s, const std::vector<bfloat16>& t) {
        for (unsigned i = 0; i < NV; ++i) {
            s_[i] = i < s.size() ? s[i] : bfloat16(0.0f);
            t_[i] = i < t.size() ? t[i] : bfloat16(0.0f);
        }
    }

    void run(adf::input_buffer<bfloat16>& __restrict in, adf::output_buffer<bfloat16>& __restrict out) {
        if constexpr (C::IN_T) transpose_block<bfloat16, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const bfloat16* __restrict x = C::IN_T ? ti_ : in.data();
        bfloat16* __restrict y = C::OUT_T ? to_ : out.data();
        for (unsigned r = 0; r < C::ROWS; ++r, x += C::N, y += C::N) {
            for (unsigned i = 0; i < FULL; i += L)
                aie::store_v(y + i, step(aie::load_v<L>(x + i), aie::load_v<L>(s_ + i), aie::load_v<L>(t_ + i)));
            if constexpr (C::N % L != 0) {  // the row's last, partial vector
                aie::vector<bfloat16, L> vx = aie::zeros<bfloat16, L>();
                for (unsigned j = 0; j < C::N - FULL; ++j) vx.set(x[FULL + j], j);
                const aie::vector<bfloat16, L> vo =
                    step(vx, aie::load_v<L>(s_ + FULL), aie::load_v<L>(t_ + FULL));
                for (unsigned j = 0; j < C::N - FULL; ++j) y[FULL + j] = vo.get(j);
            }
        }
        if constexpr (C::OUT_T) transpose_block<bfloat16, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(ScaleShiftBf16::run);
        REGISTER_PARAMETER(s_);
        REGISTER_PARAMETER(t_);
    }
};

// ---------------------------------------------------------------------------- LayerNorm
// Config: struct { static constexpr unsigned ROWS, N; static constexpr float EPS; ports IN, OUT; };
template <class C>
class LayerNormBf16 {
    alignas(32) bfloat16 gamma_[C::N];
    alignas(32) bfloat16 beta_[C::N];
    alignas(32) float c_[C::N];  // x - mean of the current row
    alignas(32) bfloat16 ti_[C::IN_T ? C::ROWS * C::N : 1];
    alignas(32) bfloat16 to_[C::OUT_T ? C::ROWS * C::N : 1];

public:
    LayerNormBf16(const std::vector<bfloat16>& g, const std::vector<bfloat16>& b) {
        for (unsigned i = 0; i < C::N; ++i) {
            gamma_[i] = i < g.size() ? g[i] : bfloat16(0.0f);
            beta_[i] = i < b.size() ? b[i] : bfloat16(0.0f);
            c_[i] = 0.0f;
        }
    }

    void run(adf::input_buffer<bfloat16>& __restrict in, adf::output_buffer<bfloat16>& __restrict out) {
        if constexpr (C::IN_T) transpose_block<bfloat16, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const bfloat16* __restrict x = C::IN_T ? ti_ : in.data();
        bfloat16* __restrict y = C::OUT_T ? to_ : out.data();
        const float n = static_cast<float>(C::N);
        for (unsigned row = 0; row < C::ROWS; ++row, x += C::N, y += C::N) {
            float s = 0.0f;
            for (unsigned i = 0; i < C::N; ++i) s = s + static_cast<float>(x[i]);
            const float mu = s / n;
            float v = 0.0f;
            for (unsigned i = 0; i < C::N; ++i) {
                c_[i] = static_cast<float>(x[i]) - mu;
                const float sq = c_[i] * c_[i];
                v = v + sq;
            }
            const float var = v / n;
            const float r = 1.0f / std::sqrt(var + C::EPS);
            for (unsigned i = 0; i < C::N; ++i) {
                const float z = c_[i] * r;
                const float zg = z * static_cast<float>(gamma_[i]);
                y[i] = bfloat16(zg + static_cast<float>(beta_[i]));
            }
        }
        if constexpr (C::OUT_T) transpose_block<bfloat16, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(LayerNormBf16::run);
        REGISTER_PARAMETER(gamma_);
        REGISTER_PARAMETER(beta_);
    }
};

// ---------------------------------------------------------------------------- Activation
// Config: struct { static constexpr unsigned SIZE, TABLE, E_LO, E_HI; static constexpr float C1[6], C0[6];
//                  ports IN, OUT; };  a scalar loop (the table read is data dependent).
template <class C>
class ActivationBf16 {
    alignas(32) std::uint16_t table_[C::TABLE];
    alignas(32) bfloat16 ti_[C::IN_T ? C::SIZE : 1];
    alignas(32) bfloat16 to_[C::OUT_T ? C::SIZE : 1];

public:
    explicit ActivationBf16(const std::vector<std::uint16_t>& t) {
        for (unsigned i = 0; i < C::TABLE; ++i) table_[i] = i < t.size() ? t[i] : std::uint16_t(0);
    }

    void run(adf::input_buffer<bfloat16>& __restrict in, adf::output_buffer<bfloat16>& __restrict out) {
        if constexpr (C::IN_T) transpose_block<bfloat16, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const bfloat16* __restrict x = C::IN_T ? ti_ : in.data();
        bfloat16* __restrict y = C::OUT_T ? to_ : out.data();
        for (unsigned i = 0; i < C::SIZE; ++i) y[i] = bf16_detail::lookup<C>(table_, x[i]);
        if constexpr (C::OUT_T) transpose_block<bfloat16, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(ActivationBf16::run);
        REGISTER_PARAMETER(table_);
    }
};

// ---------------------------------------------------------------------------- Softmax
// Config: struct { static constexpr unsigned ROWS, N, IP, OP, TABLE, E_LO, E_HI; static constexpr float C1[6], C0[6];
//                  ports IN, OUT; };  the table and rules are exp's on d <= 0.  Rows lie IP / OP >= N elements
// apart in / out (padded to whole 32-bit words): the padding is not read, written +0.0.
template <class C>
class SoftmaxBf16 {
    alignas(32) std::uint16_t table_[C::TABLE];
    alignas(32) bfloat16 e_[C::N];
    alignas(32) bfloat16 ti_[C::IN_T ? C::ROWS * C::N : 1];
    alignas(32) bfloat16 to_[C::OUT_T ? C::ROWS * C::N : 1];

public:
    explicit SoftmaxBf16(const std::vector<std::uint16_t>& t) {
        for (unsigned i = 0; i < C::TABLE; ++i) table_[i] = i < t.size() ? t[i] : std::uint16_t(0);
        for (unsigned i = 0; i < C::N; ++i) e_[i] = bfloat16(0.0f);
    }

    void run(adf::input_buffer<bfloat16>& __restrict in, adf::output_buffer<bfloat16>& __restrict out) {
        if constexpr (C::IN_T) transpose_block<bfloat16, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const bfloat16* __restrict x = C::IN_T ? ti_ : in.data();
        bfloat16* __restrict y = C::OUT_T ? to_ : out.data();
        for (unsigned row = 0; row < C::ROWS; ++row, x += C::IP, y += C::OP) {
            for (unsigned i = C::N; i < C::OP; ++i) y[i] = bfloat16(0.0f);
            float m = static_cast<float>(x[0]);
            for (unsigned i = 1; i < C::N; ++i) m = std::fmax(m, static_cast<float>(x[i]));
            float s = 0.0f;
            for (unsigned i = 0; i < C::N; ++i) {
                e_[i] = bf16_detail::lookup<C>(table_, bfloat16(static_cast<float>(x[i]) - m));
                s = s + static_cast<float>(e_[i]);
            }
            const float inv = 1.0f / s;
            for (unsigned i = 0; i < C::N; ++i) y[i] = bfloat16(static_cast<float>(e_[i]) * inv);
        }
        if constexpr (C::OUT_T) transpose_block<bfloat16, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(SoftmaxBf16::run);
        REGISTER_PARAMETER(table_);
    }
};

// ---------------------------------------------------------------------------- SoftmaxPadded
// SoftmaxBf16 with a run-time key padding mask (the graph's second input, its own PLIO): a second input buffer
// of one keep byte per key per sample of the part (ROWS / RS samples, [samples][N], nonzero = kept).  Config:
// SoftmaxBf16's, RS, the rows of one sample, and MP, the mask's row pitch (dag_kernels.h SoftmaxPadded).  Per row: m the maximum over the kept x (in increasing i), a
// dropped key's e = +0.0 (the float sum in increasing i: adding +0.0 changes nothing), y = bf16(e inv); a row
// keeping no key gives +0.0 everywhere (ops/activation.py softmax_bf16 with keep).
template <class C>
class SoftmaxPaddedBf16 {
    alignas(32) std::uint16_t table_[C::TABLE];
    alignas(32) bfloat16 e_[C::N];
    alignas(32) bfloat16 ti_[C::IN_T ? C::ROWS * C::N : 1];
    alignas(32) bfloat16 to_[C::OUT_T ? C::ROWS * C::N : 1];

public:
    explicit SoftmaxPaddedBf16(const std::vector<std::uint16_t>& t) {
        for (unsigned i = 0; i < C::TABLE; ++i) table_[i] = i < t.size() ? t[i] : std::uint16_t(0);
        for (unsigned i = 0; i < C::N; ++i) e_[i] = bfloat16(0.0f);
    }

    void run(adf::input_buffer<bfloat16>& __restrict in, adf::input_buffer<uint8>& __restrict mask,
             adf::output_buffer<bfloat16>& __restrict out) {
        if constexpr (C::IN_T) transpose_block<bfloat16, C::IN_S, C::IN_A, C::IN_B>(in.data(), ti_);
        const bfloat16* __restrict x = C::IN_T ? ti_ : in.data();
        bfloat16* __restrict y = C::OUT_T ? to_ : out.data();
        const uint8* __restrict m = mask.data();
        for (unsigned row = 0; row < C::ROWS; ++row, x += C::IP, y += C::OP) {
            const uint8* mr = m + (row / C::RS) * C::MP;  // this row's sample (rows MP >= N bytes apart)
            for (unsigned i = C::N; i < C::OP; ++i) y[i] = bfloat16(0.0f);
            bool any = false;
            float mx = 0.0f;
            for (unsigned i = 0; i < C::N; ++i)
                if (mr[i] != 0) {
                    mx = any ? std::fmax(mx, static_cast<float>(x[i])) : static_cast<float>(x[i]);
                    any = true;
                }
            if (!any) {  // no key kept
                for (unsigned i = 0; i < C::N; ++i) y[i] = bfloat16(0.0f);
                continue;
            }
            float s = 0.0f;
            for (unsigned i = 0; i < C::N; ++i) {
                e_[i] = mr[i] != 0 ? bf16_detail::lookup<C>(table_, bfloat16(static_cast<float>(x[i]) - mx))
                                   : bfloat16(0.0f);
                s = s + static_cast<float>(e_[i]);
            }
            const float inv = 1.0f / s;
            for (unsigned i = 0; i < C::N; ++i) y[i] = bfloat16(static_cast<float>(e_[i]) * inv);
        }
        if constexpr (C::OUT_T) transpose_block<bfloat16, C::OUT_S, C::OUT_A, C::OUT_B>(to_, out.data());
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(SoftmaxPaddedBf16::run);
        REGISTER_PARAMETER(table_);
    }
};

// ---------------------------------------------------------------------------- MatMul
// No class here: dag_kernels.h's MatMul is the bf16 kernel too (bfloat16 elements, accfloat lanes and
// one rounding to bf16 when its config's TO is bfloat16), and so are its cascade roles over a long K
// (MatMulFirst / MatMulMiddle / MatMulLast: the accfloat partial sums on the cascade).

}  // namespace aieflow
