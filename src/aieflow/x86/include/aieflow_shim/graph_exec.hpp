// aieflow x86 shim: the netlist recorded by the graph-side ADF API and the executor that runs it.
//
// Every kernel::create / create_object, input_plio / output_plio::create, shared_buffer::create
// and connect<> made while a graph is constructed is recorded here.  graph::run(n) then executes
// the recorded design on x86, n graph iterations, as synchronous dataflow in one thread:
//
//   * each iteration fires every kernel and every memory-tile shared buffer once, in a topological
//     order of the connections (ties broken by creation order, so runs are deterministic);
//   * a buffer port receives the whole window its producer wrote in this iteration (ping-pong
//     depth does not change values, so it is not modelled); a window fed by an input PLIO is the
//     next `dimensions` values of its data file; several consumers of one port see the same window;
//   * streams and cascades are FIFOs; a read from an empty one is fatal (the device would stall),
//     and values left in a kernel-to-kernel FIFO at the end of an iteration are fatal too;
//   * shared buffers apply their write_access tilings to the incoming windows and their
//     read_access tilings (with zero padding outside boundary_dimension) to build outgoing ones;
//   * output buffers are filled with a poison pattern before the kernel runs, as memory on the
//     device holds stale data: an element a kernel forgets to write cannot come out as zero;
//   * each kernel keeps its own rounding / saturation state (one mode register per core);
//   * output PLIO files are written by graph::end() in the same text format as the inputs;
//   * a PLIO that feeds several stream ports broadcasts: every consumer gets the whole file;
//   * a harness can feed input PLIOs and read output PLIOs in memory between graph::run calls
//     (aieflow_shim::feed_plio / take_plio), e.g. to interleave the graph with PL code on x86;
//   * a shared buffer's read port feeding kernel stream ports fills their FIFOs (multicast);
//   * a shared buffer's write port fed by a kernel's output stream (the memory tile's S2MM DMA)
//     takes the values its write tiling covers from that stream; a shared buffer with
//     repetition_count N fills and drains N times per iteration (stream ports or input GMIO only);
//   * a kernel output stream connected to several inputs broadcasts: each gets every value;
//   * input GMIO: the bytes gm2aie / gm2aie_nb transferred are the port's windows, in order (copied
//     at the call), or its stream consumer's values, or a shared buffer write port's values at
//     each fill (read from memory when the consumer takes them, as the DMA reads DDR when it moves
//     the data: a transaction may name bytes the graph writes earlier in the same iteration);
//   * output GMIO fed by a kernel's output stream: what the kernel wrote goes to the addresses of
//     the aie2gm / aie2gm_nb transactions, in order, as soon as the kernel has fired.
//
// Not executed (fatal at graph::run with a message): run-time parameters, hierarchical graph
// ports, output GMIO from a buffer port, packet split / merge, feedback loops (a cycle in the connections), and kernel
// classes that cannot be constructed from the graph-side arguments.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <utility>
#include <vector>

#include "adf_io.hpp"
#include "bfloat16.hpp"
#include "float16.hpp"
#include "config.hpp"
#include "modes.hpp"

namespace aieflow_shim::net {

enum class dir : unsigned char { in, out, inout };
enum class node_kind { kernel, plio_in, plio_out, shared_buffer, gmio, packet_switch };

inline const char* dir_name(dir d) { return d == dir::in ? "in" : d == dir::out ? "out" : "inout"; }

template <typename T>
std::string type_label() {
    if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
    else if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
    else if constexpr (std::is_same_v<T, std::int16_t>) return "int16";
    else if constexpr (std::is_same_v<T, std::uint16_t>) return "uint16";
    else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
    else if constexpr (std::is_same_v<T, std::uint32_t>) return "uint32";
    else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
    else if constexpr (std::is_same_v<T, std::uint64_t>) return "uint64";
    else if constexpr (std::is_same_v<T, float>) return "float";
    else if constexpr (std::is_same_v<T, bfloat16>) return "bfloat16";
    else if constexpr (std::is_same_v<T, float16>) return "float16";
    else {
        int status = 0;
        char* d = abi::__cxa_demangle(typeid(T).name(), nullptr, nullptr, &status);
        std::string r = status == 0 && d != nullptr ? d : typeid(T).name();
        std::free(d);
        return r;
    }
}

// ---- text format of PLIO data files (one value per token; any whitespace separates) ----------
template <typename T>
T parse_value(const std::string& tok, const std::string& where) {
    char* end = nullptr;
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) {
        const float f = std::strtof(tok.c_str(), &end);
        AIEFLOW_SHIM_CHECK(end != tok.c_str() && *end == '\0', "%s: '%s' is not a number", where.c_str(),
                           tok.c_str());
        return T(f);
    } else {
        static_assert(std::is_integral_v<T>, "PLIO data must be integer, float, bfloat16 or float16");
        const long long v = std::strtoll(tok.c_str(), &end, 10);
        AIEFLOW_SHIM_CHECK(end != tok.c_str() && *end == '\0', "%s: '%s' is not an integer", where.c_str(),
                           tok.c_str());
        AIEFLOW_SHIM_CHECK(v >= static_cast<long long>(std::numeric_limits<T>::min()) &&
                               (v < 0 || static_cast<unsigned long long>(v) <=
                                             static_cast<unsigned long long>(std::numeric_limits<T>::max())),
                           "%s: %lld does not fit %s", where.c_str(), v, type_label<T>().c_str());
        return static_cast<T>(v);
    }
}

template <typename T>
void format_value(std::string& out, const T& v) {
    char buf[64];
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) {
        std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(static_cast<float>(v)));
    } else if constexpr (std::is_signed_v<T>) {
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    } else {
        std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(v));
    }
    out += buf;
}

// ---- a typed array behind a type-erased handle -------------------------------------------------
struct values {
    std::shared_ptr<void> data{};
    std::type_index type{typeid(void)};
    std::string type_name{};
    std::size_t size = 0;
    unsigned elem_bits = 0;
    // Appends the values as text, `per_line` per line.
    void (*format)(const void* vec, std::string& out, unsigned per_line) = nullptr;

