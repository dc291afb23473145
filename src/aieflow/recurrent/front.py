"""A 1-D convolution front end before the first recurrent layer (Conv1d -> GRU / LSTM).

The frontends import ``nn.Conv1d`` / an ONNX 1-D Conv as a Conv2d on a one-row image (``C x 1 x T``)
between two views: the sequence as an image, and the convolution's output as the recurrent layer's
batch-first sequence (a transpose of ``C x T``).  Here each convolution becomes one free-running
AI Engine kernel (``SeqConv`` in ``templates/recurrent/rnn_front.h``) in front of the first layer's
W x kernels:

* every call reads one input step (``CIN`` codes) into a ring of the last ``K`` steps and writes every
  output step whose window is complete (zero padding on both ends is implicit; the last input
  step of a sample flushes the outputs the right padding completes);
* an output step is the Dense arithmetic of ``ops/dense.py`` on the window (int64 products, the
  bias, one wrap to the accumulator, round-shift and saturate to the output type, the fused
  ReLU), which is what ``ops/conv.emulate`` computes on im2col patches;
* the last kernel's output steps are the first layer's x, zero-padded to its W kernels' lanes
  and broadcast to them exactly as the x PLIO is otherwise.

Convolutions may be chained (each kernel feeds the next one's stream).  What is not mapped here
(pooling, a standalone activation, a tanh / PReLU convolution, fp32) is refused naming the layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..devices import Device
from ..errors import PlanError
from ..ir import Graph, Node
from ..names import Code, comment
from ..numerics.types import FixedType
from ..ops.conv import geometry
from ..ops.dense import kind_of
from .costs import lanes

HINT = ("before a GRU / LSTM the mapping takes 1-D convolutions (Conv1d, with or without a ReLU) only; use "
        "aieflow.emulate for bit-exact predictions of other models")


@dataclass(frozen=True)
class FrontDims:
    """One convolution of the front as the mapping and the latency model see it."""

    c_in: int
    c_out: int
    kernel: int
    stride: int
    pad_left: int
    t_in: int
    t_out: int
    weight_bits: int = 8
    input_bits: int = 8
    lanes: int = 1  # output channels per vector MAC (1: scalar products)
    vector: bool = False  # products as aie::mac lanes (exact: vector_exact), else the scalar unit

    @property
    def c_out_padded(self) -> int:
        return math.ceil(self.c_out / self.lanes) * self.lanes

    def last_input(self, o: int) -> int:
        """The last input step output step ``o`` reads (clamped to the sequence)."""
        return min(self.t_in - 1, o * self.stride - self.pad_left + self.kernel - 1)

    def to_json(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("c_in", "c_out", "kernel", "stride", "pad_left", "t_in", "t_out", "weight_bits",
                                          "input_bits", "lanes", "vector")}


@dataclass(frozen=True)
class SequenceFront:
    """The convolutions before the first recurrent layer, in order, and the views around them."""

    convs: tuple[Node, ...]
    views: tuple[Node, ...]
    step_major: bool  # the design's input is (steps, channels): a transpose feeds the first convolution

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.convs + self.views


def _refuse(n: Node, rec: Node, why: str) -> PlanError:
    return PlanError(f"layer {n.name} ({n.op}) before {rec.op.upper()} {rec.name}: {why}", layer=n.name, hint=HINT)


def split_front(graph: Graph, rec: Node) -> SequenceFront | None:
    """The convolution front end that feeds ``rec`` (the first recurrent layer), None when ``rec``
    reads the design's input directly; a PlanError naming the layer when something else is there."""
    before = graph.nodes[: graph.nodes.index(rec)]
    if not before:
        return None
    convs: list[Node] = []
    views: list[Node] = []
    step_major = False
    tensor = rec.inputs[0]
    p = graph.producer(tensor)
    if p is None:
        raise _refuse(before[0], rec, "is not on the path to the recurrent layer")
    if p.op != "transpose" or tuple(p.attrs.get("perm", ())) != (1, 0):
        raise _refuse(p, rec, "is not mapped before a recurrent layer")
    views.append(p)
    tensor = p.inputs[0]
    while True:
        p = graph.producer(tensor)
        if p is None:
            break
        if p.op == "reshape":
            views.append(p)
        elif p.op == "conv2d":
            convs.append(p)
        elif p.op == "transpose" and tuple(p.attrs.get("perm", ())) == (1, 0) and p.inputs[0] in graph.inputs and convs:
            views.append(p)
            step_major = True
            tensor = p.inputs[0]
            break
        else:
            raise _refuse(p, rec, "is not mapped before a recurrent layer")
        tensor = p.inputs[0]
    if not convs or tensor not in graph.inputs:
        raise _refuse(before[0], rec, "is not on a chain of 1-D convolutions from the design's input")
    chain = {id(n) for n in (*convs, *views)}
    extra = [n for n in before if id(n) not in chain]
    if extra:
        raise _refuse(extra[0], rec, "is not on the chain of 1-D convolutions that feeds the recurrent layer")
    convs.reverse()
    for c in convs:
        _check_conv(c, rec)
    for a, b in zip(convs, convs[1:], strict=False):
        if a.types.output != b.types.core.input:
            raise PlanError(f"{b.name} reads {a.name}'s output as {b.types.core.input} but {a.name} writes {a.types.output}",
                            layer=b.name, hint=f"give {b.name} input type {a.types.output}")
    last = convs[-1]
    if rec.types is not None and not rec.types.is_float and last.types.output != rec.types.input:
        raise PlanError(f"{rec.name} reads {last.name}'s output as {rec.types.input} but {last.name} writes {last.types.output}",
                        layer=rec.name, hint=f"give {rec.name} input type {last.types.output}")
    return SequenceFront(tuple(convs), tuple(views), step_major)


