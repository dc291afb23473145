// aieflow GotoBLAS GEMM micro-kernel for one AI Engine tile (AIE API, UG1529; ADF kernel I/O, UG1079).
//
// One call = one L4 step on this tile: Br (kc x nr, packed by the PL) is in local memory; the tile
// runs ROUNDS micro-kernels (L5), each reading an mr x kc micro-panel Ar from its input stream(s)
// (multicast to every tile of the group) and keeping the mr x nr micro-tile Cr in accumulators for
// the whole L6 loop, then writes Cr to its output stream.
//
// The paper's kernel issues mac16 intrinsics (uint8: eight per 16-deep k step, 1,024 MACs); this one
// expresses the same step with aie::mmul (uint8: two mmul<4,16,8>, i.e. two 64-element Ar vectors
// and one 16 x 8 Br tile = four 32-element vectors, 1,024 MACs), which UG1529 lists for AIE.
//
// Layouts (the PL packs them so every read is unit-stride):
//   Br : [kc / KS][CB][KS][NS]            one KS x NS tile per mmul column block and k step
//   Ar : per k step, RB row blocks of MS x KS, row-major; with 2 streams, stream s carries the
//        row blocks s*RB/2 .. (s+1)*RB/2 - 1
//   Cr : RB x CB blocks of MS x NS, row-major (WIDE: each block as hi then lo)
#pragma once

#include <adf.h>
#include <aie_api/aie.hpp>
#include <aie_api/aie_adf.hpp>

#include <type_traits>

namespace aieflow_gemm {

// N elements from a stream in 128-bit reads (UG1079: readincr_v<16> for 8-bit, <8> for 16-bit, <4>
// for 32-bit elements).
template <unsigned N, typename T>
inline aie::vector<T, N> read_stream(input_stream<T>* __restrict s) {
    constexpr unsigned W = 16 / sizeof(T);
    static_assert(N % W == 0, "whole 128-bit stream reads");
    aie::vector<T, N> v;
    for (unsigned i = 0; i < N / W; ++i) v.insert(i, readincr_v<W>(s));
    return v;
}

template <typename T, unsigned N>
inline void write_stream(output_stream<T>* __restrict s, const aie::vector<T, N>& v) {
    constexpr unsigned W = 16 / sizeof(T);
    static_assert(N % W == 0, "whole 128-bit stream writes");
    for (unsigned i = 0; i < N / W; ++i) writeincr(s, v.template extract<W>(i));
}

// C: TA, TO (Cr word type), ACC (accumulator tag) and the gemm_cfg constants.
template <class C>
struct MicroKernel {
    using TA = typename C::TA;
    using TO = typename C::TO;
    using ACC = typename C::ACC;
    static constexpr unsigned MS = C::MS, KS = C::KS, NS = C::NS, RB = C::RB, CB = C::CB;
    static constexpr unsigned PER_STREAM = RB / C::AR_STREAMS;  // row blocks per Ar stream
    using MMUL = aie::mmul<MS, KS, NS, TA, TA, ACC>;
    using ACCV = typename MMUL::accum_type;
    static constexpr bool is_float = std::is_floating_point_v<TO>;

    static void write_block(output_stream<TO>* __restrict cr, const MMUL& c) {
        if constexpr (is_float) {
            write_stream(cr, c.template to_vector<TO>());
        } else if constexpr (C::WIDE) {
            // Exact sums wider than int32: hi = floor(c / 2^16) (floor rounding), lo = c - hi * 2^16.
            const ACCV acc = c.to_accum();
            const auto hi = acc.template to_vector<TO>(16);
            const auto lo = aie::sub(acc, ACCV(hi, 16)).template to_vector<TO>(0);
            write_stream(cr, hi);
            write_stream(cr, lo);
        } else {
            write_stream(cr, c.template to_vector<TO>(0));
        }
    }

    template <class In>
    static void run(const TA* __restrict br, In ar, output_stream<TO>* __restrict cr) {
        if constexpr (!is_float) {
            aie::set_rounding(aie::rounding_mode::floor);
            aie::set_saturation(aie::saturation_mode::none);
        }
        for (unsigned round = 0; round < C::ROUNDS; ++round) {  // L5
            MMUL c[RB][CB];
            for (unsigned r = 0; r < RB; ++r)
                for (unsigned j = 0; j < CB; ++j) c[r][j] = MMUL(aie::zeros<ACC, MS * NS>());
            const TA* __restrict pb = br;
            for (unsigned p = 0; p < C::KC / KS; ++p)  // L6, unrolled by KS
                chess_prepare_for_pipelining chess_loop_range(1, ) {
                    aie::vector<TA, MS * KS> a[RB];
                    for (unsigned r = 0; r < RB; ++r) a[r] = read_stream<MS * KS>(ar[r / PER_STREAM]);
                    for (unsigned j = 0; j < CB; ++j) {
                        const auto b = aie::load_v<KS * NS>(pb);
                        pb += KS * NS;
                        for (unsigned r = 0; r < RB; ++r) c[r][j].mac(a[r], b);
                    }
                }
            for (unsigned r = 0; r < RB; ++r)
                for (unsigned j = 0; j < CB; ++j) write_block(cr, c[r][j]);
        }
    }
};

}  // namespace aieflow_gemm
