// aieflow Dense kernel: y = act(x W + b) on one AI Engine tile, written against the public AIE API
// (UG1529) and ADF kernel-class interface (UG1079 / UG1603).
//
// One layer is a CAS_NUM x CAS_LEN rectangle of tiles; each tile runs one of the four classes below
// depending on its place in the cascade row.  Every tile holds a KS x NS weight block resident in
// its data memory (registered as a parameter), computes BATCH x NS partial sums with aie::mmul in
// 2 x 2 blocks (two A blocks x two W blocks -> four accumulators per iteration), and either passes
// the accumulators down the cascade or applies SRS (+ ReLU) and stores (then, when the layer has a
// fused activation / softmax, applies it: DensePost).
//
// Layouts (all row-major inside a block):
//   input : panels [KS/K][BATCH][K]  - each M x K block of A is contiguous
//   weight: blocks [KS/K][NS/N][K*N] - each K x N block of W is contiguous
//   bias  : blocks [NS/N][M*N]       - the bias row repeated M times (loads straight into an accumulator)
//   output: panels [NS/OUT_P][BATCH][OUT_P]
#pragma once

#include <adf.h>
#include <aie_api/aie.hpp>
#include <aie_api/aie_adf.hpp>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "activation_fixed.h"
#include "cnn_float_post.h"
#include "narrow.h"
#include "requant.h"

namespace aieflow {

// Compile-time description of one layer; generated per layer in layers.h.
//   struct fc1_cfg {
//     using TA = int8; using TW = int8; using TB = int32; using TO = int8; using ACC = acc32;
//     (int4 weights add: using TWS = int8; static constexpr unsigned W_PACK = 2;  see WeightOf)
//     static constexpr unsigned M, K, N, BATCH, KS, NS, OUT_P, CASC_LANES;
//     static constexpr int SHIFT, BIAS_SHIFT; static constexpr bool RELU, HAS_BIAS;
//     static constexpr aie::rounding_mode RND; static constexpr aie::saturation_mode SAT;
//   };

// Requantisation of a layer with float scales and zero points (aieflow numerics/requant.py): a
// config with RQ = true stores through requant() below with per-channel int32 multipliers (laid out
// like the bias: one M x N block per n-block) and its output zero point RQ_ZP; one without has none.
template <class C, class = void>
struct RqOf {
    static constexpr bool RQ = false;
    static constexpr int ZP = 0;
};
template <class C>
struct RqOf<C, std::void_t<decltype(C::RQ)>> {
    static constexpr bool RQ = C::RQ;
    static constexpr int ZP = C::RQ_ZP;
};

// Weight storage.  A config with W_PACK (int4 weights on AIE-ML / AIE-MLv2) keeps W_PACK codes per
// TWS element (two int4 per int8 byte, element 2i in the low nibble of byte i) and loads a K x N
// block as K*N/W_PACK bytes reinterpreted as a vector of TW (aie::vector::cast_to, UG1529); one
// without stores TW itself.
template <class C, class = void>
struct WeightOf {
    using T = typename C::TW;
    static constexpr unsigned PACK = 1;
};
template <class C>
struct WeightOf<C, std::void_t<decltype(C::W_PACK)>> {
    using T = typename C::TWS;
    static constexpr unsigned PACK = C::W_PACK;
};

template <class C>
struct DenseCore {
    using TA = typename C::TA;
    using TW = typename C::TW;
    using TWS = typename WeightOf<C>::T;
    static constexpr unsigned W_PACK = WeightOf<C>::PACK;
    using TB = typename C::TB;
    using TO = typename C::TO;
    using ACC = typename C::ACC;
    static constexpr unsigned M = C::M, K = C::K, N = C::N;
    static constexpr unsigned KN_S = K * N / W_PACK;  // storage elements of one K x N weight block
    static constexpr unsigned MN = M * N;
    static constexpr unsigned RB = C::BATCH / M;  // row blocks (BATCH is padded to 2M)
    static constexpr unsigned KB = C::KS / K;     // k blocks
    static constexpr unsigned NB = C::NS / N;     // column blocks (NS is padded to 2N)
    static constexpr unsigned BIAS_SIZE = C::HAS_BIAS ? NB * MN : 1;
    static_assert(RB % 2 == 0 && NB % 2 == 0, "2x2 blocking needs even block counts");
    static_assert(MN % C::CASC_LANES == 0, "cascade transfers whole accumulator chunks");

    using MMUL = aie::mmul<M, K, N, TA, TW, ACC>;
    using ACCV = aie::accum<ACC, MN>;

