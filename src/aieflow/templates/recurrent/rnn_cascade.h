// AI Engine kernels of a recurrent layer mapped column-wise (shared/spec/gru-on-aie.md, the
// "column-wise cascade" distribution): a chain of C::CAS tiles splits the vector (x or h) into
// column blocks of at most C::KC elements; each tile multiplies its block by the matching weight
// columns for the chain's rows, which are the vector lanes (C::GROUPS groups of C::LANES rows),
// and passes the partial sums east on the cascade (aie::accum over writeincr / readincr_v on
// input_cascade / output_cascade, UG1079 "Cascade Stream"; C::CASC_LANES lanes per cascade word,
// as templates/kernels/dense.h).  The chain's last tile sends its rows' 32-bit results as one
// packet (header + C::ROWS words, TLAST on the last) into the same aggregation as the row kernels.
//
//   ColFirst<C>  (vector stream in, cascade out)            starts each row from its bias
//   ColMid<C>    (vector stream in, cascade in, cascade out)
//   ColLast<C>   (vector stream in, cascade in, packet out)
//   ColOnly<C>   (vector stream in, packet out)               a chain of one tile
//
// The whole zero-padded vector is broadcast to every tile; each keeps its block.  A recurrent
// chain starts every sequence from h = 0 without reading (as RowKernel).  Free-running: one call
// per time step.
// Numerics: fp32 accumulates k = 0, 1, ... K-1 in order from the bias (aie::mac rounds each
// product and each sum; the emulator's sequential float32 dot product).  Fixed point, two forms:
//   scalar (C::VECTOR false): hls4ml's order on integer codes (each product cast to the
//     accumulator type, each partial sum cast, rnn_fixed.h) from the bias; the accumulator codes
//     (at most 32 bits) cross the cascade in its integer accumulator lanes unchanged;
//   vector (C::VECTOR, where recurrent/vector.py proves it bit-exact, as for RowKernel): each tile
//     adds its block's terms to the partial sums, lane = row: aie::mac of the weight column by the
//     broadcast element (C::SHIFT <= 0, products on the accumulator's grid) or aie::mul then a
//     per-lane to_vector<int32>(C::SHIFT) under the accumulator's rounding mode and int32 adds
//     (C::SHIFT > 0).  The chain starts from 0, not the bias, and carries the exact sum of the
//     terms so far; vector.py bounds the WHOLE row's sum of |terms| below 2^31, so every partial
//     sum (any tile's prefix) fits the int32 lanes, to_vector<int32>(0) and the cascade's lanes.
//     The chain's last tile adds the bias cast to the accumulator and applies its overflow once
//     per row on the scalar unit (RowKernel::finish's arithmetic).
#pragma once

#include <adf.h>

#include <type_traits>
#include <vector>

#include "aie_api/aie.hpp"
#include "rnn_collect.h"
#include "rnn_fixed.h"
#include "rnn_kernels.h"  // rnn_int_acc, rnn_aie_rounding: the row kernels' MAC lanes and rounding modes

template <class C>
class ColCore {
protected:
    using W = typename C::W;
    using X = typename C::X;
    using V = typename C::V;  // the vector's block as kept: X, or the MAC's lane type (C::VECTOR)
    // accfloat, or integer lanes wide enough for 32-bit accumulator codes: acc48 on AIE (its integer
    // accumulators are 48 / 80 bits), acc64 on AIE-ML (32 / 64).
    using ACC = std::conditional_t<C::FP32, accfloat, std::conditional_t<(__AIE_ARCH__ < 20), acc48, acc64>>;
    using ACCV = aie::accum<ACC, C::LANES>;
    static constexpr int L = C::LANES;
    static constexpr bool VEC = !C::FP32 && C::VECTOR;  // fixed-point vector form (see the header)
    using Part = aie::vector<int32, L>;  // a fixed-point vector tile's partial sums, one per row
    alignas(32) W w_[C::GROUPS * C::KC * L];
    alignas(32) X b_[C::GROUPS * L];  // vector form: the bias already cast to the accumulator
    alignas(32) V v_[C::KC];  // this tile's block of the vector
    int rows_, c0_, kc_;
    int step_ = 0;
    bool started_ = false;  // H_LAST: a previous sequence's last h is on the stream at step 0

