// AI Engine kernels of a recurrent layer (GRU / LSTM) mapped row-wise (shared/spec/gru-on-aie.md):
//
//   RowKernel<C>: C::ROWS max consecutive rows of one gate of U h (recurrent) or W x (input)
//     over the whole vector, which arrives by stream broadcast and is kept in local memory; one
//     32-bit result per row, sent as a packet (header with the route's ID + one word).  Free-running:
//     one call per time step, forever.  A recurrent kernel starts every sequence from h = 0 without
//     reading (the aggregator sends h only between steps), so nothing waits on an initial token.
//     fp32: lanes of aie::mac (accfloat), reduced with aie::reduce_add, then + bias.  bf16 (C::FP32 with
//     W = V = bfloat16): the same on bf16 lanes (products exact in fp32, sums fp32 in accfloat); the
//     vector arrives as float words holding bf16 values and is kept as bfloat16.
//     Fixed point: hls4ml's order, each product cast to the accumulator type and each partial sum
//     cast (rnn_fixed.h), from the bias cast to the accumulator; or, where recurrent/vector.py
//     proves it bit-exact (C::VECTOR), lanes of aie::mac (products on the accumulator's grid) or
//     aie::mul + per-lane shift-round (C::SHIFT > 0 bits, the accumulator's rounding mode) and int32
//     adds, the lanes reduced, then the bias cast and one overflow on the scalar unit.
//   Aggregator1<A> / Aggregator2<A>: reads the merged packet streams of one step from one or two
//     input ports (a packet is a header and A::SRC_WORDS[source] words: 1 from a row kernel, the
//     chain's rows from a cascade chain, rnn_cascade.h), reorders rows by packet ID
//     (rnn_collect.h), applies the gate math (A::Cell, generated per layer in rnn_cell.h),
//     broadcasts the new h (zero-padded) to the U kernels and writes the layer's output (the next
//     layer's x, or the dense head's output) on its output stream.
//   Aggregator1H<A> / Aggregator2H<A> and AggOutput<A>: the same where a core has one output stream
//     port (AIE-ML / AIE-MLv2, catalog stream_out_ports): the aggregator writes h after every step,
//     the last included, on its one output port, broadcast to the U kernels (which drop the last h
//     of a sequence at the next sequence's step 0, C::H_LAST) and to AggOutput on its own tile, which
//     applies emits / output (the next layer's x, or the dense head) to the same h words.
// The C / A configuration structs are generated per design and layer in rnn_config.h.
#pragma once

#include <adf.h>

#include <type_traits>
#include <vector>

#include "aie_api/aie.hpp"
#include "rnn_collect.h"
#include "rnn_fixed.h"

// The AIE API rounding mode of an rnn::rounding (rnn_fixed.h), for the vector_round kernels' per-lane
// shift-round-saturate (UG1529 aie::rounding_mode; symmetric_floor / symmetric_ceil exist on AIE-ML only,
// and the planner picks a vector kernel only for modes the device has).
constexpr aie::rounding_mode rnn_aie_rounding(int r) {
    switch (r) {
        case rnn::R_CEIL: return aie::rounding_mode::ceil;
        case rnn::R_POS_INF: return aie::rounding_mode::positive_inf;
        case rnn::R_NEG_INF: return aie::rounding_mode::negative_inf;
        case rnn::R_SYM_INF: return aie::rounding_mode::symmetric_inf;
        case rnn::R_SYM_ZERO: return aie::rounding_mode::symmetric_zero;
        case rnn::R_CONV_EVEN: return aie::rounding_mode::conv_even;
        case rnn::R_CONV_ODD: return aie::rounding_mode::conv_odd;
#if __AIE_ARCH__ >= 20
        case rnn::R_SYM_FLOOR: return aie::rounding_mode::symmetric_floor;
        case rnn::R_SYM_CEIL: return aie::rounding_mode::symmetric_ceil;
#endif
        default: return aie::rounding_mode::floor;
    }
}

// Integer accumulator of the fixed-point vector kernels: the native lanes for the operand pair
// (AIE: acc48 for 8/16-bit operands, acc80 with a 32-bit one; AIE-ML: acc32 for 8-bit weights with
// narrow vectors, acc64 otherwise).  recurrent/vector.py bounds every row's sum below 2^31.
template <typename V, typename W>
using rnn_int_acc = std::conditional_t<(__AIE_ARCH__ < 20),
                                       std::conditional_t<(sizeof(V) == 4 || sizeof(W) == 4), acc80, acc48>,
                                       std::conditional_t<(sizeof(V) <= 2 && sizeof(W) == 1), acc32, acc64>>;