    template <typename T>
    static values make(std::size_t n, bool poison) {
        auto v = std::make_shared<std::vector<T>>(n);
        if (poison && n != 0) std::memset(static_cast<void*>(v->data()), 0xA5, n * sizeof(T));
        values r;
        r.data = v;
        r.type = typeid(T);
        r.type_name = type_label<T>();
        r.size = n;
        r.elem_bits = static_cast<unsigned>(8 * sizeof(T));
        r.format = [](const void* vec, std::string& out, unsigned per_line) {
            const auto& xs = *static_cast<const std::vector<T>*>(vec);
            for (std::size_t i = 0; i < xs.size(); ++i) {
                format_value(out, xs[i]);
                out += (i + 1) % per_line == 0 || i + 1 == xs.size() ? '\n' : ' ';
            }
        };
        return r;
    }
    template <typename T>
    std::vector<T>& as(const std::string& where) const {
        AIEFLOW_SHIM_CHECK(type == std::type_index(typeid(T)), "%s: data of type %s where %s is expected",
                           where.c_str(), type_name.c_str(), type_label<T>().c_str());
        return *static_cast<std::vector<T>*>(data.get());
    }
};

// A FIFO created typed by whichever side binds first; the other side must agree on the type.
struct any_fifo {
    std::shared_ptr<void> fifo{};
    std::type_index type{typeid(void)};
    std::string type_name{};
    std::function<std::size_t()> size{};
    std::function<void(std::string&, unsigned)> drain_text{};  // empties it into text
    std::function<void(std::vector<unsigned char>&)> drain_bytes{};  // empties it into raw bytes (a DMA to DDR)
    // appends its values from index `from` on to `dst` (a stream broadcast's other destinations)
    std::function<void(any_fifo&, std::size_t, const std::string&)> tee{};

    template <typename E>
    detail::fifo<E>& get(const std::string& name, const char* kind) {
        if (!fifo) {
            auto f = std::make_shared<detail::fifo<E>>();
            f->name = name;
            f->kind = kind;
            fifo = f;
            type = typeid(E);
            type_name = type_label<E>();
            size = [f] { return f->q.size(); };
            tee = [f](any_fifo& dst, std::size_t from, const std::string& dst_name) {
                auto& q = dst.template get<E>(dst_name, "stream");
                for (std::size_t i = from; i < f->q.size(); ++i) q.push(f->q[i].first, f->q[i].second);
            };
            drain_bytes = [f](std::vector<unsigned char>& out) {
                for (const auto& [v, t] : f->q) {
                    (void)t;
                    const auto* p = reinterpret_cast<const unsigned char*>(&v);
                    out.insert(out.end(), p, p + sizeof(E));
                }
                f->q.clear();
            };
            drain_text = [f](std::string& out, unsigned per_line) {
                std::size_t i = 0;
                while (!f->q.empty()) {
                    format_value(out, f->q.front().first);
                    f->q.pop_front();
                    out += ++i % per_line == 0 || f->q.empty() ? '\n' : ' ';
                }
            };
        }
        AIEFLOW_SHIM_CHECK(type == std::type_index(typeid(E)), "%s '%s' carries %s on one side and %s on the other",
                           kind, name.c_str(), type_name.c_str(), type_label<E>().c_str());
        return *static_cast<detail::fifo<E>*>(fifo.get());
    }
};

// ---- netlist -----------------------------------------------------------------------------------
struct port_record {
    std::vector<std::uint32_t> dims{};
    adf::access_rule read_rule{};
    adf::access_rule write_rule{};
};

struct port_ref {
    int node = -1;
    dir d = dir::in;
    unsigned index = 0;
    bool operator<(const port_ref& o) const {
        return std::tie(node, d, index) < std::tie(o.node, o.d, o.index);
    }
    bool operator==(const port_ref& o) const { return node == o.node && d == o.d && index == o.index; }
};

class executor;
class firing;

enum class arg_class { buffer, stream, cascade, pktstream, unsupported };

struct arg_info {
    dir d;
    unsigned index;
    arg_class cls;
    std::string type;  // C++ spelling for messages
};

struct node {
    node_kind kind = node_kind::kernel;
    std::string name{};
    std::map<std::pair<dir, unsigned>, port_record> ports{};

    // kernels
    std::shared_ptr<void> object{};
    std::function<void(firing&)> invoke{};
    std::vector<arg_info> args{};
    std::string unsupported{};  // why this kernel cannot run on x86 (empty: it can)
    aie::rounding_mode rounding = aie::rounding_mode::floor;
    aie::saturation_mode saturation = aie::saturation_mode::none;

    // PLIOs
    std::string file{};
    unsigned plio_bits = 32;
    std::vector<std::string> tokens{};
    std::size_t cursor = 0;
    bool loaded = false;
    bool fed = false;  // input data comes from aieflow_shim::feed_plio instead of the file
    std::string text{};

    // shared buffers
    std::vector<std::uint32_t> buffer_dims{};
    unsigned n_in = 0, n_out = 0;
    int repetitions = 0;  // adf::repetition_count: fills per iteration (0: one)
    std::function<void(executor&, int)> fire{};

    // input GMIO (executed): the transactions gm2aie / gm2aie_nb issued and not yet moved (the DMA
    // reads DDR when it moves the data: when a consumer takes it), then the bytes moved and not yet
    // consumed
    bool gmio_input = false;
    std::vector<std::pair<const unsigned char*, std::size_t>> gmio_pending{};
    std::vector<unsigned char> gmio_bytes{};
    std::size_t gmio_cursor = 0;
    // output GMIO (executed from kernel output streams): the transactions aie2gm / aie2gm_nb issued
    // and not yet filled, and the bytes already written into the first of them
    std::vector<std::pair<unsigned char*, std::size_t>> gmio_dest{};
    std::size_t gmio_dest_filled = 0;
};

struct edge {
    port_ref src;
    port_ref dst;
    std::string kind;  // "", "stream", "cascade", "pktstream", "parameter"
};

struct netlist {
    std::vector<node> nodes{};
    std::vector<edge> edges{};
    std::vector<std::string> unsupported{};  // connections the executor cannot run

    static netlist& get() {
        static netlist n;
        return n;
    }
    int add(node n) {
        nodes.push_back(std::move(n));
        return static_cast<int>(nodes.size()) - 1;
    }
    port_record& port(port_ref p) { return nodes.at(static_cast<std::size_t>(p.node)).ports[{p.d, p.index}]; }
    std::string port_name(port_ref p) const {
        return nodes.at(static_cast<std::size_t>(p.node)).name + "." + dir_name(p.d) + "[" +
               std::to_string(p.index) + "]";
    }
};

