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


def mask_keep(mask: Any, samples: int, keys: int, what: str = "mask") -> np.ndarray:
    """A run-time key padding mask from the user, ``[samples, keys]`` in PyTorch's forms, as the keep
    bytes the design reads (uint8, 1 = the key takes part): boolean (True = padding, ignored:
    ``nn.MultiheadAttention``'s ``key_padding_mask``) or float (0 = kept, ``-inf`` = padding: the
    additive form).  Integers are refused (0 / 1 could mean either)."""
    if hasattr(mask, "detach"):
        mask = mask.detach().cpu().numpy()
    try:
        m = np.asarray(mask)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{what} is not a rectangular array: {e}") from None
    if m.shape == (keys,) and samples == 1:
        m = m[None]
    if m.shape != (samples, keys):
        raise ConfigError(f"{what} has shape {m.shape}; the design expects ({samples}, {keys}): one row of keys per "
                          "sample")
    if m.dtype == np.bool_:
        return (~m).astype(np.uint8)
    if m.dtype.kind == "f":
        if not np.all((m == 0) | (m == -np.inf)):
            raise ConfigError(f"{what} is a float mask with values other than 0 and -inf",
                              hint="pass a boolean mask (True = padding) or 0 / -inf")
        return (m == 0).astype(np.uint8)
    raise ConfigError(f"{what} holds {m.dtype}; aieflow takes a boolean mask (True = padding, as PyTorch's "
                      "key_padding_mask) or a float 0 / -inf one", hint="pass mask.astype(bool)")
