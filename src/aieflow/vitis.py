"""The Vitis system around a project's ADF graph, shared by the design kinds (issue 20).

One Makefile contract (``templates/system/Makefile.j2``: ``x86sim``, ``aiesim``, ``hw_emu``, ``hw``,
``package``, ``run``, ``shim-run``, ``system-run``, ``clean``; ``PLATFORM``, ``TARGET``,
``ITERATIONS``), the PL data movers (HLS ``mm2s`` / ``s2mm``, one instance per PLIO), the
``v++ --link`` configuration connecting them (``system.cfg``), the XRT host program and the x86
system run (host data -> mm2s C simulation -> graph on the shim -> s2mm -> golden comparison).

A kind gives its PLIOs (name, data file, AIE element type) and the files already rendered (the
PLIO input and golden files, from which each port's values per graph iteration follow).
"""

from __future__ import annotations

import importlib.util
import posixpath
from importlib import resources
from pathlib import Path
from typing import Any

from . import __version__
from .devices import Device
from .errors import PlanError, UnsupportedOpError
from .names import Code
from .templating import environment

_ENV = environment("system")

# the host-side C++ type of each AIE scalar type a PLIO carries (host/plio_io.h)
HOST_TYPES = {
    "int8": "std::int8_t", "uint8": "std::uint8_t", "int16": "std::int16_t", "uint16": "std::uint16_t",
    "int32": "std::int32_t", "uint32": "std::uint32_t", "int64": "std::int64_t", "uint64": "std::uint64_t",
    "float": "float", "bfloat16": "aieflow_io::bf16", "float16": "aieflow_io::fp16",
}
HOST_BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, "int64": 64, "uint64": 64,
             "float": 32, "bfloat16": 16, "float16": 16}

# Every file this module writes into a project (the tests check each one).
PL_SOURCES = ("pl/mm2s.cpp", "pl/s2mm.cpp")


def ap_types_include() -> Path | None:
    """The folder of Xilinx's open ``ap_int.h`` / ``ap_fixed.h`` / ``hls_stream.h`` as the hls4ml
    package ships them (``templates/vivado/ap_types``), or None without hls4ml.  hls4ml is not
    imported (only located)."""
    spec = importlib.util.find_spec("hls4ml")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        folder = Path(root) / "templates" / "vivado" / "ap_types"
        if (folder / "ap_int.h").is_file() and (folder / "hls_stream.h").is_file():
            return folder
    return None


# The project's kernels for its x86 runs: every src/kernels/*.cc compiled as one unit (x86/kernels.cc
# includes them: the unity build ``aieflow verify`` does, verify.unity_groups), once for both runs.
KERNELS_OBJECT = "x86/kernels.o"
SHIM_DIR = "x86/shim"  # the project's copy of aieflow's open AIE API / ADF shim (make shim-run, system-run)


def shim_files() -> dict[str, str]:
    """aieflow's x86 shim headers as project files under ``SHIM_DIR``: the project's x86 runs need
    nothing outside it (no aieflow installation, no absolute path)."""
    root = Path(str(resources.files("aieflow").joinpath("x86/include")))
    return {f"{SHIM_DIR}/{f.relative_to(root).as_posix()}": f.read_text()
            for f in sorted(root.rglob("*")) if f.is_file() and f.suffix in (".h", ".hpp", ".md")}


def ap_types_finder() -> str:
    """``scripts/find_ap_types.py`` of a project: prints the ap_types folder of an installed hls4ml
    (``make system-run``'s default ``AP_TYPES`` without Vitis HLS's settings)."""
    return resources.files("aieflow").joinpath("templates/system/find_ap_types.py").read_text()


def compare_script() -> str:
    """``scripts/compare.py``: a simulator's output PLIO file against its golden file, value by value."""
    return _ENV.get_template("compare.py.j2").render(version=__version__)


