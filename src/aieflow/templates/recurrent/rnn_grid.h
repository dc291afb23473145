// The grid mapping of a recurrent layer with one tile per chain (GRU / LSTM; docs/recurrent.md "Grid
// mapping", issue 22): the hidden units in C::CHAINS chains of C::UNITS units each (the last chain's
// extra units are zero rows, never sent), and per chain
//
//   GridInput<C> (the W x partner): reads x_t from its input stream (the x PLIO, broadcast to every
//     partner), computes gx = W x_t + b for the chain's gate-stacked rows (CompactProduct, the compact
//     tile's column form and vector finish) and writes them on its output cascade, one step ahead of
//     the gate tile (the cascade blocks when the gate tile has not read the previous step's);
//   GridCell<C> (the gate tile): reads h_{t-1} of every unit from its packet input (one packet per
//     chain: header, then the chain's real units, from the one pktmerge of the chains' h outputs,
//     broadcast to every gate tile and the head tile; a packet's source from its ID), gx from the
//     cascade, computes gh = U h_{t-1} + b' for its rows over every unit of h (CompactProduct), runs
//     the gate math and state update of its units (C::Gates: recurrent/compact.py's vector gate math
//     generated for C::UNITS units, stride C::UNITS) and sends its units' new h as one packet;
//   GridHead<C> (one tile): reads every chain's packet each step (h of every unit) and, after the
//     layer's output steps, writes the layer's output: h, or the dense head's (C::Head: the compact
//     tile's head, rnn_vgates.h VHead or rnn_cell.h).
//
// A sequence's last h also reaches the gate tiles: they drop those packets at the next sequence's
// step 0 (h_{-1} = 0).  Numerics: the compact tile's, row by row (the same products, finish and gate
// math), so every mapping gives the emulator's codes.  Fixed point only (plan.py refuses a float grid).
#pragma once

#include <adf.h>

#include <vector>

#include "aie_api/aie.hpp"
#include "rnn_collect.h"  // rnn::to_word / from_word
#include "rnn_compact.h"  // CompactProduct, rnnv

// The chains' h packets on a tile's packet input, one per chain per step (its real units), in any order:
// the source from the packet ID (as getPacketid gives it for each input of the merge).
template <class C>
class GridPackets {
    int idmap_[32];
    bool mapped_ = false;

public:
    static int units_of(int chain) { return C::NH - chain * C::UNITS < C::UNITS ? C::NH - chain * C::UNITS : C::UNITS; }

    GridPackets() {
        for (int i = 0; i < 32; ++i) idmap_[i] = -1;
    }

    // Every chain's packet of one step: store(unit, word) for each unit it carries.
    template <class F>
    void read(input_pktstream* in, F store) {
        if (!mapped_) {
            for (int r = 0; r < C::CHAINS; ++r) idmap_[getPacketid(in, r) & 31] = r;
            mapped_ = true;
        }
        for (int p = 0; p < C::CHAINS; ++p) {
            const int src = idmap_[readincr(in) & 31];
            const int n = src >= 0 ? units_of(src) : 0;
            for (int j = 0; j < n; ++j) store(src * C::UNITS + j, readincr(in));
        }
    }
};

// gx of a chain on the cascade: C::GP int32 codes, C::CASC_LANES per cascade word (accumulator lanes hold
// int32 codes exactly).
template <class C>
class GridInput {
    using X = typename C::X;
    using WP = typename C::Wx;
    using WV = typename WP::V;
    using ACC = typename C::CAS;
    static constexpr int CL = C::CASC_LANES;
    CompactProduct<WP> w_;
    alignas(32) WV xv_[C::NX];
    alignas(aie::vector_decl_align) X gx_[C::GP];

public:
    GridInput(const std::vector<typename WP::W>& ww, const std::vector<X>& bw) : w_(ww, bw) {
        rnnv::zero(xv_, C::NX);
        rnnv::zero(gx_, C::GP);
    }

