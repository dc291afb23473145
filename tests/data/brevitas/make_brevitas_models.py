"""Regenerates the Brevitas models that tests/test_qonnx.py imports: real exports, with Brevitas' own
outputs on fixed inputs, so the tests need neither Brevitas nor torch to check aieflow against them.

    pip install brevitas onnxoptimizer        # with torch (the 'torch' extra)
    python tests/data/brevitas/make_brevitas_models.py

Per model it writes ``<name>_qonnx.onnx`` (``brevitas.export.export_qonnx``: QONNX ``Quant`` nodes),
``<name>_qcdq.onnx`` (``export_onnx_qcdq``: QuantizeLinear -> Clip -> DequantizeLinear, TorchScript
exporter, which is the one that exports quantised biases) and ``<name>.npz`` (``x``: the inputs,
``y``: the Brevitas module's own float32 output on them, ``versions``); ``brevitas_modes`` (a 16-bit
input, FLOOR / ROUND_TO_ZERO and narrow activations, which QCDQ cannot express) is exported to QONNX
only.  In those two every quantiser has a
power-of-two scale (Brevitas' *FixedPoint quantisers), so aieflow must reproduce ``y`` exactly.

The float-scale models (``brevitas_float_pt`` / ``brevitas_float_pc``: Brevitas' *PerTensorFloat /
*PerChannelFloat weights with Int32Bias; ``brevitas_default``: every quantiser left at Brevitas'
default, so a float bias; ``brevitas_shifted``: unsigned activations with a zero point; ``brevitas_float_cnn``: the defaults on
a small CNN) are compared
within the documented bound (docs/quantisation.md: Brevitas computes in float32, aieflow rounds the
exact rational).  ``python make_brevitas_models.py NAME ...`` regenerates only the models named.
The inputs mix Gaussian samples with edge values: exact rounding ties of the input quantiser and
values far beyond its saturation bounds.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent


def _quantisers():
    from brevitas.quant import (
        Int8ActPerTensorFixedPoint,
        Int8ActPerTensorFloat,
        Int8WeightPerChannelFloat,
        Int8WeightPerTensorFixedPoint,
        Int8WeightPerTensorFloat,
        Int16Bias,
        Int32Bias,
        ShiftedUint8ActPerTensorFloat,
        Uint8ActPerTensorFixedPoint,
    )

    return {
        "act8": Int8ActPerTensorFixedPoint,
        "uact8": Uint8ActPerTensorFixedPoint,
        "w8": Int8WeightPerTensorFixedPoint,
        "w4": Int8WeightPerTensorFixedPoint.let(bit_width=4),  # 4-bit codes, carried in int8
        "b16": Int16Bias,
        "b32": Int32Bias,
        # a 16-bit input, rounding modes and narrow range on activations
        "act16": Int8ActPerTensorFixedPoint.let(bit_width=16),
        "act8_floor_narrow": Int8ActPerTensorFixedPoint.let(float_to_int_impl_type="FLOOR", narrow_range=True),
        "act8_to_zero": Int8ActPerTensorFixedPoint.let(float_to_int_impl_type="ROUND_TO_ZERO"),
        # float scales
        "act8f": Int8ActPerTensorFloat,
        "w8f": Int8WeightPerTensorFloat,
        "w8fc": Int8WeightPerChannelFloat,
        "shifted": ShiftedUint8ActPerTensorFloat,
    }


def build(name: str) -> nn.Module:
    import brevitas.nn as qnn

    q = _quantisers()

    class Mlp(nn.Module):
        """x -> int8 -> Linear(int8 W, int16 b) -> ReLU -> uint8 -> Linear(4-bit W, int16 b) -> int8."""

        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(act_quant=q["act8"], return_quant_tensor=True)
            self.fc1 = qnn.QuantLinear(12, 16, bias=True, weight_quant=q["w8"], bias_quant=q["b16"],
                                       return_quant_tensor=True)
            self.act = qnn.QuantReLU(act_quant=q["uact8"], return_quant_tensor=True)
            self.fc2 = qnn.QuantLinear(16, 5, bias=True, weight_quant=q["w4"], bias_quant=q["b16"],
                                       output_quant=q["act8"], return_quant_tensor=False)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(self.inp(x))))

    class Modes(nn.Module):
        """x -> int16 -> Linear(int8 W, int32 b) -> int8 FLOOR narrow -> Linear(int8 W) -> int8 ROUND_TO_ZERO."""

        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(act_quant=q["act16"], return_quant_tensor=True)
            self.fc1 = qnn.QuantLinear(10, 12, bias=True, weight_quant=q["w8"], bias_quant=q["b32"],
                                       output_quant=q["act8_floor_narrow"], return_quant_tensor=True)
            self.fc2 = qnn.QuantLinear(12, 4, bias=False, weight_quant=q["w8"], output_quant=q["act8_to_zero"],
                                       return_quant_tensor=False)

        def forward(self, x):
            return self.fc2(self.fc1(self.inp(x)))

    class FloatMlp(nn.Module):
        """x -> int8 -> Linear(int8 W, int32 b) -> ReLU -> uint8 -> Linear(int8 W, int32 b) -> int8, float
        scales (per tensor or per output channel on the weights)."""

        def __init__(self, per_channel: bool):
            super().__init__()
            w = q["w8fc"] if per_channel else q["w8f"]
            self.inp = qnn.QuantIdentity(act_quant=q["act8f"], return_quant_tensor=True)
            self.fc1 = qnn.QuantLinear(12, 16, bias=True, weight_quant=w, bias_quant=q["b32"], return_quant_tensor=True)
            self.act = qnn.QuantReLU(return_quant_tensor=True)  # Uint8ActPerTensorFloat
            self.fc2 = qnn.QuantLinear(16, 5, bias=True, weight_quant=w, bias_quant=q["b32"], output_quant=q["act8f"],
                                       return_quant_tensor=False)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(self.inp(x))))

    class DefaultMlp(nn.Module):
        """Brevitas' defaults (Int8ActPerTensorFloat input, Int8WeightPerTensorFloat, float bias,
        Uint8ActPerTensorFloat ReLU) and the one quantiser a compiled model needs beyond them: the output's."""

        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(return_quant_tensor=True)
            self.fc1 = qnn.QuantLinear(12, 16, bias=True, return_quant_tensor=True)
            self.act = qnn.QuantReLU(return_quant_tensor=True)
            self.fc2 = qnn.QuantLinear(16, 5, bias=True, output_quant=q["act8f"])

        def forward(self, x):
            return self.fc2(self.act(self.fc1(self.inp(x))))

    class ShiftedMlp(nn.Module):
        """Asymmetric unsigned activations (ShiftedUint8ActPerTensorFloat: a zero point) around a float bias."""

        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(act_quant=q["shifted"], return_quant_tensor=True)
            self.fc1 = qnn.QuantLinear(12, 16, bias=True, output_quant=q["shifted"], return_quant_tensor=True)
            self.fc2 = qnn.QuantLinear(16, 5, bias=True, output_quant=q["act8f"])

        def forward(self, x):
            return self.fc2(self.fc1(self.inp(x)))

    class FloatCnn(nn.Module):
        """Brevitas' default quantisers on Conv -> ReLU -> MaxPool -> Conv -> ReLU -> Linear (float biases),
        an int8 output quantiser."""

        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(return_quant_tensor=True)
            self.c1 = qnn.QuantConv2d(3, 8, 3, padding=1, bias=True, return_quant_tensor=True)
            self.r1 = qnn.QuantReLU(return_quant_tensor=True)
            self.pool = nn.MaxPool2d(2)
            self.c2 = qnn.QuantConv2d(8, 8, 3, bias=True, return_quant_tensor=True)
            self.r2 = qnn.QuantReLU(return_quant_tensor=True)
            self.fc = qnn.QuantLinear(32, 4, bias=True, output_quant=q["act8f"])

        def forward(self, x):
            return self.fc(torch.flatten(self.r2(self.c2(self.pool(self.r1(self.c1(self.inp(x)))))), 1))

    return {"brevitas_mlp": Mlp, "brevitas_modes": Modes, "brevitas_float_pt": lambda: FloatMlp(False),
            "brevitas_float_pc": lambda: FloatMlp(True), "brevitas_default": DefaultMlp,
            "brevitas_shifted": ShiftedMlp, "brevitas_float_cnn": FloatCnn}[name]()


