// aieflow CNN kernels for the AI Engine, written against the public AIE API (UG1529) and the ADF
// kernel-class interface (UG1079 / UG1603).
//
// Stream mapping ("ours"): a convolution is a CAS_NUM x CAS_LEN rectangle.  The tile at cascade
// position j holds the whole input image of input-channel group j (C_IN x H x W, CHW) in a window,
// gathers the im2col patch rows of M output pixels at a time into tile memory (the sliding window:
// no PL im2col), multiplies them with its resident weight block (aie::mmul<M,K,N>, pixels x patch
// x channels) and passes the accumulators east on the cascade.  Position 0 starts from the bias, so
// partial sums run in increasing input channel: the emulator's accumulation order.  The last tile
// applies the epilogue (SRS, ReLU, a per-channel code table for int8 tanh / PReLU, the fp32 tanh
// lookup table, the bf16 tanh table of cnn_float_post.h, or fp32 / bf16 PReLU) and stores its OG output channels, through a pixel-shuffle
// permutation when one follows (SHUF > 1).  A post layer (POST: 1 an activation, 2 a softmax
// over the OG channels of a one-pixel Dense head) makes the last tile keep its codes (TO) in tile
// memory and then write the layer's output (TY) from them with activation_fixed.h (fixed point) or
// cnn_float_post.h (fp32, bf16: POST_FLOAT).  A residual add fused into the stage (RES) makes the
// last tile read one more window, the skip (OG x OH x OW of type TS, CHW: the same channel group of
// an earlier stage's output), and store residual(y, skip) of type TY instead of y: both operands
// aligned to a common grid, added exactly, one shift-round-saturate into TY with the add's own
// rounding and saturation, then its ReLU (aieflow/ops/add.py); fp32: one float add.
//
// Thesis mapping: MatmulTile computes one TILE_M x K_PAD x TILE_N output tile of an im2col product
// from a patch window the PL prepared (layout [K_PAD/K][TILE_N/M][M*K]), K in K_CHUNKS chunks with
// the partial sums kept in a local buffer between chunks, and writes the tile ([TILE_M/N][TILE_N/M]
// blocks of M*N, pixel-major inside a block).
//
// Layouts: weights [OG_PAD/N][KT_PAD/K][K*N] (each K x N block row-major), bias [OG_PAD/N][M*N]
// (the bias row repeated for the M pixel rows of a block), patch scratch [KT_PAD/K][M*K].
//
// Float scales and zero points (RQ, onnxruntime quantize_static; aieflow numerics/requant.py): the
// input zero point is folded into the bias at compile time and padding holds it (PAD: real 0); the
// storing tile requantises each accumulator with its channel's int32 multiplier (laid out like the
// bias, after the bias blocks in the tile's bias parameter) and the shared SHIFT, then adds RQ_ZP.
#pragma once

#include <adf.h>
#include <aie_api/aie.hpp>
#include <aie_api/aie_adf.hpp>

#include <type_traits>
#include <vector>

#include "activation_fixed.h"
#include "cnn_float_post.h"
#include "cnn_numerics.h"
#include "narrow.h"
#include "requant.h"

