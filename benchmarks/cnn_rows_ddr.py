"""A skip held in DDR by the row-streamed CNN mapping (docs/conv.md "Skips in DDR"): the model's
latency, interval and bound of tests/test_cnn_rows_ddr.py's residual block (a 16-channel int8 skip
lagging 8 rows; 3 -> 16 1 x 1 conv, six 3 x 3 convs through one channel, the add) on VCK190, at
16 x 384 (its FIFO, 49,152 B, is over a tile's 32,768 B: the skip goes through a 98,304 B DDR
segment), beside the same plan with the skip on the array (as if a tile held the FIFO) and at
16 x 64 (the FIFO fits: 8,192 B).

    python benchmarks/cnn_rows_ddr.py

Every number is the performance model's (``cnn/rows.estimate_rows`` and ``ddr_skip_ready``: the
interface DMA's rate from the catalog, NoC and DDR rates of perf/system.py (PG313; DDR4-3200
assumed), the host's per-row GMIO calls costed as perf/system.py's XRT start / wait figures
(assumed: no GMIO figure found)); no board ran it and no published figure exists for this network.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import aieflow  # noqa: E402
from aieflow.cnn.rows import estimate_rows  # noqa: E402


def main() -> None:
    from test_cnn_rows_ddr import LongRes

    print("LongRes (tests/test_cnn_rows_ddr.py), int8, VCK190, cnn.mapping rows; the performance model's figures")
    print(f"{'case':<44} {'latency us':>11} {'interval us':>12} {'frames/s':>9}  bound")
    for w in (64, 384):
        cal = np.random.default_rng(1).standard_normal((2, 3, 16, w)).astype(np.float32)
        d = aieflow.compile(LongRes().eval(), "vck190", cal[:1], calibration=cal,
                            config={"precision": "int8", "cnn": {"mapping": "rows"}})
        last = d.plan.layers[-1]
        cases = [(f"16 x {w}, skip " + (f"in DDR ({last.ddr_bytes[1]:,} B)" if last.ddr_bytes
                                        else f"FIFO {4 * last.fifo_words[1]:,} B"), d.plan)]
        if last.ddr_bytes:
            on_chip = dataclasses.replace(d.plan, layers=d.plan.layers[:-1] + (
                dataclasses.replace(last, ddr_bytes=(), fifo_words=(0, 8 * 16 * w // 4)),))
            cases.append((f"16 x {w}, skip on the array (not mappable)", on_chip))
        for name, plan in cases:
            e = estimate_rows(plan)
            print(f"{name:<44} {e.latency_s * 1e6:>11,.1f} {e.interval_s * 1e6:>12,.1f} {e.fps:>9,.0f}  {e.bound}")


if __name__ == "__main__":
    main()
