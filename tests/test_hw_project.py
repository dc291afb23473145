"""Hardware-ready Vitis projects (issue 20) of the Dense chain, DAG and CNN (stream mapping) kinds: the one Makefile
contract (``make -n hw`` shows v++ compile, link with system.cfg and package), system.cfg naming
only the project's PL kernels and connecting every PLIO, every data file the graph reads present,
the XRT host compiled and linked against the real XRT (Debian's libxrt-dev), the PL movers compiled
as HLS C simulation against Xilinx's open ap_types (the hls4ml package ships them), and the x86
system run (host data -> mm2s C sim -> graph on the shim -> s2mm C sim) bit-exact with ``predict``,
run by ``make`` without a virtual environment."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aieflow
from aieflow.model_zoo import qdq_mlp, residual_cnn, residual_mlp, torch_mlp
from aieflow.vitis import PL_SOURCES, ap_types_include

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(shutil.which("g++") is None or shutil.which("make") is None,
                                 reason="needs g++ and make")]

XRT_HEADER = Path("/usr/include/xrt/xrt/xrt_device.h")  # where Debian's libxrt-dev puts the headers
needs_xrt = pytest.mark.skipif(not XRT_HEADER.is_file(),
                               reason="the XRT headers are missing: install Debian's libxrt-dev (apt-get install libxrt-dev)")
needs_ap_types = pytest.mark.skipif(ap_types_include() is None,
                                    reason="Xilinx's ap_types headers are missing: pip install hls4ml (it ships them)")

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


CASES = {"chain_vck190_int8": _chain_multi_plio, "chain_vek280_bf16": _chain_float, "dag_vek280": _dag,
         "cnn_vck190_int8": _cnn}


def _samples(design) -> int:
    return CNN_FRAMES if _is_cnn(design) else SAMPLES


def _is_cnn(design) -> bool:
    from aieflow.cnn.design import CnnDesign

    return isinstance(design, CnnDesign)


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


def _make(proj: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-C", str(proj), *args], capture_output=True, text=True, env=env)


def _no_venv_env() -> dict[str, str]:
    """A shell without the virtual environment (nor aieflow on PYTHONPATH)."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}


def test_make_n_hw_shows_compile_link_and_package(project):
    _, _, proj = project
    r = _make(proj, "-n", "hw", "PLATFORM=/some/x.xpfm")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.replace("\\\n", " ").splitlines()  # continued lines joined

    def line(*parts):
        found = [s for s in lines if all(p in s for p in parts)]
        assert found, f"no line with {parts} in:\n{r.stdout}"
        return found[0]

    line("v++ -c --mode aie", "--target hw", "--platform /some/x.xpfm", "--config aie.cfg", "-o libadf.a")
    for k in ("mm2s", "s2mm"):
        line("v++ -c", "--target hw", f"-k {k}", f"pl/{k}.cpp", f"build.hw/{k}.xo")
    link = line("v++ -l", "--config system.cfg")
    assert "libadf.a" in link and "build.hw/mm2s.xo" in link and "build.hw/s2mm.xo" in link
    line("v++ -p", "--target hw", "build.hw/design.xsa", "libadf.a")
    assert lines.index(line("v++ -l")) < lines.index(line("v++ -p"))
    # hw_emu is the same chain for TARGET=hw_emu
    r = _make(proj, "-n", "hw_emu", "PLATFORM=/some/x.xpfm")
    assert r.returncode == 0 and "v++ -l --target hw_emu" in r.stdout and "v++ -p --target hw_emu" in r.stdout
    # without PLATFORM: a clear error naming the variable and the board's platform
    r = _make(proj, "-n", "hw")
    assert r.returncode != 0 and "set PLATFORM=/path/to/" in r.stdout + r.stderr and ".xpfm" in r.stdout + r.stderr
    readme = (proj / "README.md").read_text()
    for command in ("make x86sim PLATFORM=", "make aiesim PLATFORM=", "make hw_emu PLATFORM=", "make hw PLATFORM=",
                    "make package PLATFORM=", "make run", "make shim-run", "make system-run", "make clean"):
        assert f"`{command}" in readme, command
    assert "Not checked:" in readme
    for target in ("x86sim", "aiesim"):
        r = _make(proj, "-n", target, "PLATFORM=/p.xpfm", "ITERATIONS=7")
        assert r.returncode == 0 and "-DAIEFLOW_ITERATIONS=7" in r.stdout, r.stdout + r.stderr


