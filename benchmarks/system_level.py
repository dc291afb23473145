"""System-level (DDR to DDR) figures next to the array-only ones (issue 21, item 1; perf/system.py).

Prints, for the ESPCN thesis design, GRU designs (one layer and a stack), a GEMM and a streamed Dense layer, the array
figures and the system stages.  No published DDR-to-DDR figure is compared (the specs hold them
back): the system class has no band.  Run: PYTHONPATH=src python benchmarks/system_level.py
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from cases import build_design  # noqa: E402

from aieflow.perf.system import breakdown_lines, text_lines  # noqa: E402


def main() -> None:
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()} (model only, no board)")
    for name, what in (("cnn-thesis", "ESPCN x2, thesis mapping, VCK190"),
                       ("recurrent", "GRU 4 -> 8, 5 steps, hybrid (PL FSM), VCK190"),
                       ("recurrent-stack", "2 stacked GRU layers, VEK280"),
                       ("gemm-vck190", "GEMM 256 x 64 x 128 int8, VCK190"),
                       ("streamed-dense", "Dense 64 -> 16 int8, weights streamed from DDR, batch 8, VCK190")):
        d, _ = build_design(name)
        perf = d.to_json()["performance"]
        sysj = perf["system"]
        print(f"\n== {what}\n  array: latency {perf['latency_ns'] / 1e3:,.2f} us, interval {perf['interval_ns'] / 1e3:,.2f} us")
        print("\n".join("  " + line for line in text_lines(sysj)))
        print("\n".join(breakdown_lines(sysj)))


if __name__ == "__main__":
    main()
