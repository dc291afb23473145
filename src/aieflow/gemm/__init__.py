"""GotoBLAS2-style GEMM designs: Ac in UltraRAM, Bc in Block RAM, Br in tile memory, Ar streamed and
multicast, Cr in accumulators (``shared/spec/gemm-gotoblas-versal.md``), and a better one chosen by
the model.  ``aieflow.gemm(m, n, k, ...)`` returns a :class:`GemmDesign`."""

from __future__ import annotations

import sys
import types

from .api import gemm
from .design import GemmDesign
from .plan import GemmBlocks, GemmConfig, GemmPlan

__all__ = ["GemmBlocks", "GemmConfig", "GemmDesign", "GemmPlan", "gemm"]


class _CallableModule(types.ModuleType):
    """``aieflow.gemm`` is this package *and* the entry point ``aieflow.gemm(m, n, k, ...)``:
    binding the function to the name would hide the package (``import aieflow.gemm.perf as p``)."""

    def __call__(self, *args, **kwargs) -> GemmDesign:
        return gemm(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
