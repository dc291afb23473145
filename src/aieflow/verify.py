"""Run a design's own generated C++ on x86 against the open AIE API / ADF shim and compare it,
bit for bit, with the emulator (``predict``).

The harness compiles the project's ``src/graph.h`` and ``src/kernels/*.cc`` unchanged (only
``x86/harness.cpp`` and the shim headers are x86-specific), feeds the same PLIO text files the
Vitis project uses and reads the output PLIO files back.  Builds are cached by a hash of
everything that goes into them, so verifying the same design again only re-runs it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .cache import cache_root
from .errors import AieflowError, ConfigError
from .families.dense.resident_cascade import tile_var
from .numerics import fixed
from .numerics.types import FixedType, FloatType, NumericType
from .ops.dense import DensePlan, from_panels
from .ops.post import written
from .passes.emit import (
    dense_layers,
    layer_idents,
    plio_input_files,
    plio_ports,
    replica_merge,
    replica_share,
)
from .progress import task

if TYPE_CHECKING:
    from .design import Design

log = logging.getLogger(__name__)

FLAGS = ("-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off")
# A setup unit (``build_units(setup=...)``: a harness that only builds the graph and reads and writes
# its PLIO files, the kernels' code in units of their own) at -O0: GCC spends most of a build
# optimising the graph's construction, which runs once.  The kernels stay at FLAGS' -O2; the value of
# a computation does not depend on the level (IEEE arithmetic, -ffp-contract=off, no -ffast-math).
SETUP_FLAGS = tuple("-O0" if f == "-O2" else f for f in FLAGS)
# The shim's precompiled header (g++ ``.gch``), one per compiler, flag set, architecture and shim
# content: every unit of a build gets ``-include`` of a header holding PCH_HEADER with the .gch
# beside it, so that g++ loads the parsed shim instead of parsing it again (about a third of a
# kernel's compile time).  The shim's headers are ``#pragma once``, so a unit's own ``#include
# <adf.h>`` adds nothing; a .gch that is missing or does not match makes g++ read the header's text,
# with the same result.  The .gch files live in ``cache_root()/x86/pch`` whatever cache a build
# names (they depend on no design), the PCH_KEEP most recently used ones kept.
PCH_HEADER = "#include <adf.h>\n"
PCH_KEEP = 6  # one shim: 3 architectures x 2 flag sets; about 110 MB each with g++ 12
DEFAULT_SAMPLES = 1000
MAX_SAMPLES = 1_000_000  # generated verification samples
MAX_SAMPLE_BYTES = 1 << 30  # generated input values (int64 codes / float32) of one verify run


class VerifyError(AieflowError):
    """The harness could not be built or run (not a numerical mismatch)."""


@dataclass(frozen=True)
class Mismatch:
    layer: str
    row: int  # cascade row (output slice) of the tile that wrote the value
    sample: int
    index: int  # output feature of the layer
    expected: Any
    got: Any


class X86Outcome:
    """What every design kind's x86 verify result shares: its verdict and the build note."""

    mismatches: int
    build_seconds: float
    cached: bool

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def build_note(self) -> str:
        return "cached build" if self.cached else f"built in {self.build_seconds:.1f} s"


@dataclass(frozen=True)
class VerifyResult(X86Outcome):
    samples: int
    values: int  # output values compared
    mismatches: int
    first: Mismatch | None
    build_seconds: float
    run_seconds: float
    cached: bool

    def verdict(self) -> str:
        build = self.build_note()
        head = (
            f"{self.samples} samples, {self.values} output values: "
            f"{build}, ran in {self.run_seconds:.2f} s"
        )
        if self.ok:
            return f"verify: PASS, bit-exact: {head}"
        f = self.first
        where = (
            f"first mismatch in layer '{f.layer}' (tile row {f.row}), sample {f.sample}, output {f.index}: "
            f"expected {f.expected}, got {f.got}"
            if f is not None
            else "no layer identified"
        )
        return f"verify: FAIL, {self.mismatches} of {self.values} output values differ: {head}\n  {where}"


