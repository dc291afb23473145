"""GEMM and streamed Dense projects on the one Makefile contract (issue 20): `make -n hw` shows the
AIE compile, the PL kernels (the GEMM's own movers, the layer's epilogue), the link with system.cfg
and the package step; system.cfg names only kernels the project's PL sources define and connects
every PLIO of graph.h; the XRT host compiles and links against the real XRT (Debian's libxrt-dev);
the simulators' PLIO files hold the first iteration (and its golden Cr, checked on the shim); `make
shim-run` and `make system-run` (PL kernels as HLS C simulation against Xilinx's ap_types) in a copy
of the project moved elsewhere, without a virtual environment, are bit-exact with predict."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hw_tools import (
    XRT_HEADER,
    check_system_cfg,
    dry_run_lines,
    graph_data_files,
    make,
    make_host,
    needs_ap_types,
    needs_xrt,
    no_venv_env,
)

import aieflow
from aieflow.vitis import ap_types_include

pytestmark = [pytest.mark.skipif(shutil.which("g++") is None or shutil.which("make") is None, reason="needs g++ and make")]

BLOCKS = {"mc": 16, "nc": 16, "kc": 32}
CASES = {
    "vck190_published": lambda: aieflow.gemm(37, 29, 70, "uint8", "vck190", 2, "published", blocks=BLOCKS),
    "vck190_gmio": lambda: aieflow.gemm(64, 64, 256, "uint8", "vck190", 4, "best", br_transfer="gmio"),
    "vek280_memtile": lambda: aieflow.gemm(37, 29, 70, "int8", "vek280", 2, "best"),
}


@pytest.fixture(scope="module", params=list(CASES))
def project(request, tmp_path_factory):
    design = CASES[request.param]()
    out = tmp_path_factory.mktemp(request.param) / "design"
    design.save(out)
    return design, out / "project"



def test_make_n_hw_shows_compile_link_and_package(project):
    _, proj = project
    r = make(proj, "-n", "hw", "PLATFORM=/some/x.xpfm")
    assert r.returncode == 0, r.stderr
    lines, line = dry_run_lines(r)

    line("v++ -c --mode aie", "--target hw", "--platform /some/x.xpfm", "--config aie.cfg", "-o libadf.a")
    link = line("v++ -l", "--target hw", "--config system.cfg", "libadf.a")
    for k in ("gemm_mover", "gemm_collect"):
        line("v++ -c", "--target hw", f"-k {k}", f"pl/{k}.cpp", f"build.hw/{k}.xo")
        assert f"build.hw/{k}.xo" in link
    package = line("v++ -p", "--target hw", "build.hw/design.xsa", "libadf.a", "--package.sd_file host.exe")
    assert lines.index(link) < lines.index(package)
    r = make(proj, "-n", "hw")
    assert r.returncode != 0 and "set PLATFORM=/path/to/" in r.stdout + r.stderr
    for target in ("x86sim", "aiesim"):
        r = make(proj, "-n", target, "PLATFORM=/p.xpfm", "ITERATIONS=7")
        assert r.returncode == 0 and "-DAIEFLOW_ITERATIONS=7" in r.stdout, r.stdout + r.stderr
    main = (proj / "src/graph.cpp").read_text()  # GMIO: one run(1) per iteration, after each lane's gm2aie_nb
    assert "run(AIEFLOW_ITERATIONS)" in main or ("it < AIEFLOW_ITERATIONS" in main and "gm2aie_nb" in main)
    readme = (proj / "README.md").read_text()  # every target with its command, what was checked and what not
    for command in ("make x86sim PLATFORM=", "make aiesim PLATFORM=", "make hw_emu PLATFORM=", "make hw PLATFORM=",
                    "make package PLATFORM=", "make run", "make shim-run", "make system-run", "make clean"):
        assert f"`{command}" in readme, command
    assert "Not checked:" in readme
    r = make(proj, "-n", "run")
    assert r.returncode == 0 and "./host.exe design.xclbin data" in r.stdout, r.stdout


def test_system_cfg_defines_its_kernels_and_connects_every_plio(project):
    _, proj = project
    assert set(check_system_cfg(proj).values()) == {"gemm_mover", "gemm_collect"}


@needs_xrt
def test_host_compiles_and_links_against_xrt(project):
    _, proj = project
    r = make_host(proj)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (proj / "host.exe").is_file()
    host = (proj / "host/host.cpp").read_text()
    for name in ("xrt::device", "xrt::kernel", "xrt::bo", "xrt::graph"):
        assert name in host


@needs_ap_types
def test_pl_kernels_compile_as_hls_c_simulation_against_xilinx_ap_types(project, tmp_path):
    """The GEMM's PL kernels (the v++ -k sources) with g++ against Xilinx's open ap_int / hls_stream
    (the flags of the system-run of kinds with their own PL kernels: only #pragma HLS and the
    uninitialized-value warnings GCC raises inside ap_private's constructor for a local
    ap_uint<128> are let through); `make shim-run` runs them on the shim's ap_int, not these."""
    _, proj = project
    for k in ("gemm_mover", "gemm_collect"):
        r = subprocess.run(["g++", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas",
                            "-Wno-maybe-uninitialized", "-Wno-uninitialized", "-isystem", str(ap_types_include()), f"-I{proj}",
                            f"-I{proj / 'src'}", f"-I{proj / 'pl'}", "-c", str(proj / f"pl/{k}.cpp"),
                            "-o", str(tmp_path / f"{k}.o")], capture_output=True, text=True)
        assert r.returncode == 0, f"{k}:\n{r.stderr}"
        syms = subprocess.run(["nm", "-C", str(tmp_path / f"{k}.o")], capture_output=True, text=True).stdout
        assert re.search(rf"\bT {k}\b", syms), syms[:2000]  # the kernel itself, C linkage, defined


