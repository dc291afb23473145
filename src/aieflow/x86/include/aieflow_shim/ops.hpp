// aieflow x86 shim: element-wise vector / accumulator operations of the AIE API subset.
//
// Integer vector arithmetic (add, sub, neg, reduce_add) wraps to the element width (shim
// assumption: the API describes these as plain element-wise operations without saturation).
// float arithmetic is IEEE binary32 with one rounding per operation.  bfloat16 arithmetic is
// done in float and rounded back to bfloat16 (nearest even) once per operation (assumption).
// Products into accumulators are exact for integers (then wrapped to the lane width) and one
// binary32 rounding for floats; mac adds the rounded product to the lane with a second rounding
// (no fused multiply-add; assumption, the docs do not specify it).
#pragma once

#include <type_traits>

#include "accum.hpp"
#include "config.hpp"
#include "types.hpp"
#include "vector.hpp"

namespace aieflow_shim::detail {

template <typename T>
inline T add_elem(T a, T b) {
    if constexpr (int_elem<T>) return static_cast<T>(wrap_bits(static_cast<i128>(a) + static_cast<i128>(b), type_bits<T>));
    else return T(static_cast<float>(a) + static_cast<float>(b));
}
template <typename T>
inline T sub_elem(T a, T b) {
    if constexpr (int_elem<T>) return static_cast<T>(wrap_bits(static_cast<i128>(a) - static_cast<i128>(b), type_bits<T>));
    else return T(static_cast<float>(a) - static_cast<float>(b));
}
template <typename T>
inline bool less_elem(T a, T b) {
    if constexpr (int_elem<T>) return a < b;
    else return static_cast<float>(a) < static_cast<float>(b);
}

// Exact integer product or binary32 product.
template <typename A, typename B>
inline auto product(A a, B b) {
    if constexpr (int_elem<A> && int_elem<B>) return static_cast<i128>(a) * static_cast<i128>(b);
    else return static_cast<float>(static_cast<float>(a) * static_cast<float>(b));
}

template <typename Tag, unsigned N, typename A, typename B>
inline void mac_lane(aie::accum<Tag, N>& acc, unsigned i, A a, B b, bool subtract = false) {
    if constexpr (aie::accum<Tag, N>::is_floating_point) {
        const float p = product(a, b);
        const float c = acc.get(i);
        acc.set_float(i, subtract ? static_cast<float>(c - p) : static_cast<float>(c + p));
    } else {
        const i128 p = product(a, b);
        const i128 c = static_cast<i128>(acc.get(i));
        acc.set_exact(i, subtract ? c - p : c + p);
    }
}

template <typename Tag, unsigned N, typename A, typename B>
inline void mul_lane(aie::accum<Tag, N>& acc, unsigned i, A a, B b, bool negate = false) {
    if constexpr (aie::accum<Tag, N>::is_floating_point) {
        const float p = product(a, b);
        acc.set_float(i, negate ? -p : p);
    } else {
        const i128 p = product(a, b);
        acc.set_exact(i, negate ? -p : p);
    }
}

template <typename TA, typename TB, typename Tag>
constexpr void check_mul_acc() {
    static_assert(acc_tag_allowed<TA, TB, Tag>(),
                  "aieflow shim: accumulator tag not allowed for these operand types on this "
                  "architecture (AIE: acc48/acc80, AIE-ML: acc32/acc64, floats: accfloat)");
}

// An existing accumulator may have any tag of the right class (integer vs floating point).
template <typename TA, typename TB, typename Tag>
constexpr void check_mac_acc() {
    static_assert(acc_tag_info<Tag>::is_float == (float_elem<TA> && float_elem<TB>),
                  "aieflow shim: accumulator class (integer / accfloat) does not match the operand types");
    (void)default_acc_for<TA, TB>();  // rejects mixed int/float and bfloat16 on AIE
}

template <typename T>
concept scalar_elem = elem_type<std::remove_cvref_t<T>>;

}  // namespace aieflow_shim::detail