# ---------------------------------------------------------------------------------------- build


def shim_include() -> Path:
    return Path(str(resources.files("aieflow").joinpath("x86/include")))


def compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++")
    if not cxx or shutil.which(cxx) is None:
        raise VerifyError(
            "no C++ compiler found: verify builds the generated kernels with g++",
            hint="install g++ (GCC 11 or newer, for C++20) or set CXX",
        )
    return cxx


def _shim_hash(h: Any) -> None:
    inc = shim_include()
    for p in sorted(inc.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(inc)).encode() + b"\0" + p.read_bytes() + b"\0")


def _compiler_version(cxx: str) -> str:
    return subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout


def _build_key(cxx: str, arch: int, sources: dict[str, str]) -> str:
    h = hashlib.sha256()
    version = _compiler_version(cxx)
    h.update(f"{cxx}\0{version}\0{' '.join(FLAGS)}\0{arch}\0".encode())
    _shim_hash(h)
    for rel in sorted(sources):
        h.update(rel.encode() + b"\0" + sources[rel].encode() + b"\0")
    return h.hexdigest()[:32]


def build_harness(
    files: dict[str, str], arch: int, cache_dir: Path | None = None, jobs: int | None = None
) -> tuple[Path, bool, float]:
    """Compile the Dense-chain project's harness; returns (binary, was cached, seconds spent building)."""
    sources = {rel: text for rel, text in files.items() if rel.startswith(("src/", "x86/"))}
    if "x86/harness.cpp" not in sources:
        raise VerifyError(
            "the project has no x86/harness.cpp (it was written by an older aieflow)",
            hint="compile the model again",
        )
    units = ["x86/harness.cpp", *sorted(r for r in sources if r.startswith("src/kernels/") and r.endswith(".cc"))]
    return build_units(sources, units, arch, cache_dir=cache_dir, jobs=jobs, setup=("x86/harness.cpp",))


def build_units(
    sources: dict[str, str],
    units: Sequence[str],
    arch: int,
    what: str = "",
    cache_dir: Path | None = None,
    jobs: int | None = None,
    setup: Sequence[str] = (),
) -> tuple[Path, bool, float]:
    """Compile ``units`` (paths in ``sources``) against the shim and link them into one harness.

    Every design kind builds through here so they share one compiler, flag set and build cache:
    the binary is keyed by a hash of the compiler, flags, shim headers, sources and unit list, and
    is staged into the cache atomically, and a lock file beside it makes a concurrent build of the
    same design (a sweep's workers sharing the cache) wait for the first and reuse its binary.
    ``what`` names the design kind in errors ("GEMM ", "recurrent ", ...).  ``setup`` names the units
    that hold no kernel code (a harness that only builds the graph and moves its data): those compile
    with SETUP_FLAGS (-O0), the others with FLAGS.  Returns (binary, was cached, seconds spent building).
    """
    cxx = compiler()
    setup = tuple(u for u in units if u in set(setup))
    key = _build_key(cxx, arch, {**sources, "<units>": " ".join(units),
                                 "<setup>": " ".join(setup) + "\0" + " ".join(SETUP_FLAGS)})
    binary = (cache_dir or cache_root() / "x86") / key / "harness"
    if binary.is_file():
        log.info("the %sx86 harness is built already (cache %s)", what, binary.parent)
        return binary, True, 0.0
    with _build_lock(binary.parent):
        if binary.is_file():  # another process (a sweep's worker) built it while we waited
            log.info("the %sx86 harness was built by another process meanwhile (cache %s)", what, binary.parent)
            return binary, True, 0.0
        return _build(sources, units, arch, what, cxx, binary, jobs, setup)


@contextlib.contextmanager
def _build_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder/.lock`` (exclusive, waiting): one build of a key at a time, across processes
    and, on a file system with working locks, machines sharing the cache.  A cache folder that
    cannot be created or locked is built into without it (staging keeps that safe, only slower)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