template <class C>
class RowKernel {
    using W = typename C::W;
    using X = typename C::X;
    using V = typename C::V;
    static constexpr int L = C::LANES;
    static constexpr bool VEC = C::FP32 || C::VECTOR;  // lanes of aie::mac / aie::mul, else hls4ml's scalar loop
    // The running sum of a row: float or integer accumulator lanes, or (vector_round) int32 lanes of
    // products already rounded to the accumulator's grid.
    using Sum = std::conditional_t<C::FP32, aie::accum<accfloat, L>,
                                   std::conditional_t<(C::SHIFT > 0), aie::vector<int32, L>,
                                                      aie::accum<rnn_int_acc<V, W>, L>>>;
    alignas(32) W w_[C::ROWS * C::KP];
    X b_[C::ROWS];
    alignas(32) V v_[C::KP];
    int rows_;
    int step_ = 0;
    bool started_ = false;  // H_LAST: a previous sequence's last h is on the stream at step 0

    static Sum zero() {
        if constexpr (C::FP32) return aie::zeros<accfloat, L>();
        else if constexpr (C::SHIFT > 0) return aie::zeros<int32, L>();
        else return aie::zeros<rnn_int_acc<V, W>, L>();
    }

    // Chunk c (columns c L .. c L + L - 1) of row r into the running sum.
    Sum chunk(const Sum& s, int r, int c) const {
        const aie::vector<V, L> x = aie::load_v<L>(v_ + c * L);
        const aie::vector<W, L> w = aie::load_v<L>(w_ + r * C::KP + c * L);
        if constexpr (C::SHIFT > 0) return aie::add(s, aie::mul(x, w).template to_vector<int32>(C::SHIFT));
        else return aie::mac(s, x, w);
    }

    // The row's result from its lanes: fp32 reduce + bias; fixed point: the lanes' exact sum (on the
    // product grid, or already rounded), then the bias cast and one overflow of the accumulator type.
    X finish(const Sum& s, int r) const {
        if constexpr (C::FP32) {
            const float t = aie::reduce_add(s.template to_vector<float>());
            return t + b_[r];
        } else {
            int64_t t;
            if constexpr (C::SHIFT > 0) t = aie::reduce_add(s);
            else t = static_cast<int64_t>(aie::reduce_add(s.template to_vector<int32>(0))) * (int64_t(1) << -C::SHIFT);
            return static_cast<X>(rnn::cast(rnn::cast(b_[r], C::BFRAC, C::ACC) + t, C::ACC.frac, C::ACC));
        }
    }

    X dot(int r) const {
        if constexpr (VEC) {
            Sum s = zero();
            for (int c = 0; c < C::KP / L; ++c) chess_prepare_for_pipelining { s = chunk(s, r, c); }
            return finish(s, r);
        } else {
            int64_t acc = rnn::cast(b_[r], C::BFRAC, C::ACC);
            for (int k = 0; k < C::K; ++k) {
                const int64_t p = static_cast<int64_t>(v_[k]) * static_cast<int64_t>(w_[r * C::KP + k]);
                acc = rnn::cast(acc + rnn::cast(p, C::PFRAC, C::ACC), C::ACC.frac, C::ACC);
            }
            return static_cast<X>(acc);
        }
    }

    // Chunk c of the broadcast vector into local memory: floats and scalar-kernel codes as they come,
    // vector-kernel codes narrowed to the MAC's lane type one word per cycle (the stream's rate).
    void read_chunk(input_stream<X>* in, int c) {
        if constexpr (C::VECTOR || (C::FP32 && !std::is_same_v<V, X>)) {  // fixed-point lanes, or bf16 from float words
            for (int l = 0; l < L; ++l) v_[c * L + l] = static_cast<V>(readincr(in));
        } else {
            const aie::vector<X, L> v = readincr_v<L>(in);
            aie::store_v(v_ + c * L, v);
        }
    }

