// aieflow x86 shim: aie::accum<AccumTag, Elems>.
//
// Integer accumulators keep every lane as an exact integer wrapped (two's complement) to the
// native lane width after every operation (see types.hpp for the tag -> width mapping).
// accfloat lanes are IEEE binary32 values.
#pragma once

#include <type_traits>

#include "config.hpp"
#include "modes.hpp"
#include "types.hpp"
#include "vector.hpp"

namespace aie {

template <typename AccumTag, unsigned Elems>
class accum {
    static_assert(aieflow_shim::detail::acc_tag<AccumTag>,
                  "aieflow shim: aie::accum needs an accumulator tag (acc32, acc48, acc64, acc80, accfloat, ...)");
    static_assert(aieflow_shim::detail::native_lane_bits<AccumTag>() != 0,
                  "aieflow shim: accumulator tag wider than any native accumulator of this architecture");
    static_assert(Elems > 0, "aie::accum needs at least one lane");

    using info = aieflow_shim::detail::acc_tag_info<AccumTag>;

public:
    using value_type = AccumTag;
    using lane_type = aieflow_shim::detail::lane_storage_t<AccumTag>;  // shim extension
    static constexpr bool is_floating_point = info::is_float;
    // Width every integer lane is wrapped to (shim extension; 32 for accfloat).
    static constexpr unsigned lane_bits = aieflow_shim::detail::native_lane_bits<AccumTag>();

    constexpr accum() : lanes_{} {}

    template <typename T>
    explicit accum(const vector<T, Elems>& v, int shift = 0) : lanes_{} {
        from_vector(v, shift);
    }

    static constexpr unsigned size() { return Elems; }

    // Load lanes from a vector: integer lanes get value << shift (wrapped); float lanes get the
    // exact float value of each element (shift is ignored for floating point).
    template <typename T>
    accum& from_vector(const vector<T, Elems>& v, int shift = 0) {
        if constexpr (is_floating_point) {
            static_assert(aieflow_shim::detail::float_elem<T>,
                          "aieflow shim: accfloat can only be loaded from float/bfloat16/float16 vectors");
            for (unsigned i = 0; i < Elems; ++i) lanes_[i] = static_cast<float>(v[i]);
        } else {
            static_assert(aieflow_shim::detail::int_elem<T>,
                          "aieflow shim: integer accumulators can only be loaded from integer vectors");
            AIEFLOW_SHIM_CHECK(shift >= 0 && shift <= 64, "accum::from_vector: shift %d out of range",
                               shift);
            for (unsigned i = 0; i < Elems; ++i) {
                const auto x = static_cast<aieflow_shim::detail::i128>(v[i]);
                set_exact(i, static_cast<aieflow_shim::detail::i128>(
                                 static_cast<unsigned __int128>(x) << shift));
            }
        }
        return *this;
    }

    // Shift-round-saturate every lane into T with the current rounding / saturation modes.
    // accfloat: to float is exact, to bfloat16 / float16 rounds to nearest even (shim assumption); the
    // shift argument is ignored.
    template <typename T>
    vector<T, Elems> to_vector(int shift = 0) const {
        vector<T, Elems> r;
        if constexpr (is_floating_point) {
            static_assert(aieflow_shim::detail::float_elem<T>,
                          "aieflow shim: accfloat -> integer conversion is not modelled; use float or bfloat16");
            (void)shift;
            for (unsigned i = 0; i < Elems; ++i) r[i] = T(lanes_[i]);
        } else {
            static_assert(aieflow_shim::detail::int_elem<T>,
                          "aieflow shim: integer accumulator -> floating-point conversion is not modelled");
            for (unsigned i = 0; i < Elems; ++i)
                r[i] = aieflow_shim::detail::srs<T>(static_cast<aieflow_shim::detail::i128>(lanes_[i]), shift);
        }
        return r;
    }

    lane_type get(unsigned i) const {
        check(i);
        return lanes_[i];
    }
    lane_type operator[](unsigned i) const { return get(i); }

    template <unsigned M>
    accum<AccumTag, M> extract(unsigned idx) const {
        static_assert(M <= Elems && Elems % M == 0, "extract: size must divide the accumulator size");
        AIEFLOW_SHIM_CHECK(idx < Elems / M, "accum::extract<%u>(%u) out of range for %u lanes", M, idx,
                           Elems);
        accum<AccumTag, M> r;
        for (unsigned i = 0; i < M; ++i) r.set_lane_raw(i, lanes_[idx * M + i]);
        return r;
    }

    template <unsigned M>
    accum& insert(unsigned idx, const accum<AccumTag, M>& a) {
        static_assert(M <= Elems && Elems % M == 0, "insert: size must divide the accumulator size");
        AIEFLOW_SHIM_CHECK(idx < Elems / M, "accum::insert(%u) of %u lanes out of range for %u", idx, M,
                           Elems);
        for (unsigned i = 0; i < M; ++i) lanes_[idx * M + i] = a.get(i);
        return *this;
    }

    template <unsigned M>
    accum<AccumTag, M> grow(unsigned idx = 0) const {
        static_assert(M >= Elems && M % Elems == 0, "grow: target size must be a multiple of the size");
        accum<AccumTag, M> r;
        r.insert(idx, *this);
        return r;
    }

    // ---- shim internals (used by the operations, mmul, cascades and the harness) ----
    // Store an exact integer lane value, wrapping it to the lane width.
    void set_exact(unsigned i, aieflow_shim::detail::i128 v)
        requires(!info::is_float)
    {
        check(i);
        lanes_[i] = static_cast<lane_type>(aieflow_shim::detail::wrap_bits(v, lane_bits));
    }
    void set_float(unsigned i, float v)
        requires(info::is_float)
    {
        check(i);
        lanes_[i] = v;
    }
    void set_lane_raw(unsigned i, lane_type v) {
        check(i);
        if constexpr (is_floating_point) {
            lanes_[i] = v;
        } else {
            lanes_[i] = static_cast<lane_type>(
                aieflow_shim::detail::wrap_bits(static_cast<aieflow_shim::detail::i128>(v), lane_bits));
        }
    }

private:
    static void check(unsigned i) {
        AIEFLOW_SHIM_CHECK(i < Elems, "aie::accum lane index %u out of range (%u lanes)", i, Elems);
    }
    lane_type lanes_[Elems];
};

}  // namespace aie

namespace aieflow_shim {

namespace detail {
template <typename T>
struct is_aie_accum : std::false_type {};
template <typename Tag, unsigned N>
struct is_aie_accum<aie::accum<Tag, N>> : std::true_type {};
}  // namespace detail

// Harness helpers: read / write one accumulator lane exactly (writes wrap to the lane width).
template <typename Tag, unsigned N, typename V>
void set_lane(aie::accum<Tag, N>& acc, unsigned i, V value) {
    if constexpr (aie::accum<Tag, N>::is_floating_point) {
        acc.set_float(i, static_cast<float>(value));
    } else {
        acc.set_exact(i, static_cast<detail::i128>(value));
    }
}
template <typename Tag, unsigned N>
auto get_lane(const aie::accum<Tag, N>& acc, unsigned i) {
    return acc.get(i);
}

}  // namespace aieflow_shim
