"""What every design kind provides, whatever path compiled it (issue 17, item 3).

The CLI, the reports and the tests talk to designs through these protocols only (never through
``hasattr`` on a kind's internals); ``tests/test_design_schema.py`` checks that every kind
implements them and that its ``to_json`` follows ``schema/design.schema.json``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .ir import Graph


@runtime_checkable
class AnyDesign(Protocol):
    """Every design: a model design or a GEMM (``aieflow.gemm``)."""

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        """What the hardware computes, bit for bit (the emulator)."""

    def estimate(self) -> Any:
        """The performance model's figures (``to_json()["performance"]`` holds the common keys)."""

    def verify(self, *args: Any, **kwargs: Any) -> Any:
        """Build the generated C++ for x86, run it, compare it with :meth:`predict` bit for bit."""

    def summary(self) -> str:
        """A few lines for a terminal."""

    def report(self) -> str:
        """The summary and where the time goes."""

    def placement_svg(self) -> str:
        """The placement picture (SVG)."""

    def to_json(self) -> dict[str, Any]:
        """design.json (``design_schema``)."""

    def report_html(self, path: str | os.PathLike | None = None, data: Any = None, verify: Any = None) -> str:
        """The self-contained HTML report (``html_report.report_html``), written to ``path`` if given."""

    def save(self, out_dir: str | os.PathLike, force: bool = False) -> Path:
        """Write the design directory atomically (``aieflow.load`` reads it back)."""


@runtime_checkable
class ModelDesign(AnyDesign, Protocol):
    """A compiled model: float samples in, float (or codes) out."""

    graph: Graph
    """The quantised model: every tensor's numeric type, the float weights (the float reference)."""

    def quantise_input(self, x: Any) -> Any:
        """Float samples -> the codes (or float32 / bf16 values) the graph input carries."""

    def trace(self, xq: Any) -> dict[str, Any]:
        """The emulated value of every tensor for graph-input codes ``xq``."""