// ---- memory-tile tiling (UG1079 / UG1603 "tiling parameters") ----------------------------------
// Element addresses (linear, dimension 0 fastest) in the order the access pattern visits them;
// -1 marks a padding element (outside boundary_dimension: zero on read, dropped on write).
// Documented: elements inside a tile are visited dimension 0 first; tile_traversal[0] is the
// innermost loop over tiles; the pattern repeats `repetition` times.  Assumed: several patterns
// on one port run one after the other in the order given.
inline std::vector<std::int64_t> tiling_addresses(const adf::tiling_parameters& t,
                                                  const std::vector<std::uint32_t>& default_dims,
                                                  const std::string& where) {
    const std::vector<std::uint32_t>& bd = t.buffer_dimension.empty() ? default_dims : t.buffer_dimension;
    const std::size_t rank = bd.size();
    AIEFLOW_SHIM_CHECK(rank > 0, "%s: tiling without buffer_dimension", where.c_str());
    AIEFLOW_SHIM_CHECK(t.tiling_dimension.size() == rank, "%s: tiling_dimension has %zu entries, the buffer %zu",
                       where.c_str(), t.tiling_dimension.size(), rank);
    AIEFLOW_SHIM_CHECK(t.offset.empty() || t.offset.size() == rank, "%s: offset has %zu entries, the buffer %zu",
                       where.c_str(), t.offset.size(), rank);
    AIEFLOW_SHIM_CHECK(t.boundary_dimension.empty() || t.boundary_dimension.size() == rank,
                       "%s: boundary_dimension has %zu entries, the buffer %zu", where.c_str(),
                       t.boundary_dimension.size(), rank);
    for (const auto& tr : t.tile_traversal)
        AIEFLOW_SHIM_CHECK(tr.dimension < rank && tr.wrap > 0, "%s: bad tile_traversal entry (dimension %u, wrap %u)",
                           where.c_str(), tr.dimension, tr.wrap);

    std::size_t tile_elems = 1, tiles = 1;
    for (auto d : t.tiling_dimension) tile_elems *= d;
    for (const auto& tr : t.tile_traversal) tiles *= tr.wrap;
    std::vector<std::int64_t> out;
    out.reserve(tile_elems * tiles * std::max<std::uint32_t>(1, t.repetition));

    std::vector<std::int64_t> origin(rank), coord(rank);
    std::vector<std::uint32_t> tix(t.tile_traversal.size(), 0), eix(rank, 0);
    for (std::size_t tile = 0; tile < tiles; ++tile) {
        for (std::size_t d = 0; d < rank; ++d) origin[d] = t.offset.empty() ? 0 : t.offset[d];
        for (std::size_t e = 0; e < tix.size(); ++e)
            origin[t.tile_traversal[e].dimension] +=
                static_cast<std::int64_t>(tix[e]) * t.tile_traversal[e].stride;
        std::fill(eix.begin(), eix.end(), 0u);
        for (std::size_t el = 0; el < tile_elems; ++el) {
            bool pad = false;
            std::int64_t addr = 0, scale = 1;
            for (std::size_t d = 0; d < rank; ++d) {
                coord[d] = origin[d] + eix[d];
                const std::int64_t lim = t.boundary_dimension.empty() ? bd[d] : t.boundary_dimension[d];
                if (coord[d] < 0 || coord[d] >= lim) pad = true;
                addr += coord[d] * scale;
                scale *= bd[d];
            }
            if (!pad) {
                for (std::size_t d = 0; d < rank; ++d)
                    AIEFLOW_SHIM_CHECK(coord[d] < static_cast<std::int64_t>(bd[d]),
                                       "%s: element at coordinate %lld of dimension %zu is outside the buffer (%u) "
                                       "and inside boundary_dimension",
                                       where.c_str(), static_cast<long long>(coord[d]), d, bd[d]);
            } else {
                AIEFLOW_SHIM_CHECK(!t.boundary_dimension.empty(),
                                   "%s: the access pattern leaves the buffer (dimension sizes %s) and has no "
                                   "boundary_dimension for zero padding",
                                   where.c_str(), std::to_string(bd[0]).c_str());
            }
            out.push_back(pad ? -1 : addr);
            for (std::size_t d = 0; d < rank; ++d) {  // next element, dimension 0 fastest
                if (++eix[d] < t.tiling_dimension[d]) break;
                eix[d] = 0;
            }
        }
        for (std::size_t e = 0; e < tix.size(); ++e) {  // next tile, traversal[0] fastest
            if (++tix[e] < t.tile_traversal[e].wrap) break;
            tix[e] = 0;
        }
    }
    const std::size_t once = out.size();
    for (std::uint32_t r = 1; r < t.repetition; ++r) out.insert(out.end(), out.begin(), out.begin() + once);
    return out;
}

inline std::vector<std::int64_t> rule_addresses(const adf::access_rule& rule, const std::vector<std::uint32_t>& dims,
                                                const std::string& where) {
    std::vector<std::int64_t> out;
    for (const auto& p : rule.patterns) {
        auto a = tiling_addresses(p.params, dims, where);
        out.insert(out.end(), a.begin(), a.end());
    }
    return out;
}

// ---- harness options ---------------------------------------------------------------------------
struct options {
    std::string data_dir = ".";     // input PLIO files are read relative to this
    std::string out_dir = ".";      // output PLIO files are written relative to this
    std::string trace_dir{};        // if set: every kernel output window, per port
    int iterations = -2;            // -2: use the count the graph asks for
};
inline options& opts() {
    static options o;
    return o;
}

// ---- executor ----------------------------------------------------------------------------------
class executor {
public:
    static executor& get() {
        static executor e;
        return e;
    }

    void init() {
        auto& nl = netlist::get();
        for (const auto& u : nl.unsupported) fatal("%s", u.c_str());
        for (const auto& n : nl.nodes) {
            if (n.kind == node_kind::kernel && !n.unsupported.empty())
                fatal("%s cannot run on x86: %s", n.name.c_str(), n.unsupported.c_str());
            if (n.kind == node_kind::packet_switch)
                fatal("%s: packet split / merge is not executed by the aieflow shim yet", n.name.c_str());
        }
        incoming_.clear();
        outgoing_.clear();
        for (std::size_t i = 0; i < nl.edges.size(); ++i) {
            const auto& e = nl.edges[i];
            AIEFLOW_SHIM_CHECK(!incoming_.count(e.dst), "%s has two incoming connections (%s and %s)",
                               nl.port_name(e.dst).c_str(), nl.port_name(nl.edges[incoming_[e.dst]].src).c_str(),
                               nl.port_name(e.src).c_str());
            incoming_[e.dst] = i;
            outgoing_[e.src].push_back(i);
        }
        for (std::size_t k = 0; k < nl.nodes.size(); ++k) {
            const auto& n = nl.nodes[k];
            if (n.kind != node_kind::kernel) continue;
            for (const auto& a : n.args) {
                const port_ref p{static_cast<int>(k), a.d, a.index};
                if (a.d == dir::in)
                    AIEFLOW_SHIM_CHECK(incoming_.count(p), "%s (%s) is not connected", nl.port_name(p).c_str(),
                                       a.type.c_str());
                else
                    AIEFLOW_SHIM_CHECK(outgoing_.count(p), "%s (%s) is not connected", nl.port_name(p).c_str(),
                                       a.type.c_str());
            }
        }
        tees_.clear();
        for (std::size_t k = 0; k < nl.nodes.size(); ++k) {  // kernel output streams broadcast to several inputs
            const auto& n = nl.nodes[k];
            if (n.kind != node_kind::kernel) continue;
            for (const auto& a : n.args) {
                const port_ref p{static_cast<int>(k), a.d, a.index};
                if (a.d == dir::out && a.cls == arg_class::stream && outgoing_.count(p) && outgoing_[p].size() > 1)
                    tees_[static_cast<int>(k)].push_back(p);
            }
        }
        order_ = topological_order();
        initialized_ = true;
    }

