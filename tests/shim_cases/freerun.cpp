// aieflow_shim/freerun.hpp: pktmerge arbitration keeps whole packets and per-input order, checks
// route IDs; pktsplit routes by ID; broadcast copies to every consumer; kernel_object finds the
// graph's class kernel.  Prints "ok" on success; every failure aborts with a message.
#include <adf.h>

#include <cstdio>
#include <random>
#include <vector>

struct Counter {
    int base;
    explicit Counter(int b) : base(b) {}
    void run(input_stream<int32>* in, output_pktstream* out) {
        const int32 v = readincr(in);
        writeHeader(out, 1, getPacketid(out, 0));
        writeincr(out, base + v, true);
    }
    static void registerKernelClass() { REGISTER_FUNCTION(Counter::run); }
};

struct G : adf::graph {
    adf::kernel k;
    G() { k = adf::kernel::create_object<Counter>(100); }
};
G g;

#define REQUIRE(c)                                             \
    do {                                                       \
        if (!(c)) aieflow_shim::fatal("check failed: %s", #c); \
    } while (0)

int main() {
    using namespace aieflow_shim;
    Counter& c = freerun::kernel_object<Counter>(g.k);
    REQUIRE(c.base == 100);

    // three sources, 5 packets each, ids 9, 2, 30
    pktstream src[3], merged, outs[3];
    const std::vector<unsigned> ids = {9, 2, 30};
    stream<int32> feed[3];
    freerun::broadcast(std::vector<int32>{0, 1, 2, 3, 4}, {&feed[0], &feed[1], &feed[2]});
    for (int s = 0; s < 3; ++s) {
        src[s].set_packet_ids({ids[s]});
        Counter k(1000 * s);
        for (int i = 0; i < 5; ++i) k.run(feed[s].in(), src[s].out());
        REQUIRE(feed[s].empty());
    }
    std::mt19937 rng(7);
    REQUIRE(freerun::merge_packets({&src[0], &src[1], &src[2]}, ids, merged, rng) == 15);
    std::vector<int> next(3, 0);
    bool interleaved = false;
    int last_src = -1;
    pktstream copy;
    while (!merged.empty()) {
        bool tl = true;
        const std::uint32_t h = merged.pop(tl);
        REQUIRE(!tl && freerun::header_parity_ok(h) && freerun::packet_type(h) == 1);
        int s = 0;
        while (ids[s] != freerun::packet_id(h)) ++s;
        const std::uint32_t v = merged.pop(tl);
        REQUIRE(tl && static_cast<int>(v) == 1000 * s + next[s]);  // order within a source kept
        ++next[s];
        interleaved = interleaved || (last_src != -1 && last_src != s && next[last_src] < 5);
        last_src = s;
        copy.push(h, false);
        copy.push(v, true);
    }
    REQUIRE(next == std::vector<int>({5, 5, 5}) && interleaved);
    REQUIRE(freerun::split_packets(copy, ids, {&outs[0], &outs[1], &outs[2]}) == 15);
    for (int s = 0; s < 3; ++s) REQUIRE(outs[s].size() == 10);
    std::puts("ok");
    return 0;
}
