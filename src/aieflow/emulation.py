"""Emulation without an AI Engine mapping: the quantised graph and its bit-exact emulator.

``aieflow.emulate`` stops the pipeline after quantisation, so it works for models whose layers
the planner cannot map yet (recurrent layers): same import, same quantisation, same per-layer
numerics as a compiled :class:`~aieflow.design.Design`'s ``predict``, but no plan, placement,
project or performance model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import Config
from .design import Design
from .devices import Device
from .ir import Graph
from .numerics.types import NumericType
from .ops.registry import family


@dataclass(frozen=True)
class Emulation:
    graph: Graph
    device: Device
    config: Config
    source: str = ""

    def _design(self) -> Design:
        # Design's numerics read only the graph; there is no placement to give it.
        return Design(self.graph, self.device, self.config, placement=None, source=self.source)

    @property
    def input_type(self) -> NumericType:
        return self._design().input_type

    @property
    def output_type(self) -> NumericType:
        return self._design().output_type

    def predict(self, x: Any, raw: bool = False, mask: Any = None) -> np.ndarray:
        """Float samples in, float outputs (or output codes with ``raw=True``) out, as ``Design.predict``
        (``mask``: a run-time key padding mask, for a model that takes one)."""
        return self._design().predict(x, raw=raw, mask=mask)

    def quantise_input(self, x: Any) -> np.ndarray:
        return self._design().quantise_input(x)

    def quantise_mask(self, mask: Any, samples: int) -> np.ndarray | None:
        """A run-time key padding mask (PyTorch's forms) as the keep bytes :meth:`trace` takes."""
        return self._design().quantise_mask(mask, samples)

    def trace(self, xq: np.ndarray, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Emulated value (codes) of every tensor, from quantised inputs (:meth:`quantise_input`) and,
        for a model with a run-time key padding mask, its keep bytes (:meth:`quantise_mask`)."""
        return self._design().trace(xq, mask=mask)

    def summary(self) -> str:
        """Each layer with the numeric types quantisation chose."""
        lines = [f"{self.graph.name}: emulation on {self.device.board} (not mapped to the AI Engine)"]
        for n in self.graph.nodes:
            fam = family(n.op, n.name)
            types = fam.types_to_json(n.types) if fam.types_to_json and n.types is not None else n.types
            lines.append(f"  {n.name} ({n.op}): {types}")
        return "\n".join(lines)


class EmulatedNumerics:
    """The numerics of a design kind that maps the graph its own way (CNN, streamed Dense,
    segments) but computes exactly what its emulator ``self._emulation`` computes: the delegation
    in one place, so ``predict`` means the same on every design kind."""

    _emulation: Emulation

    @property
    def input_type(self) -> NumericType:
        return self._emulation.input_type

    @property
    def output_type(self) -> NumericType:
        return self._emulation.output_type

    def quantise_input(self, x: Any) -> np.ndarray:
        return self._emulation.quantise_input(x)

    def predict(self, x: Any, raw: bool = False, mask: Any = None) -> np.ndarray:
        """Float samples in, the design's output out (float, or codes with ``raw=True``): the
        bit-exact emulator, which the generated code matches (``verify``)."""
        return self._emulation.predict(x, raw=raw, mask=mask)

    def trace(self, xq: np.ndarray) -> dict[str, np.ndarray]:
        return self._emulation.trace(xq)
