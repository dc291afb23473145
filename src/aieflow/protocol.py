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
class Performance(Protocol):
    """What every kind's ``estimate()`` returns, whatever else it carries: design.json's common
    ``performance`` figures under the same names and in the same units (``design_schema.performance_json``
    writes design.json's ``performance`` from this protocol alone, so the two cannot disagree).

    A *batch* is what one replica delivers each interval: the chain's and the DAG's ``batch``
    samples, one CNN frame, one sequence of a recurrent design (its ``interval_ns`` is the
    sequence's steps one after the other; the per-step interval is ``step_interval_ns``), one
    ``C = A B`` of a GEMM, one call of a streamed Dense layer or of a chain in segments; ``replicas``
    copies of the design work side by side. So ``throughput_ops_per_s`` = 2 x MACs per sample x
    ``batch`` x ``replicas`` / ``interval_ns`` for every kind."""

    latency_ns: float
    """First input in -> its last output out (one batch)."""
    interval_ns: float
    """Steady state: one batch every ``interval_ns``."""
    batch: int
    """Samples per batch of one replica (above)."""
    replicas: int
    """Copies of the design side by side, each delivering a batch every interval (1: none)."""
    throughput_ops_per_s: float
    """2 x multiply-accumulates per second."""
    bound: str
    """What bounds the interval."""
    tiles_used: int
    """Compute tiles (kernels and neighbour-memory lenders), all replicas."""
    memory_tiles_used: int
    """Memory tiles (0 on AIE1)."""

    def breakdown_parts(self) -> list[tuple[str, float, dict[str, Any]]]:
        """design.json's ``breakdown``: each stage's name, ns per batch (a recurrent design's loop
        parts per step, marked ``"per": "step"``) and extra fields. (A method, not ``breakdown``:
        the GEMM's ``breakdown`` attribute holds its cycles and keeps that meaning.)"""

    def extra_json(self) -> dict[str, Any]:
        """The kind's own ``performance`` keys, added beside the common ones."""


@runtime_checkable
class AnyDesign(Protocol):
    """Every design: a model design or a GEMM (``aieflow.gemm``)."""

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        """What the hardware computes, bit for bit (the emulator)."""

    def estimate(self) -> Performance:
        """The performance model's figures (:class:`Performance`; ``to_json()["performance"]`` is
        written from it)."""

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