    ColCore(const std::vector<W>& w, const std::vector<X>& b, int rows, int c0, int kc) : rows_(rows), c0_(c0), kc_(kc) {
        for (int i = 0; i < C::GROUPS * C::KC * L; ++i) w_[i] = i < static_cast<int>(w.size()) ? w[i] : W(0);
        for (int i = 0; i < C::GROUPS * L; ++i) {
            b_[i] = i < static_cast<int>(b.size()) ? b[i] : X(0);
            if constexpr (VEC) b_[i] = static_cast<X>(rnn::cast(b_[i], C::BFRAC, C::ACC));  // once, not per step
        }
        for (int i = 0; i < C::KC; ++i) v_[i] = V(0);
    }

    // The zero-padded vector from the broadcast stream; this tile keeps elements c0 .. c0 + kc - 1
    // (vector form: narrowed to the MAC's lane type, which vector.py checked the codes fit).
    void read_vector(input_stream<X>* in) {
        if (C::RECURRENT && step_ == 0) {
            if (C::H_LAST && started_)  // the previous sequence's last h (its output kernel's): dropped
                for (int c = 0; c < C::KP / L; ++c) (void)readincr_v<L>(in);
            started_ = true;
            for (int i = 0; i < C::KC; ++i) v_[i] = V(0);  // h_{-1} = 0
        } else {
            alignas(32) X buf[L];
            for (int c = 0; c < C::KP / L; ++c) {
                aie::store_v(buf, readincr_v<L>(in));
                for (int l = 0; l < L; ++l) {
                    const int k = c * L + l - c0_;
                    if (k >= 0 && k < kc_) v_[k] = static_cast<V>(buf[l]);
                }
            }
        }
        if (C::RECURRENT) step_ = step_ + 1 == C::STEPS ? 0 : step_ + 1;
    }

    // What the first tile of a chain starts lane group g from: the bias (fp32, scalar), or 0 (vector).
    ACCV init(int g) const {
        ACCV acc;
        if constexpr (C::FP32) {
            acc.from_vector(aie::load_v<L>(b_ + g * L), 0);
        } else if constexpr (VEC) {
            acc = aie::zeros<ACC, L>();
        } else {
            alignas(32) int32 codes[L];
            for (int l = 0; l < L; ++l) codes[l] = static_cast<int32>(rnn::cast(b_[g * L + l], C::BFRAC, C::ACC));
            acc.from_vector(aie::load_v<L>(codes), 0);
        }
        return acc;
    }

    // Vector form: this tile's terms of lane group g added to the partial sums p (exact: vector.py).
    Part block(Part p, int g) const {
        if constexpr (C::SHIFT > 0) {
            for (int k = 0; k < kc_; ++k)
                chess_prepare_for_pipelining {
                    const auto prod = aie::mul(aie::broadcast<V, L>(v_[k]), aie::load_v<L>(w_ + (g * C::KC + k) * L));
                    p = aie::add(p, prod.template to_vector<int32>(C::SHIFT));
                }
            return p;
        } else {
            aie::accum<rnn_int_acc<V, W>, L> s;
            s.from_vector(p, 0);
            for (int k = 0; k < kc_; ++k)
                chess_prepare_for_pipelining {
                    s = aie::mac(s, aie::broadcast<V, L>(v_[k]), aie::load_v<L>(w_ + (g * C::KC + k) * L));
                }
            return s.template to_vector<int32>(0);
        }
    }

    ACCV mac(ACCV acc, int g) const {
        if constexpr (C::FP32) {
            for (int k = 0; k < kc_; ++k)
                chess_prepare_for_pipelining {
                    acc = aie::mac(acc, aie::load_v<L>(w_ + (g * C::KC + k) * L), v_[k]);
                }
            return acc;
        } else if constexpr (VEC) {
            ACCV out;
            out.from_vector(block(acc.template to_vector<int32>(0), g), 0);
            return out;
        } else {
            alignas(32) int32 codes[L];
            aie::store_v(codes, acc.template to_vector<int32>(0));
            for (int l = 0; l < L; ++l) {
                int64_t a = codes[l];
                for (int k = 0; k < kc_; ++k) {
                    const int64_t p = static_cast<int64_t>(v_[k]) * static_cast<int64_t>(w_[(g * C::KC + k) * L + l]);
                    a = rnn::cast(a + rnn::cast(p, C::PFRAC, C::ACC), C::ACC.frac, C::ACC);
                }
                codes[l] = static_cast<int32>(a);
            }
            ACCV out;
            out.from_vector(aie::load_v<L>(codes), 0);
            return out;
        }
    }

    static ACCV read_cascade(input_cascade<ACC>* cin) {
        ACCV acc;
        for (int p = 0; p < L / C::CASC_LANES; ++p) acc.insert(p, readincr_v<C::CASC_LANES>(cin));
        return acc;
    }
    static void write_cascade(output_cascade<ACC>* cout, const ACCV& acc) {
        for (int p = 0; p < L / C::CASC_LANES; ++p) writeincr(cout, acc.template extract<C::CASC_LANES>(p));
    }

