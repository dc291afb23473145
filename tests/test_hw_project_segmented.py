"""The segmented design (a Dense chain cut around a streamed layer) as one project on the Makefile
contract (issue 20): the top Makefile runs every target in each segment's project in order; ``make
-n hw`` shows each segment's v++ compile, link with its system.cfg and package; each system.cfg
names only kernels its project defines and connects every PLIO; the data at the cut is the whole
model's; every segment's XRT host compiles and links against the real XRT (Debian's libxrt-dev);
and ``make system-run`` at the top, without a virtual environment, runs each segment's host -> PL
(HLS C simulation against Xilinx's ap_types) -> graph -> host bit-exact, the last segment's output
equal to the whole model's ``predict``."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from hw_tools import dry_run_lines, make, make_host, needs_ap_types, needs_xrt, no_venv_env

import aieflow
from aieflow.vitis import ap_types_include

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(shutil.which("g++") is None or shutil.which("make") is None, reason="needs g++ and make")]

SAMPLES = 5  # not a whole batch of the resident segment (4)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16)).eval()
    x = np.random.default_rng(0).standard_normal((SAMPLES, 32)).astype(np.float32)
    x[0] = 40.0  # past the calibrated range: saturates at the input's bound
    cal = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)
    d = aieflow.compile(model, device="vck190", example_input=x, calibration=cal,
                        config={"precision": "int8", "batch": 4, "layers": {"2": {"weights": "streamed"}}})
    assert type(d).__name__ == "SegmentedDesign" and [s.name for s in d.specs] == ["00_resident", "01_streamed"]
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
    """The streamed segment's X.bin holds the whole model's codes at the cut for every sample given
    (what the resident segment's emulator writes into its golden files), so the segments' runs on
    their own data chain into the whole model's run."""
    d, x, top = project
    res, streamed = d.segments
    xq = d.quantise_input(x)
    cut = np.asarray(d.trace(xq)[d.specs[1].input]).reshape(SAMPLES, -1)
    data = top / "segments" / "01_streamed" / "project" / "data"
    assert int((data / "samples.txt").read_text()) == SAMPLES
    got = np.fromfile(data / "X.bin", dtype=streamed.x_codes_np()).reshape(SAMPLES, -1)
    assert np.array_equal(got.astype(np.int64), cut.astype(np.int64))
    assert np.array_equal(np.asarray(res.run(xq)).reshape(SAMPLES, -1).astype(np.int64), cut.astype(np.int64))


@needs_xrt
def test_every_segments_host_compiles_and_links_against_xrt(project):
    d, _, top = project
    r = make_host(top)
    assert r.returncode == 0, r.stdout + r.stderr
    for spec in d.specs:
        assert (top / "segments" / spec.name / "project" / "host.exe").is_file(), spec.name


@needs_ap_types
def test_system_run_at_the_top_is_bit_exact_with_predict(project, tmp_path):
    d, x, top = project
    work = tmp_path / "moved" / "p"
    shutil.copytree(top, work, ignore=shutil.ignore_patterns("system_output", "shim_output", "x86/system", "*.o", "host.exe"))
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=no_venv_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 mismatching values" in r.stdout and "Y bit-exact" in r.stdout.splitlines()
    last = work / "segments" / "01_streamed" / "project"
    y = np.fromfile(last / "system_output/Y.bin", dtype=np.dtype(d.segments[1].plan.epilogue.y_np)).reshape(SAMPLES, -1)
    assert np.array_equal(y.astype(np.int64), d.predict(x, raw=True).reshape(SAMPLES, -1).astype(np.int64))
    # a wrong golden value in the first segment stops the run there
    golden = sorted((work / "segments" / "00_resident" / "project" / "data").glob("golden_*.txt"))[0]
    tokens = golden.read_text().split()
    tokens[0] = "7" if tokens[0] != "7" else "5"
    golden.write_text(" ".join(tokens) + "\n")
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=no_venv_env())
    assert r.returncode != 0 and "1 mismatching values" in r.stdout and "Y bit-exact" not in r.stdout.splitlines()
