// The compact mapping of a recurrent layer (GRU / LSTM; docs/recurrent.md "Compact mapping"): the whole
// cell on ONE tile.  Per call (one time step, free-running) the kernel
//
//   1. reads x_t from its input stream (C::NX words, one per cycle: the design's x PLIO, or the previous
//      layer's output stream), narrowed to the W x product's lane type;
//   2. computes gx = W x_t + b and gh = U h_{t-1} + b' in column form: the gate-stacked rows are the
//      vector lanes (C::LANES rows per group), and each column k adds w[k][rows] * x_k (aie::mac / aie::mul
//      of the weight column by the broadcast element), exactly as the cascade chains of rnn_cascade.h;
//   3. applies the gate math and the state update (the layer's C::Gates: the vector form rnn_vgates.h holds
//      where recurrent/compact.py proves it bit-exact, else rnn_cell.h's scalar Cell::step);
//   4. keeps h (and the LSTM's c) in its own memory for the next step: no packets, no PL round trip;
//   5. after the layer's output steps writes its output on its output stream: h (padded for the next
//      layer) or, after the last layer, the dense head's output (Cell::output, in this tile).
//
// Numerics, per product (P = CUCfg / CWCfg, generated per layer in rnn_config.h):
//   fp32: each lane starts from its bias and accumulates k = 0, 1, ... (aie::mac rounds each product and
//     sum: the emulator's sequential float32 order, as a cascade chain of one tile);
//   fixed point, P::VECTOR (recurrent/vector.py proves the lane-parallel sum exact): the terms' exact sum
//     in int32 lanes (aie::mac on the accumulator grid, P::SHIFT <= 0; or aie::mul and a per-lane
//     to_vector<int32>(P::SHIFT) under the accumulator's rounding mode, then int32 adds), then per lane
//     group with vector ops: the products moved onto the accumulator's grid (upshift, P::SHIFT < 0), the
//     bias already cast to the accumulator added, and the accumulator's overflow (WRAP narrower than 32
//     bits: upshift then arithmetic downshift; SAT needs none: vector.py proves no sum saturates);
//   fixed point, scalar: hls4ml's order per row (rnn_fixed.h), each product and partial sum cast.
#pragma once

#include <adf.h>

#include <type_traits>
#include <vector>

#include "aie_api/aie.hpp"
#include "rnn_fixed.h"
#include "rnn_kernels.h"  // rnn_int_acc, rnn_aie_rounding

// Helpers of the generated vector gate math (rnn_vgates.h, recurrent/compact.py): int32 lanes, exact
// accumulator lanes for their products (acc64 on AIE-ML, acc80 on AIE).
namespace rnnv {
template <int L>
using vi = aie::vector<int32, L>;
template <int L>
using va = aie::accum<rnn_int_acc<int32, int32>, L>;
// An ap_fixed type's WRAP overflow of int32 lanes holding its value (or that value mod 2^32): keep the
// low `bits` bits, sign extended.
template <int L>
inline vi<L> wrap(const vi<L>& v, int bits) {
    return aie::downshift(aie::upshift(v, 32 - bits), 32 - bits);
}
// SAT / SAT_SYM overflow: clamp to [lo, hi].
template <int L>
inline vi<L> clamp(const vi<L>& v, int32 lo, int32 hi) {
    return aie::max(aie::min(v, hi), lo);
}
// Table entries at in-range indices: read on the scalar unit for the group's n real lanes (T: int32
// for rnn_cell.h's tables; int16 or int32 for a widened table, read through an offset pointer).
template <int L, typename T>
inline vi<L> gather(const T* table, const vi<L>& idx, int n) {
    alignas(aie::vector_decl_align) int32 ib[L];
    alignas(aie::vector_decl_align) int32 ob[L];
    aie::store_v(ib, idx);
    for (int l = 0; l < L; ++l) ob[l] = l < n ? table[ib[l]] : 0;
    return aie::load_v<L>(ob);
}
// The products' per-lane rounding (VRND: an rnn::Rnd, -1: none), set before each step's products: the gate
// math may have changed the modes.  Shared by the compact tile and the grid's tiles.
template <int VRND>
inline void product_modes() {
    if constexpr (VRND >= 0) {
        aie::set_rounding(rnn_aie_rounding(VRND));
        aie::set_saturation(aie::saturation_mode::none);
    }
}
// N words of a stream (x_t), narrowed to a product's lane type V.
template <int N, typename V, typename S>
inline void read_vector(input_stream<S>* in, V* v) {
    for (int k = 0; k < N; ++k) v[k] = static_cast<V>(readincr(in));
}
// The state a tile keeps between steps: h and c of its units (NHP, with room for the last lane group) and
// h_{t-1} as the U h product reads it (NV elements of its lane type V); reset() at a sequence's start.
template <typename X, typename V, int NHP, int NV>
struct State {
    alignas(aie::vector_decl_align) X h[NHP];
    alignas(aie::vector_decl_align) X c[NHP];
    alignas(32) V hv[NV];
    void reset() {
        for (int i = 0; i < NHP; ++i) {
            h[i] = X(0);
            c[i] = X(0);
        }
        for (int i = 0; i < NV; ++i) hv[i] = V(0);
    }
};
// Zero n elements (the gate vectors before the first step).
template <typename X>
inline void zero(X* v, int n) {
    for (int i = 0; i < n; ++i) v[i] = X(0);
}
}  // namespace rnnv

