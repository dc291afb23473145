"""Skips held in DDR in the row-streamed CNN mapping (issue 25 item 3, ``cnn/rows.py``).

A skip whose FIFO does not fit where the mapping holds it (a tile's 32 KB on AIE1) goes through a
DDR segment: the producer's output stream into an output GMIO, an input GMIO back into the reader's
stream port, the host moving it row by row (``graph.cpp``; the x86 harness issues the same
transactions before each frame).  Checked here:

* a residual block whose 16-channel int8 skip lags 8 rows at 16 x 384 (a FIFO of 49,152 B): the plan
  holds it in a 98,304 B segment (16 rows x 16 channels x 384, by hand), the mapped graph has one
  ``ddr`` link with 16 transfers of 6,144 B, ``graph.h`` declares and connects the GMIO pair, and
  x86 verify (the shim executes the GMIO pair) matches ``predict`` bit for bit on random and
  saturating frames; reading each row back from the next row's place (a mutation of the harness's
  addresses) fails it;
* the model: the skip's row times through DDR equal a hand calculation (docs/conv.md "Skips in
  DDR") and the host's time per frame is a stage of the design's estimate;
* AIE-ML (VEK280) and AIE-MLv2 (VEK385), where the skip meets its reader's other part in a
  memory-tile row buffer: the skip's FIFO over what the memory tile holds beside the row buffer
  (a catalog VEK280 / VEK385 whose memory tile is shrunk to 8,000 B forces it at 16 x 64: row
  buffer 2,176 B + FIFO 8,192 B) goes to DDR, the input GMIO into the row buffer's write port;
  x86 verify bit-exact on VEK280 (the row-address mutation fails it) and on VEK385; the check pass
  counts its GMIO pair against the catalog's interface DMA channels;
* what DDR cannot help, refused by name: a skip that is the network input, a
  second DDR segment; the check pass refuses more segments than an interface tile's DMA channels;
  the IR refuses a ``ddr`` link without a segment;
* the XRT host (row writes, each written row's read in a second thread) builds against Debian's XRT
  with warnings as errors (not run: no board).
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import aieflow  # noqa: E402
from aieflow.errors import PlanError  # noqa: E402

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: verify builds C++20 with g++")

W = 384  # 16 x 384: the skip's FIFO (8 rows x 16 x 384 = 49,152 B) is over a VCK190 tile's 32,768 B


class LongRes(nn.Module):
    """relu(b(d) + d): the branch b is six 3 x 3 convolutions through one channel, so the 16-channel
    skip d lags 7 rows behind it (8 with the row in flight)."""

    def __init__(self, blocks=1):
        super().__init__()
        torch.manual_seed(0)
        self.d = nn.Conv2d(3, 16, 1)
        self.b = nn.ModuleList([
            nn.ModuleList([nn.Conv2d(16, 1, 3, padding=1)] + [nn.Conv2d(1, 1, 3, padding=1) for _ in range(4)]
                          + [nn.Conv2d(1, 16, 3, padding=1)]) for _ in range(blocks)])

    def forward(self, x):
        d = torch.relu(self.d(x))
        for block in self.b:
            y = d
            for c in block[:-1]:
                y = torch.relu(c(y))
            d = torch.relu(block[-1](y) + d)
        return d


class InputLong(nn.Module):
    """relu(c(x) + x) with a chain of seven 3 x 3 convolutions: the 3-channel skip is the network input."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.ModuleList([nn.Conv2d(3, 1, 3, padding=1)] + [nn.Conv2d(1, 1, 3, padding=1) for _ in range(5)]
                               + [nn.Conv2d(1, 3, 3, padding=1)])

    def forward(self, x):
        y = x
        for c in self.c[:-1]:
            y = torch.relu(c(y))
        return torch.relu(self.c[-1](y) + x)


def _int8(model, hw, device="vck190"):
    cal = np.random.default_rng(1).standard_normal((2, 3, *hw)).astype(np.float32)
    return aieflow.compile(model.eval(), device, cal[:1], calibration=cal,
                           config={"precision": "int8", "cnn": {"mapping": "rows"}})


@pytest.fixture(scope="module")
def ddr():
    return _int8(LongRes(), (16, W))