namespace aieflow_cnn {

enum class act : int { none = 0, relu = 1, code_table = 2, float_lut = 3, float_prelu = 4, bf16_table = 5 };

template <class T, unsigned N>
inline void load_params(T (&dst)[N], const std::vector<T>& src) {
    for (unsigned i = 0; i < N; ++i) dst[i] = i < src.size() ? src[i] : T(0);
}

// Bilinear upsampling (ops/resize.py), shared by the stream and rows mappings: per axis of length n
// and factor s, output y reads ((D - p) x[i0] + p x[i1]) / D, D = 2 s (MODE 1: half_pixel), n s - 1
// (2: align_corners) or s (3: asymmetric); the code is the exact N / (Dh Dw) rounded to the
// nearest, ties to even, in 64-bit integers.
template <int MODE>
constexpr long long up_den(unsigned n, unsigned s) {
    return MODE == 1 ? 2LL * s : MODE == 2 ? (n * s > 1 ? (long long)(n * s) - 1 : 1LL) : (long long)s;
}

template <int MODE>
inline void up_tap(unsigned y, unsigned n, unsigned s, unsigned& i0, unsigned& i1, long long& p) {
    const long long d = up_den<MODE>(n, s);
    long long num = 0;
    if constexpr (MODE == 1) {
        num = 2LL * y + 1 - (long long)s;
        num = num < 0 ? 0 : num;
    } else if constexpr (MODE == 2) {
        num = n * s > 1 ? (long long)y * (long long)(n - 1) : 0;
    } else {
        num = y;
    }
    i0 = unsigned(num / d);
    p = num - (long long)i0 * d;
    i1 = i0 + 1 < n ? i0 + 1 : n - 1;
}

// The four taps a00 (i0, j0), a01 (i0, j1), a10 (i1, j0), a11 (i1, j1) weighted and rounded.
inline long long up_mix(long long a00, long long a01, long long a10, long long a11, long long pr, long long pc,
                        long long dh, long long dw) {
    const long long den = dh * dw;
    const long long num = (dh - pr) * ((dw - pc) * a00 + pc * a01) + pr * ((dw - pc) * a10 + pc * a11);
    long long q = num / den, rem = num % den;
    if (rem < 0) {
        rem += den;
        --q;
    }
    if (2 * rem > den || (2 * rem == den && (q & 1))) ++q;
    return q;
}

// Float bilinear (fp32 on AIE1, bf16 on AIE-ML / v2; ops/resize.py bilinear_float): the same taps,
// the weights in float32, w1 = p * INV with INV = 1 / D a float32 constant and w0 = 1 - w1, then
// t0 = w0c a00 + w1c a01, t1 = w0c a10 + w1c a11 and y = w0r t0 + w1r t1, each product and sum
// one float32 rounding (no fused multiply-add); a bf16 output rounds y once (nearest even).
inline void up_weights(long long p, float inv, float& w0, float& w1) {
    w1 = float(p) * inv;
    w0 = 1.0f - w1;
}

inline float up_mix_float(float a00, float a01, float a10, float a11, float r0, float r1, float c0, float c1) {
    const float p00 = c0 * a00, p01 = c1 * a01, p10 = c0 * a10, p11 = c1 * a11;
    const float t0 = p00 + p01, t1 = p10 + p11;
    const float q0 = r0 * t0, q1 = r1 * t1;
    return q0 + q1;
}

template <class C>
struct ConvCore {
    using TA = typename C::TA;
    using TW = typename C::TW;
    using TB = typename C::TB;
    using TO = typename C::TO;
    using ACC = typename C::ACC;
    using TS = typename C::TS;  // skip operand of a fused residual add (TO without one)
    using TY = typename C::TY;  // stored output: the add's type (TO without one)
    static constexpr unsigned M = C::M, K = C::K, N = C::N, MN = M * N;
    static constexpr unsigned KT = C::C_IN * C::KH * C::KW;
    static constexpr unsigned KB = (KT + K - 1) / K;        // k blocks
    static constexpr unsigned KB_FULL = KT / K;              // whole k blocks (fp32 does the tail exactly)
    static constexpr unsigned CB = (C::OG + N - 1) / N;      // channel blocks
    static constexpr unsigned P = C::OH * C::OW;
    static constexpr unsigned PB = (P + M - 1) / M;          // pixel blocks
    static constexpr unsigned W_SIZE = CB * KB * K * N;
    static constexpr unsigned B_SIZE = C::HAS_BIAS ? CB * MN * (C::RQ ? 2 : 1) : 1;  // bias, then multipliers
    static constexpr bool is_float = !std::is_integral_v<TA>;  // float (AIE1) or bfloat16 (AIE-ML / v2)
    static constexpr bool exact_tail = is_float && (KT % K != 0);

    using MMUL = aie::mmul<M, K, N, TA, TW, ACC>;
    using ACCV = aie::accum<ACC, MN>;

