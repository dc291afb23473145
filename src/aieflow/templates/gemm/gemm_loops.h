// aieflow GotoBLAS GEMM: the five loops around the micro-kernel (shared by host.cpp and the x86 harness).
//
//   L1 jc: column blocks of B and C (nc)     host
//   L2 pc: k blocks (kc): pack Bc             host -> PL mover (PACK_B)
//   L3 ic: row blocks (mc): pack Ac           host -> PL mover (PACK_A)
//   L4 jr: micro-panels of Bc, TILES_J at a time on the tiles (L4_STEPS graph iterations)
//   L5 ir: micro-panels of Ac (ROUNDS per tile and step, TILES_I groups)
//   L6 pr: kc rank-1 updates of Cr in the accumulators (the AIE kernel)
// `System` runs one block's L4..L6 (PL mover STREAM_BLOCK + graph + PL write-back).  C must start
// at zero: the write-back adds every k block into it.
#pragma once

#include "gemm_config.h"

// Bc = B[pc : pc + KC, jc : jc + NC] packed as micro-panels [NC / NR][KC / KS][CB][KS][NS] with
// zeros outside B, into DDR: the host's packing when Br reaches the tiles by GMIO (no Block RAM).
// The same layout as the PL's gemm_pl::pack_b.
template <typename T>
void gemm_pack_b_ddr(const T* B, int n, int k, int jc, int pc, T* Bc) {
    using namespace gemm_cfg;
    for (unsigned q = 0; q < PANELS; ++q)
        for (unsigned p = 0; p < KC / KS; ++p)
            for (unsigned cb = 0; cb < CB; ++cb)
                for (unsigned kk = 0; kk < KS; ++kk)
                    for (unsigned jj = 0; jj < NS; ++jj) {
                        const int row = pc + static_cast<int>(p * KS + kk);
                        const int col = jc + static_cast<int>(q * NR + cb * NS + jj);
                        Bc[(((q * (KC / KS) + p) * CB + cb) * KS + kk) * NS + jj] =
                            row < k && col < n ? B[static_cast<long long>(row) * n + col] : T(0);
                    }
}

template <class System>
void gemm_five_loops(System& sys, int m, int n, int k) {
    for (int jc = 0; jc < n; jc += static_cast<int>(gemm_cfg::NC))          // L1
        for (int pc = 0; pc < k; pc += static_cast<int>(gemm_cfg::KC)) {    // L2
            sys.pack_b(jc, pc);
            for (int ic = 0; ic < m; ic += static_cast<int>(gemm_cfg::MC)) {  // L3
                sys.pack_a(ic, pc);
                sys.run_block(ic, jc, pc);                                   // L4, L5, L6
            }
        }
}
