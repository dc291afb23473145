// aieflow: output types narrower than their container (ap_fixed<12,4> held in int16), one definition
// for every kernel that stores a fixed-point type through an SRS (dense.h, dag_kernels.h, cnn_kernels.h).
//
// The SRS (aie::accum::to_vector<T>(shift), UG1529) rounds and saturates (or wraps) at the container's
// width; the type's own range is applied after it: a clamp to [OUT_LO, OUT_HI] (saturating and
// symmetric modes) or, with OUT_WRAP > 0, a wrap at the type's width (aie::upshift by OUT_WRAP bits,
// then aie::downshift, which sign-extends signed elements).  Either equals saturating / wrapping the
// rounded value at the type's width at once (docs/numerics.md).
//
// A config opts in with   static constexpr long long OUT_LO, OUT_HI; static constexpr unsigned OUT_WRAP;
// (generated from aieflow.mapped.text.narrow_output); a config without OUT_LO is left unchanged.
#pragma once

#include <aie_api/aie.hpp>

#include <type_traits>

namespace aieflow_narrow {

template <class C, class = void>
struct NarrowOf {
    static constexpr bool NARROW = false;
    template <class T, unsigned E>
    static aie::vector<T, E> apply(const aie::vector<T, E>& v) {
        return v;
    }
};
template <class C>
struct NarrowOf<C, std::void_t<decltype(C::OUT_LO)>> {
    static constexpr bool NARROW = true;
    template <class T, unsigned E>
    static aie::vector<T, E> apply(const aie::vector<T, E>& v) {
        if constexpr (C::OUT_WRAP > 0) {
            return aie::downshift(aie::upshift(v, C::OUT_WRAP), C::OUT_WRAP);
        } else {
            return aie::max(aie::min(v, aie::broadcast<T, E>(T(C::OUT_HI))), aie::broadcast<T, E>(T(C::OUT_LO)));
        }
    }
};

// v with the type's own range of config C (unchanged when C's output fills its container).
template <class C, class T, unsigned E>
inline aie::vector<T, E> narrow(const aie::vector<T, E>& v) {
    return NarrowOf<C>::apply(v);
}

}  // namespace aieflow_narrow
