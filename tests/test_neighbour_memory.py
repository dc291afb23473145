"""Dense kernels whose buffers live partly in neighbouring tiles' data memories (issue 21, item 3).

Expected values come from the specs (shared/spec/dense-on-aie-ml.md § Calibration: single-kernel
throughput; versal-devices.md: data memory and neighbour reach) and from bank arithmetic written
out here, never from the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import aieflow
from aieflow.devices import AIE1, AIE_ML, AIE_MLV2, VEK280
from aieflow.errors import PlanError
from aieflow.ops.dense import TileMemory, memory_homes
from aieflow.passes.place import Block, Grid, check_placement, pack
from aieflow.perf.published import aie4ml_design

KB = 1024


def _model(k: int, n: int, bias: bool = True, relu: bool = True, layers: int = 1) -> torch.nn.Module:
    torch.manual_seed(0)
    mods: list[torch.nn.Module] = []
    for i in range(layers):
        mods.append(torch.nn.Linear(k if i == 0 else n, n, bias=bias))
        if relu:
            mods.append(torch.nn.ReLU())
    return torch.nn.Sequential(*mods).eval()


def _compile(model, device="vek280", precision="int8", batch=128, k=128, layers=None):
    return aieflow.compile(model, device=device, example_input=torch.randn(batch, k),
                           config={"precision": precision, "batch": batch, "layers": layers or {}})


PIN = {"parallelism": {"cas_len": 1, "cas_num": 1}}


# ----------------------------------------------------------------------------- the catalog


def test_neighbour_reach_is_the_specs():
    # versal-devices.md: AIE1 own + 3 neighbours (128 KB), AIE-ML own + N/S/W (256 KB)
    assert AIE1.neighbour_memory_bytes == 128 * KB == AIE1.data_memory_bytes * (1 + len(AIE1.neighbour_memories))
    assert AIE_ML.neighbour_memory_bytes == 256 * KB == AIE_ML.data_memory_bytes * (1 + len(AIE_ML.neighbour_memories))
    assert set(AIE_ML.neighbour_memories) == {"north", "south", "west"}
    for gen in (AIE1, AIE_ML, AIE_MLV2):
        assert gen.vertical_lenders == ("south", "north")


# ----------------------------------------------------------------------------- bank allocation


def test_memory_homes_by_hand_for_the_published_i8_kernel():
    # i8 128 x 128, B = 128 on AIE-ML (8 banks of 8 KB): weights 16 KB = 2 banks, bias 2 KB + stack
    # and heap 2 KB = 1 bank, four activation buffers of 128 x 128 B = 16 KB (2 banks each).  Own
    # memory: 8 - 3 = 5 banks left, so the input ping and pong (4 banks); the output ping and pong
    # go to the north neighbour (4 of its 8 banks).
    mem = TileMemory(weights=16 * KB, bias=2 * KB, input=32 * KB, output=32 * KB, reserved=2 * KB)
    assert mem.total == 84 * KB > 64 * KB
    assert memory_homes(mem, (), 8 * KB, 8) is None
    homes = {h.buffer: (h.memory, h.bank, h.banks) for h in memory_homes(mem, ("north",), 8 * KB, 8)}
    assert homes == {"weights": ("own", 0, 2), "bias + stack/heap": ("own", 2, 1),
                     "input ping": ("own", 3, 2), "input pong": ("own", 5, 2),
                     "output ping": ("north", 0, 2), "output pong": ("north", 2, 2)}


def test_memory_homes_never_share_a_bank_and_refuse_what_does_not_fit():
    # i16 x i8 128 x 128, B = 128: activation buffers of 32 KB (4 banks) each
    mem = TileMemory(weights=16 * KB, bias=2 * KB, input=64 * KB, output=64 * KB, reserved=2 * KB)
    assert memory_homes(mem, ("north",), 8 * KB, 8) is None  # 3 + 4 x 4 = 19 banks > 16
    homes = memory_homes(mem, ("south", "north"), 8 * KB, 8)
    used = [(h.memory, b) for h in homes for b in range(h.bank, h.bank + h.banks)]
    assert len(used) == len(set(used)) == 19
    assert all(h.memory == "own" for h in homes if h.buffer in ("weights", "bias + stack/heap"))
    # weights larger than the own memory never move
    big = TileMemory(weights=72 * KB, bias=0, input=0, output=0, reserved=0)
    assert memory_homes(big, ("south", "north"), 8 * KB, 8) is None


# ----------------------------------------------------------------------------- the published kernels

# dense-on-aie-ml.md § Calibration: single-kernel throughput (VEK280, 1.25 GHz, B = 128): GOPS
PUBLISHED = [
    (("i8", "i8"), 128, False, 613, ("north",)),
    (("i8", "i8"), 128, True, 520, ("north",)),
    (("i16", "i8"), 128, False, 314, ("south", "north")),
    (("i16", "i8"), 128, True, 287, ("south", "north")),
    (("i16", "i16"), 64, False, 138, ("north",)),
    (("i16", "i16"), 64, True, 114, ("north",)),
]


@pytest.mark.parametrize("pair,size,bias_relu,gops,borrows", PUBLISHED)
def test_published_single_kernel_compiles_and_estimates_within_5_percent(pair, size, bias_relu, gops, borrows):
    d = aie4ml_design(pair, size, bias_relu)
    node = d.layers()[0]
    p = node.plan
    assert node.types.pair == pair and (p.cas_len, p.cas_num, p.batch) == (1, 1, 128)
    # the buffers exceed one tile's 64 KB (they did not compile before), and fit with the neighbours
    assert p.memory.total > VEK280.generation.data_memory_bytes
    assert p.borrows == borrows and p.footprint == 1 + len(borrows)
    modelled = 2 * 128 * size * size / d.estimate().interval_ns
    assert abs(modelled - gops) / gops <= 0.05, (modelled, gops)
    res = d.resources()
    assert res["compute_tiles"] == 1 and res["lender_tiles"] == len(borrows)
    assert d.estimate().tiles_used == 1 + len(borrows)  # the tiles the design occupies


def test_lenders_are_the_rows_next_to_the_kernel_and_kept_free():
    d = aie4ml_design(("i16", "i8"), 128, True)
    r = d.placement.rect("0")
    kernel = d.placement.tile("0", 0, 0)
    assert (r.height, r.period, r.offset) == (3, 3, 1)
    assert r.lender_cells() == {(kernel[0], kernel[1] - 1), (kernel[0], kernel[1] + 1)}  # south, north
    check_placement(d.placement, d.device)
    assert d.placement_svg().count('class="lender"') == 2  # the picture hatches both


def test_a_second_layer_is_never_placed_on_a_lender():
    model = _model(128, 128, layers=2)
    d = _compile(model, layers={"0": PIN, "2": PIN})
    first, second = (d.placement.rect(n.name) for n in d.layers())
    assert first.lender_cells() and second.lender_cells()
    taken = [first.cells(), second.cells()]
    assert not (taken[0] & taken[1])
    kernels = {d.placement.tile(n.name, 0, 0) for n in d.layers()}
    assert not kernels & (first.lender_cells() | second.lender_cells())
    check_placement(d.placement, d.device)


def test_pack_keeps_lender_rows_out_of_other_blocks():
    # a 1 x 1 layer with its north lender (period 2) and a 2 x 2 layer on a 3 x 2 grid: the only
    # legal packing puts them side by side; the tall block's kernel is its bottom row
    blocks = [Block("a", 1, 2, period=2, offset=0), Block("b", 2, 2)]
    got = pack(blocks, [(0, 1)], Grid(3, 2), method="bnb")
    a, b = got.rects
    assert not (a.cells() & b.cells()) and a.lender_cells() == {(a.column, a.row + 1)}
    assert a.in_tile() == (a.column, a.row) and a.cascade_row(0) == a.row


def test_unpinned_layers_keep_their_buffers_at_home():
    # without a fixed rectangle the planner sizes the layer within its tiles' own memories
    d = _compile(_model(128, 128))
    p = d.layers()[0].plan
    assert p.borrows == () and p.memory.total <= 64 * KB and p.tiles > 1


def test_generated_graph_puts_the_buffers_where_the_plan_says():
    d = aie4ml_design(("i8", "i8"), 128, True)
    col, row = d.placement.tile("0", 0, 0)
    graph = d.files["src/graph.h"]
    # input ping / pong at own banks 3 and 5 (8 KB each on AIE-ML), outputs at the north neighbour's 0 and 2
    assert (f"adf::location<adf::buffer>(k_l_0_r0_c0.in[0]) = {{adf::address({col}, {row}, 0x6000), "
            f"adf::address({col}, {row}, 0xa000)}}") in graph
    assert (f"adf::location<adf::buffer>(k_l_0_r0_c0.out[0]) = {{adf::address({col}, {row + 1}, 0x0000), "
            f"adf::address({col}, {row + 1}, 0x4000)}}") in graph


def test_save_and_load_keep_the_borrowed_memories(tmp_path):
    d = aie4ml_design(("i16", "i8"), 128, False)
    d.save(tmp_path / "d")
    e = aieflow.load(tmp_path / "d")
    assert e.layers()[0].plan.borrows == ("south", "north")
    assert e.placement.rect("0") == d.placement.rect("0")
    assert e.estimate().interval_ns == pytest.approx(d.estimate().interval_ns)


def test_x86_verify_is_bit_exact_with_borrowed_buffers():
    d = aie4ml_design(("i8", "i8"), 128, True)
    x = np.random.default_rng(3).standard_normal((128, 128)).astype(np.float32)
    result = d.verify(x)
    assert result.values == 128 * 128 and result.mismatches == 0


# ----------------------------------------------------------------------------- refusals


def test_a_pinned_rectangle_beyond_the_neighbours_reach_names_what_to_change():
    # i16 x i8, 256 x 256 on one tile at B = 128: 64 KB of weights alone fill the own memory
    with pytest.raises(PlanError) as e:
        _compile(_model(256, 256), precision="a16w8", k=256, layers={"0": PIN})
    text = str(e.value)
    assert "neighbours' memories" in text and "cas_len" in text


def test_lenders_must_fit_the_rows():
    # 8 cascade rows of the i8 128-wide kernel with a north lender each would need 16 rows
    with pytest.raises(PlanError):
        _compile(_model(128, 1024), layers={"0": {"parallelism": {"cas_len": 1, "cas_num": 8}}})


def test_explore_with_a_pinned_borrowing_layer_counts_its_lenders():
    # the search plans a fixed rectangle as the plan pass does, so the point it reports is the
    # compiled design, its tiles the kernel and the lender
    model = _model(128, 128)
    d = _compile(model, layers={"0": PIN})
    ex = aieflow.explore(model, device="vek280", example_input=torch.randn(128, 128),
                         config={"precision": "int8", "batch": 128, "layers": {"0": PIN}})
    assert [p.tiles for p in ex.front] == [2] == [d.estimate().tiles_used]
    assert ex.chosen.latency_ns == pytest.approx(d.estimate().latency_ns)