def test_shim_run_in_a_moved_copy_without_a_venv_is_bit_exact(project, tmp_path):
    _, proj = project
    work = tmp_path / "elsewhere" / "p"
    shutil.copytree(proj, work, ignore=shutil.ignore_patterns("shim_output", "x86/harness", "host.exe"))
    assert str(proj) not in (work / "Makefile").read_text() and "import aieflow" not in (work / "Makefile").read_text()
    env = no_venv_env()
    r = make(work, "shim-run", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "C bit-exact" in r.stdout.splitlines()  # cmp's echo, not make's echo of the command
    # a wrong golden C is caught
    golden = work / "data/C_golden.bin"
    data = bytearray(golden.read_bytes())
    data[0] ^= 1
    golden.write_bytes(bytes(data))
    r = make(work, "shim-run", env=env)
    assert r.returncode != 0 and "C bit-exact" not in r.stdout.splitlines() and "differ" in r.stdout + r.stderr


def _check_memtile_plio_files(design, proj: Path, files: list[str]) -> None:
    """ml_mover.cpp's order for block (0, 0, 0): a<g> = A's rows g MC_TILE .. + MC_TILE, columns
    0 .. KC, row-major; b<b> = for each of its L4 lanes j, for each L4 step, B's kc x nr panel
    step TILES_J + j, row-major; zeros past A / B and past the last panel."""
    p, c, blk = design.plan, design.plan.config, design.plan.blocks
    a_full = np.fromfile(proj / "data/A.bin", dtype=p.dtype.np_dtype).reshape(p.m, p.k).astype(np.int64)
    b_full = np.fromfile(proj / "data/B.bin", dtype=p.dtype.np_dtype).reshape(p.k, p.n).astype(np.int64)
    mc_tile, steps = blk.mc // c.tiles_i, -(-(blk.nc // blk.nr) // c.tiles_j)
    lanes = design.plan.memtiles.lanes(c.tiles_j)
    first = [sum(lanes[:i]) for i in range(len(lanes))]

    def a_at(r: int, col: int) -> int:
        return int(a_full[r, col]) if r < p.m and col < p.k else 0

    def b_at(r: int, col: int) -> int:
        return int(b_full[r, col]) if r < p.k and col < p.n else 0

    seen = set()
    for f in files:
        name = Path(f).stem
        vals = [int(v) for v in (proj / f).read_text().split()]
        if name.startswith("a"):
            g = int(name[1:])
            want = [a_at(g * mc_tile + r, col) for r in range(mc_tile) for col in range(blk.kc)]
        else:
            bi = int(name[1:])
            want = [b_at(r, panel * blk.nr + col) if panel < blk.nc // blk.nr else 0
                    for j in range(first[bi], first[bi] + lanes[bi]) for s in range(steps)
                    for panel in [s * c.tiles_j + j] for r in range(blk.kc) for col in range(blk.nr)]
        assert vals == want, f
        seen.add(name)
    assert seen == {f"a{g}" for g in range(c.tiles_i)} | {f"b{i}" for i in range(len(lanes))}


def _simulate_and_compare(design, proj: Path, tmp_path: Path) -> None:
    """What `make x86sim` / `aiesim` run (graph.cpp's own main, one iteration on the data/ files; a
    GMIO design's main feeds each lane's data/br<j>.txt through GMIO::malloc / gm2aie_nb), built
    for the shim with -Wall -Wextra -Werror: its Cr output files equal data/golden_cr*.txt by the
    project's own `make check-output`; a changed golden value is reported."""
    p = design.plan
    golden = sorted((proj / "data").glob("golden_cr*.txt"))
    assert len(golden) == p.config.tiles_i * p.config.tiles_j
    work = tmp_path / "sim"
    shutil.copytree(proj, work, ignore=shutil.ignore_patterns("*_output", "x86/harness", "x86/system", "*.o", "host.exe"))
    r = subprocess.run(["g++", "-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off",
                        f"-D__AIE_ARCH__={p.device.generation.arch_macro}", "-D__X86SIM__", "-Ix86/shim", "-Isrc", "-I.",
                        "src/graph.cpp", "src/kernels/gemm_tile.cc", "-o", "sim"], cwd=work, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["./sim"], cwd=work, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    env = no_venv_env()
    r = make(work, "check-output", "OUT=.", env=env)  # the shim wrote data/cr<t>.txt beside the inputs
    assert r.returncode == 0 and r.stdout.count(" bit-exact") == len(golden), r.stdout + r.stderr
    last = golden[-1].name  # the last tile's last value: its last micro-kernel round (memory tile: last L4 step)
    tokens = (work / "data" / last).read_text().split()
    bumped = repr(float(tokens[-1]) + 1.0) if p.dtype.is_float else str(int(tokens[-1]) + 1)
    (work / "data" / last).write_text(" ".join([*tokens[:-1], bumped]) + "\n")
    r = make(work, "check-output", "OUT=.", env=env)
    assert r.returncode != 0 and "MISMATCH" in r.stdout and f"first difference at {len(tokens) - 1}" in r.stdout, r.stdout


def test_the_simulators_first_iteration_on_the_shim_matches_the_golden_cr_files(project, tmp_path):
    """Every layout (PLIO Br, GMIO Br fed by graph.cpp's main, memory tiles) ships data/golden_cr*.txt
    that the simulation main's Cr output equals (exact sums of the numpy side,
    plio_data.golden_cr_files); the Makefile's x86sim / aiesim compare them."""
    design, proj = project
    assert "$(MAKE) check-output OUT=x86simulator_output" in (proj / "Makefile").read_text()
    _simulate_and_compare(design, proj, tmp_path)


def test_the_simulators_plio_files_hold_the_first_iterations_operands(project):
    """graph.cpp runs one iteration on data/ar*.txt / br*.txt by default: every input PLIO file
    graph.h names exists, and read in the order the kernel reads them (gemm_tile.h: per micro-kernel
    round and k step, each Ar stream's MS x KS row blocks; Br as KS x NS blocks per column block)
    they are A's first rows and B's first panels, zero past the problem's edges."""
    design, proj = project
    files = graph_data_files(proj)  # graph.h's input PLIOs and graph.cpp's GMIO Br panels
    gmio = re.findall(r'read_panel\("([^"]+)"\)', (proj / "src/graph.cpp").read_text())
    assert len(gmio) == (design.plan.config.tiles_j if design.plan.config.br_transfer == "gmio" else 0)
    assert files and all((proj / f).is_file() for f in files)
    if design.plan.memtile:
        _check_memtile_plio_files(design, proj, files)
        return
    p, c, blk = design.plan, design.plan.config, design.plan.blocks
    dt = np.float32 if p.dtype.is_float else np.int64
    ms, ks, ns = p.dtype.mmul
    a = np.zeros((blk.mc, blk.kc))
    b = np.zeros((blk.kc, blk.nc))
    a_full = np.fromfile(proj / "data/A.bin", dtype=p.dtype.np_dtype).reshape(p.m, p.k)
    b_full = np.fromfile(proj / "data/B.bin", dtype=p.dtype.np_dtype).reshape(p.k, p.n)
    a[:min(p.m, blk.mc), :min(p.k, blk.kc)] = a_full[:blk.mc, :blk.kc]
    b[:min(p.k, blk.kc), :min(p.n, blk.nc)] = b_full[:blk.kc, :blk.nc]
    rows_per_stream = blk.mr // c.ar_streams
    rounds = blk.mc // c.tiles_i // blk.mr
    for f in files:
        name = Path(f).stem
        vals = np.array((proj / f).read_text().split(), dtype=dt)
        if name.startswith("ar"):
            g, s = (int(v) for v in name[2:].split("_"))
            it = iter(vals)
            for rnd in range(rounds):
                for kp in range(blk.kc // ks):
                    for r in range(rows_per_stream // ms):  # the stream's row blocks, each MS x KS row-major
                        row0 = (g * rounds + rnd) * blk.mr + s * rows_per_stream + r * ms
                        block = np.array([next(it) for _ in range(ms * ks)]).reshape(ms, ks)
                        assert np.array_equal(block, a[row0:row0 + ms, kp * ks:(kp + 1) * ks]), (f, rnd, kp, r)
            assert next(it, None) is None, f
        else:
            j = int(name[2:])
            want = (b[:, j * blk.nr:(j + 1) * blk.nr] if j < blk.nc // blk.nr else np.zeros((blk.kc, blk.nr)))
            got = vals.reshape(blk.kc // ks, blk.nr // ns, ks, ns)  # (k step, column block, KS x NS row-major)
            for kp in range(blk.kc // ks):
                for cb in range(blk.nr // ns):
                    assert np.array_equal(got[kp, cb], want[kp * ks:(kp + 1) * ks, cb * ns:(cb + 1) * ns]), (f, kp, cb)


@needs_ap_types
def test_system_run_in_a_moved_copy_without_a_venv_is_bit_exact(project, tmp_path):
    """`make system-run`: the host's five loops -> gemm_mover as HLS C simulation against Xilinx's
    ap_types -> graph on the shim -> gemm_collect (C simulation) -> C, equal to predict's C (the
    golden file) and to an independent int64 matmul of the shipped A and B; a wrong golden C fails."""
    design, proj = project
    work = tmp_path / "elsewhere" / "p"
    shutil.copytree(proj, work, ignore=shutil.ignore_patterns("shim_output", "system_output", "x86/harness", "x86/system",
                                                              "*.o", "host.exe"))
    env = no_venv_env()
    r = make(work, "system-run", env=env)  # no venv: hls4ml's copy cannot be found, make says what to set
    assert r.returncode != 0 and "set AP_TYPES=" in r.stdout + r.stderr
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "C bit-exact" in r.stdout.splitlines() and "x86/gemm_csim.o" in r.stdout
    p = design.plan
    a = np.fromfile(work / "data/A.bin", dtype=p.dtype.np_dtype).reshape(p.m, p.k).astype(np.int64)
    b = np.fromfile(work / "data/B.bin", dtype=p.dtype.np_dtype).reshape(p.k, p.n).astype(np.int64)
    c = np.fromfile(work / "system_output/C.bin", dtype=np.dtype(p.output.name)).reshape(p.m, p.n)
    assert np.array_equal(c.astype(np.int64), a @ b)  # no wrap: the exact sums fit C's type here
    assert np.array_equal(c, design.predict(a.astype(p.dtype.np_dtype), b.astype(p.dtype.np_dtype)))
    golden = work / "data/C_golden.bin"
    data = bytearray(golden.read_bytes())
    data[-1] ^= 1  # the last element: written by the last block of the write-back
    golden.write_bytes(bytes(data))
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=env)
    assert r.returncode != 0 and "C bit-exact" not in r.stdout.splitlines() and "differ" in r.stdout + r.stderr


DENSE_SAMPLES = 13


@pytest.fixture(scope="module")
def dense_project(tmp_path_factory):
    from aieflow.model_zoo import torch_mlp

    # DENSE_SAMPLES given (not a whole number of batches), the first two past the calibrated range
    x = np.random.default_rng(0).standard_normal((DENSE_SAMPLES, 64)).astype(np.float32)
    x[0], x[1] = -50.0, 50.0
    cal = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    d = aieflow.compile(torch_mlp([64, 16]), device="vck190", example_input=x, calibration=cal,
                        config={"precision": "int8", "layers": {"0": {"weights": "streamed"}}})
    assert type(d).__name__ == "StreamedDenseDesign"
    out = tmp_path_factory.mktemp("dense") / "d"
    d.save(out)
    return d, x, out / "project"


def test_streamed_dense_project_links_its_epilogue_and_builds_its_host(dense_project):
    """The streamed Dense layer's project on the GEMM's contract: `make -n hw` compiles and links
    the layer's dense_epilogue kernel beside the GEMM's movers, system.cfg defines it, and `make
    host` builds its own host (host/dense_host.cpp: the GEMM, then the epilogue) against the real
    XRT headers and library (Debian's libxrt-dev), warning-free."""
    _, _, proj = dense_project
    r = make(proj, "-n", "hw", "PLATFORM=/some/x.xpfm")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.replace("\\\n", " ").splitlines()
    compile_ = [s for s in lines if "v++ -c" in s and "-k dense_epilogue" in s and "pl/dense_epilogue.cpp" in s]
    link = [s for s in lines if "v++ -l" in s and "--config system.cfg" in s]
    assert compile_ and link and "build.hw/dense_epilogue.xo" in link[0], r.stdout
    cfg = (proj / "system.cfg").read_text().splitlines()
    assert "nk=dense_epilogue:1:dense_epilogue_0" in cfg
    assert re.search(r'extern "C" void dense_epilogue\(', (proj / "pl/dense_epilogue.cpp").read_text())
    # make run: the shipped batch, compared with its golden file; another input without one
    r = make(proj, "-n", "run")
    assert r.returncode == 0 and f"./host.exe design.xclbin data/X.bin Y.bin {DENSE_SAMPLES} data/Y_golden.bin" in r.stdout, r.stdout
    r = make(proj, "-n", "run", "X=in.bin", "SAMPLES=3")
    assert r.returncode == 0 and "./host.exe design.xclbin in.bin Y.bin 3 \n" in r.stdout + "\n", r.stdout
    line = dry_run_lines(make(proj, "-n", "hw", "PLATFORM=/p.xpfm"))[1]
    line("v++ -p", "--package.sd_dir data")
    readme = (proj / "README.md").read_text() + (proj / "DENSE.md").read_text()
    for command in ("make system-run", "make shim-run", "make run", "data/Y_golden.bin", "every sample given"):
        assert command in readme, command
    if not XRT_HEADER.is_file():
        pytest.skip("the XRT headers are missing: install Debian's libxrt-dev")
    r = make_host(proj)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "host/dense_host.cpp" in r.stdout
    host = (proj / "host/dense_host.cpp").read_text()
    for name in ("xrt::device", "xrt::kernel", "xrt::bo", "xrt::graph", "dense_epilogue"):
        assert name in host, name
    r = subprocess.run([str(proj / "host.exe")], capture_output=True, text=True)  # no board, no arguments
    assert r.returncode != 0 and "usage" in (r.stdout + r.stderr).lower(), r.stdout + r.stderr


def test_streamed_dense_system_cfg_and_every_data_file_the_graph_reads(dense_project):
    """The standalone streamed Dense project (`weights: streamed`, not segmented): system.cfg names
    only kernels its PL sources define (the GEMM's movers and the layer's dense_epilogue, which has
    no streams) and connects every PLIO of graph.h; every data file the graph's simulation reads
    (its PLIO files) exists, with a golden Cr per tile for the simulators."""
    d, _, proj = dense_project
    instances = check_system_cfg(proj)
    assert sorted(instances.values()) == ["dense_epilogue", "gemm_collect", "gemm_mover"]
    files = graph_data_files(proj)
    assert files and all((proj / f).is_file() for f in files), files
    c = d.plan.gemm.config
    assert len(list((proj / "data").glob("golden_cr*.txt"))) == c.tiles_i * c.tiles_j
    assert "$(MAKE) check-output OUT=x86simulator_output" in (proj / "Makefile").read_text()


@needs_ap_types
def test_streamed_dense_system_run_is_bit_exact_with_predict(dense_project, tmp_path):
    """The streamed Dense layer's `make system-run` without a venv: data/X.bin (every sample given
    at compile time, two of them at the input type's bounds) -> A / B as the host lays them out ->
    five loops with gemm_mover / gemm_collect as C simulation -> dense_epilogue (C simulation,
    Xilinx's ap_types) -> Y, equal to predict's codes and to an independent numpy requantisation of
    X W + bias."""
    d, xf, proj = dense_project
    work = tmp_path / "p"
    shutil.copytree(proj, work, ignore=shutil.ignore_patterns("system_output", "x86/system", "*.o", "host.exe"))
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=no_venv_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Y bit-exact" in r.stdout.splitlines()
    p, e = d.plan, d.plan.epilogue
    n = int((work / "data/samples.txt").read_text())
    assert n == DENSE_SAMPLES and n % p.batch
    x = np.fromfile(work / "data/X.bin", dtype=d.x_codes_np()).reshape(n, p.in_features).astype(np.int64)
    t = d.input_type
    assert (x[0] == t.min_code).all() and (x[1] == t.max_code).all()  # the edge rows
    y = np.fromfile(work / "system_output/Y.bin", dtype=np.dtype(e.y_np)).reshape(n, p.out_features).astype(np.int64)
    assert np.array_equal(y, d.predict(xf, raw=True).reshape(n, -1))
    # independent: int64 X W, bias shifted in, wrap to the accumulator, SRS (half to even), saturate, ReLU
    assert e.rounding == "conv_even" and e.shift > 0
    w = np.asarray(d.node.params["weight_q"]).astype(np.int64)
    acc = x @ w + (d.bias_codes().astype(np.int64) << e.bias_shift)
    acc = (acc + (1 << (e.acc_bits - 1))) % (1 << e.acc_bits) - (1 << (e.acc_bits - 1))
    q, rem, half = acc >> e.shift, acc & ((1 << e.shift) - 1), 1 << (e.shift - 1)
    ref = np.clip(q + ((rem > half) | ((rem == half) & (q % 2 == 1))), e.out_min, e.out_max)
    if e.relu:
        ref = np.maximum(ref, 0)
    assert np.array_equal(y, ref)
    # the shim-only run of the same steps (the PL kernels on the shim's ap_int), without a venv too
    r = make(work, "shim-run", env=no_venv_env())
    assert r.returncode == 0 and "Y bit-exact" in r.stdout.splitlines(), r.stdout + r.stderr


@needs_ap_types
def test_streamed_dense_system_run_in_the_transposed_orientation(tmp_path):
    """Orientation `wx` (A = W^T, B = X^T, C = (X W)^T), a16w8 with ReLU: the x86 system run lays A
    and B out as host/dense_host.cpp does and the epilogue reads C transposed; Y equals predict."""
    import torch

    from aieflow.gemm.dense import plan_streamed
    from aieflow.gemm.dense_design import StreamedDenseDesign

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 24), torch.nn.ReLU()).eval()
    x = torch.randn(7, 40)
    x[0] = -30.0  # the input's lower bound
    d = aieflow.compile(model, device="vck190", example_input=x, calibration=torch.randn(32, 40),
                        config={"precision": "a16w8", "layers": {"0": {"weights": "streamed"}}})
    plan = plan_streamed(d.graph, d.device, d.config, d.node, d.plan.reason, orientation="wx")
    d = StreamedDenseDesign(d.graph, d.device, d.config, plan, d.source, example=d.example)
    d.save(tmp_path / "d")
    proj = tmp_path / "d" / "project"
    r = make(proj, "system-run", f"AP_TYPES={ap_types_include()}", env=no_venv_env())
    assert r.returncode == 0 and "Y bit-exact" in r.stdout.splitlines(), r.stdout + r.stderr
    assert "gemm 24 x 7 x 40" in r.stdout  # m = out features, n = samples
    y = np.fromfile(proj / "system_output/Y.bin", dtype=np.dtype(plan.epilogue.y_np)).reshape(7, 24)
    want = d.predict(x.numpy(), raw=True).reshape(7, 24)
    assert np.array_equal(y.astype(np.int64), want.astype(np.int64)) and (want == 0).any() and (want > 0).any()


@needs_ap_types
def test_fp32_gemm_system_run_is_bit_exact_with_predict(tmp_path):
    """The GEMM family's float variant (fp32 on AIE1): `make system-run` in a moved copy without a venv
    gives C bit for bit equal to predict (the emulator's accumulation order) and close to a float64
    matmul of the shipped A and B (an independent reference; float sums differ by order only)."""
    design = aieflow.gemm(20, 24, 40, "fp32", "vck190", 2, "published", blocks=BLOCKS)
    assert design.plan.dtype.is_float
    design.save(tmp_path / "d")
    work = tmp_path / "moved" / "p"
    shutil.copytree(tmp_path / "d" / "project", work)
    r = make(work, "system-run", f"AP_TYPES={ap_types_include()}", env=no_venv_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "C bit-exact" in r.stdout.splitlines()
    p = design.plan
    a = np.fromfile(work / "data/A.bin", dtype=np.float32).reshape(p.m, p.k)
    b = np.fromfile(work / "data/B.bin", dtype=np.float32).reshape(p.k, p.n)
    c = np.fromfile(work / "system_output/C.bin", dtype=np.float32).reshape(p.m, p.n)
    assert c.view(np.uint32).tolist() == np.asarray(design.predict(a, b), dtype=np.float32).view(np.uint32).tolist()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.allclose(c, ref, rtol=1e-5, atol=1e-4 * np.abs(ref).max()) and np.abs(c).max() > 0
    assert "Float sums" in (work / "README.md").read_text()  # the golden Cr's accumulation order, said
    _simulate_and_compare(design, work, tmp_path)  # the simulators' Cr against golden files in that order