    // Patch rows of pixels p0 .. p0+M-1 (zero for padding, pixels past the image and k past KT).
    static void gather(const TA* __restrict img, TA* __restrict patch, unsigned p0) {
        for (unsigned kb = 0; kb < KB; ++kb)
            for (unsigned i = 0; i < M; ++i)
                for (unsigned kk = 0; kk < K; ++kk) {
                    const unsigned k = kb * K + kk, p = p0 + i;
                    TA v = TA(0);
                    if (k < KT && p < P) {
                        v = TA(C::PAD);  // padding: code 0, or the input zero point (float scales)
                        const unsigned c = k / (C::KH * C::KW), ij = k % (C::KH * C::KW);
                        const int y = int((p / C::OW) * C::SH + ij / C::KW) - int(C::PT);
                        const int x = int((p % C::OW) * C::SW + ij % C::KW) - int(C::PL);
                        if (y >= 0 && y < int(C::H) && x >= 0 && x < int(C::W))
                            v = img[(c * C::H + unsigned(y)) * C::W + unsigned(x)];
                    }
                    patch[kb * M * K + i * K + kk] = v;
                }
    }

    static ACCV init_acc(const TB* __restrict bias, unsigned cb) {
        if constexpr (C::HAS_BIAS) {
            ACCV acc;
            acc.from_vector(aie::load_v<MN>(bias + cb * MN), C::BIAS_SHIFT);
            return acc;
        } else {
            return aie::zeros<ACC, MN>();
        }
    }

    static ACCV read_cascade(input_cascade<ACC>* __restrict cin) {
        ACCV acc;
        for (unsigned p = 0; p < MN / C::CASC_LANES; ++p) acc.insert(p, readincr_v<C::CASC_LANES>(cin));
        return acc;
    }

    static void write_cascade(output_cascade<ACC>* __restrict cout, const ACCV& acc) {
        for (unsigned p = 0; p < MN / C::CASC_LANES; ++p) writeincr(cout, acc.template extract<C::CASC_LANES>(p));
    }

    // acc + patch x weights of one channel block, k in increasing order.
    static ACCV block(const ACCV& start, const TA* __restrict patch, const TW* __restrict w, unsigned cb) {
        MMUL c(start);
        const TW* __restrict pw = w + cb * KB * K * N;
        for (unsigned kb = 0; kb < (exact_tail ? KB_FULL : KB); ++kb)
            c.mac(aie::load_v<M * K>(patch + kb * M * K), aie::load_v<K * N>(pw + kb * K * N));
        if constexpr (exact_tail) {
            // The last, partial k block in scalar fp32 (a zero-padded mmul would add +0.0 terms,
            // which turn a -0.0 sum into +0.0): same order, same roundings as the mmul.
            aie::vector<float, MN> v = c.to_accum().template to_vector<float>();
            for (unsigned i = 0; i < M; ++i)
                for (unsigned n = 0; n < N; ++n) {
                    float s = v[i * N + n];
                    for (unsigned kk = 0; kk < KT % K; ++kk) {
                        const float prod = patch[KB_FULL * M * K + i * K + kk] * pw[KB_FULL * K * N + kk * N + n];
                        s = s + prod;
                    }
                    v[i * N + n] = s;
                }
            ACCV out;
            out.from_vector(v);
            return out;
        } else {
            return c.to_accum();
        }
    }

    static unsigned out_index(unsigned o, unsigned p) {
        if constexpr (C::SHUF > 1) {
            const unsigned r = C::SHUF, ch = o / (r * r), i = (o / r) % r, j = o % r;
            const unsigned y = (p / C::OW) * r + i, x = (p % C::OW) * r + j;
            return (ch * C::OH * r + y) * (C::OW * r) + x;
        } else {
            return o * P + p;
        }
    }

    static_assert(!C::RES || C::SHUF == 1, "a fused residual add stores in CHW order (no pixel shuffle)");
    static_assert(C::UP_H * C::UP_W == 1 || (C::SHUF == 1 && !C::RES && C::POST == 0),
                  "a fused nearest upsampling stores plain CHW values (cnn/stages.py refuses the rest)");

