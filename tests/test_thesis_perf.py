"""The thesis mapping's frame as its generated code runs it (issue 21, item 1): the PL kernels'
loops counted from the generated ``pl/thesis_pl.cpp`` / ``src/thesis_config.h`` by this file's own
parsing, the ESPCN frame's critical path by hand from the spec's tiles, and the XRT runs the
generated host starts per frame against what the system model charges.

Hand constants: a pipelined loop execution of T trips at II 1 costs T - 1 + 8 (iteration latency,
assumed in cnn/perf.py) + 2 (UG1399 "Flattening Nested Loops": one cycle into and one out of the
inner loop) PL cycles."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from cases import build_design

from aieflow.graph_io import json_default

PL_HZ, AIE_HZ, MOVER_HZ = 260e6, 1.25e9, 312.5e6
XRT_START_US = 17.0  # perf/system.py's assumed xrt::run start (Xilinx/XRT #6601)


def loop(trips: int) -> int:
    return trips - 1 + 8 + 2


@pytest.fixture(scope="module")
def thesis():
    d, _ = build_design("cnn-thesis")
    return d


def _configs(header: str) -> dict[str, dict[str, int]]:
    out = {}
    for name, body in re.findall(r"struct (\w+) \{(.*?)\};", header, re.S):
        out[name] = {k: int(v) for k, v in re.findall(r"\b([A-Z_]+) = (\d+)\b", body)}
    return out


def _hand_loops(files) -> dict[str, int]:
    """PL cycles per frame of every PL kernel, from the generated sources: untile<L> = per tile
    (GRID_M x GRID_N) read_window + reorder over TILE_M x TILE_N; activate<L> = M_TOT x N_TOT;
    im2col_tile<N> = per N block (GRID_N of N) the patch loop + write_window over K_PAD x TILE_N;
    pixel_shuffle<L> = M_TOT x N_TOT, then write_window over FRAME_OUT."""
    cfg = _configs(files["src/thesis_config.h"])
    frame_out = int(re.search(r"FRAME_OUT = (\d+)", files["src/thesis_config.h"]).group(1))
    out = {}
    for name, body in re.findall(r"\nvoid (\w+)\(hls::stream.*?\{(.*?)\n\}", files["pl/thesis_pl.cpp"], re.S):
        cycles = 0
        L = cfg[re.search(r"untile<(\w+)>", body).group(1)]
        tiles, tile = L["GRID_M"] * L["GRID_N"], L["TILE_M"] * L["TILE_N"]
        cycles += 2 * tiles * loop(tile)
        if re.search(r"activate<\w+>", body):
            cycles += loop(L["M_TOT"] * L["N_TOT"])
        if m := re.search(r"im2col_tile<(\w+)>", body):
            N = cfg[m.group(1)]
            cycles += 2 * N["GRID_N"] * loop(N["K_PAD"] * N["TILE_N"])
        if re.search(r"pixel_shuffle<\w+>", body):
            cycles += loop(L["M_TOT"] * L["N_TOT"])
        if "FRAME_OUT)" in body:
            cycles += loop(frame_out)
        out[name] = cycles
    return out


def test_each_pl_kernels_loops_are_the_generated_codes(thesis):
    from aieflow.cnn import perf as cnn_perf

    hand = _hand_loops(thesis.files)
    assert set(hand) == {"activation_conv1", "activation_conv3", "pixelshuffle_conv4"}
    plan = thesis.plan
    names = {f"{lay.pl_kernel}_{s.name}": i for i, (s, lay) in enumerate(zip(plan.stages, plan.layers, strict=True))}
    for name, cycles in hand.items():
        model = sum(lp.cycles() for lp in cnn_perf.pl_loops(plan, names[name]))
        assert model == cycles, name
    # the spec's flow: conv1's activation writes conv2's im2col, 576 x 256 values, and streams them out
    assert hand["activation_conv1"] == 2 * 16 * loop(1024) + loop(64 * 256) + 2 * 32 * loop(576 * 8)


def test_the_frame_is_the_hand_critical_path(thesis):
    """ESPCN (spec tiles): conv1's windows (8 KB per PLIO) arrive, its kernels run, the activation
    kernel untiles, applies the LUT and writes conv2's 32 windows; conv2's kernel of the last window
    runs, the second activation untiles its 97 tiles still to read (the first row's 31 others were
    read while windows were written), LUT, 16 windows; conv3's last kernel, its tile, the shuffle and
    the image's write."""
    e = thesis.estimate()
    t_in = 32 * 64 * 4 / 16 / MOVER_HZ
    aie1 = (200 + (16 // 4) * (32 // 2) * (64 // 4) * 32 / 8 + 16 * 64 / 4) / AIE_HZ
    aie2 = (200 + (8 // 4) * (576 // 2) * (8 // 4) * 32 / 8) / AIE_HZ
    aie3 = (200 + (4 // 4) * (288 // 2) * (16 // 4) * 32 / 8) / AIE_HZ
    pl1 = (2 * 16 * loop(1024) + loop(16384) + 2 * 32 * loop(4608)) / PL_HZ
    pl2 = (97 * 2 * loop(64) + loop(8192) + 2 * 16 * loop(4608)) / PL_HZ
    pl3 = (2 * loop(64) + loop(1024) + loop(1024)) / PL_HZ
    want = t_in + aie1 + pl1 + aie2 + pl2 + aie3 + pl3
    assert e.latency_s == pytest.approx(want, rel=1e-12)
    assert e.interval_s == pytest.approx(e.latency_s, rel=1e-12)  # one frame per host run
    assert sum(s.seconds for s in e.stages) == pytest.approx(e.latency_s, rel=1e-12)
    by = {(s.stage, s.where): s.seconds for s in e.stages}
    assert by[("conv3", "aie")] == pytest.approx(aie2) and by[("conv3:activation", "pl")] == pytest.approx(pl2)
    assert by[("conv1", "plio")] == pytest.approx(t_in)


def _two_layers():
    """A two-layer thesis design: conv1 (1 -> 8, 3 x 3, tanh) in 2 x 2 kernels of 4 x 10 x 8,
    conv2 (8 -> 4) in 1 x 2 kernels of 4 x 72 x 8 on a 4 x 4 frame, PL kernels at 250 MHz."""
    torch = pytest.importorskip("torch")
    from torch import nn

    import aieflow

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
            self.conv2 = nn.Conv2d(8, 4, 3, padding=1)

        def forward(self, x):
            return self.conv2(torch.tanh(self.conv1(x)))

    torch.manual_seed(0)
    x = np.random.default_rng(0).uniform(0, 1, (1, 1, 4, 4)).astype(np.float32)
    cfg = {"precision": "fp32", "activations": {"tanh": "espcn-thesis"},
           "cnn": {"mapping": "thesis", "mover_clock_mhz": 312.5},
           "layers": {"conv1": {"mapping": {"tile": [4, 10, 8], "kernels": 4, "k_pad": 10, "pl_clock_mhz": 250}},
                      "conv2": {"mapping": {"tile": [4, 72, 8], "kernels": 2, "pl_clock_mhz": 250}}}}
    return aieflow.compile(Two().eval(), device="vck190", example_input=x, calibration=x, config=cfg)


def test_a_two_layer_thesis_stage_graph_is_the_hand_count():
    """The stage graph of the thesis mapping's mapped graph (``cnn.perf.thesis_costs`` on
    ``emit_thesis.lower``), by hand: the host's run token, layer 0's two input windows (one 128-bit
    PLIO each), each N block's kernels, each PL kernel's loops as a chain of steps (untile tile t =
    (mi, ni) after its block ni's kernels, mi-major; tanh; im2col + write_window per block of
    conv2, or the image's write out of the graph), single-buffered windows, one frame per run."""
    from aieflow.cnn.perf import estimate_thesis, thesis_stage_graph
    from aieflow.mapped.estimate import to_pipeline

    d = _two_layers()
    _, mg, sg, sim = thesis_stage_graph(d.plan)
    mg.check()
    ns = 1e9
    t_in = 10 * 8 * 4 / 16 / MOVER_HZ * ns  # a 10 x 8 float window over a 128-bit PLIO
    a0 = (200 + (4 // 4) * (10 // 2) * (8 // 4) * 32 / 8) / AIE_HZ * ns  # mmul<4,2,4> blocks at 8 MACs / cycle
    a1 = (200 + (4 // 4) * (72 // 2) * (8 // 4) * 32 / 8) / AIE_HZ * ns
    pl = 250e6
    untile = 2 * loop(4 * 8) / pl * ns  # read_window + reorder of one 4 x 8 tile
    tanh = loop(8 * 16) / pl * ns  # every conv1 output
    im2col = 2 * loop(72 * 8) / pl * ns  # patch loop + write_window of one conv2 window
    write = loop(4 * 16) / pl * ns  # the image
    want = {
        "host:run": (0.0, ()), "plio:in": (t_in, ("host:run",)),
        "aie:0:0": (a0, ("plio:in",)), "aie:0:1": (a0, ("plio:in",)),
        "pl:0:untile:0": (untile, ("aie:0:0",)), "pl:0:untile:1": (untile, ("aie:0:1", "pl:0:untile:0")),
        "pl:0:untile:2": (untile, ("aie:0:0", "pl:0:untile:1")), "pl:0:untile:3": (untile, ("aie:0:1", "pl:0:untile:2")),
        "pl:0:tanh": (tanh, ("pl:0:untile:3",)),
        "pl:0:im2col:0": (im2col, ("pl:0:tanh",)), "pl:0:im2col:1": (im2col, ("pl:0:im2col:0",)),
        "aie:1:0": (a1, ("pl:0:im2col:0",)), "aie:1:1": (a1, ("pl:0:im2col:1",)),
        "pl:1:untile:0": (untile, ("aie:1:0",)), "pl:1:untile:1": (untile, ("aie:1:1", "pl:1:untile:0")),
        "pl:1:write": (write, ("pl:1:untile:1",)),
    }
    got = {c.name: (c.occupancy_ns, set(sg.after[c.name])) for c in sg.stages}
    assert set(got) == set(want)
    for name, (occ, after) in want.items():
        assert got[name][0] == pytest.approx(occ, rel=1e-12), name
        assert got[name][1] == set(after), name
    assert sg.sink == "pl:1:write" and sg.recurrences == (("pl:1:write", "host:run"),)
    # single-buffered windows (adf::single_buffer on both kernel ports): the stages that write them
    windows = {"plio:in", "aie:0:0", "aie:0:1", "pl:0:im2col:0", "pl:0:im2col:1", "aie:1:0", "aie:1:1"}
    assert sg.single == windows
    slots = to_pipeline(sg).buffers
    assert {b for b, k in slots.items() if k == 1} == {f"out:{n}" for n in windows}
    # the frame: conv1's windows, its kernels, four untiles, tanh, both conv2 windows, the second
    # block's kernels, its untile (the first block's is hidden behind the second window), the write
    latency = t_in + a0 + 4 * untile + tanh + 2 * im2col + a1 + untile + write
    assert sim.latency_ns == pytest.approx(latency, rel=1e-12)
    assert sim.interval_ns == pytest.approx(latency, rel=1e-12)  # one frame per host run
    e = estimate_thesis(d.plan)
    by = {(s.stage, s.where): s.seconds * ns for s in e.stages}
    assert by == pytest.approx({("conv1", "plio"): t_in, ("conv1", "aie"): a0,
                                ("conv1:activation", "pl"): 4 * untile + tanh + 2 * im2col, ("conv2", "aie"): a1,
                                ("conv2:s2mm", "pl"): untile + write}, rel=1e-12)


def test_the_host_starts_per_frame_what_the_system_model_charges(thesis):
    files = thesis.files
    host = files["host/host.cpp"]
    loop_body = host[host.index("for (std::size_t it = 0; it < iterations; ++it) {"):host.index("graph.wait();")]
    starts = len(re.findall(r"\.kernel\(\w+\[it\]", loop_body)) + len(re.findall(r"_run\.start\(\)", loop_body))
    starts += loop_body.count("graph.run(1);")
    assert starts == 4 + 1 + 3 + 1  # conv1's 4 mm2s, the s2mm, the three PL kernels, the graph
    for k in ("activation_conv1", "activation_conv3", "pixelshuffle_conv4"):
        assert f'"{k}:{{{k}_0}}"' in host
    # each PL kernel has a start / done interface (one frame per start), none free-running
    pl = files["pl/thesis_pl.cpp"]
    assert pl.count("s_axilite port = return") == 3 and "ap_ctrl_none" not in pl
    sj = json.loads(json.dumps(thesis.to_json(), default=json_default))["performance"]["system"]
    assert sj["orchestration"] == "per-run"
    assert sj["breakdown"]["host: start runs"]["ns"] == pytest.approx(starts * XRT_START_US * 1e3)
    # a frame is one host run: starts, the first read's round trip, the array's frame, the last
    # write's round trip, one wake-up
    assert sj["latency_ns"] == pytest.approx(sum(s["ns"] for s in sj["breakdown"].values() if s["on"] == "latency"))
    assert sj["interval_ns"] == sj["latency_ns"]


def test_per_run_refuses_iterations_that_are_not_whole_plio_words():
    from aieflow.devices import get_device
    from aieflow.errors import AieflowError
    from aieflow.vitis import system_files

    files = {"data/x.txt": "1 2 3 4 5 6"}  # 3 floats per iteration: 96 of a 128-bit word
    with pytest.raises(AieflowError, match="PLIO 'x': 3 values per iteration are not whole 128-bit words"):
        system_files(files, device=get_device("vck190"), graph_class="G", graph_var="g",
                     plio_in=[{"var": "x", "file": "data/x.txt", "ctype": "float"}], plio_out=[], iterations=2,
                     samples_per_iteration=1, classes=[], tiles=[], plio_bits=128, per_run=True)