def test_the_skip_that_does_not_fit_a_tile_is_held_in_ddr(ddr):
    from aieflow.cnn.emit_rows import lower

    last = ddr.plan.layers[-1]
    assert last.stage == "b.0.5" and last.parts == ((5, 1), (0, 16))
    assert last.fifo_words == (0, 0)  # no FIFO on the array for it
    assert last.ddr_bytes == (0, 16 * 16 * W)  # the producer's whole frame of the skip: 98,304 B
    assert all(not lay.ddr_bytes for lay in ddr.plan.layers[:-1])
    mg = lower(ddr.plan)
    (name, link), = mg.ddr_links()
    assert name == "ddr0" and link.kind == "ddr" and link.segment == (16, 16 * W)
    assert (link.src.ref(), link.dst.ref()) == ("k_d.out[1]", "k_b_0_5.in[1]")
    h = ddr.files["src/graph.h"]
    assert "adf::output_gmio ddr0_w;" in h and "adf::input_gmio ddr0_r;" in h
    assert "adf::connect<adf::stream>(k_d.out[1], ddr0_w.in[0]);" in h
    assert "adf::connect<adf::stream>(ddr0_r.out[0], k_b_0_5.in[1]);" in h
    cpp = ddr.files["src/graph.cpp"]
    assert "cnn_graph.ddr0_w.aie2gm(ddr0 + r * 6144, 6144);" in cpp
    assert "cnn_graph.ddr0_r.gm2aie(ddr0 + r * 6144, 6144);" in cpp
    assert "cv.wait(lock, [&] { return written > r; });" in cpp  # no row read before it is written
    system = ddr.files["x86/system.cpp"]  # the x86 system run issues the same transactions per frame
    assert "cnn_graph.ddr0_w.aie2gm_nb(ddr0.data() + r * 6144, 6144);" in system
    assert "cnn_graph.ddr0_r.gm2aie_nb(ddr0.data() + r * 6144, 6144);" in system
    assert "skip in a DDR segment of 98,304 B" in ddr.summary()


def _frames():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 16, W)).astype(np.float32)
    x[1] = np.where(rng.random((3, 16, W)) < 0.5, -100.0, 100.0)  # saturating edge values
    return x


@needs_cxx
def test_ddr_skip_verifies_bit_exact_and_row_address_mutation_fails(ddr):
    r = ddr.verify(_frames())
    assert r.frames == 2 and r.values == 2 * 16 * 16 * W and r.mismatches == 0
    key, good = "x86/harness.cpp", "g.ddr0_r.gm2aie_nb(ddr0 + r * 6144, 6144);"
    assert ddr.files[key].count(good) == 1
    bad = "g.ddr0_r.gm2aie_nb(ddr0 + ((r + 1) % 16) * 6144, 6144);"  # each row read back from the next row's place
    mutated = dataclasses.replace(ddr, files={**ddr.files, key: ddr.files[key].replace(good, bad)})
    assert mutated.verify(_frames()).mismatches > 0


def test_ddr_skip_rows_equal_the_hand_calculation(ddr):
    """docs/conv.md "Skips in DDR": VCK190, rows of B = 6,144 B made at t = 0: the write takes
    B / 5 GB/s (the interface DMA's 32 bits per 1.25 GHz cycle; NoC 15.06 GB/s and DDR 25.6 GB/s are
    faster) = 1.2288 us; the host sees it 28 us later and issues the read (17 us), which arrives
    8 cycles (6.4 ns) + 1.2288 us later: 47.4640 us.  The writer issues row 1 at 1.2288 + 28 + 17 =
    46.2288 us, written at 47.4576 us; its read waits for row 0's arrival (47.464 us) to be seen:
    47.464 + 28 + 17 + 0.0064 + 1.2288 = 93.6992 us."""
    from aieflow.cnn.rows import ddr_skip_ready

    ready, host = ddr_skip_ready(ddr.device, [0.0, 0.0], 6144)
    assert ready == pytest.approx([47.4640e-6, 93.6992e-6], abs=1e-11)
    assert host == pytest.approx(2 * (28e-6 + 17e-6 + 6.4e-9 + 1.2288e-6))  # the reader thread, per row
    late, _ = ddr_skip_ready(ddr.device, [100e-6, 150e-6], 6144)  # row 1 made after its write was issued
    assert late == pytest.approx([(100 + 1.2288 + 45 + 0.0064 + 1.2288) * 1e-6,
                                  (150 + 1.2288 + 45 + 0.0064 + 1.2288) * 1e-6], abs=1e-11)
    e = ddr.estimate()
    stages = {p.stage: p for p in e.stages}
    assert stages["b.0.5 skip"].where == "ddr" and stages["b.0.5 skip"].seconds == pytest.approx(16 * 46.2352e-6)
    # the host's 739.8 us per frame is under the slowest kernel's (b.0.0: 16 rows x 75,936 cycles)
    assert e.bound.startswith("aie: b.0.0") and e.interval_s > 16 * 46.2352e-6


