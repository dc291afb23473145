"""The check pass (``mapped/transport.py``): one transport checker over a mapped graph's links.

Each rule on hand-built mapped graphs, at the limit and one over it, with the limits typed from the
catalog's sources (shared/spec/versal-devices.md: VEK280 memory tiles of 512 KB with 6 + 6 DMA
channels and 48 buffer descriptors, interface DMA 2 + 2 per column on its 38 columns; tile DMA
2 MM2S + 2 S2MM; AIE1 2 + 2 core stream ports, AIE-ML 1 + 1; AIE1's cascade horizontal only, AIE-ML
horizontal and vertical; VCK190 39 interface tiles of 8 PL->AIE and 6 AIE->PL streams), not read
from the checker; and on compiled designs, whose compile runs it as its ``check`` pass.
"""

from __future__ import annotations

import dataclasses

import pytest

import aieflow
from aieflow.devices import get_device
from aieflow.errors import PlanError
from aieflow.mapped.ir import Kernel, Link, MappedGraph, Plio, Port, SharedBuffer
from aieflow.mapped.tiling import NdTiling, Traversal
from aieflow.mapped.transport import check
from aieflow.model_zoo import qdq_mlp

VEK280, VCK190 = get_device("vek280"), get_device("vck190")


def kern(var, tile, ins=(32,), outs=(32,), node="L", **kw) -> Kernel:
    return Kernel(var, node, "C", (), "k.cc", tile, tuple(ins), tuple(outs), **kw)


def plio(var, direction) -> Plio:
    return Plio(var, direction, 64, f"data/{var}.txt")


def link(kind, src, si, dst, di) -> Link:
    return Link(kind, Port(src, "out", si), Port(dst, "in", di))


def memtile_graph(dims=(8, 4), writers=1, readers=1, ctype="int8", read_offset=0):
    """``writers`` kernels each write one slice of a [dims[0] * writers, dims[1]] buffer, which
    ``readers`` kernels each read whole (a broadcast through one read port each)."""
    f, b = dims
    full = (f * writers, b)
    ks, links = [], []
    ks.append(kern("src", (0, 0), ins=(f * writers * b,), outs=(f * writers * b,), node="first"))
    plios = [plio("pin", "in")]
    links.append(link("plio", "pin", 0, "src", 0))
    for w in range(writers):
        ks.append(kern(f"w{w}", (w, 1), ins=(f * writers * b,), outs=(f * b,), node="producer"))
        links.append(link("buffer", "src", 0, f"w{w}", 0))
        links.append(link("memtile", f"w{w}", 0, "mt", w))
    for r in range(readers):
        ks.append(kern(f"r{r}", (r, 3), ins=(f * writers * b,), outs=(8,), node="consumer"))
        links.append(link("memtile", "mt", r, f"r{r}", 0))
    for r in range(readers):  # each reader out through its own PLIO
        plios.append(plio(f"pout{r}", "out"))
        links.append(link("plio", f"r{r}", 0, f"pout{r}", 0))
    writes = tuple(NdTiling(full, (f, b), (w * f, 0)) for w in range(writers))
    reads = tuple(NdTiling(full, full, (read_offset, 0)) for _ in range(readers))
    mt = SharedBuffer("mt", ctype, full, writes, reads, "test")
    return MappedGraph(tuple(ks), (mt,), tuple(plios), tuple(links))


def test_the_limits_are_the_catalogs():
    assert VEK280.memory_tile_bytes == 512 * 1024 and (VEK280.memtile_channels, VEK280.memtile_bds) == (6, 48)
    assert VEK280.plio_columns * VEK280.plio_in_per_column == 76
    assert (VCK190.plio_columns, VCK190.plio_in_per_column, VCK190.plio_out_per_column) == (39, 8, 6)
    assert VCK190.memory_tile_rows == 0
    for d in (VEK280, VCK190):
        assert d.generation.tile_dma_channels == 2
    assert (VCK190.generation.stream_in_ports, VCK190.generation.stream_out_ports) == (2, 2)
    assert (VEK280.generation.stream_in_ports, VEK280.generation.stream_out_ports) == (1, 1)


