// PL aggregation FSM of one recurrent layer (hybrid mapping, shared/spec/gru-on-aie.md), called by
// the layer's HLS top function in pl/rnn_fsm.cpp: (1) blocking reads of the merged packet streams
// from the AI Engine, (2) packet ID decode (table of the route IDs), (3) activation tables and the
// gate update (A::Cell, rnn_cell.h), (4) h written back zero-padded to the lanes, and the layer's
// output (the next layer's x, or the dense head's output after the last step) on y_out.  One call
// = one time step; with ap_ctrl_none the top restarts forever (free-running).
// A 64-bit PLIO beat carries two 32-bit stream words, the first in bits 31..0; a packet starts on
// a new beat and its last beat is zero-filled when header + words is odd (assumed width
// conversion at the interface: TLAST closes the beat).  Row kernels send one word (one beat per
// packet), cascade chains their rows.  The state lives in static variables of this template, one
// set per layer (instantiation).
#pragma once

#include <ap_int.h>
#include <hls_stream.h>

#include <cstdint>

#include "rnn_collect.h"

namespace rnn {

template <class A>
bool fsm_port_done(const collector<A>& col, int p) {
    for (int j = 0; j < A::PORT_N[p]; ++j)
        if (!col.done(A::PORT_SRC[p][j])) return false;
    return true;
}

template <class X>
void fsm_write_words(hls::stream<ap_uint<64>>& s, const X* v, int n) {
    for (int i = 0; i < n; i += 2) {
        const uint64_t lo = static_cast<uint32_t>(to_word(v[i]));
        const uint64_t hi = i + 1 < n ? static_cast<uint32_t>(to_word(v[i + 1])) : 0u;
        s.write(ap_uint<64>(lo | (hi << 32)));
    }
}

template <class A>
void fsm_step(hls::stream<ap_uint<64>>* merged, hls::stream<ap_uint<64>>& h_out, hls::stream<ap_uint<64>>& y_out) {
    using X = typename A::X;
    using Cell = typename A::Cell;
    static collector<A> col;
    static X h[A::NHP];
    static X c[A::NH];
    static int step = 0;
    for (int p = 0; p < A::NPORTS; ++p) {
        while (!fsm_port_done(col, p)) {
            ap_uint<64> beat = merged[p].read();
            const int header = beat.range(31, 0).to_int();
            const int src = A::ID_SRC[p][header & 31];
            const int words = src >= 0 ? A::SRC_WORDS[src] : 1;
            if (src >= 0) col.accept(src, from_word<X>(beat.range(63, 32).to_int()));
            for (int w = 1; w < words; w += 2) {
                beat = merged[p].read();
                if (src >= 0) col.accept(src, from_word<X>(beat.range(31, 0).to_int()));
                if (src >= 0 && w + 1 < words) col.accept(src, from_word<X>(beat.range(63, 32).to_int()));
            }
        }
    }
    Cell::step(col.gx_now(), col.gh, h, c);
    col.next_step();
    if (Cell::emits(step)) {
        X y[Cell::NY];
        Cell::output(h, y);
        fsm_write_words(y_out, y, Cell::NY);
    }
    if (step + 1 < A::STEPS) {
        fsm_write_words(h_out, h, A::NHP);
        ++step;
    } else {
        for (int i = 0; i < A::NHP; ++i) h[i] = X(0);
        for (int i = 0; i < A::NH; ++i) c[i] = X(0);
        step = 0;
    }
}

}  // namespace rnn
