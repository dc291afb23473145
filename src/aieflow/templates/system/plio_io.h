// aieflow: PLIO data files <-> 64-bit words, shared by the XRT host (host/host.cpp) and the x86
// system run (x86/system.cpp).  Plain C++17, no AMD headers.
//
// A PLIO data file holds one value per token (aiesimulator's text format; aieflow writes
// `64 / element bits` values to a line).  On the wire, element i of a word sits in bits
// [w * i, w * i + w), the low bits first (aieflow's assumption of the AI Engine stream order,
// shared with the PL movers).  Lanes after a file's last value in its last word are zero.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace aieflow_io {

// bfloat16 on the host: the upper half of a binary32 (the files hold values exact in bfloat16).
struct bf16 {
    std::uint16_t bits;
};
// float16 (IEEE binary16, AIE-MLv2) on the host: its bit pattern (the files hold values exact in float16).
struct fp16 {
    std::uint16_t bits;
};

template <typename T>
struct lane_traits {
    static_assert(std::is_integral<T>::value, "a PLIO element is an integer, float or bf16");
    static constexpr unsigned bits = 8 * sizeof(T);
    static std::uint64_t parse(const std::string& tok) {
        return static_cast<std::uint64_t>(std::stoll(tok)) & mask();
    }
    static std::string text(std::uint64_t b) {
        if (std::is_signed<T>::value && bits < 64 && ((b >> (bits - 1)) & 1u)) b |= ~mask();  // sign-extend
        return std::is_signed<T>::value ? std::to_string(static_cast<long long>(b)) : std::to_string(b);
    }
    static constexpr std::uint64_t mask() { return bits == 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << bits) - 1; }
};

inline std::string float_text(float f) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(f));
    return buf;
}

template <>
struct lane_traits<float> {
    static constexpr unsigned bits = 32;
    static std::uint64_t parse(const std::string& tok) {
        const float f = std::stof(tok);
        std::uint32_t u;
        std::memcpy(&u, &f, sizeof u);
        return u;
    }
    static std::string text(std::uint64_t b) {
        const std::uint32_t u = static_cast<std::uint32_t>(b);
        float f;
        std::memcpy(&f, &u, sizeof f);
        return float_text(f);
    }
};

template <>
struct lane_traits<bf16> {
    static constexpr unsigned bits = 16;
    static std::uint64_t parse(const std::string& tok) { return lane_traits<float>::parse(tok) >> 16; }
    static std::string text(std::uint64_t b) { return lane_traits<float>::text((b & 0xffffu) << 16); }
};