    static constexpr bool is_float = std::is_floating_point_v<TO> || !std::is_integral_v<TO>;

    // One K x N weight block as the mmul's B operand.
    static aie::vector<TW, K * N> load_w(const TWS* __restrict p) {
        if constexpr (W_PACK == 1) {
            return aie::load_v<K * N>(p);
        } else {
            return aie::load_v<KN_S>(p).template cast_to<TW>();
        }
    }

    static ACCV init_acc(const TB* __restrict bias, unsigned j) {
        if constexpr (C::HAS_BIAS) {
            ACCV acc;
            acc.from_vector(aie::load_v<MN>(bias + j * MN), C::BIAS_SHIFT);
            return acc;
        } else {
            return aie::zeros<ACC, MN>();
        }
    }

    static ACCV read_cascade(input_cascade<ACC>* __restrict cin) {
        ACCV acc;
        for (unsigned p = 0; p < MN / C::CASC_LANES; ++p)
            acc.insert(p, readincr_v<C::CASC_LANES>(cin));
        return acc;
    }

    static void write_cascade(output_cascade<ACC>* __restrict cout, const ACCV& acc) {
        for (unsigned p = 0; p < MN / C::CASC_LANES; ++p)
            writeincr(cout, acc.template extract<C::CASC_LANES>(p));
    }

    // q = saturate(round_half_even(acc * m / 2^SHIFT) + RQ_ZP): requant.h (shared with cnn_kernels.h).
    static aie::vector<TO, MN> requant(const ACCV& acc, const TB* __restrict mult) {
        return aieflow_rq::requant<TO, C::SHIFT, RqOf<C>::ZP, MN>(acc, mult);
    }

    static void store(TO* __restrict out, const MMUL& c, unsigned zb, unsigned jb, const TB* __restrict rq) {
        aie::vector<TO, MN> v;
        if constexpr (is_float) {
            v = c.template to_vector<TO>();
        } else if constexpr (RqOf<C>::RQ) {
            v = requant(c.to_accum(), rq + jb * MN);
        } else {
            v = c.template to_vector<TO>(C::SHIFT);
        }
        v = aieflow_narrow::narrow<C>(v);  // an output type narrower than TO (narrow.h)
        if constexpr (C::RELU && RqOf<C>::RQ) {
            v = aie::max(v, aie::broadcast<TO, MN>(TO(RqOf<C>::ZP)));  // real 0 is the zero point's code
        } else if constexpr (C::RELU) {
            v = aie::max(v, aie::zeros<TO, MN>());
        }
        if constexpr (C::OUT_P == N) {
            // The M x N block is contiguous in a panel of width N.
            aie::store_v(out + (jb * C::BATCH + zb * M) * N, v);
        } else {
            for (unsigned i = 0; i < M; ++i)
                for (unsigned l = 0; l < N; ++l) {
                    const unsigned b = zb * M + i, n = jb * N + l;
                    out[((n / C::OUT_P) * C::BATCH + b) * C::OUT_P + n % C::OUT_P] = v[i * N + l];
                }
        }
    }

