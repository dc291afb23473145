// aieflow streamed Dense layer: x86 harness of the epilogue kernel (aieflow verify, `make shim-run`).
// Reads DIR/epilogue.txt ("samples"), DIR/C.bin (the GEMM harness's output) and DIR/bias.bin, runs the
// project's pl/dense_epilogue.cpp unchanged and writes OUT/Y.bin.   usage: --data DIR --out OUT
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "pl/dense_epilogue.h"

namespace {

[[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "dense epilogue harness: %s\n", what.c_str());
    std::exit(1);
}

template <typename T>
std::vector<T> read_bin(const std::filesystem::path& path, std::size_t count) {
    std::vector<T> v(count);
    std::ifstream f(path, std::ios::binary);
    if (!f.good()) fail("cannot read " + path.string());
    f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(T)));
    if (f.gcount() != static_cast<std::streamsize>(count * sizeof(T))) fail(path.string() + ": too short");
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    std::filesystem::path data, out;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string key = argv[i];
        if (key == "--data") data = argv[i + 1];
        else if (key == "--out") out = argv[i + 1];
        else fail("unknown option " + key);
    }
    if (data.empty() || out.empty()) fail("usage: --data DIR --out DIR");
    int samples = 0;
    {
        std::ifstream f(data / "epilogue.txt");
        f >> samples;
        if (!f || samples < 1) fail("epilogue.txt: expected the number of samples");
    }
    const std::size_t count = static_cast<std::size_t>(samples) * dense_epi::OUT_FEATURES;
    const auto C = read_bin<gemm_cfg::c_t>(data / "C.bin", count);
    const auto bias = read_bin<dense_epi::bias_t>(data / "bias.bin", dense_epi::OUT_FEATURES);
    std::vector<dense_epi::y_t> Y(count);
    dense_epilogue(C.data(), bias.data(), Y.data(), samples);
    std::filesystem::create_directories(out);
    std::ofstream f(out / "Y.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(Y.data()), static_cast<std::streamsize>(Y.size() * sizeof(dense_epi::y_t)));
    if (!f.good()) fail("cannot write Y.bin");
    return 0;
}