def inputs(module: nn.Module, features: int, rng: np.random.Generator, gaussian: int = 48) -> np.ndarray:
    """Gaussian samples, then edge rows: ties of the input quantiser (k + 1/2 steps), its exact
    bounds, and values far past them."""
    step = float(module.inp.act_quant.scale())
    gauss = rng.standard_normal((gaussian, features)) * 2.0
    top = 2 ** (int(module.inp.act_quant.bit_width()) - 1)
    ties = (rng.integers(-top - 12, top + 12, size=(8, features)) + 0.5) * step
    bounds = rng.choice([-top * step, (top - 1) * step, -1e4, 1e4, 0.0], size=(8, features))
    return np.concatenate([gauss, ties, bounds]).astype(np.float32)


# name, input features (or an image's shape), also exported as QCDQ, seed, Gaussian input rows
MODELS = (
    ("brevitas_mlp", 12, True, 0, 48),
    ("brevitas_modes", 10, False, 1, 48),
    ("brevitas_float_pt", 12, True, 2, 400),
    ("brevitas_float_pc", 12, True, 3, 400),
    ("brevitas_default", 12, True, 4, 400),
    ("brevitas_shifted", 12, True, 5, 400),
    ("brevitas_float_cnn", (3, 8, 8), True, 6, 200),
)


def main(names: list[str]) -> None:
    import brevitas
    from brevitas.export import export_onnx_qcdq, export_qonnx

    warnings.filterwarnings("ignore")
    versions = f"brevitas {brevitas.__version__}, torch {torch.__version__}"
    # QCDQ has no 16-bit activations nor rounding modes other than half to even: brevitas_modes is QONNX only
    for name, features, qcdq, i, gaussian in MODELS:
        if names and name not in names:
            continue
        torch.manual_seed(i)
        rng = np.random.default_rng(i)
        module = build(name)
        module.train()  # a few batches settle the activation quantisers' statistics
        with torch.no_grad():
            for _ in range(8):
                module(torch.randn(64, *(features if isinstance(features, tuple) else (features,))) * 2.0)
        module.eval()
        if isinstance(features, tuple):  # an image model: Gaussian frames
            x = (rng.standard_normal((gaussian, *features)) * 2.0).astype(np.float32)
        else:
            x = inputs(module, features, rng, gaussian)
        with torch.no_grad():
            y = module(torch.from_numpy(x)).numpy().astype(np.float32)
        example = torch.from_numpy(x[:1])
        export_qonnx(module, example, export_path=str(HERE / f"{name}_qonnx.onnx"), dynamo=False)
        if qcdq:
            export_onnx_qcdq(module, example, export_path=str(HERE / f"{name}_qcdq.onnx"), dynamo=False)
        np.savez(HERE / f"{name}.npz", x=x, y=y, versions=versions)
        print(f"{name}: x {x.shape}, y {y.shape}, |y| max {np.abs(y).max():g} ({versions})")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
