// aieflow streamed Dense layer: the requantisation epilogue as a PL kernel (Vitis HLS top function).
// It reads the GEMM's C from DDR once, after the five loops, and writes the layer's output codes
// (integer layers: dense_epilogue.h's bias / wrap / SRS / ReLU; fp32 layers: bias add and ReLU in float).
#include "dense_epilogue.h"
#include "gemm_pl.h"  // GEMM_PRAGMA: HLS pragmas, left out of the x86 shim build

extern "C" void dense_epilogue(const gemm_cfg::c_t* C, const dense_epi::bias_t* bias, dense_epi::y_t* Y, int samples) {
    GEMM_PRAGMA(HLS INTERFACE m_axi port = C offset = slave bundle = gmem0)
    GEMM_PRAGMA(HLS INTERFACE m_axi port = bias offset = slave bundle = gmem1)
    GEMM_PRAGMA(HLS INTERFACE m_axi port = Y offset = slave bundle = gmem2)
    GEMM_PRAGMA(HLS INTERFACE s_axilite port = return)
    using namespace dense_epi;
    for (int s = 0; s < samples; ++s)
        for (unsigned j = 0; j < OUT_FEATURES; ++j) {
            GEMM_PRAGMA(HLS PIPELINE II = 1)
            const std::size_t at = TRANSPOSED ? static_cast<std::size_t>(j) * static_cast<std::size_t>(samples) + s
                                              : static_cast<std::size_t>(s) * OUT_FEATURES + j;
            Y[static_cast<std::size_t>(s) * OUT_FEATURES + j] =
                finish(C[at], HAS_BIAS ? bias[j] : bias_t(0));  // integer C widens to int64; fp32 stays float
        }
}
