"""`aieflow verify`: the project's own C++ (graph.h, kernels, weights) built with g++ against
the open shim (the kernels at -O2, the harness that only builds the graph at -O0), executed on x86 and compared bit-exactly with the emulator.

Every device/precision pair is verified on a design with cascades (cas_len > 1), several rows
(cas_num > 1) and the generation's inter-layer link (direct buffers on AIE, memory-tile
re-tiling on AIE-ML), on 1,000 samples.  Corrupted projects prove the comparison can fail and
that it names the layer that went wrong.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from cases import GENERATION_PRECISIONS

import aieflow
from aieflow.cli import main
from aieflow.model_zoo import qdq_mlp, torch_mlp
from aieflow.numerics.types import FixedType, parse_type
from aieflow.verify import VerifyError, verification_inputs

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: verify builds C++20 with g++")

CACHE = Path(tempfile.gettempdir()) / "aieflow-test-verify-cache"
WIDTHS = [40, 72, 24, 10]
# Torch layer names are the module indices: 0, 2, 4 (ReLUs in between).
PARALLEL = {
    "0": {"parallelism": {"cas_len": 2, "cas_num": 2}},
    "2": {"parallelism": {"cas_len": 2, "cas_num": 3}},
    "4": {"parallelism": {"cas_len": 3, "cas_num": 1}},
}


def multi_tile_design(device: str, precision: str, layers=PARALLEL):
    x = np.random.default_rng(0).standard_normal((256, WIDTHS[0])).astype(np.float32)
    net = torch_mlp(WIDTHS, seed=3)
    return aieflow.compile(
        net, device=device, example_input=x[:16], calibration=x, config={"precision": precision, "layers": layers}
    )


@pytest.mark.parametrize("device, precision", GENERATION_PRECISIONS)
def test_every_generation_and_precision_verifies_bit_exact(device, precision):
    d = multi_tile_design(device, precision)
    plans = [n.plan for n in d.layers()]
    assert [(p.cas_len, p.cas_num) for p in plans] == [(2, 2), (2, 3), (3, 1)]
    from aieflow.passes.transport import direct_link_possible

    # AIE-ML links through a memory tile unless the two layouts already agree (issue 7: direct)
    ls = d.layers()
    links = ["buffer" if device == "vck190" or direct_link_possible(a, b) else "memtile" for a, b in zip(ls, ls[1:], strict=False)]
    assert [p.link for p in plans] == ["plio", *links]
    r = d.verify(samples=1000, cache_dir=CACHE)
    assert r.samples == 1000 and r.values == 1000 * WIDTHS[-1]
    assert r.ok, r.verdict()
    assert "PASS" in r.verdict()


def _corrupt(d, rel: str, edit) -> aieflow.Design:
    files = dict(d.files)
    files[rel] = edit(files[rel])
    assert files[rel] != d.files[rel]
    return dataclasses.replace(d, files=files)


@pytest.fixture(scope="module")
def aie_ml_design():
    return multi_tile_design("vek280", "int8", {k: v for k, v in PARALLEL.items() if k != "4"})


def test_wrong_shift_is_a_mismatch_in_that_layer(aie_ml_design):
    def bump_shift(text: str) -> str:
        head, cfg = text.split("struct l_2_cfg", 1)
        return head + "struct l_2_cfg" + re.sub(r"SHIFT = (\d+)", lambda m: f"SHIFT = {int(m.group(1)) + 1}", cfg, count=1)

    bad = _corrupt(aie_ml_design, "src/layers.h", bump_shift)
    r = bad.verify(samples=200, cache_dir=CACHE)
    assert not r.ok and r.mismatches > 0
    assert r.first is not None and r.first.layer == "2"
    assert isinstance(r.first.expected, int) and r.first.expected != r.first.got
    assert "FAIL" in r.verdict() and "layer '2'" in r.verdict()


def test_weights_on_the_wrong_tile_are_a_mismatch(aie_ml_design):
    d = aie_ml_design
    a, b = "src/weights/l_2_r0_c0.h", "src/weights/l_2_r1_c0.h"
    files = dict(d.files)
    files[a] = d.files[b].replace("l_2_r1_c0", "l_2_r0_c0")
    files[b] = d.files[a].replace("l_2_r0_c0", "l_2_r1_c0")
    r = dataclasses.replace(d, files=files).verify(samples=200, cache_dir=CACHE)
    assert not r.ok
    assert r.first.layer == "2"
    # the first layer is untouched, so it must not be blamed
    assert r.first.layer != "0"


def test_miswired_input_port_is_a_mismatch(aie_ml_design):
    # the second cascade column of layer 0 reads the first column's input PLIO
    bad = _corrupt(
        aie_ml_design,
        "src/graph.h",
        lambda t: t.replace("adf::connect(in_l_0_c1.out[0], k_l_0_r0_c1.in[0])", "adf::connect(in_l_0_c0.out[0], k_l_0_r0_c1.in[0])"),
    )
    r = bad.verify(samples=100, cache_dir=CACHE)
    assert not r.ok and r.first.layer == "0" and r.first.row == 0


def test_build_failure_is_reported_not_a_traceback(aie_ml_design):
    bad = _corrupt(aie_ml_design, "src/kernels/dense.h", lambda t: t.replace("static ACCV read_cascade", "static ACCV read_cascade oops"))
    with pytest.raises(VerifyError, match="does not compile against the x86 shim"):
        bad.verify(samples=10, cache_dir=CACHE)


def test_second_verify_uses_the_cached_build(aie_ml_design):
    aie_ml_design.verify(samples=20, cache_dir=CACHE)
    r = aie_ml_design.verify(samples=20, cache_dir=CACHE)
    assert r.cached and r.build_seconds == 0.0 and r.ok


def test_user_samples_and_uneven_sample_counts(aie_ml_design):
    x = np.random.default_rng(5).standard_normal((37, WIDTHS[0])).astype(np.float32) * 3
    r = aie_ml_design.verify(x, cache_dir=CACHE)
    assert r.ok and r.samples == 37  # 37 is not a multiple of the batch: the tail is padded


@pytest.mark.parametrize("spec", ["int8", "ap_fixed<16,6>", "ap_ufixed<8,3>"])
def test_generated_inputs_cover_the_type_range_and_its_edges(spec):
    t = parse_type(spec)
    assert isinstance(t, FixedType)
    x = verification_inputs(t, (33,), 1000, seed=1)
    assert x.shape == (1000, 33)
    assert x.min() == t.min_code and x.max() == t.max_code
    assert (x == t.min_code).all(axis=1).any() and (x == t.max_code).all(axis=1).any()
    assert (x == 0).all(axis=1).any()
    assert len(np.unique(x)) > min(200, t.max_code - t.min_code)  # not only edges


def test_cli_verify_pass_and_fail(tmp_path, capsys):
    d = aieflow.compile(qdq_mlp([24, 40, 8], seed=2), device="vck190")
    d.save(tmp_path / "good")
    assert main(["verify", str(tmp_path / "good"), "--samples", "1000", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "1000 samples" in out

    bad = tmp_path / "good" / "project" / "src" / "layers.h"
    bad.write_text(re.sub(r"SHIFT = (\d+)", lambda m: f"SHIFT = {int(m.group(1)) + 2}", bad.read_text(), count=1))
    assert main(["verify", str(tmp_path / "good"), "--samples", "50", "--quiet"]) == 2  # the seal says it was edited
    assert "layers.h' was changed after aieflow saved the design" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "good"), "--samples", "50", "--quiet", "--no-check"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "first mismatch in layer 'fc0'" in out


def test_units_build_with_the_shims_precompiled_header_and_without_a_usable_one(tmp_path, monkeypatch):
    """build_units gives every unit the shim's precompiled header (one .gch per flag set in the
    cache root, built once, shared by builds into other cache folders), g++ finds it valid for the
    unit's flags (-Winvalid-pch -Werror, and -H marks it used with '!'), and a .gch that is not valid
    only makes g++ read the shim's text: the build still succeeds."""
    import os
    import stat
    import subprocess

    from aieflow.verify import FLAGS, SETUP_FLAGS, build_units, pch_root

    monkeypatch.setenv("AIEFLOW_CACHE_DIR", str(tmp_path / "root"))
    log, err = tmp_path / "args.log", tmp_path / "stderr.log"
    cxx = tmp_path / "cxx"
    cxx.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {shutil.which("g++")} "$@" $AIEFLOW_TEST_EXTRA 2>>{err}\n')
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("AIEFLOW_TEST_EXTRA", "-Winvalid-pch -H")
    sources = {"x86/harness.cpp": "#include <adf.h>\nint kernel();\nint main() { return kernel() - 7; }\n",
               "src/kernels/k.cc": "#include <adf.h>\nint kernel() { return aie::vector<int32, 8>().size() - 1; }\n"}
    units = ["x86/harness.cpp", "src/kernels/k.cc"]

    def lines(kind):
        return [line.split() for line in log.read_text().splitlines() if kind in line.split()]

    binary, cached, _ = build_units(sources, units, 20, cache_dir=tmp_path / "c1", setup=("x86/harness.cpp",))
    assert not cached and subprocess.run([binary]).returncode == 0
    headers = lines("c++-header")
    assert sorted(tuple(a[:len(FLAGS)]) for a in headers) == sorted([FLAGS, SETUP_FLAGS])
    gch = sorted(pch_root().glob("*.gch"))
    assert len(gch) == 2
    compiles = lines("-c")
    assert len(compiles) == 2 and all("-include" in a and {"-Wall", "-Wextra", "-Werror"} <= set(a) for a in compiles)
    used = [line for line in err.read_text().splitlines() if line.endswith("aieflow_pch.h.gch")]
    assert len(used) == 2 and all(line.startswith("! ") for line in used), used  # '!': a valid PCH, used

    again, cached, _ = build_units(sources, units, 20, cache_dir=tmp_path / "c2", setup=("x86/harness.cpp",))
    assert not cached and again != binary and subprocess.run([again]).returncode == 0
    assert len(lines("c++-header")) == 2  # the other cache folder's build reuses the .gch files

    for p in gch:  # not a PCH any more: g++ reads the shim's text instead
        p.write_bytes(b"not a precompiled header")
    monkeypatch.setenv("AIEFLOW_TEST_EXTRA", "")
    third, cached, _ = build_units(sources, units, 20, cache_dir=tmp_path / "c3", setup=("x86/harness.cpp",))
    assert not cached and subprocess.run([third]).returncode == 0
    assert len(lines("c++-header")) == 2 and os.path.getsize(gch[0]) == len(b"not a precompiled header")