    void run(input_stream<X>* x_in, output_cascade<ACC>* gx_out) {
        rnnv::product_modes<C::VRND>();
        rnnv::read_vector<C::NX>(x_in, xv_);
        w_.compute(xv_, gx_);
        for (int i = 0; i < C::GPC; i += CL) {
            aie::accum<ACC, CL> a;
            a.from_vector(aie::load_v<CL>(gx_ + i), 0);
            writeincr(gx_out, a);
        }
    }

    static void registerKernelClass() { REGISTER_FUNCTION(GridInput::run); }
};

template <class C>
class GridCell {
    using X = typename C::X;
    using UP = typename C::U;
    using UV = typename UP::V;
    using ACC = typename C::CAS;
    static constexpr int CL = C::CASC_LANES;
    CompactProduct<UP> u_;
    rnnv::State<X, UV, C::NHP, C::NH> s_;  // the chain's units' h and c; h_{t-1} of every unit in U h's lane type
    alignas(aie::vector_decl_align) X gx_[C::GP];
    alignas(aie::vector_decl_align) X gh_[C::GP];
    GridPackets<C> in_;
    int chain_;
    int step_ = 0;
    bool fresh_ = true;  // no sequence before: no last h to drop

    void read_h(input_pktstream* in, bool keep) {
        in_.read(in, [&](int unit, int v) {
            if (keep) s_.hv[unit] = static_cast<UV>(rnn::from_word<X>(v));
        });
    }

public:
    GridCell(const std::vector<typename UP::W>& wu, const std::vector<X>& bu, int chain) : u_(wu, bu), chain_(chain) {
        rnnv::zero(gx_, C::GP);
        rnnv::zero(gh_, C::GP);
        s_.reset();
    }

    void run(input_cascade<ACC>* gx_in, input_pktstream* h_in, output_pktstream* h_out) {
        if (step_ == 0) {
            if (!fresh_) read_h(h_in, false);  // the previous sequence's last h: dropped (h_{-1} = 0)
        } else {
            read_h(h_in, true);
        }
        for (int i = 0; i < C::GPC; i += CL) aie::store_v(gx_ + i, readincr_v<CL>(gx_in).template to_vector<int32>(0));
        rnnv::product_modes<C::VRND>();
        u_.compute(s_.hv, gh_);
        C::Gates::step(gx_, gh_, s_.h, s_.c);
        const int n = GridPackets<C>::units_of(chain_);
        writeHeader(h_out, 0, getPacketid(h_out, 0));
        for (int j = 0; j < n; ++j) writeincr(h_out, rnn::to_word(s_.h[j]), j + 1 == n);
        if (step_ + 1 == C::STEPS) {
            s_.reset();
            step_ = 0;
            fresh_ = false;
        } else {
            ++step_;
        }
    }

    static void registerKernelClass() { REGISTER_FUNCTION(GridCell::run); }
};

template <class C>
class GridHead {
    using X = typename C::X;
    using Cell = typename C::Cell;
    alignas(aie::vector_decl_align) X h_[C::NHH];
    GridPackets<C> in_;
    int step_ = 0;

public:
    GridHead() { rnnv::zero(h_, C::NHH); }

    void run(input_pktstream* h_in, output_stream<X>* y_out) {
        in_.read(h_in, [&](int unit, int v) { h_[unit] = rnn::from_word<X>(v); });
        if (Cell::emits(step_)) {
            X y[Cell::NY];
            C::Head::output(h_, y);  // h, or the dense head (rnn_vgates.h VHead / rnn_cell.h)
            for (int i = 0; i < Cell::NY; ++i) writeincr(y_out, y[i]);
        }
        step_ = step_ + 1 == C::STEPS ? 0 : step_ + 1;
    }

    static void registerKernelClass() { REGISTER_FUNCTION(GridHead::run); }
};