    static void send(output_pktstream* out, uint32 id, X value) {
        writeHeader(out, 0, id);
        writeincr(out, rnn::to_word(value), true);
    }

public:
    RowKernel(const std::vector<W>& w, const std::vector<X>& b, int rows) : rows_(rows) {
        for (int i = 0; i < C::ROWS * C::KP; ++i) w_[i] = i < static_cast<int>(w.size()) ? w[i] : W(0);
        for (int i = 0; i < C::ROWS; ++i) b_[i] = i < static_cast<int>(b.size()) ? b[i] : X(0);
        for (int i = 0; i < C::KP; ++i) v_[i] = V(0);
    }

    void run(input_stream<X>* in, output_pktstream* out) {
        if constexpr (C::VECTOR) aie::set_rounding(rnn_aie_rounding(C::VRND));
        const uint32 id = getPacketid(out, 0);
        int r = 0;
        if (C::RECURRENT && step_ == 0) {
            if (C::H_LAST && started_)  // the previous sequence's last h (its output kernel's): dropped
                for (int i = 0; i < C::KP; ++i) (void)readincr(in);
            started_ = true;
            for (int i = 0; i < C::KP; ++i) v_[i] = V(0);  // h_{-1} = 0
        } else if constexpr (VEC) {
            // the first row multiply-accumulates each chunk as it arrives (stream-bound); later rows
            // reuse the vector from local memory
            Sum s = zero();
            for (int c = 0; c < C::KP / L; ++c) {
                read_chunk(in, c);
                s = chunk(s, 0, c);
            }
            if (rows_ > 0) {
                send(out, id, finish(s, 0));
                r = 1;
            }
        } else {
            for (int c = 0; c < C::KP / L; ++c) read_chunk(in, c);
        }
        for (; r < rows_; ++r) send(out, id, dot(r));
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
    // One output port (AggregatorNH): h after every step, the last included; AggOutput does the rest.
    void finish_h(output_stream<X>* h_out) {
        A::Cell::step(col_.gx_now(), col_.gh, h_, c_);
        col_.next_step();
        for (int i = 0; i < A::NHP; ++i) writeincr(h_out, h_[i]);
        if (step_ + 1 < A::STEPS) {
            ++step_;
        } else {
            for (int i = 0; i < A::NHP; ++i) h_[i] = X(0);
            for (int i = 0; i < A::NH; ++i) c_[i] = X(0);
            step_ = 0;
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

// The aggregator of a core with one output stream port: h only, broadcast (AggOutput reads it too).
template <class A>
class Aggregator1H : public AggregatorCore<A> {
public:
    void run(input_pktstream* in0, output_stream<typename A::X>* h_out) {
        if (!this->mapped_) {
            this->map_ids(in0, 0);
            this->mapped_ = true;
        }
        this->read_port(in0, 0);
        this->finish_h(h_out);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(Aggregator1H::run); }
};

template <class A>
class Aggregator2H : public AggregatorCore<A> {
public:
    void run(input_pktstream* in0, input_pktstream* in1, output_stream<typename A::X>* h_out) {
        if (!this->mapped_) {
            this->map_ids(in0, 0);
            this->map_ids(in1, 1);
            this->mapped_ = true;
        }
        this->read_port(in0, 0);
        this->read_port(in1, 1);
        this->finish_h(h_out);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(Aggregator2H::run); }
};

// The layer's output kernel beside an AggregatorNH: reads the broadcast h of every step (A::NHP
// words) and, where A::Cell::emits says so, writes A::Cell::output of it (h zero-padded for the
// next layer, or the dense head): the same function of the same h as the two-port aggregator.
template <class A>
class AggOutput {
    using X = typename A::X;
    X h_[A::NHP];
    int step_ = 0;

public:
    AggOutput() {
        for (int i = 0; i < A::NHP; ++i) h_[i] = X(0);
    }
    void run(input_stream<X>* h_in, output_stream<X>* y_out) {
        using Cell = typename A::Cell;
        for (int i = 0; i < A::NHP; ++i) h_[i] = readincr(h_in);
        if (Cell::emits(step_)) {
            X y[Cell::NY];
            Cell::output(h_, y);
            for (int i = 0; i < Cell::NY; ++i) writeincr(y_out, y[i]);
        }
        step_ = step_ + 1 == A::STEPS ? 0 : step_ + 1;
    }
    static void registerKernelClass() { REGISTER_FUNCTION(AggOutput::run); }
};