namespace aie {

// ---- construction ----------------------------------------------------------------------------
template <typename T, unsigned N>
auto zeros() {
    if constexpr (aieflow_shim::detail::acc_tag<T>) return accum<T, N>();
    else return vector<T, N>();
}

template <typename T, unsigned N>
vector<T, N> broadcast(std::type_identity_t<T> value) {
    vector<T, N> r;
    for (unsigned i = 0; i < N; ++i) r[i] = value;
    return r;
}

// ---- vector add / sub / neg --------------------------------------------------------------------
template <typename T, unsigned N>
vector<T, N> add(const vector<T, N>& a, const vector<T, N>& b) {
    vector<T, N> r;
    for (unsigned i = 0; i < N; ++i) r[i] = aieflow_shim::detail::add_elem(a[i], b[i]);
    return r;
}
template <typename T, unsigned N>
vector<T, N> add(const vector<T, N>& a, std::type_identity_t<T> s) {
    return add(a, broadcast<T, N>(s));
}
template <typename T, unsigned N>
vector<T, N> add(std::type_identity_t<T> s, const vector<T, N>& a) {
    return add(broadcast<T, N>(s), a);
}
template <typename T, unsigned N>
vector<T, N> sub(const vector<T, N>& a, const vector<T, N>& b) {
    vector<T, N> r;
    for (unsigned i = 0; i < N; ++i) r[i] = aieflow_shim::detail::sub_elem(a[i], b[i]);
    return r;
}
template <typename T, unsigned N>
vector<T, N> sub(const vector<T, N>& a, std::type_identity_t<T> s) {
    return sub(a, broadcast<T, N>(s));
}
template <typename T, unsigned N>
vector<T, N> sub(std::type_identity_t<T> s, const vector<T, N>& a) {
    return sub(broadcast<T, N>(s), a);
}
template <typename T, unsigned N>
vector<T, N> neg(const vector<T, N>& a) {
    return sub(zeros<T, N>(), a);
}

// ---- shifts, comparisons, select (UG1529 "Bits" / "Comparison" / UG1079 "Bitwise Operations") ----
// aie::upshift: each element shifted left, filled with zeros (bits shifted out are lost: modular);
// aie::downshift: each element shifted right arithmetically (sign extended).  Integer elements only.
template <typename T, unsigned N>
vector<T, N> upshift(const vector<T, N>& a, unsigned shift) {
    static_assert(aieflow_shim::detail::int_elem<T>, "aie::upshift takes integer vectors");
    vector<T, N> r;
    for (unsigned i = 0; i < N; ++i) {
        const aieflow_shim::detail::i128 v = shift >= 64 ? 0 : static_cast<aieflow_shim::detail::i128>(a[i]) * (aieflow_shim::detail::i128(1) << shift);
        r[i] = static_cast<T>(aieflow_shim::detail::wrap_bits(v, aieflow_shim::detail::type_bits<T>));
    }
    return r;
}
template <typename T, unsigned N>
vector<T, N> downshift(const vector<T, N>& a, unsigned shift) {
    static_assert(aieflow_shim::detail::int_elem<T>, "aie::downshift takes integer vectors");
    vector<T, N> r;
    for (unsigned i = 0; i < N; ++i) {
        const aieflow_shim::detail::i128 v = static_cast<aieflow_shim::detail::i128>(a[i]);
        r[i] = static_cast<T>(shift >= 127 ? (v < 0 ? -1 : 0) : (v >> shift));
    }
    return r;
}

// aie::mask<N>: one bit per lane.  aie::lt / aie::ge compare element-wise (a vector and a vector or
// a scalar); aie::select(a, b, m) takes b[i] where m[i] is set, else a[i].
template <unsigned N>
class mask {
    bool bits_[N] = {};

public:
    bool test(unsigned i) const { return bits_[i]; }
    void set(unsigned i, bool v = true) { bits_[i] = v; }
    static constexpr unsigned size() { return N; }
};
template <typename T, unsigned N>
mask<N> lt(const vector<T, N>& a, const vector<T, N>& b) {
    mask<N> m;
    for (unsigned i = 0; i < N; ++i) m.set(i, aieflow_shim::detail::less_elem(a[i], b[i]));
    return m;
}
template <typename T, unsigned N>
mask<N> lt(const vector<T, N>& a, std::type_identity_t<T> s) {
    return lt(a, broadcast<T, N>(s));
}
template <typename T, unsigned N>
mask<N> ge(const vector<T, N>& a, const vector<T, N>& b) {
    mask<N> m;
    for (unsigned i = 0; i < N; ++i) m.set(i, !aieflow_shim::detail::less_elem(a[i], b[i]));
    return m;
}
template <typename T, unsigned N>
mask<N> ge(const vector<T, N>& a, std::type_identity_t<T> s) {
    return ge(a, broadcast<T, N>(s));
}
template <typename T, unsigned N>
vector<T, N> select(const vector<T, N>& a, const vector<T, N>& b, const mask<N>& m) {
    vector<T, N> r;
    for (unsigned i = 0; i < N; ++i) r[i] = m.test(i) ? b[i] : a[i];
    return r;
}

// ---- accumulator add / sub ---------------------------------------------------------------------
template <typename Tag, unsigned N>
accum<Tag, N> add(const accum<Tag, N>& a, const accum<Tag, N>& b) {
    accum<Tag, N> r;
    for (unsigned i = 0; i < N; ++i) {
        if constexpr (accum<Tag, N>::is_floating_point) r.set_float(i, static_cast<float>(a.get(i) + b.get(i)));
        else r.set_exact(i, static_cast<aieflow_shim::detail::i128>(a.get(i)) + static_cast<aieflow_shim::detail::i128>(b.get(i)));
    }
    return r;
}
template <typename Tag, unsigned N>
accum<Tag, N> sub(const accum<Tag, N>& a, const accum<Tag, N>& b) {
    accum<Tag, N> r;
    for (unsigned i = 0; i < N; ++i) {
        if constexpr (accum<Tag, N>::is_floating_point) r.set_float(i, static_cast<float>(a.get(i) - b.get(i)));
        else r.set_exact(i, static_cast<aieflow_shim::detail::i128>(a.get(i)) - static_cast<aieflow_shim::detail::i128>(b.get(i)));
    }
    return r;
}
// Accumulator plus vector: the vector elements are added as exact values (no shift).
template <typename Tag, unsigned N, typename T>
accum<Tag, N> add(const accum<Tag, N>& a, const vector<T, N>& v) {
    return add(a, accum<Tag, N>(v));
}
template <typename Tag, unsigned N, typename T>
accum<Tag, N> sub(const accum<Tag, N>& a, const vector<T, N>& v) {
    return sub(a, accum<Tag, N>(v));
}

// ---- multiplication into accumulators ----------------------------------------------------------
template <typename AccTag = accauto, typename TA, typename TB, unsigned N>
auto mul(const vector<TA, N>& a, const vector<TB, N>& b) {
    aieflow_shim::detail::check_mul_acc<TA, TB, AccTag>();
    accum<aieflow_shim::detail::resolve_acc_t<TA, TB, AccTag>, N> r;
    for (unsigned i = 0; i < N; ++i) aieflow_shim::detail::mul_lane(r, i, a[i], b[i]);
    return r;
}
template <typename AccTag = accauto, typename TA, typename TB, unsigned N>
    requires aieflow_shim::detail::scalar_elem<TB>
auto mul(const vector<TA, N>& a, TB s) {
    return mul<AccTag>(a, broadcast<TB, N>(s));
}
template <typename AccTag = accauto, typename TA, typename TB, unsigned N>
    requires aieflow_shim::detail::scalar_elem<TA>
auto mul(TA s, const vector<TB, N>& b) {
    return mul<AccTag>(broadcast<TA, N>(s), b);
}
template <typename AccTag = accauto, typename TA, typename TB, unsigned N>
auto negmul(const vector<TA, N>& a, const vector<TB, N>& b) {
    aieflow_shim::detail::check_mul_acc<TA, TB, AccTag>();
    accum<aieflow_shim::detail::resolve_acc_t<TA, TB, AccTag>, N> r;
    for (unsigned i = 0; i < N; ++i) aieflow_shim::detail::mul_lane(r, i, a[i], b[i], true);
    return r;
}

template <typename Tag, unsigned N, typename TA, typename TB>
accum<Tag, N> mac(const accum<Tag, N>& acc, const vector<TA, N>& a, const vector<TB, N>& b) {
    aieflow_shim::detail::check_mac_acc<TA, TB, Tag>();
    accum<Tag, N> r = acc;
    for (unsigned i = 0; i < N; ++i) aieflow_shim::detail::mac_lane(r, i, a[i], b[i]);
    return r;
}
template <typename Tag, unsigned N, typename TA, typename TB>
    requires aieflow_shim::detail::scalar_elem<TB>
accum<Tag, N> mac(const accum<Tag, N>& acc, const vector<TA, N>& a, TB s) {
    return mac(acc, a, broadcast<TB, N>(s));
}
template <typename Tag, unsigned N, typename TA, typename TB>
    requires aieflow_shim::detail::scalar_elem<TA>
accum<Tag, N> mac(const accum<Tag, N>& acc, TA s, const vector<TB, N>& b) {
    return mac(acc, broadcast<TA, N>(s), b);
}
template <typename Tag, unsigned N, typename TA, typename TB>
accum<Tag, N> msc(const accum<Tag, N>& acc, const vector<TA, N>& a, const vector<TB, N>& b) {
    aieflow_shim::detail::check_mac_acc<TA, TB, Tag>();
    accum<Tag, N> r = acc;
    for (unsigned i = 0; i < N; ++i) aieflow_shim::detail::mac_lane(r, i, a[i], b[i], true);
    return r;
}
template <typename Tag, unsigned N, typename TA, typename TB>
    requires aieflow_shim::detail::scalar_elem<TB>
accum<Tag, N> msc(const accum<Tag, N>& acc, const vector<TA, N>& a, TB s) {
    return msc(acc, a, broadcast<TB, N>(s));
}

// ---- max / min ---------------------------------------------------------------------------------
template <typename T, unsigned N>
vector<T, N> max(const vector<T, N>& a, const vector<T, N>& b) {
    vector<T, N> r;
    for (unsigned i = 0; i < N; ++i) r[i] = aieflow_shim::detail::less_elem(a[i], b[i]) ? b[i] : a[i];
    return r;
}
template <typename T, unsigned N>
vector<T, N> max(const vector<T, N>& a, std::type_identity_t<T> s) {
    return max(a, broadcast<T, N>(s));
}
template <typename T, unsigned N>
vector<T, N> max(std::type_identity_t<T> s, const vector<T, N>& a) {
    return max(broadcast<T, N>(s), a);
}
template <typename T, unsigned N>
vector<T, N> min(const vector<T, N>& a, const vector<T, N>& b) {
    vector<T, N> r;
    for (unsigned i = 0; i < N; ++i) r[i] = aieflow_shim::detail::less_elem(b[i], a[i]) ? b[i] : a[i];
    return r;
}
template <typename T, unsigned N>
vector<T, N> min(const vector<T, N>& a, std::type_identity_t<T> s) {
    return min(a, broadcast<T, N>(s));
}
template <typename T, unsigned N>
vector<T, N> min(std::type_identity_t<T> s, const vector<T, N>& a) {
    return min(broadcast<T, N>(s), a);
}

// ---- reductions --------------------------------------------------------------------------------
// Integer sums wrap to T (modular, so the order does not matter).  float sums use a halving tree
// (lane i + lane i+N/2, repeated) for power-of-two sizes and a left-to-right sum otherwise; the
// reduction order of the real implementation is not documented (shim assumption).
template <typename T, unsigned N>
T reduce_add(const vector<T, N>& v) {
    if constexpr (aieflow_shim::detail::int_elem<T>) {
        aieflow_shim::detail::i128 s = 0;
        for (unsigned i = 0; i < N; ++i) s += static_cast<aieflow_shim::detail::i128>(v[i]);
        return static_cast<T>(aieflow_shim::detail::wrap_bits(s, aieflow_shim::detail::type_bits<T>));
    } else if constexpr ((N & (N - 1)) == 0) {
        T buf[N];
        for (unsigned i = 0; i < N; ++i) buf[i] = v[i];
        for (unsigned w = N / 2; w >= 1; w /= 2)
            for (unsigned i = 0; i < w; ++i) buf[i] = aieflow_shim::detail::add_elem(buf[i], buf[i + w]);
        return buf[0];
    } else {
        T s = v[0];
        for (unsigned i = 1; i < N; ++i) s = aieflow_shim::detail::add_elem(s, v[i]);
        return s;
    }
}
template <typename T, unsigned N>
T reduce_max(const vector<T, N>& v) {
    T m = v[0];
    for (unsigned i = 1; i < N; ++i)
        if (aieflow_shim::detail::less_elem(m, v[i])) m = v[i];
    return m;
}
template <typename T, unsigned N>
T reduce_min(const vector<T, N>& v) {
    T m = v[0];
    for (unsigned i = 1; i < N; ++i)
        if (aieflow_shim::detail::less_elem(v[i], m)) m = v[i];
    return m;
}

// ---- concatenation -----------------------------------------------------------------------------
template <typename T, unsigned N, typename... Rest>
    requires(std::is_same_v<Rest, vector<T, N>> && ...)
vector<T, N*(1 + sizeof...(Rest))> concat(const vector<T, N>& first, const Rest&... rest) {
    vector<T, N*(1 + sizeof...(Rest))> r;
    unsigned idx = 0;
    r.insert(idx++, first);
    (r.insert(idx++, rest), ...);
    return r;
}
template <typename Tag, unsigned N, typename... Rest>
    requires(std::is_same_v<Rest, accum<Tag, N>> && ...)
accum<Tag, N*(1 + sizeof...(Rest))> concat(const accum<Tag, N>& first, const Rest&... rest) {
    accum<Tag, N*(1 + sizeof...(Rest))> r;
    unsigned idx = 0;
    r.insert(idx++, first);
    (r.insert(idx++, rest), ...);
    return r;
}

}  // namespace aie
