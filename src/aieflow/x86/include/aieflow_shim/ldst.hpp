// aieflow x86 shim: vector loads / stores and vector iterators over memory.
//
// Shim assumption: alignment requirements of the device (vector loads need aligned addresses
// unless the unaligned variants are used) are not checked; only bounds are checked, and only
// for iterators created from ADF buffers (which know their size).
#pragma once

#include <cstddef>
#include <type_traits>

#include "config.hpp"
#include "vector.hpp"

namespace aie {

// Alignment for vector-sized declarations (bytes): 32 on AIE, 64 on AIE-ML (vector register
// width; shim value, only affects placement).
inline constexpr unsigned vector_decl_align = aieflow_shim::is_aie_ml ? 64 : 32;

// int4 memory (two codes per byte) has no pointer type here: load the bytes as int8 and
// cast_to<int4>() (see config.hpp).
template <typename T>
inline constexpr bool no_int4_memory = !aieflow_shim::detail::int4_elem<std::remove_const_t<T>>;

template <unsigned Elems, typename T>
vector<std::remove_const_t<T>, Elems> load_v(T* ptr) {
    static_assert(no_int4_memory<T>, "aieflow shim: load int4 as int8 bytes and cast_to<int4>()");
    vector<std::remove_const_t<T>, Elems> r;
    for (unsigned i = 0; i < Elems; ++i) r[i] = ptr[i];
    return r;
}
template <unsigned Elems, typename T>
vector<std::remove_const_t<T>, Elems> load_unaligned_v(T* ptr, unsigned /*aligned_elems*/ = 1) {
    return load_v<Elems>(ptr);
}

template <typename T, unsigned Elems>
T* store_v(T* ptr, const vector<T, Elems>& v) {
    static_assert(no_int4_memory<T>, "aieflow shim: store int4 as int8 bytes (cast_to<int8>())");
    for (unsigned i = 0; i < Elems; ++i) ptr[i] = v[i];
    return ptr;
}
template <typename T, unsigned Elems>
T* store_unaligned_v(T* ptr, const vector<T, Elems>& v, unsigned /*aligned_elems*/ = 1) {
    return store_v(ptr, v);
}

// Iterator that views memory as consecutive vectors of Elems elements; ++ advances by Elems
// elements.  T may be const (read-only view).  Dereferencing yields a reference to the vector in
// memory, so `*it = v` stores and `v = *it` loads.
template <typename T, unsigned Elems>
class vector_iterator {
    using elem = std::remove_const_t<T>;
    using vec = vector<elem, Elems>;
    static_assert(no_int4_memory<T>, "aieflow shim: no vector iterator over int4 memory");
    static_assert(sizeof(vec) == sizeof(elem) * Elems && alignof(vec) == alignof(elem),
                  "aieflow shim: vector layout must match the element array");

public:
    using value_type = vec;
    using reference = std::conditional_t<std::is_const_v<T>, const vec&, vec&>;
    using difference_type = std::ptrdiff_t;

    vector_iterator() = default;
    explicit vector_iterator(T* p) : p_(p) {}
    // Bounds-checked view of [lo, hi) (used for ADF buffers).
    vector_iterator(T* p, T* lo, T* hi) : p_(p), lo_(lo), hi_(hi) {}

    reference operator*() const {
        if (lo_ != nullptr) {
            const difference_type off = p_ - lo_;
            AIEFLOW_SHIM_CHECK(off >= 0 && off + static_cast<difference_type>(Elems) <= hi_ - lo_,
                               "vector iterator access at element %td outside the buffer (%td elements)",
                               p_ - lo_, hi_ - lo_);
        }
        using ptr_t = std::conditional_t<std::is_const_v<T>, const vec*, vec*>;
        return *reinterpret_cast<ptr_t>(p_);
    }
    reference operator[](difference_type n) const { return *(*this + n); }

    vector_iterator& operator++() { p_ += Elems; return *this; }
    vector_iterator operator++(int) { vector_iterator t = *this; p_ += Elems; return t; }
    vector_iterator& operator--() { p_ -= Elems; return *this; }
    vector_iterator operator--(int) { vector_iterator t = *this; p_ -= Elems; return t; }
    vector_iterator& operator+=(difference_type n) { p_ += n * static_cast<difference_type>(Elems); return *this; }
    vector_iterator& operator-=(difference_type n) { p_ -= n * static_cast<difference_type>(Elems); return *this; }
    friend vector_iterator operator+(vector_iterator it, difference_type n) { return it += n; }
    friend vector_iterator operator+(difference_type n, vector_iterator it) { return it += n; }
    friend vector_iterator operator-(vector_iterator it, difference_type n) { return it -= n; }
    friend difference_type operator-(const vector_iterator& a, const vector_iterator& b) {
        return (a.p_ - b.p_) / static_cast<difference_type>(Elems);
    }
    friend bool operator==(const vector_iterator& a, const vector_iterator& b) { return a.p_ == b.p_; }

    T* ptr() const { return p_; }  // shim extension

private:
    T* p_ = nullptr;
    T* lo_ = nullptr;
    T* hi_ = nullptr;
};

template <unsigned Elems, typename T>
vector_iterator<T, Elems> begin_vector(T* p) {
    return vector_iterator<T, Elems>(p);
}
template <unsigned Elems, typename T>
vector_iterator<const T, Elems> cbegin_vector(const T* p) {
    return vector_iterator<const T, Elems>(p);
}
// On the device "restrict" only promises no aliasing to the compiler; no numerical effect.
template <unsigned Elems, typename T>
vector_iterator<T, Elems> begin_restrict_vector(T* p) {
    return vector_iterator<T, Elems>(p);
}

// Scalar iteration over memory is a plain pointer.
template <typename T>
T* begin(T* p) {
    return p;
}
template <typename T>
const T* cbegin(const T* p) {
    return p;
}

}  // namespace aie
