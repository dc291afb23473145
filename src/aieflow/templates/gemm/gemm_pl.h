// aieflow GotoBLAS GEMM: programmable-logic side (Vitis HLS C++), shared by the PL kernels.
//
// Ac (mc x kc) lives in UltraRAM and Bc (kc x nc) in Block RAM, inside the mover kernel; they are
// packed into the micro-panel layouts the AI Engine kernel reads with unit stride (gemm_tile.h), with
// zeros outside the problem.  All AIE <-> PL traffic is 128-bit PLIO words; element i of a word sits
// in bits [w*i, w*i + w) (the AI Engine stream delivers the low bits first: aieflow's assumption).
//
// Built by v++ for the PL, and as plain C++ against aieflow's x86 shim of hls_stream.h / ap_int.h.
#pragma once

#include <ap_int.h>
#include <hls_stream.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gemm_config.h"

// HLS pragmas steer synthesis only; the x86 shim build leaves them out (UG1399 "Using #define with
// pragma directives" for the _Pragma form).
#if defined(AIEFLOW_SHIM)
#define GEMM_PRAGMA(x)
#else
#define GEMM_PRAGMA_SUB(x) _Pragma(#x)
#define GEMM_PRAGMA(x) GEMM_PRAGMA_SUB(x)
#endif