// One gate-stacked product in column form: P::GN rows (P::GP padded to the lanes) over P::K columns.
template <class P>
class CompactProduct {
public:
    using W = typename P::W;
    using X = typename P::X;
    using V = typename P::V;
    static constexpr int L = P::LANES;
    static constexpr int GROUPS = P::GP / L;
    static constexpr int BLOCK = P::BLOCK;  // lane groups per pass over the columns (costs.COMPACT_GROUP_BLOCK)

private:
    static constexpr bool VEC = !P::FP32 && P::VECTOR;
    alignas(aie::vector_decl_align) W w_[P::K * P::GP];  // column k: rows 0 .. GP - 1
    alignas(aie::vector_decl_align) X b_[P::GP];        // fp32 / scalar: the bias; vector: the bias cast to the accumulator

public:
    CompactProduct(const std::vector<W>& w, const std::vector<X>& b) {
        for (int i = 0; i < P::K * P::GP; ++i) w_[i] = i < static_cast<int>(w.size()) ? w[i] : W(0);
        for (int i = 0; i < P::GP; ++i) {
            b_[i] = i < static_cast<int>(b.size()) ? b[i] : X(0);
            if constexpr (VEC) b_[i] = static_cast<X>(rnn::cast(b_[i], P::BFRAC, P::ACC));  // once, not per step
        }
    }

    // The exact sums of the terms of every row (int32 lanes; fixed point, P::VECTOR only), not finished, + carry
    // (another column block's sums: the grid's partial-sum tiles, rnn_grid.h) where given.  int32 adds wrap, so
    // the blocks' sums added in any order are the whole row's sum as terms() forms it.
    void sums(const V* v, X* out, const X* carry) const {
        static_assert(VEC, "column-block sums: fixed-point vector products only");
        for (int g0 = 0; g0 < GROUPS; g0 += BLOCK) terms(v, g0, out, carry, false);
    }

    // out[r] = row r of the product of the vector v (P::K elements), for r < GP; carry (vector products only): the
    // other column blocks' sums of each row, added before the finish.
    void compute(const V* v, X* out, const X* carry = nullptr) const {
        (void)carry;  // vector products only
        if constexpr (P::FP32) {
            for (int g0 = 0; g0 < GROUPS; g0 += BLOCK) {  // as terms(): columns outer, a block of groups inner
                const int nb = GROUPS - g0 < BLOCK ? GROUPS - g0 : BLOCK;
                aie::accum<accfloat, L> acc[BLOCK];
                for (int g = 0; g < nb; ++g) acc[g].from_vector(aie::load_v<L>(b_ + (g0 + g) * L), 0);
                for (int k = 0; k < P::K; ++k)
                    chess_prepare_for_pipelining {
                        const aie::vector<V, L> xk = aie::broadcast<V, L>(v[k]);  // float, or bf16 (W = bfloat16)
                        for (int g = 0; g < nb; ++g) acc[g] = aie::mac(acc[g], xk, aie::load_v<L>(w_ + k * P::GP + (g0 + g) * L));
                    }
                for (int g = 0; g < nb; ++g) aie::store_v(out + (g0 + g) * L, acc[g].template to_vector<float>());
            }
        } else if constexpr (VEC) {
            for (int g0 = 0; g0 < GROUPS; g0 += BLOCK) terms(v, g0, out, carry, true);
        } else {
            for (int r = 0; r < P::GP; ++r) {
                int64_t acc = rnn::cast(b_[r], P::BFRAC, P::ACC);
                for (int k = 0; k < P::K; ++k) {
                    const int64_t p = static_cast<int64_t>(v[k]) * static_cast<int64_t>(w_[k * P::GP + r]);
                    acc = rnn::cast(acc + rnn::cast(p, P::PFRAC, P::ACC), P::ACC.frac, P::ACC);
                }
                out[r] = static_cast<X>(acc);
            }
        }
    }

private:
    // The exact sums of lane groups g0 .. g0 + BLOCK - 1 (int32 lanes: vector.py bounds every row's sum below
    // 2^31), finished and stored.  Columns outer, the block's groups inner: one broadcast of v[k] serves
    // every group of the block, and the block's sums stay in registers (at most BLOCK, 4 as dense.h's 2 x 2
    // accumulator blocking); each lane still adds its terms in k order.  carry: added per lane before the finish;
    // fin false: the sums stored unfinished.
    void terms(const V* v, int g0, X* out, const X* carry, bool fin) const {
        constexpr int B = BLOCK;
        const int nb = GROUPS - g0 < B ? GROUPS - g0 : B;
        if constexpr (P::SHIFT > 0) {
            aie::vector<int32, L> s[B];
            for (int g = 0; g < B; ++g) s[g] = aie::zeros<int32, L>();
            for (int k = 0; k < P::K; ++k)
                chess_prepare_for_pipelining {
                    const aie::vector<V, L> xk = aie::broadcast<V, L>(v[k]);
                    for (int g = 0; g < nb; ++g) {
                        const auto prod = aie::mul(xk, aie::load_v<L>(w_ + k * P::GP + (g0 + g) * L));
                        s[g] = aie::add(s[g], prod.template to_vector<int32>(P::SHIFT));
                    }
                }
            for (int g = 0; g < nb; ++g) aie::store_v(out + (g0 + g) * L, finish(s[g], g0 + g, carry, fin));
        } else {
            aie::accum<rnn_int_acc<V, W>, L> s[B];
            for (int g = 0; g < B; ++g) s[g] = aie::zeros<rnn_int_acc<V, W>, L>();
            for (int k = 0; k < P::K; ++k)
                chess_prepare_for_pipelining {
                    const aie::vector<V, L> xk = aie::broadcast<V, L>(v[k]);
                    for (int g = 0; g < nb; ++g) s[g] = aie::mac(s[g], xk, aie::load_v<L>(w_ + k * P::GP + (g0 + g) * L));
                }
            for (int g = 0; g < nb; ++g)
                aie::store_v(out + (g0 + g) * L, finish(s[g].template to_vector<int32>(0), g0 + g, carry, fin));
        }
    }