// binary16 <-> text through float: a value exact in binary16 converts exactly both ways; any other
// rounds to nearest, ties to even (the x86 shim's float16, aieflow_shim/float16.hpp).
template <>
struct lane_traits<fp16> {
    static constexpr unsigned bits = 16;
    static std::uint64_t parse(const std::string& tok) {
        const std::uint32_t u = static_cast<std::uint32_t>(lane_traits<float>::parse(tok));
        const std::uint32_t sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
        if (mag > 0x7f800000u) return sign | 0x7e00u;  // NaN
        if (mag >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
        if (mag < 0x38800000u) {  // below 2^-14: a binary16 subnormal (or zero), steps of 2^-24
            if (mag < 0x33000000u) return sign;  // at most 2^-25 (a tie to even zero)
            const std::uint32_t man = (mag & 0x7fffffu) | 0x800000u, shift = 126u - (mag >> 23);
            const std::uint32_t q = man >> shift, rest = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
            return sign | (q + ((rest > half || (rest == half && (q & 1u))) ? 1u : 0u));
        }
        const std::uint32_t q = (mag >> 13) - (112u << 10), rest = mag & 0x1fffu;  // rebias 127 -> 15
        return sign | (q + ((rest > 0x1000u || (rest == 0x1000u && (q & 1u))) ? 1u : 0u));
    }
    static std::string text(std::uint64_t b) {
        const std::uint32_t h = static_cast<std::uint32_t>(b) & 0xffffu, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
        float f = e == 0 ? static_cast<float>(m) * (1.0f / 16777216.0f)
                         : e == 31 ? (m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity())
                                   : std::ldexp(static_cast<float>(m | 0x400u), static_cast<int>(e) - 25);
        return float_text((h & 0x8000u) ? -f : f);
    }
};

// The stream beats (words of the PLIO's `plio_bits`) carrying `values` elements of `bits` bits, and
// the 64-bit DDR words holding those beats (the host's buffers; the last beat's unused lanes are zero).
inline std::size_t beats(std::size_t values, unsigned bits, unsigned plio_bits) {
    return (values * bits + plio_bits - 1) / plio_bits;
}
inline std::size_t ddr_words(std::size_t beats, unsigned plio_bits) { return (beats * plio_bits + 63) / 64; }

inline std::vector<std::string> read_tokens(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot read " + path);
    return {std::istream_iterator<std::string>(f), std::istream_iterator<std::string>()};
}

// The values of a PLIO file packed into 64-bit words.
template <typename T>
std::vector<std::uint64_t> pack(const std::vector<std::string>& tokens) {
    constexpr unsigned w = lane_traits<T>::bits, lanes = 64 / w;
    std::vector<std::uint64_t> words((tokens.size() + lanes - 1) / lanes, 0);
    for (std::size_t i = 0; i < tokens.size(); ++i)
        words[i / lanes] |= lane_traits<T>::parse(tokens[i]) << (w * (i % lanes));
    return words;
}

// The first `count` values held by `words`, as the text tokens a PLIO file holds.
template <typename T>
std::vector<std::string> unpack(const std::vector<std::uint64_t>& words, std::size_t count) {
    constexpr unsigned w = lane_traits<T>::bits, lanes = 64 / w;
    if (count > words.size() * lanes) throw std::runtime_error("fewer words than values");
    std::vector<std::string> out;
    out.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
        const std::uint64_t b = w == 64 ? words[i / lanes] : (words[i / lanes] >> (w * (i % lanes))) & ((std::uint64_t(1) << w) - 1);
        out.push_back(lane_traits<T>::text(b));
    }
    return out;
}

// A PLIO file of `tokens`, `64 / bits` values to a line (the layout aieflow writes).
template <typename T>
void write_file(const std::string& path, const std::vector<std::string>& tokens) {
    constexpr unsigned lanes = 64 / lane_traits<T>::bits;
    std::ofstream f(path);
    if (!f) throw std::runtime_error("cannot write " + path);
    for (std::size_t i = 0; i < tokens.size(); ++i) f << tokens[i] << ((i + 1) % lanes == 0 || i + 1 == tokens.size() ? "\n" : " ");
}

// The stream's words as the element type the PLIO carries (lane i = bits [w i, w i + w)), and back.
template <typename T>
std::vector<T> lanes_of(const std::vector<std::uint64_t>& words, std::size_t count) {
    static_assert(64 % (8 * sizeof(T)) == 0, "a PLIO element divides the 64-bit word");
    static_assert(std::is_trivially_copyable<T>::value, "PLIO elements are copied as bytes");
    if (count * sizeof(T) > words.size() * 8) throw std::runtime_error("fewer words than values");
    std::vector<T> out(count);
    std::memcpy(static_cast<void*>(out.data()), words.data(), count * sizeof(T));  // little-endian: lane 0 low
    return out;
}

template <typename T>
std::vector<std::uint64_t> words_of(const std::vector<T>& values) {
    std::vector<std::uint64_t> out((values.size() * sizeof(T) + 7) / 8, 0);
    std::memcpy(out.data(), values.data(), values.size() * sizeof(T));
    return out;
}

// Bit-exact comparison of two PLIO files' values (as the words they pack into); returns the number
// of differing values and prints the first.  Only value i with i % period < real is compared: the
// others are the rows a kernel pads its batch with (their golden values are placeholders).
template <typename T>
std::size_t compare(const std::string& what, const std::vector<std::uint64_t>& got, const std::vector<std::string>& want,
                    std::size_t period = 1, std::size_t real = 1) {
    const std::vector<std::string> g = unpack<T>(got, want.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
        if (i % period < real && pack<T>({g[i]}) != pack<T>({want[i]})) {
            if (!bad) std::fprintf(stderr, "%s: value %zu is %s, golden %s\n", what.c_str(), i, g[i].c_str(), want[i].c_str());
            ++bad;
        }
    return bad;
}

}  // namespace aieflow_io