def test_a_legal_memory_tile_graph_passes():
    mg = memtile_graph(writers=3, readers=2)
    mg.check()
    assert check(mg, VEK280).word_problems == ()


def test_memory_tile_capacity_counts_the_ping_pong_copy():
    # int8 [512, 512] is 256 KiB, 512 KiB with its pong: exactly one memory tile
    check(memtile_graph(dims=(512, 512)), VEK280)
    with pytest.raises(PlanError, match=r"525312 bytes \(ping-pong\), more than one memory tile \(524288\)") as e:
        check(memtile_graph(dims=(512, 513)), VEK280)
    assert e.value.layer == "consumer" and "smaller batch" in e.value.hint
    # int16 doubles the bytes
    with pytest.raises(PlanError, match="more than one memory tile"):
        check(memtile_graph(dims=(512, 512), ctype="int16"), VEK280)


@pytest.mark.parametrize("side", ["write", "read"])
def test_six_dma_channels_per_direction(side):
    kw = {"writers": 6, "readers": 1} if side == "write" else {"writers": 1, "readers": 6}
    check(memtile_graph(**kw), VEK280)
    kw = {k: (7 if v == 6 else v) for k, v in kw.items()}
    with pytest.raises(PlanError, match=f"has 7 {side} ports; a memory tile has 6 DMA channels") as e:
        check(memtile_graph(**kw), VEK280)
    assert e.value.layer == ("producer" if side == "write" else "consumer")
    assert ("cascade rows" if side == "write" else "cascade columns") in e.value.hint


def test_buffer_descriptors_one_per_port_and_ping_pong_buffer():
    mg = memtile_graph(writers=6, readers=6)  # 2 * (6 + 6) = 24 of the 48
    check(mg, VEK280)
    check(mg, dataclasses.replace(VEK280, memtile_bds=24))
    with pytest.raises(PlanError, match="needs 24 buffer descriptors"):
        check(mg, dataclasses.replace(VEK280, memtile_bds=23))


def test_a_device_without_memory_tiles_refuses_shared_buffers():
    with pytest.raises(PlanError, match="VCK190 has no memory tiles"):
        check(memtile_graph(), VCK190)


def test_a_port_moving_another_count_than_its_kernel_holds_is_caught():
    mg = memtile_graph(dims=(8, 4))
    # reader r0 declares 33 elements, its memory-tile port moves 32; then writer w0 declares 31
    for var, size, moved in (("r0", (33,), 32), ("w0", None, 32)):
        ks = tuple(dataclasses.replace(k, in_sizes=size) if k.var == var and size else
                   dataclasses.replace(k, out_sizes=(31,)) if k.var == var else k for k in mg.kernels)
        with pytest.raises(PlanError, match=f"moves {moved} elements, the kernel port holds {size[0] if size else 31}"):
            check(dataclasses.replace(mg, kernels=ks), VEK280)


def test_a_memory_tile_link_without_a_shared_buffer_is_caught():
    mg = dma_graph(1, neighbour_at=(4, 3))
    bad = tuple(dataclasses.replace(lk, kind="memtile") if lk.kind == "buffer" else lk for lk in mg.links)
    with pytest.raises(PlanError, match="touches no shared buffer"):
        check(dataclasses.replace(mg, links=bad), VEK280)


def test_too_many_address_dimensions_are_caught():
    mg = memtile_graph(dims=(8, 4))
    b = mg.buffers[0]
    # a 2-D tile and three traversal loops, none continuing the loop inside it: 5 address
    # dimensions (element strides 1, 8, 2, 16, 4), a buffer descriptor has 4
    deep = NdTiling(
        b.dims, (2, 2), (0, 0), (Traversal(0, 2, 2), Traversal(1, 2, 2), Traversal(0, 4, 2))
    )
    with pytest.raises(PlanError, match="5 address dimensions"):
        check(dataclasses.replace(mg, buffers=(dataclasses.replace(b, reads=(deep,)),)), VEK280)