def test_ddr_skip_adds_the_round_trip_to_the_latency(ddr):
    """The same plan with the skip on the array (a FIFO, as if the tile held it) against DDR, both
    with every kernel made fast (1,000 cycles per row): the host's rows (the first 47.464 us after
    the skip's first row is made, then 46.2352 us each) set the latency: ~745 us against the array
    alone's ~30 us."""
    from aieflow.cnn.rows import estimate_rows

    fast = dataclasses.replace(ddr.plan, layers=tuple(dataclasses.replace(x, row_cycles=1000.0)
                                                      for x in ddr.plan.layers))
    last = fast.layers[-1]
    on_chip = dataclasses.replace(fast, layers=fast.layers[:-1] + (
        dataclasses.replace(last, ddr_bytes=(), fifo_words=(0, 8 * 16 * W // 4)),))
    with_ddr, without = estimate_rows(fast), estimate_rows(on_chip)
    assert "b.0.5 skip" not in {p.stage for p in without.stages}
    assert without.latency_s < 35e-6  # the output PLIO's 16 rows of 6,144 B (19.7 us) and the pipeline's fill
    # d's first row is made at max(input row 0 = 0.2304 us, the 200-cycle call 0.16 us) + 0.8 us; the
    # skip's last row arrives 47.464 + 15 x 46.2352 us later; the reader's rows 14 and 15 both need it
    # (3 x 3 window), 0.8 us each, and the output PLIO sends them, 1.2288 us each, after row 14
    made0 = 0.2304 + 0.8
    assert with_ddr.latency_s == pytest.approx((made0 + 47.464 + 15 * 46.2352 + 0.8 + 2 * 1.2288) * 1e-6, abs=1e-9)
    # the full-speed plan: the branch's slow first kernel hides most of the round trip
    assert estimate_rows(ddr.plan).latency_s >= without.latency_s


def test_where_ddr_cannot_help_is_refused_by_name(ddr):
    with pytest.raises(PlanError) as e:  # the network input: no kernel writes it
        _int8(InputLong(), (8, 1600))
    assert "the skip from the network input into 'c.6'" in str(e.value)
    assert "a DDR segment takes a kernel's output stream" in str(e.value)
    with pytest.raises(PlanError) as e:  # two long skips: one segment per design
        _int8(LongRes(blocks=2), (16, W))
    assert "2 skips need a DDR segment each ('b.0.5', 'b.1.5')" in str(e.value)


def test_check_pass_and_ir_know_the_ddr_link(ddr):
    from aieflow.cnn.emit_rows import lower
    from aieflow.mapped.ir import Link
    from aieflow.mapped.transport import check

    mg = lower(ddr.plan)
    check(mg, ddr.device)  # one segment: within an interface tile's 2 channels per direction
    none = dataclasses.replace(ddr.device, generation=dataclasses.replace(ddr.device.generation,
                                                                          interface_dma_channels=0))
    with pytest.raises(PlanError, match=r"1 DDR segments, each an output and an input GMIO; an interface tile's "
                                        r"DMA has 0 channels per direction") as e:
        check(mg, none)
    assert e.value.layer == "b.0.5"
    links = tuple(dataclasses.replace(x, segment=(0, 0)) if x.kind == "ddr" else x for x in mg.links)
    with pytest.raises(AssertionError, match="a ddr link and only it has a segment"):
        dataclasses.replace(mg, links=links).check()
    stream = tuple(Link("stream", x.src, x.dst, segment=(16, 1)) if x.kind == "ddr" else x for x in mg.links)
    with pytest.raises(AssertionError, match="a ddr link and only it has a segment"):
        dataclasses.replace(mg, links=stream).check()


def test_ddr_host_compiles_against_xrt(ddr, tmp_path):
    """The XRT host (host/host.cpp) moves the segment row by row: the output GMIO's row (a blocking
    sync) in this thread, its read back in a second thread once written; built against Debian's XRT
    with warnings as errors (not run: no board)."""
    from hw_tools import XRT_HEADER, make_host

    if not XRT_HEADER.is_file() or shutil.which("g++") is None:
        pytest.skip("the XRT headers or g++ are missing")
    host = ddr.files["host/host.cpp"]
    assert 'ddr0.sync("cnn_graph.ddr0_w", XCL_BO_SYNC_BO_AIE_TO_GMIO, 6144, r * 6144);' in host
    assert 'ddr0.sync("cnn_graph.ddr0_r", XCL_BO_SYNC_BO_GMIO_TO_AIE, 6144, r * 6144);' in host
    assert "cv.wait(lock, [&] { return written > r; });" in host  # no row read before it is written
    proj = ddr.save(tmp_path / "p") / "project"
    r = make_host(proj)
    assert r.returncode == 0, r.stdout + r.stderr


# ------------------------------------------------------------- AIE-ML / v2: into the memory tile


def _shrunk(device: str):
    """The catalog device with its memory tile shrunk to 8,000 B: LongRes at 16 x 64 then needs
    the row buffer (2 x 17 x 64 = 2,176 B) and the skip's FIFO (8 rows x 16 x 64 = 8,192 B) in it,
    10,368 B, so the skip goes to DDR (at the catalog's 512 KB that takes a frame too wide for a
    tile's line buffers, or a lag of over 60 rows)."""
    from aieflow.devices import get_device

    return dataclasses.replace(get_device(device), memory_tile_bytes=8000)


@pytest.fixture(scope="module")
def ddr_ml():
    return {dev: _int8(LongRes(), (16, 64), device=_shrunk(dev)) for dev in ("vek280", "vek385")}


def _frames_ml():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 16, 64)).astype(np.float32)
    x[1] = np.where(rng.random((3, 16, 64)) < 0.5, -100.0, 100.0)  # saturating edge values
    return x


def test_aie_ml_skip_over_the_memory_tile_goes_to_ddr_into_the_row_buffer(ddr_ml):
    from aieflow.cnn.emit_rows import lower
    from aieflow.mapped.transport import check

    d = ddr_ml["vek280"]
    last = d.plan.layers[-1]
    assert last.stage == "b.0.5" and last.parts == ((5, 1), (0, 16)) and last.merge_bytes == 2 * 17 * 64
    assert last.fifo_words == (0, 0) and last.ddr_bytes == (0, 16 * 16 * 64)  # 16,384 B: d's whole frame of it
    mg = lower(d.plan)
    (name, link), = mg.ddr_links()
    assert link.segment == (16, 16 * 64)
    assert (link.src.ref(), link.dst.ref()) == ("k_d.out[0]", "cat_b_0_5.in[1]")  # d's one port broadcasts
    assert not [x for x in mg.links if x.kind == "memtile" and x.dst.ref() == "cat_b_0_5.in[1]"]
    h = d.files["src/graph.h"]
    assert "adf::connect<adf::stream>(k_d.out[0], ddr0_w.in[0]);" in h
    assert "adf::connect(ddr0_r.out[0], cat_b_0_5.in[1]);" in h  # the skip's channels 1 .. 16 of the row
    assert "adf::repetition_count(cat_b_0_5) = 16;" in h
    assert "skip in a DDR segment of 16,384 B" in d.summary()
    # the check pass counts its GMIO pair against the catalog's interface DMA channels
    check(mg, d.device)
    g = d.device.generation
    with pytest.raises(PlanError, match=r"1 DDR segments.*has 0 channels per direction") as e:
        check(mg, dataclasses.replace(d.device, generation=dataclasses.replace(g, interface_dma_channels=0)))
    assert e.value.layer == "b.0.5"  # the layer the row buffer feeds
    # the model: the host's rows feed the row buffer, whose rows leave after both parts' rows
    e = d.estimate()
    stages = {p.stage: p for p in e.stages}
    assert stages["b.0.5 skip"].where == "ddr" and "b.0.5 concat" in stages
    assert e.interval_s >= stages["b.0.5 skip"].seconds
    # the catalog's memory tile holds it as a FIFO
    whole = _int8(LongRes(), (16, 64), device="vek280")
    assert whole.plan.layers[-1].fifo_words == (0, 8 * 16 * 64 // 4) and not whole.plan.layers[-1].ddr_bytes


@needs_cxx
def test_aie_ml_ddr_skip_verifies_bit_exact_and_row_address_mutation_fails(ddr_ml):
    d = ddr_ml["vek280"]
    r = d.verify(_frames_ml())
    assert r.frames == 2 and r.values == 2 * 16 * 16 * 64 and r.mismatches == 0
    key, good = "x86/harness.cpp", "g.ddr0_r.gm2aie_nb(ddr0 + r * 1024, 1024);"
    assert d.files[key].count(good) == 1
    bad = "g.ddr0_r.gm2aie_nb(ddr0 + ((r + 1) % 16) * 1024, 1024);"  # each row read back from the next row's place
    mutated = dataclasses.replace(d, files={**d.files, key: d.files[key].replace(good, bad)})
    assert mutated.verify(_frames_ml()).mismatches > 0


@needs_cxx
def test_aie_mlv2_ddr_skip_verifies_bit_exact(ddr_ml):
    d = ddr_ml["vek385"]
    assert d.plan.layers[-1].ddr_bytes == (0, 16 * 16 * 64)
    r = d.verify(_frames_ml())
    assert r.frames == 2 and r.values == 2 * 16 * 16 * 64 and r.mismatches == 0
