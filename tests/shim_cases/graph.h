// A small graph written against the graph-side ADF API, type-checked with -fsyntax-only.
#pragma once

#include <adf.h>

#include <vector>

#include "graph_kernels.h"

using namespace adf;

class TestGraph : public graph {
public:
    input_plio in_act;
    input_plio in_stream;
    output_plio out_act;
    output_plio out_stream;
    input_port scale;
    port<output> result;
    parameter table;
    kernel head;
    kernel tail;
    kernel relu;
    kernel rtp;
    shared_buffer<int8> mem;
    pktsplit<2> split;
    pktmerge<2> merge;

    TestGraph() {
        std::vector<int8> weights(64 * 16, 1);
        std::vector<int32> bias(16, 0);
        head = kernel::create_object<DenseTile<64, 16>>(weights, bias);
        tail = kernel::create(dense_tail);
        relu = kernel::create(stream_relu);
        rtp = kernel::create(with_rtp);

        source(head) = "kernels/dense.cc";
        source(tail) = "kernels/dense_tail.cc";
        source(relu) = "kernels/relu.cc";
        source(rtp) = "kernels/rtp.cc";
        headers(head) = {"kernels/dense.h"};
        runtime<ratio>(head) = 0.9;
        runtime<ratio>(tail) = 0.6;
        runtime<ratio>(relu) = 0.5;
        runtime<ratio>(rtp) = 0.5;
        stack_size(head) = 2048;
        heap_size(tail) = 1024;

        in_act = input_plio::create("act_in", plio_64_bits, "data/act_in.txt");
        in_stream = input_plio::create("stream_in", plio_32_bits, "data/stream_in.txt");
        out_act = output_plio::create("act_out", plio_128_bits, "data/act_out.txt");
        out_stream = output_plio::create(plio_32_bits, "data/stream_out.txt");

        // memory tile between PLIO and the first kernel, re-tiled on read
        mem = shared_buffer<int8>::create({64, 4}, 1, 1);
        num_buffers(mem) = 2;
        connect(in_act.out[0], mem.in[0]);
        write_access(mem.in[0]) = tiling({.buffer_dimension = {64, 4}, .tiling_dimension = {64, 4}, .offset = {0, 0}});
        read_access(mem.out[0]) = tiling({.buffer_dimension = {64, 4},
                                          .tiling_dimension = {16, 1},
                                          .offset = {0, 0},
                                          .tile_traversal = {{.dimension = 0, .stride = 16, .wrap = 4},
                                                             {.dimension = 1, .stride = 1, .wrap = 4}},
                                          .repetition = 1});
        connect<>(mem.out[0], head.in[0]);
        dimensions(head.in[0]) = {64};

        connect<cascade>(head.out[0], tail.in[0]);
        connect<> n_out(tail.out[0], out_act.in[0]);
        dimensions(tail.out[0]) = {16};
        single_buffer(tail.out[0]);

        connect<stream> s1(in_stream.out[0], relu.in[0]);
        fifo_depth(s1) = 32;
        connect<pktstream>(relu.out[0], split.in[0]);
        connect<pktstream>(split.out[0], merge.in[0]);
        connect<pktstream>(split.out[1], merge.in[1]);
        connect<pktstream>(merge.out[0], out_stream.in[0]);

        connect<>(mem.out[0], rtp.in[0]);
        connect<parameter>(scale, async(rtp.in[1]));
        static const int16 table_init[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        table = parameter::array(table_init);
        connect<parameter>(table, rtp.in[2]);
        location<parameter>(table) = address(12, 1, 0x4000);
        connect<>(rtp.out[0], result);
        dimensions(rtp.in[0]) = {256};
        dimensions(rtp.out[0]) = {256};

        location<kernel>(head) = tile(10, 1);
        location<kernel>(tail) = tile(11, 1);
        location<buffer>(head.in[0]) = {address(10, 1, 0x0), address(10, 1, 0x2000)};
        location<stack>(head) = bank(10, 1, 3);
        location<buffer>(mem) = address(10, 0, 0);
        not_equal(location<kernel>(relu), location<kernel>(rtp));
    }
};