    void run(int iterations) {
        if (!initialized_) init();
        if (opts().iterations != -2) iterations = opts().iterations;
        auto& nl = netlist::get();
        for (int it = 0; iterations < 0 || it < iterations; ++it) {
            if (iterations < 0 && inputs_exhausted()) break;
            iteration_ = iteration_count_++;
            windows_.clear();
            for (int k : order_) {
                auto& n = nl.nodes[static_cast<std::size_t>(k)];
                if (n.kind == node_kind::kernel) fire_kernel(k);
                else if (n.kind == node_kind::shared_buffer) n.fire(*this, k);
            }
            for (auto& [e, f] : fifos_) {
                const auto& ed = nl.edges[e];
                const auto& src = nl.nodes[static_cast<std::size_t>(ed.src.node)];
                const auto& dst = nl.nodes[static_cast<std::size_t>(ed.dst.node)];
                if (src.kind == node_kind::kernel && (dst.kind == node_kind::kernel || dst.kind == node_kind::shared_buffer))
                    AIEFLOW_SHIM_CHECK(f.size() == 0,
                                       "%s -> %s: %zu values written but not read in iteration %d (the producer "
                                       "and consumer disagree on the amount of data)",
                                       nl.port_name(ed.src).c_str(), nl.port_name(ed.dst).c_str(), f.size(), iteration_);
            }
        }
    }

    void end() {
        auto& nl = netlist::get();
        for (auto& n : nl.nodes) {
            if (n.kind != node_kind::plio_out) continue;
            write_file(opts().out_dir, n.file, n.text, n.name);
        }
        for (auto& [name, text] : traces_) write_file(opts().trace_dir, name, text, name);
    }

    int iterations_run() const { return iteration_count_; }

    // ---- used by firings and shared buffers ----
    template <typename T>
    std::vector<T>& input_window(port_ref dst, std::size_t want, const std::string& where) {
        auto& nl = netlist::get();
        const edge& e = nl.edges[incoming_.at(dst)];
        const node& src = nl.nodes[static_cast<std::size_t>(e.src.node)];
        if (src.kind == node_kind::kernel && stream_source(e.src)) {  // a kernel's output stream (S2MM DMA)
            auto& q = fifos_[incoming_.at(dst)].template get<T>(nl.port_name(e.src) + " -> " + nl.port_name(dst),
                                                                 "stream");
            auto [it, fresh] = windows_.insert_or_assign(dst, values::make<T>(want, false));
            (void)fresh;
            auto& v = it->second.template as<T>(where);
            for (auto& x : v) x = q.pop(nullptr);
            return v;
        }
        if (src.kind == node_kind::gmio && nl.nodes[static_cast<std::size_t>(dst.node)].kind == node_kind::shared_buffer) {
            // input GMIO into a memory tile's write port (its S2MM channel): the next `want` values
            // of what gm2aie_nb transferred at each fill, read from memory now (as a stream consumer)
            auto [it, fresh] = windows_.insert_or_assign(dst, read_gmio<T>(e.src.node, want));
            (void)fresh;
            return it->second.template as<T>(where);
        }
        if (src.kind == node_kind::gmio) {  // input GMIO: the next window of what gm2aie_nb transferred
            auto it = windows_.find(e.src);
            if (it == windows_.end()) {
                AIEFLOW_SHIM_CHECK(want != 0, "%s: set adf::dimensions on the port, the size of its GMIO window",
                                   where.c_str());
                it = windows_.emplace(e.src, read_gmio<T>(e.src.node, want)).first;
            }
            auto& v = it->second.template as<T>(where);
            AIEFLOW_SHIM_CHECK(v.size() == want || want == 0, "%s: window of %zu values, but another consumer of %s "
                               "takes %zu", where.c_str(), want, src.name.c_str(), v.size());
            return v;
        }
        if (src.kind == node_kind::plio_in) {
            auto it = windows_.find(e.src);
            if (it == windows_.end()) {
                AIEFLOW_SHIM_CHECK(want != 0, "%s: set adf::dimensions on the port, the size of its PLIO window",
                                   where.c_str());
                it = windows_.emplace(e.src, read_plio<T>(e.src.node, want)).first;
            }
            auto& v = it->second.template as<T>(where);
            AIEFLOW_SHIM_CHECK(v.size() == want || want == 0, "%s: window of %zu values, but another consumer of %s "
                               "takes %zu", where.c_str(), want, src.name.c_str(), v.size());
            return v;
        }
        auto it = windows_.find(e.src);
        AIEFLOW_SHIM_CHECK(it != windows_.end(), "%s: no data from %s in iteration %d", where.c_str(),
                           nl.port_name(e.src).c_str(), iteration_);
        auto& v = it->second.template as<T>(where + " <- " + nl.port_name(e.src));
        AIEFLOW_SHIM_CHECK(want == 0 || v.size() == want, "%s: expects %zu values, %s produced %zu", where.c_str(),
                           want, nl.port_name(e.src).c_str(), v.size());
        return v;
    }

    template <typename T>
    std::vector<T>& output_window(port_ref src, std::size_t n) {
        auto [it, fresh] = windows_.insert_or_assign(src, values::make<T>(n, true));
        (void)fresh;
        return it->second.template as<T>("output window");
    }

