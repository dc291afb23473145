"""aieflow: compile PyTorch / ONNX networks to AMD Versal AI Engine designs, with a bit-exact emulator."""

from __future__ import annotations

__version__ = "0.1.0"

from . import gemm  # noqa: E402 - callable package: aieflow.gemm(m, n, k, ...)
from .api import compile, emulate, explore  # noqa: E402,A004
from .design import Design, load  # noqa: E402
from .errors import AieflowError  # noqa: E402

__all__ = ["AieflowError", "Design", "__version__", "compile", "emulate", "explore", "gemm", "load"]
