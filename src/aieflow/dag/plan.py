"""Plan a DAG (fan-out, residual Add, LayerNorm, Transpose views, Dense) for AIE-ML.

Every tensor a kernel reads is a matrix ``[B * R, F]`` (``B`` samples per graph iteration, ``R``
rows per sample, ``F`` features; a vector sample has ``R = 1``).  Nodes:

* ``dense``: the chain's Dense plan (``ops/dense.plan``) with ``B * R`` as its batch, so the
  same ``dense.h`` kernel, packing and cycle model serve each Dense segment unchanged;
* ``add`` / ``layernorm`` / ``activation`` / ``softmax``: :class:`RowsPlan`, the rows split over
  ``parts`` tiles (one kernel each, row-major buffers): an Add or an element-wise activation on the
  fewest parts whose footprint fits a tile, a LayerNorm or softmax (scalar per-row work) on as
  many as the memory tile's channels allow;
* ``masked_mean`` (mean over the tokens a run-time key padding mask keeps): :class:`RowsPlan` with
  one output row per sample, whole samples per part, each part reading its samples' ``T`` rows of
  ``x`` and their mask rows (``dag_kernels.h`` MaskedMean);
* ``transpose`` (perm (1, 0) of a 2-D sample): no kernel; the read side of the memory-tile link
  walks the producer's buffer transposed (``dag/links.py``), or, for 8- / 16-bit data (the DMAs
  address 32-bit words), an Add / LayerNorm next to it transposes in its memory
  (:func:`place_transposes`);
* ``concat`` / ``slice`` along the features: no kernel; a concat's inputs are written side by side
  into one memory-tile buffer, a slice is a read pattern at an offset.

Links (``dag/links.py``) join every consumer operand to its source tensor through memory-tile
shared buffers, one set per consumer operand, so fan-out is the producer's output buffer
broadcast to several links, and a residual's skip path waits in its own memory tile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from ..config import Config
from ..devices import Device
from ..errors import ConfigError, PlanError
from ..ir import Graph, Node, frozen_map
from ..numerics.types import FixedType
from ..ops.base import PlanContext
from ..ops.dense import DensePlan, with_out_panel
from ..ops.registry import family

COMPUTE_OPS = ("dense", "add", "add_const", "scale_shift", "layernorm", "activation", "softmax", "matmul", "masked_mean")
ROWS_OPS = ("add", "add_const", "scale_shift", "layernorm", "activation", "softmax", "matmul", "masked_mean")
ALIGN = 32


@dataclass(frozen=True)
class Operand:
    """Where a compute node's input (or the graph output) comes from: a source tensor (a graph
    input, or a compute node's output), read directly or transposed, whole or a feature slice
    ``[start, stop)`` of it; or a concat: ``parts`` (sources written side by side along the
    features into one memory-tile buffer), ``tensor`` then names the concat's output."""

    tensor: str
    producer: str | None  # None: the graph input (or a concat: see parts)
    transposed: bool = False
    start: int = 0
    stop: int | None = None  # None: up to the source's last feature
    parts: tuple[Operand, ...] = ()
    # where a transposed read is realised: "dma" (the memory tile's read pattern steps single
    # elements), "producer" (a rows kernel writes its output transposed, the link moves whole runs)
    # or "consumer" (a rows kernel receives source-layout runs and transposes them in its memory)
    transpose_at: str = "dma"
    row: int | None = None  # one row of every sample (a class token's: x[:, i]), read at that row

    @property
    def selected(self) -> bool:
        return self.row is not None

    @property
    def sliced(self) -> bool:
        return self.stop is not None

    @property
    def producers(self) -> tuple[str, ...]:
        """The compute nodes whose outputs this operand reads (the graph input excluded)."""
        srcs = self.parts or (self,)
        return tuple(dict.fromkeys(p.producer for p in srcs if p.producer is not None))

    @property
    def reads_input(self) -> bool:
        return any(p.producer is None for p in (self.parts or (self,)))


