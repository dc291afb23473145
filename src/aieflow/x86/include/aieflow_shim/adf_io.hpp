// aieflow x86 shim: kernel-side ADF I/O (buffers, streams, packet streams, cascades).
//
// On x86 every I/O object is a thin handle that the harness creates (see harness.hpp and
// README.md).  Streams and cascades are FIFOs owned by the harness; a read from an empty FIFO is
// a fatal error (the device would stall forever, the shim must not invent data).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "accum.hpp"
#include "config.hpp"
#include "ldst.hpp"
#include "types.hpp"
#include "vector.hpp"

// ================================================================================================
// FIFOs
// ================================================================================================
namespace aieflow_shim::detail {

template <typename E>
struct fifo {
    std::deque<std::pair<E, bool>> q;  // (value, tlast)
    std::string name;
    std::string kind;

    void push(E v, bool tlast) { q.emplace_back(v, tlast); }
    E pop(bool* tlast) {
        AIEFLOW_SHIM_CHECK(!q.empty(), "read from empty %s '%s' (the device would stall here)",
                           kind.c_str(), name.c_str());
        auto [v, t] = q.front();
        q.pop_front();
        if (tlast != nullptr) *tlast = t;
        return v;
    }
};

template <typename X, bool IsAcc = acc_tag<X>>
struct cascade_lane {
    using type = X;
};
template <typename X>
struct cascade_lane<X, true> {
    using type = lane_storage_t<X>;
};
template <typename X>
using cascade_lane_t = typename cascade_lane<X>::type;

}  // namespace aieflow_shim::detail

// ================================================================================================
// Streams (global scope, as in the real ADF API)
// ================================================================================================
template <typename T>
struct input_stream {
    aieflow_shim::detail::fifo<T>* fifo_ = nullptr;  // set by the harness
};
template <typename T>
struct output_stream {
    aieflow_shim::detail::fifo<T>* fifo_ = nullptr;  // set by the harness
};

namespace aieflow_shim::detail {
template <typename S>
auto& checked_fifo(S* s, const char* what) {
    AIEFLOW_SHIM_CHECK(s != nullptr && s->fifo_ != nullptr, "%s on an unconnected (null) port", what);
    return *s->fifo_;
}
}  // namespace aieflow_shim::detail

template <typename T>
T readincr(input_stream<T>* s) {
    return aieflow_shim::detail::checked_fifo(s, "readincr").pop(nullptr);
}
template <typename T>
T readincr(input_stream<T>* s, bool& tlast) {
    return aieflow_shim::detail::checked_fifo(s, "readincr").pop(&tlast);
}
template <typename T>
void writeincr(output_stream<T>* s, std::type_identity_t<T> v) {
    aieflow_shim::detail::checked_fifo(s, "writeincr").push(v, false);
}
template <typename T>
void writeincr(output_stream<T>* s, std::type_identity_t<T> v, bool tlast) {
    aieflow_shim::detail::checked_fifo(s, "writeincr").push(v, tlast);
}

// Vector stream access: N consecutive stream elements.  With a tlast argument, tlast reports /
// sets the flag of the last element of the vector (shim assumption).
template <unsigned N, typename T>
aie::vector<T, N> readincr_v(input_stream<T>* s) {
    auto& f = aieflow_shim::detail::checked_fifo(s, "readincr_v");
    aie::vector<T, N> r;
    for (unsigned i = 0; i < N; ++i) r[i] = f.pop(nullptr);
    return r;
}
template <unsigned N, typename T>
aie::vector<T, N> readincr_v(input_stream<T>* s, bool& tlast) {
    auto& f = aieflow_shim::detail::checked_fifo(s, "readincr_v");
    aie::vector<T, N> r;
    for (unsigned i = 0; i < N; ++i) r[i] = f.pop(&tlast);
    return r;
}
template <typename T, unsigned N>
void writeincr(output_stream<T>* s, const aie::vector<T, N>& v) {
    auto& f = aieflow_shim::detail::checked_fifo(s, "writeincr");
    for (unsigned i = 0; i < N; ++i) f.push(v[i], false);
}
template <typename T, unsigned N>
void writeincr(output_stream<T>* s, const aie::vector<T, N>& v, bool tlast) {
    auto& f = aieflow_shim::detail::checked_fifo(s, "writeincr");
    for (unsigned i = 0; i < N; ++i) f.push(v[i], tlast && i + 1 == N);
}

// ================================================================================================
// Packet streams.  A packet is a 32-bit header word followed by data words, the last one with
// TLAST set.  Header layout (UG1079 / UG1603 "Packet Processing"):
//   bits 4-0 packet ID, 11-5 zero, 14-12 packet type, 15 zero, 20-16 source row,
//   27-21 source column, 30-28 zero, 31 odd parity of bits 30-0 (set so that the whole word has
//   an odd number of ones).
// The source row/column that writeHeader inserts is the kernel's tile, which the harness sets
// with aieflow_shim::pktstream::set_source (default 0, 0).
// ================================================================================================
struct input_pktstream {
    aieflow_shim::detail::fifo<std::uint32_t>* fifo_ = nullptr;
    const std::vector<std::uint32_t>* packet_ids_ = nullptr;
};
struct output_pktstream {
    aieflow_shim::detail::fifo<std::uint32_t>* fifo_ = nullptr;
    const std::vector<std::uint32_t>* packet_ids_ = nullptr;
    unsigned source_row_ = 0;
    unsigned source_col_ = 0;
};

