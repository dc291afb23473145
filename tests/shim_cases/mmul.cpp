// Tiled integer matrix multiplication through aie::mmul.
// stdin: <variant> <Mt> <Kt> <Nt> <shift> <rounding> <saturation>
//        then the (Mt*M) x (Kt*K) matrix A and the (Kt*K) x (Nt*N) matrix B, row-major.
// stdout: line 1: the raw accumulator lanes of C (row-major, (Mt*M) x (Nt*N)),
//         line 2: C after to_vector<OutT>(shift) (OutT = int8 for 8-bit A, int16 otherwise).
#include <vector>

#include "common.hpp"

// "Kernel": A and B are pre-tiled (tile-major, each tile row-major), C is written tile-major.
template <typename MMUL, typename OutT>
void matmul_tiled(const typename MMUL::type_A* A, const typename MMUL::type_B* B, OutT* C,
                  std::vector<i128>& raw, unsigned Mt, unsigned Kt, unsigned Nt, int shift) {
    for (unsigned i = 0; i < Mt; ++i) {
        for (unsigned j = 0; j < Nt; ++j) {
            auto pa = aie::begin_vector<MMUL::size_A>(A + (i * Kt) * MMUL::size_A);
            MMUL m;
            for (unsigned k = 0; k < Kt; ++k) {
                const auto a = *pa++;
                const auto b = aie::load_v<MMUL::size_B>(B + (k * Nt + j) * MMUL::size_B);
                if (k == 0) m.mul(a, b);
                else m.mac(a, b);
            }
            auto acc = m.to_accum();
            for (unsigned c = 0; c < MMUL::size_C; ++c)
                raw[(i * Nt + j) * MMUL::size_C + c] = static_cast<i128>(acc[c]);
            aie::store_v(C + (i * Nt + j) * MMUL::size_C, m.template to_vector<OutT>(shift));
        }
    }
}

template <unsigned M, unsigned K, unsigned N, typename TA, typename TB, typename Tag = accauto>
void run_variant() {
    using MMUL = aie::mmul<M, K, N, TA, TB, Tag>;
    using OutT = std::conditional_t<sizeof(TA) == 1, int8, int16>;
    unsigned Mt, Kt, Nt;
    int shift;
    std::string rnd, sat;
    std::cin >> Mt >> Kt >> Nt >> shift >> rnd >> sat;
    const unsigned R = Mt * M, X = Kt * K, Cc = Nt * N;
    std::vector<long long> a(R * X), b(X * Cc);
    for (auto& v : a) std::cin >> v;
    for (auto& v : b) std::cin >> v;
    // tile A and B
    std::vector<TA> At(R * X);
    std::vector<TB> Bt(X * Cc);
    for (unsigned r = 0; r < R; ++r)
        for (unsigned c = 0; c < X; ++c)
            At[((r / M) * Kt + c / K) * (M * K) + (r % M) * K + c % K] = static_cast<TA>(a[r * X + c]);
    for (unsigned r = 0; r < X; ++r)
        for (unsigned c = 0; c < Cc; ++c)
            Bt[((r / K) * Nt + c / N) * (K * N) + (r % K) * N + c % N] = static_cast<TB>(b[r * Cc + c]);
    std::vector<OutT> Ct(R * Cc);
    std::vector<i128> raw(R * Cc);
    aie::set_rounding(parse_rounding(rnd));
    aie::set_saturation(parse_saturation(sat));
    matmul_tiled<MMUL>(At.data(), Bt.data(), Ct.data(), raw, Mt, Kt, Nt, shift);
    // untile and print
    for (int pass = 0; pass < 2; ++pass) {
        for (unsigned r = 0; r < R; ++r)
            for (unsigned c = 0; c < Cc; ++c) {
                const unsigned idx = ((r / M) * Nt + c / N) * (M * N) + (r % M) * N + c % N;
                if (pass == 0) std::printf("%s ", i128_str(raw[idx]).c_str());
                else std::printf("%lld ", static_cast<long long>(Ct[idx]));
            }
        std::printf("\n");
    }
    std::printf("lane_bits %u\n", MMUL::accum_type::lane_bits);
}

int main() {
    std::string variant;
    std::cin >> variant;
#if __AIE_ARCH__ >= 20
    if (variant == "i8i8_4x8x8") run_variant<4, 8, 8, int8, int8>();
    else if (variant == "i8i8_4x16x8") run_variant<4, 16, 8, int8, int8>();
    else if (variant == "u8i8_4x8x8") run_variant<4, 8, 8, uint8, int8>();
    else if (variant == "i16i8_4x4x8") run_variant<4, 4, 8, int16, int8>();
    else if (variant == "i16i16_4x4x4") run_variant<4, 4, 4, int16, int16>();
    else if (variant == "i16i16_4x4x4_acc32") run_variant<4, 4, 4, int16, int16, acc32>();
    else if (variant == "i32i16_4x4x4") run_variant<4, 4, 4, int32, int16>();
#else
    if (variant == "i8i8_4x8x4") run_variant<4, 8, 4, int8, int8>();
    else if (variant == "i8i8_2x8x8") run_variant<2, 8, 8, int8, int8>();
    else if (variant == "i16i8_4x4x4") run_variant<4, 4, 4, int16, int8>();
    else if (variant == "i16i16_4x4x4") run_variant<4, 4, 4, int16, int16>();
    else if (variant == "i16i16_4x2x8") run_variant<4, 2, 8, int16, int16>();
    else if (variant == "i32i16_4x4x4") run_variant<4, 4, 4, int32, int16>();
#endif
    else {
        std::fprintf(stderr, "unknown variant %s\n", variant.c_str());
        return 2;
    }
    return 0;
}
