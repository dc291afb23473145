"""Small reference models for the examples, tests and benchmarks.

``qdq_mlp`` builds the kind of model a QAT flow exports: an ONNX MLP in QDQ form with int8 weights,
int32 biases and power-of-two per-tensor scales (zero points 0), so aieflow can reproduce its
integer arithmetic exactly.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np


def qdq_mlp(
    widths: Sequence[int],
    seed: int = 0,
    input_frac: int = 4,
    weight_frac: int = 7,
    relu_last: bool = False,
    quantise_output: bool = True,
    act_bits: int = 8,
    name: str = "qdq_mlp",
):
    """ONNX QDQ MLP ``widths[0] -> widths[1] -> ...`` with ReLU between layers.

    Output scales are picked so a random input uses most of the int8 range without saturating
    everything (about 3 sigma of the pre-activation distribution).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    act_np = np.int8 if act_bits == 8 else np.int16
    nodes, inits = [], []

    def const(nm: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(arr, nm))
        return nm

    def qdq(tensor: str, frac: int, tag: str) -> str:
        s = const(f"{tag}_scale", np.array(2.0**-frac, dtype=np.float32))
        z = const(f"{tag}_zp", np.array(0, dtype=act_np))
        nodes.append(helper.make_node("QuantizeLinear", [tensor, s, z], [f"{tag}_q"], name=f"{tag}_Q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_q", s, z], [f"{tag}_dq"], name=f"{tag}_DQ"))
        return f"{tag}_dq"

    x = qdq("input", input_frac, "input")
    frac_x = input_frac
    n_layers = len(widths) - 1
    for i in range(n_layers):
        k, n = widths[i], widths[i + 1]
        wq = rng.integers(-128, 128, size=(k, n)).astype(np.int8)
        acc_frac = frac_x + weight_frac
        bq = rng.integers(-(1 << (acc_frac + 2)), 1 << (acc_frac + 2), size=n).astype(np.int32)
        w = const(f"fc{i}_w_q", wq)
        ws = const(f"fc{i}_w_scale", np.array(2.0**-weight_frac, dtype=np.float32))
        wz = const(f"fc{i}_w_zp", np.array(0, dtype=np.int8))
        nodes.append(helper.make_node("DequantizeLinear", [w, ws, wz], [f"fc{i}_w"], name=f"fc{i}_w_DQ"))
        b = const(f"fc{i}_b_q", bq)
        bs = const(f"fc{i}_b_scale", np.array(2.0**-acc_frac, dtype=np.float32))
        bz = const(f"fc{i}_b_zp", np.array(0, dtype=np.int32))
        nodes.append(helper.make_node("DequantizeLinear", [b, bs, bz], [f"fc{i}_b"], name=f"fc{i}_b_DQ"))
        nodes.append(helper.make_node("MatMul", [x, f"fc{i}_w"], [f"fc{i}_mm"], name=f"fc{i}"))
        nodes.append(helper.make_node("Add", [f"fc{i}_mm", f"fc{i}_b"], [f"fc{i}_add"], name=f"fc{i}_bias"))
        y = f"fc{i}_add"
        last = i == n_layers - 1
        if not last or relu_last:
            nodes.append(helper.make_node("Relu", [y], [f"fc{i}_relu"], name=f"fc{i}_relu"))
            y = f"fc{i}_relu"
        # pre-activation std ~ sqrt(k) * 74 * 74 codes at acc_frac (uniform int8 x ~ +-127)
        spread = math.sqrt(k) * 74.0 * (2.0 ** (act_bits - 1)) * 0.58 / 3.0
        shift = max(0, math.ceil(math.log2(spread / (2 ** (act_bits - 1)))))
        frac_y = acc_frac - shift
        if not last or quantise_output:
            y = qdq(y, frac_y, f"fc{i}_out")
            frac_x = frac_y
        x = y
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", widths[0]])
    out = helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", widths[-1]])
    graph = helper.make_graph(nodes, name, [inp], [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def onnx_float_mlp(widths: Sequence[int], seed: int = 0):
    """A float ONNX MLP of ``Gemm`` layers (seeded normal weights, 1 / sqrt(fan-in), biases 0.1) with
    ReLU between them: what onnxruntime's ``quantize_static`` takes (its input ``x``, batch ``N``)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        w = rng.normal(0, 1 / np.sqrt(a), (a, b)).astype(np.float32)
        bias = rng.normal(0, 0.1, b).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(bias, f"B{i}")]
        nodes.append(helper.make_node("Gemm", [x, f"W{i}", f"B{i}"], [f"g{i}"], name=f"fc{i}"))
        x = f"g{i}"
        if i < len(widths) - 2:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"relu{i}"))
            x = f"r{i}"
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", widths[0]])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", widths[-1]])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def torch_mlp(widths: Sequence[int], seed: int = 0):
    """A float PyTorch MLP (Linear + ReLU, no ReLU after the last layer)."""
    import torch

    torch.manual_seed(seed)
    layers: list = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


def espcn(weights: str | os.PathLike | None = None, seed: int = 0):
    """The ESPCN x2 network of ``shared/spec/espcn-super-resolution.md`` with the thesis's layer
    names (conv1 5x5 64 -> tanh -> conv3 3x3 32 -> tanh -> conv4 3x3 4 -> pixel shuffle x2):
    seeded random weights, or the thesis's from an ``.npz`` of its state dict."""
    import torch
    from torch import nn

    class ESPCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 64, 5, padding=2)
            self.conv3 = nn.Conv2d(64, 32, 3, padding=1)
            self.conv4 = nn.Conv2d(32, 4, 3, padding=1)
            self.act1, self.act3 = nn.Tanh(), nn.Tanh()
            self.shuffle = nn.PixelShuffle(2)

        def forward(self, x):
            return self.shuffle(self.conv4(self.act3(self.conv3(self.act1(self.conv1(x))))))

    torch.manual_seed(seed)
    model = ESPCN().eval()
    if weights is not None:
        arrays = np.load(weights)
        state = {k: torch.from_numpy(np.asarray(arrays[k], dtype=np.float32)) for k in arrays.files}
        model.load_state_dict(state, strict=True)
    return model


def cnn_classifier(seed: int = 1):
    """A small image classifier that touches every CNN feature: strided convs (one with a K tail,
    3 x 3 x 3 = 27), max / average / global average pooling, PReLU, Flatten + Linear."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    features = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.PReLU(16), nn.AvgPool2d(2),
        nn.Conv2d(16, 24, 3, stride=(1, 2), padding=(1, 0)), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    )
    head = nn.Sequential(nn.Flatten(), nn.Linear(24, 10))
    return nn.Sequential(OrderedDict(features=features, head=head)).eval()


def residual_cnn(relu_after_add: bool = False, seed: int = 0):
    """One residual block of the CNN stream mapping: ``y = relu(c1(x))``, ``z = relu(c2(y)) + y``
    (optionally ``relu(...)`` of the sum), global average pooling of the 8 x 8 image, Linear 8 -> 4;
    input (3, 8, 8) (issue 17, item 4)."""
    import torch
    from torch import nn

    class ResidualCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
            self.p, self.fc = nn.AvgPool2d(8), nn.Linear(8, 4)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            z = torch.relu(self.c2(y)) + y
            if relu_after_add:
                z = torch.relu(z)
            return self.fc(self.p(z).flatten(1))

    torch.manual_seed(seed)
    return ResidualCNN().eval()


def residual_mlp(features: int = 16, hidden: int = 24, seed: int = 0):
    """``x + fc2(relu(fc1(x)))``: the smallest DAG (fan-out and a residual Add)."""
    import torch
    from torch import nn

    class ResidualMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(features, hidden), nn.Linear(hidden, features)

        def forward(self, x):
            return x + self.fc2(torch.relu(self.fc1(x)))

    torch.manual_seed(seed)
    return ResidualMLP().eval()


def gru_classifier(n_in: int = 4, n_h: int = 8, outputs: int = 3, layers: int = 1, seed: int = 0):
    """A (stacked) GRU over ``[batch, steps, n_in]`` whose last step feeds one Linear layer."""
    import torch
    from torch import nn

    class GruClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(n_in, n_h, num_layers=layers, batch_first=True)
            self.fc = nn.Linear(n_h, outputs)

        def forward(self, x):
            return self.fc(self.rnn(x)[0][:, -1])

    torch.manual_seed(seed)
    return GruClassifier().eval()


def onnx_float_cnn(head: str = "gap", seed: int = 0):
    """A small float ONNX CNN for onnxruntime's ``quantize_static`` (input ``x`` ``[N, 2, 8, 8]``,
    output ``y`` ``[N, 5]``): Conv 2->6 3x3 pad 1 + ReLU, MaxPool 2, Conv 6->8 3x3 pad 1 + ReLU, then
    ``head`` "gap" (GlobalAveragePool + Flatten) or "flatten" (Flatten), and a Gemm to 5; seeded
    normal weights."""
    from onnx import TensorProto, helper, numpy_helper

    if head not in ("gap", "flatten"):
        raise ValueError(f"head must be 'gap' or 'flatten', not {head!r}")
    rng = np.random.default_rng(seed)
    feat = 8 if head == "gap" else 8 * 4 * 4
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (6, 2, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, 6).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.2, (8, 6, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b2"),
             numpy_helper.from_array(rng.normal(0, 0.3, (feat, 5)).astype(np.float32), "dw"),
             numpy_helper.from_array(rng.normal(0, 0.1, 5).astype(np.float32), "db")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2")]
    if head == "gap":
        nodes += [helper.make_node("GlobalAveragePool", ["r2"], ["p2"], name="gap"),
                  helper.make_node("Flatten", ["p2"], ["f"], name="flat")]
    else:
        nodes += [helper.make_node("Flatten", ["r2"], ["f"], name="flat")]
    nodes.append(helper.make_node("Gemm", ["f", "dw", "db"], ["y"], name="fc"))
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
