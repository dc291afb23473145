// Helpers shared by the shim test programs (tests/test_shim.py builds and runs them).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include <adf.h>

using i128 = __int128;

inline std::string i128_str(i128 v) {
    if (v == 0) return "0";
    const bool neg = v < 0;
    unsigned __int128 u = neg ? static_cast<unsigned __int128>(0) - static_cast<unsigned __int128>(v)
                              : static_cast<unsigned __int128>(v);
    std::string s;
    while (u != 0) {
        s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
        u /= 10;
    }
    return neg ? "-" + s : s;
}

inline i128 parse_i128(const std::string& s) {
    std::size_t i = 0;
    bool neg = false;
    if (s[0] == '-') {
        neg = true;
        i = 1;
    }
    i128 v = 0;
    for (; i < s.size(); ++i) v = v * 10 + (s[i] - '0');
    return neg ? -v : v;
}

inline aie::rounding_mode parse_rounding(const std::string& n) {
    using rm = aie::rounding_mode;
    if (n == "floor") return rm::floor;
    if (n == "ceil") return rm::ceil;
#if __AIE_ARCH__ >= 20
    if (n == "symmetric_floor") return rm::symmetric_floor;
    if (n == "symmetric_ceil") return rm::symmetric_ceil;
#endif
    if (n == "positive_inf") return rm::positive_inf;
    if (n == "negative_inf") return rm::negative_inf;
    if (n == "symmetric_inf") return rm::symmetric_inf;
    if (n == "symmetric_zero") return rm::symmetric_zero;
    if (n == "conv_even") return rm::conv_even;
    if (n == "conv_odd") return rm::conv_odd;
    std::fprintf(stderr, "bad rounding mode %s\n", n.c_str());
    std::exit(2);
}

inline aie::saturation_mode parse_saturation(const std::string& n) {
    using sm = aie::saturation_mode;
    if (n == "none") return sm::none;
    if (n == "truncate") return sm::truncate;
    if (n == "saturate") return sm::saturate;
    if (n == "symmetric") return sm::symmetric;
    std::fprintf(stderr, "bad saturation mode %s\n", n.c_str());
    std::exit(2);
}

// Calls f(tag{}) for the accumulator tag named `name` (only tags that exist on this arch).
template <typename F>
void with_acc_tag(const std::string& name, F&& f) {
    if (name == "acc32") return f(acc32{});
    if (name == "acc48") return f(acc48{});
    if (name == "acc64") return f(acc64{});
#if __AIE_ARCH__ == 10
    if (name == "acc80") return f(acc80{});
#endif
    std::fprintf(stderr, "bad accumulator tag %s\n", name.c_str());
    std::exit(2);
}

template <typename F>
void with_int_type(const std::string& name, F&& f) {
    if (name == "int8") return f(int8{});
    if (name == "uint8") return f(uint8{});
    if (name == "int16") return f(int16{});
    if (name == "uint16") return f(uint16{});
    if (name == "int32") return f(int32{});
    if (name == "uint32") return f(uint32{});
    std::fprintf(stderr, "bad type %s\n", name.c_str());
    std::exit(2);
}
