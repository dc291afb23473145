// aieflow CNN, thesis mapping: one im2col matrix-multiply tile per AI Engine kernel (UG1529 AIE API,
// UG1079 kernel classes).  The kernel computes TILE_M output channels x TILE_N output pixels of
// one convolution from a patch window the PL prepared:
//   patch window: [K_PAD/K][TILE_N/M][M*K]  (M pixels x K patch elements per block, row-major)
//   weights     : [TILE_M/N][K_PAD/K][K*N]  (K x N block of the (K, O) weight matrix)
//   bias        : [TILE_M/N][M*N]           (the bias row repeated for the M pixels)
//   output      : [TILE_M/N][TILE_N/M][M*N] (M pixels x N channels per block, row-major)
// K is processed in K_CHUNKS chunks; between chunks the partial sums wait in a local buffer (the
// thesis's conv1).  No activation here: the PL applies the tanh table.
#pragma once

#include <adf.h>
#include <aie_api/aie.hpp>
#include <aie_api/aie_adf.hpp>

#include <vector>

namespace aieflow_thesis {

template <class T, unsigned N>
inline void load_params(T (&dst)[N], const std::vector<T>& src) {
    for (unsigned i = 0; i < N; ++i) dst[i] = i < src.size() ? src[i] : T(0);
}

template <class C>
class MatmulTile {
    static constexpr unsigned M = C::M, K = C::K, N = C::N, MN = M * N;
    static constexpr unsigned CB = C::TILE_M / N, PB = C::TILE_N / M, KB = C::K_PAD / K, KBC = KB / C::K_CHUNKS;
    using MMUL = aie::mmul<M, K, N, float, float, accfloat>;
    using ACCV = aie::accum<accfloat, MN>;

    alignas(32) float weights_[CB * KB * K * N];
    alignas(32) float bias_[CB * MN];
    alignas(32) float partial_[C::K_CHUNKS > 1 ? CB * PB * MN : 1];

public:
    MatmulTile(const std::vector<float>& w, const std::vector<float>& b) {
        load_params(weights_, w);
        load_params(bias_, b);
        for (auto& v : partial_) v = 0.0f;
    }

    void run(adf::input_buffer<float>& __restrict in, adf::output_buffer<float>& __restrict out) {
        const float* __restrict a = in.data();
        float* __restrict o = out.data();
        for (unsigned ch = 0; ch < C::K_CHUNKS; ++ch)
            for (unsigned pb = 0; pb < PB; ++pb)
                for (unsigned cb = 0; cb < CB; ++cb) {
                    ACCV start;
                    if (ch == 0) {
                        start.from_vector(aie::load_v<MN>(bias_ + cb * MN));
                    } else {
                        start.from_vector(aie::load_v<MN>(partial_ + (cb * PB + pb) * MN));
                    }
                    MMUL c(start);
                    for (unsigned kb = ch * KBC; kb < (ch + 1) * KBC; ++kb)
                        c.mac(aie::load_v<M * K>(a + (kb * PB + pb) * M * K), aie::load_v<K * N>(weights_ + (cb * KB + kb) * K * N));
                    const auto v = c.template to_vector<float>();
                    if (ch + 1 == C::K_CHUNKS) {
                        aie::store_v(o + (cb * PB + pb) * MN, v);
                    } else {
                        aie::store_v(partial_ + (cb * PB + pb) * MN, v);
                    }
                }
    }

    static void registerKernelClass() {
        REGISTER_FUNCTION(MatmulTile::run);
        REGISTER_PARAMETER(weights_);
        REGISTER_PARAMETER(bias_);
    }
};

}  // namespace aieflow_thesis
