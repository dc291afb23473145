// Kernel declarations used by graph.h (kernel bodies are not needed for type checking).
#pragma once

#include <adf.h>

#include <vector>

template <int N_IN, int N_OUT>
class DenseTile {
public:
    DenseTile(const int8 (&weights)[N_IN * N_OUT], const int32 (&bias)[N_OUT]) {
        for (int i = 0; i < N_IN * N_OUT; ++i) w_[i] = weights[i];
        for (int i = 0; i < N_OUT; ++i) b_[i] = bias[i];
    }
    void run(adf::input_buffer<int8, adf::extents<N_IN>>& in, output_cascade<acc32>* out);
    static void registerKernelClass() {
        REGISTER_FUNCTION(DenseTile::run);
        REGISTER_PARAMETER(w_);
        REGISTER_PARAMETER(b_);
    }

private:
    alignas(aie::vector_decl_align) int8 w_[N_IN * N_OUT];
    int32 b_[N_OUT];
};

void dense_tail(input_cascade<acc32>* in, adf::output_buffer<int8, adf::extents<16>>& out);
void stream_relu(input_stream<int32>* in, output_stream<int32>* out);
void pkt_router(input_pktstream* in, output_pktstream* out);
void with_rtp(adf::input_buffer<int8, adf::extents<adf::inherited_extent>>& in, adf::output_buffer<int8>& out,
              int32 scale, const int16 (&table)[8]);