@dataclass(frozen=True)
class RowsPlan:
    """An Add or LayerNorm node: ``rows`` (= B x R) rows of ``features``, ``parts`` tiles with
    ``rows_per_part`` rows each (row-major buffers)."""

    op: str
    parts: int
    rows: int
    per_sample: int  # R: rows of one sample
    features: int
    memory: int  # bytes on each tile (ping-pong buffers, parameters, scratch, stack + heap)
    in_transposed: tuple[bool, ...] = ()  # per operand: the kernel transposes it (Operand.transpose_at)
    out_transposed: bool = False  # the kernel writes its output transposed
    # row pitches (elements) of the kernel's buffers where a row of ``features`` is not whole 32-bit
    # words (:func:`row_pitches`): per operand (0: unpadded; a matmul's A: its K) and the output
    in_pitch: tuple[int, ...] = ()
    out_pitch: int = 0
    # a matmul: tiles along a cascade per part, each holding a K-slice of the product (the partial
    # sums on the cascade, the last tile converting them: docs/attention.md "Long products")
    cascade: int = 1

    def pitch_in(self, k: int, width: int) -> int:
        """Row pitch of operand ``k``'s buffer (``width``: its row when unpadded)."""
        return self.in_pitch[k] if k < len(self.in_pitch) and self.in_pitch[k] else width

    @property
    def pitch_out(self) -> int:
        return self.out_pitch or self.features

    @property
    def rows_per_part(self) -> int:
        return self.rows // self.parts

    @property
    def tiles(self) -> int:
        return self.parts * self.cascade

    def part_rows(self, i: int) -> tuple[int, int]:
        return i * self.rows_per_part, (i + 1) * self.rows_per_part

    def block(self, per_sample: int) -> tuple[int, int]:
        """(samples, rows of one sample) of every part, for rows of ``per_sample`` per sample: a part
        is whole samples or an equal run inside one."""
        rp = self.rows_per_part
        return (rp // per_sample, per_sample) if rp % per_sample == 0 else (1, rp)


def masked(node: Node) -> bool:
    """A softmax with a constant attention mask (``params["keep"]``) or a run-time key padding mask
    (its second input, the graph's second input: ``ops/activation.py``)."""
    return node.params.get("keep") is not None or len(node.inputs) > 1


def mask_input(graph: Graph) -> str | None:
    """The graph input that carries a run-time key padding mask (its own PLIO), or None."""
    return graph.inputs[1] if len(graph.inputs) > 1 else None


def mask_pitch(graph: Graph) -> int:
    """The run-time key padding mask's row pitch where its ``T_k`` keep bytes per sample are not whole
    32-bit words (a ViT's 17 keys: 20): the host writes each sample's row padded with zero bytes, its PLIO
    and memory-tile links move whole rows, and the softmax reads row ``n`` at ``n`` times the pitch
    (``MP`` in its config), as :func:`row_pitches` pads 17-token rows.  0: no mask, or whole words."""
    m = mask_input(graph)
    if m is None:
        return 0
    w = _words(graph, m)
    f = matrix_shape(graph, m, "mask")[1]
    return 0 if w == 1 or f % w == 0 else -(-f // w) * w


def mask_layout(graph: Graph, mq: np.ndarray | None) -> np.ndarray | None:
    """The keep bytes ``[samples, T_k]`` as the mask PLIO carries them: each row padded with zero bytes
    to :func:`mask_pitch` (unchanged where the rows are whole words)."""
    p = mask_pitch(graph)
    if mq is None or not p:
        return mq
    mq = np.asarray(mq)
    return np.concatenate([mq, np.zeros((*mq.shape[:-1], p - mq.shape[-1]), dtype=mq.dtype)], axis=-1)


def matrix_shape(graph: Graph, tensor: str, what: str) -> tuple[int, int]:
    """(R, F) of a tensor: its rows per sample and features."""
    shape = graph.tensors[tensor].shape
    if len(shape) == 1:
        return 1, int(shape[0])
    if len(shape) == 2:
        return int(shape[0]), int(shape[1])
    raise PlanError(f"tensor '{tensor}' has per-sample shape {tuple(shape)}; the DAG mapping handles [features] "
                    "and [rows, features] samples", layer=what, hint="reshape the data to [rows, features] samples")


def _feature_axis(graph: Graph, node: Node) -> None:
    """Concat / slice views are realised along the features (the last per-sample axis) only."""
    rank = len(graph.tensors[node.inputs[0]].shape)
    if int(node.attrs["axis"]) != rank - 1:
        raise PlanError(f"{node.op} along per-sample axis {node.attrs['axis']}: the memory-tile tilers realise "
                        f"{node.op} views along the features (axis {rank - 1}) only", layer=node.name,
                        hint="use aieflow.emulate(model, ...) for bit-exact predictions of this model")


def input_tensor(graph: Graph) -> str:
    """The tensor the input PLIO carries: the graph input, or the ``patches`` view of it that is
    its only reader (a ViT's patch embedding: the host writes the image in patch order)."""
    x = graph.inputs[0]
    readers = graph.consumers(x)
    if len(readers) == 1 and readers[0].op == "patches":
        return readers[0].outputs[0]
    return x


def host_layout(graph: Graph, xq):
    """Graph-input codes (or values) ``[N, ...]`` in the input PLIO's order (:func:`input_tensor`)."""
    x = graph.inputs[0]
    readers = graph.consumers(x)
    if len(readers) == 1 and readers[0].op == "patches":
        return family("patches").emulate(readers[0], xq)
    return xq


def _row_select(graph: Graph, node: Node) -> bool:
    """A slice of one row of a ``[rows, features]`` sample (``x[:, i]`` of tokens: class-token pooling)."""
    rank = len(graph.tensors[node.inputs[0]].shape)
    return rank == 2 and int(node.attrs["axis"]) == 0 and int(node.attrs["stop"]) - int(node.attrs["start"]) == 1


def source(graph: Graph, tensor: str, reader: str) -> Operand:
    """Follow views back to the tensor(s) a kernel (or the input PLIO) writes: transposes (1, 0),
    feature slices (a read pattern at an offset) and feature concats (several writers at offsets
    into one buffer)."""
    p = graph.producer(tensor)
    if p is None:
        return Operand(tensor, None)
    if p.op in COMPUTE_OPS:
        return Operand(tensor, p.name)
    if p.op == "patches" and input_tensor(graph) == tensor:
        return Operand(tensor, None)  # the input PLIO's layout
    if p.op == "reshape" and matrix_shape(graph, p.inputs[0], p.name) == matrix_shape(graph, tensor, p.name):
        return source(graph, p.inputs[0], reader)  # [1, E] <-> [E]: the same rows and features
    if p.op == "transpose":
        perm = tuple(int(v) for v in p.attrs["perm"])
        if perm != (1, 0):
            raise PlanError(f"transpose with perm {perm}: the memory-tile tilers realise (1, 0) of a "
                            "[rows, features] sample only", layer=p.name, hint="keep samples 2-D: [rows, features]")
        inner = source(graph, p.inputs[0], reader)
        if inner.transposed:
            raise PlanError("two transposes in a row reach this layer; remove the pair (it is the identity)",
                            layer=p.name, hint=f"read '{p.inputs[0]}' directly")
        if inner.sliced or inner.selected:
            raise PlanError(f"a {'feature slice' if inner.sliced else 'row'} read transposed is not realised by the memory-tile tilers",
                            layer=p.name, hint="use aieflow.emulate(model, ...) for bit-exact predictions")
        return replace(inner, transposed=True)
    if p.op == "slice" and _row_select(graph, p):
        inner = source(graph, p.inputs[0], reader)
        if inner.transposed or inner.selected or inner.parts:
            what = "transposed" if inner.transposed else "one row" if inner.selected else "a concat"
            raise PlanError(f"a row of a view that is {what} is not realised by the memory-tile tilers", layer=p.name,
                            hint="use aieflow.emulate(model, ...) for bit-exact predictions")
        return replace(inner, row=int(p.attrs["start"]))
    if p.op == "slice":
        _feature_axis(graph, p)
        inner = source(graph, p.inputs[0], reader)
        if inner.transposed:
            raise PlanError("a feature slice of a transposed tensor (rows of its source) is not realised by the "
                            "memory-tile tilers", layer=p.name,
                            hint="use aieflow.emulate(model, ...) for bit-exact predictions")
        lo, hi = inner.start + int(p.attrs["start"]), inner.start + int(p.attrs["stop"])
        full = matrix_shape(graph, inner.tensor, p.name)[1]
        return replace(inner, start=lo, stop=None if (lo, hi) == (0, full) else hi)
    if p.op == "concat":
        _feature_axis(graph, p)
        parts = tuple(source(graph, t, reader) for t in p.inputs)
        for t, q in zip(p.inputs, parts, strict=True):
            if q.transposed or q.sliced or q.parts or q.selected:
                what = "transposed" if q.transposed else "a slice" if q.sliced or q.selected else "a concat"
                raise PlanError(
                    f"concat input '{t}' is {what} view; the memory-tile tilers realise a concat of whole "
                    "computed tensors (each producer writes at its offset), not of views", layer=p.name,
                    hint="use aieflow.emulate(model, ...) for bit-exact predictions of this model")
        return Operand(tensor, None, parts=parts)
    raise PlanError(
        f"{p.op} nodes are not mapped by the DAG path (it maps Dense, residual Add, LayerNorm, activations, "
        "softmax and Transpose (1, 0) / feature Concat / Slice views)", layer=p.name,
        hint=f"use aieflow.emulate(model, ...) for bit-exact predictions; '{reader}' reads it",
    )


@dataclass(frozen=True)
class DagPlan:
    batch: int  # samples per graph iteration
    graph: Graph  # Dense nodes carry their DensePlan
    compute: tuple[str, ...]  # compute nodes, topological order
    operands: Mapping[str, tuple[Operand, ...]]
    rows: Mapping[str, RowsPlan]  # add / layernorm / activation / softmax nodes
    output: Operand  # what the output PLIO reads
    links: tuple = ()  # dag.links.DagLink, filled by links.make_links
    # the output PLIO's row pitch when a Dense output's rows are not whole 32-bit words (10 int8
    # classes): it carries them padded (:func:`output_pitch`); 0: the rows as they are
    out_pitch: int = 0

    def node(self, name: str) -> Node:
        return self.graph.node(name)

    def tiles_of(self, name: str) -> int:
        n = self.node(name)
        return n.plan.tiles if n.op == "dense" else self.rows[name].tiles

    @property
    def tiles(self) -> int:
        return sum(self.tiles_of(n) for n in self.compute)

    def rect(self, name: str) -> tuple[int, int]:
        """(width, height) of a node's tile rectangle: Dense cas_len x cas_num, a rows kernel's
        parts side by side (a cascaded matmul's: each part's cascade along the row)."""
        n = self.node(name)
        return (n.plan.cas_len, n.plan.cas_num) if n.op == "dense" else (self.rows[name].tiles, 1)

    def edges(self) -> tuple[tuple[str, str], ...]:
        return tuple((p, name) for name in self.compute for o in self.operands[name] for p in o.producers)


def _bytes(t) -> int:
    return t.container_bits // 8


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def operand_features(graph: Graph, o: Operand, reader: str) -> int:
    """Features per row a consumer reads of an operand (a slice's width, or the whole tensor's)."""
    return o.stop - o.start if o.sliced else matrix_shape(graph, o.tensor, reader)[1]


def matmul_dims(graph: Graph, node: Node, operands: tuple[Operand, ...]) -> tuple[int, int, int]:
    """(M, K, N) of a matmul node's per-sample product: A [M, K] by B [K, N] (B stored [N, K] when
    ``transpose_b``)."""
    m, n = matrix_shape(graph, node.outputs[0], node.name)
    a = operands[0]
    k = matrix_shape(graph, a.tensor, node.name)[0] if a.transposed else operand_features(graph, a, node.name)
    return m, k, n


def matmul_transposes(node: Node, operands: tuple[Operand, ...]) -> tuple[bool, bool]:
    """(TRANS_A, TRANS_B) of the kernel: A read from its source ``[K, M]`` when it is a transposed
    view; B stored ``[N, K]`` when ``transpose_b`` or when it is a transposed view, not both."""
    return operands[0].transposed, bool(node.attrs.get("transpose_b", False)) != operands[1].transposed


def _word_slices(node: Node, k: int, device: Device) -> tuple[int, ...]:
    """The cascade lengths 2.. (at most a row of the array) that cut K into equal slices of whole
    32-bit words of both operands (each tile's slice of A's and B's rows or columns is a memory-tile
    read pattern, AM020 / UG1603)."""
    w = max(4 // _bytes(node.types.a), 4 // _bytes(node.types.b), 1)
    return tuple(c for c in range(2, min(k, device.columns) + 1) if k % c == 0 and (k // c) % w == 0)


def matmul_cascades(node: Node, k: int, device: Device) -> tuple[int, ...]:
    """1 (one tile per part), then every cascade over K a matmul may split into, fewest tiles first
    (docs/attention.md "Long products"), slices of whole words (:func:`_word_slices`).  Any split
    computes the one-tile result: integer sums are exact, and a bf16 product's float32 partial sums
    cross the cascade unrounded and every tile continues them in increasing k, the one-tile order."""
    return (1,) + (() if cascade_refusal(node, k, device) else _word_slices(node, k, device))


def cascade_refusal(node: Node, k: int, device: Device) -> str:
    """Why a matmul cannot split its K over a cascade (empty when it can)."""
    if not _word_slices(node, k, device):
        w = max(4 // _bytes(node.types.a), 4 // _bytes(node.types.b), 1)
        return f"K = {k} has no split into 2 or more slices of whole 32-bit words ({w} elements)"
    return ""


def matmul_memory(node: Node, rows_per_part: int, per_sample: int, k: int, n: int, device: Device,
                  kp: int = 0, np_: int = 0) -> int:
    """A matmul part: ping-pong A rows, its samples' B, output rows; B widened to int16 [K][N
    rounded up to 16 lanes] in the kernel's memory; stack and heap.  ``kp`` / ``np_``: A's and the
    output's row pitches where they are padded (:func:`row_pitches`)."""
    gen = device.generation
    t = node.types
    samples = max(1, rows_per_part // per_sample)  # a part inside one sample holds that sample's B
    lanes = -(-n // 16) * 16
    io = (2 * _aligned(rows_per_part * (kp or k) * _bytes(t.a)) + 2 * _aligned(samples * k * n * _bytes(t.b))
          + 2 * _aligned(rows_per_part * (np_ or n) * _bytes(t.output)))
    return io + _aligned(2 * k * lanes) + gen.stack_bytes + gen.heap_bytes


def masked_mean_memory(node: Node, samples: int, tokens: int, features: int, device: Device, mask_pitch: int) -> int:
    """A masked mean part: ping-pong buffers of its samples' ``[T, E]`` inputs, their mask rows (at the
    mask's pitch) and their ``[E]`` outputs; stack and heap (the kernel keeps no other state)."""
    gen = device.generation
    b = _bytes(node.types)
    io = (2 * _aligned(samples * tokens * features * b) + 2 * _aligned(samples * mask_pitch)
          + 2 * _aligned(samples * features * b))
    return io + gen.stack_bytes + gen.heap_bytes


def rows_memory(node: Node, rows_per_part: int, features: int, device: Device, pitch: int = 0) -> int:
    """``pitch``: the row pitch of a softmax's padded buffers (:func:`row_pitches`)."""
    gen = device.generation
    reserved = gen.stack_bytes + gen.heap_bytes
    if node.op == "add":
        t = node.types
        io = sum(2 * _aligned(rows_per_part * features * _bytes(x)) for x in (t.a, t.b, t.output))
        return io + reserved
    if node.op == "scale_shift":  # input and output ping-pong, the multiplier and shift codes (padded to 16)
        t = node.types
        nv = -(-features // 16) * 16
        io = sum(2 * _aligned(rows_per_part * features * _bytes(x)) for x in (t.input, t.output))
        return io + _aligned(nv * _bytes(t.scale)) + _aligned(nv * _bytes(t.offset)) + reserved
    if node.op == "add_const":  # input and output ping-pong, the constant's codes (one sample's)
        t = node.types
        io = sum(2 * _aligned(rows_per_part * features * _bytes(x)) for x in (t.a, t.output))
        return io + _aligned(int(node.params["constant_q"].size) * _bytes(t.b)) + reserved
    t = node.types
    w = pitch or features
    io = 2 * _aligned(rows_per_part * w * _bytes(t.input)) + 2 * _aligned(rows_per_part * w * _bytes(t.output))
    if t.is_float:  # bf16 kernels: a uint16 table (+ softmax: a bf16 row), or gamma, beta and a float row
        if node.op in ("activation", "softmax"):
            table = _aligned(2 * int(node.params["table"].size))
            return io + table + (_aligned(2 * features) if node.op == "softmax" else 0) + reserved
        return io + 2 * _aligned(2 * features) + _aligned(4 * features) + reserved
    if node.op in ("activation", "softmax"):  # the int32 table (+ softmax: one row of exp values)
        from ..perf.activation import activation_form, softmax_vectorised

        size = int(node.params["table"].size)
        table = _aligned(4 * size)
        if node.op == "softmax":  # vector rows: a group of 16 rows' exp values, one row's indices, 5 x 16 per-row words
            if softmax_vectorised(t, features, masked(node), len(node.inputs) > 1):
                return io + table + _aligned(4 * 16 * features) + _aligned(4 * features) + 5 * _aligned(64) + reserved
            return io + table + _aligned(4 * features) + reserved
        form = activation_form(t, gen)
        if form == "lut":  # + aie::lut's two int16 copies, each block twice (UG1603)
            v = gen.lut_repeat_bits // 16
            table += 2 * _aligned(2 * 2 * (-(-size // v)) * v)
        elif form == "vector":  # + the 16 lanes' two knots
            table += 2 * _aligned(4 * 16)
        return io + table + reserved
    lanes = -(-features // 16) * 16
    # gamma_ (int16), beta_ (int64), and hi_, lo_, bhi_, blo_ (int32 per padded lane) of dag_kernels.h's LayerNorm
    params = _aligned(features * 2) + _aligned(features * 8) + 4 * _aligned(lanes * 4)
    group = _aligned(16 * 8) + 4 * _aligned(16 * 4)  # a group of 16 rows' S1, G, u halves and reciprocals
    return io + params + group + reserved


def transpose_scratch(node: Node, rp: RowsPlan) -> int:
    """Bytes of the kernel's transpose buffers (one part's block per transposed port)."""
    t = node.types
    ins = (t.a, t.b) if node.op == "add" else (t.input,)
    n = rp.rows_per_part * rp.features
    out = sum(_aligned(n * _bytes(x)) for x, on in zip(ins, rp.in_transposed, strict=False) if on)
    return out + (_aligned(n * _bytes(t.output)) if rp.out_transposed else 0)


def _words(graph: Graph, tensor: str) -> int:
    """Elements per 32-bit DMA word (AIE-ML DMAs address whole words, ``tiling.word_problems``)."""
    return max(1, 4 // (graph.tensors[tensor].dtype.container_bits // 8))


def _runs_fit(rp: RowsPlan, per_sample: int, w: int) -> bool:
    """Every part's run of rows inside a sample starts and ends on a 32-bit word."""
    return per_sample % w == 0 and rp.rows_per_part % w == 0 if rp.rows_per_part < per_sample else per_sample % w == 0


def place_transposes(graph: Graph, compute: list[str], operands: dict[str, tuple[Operand, ...]],
                     rows: dict[str, RowsPlan], out: Operand, device: Device, widths: Mapping[str, int]):
    """A matmul's transposed operand is read by its kernel (:func:`_matmul_transpose`).  Move each
    other element-wise transposed read of 8- / 16-bit data into a rows kernel where one
    can do it: the consumer (an Add / LayerNorm transposing a block it receives in source layout)
    or else the producer (an Add / LayerNorm writing its output transposed, when every reader of
    it reads it transposed).  What is left stays a DMA pattern that steps single elements (the
    shim runs it; ``DagLink.word_problems`` reports it).  ``widths``: each source tensor's
    written width (its buffer row pitch)."""
    operands = {k: list(v) for k, v in operands.items()}
    gen = device.generation
    for name in compute:
        if name in rows and rows[name].op == "matmul":
            operands[name] = [_matmul_transpose(graph, graph.node(name), k, o, rows[name], widths)
                              for k, o in enumerate(operands[name])]
    for name in compute:
        if name not in rows or rows[name].op in ("matmul", "masked_mean"):  # they read their operands as they are
            continue
        rp, node = rows[name], graph.node(name)
        flags = []
        for o in operands[name]:
            w = _words(graph, o.tensor)
            r_src, f_src = matrix_shape(graph, o.tensor, name)
            flags.append(o.transposed and not o.parts and w > 1 and widths.get(o.tensor, f_src) % w == 0
                         and _runs_fit(rp, f_src, w))
        if any(flags):
            trial = replace(rp, in_transposed=tuple(flags))
            mem = rp.memory + transpose_scratch(node, trial)
            if mem <= gen.data_memory_bytes:
                rows[name] = replace(trial, memory=mem)
                operands[name] = [replace(o, transpose_at="consumer") if f else o
                                  for o, f in zip(operands[name], flags, strict=True)]
    readers: dict[str, list[tuple[str | None, int]]] = {}
    for name in compute:
        for k, o in enumerate(operands[name]):
            readers.setdefault(o.tensor, []).append((name, k))
    readers.setdefault(out.tensor, []).append((None, 0))
    for tensor, rd in readers.items():
        ops = [out if c is None else operands[c][k] for c, k in rd]
        p = ops[0].producer
        w = _words(graph, tensor)
        if p not in rows or rows[p].op in ("matmul", "masked_mean") or w == 1 or not all(o.transposed and o.transpose_at == "dma" and not o.parts for o in ops):
            continue
        rp = rows[p]
        if not _runs_fit(rp, rp.per_sample, w):
            continue
        trial = replace(rp, out_transposed=True)
        mem = rp.memory + transpose_scratch(graph.node(p), trial) - transpose_scratch(graph.node(p), rp)
        if mem > gen.data_memory_bytes:
            continue
        rows[p] = replace(trial, memory=mem)
        for c, k in rd:
            if c is None:
                out = replace(out, transpose_at="producer")
            else:
                operands[c][k] = replace(operands[c][k], transpose_at="producer")
    return {k: tuple(v) for k, v in operands.items()}, rows, out


def _matmul_transpose(graph: Graph, node: Node, k: int, o: Operand, rp: RowsPlan, widths: Mapping[str, int]) -> Operand:
    """A matmul operand that is a transposed view ``X^T`` of a computed tensor ``X``: the memory tile
    moves ``X`` as it was written and the kernel reads it transposed (``TRANS_A`` / ``TRANS_B``,
    :func:`matmul_transposes`), so no element-wise transposing DMA pattern: the AIE-ML memory-tile DMA
    addresses 32-bit words (AM020 buffer descriptors: step sizes, wraps and padding in words; UG1603),
    which an element-wise transpose of 8- / 16-bit data is not.  The read moves whole source rows of
    the part's samples (B, and A where a part holds whole samples) or a run of each row's features
    (A, where a part holds a run of one sample's rows: those rows are ``X``'s features), so those
    rows, runs and the row pitch must be whole words; otherwise refused naming the layer and why."""
    if not o.transposed:
        return o
    w = _words(graph, o.tensor)
    r_src, f_src = matrix_shape(graph, o.tensor, node.name)
    pitch = widths.get(o.tensor, f_src)
    why = []
    if f_src % w:
        why.append(f"its rows of {f_src} elements")
    if pitch % w and pitch != f_src:
        why.append(f"its written row pitch of {pitch} elements")
    if k == 0 and rp.rows_per_part < rp.per_sample and rp.rows_per_part % w:
        why.append(f"a part's run of {rp.rows_per_part} of those features")
    if why:
        bits = graph.tensors[o.tensor].dtype.container_bits
        raise PlanError(
            f"operand {'AB'[k]} of the matmul reads '{o.tensor}' transposed; the memory tile moves '{o.tensor}' as "
            f"written and the kernel reads it transposed, but {' and '.join(why)} are not whole 32-bit words of "
            f"{bits}-bit data (the memory-tile DMA addresses 32-bit words, AM020 / UG1603; an element-wise "
            "transposing read of 8- / 16-bit data is not a legal pattern)", layer=node.name,
            hint=f"give '{o.tensor}' a multiple of {w} features, or use aieflow.emulate(model, ...)")
    return replace(o, transpose_at="consumer")


# rows kernels that write / read rows at a padded pitch (dag_kernels.h MatMul: its output and A;
# Softmax / SoftmaxBf16: in and out)
PITCH_WRITERS = ("matmul", "softmax")
PITCH_READERS = {"matmul": (0,), "softmax": (0,)}


def row_pitches(graph: Graph, compute: list[str], operands: Mapping[str, tuple[Operand, ...]],
                rows: Mapping[str, RowsPlan], out: Operand) -> dict[str, int]:
    """Tensors whose rows are not whole 32-bit words (17 int8 / int16 / bf16 scores of a 17-token
    attention) and which travel in padded rows: ``{tensor: pitch}``, the features rounded up to a
    whole number of words.  The producer writes each row at that pitch (the padding zero) and the
    memory tile moves whole rows, so no DMA pattern steps a part of a word (AIE-ML DMAs address
    32-bit words: ``tiling.word_problems``); its readers read the rows at the pitch and ignore the
    padding.  Only where the producer and every reader can (``PITCH_WRITERS`` / ``PITCH_READERS``)
    and every reader reads the tensor whole (no slice, row, transpose or concat); the graph
    output never (its PLIO carries the samples as they are)."""
    readers: dict[str, list[tuple[str | None, int, Operand]]] = {}
    for name in compute:
        for k, o in enumerate(operands[name]):
            for q in o.parts or (o,):
                readers.setdefault(q.tensor, []).append((name, k, o))
    for q in out.parts or (out,):
        readers.setdefault(q.tensor, []).append((None, 0, out))
    pitches = {}
    for name in compute:
        if name not in rows or rows[name].op not in PITCH_WRITERS:
            continue
        tensor = graph.node(name).outputs[0]
        w = _words(graph, tensor)
        f = matrix_shape(graph, tensor, name)[1]
        if w == 1 or f % w == 0:
            continue
        rd = readers.get(tensor, [])
        if rd and all(c is not None and k in PITCH_READERS.get(rows[c].op if c in rows else "", ())
                      and o.tensor == tensor and not (o.transposed or o.sliced or o.selected or o.parts)
                      for c, k, o in rd):
            pitches[tensor] = -(-f // w) * w
    return pitches


def output_pitch(graph: Graph, out: Operand, widths: Mapping[str, int]) -> int:
    """The output PLIO's row pitch when the graph output is a Dense output whose rows are not whole
    32-bit words (10 int8 classes: 10 bytes): the memory tile reads each row rounded up to whole
    words from the Dense's padded buffer (its padding is zero), the PLIO carries those rows, and
    the host reads the first ``features`` of each (``period`` / ``real`` of the project's compare,
    ``dag/verify.py``).  0 where the rows are whole words or the output is a view (a row, a slice,
    a transpose, a concat) or a rows kernel's output (its rows are written as they are)."""
    if out.transposed or out.sliced or out.selected or out.parts or out.producer is None:
        return 0
    w = _words(graph, out.tensor)
    f = matrix_shape(graph, out.tensor, "output")[1]
    pitch = -(-f // w) * w
    if w == 1 or pitch == f or graph.node(out.producer).op != "dense" or widths.get(out.tensor, 0) < pitch:
        return 0
    return pitch


# rows ops with a bf16 kernel (dag_kernels_bf16.h)
BF16_ROWS = ("add", "add_const", "scale_shift", "layernorm", "activation", "softmax", "matmul")


def _check_masked_mean(node: Node, graph: Graph, operands: tuple[Operand, ...], device: Device) -> None:
    """The masked mean kernel reads 8- / 16-bit codes or bf16 values where the generation's vector unit has
    bf16 (its input's type, ops/masked_mean.py) of a ``[T, E]`` tensor as its producer wrote it, and the mask
    PLIO's keep rows."""
    t = node.types
    gen = device.generation
    bf16 = getattr(t, "name", None) == "bf16" and "bf16" in gen.float_types
    if not bf16 and (not isinstance(t, FixedType) or t.container_bits not in (8, 16)):
        raise PlanError(f"masked mean pooling '{node.name}' reads {t}; its kernel takes 8- or 16-bit codes, or bf16 "
                        f"on generations whose vector unit has it ({', '.join(sorted(gen.float_types)) or 'none'} "
                        f"on {gen.name})", layer=node.name, hint="use precision int8, int16 or bf16 (AIE-ML / AIE-MLv2)")
    x = operands[0]
    if x.transposed or x.parts or x.selected or x.sliced:
        what = ("a transposed view" if x.transposed else "a concat" if x.parts else "one row" if x.selected
                else "a feature slice")
        raise PlanError(f"masked mean pooling '{node.name}' reads {what} of '{x.tensor}'; its kernel reads a "
                        "[tokens, features] tensor as its producer wrote it", layer=node.name,
                        hint="pool the tensor itself, or use aieflow.emulate(model, ...)")
    if matrix_shape(graph, x.tensor, node.name)[0] != matrix_shape(graph, operands[1].tensor, node.name)[1]:
        raise PlanError(f"masked mean pooling '{node.name}': '{x.tensor}' has not one row per key of the mask",
                        layer=node.name, hint="please report this as a bug")  # pragma: no cover - the frontends'


def _check_row_types(node: Node, device: Device) -> None:
    t = node.types
    ports = (t.a, t.b, t.output) if node.op in ("add", "matmul") else (t.input, t.output)
    if t is not None and t.is_float:
        gen = device.generation
        name = t.output.name
        if name != "bf16" or node.op not in BF16_ROWS or "bf16" not in gen.float_types:
            raise PlanError(
                f"{node.op} kernels are generated for int8 / int16 and, on generations whose vector unit has "
                f"bf16 ({', '.join(sorted(gen.float_types)) or 'none'} on {gen.name}), for bf16; this layer is {name}",
                layer=node.name, hint="use precision int8, int16 or bf16 (AIE-ML / AIE-MLv2), or "
                "aieflow.emulate(model, ...) for fp32 models")
        if any(getattr(x, "name", None) != "bf16" for x in ports):
            raise PlanError(f"a bf16 {node.op} kernel needs bf16 on every port, got "
                            f"{', '.join(str(x) for x in ports)}", layer=node.name,
                            hint="use one precision (bf16) for the whole model")
        return
    if t is None:
        raise PlanError(f"{node.op} layer has no numeric types", layer=node.name, hint="please report this as a bug")
    for x in ports:
        if not isinstance(x, FixedType) or x.container_bits not in (8, 16, 32):
            raise PlanError(f"type {x} has no kernel (8-, 16- or 32-bit fixed point, or bf16)", layer=node.name)


def _check_matmul_operands(node: Node, operands: tuple[Operand, ...]) -> None:
    """A matmul reads each operand as its producer wrote it, or transposed (:func:`place_transposes`
    settles where); a concat or one row of a view is refused."""
    for k, o in enumerate(operands):
        if o.parts or o.selected:
            what = "a concat" if o.parts else "one row"
            raise PlanError(
                f"operand {'AB'[k]} of the matmul is {what} of '{o.tensor}'; the matmul kernel reads its operands "
                "whole, as their producers wrote them or transposed", layer=node.name,
                hint="multiply by the tensor itself, or use aieflow.emulate(model, ...)")


def _plan_rows(node: Node, graph: Graph, batch: int, device: Device,
               operands: tuple[Operand, ...] = (), writers: int = 1, in_pitch: tuple[int, ...] = (),
               out_pitch: int = 0) -> RowsPlan:
    """``writers``: how many layers write the buffer this one's output lands in (the inputs of a
    feature concat that reads it, e.g. attention heads): together their parts share the memory
    tile's channels.  ``in_pitch`` / ``out_pitch``: padded row pitches (:func:`row_pitches`)."""
    if node.op == "masked_mean":
        _check_masked_mean(node, graph, operands, device)
        tokens = matrix_shape(graph, node.inputs[0], node.name)[0]
    else:
        _check_row_types(node, device)
    if node.op == "scale_shift" and len(graph.tensors[node.inputs[0]].shape) != 1:
        raise PlanError(f"the scale-and-shift kernel scales the features of (batch, features) tensors; '{node.name}' "
                        f"reads per-sample shape {tuple(graph.tensors[node.inputs[0]].shape)}", layer=node.name,
                        hint="use aieflow.emulate(model, ...) for bit-exact predictions")
    if node.op == "matmul":
        _check_matmul_operands(node, operands)
        m, k, n = matmul_dims(graph, node, operands)
    r, f = matrix_shape(graph, node.outputs[0], node.name)
    rows = batch * r
    gen = device.generation
    channels = device.memtile_channels
    best = None
    # a matmul whose parts do not fit even so: its K split over a cascade of tiles (the fewest that fit)
    cascades = matmul_cascades(node, k, device) if node.op == "matmul" else (1,)
    for casc in cascades:
        kc = k // casc if node.op == "matmul" else 0  # a cascade tile's K-slice
        kp = (in_pitch[0] if in_pitch else 0) if casc == 1 else 0  # (a K-slice of A is read unpadded)
        # a matmul's parts hold whole samples; where one sample does not fit a tile, a whole fraction of
        # one sample's rows (each part reads the sample's whole B: docs/attention.md "Long products")
        split = node.op == "matmul" and not any(
            rows % q == 0 and (rows // q) % r == 0
            and matmul_memory(node, rows // q, r, kc, n, device, kp, out_pitch)
            <= gen.data_memory_bytes
            for q in range(1, min(rows, max(1, channels // writers)) + 1))
        for parts in range(1, min(rows, max(1, channels // writers)) + 1):
            if rows % parts:
                continue
            rp = rows // parts
            if rp % r and r % rp:  # a part is whole samples or a whole fraction of one (tilers)
                continue
            if node.op == "matmul" and rp % r and not split:  # whole samples (all of B's rows) where they fit
                continue
            if node.op == "softmax" and (node.params.get("keep") is not None or len(node.inputs) > 1) and rp % r:
                continue  # a masked softmax reads its mask row as (row % r), a run-time mask per sample: whole samples
            if node.op == "add_const" and rp % r:
                continue  # the constant's row r % r of a part: whole samples per part
            if node.op == "matmul":
                if parts * casc > device.columns:  # the parts' cascades side by side along one array row
                    continue
                mem = matmul_memory(node, rp, r, kc, n, device, kp, out_pitch)
            elif node.op == "masked_mean":  # one row per sample: rp samples, their T rows and mask rows
                mp = in_pitch[1] if len(in_pitch) > 1 and in_pitch[1] else tokens
                mem = masked_mean_memory(node, rp, tokens, f, device, mp)
            else:
                mem = rows_memory(node, rp, f, device, out_pitch)
            if node.op == "softmax" and len(node.inputs) > 1:  # the run-time mask: its samples' rows, ping-pong, + a row
                mp = in_pitch[1] if len(in_pitch) > 1 and in_pitch[1] else f  # rows padded to whole words (mask_pitch)
                mem += 2 * _aligned(rp // r * mp) + _aligned(f)
            if mem <= gen.data_memory_bytes:
                best = RowsPlan(node.op, parts, rows, r, f, mem, in_pitch=in_pitch, out_pitch=out_pitch,
                                cascade=casc)
                # Add, activation: the fewest tiles that fit (rarely the slowest stage); LayerNorm,
                # softmax: as many as the memory tile's channels allow (their per-row work is the
                # heaviest of the rows kernels)
                if node.op in ("add", "add_const", "scale_shift", "activation"):
                    break
                # masked mean: as many parts as allowed too (T x E additions per output row)
                # matmul: as many parts as allowed (its work per row is K x N multiply-adds)
        if best is not None:
            break
    if best is None and node.op == "matmul":
        most = max((q for q in range(1, min(rows, max(1, channels // writers)) + 1)
                    if rows % q == 0 and r % (rows // q) == 0), default=None)
        run = ("" if most is None or rows // most >= r else
               f", and a run of {rows // most} of its rows (the most parts the memory tile's channels allow) "
               f"{matmul_memory(node, rows // most, r, k, n, device)}")
        widest = cascades[-1]
        small = r if most is None else min(r, rows // most)
        casc = (f"; no cascade over K can help: {cascade_refusal(node, k, device)}" if widest == 1 else
                f"; over a cascade of {widest} tiles along K (K-slices of {k // widest}) a part of {small} row(s) "
                f"still needs {matmul_memory(node, small, r, k // widest, n, device)} bytes (the cascade splits "
                "A's columns and B's rows, not the output rows)")
        raise PlanError(
            f"one sample's matmul ({m} x {k} by {k} x {n}) needs {matmul_memory(node, r, r, k, n, device)} bytes on "
            f"a tile{run}{casc}; a tile has {gen.data_memory_bytes}", layer=node.name,
            hint="use fewer tokens or narrower heads (more heads), or aieflow.emulate(model, ...)")
    if best is None and node.op == "masked_mean":
        raise PlanError(
            f"one sample's masked mean pooling ({tokens} tokens x {f} features) needs "
            f"{masked_mean_memory(node, 1, tokens, f, device, tokens)} bytes on a tile; a tile has "
            f"{gen.data_memory_bytes}", layer=node.name, hint="use fewer tokens, or aieflow.emulate(model, ...)")
    if best is None:
        rp = rows // min(rows, channels)
        raise PlanError(
            f"{rows} rows x {f} features do not fit {channels} tiles of {gen.data_memory_bytes} bytes "
            f"(at {min(rows, channels)} parts: {rows_memory(node, rp, f, device)} bytes per tile)",
            layer=node.name, hint="use a smaller batch",
        )
    return best


def check_dag_device(device: Device, config: Config, graph: Graph | None = None) -> None:
    """What no batch or parallelism can change: every fp32 activation has a kernel (ops/post.py
    ``refuse_unmapped_float``), the device has memory tiles, one replica."""
    if graph is not None:
        from ..ops.post import refuse_unmapped_float

        refuse_unmapped_float(graph)
    if device.memory_tile_rows == 0:
        raise PlanError(
            f"graphs with fan-out, residual adds, LayerNorm or transposes map through memory tiles, which "
            f"{device.board} ({device.generation.name}) does not have",
            hint="compile for vek280 (AIE-ML) or vek385, or use aieflow.emulate(model, ...)",
        )
    if (config.replicas or 1) > 1:
        raise ConfigError("replicas are not supported for DAG designs yet", hint="remove `replicas` from the config")


class RowMultipleError(PlanError):
    """A batch whose rows per graph iteration the memory-tile tilers cannot cut (no row padding)."""


DEFAULT_BATCH_TRIES = 4  # the default batch, then x2, x4, x8


def default_batch(graph: Graph, device: Device, config: Config) -> Config:
    """The config with its batch settled when the user wrote none: the default batch (8) when the
    tilers can cut its rows, else the first of its doublings they can (AIE-MLv2's int8 mmul is
    8x8x8, blocked 2 x 2: 16 rows per iteration).  A batch the user wrote, a batch list or
    ``auto`` is left as it is (its refusal names the rows)."""
    if config.batch_search is not None or "batch" in config.given:
        return config
    for k in range(DEFAULT_BATCH_TRIES):
        batch = config.batch << k
        try:
            plan_dag(graph, device, replace(config, batch=batch))
        except RowMultipleError:
            continue
        return replace(config, batch=batch)
    return config


def plan_dag(graph: Graph, device: Device, config: Config) -> DagPlan:
    """Plan every compute node at ``config.batch`` (the target is ``dag.search``'s business); the
    links are derived from the result (``links.make_links``)."""
    check_dag_device(device, config, graph)
    if config.batch_search is not None:  # dag.search.search_dag fixes the batch before planning
        raise ConfigError("internal: plan_dag takes a fixed batch", hint="please report this as a bug")
    batch = config.batch
    compute: list[str] = []
    operands: dict[str, tuple[Operand, ...]] = {}
    rows: dict[str, RowsPlan] = {}
    nodes = []
    writers = {t: len(n.inputs) for n in graph.nodes if n.op == "concat" for t in n.inputs}
    for node in graph.nodes:
        fam = family(node.op, node.name)
        if node.op in ("transpose", "slice", "concat", "reshape", "patches"):
            source(graph, node.outputs[0], node.name)  # validates the view
            nodes.append(node)
            continue
        if node.op not in COMPUTE_OPS:
            if node.op == "prepend_const":
                fam.plan(node, None)  # its own refusal: where a class token maps
            if fam.is_view:
                raise PlanError(f"{node.op} views are not mapped by the DAG path (Transpose (1, 0), feature Concat "
                                "and Slice are)",
                                layer=node.name, hint="use aieflow.emulate(model, ...) for bit-exact predictions")
            raise PlanError(f"{node.op} layers have no AI Engine kernel in the DAG path (it maps Dense, residual "
                            "Add, LayerNorm, activations, softmax, Transpose)", layer=node.name,
                            hint="use aieflow.emulate(model, ...) for bit-exact predictions")
        operands[node.name] = tuple(source(graph, t, node.name) for t in node.inputs)
        compute.append(node.name)
        if node.op == "dense":
            nodes.append(_plan_dense(node, graph, batch, device, config))
        else:
            rows[node.name] = _plan_rows(node, graph, batch, device, operands[node.name],
                                         writers.get(node.outputs[0], 1))
            nodes.append(node)
    planned = graph.with_nodes(nodes)
    out = source(graph, graph.outputs[0], "output")
    if not out.producers:
        raise PlanError("the graph output is the graph input (through views only): nothing to compute",
                        hint="add a layer")
    pitches = row_pitches(planned, compute, operands, rows, out)
    if mask_pitch(planned):  # the run-time mask's rows padded to whole words: its softmaxes read them at the pitch
        pitches[mask_input(planned)] = mask_pitch(planned)
    for name in compute:
        rp = rows.get(name)
        if rp is None:
            continue
        ins = tuple(pitches.get(o.tensor, 0) for o in operands[name])
        outp = pitches.get(planned.node(name).outputs[0], 0)
        if any(ins) or outp:
            node = planned.node(name)
            rows[name] = _plan_rows(node, planned, batch, device, operands[name],
                                    writers.get(node.outputs[0], 1), ins, outp)
    widths = {}
    for n in planned.nodes:
        if n.op == "dense":
            widths[n.outputs[0]] = n.plan.cas_num * n.plan.n_slice
    operands, rows, out = place_transposes(planned, compute, operands, rows, out, device, widths)
    plan = DagPlan(batch, planned, tuple(compute), frozen_map(operands), frozen_map(rows), out,
                   out_pitch=output_pitch(planned, out, widths))
    if plan.tiles > device.compute_tiles:
        raise PlanError(f"the design needs {plan.tiles} compute tiles but {device.board} has {device.compute_tiles}",
                        hint="use a smaller batch or a narrower precision")
    from .links import make_links

    return replace(plan, links=make_links(plan, device))


def _plan_dense(node: Node, graph: Graph, batch: int, device: Device, config: Config) -> Node:
    r, _ = matrix_shape(graph, node.inputs[0], node.name)
    cfg = replace(config, batch=batch * r)  # every row of every sample is one row of the mmul's A
    lc = config.layer(node.name, *node.aliases)
    planned = family("dense").plan(node, PlanContext(device, cfg, lc, graph))
    p: DensePlan = planned.plan
    if p.cas_num > device.memtile_channels and lc.cas_num is None:
        # every cascade row writes its link's memory tile through its own DMA channel: take the
        # most rows the channels allow (the planner then lengthens the cascade instead)
        for rows in range(device.memtile_channels, 0, -1):
            try:
                planned = family("dense").plan(node, PlanContext(device, cfg, replace(lc, cas_num=rows), graph))
                p = planned.plan
                break
            except PlanError:
                continue
    if p.batch_pad != p.batch:
        m2 = 2 * p.mmul[0]
        raise RowMultipleError(
            f"{p.batch} rows per graph iteration ({batch} samples x {r} rows) are not a multiple of {m2}, "
            "which the memory-tile tilers of a DAG need (no row padding)",
            layer=node.name, hint=f"use a batch that makes batch x {r} a multiple of {m2}",
        )
    if p.cas_num > device.memtile_channels:
        raise PlanError(
            f"cas_num={p.cas_num} cascade rows would write one memory-tile buffer through more than its "
            f"{device.memtile_channels} DMA channels", layer=node.name,
            hint=f"set layers.{node.name}.parallelism.cas_num <= {device.memtile_channels}",
        )
    planned = planned.evolve(plan=replace(p, link="memtile"))
    return with_out_panel(planned, p.mmul[2])