    // + the carried sums, then the terms onto the accumulator's grid, + the cast bias, the accumulator's overflow:
    // vector ops per group (fin false: the sum + carry only).
    aie::vector<int32, L> finish(aie::vector<int32, L> t, int g, const X* carry, bool fin) const {
        if (carry) t = aie::add(t, aie::load_v<L>(carry + g * L));
        if (!fin) return t;
        if constexpr (P::SHIFT < 0) t = aie::upshift(t, -P::SHIFT);
        t = aie::add(t, aie::load_v<L>(b_ + g * L));
        if constexpr (P::WRAP_BITS > 0 && P::WRAP_BITS < 32)
            t = aie::downshift(aie::upshift(t, 32 - P::WRAP_BITS), 32 - P::WRAP_BITS);
        return t;
    }
};

template <class C>
class CompactCell {
    using X = typename C::X;
    using UP = typename C::U;
    using WP = typename C::Wx;
    using Cell = typename C::Cell;
    using UV = typename UP::V;
    using WV = typename WP::V;
    CompactProduct<UP> u_;
    CompactProduct<WP> w_;
    rnnv::State<X, UV, C::NHP, C::NH> s_;  // h, c and h_{t-1} in the U h product's lane type
    alignas(32) WV xv_[C::NX];              // x_t in the W x product's lane type
    alignas(aie::vector_decl_align) X gx_[C::GP];
    alignas(aie::vector_decl_align) X gh_[C::GP];
    int step_ = 0;

public:
    CompactCell(const std::vector<typename UP::W>& wu, const std::vector<X>& bu, const std::vector<typename WP::W>& ww,
                const std::vector<X>& bw)
        : u_(wu, bu), w_(ww, bw) {
        rnnv::zero(xv_, C::NX);
        rnnv::zero(gx_, C::GP);
        rnnv::zero(gh_, C::GP);
        s_.reset();
    }

    void run(input_stream<X>* x_in, output_stream<X>* y_out) {
        rnnv::product_modes<C::VRND>();
        rnnv::read_vector<C::NX>(x_in, xv_);
        w_.compute(xv_, gx_);
        u_.compute(s_.hv, gh_);  // step 0: h_{-1} = 0, so gh is the cast bias
        C::Gates::step(gx_, gh_, s_.h, s_.c);
        for (int j = 0; j < C::NH; ++j) s_.hv[j] = static_cast<UV>(s_.h[j]);
        if (Cell::emits(step_)) {
            X y[Cell::NY];
            C::Head::output(s_.h, y);  // h (padded for the next layer), or the dense head (rnn_vgates.h / rnn_cell.h)
            for (int i = 0; i < Cell::NY; ++i) writeincr(y_out, y[i]);
        }
        if (step_ + 1 == C::STEPS) {
            s_.reset();
            step_ = 0;
        } else {
            ++step_;
        }
    }

    static void registerKernelClass() { REGISTER_FUNCTION(CompactCell::run); }
};
