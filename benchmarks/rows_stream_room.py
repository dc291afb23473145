"""How far the rows mapping's closed-form model (``cnn/rows.estimate_rows``, which gives every row
stream unbounded room) is from a row-level reference that gives each stream its real room
(``tests/rows_reference.py``: a plain kernel-to-kernel stream or PLIO holds no row, a FIFO holds its
``fifo_words``, a memory-tile row buffer two rows; it imports nothing from aieflow), on the models of
``benchmarks/cnn_rows.py`` and a stride-2 CNN at 32 x 32 and 64 x 64 on every device, int8 (docs/ARCHITECTURE.md step 3,
docs/performance.md "Row-streamed CNN").

    python benchmarks/rows_stream_room.py

Per design: the reference with unbounded streams (must equal the model: a check of the reference),
and with each stream's room: its latency and interval over the model's.  Both are the model's
constants (none fitted); nothing here is measured on a board.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cnn_rows import MODELS, Stride2  # noqa: E402
from rows_reference import Constants, simulate  # noqa: E402

import aieflow  # noqa: E402
from aieflow.cnn import perf  # noqa: E402
from aieflow.cnn.rows import GLOBAL_POOL_FINISH_CYCLES_PER_CHANNEL  # noqa: E402
from aieflow.errors import AieflowError  # noqa: E402

SIZES = ((32, 32), (64, 64))
DEVICES = ("vck190", "vek280", "vek385")



def main() -> None:
    k = Constants(perf.KERNEL_CALL_CYCLES, perf.PLIO_BYTES_PER_CYCLE, GLOBAL_POOL_FINISH_CYCLES_PER_CHANNEL)
    print("| model | size | device | model latency (us) | model interval (us) | with stream room: latency | interval |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for name, model in {**MODELS, "stride-2": Stride2}.items():
        for hw in SIZES:
            cal = np.random.default_rng(1).standard_normal((4, 3, *hw)).astype(np.float32)
            for device in DEVICES:
                try:
                    d = aieflow.compile(model().eval(), device, cal[:1], calibration=cal,
                                        config={"precision": "int8", "cnn": {"mapping": "rows"}})
                except AieflowError as err:
                    print(f"| {name} | {hw[0]} x {hw[1]} | {device} | refused: {str(err).splitlines()[0]} | | | |")
                    continue
                e = d.estimate()
                if any(any(lay.ddr_bytes) for lay in d.plan.layers):
                    print(f"| {name} | {hw[0]} x {hw[1]} | {device} | {e.latency_s * 1e6:,.2f} | {e.interval_s * 1e6:,.2f} "
                          "| (a skip in DDR: not in the reference) | |")
                    continue
                free = simulate(d.plan, k, bounded=False)
                assert abs(free[0] / e.latency_s - 1) < 1e-9 and abs(free[1] / e.interval_s - 1) < 1e-9, (name, device)
                lat, interval = simulate(d.plan, k)
                print(f"| {name} | {hw[0]} x {hw[1]} | {device} | {e.latency_s * 1e6:,.2f} | {e.interval_s * 1e6:,.2f} | "
                      f"{lat / e.latency_s - 1:+.2%} | {interval / e.interval_s - 1:+.2%} |")


if __name__ == "__main__":
    main()
