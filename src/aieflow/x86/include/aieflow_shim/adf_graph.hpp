// aieflow x86 shim: graph-side ADF API (UG1079 / UG1603).
//
// Graph classes written against this header compile with the same spelling as for the real
// tools.  Kernels, PLIOs, shared buffers and connections are recorded in a netlist, and
// graph::init / run / end execute it on x86 (see graph_exec.hpp for the execution model and what
// it does not run).  Placement constraints and other attributes are recorded and ignored.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
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
}  // namespace adf

#include "graph_exec.hpp"

namespace adf {

namespace detail {

// Base of everything that can appear in connect<>.  Ports created by a kernel, PLIO or shared
// buffer know their netlist node; others (graph ports, parameters) have node -1 and are
// type-checked only.
struct endpoint {
    int node = -1;
    aieflow_shim::net::dir d = aieflow_shim::net::dir::in;
    unsigned index = 0;
    std::vector<uint32_t> dims{};
    access_rule read_rule{};
    access_rule write_rule{};
    location_constraint loc{};
    bool single = false;
    bool is_async = false;

    aieflow_shim::net::port_ref ref() const { return {node, d, index}; }
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
    port_list() = default;
    explicit port_list(int owner) : owner_(owner) {}
    port<Dir>& operator[](std::size_t i) {
        while (ports_.size() <= i) {
            ports_.emplace_back();
            auto& p = ports_.back();
            p.node = owner_;
            p.d = std::is_same_v<Dir, input>    ? aieflow_shim::net::dir::in
                  : std::is_same_v<Dir, output> ? aieflow_shim::net::dir::out
                                                : aieflow_shim::net::dir::inout;
            p.index = static_cast<unsigned>(ports_.size() - 1);
        }
        return ports_[i];
    }
    std::size_t size() const { return ports_.size(); }

private:
    int owner_ = -1;
    std::deque<port<Dir>> ports_;
};

inline int add_node(aieflow_shim::net::node_kind kind, std::string name) {
    aieflow_shim::net::node n;
    n.kind = kind;
    n.name = std::move(name);
    return aieflow_shim::net::netlist::get().add(std::move(n));
}
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
class kernel {
public:
    detail::port_list<input> in;
    detail::port_list<output> out;
    detail::port_list<::adf::inout> inout;

    kernel() = default;

    template <typename R, typename... Args>
    static kernel create(R (*fn)(Args...)) {
        namespace net = aieflow_shim::net;
        net::node n;
        n.kind = net::node_kind::kernel;
        n.name = "kernel#" + std::to_string(net::netlist::get().nodes.size()) + " (function)";
        net::describe_function(n, fn);
        return kernel(net::netlist::get().add(std::move(n)));
    }

    // C++ kernel class (UG1079 "C++ Kernel Class Support").  The class must provide static void
    // registerKernelClass(), whose REGISTER_FUNCTION names the run method; the object is built from
    // the graph-side arguments when the class has a matching constructor (else the kernel is
    // type-checked only and graph::init reports that it cannot run on x86).
    template <typename C, typename... Args>
    static kernel create_object(Args&&... ctor_args) {
        namespace net = aieflow_shim::net;
        static_assert(std::is_class_v<C>, "kernel::create_object needs a kernel class");
        static_assert(requires { C::registerKernelClass(); },
                      "kernel class must declare static void registerKernelClass()");
        net::class_registration reg;
        net::current_registration() = &reg;
        C::registerKernelClass();
        net::current_registration() = nullptr;
        net::node n;
        n.kind = net::node_kind::kernel;
        n.name = "kernel#" + std::to_string(net::netlist::get().nodes.size()) + " (" + net::type_label<C>() + ")";
        n.args = reg.args;
        n.unsupported = reg.invoke ? reg.unsupported : "registerKernelClass() has no REGISTER_FUNCTION";
        if constexpr (std::is_constructible_v<C, Args&&...>) {
            auto obj = std::make_shared<C>(std::forward<Args>(ctor_args)...);
            n.object = obj;
            n.invoke = [obj, inv = reg.invoke](net::firing& f) { inv(obj.get(), f); };
        } else {
            ((void)ctor_args, ...);
            if (n.unsupported.empty())
                n.unsupported = "the class has no constructor taking the graph-side arguments";
        }
        return kernel(net::netlist::get().add(std::move(n)));
    }