    // A fused nearest upsampling (ops/resize.py): output pixel p = (y, x) fills the UP_H x UP_W block
    // at (y UP_H, x UP_W) of the upsampled channel o.
    static void store_up(TY* __restrict out, unsigned o, unsigned p, TY y) {
        const unsigned yy = (p / C::OW) * C::UP_H, xx = (p % C::OW) * C::UP_W, row = C::OW * C::UP_W;
        TY* __restrict base = out + (o * C::OH * C::UP_H + yy) * row + xx;
        for (unsigned i = 0; i < C::UP_H; ++i)
            for (unsigned j = 0; j < C::UP_W; ++j) base[i * row + j] = y;
    }

    // The fused residual add of one output value (scalar, exact in 64 bits).
    static TY residual(TO a, TS s) {
        if constexpr (is_float) {
            float y = a + s;
            if constexpr (C::RES_RELU) y = (y > 0.0f || y != y) ? y : 0.0f;  // numpy's maximum(y, 0)
            return y;
        } else {
            const int64_t sum = int64_t(a) * (int64_t(1) << C::RES_SHIFT_A) + int64_t(s) * (int64_t(1) << C::RES_SHIFT_B);
            int64_t y = round_divide(sum, int64_t(1) << C::RES_SHIFT, rnd(C::RES_RND));
            if constexpr (C::RES_WRAP) {
                const uint64_t mask = C::RES_BITS >= 64 ? ~uint64_t(0) : (uint64_t(1) << C::RES_BITS) - 1;
                const uint64_t m = uint64_t(y) & mask;
                y = (C::RES_SIGNED && C::RES_BITS < 64 && ((m >> (C::RES_BITS - 1)) & 1u))
                        ? int64_t(m) - int64_t(mask) - 1 : int64_t(m);
            } else {
                y = y < C::RES_LO ? C::RES_LO : (y > C::RES_HI ? C::RES_HI : y);
            }
            if constexpr (C::RES_RELU) y = y < 0 ? 0 : y;
            return TY(y);
        }
    }

    // q = saturate(round_half_even(acc * m / 2^SHIFT) + RQ_ZP) (numerics/requant.py): requant.h,
    // the one definition dense.h's DenseCore::requant also runs.
    static aie::vector<TO, MN> requant(const ACCV& acc, const TB* __restrict mult) {
        return aieflow_rq::requant<TO, C::SHIFT, C::RQ_ZP, MN>(acc, mult);
    }

    static void store(TY* __restrict out, const ACCV& acc, unsigned p0, unsigned cb, const TO* __restrict table,
                      const float* __restrict lut, const float* __restrict slope, const TS* __restrict skip,
                      TO* __restrict pre, const TB* __restrict rq) {
        aie::vector<TO, MN> v;
        if constexpr (is_float) {
            v = acc.template to_vector<TO>();
        } else if constexpr (C::RQ) {
            v = requant(acc, rq + cb * MN);
        } else {
            v = aieflow_narrow::narrow<C>(acc.template to_vector<TO>(C::SHIFT));  // a type narrower than TO (narrow.h)
        }
        if constexpr (C::ACT == int(act::relu) && C::RQ) {
            v = aie::max(v, aie::broadcast<TO, MN>(TO(C::RQ_ZP)));  // real 0 is the zero point's code
        } else if constexpr (C::ACT == int(act::relu)) {
            v = aie::max(v, aie::zeros<TO, MN>());
        }
        for (unsigned i = 0; i < M; ++i)
            for (unsigned n = 0; n < N; ++n) {
                const unsigned p = p0 + i, o = cb * N + n;
                if (p >= P || o >= C::OG) continue;
                TO y = v[i * N + n];
                if constexpr (C::ACT == int(act::code_table)) {
                    y = table[o * C::TABLE_CODES + unsigned(int(y) - C::TABLE_MIN)];
                } else if constexpr (C::ACT == int(act::float_lut)) {
                    y = lut[lut_index(y, C::LUT_SCALE, C::LUT_OFFSET, int(C::LUT_SIZE), rnd(C::LUT_RND))];
                } else if constexpr (C::ACT == int(act::float_prelu)) {
                    // fp32: y * slope; bf16: the float32 product (of two bf16 values) rounded once to bf16
                    if (!(y >= TO(0.0f))) y = TO(static_cast<float>(y) * slope[o]);
                } else if constexpr (C::ACT == int(act::bf16_table)) {
                    y = aieflow_fpost::lookup_bf16_table<C::ACT_ELO, C::ACT_EHI>(y, C::ACT_T, C::ACT_C1, C::ACT_C0);
                }
                if constexpr (C::POST != 0 || C::UP_MODE != 0) {
                    pre[o * P + p] = y;  // no shuffle, no residual with a post layer or bilinear upsampling (cnn/stages.py)
                } else if constexpr (C::UP_H * C::UP_W > 1) {
                    store_up(out, o, p, y);  // nearest (UP_MODE 0)
                } else if constexpr (C::RES) {
                    out[out_index(o, p)] = residual(y, skip[o * P + p]);
                } else {
                    out[out_index(o, p)] = y;
                }
            }
    }