def pch_root() -> Path:
    """Where the shim's precompiled headers are cached (see PCH_HEADER)."""
    return cache_root() / "x86" / "pch"


def _pch_key(version: str, flags: Sequence[str], arch: int) -> str:
    h = hashlib.sha256()
    h.update(f"{version}\0{' '.join(flags)}\0{arch}\0{PCH_HEADER}".encode())
    _shim_hash(h)
    return h.hexdigest()[:32]


def _prune_pch(folder: Path) -> None:
    """Keep the PCH_KEEP most recently used .gch files of ``folder``.  A build that still links to a
    removed one reads the shim's text instead (see PCH_HEADER)."""
    try:
        found = sorted(((p.stat().st_mtime, p) for p in folder.glob("*.gch")), reverse=True)
    except OSError:
        return
    for _, p in found[PCH_KEEP:]:
        with contextlib.suppress(OSError):
            p.unlink()


def _precompiled(cxx: str, flags: Sequence[str], arch: int, work: Path,
                 run: Any) -> list[str]:
    """The ``-include`` arguments that give a unit compiled with ``flags`` the shim's precompiled
    header: the cached .gch, built first (in ``work``, then staged into the cache atomically) when
    there is none.  ``run(args)`` runs a compiler.  [] when the header cannot be built (the units'
    own compile then reports what is wrong)."""
    version = _compiler_version(cxx)
    key = _pch_key(version, flags, arch)
    cached = pch_root() / f"{key}.gch"
    local = work / "pch" / key
    local.mkdir(parents=True, exist_ok=True)
    header = local / "aieflow_pch.h"
    header.write_text(PCH_HEADER)
    gch = local / "aieflow_pch.h.gch"
    if not cached.is_file():
        fresh = local / "fresh.gch"
        res = run([cxx, *flags, f"-D__AIE_ARCH__={arch}", f"-I{shim_include()}", "-x", "c++-header", str(header),
                   "-o", str(fresh)])
        if res.returncode != 0:
            log.debug("the shim's precompiled header did not build (the units build without it):\n%s",
                      _tail(res.stderr))
            return []
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            staged = cached.with_name(f".{key}.{os.getpid()}.{threading.get_ident()}.tmp")
            shutil.move(fresh, staged)
            os.replace(staged, cached)
        except OSError as e:  # a cache that cannot be written: this build uses its own copy
            log.debug("the shim's precompiled header is not cached (%s)", e)
            os.replace(fresh, gch)
            return ["-include", str(header)]
        _prune_pch(cached.parent)
    with contextlib.suppress(OSError):
        os.utime(cached)  # recently used: kept by _prune_pch
    gch.symlink_to(cached)
    return ["-include", str(header)]