    // Recorded graph attributes (not used by the shim).
    std::string source_file{};
    std::vector<std::string> header_files{};
    std::string init_function{};
    double runtime_ratio = 0.0;
    int stack_bytes = 0;
    int heap_bytes = 0;
    int repetitions = 0;
    int id = -1;  // netlist node

private:
    explicit kernel(int node) : in(node), out(node), inout(node), id(node) {}
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

// Port attributes live in the netlist (ports are copied with their kernels); ports of objects
// that are not executed keep them locally.
inline std::vector<uint32_t>& dimensions(detail::endpoint& p) {
    return p.node >= 0 ? aieflow_shim::net::netlist::get().port(p.ref()).dims : p.dims;
}
inline void single_buffer(detail::endpoint& p) { p.single = true; }
inline access_rule& read_access(detail::endpoint& p) {
    return p.node >= 0 ? aieflow_shim::net::netlist::get().port(p.ref()).read_rule : p.read_rule;
}
inline access_rule& write_access(detail::endpoint& p) {
    return p.node >= 0 ? aieflow_shim::net::netlist::get().port(p.ref()).write_rule : p.write_rule;
}

// ---- connections -------------------------------------------------------------------------------
namespace detail {
template <typename A>
std::string connection_kind() {
    if constexpr (std::is_same_v<A, stream>) return "stream";
    else if constexpr (std::is_same_v<A, cascade>) return "cascade";
    else if constexpr (std::is_same_v<A, pktstream>) return "pktstream";
    else if constexpr (std::is_same_v<A, parameter>) return "parameter";
    else return "";
}
}  // namespace detail

template <typename A = void, typename B = void>
class connect {
public:
    template <detail::endpoint_like S, detail::endpoint_like D>
    connect(S&& src, D&& dst) {
        auto& nl = aieflow_shim::net::netlist::get();
        const std::string kind = detail::connection_kind<A>();
        if (src.node < 0 || dst.node < 0) {
            nl.unsupported.push_back("connect" + (kind.empty() ? std::string() : "<" + kind + ">") +
                                     " with a graph port or run-time parameter: the shim executes flat graphs "
                                     "without run-time parameters only");
            return;
        }
        nl.edges.push_back({src.ref(), dst.ref(), kind});
    }
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

    shared_buffer() = default;

    static shared_buffer create(std::vector<uint32_t> dims, unsigned num_inputs, unsigned num_outputs) {
        namespace net = aieflow_shim::net;
        net::node n;
        n.kind = net::node_kind::shared_buffer;
        n.name = "shared_buffer#" + std::to_string(net::netlist::get().nodes.size()) + " (" + net::type_label<T>() + ")";
        n.buffer_dims = dims;
        n.n_in = num_inputs;
        n.n_out = num_outputs;
        n.fire = &fire;
        const int id = net::netlist::get().add(std::move(n));
        shared_buffer b(id);
        b.buffer_dims = std::move(dims);
        for (unsigned i = 0; i < num_inputs; ++i) (void)b.in[i];
        for (unsigned i = 0; i < num_outputs; ++i) (void)b.out[i];
        return b;
    }

private:
    explicit shared_buffer(int node) : in(node), out(node) { this->node = node; }

    // Writers fill the buffer through their write tilings, then readers gather through theirs;
    // repetition_count times per iteration.
    static void fire(aieflow_shim::net::executor& ex, int k) {
        namespace net = aieflow_shim::net;
        auto& nl = net::netlist::get();
        const net::node& n = nl.nodes[static_cast<std::size_t>(k)];
        AIEFLOW_SHIM_CHECK(n.repetitions <= 1 || ex.streams_only(k),
                           "%s: repetition_count %d with a buffer port or PLIO on it: the shim repeats shared buffers "
                           "between kernel stream ports only", n.name.c_str(), n.repetitions);
        for (int rep = 0; rep < std::max(1, n.repetitions); ++rep) fill(ex, k);
        ex.publish(k);
    }