    template <bool CIN, bool COUT>
    static void compute(const TA* __restrict img, TA* __restrict patch, const TW* __restrict w,
                        const TB* __restrict bias, TY* __restrict out, input_cascade<ACC>* __restrict cin,
                        output_cascade<ACC>* __restrict cout, const TO* __restrict table,
                        const float* __restrict lut, const float* __restrict slope, const TS* __restrict skip,
                        TO* __restrict pre, std::int32_t* __restrict e) {
        if constexpr (!is_float) {
            aie::set_rounding(C::RND);
            aie::set_saturation(C::SAT);
        }
        for (unsigned pb = 0; pb < PB; ++pb) {
            gather(img, patch, pb * M);
            for (unsigned cb = 0; cb < CB; ++cb) {
                ACCV start;
                if constexpr (CIN) {
                    start = read_cascade(cin);
                } else {
                    start = init_acc(bias, cb);
                }
                const ACCV acc = block(start, patch, w, cb);
                if constexpr (COUT) {
                    write_cascade(cout, acc);
                } else {
                    store(out, acc, pb * M, cb, table, lut, slope, skip, pre, bias + (CIN ? 0 : CB * MN));
                }
            }
        }
        if constexpr (!COUT && C::POST != 0) post(pre, out, e);
        if constexpr (!COUT && C::UP_MODE != 0) bilinear(pre, out);
    }

    // A fused bilinear upsampling by (UP_H, UP_W): up_tap / up_mix above (ops/resize.py's integer
    // definition), or up_weights / up_mix_float in fp32 / bf16, on the stored window of OH x OW
    // values per channel.
    static void bilinear(const TO* __restrict pre, TY* __restrict out) {
        constexpr unsigned OHU = C::OH * C::UP_H, OWU = C::OW * C::UP_W;
        constexpr long long DH = up_den<C::UP_MODE>(C::OH, C::UP_H), DW = up_den<C::UP_MODE>(C::OW, C::UP_W);
        constexpr float INV_H = 1.0f / float(DH), INV_W = 1.0f / float(DW);
        for (unsigned o = 0; o < C::OG; ++o) {
            const TO* __restrict b = pre + o * P;
            for (unsigned y = 0; y < OHU; ++y) {
                unsigned r0 = 0, r1 = 0;
                long long pr = 0;
                up_tap<C::UP_MODE>(y, C::OH, C::UP_H, r0, r1, pr);
                float u0 = 0.0f, u1 = 0.0f;  // fp32 / bf16: the row weights
                if constexpr (is_float) up_weights(pr, INV_H, u0, u1);
                for (unsigned x = 0; x < OWU; ++x) {
                    unsigned c0 = 0, c1 = 0;
                    long long pc = 0;
                    up_tap<C::UP_MODE>(x, C::OW, C::UP_W, c0, c1, pc);
                    if constexpr (is_float) {
                        float w0 = 0.0f, w1 = 0.0f;
                        up_weights(pc, INV_W, w0, w1);
                        out[(o * OHU + y) * OWU + x] = TY(up_mix_float(b[r0 * C::OW + c0], b[r0 * C::OW + c1],
                                                                       b[r1 * C::OW + c0], b[r1 * C::OW + c1],
                                                                       u0, u1, w0, w1));
                    } else {
                        out[(o * OHU + y) * OWU + x] = TY(up_mix(b[r0 * C::OW + c0], b[r0 * C::OW + c1],
                                                                 b[r1 * C::OW + c0], b[r1 * C::OW + c1], pr, pc, DH, DW));
                    }
                }
            }
        }
    }