@pytest.mark.parametrize(
    "tiling, loops",
    [
        # the memory-tile GEMM's Bc read (templates/gemm/ml_graph.h.j2; NR 16, KC 64, 3 L4 steps,
        # 2 lanes, an 8 x 8 mmul block): element strides 1 (NS), 16 (KS), 8 (column block), 128
        # (k step), 1024 (L4 step); the k-step loop spans 8 x 128 = 1024, so the step loop
        # continues it: 4 dimensions
        (
            NdTiling(
                (16, 64, 3, 2),
                (8, 8, 1, 1),
                (0, 0, 0, 1),
                (Traversal(0, 8, 2), Traversal(1, 8, 8), Traversal(2, 1, 3)),
            ),
            ((1, 8), (16, 8), (8, 2), (128, 24)),
        ),
        # the same with one column block (NS = NR): every loop continues the one inside it, one run
        (
            NdTiling(
                (8, 64, 3, 1),
                (8, 8, 1, 1),
                (0, 0, 0, 0),
                (Traversal(0, 8, 1), Traversal(1, 8, 8), Traversal(2, 1, 3)),
            ),
            ((1, 1536),),
        ),
        # the GEMM's Ac read (KC 64, MC_TILE 32, KS 8, MR 4): strides 1, 64, 8, 256, none continues
        (
            NdTiling((64, 32), (8, 4), (0, 0), (Traversal(0, 8, 8), Traversal(1, 4, 8))),
            ((1, 8), (64, 4), (8, 8), (256, 8)),
        ),
        # a transpose (one element per tile, rows fastest): strides 4 and 1, 2 dimensions
        (
            NdTiling((4, 6), (1, 1), (0, 0), (Traversal(1, 1, 6), Traversal(0, 1, 4))),
            ((4, 6), (1, 4)),
        ),
        # the whole buffer: one contiguous run; with padding from column 6 the rows stay apart
        (NdTiling((8, 8), (8, 8), (0, 0)), ((1, 64),)),
        (NdTiling((8, 8), (8, 8), (0, 0), boundary=(6, 8)), ((1, 8), (8, 8))),
        # rows 4 and 5 lie outside a 4 x 4 buffer (zero padding): not one run of 24
        (NdTiling((4, 4), (4, 1), (0, 0), (Traversal(1, 1, 6),)), ((1, 4), (4, 6))),
    ],
)
def test_address_dimensions_count_loops_that_do_not_continue_each_other(tiling, loops):
    # UG1603 Table 1 / AM020: a memory-tile buffer descriptor addresses 4 (stride, wrap) dimensions;
    # loops of wrap 1 move nothing, and a loop whose stride is the span of the loop inside it is one
    # dimension with it (only where the pattern has no padding)
    assert tiling.address_loops() == loops
    assert tiling.address_dims == len(loops)


def test_word_granularity_is_reported_not_refused():
    # an int8 read starting at element 1 is not a whole 32-bit word (AM020): reported
    rep = check(memtile_graph(dims=(8, 4), read_offset=1), VEK280)
    assert rep.word_problems and "offset 1" in rep.word_problems[0] and "'producer' -> 'consumer'" in rep.word_problems[0]
    # 32-bit elements are whole words at any offset
    assert check(memtile_graph(dims=(8, 4), read_offset=1, ctype="int32"), VEK280).word_problems == ()


def dma_graph(plio_inputs: int, neighbour_at=None):
    """One kernel with ``plio_inputs`` buffer inputs from PLIOs and, given ``neighbour_at``, one
    more from a kernel at that tile."""
    n = plio_inputs + (neighbour_at is not None)
    ks = [kern("k", (4, 4), ins=(16,) * n, outs=(16,), node="target")]
    plios = [plio(f"i{i}", "in") for i in range(plio_inputs)] + [plio("o", "out")]
    links = [link("plio", f"i{i}", 0, "k", i) for i in range(plio_inputs)]
    if neighbour_at is not None:
        ks.append(kern("n", neighbour_at, ins=(16,), outs=(16,), node="before"))
        plios.append(plio("ni", "in"))
        links += [link("plio", "ni", 0, "n", 0), link("buffer", "n", 0, "k", plio_inputs)]
    links.append(link("plio", "k", 0, "o", 0))
    return MappedGraph(tuple(ks), (), tuple(plios), tuple(links))


