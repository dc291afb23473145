// aieflow PL data mover: AXI4-Stream from an output PLIO -> DDR (Vitis HLS kernel, UG1399).
// `words` stream words (PLIO_BITS wide, movers.h) are read from `s` (axis) and written to `mem` (m_axi), one per cycle.
#include "movers.h"

extern "C" void s2mm(aieflow_pl::word_t* mem, hls::stream<aieflow_pl::word_t>& s, int words) {
#pragma HLS INTERFACE m_axi port = mem offset = slave bundle = gmem
#pragma HLS INTERFACE axis port = s
#pragma HLS INTERFACE s_axilite port = mem bundle = control
#pragma HLS INTERFACE s_axilite port = words bundle = control
#pragma HLS INTERFACE s_axilite port = return bundle = control
    for (int i = 0; i < words; ++i) {
#pragma HLS PIPELINE II = 1
        mem[i] = s.read();
    }
}