    // The post layer on the stored codes: ops/activation.py's table / interpolation per value, or
    // its softmax over the OG outputs (P == 1); in fp32 / bf16 the float kernels of cnn_float_post.h.
    static void post(const TO* __restrict pre, TY* __restrict out, std::int32_t* __restrict e) {
        if constexpr (C::POST_FLOAT != 0) {
            static_assert(std::is_same_v<TO, TY> && (C::POST == 1 || P == 1),
                          "a float post layer keeps the stage's type; a softmax follows a one-pixel Dense head");
            aieflow_fpost::post<C>(pre, out, C::OG * P);  // cnn_float_post.h: ops/activation.py's float kernels
        } else if constexpr (C::POST == 1) {
            for (unsigned i = 0; i < C::OG * P; ++i)
                out[i] = TY(aieflow_act::lookup(C::POST_T, std::int64_t(pre[i]) - C::POST_MIN, C::POST_SEG,
                                                C::POST_LO, C::POST_HI));
        } else {
            static_assert(P == 1, "a softmax post layer follows a one-pixel Dense head");
            aieflow_act::softmax_row(pre, out, C::OG, C::POST_T, C::POST_SIZE, C::POST_SD, C::POST_FO, C::POST_HI, e);
        }
    }
};

// Resident parameters of one conv tile: members of each kernel class itself, because
// REGISTER_PARAMETER names members of the registered class (UG1079 kernel classes).
#define AIEFLOW_CNN_TILE_MEMBERS(Cls)                                                                      \
    using Core = ConvCore<C>;                                                                             \
    alignas(32) typename C::TW weights_[Core::W_SIZE];                                                    \
    alignas(32) typename C::TB bias_[Core::B_SIZE];                                                       \
    alignas(32) typename C::TO table_[C::TABLE_SIZE];                                                     \
    alignas(32) float lut_[C::LUT_ALLOC];                                                                 \
    alignas(32) float slope_[C::SLOPE_SIZE];                                                              \
    alignas(32) typename C::TA patch_[Core::KB * C::M * C::K];                                            \
    alignas(32) typename C::TO pre_[C::POST != 0 || C::UP_MODE != 0 ? C::OG * C::OH * C::OW : 1];                            \
    alignas(32) std::int32_t post_e_[C::POST == 2 ? C::OG : 1];                                           \
                                                                                                          \
public:                                                                                                   \
    Cls(const std::vector<typename C::TW>& w, const std::vector<typename C::TB>& b,                       \
        const std::vector<typename C::TO>& table, const std::vector<float>& lut, const std::vector<float>& slope) { \
        load_params(weights_, w);                                                                         \
        load_params(bias_, b);                                                                            \
        load_params(table_, table);                                                                       \
        load_params(lut_, lut);                                                                           \
        load_params(slope_, slope);                                                                       \
    }

// CAS_LEN == 1: input window in, output window out.
template <class C>
class ConvSingle {
    AIEFLOW_CNN_TILE_MEMBERS(ConvSingle)
    void run(adf::input_buffer<typename C::TA>& __restrict in, adf::output_buffer<typename C::TY>& __restrict out) {
        ConvCore<C>::template compute<false, false>(in.data(), patch_, weights_, bias_, out.data(),
                                                    nullptr, nullptr, table_, lut_, slope_, nullptr, pre_, post_e_);
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(ConvSingle::run);
        REGISTER_PARAMETER(weights_);
        REGISTER_PARAMETER(bias_);
        REGISTER_PARAMETER(table_);
        REGISTER_PARAMETER(lut_);
        REGISTER_PARAMETER(slope_);
    }
};

// First position of a cascade row: starts from the bias.
template <class C>
class ConvFirst {
    AIEFLOW_CNN_TILE_MEMBERS(ConvFirst)
    void run(adf::input_buffer<typename C::TA>& __restrict in, output_cascade<typename C::ACC>* __restrict cout) {
        ConvCore<C>::template compute<false, true>(in.data(), patch_, weights_, bias_, nullptr,
                                                   nullptr, cout, table_, lut_, slope_, nullptr, pre_, post_e_);
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(ConvFirst::run);
        REGISTER_PARAMETER(weights_);
        REGISTER_PARAMETER(bias_);
    }
};

template <class C>
class ConvMiddle {
    AIEFLOW_CNN_TILE_MEMBERS(ConvMiddle)
    void run(adf::input_buffer<typename C::TA>& __restrict in, input_cascade<typename C::ACC>* __restrict cin,
             output_cascade<typename C::ACC>* __restrict cout) {
        ConvCore<C>::template compute<true, true>(in.data(), patch_, weights_, bias_, nullptr, cin,
                                                  cout, table_, lut_, slope_, nullptr, pre_, post_e_);
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(ConvMiddle::run);
        REGISTER_PARAMETER(weights_);
    }
};

template <class C>
class ConvLast {
    AIEFLOW_CNN_TILE_MEMBERS(ConvLast)
    void run(adf::input_buffer<typename C::TA>& __restrict in, input_cascade<typename C::ACC>* __restrict cin,
             adf::output_buffer<typename C::TY>& __restrict out) {
        ConvCore<C>::template compute<true, false>(in.data(), patch_, weights_, bias_, out.data(),
                                                   cin, nullptr, table_, lut_, slope_, nullptr, pre_, post_e_);
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(ConvLast::run);
        REGISTER_PARAMETER(weights_);
        REGISTER_PARAMETER(bias_);  // the requantisation multipliers (RQ); one unused word otherwise
        REGISTER_PARAMETER(table_);
        REGISTER_PARAMETER(lut_);
        REGISTER_PARAMETER(slope_);
    }
};

// The same two with a fused residual add: the skip window (this row's channel group of an
// earlier stage's output, or of the input image) is one more input, after the image and cascade.
template <class C>
class ConvSingleSkip {
    static_assert(C::RES, "ConvSingleSkip is the kernel of a stage with a fused residual add");
    AIEFLOW_CNN_TILE_MEMBERS(ConvSingleSkip)
    void run(adf::input_buffer<typename C::TA>& __restrict in, adf::input_buffer<typename C::TS>& __restrict skip,
             adf::output_buffer<typename C::TY>& __restrict out) {
        ConvCore<C>::template compute<false, false>(in.data(), patch_, weights_, bias_, out.data(),
                                                    nullptr, nullptr, table_, lut_, slope_, skip.data(), pre_, post_e_);
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(ConvSingleSkip::run);
        REGISTER_PARAMETER(weights_);
        REGISTER_PARAMETER(bias_);
        REGISTER_PARAMETER(table_);
        REGISTER_PARAMETER(lut_);
        REGISTER_PARAMETER(slope_);
    }
};

template <class C>
class ConvLastSkip {
    static_assert(C::RES, "ConvLastSkip is the kernel of a stage with a fused residual add");
    AIEFLOW_CNN_TILE_MEMBERS(ConvLastSkip)
    void run(adf::input_buffer<typename C::TA>& __restrict in, input_cascade<typename C::ACC>* __restrict cin,
             adf::input_buffer<typename C::TS>& __restrict skip, adf::output_buffer<typename C::TY>& __restrict out) {
        ConvCore<C>::template compute<true, false>(in.data(), patch_, weights_, bias_, out.data(),
                                                   cin, nullptr, table_, lut_, slope_, skip.data(), pre_, post_e_);
    }
    static void registerKernelClass() {
        REGISTER_FUNCTION(ConvLastSkip::run);
        REGISTER_PARAMETER(weights_);
        REGISTER_PARAMETER(bias_);  // the requantisation multipliers (RQ); one unused word otherwise
        REGISTER_PARAMETER(table_);
        REGISTER_PARAMETER(lut_);
        REGISTER_PARAMETER(slope_);
    }
};

// Max / average pooling of one channel group (C_IN x H x W -> C_IN x OH x OW), scalar.
template <class C>
class Pool {
public:
    Pool() = default;
    void run(adf::input_buffer<typename C::TA>& __restrict in, adf::output_buffer<typename C::TA>& __restrict out) {
        using T = typename C::TA;
        const T* __restrict x = in.data();
        T* __restrict y = out.data();
        for (unsigned c = 0; c < C::C_IN; ++c)
            for (unsigned oy = 0; oy < C::OH; ++oy)
                for (unsigned ox = 0; ox < C::OW; ++ox) {
                    const T* __restrict img = x + c * C::H * C::W;
                    y[(c * C::OH + oy) * C::OW + ox] = window(img, oy, ox);
                }
    }
    // The running state of one window: the maximum, or the sum (float: one rounding per addition,
    // in the order the values come), and the values inside the image.
    struct Acc {
        typename C::TA best = typename C::TA(0);
        float fsum = 0.0f;
        int64_t isum = 0;
        unsigned inside = 0;
    };
    static constexpr bool is_float = !std::is_integral_v<typename C::TA>;  // float or bfloat16 (sums and quotient in float)

