"""A segmented design (resident and streamed Dense segments joined through DDR) as one mapped graph
(issue 17, migration step 5): every segment's own lowering in it, each segment cut a ``ddr`` link
from the writing segment's ends to the reading segment's, its resources counted per segment; and the
check's rules for a cut (hand-built graphs)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_mapped import _two_kernels
from test_streamed_chain import _compile, _mlp

from aieflow.mapped import Kernel, Link, MappedGraph, Plio, Port
from aieflow.mapped.estimate import resources, segment_resources
from aieflow.mapped.ir import PLKernel, in_segment
from aieflow.names import c_ident

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_a_three_segment_design_is_one_graph_with_its_cuts_as_ddr_links(device):
    dims = [40, 48, 32, 16]  # layer "2" (48 -> 32) streamed: resident | streamed | resident
    d, _ = _compile(_mlp(dims, seed=1), dims, ["2"], device=device)
    assert [s.kind for s in d.specs] == ["resident", "streamed", "resident"]
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
    # the cut tensors: 48 and 32 int8 values per sample, one DDR buffer per design call of batch samples
    into, out_of = cuts[:writers], cuts[writers:]
    assert {x.tensor for x in into} == {c_ident(d.specs[0].output)}
    assert {x.tensor for x in out_of} == {c_ident(d.specs[1].output)}
    assert all(x.kind == "ddr" and x.segment == (1, batch * 48) for x in into)
    assert all(x.kind == "ddr" and x.segment == (1, batch * 32) for x in out_of)
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
