// Kernel-side ADF I/O through the shim harness.  argv[1] selects the scenario:
//   stream  - producer/consumer kernels over int32 streams (scalars, vectors, tlast)
//   empty   - reading an empty stream must abort with a clear message
//   cascade - an accumulator crosses a cascade unchanged (exact lanes, full width)
//   pkt     - packet header construction and packet stream words
//   buffer  - input_buffer / output_buffer kernels with vector iterators
//   oob     - a vector iterator past the end of a buffer must abort
#include <vector>

#include "common.hpp"

// ---- stream kernels ----------------------------------------------------------------------------
void producer(output_stream<int32>* out) {
    for (int32 i = 0; i < 4; ++i) writeincr(out, 100 + i);
    writeincr(out, -7, true);
    aie::vector<int32, 4> v(1, 2, 3, 4);
    writeincr(out, v);
    writeincr(out, aie::add(v, 10), true);
}

void relay(input_stream<int32>* in, output_stream<int32>* out) {
    bool tlast = false;
    for (int i = 0; i < 5; ++i) {
        const int32 x = readincr(in, tlast);
        writeincr(out, x * 2, tlast);
    }
    const aie::vector<int32, 4> a = readincr_v<4>(in);
    const aie::vector<int32, 4> b = readincr_v<4>(in, tlast);
    writeincr(out, aie::sub(b, a), tlast);
}

void consume_one(input_stream<int32>* in, output_stream<int32>* out) { writeincr(out, readincr(in)); }

// ---- cascade kernels ---------------------------------------------------------------------------
#if __AIE_ARCH__ >= 20
using WideTag = acc64;
using NarrowTag = acc32;
#else
using WideTag = acc80;
using NarrowTag = acc48;
#endif

template <typename Tag>
void cascade_head(adf::input_buffer<int32, adf::extents<16>>& in, output_cascade<Tag>* out, int shift) {
    auto it = aie::begin_vector<8>(in);
    for (int i = 0; i < 2; ++i) {
        aie::accum<Tag, 8> acc;
        acc.from_vector(*it++, shift);
        writeincr(out, acc);
    }
}

template <typename Tag>
void cascade_tail(input_cascade<Tag>* in, std::vector<i128>& lanes) {
    for (int i = 0; i < 4; ++i) {
        const aie::accum<Tag, 4> acc = readincr_v<4>(in);
        for (unsigned l = 0; l < 4; ++l) lanes.push_back(static_cast<i128>(acc[l]));
    }
}

// ---- packet kernel -----------------------------------------------------------------------------
void pkt_kernel(input_pktstream* in, output_pktstream* out) {
    const int32 header = readincr(in);
    bool tlast = false;
    std::vector<int32> data;
    do {
        data.push_back(readincr(in, tlast));
    } while (!tlast);
    const uint32 id = getPacketid(out, 1);
    writeHeader(out, 5, id);
    writeincr(out, header);
    for (std::size_t i = 0; i < data.size(); ++i) writeincr(out, data[i] + 1, i + 1 == data.size());
}

// ---- buffer kernel -----------------------------------------------------------------------------
void scale_kernel(adf::input_buffer<int16, adf::extents<64>>& in, adf::output_buffer<int8, adf::extents<64>>& out,
                  int16 scale, int shift) {
    aie::set_rounding(aie::rounding_mode::conv_even);
    aie::set_saturation(aie::saturation_mode::saturate);
    auto pi = aie::begin_vector<16>(in);
    auto po = aie::begin_restrict_vector<16>(out);
    for (unsigned i = 0; i < 64 / 16; ++i) {
        const auto acc = aie::mul(*pi++, scale);
        *po++ = acc.to_vector<int8>(shift);
    }
}

void oob_kernel(adf::input_buffer<int16>& in, adf::output_buffer<int16>& out) {
    auto pi = aie::begin_vector<16>(in);
    auto po = aie::begin_vector<16>(out);
    for (unsigned i = 0; i < 5; ++i) *po++ = *pi++;  // buffers hold 64 elements: 5th access is past the end
}

int main(int argc, char** argv) {
    const std::string what = argc > 1 ? argv[1] : "";
    if (what == "stream" || what == "empty") {
        aieflow_shim::stream<int32> s1("p_to_r"), s2("r_to_host");
        producer(s1.out());
        relay(s1.in(), s2.out());
        std::printf("left %zu\n", s1.size());
        while (!s2.empty()) {
            bool t = false;
            const int32 v = s2.pop(t);
            std::printf("%d %d\n", v, t ? 1 : 0);
        }
        if (what == "empty") {
            aieflow_shim::stream<int32> s3("never_written");
            consume_one(s3.in(), s2.out());
            std::printf("not reached\n");
        }
    } else if (what == "cascade") {
        std::vector<int32> data(16);
        for (int i = 0; i < 16; ++i) data[i] = (i % 2 ? -1 : 1) * (2147483647 - i * 12345);
        const int shifts[2] = {0, 40};
        for (int s : shifts) {
            auto run = [&](auto tag) {
                using Tag = decltype(tag);
                aieflow_shim::cascade<Tag> c("head_to_tail");
                adf::input_buffer<int32, adf::extents<16>> in(data);
                cascade_head<Tag>(in, c.out(), s);
                std::printf("in_flight %zu\n", c.size());
                std::vector<i128> lanes;
                cascade_tail<Tag>(c.in(), lanes);
                std::printf("%u", aie::accum<Tag, 4>::lane_bits);
                for (auto l : lanes) std::printf(" %s", i128_str(l).c_str());
                std::printf("\n");
            };
            run(WideTag{});
            run(NarrowTag{});
        }
    } else if (what == "pkt") {
        aieflow_shim::pktstream pin("pl_in"), pout("to_pl");
        pout.set_packet_ids({3, 17});
        pout.set_source(25, 3);
        pin.push_packet(2, 9, {10, 20, 30});
        pkt_kernel(pin.in(), pout.out());
        while (!pout.empty()) {
            bool t = false;
            const uint32_t w = pout.pop(t);
            std::printf("%08x %d\n", w, t ? 1 : 0);
        }
        std::printf("%08x\n", aieflow_shim::packet_header(7, 31, 31, 127));
        std::printf("%08x\n", aieflow_shim::packet_header(0, 0, 0, 0));
    } else if (what == "buffer") {
        std::vector<int16> x(64);
        for (auto& v : x) std::cin >> v;
        int16 scale;
        int shift;
        std::cin >> scale >> shift;
        std::vector<int8> y(64);
        adf::input_buffer<int16, adf::extents<64>> in(x);
        adf::output_buffer<int8, adf::extents<64>> out(y);
        scale_kernel(in, out, scale, shift);
        for (auto v : y) std::printf("%d ", v);
        std::printf("\n");
    } else if (what == "oob") {
        std::vector<int16> x(64, 1), y(64);
        adf::input_buffer<int16> in(x);
        adf::output_buffer<int16> out(y);
        oob_kernel(in, out);
        std::printf("not reached\n");
    } else {
        std::fprintf(stderr, "usage: io stream|empty|cascade|pkt|buffer|oob\n");
        return 2;
    }
    return 0;
}
