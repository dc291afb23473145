// aieflow x86 shim: graph-side ADF API (UG1079 / UG1603), for type checking only.
//
// Graph classes written against this header compile with the same spelling as for the real
// tools, so aieflow can check its generated graph.h on x86.  Nothing here builds or runs a graph:
// constraints are recorded (or ignored) and the graph control methods return return_code::ok.
// Kernels are executed directly by an x86 harness instead (see harness.hpp).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "config.hpp"

namespace adf {

// ---- port directions and connection / constraint tags -----------------------------------------
struct input {};
struct output {};
struct inout {};

struct stream {};
struct cascade {};
struct pktstream {};
struct buffer {};
struct stack {};
struct ratio {};
template <unsigned Size, unsigned Margin = 0>
struct window {};

enum class return_code { ok = 0, user_error, aie_driver_error, xrt_error, internal_error, unknown_error };

enum plio_type { plio_32_bits, plio_64_bits, plio_128_bits };

// ---- placement constraints ---------------------------------------------------------------------
struct location_constraint {
    enum class kind { none, tile, bank, address, list, relative } k = kind::none;
    int col = -1;
    int row = -1;
    long long value = 0;
    std::vector<location_constraint> items{};

    location_constraint& operator=(std::initializer_list<location_constraint> l) {
        k = kind::list;
        items.assign(l.begin(), l.end());
        return *this;
    }
    location_constraint& operator=(const location_constraint&) = default;
};

inline location_constraint tile(int col, int row) {
    return {location_constraint::kind::tile, col, row, 0, {}};
}
inline location_constraint bank(int col, int row, int bank_id) {
    return {location_constraint::kind::bank, col, row, bank_id, {}};
}
inline location_constraint address(int col, int row, int offset) {
    return {location_constraint::kind::address, col, row, offset, {}};
}
inline location_constraint not_equal(const location_constraint& a, const location_constraint& b) {
    location_constraint r;
    r.k = location_constraint::kind::relative;
    r.items = {a, b};
    return r;
}

// ---- tiling (memory-tile / DMA access patterns) ------------------------------------------------
struct traversing_parameters {
    uint32_t dimension = 0;
    uint32_t stride = 0;
    uint32_t wrap = 0;
};

struct tiling_parameters {
    std::vector<uint32_t> buffer_dimension{};
    std::vector<uint32_t> tiling_dimension{};
    std::vector<int32_t> offset{};
    std::vector<traversing_parameters> tile_traversal{};
    int packet_port_id = -1;
    uint32_t repetition = 1;
    uint32_t phase = 0;
    std::vector<uint32_t> boundary_dimension{};
};

struct access_pattern {
    tiling_parameters params{};
};

inline access_pattern tiling(tiling_parameters p) { return access_pattern{std::move(p)}; }

struct access_rule {
    std::vector<access_pattern> patterns{};
    access_rule& operator=(const access_pattern& p) {
        patterns = {p};
        return *this;
    }
    access_rule& operator=(std::initializer_list<access_pattern> l) {
        patterns.assign(l.begin(), l.end());
        return *this;
    }
    access_rule& operator=(const access_rule&) = default;
};

// ---- ports -------------------------------------------------------------------------------------
namespace detail {

// Base of everything that can appear in connect<>: kernel / graph / PLIO / GMIO / shared
// buffer / packet switch ports and run-time parameters.
struct endpoint {
    std::vector<uint32_t> dims{};
    access_rule read_rule{};
    access_rule write_rule{};
    location_constraint loc{};
    bool single = false;
    bool is_async = false;
};

template <typename T>
concept endpoint_like = std::derived_from<std::remove_cvref_t<T>, endpoint>;

}  // namespace detail

template <typename Dir>
class port : public detail::endpoint {
    static_assert(std::is_same_v<Dir, input> || std::is_same_v<Dir, output> || std::is_same_v<Dir, inout>,
                  "adf::port direction must be adf::input, adf::output or adf::inout");
};
using input_port = port<input>;
using output_port = port<output>;
using inout_port = port<inout>;

namespace detail {
// Port array that grows on access (the real tools size it from the kernel signature).
template <typename Dir>
class port_list {
public:
    port<Dir>& operator[](std::size_t i) {
        while (ports_.size() <= i) ports_.emplace_back();
        return ports_[i];
    }
    std::size_t size() const { return ports_.size(); }

private:
    std::deque<port<Dir>> ports_;
};
}  // namespace detail

// ---- run-time parameters -----------------------------------------------------------------------
class parameter : public detail::endpoint {
public:
    template <typename T>
    static parameter array(const T& /*table*/) {
        return parameter();
    }
    template <typename T>
    static parameter scalar(const T& /*value*/) {
        return parameter();
    }
};

template <detail::endpoint_like P>
P& async(P& p) {
    p.is_async = true;
    return p;
}
template <detail::endpoint_like P>
P& sync(P& p) {
    p.is_async = false;
    return p;
}

// ---- kernels -----------------------------------------------------------------------------------
namespace detail {
template <typename F>
void register_function(F /*member*/) {}
}  // namespace detail

class kernel {
public:
    detail::port_list<input> in;
    detail::port_list<output> out;
    detail::port_list<::adf::inout> inout;

