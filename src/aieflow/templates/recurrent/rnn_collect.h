// Reassembling gate vectors from per-row packets, for the AIE aggregator and the PL FSM.
//
// Packet sources are kernels; source s computes rows SRC_BASE[s] .. SRC_BASE[s] + SRC_ROWS[s] - 1
// of the gate-stacked U h (SRC_IS_W[s] == false) or W x (true) product and sends them in order,
// one packet per row, so a source's packet count within a step is the row's position.  Packets of
// different sources arrive in any order (pktmerge arbitration).  W x kernels do not depend on h and
// may run ahead by up to two steps: their early rows are kept in the next slots.
// Plain C++ (AIE kernel, Vitis HLS and x86).
#pragma once

#include <cstring>

namespace rnn {

template <class A>
struct collector {
    using X = typename A::X;
    static constexpr int SLOTS = 3;
    X gh[A::GN];
    X gx[SLOTS][A::GN];
    int cnt_u[A::NSRC];
    int cnt_w[SLOTS][A::NSRC];
    int cur = 0;

    collector() { reset(); }
    void reset() {
        for (int s = 0; s < A::NSRC; ++s) {
            cnt_u[s] = 0;
            for (int k = 0; k < SLOTS; ++k) cnt_w[k][s] = 0;
        }
        for (int i = 0; i < A::GN; ++i) {
            gh[i] = X(0);
            for (int k = 0; k < SLOTS; ++k) gx[k][i] = X(0);
        }
        cur = 0;
    }
    // Returns false for a packet that fits no step (a source more than two steps ahead).
    bool accept(int src, X v) {
        const int rows = A::SRC_ROWS[src];
        const int base = A::SRC_BASE[src];
        if (!A::SRC_IS_W[src]) {
            if (cnt_u[src] >= rows) return false;
            gh[base + cnt_u[src]++] = v;
            return true;
        }
        for (int k = 0; k < SLOTS; ++k) {
            const int slot = (cur + k) % SLOTS;
            if (cnt_w[slot][src] < rows) {
                gx[slot][base + cnt_w[slot][src]++] = v;
                return true;
            }
        }
        return false;
    }
    bool done(int src) const {
        return A::SRC_IS_W[src] ? cnt_w[cur][src] == A::SRC_ROWS[src] : cnt_u[src] == A::SRC_ROWS[src];
    }
    const X* gx_now() const { return gx[cur]; }
    void next_step() {
        for (int s = 0; s < A::NSRC; ++s) {
            cnt_u[s] = 0;
            cnt_w[cur][s] = 0;
        }
        cur = (cur + 1) % SLOTS;
    }
};

template <typename X>
inline X from_word(int w) {
    X v;
    std::memcpy(&v, &w, sizeof v);
    return v;
}
template <typename X>
inline int to_word(X v) {
    int w;
    std::memcpy(&w, &v, sizeof w);
    return w;
}

}  // namespace rnn
