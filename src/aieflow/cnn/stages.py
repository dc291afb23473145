"""Lower a quantised CNN graph into a chain of *stages*: what one group of AI Engine kernels computes.

A stage is a convolution (``conv``: a Conv2D, or a Dense layer after a flatten, seen as a
convolution whose window is the whole input), or a pooling window (``pool``).  A pixel shuffle is
folded into the convolution before it (a permutation of where the epilogue stores), ReLU / Tanh /
PReLU into the convolution's epilogue, and flatten reshapes vanish (CHW order is the flatten order).
Everything a kernel needs is taken from the emulator's own quantised parameters, so the kernels
compute what :func:`aieflow.ops.conv.emulate` / ``pool`` / ``dense`` do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import PlanError
from ..ir import Graph, Node
from ..numerics import fixed
from ..numerics.types import FixedType, FloatType, NumericType
from ..ops import activations as act
from ..ops import conv as conv_ops
from ..ops import pool as pool_ops
from ..ops.conv import ConvGeometry, ConvTypes
from ..ops.dense import DenseTypes

FIXED_TABLE = 256  # int8 pre-activation codes -> output codes, one table per output channel


@dataclass(frozen=True, eq=False)
class Stage:
    name: str
    kind: str  # "conv" | "pool"
    geometry: ConvGeometry
    out_channels: int
    in_type: NumericType
    out_type: NumericType
    activation: str | None = None  # None | relu | tanh | prelu
    shuffle: int = 0  # fused pixel shuffle factor (CRD), 0 = none
    shuffle_name: str = ""
    pool: str = ""  # "max" | "avg"
    count_include_pad: bool = True
    core: DenseTypes | None = None  # the Dense numerics of a conv stage
    weight: np.ndarray | None = field(default=None, repr=False)  # (K, O) codes or float32
    bias: np.ndarray | None = field(default=None, repr=False)  # (O,) codes (int32) or float32
    slope: np.ndarray | None = field(default=None, repr=False)  # fp32 PReLU slopes (O,)
    table: np.ndarray | None = field(default=None, repr=False)  # fixed: (O, 256) codes; fp32 tanh LUT: values
    tanh: act.Activation | None = None
    source: str = ""  # the graph node(s) it came from

    @property
    def is_float(self) -> bool:
        return isinstance(self.in_type, FloatType)

    @property
    def out_hw(self) -> tuple[int, int]:
        return self.geometry.out_hw

    @property
    def out_shape(self) -> tuple[int, int, int]:
        """(C, H, W) after the fused shuffle."""
        oh, ow = self.out_hw
        r = self.shuffle or 1
        return (self.out_channels // (r * r), oh * r, ow * r)

    @property
    def macs(self) -> int:
        if self.kind != "conv":
            return 0
        return self.geometry.pixels * self.geometry.patch * self.out_channels


def lower(graph: Graph) -> tuple[Stage, ...]:
    """The graph's stages, in order; a layer the CNN mapping cannot run is a PlanError naming it."""
    shapes = {name: tuple(t.shape) for name, t in graph.tensors.items()}
    stages: list[Stage] = []
    current = graph.inputs[0]
    first = graph.nodes[0] if graph.nodes else None
    # a 1-D CNN's (channels, length) input is read as a (channels, 1, length) image (frontends/sequence.py)
    lifted = (len(shapes[current]) == 2 and first is not None and first.op == "reshape"
              and shapes[first.outputs[0]] == (shapes[current][0], 1, shapes[current][1]))
    if len(shapes[current]) != 3 and not lifted:
        raise PlanError(f"the CNN mapping needs a (channels, height, width) or (channels, length) input; the model's "
                        f"is {shapes[current]}")
    pending_flatten: tuple[int, int, int] | None = None
    for node in graph.nodes:
        if node.inputs[0] != current:
            raise PlanError("the CNN mapping runs a chain of layers; this layer does not read the previous one",
                            layer=node.name, hint="branches, residual adds and fan-out are not supported")
        if node.op == "conv2d":
            stages.append(_conv(node))
            pending_flatten = None
        elif node.op in ("maxpool", "avgpool"):
            stages.append(_pool(node))
            pending_flatten = None
        elif node.op == "pixel_shuffle":
            stages[-1:] = [_fold_shuffle(stages, node)]
        elif node.op == "reshape":
            src = shapes[node.inputs[0]]
            pending_flatten = src if len(src) == 3 else (int(np.prod(src)), 1, 1)
        elif node.op == "dense":
            in_shape = pending_flatten or _vector_shape(shapes[node.inputs[0]], node)
            stages.append(_dense(node, in_shape))
            pending_flatten = None
        else:
            raise PlanError(f"op '{node.op}' has no CNN mapping", layer=node.name,
                            hint="the CNN mapping runs conv2d (+ relu / tanh / prelu), max / average pooling, "
                            "pixel shuffle and a flatten + dense head")
        current = node.outputs[0]
    if not stages:
        raise PlanError("the model has no layer the CNN mapping can run")
    return tuple(stages)


