// aieflow x86 shim: harness-side objects that own FIFOs and hand out kernel port handles.
//
//   aieflow_shim::stream<int32> s("a_to_b");
//   producer(s.out());            // kernel takes output_stream<int32>*
//   consumer(s.in(), ...);        // kernel takes input_stream<int32>*
//
// The objects are neither copyable nor movable because the handles point into them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "accum.hpp"
#include "adf_io.hpp"
#include "config.hpp"
#include "modes.hpp"
#include "vector.hpp"

namespace aieflow_shim {

// Put the calling thread (= modelled core) back to the reset modes: floor rounding, no saturation.
inline void reset_modes() {
    aie::set_rounding(aie::rounding_mode::floor);
    aie::set_saturation(aie::saturation_mode::none);
}

template <typename T>
class stream {
public:
    explicit stream(std::string name = "stream") {
        f_.name = std::move(name);
        f_.kind = "stream";
        in_.fifo_ = &f_;
        out_.fifo_ = &f_;
    }
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;

    input_stream<T>* in() { return &in_; }
    output_stream<T>* out() { return &out_; }

    void push(T v, bool tlast = false) { f_.push(v, tlast); }
    void push_all(const std::vector<T>& vs, bool tlast_on_last = false) {
        for (std::size_t i = 0; i < vs.size(); ++i) f_.push(vs[i], tlast_on_last && i + 1 == vs.size());
    }
    T pop() { return f_.pop(nullptr); }
    T pop(bool& tlast) { return f_.pop(&tlast); }
    std::vector<T> drain() {
        std::vector<T> r;
        while (!f_.q.empty()) r.push_back(f_.pop(nullptr));
        return r;
    }
    std::size_t size() const { return f_.q.size(); }
    bool empty() const { return f_.q.empty(); }

private:
    detail::fifo<T> f_;
    input_stream<T> in_;
    output_stream<T> out_;
};

class pktstream {
public:
    explicit pktstream(std::string name = "pktstream") {
        f_.name = std::move(name);
        f_.kind = "packet stream";
        in_.fifo_ = &f_;
        out_.fifo_ = &f_;
        in_.packet_ids_ = &ids_;
        out_.packet_ids_ = &ids_;
    }
    pktstream(const pktstream&) = delete;
    pktstream& operator=(const pktstream&) = delete;

    input_pktstream* in() { return &in_; }
    output_pktstream* out() { return &out_; }

    // Packet IDs returned by getPacketid(port, index) (compiler-assigned on the device).
    void set_packet_ids(std::vector<std::uint32_t> ids) { ids_ = std::move(ids); }
    // Tile that writeHeader reports as the packet source.
    void set_source(unsigned col, unsigned row) {
        out_.source_col_ = col;
        out_.source_row_ = row;
    }

    void push(std::uint32_t word, bool tlast = false) { f_.push(word, tlast); }
    // Header + data words, TLAST on the last data word.
    void push_packet(unsigned packet_type, unsigned id, const std::vector<std::int32_t>& data,
                     unsigned source_row = 0, unsigned source_col = 0) {
        f_.push(packet_header(packet_type, id, source_row, source_col), data.empty());
        for (std::size_t i = 0; i < data.size(); ++i)
            f_.push(static_cast<std::uint32_t>(data[i]), i + 1 == data.size());
    }
    std::uint32_t pop() { return f_.pop(nullptr); }
    std::uint32_t pop(bool& tlast) { return f_.pop(&tlast); }
    std::size_t size() const { return f_.q.size(); }
    bool empty() const { return f_.q.empty(); }

private:
    detail::fifo<std::uint32_t> f_;
    std::vector<std::uint32_t> ids_;
    input_pktstream in_;
    output_pktstream out_;
};

// X: accumulator tag (lanes are kept exactly) or vector element type.
template <typename X>
class cascade {
public:
    using lane_type = detail::cascade_lane_t<X>;

    explicit cascade(std::string name = "cascade") {
        f_.name = std::move(name);
        f_.kind = "cascade";
        in_.fifo_ = &f_;
        out_.fifo_ = &f_;
    }
    cascade(const cascade&) = delete;
    cascade& operator=(const cascade&) = delete;

    input_cascade<X>* in() { return &in_; }
    output_cascade<X>* out() { return &out_; }

    void push_lane(lane_type v) { f_.push(v, false); }
    lane_type pop_lane() { return f_.pop(nullptr); }
    std::size_t size() const { return f_.q.size(); }  // lanes in flight
    bool empty() const { return f_.q.empty(); }

private:
    detail::fifo<lane_type> f_;
    input_cascade<X> in_;
    output_cascade<X> out_;
};

}  // namespace aieflow_shim
