"""System-level performance, DDR to DDR (issue 21, item 1): perf/system.py around the array model.

Properties that could fail: a run is never shorter than the array plus the movers' memory round
trips; the interval is never shorter than the array's or any mover's (recomputed here from the
generated ``host/plio_ports.h`` and mover HLS with this file's own parsing); doubling the batch
doubles the movers' words; the II the model reads from the generated HLS is the one the array
model charges (recurrent FSM head, thesis PL loops); ``performance.system`` validates against the
schema for every kind that has it.
"""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest
from cases import DESIGN_KINDS, build_design, design_case

import aieflow
from aieflow.design_schema import schema
from aieflow.graph_io import json_default

SYSTEM_KINDS = [k for k in DESIGN_KINDS if k != "segmented"]
BITS = {"std::int8_t": 8, "std::uint8_t": 8, "std::int16_t": 16, "std::int32_t": 32, "float": 32}
UG1399_M_AXI_LATENCY = 64  # Vitis HLS default m_axi latency, kernel cycles


@pytest.fixture(scope="module", params=SYSTEM_KINDS)
def built(request):
    d, _ = build_design(request.param)
    return request.param, d


def _json(d):
    return json.loads(json.dumps(d.to_json(), default=json_default))


def _mover_ns(files, pl_clock_hz):
    """Each mover's time per iteration, from the generated files (independent parse)."""
    ports = files["host/plio_ports.h"]
    plio = int(re.search(r"PLIO_BITS = (\d+)", ports).group(1))
    ii = {k: int(re.search(r"II = (\d+)", files[f"pl/{k}.cpp"]).group(1)) for k in ("mm2s", "s2mm")}
    out = []
    for block in ports.split("struct ")[1:]:
        ctype = re.search(r"typedef ([\w:]+) type", block).group(1)
        cu = re.search(r'cu = "(\w+)_\d+"', block).group(1)
        per = int(re.search(r"per_iteration = (\d+)", block).group(1))
        out.append(-(-per * BITS[ctype] // plio) * ii[cu] / pl_clock_hz * 1e9)
    return out


def test_system_figures_validate_and_bound_the_array(built):
    name, d = built
    j = _json(d)
    jsonschema.validate(j, schema())
    perf = j["performance"]
    sysj = perf["system"]
    assert sysj["error_band"]["class"] == "system" and sysj["error_band"]["figures"] == 0
    pl_clock = d.device.pl_clock_hz if hasattr(d, "device") else d.plan.device.pl_clock_hz
    # DDR to DDR, the host's control aside, is never faster than the array plus the first read's and
    # the last write's memory round trips (the kinds with data movers: one each way at least; the
    # GEMM flows' movers are inside their model)
    round_trips = 2 * UG1399_M_AXI_LATENCY / pl_clock * 1e9 if sysj["movers"] else 0.0
    assert sysj["control_ns"] >= 17_000
    assert sysj["latency_ns"] - sysj["control_ns"] >= perf["latency_ns"] + round_trips - 1e-6
    assert sysj["interval_ns"] >= perf["interval_ns"] * (1 - 1e-12)
    if "host/plio_ports.h" in d.files:
        movers = _mover_ns(d.files, pl_clock)
        assert sysj["interval_ns"] >= max([perf["interval_ns"], *movers]) * (1 - 1e-12)
        assert sum(1 for k in sysj["breakdown"] if k.startswith(("mm2s:", "s2mm:"))) == len(movers)
    if sysj["orchestration"] == "per-run":
        assert sysj["interval_ns"] == pytest.approx(sysj["latency_ns"])
    latency_terms = sum(s["ns"] for s in sysj["breakdown"].values() if s["on"] == "latency")
    assert latency_terms == pytest.approx(sysj["latency_ns"])
    assert "system (DDR to DDR" in d.summary()
    # report(): every kind prints the system stage table once, one row per stage of design.json
    report = d.report()
    assert report.count("system stages (DDR to DDR") == 1
    rows = [line.strip() for line in report.splitlines()[report.splitlines().index(next(
        x for x in report.splitlines() if "system stages (DDR to DDR" in x)) + 1:]]
    for (stage, part), row in zip(sysj["breakdown"].items(), rows, strict=False):
        assert row.startswith(stage) and f"{part['ns']:,.1f} ns" in row, (stage, row)
    bad = json.loads(json.dumps(j))
    del bad["performance"]["system"]["interval_ns"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema())


def test_kinds_without_a_system_model_say_so():
    d, _ = build_design("segmented")
    assert "system" not in _json(d)["performance"]
    assert "system: not modelled for segmented: each segment is a project and a device image" in d.summary()
    assert "system stages" not in d.report()


XRT_START_US, XRT_WAIT_US = 17, 28  # Xilinx/XRT #6601 and #9018 (docs/performance.md section 7)


@pytest.mark.parametrize("kind", ["gemm-vck190", "gemm-vek280", "streamed-dense"])
def test_the_gemm_host_control_is_every_run_its_loops_start(kind):
    """The host runs of one call, counted here from the generated host's text and the plan's loop
    counts: a pack run that waits is one start and one wake-up, a block three starts and one
    wake-up, the streamed layer's epilogue one more run."""
    from aieflow.perf import system

    d, _ = build_design(kind)
    gp = d.plan.gemm if kind == "streamed-dense" else d.plan
    host = d.files["host/dense_host.cpp" if kind == "streamed-dense" else "host/host.cpp"]
    outer, blocks = gp.n_jc * gp.n_pc, gp.n_jc * gp.n_pc * gp.n_ic
    pack_b = re.search(r"void pack_b\(int jc, int pc\) \{ run_mover\([^}]*\.wait\(\); \}", host) is not None
    pack_a = re.search(r"void pack_a\(int ic, int pc\) \{ run_mover\([^}]*\.wait\(\); \}", host) is not None
    assert pack_a == (not gp.memtile)  # the memory-tile design packs in the memory tiles
    runs_us = blocks * (3 * XRT_START_US + XRT_WAIT_US) + (XRT_START_US + XRT_WAIT_US) * (
        outer * pack_b + blocks * pack_a + (kind == "streamed-dense"))
    sysj = _json(d)["performance"]["system"]
    assert sysj["control_ns"] == pytest.approx(1e3 * runs_us)
    assert sysj["orchestration"] == "per-run" and sysj["interval_ns"] == pytest.approx(sysj["latency_ns"])
    assert sysj["latency_ns"] >= _json(d)["performance"]["latency_ns"] + sysj["control_ns"] - 1e-6
    # one pack run less in the host's code, one round trip less in the model
    if pack_a:
        files = dict(d.files)
        key = "host/dense_host.cpp" if kind == "streamed-dense" else "host/host.cpp"
        files[key] = re.sub(r"void pack_a\(int ic, int pc\) \{[^}]*\}", "void pack_a(int, int) {}", host)
        perf = _json(d)["performance"]
        info = {"plan": gp}
        if kind == "streamed-dense":
            info.update(epilogue_bytes=1, samples=d.plan.batch)
        fewer = system.for_project(_json(d)["kind"], files, perf, gp.device, info)
        assert sysj["control_ns"] - fewer.control_ns == pytest.approx(1e3 * blocks * (XRT_START_US + XRT_WAIT_US))


def test_doubling_the_batch_doubles_the_mover_stage():
    model, x, device, config = design_case("chain-vck190")
    stages = []
    for batch in (8, 16):
        d = aieflow.compile(model, device=device, example_input=x[:2], calibration=x, config={**config, "batch": batch})
        sysj = _json(d)["performance"]["system"]
        stages.append({k: v["ns"] for k, v in sysj["breakdown"].items() if k.startswith(("mm2s:", "s2mm:"))})
    assert stages[0].keys() == stages[1].keys() and stages[0]
    for k in stages[0]:
        assert stages[1][k] == pytest.approx(2 * stages[0][k], rel=0.02), k


def test_the_fsm_ii_in_the_generated_hls_is_the_one_the_model_charges():
    from aieflow.recurrent import costs

    d, _ = build_design("recurrent")
    sysj = _json(d)["performance"]["system"]
    src = "\n".join(t for t in d.files.values() if "RNN_HEAD_PIPELINE" in t)
    generated = {int(v) for v in re.findall(r"PIPELINE II=(\d+)", src)}
    assert generated == {1}
    fsm = sysj["pl_kernels"]["rnn_fsm_l0"]
    assert fsm["ii"] == 1
    # the array model's head cost is m outputs at II 1 (+ depth): one more output, one more cycle
    assert costs.pl_head_cycles(8, (3,), ("i16", "i16")) + fsm["ii"] == costs.pl_head_cycles(8, (4,), ("i16", "i16"))


def test_the_thesis_pl_loops_ii_is_the_cnn_models():
    from aieflow.cnn import perf as cnn_perf

    d, _ = build_design("cnn-thesis")
    sysj = _json(d)["performance"]["system"]
    assert {k["ii"] for k in sysj["pl_kernels"].values()} == {cnn_perf.PL_LOOP_II}
    assert {k["clock_hz"] for k in sysj["pl_kernels"].values()} == {260e6}
    # PS orchestrated: every frame is a host run, its control included
    assert sysj["orchestration"] == "per-run" and sysj["control_ns"] > 0
    assert sysj["samples_per_s"] == pytest.approx(1e9 / sysj["latency_ns"])


def test_the_model_reads_the_movers_ii_from_the_hls(monkeypatch):
    from aieflow.perf import system

    d, _ = build_design("chain-vck190")
    files = dict(d.files)
    perf = _json(d)["performance"]
    base = system.for_project("chain", files, perf, d.device)
    files["pl/mm2s.cpp"] = files["pl/mm2s.cpp"].replace("II = 1", "II = 3")
    slow = system.for_project("chain", files, perf, d.device)
    m0 = [m for m in base.movers if m.direction == "mm2s"][0]
    m1 = [m for m in slow.movers if m.direction == "mm2s"][0]
    assert (m0.ii, m1.ii) == (1, 3)
    assert m1.busy_ns() == pytest.approx(3 * m0.busy_ns())
    assert np.isfinite(slow.interval_ns) and slow.interval_ns >= base.interval_ns