def test_system_cfg_defines_its_kernels_and_connects_every_plio(project):
    design, _, proj = project
    plio_in, plio_out = _plios((proj / "src/graph.h").read_text())
    assert plio_in and plio_out
    cfg = (proj / "system.cfg").read_text().splitlines()
    assert "[connectivity]" in cfg
    pl_text = {rel: (proj / rel).read_text() for rel in PL_SOURCES}
    instances: dict[str, str] = {}
    for entry in (s[3:] for s in cfg if s.startswith("nk=")):
        kernel, count, cus = entry.split(":")
        # the kernel is defined by one of the project's PL sources, with an AXI stream port `s`
        src = [t for t in pl_text.values() if re.search(rf'extern "C" void {kernel}\(', t)]
        assert len(src) == 1, kernel
        assert re.search(r"hls::stream<[\w:]+>& s\b", src[0])
        assert int(count) == len(cus.split("."))
        instances.update(dict.fromkeys(cus.split("."), kernel))
    connects = [s.split("=", 1)[1] for s in cfg if s.startswith("stream_connect=")]
    into_aie = {dst.split(".")[1]: src for src, dst in (c.split(":") for c in connects) if dst.startswith("ai_engine_0.")}
    from_aie = {src.split(".")[1]: dst for src, dst in (c.split(":") for c in connects) if src.startswith("ai_engine_0.")}
    assert set(into_aie) == set(plio_in) and set(from_aie) == set(plio_out)
    assert len(into_aie) + len(from_aie) == len(connects)
    assert all(instances[v.split(".")[0]] == "mm2s" and v.endswith(".s") for v in into_aie.values())
    assert all(instances[v.split(".")[0]] == "s2mm" and v.endswith(".s") for v in from_aie.values())
    assert len({v.split(".")[0] for v in [*into_aie.values(), *from_aie.values()]}) == len(instances)
    # the host opens exactly these instances
    host_ports = (proj / "host/plio_ports.h").read_text()
    assert sorted(re.findall(r'cu = "(\w+)"', host_ports)) == sorted(instances)


def test_every_data_file_the_graph_reads_exists_with_every_sample(project):
    design, x, proj = project
    plio_in, plio_out = _plios((proj / "src/graph.h").read_text())
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
    libdir = next((str(p.parent) for p in Path("/usr/lib").rglob("libxrt_coreutil.so")), None)
    assert libdir, "libxrt-dev installs libxrt_coreutil.so"
    r = _make(proj, "host", "HOST_CXX=g++ -Werror", "XRT_INCLUDE=/usr/include/xrt", f"XRT_LIB={libdir}")
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
    for rel in (*PL_SOURCES, "x86/pl_csim.cpp"):
        r = subprocess.run(["g++", *flags, "-isystem", str(ap), f"-I{proj}", f"-I{proj / 'pl'}", "-c", str(proj / rel),
                            "-o", str(tmp_path / (Path(rel).stem + ".o"))], capture_output=True, text=True)
        assert r.returncode == 0, f"{rel}:\n{r.stderr}"
    # the Xilinx header is the one used, not aieflow's own shim of it
    assert (ap / "etc" / "ap_private.h").is_file()


def _outputs(design, proj: Path, folder: str, n: int) -> np.ndarray:
    """The output PLIO files of ``folder`` decoded into [n, ...] codes."""
    from aieflow.dag.design import DagDesign
    from aieflow.passes.emit import dense_layers, plio_ports
    from aieflow.verify import _layer_output

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
        return vals.reshape(rows, -1)[:n]
    from aieflow.ops.post import written

    layers = dense_layers(design.graph)
    final = layers[-1]
    texts = [(proj / folder / port["file"]).read_text() for port in plio_ports(layers)[1]]
    iterations = -(-n // final.plan.batch)
    return _layer_output(final.plan, written(design.graph, final)[1], texts, iterations, "output")[:n]


@needs_ap_types
def test_system_run_without_a_venv_is_bit_exact_with_predict(project):
    design, x, proj = project
    env = _no_venv_env()
    r = _make(proj, "system-run", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 mismatching values" in r.stdout and "bit-exact" in r.stdout
    n = _samples(design)
    want = design.predict(x, raw=True).reshape(n, -1)
    got = _outputs(design, proj, "system_output", n).reshape(n, -1)
    assert np.array_equal(got.astype(np.float64), want.astype(np.float64))
    # the shim-only run too, without a venv
    r = _make(proj, "shim-run", env=env)
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
    tokens[3] = "7" if tokens[3] != "7" else "5"
    golden.write_text(" ".join(tokens) + "\n")
    r = _make(work, "system-run", env=_no_venv_env())
    assert r.returncode != 0
    assert "value 3 is" in r.stderr and "1 mismatching values" in r.stdout
