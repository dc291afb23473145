// aie::lut / aie::parallel_lookup on x86 (tests/test_shim_lut.py): reads from stdin
//   index type (8 or 16), policy (0 saturate, 1 truncate), size, step_bits, bias,
//   2 size physical ab values, 2 size physical cd values, count (multiple of 32), count indices;
// prints the fetched int16 values, one per line.
#include <aie_api/aie.hpp>

#include <iostream>
#include <vector>

template <typename T, aie::lut_oor_policy P>
static void run(const aie::lut<AIEFLOW_LUT_P, int16>& t, unsigned step, int bias, const std::vector<int>& idx) {
    aie::parallel_lookup<T, aie::lut<AIEFLOW_LUT_P, int16>, P> look(t, step, bias);
    for (std::size_t i = 0; i < idx.size(); i += 32) {
        aie::vector<T, 32> v;
        for (unsigned j = 0; j < 32; ++j) v[j] = static_cast<T>(idx[i + j]);
        const aie::vector<int16, 32> out = look.fetch(v);
        for (unsigned j = 0; j < 32; ++j) std::cout << out[j] << "\n";
    }
}

int main() {
    int bits, policy, size, step, bias, count;
    std::cin >> bits >> policy >> size >> step >> bias;
    std::vector<int16> ab(2 * size), cd(2 * size);
    for (auto& v : ab) { int x; std::cin >> x; v = static_cast<int16>(x); }
    for (auto& v : cd) { int x; std::cin >> x; v = static_cast<int16>(x); }
    std::cin >> count;
    std::vector<int> idx(count);
    for (auto& v : idx) std::cin >> v;
    const aie::lut<AIEFLOW_LUT_P, int16> t(static_cast<unsigned>(size), ab.data(), cd.data());
    if (bits == 8 && policy == 0) run<int8, aie::lut_oor_policy::saturate>(t, step, bias, idx);
    if (bits == 8 && policy == 1) run<int8, aie::lut_oor_policy::truncate>(t, step, bias, idx);
    if (bits == 16 && policy == 0) run<int16, aie::lut_oor_policy::saturate>(t, step, bias, idx);
    if (bits == 16 && policy == 1) run<int16, aie::lut_oor_policy::truncate>(t, step, bias, idx);
    return 0;
}