    // CIN: partial sums arrive on the cascade; COUT: they leave on it (else SRS and store).
    template <bool CIN, bool COUT>
    static void compute(const TA* __restrict a, const TWS* __restrict w, const TB* __restrict bias,
                        TO* __restrict out, input_cascade<ACC>* __restrict cin,
                        output_cascade<ACC>* __restrict cout, const TB* __restrict rq = nullptr) {
        if constexpr (!is_float) {
            aie::set_rounding(C::RND);
            aie::set_saturation(C::SAT);
        }
        for (unsigned z = 0; z < RB; z += 2) {
            for (unsigned j = 0; j < NB; j += 2) {
                ACCV i00, i01, i10, i11;
                if constexpr (CIN) {
                    i00 = read_cascade(cin);
                    i01 = read_cascade(cin);
                    i10 = read_cascade(cin);
                    i11 = read_cascade(cin);
                } else {
                    i00 = init_acc(bias, j);
                    i01 = init_acc(bias, j + 1);
                    i10 = i00;
                    i11 = i01;
                }
                MMUL c00(i00), c01(i01), c10(i10), c11(i11);
                const TA* __restrict pa0 = a + z * M * K;
                const TA* __restrict pa1 = pa0 + M * K;
                const TWS* __restrict pw = w + j * KN_S;
                for (unsigned kb = 0; kb < KB; ++kb) {
                    const auto a0 = aie::load_v<M * K>(pa0);
                    const auto a1 = aie::load_v<M * K>(pa1);
                    const auto b0 = load_w(pw);
                    const auto b1 = load_w(pw + KN_S);
                    c00.mac(a0, b0);
                    c01.mac(a0, b1);
                    c10.mac(a1, b0);
                    c11.mac(a1, b1);
                    pa0 += C::BATCH * K;
                    pa1 += C::BATCH * K;
                    pw += NB * KN_S;
                }
                if constexpr (COUT) {
                    write_cascade(cout, c00.to_accum());
                    write_cascade(cout, c01.to_accum());
                    write_cascade(cout, c10.to_accum());
                    write_cascade(cout, c11.to_accum());
                } else {
                    store(out, c00, z, j, rq);
                    store(out, c01, z, j + 1, rq);
                    store(out, c10, z + 1, j, rq);
                    store(out, c11, z + 1, j + 1, rq);
                }
            }
        }
    }
};

// A fused activation / softmax (aieflow ops/post.py) in the tiles that store the output: the SRS
// codes go to a scratch buffer, then activation_fixed.h's table / interpolation (POST == 1) or
// integer softmax over each batch row's POST_N real outputs (POST == 2; the layer has one cascade
// row, so the tile holds them all) writes the output buffer, in the same panel layout, for the
// POST_ROWS real batch rows.  A config without POST has none (PostOf's defaults), and its output
// type is TO.  POST_FLOAT == 1 (an fp32 layer): the values go through cnn_float_post.h instead, the
// CNN post layer's fp32 kernel (ops/activation.py apply_f32 / softmax_f32, bit for bit): function
// POST_FN with constants POST_A, POST_B (POST == 1), or the fp32 softmax over the row (POST == 2).
//   static constexpr int POST, POST_SEG, POST_SD, POST_FO, POST_FLOAT, POST_FN; float POST_A, POST_B;
//   static constexpr unsigned POST_N, POST_ROWS;
//   static constexpr long long POST_MIN, POST_LO, POST_HI, POST_SIZE;
//   static constexpr std::int32_t POST_T[POST_SIZE]; using TY = ...;  (the post's output type)
template <class C, class = void>
struct PostOf {
    static constexpr int POST = 0, FLOAT = 0;
    using TY = typename C::TO;
};
template <class C>
struct PostOf<C, std::void_t<decltype(C::POST)>> {
    static constexpr int POST = C::POST, FLOAT = C::POST_FLOAT;
    using TY = typename C::TY;
};

template <class C>
struct DensePost {
    using TO = typename C::TO;
    using TY = typename PostOf<C>::TY;
    static constexpr int POST = PostOf<C>::POST;
    static constexpr unsigned SIZE = C::BATCH * C::NS;
    static constexpr unsigned PRE = POST != 0 ? SIZE : 1;     // scratch: the SRS codes
    static constexpr unsigned ROW = POST == 2 ? C::NS : 1;    // scratch: one softmax row in, out, exp

    // element (b, n) of a [NS/OUT_P][BATCH][OUT_P] panel buffer
    static constexpr unsigned at(unsigned b, unsigned n) {
        return ((n / C::OUT_P) * C::BATCH + b) * C::OUT_P + n % C::OUT_P;
    }

