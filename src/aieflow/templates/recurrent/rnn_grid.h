// The grid mapping of a recurrent layer (GRU / LSTM; docs/recurrent.md "Grid mapping", issue 22): the hidden
// units in C::CHAINS chains of C::UNITS units each (the last chain's extra units are zero rows, never sent),
// each chain a cascade over U h's columns in C::COLS blocks of C::KC units of h:
//
//   GridInput<C> (the W x partner, at the chain's head): reads x_t from its input stream (the x PLIO,
//     broadcast to every partner), computes gx = W x_t + b for the chain's gate-stacked rows (CompactProduct,
//     the compact tile's column form and vector finish) and writes them on its output cascade, one step ahead
//     (the cascade blocks when the next tile has not read the previous step's);
//   GridPart<C> (C::COLS - 1 per chain, column blocks 0 .. COLS - 2): passes gx on first (it does not wait
//     for h), then reads h_{t-1} (every chain's packet, keeping its block's units), computes the exact sums of
//     its rows over its block (CompactProduct::sums, unfinished), adds the sums of the blocks before it from
//     its input cascade and writes them on its output cascade;
//   GridCell<C> (the gate tile, the chain's last block): reads h_{t-1} the same way, gx and the other blocks'
//     sums from the cascade, computes gh = U h_{t-1} + b' for its rows (its block's terms + the carried sums,
//     then the finish), runs the gate math and state update of its units (C::Gates: recurrent/compact.py's
//     vector gate math generated for C::UNITS units, stride C::UNITS) and sends its units' new h as one packet
//     (from the one pktmerge of the chains' h outputs, broadcast to every tile of every chain and the head
//     tile; or, C::BLOCK_MERGES, into its column block's pktmerge, broadcast to that block's tiles only, and
//     into the head tile's merge of every chain; a packet's source from its ID);
//   GridHead<C> (one tile): reads every chain's packet each step (h of every unit) and, after the layer's
//     output steps, writes the layer's output: h, or the dense head's (C::Head: the compact tile's head,
//     rnn_vgates.h VHead or rnn_cell.h).
//
// A sequence's last h also reaches the chain tiles: they drop those packets at the next sequence's step 0
// (h_{-1} = 0).  Numerics: the compact tile's, row by row (the same products, finish and gate math; a row's
// terms summed per block in int32 lanes and the blocks' sums added, which wraps as the one sum does), so every
// mapping gives the emulator's codes.  Fixed point only (plan.py refuses a float grid, and C::COLS > 1 with a
// scalar product).
#pragma once

#include <adf.h>

#include <vector>

#include "aie_api/aie.hpp"
#include "rnn_collect.h"  // rnn::to_word / from_word
#include "rnn_compact.h"  // CompactProduct, rnnv

// The h packets of the chains [first, first + count) on a tile's packet input (the inputs of its merge, in
// chain order), one per chain per step (its real units), in any order: the source from the packet ID (as
// getPacketid gives it for each input of the merge).
template <class C>
class GridPackets {
    int idmap_[32];
    int first_, count_;
    bool mapped_ = false;

public:
    static int units_of(int chain) { return C::NH - chain * C::UNITS < C::UNITS ? C::NH - chain * C::UNITS : C::UNITS; }

    explicit GridPackets(int first = 0, int count = C::CHAINS) : first_(first), count_(count) {
        for (int i = 0; i < 32; ++i) idmap_[i] = -1;
    }

    // Each of its chains' packets of one step: store(unit, word) for each unit it carries.
    template <class F>
    void read(input_pktstream* in, F store) {
        if (!mapped_) {
            for (int r = 0; r < count_; ++r) idmap_[getPacketid(in, r) & 31] = first_ + r;
            mapped_ = true;
        }
        for (int p = 0; p < count_; ++p) {
            const int src = idmap_[readincr(in) & 31];
            const int n = src >= 0 ? units_of(src) : 0;
            for (int j = 0; j < n; ++j) store(src * C::UNITS + j, readincr(in));
        }
    }
};

// h_{t-1} as a chain tile keeps it: the units of its column block [c0, c0 + C::KC) in the U h product's lane
// type, from every chain's packet, or with C::BLOCK_MERGES (every block holds whole chains: its own merge) from
// its block's chains' packets only (step 0 of a sequence: the previous sequence's last h, dropped).
template <class C, typename UV>
class GridBlock {
    using X = typename C::X;
    static constexpr int PER = C::BLOCK_MERGES ? C::KC / C::UNITS : C::CHAINS;  // chains per block's merge
    static int first(int block) { return C::BLOCK_MERGES ? block * PER : 0; }
    static int count(int block) { return C::CHAINS - first(block) < PER ? C::CHAINS - first(block) : PER; }
    GridPackets<C> in_;
    int c0_;
    bool fresh_ = true;  // no sequence before: no last h to drop

public:
    explicit GridBlock(int block) : in_(first(block), count(block)), c0_(block * C::KC) {}

    void read(input_pktstream* in, int step, UV* hv) {
        if (step == 0 && fresh_) return;
        const bool keep = step != 0;
        in_.read(in, [&](int unit, int v) {
            const int j = unit - c0_;
            if (keep && j >= 0 && j < C::KC) hv[j] = static_cast<UV>(rnn::from_word<X>(v));
        });
    }

