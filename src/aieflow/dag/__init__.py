"""Graphs beyond chains on AIE-ML: fan-out, residual Add, LayerNorm and Transpose views around
Dense layers (MLP-Mixer blocks), compiled, verified on x86 and estimated (docs/dag.md)."""

from .api import compile_dag, is_dag
from .design import DagDesign

__all__ = ["DagDesign", "compile_dag", "is_dag"]
