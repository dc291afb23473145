// The 1-D convolution front end of a recurrent design (recurrent/front.py): one free-running
// kernel per convolution before the first GRU / LSTM layer.
//
//   SeqConv<F>: one call per input step: reads the step's F::CINP codes into a ring of the last
//     F::K steps, then writes every output step whose window is complete (F::COUTP words each,
//     the F::COUT channels zero-padded).  Output o reads input steps o S - PL .. o S - PL + K - 1;
//     steps before 0 and from TIN on are the zero padding.  The last input step of a sample
//     also writes the outputs that only the right padding completes; the next call starts the
//     next sample.  Each output channel is the Dense arithmetic of ops/dense.py on the window:
//     exact int64 products, + bias << BIAS_SHIFT, one wrap to ACC_BITS, round-shift by SHIFT and
//     saturate to OUT (rnn_fixed.h), then the fused ReLU.  The products: F::VECTOR, F::LANES output
//     channels per aie::mac (the weights' column block times the input code as a scalar operand,
//     UG1529 aie::mac(acc, vector, scalar)), the lanes read back as int32: exact, because the
//     planner proved every channel's sum of products below 2^31 in magnitude (front.vector_exact);
//     otherwise the same sums on the scalar unit.  The bias, wrap, rounding and saturation are
//     scalar code per channel either way.
// F is generated per design in rnn_config.h (namespace rnn_front).
#pragma once

#include <adf.h>

#include <cstdint>
#include <vector>

#include "aie_api/aie.hpp"
#include "rnn_fixed.h"
#include "rnn_kernels.h"

template <class F>
class SeqConv {
    using X = int32_t;
    using W = typename F::W;
    using V = typename F::V;  // an input code as the vector MAC's scalar operand
    static constexpr int L = F::LANES;
    alignas(32) W w_[F::CIN * F::K * F::COUTL];  // [(c K + j) COUTL + o]: the im2col patch order, channels padded
    int32_t b_[F::COUT];
    X ring_[F::K * F::CIN];  // input step i at slot i % K
    int t_ = 0;  // input steps of this sample read
    int o_ = 0;  // output steps of this sample written

    X at(int i, int c) const {
        if (i < 0 || i >= F::TIN) return X(0);
        return ring_[(i % F::K) * F::CIN + c];
    }

    // Every channel's sum of products over the window starting at input step i0.
    void products(int i0, int64_t* sums) const {
        if constexpr (F::VECTOR) {
            for (int g = 0; g < F::COUTL / L; ++g) {
                aie::accum<rnn_int_acc<V, W>, L> acc = aie::zeros<rnn_int_acc<V, W>, L>();
                for (int c = 0; c < F::CIN; ++c)
                    for (int j = 0; j < F::K; ++j) chess_prepare_for_pipelining {
                            const aie::vector<W, L> w = aie::load_v<L>(w_ + (c * F::K + j) * F::COUTL + g * L);
                            acc = aie::mac(acc, w, static_cast<V>(at(i0 + j, c)));
                        }
                const aie::vector<int32, L> lanes = acc.template to_vector<int32>(0);
                for (int l = 0; l < L; ++l) sums[g * L + l] = lanes.get(l);
            }
        } else {
            for (int oc = 0; oc < F::COUT; ++oc) {
                int64_t s = 0;
                for (int c = 0; c < F::CIN; ++c)
                    for (int j = 0; j < F::K; ++j)
                        s += int64_t(at(i0 + j, c)) * int64_t(w_[(c * F::K + j) * F::COUTL + oc]);
                sums[oc] = s;
            }
        }
    }

    void write_output(output_stream<X>* out, int o) {
        int64_t sums[F::COUTL];
        products(o * F::S - F::PL, sums);
        for (int oc = 0; oc < F::COUT; ++oc) {
            const int64_t s = rnn::wrap(sums[oc] + (int64_t(b_[oc]) << F::BIAS_SHIFT), F::ACC_BITS, true);
            int64_t y = rnn::saturate(rnn::round_shift(s, F::SHIFT, F::OUT.rnd), F::OUT);
            if (F::RELU && y < 0) y = 0;
            writeincr(out, X(y));
        }
        for (int oc = F::COUT; oc < F::COUTP; ++oc) writeincr(out, X(0));
    }

public:
    SeqConv(const std::vector<W>& w, const std::vector<int32_t>& b) {
        for (int i = 0; i < F::CIN * F::K * F::COUTL; ++i) w_[i] = i < static_cast<int>(w.size()) ? w[i] : W(0);
        for (int i = 0; i < F::COUT; ++i) b_[i] = i < static_cast<int>(b.size()) ? b[i] : 0;
        for (int i = 0; i < F::K * F::CIN; ++i) ring_[i] = X(0);
    }

    void run(input_stream<X>* in, output_stream<X>* out) {
        const int slot = (t_ % F::K) * F::CIN;
        for (int c = 0; c < F::CINP; ++c) {
            const X v = readincr(in);
            if (c < F::CIN) ring_[slot + c] = v;
        }
        ++t_;
        const bool last = t_ == F::TIN;
        while (o_ < F::TOUT) {
            const int need = o_ * F::S - F::PL + F::K - 1;  // the last input step output o_ reads
            if (need >= t_ && !last) break;
            write_output(out, o_);
            ++o_;
        }
        if (last) {
            t_ = 0;
            o_ = 0;
        }
    }

    static void registerKernelClass() { REGISTER_FUNCTION(SeqConv::run); }
};
