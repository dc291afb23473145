// aieflow CNN rows mapping (cnn/rows.py): each stage is one kernel that runs once per frame and
// moves the frame row by row over its stream ports (UG1079 readincr / writeincr).  It keeps a line
// buffer of KH input rows (C_IN x KH x W, CHW: the window of one output row) in tile memory, reads
// the rows it needs as it goes (a row of every part of a concat, in channel order; rows a stride
// skips are read and dropped; the frame's top / bottom padding rows hold the padding code), and
// computes each output row with the stream mapping's ConvCore / Pool on that one-row "image"
// (the configuration C has H = KH, PT = 0, OH = 1; IH, ISH, IPT, IOH are the frame's).  An output
// row (OG x OW, or UP_H rows of OG x OW UP_W with a fused nearest upsampling) is written to every
// output stream, row after row, each row channel by channel.
//
// A fused residual add (SKIP_C > 0): the skip's row r comes with input row r, as the last SKIP_C
// channels of the row (its own stream on AIE1, the memory-tile row on AIE-ML), into a ring of KH
// rows; output row oy adds skip row oy (the convolution keeps the frame's size: cnn/rows.py).
// A bilinear upsampling (UPM > 0): stored row y reads conv rows i0(y) and i1(y) <= i0(y) + 1
// (cnn_kernels.h up_tap), so the kernel computes conv rows as far as i1(y) into a ring of two rows
// and interpolates (up_mix; fp32 / bf16: up_weights / up_mix_float): the one-row look-ahead.
// A global pooling (RowGlobalPool): Pool's step per value as the rows pass, its finish per channel.
#pragma once

#include "cnn_kernels.h"

namespace aieflow_cnn {

template <class C>
struct RowLines {
    using TA = typename C::TA;
    static_assert(C::OH == 1 && C::H == C::KH && C::PT == 0, "the one-row view: a window of KH rows");
    static constexpr unsigned SKIP_ROWS = C::SKIP_C ? C::KH : 1;
    alignas(32) TA lines[C::C_IN * C::KH * C::W];
    alignas(32) TA skip[C::SKIP_C ? SKIP_ROWS * C::SKIP_C * C::W : 1];  // rows next - KH .. next - 1 of the skip
    unsigned next = 0;  // input rows read in this frame

    // Input row `next` into line-buffer slot `slot`: channels 0 .. C_IN - 1 of the parts in order, then
    // a residual's skip channels into the skip ring.
    template <unsigned NI>
    void read_row(input_stream<TA>* const (&ins)[NI], unsigned slot) {
        unsigned ch = 0;
        for (unsigned p = 0; p < NI; ++p)
            for (unsigned c = 0; c < C::PART_C[p]; ++c, ++ch)
                for (unsigned x = 0; x < C::W; ++x) {
                    const TA v = readincr(ins[p]);
                    if (ch < C::C_IN)
                        lines[(ch * C::KH + slot) * C::W + x] = v;
                    else
                        skip[((next % SKIP_ROWS) * C::SKIP_C + ch - C::C_IN) * C::W + x] = v;
                }
    }

    const TA* skip_row(unsigned oy) const { return skip + (oy % SKIP_ROWS) * C::SKIP_C * C::W; }

    template <unsigned NI>
    static void drop_row(input_stream<TA>* const (&ins)[NI]) {
        for (unsigned p = 0; p < NI; ++p)
            for (unsigned i = 0; i < C::PART_C[p] * C::W; ++i) (void)readincr(ins[p]);
    }

    void pad_row(unsigned slot) {
        for (unsigned c = 0; c < C::C_IN; ++c)
            for (unsigned x = 0; x < C::W; ++x) lines[(c * C::KH + slot) * C::W + x] = TA(C::PADV);
    }

