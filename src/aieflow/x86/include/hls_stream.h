// aieflow x86 shim of Vitis HLS <hls_stream.h> (UG1399 "HLS Stream Library"): enough to run PL
// kernels written against hls::stream as plain C++.  A stream is an unbounded FIFO (the depth
// pragmas only matter in hardware); reading an empty stream is fatal, as the hardware would stall.
// Written from the public documentation; not AMD code.
#pragma once

#ifndef AIEFLOW_SHIM
#define AIEFLOW_SHIM 1
#endif

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <utility>

namespace hls {

template <typename T>
class stream {
public:
    stream() : name_("hls::stream") {}
    explicit stream(const char* name) : name_(name) {}
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;

    void write(const T& v) { q_.push_back(v); }
    bool write_nb(const T& v) {
        write(v);
        return true;
    }
    T read() {
        if (q_.empty()) {
            std::fflush(stdout);
            std::fprintf(stderr, "aieflow_shim: fatal: read from empty hls::stream '%s' (the hardware would stall here)\n",
                         name_.c_str());
            std::abort();
        }
        T v = std::move(q_.front());
        q_.pop_front();
        return v;
    }
    void read(T& v) { v = read(); }
    bool read_nb(T& v) {
        if (q_.empty()) return false;
        v = read();
        return true;
    }
    bool empty() const { return q_.empty(); }
    bool full() const { return false; }
    std::size_t size() const { return q_.size(); }
    stream& operator<<(const T& v) {
        write(v);
        return *this;
    }
    stream& operator>>(T& v) {
        v = read();
        return *this;
    }

private:
    std::deque<T> q_;
    std::string name_;
};

}  // namespace hls
