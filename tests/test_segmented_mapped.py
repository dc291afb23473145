"""A segmented design (resident and streamed Dense segments joined through DDR) as one mapped graph
(issue 17, migration step 5): every segment's own lowering in it, each segment cut a ``ddr`` link
from the writing segment's ends to the reading segment's, its resources counted per segment; and the
check's rules for a cut (hand-built graphs)."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
from test_mapped import _two_kernels
from test_streamed_chain import _compile, _mlp

from aieflow.mapped import Kernel, Link, MappedGraph, Plio, Port
from aieflow.mapped.estimate import resources, segment_resources
from aieflow.mapped.ir import PLKernel, in_segment
from aieflow.names import c_ident

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


DIMS = [
    40,
    48,
    32,
    16,
]  # layer "2" (nn.Sequential index 2: 48 -> 32) streamed: resident | streamed | resident


@functools.cache
def _three_segments(device):
    d, _ = _compile(_mlp(DIMS, seed=1), DIMS, ["2"], device=device)
    assert [s.kind for s in d.specs] == ["resident", "streamed", "resident"]
    return d


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_a_three_segment_design_is_one_graph_with_its_cuts_as_ddr_links(device):
    dims = DIMS
    d = _three_segments(device)
    g = d.mapped()
    g.check()
    first, streamed, last = d.segments
    # the ends each cut meets, from the segments' own plans: the first segment's last layer writes
    # cas_num PLIOs per replica, the last segment's first layer reads cas_len per replica
    head = [n for n in first.graph.nodes if n.op == "dense"][-1].plan
    tail = [n for n in last.graph.nodes if n.op == "dense"][0].plan
    writers = head.cas_num * len(first.placement.replicas)
    readers = tail.cas_len * len(last.placement.replicas)
    cuts = g.cuts()
    assert len(cuts) == writers + readers
    batch = d.config.batch
    # the cut tensors, from the model: what its streamed Linear (index 2) reads, 48 features, and what
    # it hands on (after its ReLU), 32; int8 codes of one byte each, one DDR buffer per design call of
    # batch samples
    into, out_of = cuts[:writers], cuts[writers:]
    streamed_layer = d.graph.node("2")
    for part, name, features in (
        (into, streamed_layer.inputs[0], dims[1]),
        (out_of, streamed_layer.outputs[0], dims[2]),
    ):
        assert d.graph.tensors[name].shape == (features,)
        assert d.graph.tensors[name].dtype.width == 8
        assert {x.tensor for x in part} == {c_ident(name)}
        assert all(x.kind == "ddr" and x.segment == (1, batch * features * 1) for x in part)
    # segment 0's output PLIOs into the streamed layer's A mover, one DDR port each
    plio_dir = {p.var: p.direction for p in g.plios}
    assert {x.src.owner for x in into} == {
        v for v, dr in plio_dir.items() if v.startswith("s0_") and dr == "out"
    }
    assert [(x.dst.owner, x.dst.index) for x in into] == [
        ("s1_gemm_mover", i) for i in range(writers)
    ]
    # the streamed layer's epilogue into every input PLIO of segment 2
    assert [(x.src.owner, x.src.index) for x in out_of] == [
        ("s1_dense_epilogue", i) for i in range(readers)
    ]
    assert {x.dst.owner for x in out_of} == {
        v for v, dr in plio_dir.items() if v.startswith("s2_") and dr == "in"
    }
    # every kernel marked with its segment: the streamed layer's GEMM tiles in segment 1
    per = {i: sum(k.segment == i for k in g.kernels) for i in range(3)}
    assert per[1] == streamed.plan.gemm.tiles
    # resources: today's sums over the segments (each segment's own figures), now counted on the graph
    e = d.estimate()
    own = [first.estimate().tiles_used, streamed.plan.gemm.tiles, last.estimate().tiles_used]
    assert [c.tiles for c in e.segments] == own and e.tiles_used == sum(own)
    r = d.resources()
    assert r["compute_tiles"] == sum(own)
    assert r["memory_tiles"] == sum(s.to_json()["resources"]["memory_tiles"] for s in d.segments)
    assert (r["compute_tiles"], r["memory_tiles"]) == resources(g, d.device)


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_a_three_segment_estimate_by_hand_from_its_segments_and_its_cuts(device):
    """The one host runs the segments in turn (``segments_host.cpp.j2``): latency and interval are
    the segments' own figures one after the other, each cut's DDR pass by hand (docs/gemm.md "Cost":
    one 128-bit beat per PL cycle = 4 B per AIE cycle on VCK190 / VEK280 at 1.25 GHz, 8 cycles per
    transfer), charged to the resident segment that moves it; the streamed layer's figure is its own
    GEMM search's chosen alternative plus its epilogue's three DDR passes (C int32, Y int8, bias)."""
    d = _three_segments(device)
    batch, clock = d.config.batch, 1.25e9
    assert d.device.clock_hz == clock

    def ddr_ns(nbytes):
        return (nbytes / 4 + 8) / clock * 1e9

    into, out_of = (
        ddr_ns(batch * DIMS[1]),
        ddr_ns(batch * DIMS[2]),
    )  # 384 B: 83.2 ns; 256 B: 57.6 ns
    assert (into, out_of) == (pytest.approx(83.2), pytest.approx(57.6))
    g = d.mapped()
    by_tensor = {x.tensor: x.cost.occupancy_ns for x in g.cuts()}
    assert sorted(by_tensor.values()) == [pytest.approx(out_of), pytest.approx(into)]
    first, streamed, last = d.segments
    # the streamed layer: the GEMM search's chosen alternative (packing included) and the epilogue
    (chosen,) = [a for a in streamed.plan.alternatives if a.chosen]
    epilogue = (batch * DIMS[2] * 4 / 4 + 8) + (batch * DIMS[2] / 4 + 8) + (DIMS[2] * 4 / 4 + 8)
    s_ns = (chosen.total_cycles + epilogue) / clock * 1e9
    f, la = first.estimate(), last.estimate()  # the resident segments' own compiled figures
    e = d.estimate()
    assert [c.latency_ns for c in e.segments] == [
        pytest.approx(f.latency_ns + into),
        pytest.approx(s_ns),
        pytest.approx(la.latency_ns + out_of),
    ]
    assert [c.interval_ns for c in e.segments] == [
        pytest.approx(f.interval_ns / f.replicas + into),
        pytest.approx(s_ns),
        pytest.approx(la.interval_ns / la.replicas + out_of),
    ]
    assert e.latency_ns == pytest.approx(
        f.latency_ns + into + s_ns + la.latency_ns + out_of, rel=1e-12
    )
    assert e.interval_ns == pytest.approx(
        f.interval_ns / f.replicas + into + s_ns + la.interval_ns / la.replicas + out_of, rel=1e-12
    )
    # the segments never overlap: slower than the old pipelined model's max(slowest segment, DDR)
    assert e.interval_ns > max(max(c.interval_ns for c in e.segments), e.ddr_ns)
    packing = chosen.total_cycles - chosen.cycles  # the search's figures: with and without packing
    assert e.ddr_ns == pytest.approx(into + out_of + (packing + epilogue) / clock * 1e9)
    assert e.throughput_ops_per_s == pytest.approx(
        2
        * sum(a * b for a, b in zip(DIMS, DIMS[1:], strict=False))
        * batch
        / (e.interval_ns * 1e-9)
    )
    # design.json's performance is this estimate
    perf = d.to_json()["performance"]
    assert perf["latency_ns"] == pytest.approx(e.latency_ns) and perf[
        "interval_ns"
    ] == pytest.approx(e.interval_ns)
    assert perf["schedule"] == "segments in turn"


def _plk(name):
    return PLKernel(name, f"pl/{name}.cpp", (), (), 1, 0, 1, 1)


def _segmented(cuts):
    """Two hand-built segments (each the two-kernel graph of test_mapped, on the same tiles) and a
    PL kernel ``mover``; ``cuts``: the links between them."""
    a, b = in_segment(_two_kernels(), 0), in_segment(_two_kernels(), 1)
    return MappedGraph(
        (*a.kernels, *b.kernels),
        (),
        (*a.plios, *b.plios),
        (*a.links, *b.links, *cuts),
        pl_kernels=(_plk("mover"),),
    )


def _cut(src, dst, nbytes=64, tensor="t"):
    return Link("ddr", src, dst, segment=(1, nbytes), tensor=tensor)


def test_the_check_accepts_cuts_between_plios_and_pl_kernels():
    _segmented(
        [
            _cut(Port("s0_pout", "out", 0), Port("s1_pin", "in", 0)),
            _cut(Port("s0_pout", "out", 0), Port("mover", "in", 0)),
        ]
    ).check()


@pytest.mark.parametrize(
    "cut, why",
    [
        (
            _cut(Port("s0_pin", "out", 0), Port("s1_pin", "in", 0)),
            "s0_pin.out[0]:acut'sendisanoutputPLIO",
        ),  # from an input PLIO
        (
            _cut(Port("s0_pout", "out", 0), Port("s1_pout", "in", 0)),
            "s1_pout.in[0]:acut'sendisaninputPLIO",
        ),  # into an output PLIO
        (
            _cut(Port("s0_pout", "out", 0), Port("nowhere", "in", 0)),
            "nowhere",
        ),  # an end that does not exist
        (
            _cut(Port("s0_pout", "out", 0), Port("s1_k0", "in", 0)),
            "s1_k0",
        ),  # onto the array: not a cut's end
        (
            _cut(Port("s0_pout", "out", 0), Port("s1_pin", "in", 1)),
            "s1_pin.in[1]",
        ),  # a PLIO's DDR side is port 0
        (_cut(Port("s0_pout", "in", 0), Port("s1_pin", "in", 0)), "out side"),
        (_cut(Port("s0_pout", "out", 0), Port("s1_pin", "in", 0), nbytes=0), "bytes"),
        (
            Link("ddr", Port("s0_pout", "out", 0), Port("s1_pin", "in", 0)),
            "tensor=''",
        ),  # no tensor: not a cut, and PLIOs are no GMIO pair's ends
    ],
)
def test_the_check_refuses_a_malformed_cut(cut, why):
    with pytest.raises(AssertionError) as e:
        _segmented([cut]).check()
    assert why.replace(" ", "") in str(e.value).replace(" ", "")


def test_the_check_refuses_a_plio_fed_twice_from_ddr_and_two_kernels_on_one_tile_in_a_segment():
    twice = [
        _cut(Port("s0_pout", "out", 0), Port("s1_pin", "in", 0)),
        _cut(Port("s0_pout", "out", 0), Port("s1_pin", "in", 0), tensor="u"),
    ]
    with pytest.raises(AssertionError, match="fed twice"):
        _segmented(twice).check()
    mover = [
        _cut(Port("s0_pout", "out", 0), Port("mover", "in", 0)),
        _cut(Port("s0_pout", "out", 0), Port("mover", "in", 0)),
    ]
    with pytest.raises(AssertionError, match="fed twice"):
        _segmented(mover).check()
    # a PLIO the PL kernel writes cannot also be written from DDR by a cut
    g = _segmented([_cut(Port("s0_pout", "out", 0), Port("s1_pin", "in", 0))])
    with pytest.raises(AssertionError, match="both"):
        replace(
            g, pl_kernels=(PLKernel("mover", "pl/mover.cpp", (), (("o", "s1_pin"),), 1, 0, 1, 1),)
        ).check()
    # the segments share tiles (they run one after the other); within one segment a tile is one kernel's
    g = _segmented([])
    g.check()
    k = g.kernels
    with pytest.raises(AssertionError, match="one tile"):
        replace(g, kernels=(k[0], replace(k[1], tile=k[0].tile), *k[2:])).check()


def test_resources_count_each_segments_lenders_on_its_own():
    """A tile that lends its memory in segment 0 runs a kernel in segment 1: it counts in both."""
    k0 = Kernel("a", "n", "C", (), "kernels/n.cc", (0, 0), (), (), borrowed=((0, 1),), segment=0)
    k1 = Kernel("b", "n", "C", (), "kernels/n.cc", (0, 1), (), (), segment=1)
    k2 = Kernel("c", "n", "C", (), "kernels/n.cc", (0, 0), (), (), segment=1)
    g = MappedGraph((k0, k1, k2), (), (Plio("p", "in", 64, "data/p.txt"),), ())
    g.check()

    class Dev:
        memory_tile_bytes = 0

    assert segment_resources(g, Dev) == {0: (2, 0), 1: (2, 0)}
    assert resources(g, Dev) == (4, 0)
