"""Lower a quantised CNN graph into a chain of *stages*: what one group of AI Engine kernels computes.

A stage is a convolution (``conv``: a Conv2D, or a Dense layer after a flatten, seen as a
convolution whose window is the whole input), or a pooling window (``pool``).  A pixel shuffle is
folded into the convolution before it (a permutation of where the epilogue stores), as is a
nearest upsampling (each value stored ``up[0] x up[1]`` times, ``ops/resize.py``), ReLU / Tanh /
PReLU into the convolution's epilogue, and flatten reshapes vanish (CHW order is the flatten order).
Everything a kernel needs is taken from the emulator's own quantised parameters, so the kernels
compute what :func:`aieflow.ops.conv.emulate` / ``pool`` / ``dense`` / ``add`` do.

**Residual blocks.**  An element-wise ``add`` (+ a ReLU the fuse pass folded into it) whose one
operand is the output of the convolution just before it (read by nothing else) and whose other
operand, the *skip*, is the output of an earlier stage or the network input, is fused into that
convolution's epilogue (:class:`Residual`): the convolution's last tiles read the skip producer's
output window as a second input and add it to each requantised output before storing.  Why fused
rather than an Add kernel of its own: the epilogue already visits every output value (scalar store
loop), so the add costs no tile, no extra window hop and no extra pipeline step; and when the branch
is one convolution, the skip and the branch come from the same producer in the same frame, so the
double-buffered skip window adds no dependency cycle that could slow the frame rate
(:mod:`aieflow.cnn.perf`).  The chain shape of the stages is kept: a stage reads the one before it,
plus at most one skip window.  What cannot be fused is a PlanError naming the add and the layer in
the way (a branch ending in a pooling or a pixel shuffle, a skip read by more than one add, a
projection on the skip, operands of different shapes).

**Channel concatenation** (U-Net skips: ``torch.cat(dim=1)``, ONNX ``Concat`` axis 1).  A ``concat``
of feature maps of one spatial size, one of them the output of the stage just before it, read only
by the convolution right after it, is folded into that convolution (:class:`Concat`): its cascade
runs over the parts' channel groups in channel order, position j reading the output window of the
part's producer row that holds those channels (an earlier stage's row, or the input PLIO).  The
parts must split into groups of one size (``plan.stream_plan``).  Nothing is copied: the concat
is the order in which the cascade reads its input windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import PlanError
from ..ir import Graph, Node
from ..numerics import fixed
from ..numerics.types import FixedType, FloatType, NumericType
from ..ops import activation as float_act
from ..ops import activations as act
from ..ops import conv as conv_ops
from ..ops import pool as pool_ops
from ..ops.activation import per_element_variant
from ..ops.add import AddTypes
from ..ops.conv import ConvGeometry, ConvTypes
from ..ops.dense import DenseTypes

FIXED_TABLE = 256  # int8 pre-activation codes -> output codes, one table per output channel


@dataclass(frozen=True)
class Residual:
    """An element-wise add fused into a convolution's epilogue (:mod:`aieflow.ops.add` numerics):
    ``y = srs((conv << shift_conv) + (skip << shift_skip), shift)`` into ``out_type``, then ReLU."""

    name: str  # the add node (its ReLU, if any, is an alias of it)
    skip_from: int  # index of the stage whose output is the skip, -1: the network input
    skip_name: str  # that stage's name, or the graph input's
    conv_type: NumericType  # the convolution's own output type (after its activation): operand 1
    skip_type: NumericType  # operand 2
    shift_conv: int
    shift_skip: int
    shift: int
    relu: bool


@dataclass(frozen=True)
class Concat:
    """A channel concatenation read by a convolution: its parts in channel order, each
    ``(producer stage index or -1 for the network input, that producer's name, channels)``."""

    name: str  # the concat node
    parts: tuple[tuple[int, str, int], ...]


@dataclass(frozen=True, eq=False)
class Post:
    """An activation or softmax layer after a convolution / Dense stage, run by the stage's last
    tile on its stored output (``activation_fixed.h``: ops/activation.py's integer definitions):
    ``activation``: ``lookup(table, code - in.min_code, seg, out.min_code, out.max_code)`` per value;
    ``softmax``: ``softmax_row`` over the stage's channels (one pixel: a Dense head).  In fp32 / bf16
    (``cnn_float_post.h``): ops/activation.py's ``apply_f32`` / ``softmax_f32`` (function index
    ``fn`` in ``FP32_FUNCTIONS``, constants ``params``), or the bf16 table scheme
    (``apply_bf16_table`` / ``softmax_bf16``: ``table`` of bf16 bit patterns, ``window``, ``rules``)."""

    name: str  # the activation / softmax node
    op: str  # "activation" | "softmax"
    function: str  # the activation's function, or "softmax"
    in_type: NumericType  # what the stage's epilogue writes (the layer's input)
    out_type: NumericType
    table: np.ndarray = field(repr=False)  # int32: the activation's table / knots, or the softmax's exp table
    seg: int = 0  # activation: interpolation segment bits (0: a full table)
    sd: int = 0  # softmax: index shift
    fn: int = 0  # fp32: the function's index in ops/activation.py FP32_FUNCTIONS
    params: tuple[float, float] = (0.0, 0.0)  # fp32: its constants (A, B) (ops/activation.py fp32_params)
    window: tuple[int, int] = (0, 0)  # bf16: the table's exponents E_LO..E_HI
    rules: np.ndarray | None = field(default=None, repr=False)  # bf16: float32 [6, 2] (c1, c0) outside the window


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
    act_bf16: Post | None = None  # bf16 tanh: ops/activation.py's bf16 table scheme (table, window, rules)
    source: str = ""  # the graph node(s) it came from
    aliases: tuple[str, ...] = ()  # the names of what was fused into it (ReLU, BatchNorm, the add's ReLU)
    residual: Residual | None = None  # a fused residual add (out_type is then the add's output type)
    post: Post | None = None  # an activation / softmax after it (out_type is then the post's output type)
    up: tuple[int, int] = (1, 1)  # a fused nearest upsampling (ops/resize.py): each value stored up[0] x up[1] times
    up_name: str = ""
    up_mode: str = "nearest"  # or a bilinear upsampling's coordinate transform (ops/resize.py COORDS)
    concat: Concat | None = None  # a channel concat the convolution reads (its cascade reads the parts' windows)
    groups: int = 1  # a grouped / depthwise convolution's groups: it runs as the dense one (weights zero between groups)
    dilation: tuple[int, int] = (1, 1)  # the model's dilation: it runs as the dense kernel with zero taps
    # float scales (onnxruntime quantize_static; numerics/requant.py): the per-channel multipliers
    # (conv: rq_mult of dense.quantise_affine, shift core.shift; pool: one multiplier, rq_shift, and
    # rq_bias = n z_in subtracted from each window's sum)
    rq: np.ndarray | None = field(default=None, repr=False)
    rq_shift: int = 0
    rq_bias: int = 0

    @property
    def conv_type(self) -> NumericType:
        """What the convolution's epilogue writes before a fused residual add or a post layer."""
        if self.post is not None:
            return self.post.in_type
        return self.residual.conv_type if self.residual else self.out_type

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
        return (self.out_channels // (r * r), oh * r * self.up[0], ow * r * self.up[1])

    @property
    def macs(self) -> int:
        """Multiply-accumulates the kernels run (a grouped or dilated layer's zero weights included)."""
        if self.kind != "conv":
            return 0
        return self.geometry.pixels * self.geometry.patch * self.out_channels

    @property
    def model_macs(self) -> int:
        """The model's own multiply-accumulates: without the zero weights between groups and taps."""
        if self.kind != "conv":
            return 0
        kh, kw = self.geometry.kernel
        dh, dw = self.dilation
        taps = ((kh - 1) // dh + 1) * ((kw - 1) // dw + 1)
        return self.geometry.pixels * self.geometry.in_shape[0] // self.groups * taps * self.out_channels


def lower(graph: Graph) -> tuple[Stage, ...]:
    """The graph's stages, in order; a layer the CNN mapping cannot run is a PlanError naming it."""
    shapes = {name: tuple(t.shape) for name, t in graph.tensors.items()}
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for t in dict.fromkeys(node.inputs):
            readers.setdefault(t, []).append(node)
    stages: list[Stage] = []
    views, current = input_views(graph)
    if len(shapes[current]) != 3:
        raise PlanError(f"the CNN mapping needs a (channels, height, width) or (channels, length) input; the model's "
                        f"is {shapes[graph.inputs[0]]}")
    produced: dict[str, int] = {current: -1}  # tensor -> index of the stage that writes it (-1: the input)
    final: dict[int, str] = {-1: current}  # stage index -> the tensor it finally writes (after what is folded into it)
    pending_flatten: tuple[int, int, int] | None = None
    pending_concat: Concat | None = None
    for node in graph.nodes[len(views):]:
        if pending_concat is not None and node.op != "conv2d":
            raise PlanError(f"the concat '{pending_concat.name}' is read by a {node.op}; the CNN mapping folds a "
                            "channel concat into the convolution that reads it", layer=node.name,
                            hint="put a convolution right after the concat")
        if node.op == "concat":
            pending_concat = _concat(graph, node, current, stages, produced, final, readers)
            current = node.outputs[0]
            continue
        if node.op == "add":
            stages[-1] = _residual(graph, node, current, stages, produced, readers)
            current = node.outputs[0]
            produced[current] = len(stages) - 1
            final[len(stages) - 1] = current
            continue
        if node.inputs[0] != current:
            raise PlanError(f"the CNN mapping runs a chain of layers (with residual skips); this layer reads "
                            f"{_producer_name(graph, node.inputs[0], stages, produced)}'s output, not the output of "
                            f"{_producer_name(graph, current, stages, produced)} just before it",
                            layer=node.name,
                            hint="residual blocks map (a skip joined by an Add to the convolution before it); other "
                            "branches and fan-out (a tensor read by two layers that are not a skip's Add) do not")
        if node.op == "conv2d":
            stages.append(replace(_conv(node), concat=pending_concat))
            pending_flatten = pending_concat = None
        elif node.op in ("maxpool", "avgpool"):
            stages.append(_pool(node, graph.tensors[node.inputs[0]].dtype or node.types))
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
        elif node.op in ("activation", "softmax"):
            if pending_flatten is not None:
                raise PlanError(f"a {node.op} between a flatten and a dense layer is not mapped", layer=node.name,
                                hint="apply it before the flatten")
            stages[-1] = _post(node, stages[-1] if stages else None, graph)
        elif node.op == "resize":
            stages[-1:] = [_fold_resize(stages, node)]
        else:
            raise PlanError(f"op '{node.op}' has no CNN mapping", layer=node.name,
                            hint="the CNN mapping runs conv2d (+ relu / tanh / prelu), max / average pooling, "
                            "pixel shuffle, residual adds (+ relu) onto a convolution's output, and a flatten + "
                            "dense head")
        current = node.outputs[0]
        if stages:
            produced[current] = len(stages) - 1
            final[len(stages) - 1] = current
    if pending_concat is not None:
        raise PlanError(f"the concat '{pending_concat.name}' ends the network; the CNN mapping folds a channel concat "
                        "into the convolution that reads it", layer=pending_concat.name,
                        hint="put a convolution after the concat")
    if not stages:
        raise PlanError("the model has no layer the CNN mapping can run")
    return tuple(stages)


def input_views(graph: Graph) -> tuple[list[Node], str]:
    """The reshapes / transposes at the start of the graph that only rearrange the input into the
    (C, H, W) image the first stage reads, and that image's tensor: a 1-D CNN's (C, W) input lifted
    to (C, 1, W) (frontends/sequence.py), a channels-last input (tf2onnx's Keras export: (H, W, C)
    transposed, or (W, C) transposed and lifted; frontends/channels_last.py).  The host writes the
    input frames in the image's order (:func:`array_frames`); nothing runs on the array for them.
    The longest such prefix that ends at a 3-D tensor, each view read by the next alone."""
    current = graph.inputs[0]
    shapes = {name: tuple(t.shape) for name, t in graph.tensors.items()}
    views: list[Node] = []
    best: tuple[int, str] = (0, current) if len(shapes[current]) == 3 else (0, "")
    for node in graph.nodes:
        if node.op not in ("reshape", "transpose") or node.inputs[0] != current or current in graph.outputs or sum(
                current in n.inputs for n in graph.nodes) != 1:
            break
        views.append(node)
        current = node.outputs[0]
        if len(shapes[current]) == 3:
            best = (len(views), current)
    if not best[1]:
        return [], graph.inputs[0]
    return views[:best[0]], best[1]


def input_order(graph: Graph) -> np.ndarray | None:
    """Flat positions: frame element ``i`` in the image order the first stage reads is element
    ``order[i]`` of the graph input's frame (:func:`input_views`); None for the same order."""
    views, _ = input_views(graph)
    shape = tuple(graph.tensors[graph.inputs[0]].shape)
    ids = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    for v in views:
        ids = np.transpose(ids, v.attrs["perm"]) if v.op == "transpose" else ids.reshape(v.attrs["shape"])
    flat = ids.reshape(-1)
    return None if np.array_equal(flat, np.arange(flat.size)) else flat


def array_frames(graph: Graph, stage: Stage, xq: np.ndarray) -> np.ndarray:
    """Frames ``xq`` (N, graph input shape) as the first stage reads them, (N, C, H, W)."""
    order = input_order(graph)
    flat = np.asarray(xq).reshape(xq.shape[0], -1)
    return (flat if order is None else flat[:, order]).reshape(xq.shape[0], *stage.geometry.in_shape)


def _producer_name(graph: Graph, tensor: str, stages: list[Stage], produced: dict[str, int]) -> str:
    k = produced.get(tensor)
    if k is None:
        return f"'{tensor}'"
    return "the network input" if k < 0 else f"'{stages[k].name}'"


def _residual(graph: Graph, node: Node, current: str, stages: list[Stage], produced: dict[str, int],
              readers: dict[str, list[Node]]) -> Stage:
    """Fuse the add ``node`` into the convolution that computes ``current`` (the last stage); every
    combination this cannot express is a PlanError naming the add and the layer(s) in the way."""
    a, b = node.inputs
    who = lambda t: _producer_name(graph, t, stages, produced)  # noqa: E731
    if current not in (a, b) or not stages:
        raise PlanError(f"the residual add joins {who(a)} and {who(b)}; neither is the output of the layer just before "
                        "it, so it cannot be fused into that layer's epilogue", layer=node.name,
                        hint="the CNN mapping adds a skip to the output of the convolution right before the add; "
                        "projections on the skip path and parallel branches are not mapped")
    if a == b:
        raise PlanError(f"the add adds {who(a)}'s output to itself; the CNN mapping fuses an add of a skip from an "
                        "earlier layer", layer=node.name, hint="write 2 * x as a scaled layer instead")
    skip = b if a == current else a
    s = stages[-1]
    conv = f"'{s.name}'"
    if s.kind != "conv" or s.residual is not None or s.shuffle or s.up != (1, 1):
        why = ("is a pooling" if s.kind == "pool" else "already ends in a residual add" if s.residual
               else "ends in a pixel shuffle" if s.shuffle else "ends in an upsampling")
        raise PlanError(f"the residual add is fused into the epilogue of the convolution that computes its branch "
                        f"operand; that operand comes from {conv}, which {why}", layer=node.name,
                        hint=f"end the residual branch with a convolution (put {s.name} before it, or after the add)")
    if len(readers.get(current, ())) != 1 or current in graph.outputs:
        raise PlanError(f"the output of {conv} is read by the add and by another layer; fused into {conv}'s epilogue "
                        "the add replaces it", layer=node.name, hint="read the sum, not the convolution's output")
    k = produced.get(skip)
    if k is None or k == len(stages) - 1:
        raise PlanError(f"the skip operand of the add ({skip}) is not the output of an earlier layer", layer=node.name)
    src = who(skip)
    skip_shape = stages[k].out_shape if k >= 0 else tuple(graph.tensors[skip].shape)
    if skip_shape != s.out_shape:
        pools = [st.name for st in stages[k + 1:] if st.kind == "pool"]
        via = f" (the pooling '{pools[0]}' between them changes it)" if pools else ""
        raise PlanError(f"the add joins {conv}'s output {s.out_shape} with the skip from {src} {skip_shape}: the "
                        f"operands differ in shape{via}", layer=node.name,
                        hint="the CNN mapping adds tensors of one shape; a projection on the skip is not mapped")
    others = [r.name for r in readers.get(skip, ()) if r is not node]
    if len(others) != 1 or skip in graph.outputs:
        raise PlanError(f"the skip from {src} is read by {', '.join(repr(n) for n in others) or 'no layer'} besides "
                        "this add; the CNN mapping buffers a skip for the next layer and one add", layer=node.name,
                        hint="one residual add per skip tensor")
    t: AddTypes = node.types
    conv_t, skip_t = (t.a, t.b) if a == current else (t.b, t.a)
    sh_conv, sh_skip = (t.shift_a, t.shift_b) if a == current else (t.shift_b, t.shift_a)
    if conv_t != s.out_type:
        raise PlanError(f"the add reads {conv}'s output as {conv_t}, the convolution writes {s.out_type}",
                        layer=node.name)
    if isinstance(t.output, FloatType) != s.is_float:
        raise PlanError(f"the add's output {t.output} and {conv}'s {s.out_type} mix float and fixed point",
                        layer=node.name, hint="use one precision for the whole model")
    res = Residual(node.name, k, stages[k].name if k >= 0 else skip, conv_t, skip_t, sh_conv, sh_skip, t.shift,
                   node.attrs.get("activation") == "relu")
    return replace(s, out_type=t.output, residual=res, source=f"{s.source} + {' + '.join((node.name, *node.aliases))}",
                   aliases=(*s.aliases, *node.aliases))


def _concat(graph: Graph, node: Node, current: str, stages: list[Stage], produced: dict[str, int],
            final: dict[int, str], readers: dict[str, list[Node]]) -> Concat:
    """A channel concat for the convolution after it; what it cannot express is a PlanError naming it."""
    who = lambda t: _producer_name(graph, t, stages, produced)  # noqa: E731
    shapes = [tuple(graph.tensors[t].shape) for t in node.inputs]
    if int(node.attrs.get("axis", 0)) != 0 or any(len(sh) != 3 for sh in shapes):
        raise PlanError(f"a concat along axis {int(node.attrs.get('axis', 0)) + 1} of {shapes} is not mapped; the CNN "
                        "mapping concatenates (channels, height, width) feature maps along the channels",
                        layer=node.name, hint="concatenate along dim=1 (channels)")
    if current not in node.inputs:
        raise PlanError(f"the concat joins {', '.join(who(t) for t in node.inputs)}; none is the output of "
                        f"{who(current)} just before it", layer=node.name,
                        hint="the CNN mapping runs a chain: one part of the concat is the layer right before it")
    outs = readers.get(node.outputs[0], ())
    if len(outs) != 1 or node.outputs[0] in graph.outputs:
        raise PlanError(f"the concat is read by {len(outs)} layer(s){' and is a network output' if node.outputs[0] in graph.outputs else ''}; "
                        "the CNN mapping folds it into the one convolution that reads it", layer=node.name,
                        hint="read the concat with one convolution")
    parts = []
    for t in node.inputs:
        k = produced.get(t)
        if k is None or final.get(k) != t:
            raise PlanError(f"the concat reads {who(t)}, which is not the output of a mapped layer (or of the network "
                            "input) as it is stored", layer=node.name,
                            hint="concatenate outputs of convolutions, poolings or the network input")
        if k >= 0 and stages[k].post is not None and stages[k].post.op == "softmax":
            raise PlanError(f"the concat reads the softmax of '{stages[k].name}'", layer=node.name)
        parts.append((k, stages[k].name if k >= 0 else t, shapes[len(parts)][0]))
    return Concat(node.name, tuple(parts))


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
        if a == "prelu":  # bf16: slopes already rounded to bf16 (ops/conv.py quantise)
            extra["slope"] = np.asarray(node.params["slope_q"], dtype=np.float32).reshape(-1)
            if extra["slope"].size == 1:
                extra["slope"] = np.repeat(extra["slope"], out_channels)
        elif t.output.name == "bf16":  # the bf16 activation kernel's table (ops/activation.py)
            p = node.params
            extra["act_bf16"] = Post(node.name, "activation", "tanh", t.output, t.output,
                                     np.asarray(p["table"]).astype(np.int32),
                                     window=tuple(int(v) for v in p["window"]),
                                     rules=np.asarray(p["rules"], dtype=np.float32))
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
                 weight=w, bias=None if b is None else np.asarray(b), source=node.name, aliases=node.aliases,
                 groups=int(node.attrs.get("groups", 1)), dilation=tuple(node.attrs.get("dilation", (1, 1))),
                 rq=_rq(node), rq_shift=t.core.shift, **_epilogue(node, t, o))


def _rq(node: Node) -> np.ndarray | None:
    m = node.params.get("rq_mult")
    return None if m is None else np.asarray(m, dtype=np.int64)


def _dense(node: Node, in_shape: tuple[int, int, int]) -> Stage:
    t: DenseTypes = node.types
    c, h, w = in_shape
    g = ConvGeometry((c, h, w), (h, w), (1, 1), (0, 0, 0, 0))
    if g.patch != int(node.attrs["in_features"]):
        raise PlanError(f"dense layer reads {node.attrs['in_features']} features from a {in_shape} tensor", layer=node.name)
    wq = np.asarray(node.params["weight_q"])
    b = node.params.get("bias_q")
    return Stage(node.name, "conv", g, int(node.attrs["out_features"]), t.input, t.output, node.attrs.get("activation"),
                 core=t, weight=wq, bias=None if b is None else np.asarray(b), source=node.name, aliases=node.aliases,
                 rq=_rq(node), rq_shift=t.shift)


def _post(node: Node, s: Stage | None, graph: Graph) -> Stage:
    """Fold an activation / softmax layer into the stage before it (its last tile runs it)."""
    what = node.attrs.get("function", "softmax") if node.op == "activation" else "softmax"
    if s is None or s.kind != "conv":
        before = "the network input" if s is None else f"the {s.pool} pooling '{s.name}'"
        raise PlanError(f"a standalone {what} after {before} is not mapped: the CNN mapping runs it in the last tile "
                        "of the convolution or Dense layer before it", layer=node.name,
                        hint="move it after a convolution or Dense layer")
    why = ("its residual add" if s.residual is not None else "its pixel shuffle" if s.shuffle
           else f"the upsampling '{s.up_name}'" if s.up != (1, 1)
           else f"its {s.activation} table" if s.table is not None or s.act_bf16 is not None else f"the {s.post.function} after it" if s.post
           else None)
    if why:
        raise PlanError(f"a {what} after '{s.name}' is not mapped together with {why} (one epilogue per stage)",
                        layer=node.name, hint="put a convolution or Dense layer between them")
    t = node.types
    if per_element_variant(node):
        raise PlanError(f"{per_element_variant(node)} is computed by the DAG mapping's kernels only; a CNN's post "
                        "layer computes the table form", layer=node.name,
                        hint=f"remove {per_element_variant(node)} from the config (or set it to table)")
    if node.op == "softmax" and s.geometry.pixels != 1:
        raise PlanError(f"softmax over the channels of every pixel of '{s.name}' ({s.out_hw[0]} x {s.out_hw[1]} "
                        "pixels) is not mapped; a softmax after a Dense head (one pixel) is", layer=node.name,
                        hint="flatten and add a Dense layer before the softmax")
    if node.op == "softmax" and int(np.prod(graph.tensors[node.inputs[0]].shape)) != s.out_channels:
        raise PlanError(f"softmax over {graph.tensors[node.inputs[0]].shape} is not one row of '{s.name}''s "
                        f"{s.out_channels} outputs", layer=node.name)
    if s.is_float:
        post = _float_post(node, what, t)
    elif node.op == "softmax":
        post = Post(node.name, "softmax", "softmax", t.input, t.output,
                    np.asarray(node.params["table"], dtype=np.int32), sd=int(t.index_shift))
    else:
        post = Post(node.name, "activation", what, t.input, t.output,
                    np.asarray(node.params["table"], dtype=np.int32), seg=int(t.segment_bits))
    if post.in_type != s.out_type:
        raise PlanError(f"{what} reads {post.in_type}, '{s.name}' writes {s.out_type}", layer=node.name)
    return replace(s, out_type=t.output, post=post, source=f"{s.source} + {' + '.join((node.name, *node.aliases))}",
                   aliases=(*s.aliases, *node.aliases))


def _float_post(node: Node, what: str, t) -> Post:
    """An fp32 / bf16 post layer: the kernel definitions of ops/activation.py (cnn_float_post.h)."""
    op = "softmax" if node.op == "softmax" else "activation"
    if isinstance(t.input, FloatType) and t.input.name == "bf16":
        return Post(node.name, op, what, t.input, t.output, np.asarray(node.params["table"]).astype(np.int32),
                    window=tuple(int(v) for v in node.params["window"]),
                    rules=np.asarray(node.params["rules"], dtype=np.float32))
    if op == "softmax":
        return Post(node.name, op, what, t.input, t.output, np.zeros(1, dtype=np.int32))
    if what not in float_act.FP32_FUNCTIONS:
        raise PlanError(f"{what} after a convolution in fp32 has no kernel (computed in float64 by the emulator only)",
                        layer=node.name, hint=f"fp32 post layers: {', '.join(float_act.FP32_FUNCTIONS)}; or use "
                        "precision int8 / int16")
    return Post(node.name, op, what, t.input, t.output, np.zeros(1, dtype=np.int32),
                fn=float_act.FP32_FUNCTIONS.index(what), params=float_act.fp32_params(what, node.attrs))


def _pool(node: Node, in_type: NumericType) -> Stage:
    g = pool_ops.geometry(node)
    rq = {}
    if "rq_mult" in node.params:  # a float-scale average (ops/pool.py)
        rq = {"rq": _rq(node), "rq_shift": int(node.params["rq_shift"]), "rq_bias": int(node.params["rq_bias"])}
    return Stage(node.name, "pool", g, g.in_shape[0], in_type, node.types, pool=node.op[:3],
                 count_include_pad=bool(node.attrs.get("count_include_pad", True)), source=node.name,
                 aliases=node.aliases, **rq)


def _fold_resize(stages: list[Stage], node: Node) -> Stage:
    """An upsampling after a convolution: nearest, its epilogue stores each value up[0] x up[1]
    times; bilinear, its last tile interpolates the stored window (cnn_kernels.h: the integer
    definition in fixed point, the float32 order of ops/resize.bilinear_float in fp32 / bf16)."""
    s = stages[-1] if stages else None
    why = ("follows the network input" if s is None else f"follows the {s.pool} pooling '{s.name}'" if s.kind == "pool"
           else f"follows '{s.name}''s residual add" if s.residual is not None
           else f"follows '{s.name}''s pixel shuffle" if s.shuffle
           else f"follows the {s.post.function} after '{s.name}'" if s.post is not None
           else f"follows another upsampling of '{s.name}'" if s.up != (1, 1) else None)
    if why:
        raise PlanError(f"{node.attrs.get('mode', 'nearest')} upsampling is mapped into the epilogue of the "
                        f"convolution before it; this one {why}",
                        layer=node.name, hint="put the upsampling right after a convolution (+ its ReLU / tanh / "
                        "PReLU); aieflow.emulate(model, ...) runs any placement bit-exactly")
    mode = node.attrs.get("coord", "nearest") if node.attrs.get("mode") == "bilinear" else "nearest"
    return replace(s, up=tuple(int(v) for v in node.attrs["scale"]), up_name=node.name, up_mode=mode,
                   source=f"{s.source} + {node.name}")


def _fold_shuffle(stages: list[Stage], node: Node) -> Stage:
    if stages and stages[-1].up != (1, 1):
        raise PlanError(f"a pixel shuffle after the upsampling '{stages[-1].up_name}' is not mapped", layer=node.name,
                        hint="put a convolution between them")
    if not stages or stages[-1].kind != "conv" or stages[-1].shuffle:
        raise PlanError("a pixel shuffle is mapped into the epilogue of the convolution before it; "
                        "here it does not follow a convolution", layer=node.name)
    if stages[-1].residual is not None:
        raise PlanError(f"a pixel shuffle after the residual add '{stages[-1].residual.name}' is not mapped (the add "
                        f"is fused into '{stages[-1].name}''s epilogue, before its store order)", layer=node.name)
    if node.attrs["mode"] != "CRD":
        raise PlanError(f"pixel shuffle mode {node.attrs['mode']} is not mapped yet (CRD is)", layer=node.name,
                        hint="export with PyTorch's PixelShuffle or ONNX DepthToSpace mode=CRD")
    s = stages[-1]
    return replace(s, shuffle=int(node.attrs["upscale"]), shuffle_name=node.name, source=f"{s.source} + {node.name}")


def quantised_input_codes(stage: Stage, x: np.ndarray) -> np.ndarray:
    """Values as the kernels hold them: float32, or integer codes."""
    return x.astype(np.float32) if stage.is_float else fixed.wrap(np.asarray(x, dtype=np.int64), 64)