    static void fill(aieflow_shim::net::executor& ex, int k) {
        namespace net = aieflow_shim::net;
        auto& nl = net::netlist::get();
        const net::node& n = nl.nodes[static_cast<std::size_t>(k)];
        std::size_t total = 1;
        for (auto d : n.buffer_dims) total *= d;
        std::vector<T> buf(total);
        if (total != 0) std::memset(static_cast<void*>(buf.data()), 0xA5, total * sizeof(T));  // stale memory
        for (unsigned i = 0; i < n.n_in; ++i) {
            const net::port_ref p{k, net::dir::in, i};
            const std::string where = nl.port_name(p) + " write_access";
            const auto& rule = nl.port(p).write_rule;
            AIEFLOW_SHIM_CHECK(!rule.patterns.empty(), "%s is not set", where.c_str());
            const auto addr = net::rule_addresses(rule, n.buffer_dims, where);
            const auto& src = ex.template input_window<T>(p, addr.size(), nl.port_name(p));
            AIEFLOW_SHIM_CHECK(src.size() == addr.size(), "%s covers %zu elements, the producer wrote %zu",
                               where.c_str(), addr.size(), src.size());
            for (std::size_t j = 0; j < addr.size(); ++j)
                if (addr[j] >= 0) buf[static_cast<std::size_t>(addr[j])] = src[j];
        }
        for (unsigned o = 0; o < n.n_out; ++o) {
            const net::port_ref p{k, net::dir::out, o};
            const std::string where = nl.port_name(p) + " read_access";
            const auto& rule = nl.port(p).read_rule;
            AIEFLOW_SHIM_CHECK(!rule.patterns.empty(), "%s is not set", where.c_str());
            const auto addr = net::rule_addresses(rule, n.buffer_dims, where);
            auto& dst = ex.template output_window<T>(p, addr.size());
            for (std::size_t j = 0; j < addr.size(); ++j)
                dst[j] = addr[j] >= 0 ? buf[static_cast<std::size_t>(addr[j])] : T(0);
            ex.template stream_out<T>(p, dst);  // consumers reading this port as a stream
        }
    }
};

template <typename T>
int& num_buffers(shared_buffer<T>& b) {
    return b.buffers;
}

// UG1603: the buffer's write and read access patterns run this many times per graph iteration.
template <typename T>
int& repetition_count(shared_buffer<T>& b) {
    return aieflow_shim::net::netlist::get().nodes.at(static_cast<std::size_t>(b.node)).repetitions;
}

// ---- packet switching (type-checked; not executed yet) -----------------------------------------
template <unsigned N>
class pktsplit {
public:
    detail::port_list<input> in;
    detail::port_list<output> out;
    pktsplit() = default;
    static pktsplit create() {
        const int id = detail::add_node(aieflow_shim::net::node_kind::packet_switch, "pktsplit");
        pktsplit s;
        s.in = detail::port_list<input>(id);
        s.out = detail::port_list<output>(id);
        return s;
    }
};
template <unsigned N>
class pktmerge {
public:
    detail::port_list<input> in;
    detail::port_list<output> out;
    pktmerge() = default;
    static pktmerge create() {
        const int id = detail::add_node(aieflow_shim::net::node_kind::packet_switch, "pktmerge");
        pktmerge s;
        s.in = detail::port_list<input>(id);
        s.out = detail::port_list<output>(id);
        return s;
    }
};

// ---- platform I/O ------------------------------------------------------------------------------
namespace detail {
inline unsigned plio_width_bits(plio_type w) {
    return w == plio_32_bits ? 32u : w == plio_64_bits ? 64u : 128u;
}
inline int add_plio(aieflow_shim::net::node_kind kind, std::string name, plio_type width, std::string file) {
    aieflow_shim::net::node n;
    n.kind = kind;
    n.name = (kind == aieflow_shim::net::node_kind::plio_in ? "input PLIO '" : "output PLIO '") + name + "'";
    n.plio_bits = plio_width_bits(width);
    n.file = std::move(file);
    return aieflow_shim::net::netlist::get().add(std::move(n));
}
}  // namespace detail

class input_plio {
public:
    detail::port_list<output> out;
    static input_plio create(std::string name, plio_type width, std::string file = "", double /*freq_mhz*/ = 0.0,
                             bool /*binary*/ = false, bool /*hex*/ = false) {
        input_plio p;
        p.out = detail::port_list<output>(
            detail::add_plio(aieflow_shim::net::node_kind::plio_in, std::move(name), width, std::move(file)));
        return p;
    }
    static input_plio create(plio_type width, std::string file = "", double freq_mhz = 0.0) {
        return create(file, width, file, freq_mhz);
    }
};
class output_plio {
public:
    detail::port_list<input> in;
    static output_plio create(std::string name, plio_type width, std::string file = "", double /*freq_mhz*/ = 0.0,
                              bool /*binary*/ = false, bool /*hex*/ = false) {
        output_plio p;
        p.in = detail::port_list<input>(
            detail::add_plio(aieflow_shim::net::node_kind::plio_out, std::move(name), width, std::move(file)));
        return p;
    }
    static output_plio create(plio_type width, std::string file = "", double freq_mhz = 0.0) {
        return create(file, width, file, freq_mhz);
    }
};
// GMIO (UG1079 / UG1603 "input_gmio/output_gmio"): GMIO::malloc / free and wait() are the base
// class's.  Input GMIO is executed: gm2aie_nb / gm2aie into buffer ports copy the bytes at once (so
// the data must be in place before the call, as for the real DMA) and the consumers take their
// windows from them in order; into a kernel's stream port or a shared buffer's write port the
// transaction is recorded and its bytes are read from memory when the kernel takes them or the
// buffer fills (as the DMA reads DDR when it moves the data: a
// DDR round trip may name bytes the graph writes earlier in the same iteration).  Output GMIO fed by a
// kernel's output stream is executed: aie2gm_nb / aie2gm record the transaction and the values the
// kernel writes fill the transactions' memory in order.  wait() has nothing left to wait for: the
// graph runs synchronously in graph::run.
class GMIO {
public:
    static void* malloc(std::size_t size) { return std::malloc(size); }
    static void free(void* address) { std::free(address); }
    return_code wait() { return return_code::ok; }
};
class input_gmio : public GMIO {
public:
    detail::port_list<output> out;
    static input_gmio create(std::string name, int /*burst_length*/, int /*bandwidth_mbps*/) {
        input_gmio g;
        const int id = detail::add_node(aieflow_shim::net::node_kind::gmio, "GMIO '" + name + "'");
        aieflow_shim::net::netlist::get().nodes[static_cast<std::size_t>(id)].gmio_input = true;
        g.out = detail::port_list<output>(id);
        return g;
    }
    return_code gm2aie_nb(const void* address, std::size_t transaction_size) {
        AIEFLOW_SHIM_CHECK(out.size() > 0 && out[0].node >= 0, "gm2aie_nb: the GMIO was not created");
        AIEFLOW_SHIM_CHECK(address != nullptr || transaction_size == 0, "gm2aie_nb: null address");
        auto& nl = aieflow_shim::net::netlist::get();
        auto& n = nl.nodes[static_cast<std::size_t>(out[0].node)];
        const auto* p = static_cast<const unsigned char*>(address);
        // into a kernel's stream port or a memory tile's write port (a DDR round trip: read when the
        // kernel takes it, or at the shared buffer's fill)
        bool stream = false;
        for (const auto& e : nl.edges)
            stream = stream || (e.src.node == out[0].node &&
                                (aieflow_shim::net::executor::stream_edge(e) ||
                                 nl.nodes[static_cast<std::size_t>(e.dst.node)].kind ==
                                     aieflow_shim::net::node_kind::shared_buffer));
        if (stream) n.gmio_pending.emplace_back(p, transaction_size);
        else n.gmio_bytes.insert(n.gmio_bytes.end(), p, p + transaction_size);  // windows: copied now
        return return_code::ok;
    }
    return_code gm2aie(const void* address, std::size_t transaction_size) { return gm2aie_nb(address, transaction_size); }
};
class output_gmio : public GMIO {
public:
    detail::port_list<input> in;
    static output_gmio create(std::string name, int /*burst_length*/, int /*bandwidth_mbps*/) {
        output_gmio g;
        g.in = detail::port_list<input>(detail::add_node(aieflow_shim::net::node_kind::gmio, "GMIO '" + name + "'"));
        return g;
    }
    return_code aie2gm_nb(void* address, std::size_t transaction_size) {
        AIEFLOW_SHIM_CHECK(in.size() > 0 && in[0].node >= 0, "aie2gm_nb: the GMIO was not created");
        AIEFLOW_SHIM_CHECK(address != nullptr || transaction_size == 0, "aie2gm_nb: null address");
        auto& n = aieflow_shim::net::netlist::get().nodes[static_cast<std::size_t>(in[0].node)];
        if (transaction_size != 0) n.gmio_dest.emplace_back(static_cast<unsigned char*>(address), transaction_size);
        return return_code::ok;
    }
    return_code aie2gm(void* address, std::size_t transaction_size) { return aie2gm_nb(address, transaction_size); }
};

// ---- graph -------------------------------------------------------------------------------------
// The shim executes the netlist of every graph constructed so far (one design per program).
class graph {
public:
    virtual ~graph() = default;
    return_code init() {
        aieflow_shim::net::executor::get().init();
        return return_code::ok;
    }
    // iterations < 0: run until an input PLIO runs out of data.
    return_code run(int iterations = -1) {
        aieflow_shim::net::executor::get().run(iterations);
        return return_code::ok;
    }
    return_code wait() { return return_code::ok; }
    return_code wait(unsigned long long /*cycles*/) { return return_code::ok; }
    return_code resume() { return return_code::ok; }
    return_code end() {
        aieflow_shim::net::executor::get().end();
        return return_code::ok;
    }
    return_code end(unsigned long long /*cycles*/) { return end(); }
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
#define REGISTER_FUNCTION(fn) ::aieflow_shim::net::register_member(&fn)
#define REGISTER_PARAMETER(member) static_cast<void>(sizeof(member))

namespace aieflow_shim {
// In-memory PLIO data for harnesses that interleave the graph with other code (e.g. PL kernels
// compiled as C++): feed_plio appends values to an input PLIO (instead of its data file: every
// stream consumer gets all of them, buffer consumers take their windows from them in order);
// take_plio returns, and removes, what the graph has written to an output PLIO so far.
template <typename T>
void feed_plio(adf::input_plio& p, const std::vector<T>& values) {
    AIEFLOW_SHIM_CHECK(p.out[0].node >= 0, "feed_plio: the PLIO was not created");
    net::executor::get().feed(p.out[0].node, values);
}
template <typename T>
std::vector<T> take_plio(adf::output_plio& p) {
    AIEFLOW_SHIM_CHECK(p.in[0].node >= 0, "take_plio: the PLIO was not created");
    return net::executor::get().template take<T>(p.in[0].node);
}

// Give a kernel the name its graph variable has (used in messages and trace file names); the real
// tools take it from the graph, the shim cannot see variable names.
inline void name_kernel(const adf::kernel& k, std::string name) {
    AIEFLOW_SHIM_CHECK(k.id >= 0, "name_kernel(%s): the kernel was not created", name.c_str());
    net::netlist::get().nodes.at(static_cast<std::size_t>(k.id)).name = std::move(name);
}
}  // namespace aieflow_shim
