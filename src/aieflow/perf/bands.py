"""The model's error band for each class of figure it prints (issue 21, item 4).

Every modelled figure belongs to one class, and the class's band is the range of relative errors
(modelled - published) / published of the published figures of that class in
``docs/validation.md`` (``benchmarks/validate.py`` writes both that page and ``bands.json`` from one
evaluation of ``perf.published``; ``tests/test_bands.py`` checks the two agree and that the file is
what the model gives today):

- ``kernel``: one kernel, micro-kernel or transfer on a tile (the specs' "Calibration" figures:
  aiesimulator GOPS, cycle counts, ``Copy Cr``), fitted and held-out alike;
- ``array``: a whole design on the array, from its first input on the PLIOs to its last output
  (the published claims with a number: today one figure);
- ``system``: DDR to DDR on the board with the host, XRT and PL data movers around the array
  (``perf/system.py``, design.json ``performance.system``): no published figure is checked, so it
  has no band.

A design's latency and interval (``estimate``, ``summary``, ``report``, ``explore``, design.json)
are ``array`` figures; the per-stage kernel times in a report are ``kernel`` figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

CLASSES = ("kernel", "array", "system")
WHAT = {
    "kernel": "one kernel or transfer on a tile",
    "array": "a whole design on the array, PLIO to PLIO",
    "system": "DDR to DDR on the board, host and data movers included",
}


@dataclass(frozen=True)
class Band:
    cls: str
    low: float | None  # relative error, e.g. -0.08; None: no published figure of this class
    high: float | None
    figures: int  # published figures with a number in the class

    @property
    def known(self) -> bool:
        return self.figures > 0

    def text(self) -> str:
        """``-8.0% .. +0.0% (array: 1 published figure, docs/validation.md)``."""
        if not self.known:
            return f"no band ({self.cls}: no published figure checked; {WHAT[self.cls]})"
        n = f"{self.figures} published figure{'s' if self.figures != 1 else ''}"
        return f"{100 * self.low:+.1f}% .. {100 * self.high:+.1f}% ({self.cls}: {n}, docs/validation.md)"

    def to_json(self) -> dict[str, Any]:
        return {"class": self.cls, "low": self.low, "high": self.high, "figures": self.figures}


def classify(figure: Any) -> str | None:
    """The class of a ``perf.published.Figure`` (None: it has no number to compare)."""
    if figure.published is None or figure.model is None:
        return None
    return "kernel" if figure.calibration_set else "array"


def from_results(results: list[Any]) -> dict[str, Band]:
    """The bands of ``perf.published.evaluate()``'s results (what ``benchmarks/validate.py`` writes)."""
    errors: dict[str, list[float]] = {c: [] for c in CLASSES}
    for r in results:
        cls = classify(r.figure)
        if cls is not None and r.error is not None:
            errors[cls].append(r.error)
    return {c: Band(c, min(e) if e else None, max(e) if e else None, len(e)) for c, e in errors.items()}


def to_json(bands: dict[str, Band]) -> str:
    return json.dumps({"generated_by": "benchmarks/validate.py", "bands": [b.to_json() for b in bands.values()]},
                      indent=2) + "\n"


@cache
def bands() -> dict[str, Band]:
    """The bands as ``benchmarks/validate.py`` last wrote them (``perf/bands.json``)."""
    raw = json.loads(resources.files("aieflow").joinpath("perf/bands.json").read_text())
    return {d["class"]: Band(d["class"], d["low"], d["high"], d["figures"]) for d in raw["bands"]}


def band(cls: str) -> Band:
    return bands()[cls]


def summary_line() -> str:
    """The line a design's summary ends with: the band of its figures (array), and that nothing DDR
    to DDR (system) is modelled."""
    system = band("system")
    tail = ("the system figures (DDR to DDR on the board: host, XRT, data movers; perf/system.py) have no "
            "published figure checked (no band)" if not system.known else f"DDR to DDR: {system.text()}")
    return f"model error band of these figures: {band('array').text()}; {tail}"
