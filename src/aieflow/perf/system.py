"""System-level performance: a design as a user measures it on the board, DDR to DDR (issue 21, item 1).

The array model (``estimate``) stops at the PLIOs.  Around it the board adds:

- **host / XRT control**: the host program (``templates/system/host.cpp.j2``, the thesis and GEMM
  hosts alike) starts one ``xrt::run`` per PL kernel it controls and the graph, one after the
  other, then waits for them; its clock reads start to wait;
- **DDR <-> PL data movers** through the NoC: the HLS ``mm2s`` / ``s2mm`` kernels aieflow writes
  (``pl/mm2s.cpp``, ``pl/s2mm.cpp``): one PLIO-wide word per ``PIPELINE II`` PL cycles, ``words``
  trip count (``host/plio_ports.h``: values per graph iteration, their type, the PLIO width), the
  first read and the last write each a memory round trip;
- **PL kernels** with their initiation interval and trip counts read from the generated HLS code
  (the recurrent FSM, the thesis CNN's untile / tanh / im2col / pixel-shuffle kernels, the GEMM
  movers);
- **PS-orchestrated pipelines** (the ESPCN thesis flow, ``espcn-super-resolution.md``): one frame
  per host run, single-buffered windows, so every frame pays the control and the next waits.

Nothing here is fitted: every constant below names its public source or says "assumed" and why.
No published DDR-to-DDR figure is checked (the specs hold them back), so the ``system`` band of
``perf/bands.py`` stays "no band".  ``docs/performance.md`` section 7 explains the stages.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..devices import Device

# ----------------------------------------------------------------------------- constants (sourced)

# Assumed (public measurements on other XRT platforms, no Versal-embedded figure found):
# starting one xrt::run (set the arguments, write the command, kick the CU) costs the host ~17 us
# once warm (Xilinx/XRT issue #6601: "run::run + run::start" 16-17 us after the first two calls);
# an empty kernel's whole start-to-wait round trip is ~45 us (Xilinx/XRT issue #9018 / mlir-aie
# #2381), of which the part after the start (completion interrupt and the waiting thread waking
# up) is the rest, 45 - 17 = 28 us.  The runs are started one after the other by one host thread
# (host.cpp), so the starts add; the completions of concurrent runs overlap (one wake-up counted).
XRT_START_NS = 17_000.0
XRT_WAIT_NS = 28_000.0

# UG1399 (Vitis HLS, "Controlling AXI4 Burst Behavior" / "Latency"): HLS schedules an m_axi read
# or write assuming 64 kernel cycles from the burst request to the first data (read) or from the
# last data to the response (write); used as the mover's memory round trip, in PL cycles.
M_AXI_LATENCY_CYCLES = 64

# PG313 (Versal NoC and integrated memory controller), "Physical Link (Raw) Bandwidth", NoC clock
# 1000 MHz (-2 speed grades, the boards' published results): a NoC link carries 16.0 GB/s of read
# responses and 15.06 GB/s of writes (256-byte transfers).  Each mover is one AXI master, so one
# NoC master unit (NMU) and link: its ceiling.
NOC_READ_BYTES_PER_S = 16.0e9
NOC_WRITE_BYTES_PER_S = 15.06e9

# Assumed: the movers share one 64-bit DDR4-3200 interface (25.6 GB/s peak, reads and writes
# together).  The boards' memory configurations are not in the specs; this is the slowest DDR4
# interface the Versal integrated memory controller drives at full width (PG313), so it errs on the
# slow side for designs whose movers together approach it.
DDR_BYTES_PER_S = 25.6e9

# Assumed: the data movers' pipeline depth besides the memory round trip (address, read, stream
# write), PL cycles; a few registers in a II = 1 loop.
MOVER_DEPTH_CYCLES = 4

SOURCES: Mapping[str, str] = {
    "XRT_START_NS": "assumed from Xilinx/XRT issue #6601 (xrt::run start 16-17 us warm, Alveo U25)",
    "XRT_WAIT_NS": "assumed: 45 us empty-kernel round trip (Xilinx/XRT #9018, mlir-aie #2381) minus the start",
    "M_AXI_LATENCY_CYCLES": "UG1399: Vitis HLS default m_axi latency, 64 kernel cycles",
    "NOC_READ_BYTES_PER_S": "PG313 Raw Link Physical Bandwidth, 1000 MHz NoC: 16.0 GB/s read",
    "NOC_WRITE_BYTES_PER_S": "PG313 Raw Link Physical Bandwidth, 1000 MHz NoC: 15.06 GB/s write (256 B)",
    "DDR_BYTES_PER_S": "assumed: one 64-bit DDR4-3200 interface (25.6 GB/s), board memory not in the specs",
    "MOVER_DEPTH_CYCLES": "assumed: registers of a II = 1 copy loop",
}

_II = re.compile(r"PIPELINE\s+II\s*=\s*(\d+)")
_NK = re.compile(r"^nk\s*=\s*(\w+):(\d+)", re.M)
_TYPE_BITS = {"std::int8_t": 8, "std::uint8_t": 8, "std::int16_t": 16, "std::uint16_t": 16, "std::int32_t": 32,
              "std::uint32_t": 32, "std::int64_t": 64, "std::uint64_t": 64, "float": 32, "aieflow_io::bf16": 16,
              "aieflow_io::fp16": 16}


def pipeline_iis(text: str) -> list[int]:
    """Every ``PIPELINE II = n`` of an HLS source (pragma or ``_Pragma`` macro), in order."""
    return [int(m) for m in _II.findall(text)]


def pipeline_ii(text: str, what: str) -> int:
    """The one initiation interval an HLS source declares (its loops' largest); an error if none."""
    iis = pipeline_iis(text)
    if not iis:
        raise ValueError(f"{what}: no 'PIPELINE II' in the generated HLS code")
    return max(iis)


def instances(cfg: str) -> dict[str, int]:
    """``nk=<kernel>:<count>`` of a ``system.cfg``: the PL kernel instances v++ links."""
    return {k: int(n) for k, n in _NK.findall(cfg)}


@dataclass(frozen=True)
class Mover:
    """One DDR <-> PLIO data mover instance."""

    name: str
    direction: str  # "mm2s" (DDR -> array) or "s2mm" (array -> DDR)
    words_per_iteration: int  # PLIO-wide stream beats per graph iteration (the HLS loop's trip count)
    word_bits: int
    ii: int  # PL cycles per word (the HLS pipeline's II)
    clock_hz: float

    @property
    def bytes_per_iteration(self) -> int:
        return self.words_per_iteration * self.word_bits // 8

    def busy_ns(self) -> float:
        """Time per iteration: the slower of its II-bound loop and its NoC link."""
        loop = self.words_per_iteration * self.ii / self.clock_hz
        noc = self.bytes_per_iteration / (NOC_READ_BYTES_PER_S if self.direction == "mm2s" else NOC_WRITE_BYTES_PER_S)
        return 1e9 * max(loop, noc)

    def latency_ns(self) -> float:
        """The memory round trip before the first word (read) or after the last (write response)."""
        return 1e9 * (M_AXI_LATENCY_CYCLES + MOVER_DEPTH_CYCLES) / self.clock_hz


@dataclass(frozen=True)
class PLKernel:
    """A PL (HLS) kernel beside the movers: its II and trip count per iteration, as generated."""

    name: str
    ii: int
    trips_per_iteration: int | None  # None: free-running, its time is inside the array model
    clock_hz: float
    host_started: bool  # an ap_ctrl kernel the host starts each run (not ap_ctrl_none)

    def busy_ns(self) -> float:
        return 1e9 * (self.trips_per_iteration or 0) * self.ii / self.clock_hz


@dataclass(frozen=True)
class SystemStage:
    name: str
    kind: str  # "host", "mover", "ddr", "array", "pl"
    ns: float
    on: str  # "latency", "interval" or "both": which figure the stage is a term of
    note: str

    def to_json(self) -> dict[str, Any]:
        return {"ns": self.ns, "kind": self.kind, "on": self.on, "note": self.note}


@dataclass(frozen=True)
class SystemPerformance:
    latency_ns: float  # one host run of one iteration: start of the first xrt::run -> end of the last wait
    interval_ns: float  # steady state per graph iteration (per frame / per GEMM call where each is one host run)
    control_ns: float  # host / XRT time per host run (starts + one wake-up)
    samples_per_iteration: int
    ops_per_iteration: float
    bound: str
    orchestration: str  # "streamed": one host run, many iterations; "per-run": one iteration per host run
    stages: tuple[SystemStage, ...]
    movers: tuple[Mover, ...]
    pl_kernels: tuple[PLKernel, ...]

    @property
    def throughput_ops_per_s(self) -> float:
        return self.ops_per_iteration / (self.interval_ns * 1e-9)

    @property
    def samples_per_s(self) -> float:
        return self.samples_per_iteration / (self.interval_ns * 1e-9)

    def run_ns(self, iterations: int) -> float:
        """What the host prints for a run of ``iterations`` graph iterations."""
        if self.orchestration == "per-run":
            return iterations * self.latency_ns
        return self.latency_ns + (iterations - 1) * self.interval_ns

    def to_json(self) -> dict[str, Any]:
        from .bands import band

        return {"latency_ns": self.latency_ns, "interval_ns": self.interval_ns, "control_ns": self.control_ns,
                "throughput_ops_per_s": self.throughput_ops_per_s, "samples_per_s": self.samples_per_s,
                "samples_per_iteration": self.samples_per_iteration, "bound": self.bound,
                "orchestration": self.orchestration,
                "breakdown": {s.name: s.to_json() for s in self.stages},
                "movers": len(self.movers), "pl_kernels": {k.name: {"ii": k.ii, "trips": k.trips_per_iteration,
                                                                    "clock_hz": k.clock_hz} for k in self.pl_kernels},
                "error_band": band("system").to_json()}


def text_lines(sj: Mapping[str, Any]) -> list[str]:
    """Summary lines of design.json's ``performance.system``: the figures and their band."""
    from .bands import band

    per = "frame / call (one host run each)" if sj["orchestration"] == "per-run" else "graph iteration"
    return [f"system (DDR to DDR, host and data movers): latency {sj['latency_ns'] / 1e3:,.1f} us, interval "
            f"{sj['interval_ns'] / 1e3:,.2f} us per {per}, {sj['samples_per_s']:,.0f} samples/s, "
            f"{sj['throughput_ops_per_s'] / 1e9:,.2f} GOPS; bound: {sj['bound']}",
            f"  host / XRT control {sj['control_ns'] / 1e3:,.1f} us per run; system band: {band('system').text()}"]


def breakdown_lines(sj: Mapping[str, Any]) -> list[str]:
    """The system stages as report lines ('latency' terms add up to one run, 'interval' terms bound
    the rate)."""
    rows = ["  system stages (DDR to DDR; 'latency' terms add up to one run, 'interval' terms bound the rate):"]
    for name, s in sj["breakdown"].items():
        rows.append(f"    {name:40s} {s['ns']:14,.1f} ns  {s['on']:8s} {s['note']}")
    return rows


# ----------------------------------------------------------------------------- the model


def combine(*, array_latency_ns: float, array_interval_ns: float, samples_per_iteration: int,
            ops_per_iteration: float, movers: list[Mover], pl_kernels: list[PLKernel], graph_runs: int = 1,
            orchestration: str = "streamed", array_note: str = "") -> SystemPerformance:
    """The system figures from the array's and the movers' / PL kernels' ones.

    latency  = host starts + first read's round trip + max(array latency, the movers' streaming)
               + last write's round trip + host wake-up;
    interval = the slowest of the array, each mover, each host-started PL kernel's loops and the
               DDR they share; for a per-run (PS-orchestrated) flow every iteration is one run, so
               the interval is the latency.
    """
    started = graph_runs + len(movers) + sum(k.host_started for k in pl_kernels)
    start_ns = started * XRT_START_NS
    control = start_ns + XRT_WAIT_NS
    ins = [m for m in movers if m.direction == "mm2s"]
    outs = [m for m in movers if m.direction == "s2mm"]
    read_lat = max((m.latency_ns() for m in ins), default=0.0)
    write_lat = max((m.latency_ns() for m in outs), default=0.0)
    stream_ns = max((m.busy_ns() for m in ins), default=0.0) + max((m.busy_ns() for m in outs), default=0.0)
    ddr_ns = 1e9 * sum(m.bytes_per_iteration for m in movers) / DDR_BYTES_PER_S
    data_ns = max(array_latency_ns, stream_ns, ddr_ns)
    stages = [
        SystemStage("host: start runs", "host", start_ns, "latency",
                    f"{started} xrt::run starts ({graph_runs} graph, {len(movers)} movers, "
                    f"{sum(k.host_started for k in pl_kernels)} PL kernels) x {XRT_START_NS / 1e3:g} us"),
        SystemStage("ddr: first read", "ddr", read_lat, "latency",
                    f"m_axi round trip {M_AXI_LATENCY_CYCLES} + {MOVER_DEPTH_CYCLES} PL cycles" if ins else "no mm2s"),
        SystemStage("array", "array", array_latency_ns, "latency", array_note or "the array model's latency"),
    ]
    if data_ns > array_latency_ns:
        stages.append(SystemStage("movers: streaming beyond the array", "mover", data_ns - array_latency_ns, "latency",
                                  "the movers / DDR take longer than the array's own PLIO stages"))
    stages += [
        SystemStage("ddr: last write", "ddr", write_lat, "latency",
                    f"m_axi write response {M_AXI_LATENCY_CYCLES} + {MOVER_DEPTH_CYCLES} PL cycles" if outs else "no s2mm"),
        SystemStage("host: wait", "host", XRT_WAIT_NS, "latency", "completion and the host thread waking up"),
    ]
    latency = sum(s.ns for s in stages)
    terms = [("array", array_interval_ns, "array")]
    for m in movers:
        terms.append((f"{m.direction}: {m.name}", m.busy_ns(), "mover"))
        stages.append(SystemStage(f"{m.direction}: {m.name}", "mover", m.busy_ns(), "interval",
                                  f"{m.words_per_iteration} words x II {m.ii} at {m.clock_hz / 1e6:g} MHz "
                                  f"({m.word_bits}-bit), NoC link at most "
                                  f"{(NOC_READ_BYTES_PER_S if m.direction == 'mm2s' else NOC_WRITE_BYTES_PER_S) / 1e9:g} GB/s"))
    for k in pl_kernels:
        if k.trips_per_iteration is not None:
            terms.append((f"pl: {k.name}", k.busy_ns(), "pl"))
            stages.append(SystemStage(f"pl: {k.name}", "pl", k.busy_ns(), "interval",
                                      f"{k.trips_per_iteration} trips x II {k.ii} at {k.clock_hz / 1e6:g} MHz"))
    if movers:
        terms.append(("ddr", ddr_ns, "ddr"))
        stages.append(SystemStage("ddr: shared", "ddr", ddr_ns, "interval",
                                  f"{sum(m.bytes_per_iteration for m in movers):,} B per iteration at "
                                  f"{DDR_BYTES_PER_S / 1e9:g} GB/s"))
    name, interval, kind = max(terms, key=lambda t: t[1])
    if orchestration == "per-run":
        interval, bound = latency, f"host-orchestrated runs ({100 * control / latency:.0f}% control)"
    else:
        bound = f"{kind} ({name})"
    return SystemPerformance(latency, interval, control, samples_per_iteration, ops_per_iteration, bound, orchestration,
                             tuple(stages), tuple(movers), tuple(pl_kernels))


_RUN_PACK = re.compile(r"void (pack_[ab])\(int \w+, int \w+\) \{ run_mover\(")


def gemm_host_runs(host: str, plan: Any, epilogue_runs: int = 0) -> dict[str, tuple[int, int, int]]:
    """The ``xrt::run``s of one call of the generated GEMM host (``host/gemm_loops.h`` around
    ``host/host.cpp`` or ``host/dense_host.cpp``), read from the host's code and the plan's loop
    counts: {what: (host round trips, starts per round trip, waits per round trip)}.

    ``pack_b`` / ``pack_a`` are one mover run each, started and waited for (``run_mover(..).wait()``)
    where the host's code says so (not for the memory-tile design, nor ``pack_b`` when Br reaches
    the tiles by GMIO: the host packs Bc itself); every (jc, pc, ic) block starts the write-back,
    the mover and the graph and waits for all three (their completions overlap: one wake-up);
    the streamed Dense layer's epilogue is one more run after the loops."""
    runs = set(_RUN_PACK.findall(host))
    outer = plan.n_jc * plan.n_pc
    blocks = outer * plan.n_ic
    out = {"block runs": (blocks, 3, 1)}  # the write-back, the mover and the graph
    if "pack_b" in runs:
        out["pack_b runs"] = (outer, 1, 1)
    if "pack_a" in runs:
        out["pack_a runs"] = (blocks, 1, 1)
    if epilogue_runs:
        out["epilogue run"] = (epilogue_runs, 1, 1)
    return out


def gemm_ddr_bytes(plan: Any, host_runs: Mapping[str, Any]) -> int:
    """Bytes one call moves through DDR by the five loops: the packing runs read a block and write
    it packed, every block streams its Ac and Bc and reads and writes its C block (the write-back
    adds into C)."""
    b, t = plan.blocks, plan.dtype.bytes
    c = {"int32": 4, "int64": 8, "float32": 4}[plan.output.name]
    outer, blocks = plan.n_jc * plan.n_pc, plan.n_jc * plan.n_pc * plan.n_ic
    total = blocks * ((b.mc * b.kc + b.kc * b.nc) * t + 2 * b.mc * b.nc * c)
    if "pack_b runs" in host_runs:
        total += outer * 2 * b.kc * b.nc * t
    if "pack_a runs" in host_runs:
        total += blocks * 2 * b.mc * b.kc * t
    return total


def gemm_flow(files: Mapping[str, str], plan: Any, array_latency_ns: float, ops: float, epilogue_bytes: int,
              note: str, samples: int = 1) -> SystemPerformance:
    """One call of a GEMM (or streamed Dense layer) as its generated host runs it: the array
    model's time (its PL movers, GMIO and DDR traffic already in it) plus what the host adds, the
    control of every ``xrt::run`` the five loops start and wait for, one after the other; the DDR
    interface the call's traffic shares bounds it too (a stage only where it is slower)."""
    host = files.get("host/dense_host.cpp") or files.get("host/host.cpp", "")
    runs = gemm_host_runs(host, plan, 1 if epilogue_bytes else 0)
    stages = []
    control = 0.0
    for what, (n, starts, waits) in runs.items():
        ns = n * (starts * XRT_START_NS + waits * XRT_WAIT_NS)
        control += ns
        stages.append(SystemStage(f"host: {what}", "host", ns, "latency",
                                  f"{n} x ({starts} start{'s' if starts > 1 else ''}"
                                  f"{' (write-back, mover, graph)' if starts > 1 else ''} x {XRT_START_NS / 1e3:g} us + "
                                  f"{waits} wake-up x {XRT_WAIT_NS / 1e3:g} us), one after the other"))
    ddr_bytes = gemm_ddr_bytes(plan, runs) + epilogue_bytes
    ddr_ns = 1e9 * ddr_bytes / DDR_BYTES_PER_S
    stages.append(SystemStage("array", "array", array_latency_ns, "latency", note))
    if ddr_ns > array_latency_ns:
        stages.append(SystemStage("ddr: beyond the model", "ddr", ddr_ns - array_latency_ns, "latency",
                                  "the shared DDR interface is slower than the model's own DDR figures"))
    latency = sum(s.ns for s in stages)
    stages.append(SystemStage("ddr: shared", "ddr", ddr_ns, "interval",
                              f"{ddr_bytes:,} B per call at {DDR_BYTES_PER_S / 1e9:g} GB/s (packing, Ac / Bc "
                              f"streams, C read and written per block{', the epilogue' if epilogue_bytes else ''})"))
    bound = f"host-orchestrated runs ({100 * control / latency:.0f}% control)"
    return SystemPerformance(latency, latency, control, samples, ops, bound, "per-run", tuple(stages), (), ())


# ----------------------------------------------------------------------------- per kind, from the project


_PORT = re.compile(r"struct (\w+) \{\s*typedef ([\w:]+) type;\s*static constexpr const char\* cu = \"(\w+)\";"
                   r".*?per_iteration = (\d+);", re.S)


def plio_movers(files: Mapping[str, str], device: Device) -> tuple[list[Mover], int]:
    """The mm2s / s2mm instances of a project written by ``vitis.system_files`` and the samples per
    graph iteration: trip counts from ``host/plio_ports.h`` (what ``host.cpp`` passes as ``words``),
    the II from ``pl/mm2s.cpp`` / ``pl/s2mm.cpp``."""
    ports = files["host/plio_ports.h"]
    bits = int(re.search(r"PLIO_BITS = (\d+)", ports).group(1))
    samples = int(re.search(r"SAMPLES_PER_ITERATION = (\d+)", ports).group(1))
    ii = {k: pipeline_ii(files[f"pl/{k}.cpp"], f"pl/{k}.cpp") for k in ("mm2s", "s2mm")}
    movers = []
    for var, ctype, cu, per in _PORT.findall(ports):
        kind = cu.rsplit("_", 1)[0]
        words = math.ceil(int(per) * _TYPE_BITS[ctype] / bits)
        movers.append(Mover(var, kind, words, bits, ii[kind], device.pl_clock_hz))
    return movers, samples


def _ops_per_iteration(perf: Mapping[str, Any]) -> float:
    return float(perf["throughput_ops_per_s"]) * float(perf["interval_ns"]) * 1e-9


def for_project(kind: str, files: Mapping[str, str], perf: Mapping[str, Any], device: Device,
                info: Mapping[str, Any] | None = None) -> SystemPerformance | None:
    """The system figures of a design of ``kind`` from its project ``files`` and its array
    ``perf`` (design.json's common keys); ``info``: what a kind's project does not spell out
    (recurrent: bytes per sequence in and out; thesis: PL kernels' trip counts and clocks).
    None for the kinds without a system model (segmented: :data:`NOT_MODELLED`)."""
    info = info or {}
    ops = _ops_per_iteration(perf)
    lat, itv = float(perf["latency_ns"]), float(perf["interval_ns"])
    if kind == "cnn" and "pl/thesis_pl.cpp" in files:  # before plio_ports.h: the thesis's PL loops
        host = files["host/host.cpp"]
        ii = pipeline_ii(files["pl/thesis_pl.h"], "pl/thesis_pl.h")
        controlled = "ap_ctrl_none" not in files["pl/thesis_pl.cpp"]  # an s_axilite start / done interface
        pls = [PLKernel(k, ii, None, info["pl_clock_hz"][k], controlled and f'"{k}:{{{k}_0}}"' in host)
               for k in instances(files["system.cfg"]) if k in info["pl_clock_hz"]]  # not the mm2s / s2mm movers
        movers = [Mover(f"in{i}", "mm2s", info["in_words"], 128, pipeline_ii(files["pl/mm2s.cpp"], "pl/mm2s.cpp"),
                        info["mover_clock_hz"]) for i in range(info["plio_in"])]
        movers.append(Mover("out", "s2mm", info["out_words"], 128, pipeline_ii(files["pl/s2mm.cpp"], "pl/s2mm.cpp"),
                            info["mover_clock_hz"]))
        per_run = "graph.run(1);" in host  # the host starts every run once per frame (vitis.system_files per_run)
        return combine(array_latency_ns=lat, array_interval_ns=itv, samples_per_iteration=1, ops_per_iteration=ops,
                       movers=movers, pl_kernels=pls, orchestration="per-run" if per_run else "streamed",
                       array_note="the thesis frame (cnn/perf.estimate_thesis, its stage graph): layer 0's windows, the AIE kernels "
                                  "and the PL kernels' sequential loops on the frame's critical path")
    if kind == "recurrent":
        fsm_src = "\n".join(t for p, t in files.items()  # the head (rnn_cell.h) and the merge loop (rnn_fsm.h)
                           if p.endswith((".h", ".cpp")) and ("RNN_HEAD_PIPELINE" in t or "fsm_step" in t))
        cfg = instances(files.get("system.cfg", ""))
        fsms = [PLKernel(k, max(pipeline_iis(fsm_src), default=1), None, device.pl_clock_hz, False)
                for k in cfg if k.startswith("rnn_fsm")]
        movers = [Mover("x", "mm2s", math.ceil(info["in_bytes"] * 8 / 64), 64, 1, device.pl_clock_hz),
                  Mover("y", "s2mm", math.ceil(info["out_bytes"] * 8 / 64), 64, 1, device.pl_clock_hz)]
        return combine(array_latency_ns=lat, array_interval_ns=itv, samples_per_iteration=1, ops_per_iteration=ops,
                       movers=movers, pl_kernels=fsms, array_note="one sequence through the layers (FSM included)")
    if "host/plio_ports.h" in files:  # chain, DAG, CNN stream: vitis.system_files (the recurrent and thesis projects have
        # one too: their own branches above charge their PL kernels)
        movers, samples = plio_movers(files, device)
        return combine(array_latency_ns=lat, array_interval_ns=itv, samples_per_iteration=samples,
                       ops_per_iteration=ops, movers=movers, pl_kernels=[])
    if kind in ("gemm", "streamed_dense"):
        return gemm_flow(files, info["plan"], lat, ops, info.get("epilogue_bytes", 0),
                         "the streamed Dense model: weights from DDR (packing), the GEMM, the epilogue's DDR pass"
                         if kind == "streamed_dense" else "the GEMM model: PL movers, GMIO / DDR and the array (one call)",
                         info.get("samples", 1))
    return None


def of_design(design: Any, kind: str, perf: Mapping[str, Any]) -> SystemPerformance | None:
    """:func:`for_project` of a compiled design (its ``files``) and its array ``perf``; None when
    the kind has no system model or the project is not rendered yet."""
    files = getattr(design, "files", None)
    if not files:
        return None
    info: dict[str, Any] = {}
    if kind == "recurrent":  # 32-bit stream words per value (rnn_fsm.h), one sequence in and out
        g = design.graph
        info = {"in_bytes": 4 * sum(g.tensors[t].size for t in g.inputs),
                "out_bytes": 4 * sum(g.tensors[t].size for t in g.outputs)}
    elif kind == "gemm":
        info = {"plan": design.plan}
    elif kind == "streamed_dense":
        p = design.plan  # the epilogue kernel's DDR traffic: C read, bias read, Y written (gemm/dense.py)
        c_bytes = {"int32": 4, "int64": 8, "float32": 4}[p.gemm.output.name]
        info = {"plan": p.gemm, "epilogue_bytes": p.batch * p.out_features * (c_bytes + p.epilogue.y_bytes)
                + 4 * p.out_features, "samples": p.batch}
    elif kind == "cnn" and "pl/thesis_pl.cpp" in files:
        from ..cnn.emit import stage_idents

        plan = design.plan
        idents = stage_idents(plan.stages)
        first = plan.layers[0]
        in_bytes = first.k_pad * first.n * 4 / first.plio_in  # per input PLIO: its N blocks (cnn/perf.py)
        out_values = int(math.prod(plan.stages[-1].out_shape))
        info = {"pl_clock_hz": {f"{lay.pl_kernel}_{idents[i]}": lay.pl_clock_hz for i, lay in enumerate(plan.layers)},
                "mover_clock_hz": plan.mover_clock_hz, "plio_in": first.plio_in,
                "in_words": math.ceil(in_bytes / 16), "out_words": math.ceil(out_values * 4 / 16)}
    device = design.device if hasattr(design, "device") else design.plan.device
    return for_project(kind, files, perf, device, info)


def attach(perf: dict[str, Any], design: Any, kind: str) -> dict[str, Any]:
    """``perf`` (design.json's ``performance``) with ``system`` added where the kind has one."""
    s = of_design(design, kind, perf)
    if s is not None:
        perf["system"] = s.to_json()
    return perf


NOT_MODELLED: Mapping[str, str] = {
    "segmented": "each segment is a project and a device image of its own (the one host, host/segments_host.cpp, "
                 "loads them one after the other and moves the cut tensors between them), so there is no one "
                 "board image to model",
}


def _system_json(design: Any) -> tuple[str, Mapping[str, Any] | None]:
    j = design.to_json()
    return str(j.get("kind", "?")), j["performance"].get("system")


def design_lines(design: Any, breakdown: bool = False) -> list[str]:
    """Summary (and with ``breakdown`` report) lines of a design's system figures, or the line that
    its kind has none ("system: not modelled for <kind>" and why)."""
    if not getattr(design, "files", None):
        return []
    kind, sj = _system_json(design)
    if sj is None:
        why = NOT_MODELLED.get(kind)
        return [f"  system: not modelled for {kind}" + (f": {why}" if why else "")]
    lines = ["  " + line for line in text_lines(sj)]
    return lines + (breakdown_lines(sj) if breakdown else [])


def report_lines(design: Any) -> list[str]:
    """What every kind's ``report()`` adds to its summary: the system stage table (the summary has
    the figures already); nothing for a kind without a system model (its summary says so)."""
    if not getattr(design, "files", None):
        return []
    _, sj = _system_json(design)
    return breakdown_lines(sj) if sj is not None else []