    template <typename E>
    detail::fifo<E>& fifo_for(port_ref p, const char* kind) {
        auto& nl = netlist::get();
        std::size_t e;
        if (p.d == dir::in) {
            e = incoming_.at(p);
        } else {
            const auto& outs = outgoing_.at(p);
            AIEFLOW_SHIM_CHECK(outs.size() == 1 || std::string(kind) == "stream",
                               "%s: a %s output goes to exactly one port (it goes to %zu)",
                               nl.port_name(p).c_str(), kind, outs.size());  // a stream broadcasts (fire_kernel)
            e = outs[0];
        }
        const edge& ed = nl.edges[e];
        auto& f = fifos_[e];
        const bool fresh = !f.fifo;
        auto& q = f.template get<E>(nl.port_name(ed.src) + " -> " + nl.port_name(ed.dst), kind);
        if (p.d == dir::in && nl.nodes[static_cast<std::size_t>(ed.src.node)].kind == node_kind::gmio) {
            // an input GMIO into a stream port: what its transactions issued so far hold, read from
            // memory now (the interface DMA pushes it into the stream as the consumer takes it)
            node& g = nl.nodes[static_cast<std::size_t>(ed.src.node)];
            collect_gmio(g);
            const std::size_t left = g.gmio_bytes.size() - g.gmio_cursor;
            AIEFLOW_SHIM_CHECK(left % sizeof(E) == 0, "%s: %zu bytes transferred, not whole %zu-byte stream values",
                               g.name.c_str(), left, sizeof(E));
            for (std::size_t i = 0; i < left; i += sizeof(E)) {
                E x;
                std::memcpy(static_cast<void*>(&x), g.gmio_bytes.data() + g.gmio_cursor + i, sizeof(E));
                q.push(x, false);
            }
            g.gmio_bytes.clear();
            g.gmio_cursor = 0;
        }
        if (fresh) {
            const node& src = nl.nodes[static_cast<std::size_t>(ed.src.node)];
            if (src.kind == node_kind::plio_in && !src.fed) {  // a stream fed by a PLIO: the whole file,
                auto all = read_plio_stream<E>(ed.src.node);     // for each of its consumers (multicast)
                for (const auto& x : all.template as<E>(src.name)) q.push(x, false);
            }
        }
        return q;
    }

    // In-memory PLIO input (aieflow_shim::feed_plio): the values go to every stream consumer's FIFO
    // (multicast) and are appended to the window data of buffer consumers; the data file is not read.
    template <typename T>
    void feed(int k, const std::vector<T>& xs) {
        if (!initialized_) init();
        auto& nl = netlist::get();
        node& n = nl.nodes.at(static_cast<std::size_t>(k));
        AIEFLOW_SHIM_CHECK(n.kind == node_kind::plio_in, "feed_plio: %s is not an input PLIO", n.name.c_str());
        AIEFLOW_SHIM_CHECK(n.fed || !n.loaded, "feed_plio: %s already reads its data file", n.name.c_str());
        n.fed = n.loaded = true;
        bool windows = false;
        for (const auto& [src, edges] : outgoing_) {
            if (src.node != k) continue;
            for (std::size_t e : edges) {
                const edge& ed = nl.edges[e];
                if (!stream_edge(ed)) {
                    windows = true;
                    continue;
                }
                auto& q = fifos_[e].template get<T>(nl.port_name(ed.src) + " -> " + nl.port_name(ed.dst), "stream");
                for (const T& x : xs) q.push(x, false);
            }
        }
        if (!windows) return;
        if (n.cursor == n.tokens.size()) {  // everything consumed: drop it
            n.tokens.clear();
            n.cursor = 0;
        }
        std::string tok;
        for (const T& x : xs) {
            tok.clear();
            format_value(tok, x);
            n.tokens.push_back(tok);
        }
    }

    // A memory-tile shared buffer's read port that feeds kernel stream ports (the memory tile's
    // MM2S DMA into a core's stream input): every such consumer gets the port's values in its FIFO
    // (several consumers: multicast).  Buffer consumers keep taking the window.
    template <typename T>
    void stream_out(port_ref src, const std::vector<T>& xs) {
        auto& nl = netlist::get();
        auto it = outgoing_.find(src);
        if (it == outgoing_.end()) return;
        for (std::size_t e : it->second) {
            const edge& ed = nl.edges[e];
            if (nl.nodes[static_cast<std::size_t>(ed.dst.node)].kind != node_kind::kernel || !stream_edge(ed)) continue;
            auto& q = fifos_[e].template get<T>(nl.port_name(ed.src) + " -> " + nl.port_name(ed.dst), "stream");
            for (const T& x : xs) q.push(x, false);
        }
    }

    // A kernel output port that is a stream (its values go to FIFOs, not windows).
    static bool stream_source(port_ref src) {
        const node& n = netlist::get().nodes[static_cast<std::size_t>(src.node)];
        for (const auto& a : n.args)
            if (a.d == src.d && a.index == src.index) return a.cls == arg_class::stream;
        return false;
    }

    // Every input of a shared buffer fed by a kernel stream or an input GMIO and every consumer of
    // its outputs a kernel stream port: what a buffer filled several times per iteration needs.
    bool streams_only(int k) const {
        const auto& nl = netlist::get();
        for (const auto& [dst, e] : incoming_) {
            const auto kind = nl.nodes[static_cast<std::size_t>(nl.edges[e].src.node)].kind;
            if (dst.node == k && kind != node_kind::gmio && !(kind == node_kind::kernel && stream_source(nl.edges[e].src)))
                return false;
        }
        for (const auto& [src, es] : outgoing_)
            if (src.node == k)
                for (std::size_t e : es)
                    if (nl.nodes[static_cast<std::size_t>(nl.edges[e].dst.node)].kind != node_kind::kernel ||
                        !stream_edge(nl.edges[e]))
                        return false;
        return true;
    }

    // A connection whose consumer reads it as a stream (by connect<stream> or by the kernel's port).
    static bool stream_edge(const edge& ed) {
        if (ed.kind == "stream") return true;
        const node& dst = netlist::get().nodes[static_cast<std::size_t>(ed.dst.node)];
        for (const auto& a : dst.args)
            if (a.d == ed.dst.d && a.index == ed.dst.index) return a.cls == arg_class::stream;
        return false;
    }

    // In-memory PLIO output (aieflow_shim::take_plio): the values written so far, removed from the
    // text that end() writes to the output file.
    template <typename T>
    std::vector<T> take(int k) {
        node& n = netlist::get().nodes.at(static_cast<std::size_t>(k));
        AIEFLOW_SHIM_CHECK(n.kind == node_kind::plio_out, "take_plio: %s is not an output PLIO", n.name.c_str());
        std::vector<T> out;
        std::istringstream in(n.text);
        std::string tok;
        while (in >> tok) out.push_back(parse_value<T>(tok, n.name));
        n.text.clear();
        return out;
    }

