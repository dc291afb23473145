"""The CNN thesis mapping (examples/espcn/thesis.yaml) on the one Makefile contract (issue 20):
``make -n hw`` shows the AIE compile, the movers and the thesis's three PL kernels compiled with
``v++ -c -k``, the link with system.cfg and the package step; system.cfg names only kernels the
project's PL sources define and connects every PLIO of graph.h once; every data file the graph reads
is there; the XRT host compiles and links against the real XRT (Debian's libxrt-dev); the PL
sources compile as HLS C simulation against Xilinx's ap_types (the hls4ml package ships them); and
``make system-run`` (host data -> mm2s -> graph on the shim -> activation / pixel-shuffle PL
kernels -> ... -> s2mm) and ``make shim-run``, without a virtual environment, are bit-exact with
``predict``."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from hw_tools import (
    dry_run_lines,
    make,
    make_host,
    needs_ap_types,
    needs_xrt,
    no_venv_env,
)

import aieflow
from aieflow import model_zoo
from aieflow.vitis import ap_types_include

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(shutil.which("g++") is None or shutil.which("make") is None,
                                 reason="needs g++ and make")]

THESIS_YAML = Path(__file__).resolve().parents[1] / "examples" / "espcn" / "thesis.yaml"
FRAMES = 3  # the pipeline of three layers: five graph iterations on x86
PL = ("activation_conv1", "activation_conv3", "pixelshuffle_conv4")
CSIM = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas", "-Wno-maybe-uninitialized",
        "-Wno-uninitialized"]  # as the project's Makefile (CSIM_FLAGS) says why


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    pytest.importorskip("torch")
    # edge values in the first frame (zeros, ones, a negative), random ones after it
    x = np.random.default_rng(11).uniform(0, 1, size=(FRAMES, 1, 16, 16)).astype(np.float32)
    x[0, 0, :4] = 0.0
    x[0, 0, 4:8] = 1.0
    x[0, 0, 8, :] = -1.0
    design = aieflow.compile(model_zoo.espcn(), device="vck190", example_input=x, calibration=x,
                             config=yaml.safe_load(THESIS_YAML.read_text()))
    assert design.plan.mapping == "thesis"
    out = tmp_path_factory.mktemp("thesis") / "design"
    design.save(out)
    return design, x, out / "project"




def test_make_n_hw_shows_compile_link_and_package(project):
    _, _, proj = project
    r = make(proj, "-n", "hw", "PLATFORM=/some/x.xpfm")
    assert r.returncode == 0, r.stderr
    lines, line = dry_run_lines(r)

    line("v++ -c --mode aie", "--target hw", "--platform /some/x.xpfm", "-o libadf.a")
    link = line("v++ -l", "--config system.cfg", "libadf.a")
    for k in ("mm2s", "s2mm", *PL):
        line("v++ -c", f"-k {k}", f"build.hw/{k}.xo")
        assert f"build.hw/{k}.xo" in link
    package = line("v++ -p", "build.hw/design.xsa", "libadf.a")
    assert lines.index(link) < lines.index(package)
    r = make(proj, "-n", "x86sim", "PLATFORM=/p.xpfm", "ITERATIONS=2")
    assert r.returncode == 0 and "-DAIEFLOW_ITERATIONS=2" in r.stdout, r.stdout + r.stderr
    r = make(proj, "-n", "hw")
    assert r.returncode != 0 and "set PLATFORM=/path/to/" in r.stdout + r.stderr
    readme = (proj / "README.md").read_text()  # every target with its command, what was checked and what not
    for command in ("make x86sim PLATFORM=", "make aiesim PLATFORM=", "make hw_emu PLATFORM=", "make hw PLATFORM=",
                    "make package PLATFORM=", "make run", "make shim-run", "make system-run", "make clean"):
        assert f"`{command}" in readme, command
    assert "Not checked:" in readme


def test_system_cfg_defines_its_kernels_and_connects_every_plio_once(project):
    _, _, proj = project
    graph = (proj / "src/graph.h").read_text()
    ins = re.findall(r'adf::input_plio::create\("(\w+)"', graph)
    outs = re.findall(r'adf::output_plio::create\("(\w+)"', graph)
    assert len(ins) == 4 + 32 + 16 and len(outs) == 160  # the published PLIOs (test_cnn_mapped)
    cfg = (proj / "system.cfg").read_text().splitlines()
    instances = {}
    for entry in (s[3:] for s in cfg if s.startswith("nk=")):
        kernel, count, cus = entry.split(":")
        assert int(count) == len(cus.split("."))
        instances.update(dict.fromkeys(cus.split("."), kernel))
    assert set(instances.values()) == {"mm2s", "s2mm", *PL}
    sources = "\n".join(f.read_text() for f in (proj / "pl").glob("*.cpp"))
    top = (proj / "pl/thesis_pl_top.h").read_text()
    for k in PL:  # C linkage (the name v++ -k looks for), defined in the project's PL source
        assert re.search(rf"^void {k}\(", sources, re.M) and f"void {k}(" in top.split('extern "C" {')[1]
    connects = [c.split("=", 1)[1].split(":") for c in cfg if c.startswith("stream_connect=")]
    into = [b.split(".")[1] for _, b in connects if b.startswith("ai_engine_0.")]
    out_of = [a.split(".")[1] for a, _ in connects if a.startswith("ai_engine_0.")]
    assert sorted(into) == sorted(ins) and sorted(out_of) == sorted(outs)
    for a, b in connects:  # the PL end is an instance system.cfg defines
        for end in (a, b):
            if not end.startswith("ai_engine_0."):
                assert end.split(".")[0] in instances, end
    # the first layer's PLIOs from DDR (mm2s), the image to DDR (s2mm) from the pixel shuffle
    assert sorted(b.split(".")[1] for a, b in connects if a.startswith("mm2s_")) == [f"conv1_in{i}" for i in range(4)]
    assert ["pixelshuffle_conv4_0.out_0", "s2mm_0.s"] in connects


def test_every_data_file_the_graph_reads_exists(project):
    design, x, proj = project
    graph = (proj / "src/graph.h").read_text()
    files = re.findall(r'adf::input_plio::create\("\w+", adf::plio_\d+_bits, "([^"]+)"', graph)
    assert len(files) == 52
    for f in files:
        vals = (proj / f).read_text().split()
        assert vals and len(vals) % FRAMES == 0, f
    frames = np.array((proj / "data/frames.txt").read_text().split(), dtype=np.float32)
    assert np.array_equal(frames, x.ravel())


@needs_xrt
def test_host_compiles_and_links_against_xrt(project):
    _, _, proj = project
    r = make_host(proj)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(proj / "host.exe")], capture_output=True, text=True)  # no board: the usage line
    assert r.returncode != 0 and "usage:" in r.stderr


@needs_ap_types
def test_pl_sources_compile_as_hls_c_simulation(project, tmp_path):
    _, _, proj = project
    for rel in ("pl/thesis_pl.cpp", "pl/mm2s.cpp", "pl/s2mm.cpp", "x86/thesis_csim.cpp"):
        r = subprocess.run(["g++", *CSIM, "-isystem", str(ap_types_include()), f"-I{proj}", f"-I{proj / 'pl'}",
                            f"-I{proj / 'src'}", "-c", str(proj / rel), "-o", str(tmp_path / "u.o")],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"{rel}:\n{r.stderr}"


def _image(path: Path, n: int, per_frame: int) -> np.ndarray:
    vals = np.array(path.read_text().split(), dtype=np.float32)
    assert vals.size % n == 0
    return vals.reshape(n, -1)[:, :per_frame]


@needs_ap_types
def test_system_run_and_shim_run_without_a_venv_are_bit_exact_with_predict(project, tmp_path):
    design, x, proj = project
    work = tmp_path / "moved" / "p"
    shutil.copytree(proj, work)
    assert str(proj) not in (work / "Makefile").read_text()
    env = no_venv_env()
    want = np.asarray(design.predict(x, raw=True), dtype=np.float32).reshape(FRAMES, -1)
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 mismatching values" in r.stdout and "bit-exact" in r.stdout
    got = _image(work / "system_output/data/image.txt", FRAMES, want.shape[1])
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # a wrong golden value is caught (the built system, run again)
    golden = work / "data/golden_image.txt"
    tokens = golden.read_text().split()
    tokens[5] = repr(float(tokens[5]) + 1.0)
    golden.write_text(" ".join(tokens) + "\n")
    r = subprocess.run(["./x86/system", "--data", "data", "--out", "system_output"], cwd=work, capture_output=True, text=True)
    assert r.returncode != 0 and "1 mismatching values" in r.stdout, r.stdout + r.stderr
    shutil.copy(proj / "data/golden_image.txt", golden)
    r = make(work, "shim-run", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    got = _image(work / "shim_output/data/image.txt", FRAMES, want.shape[1])
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_graph_kernels_and_harness_are_warning_free_against_the_shim(project):
    """Every C++ source the AIE side and `make shim-run` build (graph.cpp with its simulation main,
    each AIE kernel, the x86 harness, the PL kernels on the shim's ap_int) compiles under -Wall
    -Wextra -Werror against the shim copied into the project (x86/shim), as the Makefile's
    SHIM_FLAGS do; `make shim-run` itself is run above."""
    design, _, proj = project
    makefile = (proj / "Makefile").read_text()
    assert re.search(r"^SHIM_FLAGS := .*-Wall -Wextra -Werror", makefile, re.M)
    kernels = sorted((proj / "src/kernels").glob("*.cc"))
    units = [proj / "src/graph.cpp", *kernels, proj / "x86/harness.cpp", proj / "pl/thesis_pl.cpp"]
    assert len(kernels) >= 3 and all(u.is_file() for u in units)
    arch = design.device.generation.arch_macro
    for unit in units:
        r = subprocess.run(["g++", "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off",
                            f"-D__AIE_ARCH__={arch}", "-D__X86SIM__", "-Ix86/shim", "-Isrc", "-I.", str(unit.relative_to(proj))],
                           cwd=proj, capture_output=True, text=True)
        assert r.returncode == 0, f"{unit.name}:\n{r.stderr[:3000]}"
    graph_main = (proj / "src/graph.cpp").read_text()
    assert "int main" in graph_main and "__X86SIM__" in graph_main  # the main compiled above
