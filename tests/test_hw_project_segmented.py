"""The segmented design (a Dense chain cut around streamed layers: streamed -> resident -> streamed,
the resident segment with two cascade columns and rows and two replicas) as one project on the
Makefile contract (issue 20): the top Makefile runs every target in each segment's project in order;
``make -n hw`` shows each segment's v++ compile, link with its system.cfg and package; each
system.cfg names only kernels its project defines and connects every PLIO; the data at the cut is the
whole model's; the one host program (host/segments_host.cpp with each segment's host code) compiles
and links against the real XRT (Debian's libxrt-dev); and ``make system-run`` at the top, without a
virtual environment, runs each segment's own system run and then the one host's flow on x86 (the cut
tensors moved into the resident segment's PLIO streams and back by the host, each segment's PL as
HLS C simulation against Xilinx's ap_types around its graph on the shim), its output equal to the
whole model's ``predict``."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from hw_tools import dry_run_lines, make, make_host, needs_ap_types, needs_xrt, no_venv_env

import aieflow
from aieflow.names import c_ident
from aieflow.vitis import ap_types_include

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(shutil.which("g++") is None or shutil.which("make") is None, reason="needs g++ and make")]

SAMPLES = 5  # not a whole batch of the resident segment (4)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 40), torch.nn.ReLU(),
                                torch.nn.Linear(40, 16)).eval()
    x = np.random.default_rng(0).standard_normal((SAMPLES, 32)).astype(np.float32)
    x[0] = 40.0  # past the calibrated range: saturates at the input's bound
    cal = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)
    d = aieflow.compile(model, device="vck190", example_input=x, calibration=cal,
                        config={"precision": "int8", "batch": 4, "replicas": 2,
                                "layers": {"0": {"weights": "streamed"}, "2": {"parallelism": {"cas_len": 2, "cas_num": 2}},
                                           "4": {"weights": "streamed"}}})
    assert type(d).__name__ == "SegmentedDesign"
    assert [s.name for s in d.specs] == ["00_streamed", "01_resident", "02_streamed"]
    res = d.segments[1]
    assert len(res.placement.replicas) == 2 and {(n.plan.cas_len, n.plan.cas_num) for n in res.graph.nodes
                                                  if n.plan is not None} == {(2, 2)}
    out = tmp_path_factory.mktemp("segmented") / "design"
    d.save(out)
    return d, x, out


def test_make_n_hw_shows_every_segments_compile_link_and_package(project):
    d, _, top = project
    r = make(top, "-n", "hw", "PLATFORM=/some/x.xpfm")
    assert r.returncode == 0, r.stderr
    lines, _ = dry_run_lines(r)
    for spec in d.specs:  # in order, each inside its own project
        enter = next(i for i, s in enumerate(lines) if "Entering directory" in s and f"segments/{spec.name}/project" in s)
        own = lines[enter:]
        leave = next(i for i, s in enumerate(own) if "Leaving directory" in s and f"segments/{spec.name}/project" in s
                     and "make[1]" in s)
        own = own[:leave]
        steps = [next((i for i, s in enumerate(own) if all(p in s for p in parts)), None) for parts in (
            ("v++ -c --mode aie", "--platform /some/x.xpfm", "-o libadf.a"), ("v++ -c", "-k "),
            ("v++ -l", "--config system.cfg", "libadf.a"), ("v++ -p", "design.xsa"))]
        assert None not in steps, (spec.name, own)
        assert steps[2] < steps[3]
    r = make(top, "-n", "hw")
    assert r.returncode != 0 and "set PLATFORM=/path/to/xilinx_vck190_base" in r.stdout + r.stderr
    readme = (top / "README.md").read_text()
    assert "make system-run" in readme and "Not generated:" in readme


def test_each_system_cfg_defines_its_kernels_and_connects_every_plio(project):
    d, _, top = project
    for spec in d.specs:
        proj = top / "segments" / spec.name / "project"
        graph = (proj / "src/graph.h").read_text()
        plios = re.findall(r'adf::(?:input|output)_plio::create\("(\w+)"', graph)
        cfg = (proj / "system.cfg").read_text().splitlines()
        kernels = {line[3:].split(":")[0] for line in cfg if line.startswith("nk=")}
        sources = "".join(f.read_text() for f in (proj / "pl").glob("*.cpp"))
        assert kernels and all(re.search(rf'extern "C" void {k}\(', sources) for k in kernels), (spec.name, kernels)
        ends = [e.split(".", 1)[1] for line in cfg if line.startswith("stream_connect=")
                for e in line.split("=", 1)[1].split(":") if e.startswith("ai_engine_0.")]
        assert plios and sorted(ends) == sorted(plios), spec.name
        reads = re.findall(r'input_plio::create\("\w+", adf::plio_\d+_bits, "(data/[^"]+)"\)', graph)
        assert reads and all((proj / f).is_file() for f in reads), (spec.name, reads)  # every file the graph reads


def test_the_cut_data_is_the_whole_models(project):
    """Each streamed segment's X.bin holds the whole model's codes at its cut for every sample given,
    the resident segment's emulator maps its cut to the next one, and the top data/ holds the graph
    input's codes and the whole model's output (the one host's X.txt / Y_golden.txt)."""
    d, x, top = project
    xq = d.quantise_input(x)
    trace = d.trace(xq)
    for spec, seg in zip(d.specs, d.segments, strict=True):
        cut = np.asarray(trace[spec.input]).reshape(SAMPLES, -1).astype(np.int64)
        after = np.asarray(trace[spec.output]).reshape(SAMPLES, -1).astype(np.int64)
        if spec.kind == "streamed":
            data = top / "segments" / spec.name / "project" / "data"
            assert int((data / "samples.txt").read_text()) == SAMPLES
            got = np.fromfile(data / "X.bin", dtype=seg.x_codes_np()).reshape(SAMPLES, -1)
            assert np.array_equal(got.astype(np.int64), cut), spec.name
        assert np.array_equal(np.asarray(seg.run(np.asarray(trace[spec.input]))).reshape(SAMPLES, -1).astype(np.int64),
                              after), spec.name
    assert int((top / "data/samples.txt").read_text()) == SAMPLES
    assert np.array_equal(np.array((top / "data/X.txt").read_text().split(), dtype=np.int64),
                          np.asarray(xq).reshape(-1).astype(np.int64))
    assert np.array_equal(np.array((top / "data/Y_golden.txt").read_text().split(), dtype=np.int64),
                          d.predict(x, raw=True).reshape(-1).astype(np.int64))


@needs_xrt
def test_the_one_host_and_every_segments_host_compile_and_link_against_xrt(project):
    d, _, top = project
    r = make_host(top)
    assert r.returncode == 0, r.stdout + r.stderr
    for spec in d.specs:
        assert (top / "segments" / spec.name / "project" / "host.exe").is_file(), spec.name
    exe = top / "host.exe"  # the one host: every segment's host code linked in, each in its own namespace
    symbols = subprocess.run(["nm", "-C", str(exe)], capture_output=True, text=True).stdout
    for spec in d.specs:
        ns = f"aieflow_seg_{c_ident(spec.name)}::main("
        assert ns in symbols and f"aieflow_segment_{c_ident(spec.name)}(int, char**)" in symbols, spec.name


@needs_ap_types
def test_system_run_at_the_top_is_bit_exact_with_predict(project, tmp_path):
    """``make system-run`` at the top in a moved copy without a venv: every segment's own system run,
    then the one host's flow (each cut moved by the host into the next segment's inputs) bit-exact
    with ``predict``; a wrong golden value fails the one host's comparison."""
    d, x, top = project
    work = tmp_path / "moved" / "p"
    shutil.copytree(top, work, ignore=shutil.ignore_patterns("system_output", "shim_output", "x86/system", "*.o", "host.exe"))
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=no_venv_env())
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "whole model bit-exact" in lines and "0 output values differ" in r.stdout
    assert [s for s in lines if s.startswith("segment ")] and all(
        any(s.startswith(f"segment {spec.name} ({spec.kind}): ") for s in lines) for spec in d.specs)
    assert "samples/s" in r.stdout
    want = d.predict(x, raw=True).reshape(-1).astype(np.int64)  # the emulator, not the golden file
    assert np.array_equal(np.array((work / "Y.txt").read_text().split(), dtype=np.int64), want)
    # a wrong golden value: the one host (already built) fails and names it
    golden = work / "data" / "Y_golden.txt"
    tokens = golden.read_text().split()
    tokens[3] = str(int(tokens[3]) + 1)
    golden.write_text("\n".join(tokens) + "\n")
    r = subprocess.run(["./x86/segments_system", "data"], cwd=work, capture_output=True, text=True, env=no_venv_env())
    assert r.returncode != 0 and "1 output values differ" in r.stdout and "whole model bit-exact" not in r.stdout
    assert "output value 3 is" in r.stderr