    // After a node fired: its output windows and streams reach PLIO sinks (and the trace).
    void publish(int k) {
        auto& nl = netlist::get();
        const node& n = nl.nodes[static_cast<std::size_t>(k)];
        for (const auto& [src, edges] : outgoing_) {
            if (src.node != k) continue;
            auto w = windows_.find(src);
            if (w != windows_.end() && !opts().trace_dir.empty() && n.kind == node_kind::kernel) {
                std::string file = n.name;
                for (char& ch : file)
                    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                auto& text = traces_[file + "_out" + std::to_string(src.index) + ".txt"];
                w->second.format(w->second.data.get(), text, 16);
            }
            for (std::size_t e : edges) {
                node& dst = nl.nodes[static_cast<std::size_t>(nl.edges[e].dst.node)];
                if (dst.kind == node_kind::gmio && !dst.gmio_input) {  // an output GMIO: the stream into DDR
                    AIEFLOW_SHIM_CHECK(w == windows_.end(), "%s: an output GMIO is executed from a kernel's output "
                                       "stream only", dst.name.c_str());
                    if (auto f = fifos_.find(e); f != fifos_.end() && f->second.drain_bytes) write_gmio(dst, f->second);
                    continue;
                }
                if (dst.kind != node_kind::plio_out) continue;
                if (w != windows_.end()) {
                    w->second.format(w->second.data.get(), dst.text, per_line(dst.plio_bits, w->second.elem_bits));
                } else if (auto f = fifos_.find(e); f != fifos_.end()) {
                    f->second.drain_text(dst.text, per_line(dst.plio_bits, 32));
                }
            }
        }
    }

private:
    static unsigned per_line(unsigned plio_bits, unsigned elem_bits) {
        return std::max(1u, plio_bits / std::max(1u, elem_bits));
    }

    void fire_kernel(int k);

    bool inputs_exhausted() {
        auto& nl = netlist::get();
        for (std::size_t i = 0; i < nl.nodes.size(); ++i) {
            auto& n = nl.nodes[i];
            if (n.kind != node_kind::plio_in) continue;
            load(n);
            if (n.cursor >= n.tokens.size()) return true;
        }
        return false;
    }

    static void load(node& n) {
        if (n.loaded) return;
        AIEFLOW_SHIM_CHECK(!n.file.empty(), "%s has no data file", n.name.c_str());
        const auto path = std::filesystem::path(opts().data_dir) / n.file;
        std::ifstream f(path);
        AIEFLOW_SHIM_CHECK(f.good(), "%s: cannot read %s", n.name.c_str(), path.c_str());
        std::string tok;
        while (f >> tok) n.tokens.push_back(tok);
        n.loaded = true;
    }

    // An input GMIO's issued transactions, read from memory now (in the order issued).
    static void collect_gmio(node& n) {
        for (const auto& [p, size] : n.gmio_pending) n.gmio_bytes.insert(n.gmio_bytes.end(), p, p + size);
        n.gmio_pending.clear();
    }

    // What a kernel wrote to the stream into an output GMIO, stored at the addresses of the
    // transactions aie2gm / aie2gm_nb issued, in order; more than they hold is fatal.
    void write_gmio(node& g, any_fifo& f) {
        std::vector<unsigned char> bytes;
        f.drain_bytes(bytes);
        std::size_t at = 0;
        while (at < bytes.size()) {
            AIEFLOW_SHIM_CHECK(!g.gmio_dest.empty(), "%s: the graph wrote %zu bytes more than the aie2gm transactions "
                               "issued in iteration %d hold", g.name.c_str(), bytes.size() - at, iteration_);
            auto& [p, size] = g.gmio_dest.front();
            const std::size_t n = std::min(size - g.gmio_dest_filled, bytes.size() - at);
            std::memcpy(p + g.gmio_dest_filled, bytes.data() + at, n);
            at += n;
            g.gmio_dest_filled += n;
            if (g.gmio_dest_filled == size) {
                g.gmio_dest.erase(g.gmio_dest.begin());
                g.gmio_dest_filled = 0;
            }
        }
    }

    // The next `want` values of type T an input GMIO's transfers delivered (raw bytes, as the DMA
    // copies them from DDR into the tile's buffer).
    template <typename T>
    values read_gmio(int k, std::size_t want) {
        node& n = netlist::get().nodes[static_cast<std::size_t>(k)];
        collect_gmio(n);
        const std::size_t bytes = want * sizeof(T), left = n.gmio_bytes.size() - n.gmio_cursor;
        AIEFLOW_SHIM_CHECK(bytes <= left, "%s: iteration %d needs %zu bytes, gm2aie transferred only %zu more",
                           n.name.c_str(), iteration_, bytes, left);
        values v = values::make<T>(want, false);
        if (bytes != 0) std::memcpy(static_cast<void*>(v.template as<T>(n.name).data()), n.gmio_bytes.data() + n.gmio_cursor, bytes);
        n.gmio_cursor += bytes;
        if (n.gmio_cursor == n.gmio_bytes.size()) {  // everything consumed: drop it
            n.gmio_bytes.clear();
            n.gmio_cursor = 0;
        }
        return v;
    }

    // want == 0: everything that is left.
    template <typename T>
    values read_plio(int k, std::size_t want) {
        node& n = netlist::get().nodes[static_cast<std::size_t>(k)];
        load(n);
        const std::size_t left = n.tokens.size() - n.cursor;
        if (want == 0) want = left;
        AIEFLOW_SHIM_CHECK(want <= left, "%s (%s): iteration %d needs %zu values, only %zu left",
                           n.name.c_str(), n.file.c_str(), iteration_, want, left);
        values v = values::make<T>(want, false);
        auto& xs = v.template as<T>(n.name);
        const std::string where = n.name + " (" + n.file + ")";
        for (std::size_t i = 0; i < want; ++i) xs[i] = parse_value<T>(n.tokens[n.cursor + i], where);
        n.cursor += want;
        return v;
    }

    // Everything a PLIO file holds from where its first stream consumer started: every stream
    // consumer of the port gets the same values (a broadcast stream).
    template <typename T>
    values read_plio_stream(int k) {
        node& n = netlist::get().nodes[static_cast<std::size_t>(k)];
        load(n);
        const std::size_t from = stream_origin_.emplace(k, n.cursor).first->second;
        values v = values::make<T>(n.tokens.size() - from, false);
        auto& xs = v.template as<T>(n.name);
        const std::string where = n.name + " (" + n.file + ")";
        for (std::size_t i = from; i < n.tokens.size(); ++i) xs[i - from] = parse_value<T>(n.tokens[i], where);
        n.cursor = n.tokens.size();
        return v;
    }