@pytest.mark.parametrize("device", [VCK190, VEK280])
def test_tile_dma_channels(device):
    check(dma_graph(2), device)
    with pytest.raises(PlanError, match=r"has 3 buffers filled by its tile's DMA \(S2MM\); \S+ tiles have 2") as e:
        check(dma_graph(3), device)
    assert e.value.layer == "target"
    # a buffer from a memory neighbour is shared, no DMA; from two tiles away it is a DMA
    check(dma_graph(2, neighbour_at=(4, 3)), device)
    with pytest.raises(PlanError, match="has 3 buffers filled"):
        check(dma_graph(2, neighbour_at=(4, 2)), device)


def stream_graph(inputs: int):
    """One kernel reading ``inputs`` stream ports, each written by its own kernel."""
    ks = [kern("k", (5, 5), ins=(None,) * inputs, outs=(16,), node="reader")]
    plios, links = [plio("o", "out")], [link("plio", "k", 0, "o", 0)]
    for i in range(inputs):
        ks.append(kern(f"s{i}", (i, 0), ins=(16,), outs=(None,), node=f"writer{i}"))
        plios.append(plio(f"i{i}", "in"))
        links += [link("plio", f"i{i}", 0, f"s{i}", 0), link("stream", f"s{i}", 0, "k", i)]
    return MappedGraph(tuple(ks), (), tuple(plios), tuple(links))


def test_stream_ports_per_core():
    check(stream_graph(1), VEK280)
    check(stream_graph(2), VCK190)
    with pytest.raises(PlanError, match=r"has 2 input streams; \S+ tiles have 1"):
        check(stream_graph(2), VEK280)
    with pytest.raises(PlanError, match="has 3 input streams"):
        check(stream_graph(3), VCK190)
    # a stream broadcast out of one port is one output stream
    mg = stream_graph(1)
    extra = kern("t", (7, 7), ins=(None,), outs=(16,), node="reader2")
    mg = dataclasses.replace(mg, kernels=(*mg.kernels, extra), plios=(*mg.plios, plio("o2", "out")),
                             links=(*mg.links, link("stream", "s0", 0, "t", 0), link("plio", "t", 0, "o2", 0)))
    check(mg, VEK280)


def cascade_graph(a, b, pinned=True):
    ks = (kern("a", a, outs=(None,), node="row", pinned=pinned), kern("b", b, ins=(32, None), node="row", pinned=pinned))
    plios = (plio("i", "in"), plio("j", "in"), plio("o", "out"))
    links = (link("plio", "i", 0, "a", 0), link("plio", "j", 0, "b", 0), link("cascade", "a", 0, "b", 1),
             link("plio", "b", 0, "o", 0))
    return MappedGraph(ks, (), plios, links)


def test_cascade_direction_and_neighbours():
    # AIE1 (AM009): east on even rows, west on odd ones, never vertical
    check(cascade_graph((0, 0), (1, 0)), VCK190)
    check(cascade_graph((1, 1), (0, 1)), VCK190)
    for a, b in (((0, 1), (1, 1)), ((1, 0), (0, 0)), ((0, 0), (2, 0)), ((0, 1), (0, 0))):
        with pytest.raises(PlanError, match="cascade a -> b of 'row'"):
            check(cascade_graph(a, b), VCK190)
    # AIE-ML (AM020): east on every row, and vertical
    check(cascade_graph((0, 1), (1, 1)), VEK280)
    check(cascade_graph((0, 1), (0, 0)), VEK280)
    with pytest.raises(PlanError, match="eastwards or vertically"):
        check(cascade_graph((1, 1), (0, 1)), VEK280)
    # kernels aiecompiler places (not pinned) are not held to their plan tiles
    check(cascade_graph((0, 0), (5, 5), pinned=False), VEK280)