namespace aieflow_shim {
// Build a packet header word (exposed for harnesses that feed packets into kernels).
inline std::uint32_t packet_header(unsigned packet_type, unsigned id, unsigned source_row = 0,
                                   unsigned source_col = 0) {
    std::uint32_t h = (id & 0x1Fu) | ((packet_type & 0x7u) << 12) | ((source_row & 0x1Fu) << 16) |
                      ((source_col & 0x7Fu) << 21);
    if ((__builtin_popcount(h) & 1) == 0) h |= 0x80000000u;
    return h;
}
}  // namespace aieflow_shim

inline int32 readincr(input_pktstream* s) {
    return static_cast<int32>(aieflow_shim::detail::checked_fifo(s, "readincr").pop(nullptr));
}
inline int32 readincr(input_pktstream* s, bool& tlast) {
    return static_cast<int32>(aieflow_shim::detail::checked_fifo(s, "readincr").pop(&tlast));
}
inline void writeincr(output_pktstream* s, int32 value) {
    aieflow_shim::detail::checked_fifo(s, "writeincr").push(static_cast<std::uint32_t>(value), false);
}
inline void writeincr(output_pktstream* s, int32 value, bool tlast) {
    aieflow_shim::detail::checked_fifo(s, "writeincr").push(static_cast<std::uint32_t>(value), tlast);
}
inline void writeHeader(output_pktstream* s, unsigned int pcktType, unsigned int ID) {
    aieflow_shim::detail::checked_fifo(s, "writeHeader")
        .push(aieflow_shim::packet_header(pcktType, ID, s->source_row_, s->source_col_), false);
}
inline void writeHeader(output_pktstream* s, unsigned int pcktType, unsigned int ID, bool tlast) {
    aieflow_shim::detail::checked_fifo(s, "writeHeader")
        .push(aieflow_shim::packet_header(pcktType, ID, s->source_row_, s->source_col_), tlast);
}
// Packet IDs are assigned by the compiler; in the shim the harness provides them.
inline uint32 getPacketid(input_pktstream* s, int index) {
    AIEFLOW_SHIM_CHECK(s != nullptr && s->packet_ids_ != nullptr && index >= 0 &&
                           static_cast<std::size_t>(index) < s->packet_ids_->size(),
                       "getPacketid(%d): no packet id configured by the harness", index);
    return (*s->packet_ids_)[static_cast<std::size_t>(index)];
}
inline uint32 getPacketid(output_pktstream* s, int index) {
    AIEFLOW_SHIM_CHECK(s != nullptr && s->packet_ids_ != nullptr && index >= 0 &&
                           static_cast<std::size_t>(index) < s->packet_ids_->size(),
                       "getPacketid(%d): no packet id configured by the harness", index);
    return (*s->packet_ids_)[static_cast<std::size_t>(index)];
}

// ================================================================================================
// Cascades: X is an accumulator tag (acc48, acc32, accfloat, ...) or, on AIE-ML, a vector
// element type.  The FIFO holds exact lanes, so an accumulator crosses a cascade unchanged.
// ================================================================================================
template <typename X>
struct input_cascade {
    aieflow_shim::detail::fifo<aieflow_shim::detail::cascade_lane_t<X>>* fifo_ = nullptr;
};
template <typename X>
struct output_cascade {
    aieflow_shim::detail::fifo<aieflow_shim::detail::cascade_lane_t<X>>* fifo_ = nullptr;
};

template <unsigned N, typename X>
auto readincr_v(input_cascade<X>* c) {
    auto& f = aieflow_shim::detail::checked_fifo(c, "readincr_v");
    if constexpr (aieflow_shim::detail::acc_tag<X>) {
        aie::accum<X, N> r;
        for (unsigned i = 0; i < N; ++i) r.set_lane_raw(i, f.pop(nullptr));
        return r;
    } else {
        aie::vector<X, N> r;
        for (unsigned i = 0; i < N; ++i) r[i] = f.pop(nullptr);
        return r;
    }
}
template <typename X, unsigned N>
void writeincr(output_cascade<X>* c, const aie::accum<X, N>& acc) {
    auto& f = aieflow_shim::detail::checked_fifo(c, "writeincr");
    for (unsigned i = 0; i < N; ++i) f.push(acc.get(i), false);
}
template <typename X, unsigned N>
void writeincr(output_cascade<X>* c, const aie::vector<X, N>& v) {
    static_assert(!aieflow_shim::detail::acc_tag<X>, "cascade of accumulators takes aie::accum");
    auto& f = aieflow_shim::detail::checked_fifo(c, "writeincr");
    for (unsigned i = 0; i < N; ++i) f.push(v[i], false);
}