    // The POST_ROWS real batch rows; the padded rows' outputs are written as zeros.
    static void apply(const TO* __restrict pre, TY* __restrict out, TO* __restrict xrow, TY* __restrict yrow,
                      std::int32_t* __restrict e) {
        for (unsigned b = C::POST_ROWS; b < C::BATCH; ++b)
            for (unsigned n = 0; n < C::NS; ++n) out[at(b, n)] = TY(0);
        if constexpr (PostOf<C>::FLOAT == 1) {
            (void)e;  // the integer softmax's exponentials only
            if constexpr (POST == 1) {
                for (unsigned p = 0; p < C::NS / C::OUT_P; ++p)
                    for (unsigned b = 0; b < C::POST_ROWS; ++b)
                        for (unsigned l = 0; l < C::OUT_P; ++l) {
                            const unsigned i = (p * C::BATCH + b) * C::OUT_P + l;
                            out[i] = aieflow_fpost::activation_f32(C::POST_FN, C::POST_A, C::POST_B, pre[i]);
                        }
            } else {
                static_assert(C::POST_N <= C::NS, "a softmax row is the layer's outputs");
                for (unsigned b = 0; b < C::POST_ROWS; ++b) {
                    for (unsigned n = 0; n < C::POST_N; ++n) xrow[n] = pre[at(b, n)];
                    aieflow_fpost::post<C>(xrow, yrow, C::POST_N);
                    for (unsigned n = 0; n < C::NS; ++n) out[at(b, n)] = n < C::POST_N ? yrow[n] : TY(0);
                }
            }
        } else if constexpr (POST == 1) {
            for (unsigned p = 0; p < C::NS / C::OUT_P; ++p)
                for (unsigned b = 0; b < C::POST_ROWS; ++b)
                    for (unsigned l = 0; l < C::OUT_P; ++l) {
                        const unsigned i = (p * C::BATCH + b) * C::OUT_P + l;
                        out[i] = TY(aieflow_act::lookup(C::POST_T, std::int64_t(pre[i]) - C::POST_MIN, C::POST_SEG,
                                                        C::POST_LO, C::POST_HI));
                    }
        } else if constexpr (POST == 2) {
            static_assert(C::POST_N <= C::NS, "a softmax row is the layer's outputs");
            for (unsigned b = 0; b < C::POST_ROWS; ++b) {
                for (unsigned n = 0; n < C::POST_N; ++n) xrow[n] = pre[at(b, n)];
                aieflow_act::softmax_row(xrow, yrow, C::POST_N, C::POST_T, C::POST_SIZE, C::POST_SD, C::POST_FO,
                                         C::POST_HI, e);
                for (unsigned n = 0; n < C::NS; ++n) out[at(b, n)] = n < C::POST_N ? yrow[n] : TY(0);
            }
        }
    }
};

// The scratch of a tile that stores the output and applies a post (a base class: nothing at all
// without one).
template <class C, bool = (PostOf<C>::POST != 0)>
struct PostScratch {};
template <class C>
struct PostScratch<C, true> {
    alignas(32) typename C::TO pre_[DensePost<C>::PRE];
    alignas(32) typename C::TO xrow_[DensePost<C>::ROW];
    alignas(32) typename DensePost<C>::TY yrow_[DensePost<C>::ROW];
    alignas(32) std::int32_t e_[DensePost<C>::ROW];
};

// Each kernel class owns its resident parameters (REGISTER_PARAMETER needs them as its own members):
// the weight block on every tile, the bias on the tile that starts a cascade row.
template <class T, unsigned N>
inline void load_params(T (&dst)[N], const std::vector<T>& src) {
    for (unsigned i = 0; i < N; ++i) dst[i] = i < src.size() ? src[i] : T(0);
}

// CAS_LEN == 1: input buffer in, output buffer out.
template <class C>
class DenseSingle : PostScratch<C> {
    alignas(32) typename WeightOf<C>::T weights_[C::KS * C::NS / WeightOf<C>::PACK];
    alignas(32) typename C::TB bias_[DenseCore<C>::BIAS_SIZE];

public:
    DenseSingle(const std::vector<typename WeightOf<C>::T>& w, const std::vector<typename C::TB>& b) {
        load_params(weights_, w);
        load_params(bias_, b);
    }
    void run(adf::input_buffer<typename C::TA>& __restrict in,
             adf::output_buffer<typename DensePost<C>::TY>& __restrict out) {
        if constexpr (DensePost<C>::POST == 0) {
            DenseCore<C>::template compute<false, false>(in.data(), weights_, bias_, out.data(), nullptr, nullptr);
        } else {
            DenseCore<C>::template compute<false, false>(in.data(), weights_, bias_, this->pre_, nullptr, nullptr);
            DensePost<C>::apply(this->pre_, out.data(), this->xrow_, this->yrow_, this->e_);
        }
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(DenseSingle::run);
        REGISTER_PARAMETER(weights_);
        REGISTER_PARAMETER(bias_);
    }
};

// First tile of a cascade row: starts from the bias, sends partial sums east.
template <class C>
class DenseFirst {
    alignas(32) typename WeightOf<C>::T weights_[C::KS * C::NS / WeightOf<C>::PACK];
    alignas(32) typename C::TB bias_[DenseCore<C>::BIAS_SIZE];

public:
    DenseFirst(const std::vector<typename WeightOf<C>::T>& w, const std::vector<typename C::TB>& b) {
        load_params(weights_, w);
        load_params(bias_, b);
    }
    void run(adf::input_buffer<typename C::TA>& __restrict in,
             output_cascade<typename C::ACC>* __restrict cout) {
        DenseCore<C>::template compute<false, true>(in.data(), weights_, bias_, nullptr, nullptr, cout);
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(DenseFirst::run);
        REGISTER_PARAMETER(weights_);
        REGISTER_PARAMETER(bias_);
    }
};

// Middle tile: adds its slice to the partial sums and passes them on (no bias).
template <class C>
class DenseMiddle {
    alignas(32) typename WeightOf<C>::T weights_[C::KS * C::NS / WeightOf<C>::PACK];

public:
    DenseMiddle(const std::vector<typename WeightOf<C>::T>& w, const std::vector<typename C::TB>&) {
        load_params(weights_, w);
    }
    void run(adf::input_buffer<typename C::TA>& __restrict in,
             input_cascade<typename C::ACC>* __restrict cin,
             output_cascade<typename C::ACC>* __restrict cout) {
        DenseCore<C>::template compute<true, true>(in.data(), weights_, nullptr, nullptr, cin, cout);
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(DenseMiddle::run);
        REGISTER_PARAMETER(weights_);
    }
};

// Last tile: finishes the sums, applies SRS (+ ReLU) and writes the output buffer (no bias).
template <class C>
class DenseLast : PostScratch<C> {
    alignas(32) typename WeightOf<C>::T weights_[C::KS * C::NS / WeightOf<C>::PACK];

public:
    DenseLast(const std::vector<typename WeightOf<C>::T>& w, const std::vector<typename C::TB>&) {
        load_params(weights_, w);
    }
    void run(adf::input_buffer<typename C::TA>& __restrict in,
             input_cascade<typename C::ACC>* __restrict cin,
             adf::output_buffer<typename DensePost<C>::TY>& __restrict out) {
        if constexpr (DensePost<C>::POST == 0) {
            DenseCore<C>::template compute<true, false>(in.data(), weights_, nullptr, out.data(), cin, nullptr);
        } else {
            DenseCore<C>::template compute<true, false>(in.data(), weights_, nullptr, this->pre_, cin, nullptr);
            DensePost<C>::apply(this->pre_, out.data(), this->xrow_, this->yrow_, this->e_);
        }
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(DenseLast::run);
        REGISTER_PARAMETER(weights_);
    }
};

// The storing roles of a layer that requantises (RQ): as DenseSingle / DenseLast, with the
// per-channel multipliers as one more resident parameter.  The constructor's second vector is the
// bias blocks (DenseSingleRq only) followed by the multiplier blocks.
template <class C>
class DenseSingleRq {
    static_assert(RqOf<C>::RQ && C::HAS_BIAS, "DenseSingleRq is for requantising layers (their bias is always set)");
    alignas(32) typename WeightOf<C>::T weights_[C::KS * C::NS / WeightOf<C>::PACK];
    alignas(32) typename C::TB bias_[DenseCore<C>::BIAS_SIZE];
    alignas(32) typename C::TB rq_[DenseCore<C>::BIAS_SIZE];

public:
    DenseSingleRq(const std::vector<typename WeightOf<C>::T>& w, const std::vector<typename C::TB>& b) {
        load_params(weights_, w);
        for (unsigned i = 0; i < DenseCore<C>::BIAS_SIZE; ++i) {
            bias_[i] = i < b.size() ? b[i] : typename C::TB(0);
            const unsigned j = DenseCore<C>::BIAS_SIZE + i;
            rq_[i] = j < b.size() ? b[j] : typename C::TB(0);
        }
    }
    void run(adf::input_buffer<typename C::TA>& __restrict in, adf::output_buffer<typename C::TO>& __restrict out) {
        DenseCore<C>::template compute<false, false>(in.data(), weights_, bias_, out.data(), nullptr, nullptr, rq_);
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(DenseSingleRq::run);
        REGISTER_PARAMETER(weights_);
        REGISTER_PARAMETER(bias_);
        REGISTER_PARAMETER(rq_);
    }
};

template <class C>
class DenseLastRq {
    static_assert(RqOf<C>::RQ && C::HAS_BIAS, "DenseLastRq is for requantising layers (their bias is always set)");
    alignas(32) typename WeightOf<C>::T weights_[C::KS * C::NS / WeightOf<C>::PACK];
    alignas(32) typename C::TB rq_[DenseCore<C>::BIAS_SIZE];

public:
    DenseLastRq(const std::vector<typename WeightOf<C>::T>& w, const std::vector<typename C::TB>& b) {
        load_params(weights_, w);
        load_params(rq_, b);
    }
    void run(adf::input_buffer<typename C::TA>& __restrict in,
             input_cascade<typename C::ACC>* __restrict cin,
             adf::output_buffer<typename C::TO>& __restrict out) {
        DenseCore<C>::template compute<true, false>(in.data(), weights_, nullptr, out.data(), cin, nullptr, rq_);
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(DenseLastRq::run);
        REGISTER_PARAMETER(weights_);
        REGISTER_PARAMETER(rq_);
    }
};

}  // namespace aieflow
