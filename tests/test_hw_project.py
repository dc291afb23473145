"""Hardware-ready Vitis projects (issue 20) of the Dense chain, DAG, CNN (stream mapping) and recurrent (row-wise
hybrid with PL FSMs, column-wise, compact) kinds: the one Makefile
contract (``make -n hw`` shows v++ compile, link with system.cfg and package), system.cfg naming
only the project's PL kernels and connecting every PLIO, every data file the graph reads present,
the XRT host compiled and linked against the real XRT (Debian's libxrt-dev), the PL movers compiled
as HLS C simulation against Xilinx's open ap_types (the hls4ml package ships them), and the x86
system run (host data -> mm2s C sim -> graph on the shim -> s2mm C sim) bit-exact with ``predict``,
run by ``make`` without a virtual environment, in a copy of the project moved elsewhere."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hw_tools import (
    dry_run_lines,
    make,
    make_host,
    needs_ap_types,
    needs_xrt,
    no_venv_env,
)

import aieflow
from aieflow.model_zoo import gru_classifier, qdq_mlp, residual_cnn, residual_mlp, torch_mlp
from aieflow.recurrent.design import RecurrentDesign, compile_recurrent
from aieflow.recurrent.plan import RecurrentOptions
from aieflow.vitis import ap_types_include

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(shutil.which("g++") is None or shutil.which("make") is None,
                                 reason="needs g++ and make")]


SAMPLES = 37  # not a whole number of batches: every sample is written, the last iteration padded


def _chain_multi_plio():
    # AIE1, two cascade columns in and two rows out: two mm2s and two s2mm instances
    model = qdq_mlp([64, 48, 32], seed=0)
    x = np.random.default_rng(1).standard_normal((SAMPLES, 64)).astype(np.float32)
    config = {"batch": 8, "layers": {"fc0": {"parallelism": {"cas_len": 2, "cas_num": 2}},
                                     "fc1": {"parallelism": {"cas_len": 2, "cas_num": 2}}}}
    return aieflow.compile(model, device="vck190", example_input=x, config=config), x


def _chain_float():
    model = torch_mlp([20, 24, 6], seed=2)
    x = np.random.default_rng(2).standard_normal((SAMPLES, 20)).astype(np.float32)
    return aieflow.compile(model, device="vek280", example_input=x, config={"precision": "bf16", "batch": 4}), x


def _dag():
    x = np.random.default_rng(3).standard_normal((SAMPLES, 16)).astype(np.float32)
    return aieflow.compile(residual_mlp(), device="vek280", example_input=x, config={"batch": 8}), x


CNN_FRAMES = 5  # two replicas: three graph iterations, the last one padded with a zero frame


def _cnn():
    # 128-bit PLIOs: one input PLIO per replica, one output PLIO per replica and last-stage row
    x = np.random.default_rng(4).standard_normal((CNN_FRAMES, 3, 8, 8)).astype(np.float32)
    return aieflow.compile(residual_cnn(), device="vck190", example_input=x, calibration=x,
                           config={"precision": "int8", "cnn": {"replicas": 2}}), x


ROWS_FRAMES = 3  # the rows mapping: one frame per graph iteration, rows streamed through one kernel per stage


def _rows_bench():
    """benchmarks/cnn_rows.py, where the rows models are defined once (test_cnn_rows loads it too)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cnn_rows.py"
    spec = importlib.util.spec_from_file_location("cnn_rows_benchmark", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cnn_rows():
    # VEK280: the decoder's concat meets in a memory-tile row buffer (the core has one input stream port);
    # one input PLIO (frames as rows, each row channel by channel) and one output PLIO
    x = np.random.default_rng(8).standard_normal((ROWS_FRAMES, 3, 16, 16)).astype(np.float32)
    return aieflow.compile(_rows_bench().TinyUNet().eval(), device="vek280", example_input=x, calibration=x,
                           config={"precision": "int8", "cnn": {"mapping": "rows"}}), x


RNN_SAMPLES = 3  # sequences: the recurrent graph is free-running, one sample after the other


def _rnn_stacked_hybrid():
    # two GRU layers, each aggregated by its PL FSM: layer 0's FSM feeds layer 1's x PLIO, layer 1's
    # FSM drains into s2mm; 3 outputs: the FSM's 64-bit beats carry a zero after them
    x = np.random.default_rng(5).standard_normal((RNN_SAMPLES, 4, 3)).astype(np.float32)
    return compile_recurrent(gru_classifier(3, 6, 3, layers=2, seed=1), "vck190", x, {"precision": "int16"}, x,
                             RecurrentOptions(distribution="row", aggregation="hybrid")), x


def _rnn_column_fp32():
    import torch

    torch.manual_seed(3)
    net = torch.nn.LSTM(5, 8, batch_first=True).eval()

    class Last(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = net

        def forward(self, x):
            return self.rnn(x)[0]  # every step's h

    x = np.random.default_rng(6).standard_normal((RNN_SAMPLES, 3, 5)).astype(np.float32)
    return compile_recurrent(Last().eval(), "vck190", x, {"precision": "fp32"}, x,
                             RecurrentOptions(distribution="column", aggregation="aie", cas_len=2, input_cas_len=2)), x


def _rnn_compact():
    x = np.random.default_rng(7).standard_normal((RNN_SAMPLES, 5, 4)).astype(np.float32)
    return compile_recurrent(gru_classifier(4, 8, 3, seed=2), "vek280", x, {"precision": "int16"}, x,
                             RecurrentOptions(distribution="compact")), x


CASES = {"chain_vck190_int8": _chain_multi_plio, "chain_vek280_bf16": _chain_float, "dag_vek280": _dag,
         "cnn_vck190_int8": _cnn, "cnn_rows_vek280_int8": _cnn_rows, "rnn_gru2_hybrid_int16": _rnn_stacked_hybrid, "rnn_lstm_column_fp32": _rnn_column_fp32,
         "rnn_gru_compact_vek280": _rnn_compact}


def _samples(design) -> int:
    return ROWS_FRAMES if _is_rows(design) else CNN_FRAMES if _is_cnn(design) else RNN_SAMPLES if _is_rnn(design) \
        else SAMPLES


def _is_rnn(design) -> bool:
    return isinstance(design, RecurrentDesign)


def _pl_sources(proj: Path) -> dict[str, str]:
    return {str(f.relative_to(proj)): f.read_text() for f in sorted((proj / "pl").glob("*.cpp"))}


def _nk(proj: Path) -> dict[str, str]:
    """system.cfg's kernel instances: instance -> kernel."""
    out = {}
    for line in (proj / "system.cfg").read_text().splitlines():
        if line.startswith("nk="):
            kernel, count, cus = line[3:].split(":")
            assert int(count) == len(cus.split("."))
            out.update(dict.fromkeys(cus.split("."), kernel))
    return out


def _is_cnn(design) -> bool:
    from aieflow.cnn.design import CnnDesign

    return isinstance(design, CnnDesign)


def _is_rows(design) -> bool:
    return _is_cnn(design) and design.plan.mapping == "rows"


@pytest.fixture(scope="module", params=list(CASES))
def project(request, tmp_path_factory):
    design, x = CASES[request.param]()
    out = tmp_path_factory.mktemp(request.param) / "design"
    design.save(out)
    return design, x, out / "project"


def _plios(graph_h: str) -> tuple[dict[str, str], dict[str, str]]:
    """Input and output PLIOs of graph.h: name -> data file."""
    pat = r'adf::{}_plio::create\("(\w+)", adf::plio_\d+_bits, "([^"]+)"\)'
    return dict(re.findall(pat.format("input"), graph_h)), dict(re.findall(pat.format("output"), graph_h))




def test_make_n_hw_shows_compile_link_and_package(project):
    _, _, proj = project
    r = make(proj, "-n", "hw", "PLATFORM=/some/x.xpfm")
    assert r.returncode == 0, r.stderr
    lines, line = dry_run_lines(r)

    line("v++ -c --mode aie", "--target hw", "--platform /some/x.xpfm", "--config aie.cfg", "-o libadf.a")
    kernels = set(_nk(proj).values())
    assert {"mm2s", "s2mm"} <= kernels
    link = line("v++ -l", "--config system.cfg")
    assert "libadf.a" in link
    for k in kernels:
        line("v++ -c", "--target hw", f"-k {k}", "pl/", f"build.hw/{k}.xo")
        assert f"build.hw/{k}.xo" in link, k
    line("v++ -p", "--target hw", "build.hw/design.xsa", "libadf.a")
    assert lines.index(line("v++ -l")) < lines.index(line("v++ -p"))
    # hw_emu is the same chain for TARGET=hw_emu
    r = make(proj, "-n", "hw_emu", "PLATFORM=/some/x.xpfm")
    assert r.returncode == 0 and "v++ -l --target hw_emu" in r.stdout and "v++ -p --target hw_emu" in r.stdout
    # without PLATFORM: a clear error naming the variable and the board's platform
    r = make(proj, "-n", "hw")
    assert r.returncode != 0 and "set PLATFORM=/path/to/" in r.stdout + r.stderr and ".xpfm" in r.stdout + r.stderr
    readme = (proj / "README.md").read_text()
    for command in ("make x86sim PLATFORM=", "make aiesim PLATFORM=", "make hw_emu PLATFORM=", "make hw PLATFORM=",
                    "make package PLATFORM=", "make run", "make shim-run", "make system-run", "make clean"):
        assert f"`{command}" in readme, command
    assert "Not checked:" in readme
    for target in ("x86sim", "aiesim"):
        r = make(proj, "-n", target, "PLATFORM=/p.xpfm", "ITERATIONS=7")
        assert r.returncode == 0 and "-DAIEFLOW_ITERATIONS=7" in r.stdout, r.stdout + r.stderr


def _ports_of(source: str, kernel: str) -> dict[str, bool]:
    """The stream arguments of ``extern "C" void kernel(...)``: name -> is an array (ports name_0, name_1, ...)."""
    m = re.search(rf'extern "C" void {kernel}\(([^)]*)\)', source)
    assert m, kernel
    return {name: bool(arr) for name, arr in re.findall(r"hls::stream<[^>]*>>?\s*&?\s*(\w+)\s*(\[[^\]]*\])?", m.group(1))}


def test_system_cfg_defines_its_kernels_and_connects_every_plio(project):
    design, _, proj = project
    plio_in, plio_out = _plios((proj / "src/graph.h").read_text())
    assert plio_in and plio_out
    cfg = (proj / "system.cfg").read_text().splitlines()
    assert "[connectivity]" in cfg
    sources = _pl_sources(proj)
    instances = _nk(proj)
    ports = {}
    for kernel in set(instances.values()):  # each kernel defined by exactly one of the project's PL sources
        src = [t for t in sources.values() if re.search(rf'extern "C" void {kernel}\(', t)]
        assert len(src) == 1, kernel
        ports[kernel] = _ports_of(src[0], kernel)
    assert ports["mm2s"] == {"s": False} and ports["s2mm"] == {"s": False}

    def endpoint(e: str, into: bool) -> str:
        """A connection's end: the graph's PLIO (of the right direction) or a stream port of an instance."""
        cu, port = e.split(".", 1)
        if cu == "ai_engine_0":
            assert port in (plio_in if into else plio_out), e
            return e
        kernel = instances[cu]
        assert port in ports[kernel] or (re.fullmatch(r"(\w+)_\d+", port) and ports[kernel].get(port.rsplit("_", 1)[0])), e
        return e

    connects = [s.split("=", 1)[1].split(":") for s in cfg if s.startswith("stream_connect=")]
    ends = [(endpoint(a, False), endpoint(b, True)) for a, b in connects]
    # every PLIO of the graph is connected exactly once, every instance and every one of its stream ports is used
    graph_ends = [e.split(".", 1)[1] for pair in ends for e in pair if e.startswith("ai_engine_0.")]
    assert sorted(graph_ends) == sorted([*plio_in, *plio_out])
    used = {e for pair in ends for e in pair}
    assert len(used) == 2 * len(ends)  # no port drives or drains two streams
    for cu, kernel in instances.items():
        for port, array in ports[kernel].items():
            assert any(e == f"{cu}.{port}" or (array and e.startswith(f"{cu}.{port}_")) for e in used), f"{cu}.{port}"
    # the movers: each mm2s feeds, each s2mm drains; the host opens exactly the movers
    assert all(instances.get(a.split(".")[0]) != "s2mm" for a, _ in connects)
    assert all(instances.get(b.split(".")[0]) != "mm2s" for _, b in connects)
    host_ports = (proj / "host/plio_ports.h").read_text()
    assert sorted(re.findall(r'cu = "(\w+)"', host_ports)) == sorted(c for c, k in instances.items() if k in ("mm2s", "s2mm"))


def _mover_files(proj: Path) -> tuple[set[str], set[str]]:
    """The data files the movers read (input PLIOs fed by mm2s) and the golden files of the s2mm outputs."""
    structs = re.findall(r"struct \w+ \{(.*?)\};", (proj / "host/plio_ports.h").read_text(), re.S)
    ins = [b for b in structs if "golden =" not in b]  # an output port names its golden file (and its own file)
    return ({f for b in ins for f in re.findall(r'file = "([\w.]+)";', b)},
            {g for b in structs for g in re.findall(r'golden = "([\w.]+)";', b)})


def test_every_data_file_the_graph_reads_exists_with_every_sample(project):
    design, x, proj = project
    plio_in, plio_out = _plios((proj / "src/graph.h").read_text())
    fed, golden = _mover_files(proj)
    if _is_rnn(design):  # a hybrid layer's h and merged PLIOs come from / go to its PL FSM, not DDR
        assert fed == {"l0_x.txt"} and golden == {"golden_y.txt"} and (proj / "data/golden_y.txt").is_file()
        assert "data/l0_x.txt" in plio_in.values()
        tokens = (proj / "data/l0_x.txt").read_text().split()
        per = int(re.search(r"per_iteration = (\d+);", (proj / "host/plio_ports.h").read_text()).group(1))
        assert len(tokens) == RNN_SAMPLES * per  # one sample per iteration, every sample written
        assert f"ITERATIONS ?= {RNN_SAMPLES}" in (proj / "Makefile").read_text()
        return
    for f in plio_in.values():
        assert (proj / f).is_file(), f
    for f in plio_out.values():
        assert (proj / Path(f).parent / f"golden_{Path(f).name}").is_file(), f
    # every sample given is written: the inputs hold whole iterations covering all SAMPLES
    batch = (design.plan.replicas if _is_cnn(design) else design.plan.batch) if hasattr(design, "plan") \
        else design.config.batch
    iterations = -(-_samples(design) // batch)
    ports = (proj / "host/plio_ports.h").read_text()
    per_iteration = dict(re.findall(r'file = "([\w.]+)";\n\s+static constexpr unsigned long per_iteration = (\d+);', ports))
    assert set(per_iteration) == {Path(f).name for f in plio_in.values()}
    for f in plio_in.values():
        tokens = (proj / f).read_text().split()
        assert len(tokens) == iterations * int(per_iteration[Path(f).name])
    text = (proj / "src/graph.cpp").read_text()
    assert f"#define AIEFLOW_ITERATIONS {iterations}" in text
    assert f"ITERATIONS ?= {iterations}" in (proj / "Makefile").read_text()


@needs_xrt
def test_host_compiles_and_links_against_xrt(project):
    _, _, proj = project
    r = make_host(proj)
    assert r.returncode == 0, r.stdout + r.stderr
    exe = proj / "host.exe"
    assert exe.is_file()
    for name in ("xrt::device", "xrt::xclbin", "xrt::kernel", "xrt::bo", "xrt::graph"):
        assert name in (proj / "host/host.cpp").read_text()
    r = subprocess.run([str(exe)], capture_output=True, text=True)  # no board: only the usage line
    assert r.returncode != 0 and "usage:" in r.stderr


@needs_ap_types
def test_pl_sources_compile_as_hls_c_simulation(project, tmp_path):
    _, _, proj = project
    ap = ap_types_include()
    flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas", "-Wno-maybe-uninitialized"]
    units = [*_pl_sources(proj), "x86/pl_csim.cpp", *(["x86/fsm_csim.cpp"] if (proj / "x86/fsm_csim.cpp").is_file() else [])]
    assert len(units) >= 3
    for rel in units:
        r = subprocess.run(["g++", *flags, "-isystem", str(ap), f"-I{proj}", f"-I{proj / 'pl'}", f"-I{proj / 'src'}", "-c", str(proj / rel),
                            "-o", str(tmp_path / (Path(rel).stem + ".o"))], capture_output=True, text=True)
        assert r.returncode == 0, f"{rel}:\n{r.stderr}"
    # the Xilinx header is the one used, not aieflow's own shim of it
    assert (ap / "etc" / "ap_private.h").is_file()


def _outputs(design, proj: Path, folder: str, n: int) -> np.ndarray:
    """The output PLIO files of ``folder`` decoded into [n, ...] codes."""
    from aieflow.dag.design import DagDesign
    from aieflow.passes.emit import dense_layers, plio_ports
    from aieflow.verify import _layer_output

    if _is_rnn(design):  # y.txt as s2mm wrote it: a zero after each odd-sized output of a hybrid last layer
        from aieflow.recurrent.design import split_layers

        last = split_layers(design.graph)[0][-1]
        emissions = last.attrs["seq_len"] if last.attrs["return_sequences"] else 1
        fp = last.types.is_float
        vals = np.array((proj / folder / "data/y.txt").read_text().split(), dtype=np.float32 if fp else np.int64)
        per = vals.size // (n * emissions)
        ny = int(np.prod(design.graph.tensors[design.graph.outputs[0]].shape)) // emissions  # values per output
        assert per in (ny, ny + 1) and vals.size == n * emissions * per
        return vals.reshape(n, emissions, per)[:, :, :ny].reshape(n, -1)
    if _is_rows(design):  # one output PLIO out0: frame after frame, rows in order, each row channel by channel
        c, h, w = design.plan.stages[-1].out_shape
        vals = np.array((proj / folder / "data/out0.txt").read_text().split(), dtype=np.float64)
        assert vals.size == n * h * c * w  # one frame per iteration: no padding frame
        return vals.reshape(n, h, c, w).transpose(0, 2, 1, 3)
    if _is_cnn(design):  # frame f: replica f mod R, iteration f div R; out{q}_{r}: row r's channels
        plan = design.plan
        reps, rows = plan.replicas, plan.layers[-1].cas_num
        c, h, w = plan.stages[-1].out_shape
        iterations = -(-n // reps)
        got = np.zeros((iterations * reps, c, h, w))
        for q in range(reps):
            for r in range(rows):
                vals = np.array((proj / folder / f"data/out{q}_{r}.txt").read_text().split(), dtype=np.float64)
                got[q::reps, r * c // rows:(r + 1) * c // rows] = vals.reshape(iterations, c // rows, h, w)
        return got[:n]
    if isinstance(design, DagDesign):
        t = design.graph.tensors[design.graph.outputs[0]].dtype
        text = (proj / folder / "data/out_y.txt").read_text().split()
        vals = np.array(text, dtype=np.float64 if "float" in t.c_type else np.int64)
        rows = -(-n // design.plan.batch) * design.plan.batch  # whole iterations, samples row-major
        pitch = design.plan.out_pitch  # rows padded to whole 32-bit words: the first f of each row
        if pitch:
            f = design.graph.tensors[design.graph.outputs[0]].shape[-1]
            return vals.reshape(rows, -1, pitch)[:n, :, :f].reshape(n, -1)
        return vals.reshape(rows, -1)[:n]
    from aieflow.ops.post import written

    layers = dense_layers(design.graph)
    final = layers[-1]
    texts = [(proj / folder / port["file"]).read_text() for port in plio_ports(layers)[1]]
    iterations = -(-n // final.plan.batch)
    return _layer_output(final.plan, written(design.graph, final)[1], texts, iterations, "output")[:n]


def _moved(proj: Path, tmp_path: Path) -> Path:
    """A copy of the project somewhere else, without its build outputs (no absolute path may point back)."""
    work = tmp_path / "moved" / "p"
    shutil.copytree(proj, work, ignore=shutil.ignore_patterns("system_output", "shim_output", "x86/system", "*.o"))
    assert str(proj) not in (work / "Makefile").read_text()
    return work


@needs_ap_types
def test_system_run_without_a_venv_is_bit_exact_with_predict(project, tmp_path):
    design, x, proj = project
    env = no_venv_env()
    proj = _moved(proj, tmp_path)
    # no venv: make cannot find hls4ml's copy of the ap_types itself and says what to set
    r = make(proj, "system-run", env=env)
    assert r.returncode != 0 and "set AP_TYPES=" in r.stdout + r.stderr
    r = make(proj, "system-run", f"AP_TYPES={ap_types_include()}", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 mismatching values" in r.stdout and "bit-exact" in r.stdout
    n = _samples(design)
    want = design.predict(x, raw=True).reshape(n, -1)
    got = _outputs(design, proj, "system_output", n).reshape(n, -1)
    assert np.array_equal(got.astype(np.float64), want.astype(np.float64))
    # the shim-only run too, without a venv
    r = make(proj, "shim-run", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert np.array_equal(_outputs(design, proj, "shim_output", n).reshape(n, -1).astype(np.float64),
                          want.astype(np.float64))


@needs_ap_types
def test_system_run_reports_a_wrong_golden_file(project, tmp_path):
    design, _, proj = project
    work = tmp_path / "p"
    shutil.copytree(proj, work, ignore=shutil.ignore_patterns("system_output", "shim_output", "x86/system"))
    golden = sorted((work / "data").glob("golden_*.txt"))[0]
    tokens = golden.read_text().split()
    tokens[0] = "7" if tokens[0] != "7" else "5"  # value 0 is always a sample's (never a padding row)
    golden.write_text(" ".join(tokens) + "\n")
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=no_venv_env())
    assert r.returncode != 0
    assert "value 0 is" in r.stderr and "1 mismatching values" in r.stdout


def test_more_streams_than_the_device_has_plios_are_refused_by_name():
    """One mover per PLIO: a project whose streams exceed the catalog's PLIO counts (VEK280: 38
    interface tiles x 2 PL->AIE streams) is refused with the numbers and what to change."""
    from aieflow.devices import get_device
    from aieflow.errors import PlanError
    from aieflow.vitis import system_files

    dev = get_device("vek280")
    have = dev.plio_columns * dev.plio_in_per_column
    files = {f"data/in{i}.txt": "1 2\n" for i in range(have + 1)} | {"data/golden_out.txt": "3 4\n"}
    kw = dict(device=dev, graph_class="G", graph_var="g", plio_out=[{"var": "out", "file": "data/out.txt", "ctype": "int8"}],
              iterations=1, samples_per_iteration=1, classes=[], tiles=[])
    ins = [{"var": f"in{i}", "file": f"data/in{i}.txt", "ctype": "int8"} for i in range(have + 1)]
    with pytest.raises(PlanError, match=rf"needs {have + 1} PL->AIE streams .*VEK280 has {have} \(38 interface tiles x 2\)") as e:
        system_files(files, plio_in=ins, refuse_hint="fewer replicas", **kw)
    assert "fewer replicas" in str(e.value)
    # exactly as many as the device has: written, one mm2s instance each
    out = system_files(files, plio_in=ins[:have], **kw)
    assert f"nk=mm2s:{have}:" in out["system.cfg"]
