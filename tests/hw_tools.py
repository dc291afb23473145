"""Shared pieces of the generated-project tests (``test_hw_project*.py``): ``make`` in a project,
the skips for the XRT and ap_types headers, a shell without the virtual environment, the lines of a
``make -n``, the host build against the real XRT, system.cfg against the project's PL sources and
graph.h, and the data files a graph's simulation main reads."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from aieflow.vitis import ap_types_include

XRT_HEADER = Path("/usr/include/xrt/xrt/xrt_device.h")  # where Debian's libxrt-dev puts the headers
needs_xrt = pytest.mark.skipif(not XRT_HEADER.is_file(),
                               reason="the XRT headers are missing: install Debian's libxrt-dev (apt-get install libxrt-dev)")
needs_ap_types = pytest.mark.skipif(ap_types_include() is None,
                                    reason="Xilinx's ap_types headers are missing: pip install hls4ml (it ships them)")


# what an outer make (``make test``) exports to the commands it runs: without them a project's make
# runs as a user's shell runs it (its make[N] levels and flags do not depend on how pytest was started)
_OUTER_MAKE = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")


def make(proj: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in (os.environ if env is None else env).items() if k not in _OUTER_MAKE}
    return subprocess.run(["make", "-C", str(proj), *args], capture_output=True, text=True, env=clean)


def no_venv_env() -> dict[str, str]:
    """A shell without the virtual environment (nor aieflow on PYTHONPATH)."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}


def dry_run_lines(r: subprocess.CompletedProcess) -> tuple[list[str], Callable[..., str]]:
    """The lines of a ``make -n`` (continued lines joined) and a finder: the first line holding every
    part given, asserting there is one."""
    lines = r.stdout.replace("\\\n", " ").splitlines()

    def line(*parts: str) -> str:
        found = [s for s in lines if all(p in s for p in parts)]
        assert found, f"no line with {parts} in:\n{r.stdout}"
        return found[0]

    return lines, line


def make_host(proj: Path) -> subprocess.CompletedProcess:
    """``make host`` against Debian's XRT (headers and libraries), warnings as errors."""
    libdir = next((str(p.parent) for p in Path("/usr/lib").rglob("libxrt_coreutil.so")), None)
    assert libdir, "libxrt-dev installs libxrt_coreutil.so"
    return make(proj, "host", "HOST_CXX=g++ -Werror", "XRT_INCLUDE=/usr/include/xrt", f"XRT_LIB={libdir}")


def check_system_cfg(proj: Path) -> dict[str, str]:
    """system.cfg of a project whose PL kernel k is defined in pl/<k>.cpp: every ``nk`` kernel is
    defined there with C linkage and has as many instance names as its count, every PLIO graph.h
    creates is connected to ``ai_engine_0`` exactly once in its direction, and the other end of every
    ``stream_connect`` is an argument of its instance's kernel.  Returns {instance: kernel}."""
    graph = (proj / "src/graph.h").read_text()
    ins = re.findall(r'adf::input_plio::create\("(\w+)"', graph)
    outs = re.findall(r'adf::output_plio::create\("(\w+)"', graph)
    assert ins and outs, "graph.h creates no PLIO"
    cfg = (proj / "system.cfg").read_text().splitlines()
    instances: dict[str, str] = {}
    for entry in (s[3:] for s in cfg if s.startswith("nk=")):
        kernel, count, cus = entry.split(":")
        assert int(count) == len(cus.split(".")), entry
        instances.update(dict.fromkeys(cus.split("."), kernel))
    assert instances, "system.cfg has no nk line"
    sources = {k: (proj / f"pl/{k}.cpp").read_text() for k in set(instances.values())}
    for k, text in sources.items():
        assert re.search(rf'extern "C" void {k}\(', text), f"pl/{k}.cpp does not define {k}"
    connects = [c.split("=", 1)[1].split(":") for c in cfg if c.startswith("stream_connect=")]
    into = [b.split(".")[1] for a, b in connects if b.startswith("ai_engine_0.")]
    out_of = [a.split(".")[1] for a, b in connects if a.startswith("ai_engine_0.")]
    assert sorted(into) == sorted(ins) and sorted(out_of) == sorted(outs), (into, out_of)
    for a, b in connects:  # the other end: an argument of the instance's kernel
        cu, port = (b if a.startswith("ai_engine_0.") else a).split(".")
        assert cu in instances, f"{cu}: no nk line makes this instance"
        assert re.search(rf"\b{port}\b", sources[instances[cu]]), (cu, port)
    return instances


def graph_data_files(proj: Path) -> list[str]:
    """Every data file a simulation of the graph reads: graph.h's input PLIO files and the GMIO
    panels graph.cpp's simulation main reads (``read_panel("data/...")``)."""
    graph = (proj / "src/graph.h").read_text()
    files = re.findall(r'adf::input_plio::create\("\w+", adf::plio_\d+_bits, "([^"]+)"', graph)
    main = proj / "src/graph.cpp"
    return files + (re.findall(r'read_panel\("([^"]+)"\)', main.read_text()) if main.is_file() else [])
