// aieflow: the vector requantisation of a layer with float scales and zero points (onnxruntime
// quantize_static models; aieflow numerics/requant.py), shared by dense.h (DenseCore) and
// cnn_kernels.h (ConvCore), so both run one definition of the arithmetic.
//
//   q = saturate(round(acc * m / 2^SHIFT) + ZP)
//
// The accumulator (|acc| < 2^31, checked at compile time by the planners) as int32 lanes, times the
// channel's int32 multiplier into a wide accumulator (int32 x int32: acc64 on AIE-ML, acc80 on AIE;
// UG1529 aie::mul), SRS by SHIFT to int32, the zero point added in an accumulator (no wrap), SRS by
// 0 into TO with saturation.  Rounding and saturation are the kernel's modes (round half to even,
// saturate: set by the caller's aie::set_rounding / aie::set_saturation).
#pragma once

#include <aie_api/aie.hpp>

#include <type_traits>

namespace aieflow_rq {

template <typename TO, int SHIFT, int ZP, unsigned MN, typename ACCV, typename TM>
aie::vector<TO, MN> requant(const ACCV& acc, const TM* __restrict mult) {
    const aie::vector<int32, MN> a = acc.template to_vector<int32>(0);
    const auto p = aie::mul(a, aie::load_v<MN>(mult));
    std::remove_const_t<decltype(p)> q;
    q.from_vector(p.template to_vector<int32>(SHIFT));
    q = aie::add(q, aie::broadcast<int32, MN>(ZP));
    return q.template to_vector<TO>(0);
}

}  // namespace aieflow_rq
