// aieflow x86 shim: running free-running stream designs (kernels that loop forever on streams,
// packet-switched connections) on x86.
//
// The synchronous-dataflow executor of graph_exec.hpp runs buffer graphs one iteration at a time
// and rejects packet switches and feedback loops.  Free-running designs (a recurrent layer whose
// h comes back to the kernels that produced it) are run instead by an x86 harness that calls the
// kernels itself, one call per step, in an order that never reads an empty FIFO (the emitter knows
// the order).  This header gives that harness what the graph would do between the kernels:
//
//   * kernel_object<C>(k): the kernel-class object that graph.h's kernel::create_object built
//     (so the harness runs exactly the objects, and constructor arguments, of the graph);
//   * broadcast(src, {dst...}): a stream broadcast (one producer, every consumer gets every word);
//   * merge_packets(ins, ids, out, rng): a pktmerge<N>: whole packets (header ... TLAST) move from
//     the inputs to the output, in an order picked by a seeded random arbiter among the inputs that
//     hold a complete packet (the hardware order is unpredictable: consumers must decode IDs);
//     each input's packets keep their order, and every header's packet ID is checked against the
//     ID the merge input was given (ids[i], what getPacketid returns to the producer);
//   * split_packets(in, ids, outs): a pktsplit<N>: each packet goes to the output whose ID
//     matches its header;
//   * header fields: packet_id, packet_type, header_parity_ok.
//
// Packet IDs are assigned by aiecompiler on the device (UG1079 "Packet Processing": the merge input
// index and the ID can differ); here the harness chooses them with pktstream::set_packet_ids.
// Written from the public documentation; not AMD code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "adf_graph.hpp"
#include "config.hpp"
#include "harness.hpp"

namespace aieflow_shim::freerun {

inline unsigned packet_id(std::uint32_t header) { return header & 0x1Fu; }
inline unsigned packet_type(std::uint32_t header) { return (header >> 12) & 0x7u; }
inline bool header_parity_ok(std::uint32_t header) { return (__builtin_popcount(header) & 1) == 1; }

// The object of a kernel created with kernel::create_object<C>(...) in the graph.
template <typename C>
C& kernel_object(const adf::kernel& k) {
    AIEFLOW_SHIM_CHECK(k.id >= 0, "kernel_object: the kernel was not created");
    auto& n = net::netlist::get().nodes.at(static_cast<std::size_t>(k.id));
    AIEFLOW_SHIM_CHECK(n.object != nullptr, "kernel_object: %s is not a constructed kernel class", n.name.c_str());
    AIEFLOW_SHIM_CHECK(n.name.find(net::type_label<C>()) != std::string::npos,
                       "kernel_object: %s is not of class %s", n.name.c_str(), net::type_label<C>().c_str());
    return *static_cast<C*>(n.object.get());
}

// Graph connections of a kind (netlist edges with connect<kind>, "" for plain connect<>).
inline std::size_t count_connections(const std::string& kind) {
    std::size_t c = 0;
    for (const auto& e : net::netlist::get().edges) c += e.kind == kind;
    return c;
}
inline std::size_t count_nodes(net::node_kind kind, const std::string& name_prefix = "") {
    std::size_t c = 0;
    for (const auto& n : net::netlist::get().nodes)
        c += n.kind == kind && n.name.compare(0, name_prefix.size(), name_prefix) == 0;
    return c;
}

// Stream broadcast: everything in src goes to every destination, in order.
template <typename T>
void broadcast(stream<T>& src, const std::vector<stream<T>*>& dst) {
    while (!src.empty()) {
        bool last = false;
        const T v = src.pop(last);
        for (auto* d : dst) d->push(v, last);
    }
}
template <typename T>
void broadcast(const std::vector<T>& values, const std::vector<stream<T>*>& dst) {
    for (auto* d : dst) d->push_all(values);
}

namespace detail {
inline aieflow_shim::detail::fifo<std::uint32_t>& fifo_of(pktstream& p) { return *p.in()->fifo_; }
// Words of the first complete packet in a FIFO (0: none complete yet).
inline std::size_t complete_packet(const aieflow_shim::detail::fifo<std::uint32_t>& f) {
    for (std::size_t i = 0; i < f.q.size(); ++i)
        if (f.q[i].second) return i + 1;
    return 0;
}
}  // namespace detail

// pktmerge<N>: returns the number of packets moved.
inline std::size_t merge_packets(const std::vector<pktstream*>& ins, const std::vector<unsigned>& ids, pktstream& out,
                                 std::mt19937& rng) {
    AIEFLOW_SHIM_CHECK(ins.size() == ids.size(), "merge_packets: %zu inputs but %zu packet ids", ins.size(), ids.size());
    AIEFLOW_SHIM_CHECK(ins.size() <= 32, "merge_packets: a pktmerge has at most 32 inputs, got %zu", ins.size());
    std::size_t moved = 0;
    for (;;) {
        std::vector<std::size_t> ready;
        for (std::size_t i = 0; i < ins.size(); ++i)
            if (detail::complete_packet(detail::fifo_of(*ins[i])) != 0) ready.push_back(i);
        if (ready.empty()) break;
        const std::size_t pick = ready[std::uniform_int_distribution<std::size_t>(0, ready.size() - 1)(rng)];
        auto& f = detail::fifo_of(*ins[pick]);
        const std::size_t words = detail::complete_packet(f);
        const std::uint32_t header = f.q.front().first;
        AIEFLOW_SHIM_CHECK(header_parity_ok(header), "pktmerge input %zu: header 0x%08x has even parity", pick,
                           static_cast<unsigned>(header));
        AIEFLOW_SHIM_CHECK(packet_id(header) == ids[pick], "pktmerge input %zu: packet id %u, the route's id is %u",
                           pick, packet_id(header), ids[pick]);
        for (std::size_t w = 0; w < words; ++w) {
            bool last = false;
            const std::uint32_t v = f.pop(&last);
            detail::fifo_of(out).push(v, last);
        }
        ++moved;
    }
    return moved;
}

// pktsplit<N>: every complete packet goes to the output whose id matches its header.
inline std::size_t split_packets(pktstream& in, const std::vector<unsigned>& ids, const std::vector<pktstream*>& outs) {
    AIEFLOW_SHIM_CHECK(outs.size() == ids.size(), "split_packets: %zu outputs but %zu packet ids", outs.size(),
                       ids.size());
    std::size_t moved = 0;
    auto& f = detail::fifo_of(in);
    while (std::size_t words = detail::complete_packet(f)) {
        const std::uint32_t header = f.q.front().first;
        std::size_t o = 0;
        while (o < ids.size() && ids[o] != packet_id(header)) ++o;
        AIEFLOW_SHIM_CHECK(o < ids.size(), "pktsplit: packet id %u matches no output", packet_id(header));
        for (std::size_t w = 0; w < words; ++w) {
            bool last = false;
            const std::uint32_t v = f.pop(&last);
            detail::fifo_of(*outs[o]).push(v, last);
        }
        ++moved;
    }
    return moved;
}

}  // namespace aieflow_shim::freerun