    static void write_file(const std::string& dir_, const std::string& file, const std::string& text,
                           const std::string& what) {
        AIEFLOW_SHIM_CHECK(!file.empty(), "%s has no data file", what.c_str());
        const auto path = std::filesystem::path(dir_) / file;
        std::filesystem::create_directories(path.parent_path());
        std::ofstream f(path);
        f << text;
        AIEFLOW_SHIM_CHECK(f.good(), "cannot write %s", path.c_str());
    }

    std::vector<int> topological_order() {
        auto& nl = netlist::get();
        const std::size_t n = nl.nodes.size();
        std::vector<std::vector<int>> succ(n);
        std::vector<int> indeg(n, 0);
        for (const auto& e : nl.edges) {
            succ[static_cast<std::size_t>(e.src.node)].push_back(e.dst.node);
            ++indeg[static_cast<std::size_t>(e.dst.node)];
        }
        std::vector<int> order, ready;
        for (std::size_t i = 0; i < n; ++i)
            if (indeg[i] == 0) ready.push_back(static_cast<int>(i));
        while (!ready.empty()) {
            auto it = std::min_element(ready.begin(), ready.end());  // creation order breaks ties
            const int k = *it;
            ready.erase(it);
            order.push_back(k);
            for (int s : succ[static_cast<std::size_t>(k)])
                if (--indeg[static_cast<std::size_t>(s)] == 0) ready.push_back(s);
        }
        if (order.size() != n) {
            std::string cyc;
            for (std::size_t i = 0; i < n; ++i)
                if (indeg[i] > 0) cyc += (cyc.empty() ? "" : ", ") + nl.nodes[i].name;
            fatal("the graph has a feedback loop through %s; the shim executes acyclic graphs only", cyc.c_str());
        }
        std::vector<int> fired;
        for (int k : order) {
            const auto kind = nl.nodes[static_cast<std::size_t>(k)].kind;
            if (kind == node_kind::kernel || kind == node_kind::shared_buffer) fired.push_back(k);
        }
        return fired;
    }

    std::map<port_ref, std::size_t> incoming_{};
    std::map<port_ref, std::vector<std::size_t>> outgoing_{};
    std::map<port_ref, values> windows_{};
    std::map<std::size_t, any_fifo> fifos_{};
    std::map<int, std::vector<port_ref>> tees_{};  // kernel -> its output streams that broadcast
    std::map<std::string, std::string> traces_{};
    std::map<int, std::size_t> stream_origin_{};  // PLIO node -> first token its stream consumers get
    std::vector<int> order_{};
    bool initialized_ = false;
    int iteration_ = 0;
    int iteration_count_ = 0;
};

// One kernel invocation: hands out the kernel's port objects.
class firing {
public:
    firing(executor& ex, int k) : ex_(ex), k_(k) {}

    template <typename T>
    std::pair<T*, std::size_t> input_buffer(unsigned idx, std::size_t extent) {
        const port_ref p{k_, dir::in, idx};
        auto& v = ex_.template input_window<T>(p, want(p, extent), where(p));
        return {v.data(), v.size()};
    }
    template <typename T>
    std::pair<T*, std::size_t> output_buffer(unsigned idx, std::size_t extent) {
        const port_ref p{k_, dir::out, idx};
        const std::size_t n = want(p, extent);
        AIEFLOW_SHIM_CHECK(n != 0, "%s: set adf::dimensions on the port (its buffer size)", where(p).c_str());
        auto& v = ex_.template output_window<T>(p, n);
        return {v.data(), v.size()};
    }
    template <typename E>
    detail::fifo<E>* fifo(dir d, unsigned idx, const char* kind) {
        return &ex_.template fifo_for<E>(port_ref{k_, d, idx}, kind);
    }

private:
    std::size_t want(port_ref p, std::size_t extent) const {
        const auto& dims = netlist::get().port(p).dims;
        std::size_t n = 0;
        if (!dims.empty()) {
            n = 1;
            for (auto d : dims) n *= d;
        }
        AIEFLOW_SHIM_CHECK(n == 0 || extent == 0 || n == extent, "%s: adf::dimensions gives %zu elements, the kernel "
                           "signature's extents %zu", where(p).c_str(), n, extent);
        return n != 0 ? n : extent;
    }
    std::string where(port_ref p) const { return netlist::get().port_name(p); }

    executor& ex_;
    int k_;
};

inline void executor::fire_kernel(int k) {
    auto& n = netlist::get().nodes[static_cast<std::size_t>(k)];
    aie::set_rounding(n.rounding);  // this core's mode registers
    aie::set_saturation(n.saturation);
    std::vector<std::pair<std::size_t, std::size_t>> tee_from;  // broadcast streams: (first edge, its size before)
    auto tee = tees_.find(k);
    if (tee != tees_.end())
        for (const auto& p : tee->second) {
            const std::size_t e0 = outgoing_.at(p)[0];
            auto& f0 = fifos_[e0];
            tee_from.emplace_back(e0, f0.size ? f0.size() : 0);
        }
    firing f(*this, k);
    n.invoke(f);
    if (tee != tees_.end()) {
        auto& nl = netlist::get();
        for (std::size_t i = 0; i < tee->second.size(); ++i) {
            const auto [e0, from] = tee_from[i];
            auto& f0 = fifos_[e0];
            if (!f0.tee) continue;  // nothing written
            const auto& es = outgoing_.at(tee->second[i]);
            for (std::size_t j = 1; j < es.size(); ++j)
                f0.tee(fifos_[es[j]], from, nl.port_name(nl.edges[es[j]].src) + " -> " + nl.port_name(nl.edges[es[j]].dst));
        }
    }
    n.rounding = aie::get_rounding();
    n.saturation = aie::get_saturation();
    publish(k);
}

// ---- kernel signatures -> port bindings --------------------------------------------------------
template <typename A>
struct arg_binding {  // anything else (run-time parameters, ...): recorded, fatal at init
    static constexpr bool is_input = true;
    static constexpr arg_class cls = arg_class::unsupported;
    using holder = int;
    static holder make(firing&, unsigned) { return 0; }
};

