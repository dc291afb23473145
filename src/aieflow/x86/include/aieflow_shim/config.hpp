// aieflow x86 shim: architecture selection, scalar types, diagnostics, compiler keywords.
//
// This file is part of a header-only x86 re-implementation of the subset of the AMD AI Engine
// API (UG1529, namespace aie) and of the ADF kernel/graph API (UG1079, UG1603) that aieflow's
// generated code uses.  It is written from the public documentation; it is not AMD code.
#pragma once

#ifndef AIEFLOW_SHIM
#define AIEFLOW_SHIM 1
#endif

// The real AI Engine compiler defines __AIE_ARCH__: 10 = AIE (AIE1), 20 = AIE-ML, 21 = AIE-MLv2.
// Everything >= 20 is treated as the AIE-ML family.  Shim assumption: default to AIE-ML.
#ifndef __AIE_ARCH__
#define __AIE_ARCH__ 20
#endif

#if __AIE_ARCH__ != 10 && __AIE_ARCH__ < 20
#error "aieflow shim: __AIE_ARCH__ must be 10 (AIE) or >= 20 (AIE-ML family)"
#endif

#if __AIE_ARCH__ >= 20
#define AIEFLOW_SHIM_AIE_ML 1
#else
#define AIEFLOW_SHIM_AIE_ML 0
#endif

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

// Scalar types: the real tools declare these at global scope as plain fixed-width integers.
using int8 = std::int8_t;
using uint8 = std::uint8_t;
using int16 = std::int16_t;
using uint16 = std::uint16_t;
using int32 = std::int32_t;
using uint32 = std::uint32_t;
using int64 = std::int64_t;
using uint64 = std::uint64_t;

// int4: the AIE-ML family's signed 4-bit element (UG1529 lists 8b x 4b matrix multiplication for
// AIE-ML / AIE-MLv2 only).  The shim holds one code per object, in -8..7 (construction from an
// integer keeps its low four bits, two's complement); in memory the device packs two per byte,
// element 2i in the low nibble of byte i, which the shim reaches only through
// aie::vector<int8, N>::cast_to<int4>() (and back): there is no int4 pointer arithmetic here, and
// load_v / store_v / vector iterators refuse int4 at compile time.
struct int4 {
    std::int8_t v = 0;
    constexpr int4() = default;
    constexpr int4(int x) : v(static_cast<std::int8_t>(((x & 0xF) ^ 0x8) - 0x8)) {}  // NOLINT(google-explicit-constructor)
    constexpr operator int() const { return v; }  // NOLINT(google-explicit-constructor)
};

// Chess compiler loop pragmas / keywords that appear in kernel source.  They only steer
// scheduling on the real compiler and have no effect on results, so they expand to nothing.
#ifndef chess_prepare_for_pipelining
#define chess_prepare_for_pipelining
#endif
#ifndef chess_loop_range
#define chess_loop_range(...)
#endif
#ifndef chess_loop_count
#define chess_loop_count(...)
#endif
#ifndef chess_unroll_loop
#define chess_unroll_loop(...)
#endif
#ifndef chess_flatten_loop
#define chess_flatten_loop
#endif
#ifndef chess_protect_access
#define chess_protect_access
#endif
#ifndef chess_storage
#define chess_storage(...)
#endif

namespace aieflow_shim {

inline constexpr int arch = __AIE_ARCH__;
inline constexpr bool is_aie_ml = (__AIE_ARCH__ >= 20);
inline constexpr bool is_aie_mlv2 = (__AIE_ARCH__ == 21);

// Fatal error: print a message that names the shim and abort.  Used for every condition where
// the hardware would produce undefined/garbage results (empty stream read, out-of-range access),
// so that a test never passes on silently wrong data.
[[noreturn]] __attribute__((format(printf, 1, 2))) inline void fatal(const char* fmt, ...) {
    std::fflush(stdout);
    std::fputs("aieflow_shim: fatal: ", stderr);
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fputc('\n', stderr);
    std::fflush(stderr);
    std::abort();
}

}  // namespace aieflow_shim

#define AIEFLOW_SHIM_CHECK(cond, ...)              \
    do {                                           \
        if (!(cond)) ::aieflow_shim::fatal(__VA_ARGS__); \
    } while (0)
