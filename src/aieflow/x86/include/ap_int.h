// aieflow x86 shim of Vitis HLS <ap_int.h> (UG1399 "Arbitrary Precision Data Types"): ap_uint<W>
// for W <= 128, with the operations aieflow's PL kernels use: construction from integers,
// range(hi, lo) read (to_uint64 / to_uint / to_int) and write, bit access, comparison, shifts and
// bitwise operators.  Values wrap modulo 2^W.  ap_int<W> and W > 128 are not provided.  C++14, like
// the HLS code that uses it.
// Written from the public documentation; not AMD code.
#pragma once

#ifndef AIEFLOW_SHIM
#define AIEFLOW_SHIM 1
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

template <int W>
class ap_uint {
    static_assert(W >= 1 && W <= 128, "aieflow shim: ap_uint<W> supports 1 <= W <= 128");
    using u128 = unsigned __int128;
    static constexpr u128 mask_of(int bits) { return bits >= 128 ? ~u128(0) : ((u128(1) << bits) - 1); }
    static constexpr u128 kMask = mask_of(W);

    static void check_range(int hi, int lo) {
        if (lo < 0 || hi < lo || hi >= W) {
            std::fprintf(stderr, "aieflow_shim: fatal: ap_uint<%d>::range(%d, %d) out of range\n", W, hi, lo);
            std::abort();
        }
    }

public:
    class range_ref {
    public:
        range_ref(ap_uint& p, int hi, int lo) : p_(p), hi_(hi), lo_(lo) {}
        std::uint64_t to_uint64() const { return static_cast<std::uint64_t>(get()); }
        unsigned to_uint() const { return static_cast<unsigned>(get()); }
        int to_int() const { return static_cast<int>(static_cast<unsigned>(get())); }
        operator std::uint64_t() const { return to_uint64(); }  // NOLINT(google-explicit-constructor)
        range_ref& operator=(std::uint64_t v) {
            const u128 m = mask_of(hi_ - lo_ + 1) << lo_;
            p_.v_ = (p_.v_ & ~m) | ((u128(v) << lo_) & m);
            return *this;
        }
        range_ref& operator=(const range_ref& o) { return *this = o.to_uint64(); }

    private:
        u128 get() const { return (p_.v_ >> lo_) & mask_of(hi_ - lo_ + 1); }
        ap_uint& p_;
        int hi_, lo_;
    };

    ap_uint() = default;
    template <typename I, typename = std::enable_if_t<std::is_integral<I>::value>>
    ap_uint(I v) : v_(static_cast<u128>(static_cast<std::make_unsigned_t<I>>(v)) & kMask) {}  // NOLINT

    range_ref range(int hi, int lo) {
        check_range(hi, lo);
        return range_ref(*this, hi, lo);
    }
    ap_uint range(int hi, int lo) const {  // the read-only form returns the bits as a value
        check_range(hi, lo);
        ap_uint r;
        r.v_ = (v_ >> lo) & mask_of(hi - lo + 1);
        return r;
    }
    bool operator[](int i) const {
        check_range(i, i);
        return ((v_ >> i) & 1) != 0;
    }
    std::uint64_t to_uint64() const { return static_cast<std::uint64_t>(v_); }
    unsigned to_uint() const { return static_cast<unsigned>(v_); }
    int to_int() const { return static_cast<int>(static_cast<unsigned>(v_)); }

    bool operator==(const ap_uint& o) const { return v_ == o.v_; }
    bool operator!=(const ap_uint& o) const { return v_ != o.v_; }
    ap_uint operator|(const ap_uint& o) const { return raw(v_ | o.v_); }
    ap_uint operator&(const ap_uint& o) const { return raw(v_ & o.v_); }
    ap_uint operator^(const ap_uint& o) const { return raw(v_ ^ o.v_); }
    ap_uint operator<<(int s) const { return raw(s >= W ? 0 : (v_ << s) & kMask); }
    ap_uint operator>>(int s) const { return raw(s >= W ? 0 : v_ >> s); }

private:
    static ap_uint raw(u128 v) {
        ap_uint r;
        r.v_ = v & kMask;
        return r;
    }
    u128 v_ = 0;
};