    static void step(Acc& a, typename C::TA v, bool in_image, bool first) {
        a.inside += in_image ? 1u : 0u;
        if constexpr (C::MAX) {
            if (!in_image) return;  // padding never wins a maximum
            if constexpr (is_float) {
                if (a.inside == 1 || !(a.best >= v || a.best != a.best)) a.best = v;
            } else {
                if (a.inside == 1 || v > a.best) a.best = v;
            }
        } else if constexpr (is_float) {
            a.fsum = first ? float(v) : a.fsum + float(v);
        } else {
            a.isum += int64_t(v);
        }
    }

    static typename C::TA finish(const Acc& a) {
        using T = typename C::TA;
        if constexpr (C::MAX) {
            return a.best;
        } else {
            const unsigned count = C::COUNT_PAD ? C::KH * C::KW : a.inside;
            if constexpr (is_float) {
                return T(a.fsum / float(count));  // bfloat16: rounded to nearest even
            } else {
                if constexpr (C::RQ)  // float scales (ops/pool.py): (sum - n z_in) requantised
                    return T(requant(a.isum - C::RQ_BIAS, C::RQ_MULT, C::RQ_SHIFT, C::RQ_ZP, C::MIN_CODE, C::MAX_CODE));
                int64_t q = round_divide(a.isum, int64_t(count), rnd(C::RND_CODE));
                if (q > C::MAX_CODE) q = C::MAX_CODE;
                if (q < C::MIN_CODE) q = C::MIN_CODE;
                return T(q);
            }
        }
    }

    // One window, row-major (the rows mapping's global pooling runs the same step / finish).
    static typename C::TA window(const typename C::TA* __restrict img, unsigned oy, unsigned ox) {
        using T = typename C::TA;
        Acc a;
        for (unsigned i = 0; i < C::KH; ++i)
            for (unsigned j = 0; j < C::KW; ++j) {
                const int yy = int(oy * C::SH + i) - int(C::PT), xx = int(ox * C::SW + j) - int(C::PL);
                const bool in_image = yy >= 0 && yy < int(C::H) && xx >= 0 && xx < int(C::W);
                step(a, in_image ? img[unsigned(yy) * C::W + unsigned(xx)] : T(0), in_image, i == 0 && j == 0);
            }
        return finish(a);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(Pool::run); }
};

}  // namespace aieflow_cnn
