"""aieflow: compile PyTorch / ONNX networks to AMD Versal AI Engine designs, with a bit-exact emulator.

The public names are imported on first use (module ``__getattr__``), so ``import aieflow`` and the
command line do not pay for the parts of the compiler a run does not need (the GEMM designs, torch,
the emitters' templates).
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The library logs through the "aieflow" logger hierarchy and configures no output: a program that
# wants the messages adds its own handler (the command line does: aieflow.progress.cli_output).
logging.getLogger(__name__).addHandler(logging.NullHandler())

# public name -> the submodule that defines it (None: the name is the submodule itself)
_LAZY = {
    "compile": "api",
    "emulate": "api",
    "explore": "api",
    "from_hls4ml": "frontends.hls4ml_frontend",
    "Design": "design",
    "load": "design",
    "AieflowError": "errors",
    "gemm": None,  # callable package: aieflow.gemm(m, n, k, ...)
}

if TYPE_CHECKING:  # the names as a type checker and an IDE see them
    from . import gemm
    from .api import compile, emulate, explore  # noqa: A004
    from .design import Design, load
    from .errors import AieflowError
    from .frontends.hls4ml_frontend import from_hls4ml

__all__ = ["AieflowError", "Design", "__version__", "compile", "emulate", "explore", "from_hls4ml", "gemm", "load"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'aieflow' has no attribute '{name}'")
    module = _LAZY[name]
    value = importlib.import_module(f".{name if module is None else module}", __name__)
    if module is not None:
        value = getattr(value, name)
    globals()[name] = value  # later look-ups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