def _check_conv(c: Node, rec: Node) -> None:
    g = geometry(c)
    top, left, bottom, right = c.attrs["padding"]
    if g.in_shape[1] != 1 or g.kernel[0] != 1 or g.stride[0] != 1 or top or bottom:
        raise _refuse(c, rec, "is a 2-D convolution; only 1-D convolutions (one-row images) are mapped before a recurrent layer")
    if c.attrs.get("activation") not in (None, "relu"):
        raise _refuse(c, rec, f"its fused {c.attrs['activation']} has no kernel in the convolution front end (ReLU or none)")
    t = c.types
    if t is None or t.is_float or not isinstance(t.output, FixedType):
        raise _refuse(c, rec, "a float convolution front end is emulation only; the kernel is fixed point")
    for what, ft in (("input", t.core.input), ("weight", t.core.weight), ("output", t.output)):
        if ft.width > 16:
            raise _refuse(c, rec, f"its {what} type {ft} is wider than 16 bits")


def vector_exact(c: Node) -> bool:
    """Whether int32 accumulator lanes hold every channel's sum of products exactly: the sum of
    |weight| times the largest input magnitude stays below 2^31 for every output channel (then
    no order of accumulation and no accumulator width from 32 bits up can change it)."""
    t = c.types.core.input
    x_max = max(abs(t.min_code), abs(t.max_code))
    w = np.abs(np.asarray(c.params["weight_q"]).astype(np.int64))
    return bool(w.size == 0 or int(w.sum(axis=0).max()) * x_max < 2**31)


def front_dims(front: SequenceFront | None, device: Device) -> tuple[FrontDims, ...]:
    """Each convolution's dims; the vector form where it is exact, with the lanes of its operand
    pair on ``device`` (the recurrent kernels' lanes, costs.lanes)."""
    if front is None:
        return ()
    out = []
    for c in front.convs:
        g = geometry(c)
        t = c.types.core
        vector = vector_exact(c)
        n_lanes = lanes(device.generation, (kind_of(t.input), kind_of(t.weight))) if vector else 1
        out.append(FrontDims(int(c.attrs["in_channels"]), int(c.attrs["out_channels"]), int(g.kernel[1]), int(g.stride[1]),
                             int(c.attrs["padding"][1]), int(g.in_shape[2]), int(g.out_hw[1]),
                             8 if t.weight.width <= 8 else 16, 8 if t.input.width <= 8 else 16, n_lanes, vector))
    return tuple(out)


def front_from_json(items: Any) -> tuple[FrontDims, ...]:
    return tuple(FrontDims(**dict(d)) for d in items or ())


def weight_type(c: Node) -> str:
    return "int8_t" if c.types.core.weight.width <= 8 else "int16_t"


