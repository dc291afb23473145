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
//     saturate to OUT (rnn_fixed.h), then the fused ReLU.  Scalar code (the window is small and
//     the layer after it is the bottleneck); the latency model costs it as the head's loops.
// F is generated per design in rnn_config.h (namespace rnn_front).
#pragma once

#include <adf.h>

#include <cstdint>
#include <vector>

#include "rnn_fixed.h"

template <class F>
class SeqConv {
    using X = int32_t;
    using W = typename F::W;
    W w_[F::CIN * F::K * F::COUT];  // [(c K + j) COUT + o]: the im2col patch order
    int32_t b_[F::COUT];
    X ring_[F::K * F::CIN];  // input step i at slot i % K
    int t_ = 0;  // input steps of this sample read
    int o_ = 0;  // output steps of this sample written

    X at(int i, int c) const {
        if (i < 0 || i >= F::TIN) return X(0);
        return ring_[(i % F::K) * F::CIN + c];
    }

    void write_output(output_stream<X>* out, int o) {
        const int i0 = o * F::S - F::PL;
        for (int oc = 0; oc < F::COUT; ++oc) {
            int64_t s = 0;
            for (int c = 0; c < F::CIN; ++c)
                for (int j = 0; j < F::K; ++j)
                    s += int64_t(at(i0 + j, c)) * int64_t(w_[(c * F::K + j) * F::COUT + oc]);
            s = rnn::wrap(s + (int64_t(b_[oc]) << F::BIAS_SHIFT), F::ACC_BITS, true);
            int64_t y = rnn::saturate(rnn::round_shift(s, F::SHIFT, F::OUT.rnd), F::OUT);
            if (F::RELU && y < 0) y = 0;
            writeincr(out, X(y));
        }
        for (int oc = F::COUT; oc < F::COUTP; ++oc) writeincr(out, X(0));
    }

public:
    SeqConv(const std::vector<W>& w, const std::vector<int32_t>& b) {
        for (int i = 0; i < F::CIN * F::K * F::COUT; ++i) w_[i] = i < static_cast<int>(w.size()) ? w[i] : W(0);
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
