// aieflow: the fixed-point activation and softmax of ops/activation.py in plain C++ (AI Engine
// scalar unit, Vitis HLS, x86), shared by the DAG mapping's Activation / Softmax kernels
// (dag_kernels.h) and a recurrent model's head (rnn_cell.h).  Bit for bit the emulator's
// definitions:
//   lookup:      u = x - min_code; SEG = 0: T[u] (entries are output codes); else the linear
//                interpolation T[i] + ((T[i + 1] - T[i]) r + 2^(SEG-1)) >> SEG, i = u >> SEG,
//                r = u mod 2^SEG, clamped to [LO, HI].
//   softmax_row: m = max x, e = E[min((m - x) >> SD, SIZE - 1)], S = sum e,
//                inv = (2^46 + S / 2) / S, y = min(HI, (e inv + 2^(45 - FO)) >> (46 - FO)).
//                With a keep row (attention masks): m, e and S over the kept x only, e = 0 (so y = 0)
//                where keep[i] == 0; every row keeps at least one value.
#pragma once

#include <cstdint>

namespace aieflow_act {

inline std::int64_t lookup(const std::int32_t* t, std::int64_t u, int seg, std::int64_t lo, std::int64_t hi) {
    if (seg == 0) return t[u];
    const std::int64_t k = u >> seg;
    const std::int64_t r = u & ((std::int64_t(1) << seg) - 1);
    const std::int64_t a = t[k];
    const std::int64_t d = static_cast<std::int64_t>(t[k + 1]) - a;
    const std::int64_t v = a + ((d * r + (std::int64_t(1) << (seg - 1))) >> seg);  // arithmetic shift: floor
    return v < lo ? lo : (v > hi ? hi : v);
}

// One row of n values; e: n int32 of scratch.  The sum is at least E[0] > 0 (the maximum's entry).
template <typename TI, typename TO>
inline void softmax_row(const TI* x, TO* y, unsigned n, const std::int32_t* table, std::int64_t size, int sd, int fo,
                        std::int64_t hi, std::int32_t* e, const unsigned char* keep = nullptr) {
    constexpr int RECIP = 46;
    std::int64_t m = INT64_MIN;
    for (unsigned i = 0; i < n; ++i)
        if (!keep || keep[i]) m = static_cast<std::int64_t>(x[i]) > m ? static_cast<std::int64_t>(x[i]) : m;
    std::int64_t s = 0;
    for (unsigned i = 0; i < n; ++i) {
        const std::int64_t k = (m - static_cast<std::int64_t>(x[i])) >> sd;
        e[i] = (!keep || keep[i]) ? table[k < size - 1 ? k : size - 1] : 0;
        s += e[i];
    }
    const std::int64_t inv = ((std::int64_t(1) << RECIP) + s / 2) / s;
    for (unsigned i = 0; i < n; ++i) {
        const std::int64_t v = (e[i] * inv + (std::int64_t(1) << (RECIP - 1 - fo))) >> (RECIP - fo);
        y[i] = static_cast<TO>(v < hi ? v : hi);
    }
}

}  // namespace aieflow_act
