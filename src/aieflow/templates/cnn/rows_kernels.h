// aieflow CNN rows mapping (cnn/rows.py): each stage is one kernel that runs once per frame and
// moves the frame row by row over its stream ports (UG1079 readincr / writeincr).  It keeps a line
// buffer of KH input rows (C_IN x KH x W, CHW: the window of one output row) in tile memory, reads
// the rows it needs as it goes (a row of every part of a concat, in channel order; rows a stride
// skips are read and dropped; the frame's top / bottom padding rows hold the padding code), and
// computes each output row with the stream mapping's ConvCore / Pool on that one-row "image"
// (the configuration C has H = KH, PT = 0, OH = 1; IH, ISH, IPT, IOH are the frame's).  An output
// row (OG x OW, or UP_H rows of OG x OW UP_W with a fused nearest upsampling) is written to every
// output stream, row after row, each row channel by channel.
#pragma once

#include "cnn_kernels.h"

namespace aieflow_cnn {

template <class C>
struct RowLines {
    using TA = typename C::TA;
    static_assert(C::OH == 1 && C::H == C::KH && C::PT == 0, "the one-row view: a window of KH rows");
    alignas(32) TA lines[C::C_IN * C::KH * C::W];
    unsigned next = 0;  // input rows read in this frame

    template <unsigned NI>
    void read_row(input_stream<TA>* const (&ins)[NI], unsigned slot) {
        unsigned c0 = 0;
        for (unsigned p = 0; p < NI; ++p) {
            for (unsigned c = 0; c < C::PART_C[p]; ++c)
                for (unsigned x = 0; x < C::W; ++x) lines[((c0 + c) * C::KH + slot) * C::W + x] = readincr(ins[p]);
            c0 += C::PART_C[p];
        }
    }

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

// One convolution stage: NI input streams (concat parts), NO output streams.
#define AIEFLOW_ROW_CONV(Cls, NI, NO, ...)                                                                   \
    template <class C>                                                                                      \
    class Cls {                                                                                             \
        AIEFLOW_CNN_TILE_MEMBERS(Cls)                                                                       \
        using TA = typename C::TA;                                                                          \
        using TY = typename C::TY;                                                                          \
        static_assert(C::NIN == NI && C::NOUT == NO, "the kernel class of the stage's stream ports");       \
        void run(__VA_ARGS__) {                                                                             \
            input_stream<TA>* const ins[NI] = {AIEFLOW_ROW_INS_##NI};                                        \
            output_stream<TY>* const outs[NO] = {AIEFLOW_ROW_OUTS_##NO};                                     \
            for (unsigned oy = 0; oy < C::IOH; ++oy) {                                                      \
                lines_.window(ins, oy);                                                                     \
                Core::template compute<false, false>(lines_.lines, patch_, weights_, bias_, out_, nullptr,   \
                                                     nullptr, table_, lut_, slope_, nullptr, pre_, post_e_);  \
                write_rows(outs, out_, C::UP_H, C::OG, C::OW * C::UP_W);                                        \
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
        RowLines<C> lines_;                                                                                 \
        alignas(32) TY out_[C::OG * C::UP_H * C::OW * C::UP_W];                                             \
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

}  // namespace aieflow_cnn