def test_only_the_most_recently_used_precompiled_headers_are_kept(tmp_path):
    import os

    from aieflow.verify import PCH_KEEP, _prune_pch

    for i in range(PCH_KEEP + 3):
        p = tmp_path / f"{i:02d}.gch"
        p.write_bytes(b"x")
        os.utime(p, (1_000_000 + i, 1_000_000 + i))
    (tmp_path / "other.txt").write_text("not a header")
    _prune_pch(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{i:02d}.gch" for i in range(3, PCH_KEEP + 3)] + ["other.txt"]


def test_cli_verify_rejects_a_bad_sample_count(tmp_path, capsys):
    d = aieflow.compile(qdq_mlp([8, 8], seed=2), device="vek280")
    d.save(tmp_path / "d")
    assert main(["verify", str(tmp_path / "d"), "--samples", "0"]) == 2
    assert "--samples must be at least 1" in capsys.readouterr().err


def test_setup_units_build_at_o0_and_the_rest_at_o2(tmp_path, monkeypatch):
    """build_units: the units named ``setup`` get -O0, every other unit -O2, all with -Wall -Wextra
    -Werror; the setup list is part of the cache key (another list builds again)."""
    import os
    import stat

    from aieflow.verify import build_units

    log = tmp_path / "args.log"
    cxx = tmp_path / "cxx"
    cxx.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {shutil.which("g++")} "$@"\n')
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CXX", str(cxx))
    sources = {"x86/harness.cpp": "int kernel();\nint main() { return kernel() - 7; }\n",
               "src/kernels/k.cc": "int kernel() { return 7; }\n"}
    units = ["x86/harness.cpp", "src/kernels/k.cc"]
    binary, cached, _ = build_units(sources, units, 10, cache_dir=tmp_path / "c", setup=("x86/harness.cpp",))
    assert not cached and os.access(binary, os.X_OK)
    compiles = {line.split(" -c ")[1].split()[0]: line.split() for line in log.read_text().splitlines()
                if " -c " in line}
    harness = next(a for u, a in compiles.items() if u.endswith("x86/harness.cpp"))
    kernel = next(a for u, a in compiles.items() if u.endswith("src/kernels/k.cc"))
    assert "-O0" in harness and "-O2" not in harness
    assert "-O2" in kernel and "-O0" not in kernel
    for args in (harness, kernel):
        assert {"-Wall", "-Wextra", "-Werror", "-ffp-contract=off"} <= set(args)
    again, cached, _ = build_units(sources, units, 10, cache_dir=tmp_path / "c")  # no setup units: all -O2
    assert not cached and again != binary
    assert sum(" -c " in line for line in log.read_text().splitlines()) == 4


def test_kernel_units_build_as_groups_and_alone_when_a_group_does_not_compile(tmp_path, monkeypatch):
    """build_units compiles the src/kernels/*.cc units in groups, one g++ process per group (a unit
    that includes them, unity_groups), the harness alone; kernels that cannot share a unit (here two
    `static int value()` of different values) make the group fail, and each is then compiled alone:
    the harness still sees each kernel's own value."""
    import stat
    import subprocess

    from aieflow.verify import build_units, unity_groups

    assert unity_groups(["x86/harness.cpp", "src/kernels/a.cc", "src/kernels/b.cc", "src/kernels/c.cc",
                         "x86/fsm_csim.cpp"], 2, alone=("x86/harness.cpp",)) == [
        ("x86/harness.cpp",), ("x86/fsm_csim.cpp",), ("src/kernels/a.cc", "src/kernels/c.cc"), ("src/kernels/b.cc",)]
    assert unity_groups(["src/kernels/a.cc"], 4) == [("src/kernels/a.cc",)]
    log = tmp_path / "args.log"
    cxx = tmp_path / "cxx"
    cxx.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {shutil.which("g++")} "$@"\n')
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CXX", str(cxx))
    harness = "int a();\nint b();\nint main() { return a() * 10 + b() == 12 ? 0 : 1; }\n"
    units = ["x86/harness.cpp", "src/kernels/a.cc", "src/kernels/b.cc"]

    def build(a, b, cache):
        log.write_text("")
        sources = {"x86/harness.cpp": harness, "src/kernels/a.cc": a, "src/kernels/b.cc": b}
        binary, cached, _ = build_units(sources, units, 10, cache_dir=tmp_path / cache, jobs=1,
                                        setup=("x86/harness.cpp",))
        assert not cached and subprocess.run([binary]).returncode == 0
        return [line.split(" -c ")[1].split()[0] for line in log.read_text().splitlines() if " -c " in line]

    shared = build("int a() { return 1; }\n", "int b() { return 2; }\n", "shared")
    assert len(shared) == 2 and shared[0].endswith("x86/harness.cpp") and shared[1].endswith("unity/1.cc")
    clash = build("static int value() { return 1; }\nint a() { return value(); }\n",
                  "static int value() { return 2; }\nint b() { return value(); }\n", "clash")
    assert [Path(u).name for u in clash] == ["harness.cpp", "1.cc", "a.cc", "b.cc"]
