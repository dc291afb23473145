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
//                where keep[i] == 0; a row keeping no value (a run-time key padding mask) gives 0.
//   iexp:        the integer softmax's exp (I-BERT, arXiv:2101.01321): D = d << up (>> -up), 0 when
//                D >= 30 L2, else z = (D M) >> 36, p = D - z L2, (A ((B - p)^2 + C) + 2^(27+z)) >> (28+z);
//                k = {L2, M, B, C, A}.  softmax_row_e takes the exp as a functor (ExpTable, ExpInt).
//   igelu:       the polynomial GELU (I-BERT's i-GELU): V = min(round(|x| C1 >> s), BC), W = V - BC,
//                L = 2^28 + ((A W^2) >> 16), y = sat((x (2^28 + sgn(x) L) + 2^(t-1)) >> t); k = {C1, BC, A}.
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

inline std::int64_t iexp(std::int64_t d, int up, const std::int32_t* k) {
    const std::int64_t l2 = k[0];
    const std::int64_t big = up >= 0 ? d << up : d >> -up;
    if (big >= 30 * l2) return 0;
    const std::int64_t z = (big * static_cast<std::int64_t>(k[1])) >> 36;  // floor(big / l2), exact here
    const std::int64_t w = static_cast<std::int64_t>(k[2]) - (big - z * l2);
    const int sh = 28 + static_cast<int>(z);
    return ((w * w + k[3]) * static_cast<std::int64_t>(k[4]) + (std::int64_t(1) << (sh - 1))) >> sh;
}

inline std::int64_t igelu(std::int64_t x, int s, int t, const std::int32_t* k, std::int64_t lo, std::int64_t hi) {
    const std::int64_t ax = (x < 0 ? -x : x) * static_cast<std::int64_t>(k[0]);
    std::int64_t v = s > 0 ? (ax + (std::int64_t(1) << (s - 1))) >> s : ax << -s;
    v = v < k[1] ? v : static_cast<std::int64_t>(k[1]);
    const std::int64_t w = v - k[1];
    const std::int64_t l = (std::int64_t(1) << 28) + ((static_cast<std::int64_t>(k[2]) * w * w) >> 16);  // floor
    const std::int64_t one = std::int64_t(1) << 28;
    const std::int64_t y = (x * (x > 0 ? one + l : (x < 0 ? one - l : one)) + (std::int64_t(1) << (t - 1))) >> t;
    return y < lo ? lo : (y > hi ? hi : y);
}

struct ExpTable {  // the exp table E[min(d >> sd, size - 1)]
    const std::int32_t* table;
    std::int64_t size;
    int sd;
    std::int64_t operator()(std::int64_t d) const {
        const std::int64_t k = d >> sd;
        return table[k < size - 1 ? k : size - 1];
    }
};

struct ExpInt {  // the integer exp
    const std::int32_t* k;
    int up;
    std::int64_t operator()(std::int64_t d) const { return iexp(d, up, k); }
};

// One row of n values; e: n int32 of scratch.  The sum is at least the maximum's entry (> 2^14).
template <typename TI, typename TO, typename Exp>
inline void softmax_row_e(const TI* x, TO* y, unsigned n, const Exp& exp, int fo, std::int64_t hi, std::int32_t* e,
                          const unsigned char* keep = nullptr) {
    constexpr int RECIP = 46;
    std::int64_t m = INT64_MIN;
    for (unsigned i = 0; i < n; ++i)
        if (!keep || keep[i]) m = static_cast<std::int64_t>(x[i]) > m ? static_cast<std::int64_t>(x[i]) : m;
    std::int64_t s = 0;
    for (unsigned i = 0; i < n; ++i) {
        e[i] = (!keep || keep[i]) ? static_cast<std::int32_t>(exp(m - static_cast<std::int64_t>(x[i]))) : 0;
        s += e[i];
    }
    const std::int64_t inv = s > 0 ? ((std::int64_t(1) << RECIP) + s / 2) / s : 0;  // S = 0: no key kept, all 0
    for (unsigned i = 0; i < n; ++i) {
        const std::int64_t v = (e[i] * inv + (std::int64_t(1) << (RECIP - 1 - fo))) >> (RECIP - fo);
        y[i] = static_cast<TO>(v < hi ? v : hi);
    }
}

template <typename TI, typename TO>
inline void softmax_row(const TI* x, TO* y, unsigned n, const std::int32_t* table, std::int64_t size, int sd, int fo,
                        std::int64_t hi, std::int32_t* e, const unsigned char* keep = nullptr) {
    softmax_row_e(x, y, n, ExpTable{table, size, sd}, fo, hi, e, keep);
}

}  // namespace aieflow_act
