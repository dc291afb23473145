"""Assign a numeric type to every tensor and integer codes to every parameter.

Three ways in (issue 2): PTQ from calibration data at ``precision``; types a QDQ model carries,
taken exactly; explicit per-layer types in the config.  Families decide their own parameters; this
pass walks the graph in order, runs calibration, and types the graph input.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..config import PRECISIONS, Config
from ..devices import Device
from ..errors import ConfigError, ModelError
from ..ir import Graph, QuantHints
from ..numerics.types import FLOAT_C_TYPES, AffineType, FloatType, NumericType, Rounding, Saturation
from ..ops.activation import MASK_TYPE
from ..ops.base import QuantContext, keeps_input_type
from ..ops.dense import power_of_two_type
from ..ops.registry import family

AFFINE_OPS = ("dense", "conv2d", "maxpool", "avgpool")  # the families that take float-scale (affine) inputs


def float_activations(graph: Graph, x: np.ndarray, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Float64 forward pass of the (float) graph, keeping every tensor (for calibration).  A graph with
    a run-time key padding mask (its second input) reads ``mask``'s keep bytes (``[N, T_k]``, 1 = kept;
    ``inputs.mask_keep`` converts PyTorch's forms), every key kept when None (calibration)."""
    values: dict[str, np.ndarray] = {graph.inputs[0]: np.asarray(x, dtype=np.float64)}
    for t in graph.inputs[1:]:
        shape = (values[graph.inputs[0]].shape[0], *graph.tensors[t].shape)
        values[t] = np.ones(shape) if mask is None else np.asarray(mask, dtype=np.float64).reshape(shape)
    for node in graph.nodes:
        values[node.outputs[0]] = family(node.op, node.name).float_forward(node, *(values[t] for t in node.inputs))
    return values


def _input_type(graph: Graph, config: Config, hints: QuantHints, calibration: Mapping[str, np.ndarray]) -> NumericType:
    name = graph.inputs[0]
    first = graph.consumers(name)
    lc = config.layer(first[0].name, *first[0].aliases) if first else config.layer()
    precision = lc.precision or config.precision
    act_kind, _ = PRECISIONS[precision]
    if act_kind in FLOAT_C_TYPES:
        return FloatType(act_kind)
    if "input" in lc.types:
        return lc.types["input"]
    if name in hints.tensors:
        return hints.tensors[name]
    if name not in calibration:
        raise ConfigError(
            f"precision {precision} needs calibration data to choose the input scale",
            hint="pass calibration=... (or --calibration X.npy), or give layers.<first>.input as a fixed type",
        )
    m = float(np.max(np.abs(calibration[name]))) if calibration[name].size else 0.0
    width = 8 if act_kind == "i8" else 16
    return power_of_two_type(m, width, Rounding.CONV_EVEN, Saturation.SATURATE)


def shared_ranges(graph: Graph, calib: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Tensors that a concat joins (looking through views and through the ops that keep their
    input's type: an upsampling or pixel shuffle between a convolution and the concat) must share
    one type, since a concat is a view that cannot convert: give each of them the joint calibration
    range, so every producer picks the same scale."""
    parent: dict[str, str] = {}

    def find(t: str) -> str:
        while parent.get(t, t) != t:
            t = parent[t]
        return t

    def union(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    joined: set[str] = set()
    for node in graph.nodes:
        fam = family(node.op, node.name)
        if fam.is_view:
            for t in node.inputs:
                union(t, node.outputs[0])
        elif fam.quantise is keeps_input_type:  # a copy / permutation (resize, pixel shuffle): one type too
            union(node.inputs[0], node.outputs[0])
        if node.op == "concat":
            joined.add(find(node.outputs[0]))
    groups: dict[str, list[str]] = {}
    for t in calib:
        groups.setdefault(find(t), []).append(t)
    out = dict(calib)
    for root, members in groups.items():
        if find(root) not in {find(j) for j in joined}:
            continue
        m = max(float(np.max(np.abs(calib[t]))) if calib[t].size else 0.0 for t in members)
        for t in members:
            out[t] = np.array([m])
    return out


def quantise(graph: Graph, device: Device, config: Config, hints: QuantHints, calibration: np.ndarray | None,
             mask: np.ndarray | None = None) -> Graph:
    """``mask``: the calibration samples' run-time key padding masks (keep bytes), every key kept when None."""
    calib = float_activations(graph, calibration, mask) if calibration is not None else {}
    if any(n.op == "concat" for n in graph.nodes):
        calib = shared_ranges(graph, calib)
    types: dict[str, NumericType] = {graph.inputs[0]: _input_type(graph, config, hints, calib)}
    for t in graph.inputs[1:]:  # a run-time key padding mask (frontends: read by softmax nodes only)
        types[t] = MASK_TYPE
    nodes = []
    for node in graph.nodes:
        fam = family(node.op, node.name)
        ctx = QuantContext(
            device=device,
            config=config,
            layer=config.layer(node.name, *node.aliases),
            hints=hints,
            input_types=tuple(types[t] for t in node.inputs),
            calibration=calib,
        )
        if node.op not in AFFINE_OPS and not fam.is_view and any(isinstance(t, AffineType) for t in ctx.input_types):
            raise ModelError(
                f"the layer ({node.op}) reads a tensor quantised with a float scale / zero point; aieflow takes such "
                "quantisation (onnxruntime quantize_static) on Dense layers (Gemm / MatMul, + ReLU), "
                "convolutions (+ ReLU) and max / average pooling only",
                layer=node.name,
                hint="quantise this model with power-of-two scales (aieflow's own PTQ: precision + calibration data)")
        if config.weights_rounding == "hls4ml" and node.params and node.op != "dense":
            raise ConfigError(f"config option 'weights_rounding: hls4ml' applies to Dense layers' weights; this "
                              f"layer ({node.op}) rounds its parameters exactly", layer=node.name,
                              hint="leave weights_rounding out for this model")
        if node.op != "dense" and not fam.is_view and (FloatType("fp16") in ctx.input_types
                                                       or ctx.layer.precision == "fp16"):
            # fp16 kernels exist for the Dense layer (+ fused ReLU) only (options.PRECISION_KINDS)
            what = "reads a float16 tensor" if FloatType("fp16") in ctx.input_types else "is given precision fp16"
            raise ConfigError(f"the layer ({node.op}) {what}; precision fp16 is built for Dense "
                              "layers (+ ReLU) only", layer=node.name,
                              hint="use precision bf16 (AIE-ML / AIE-MLv2) or an integer precision for this model")
        qnode = fam.quantise(node, ctx)
        out_type = qnode.types.output if hasattr(qnode.types, "output") else qnode.types
        types[node.outputs[0]] = out_type
        nodes.append(qnode)
    out = graph.with_nodes(nodes).with_tensor_types(types)
    return out

