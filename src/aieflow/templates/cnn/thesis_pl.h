// aieflow CNN, thesis mapping: the PL (Vitis HLS C++) side and the host's im2col, shared helpers.
//
// Every PL loop handles one element per cycle (II = 1), sequentially, as in the thesis.  All AIE <->
// PL traffic is 128-bit PLIO words of four floats; element i of a word sits in bits [32 i, 32 i + 32)
// (aieflow's assumption about the order in which the AI Engine stream delivers a word).
// Built by v++ for the PL, and as plain C++ against aieflow's x86 shim of hls_stream.h / ap_int.h.
#pragma once

#include <ap_int.h>
#include <hls_stream.h>

#include <cstdint>
#include <cstring>

#include "kernels/cnn_numerics.h"

#if defined(AIEFLOW_SHIM)
#define THESIS_PRAGMA(x)
#else
#define THESIS_PRAGMA_SUB(x) _Pragma(#x)
#define THESIS_PRAGMA(x) THESIS_PRAGMA_SUB(x)
#endif

namespace aieflow_thesis {

typedef ap_uint<128> word_t;
constexpr unsigned LANES = 4;  // floats per 128-bit word

inline float get_lane(const word_t& w, unsigned i) {
    const std::uint32_t u = static_cast<std::uint32_t>(w.range(32 * i + 31, 32 * i).to_uint64());
    float v;
    std::memcpy(&v, &u, sizeof v);
    return v;
}

inline void set_lane(word_t& w, unsigned i, float v) {
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    w.range(32 * i + 31, 32 * i) = u;
}

// One window of `count` floats read from / written to a PLIO stream.
inline void read_window(hls::stream<word_t>& s, float* dst, unsigned count) {
    word_t w = 0;
    for (unsigned i = 0; i < count; ++i) {
        THESIS_PRAGMA(HLS PIPELINE II = 1)
        if (i % LANES == 0) w = s.read();
        dst[i] = get_lane(w, i % LANES);
    }
}

inline void write_window(hls::stream<word_t>& s, const float* src, unsigned count) {
    word_t w = 0;
    for (unsigned i = 0; i < count; ++i) {
        THESIS_PRAGMA(HLS PIPELINE II = 1)
        set_lane(w, i % LANES, src[i]);
        if (i % LANES == LANES - 1 || i + 1 == count) {
            s.write(w);
            w = 0;
        }
    }
}

// Untile: the GRID_M x GRID_N output tiles of a layer back into y[channel][pixel].
template <class L>
inline void untile(hls::stream<word_t>* tiles, float* y) {
    static float tile[L::TILE_M * L::TILE_N];
    for (unsigned mi = 0; mi < L::GRID_M; ++mi)
        for (unsigned ni = 0; ni < L::GRID_N; ++ni) {
            read_window(tiles[mi * L::GRID_N + ni], tile, L::TILE_M * L::TILE_N);
            for (unsigned e = 0; e < L::TILE_M * L::TILE_N; ++e) {
                THESIS_PRAGMA(HLS PIPELINE II = 1)
                const unsigned blk = e / (L::M * L::N), in = e % (L::M * L::N);
                const unsigned cb = blk / (L::TILE_N / L::M), pb = blk % (L::TILE_N / L::M);
                const unsigned ch = mi * L::TILE_M + cb * L::N + in % L::N;
                const unsigned px = ni * L::TILE_N + pb * L::M + in / L::N;
                y[ch * L::N_TOT + px] = tile[e];
            }
        }
}

// tanh by the lookup table (the PL's table: entries as floats), element by element.
template <class L>
inline void activate(float* y, const float* lut) {
    for (unsigned e = 0; e < L::M_TOT * L::N_TOT; ++e) {
        THESIS_PRAGMA(HLS PIPELINE II = 1)
        y[e] = lut[aieflow_cnn::lut_index(y[e], L::LUT_SCALE, L::LUT_OFFSET, int(L::LUT_SIZE), aieflow_cnn::rnd(L::LUT_RND))];
    }
}

// im2col + tile for layer L: image x[C_IN][H][W] -> one patch window per N block, streamed out.
template <class L>
inline void im2col_tile(const float* x, hls::stream<word_t>* windows) {
    static float win[L::K_PAD * L::TILE_N];
    for (unsigned ni = 0; ni < L::GRID_N; ++ni) {
        for (unsigned e = 0; e < L::K_PAD * L::TILE_N; ++e) {
            THESIS_PRAGMA(HLS PIPELINE II = 1)
            const unsigned blk = e / (L::M * L::K), in = e % (L::M * L::K);
            const unsigned kb = blk / (L::TILE_N / L::M), pb = blk % (L::TILE_N / L::M);
            const unsigned k = kb * L::K + in % L::K, p = ni * L::TILE_N + pb * L::M + in / L::K;
            float v = 0.0f;
            if (k < L::K_TOT) {
                const unsigned c = k / (L::KH * L::KW), ij = k % (L::KH * L::KW);
                const int yy = int((p / L::OW) * L::SH + ij / L::KW) - int(L::PT);
                const int xx = int((p % L::OW) * L::SW + ij % L::KW) - int(L::PL);
                if (yy >= 0 && yy < int(L::H) && xx >= 0 && xx < int(L::W)) v = x[(c * L::H + unsigned(yy)) * L::W + unsigned(xx)];
            }
            win[e] = v;
        }
        write_window(windows[ni], win, L::K_PAD * L::TILE_N);
    }
}

// Pixel shuffle (CRD): y[c r^2 + i r + j][y][x] -> out[c][y r + i][x r + j].
template <class L>
inline void pixel_shuffle(const float* y, float* out) {
    constexpr unsigned r = L::SHUF;
    for (unsigned e = 0; e < L::M_TOT * L::N_TOT; ++e) {
        THESIS_PRAGMA(HLS PIPELINE II = 1)
        const unsigned o = e / L::N_TOT, p = e % L::N_TOT;
        const unsigned ch = o / (r * r), i = (o / r) % r, j = o % r;
        out[(ch * L::OH * r + (p / L::OW) * r + i) * (L::OW * r) + (p % L::OW) * r + j] = y[e];
    }
}

}  // namespace aieflow_thesis