// ================================================================================================
// Buffers
// ================================================================================================
namespace adf {

inline constexpr unsigned inherited_extent = 0xFFFFFFFFu;

template <unsigned... Dims>
struct extents {
    static constexpr unsigned rank = sizeof...(Dims);
    static constexpr bool inherited = ((Dims == inherited_extent) || ...) || rank == 0;
    static constexpr std::size_t total = inherited ? 0 : (std::size_t{1} * ... * Dims);
};

template <unsigned Elems>
struct margin {
    static constexpr unsigned value = Elems;
};

namespace detail {
template <typename Extents>
inline void check_buffer_size(std::size_t n, const char* what) {
    if constexpr (!Extents::inherited) {
        AIEFLOW_SHIM_CHECK(n == Extents::total, "%s: harness gave %zu elements, extents say %zu", what, n,
                           Extents::total);
    }
}
}  // namespace detail

// Kernel input buffer: the harness passes a pointer and a size (or a std::vector).
template <typename T, typename Extents = extents<inherited_extent>, typename Margin = margin<0>>
class input_buffer {
public:
    using value_type = T;
    input_buffer(const T* p, std::size_t n) : p_(p), n_(n) {
        detail::check_buffer_size<Extents>(n, "input_buffer");
    }
    explicit input_buffer(const std::vector<T>& v) : input_buffer(v.data(), v.size()) {}
    const T* data() const { return p_; }
    std::size_t size() const { return n_; }

private:
    const T* p_;
    std::size_t n_;
};

template <typename T, typename Extents = extents<inherited_extent>, typename Margin = margin<0>>
class output_buffer {
public:
    using value_type = T;
    output_buffer(T* p, std::size_t n) : p_(p), n_(n) {
        detail::check_buffer_size<Extents>(n, "output_buffer");
    }
    explicit output_buffer(std::vector<T>& v) : output_buffer(v.data(), v.size()) {}
    T* data() const { return p_; }
    std::size_t size() const { return n_; }

private:
    T* p_;
    std::size_t n_;
};

// Asynchronous buffers: acquire()/release() synchronise with the other side on the device; the
// shim runs kernels one at a time, so they are no-ops.
template <typename T, typename Extents = extents<inherited_extent>, typename Margin = margin<0>>
class input_async_buffer : public input_buffer<T, Extents, Margin> {
public:
    using input_buffer<T, Extents, Margin>::input_buffer;
    void acquire() {}
    void release() {}
};
template <typename T, typename Extents = extents<inherited_extent>, typename Margin = margin<0>>
class output_async_buffer : public output_buffer<T, Extents, Margin> {
public:
    using output_buffer<T, Extents, Margin>::output_buffer;
    void acquire() {}
    void release() {}
};

}  // namespace adf

namespace aieflow_shim::detail {
template <typename B>
struct is_adf_buffer : std::false_type {};
template <typename T, typename E, typename M>
struct is_adf_buffer<adf::input_buffer<T, E, M>> : std::true_type {};
template <typename T, typename E, typename M>
struct is_adf_buffer<adf::output_buffer<T, E, M>> : std::true_type {};
template <typename T, typename E, typename M>
struct is_adf_buffer<adf::input_async_buffer<T, E, M>> : std::true_type {};
template <typename T, typename E, typename M>
struct is_adf_buffer<adf::output_async_buffer<T, E, M>> : std::true_type {};
template <typename B>
concept adf_buffer = is_adf_buffer<std::remove_cvref_t<B>>::value;
}  // namespace aieflow_shim::detail

namespace aie {

// Vector / scalar iteration over ADF buffers (bounds-checked in the shim).
template <unsigned Elems, aieflow_shim::detail::adf_buffer B>
auto begin_vector(B& buf) {
    using P = std::remove_pointer_t<decltype(buf.data())>;
    auto* p = buf.data();
    return vector_iterator<P, Elems>(p, p, p + buf.size());
}
template <unsigned Elems, aieflow_shim::detail::adf_buffer B>
auto begin_restrict_vector(B& buf) {
    return begin_vector<Elems>(buf);
}
template <unsigned Elems, aieflow_shim::detail::adf_buffer B>
auto cbegin_vector(const B& buf) {
    using P = const std::remove_const_t<std::remove_pointer_t<decltype(buf.data())>>;
    P* p = buf.data();
    return vector_iterator<P, Elems>(p, p, p + buf.size());
}
template <aieflow_shim::detail::adf_buffer B>
auto begin(B& buf) {
    return buf.data();
}
template <aieflow_shim::detail::adf_buffer B>
auto cbegin(const B& buf) {
    return static_cast<const std::remove_pointer_t<decltype(buf.data())>*>(buf.data());
}

}  // namespace aie
