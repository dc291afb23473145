// aieflow x86 shim: aie::vector<T, Elems>.
//
// A vector is exactly Elems contiguous elements of T (same size and alignment as T[Elems]) so
// that vector iterators can view kernel memory in place, like vector loads/stores do on the
// device.  The class is marked may_alias because such views alias plain T arrays.
// Shim assumption: the real default constructor leaves the contents undefined; the shim
// zero-initialises so that uninitialised use is at least deterministic.
#pragma once

#include <cstddef>
#include <type_traits>

#include "config.hpp"
#include "types.hpp"

namespace aie {

template <typename T, unsigned Elems>
class __attribute__((may_alias)) vector {
    static_assert(Elems > 0, "aie::vector needs at least one element");
    static_assert(aieflow_shim::detail::elem_type<T>,
                  "aieflow shim: aie::vector element type must be an integer, float, bfloat16 or float16");
    static_assert(!aieflow_shim::detail::is_float16_v<T> || aieflow_shim::is_aie_mlv2,
                  "aieflow shim: float16 vectors exist on AIE-MLv2 only (__AIE_ARCH__ == 21; UG1529 Basic Types)");
    static_assert(!aieflow_shim::detail::int4_elem<T> || aieflow_shim::is_aie_ml,
                  "aieflow shim: int4 does not exist on AIE (__AIE_ARCH__ == 10)");

public:
    using value_type = T;
    static constexpr unsigned elems = Elems;  // shim extension, mirrors size()

    constexpr vector() : data_{} {}

    // Construction from exactly Elems scalars.
    template <typename... Ts>
        requires(sizeof...(Ts) == Elems && Elems > 1 && (std::is_convertible_v<Ts, T> && ...))
    vector(Ts... vs) : data_{static_cast<T>(vs)...} {}

    static constexpr unsigned size() { return Elems; }

    T& operator[](unsigned i) {
        check(i);
        return data_[i];
    }
    const T& operator[](unsigned i) const {
        check(i);
        return data_[i];
    }
    T get(unsigned i) const {
        check(i);
        return data_[i];
    }
    void set(T v, unsigned i) {
        check(i);
        data_[i] = v;
    }

    // Sub-vector number `idx` of size M (elements idx*M .. idx*M+M-1).
    template <unsigned M>
    vector<T, M> extract(unsigned idx) const {
        static_assert(M <= Elems && Elems % M == 0, "extract: size must divide the vector size");
        AIEFLOW_SHIM_CHECK(idx < Elems / M, "vector::extract<%u>(%u) out of range for %u elements", M,
                           idx, Elems);
        vector<T, M> r;
        for (unsigned i = 0; i < M; ++i) r[i] = data_[idx * M + i];
        return r;
    }

    // Overwrite sub-vector number `idx` (of the inserted vector's size).
    template <unsigned M>
    vector& insert(unsigned idx, const vector<T, M>& v) {
        static_assert(M <= Elems && Elems % M == 0, "insert: size must divide the vector size");
        AIEFLOW_SHIM_CHECK(idx < Elems / M, "vector::insert(%u) of %u elements out of range for %u", idx,
                           M, Elems);
        for (unsigned i = 0; i < M; ++i) data_[idx * M + i] = v[i];
        return *this;
    }

    // Larger vector with this one placed as sub-vector number `idx`.  The other elements are
    // undefined on the device; the shim sets them to zero.
    template <unsigned M>
    vector<T, M> grow(unsigned idx = 0) const {
        static_assert(M >= Elems && M % Elems == 0, "grow: target size must be a multiple of the size");
        vector<T, M> r;
        r.insert(idx, *this);
        return r;
    }

    // The same bits seen as elements of U (UG1529 vector::cast_to): integer element types only,
    // elements little-endian, int4 two per byte with element 2i in the low nibble of byte i.
    template <typename U>
    auto cast_to() const {
        using namespace aieflow_shim::detail;
        static_assert((int_elem<T> || int4_elem<T>) && (int_elem<U> || int4_elem<U>),
                      "aieflow shim: cast_to is implemented for integer and int4 elements");
        constexpr unsigned bits = Elems * type_bits<T>;
        static_assert(bits % type_bits<U> == 0, "cast_to: the vector's bits must be whole elements of the target");
        vector<U, bits / type_bits<U>> r;
        constexpr unsigned tb = type_bits<T>, ub = type_bits<U>;
        for (unsigned i = 0; i < bits / ub; ++i) {
            unsigned long long u = 0;  // element i of the result: bits i*ub .. i*ub+ub-1
            for (unsigned b = 0; b < ub; ++b) {
                const unsigned at = i * ub + b;
                const auto src = static_cast<unsigned long long>(static_cast<long long>(data_[at / tb]));
                u |= ((src >> (at % tb)) & 1ULL) << b;
            }
            if constexpr (int4_elem<U>) {
                r[i] = U(static_cast<int>(u));
            } else {
                using UU = std::make_unsigned_t<U>;
                r[i] = static_cast<U>(static_cast<UU>(u));
            }
        }
        return r;
    }

private:
    static void check(unsigned i) {
        AIEFLOW_SHIM_CHECK(i < Elems, "aie::vector element index %u out of range (%u elements)", i,
                           Elems);
    }
    T data_[Elems];
};

}  // namespace aie

namespace aieflow_shim::detail {
template <typename T>
struct is_aie_vector : std::false_type {};
template <typename T, unsigned N>
struct is_aie_vector<aie::vector<T, N>> : std::true_type {};
}  // namespace aieflow_shim::detail
