"""The GotoBLAS `Copy Cr` fit: the write-back constants of ``aieflow.gemm.perf`` solved from the
spec's calibration series, and the simpler forms that were tried and why they were not used.

Series (shared/spec/gemm-gotoblas-versal.md § Calibration: `Copy Cr` per micro-kernel): the cycles
a tile spends per micro-kernel loading its Cr from DDR through its GMIO port and storing it back,
at 1, 2, 4, 8, 16 and 32 tiles.  Each form is fitted by least squares in relative error; the
table prints its constants and its error on every tile count.  The model uses the form marked
``used``; its constants are CR_COPY_CYCLES, CR_CONTENTION_CYCLES and CR_SERIAL_CYCLES.
Then the published design's per-tile rate the model predicts from them (no published number in
the specs: held back to validate the model).

    python benchmarks/gemm_copy_cr_fit.py
"""

from __future__ import annotations

import numpy as np

import aieflow
from aieflow.gemm import perf
from aieflow.perf.published import COPY_CR_SERIES

TILES = np.array([t for t, _ in COPY_CR_SERIES], dtype=float)
CYCLES = np.array([c for _, c in COPY_CR_SERIES], dtype=float)
ONE = np.ones_like(TILES)
MANY = (TILES > 1).astype(float)

FORMS = {
    "a + b T": [ONE, TILES],
    "a + b T + c T^2": [ONE, TILES, TILES**2],
    "a + [T > 1] b + c T": [ONE, MANY, TILES],
    "a + b log2 T + c T": [ONE, np.log2(TILES), TILES],
    "a + b T log2 T": [ONE, TILES * np.log2(TILES)],
    "a + [T > 1] (b + c T log2 T)   (used)": [ONE, MANY, TILES * np.log2(TILES)],
}


def fit(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Least squares in relative error: minimise sum ((model - y) / y)^2."""
    a = np.stack(cols, 1) / CYCLES[:, None]
    p = np.linalg.lstsq(a, np.ones_like(CYCLES), rcond=None)[0]
    return p, np.stack(cols, 1) @ p / CYCLES - 1


def main() -> None:
    head = " | ".join(f"{int(t)} tiles" for t in TILES)
    print(f"| form | constants | {head} | worst |")
    print("|" + " --- |" * (len(TILES) + 3))
    print(f"| published (cycles) | | {' | '.join(f'{c:.0f}' for c in CYCLES)} | |")
    for name, cols in FORMS.items():
        p, err = fit(cols)
        cells = " | ".join(f"{100 * e:+.1f}%" for e in err)
        print(f"| {name} | {', '.join(f'{x:.3f}' for x in p)} | {cells} | {100 * np.abs(err).max():.1f}% |")
    print()
    used = (perf.CR_COPY_CYCLES, perf.CR_CONTENTION_CYCLES, perf.CR_SERIAL_CYCLES)
    print(f"model constants (rounded): CR_COPY_CYCLES = {used[0]}, CR_CONTENTION_CYCLES = {used[1]}, "
          f"CR_SERIAL_CYCLES = {used[2]}")
    print()
    print("published design, 256 x 256 x 2048 uint8 on VCK190 (modelled; Br copy, micro-kernels and Copy Cr):")
    print("| tiles | round (micro-kernel + Copy Cr) | cycles | MACs/cycle/tile | vs 1 tile |")
    print("| --- | --- | --- | --- | --- |")
    base = None
    for t in (1, 2, 4, 8, 16, 32):
        e = aieflow.gemm(256, 256, 2048, "uint8", "vck190", t, "published").estimate()
        base = base or e.macs_per_cycle_per_tile
        print(f"| {t} | {e.round_cycles[0]:,.0f} | {e.cycles:,.0f} | {e.macs_per_cycle_per_tile:.2f} | "
              f"{100 * (e.macs_per_cycle_per_tile / base - 1):+.1f}% |")


if __name__ == "__main__":
    main()
