"""Issue 3 benchmark: `verify` of the 7-layer 512-wide int8 MLP on VEK280.

Measures, in one run on this machine: compiling the model, building the x86 harness from the
project's own C++ against the shim (kernels at -O2, cold cache: a fresh cache directory, the
shim's precompiled headers included), running it on 1,000 samples and comparing with the
emulator, then the same verify again (cached build), then the harness built into another cache
folder: a design never built before, the shim's precompiled headers already cached.

    python benchmarks/verify_time.py [--samples 1000] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import tempfile
import time

import aieflow
from aieflow.model_zoo import qdq_mlp


def _children_cpu() -> float:
    """CPU seconds (user + sys) of the finished child processes (g++, the harness): what a build
    costs whatever else loads the machine."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()

    t0 = time.perf_counter()
    design = aieflow.compile(qdq_mlp([512] * 8, seed=3), device="vek280", config={"batch": 8})
    compile_s = time.perf_counter() - t0
    tiles = sum(n.plan.tiles for n in design.layers())
    kernels = sum(1 for f in design.files if f.startswith("src/kernels/") and f.endswith(".cc"))
    groups = min(kernels, os.cpu_count() or 1)  # verify.unity_groups: as many groups as compiler processes
    cache = tempfile.mkdtemp(prefix="aieflow-bench-cache-")
    os.environ["AIEFLOW_CACHE_DIR"] = cache  # cold: the shim's precompiled headers too (verify.pch_root)
    try:
        t0, c0 = time.perf_counter(), _children_cpu()
        cold = design.verify(samples=args.samples, cache_dir=cache)
        cold_s, cold_cpu = time.perf_counter() - t0, _children_cpu() - c0
        t0 = time.perf_counter()
        warm = design.verify(samples=args.samples, cache_dir=cache)
        warm_s = time.perf_counter() - t0
        c0 = _children_cpu()
        pch = design.verify(samples=args.samples, cache_dir=os.path.join(cache, "other"))
        pch_cpu = _children_cpu() - c0
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    cxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {cxx}"
    rows = [
        ("compile (import..emit, in memory)", f"{compile_s:.2f} s"),
        (f"verify, cold cache: build (the harness at -O0, {kernels} kernel units in {groups} groups at -O2)",
         f"{cold.build_seconds:.1f} s"),
        ("verify, cold cache: CPU time of g++ and the harness (user + sys)", f"{cold_cpu:.1f} s"),
        (f"verify, cold cache: run {cold.samples} samples ({cold.samples // 8} graph iterations, {tiles} kernels)",
         f"{cold.run_seconds:.2f} s"),
        ("verify, cold cache: total incl. PLIO files and comparison", f"{cold_s:.1f} s"),
        ("verify, cached build: total", f"{warm_s:.2f} s"),
        ("verify, new build, the shim's precompiled headers cached: build", f"{pch.build_seconds:.1f} s"),
        ("verify, new build, the shim's precompiled headers cached: CPU time (user + sys)", f"{pch_cpu:.1f} s"),
        ("result", f"{'bit-exact' if cold.ok and warm.ok and pch.ok else 'MISMATCH'} ({cold.values} output values)"),
    ]
    if args.markdown:
        print(f"Measured: {machine}.\n")
        print("| measurement | result |\n| --- | --- |")
        for k, v in rows:
            print(f"| {k} | {v} |")
    else:
        print(machine)
        for k, v in rows:
            print(f"{k:75s} {v}")
    return 0 if cold.ok and warm.ok and pch.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
