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
    assert e.interval_s == e.latency_s  # one frame at a time
    assert sum(s.seconds for s in e.stages) == pytest.approx(e.latency_s, rel=1e-12)
    by = {(s.stage, s.where): s.seconds for s in e.stages}
    assert by[("conv3", "aie")] == pytest.approx(aie2) and by[("conv3:activation", "pl")] == pytest.approx(pl2)
    assert by[("conv1", "plio")] == pytest.approx(t_in)


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
