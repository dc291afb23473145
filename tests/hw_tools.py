"""Shared pieces of the generated-project tests (``test_hw_project*.py``): ``make`` in a project,
the skips for the XRT and ap_types headers, a shell without the virtual environment, the lines of a
``make -n`` and the host build against the real XRT."""

from __future__ import annotations

import os
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
