// aieflow x86 shim: accumulator tags and type traits shared by vector/accum/mmul.
#pragma once

#include <cstdint>
#include <type_traits>

#include "bfloat16.hpp"
#include "float16.hpp"
#include "config.hpp"

// Accumulator element tags (global scope, as in the real API).  An integer tag asks for "at
// least N bits per lane"; the hardware provides 48- and 80-bit lanes on AIE and 32- and 64-bit
// lanes on AIE-ML.  The shim uses the smallest native lane that is at least as wide as requested
// (so acc32/acc48 are 48-bit on AIE, acc48/acc64 are 64-bit on AIE-ML) and wraps every lane to
// that width after every operation.  Tags wider than any native lane are rejected.
struct acc32 {};
struct acc40 {};
struct acc48 {};
struct acc56 {};
struct acc64 {};
struct acc72 {};
struct acc80 {};
struct accfloat {};
struct accauto {};  // "use the default accumulator for the operand types"

namespace aieflow_shim::detail {

using i128 = __int128;

template <typename Tag>
struct acc_tag_info {
    static constexpr bool valid = false;
};
template <unsigned Bits>
struct int_acc_info {
    static constexpr bool valid = true;
    static constexpr bool is_float = false;
    static constexpr unsigned requested_bits = Bits;
};
template <> struct acc_tag_info<acc32> : int_acc_info<32> {};
template <> struct acc_tag_info<acc40> : int_acc_info<40> {};
template <> struct acc_tag_info<acc48> : int_acc_info<48> {};
template <> struct acc_tag_info<acc56> : int_acc_info<56> {};
template <> struct acc_tag_info<acc64> : int_acc_info<64> {};
template <> struct acc_tag_info<acc72> : int_acc_info<72> {};
template <> struct acc_tag_info<acc80> : int_acc_info<80> {};
template <>
struct acc_tag_info<accfloat> {
    static constexpr bool valid = true;
    static constexpr bool is_float = true;
    static constexpr unsigned requested_bits = 32;
};

template <typename T>
concept acc_tag = acc_tag_info<T>::valid;

// Native lane width for an integer tag on the selected architecture (0 = not available).
template <typename Tag>
constexpr unsigned native_lane_bits() {
    constexpr unsigned req = acc_tag_info<Tag>::requested_bits;
    if constexpr (acc_tag_info<Tag>::is_float) {
        return 32;
    } else if constexpr (is_aie_ml) {
        return req <= 32 ? 32 : (req <= 64 ? 64 : 0);
    } else {
        return req <= 48 ? 48 : (req <= 80 ? 80 : 0);
    }
}

// Lane storage: float for accfloat, int64 for lanes up to 64 bits, __int128 above (acc80).
template <typename Tag>
using lane_storage_t =
    std::conditional_t<acc_tag_info<Tag>::is_float, float,
                       std::conditional_t<(native_lane_bits<Tag>() <= 64), std::int64_t, i128>>;

// Element types the vector operations accept.
template <typename T>
concept int_elem = std::is_integral_v<T> && !std::is_same_v<T, bool> && sizeof(T) <= 8;
template <typename T>
concept float_elem = std::is_same_v<T, float> || is_bfloat16_v<T> || is_float16_v<T>;
// int4 (AIE-ML family): a vector element and an mmul operand, nothing else (no vector arithmetic).
template <typename T>
concept int4_elem = std::is_same_v<T, ::int4>;
template <typename T>
concept elem_type = int_elem<T> || float_elem<T> || int4_elem<T>;

template <typename T>
inline constexpr unsigned type_bits = int4_elem<T> ? 4 : sizeof(T) * 8;

template <typename T>
inline constexpr bool dependent_false = false;

// Default accumulator for a product of TA x TB (UG1529 defaults as used by aieflow):
//   AIE:    8/16-bit x 8/16-bit -> acc48, any 32-bit operand -> acc80, float -> accfloat
//   AIE-ML: 8x4, 8x8, 16x8, 8x16 -> acc32, 16x16 -> acc64, any 32-bit operand -> acc64,
//           bfloat16 x bfloat16 and float x float -> accfloat
//   AIE-MLv2 as AIE-ML, and float16 x float16 -> accfloat (UG1529 "Matrix Multiplication Modes")
template <typename TA, typename TB>
constexpr auto default_acc_for() {
    if constexpr (float_elem<TA> && float_elem<TB>) {
        static_assert(is_aie_ml || (!is_bfloat16_v<TA> && !is_bfloat16_v<TB>),
                      "aieflow shim: bfloat16 arithmetic does not exist on AIE (__AIE_ARCH__ == 10)");
        static_assert(is_aie_mlv2 || (!is_float16_v<TA> && !is_float16_v<TB>),
                      "aieflow shim: float16 exists on AIE-MLv2 only (__AIE_ARCH__ == 21; UG1529 Basic Types)");
        return accfloat{};
    } else if constexpr (int_elem<TA> && int4_elem<TB>) {
        static_assert(is_aie_ml && !dependent_false<TA>, "aieflow shim: int4 does not exist on AIE (__AIE_ARCH__ == 10)");
        static_assert(type_bits<TA> == 8, "aieflow shim: int4 multiplies 8-bit operands only (UG1529 8b x 4b)");
        return acc32{};  // 8b x 4b: as 8b x 8b
    } else if constexpr (int_elem<TA> && int_elem<TB>) {
        constexpr unsigned a = type_bits<TA>, b = type_bits<TB>;
        static_assert(a <= 32 && b <= 32, "aieflow shim: 64-bit multiplication operands are not supported");
        if constexpr (!is_aie_ml) {
            if constexpr (a == 32 || b == 32) return acc80{};
            else return acc48{};
        } else {
            if constexpr (a == 32 || b == 32) return acc64{};
            else if constexpr (a == 16 && b == 16) return acc64{};
            else return acc32{};
        }
    } else {
        static_assert(dependent_false<TA>, "aieflow shim: mixed integer / floating-point multiplication is not supported");
        return accfloat{};
    }
}

// Validate a user-requested accumulator tag for a product of TA x TB.
template <typename TA, typename TB, typename Tag>
constexpr bool acc_tag_allowed() {
    if constexpr (std::is_same_v<Tag, accauto>) {
        return true;
    } else if constexpr (float_elem<TA> && float_elem<TB>) {
        return std::is_same_v<Tag, accfloat>;
    } else if constexpr (is_aie_ml) {
        return std::is_same_v<Tag, acc32> || std::is_same_v<Tag, acc64>;
    } else {
        return std::is_same_v<Tag, acc48> || std::is_same_v<Tag, acc80>;
    }
}

template <typename TA, typename TB, typename Tag>
using resolve_acc_t =
    std::conditional_t<std::is_same_v<Tag, accauto>, decltype(default_acc_for<TA, TB>()), Tag>;

}  // namespace aieflow_shim::detail