    template <typename R, typename... Args>
    static kernel create(R (*/*fn*/)(Args...)) {
        return kernel();
    }

    // C++ kernel class (UG1079 "C++ Kernel Class Support").  The constructor arguments are the
    // graph-side initial values (std::vector for array members), so they are not checked against
    // the constructor; the class must provide static void registerKernelClass(), whose body
    // (REGISTER_FUNCTION / REGISTER_PARAMETER) is type-checked here.
    template <typename C, typename... Args>
    static kernel create_object(Args&&... /*ctor_args*/) {
        static_assert(std::is_class_v<C>, "kernel::create_object needs a kernel class");
        static_assert(requires { C::registerKernelClass(); },
                      "kernel class must declare static void registerKernelClass()");
        void (*reg)() = &C::registerKernelClass;
        (void)reg;
        return kernel();
    }

    // Recorded graph attributes (not used by the shim).
    std::string source_file{};
    std::vector<std::string> header_files{};
    std::string init_function{};
    double runtime_ratio = 0.0;
    int stack_bytes = 0;
    int heap_bytes = 0;
    int repetitions = 0;
};

inline std::string& source(kernel& k) { return k.source_file; }
inline std::vector<std::string>& headers(kernel& k) { return k.header_files; }
inline std::string& initialization_function(kernel& k) { return k.init_function; }
template <typename R>
double& runtime(kernel& k) {
    static_assert(std::is_same_v<R, ratio>, "runtime<ratio>(k) is the only runtime constraint");
    return k.runtime_ratio;
}
inline int& stack_size(kernel& k) { return k.stack_bytes; }
inline int& heap_size(kernel& k) { return k.heap_bytes; }
inline int& repetition_count(kernel& k) { return k.repetitions; }

// location<kernel>(k), location<buffer>(port or shared buffer), location<stack>(k),
// location<parameter>(p): returns an assignable constraint.
template <typename What, typename Obj>
location_constraint location(Obj& /*obj*/) {
    static_assert(std::is_same_v<What, kernel> || std::is_same_v<What, buffer> ||
                      std::is_same_v<What, stack> || std::is_same_v<What, parameter>,
                  "location<T>: T must be kernel, buffer, stack or parameter");
    return location_constraint();
}

inline std::vector<uint32_t>& dimensions(detail::endpoint& p) { return p.dims; }
inline void single_buffer(detail::endpoint& p) { p.single = true; }
inline access_rule& read_access(detail::endpoint& p) { return p.read_rule; }
inline access_rule& write_access(detail::endpoint& p) { return p.write_rule; }

// ---- connections -------------------------------------------------------------------------------
template <typename A = void, typename B = void>
class connect {
public:
    template <detail::endpoint_like S, detail::endpoint_like D>
    connect(S&& /*src*/, D&& /*dst*/) {}
    int depth = 0;
};

template <typename A, typename B>
int& fifo_depth(connect<A, B>& c) {
    return c.depth;
}

// ---- memory-tile shared buffers ----------------------------------------------------------------
template <typename T>
class shared_buffer : public detail::endpoint {
public:
    detail::port_list<input> in;
    detail::port_list<output> out;
    std::vector<uint32_t> buffer_dims{};
    int buffers = 2;