def precompile_shim(arch: int) -> list[Path]:
    """Build (or find) the shim's precompiled headers of both flag sets for ``arch`` in the cache and
    return their paths: what the first verify of a build would do before its units (a test or a CI
    job can warm them ahead)."""
    cxx = compiler()

    def run(args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(args, capture_output=True, text=True)

    version = _compiler_version(cxx)
    with tempfile.TemporaryDirectory(prefix="aieflow-pch-") as tmp:
        for flags in (FLAGS, SETUP_FLAGS):
            _precompiled(cxx, flags, arch, Path(tmp), run)
    return [pch_root() / f"{_pch_key(version, flags, arch)}.gch" for flags in (FLAGS, SETUP_FLAGS)]


def unity_groups(units: Sequence[str], parts: int, alone: Sequence[str] = ()) -> list[tuple[str, ...]]:
    """The kernel units (``src/kernels/*.cc``) of a build in at most ``parts`` groups, each compiled
    as one unit that includes them (a "unity" build); every other unit alone.  A design's kernel
    units are explicit instantiations of a few class templates over the same shim types: g++ spends
    most of each unit's time instantiating the shim (aie::vector, aie::mmul, ...) and parsing
    layers.h, which a group does once (the 21 kernel units of a one-block jet tagger: 6 s as one
    unit, 2 s each alone).  ``parts`` is the build's parallelism, so that every compiler process
    gets a share (the units in ``alone``, and any other unit, compile alone, first).  A group is only a faster way to compile the same code with the same flags: two
    units that could not share a unit (one name defined in both) make their group fail, and the
    build then compiles its units one by one (``_build``); the harness is the same program."""
    kernels = [u for u in units if u.startswith("src/kernels/") and u.endswith(".cc") and u not in alone]
    parts = max(1, min(parts, len(kernels)))
    groups = [tuple(kernels[i::parts]) for i in range(parts)] if kernels else []
    grouped = set(kernels)
    return [(u,) for u in units if u not in grouped] + groups  # the units alone (the harness) first


def _build(sources: dict[str, str], units: Sequence[str], arch: int, what: str, cxx: str, binary: Path,
           jobs: int | None, setup: Sequence[str] = ()) -> tuple[Path, bool, float]:
    workers = max(1, min(len(units), jobs or os.cpu_count() or 1))
    log.info("building the %sx86 harness against the aieflow shim: %d translation units, %d parallel %s processes",
             what, len(units), workers, Path(cxx).name)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aieflow-build-") as tmp, \
            task(f"build the {what}x86 harness", len(units) + 1) as bar:
        root = Path(tmp)
        for rel, text in sources.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        (root / "obj").mkdir()
        base = [f"-D__AIE_ARCH__={arch}", f"-I{shim_include()}", f"-I{root / 'src'}", f"-I{root}"]

        children: set[subprocess.Popen] = set()
        stopping = threading.Event()

        def run(args: list[str]) -> subprocess.CompletedProcess:
            # its own process group, so that stopping it reaches cc1plus and as as well as the driver
            with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True) as p:
                children.add(p)
                if stopping.is_set():  # started while the build was being stopped
                    _stop(p)
                out, err = p.communicate()
                children.discard(p)
            return subprocess.CompletedProcess(args, p.returncode, out, err)

        flag_sets = sorted({SETUP_FLAGS if unit in setup else FLAGS for unit in units})
        pch: dict[tuple[str, ...], list[str]] = {}

        def compile_unit(unit: str) -> subprocess.CompletedProcess:
            obj = root / "obj" / (unit.replace("/", "_") + ".o")
            flags = SETUP_FLAGS if unit in setup else FLAGS
            res = run([cxx, *flags, *base, *pch[flags], "-c", str(root / unit), "-o", str(obj)])
            bar.advance()
            log.debug("compiled %s (exit %d)", unit, res.returncode)
            return res

        def compile_group(index: int, group: tuple[str, ...]) -> list[subprocess.CompletedProcess]:
            """A group of kernel units as one unit (see unity_groups); if it does not compile, each
            of its units alone, whose own results (and errors) are the build's."""
            if len(group) == 1:
                return [compile_unit(group[0])]
            (root / "unity").mkdir(exist_ok=True)
            (root / "unity" / f"{index}.cc").write_text(
                "".join(f'#include "{root / unit}"\n' for unit in group))
            res = run([cxx, *FLAGS, *base, *pch[FLAGS], "-c", str(root / "unity" / f"{index}.cc"),
                       "-o", str(root / "obj" / f"unity_{index}.o")])
            if res.returncode == 0:
                for _ in group:
                    bar.advance()
                log.debug("compiled %d kernel units as one (%s)", len(group), ", ".join(group))
                return [res] * len(group)
            log.debug("the %d kernel units %s did not compile as one; compiling each alone:\n%s",
                      len(group), ", ".join(group), _tail(res.stderr))
            with contextlib.suppress(OSError):
                (root / "obj" / f"unity_{index}.o").unlink()
            return [compile_unit(unit) for unit in group]

        def pch_for(flags: tuple[str, ...]) -> list[str]:
            try:
                return _precompiled(cxx, flags, arch, root, run)
            except OSError as e:  # the build goes on without it
                log.debug("no precompiled shim header for this build (%s)", e)
                return []

        pool = concurrent.futures.ThreadPoolExecutor(workers)
        try:
            pch.update(zip(flag_sets, pool.map(pch_for, flag_sets), strict=True))
            groups = unity_groups(units, workers, alone=setup)
            done = {u: r for group, results in zip(groups, pool.map(compile_group, range(len(groups)), groups), strict=True)
                    for u, r in zip(group, results, strict=True)}
            results = [done[u] for u in units]
        except BaseException:  # SIGTERM / Ctrl-C (see cli.main): stop every compiler, then clean up
            stopping.set()
            pool.shutdown(wait=False, cancel_futures=True)
            for p in list(children):
                _stop(p)
            raise
        finally:
            pool.shutdown(wait=True)
        for unit, res in zip(units, results, strict=True):
            if res.returncode != 0:
                raise VerifyError(
                    f"the generated {what}C++ does not compile against the x86 shim ({unit}):\n" + _tail(res.stderr),
                    hint="this is an aieflow bug; please report it with the design directory",
                )
        out = root / "harness"
        link = subprocess.run([cxx, *sorted(str(p) for p in (root / "obj").glob("*.o")), "-o", str(out)],
                              capture_output=True, text=True)
        bar.advance()
        if link.returncode != 0:
            raise VerifyError(f"linking the {what}x86 harness failed:\n" + _tail(link.stderr))
        binary.parent.mkdir(parents=True, exist_ok=True)
        staged = binary.with_name(f".harness.{os.getpid()}.tmp")
        shutil.copy2(out, staged)
        os.replace(staged, binary)
    log.info("built the %sx86 harness in %.1f s", what, time.perf_counter() - start)
    return binary, False, time.perf_counter() - start


