// aieflow: C simulation of the PL data movers (pl/mm2s.cpp, pl/s2mm.cpp), compiled with g++
// against Xilinx's open ap_int / hls_stream headers (HLS C simulation: the kernels run as C++).
// Its interface to the rest of the x86 system run is plain std types, so the AI Engine shim's
// translation unit never sees the ap_types (x86/system.cpp).
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "pl/mm2s.cpp"
#include "pl/s2mm.cpp"

using aieflow_pl::PLIO_BITS;
using aieflow_pl::word_t;

namespace {
// The host's 64-bit DDR words as stream beats of PLIO_BITS (32, 64 or 128), the low bits first.
static_assert(PLIO_BITS % 32 == 0 && PLIO_BITS <= 128, "a PLIO is 32, 64 or 128 bits wide");
constexpr unsigned CHUNKS = PLIO_BITS / 32;

std::uint32_t chunk(const std::vector<std::uint64_t>& ddr, std::size_t i) {
    return static_cast<std::uint32_t>(ddr.at(i / 2) >> (32 * (i % 2)));
}

std::vector<word_t> beats_of(const std::vector<std::uint64_t>& ddr, std::size_t beats) {
    std::vector<word_t> out(beats);
    for (std::size_t b = 0; b < beats; ++b)
        for (unsigned c = 0; c < CHUNKS; ++c) out[b].range(32 * c + 31, 32 * c) = chunk(ddr, b * CHUNKS + c);
    return out;
}

std::vector<std::uint64_t> ddr_of(const std::vector<word_t>& beats) {
    std::vector<std::uint64_t> out((beats.size() * CHUNKS + 1) / 2, 0);
    for (std::size_t b = 0; b < beats.size(); ++b)
        for (unsigned c = 0; c < CHUNKS; ++c) {
            const std::size_t i = b * CHUNKS + c;
            out[i / 2] |= std::uint64_t(beats[b].range(32 * c + 31, 32 * c).to_uint()) << (32 * (i % 2));
        }
    return out;
}
}  // namespace

// DDR words -> what mm2s streams into the PLIO (as DDR words again, for the shim's PLIO).
std::vector<std::uint64_t> csim_mm2s(const std::vector<std::uint64_t>& ddr, std::size_t beats) {
    std::vector<word_t> mem = beats_of(ddr, beats);
    hls::stream<word_t> s;
    mm2s(mem.data(), s, static_cast<int>(mem.size()));
    std::vector<word_t> out;
    while (!s.empty()) out.push_back(s.read());
    if (out.size() != beats) throw std::runtime_error("mm2s streamed a different number of words");
    return ddr_of(out);
}

// What a PLIO streams out (as DDR words) -> the DDR words s2mm writes.
std::vector<std::uint64_t> csim_s2mm(const std::vector<std::uint64_t>& stream, std::size_t beats) {
    hls::stream<word_t> s;
    for (const word_t& w : beats_of(stream, beats)) s.write(w);
    // DDR before the kernel runs: a pattern, so words s2mm does not write do not pass as zeros
    const std::vector<std::uint64_t> stale((beats * CHUNKS + 1) / 2, 0xA5A5A5A5A5A5A5A5ull);
    std::vector<word_t> mem = beats_of(stale, beats);
    s2mm(mem.data(), s, static_cast<int>(mem.size()));
    if (!s.empty()) throw std::runtime_error("s2mm left words in its stream");
    return ddr_of(mem);
}