    static shared_buffer create(std::vector<uint32_t> dims, unsigned num_inputs, unsigned num_outputs) {
        shared_buffer b;
        b.buffer_dims = std::move(dims);
        for (unsigned i = 0; i < num_inputs; ++i) (void)b.in[i];
        for (unsigned i = 0; i < num_outputs; ++i) (void)b.out[i];
        return b;
    }
};

template <typename T>
int& num_buffers(shared_buffer<T>& b) {
    return b.buffers;
}

// ---- packet switching --------------------------------------------------------------------------
template <unsigned N>
class pktsplit {
public:
    detail::port_list<input> in;
    detail::port_list<output> out;
    static pktsplit create() { return pktsplit(); }
};
template <unsigned N>
class pktmerge {
public:
    detail::port_list<input> in;
    detail::port_list<output> out;
    static pktmerge create() { return pktmerge(); }
};

// ---- platform I/O ------------------------------------------------------------------------------
class input_plio {
public:
    detail::port_list<output> out;
    static input_plio create(std::string /*name*/, plio_type /*width*/, std::string /*file*/ = "",
                             double /*freq_mhz*/ = 0.0, bool /*binary*/ = false, bool /*hex*/ = false) {
        return input_plio();
    }
    static input_plio create(plio_type /*width*/, std::string /*file*/ = "", double /*freq_mhz*/ = 0.0) {
        return input_plio();
    }
};
class output_plio {
public:
    detail::port_list<input> in;
    static output_plio create(std::string /*name*/, plio_type /*width*/, std::string /*file*/ = "",
                              double /*freq_mhz*/ = 0.0, bool /*binary*/ = false, bool /*hex*/ = false) {
        return output_plio();
    }
    static output_plio create(plio_type /*width*/, std::string /*file*/ = "", double /*freq_mhz*/ = 0.0) {
        return output_plio();
    }
};
class input_gmio {
public:
    detail::port_list<output> out;
    static input_gmio create(std::string /*name*/, int /*burst_length*/, int /*bandwidth_mbps*/) {
        return input_gmio();
    }
};
class output_gmio {
public:
    detail::port_list<input> in;
    static output_gmio create(std::string /*name*/, int /*burst_length*/, int /*bandwidth_mbps*/) {
        return output_gmio();
    }
};

// ---- graph -------------------------------------------------------------------------------------
class graph {
public:
    virtual ~graph() = default;
    return_code init() { return return_code::ok; }
    return_code run(int /*iterations*/ = -1) { return return_code::ok; }
    return_code wait() { return return_code::ok; }
    return_code wait(unsigned long long /*cycles*/) { return return_code::ok; }
    return_code resume() { return return_code::ok; }
    return_code end() { return return_code::ok; }
    return_code end(unsigned long long /*cycles*/) { return return_code::ok; }
    template <detail::endpoint_like P, typename V>
    return_code update(P& /*port*/, const V& /*value*/) {
        return return_code::ok;
    }
    template <detail::endpoint_like P, typename V>
    return_code update(P& /*port*/, const V* /*values*/, std::size_t /*count*/) {
        return return_code::ok;
    }
    template <detail::endpoint_like P, typename V>
    return_code read(P& /*port*/, V& /*value*/) {
        return return_code::ok;
    }
};

}  // namespace adf

// Used inside `static void registerKernelClass()` of kernel classes.
#define REGISTER_FUNCTION(fn) ::adf::detail::register_function(&fn)
#define REGISTER_PARAMETER(member) static_cast<void>(sizeof(member))
