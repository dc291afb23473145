// aieflow x86 shim: the storage and arithmetic shared by the 16-bit float scalar types (bfloat16,
// float16): 16 bits of storage, an exact conversion to float, arithmetic in float, compound
// assignments rounding the float result back with the type's own rounding (D::round_from_float).
#pragma once

#include <concepts>
#include <cstdint>

namespace aieflow_shim::detail {

template <class D>
class half_float {
public:
    operator float() const { return D::to_float(bits_); }  // NOLINT(google-explicit-constructor)

    static constexpr D from_bits(std::uint16_t b) {
        D r;
        r.bits_ = b;
        return r;
    }
    constexpr std::uint16_t bits() const { return bits_; }

    D& operator+=(float o) { return self() = D(static_cast<float>(*this) + o); }
    D& operator-=(float o) { return self() = D(static_cast<float>(*this) - o); }
    D& operator*=(float o) { return self() = D(static_cast<float>(*this) * o); }
    D& operator/=(float o) { return self() = D(static_cast<float>(*this) / o); }

protected:
    constexpr half_float() = default;
    explicit half_float(float f) : bits_(D::round_from_float(f)) {}

private:
    D& self() { return static_cast<D&>(*this); }
    std::uint16_t bits_ = 0;
};

}  // namespace aieflow_shim::detail