    // The vector kernels' per-lane rounding mode (a core setting: set on every call, as RowKernel).
    static void set_modes() {
        if constexpr (VEC && C::SHIFT > 0) aie::set_rounding(rnn_aie_rounding(C::VRND));
    }

    // The chain's rows as one packet: header, then one 32-bit word per row.
    void send(output_pktstream* out, const X* res) const {
        writeHeader(out, 0, getPacketid(out, 0));
        for (int r = 0; r < rows_; ++r) writeincr(out, rnn::to_word(res[r]), r + 1 == rows_);
    }
    // Lane group g's results: fp32 and scalar as they are; vector: the terms' exact sum (moved onto
    // the accumulator's grid when the products are coarser) plus the cast bias, one overflow per row.
    void store(X* res, const ACCV& acc, int g) const {
        if constexpr (C::FP32) {
            aie::store_v(res + g * L, acc.template to_vector<float>());
        } else if constexpr (VEC) {
            alignas(32) int32 t[L];
            aie::store_v(t, acc.template to_vector<int32>(0));
            const int n = rows_ - g * L < L ? rows_ - g * L : L;  // the group's real rows: padding lanes are not sent
            for (int l = 0; l < n; ++l) {
                int64_t s = t[l];
                if constexpr (C::SHIFT < 0) s = s * (int64_t(1) << -C::SHIFT);
                res[g * L + l] = static_cast<X>(rnn::cast(static_cast<int64_t>(b_[g * L + l]) + s, C::ACC.frac, C::ACC));
            }
        } else {
            aie::store_v(res + g * L, acc.template to_vector<int32>(0));
        }
    }
};

template <class C>
class ColFirst : public ColCore<C> {
    using typename ColCore<C>::X;
    using typename ColCore<C>::W;
    using typename ColCore<C>::ACC;

public:
    ColFirst(const std::vector<W>& w, const std::vector<X>& b, int rows, int c0, int kc) : ColCore<C>(w, b, rows, c0, kc) {}
    void run(input_stream<X>* in, output_cascade<ACC>* cout) {
        this->set_modes();
        this->read_vector(in);
        for (int g = 0; g < C::GROUPS; ++g) this->write_cascade(cout, this->mac(this->init(g), g));
    }
    static void registerKernelClass() { REGISTER_FUNCTION(ColFirst::run); }
};

template <class C>
class ColMid : public ColCore<C> {
    using typename ColCore<C>::X;
    using typename ColCore<C>::W;
    using typename ColCore<C>::ACC;

public:
    ColMid(const std::vector<W>& w, const std::vector<X>& b, int rows, int c0, int kc) : ColCore<C>(w, b, rows, c0, kc) {}
    void run(input_stream<X>* in, input_cascade<ACC>* cin, output_cascade<ACC>* cout) {
        this->set_modes();
        this->read_vector(in);
        for (int g = 0; g < C::GROUPS; ++g) this->write_cascade(cout, this->mac(this->read_cascade(cin), g));
    }
    static void registerKernelClass() { REGISTER_FUNCTION(ColMid::run); }
};

template <class C>
class ColLast : public ColCore<C> {
    using typename ColCore<C>::X;
    using typename ColCore<C>::W;
    using typename ColCore<C>::ACC;

public:
    ColLast(const std::vector<W>& w, const std::vector<X>& b, int rows, int c0, int kc) : ColCore<C>(w, b, rows, c0, kc) {}
    void run(input_stream<X>* in, input_cascade<ACC>* cin, output_pktstream* out) {
        this->set_modes();
        this->read_vector(in);
        alignas(32) X res[C::GROUPS * C::LANES];
        for (int g = 0; g < C::GROUPS; ++g) this->store(res, this->mac(this->read_cascade(cin), g), g);
        this->send(out, res);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(ColLast::run); }
};

template <class C>
class ColOnly : public ColCore<C> {
    using typename ColCore<C>::X;
    using typename ColCore<C>::W;

public:
    ColOnly(const std::vector<W>& w, const std::vector<X>& b, int rows, int c0, int kc) : ColCore<C>(w, b, rows, c0, kc) {}
    void run(input_stream<X>* in, output_pktstream* out) {
        this->set_modes();
        this->read_vector(in);
        alignas(32) X res[C::GROUPS * C::LANES];
        for (int g = 0; g < C::GROUPS; ++g) this->store(res, this->mac(this->init(g), g), g);
        this->send(out, res);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(ColOnly::run); }
};