    // The window of output row oy: input rows oy ISH - IPT .. + KH - 1 (kept rows slide up).
    template <unsigned NI>
    void window(input_stream<TA>* const (&ins)[NI], unsigned oy) {
        const int top = int(oy * C::ISH) - int(C::IPT);
        for (unsigned i = 0; i < C::KH; ++i) {
            if (oy > 0 && i + C::ISH < C::KH) {  // row top + i is already here, in slot i + ISH
                for (unsigned c = 0; c < C::C_IN; ++c)
                    for (unsigned x = 0; x < C::W; ++x)
                        lines[(c * C::KH + i) * C::W + x] = lines[(c * C::KH + i + C::ISH) * C::W + x];
                continue;
            }
            const int r = top + int(i);
            if (r < 0 || r >= int(C::IH)) {
                pad_row(i);
                continue;
            }
            for (; next < unsigned(r); ++next) drop_row(ins);  // rows a stride skips
            read_row(ins, i);
            ++next;
        }
    }

    template <unsigned NI>
    void finish(input_stream<TA>* const (&ins)[NI]) {
        for (; next < C::IH; ++next) drop_row(ins);
        next = 0;
    }
};

// Rows i = 0 .. UP - 1 of a block stored (channel, i, x) (ConvCore::store_up's order, CHW of
// the UP upsampled rows), each to every output stream, channel by channel.
template <unsigned NO, class T>
inline void write_rows(output_stream<T>* const (&outs)[NO], const T* __restrict block, unsigned up, unsigned channels,
                       unsigned width) {
    for (unsigned i = 0; i < up; ++i)
        for (unsigned p = 0; p < NO; ++p)
            for (unsigned c = 0; c < channels; ++c)
                for (unsigned x = 0; x < width; ++x) writeincr(outs[p], block[(c * up + i) * width + x]);
}

// One convolution stage: NI input streams (concat parts, a residual's skip), NO output streams.
#define AIEFLOW_ROW_CONV(Cls, NI, NO, ...)                                                                   \
    template <class C>                                                                                      \
    class Cls {                                                                                             \
        AIEFLOW_CNN_TILE_MEMBERS(Cls)                                                                       \
        using TA = typename C::TA;                                                                          \
        using TY = typename C::TY;                                                                          \
        static_assert(C::NIN == NI && C::NOUT == NO, "the kernel class of the stage's stream ports");       \
        static_assert(C::SKIP_C == 0 || (C::RES && std::is_same_v<TA, typename C::TS> && C::OW == C::W),   \
                      "a residual's skip rows travel with the input rows (cnn/rows.py)");                   \
        static_assert(C::UPM == 0 || (C::UP_H * C::UP_W == 1 && !C::RES && C::POST == 0),                   \
                      "the rows kernel's bilinear upsampling reads plain conv rows");                       \
        static constexpr unsigned OWU = C::OW * C::UW;                                                      \
        void run(__VA_ARGS__) {                                                                             \
            input_stream<TA>* const ins[NI] = {AIEFLOW_ROW_INS_##NI};                                        \
            output_stream<TY>* const outs[NO] = {AIEFLOW_ROW_OUTS_##NO};                                     \
            if constexpr (C::UPM == 0) {                                                                    \
                for (unsigned oy = 0; oy < C::IOH; ++oy) {                                                  \
                    conv_row(ins, oy, out_);                                                                \
                    write_rows(outs, out_, C::UP_H, C::OG, C::OW * C::UP_W);                                \
                }                                                                                           \
            } else {                                                                                        \
                constexpr long long DH = up_den<C::UPM>(C::IOH, C::UH), DW = up_den<C::UPM>(C::OW, C::UW);  \
                constexpr float INV_H = 1.0f / float(DH), INV_W = 1.0f / float(DW);                        \
                unsigned done = 0;                                                                          \
                for (unsigned y = 0; y < C::IOH * C::UH; ++y) {                                             \
                    unsigned r0 = 0, r1 = 0;                                                                \
                    long long pr = 0;                                                                       \
                    up_tap<C::UPM>(y, C::IOH, C::UH, r0, r1, pr);                                           \
                    for (; done <= r1; ++done) conv_row(ins, done, out_ + (done % 2) * C::OG * C::OW);      \
                    const TY* __restrict a = out_ + (r0 % 2) * C::OG * C::OW;                               \
                    const TY* __restrict b = out_ + (r1 % 2) * C::OG * C::OW;                               \
                    float u0 = 0.0f, u1 = 0.0f; /* fp32 / bf16: the row weights */                         \
                    if constexpr (Core::is_float) up_weights(pr, INV_H, u0, u1);                            \
                    for (unsigned x = 0; x < OWU; ++x) {                                                    \
                        unsigned c0 = 0, c1 = 0;                                                            \
                        long long pc = 0;                                                                   \
                        up_tap<C::UPM>(x, C::OW, C::UW, c0, c1, pc);                                        \
                        float w0 = 0.0f, w1 = 0.0f;                                                         \
                        if constexpr (Core::is_float) up_weights(pc, INV_W, w0, w1);                        \
                        for (unsigned o = 0; o < C::OG; ++o) {                                              \
                            const unsigned i0 = o * C::OW + c0, i1 = o * C::OW + c1;                        \
                            if constexpr (Core::is_float)                                                   \
                                row_[o * OWU + x] = TY(up_mix_float(a[i0], a[i1], b[i0], b[i1], u0, u1, w0, w1)); \
                            else                                                                            \
                                row_[o * OWU + x] = TY(up_mix(a[i0], a[i1], b[i0], b[i1], pr, pc, DH, DW)); \
                        }                                                                                   \
                    }                                                                                       \
                    write_rows(outs, row_, 1, C::OG, OWU);                                                  \
                }                                                                                           \
            }                                                                                               \
            lines_.finish(ins);                                                                             \
        }                                                                                                   \
        static void registerKernelClass() {                                                                 \
            REGISTER_FUNCTION(Cls::run);                                                                    \
            REGISTER_PARAMETER(weights_);                                                                   \
            REGISTER_PARAMETER(bias_);                                                                      \
            REGISTER_PARAMETER(table_);                                                                     \
            REGISTER_PARAMETER(lut_);                                                                       \
            REGISTER_PARAMETER(slope_);                                                                     \
        }                                                                                                   \
                                                                                                            \
    private:                                                                                                \
        /* conv output row oy (its window read first) into dst, OG x OW (CHW), a residual's skip added */   \
        void conv_row(input_stream<TA>* const (&ins)[NI], unsigned oy, TY* __restrict dst) {                \
            lines_.window(ins, oy);                                                                         \
            Core::template compute<false, false>(lines_.lines, patch_, weights_, bias_, dst, nullptr, nullptr, \
                                                 table_, lut_, slope_, skip_of(oy), pre_, post_e_);         \
        }                                                                                                   \
        const typename C::TS* skip_of(unsigned oy) const {                                                  \
            if constexpr (C::SKIP_C != 0) return lines_.skip_row(oy);                                       \
            else return nullptr;                                                                            \
        }                                                                                                   \
        RowLines<C> lines_;                                                                                 \
        alignas(32) TY out_[C::UPM ? 2 * C::OG * C::OW : C::OG * C::UP_H * C::OW * C::UP_W];                \
        alignas(32) TY row_[C::UPM ? C::OG * OWU : 1];                                                      \
    };

#define AIEFLOW_ROW_INS_1 in0
#define AIEFLOW_ROW_INS_2 in0, in1
#define AIEFLOW_ROW_OUTS_1 out0
#define AIEFLOW_ROW_OUTS_2 out0, out1
#define AIEFLOW_ROW_IN(i) input_stream<typename C::TA>* in##i
#define AIEFLOW_ROW_OUT(i) output_stream<typename C::TY>* out##i

AIEFLOW_ROW_CONV(RowConv_1_1, 1, 1, AIEFLOW_ROW_IN(0), AIEFLOW_ROW_OUT(0))
AIEFLOW_ROW_CONV(RowConv_1_2, 1, 2, AIEFLOW_ROW_IN(0), AIEFLOW_ROW_OUT(0), AIEFLOW_ROW_OUT(1))
AIEFLOW_ROW_CONV(RowConv_2_1, 2, 1, AIEFLOW_ROW_IN(0), AIEFLOW_ROW_IN(1), AIEFLOW_ROW_OUT(0))
AIEFLOW_ROW_CONV(RowConv_2_2, 2, 2, AIEFLOW_ROW_IN(0), AIEFLOW_ROW_IN(1), AIEFLOW_ROW_OUT(0), AIEFLOW_ROW_OUT(1))

// One pooling stage (no top / bottom padding: cnn/rows.py refuses it): the stream mapping's
// pooling window on the line buffer, channel by channel.
#define AIEFLOW_ROW_POOL(Cls, NO, ...)                                                                      \
    template <class C>                                                                                      \
    class Cls {                                                                                             \
    public:                                                                                                 \
        using TA = typename C::TA;                                                                          \
        static_assert(C::NIN == 1 && C::NOUT == NO, "the kernel class of the stage's stream ports");        \
        Cls() = default;                                                                                    \
        void run(__VA_ARGS__) {                                                                             \
            input_stream<TA>* const ins[1] = {in0};                                                          \
            output_stream<TA>* const outs[NO] = {AIEFLOW_ROW_OUTS_##NO};                                     \
            for (unsigned oy = 0; oy < C::IOH; ++oy) {                                                      \
                lines_.window(ins, oy);                                                                     \
                for (unsigned c = 0; c < C::C_IN; ++c)                                                      \
                    for (unsigned ox = 0; ox < C::OW; ++ox)                                                 \
                        out_[c * C::OW + ox] = Pool<C>::window(lines_.lines + c * C::KH * C::W, 0, ox);     \
                write_rows(outs, out_, 1, C::C_IN, C::OW);                                                        \
            }                                                                                               \
            lines_.finish(ins);                                                                             \
        }                                                                                                   \
        static void registerKernelClass() { REGISTER_FUNCTION(Cls::run); }                                  \
                                                                                                            \
    private:                                                                                                \
        RowLines<C> lines_;                                                                                 \
        alignas(32) TA out_[C::C_IN * C::OW];                                                               \
    };

#define AIEFLOW_ROW_POOL_OUT(i) output_stream<typename C::TA>* out##i
AIEFLOW_ROW_POOL(RowPool_1_1, 1, AIEFLOW_ROW_IN(0), AIEFLOW_ROW_POOL_OUT(0))
AIEFLOW_ROW_POOL(RowPool_1_2, 2, AIEFLOW_ROW_IN(0), AIEFLOW_ROW_POOL_OUT(0), AIEFLOW_ROW_POOL_OUT(1))

// A global pooling (the window is the whole frame, no padding): each channel's Pool::Acc takes the
// values as the rows pass, in the window's row-major order, and Pool::finish gives the C_IN results
// (one row of C_IN x 1) after the last row.
#define AIEFLOW_ROW_GPOOL(Cls, NO, ...)                                                                     \
    template <class C>                                                                                      \
    class Cls {                                                                                             \
    public:                                                                                                 \
        using TA = typename C::TA;                                                                          \
        static_assert(C::NIN == 1 && C::NOUT == NO && C::KH == C::IH && C::OW == 1, "a global pooling");    \
        Cls() = default;                                                                                    \
        void run(__VA_ARGS__) {                                                                             \
            output_stream<TA>* const outs[NO] = {AIEFLOW_ROW_OUTS_##NO};                                     \
            for (unsigned c = 0; c < C::C_IN; ++c) acc_[c] = typename Pool<C>::Acc();                       \
            for (unsigned y = 0; y < C::IH; ++y)                                                            \
                for (unsigned c = 0; c < C::C_IN; ++c)                                                      \
                    for (unsigned x = 0; x < C::W; ++x)                                                     \
                        Pool<C>::step(acc_[c], readincr(in0), true, y == 0 && x == 0);                      \
            for (unsigned c = 0; c < C::C_IN; ++c) out_[c] = Pool<C>::finish(acc_[c]);                      \
            write_rows(outs, out_, 1, C::C_IN, 1);                                                          \
        }                                                                                                   \
        static void registerKernelClass() { REGISTER_FUNCTION(Cls::run); }                                  \
                                                                                                            \
    private:                                                                                                \
        typename Pool<C>::Acc acc_[C::C_IN];                                                                \
        alignas(32) TA out_[C::C_IN];                                                                       \
    };

AIEFLOW_ROW_GPOOL(RowGlobalPool_1_1, 1, AIEFLOW_ROW_IN(0), AIEFLOW_ROW_POOL_OUT(0))
AIEFLOW_ROW_GPOOL(RowGlobalPool_1_2, 2, AIEFLOW_ROW_IN(0), AIEFLOW_ROW_POOL_OUT(0), AIEFLOW_ROW_POOL_OUT(1))

}  // namespace aieflow_cnn
