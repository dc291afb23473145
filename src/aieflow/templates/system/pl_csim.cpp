// aieflow: C simulation of the PL data movers (pl/mm2s.cpp, pl/s2mm.cpp), compiled with g++
// against Xilinx's open ap_int / hls_stream headers (HLS C simulation: the kernels run as C++).
// Its interface to the rest of the x86 system run is plain std types, so the AI Engine shim's
// translation unit never sees the ap_types (x86/system.cpp).
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "pl/mm2s.cpp"
#include "pl/s2mm.cpp"

using aieflow_pl::word_t;

// DDR words -> what mm2s streams into the PLIO.
std::vector<std::uint64_t> csim_mm2s(const std::vector<std::uint64_t>& ddr) {
    std::vector<word_t> mem(ddr.begin(), ddr.end());
    hls::stream<word_t> s;
    mm2s(mem.data(), s, static_cast<int>(mem.size()));
    std::vector<std::uint64_t> out;
    while (!s.empty()) out.push_back(s.read().to_uint64());
    if (out.size() != ddr.size()) throw std::runtime_error("mm2s streamed a different number of words");
    return out;
}

// What a PLIO streams out -> the DDR words s2mm writes.
std::vector<std::uint64_t> csim_s2mm(const std::vector<std::uint64_t>& stream) {
    hls::stream<word_t> s;
    for (std::uint64_t w : stream) s.write(word_t(w));
    // DDR before the kernel runs: a pattern, so words s2mm does not write do not pass as zeros
    const std::vector<std::uint64_t> stale(stream.size(), 0xA5A5A5A5A5A5A5A5ull);
    std::vector<word_t> mem(stale.begin(), stale.end());
    s2mm(mem.data(), s, static_cast<int>(mem.size()));
    if (!s.empty()) throw std::runtime_error("s2mm left words in its stream");
    std::vector<std::uint64_t> out;
    for (const word_t& w : mem) out.push_back(w.to_uint64());
    return out;
}
