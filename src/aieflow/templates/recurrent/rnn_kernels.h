// AI Engine kernels of a recurrent layer (GRU / LSTM) mapped row-wise (shared/spec/gru-on-aie.md):
//
//   RowKernel<C>: C::ROWS max consecutive rows of one gate of U h (recurrent) or W x (input)
//     over the whole vector, which arrives by stream broadcast and is kept in local memory; one
//     32-bit result per row, sent as a packet (header with the route's ID + one word).  Free-running:
//     one call per time step, forever.  A recurrent kernel starts every sequence from h = 0 without
//     reading (the aggregator sends h only between steps), so nothing waits on an initial token.
//     fp32: lanes of aie::mac (accfloat), reduced with aie::reduce_add, then + bias.
//     Fixed point: hls4ml's order, each product cast to the accumulator type and each partial sum
//     cast (rnn_fixed.h), from the bias cast to the accumulator.
//   Aggregator1<A> / Aggregator2<A>: reads the merged packet streams of one step from one or two
//     input ports (a packet is a header and A::SRC_WORDS[source] words: 1 from a row kernel, the
//     chain's rows from a cascade chain, rnn_cascade.h), reorders rows by packet ID
//     (rnn_collect.h), applies the gate math (A::Cell, generated per layer in rnn_cell.h),
//     broadcasts the new h (zero-padded) to the U kernels and writes the layer's output (the next
//     layer's x, or the dense head's output) on its output stream.
// The C / A configuration structs are generated per design and layer in rnn_config.h.
#pragma once

#include <adf.h>

#include <vector>

#include "aie_api/aie.hpp"
#include "rnn_collect.h"
#include "rnn_fixed.h"

template <class C>
class RowKernel {
    using W = typename C::W;
    using X = typename C::X;
    alignas(32) W w_[C::ROWS * C::KP];
    X b_[C::ROWS];
    alignas(32) X v_[C::KP];
    int rows_;
    int step_ = 0;

    X dot(int r) const {
        if constexpr (C::FP32) {
            aie::accum<accfloat, C::LANES> acc = aie::zeros<accfloat, C::LANES>();
            for (int c = 0; c < C::KP / C::LANES; ++c)
                chess_prepare_for_pipelining {
                    acc = aie::mac(acc, aie::load_v<C::LANES>(v_ + c * C::LANES),
                                   aie::load_v<C::LANES>(w_ + r * C::KP + c * C::LANES));
                }
            const float s = aie::reduce_add(acc.template to_vector<float>());
            return s + b_[r];
        } else {
            int64_t acc = rnn::cast(b_[r], C::BFRAC, C::ACC);
            for (int k = 0; k < C::K; ++k) {
                const int64_t p = static_cast<int64_t>(v_[k]) * static_cast<int64_t>(w_[r * C::KP + k]);
                acc = rnn::cast(acc + rnn::cast(p, C::PFRAC, C::ACC), C::ACC.frac, C::ACC);
            }
            return static_cast<X>(acc);
        }
    }

public:
    RowKernel(const std::vector<W>& w, const std::vector<X>& b, int rows) : rows_(rows) {
        for (int i = 0; i < C::ROWS * C::KP; ++i) w_[i] = i < static_cast<int>(w.size()) ? w[i] : W(0);
        for (int i = 0; i < C::ROWS; ++i) b_[i] = i < static_cast<int>(b.size()) ? b[i] : X(0);
        for (int i = 0; i < C::KP; ++i) v_[i] = X(0);
    }

    void run(input_stream<X>* in, output_pktstream* out) {
        if (C::RECURRENT && step_ == 0) {
            for (int i = 0; i < C::KP; ++i) v_[i] = X(0);  // h_{-1} = 0: nothing to read
        } else {
            for (int c = 0; c < C::KP / C::LANES; ++c) {
                const aie::vector<X, C::LANES> v = readincr_v<C::LANES>(in);
                aie::store_v(v_ + c * C::LANES, v);
            }
        }
        const uint32 id = getPacketid(out, 0);
        for (int r = 0; r < rows_; ++r) {
            writeHeader(out, 0, id);
            writeincr(out, rnn::to_word(dot(r)), true);
        }
        if (C::RECURRENT) step_ = step_ + 1 == C::STEPS ? 0 : step_ + 1;
    }

    static void registerKernelClass() { REGISTER_FUNCTION(RowKernel::run); }
};

template <class A>
class AggregatorCore {
protected:
    using X = typename A::X;
    rnn::collector<A> col_;
    X h_[A::NHP];
    X c_[A::NH];
    int step_ = 0;
    int idmap_[2][32];
    bool mapped_ = false;

    void map_ids(input_pktstream* in, int port) {
        for (int i = 0; i < 32; ++i) idmap_[port][i] = -1;
        for (int j = 0; j < A::PORT_N[port]; ++j) idmap_[port][getPacketid(in, j) & 31] = A::PORT_SRC[port][j];
    }
    bool port_done(int port) const {
        for (int j = 0; j < A::PORT_N[port]; ++j)
            if (!col_.done(A::PORT_SRC[port][j])) return false;
        return true;
    }
    void read_port(input_pktstream* in, int port) {
        while (!port_done(port)) {
            const int header = readincr(in);
            const int src = idmap_[port][header & 31];
            const int words = src >= 0 ? A::SRC_WORDS[src] : 1;  // row kernel: 1; cascade chain: its rows
            for (int w = 0; w < words; ++w) {
                const int value = readincr(in);
                if (src >= 0) col_.accept(src, rnn::from_word<X>(value));
            }
        }
    }
    void finish(output_stream<X>* h_out, output_stream<X>* y_out) {
        using Cell = typename A::Cell;
        Cell::step(col_.gx_now(), col_.gh, h_, c_);
        col_.next_step();
        if (Cell::emits(step_)) {
            X y[Cell::NY];
            Cell::output(h_, y);
            for (int i = 0; i < Cell::NY; ++i) writeincr(y_out, y[i]);
        }
        if (step_ + 1 < A::STEPS) {
            for (int i = 0; i < A::NHP; ++i) writeincr(h_out, h_[i]);
            ++step_;
        } else {
            for (int i = 0; i < A::NHP; ++i) h_[i] = X(0);
            for (int i = 0; i < A::NH; ++i) c_[i] = X(0);
            step_ = 0;
        }
    }

public:
    AggregatorCore() {
        for (int i = 0; i < A::NHP; ++i) h_[i] = X(0);
        for (int i = 0; i < A::NH; ++i) c_[i] = X(0);
    }
};

template <class A>
class Aggregator1 : public AggregatorCore<A> {
public:
    void run(input_pktstream* in0, output_stream<typename A::X>* h_out, output_stream<typename A::X>* y_out) {
        if (!this->mapped_) {
            this->map_ids(in0, 0);
            this->mapped_ = true;
        }
        this->read_port(in0, 0);
        this->finish(h_out, y_out);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(Aggregator1::run); }
};

template <class A>
class Aggregator2 : public AggregatorCore<A> {
public:
    void run(input_pktstream* in0, input_pktstream* in1, output_stream<typename A::X>* h_out,
             output_stream<typename A::X>* y_out) {
        if (!this->mapped_) {
            this->map_ids(in0, 0);
            this->map_ids(in1, 1);
            this->mapped_ = true;
        }
        this->read_port(in0, 0);
        this->read_port(in1, 1);
        this->finish(h_out, y_out);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(Aggregator2::run); }
};
