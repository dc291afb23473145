// Compile-time checks.  Exactly one CASE_* macro is defined by the test; the "bad" cases must be
// rejected by the compiler, the "good" ones must compile.
#include <adf.h>

int main() {
#if defined(CASE_GOOD)
    // Shapes listed as supported on both architectures.
    aie::mmul<4, 8, 4, int8, int8> a;
    aie::mmul<4, 4, 4, int16, int16> b;
    aie::mmul<4, 4, 8, int16, int8> c;
    (void)a;
    (void)b;
    (void)c;
#if __AIE_ARCH__ >= 20
    aie::mmul<4, 8, 8, int8, int8> d;
    aie::mmul<4, 16, 8, int8, int8, acc64> e;
    aie::mmul<4, 8, 4, bfloat16, bfloat16> f;
    aie::mmul<8, 8, 4, bfloat16, bfloat16> g;
    aie::mmul<4, 8, 4, float, float> h;
    aie::set_rounding(aie::rounding_mode::symmetric_floor);
    aie::set_rounding(aie::rounding_mode::symmetric_ceil);
#else
    aie::mmul<4, 8, 8, int8, int8, acc80> d;
    aie::mmul<4, 16, 8, int8, int8> e;
    aie::mmul<4, 4, 4, int32, int16> f;
    aie::mmul<2, 4, 8, int16, int16> g;
    aie::mmul<4, 2, 4, float, float> h;
#endif
    (void)d;
    (void)e;
    (void)f;
    (void)g;
    (void)h;
#elif defined(CASE_BAD_SHAPE)
    aie::mmul<3, 5, 7, int8, int8> m;  // not a supported shape anywhere
    (void)m;
#elif defined(CASE_BAD_SHAPE_ARCH)
#if __AIE_ARCH__ >= 20
    aie::mmul<1, 16, 8, int8, int8> m;  // AIE-only shape
#else
    aie::mmul<8, 8, 8, int8, int8> m;  // AIE-ML-only shape
#endif
    (void)m;
#elif defined(CASE_SYM_FLOOR)
    aie::set_rounding(aie::rounding_mode::symmetric_floor);  // AIE-ML only
#elif defined(CASE_BAD_ACC)
#if __AIE_ARCH__ >= 20
    aie::mmul<4, 8, 8, int8, int8, acc48> m;  // AIE-ML: only acc32 / acc64
#else
    aie::mmul<4, 8, 4, int8, int8, acc64> m;  // AIE: only acc48 / acc80
#endif
    (void)m;
#elif defined(CASE_FLOAT_INT_ACC)
    aie::mmul<4, 8, 4, int8, int8, accfloat> m;
    (void)m;
#elif defined(CASE_BF16_AIE1)
    aie::mmul<4, 8, 4, bfloat16, bfloat16> m;  // no bfloat16 on AIE
    (void)m;
#else
#error "define one CASE_*"
#endif
    return 0;
}