def run_binary(args: Sequence[str], what: str = "") -> subprocess.CompletedProcess:
    """Run a built harness (``args``: the binary and its options), its output captured; logged and
    shown as a (pulsing) bar while it runs, which can be minutes for a large design."""
    log.info("running the %sx86 harness", what)
    start = time.perf_counter()
    with task(f"run the {what}x86 harness"):
        res = subprocess.run(list(args), capture_output=True, text=True)
    log.info("the %sx86 harness ran in %.1f s (exit %d)", what, time.perf_counter() - start, res.returncode)
    return res


def _stop(p: subprocess.Popen) -> None:
    """SIGTERM to a compiler's whole process group (the g++ driver removes its temporary files)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGTERM)


def _tail(text: str, lines: int = 40) -> str:
    rows = text.strip().splitlines()
    return "\n".join(rows[:lines] + ([f"... ({len(rows) - lines} more lines)"] if len(rows) > lines else []))


# ---------------------------------------------------------------------------------------- inputs


def check_samples(samples: Any, seed: Any, width: int) -> None:
    """``samples`` and ``seed`` of a verify run: integers, the seed non-negative, the samples between
    1 and :data:`MAX_SAMPLES` and their generated inputs at most :data:`MAX_SAMPLE_BYTES`."""
    if isinstance(samples, bool) or not isinstance(samples, int | np.integer) or samples < 1:
        raise ConfigError(f"verify: samples must be a positive integer, got {samples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(f"verify: seed must be a non-negative integer, got {seed!r}", hint="e.g. --seed 0")
    limit = min(MAX_SAMPLES, MAX_SAMPLE_BYTES // (8 * max(1, width)))
    if samples > limit:
        raise ConfigError(
            f"verify: {samples:,} samples is more than the limit of {limit:,} for this design "
            f"({width:,} input values per sample, at most {MAX_SAMPLES:,} samples and "
            f"{MAX_SAMPLE_BYTES >> 20} MiB of generated input)",
            hint="pass fewer samples (--samples), or your own inputs with --input",
        )


def verification_inputs(t: NumericType, shape: tuple[int, ...], samples: int, seed: int = 0) -> np.ndarray:
    """What the graph input carries for ``samples`` test samples: edge rows first (type limits,
    zero, +-1, alternating extremes, random picks among the edges), then uniform random."""
    width = int(np.prod(shape))
    check_samples(samples, seed, width)
    rng = np.random.default_rng(seed)
    if isinstance(t, FixedType):
        lo, hi = t.min_code, t.max_code
        edges = sorted({lo, min(lo + 1, hi), -1 if lo < 0 else 0, 0, min(1, hi), max(hi - 1, lo), hi})
        fixed_rows = [np.full(width, v) for v in (lo, hi, 0)]
        fixed_rows.append(np.where(np.arange(width) % 2 == 0, lo, hi))
        fixed_rows.append(np.where(np.arange(width) % 2 == 0, hi, -1 if lo < 0 else 0))
        picks = [rng.choice(edges, size=width) for _ in range(8)]
        head = np.array(fixed_rows + picks, dtype=np.int64)
        body = rng.integers(lo, hi + 1, size=(max(0, samples - len(head)), width), dtype=np.int64)
        x = np.concatenate([head, body])[:samples]
    else:
        edges = [0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 1e-3, -1e3, 1e-38, 3.0e-40]
        if t.name == "fp16":  # float16's own edges: its largest finite, smallest normal and subnormal
            edges += [65504.0, -65504.0, 2.0**-14, -(2.0**-24), 2.0**-24]
        edges = np.array(edges, dtype=np.float32)
        head = np.stack([np.full(width, 0.0), np.full(width, -0.0), np.full(width, 1.0)]
                        + [rng.choice(edges, size=width) for _ in range(8)]).astype(np.float32)
        scales = rng.choice(np.array([1e-2, 1.0, 30.0], dtype=np.float32), size=(max(0, samples - len(head)), 1))
        body = (rng.standard_normal((max(0, samples - len(head)), width)) * scales).astype(np.float32)
        x = np.concatenate([head, body])[:samples].astype(np.float32)
        x = fixed.round_float(x, t.name)
    return x.reshape(samples, *shape)


# ---------------------------------------------------------------------------------------- run


def _parse(text: str, t: NumericType) -> np.ndarray:
    tokens = text.split()
    if isinstance(t, FloatType):
        return np.array(tokens, dtype=np.float64).astype(np.float32)
    return np.array(tokens, dtype=np.int64)


def _from_stream(vals: np.ndarray, iterations: int, batch: int, batch_pad: int, width: int, panel: int,
                 features: int, what: str) -> np.ndarray:
    """A port's output over all iterations (panel layout each) -> [iterations * batch, features]."""
    per = batch_pad * width
    if vals.size != per * iterations:
        raise VerifyError(f"{what} holds {vals.size} values; {iterations} iterations of {per} were expected")
    return np.concatenate(
        [from_panels(chunk, batch, batch_pad, width, panel, features) for chunk in vals.reshape(iterations, per)]
    )