def _vector_shape(shape: tuple[int, ...], node: Node) -> tuple[int, int, int]:
    if len(shape) == 1:
        return (shape[0], 1, 1)
    if len(shape) == 3:
        return shape  # a dense on a CHW tensor without flatten: same order
    raise PlanError(f"dense input of shape {shape} cannot be mapped", layer=node.name)


def _epilogue(node: Node, t: ConvTypes, out_channels: int) -> dict:
    a = node.attrs.get("activation")
    extra: dict = {}
    if a not in ("tanh", "prelu"):
        return extra
    if t.is_float:
        if a == "prelu":
            extra["slope"] = np.asarray(node.params["slope_q"], dtype=np.float32).reshape(-1)
            if extra["slope"].size == 1:
                extra["slope"] = np.repeat(extra["slope"], out_channels)
        elif isinstance(t.tanh, act.TableSpec):
            extra["table"] = t.tanh.values().astype(np.float32)
            extra["tanh"] = t.tanh
        else:
            raise PlanError("fp32 tanh on the AI Engine uses a lookup table; the exact tanh has no kernel",
                            layer=node.name,
                            hint="set activations: {tanh: espcn-thesis} (or another table) for this layer")
        return extra
    pre: FixedType = t.core.output
    if pre.width > 8:
        raise PlanError(f"{a} after a {pre.width}-bit pre-activation needs a {1 << pre.width}-entry table per channel; "
                        "the CNN mapping supports 8-bit ones", layer=node.name, hint="use precision int8 for this layer")
    codes = np.arange(pre.min_code, pre.max_code + 1, dtype=np.int64)
    # The table is the emulator's own activation stage applied to every pre-activation code.
    fake = np.broadcast_to(codes[None, None, :, None], (1, out_channels, codes.size, 1)).copy()
    out = conv_ops._activate(node, t, fake)[0, :, :, 0]
    extra["table"] = out.astype(np.int64)
    return extra


def _conv(node: Node) -> Stage:
    t: ConvTypes = node.types
    g = conv_ops.geometry(node)
    o = int(node.attrs["out_channels"])
    w = np.asarray(node.params["weight_q"])
    b = node.params.get("bias_q")
    return Stage(node.name, "conv", g, o, t.input, t.output, node.attrs.get("activation"), core=t.core,
                 weight=w, bias=None if b is None else np.asarray(b), source=node.name, **_epilogue(node, t, o))


def _dense(node: Node, in_shape: tuple[int, int, int]) -> Stage:
    t: DenseTypes = node.types
    c, h, w = in_shape
    g = ConvGeometry((c, h, w), (h, w), (1, 1), (0, 0, 0, 0))
    if g.patch != int(node.attrs["in_features"]):
        raise PlanError(f"dense layer reads {node.attrs['in_features']} features from a {in_shape} tensor", layer=node.name)
    wq = np.asarray(node.params["weight_q"])
    b = node.params.get("bias_q")
    return Stage(node.name, "conv", g, int(node.attrs["out_features"]), t.input, t.output, node.attrs.get("activation"),
                 core=t, weight=wq, bias=None if b is None else np.asarray(b), source=node.name)


def _pool(node: Node) -> Stage:
    g = pool_ops.geometry(node)
    return Stage(node.name, "pool", g, g.in_shape[0], node.types, node.types, pool=node.op[:3],
                 count_include_pad=bool(node.attrs.get("count_include_pad", True)), source=node.name)


def _fold_shuffle(stages: list[Stage], node: Node) -> Stage:
    if not stages or stages[-1].kind != "conv" or stages[-1].shuffle:
        raise PlanError("a pixel shuffle is mapped into the epilogue of the convolution before it; "
                        "here it does not follow a convolution", layer=node.name)
    if node.attrs["mode"] != "CRD":
        raise PlanError(f"pixel shuffle mode {node.attrs['mode']} is not mapped yet (CRD is)", layer=node.name,
                        hint="export with PyTorch's PixelShuffle or ONNX DepthToSpace mode=CRD")
    s = stages[-1]
    from dataclasses import replace

    return replace(s, shuffle=int(node.attrs["upscale"]), shuffle_name=node.name, source=f"{s.source} + {node.name}")


def quantised_input_codes(stage: Stage, x: np.ndarray) -> np.ndarray:
    """Values as the kernels hold them: float32, or integer codes."""
    return x.astype(np.float32) if stage.is_float else fixed.wrap(np.asarray(x, dtype=np.int64), 64)
