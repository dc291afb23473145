"""Sample arrays from the user (inputs, calibration data, example inputs): real numbers only.

numpy would happily turn booleans, complex numbers (dropping the imaginary part), strings or
structured records into floats somewhere deep in the emulator; they are refused here instead, with
a message that says what the array holds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ConfigError

_KINDS = {"b": "booleans", "c": "complex numbers", "U": "strings", "S": "byte strings", "O": "Python objects",
          "V": "structured records", "M": "dates", "m": "time deltas"}


def real_array(x: Any, what: str = "input") -> np.ndarray:
    """``x`` (array-like or torch tensor) as a numpy array of real numbers (float or integer)."""
    if hasattr(x, "detach"):  # torch tensor
        if getattr(getattr(x, "device", None), "type", None) == "meta":
            raise ConfigError(f"{what} is a torch 'meta' tensor, which has a shape but no values",
                              hint="pass a tensor with data (e.g. torch.randn(shape))")
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{what} is not a rectangular array of numbers: {e}") from None
    kind = "V" if arr.dtype.names else arr.dtype.kind
    if kind not in "fiu":
        raise ConfigError(
            f"{what} holds {_KINDS.get(kind, kind)} (dtype {arr.dtype}); aieflow takes real numbers",
            hint="convert it to float32, e.g. x.astype(numpy.float32)",
        )
    return arr