def _layer_output(plan: DensePlan, t: NumericType, texts: list[str], iterations: int, what: str) -> np.ndarray:
    parts = []
    for r, text in enumerate(texts):
        n0, n1 = plan.n_range(r)
        parts.append(_from_stream(_parse(text, t), iterations, plan.batch, plan.batch_pad, plan.n_slice,
                                  plan.out_panel, n1 - n0, f"{what} row {r}"))
    return np.concatenate(parts, axis=1)


def _differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == np.float32 or b.dtype == np.float32:
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        both_nan = np.isnan(a32) & np.isnan(b32)
        return (a32.view(np.uint32) != b32.view(np.uint32)) & ~both_nan
    return a.astype(np.int64) != b.astype(np.int64)


def _first(node, want: np.ndarray, got: np.ndarray, n: int) -> Mismatch | None:
    bad = _differs(want[:n], got[:n])
    if not bad.any():
        return None
    s, i = (int(v) for v in np.argwhere(bad)[0])
    plan: DensePlan = node.plan
    row = next(r for r in range(plan.cas_num) if plan.n_range(r)[0] <= i < plan.n_range(r)[1])
    cast = int if isinstance(node.types.output, FixedType) else float
    return Mismatch(node.name, row, s, i, cast(want[s, i]), cast(got[s, i]))


