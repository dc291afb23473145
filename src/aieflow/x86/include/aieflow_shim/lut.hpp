// aieflow x86 shim: aie::lut and aie::parallel_lookup (UG1529 "Lookup Tables", UG1603 "Lookup Tables
// and Linear Approximation"), AIE-ML family only.
//
// Memory layout (UG1603): the table values are stored in blocks of REPEAT bits (128 on AIE-ML, 256 on
// AIE-MLv2), each block written twice in a row, in two arrays (ab and cd) that the graph places in
// different banks: logical entry i sits at ab[(i / V) 2V + i % V] and ab[(i / V) 2V + V + i % V] (and the
// same in cd), V = REPEAT / bits of the value type.  ParallelAccesses: 4 on AIE-ML, 8 on AIE-MLv2 (UG1603
// 2026.1: the values present four / eight times).  The shim reads every copy of the entry it fetches and
// aborts when they differ, so a kernel that lays the table out wrongly fails on x86.
//
// parallel_lookup<T, lut, policy>(l, step_bits, bias).fetch(v): lane j reads entry
// idx = (v[j] >> step_bits) + bias (arithmetic shift), out of [0, size) clamped (policy saturate, the
// default) or reduced modulo the size (truncate, for a power-of-two size).  Shim assumptions: the index
// arithmetic in int (the documentation gives no width), and that the documented index types (int8,
// uint8, int16) are the ones accepted.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "config.hpp"
#include "types.hpp"
#include "vector.hpp"

namespace aie {

enum class lut_oor_policy { saturate, truncate };

template <unsigned ParallelAccesses, typename OffsetType, typename SlopeType = OffsetType>
struct lut {
    // dependent on the template's parameter, so only a use on AIE1 fails (not every AIE1 build that
    // includes aie.hpp: a non-dependent false assertion fires at the template's definition)
    static_assert(aieflow_shim::is_aie_ml && ParallelAccesses > 0, "aie::lut: lookup tables exist from AIE-ML on (UG1529)");
    static_assert(ParallelAccesses == (aieflow_shim::arch >= 21 ? 8u : 4u),
                  "aie::lut: 4 parallel accesses on AIE-ML, 8 on AIE-MLv2 (UG1603)");
    using offset_type = OffsetType;
    using slope_type = SlopeType;
    static constexpr unsigned repeat_bits = aieflow_shim::arch >= 21 ? 256u : 128u;
    static constexpr unsigned values_per_block = repeat_bits / (8u * sizeof(OffsetType));

    lut(unsigned elems, const void* ab, const void* cd)
        : size(elems), ab_(static_cast<const OffsetType*>(ab)), cd_(static_cast<const OffsetType*>(cd)) {}

    // Logical entry i, every copy of it checked.
    OffsetType entry(unsigned i) const {
        constexpr unsigned V = values_per_block;
        const unsigned p = (i / V) * 2 * V + i % V;
        const OffsetType v = ab_[p];
        if (!(ab_[p + V] == v && cd_[p] == v && cd_[p + V] == v)) {
            std::fprintf(stderr, "aie::lut (aieflow shim): the copies of entry %u differ: not the documented layout\n", i);
            std::abort();
        }
        return v;
    }

    unsigned size;

private:
    const OffsetType* ab_;
    const OffsetType* cd_;
};

template <typename T, typename MyLUT, lut_oor_policy oor_policy = lut_oor_policy::saturate>
struct parallel_lookup {
    static_assert(std::is_same_v<T, int8> || std::is_same_v<T, uint8> || std::is_same_v<T, int16>,
                  "aie::parallel_lookup: int8, uint8 or int16 indices (UG1529)");
    parallel_lookup(const MyLUT& l, unsigned step_bits = 0, int bias = 0) : lut_(l), step_(step_bits), bias_(bias) {}

    template <unsigned N>
    vector<typename MyLUT::offset_type, N> fetch(const vector<T, N>& input) const {
        vector<typename MyLUT::offset_type, N> out;
        const int n = static_cast<int>(lut_.size);
        for (unsigned j = 0; j < N; ++j) {
            int idx = (static_cast<int>(input[j]) >> step_) + bias_;
            if constexpr (oor_policy == lut_oor_policy::saturate) idx = idx < 0 ? 0 : (idx >= n ? n - 1 : idx);
            else idx &= n - 1;
            out[j] = lut_.entry(static_cast<unsigned>(idx));
        }
        return out;
    }

private:
    const MyLUT& lut_;
    unsigned step_;
    int bias_;
};

}  // namespace aie
