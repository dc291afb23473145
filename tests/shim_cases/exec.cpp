// Executes graphs through the shim's ADF graph executor.
//   exec tiling      < params    print the addresses of one tiling (see test_shim.py for the format)
//   exec pipeline DATA OUT       PLIO -> class kernel (stateful) -> shared buffer (transpose)
//                                -> kernel -> cascade -> kernel -> stream -> PLIO
//   exec unconnected | cycle | short DATA | mismatch DATA    graphs the executor must reject
#include <adf.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

// out = in + offset + (number of previous runs): checks construction arguments and that the
// object persists across iterations.
class AddOffset {
    int32 offset_;
    int32 runs_ = 0;

public:
    explicit AddOffset(const std::vector<int32>& offset) : offset_(offset.at(0)) {}
    void run(adf::input_buffer<int32>& in, adf::output_buffer<int32>& out) {
        for (unsigned i = 0; i < in.size(); ++i) out.data()[i] = in.data()[i] + offset_ + runs_;
        ++runs_;
    }
    static void registerKernelClass() { REGISTER_FUNCTION(AddOffset::run); }
};

void to_cascade(adf::input_buffer<int32, adf::extents<32>>& in, output_cascade<acc48>* out) {
    for (unsigned b = 0; b < 4; ++b) {
        aie::accum<acc48, 8> acc;
        acc.from_vector(aie::load_v<8>(in.data() + 8 * b), 0);
        writeincr(out, acc);
    }
}

void from_cascade(input_cascade<acc48>* in, output_stream<int32>* out) {
    for (unsigned b = 0; b < 4; ++b) writeincr(out, readincr_v<8>(in).to_vector<int32>(0));
}

void copy(adf::input_buffer<int32>& in, adf::output_buffer<int32>& out) {
    for (unsigned i = 0; i < in.size(); ++i) out.data()[i] = in.data()[i];
}

void rounding_user(adf::input_buffer<int32>& in, adf::output_buffer<int32>& out) {
    // Reports the rounding mode it finds, then changes it: each kernel has its own mode register.
    out.data()[0] = static_cast<int32>(aie::get_rounding());
    aie::set_rounding(aie::rounding_mode::conv_even);
    for (unsigned i = 1; i < in.size(); ++i) out.data()[i] = in.data()[i];
}

class Pipeline : public adf::graph {
public:
    adf::input_plio pin;
    adf::output_plio pout;
    adf::kernel add, cin, cout;
    adf::shared_buffer<int32> mt;

    Pipeline() {
        pin = adf::input_plio::create("pin", adf::plio_64_bits, "data/in.txt");
        pout = adf::output_plio::create("pout", adf::plio_32_bits, "data/out.txt");
        add = adf::kernel::create_object<AddOffset>(std::vector<int32>{5});
        cin = adf::kernel::create(to_cascade);
        cout = adf::kernel::create(from_cascade);
        mt = adf::shared_buffer<int32>::create({8, 4}, 1, 1);
        adf::connect(pin.out[0], add.in[0]);
        adf::dimensions(add.in[0]) = {32};
        adf::dimensions(add.out[0]) = {32};
        adf::connect(add.out[0], mt.in[0]);
        adf::write_access(mt.in[0]) = adf::tiling({.buffer_dimension = {8, 4}, .tiling_dimension = {8, 4},
                                                   .offset = {0, 0}});
        // read the 8 x 4 (dimension 0 = 8) buffer column by column: a transpose
        adf::read_access(mt.out[0]) = adf::tiling({.buffer_dimension = {8, 4}, .tiling_dimension = {1, 4},
                                                   .offset = {0, 0},
                                                   .tile_traversal = {{.dimension = 0, .stride = 1, .wrap = 8}}});
        adf::connect(mt.out[0], cin.in[0]);
        adf::connect<adf::cascade>(cin.out[0], cout.in[0]);
        adf::connect<adf::stream>(cout.out[0], pout.in[0]);
    }
};

class Modes : public adf::graph {
public:
    adf::input_plio pin;
    adf::output_plio pout;
    adf::kernel a, b;
    Modes() {
        pin = adf::input_plio::create("pin", adf::plio_32_bits, "data/in.txt");
        pout = adf::output_plio::create("pout", adf::plio_32_bits, "data/out.txt");
        a = adf::kernel::create(rounding_user);
        b = adf::kernel::create(rounding_user);
        adf::connect(pin.out[0], a.in[0]);
        adf::connect(a.out[0], b.in[0]);
        adf::connect(b.out[0], pout.in[0]);
        adf::dimensions(a.in[0]) = {4};
        adf::dimensions(a.out[0]) = {4};
        adf::dimensions(b.out[0]) = {4};
    }
};

class Bad : public adf::graph {
public:
    adf::input_plio pin;
    adf::output_plio pout;
    adf::kernel a, b;
    explicit Bad(const std::string& what) {
        pin = adf::input_plio::create("pin", adf::plio_32_bits, "data/in.txt");
        pout = adf::output_plio::create("pout", adf::plio_32_bits, "data/out.txt");
        a = adf::kernel::create(copy);
        b = adf::kernel::create(copy);
        aieflow_shim::name_kernel(a, "k_a");
        aieflow_shim::name_kernel(b, "k_b");
        adf::dimensions(a.in[0]) = {4};
        adf::dimensions(a.out[0]) = {4};
        adf::dimensions(b.out[0]) = {what == "mismatch" ? 8u : 4u};
        if (what == "cycle") {
            adf::connect(b.out[0], a.in[0]);
            adf::connect(a.out[0], b.in[0]);
            return;
        }
        adf::connect(pin.out[0], a.in[0]);
        if (what != "unconnected") adf::connect(a.out[0], b.in[0]);
        adf::connect(b.out[0], pout.in[0]);
        if (what == "mismatch") adf::dimensions(b.in[0]) = {8};
    }
};

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "tiling") {
        adf::tiling_parameters t;
        unsigned rank, ntrav, has_boundary;
        std::cin >> rank;
        t.buffer_dimension.resize(rank);
        t.tiling_dimension.resize(rank);
        t.offset.resize(rank);
        for (auto& v : t.buffer_dimension) std::cin >> v;
        for (auto& v : t.tiling_dimension) std::cin >> v;
        for (auto& v : t.offset) std::cin >> v;
        std::cin >> ntrav;
        t.tile_traversal.resize(ntrav);
        for (auto& tr : t.tile_traversal) std::cin >> tr.dimension >> tr.stride >> tr.wrap;
        std::cin >> has_boundary;
        if (has_boundary) {
            t.boundary_dimension.resize(rank);
            for (auto& v : t.boundary_dimension) std::cin >> v;
        }
        std::cin >> t.repetition;
        for (auto a : aieflow_shim::net::tiling_addresses(t, {}, "test")) std::printf("%lld\n", static_cast<long long>(a));
        return 0;
    }
    const char* fwd[] = {argv[0], "--data", argc > 2 ? argv[2] : ".", "--out", argc > 3 ? argv[3] : "."};
    aieflow_shim::parse_harness_args(5, const_cast<char**>(fwd));
    if (mode == "pipeline") {
        Pipeline g;
        g.init();
        g.run(3);
        g.end();
    } else if (mode == "modes") {
        Modes g;
        g.init();
        g.run(2);
        g.end();
    } else {
        Bad g(mode == "short" ? "ok" : mode);
        g.init();
        g.run(mode == "short" ? 5 : 1);
        g.end();
    }
    return 0;
}