def plio_graph(n_in: int, n_out: int = 1):
    ks = [kern(f"k{i}", (i % 38, i // 38), ins=(16,), outs=(16,) if i < n_out else (), node=f"fc{i}")
          for i in range(max(n_in, n_out))]
    plios = [plio(f"i{i}", "in") for i in range(n_in)] + [plio(f"o{i}", "out") for i in range(n_out)]
    links = [link("plio", f"i{i}", 0, f"k{i}", 0) for i in range(n_in)]
    links += [link("plio", f"k{i}", 0, f"o{i}", 0) for i in range(n_out)]
    return MappedGraph(tuple(ks), (), tuple(plios), tuple(links))


def test_plio_counts_against_the_interface_row():
    check(plio_graph(76), VEK280)
    with pytest.raises(PlanError, match="needs 77 input PLIO ports .* VEK280's interface tiles offer 76") as e:
        check(plio_graph(77), VEK280)
    assert e.value.layer == "fc0"
    check(plio_graph(234, 234), VCK190)
    with pytest.raises(PlanError, match="needs 235 output PLIO ports .* offer 234"):
        check(plio_graph(235, 235), VCK190)


@pytest.mark.parametrize("device", ["vck190", "vek280"])
def test_compiled_designs_pass_and_a_tighter_device_is_refused(device):
    from aieflow.passes.emit import lowered_chain

    d = aieflow.compile(qdq_mlp([64, 48, 16], seed=0), device=device, config={"layers": {
        "fc0": {"parallelism": {"cas_len": 2, "cas_num": 2}}, "fc1": {"parallelism": {"cas_len": 2, "cas_num": 1}}}})
    mg = lowered_chain(d.graph, d.device, d.placement)
    check(mg, d.device)
    kinds = {lk.kind for lk in mg.links}
    assert {"cascade", "plio"} <= kinds and ({"memtile"} <= kinds or {"buffer"} <= kinds)
    # the first layer's two cascade columns each take an input PLIO: one interface stream too few
    tight = dataclasses.replace(d.device, plio_columns=1, plio_in_per_column=1)
    with pytest.raises(PlanError, match="needs 2 input PLIO ports") as e:
        check(mg, tight)
    assert e.value.layer == "fc0"
    if d.device.memory_tile_rows:
        small = dataclasses.replace(d.device, memory_tile_bytes=64)
        with pytest.raises(PlanError, match="more than one memory tile") as e:
            check(mg, small)
        assert e.value.layer == "fc1"


def test_compile_runs_the_check_pass():
    steps = []
    aieflow.compile(qdq_mlp([16, 8], seed=0), device="vek280", progress=steps.append)
    assert steps.index("place") < steps.index("check") < steps.index("emit")
    with pytest.raises(PlanError, match="input PLIO ports"):  # 77 one-column copies, 76 interface streams
        aieflow.compile(qdq_mlp([16, 8], seed=0), device="vek280", config={"replicas": 77})


def test_the_copies_share_the_arrays_memory_tiles():
    # each buffer alone fits one memory tile; together the copies' buffers must fit the array's
    # memory tiles (ports within their DMA channels, bytes within their memory): refused by name
    # when they do not, however they would pack
    from aieflow.mapped.transport import shared_demand, shared_demand_fits
    from aieflow.passes.emit import lowered_chain

    d = aieflow.compile(qdq_mlp([64, 48, 16], seed=0), device="vek280", config={"replicas": 4, "layers": {
        "fc0": {"parallelism": {"cas_len": 2, "cas_num": 2}}, "fc1": {"parallelism": {"cas_len": 2, "cas_num": 1}}}})
    mg = lowered_chain(d.graph, d.device, d.placement)
    check(mg, d.device)
    reads = sum(len(b.reads) for b in mg.buffers)
    writes = sum(len(b.writes) for b in mg.buffers)
    assert len(mg.buffers) >= 4 and reads > 6 and writes > 6  # the copies' buffers need more than one tile's channels
    rows = d.device.memory_tile_rows
    one_tile = dataclasses.replace(d.device, columns=1, memory_tile_rows=1)  # a pool of one memory tile
    with pytest.raises(PlanError, match=rf"{len(mg.buffers)} memory-tile buffers need .* {writes} write and {reads} "
                                        r"read ports; VEK280's 1 memory tiles") as e:
        check(mg, one_tile)
    assert e.value.layer in ("fc0", "fc1") and "replicas" in e.value.hint
    enough = dataclasses.replace(d.device, columns=-(-max(reads, writes) // (6 * rows)))  # just enough channels
    check(mg, enough)
    assert shared_demand_fits(shared_demand(mg), enough) and not shared_demand_fits(shared_demand(mg), one_tile)
