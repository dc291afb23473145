// aieflow x86 shim of <aie_api/utils.hpp>: printing helpers (minimal).
#pragma once

#include <cstdio>

#include "aie.hpp"

namespace aie {

namespace detail_print {
template <typename T>
void print_elem(T v) {
    if constexpr (aieflow_shim::detail::float_elem<T>)
        std::printf("%g", static_cast<double>(static_cast<float>(v)));
    else if constexpr (std::is_signed_v<T>)
        std::printf("%lld", static_cast<long long>(v));
    else
        std::printf("%llu", static_cast<unsigned long long>(v));
}
}  // namespace detail_print

template <typename T, unsigned N>
void print(const vector<T, N>& v, bool formatted = false, const char* prefix = nullptr) {
    if (prefix != nullptr) std::printf("%s", prefix);
    for (unsigned i = 0; i < N; ++i) {
        detail_print::print_elem(v[i]);
        std::printf(formatted ? "\t" : " ");
    }
    std::printf("\n");
}

// Accumulator lanes; 80-bit lanes are printed through their low 64 bits only when they fit.
template <typename Tag, unsigned N>
void print(const accum<Tag, N>& a, bool formatted = false, const char* prefix = nullptr) {
    if (prefix != nullptr) std::printf("%s", prefix);
    for (unsigned i = 0; i < N; ++i) {
        if constexpr (accum<Tag, N>::is_floating_point) std::printf("%g", static_cast<double>(a.get(i)));
        else std::printf("%lld", static_cast<long long>(a.get(i)));
        std::printf(formatted ? "\t" : " ");
    }
    std::printf("\n");
}

template <typename T, unsigned N>
void print_matrix(const vector<T, N>& v, unsigned cols, const char* prefix = nullptr) {
    if (prefix != nullptr) std::printf("%s\n", prefix);
    for (unsigned i = 0; i < N; ++i) {
        detail_print::print_elem(v[i]);
        std::printf((i + 1) % cols == 0 ? "\n" : " ");
    }
}

}  // namespace aie
