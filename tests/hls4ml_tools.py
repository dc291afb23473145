"""What the hls4ml tests share (imported by test_recurrent_hls4ml and test_from_hls4ml_recurrent)."""

from __future__ import annotations

import contextlib
import importlib


@contextlib.contextmanager
def hls4ml_return_sequences():
    """hls4ml's PyTorch parser always returns the last step; its C++ supports every step
    (n_sequence_out), so switch the parsed GRU / LSTM layers to return_sequences for the sequence cases."""
    pytorch_to_hls = importlib.import_module("hls4ml.converters.pytorch_to_hls")  # the module, not the function
    originals = {k: pytorch_to_hls.layer_handlers[k] for k in ("GRU", "LSTM")}

    def wrap(handler):
        def parse(*args, **kwargs):
            layer, shape = handler(*args, **kwargs)
            layer["return_sequences"] = True
            return layer, [shape[0], layer["n_timesteps"], layer["n_out"]]

        return parse

    pytorch_to_hls.layer_handlers.update({k: wrap(v) for k, v in originals.items()})
    try:
        yield
    finally:
        pytorch_to_hls.layer_handlers.update(originals)