def _run(binary: Path, work: Path, iterations: int, trace: bool) -> float:
    args = [str(binary), "--data", str(work), "--out", str(work / "out"), "--iterations", str(iterations)]
    if trace:
        args += ["--trace", str(work / "trace")]
    start = time.perf_counter()
    res = run_binary(args)
    if res.returncode != 0:
        raise VerifyError(
            f"the x86 harness failed (exit {res.returncode}):\n" + _tail(res.stderr + res.stdout),
            hint="this is an aieflow bug; please report it with the design directory",
        )
    return time.perf_counter() - start


def verify(
    design: Design,
    x: Any | None = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    jobs: int | None = None,
) -> VerifyResult:
    """Build and run the design's x86 harness on ``x`` (float samples) or on ``samples`` generated
    ones, and compare every output value bit-exactly with the emulator."""
    layers = dense_layers(design.graph)
    first, final = layers[0], layers[-1]
    if x is not None:
        xq = design.quantise_input(x)
    else:
        xq = verification_inputs(design.input_type, tuple(design.input_tensor.shape), samples, seed)
    n = xq.shape[0]
    if n == 0:
        raise VerifyError("verify needs at least one sample")
    batch = first.plan.batch
    reps = design.replicas
    iterations = -(-n // (batch * reps)) * reps  # batches in all; each graph iteration runs one per replica
    pad = np.zeros((iterations * batch - n, *xq.shape[1:]), dtype=xq.dtype)
    xq_pad = np.concatenate([xq, pad])

    binary, cached, build_s = build_harness(
        design.files, design.device.generation.arch_macro, Path(cache_dir) if cache_dir else None, jobs
    )
    expected = design.run(xq_pad).reshape(iterations * batch, -1)
    runs = iterations // reps  # graph iterations
    with tempfile.TemporaryDirectory(prefix="aieflow-verify-") as tmp:
        work = Path(tmp)
        for rep in range(reps):
            share = replica_share(xq_pad, batch, reps, rep)
            for rel, text in plio_input_files(first, share, plio_ports(layers, rep)[0]).items():
                (work / rel).parent.mkdir(parents=True, exist_ok=True)
                (work / rel).write_text(text)
        run_s = _run(binary, work, runs, trace=False)
        parts = []
        for rep in range(reps):
            texts = [(work / "out" / port["file"]).read_text() for port in plio_ports(layers, rep)[1]]
            what = "output PLIO" + (f" of replica {rep}" if reps > 1 else "")
            parts.append(_layer_output(final.plan, written(design.graph, final)[1], texts, runs, what))
        got = replica_merge(parts, batch)
        bad = int(_differs(expected[:n], got[:n]).sum())
        mismatch = None
        if bad:
            _run(binary, work, runs, trace=True)  # traces replica 0's kernels
            share = replica_share(xq_pad, batch, reps, 0)
            mismatch = _locate(design, layers, share, work / "trace", runs, share.shape[0])
            if mismatch is None:
                mismatch = _first(final, expected, got, n)
    return VerifyResult(n, int(expected[:n].size), bad, mismatch, build_s, run_s, cached)


def _locate(design: Design, layers, xq: np.ndarray, trace: Path, iterations: int, n: int) -> Mismatch | None:
    """The earliest layer whose tiles wrote something the emulator does not."""
    idents = layer_idents(layers)
    values = design.trace(xq)
    for node in layers:
        p: DensePlan = node.plan
        texts = []
        for r in range(p.cas_num):
            f = trace / f"{tile_var(idents[node.name], r, p.cas_len - 1)}_out0.txt"
            if not f.is_file():
                return None
            texts.append(f.read_text())
        tensor, t = written(design.graph, node)
        got = _layer_output(p, t, texts, iterations, f"layer {node.name}")
        want = values[tensor].reshape(iterations * p.batch, -1)
        m = _first(node, want, got, n)
        if m is not None:
            return m
    return None