    void ended() { fresh_ = false; }
};

// Cascade words of int32 codes (C::CASC_LANES per word of the widest accumulator: exact).
template <class C>
inline void cascade_out(output_cascade<typename C::CAS>* out, const typename C::X* v) {
    for (int i = 0; i < C::GPC; i += C::CASC_LANES) {
        aie::accum<typename C::CAS, C::CASC_LANES> a;
        a.from_vector(aie::load_v<C::CASC_LANES>(v + i), 0);
        writeincr(out, a);
    }
}
template <class C>
inline void cascade_in(input_cascade<typename C::CAS>* in, typename C::X* v) {
    for (int i = 0; i < C::GPC; i += C::CASC_LANES)
        aie::store_v(v + i, readincr_v<C::CASC_LANES>(in).template to_vector<int32>(0));
}

// gx of a chain on the cascade: C::GP int32 codes, C::CASC_LANES per cascade word (accumulator lanes hold
// int32 codes exactly).
template <class C>
class GridInput {
    using X = typename C::X;
    using WP = typename C::Wx;
    using WV = typename WP::V;
    using ACC = typename C::CAS;
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
        cascade_out<C>(gx_out, gx_);
    }

    static void registerKernelClass() { REGISTER_FUNCTION(GridInput::run); }
};

// One of a chain's C::COLS - 1 partial-sum tiles (column block `block`, 0 .. COLS - 2).
template <class C>
class GridPart {
    using X = typename C::X;
    using UP = typename C::U;
    using UV = typename UP::V;
    using ACC = typename C::CAS;
    CompactProduct<UP> u_;
    alignas(32) UV hv_[C::KC];
    alignas(aie::vector_decl_align) X t_[C::GP];  // gx passing on, then the partial sums
    alignas(aie::vector_decl_align) X s_[C::GP];
    GridBlock<C, UV> h_;
    int block_;
    int step_ = 0;

public:
    GridPart(const std::vector<typename UP::W>& wu, int block)
        : u_(wu, std::vector<X>()), h_(block), block_(block) {
        rnnv::zero(hv_, C::KC);
        rnnv::zero(t_, C::GP);
        rnnv::zero(s_, C::GP);
    }

    void run(input_cascade<ACC>* in, input_pktstream* h_in, output_cascade<ACC>* out) {
        cascade_in<C>(in, t_);  // gx of this step, passed on before h is waited for
        cascade_out<C>(out, t_);
        h_.read(h_in, step_, hv_);
        if (step_ == 0) rnnv::zero(hv_, C::KC);  // h_{-1} = 0
        if (block_ > 0) cascade_in<C>(in, t_);  // the blocks before this one
        rnnv::product_modes<C::VRND>();
        u_.sums(hv_, s_, block_ > 0 ? t_ : nullptr);
        cascade_out<C>(out, s_);
        if (step_ + 1 == C::STEPS) {
            step_ = 0;
            h_.ended();
        } else {
            ++step_;
        }
    }

    static void registerKernelClass() { REGISTER_FUNCTION(GridPart::run); }
};

template <class C>
class GridCell {
    using X = typename C::X;
    using UP = typename C::U;
    using UV = typename UP::V;
    using ACC = typename C::CAS;
    CompactProduct<UP> u_;
    rnnv::State<X, UV, C::NHP, C::KC> s_;  // the chain's units' h and c; h_{t-1} of its column block in U h's lane type
    alignas(aie::vector_decl_align) X gx_[C::GP];
    alignas(aie::vector_decl_align) X gh_[C::GP];
    alignas(aie::vector_decl_align) X carry_[C::COLS > 1 ? C::GP : 1];  // the other blocks' sums
    GridBlock<C, UV> h_;
    int chain_;
    int step_ = 0;

public:
    GridCell(const std::vector<typename UP::W>& wu, const std::vector<X>& bu, int chain, int block)
        : u_(wu, bu), h_(block), chain_(chain) {
        rnnv::zero(gx_, C::GP);
        rnnv::zero(gh_, C::GP);
        rnnv::zero(carry_, C::COLS > 1 ? C::GP : 1);
        s_.reset();
    }

    void run(input_cascade<ACC>* gx_in, input_pktstream* h_in, output_pktstream* h_out) {
        h_.read(h_in, step_, s_.hv);
        cascade_in<C>(gx_in, gx_);
        if constexpr (C::COLS > 1) cascade_in<C>(gx_in, carry_);
        rnnv::product_modes<C::VRND>();
        u_.compute(s_.hv, gh_, C::COLS > 1 ? carry_ : nullptr);
        C::Gates::step(gx_, gh_, s_.h, s_.c);
        const int n = GridPackets<C>::units_of(chain_);
        writeHeader(h_out, 0, getPacketid(h_out, 0));
        for (int j = 0; j < n; ++j) writeincr(h_out, rnn::to_word(s_.h[j]), j + 1 == n);
        if (step_ + 1 == C::STEPS) {
            s_.reset();
            step_ = 0;
            h_.ended();
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