def kernel_bytes(d: FrontDims) -> int:
    """Data memory of one front kernel: weights, 32-bit bias codes, the ring of K input steps."""
    return d.c_out_padded * d.kernel * d.c_in * (d.weight_bits // 8) + 4 * d.c_out + 4 * d.kernel * d.c_in


# ----------------------------------------------------------------------------- C++


def _front_cpp(form: str, *args: object) -> str:
    """Macro ``form`` of templates/recurrent/front.j2, rendered in the project's one Jinja environment."""
    from ..templating import environment

    return getattr(environment("recurrent").get_template("front.j2").module, form)(*args)


def config_text(front: SequenceFront, dims: tuple[FrontDims, ...], first_kp: int, rnd: dict, sat: dict) -> str:
    """``namespace rnn_front``: one configuration struct per convolution (``F<i>``)."""
    convs = [{"name": comment(c.name), "dims": d, "core": c.types.core, "output": c.types.output,
              "wtype": weight_type(c), "cinp": d.c_in, "coutp": first_kp if i == len(dims) - 1 else d.c_out,
              "relu": c.attrs.get("activation") == "relu"}
             for i, (c, d) in enumerate(zip(front.convs, dims, strict=True))]
    return _front_cpp("config", convs, rnd, sat)


def weights_text(front: SequenceFront, dims: tuple[FrontDims, ...]) -> str:
    """Each convolution's weights as [(c, j), o] (the im2col patch order of ops/conv.py, channels
    zero-padded to the lanes) and bias codes."""
    from .emit import _arr, _ints  # (emit imports plan, which imports this module)

    convs = []
    for c, d in zip(front.convs, dims, strict=True):
        raw = np.asarray(c.params["weight_q"]).astype(np.int64)
        w = np.zeros((raw.shape[0], d.c_out_padded), dtype=np.int64)
        w[:, : raw.shape[1]] = raw
        b = c.params.get("bias_q")
        b = np.zeros(w.shape[1], dtype=np.int64) if b is None else np.asarray(b).astype(np.int64)
        convs.append({"w_size": w.size, "w": Code(_arr(_ints(w))), "b_size": b.size, "b": Code(_arr(_ints(b)))})
    return _front_cpp("weights", convs)


def instances(front: SequenceFront) -> list[str]:
    return [f"template class SeqConv<rnn_front::F{i}>;" for i in range(len(front.convs))]


def harness_decls(front: SequenceFront) -> list[str]:
    n = len(front.convs)
    out = [f"    static aieflow_shim::stream<X> s_front[{n + 1}];  // into front[0], ..., out of front[{n - 1}]"]
    for i in range(n):
        out.append(f"    auto& k_front{i} = aieflow_shim::freerun::kernel_object<SeqConv<rnn_front::F{i}>>(g.front[{i}]);")
    return out


def harness_sample(front: SequenceFront) -> list[str]:
    """Run one sample through the front kernels: each kernel is called once per input step it has
    whole in its stream; layer 0's steps then read the last stream."""
    out = ["        // ---- the Conv1d front end: one call per input step, each kernel as its stream fills",
           "        for (int j = 0; j < rnn_front::F0::TIN; ++j) {",
           "            const std::size_t at = (n * rnn_front::F0::TIN + std::size_t(j)) * rnn_front::F0::CINP;",
           "            s_front[0].push_all(std::vector<X>(xs.begin() + at, xs.begin() + at + rnn_front::F0::CINP));",
           "            k_front0.run(s_front[0].in(), s_front[1].out());"]
    for i in range(1, len(front.convs)):
        out += [f"            while (s_front[{i}].size() >= std::size_t(rnn_front::F{i}::CINP)) "
                f"k_front{i}.run(s_front[{i}].in(), s_front[{i + 1}].out());"]
    out += ["        }"]
    return out


def x_steps(xq: np.ndarray, front: SequenceFront, t_in: int, c_in: int) -> np.ndarray:
    """The design's input codes as the x PLIO carries them into front[0]: per sample and step,
    the step's channels."""
    x = xq.reshape(xq.shape[0], -1)
    if front.step_major:
        return x.reshape(xq.shape[0], t_in, c_in)
    return x.reshape(xq.shape[0], c_in, t_in).transpose(0, 2, 1)


# ----------------------------------------------------------------------------- cost


def output_step_cycles(d: FrontDims, mac: int, out: int, loop: int, chunk: int) -> float:
    """AIE cycles of one output step: the products (vector: one ``chunk`` of lanes per window
    value and lane group; scalar: the head's per-product cost ``mac``), each channel's bias,
    rounding and saturation on the scalar unit (the head's per-output cost ``out``), a loop
    overhead per row of work, and writing the step's words."""
    if d.vector:
        groups = d.c_out_padded // d.lanes
        products = groups * (d.kernel * d.c_in * chunk + loop)
        return products + d.c_out * (out + loop) + d.c_out
    return d.c_out * (d.kernel * d.c_in * mac + out + loop) + d.c_out


def lookahead_steps(d: FrontDims) -> int:
    """Input steps read before the first output step can be written."""
    return d.last_input(0) + 1


def steps_per_output(d: FrontDims) -> float:
    return d.t_in / d.t_out if d.t_out else math.inf
