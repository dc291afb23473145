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

// Sources of port p whose rows of the current step are not all in yet (outside the merge loop).
template <class A>
int fsm_port_open(const collector<A>& col, int p) {
    int open = 0;
    for (int j = 0; j < A::PORT_N[p]; ++j)
        if (!col.done(A::PORT_SRC[p][j])) ++open;
    return open;
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
    // The packet-merge loop, flattened: one iteration reads exactly one beat (UG1399 "Pipelining
    // Loops": a pipelined loop unrolls the loops inside it, and a packet's word count, read from the
    // ID table at run time, is no unrollable bound).  State per beat: the words of the current packet
    // still to come (left; <= 0: the next beat is a header), its source (src, -1 for an unknown ID),
    // and the port's sources still short of rows this step (open, replacing the done check over the
    // port's sources).  It ends after the last beat of the packet that completes the port's last
    // open source, as the per-packet loop did.  PIPELINE under __SYNTHESIS__ only (g++ -Wall would
    // flag the unknown pragma); the collector's calls hold only constant-bound loops (SLOTS), which
    // the pipeline unrolls.
    for (int p = 0; p < A::NPORTS; ++p) {
        int open = fsm_port_open(col, p);
        int left = 0;
        int src = -1;
        while (left > 0 || open > 0) {
#ifdef __SYNTHESIS__
#pragma HLS PIPELINE II=1
#endif
            const ap_uint<64> beat = merged[p].read();
            const int lo = beat.range(31, 0).to_int();
            const int hi = beat.range(63, 32).to_int();
            const bool header = left <= 0;
            if (header) {
                src = A::ID_SRC[p][lo & 31];
                left = src >= 0 ? A::SRC_WORDS[src] : 1;
            }
            // a header beat carries word 0 in bits 63..32; a payload beat one word in bits 31..0 and
            // a second in bits 63..32 while the packet has more than one left (else zero fill)
            const bool second = !header && left > 1;
            if (src >= 0) {
                const bool was_done = col.done(src);
                col.accept(src, from_word<X>(header ? hi : lo));
                if (second) col.accept(src, from_word<X>(hi));
                if (!was_done && col.done(src)) --open;
            }
            left -= second ? 2 : 1;
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
