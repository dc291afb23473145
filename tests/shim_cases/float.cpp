// Floating point: bfloat16 conversion and float / bfloat16 mmul.
// stdin commands:
//   bf16 <n> <float bits (hex)>*n      -> bfloat16 bits (hex) of each value, then float(bf16) bits
//   fmmul <Mt> <Kt> <Nt> A-bits B-bits  -> C bits (float x float, row-major, k-order mac chain)
//   bmmul <Mt> <Kt> <Nt> A-bits B-bits  -> C bits (bfloat16 x bfloat16 -> accfloat) and the
//                                          bfloat16 bits of to_vector<bfloat16>()   [AIE-ML only]
#include <bit>
#include <vector>

#include "common.hpp"

static float read_f32() {
    std::string h;
    std::cin >> h;
    return std::bit_cast<float>(static_cast<uint32_t>(std::stoul(h, nullptr, 16)));
}

template <unsigned M, unsigned K, unsigned N, typename T>
void mmul_cmd() {
    using MMUL = aie::mmul<M, K, N, T, T>;
    unsigned Mt, Kt, Nt;
    std::cin >> Mt >> Kt >> Nt;
    const unsigned R = Mt * M, X = Kt * K, C = Nt * N;
    std::vector<T> a(R * X), b(X * C);
    for (auto& v : a) v = T(read_f32());
    for (auto& v : b) v = T(read_f32());
    std::vector<uint32_t> out(R * C);
    std::vector<uint16_t> outb(R * C);
    for (unsigned i = 0; i < Mt; ++i)
        for (unsigned j = 0; j < Nt; ++j) {
            MMUL m;
            for (unsigned k = 0; k < Kt; ++k) {
                aie::vector<T, MMUL::size_A> ta;
                aie::vector<T, MMUL::size_B> tb;
                for (unsigned r = 0; r < M; ++r)
                    for (unsigned c = 0; c < K; ++c) ta[r * K + c] = a[(i * M + r) * X + k * K + c];
                for (unsigned r = 0; r < K; ++r)
                    for (unsigned c = 0; c < N; ++c) tb[r * N + c] = b[(k * K + r) * C + j * N + c];
                if (k == 0) m.mul(ta, tb);
                else m.mac(ta, tb);
            }
            const auto acc = m.to_accum();
            const auto vf = m.template to_vector<float>();
            for (unsigned r = 0; r < M; ++r)
                for (unsigned c = 0; c < N; ++c) {
                    const unsigned dst = (i * M + r) * C + j * N + c;
                    out[dst] = std::bit_cast<uint32_t>(acc[r * N + c]);
                    if (std::bit_cast<uint32_t>(vf[r * N + c]) != out[dst]) aieflow_shim::fatal("to_vector<float> differs");
                    if constexpr (aieflow_shim::is_aie_ml) {
                        outb[dst] = m.template to_vector<bfloat16>()[r * N + c].bits();
                    }
                }
        }
    for (auto v : out) std::printf("%08x ", v);
    std::printf("\n");
    if (aieflow_shim::detail::is_bfloat16_v<T>) {
        for (auto v : outb) std::printf("%04x ", v);
        std::printf("\n");
    }
}

int main() {
    std::string cmd;
    while (std::cin >> cmd) {
        if (cmd == "bf16") {
            unsigned n;
            std::cin >> n;
            for (unsigned i = 0; i < n; ++i) {
                const bfloat16 b = read_f32();
                const float back = b;
                std::printf("%04x %08x\n", b.bits(), std::bit_cast<uint32_t>(back));
            }
        } else if (cmd == "fmmul") {
#if __AIE_ARCH__ >= 20
            mmul_cmd<4, 8, 4, float>();
#else
            mmul_cmd<4, 2, 4, float>();
#endif
        } else if (cmd == "bmmul") {
#if __AIE_ARCH__ >= 20
            mmul_cmd<4, 8, 4, bfloat16>();
#else
            std::fprintf(stderr, "bfloat16 mmul does not exist on AIE\n");
            return 2;
#endif
        } else {
            std::fprintf(stderr, "unknown command %s\n", cmd.c_str());
            return 2;
        }
    }
    return 0;
}