namespace gemm_pl {

using namespace gemm_cfg;
typedef ap_uint<PLIO_BITS> word_t;

enum mover_mode { PACK_B = 0, PACK_A = 1, STREAM_BLOCK = 2 };

template <unsigned Bytes>
struct bits_of;
template <>
struct bits_of<1> { typedef std::uint8_t type; };
template <>
struct bits_of<2> { typedef std::uint16_t type; };
template <>
struct bits_of<4> { typedef std::uint32_t type; };

// Raw bits of an element and back (memcpy: no type punning).
template <typename T>
inline std::uint64_t to_bits(T v) {
    typename bits_of<sizeof(T)>::type u;
    std::memcpy(&u, &v, sizeof(T));
    return u;
}
template <typename T>
inline T from_bits(std::uint64_t b) {
    const typename bits_of<sizeof(T)>::type u = static_cast<typename bits_of<sizeof(T)>::type>(b);
    T v;
    std::memcpy(static_cast<void*>(&v), &u, sizeof(T));  // void*: also for the x86 harness's bfloat16 (16 bits of storage)
    return v;
}

template <typename T>
inline T get_lane(const word_t& w, unsigned i) {
    const unsigned lo = 8 * sizeof(T) * i;
    return from_bits<T>(w.range(lo + 8 * sizeof(T) - 1, lo).to_uint64());
}
template <typename T>
inline void set_lane(word_t& w, unsigned i, T v) {
    const unsigned lo = 8 * sizeof(T) * i;
    w.range(lo + 8 * sizeof(T) - 1, lo) = to_bits(v);
}

// Bc = B[pc : pc + KC, jc : jc + NC] as micro-panels [NC / NR][KC / KS][CB][KS][NS].
inline void pack_b(const a_t* B, int n, int k, int jc, int pc, a_t* Bc) {
    for (unsigned q = 0; q < PANELS; ++q)
        for (unsigned p = 0; p < KC / KS; ++p)
            for (unsigned cb = 0; cb < CB; ++cb)
                for (unsigned kk = 0; kk < KS; ++kk)
                    for (unsigned jj = 0; jj < NS; ++jj) {
                        GEMM_PRAGMA(HLS PIPELINE II = 1)
                        const int row = pc + static_cast<int>(p * KS + kk);
                        const int col = jc + static_cast<int>(q * NR + cb * NS + jj);
                        Bc[(((q * (KC / KS) + p) * CB + cb) * KS + kk) * NS + jj] =
                            row < k && col < n ? B[static_cast<std::size_t>(row) * n + col] : a_t(0);
                    }
}

// Ac = A[ic : ic + MC, pc : pc + KC] as micro-panels [MC / MR][KC / KS][RB][MS][KS].
inline void pack_a(const a_t* A, int m, int k, int ic, int pc, a_t* Ac) {
    for (unsigned q = 0; q < MC / MR; ++q)
        for (unsigned p = 0; p < KC / KS; ++p)
            for (unsigned rb = 0; rb < RB; ++rb)
                for (unsigned i = 0; i < MS; ++i)
                    for (unsigned kk = 0; kk < KS; ++kk) {
                        GEMM_PRAGMA(HLS PIPELINE II = 1)
                        const int row = ic + static_cast<int>(q * MR + rb * MS + i);
                        const int col = pc + static_cast<int>(p * KS + kk);
                        Ac[(((q * (KC / KS) + p) * RB + rb) * MS + i) * KS + kk] =
                            row < m && col < k ? A[static_cast<std::size_t>(row) * k + col] : a_t(0);
                    }
}

// Elements -> PLIO words, lane 0 first.
struct word_writer {
    word_t w = 0;
    unsigned lanes = 0;
    void put(hls::stream<word_t>& s, a_t v) {
        set_lane(w, lanes, v);
        if (++lanes == A_PER_WORD) {
            s.write(w);
            w = 0;
            lanes = 0;
        }
    }
};

// Br of L4 step `panel` (zeros past the last micro-panel of the block).
inline void send_br(const a_t* Bc, unsigned panel, hls::stream<word_t>& s) {
    word_writer out;
    for (unsigned e = 0; e < KC * NR; ++e) {
        GEMM_PRAGMA(HLS PIPELINE II = 1)
        out.put(s, panel < PANELS ? Bc[panel * KC * NR + e] : a_t(0));
    }
}

// Ar for one k step of one micro-kernel: the row blocks of stream `st` of tile group `g`.
inline void send_ar(const a_t* Ac, unsigned g, unsigned st, unsigned round, unsigned p, hls::stream<word_t>& s) {
    const unsigned q = g * ROUNDS + round;  // micro-panel of Ac
    const unsigned per = RB / AR_STREAMS;
    word_writer out;
    for (unsigned rb = st * per; rb < (st + 1) * per; ++rb)
        for (unsigned e = 0; e < MS * KS; ++e) {
            GEMM_PRAGMA(HLS PIPELINE II = 1)
            out.put(s, Ac[((q * (KC / KS) + p) * RB + rb) * MS * KS + e]);
        }
}

// One micro-kernel's Cr from tile (g, j) of L4 step `step`, added into C (clipped to m x n).
// SERIAL_WRITEBACK: C += Cr for every block (the published epilogue: read C, add, write C);
// otherwise the first k block (pc == 0) writes Cr and later ones add.
inline void collect_cr(c_t* C, int m, int n, int ic, int jc, int pc, unsigned step, unsigned round, unsigned g,
                       unsigned j, hls::stream<word_t>& s) {
    cr_t vals[CR_VALUES];
    for (unsigned w = 0; w < CR_WORDS; ++w) {
        const word_t word = s.read();
        for (unsigned l = 0; l < CR_PER_WORD; ++l) vals[w * CR_PER_WORD + l] = get_lane<cr_t>(word, l);
    }
    const unsigned panel = step * TILES_J + j;
    if (panel >= PANELS) return;  // a padding lane of the last L4 step
    const bool add = SERIAL_WRITEBACK || pc > 0;
    for (unsigned rb = 0; rb < RB; ++rb)
        for (unsigned cb = 0; cb < CB; ++cb)
            for (unsigned e = 0; e < MS * NS; ++e) {
                GEMM_PRAGMA(HLS PIPELINE II = 1)
                const unsigned base = (rb * CB + cb) * MS * NS * (WIDE ? 2 : 1);
                const int row = ic + static_cast<int>(g * MC_TILE + round * MR + rb * MS + e / NS);
                const int col = jc + static_cast<int>(panel * NR + cb * NS + e % NS);
                if (row >= m || col >= n) continue;
                c_t v;
                if (WIDE) {  // hi = floor(c / 2^16), 0 <= lo < 2^16
                    v = static_cast<c_t>(static_cast<std::int64_t>(vals[base + e]) * 65536 +
                                         static_cast<std::int64_t>(vals[base + MS * NS + e]));
                } else {
                    v = static_cast<c_t>(vals[base + e]);
                }
                c_t& dst = C[static_cast<std::size_t>(row) * n + col];
                dst = add ? static_cast<c_t>(dst + v) : v;
            }
}

}  // namespace gemm_pl