template <typename Buffer, typename T, typename E, bool In>
struct buffer_binding {
    static constexpr bool is_input = In;
    static constexpr arg_class cls = arg_class::buffer;
    using holder = Buffer;
    static holder make(firing& f, unsigned i) {
        auto [p, n] = In ? f.template input_buffer<T>(i, E::total) : f.template output_buffer<T>(i, E::total);
        return holder(p, n);
    }
    static holder& pass(holder& h) { return h; }
};
template <typename T, typename E, typename M>
struct arg_binding<adf::input_buffer<T, E, M>&> : buffer_binding<adf::input_buffer<T, E, M>, T, E, true> {};
template <typename T, typename E, typename M>
struct arg_binding<adf::input_async_buffer<T, E, M>&>
    : buffer_binding<adf::input_async_buffer<T, E, M>, T, E, true> {};
template <typename T, typename E, typename M>
struct arg_binding<adf::output_buffer<T, E, M>&> : buffer_binding<adf::output_buffer<T, E, M>, T, E, false> {};
template <typename T, typename E, typename M>
struct arg_binding<adf::output_async_buffer<T, E, M>&>
    : buffer_binding<adf::output_async_buffer<T, E, M>, T, E, false> {};

template <typename Port, bool In, arg_class Cls, typename E>
struct fifo_binding {
    static constexpr bool is_input = In;
    static constexpr arg_class cls = Cls;
    using holder = Port;
    static holder make(firing& f, unsigned i) {
        holder h{};
        h.fifo_ = f.template fifo<E>(In ? dir::in : dir::out, i,
                                     Cls == arg_class::cascade ? "cascade" : Cls == arg_class::stream ? "stream"
                                                                                                      : "packet stream");
        return h;
    }
    static holder* pass(holder& h) { return &h; }
};
template <typename T>
struct arg_binding<input_stream<T>*> : fifo_binding<input_stream<T>, true, arg_class::stream, T> {};
template <typename T>
struct arg_binding<output_stream<T>*> : fifo_binding<output_stream<T>, false, arg_class::stream, T> {};
template <typename X>
struct arg_binding<input_cascade<X>*>
    : fifo_binding<input_cascade<X>, true, arg_class::cascade, detail::cascade_lane_t<X>> {};
template <typename X>
struct arg_binding<output_cascade<X>*>
    : fifo_binding<output_cascade<X>, false, arg_class::cascade, detail::cascade_lane_t<X>> {};
template <>
struct arg_binding<input_pktstream*> : fifo_binding<input_pktstream, true, arg_class::pktstream, std::uint32_t> {};
template <>
struct arg_binding<output_pktstream*> : fifo_binding<output_pktstream, false, arg_class::pktstream, std::uint32_t> {
};

template <typename... Args>
struct signature {
    static constexpr std::size_t count = sizeof...(Args);
    // port index of each argument: inputs and outputs are numbered separately, in order
    static constexpr std::array<unsigned, count> indices() {
        constexpr bool in[] = {arg_binding<Args>::is_input..., false};
        std::array<unsigned, count> r{};
        unsigned ni = 0, no = 0;
        for (std::size_t i = 0; i < count; ++i) r[i] = in[i] ? ni++ : no++;
        return r;
    }
    static std::vector<arg_info> infos() {
        constexpr auto idx = indices();
        const bool in[] = {arg_binding<Args>::is_input..., false};
        const arg_class cls[] = {arg_binding<Args>::cls..., arg_class::unsupported};
        const std::string names[] = {type_label<std::remove_cvref_t<Args>>()..., ""};
        std::vector<arg_info> r;
        for (std::size_t i = 0; i < count; ++i) r.push_back({in[i] ? dir::in : dir::out, idx[i], cls[i], names[i]});
        return r;
    }
    static std::string unsupported() {
        const arg_class cls[] = {arg_binding<Args>::cls..., arg_class::buffer};
        const std::string names[] = {type_label<std::remove_cvref_t<Args>>()..., ""};
        for (std::size_t i = 0; i < count; ++i)
            if (cls[i] == arg_class::unsupported)
                return "argument " + std::to_string(i) + " (" + names[i] +
                       ") is a run-time parameter or a type the shim does not execute";
        return "";
    }
    template <typename F, std::size_t... I>
    static void call(F&& fn, firing& f, std::index_sequence<I...>) {
        constexpr auto idx = indices();
        if constexpr ((... && (arg_binding<Args>::cls != arg_class::unsupported))) {
            std::tuple<typename arg_binding<Args>::holder...> h{arg_binding<Args>::make(f, idx[I])...};
            fn(arg_binding<Args>::pass(std::get<I>(h))...);
        } else {
            (void)fn;
            (void)f;
        }
    }
};

template <typename R, typename... Args>
void describe_function(node& n, R (*fn)(Args...)) {
    using S = signature<Args...>;
    n.args = S::infos();
    n.unsupported = S::unsupported();
    n.invoke = [fn](firing& f) {
        S::call([fn](auto&&... a) { fn(std::forward<decltype(a)>(a)...); }, f, std::index_sequence_for<Args...>{});
    };
}

// Filled by REGISTER_FUNCTION inside registerKernelClass() while create_object runs.
struct class_registration {
    std::function<void(void*, firing&)> invoke{};
    std::vector<arg_info> args{};
    std::string unsupported{};
};
inline class_registration*& current_registration() {
    static class_registration* r = nullptr;
    return r;
}

template <typename C, typename R, typename... Args>
void register_member(R (C::*fn)(Args...)) {
    class_registration* reg = current_registration();
    if (reg == nullptr) return;  // registerKernelClass called outside create_object
    using S = signature<Args...>;
    reg->args = S::infos();
    reg->unsupported = S::unsupported();
    reg->invoke = [fn](void* obj, firing& f) {
        C* self = static_cast<C*>(obj);
        S::call([self, fn](auto&&... a) { (self->*fn)(std::forward<decltype(a)>(a)...); }, f,
                std::index_sequence_for<Args...>{});
    };
}
template <typename F>
void register_member(F) {}  // anything else: type-checked only

}  // namespace aieflow_shim::net

namespace aieflow_shim {
// Harness entry: --data DIR (input files), --out DIR (output files), --trace DIR (every kernel
// output window), --iterations N (overrides graph.run(n)).  Unknown arguments are fatal.
inline void parse_harness_args(int argc, char** argv) {
    auto& o = net::opts();
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        AIEFLOW_SHIM_CHECK(i + 1 < argc, "harness option %s needs a value", a.c_str());
        const std::string v = argv[++i];
        if (a == "--data") o.data_dir = v;
        else if (a == "--out") o.out_dir = v;
        else if (a == "--trace") o.trace_dir = v;
        else if (a == "--iterations") o.iterations = std::atoi(v.c_str());
        else fatal("unknown harness option %s (use --data, --out, --trace, --iterations)", a.c_str());
    }
}
}  // namespace aieflow_shim