def _ports(plios: list[dict[str, Any]], files: dict[str, str], iterations: int, kind: str) -> list[dict[str, Any]]:
    out = []
    for i, p in enumerate(plios):
        ctype = p["ctype"]
        if ctype not in HOST_TYPES:
            raise UnsupportedOpError(f"a PLIO carrying '{ctype}' values has no host-side type",
                                     hint="PLIO elements are integers of 8 to 64 bits, float, bfloat16 or float16")
        name = posixpath.basename(p["file"])
        golden = f"golden_{name}"
        data = files[p["file"]] if kind == "mm2s" else files[f"data/{golden}"]
        values = len(data.split())
        if values % iterations:
            raise UnsupportedOpError(f"PLIO '{p['var']}': {values} values are not {iterations} whole graph iterations")
        out.append({"period": 1, "real": 1, "src": None, **p, "cu": f"{kind}_{i}", "host_type": HOST_TYPES[ctype],
                    "file_name": name, "golden_name": golden, "per_iteration": values // iterations})
    return out


def check_stream_count(device: Device, ins: list[dict[str, Any]], outs: list[dict[str, Any]], connects,
                       hint: str = "") -> None:
    """Every stream system.cfg connects to the AI Engine array is one of the device's PLIO streams
    (catalog: ``plio_columns`` interface tiles x ``plio_in_per_column`` PL->AIE /
    ``plio_out_per_column`` AIE->PL streams).  One mover per PLIO cannot exceed them; more are
    refused by name with the numbers (there is no sourced NoC / PL limit in the catalog to apply)."""
    into = len(ins) + sum(1 for c in connects if c.split(":")[1].startswith("ai_engine_0."))
    out_of = sum(1 for p in outs if not p.get("src")) + sum(1 for c in connects if c.startswith("ai_engine_0."))
    for what, used, per in (("PL->AIE", into, device.plio_in_per_column), ("AIE->PL", out_of, device.plio_out_per_column)):
        have = device.plio_columns * per
        if used > have:
            raise PlanError(f"the project needs {used} {what} streams (one data mover or PL kernel port each); "
                            f"{device.board} has {have} ({device.plio_columns} interface tiles x {per})",
                            hint=hint or "fewer parallel PLIOs: fewer replicas, or fewer cascade rows (cas_num)")


def system_files(files: dict[str, str], *, device: Device, graph_class: str, graph_var: str,
                 plio_in: list[dict[str, Any]], plio_out: list[dict[str, Any]], iterations: int,
                 samples_per_iteration: int, classes: list[str], tiles, plio_bits: int = 64,
                 pl_kernels: list[dict[str, Any]] = (), connects: list[str] = (), free_running: bool = False,
                 per_run: bool = False, x86: dict[str, Any] | None = None, refuse_hint: str = "",
                 ddr: list[dict[str, Any]] = ()) -> dict[str, str]:
    """Makefile, system.cfg, PL movers, XRT host, x86 system run and the compare script of a project
    whose graph reads ``plio_in`` and writes ``plio_out`` (dicts with ``var``, ``file`` (``data/...``)
    and ``ctype``; an output's ``period`` / ``real``: value i is a sample's when ``i % period < real``,
    the others are rows a kernel pads its batch with; an output's ``src``: the stream it drains when
    that is a PL kernel's, not the graph's PLIO ``var``); ``files`` holds the PLIO input and golden files already; ``classes``: the kernel
    classes the project's ``src/kernels/*.cc`` instantiate; ``tiles``: its kernels (``var``);
    ``plio_bits``: the width of every PLIO of the graph (the movers' stream word: 32, 64 or 128).
    ``pl_kernels``: the kind's own PL kernels (``name``, ``cu``, ``source``, ``deps``: HLS tops
    built by ``v++ -c -k`` next to the movers), ``connects``: their ``stream_connect`` lines;
    ``free_running``: the graph runs forever (``graph.run(-1)``: the host waits for the s2mm
    movers only); ``per_run``: PS-orchestrated, one graph iteration per host run (the host starts
    the movers, every PL kernel of ``pl_kernels`` and ``graph.run(1)`` per iteration, each mover on
    its iteration's slice of the buffer, and waits for all: the thesis flow); ``x86``: the kind's own x86 runs (``template`` of x86/system.cpp or its ``text``
    rendered by the kind, ``shim_units``,
    ``shim_args``, ``system_units``, ``csim_units``; defaults: the Dense / DAG / CNN harness);
    ``refuse_hint``: what the kind's user changes when its streams exceed the device's PLIOs;
    ``ddr``: the graph's DDR segments (``name``, ``transfers``, ``bytes``: the mapped graph's ``ddr``
    links), which the host moves row by row through their GMIO pair each graph iteration (one
    iteration per ``graph.run``; not with ``per_run`` or ``free_running``)."""
    if plio_bits not in (32, 64, 128):
        raise UnsupportedOpError(f"a PLIO of {plio_bits} bits has no data mover", hint="PLIOs are 32, 64 or 128 bits wide")
    ins = _ports(plio_in, files, iterations, "mm2s")
    outs = _ports(plio_out, files, iterations, "s2mm")
    if ddr and (per_run or free_running):
        raise UnsupportedOpError("DDR segments are moved by the host around each graph run: not with a per-run or "
                                 "free-running graph")
    if per_run and free_running:
        raise UnsupportedOpError("a free-running graph (graph.run(-1)) cannot be started once per iteration (per_run)")
    for p in ins + outs if per_run else ():  # each iteration's slice of a buffer is whole PLIO words
        if p["per_iteration"] * HOST_BITS[p["ctype"]] % plio_bits:
            raise UnsupportedOpError(f"PLIO '{p['var']}': {p['per_iteration']} values per iteration are not whole "
                                     f"{plio_bits}-bit words, so the host cannot start one run per iteration",
                                     hint="pad each iteration's values to whole PLIO words")
    check_stream_count(device, ins, outs, connects, refuse_hint)
    runs = {"template": "x86_system.cpp.j2", "shim_units": ["x86/harness.cpp", KERNELS_OBJECT],
            "shim_args": "--data . --out shim_output --iterations $(ITERATIONS)", "shim_out": "shim_output",
            "system_units": ["x86/system.cpp", KERNELS_OBJECT], "csim_units": ["x86/pl_csim.cpp"], **(x86 or {})}
    # Makefile text given by the kind (never from a model): printed as it is, `$(...)` included
    make_runs = {key: Code(" ".join(v) if isinstance(v, list) else v) for key, v in runs.items()
                 if key not in ("csim_units", "text")}
    make_runs["csim_units"] = [{"src": Code(u), "obj": Code(posixpath.splitext(u)[0] + ".o")} for u in runs["csim_units"]]
    ctx = dict(
        version=__version__, device=device, graph_class=graph_class, graph_var=graph_var, plio_in=ins,
        plio_out=outs, iterations=iterations, samples_per_iteration=samples_per_iteration, plio_bits=plio_bits,
        classes=classes, tiles=tiles, platform_hint=device.vitis_platform, pl_kernels=list(pl_kernels),
        connects=list(connects), free_running=free_running, per_run=per_run, runs=make_runs, shim_dir=SHIM_DIR,
        ddr=list(ddr),
    )
    static = resources.files("aieflow").joinpath("templates/system")
    out = {
        "Makefile": _ENV.get_template("Makefile.j2").render(**ctx),
        "system.cfg": _ENV.get_template("system.cfg.j2").render(**ctx),
        "pl/movers.h": _ENV.get_template("movers.h.j2").render(**ctx),
        "host/host.cpp": _ENV.get_template("host.cpp.j2").render(**ctx),
        "host/plio_ports.h": _ENV.get_template("plio_ports.h.j2").render(**ctx),
        "x86/system.cpp": runs.get("text") or _ENV.get_template(str(runs["template"])).render(**ctx),
        "scripts/compare.py": compare_script(),
        "host/plio_io.h": static.joinpath("plio_io.h").read_text(),
        "x86/pl_csim.cpp": static.joinpath("pl_csim.cpp").read_text(),
        "scripts/find_ap_types.py": ap_types_finder(),
    }
    if "README.md" in files:  # the kind's README, then the build and run commands of every target
        out["README.md"] = files["README.md"] + _ENV.get_template("README.md.j2").render(**ctx)
    for rel in PL_SOURCES:
        out[rel] = static.joinpath(posixpath.basename(rel)).read_text()
    out.update(shim_files())
    return out
