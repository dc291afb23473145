"""Memory-tile links of a DAG design, and their element-count checker.

One link per consumer operand (and one for the graph output): the source tensor's producer ports
(Dense cascade rows, rows-kernel parts, or the input PLIO) write ``shared_buffer`` shards of
``[Fb, R, B]`` elements (feature fastest; ``Fb`` the producer's padded width), and the consumer's
ports (Dense cascade columns in mmul-K panels, rows-kernel parts row-major, or the output PLIO)
read them, directly or transposed.  A memory tile has ``Device.memtile_channels`` DMA channels per
direction (UG1603), so a consumer's ports are grouped that many per shard, and every shard is
written by all producer ports (a producer output buffer broadcast to several shards / links: the
same stream to several destinations).  Fan-out is simply several links of one tensor; the skip
path of a residual Add is its own link, buffered in its memory tile until the Add reads it.

:func:`check_dag_link` runs a link on values that encode (sample row, feature), through
:meth:`NdTiling.addresses` (this package's walk of the tiling semantics), and proves each consumer
port receives exactly the elements its kernel expects, in order, zero where the kernel pads; every
port moves the element count its kernel port declares; no read meets an unwritten element.  It
runs on every link :func:`make_links` builds, so every DAG design the tests compile is checked.
The memory tile's limits (a shard's DMA channels, buffer descriptors, address dimensions and bytes)
are checked once the links are lowered, on the mapped graph (``mapped/transport.py``, the
``check`` pass), as the chain's are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..devices import Device
from ..errors import PlanError
from ..mapped.tiling import NdTiling, Traversal, word_problems
from ..ops.dense import DensePlan
from .plan import (
    DagPlan,
    Operand,
    RowsPlan,
    input_tensor,
    mask_input,
    mask_pitch,
    matmul_dims,
    matmul_transposes,
    matrix_shape,
)

PING_PONG = 2


@dataclass(frozen=True)
class Endpoint:
    """A port: a Dense producer ``row`` / consumer ``column``, a rows kernel's ``part``, the input
    ``plio`` or the output ``out`` PLIO, of node ``node`` (None for PLIOs)."""

    kind: str
    node: str | None
    index: int = 0
    offset: int = 0  # a producer port of a concat: the feature where its tensor starts in the buffer
    pos: int = 0  # a cascaded matmul part's tile: its cascade position (its K-slice)


@dataclass(frozen=True)
class DagShard:
    dims: tuple[int, int, int]  # [Fb, R, B]
    writes: tuple[tuple[Endpoint, NdTiling], ...]
    reads: tuple[tuple[Endpoint, NdTiling], ...]


@dataclass(frozen=True)
class DagLink:
    source: Operand  # the tensor (and its producer) and whether the consumer reads it transposed
    consumer: str | None  # None: the output PLIO
    operand: int  # which input of the consumer
    element_bytes: int
    shards: tuple[DagShard, ...]

    @property
    def name(self) -> str:
        return f"{self.source.tensor} to {self.consumer or 'output'}" + (f"[{self.operand}]" if self.operand else "")

    def word_problems(self) -> tuple[str, ...]:
        """Ports whose pattern does not fit the DMAs' 32-bit-word addressing (``tiling.word_problems``):
        the x86 shim runs them, Vitis would refuse them (element-wise transposes of 8- / 16-bit
        data)."""
        out = []
        for sh in self.shards:
            for ep, t in (*sh.writes, *sh.reads):
                why = word_problems(t, self.element_bytes)
                if why:
                    out.append(f"{self.name}: {ep.kind} {ep.node or ''}{'' if ep.node is None else f'[{ep.index}]'}: "
                               + ", ".join(why))
        return tuple(out)

    @property
    def buffer_bytes(self) -> int:
        return sum(PING_PONG * math.prod(sh.dims) * self.element_bytes for sh in self.shards)

    def memtiles(self, device: Device) -> int:
        return max(len(self.shards), math.ceil(self.buffer_bytes / device.memory_tile_bytes))

    def to_json(self, device: Device) -> dict:
        return {
            "tensor": self.source.tensor, "producer": self.source.producer, "consumer": self.consumer,
            "operand": self.operand, "transposed": self.source.transposed, "transpose_at": self.source.transpose_at,
            "features": [self.source.start, self.source.stop],
            "concat": [{"tensor": q.tensor, "producer": q.producer} for q in self.source.parts],
            "shards": [{"dims": list(sh.dims), "write_ports": len(sh.writes), "read_ports": len(sh.reads)}
                       for sh in self.shards],
            "bytes": self.buffer_bytes, "memory_tiles": self.memtiles(device),
            "dma_word_problems": list(self.word_problems()),
        }


# ----------------------------------------------------------------------------- tensor geometry


@dataclass(frozen=True)
class Geometry:
    """A source tensor in its buffers: R rows per sample, F features, Fb written width, B samples.
    A concat's buffer holds its inputs side by side: F their features, ``offsets`` where each starts."""

    rows: int
    features: int
    width: int
    batch: int
    offsets: tuple[int, ...] = (0,)

    @property
    def dims(self) -> tuple[int, int, int]:
        return (self.width, self.rows, self.batch)


def written_width(plan: DagPlan, src: Operand) -> int:
    """Features a source's producer writes per row (a Dense node's padded output included)."""
    f = matrix_shape(plan.graph, src.tensor, src.producer or "input")[1]
    if src.producer is not None and plan.node(src.producer).op == "dense":
        p: DensePlan = plan.node(src.producer).plan
        return p.cas_num * p.n_slice
    if src.producer is not None and src.transpose_at != "producer":
        return plan.rows[src.producer].pitch_out  # rows padded to whole 32-bit words (plan.row_pitches)
    if src.producer is None and src.tensor == mask_input(plan.graph):
        return mask_pitch(plan.graph) or f  # the mask PLIO's rows padded to whole words (plan.mask_pitch)
    return f


def geometry(plan: DagPlan, src: Operand) -> Geometry:
    r, f = matrix_shape(plan.graph, src.tensor, src.producer or "input")
    if src.transpose_at == "producer":  # the producer writes the transposed tensor: [R, F, B]
        return Geometry(f, r, r, plan.batch)
    if not src.parts:
        return Geometry(r, f, written_width(plan, src), plan.batch)
    offsets, at = [], 0
    concat = plan.graph.producer(src.tensor)
    for k, q in enumerate(src.parts):
        fq = matrix_shape(plan.graph, q.tensor, q.producer or "input")[1]
        wq = written_width(plan, q)
        if wq != fq and k + 1 < len(src.parts):
            # a writer cannot drop elements (memory-tile DMAs pad on reads only, UG1603): the
            # padding of a Dense output would land on the next input's features
            raise PlanError(
                f"concat input '{q.tensor}' ({fq} features) is written {wq} wide by '{q.producer}' (padded to its "
                "cascade), which would overwrite the next input in the concat buffer", layer=concat.name,
                hint=f"make '{q.producer}' the last input of the concat, or give it a number of output features "
                     f"its cascade needs no padding for (e.g. {wq})")
        offsets.append(at)
        at += fq
        last_width = wq
    return Geometry(r, f, offsets[-1] + last_width, plan.batch, tuple(offsets))


def _row_block(lo: int, hi: int, per_sample: int, what: str) -> tuple[int, int, int]:
    """Rows [lo, hi) of the [B * R] rows as (first row in a sample, rows, samples): whole samples
    or a run inside one sample (the only shapes one tiling can address)."""
    n = hi - lo
    if lo % per_sample == 0 and n % per_sample == 0:
        return 0, per_sample, n // per_sample
    if n <= per_sample and lo // per_sample == (hi - 1) // per_sample:
        return lo % per_sample, n, 1
    raise PlanError(f"internal: {what}: rows {lo}..{hi} span sample boundaries", hint="please report this as a bug")


def _rows_tiling(g: Geometry, lo: int, hi: int, transposed: bool, what: str, first_feature: int = 0,
                 features: int | None = None, row: int | None = None) -> NdTiling:
    """Rows [lo, hi) of the tensor as its consumer sees it, row-major (a rows-kernel port, a PLIO):
    ``features`` features from ``first_feature`` on (a concat input's place, a slice); with ``row``,
    the consumer's rows are the samples and each reads that row of its sample."""
    if row is not None:
        nf = g.features if features is None else features
        return NdTiling(g.dims, (nf, 1, hi - lo), (first_feature, row, lo))
    if not transposed:
        first, n, samples = _row_block(lo, hi, g.rows, what)
        nf = g.features if features is None else features
        return NdTiling(g.dims, (nf, n, samples), (first_feature, first, lo // g.rows))
    # transposed: the consumer's row (b, f) holds features r; walk r fastest, then f, then b
    first, n, samples = _row_block(lo, hi, g.features, what)
    trav = (Traversal(0, 1, n),) + ((Traversal(2, 1, samples),) if samples > 1 else ())
    return NdTiling(g.dims, (1, g.rows, 1), (first, 0, lo // g.features), trav)


def _dense_write(g: Geometry, p: DensePlan, r: int, offset: int = 0) -> NdTiling:
    """Cascade row r's output panels [ns / P][B * R][P] into the buffer (at ``offset`` in a concat)."""
    return NdTiling(g.dims, (p.out_panel, g.rows, g.batch), (offset + r * p.n_slice, 0, 0),
                    (Traversal(0, p.out_panel, p.n_slice // p.out_panel),))


def _dense_read(g: Geometry, p: DensePlan, c: int, src: Operand) -> NdTiling:
    """Cascade column c's input panels [ks / K][rows][K], zero beyond the written features (or
    beyond the slice the consumer reads)."""
    k = p.in_panel
    if not src.transposed:
        boundary = (src.stop, g.rows, g.batch) if src.sliced else g.dims
        rows, first = (1, src.row) if src.selected else (g.rows, 0)
        return NdTiling(g.dims, (k, rows, g.batch), (src.start + c * p.k_slice, first, 0),
                        (Traversal(0, k, p.k_slice // k),), boundary)
    # transposed: consumer rows (b, f), features r: K consecutive r per tile, then f, b, panels
    return NdTiling(g.dims, (1, k, 1), (0, c * p.k_slice, 0),
                    (Traversal(0, 1, g.features), Traversal(2, 1, g.batch), Traversal(1, k, p.k_slice // k)), g.dims)


def _transposed_write(g: Geometry, rp: RowsPlan, i: int) -> NdTiling:
    """A rows kernel part that writes its block transposed ([samples][F][rows]) into the
    transposed tensor's buffer [R, F, B] (``g`` is that buffer: rows F, features R)."""
    lo, hi = rp.part_rows(i)
    first, n, samples = _row_block(lo, hi, rp.per_sample, "transposed write")
    return NdTiling(g.dims, (n, g.rows, samples), (first, 0, lo // rp.per_sample))


def _ports_of(plan: DagPlan, src: Operand, g: Geometry, offset: int) -> list[tuple[Endpoint, NdTiling]]:
    """The ports that write one source tensor into the buffer, its first feature at ``offset``."""
    if src.producer is None:  # the input PLIO (index 0), or the run-time key padding mask's (index 1)
        f = matrix_shape(plan.graph, src.tensor, "input")[1]
        k = 1 if src.tensor == mask_input(plan.graph) else 0
        if k:
            f = mask_pitch(plan.graph) or f  # padded rows: the PLIO carries the padding
        return [(Endpoint("plio", None, k, offset), _rows_tiling(g, 0, g.rows * g.batch, False, "input", offset, f))]
    node = plan.node(src.producer)
    if node.op == "dense":
        p: DensePlan = node.plan
        return [(Endpoint("row", node.name, r, offset), _dense_write(g, p, r, offset)) for r in range(p.cas_num)]
    rp: RowsPlan = plan.rows[node.name]
    if src.transpose_at == "producer":
        return [(Endpoint("part", node.name, i), _transposed_write(g, rp, i)) for i in range(rp.parts)]
    return [(Endpoint("part", node.name, i, offset),
             _rows_tiling(g, *rp.part_rows(i), False, node.name, offset, rp.pitch_out)) for i in range(rp.parts)]


def producer_ports(plan: DagPlan, src: Operand, g: Geometry) -> list[tuple[Endpoint, NdTiling]]:
    if not src.parts:
        return _ports_of(plan, src, g, 0)
    return [w for q, off in zip(src.parts, g.offsets, strict=True) for w in _ports_of(plan, q, g, off)]


def view_features(g: Geometry, src: Operand) -> int:
    """Features per row the consumer sees (a slice's, or the whole tensor's)."""
    return src.stop - src.start if src.sliced else g.features


def effective(src: Operand) -> Operand:
    """The operand as the link's read side sees it: a producer-transposed tensor is read directly."""
    return replace(src, transposed=False) if src.transpose_at == "producer" else src


def _block_read(g: Geometry, lo: int, hi: int) -> NdTiling:
    """A kernel part that reads a transposed view in its memory: its rows [lo, hi) of the view (rows
    (b, f): source features) come as the source block [samples][R][f run] (whole runs of features)."""
    first, n, samples = _row_block(lo, hi, g.features, "transposed block")
    return NdTiling(g.dims, (n, g.rows, samples), (first, 0, lo // g.features))


def part_rows(plan: DagPlan, name: str, operand: int, i: int, g: Geometry, transposed: bool = False) -> tuple[int, int]:
    """The rows of its ``operand`` (as the kernel sees it: ``transposed``, the view's rows are the
    source's features) that part ``i`` of rows kernel ``name`` reads: its own rows, or, for a matmul's
    B, all rows of the part's samples (of its one sample, for a part inside one); a masked mean (one
    output row per sample) reads all rows of its samples of both operands."""
    rp = plan.rows[name]
    lo, hi = rp.part_rows(i)
    r = g.features if transposed else g.rows
    if (rp.op in ("matmul", "softmax") and operand == 1) or rp.op == "masked_mean":  # B, or the run-time mask: the part's samples' rows
        return lo // rp.per_sample * r, -(-hi // rp.per_sample) * r  # (a part inside one: its sample's)
    return lo, hi


def cascade_block(plan: DagPlan, name: str, operand: int, i: int, j: int, g: Geometry,
                  src: Operand) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """What cascade position ``j`` of part ``i`` of a cascaded matmul reads of an operand: its K-slice
    of the stored tensor (the source as written: a transposed view is read in source layout), as
    (first feature, first row, first sample) and (features, rows, samples), fastest first.  K is the
    stored tensor's features for A (its rows when TRANS_A) and its rows for B (its features when
    TRANS_B)."""
    rp = plan.rows[name]
    kc = matmul_dims(plan.graph, plan.node(name), plan.operands[name])[1] // rp.cascade
    ta, tb = matmul_transposes(plan.node(name), plan.operands[name])
    per = g.features if src.transposed else g.rows  # the view's rows per sample
    lo, hi = part_rows(plan, name, operand, i, g, src.transposed)
    first, n, samples = _row_block(lo, hi, per, f"cascade block of {name}")
    s0 = lo // per
    if operand == 0:
        if ta:  # stored [K, M]: the slice's rows, the part's run of features
            return (first, j * kc, s0), (n, kc, samples)
        return (src.start + j * kc, first, s0), (kc, n, samples)
    if tb:  # stored [N, K]: every row of the part's samples, the slice's features
        return (src.start + j * kc, 0, s0), (kc, g.rows, samples)
    return (src.start, j * kc, s0), (view_features(g, src), kc, samples)


def _cascade_read(plan: DagPlan, name: str, operand: int, i: int, j: int, g: Geometry, src: Operand) -> NdTiling:
    first, size = cascade_block(plan, name, operand, i, j, g, src)
    return NdTiling(g.dims, size, first)


def _cascaded(plan: DagPlan, name: str | None) -> bool:
    return name is not None and name in plan.rows and plan.rows[name].cascade > 1


def consumer_ports(plan: DagPlan, consumer: str | None, src: Operand, g: Geometry,
                   operand: int = 0) -> list[tuple[Endpoint, NdTiling]]:
    src = effective(src)
    nf = view_features(g, src)
    if consumer is None:
        nf = plan.out_pitch or nf  # rows padded to whole 32-bit words (plan.output_pitch)
        rows = (1 if src.selected else g.rows) * g.batch
        return [(Endpoint("out", None), _rows_tiling(g, 0, rows, src.transposed, "output", src.start, nf, src.row))]
    node = plan.node(consumer)
    if node.op == "dense":
        p: DensePlan = node.plan
        return [(Endpoint("column", consumer, c), _dense_read(g, p, c, src)) for c in range(p.cas_len)]
    rp = plan.rows[consumer]
    if rp.cascade > 1:  # every tile of every part's cascade reads its K-slice
        return [(Endpoint("part", consumer, i, pos=j), _cascade_read(plan, consumer, operand, i, j, g, src))
                for i in range(rp.parts) for j in range(rp.cascade)]
    if src.transpose_at == "consumer":
        return [(Endpoint("part", consumer, i), _block_read(g, *part_rows(plan, consumer, operand, i, g, True)))
                for i in range(rp.parts)]
    nf = rp.pitch_in(operand, nf)  # a padded operand: whole rows at the pitch
    return [(Endpoint("part", consumer, i),
             _rows_tiling(g, *part_rows(plan, consumer, operand, i, g), src.transposed, consumer, src.start, nf,
                          src.row))
            for i in range(rp.parts)]


def make_links(plan: DagPlan, device: Device) -> tuple[DagLink, ...]:
    links = []
    wanted = [(name, i, o) for name in plan.compute for i, o in enumerate(plan.operands[name])]
    wanted.append((None, 0, plan.output))
    ch = device.memtile_channels
    for consumer, i, src in wanted:
        g = geometry(plan, src)
        writes = producer_ports(plan, src, g)
        reads = consumer_ports(plan, consumer, src, g, i)
        shards = tuple(DagShard(g.dims, tuple(writes), tuple(reads[j:j + ch])) for j in range(0, len(reads), ch))
        t = plan.graph.tensors[src.tensor].dtype
        link = DagLink(src, consumer, i, t.container_bits // 8, shards)
        check_dag_link(plan, link)
        links.append(link)
    return tuple(links)


# ----------------------------------------------------------------------------- checker


def _panel_order(first: int, count: int, panel: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(feature, row) of each element of a ``[count / panel][rows][panel]`` port buffer."""
    j, b, e = np.meshgrid(np.arange(count // panel), np.arange(rows), np.arange(panel), indexing="ij")
    return (first + j * panel + e).ravel(), b.ravel()


def _ids(rows: np.ndarray, feats: np.ndarray, g: Geometry) -> np.ndarray:
    """Value carried by source element (row of B * R, feature): 1 + its index; 0 for padding."""
    valid = feats < g.features
    return np.where(valid, 1 + rows * g.features + np.minimum(feats, g.features - 1), 0)


def _source_of(rows_c: np.ndarray, feats_c: np.ndarray, g: Geometry, src: Operand):
    """A consumer view element (row, feature) -> the source element (row, feature)."""
    if not src.transposed:
        nf = view_features(g, src)
        rows = rows_c * g.rows + src.row if src.selected else rows_c  # consumer row = sample
        return rows, np.where(feats_c < nf, src.start + feats_c, g.features)
    b, f = np.divmod(rows_c, g.features)  # consumer rows (b, f), features = source rows r
    return b * g.rows + np.minimum(feats_c, g.rows - 1), np.where(feats_c < g.rows, f, g.features)


def _writer_features(plan: DagPlan, ep: Endpoint) -> tuple[int, int]:
    """(features, row pitch) of what a producer port writes per row."""
    if ep.kind == "plio":
        f = matrix_shape(plan.graph, mask_input(plan.graph) if ep.index == 1 else input_tensor(plan.graph),
                         "input")[1]
        return f, (mask_pitch(plan.graph) or f) if ep.index == 1 else f
    if ep.kind == "row":
        f = plan.node(ep.node).plan.out_features
        return f, f
    rp = plan.rows[ep.node]
    return rp.features, rp.pitch_out


def _expected_write(plan: DagPlan, ep: Endpoint, g: Geometry, src: Operand) -> np.ndarray:
    """What a producer port's stream carries, as source-element ids (its kernel's own layout)."""
    if src.transpose_at == "producer":  # [samples][F][rows of the part]; ids of the transposed tensor
        rp = plan.rows[ep.node]
        lo, hi = rp.part_rows(ep.index)
        first, n, samples = _row_block(lo, hi, rp.per_sample, "transposed write")
        s, f, r = np.meshgrid(np.arange(samples), np.arange(g.rows), np.arange(n), indexing="ij")
        b = lo // rp.per_sample + s
        return _ids((b * g.rows + f).ravel(), (first + r).ravel(), g)
    fw, pitch = _writer_features(plan, ep)
    if ep.kind == "row":
        p: DensePlan = plan.node(ep.node).plan
        f, r = _panel_order(ep.index * p.n_slice, p.n_slice, p.out_panel, p.batch_pad)
    else:
        lo, hi = (0, g.rows * g.batch) if ep.kind == "plio" else plan.rows[ep.node].part_rows(ep.index)
        r, f = np.divmod(np.arange(lo * pitch, hi * pitch), pitch)
    # the writer's own padding (a Dense output beyond its features) carries zeros
    return np.where(f < fw, _ids(r, ep.offset + f, g), 0)


def _expected_read(plan: DagPlan, ep: Endpoint, g: Geometry, src: Operand, operand: int = 0) -> np.ndarray:
    src = effective(src)
    if ep.kind == "part" and _cascaded(plan, ep.node):
        return _expected_cascade_read(plan, ep, g, src, operand)
    if src.transpose_at == "consumer":  # the kernel's input block: source layout [samples][R][f run]
        lo, hi = part_rows(plan, ep.node, operand, ep.index, g, True)
        first, n, samples = _row_block(lo, hi, g.features, "transposed block")
        s, r, f = np.meshgrid(np.arange(samples), np.arange(g.rows), np.arange(n), indexing="ij")
        b = lo // g.features + s
        return _ids((b * g.rows + r).ravel(), (first + f).ravel(), g)
    rows_c, feats_c = (g.features, g.rows) if src.transposed else (1 if src.selected else g.rows, view_features(g, src))
    if ep.kind == "part":
        feats_c = plan.rows[ep.node].pitch_in(operand, feats_c)  # padded rows: the padding reads as 0
    elif ep.kind == "out":
        feats_c = plan.out_pitch or feats_c
    if ep.kind == "column":
        p: DensePlan = plan.node(ep.node).plan
        f, r = _panel_order(ep.index * p.k_slice, p.k_slice, p.in_panel, p.batch_pad)
        f = np.where(f < feats_c, f, 1 << 40)
    else:
        lo, hi = (0, rows_c * g.batch) if ep.kind == "out" else part_rows(plan, ep.node, operand, ep.index, g)
        r, f = np.divmod(np.arange(lo * feats_c, hi * feats_c), feats_c)
    rs, fs = _source_of(r, f, g, src)
    return _ids(rs, fs, g)


def _expected_cascade_read(plan: DagPlan, ep: Endpoint, g: Geometry, src: Operand, operand: int) -> np.ndarray:
    """What a cascaded matmul tile's port holds, from the kernel's side (dag_kernels.h MatMul with K the
    slice): A ``[rows][K]`` (``[samples][K][M run]`` when TRANS_A), B ``[samples][K][N]`` (``[samples][N][K]``
    when TRANS_B), K the tile's slice ``[pos K, (pos + 1) K)`` of the operand view's reduction axis; each
    element named by its (row, feature) of the operand view, then mapped to the source (``_source_of``)."""
    rp = plan.rows[ep.node]
    node = plan.node(ep.node)
    m, k, n = matmul_dims(plan.graph, node, plan.operands[ep.node])
    kc = k // rp.cascade
    ta, tb = matmul_transposes(node, plan.operands[ep.node])
    per = g.features if src.transposed else g.rows  # the view's rows per sample
    lo, hi = rp.part_rows(ep.index)
    ks = ep.pos * kc + np.arange(kc)
    if operand == 0:
        rows = np.arange(lo, hi)
        if ta:  # [samples][K][M run]: view (row, k) for each sample's run of rows
            samples, run = rp.block(m)
            s, q, r = np.meshgrid(np.arange(samples), ks, np.arange(run), indexing="ij")
            vr, vf = rows.reshape(samples, run)[s, r], q
        else:  # [rows][K]
            r, q = np.meshgrid(rows, ks, indexing="ij")
            vr, vf = r, q
    else:
        first = lo // rp.per_sample  # the part's samples (its one sample, for a run of its rows)
        samples = max(1, (hi - lo) // rp.per_sample)
        # the view B is [K, N] (rows k) unless transpose_b ([N, K]); the kernel's port [N][K] when TRANS_B
        b_rows_are_k = not bool(node.attrs.get("transpose_b", False))
        outer, inner = (np.arange(n), ks) if tb else (ks, np.arange(n))
        s, a, c = np.meshgrid(np.arange(samples), outer, inner, indexing="ij")
        kk, nn = (c, a) if tb else (a, c)
        vr, vf = ((kk, nn) if b_rows_are_k else (nn, kk))
        vr = (first + s) * per + vr
    rs, fs = _source_of(np.ravel(vr), np.ravel(vf), g, src)
    return _ids(rs, fs, g)


def check_dag_link(plan: DagPlan, link: DagLink) -> None:
    """Raise unless the link moves exactly what the kernels on both sides declare (see the module
    docstring)."""
    where = f"memory-tile link {link.name}"

    def fail(msg: str) -> None:
        raise PlanError(f"internal: {where}: {msg}", layer=link.consumer or link.source.producer,
                        hint="please report this as a bug")

    g = geometry(plan, link.source)
    fed: dict[Endpoint, int] = {}
    for i, sh in enumerate(link.shards):
        buf = np.full(math.prod(sh.dims), -1, dtype=np.int64)
        for ep, t in sh.writes:
            src = _expected_write(plan, ep, g, link.source)
            addr = t.addresses()
            if addr.size != src.size or (addr < 0).any():
                fail(f"shard {i}: the write from {ep} moves {addr.size} elements, its port holds {src.size}")
            if (buf[addr] != -1).any():
                fail(f"shard {i}: two writes land on the same element")
            buf[addr] = src
        for ep, t in sh.reads:
            addr = t.addresses()
            vals = np.where(addr >= 0, buf[np.maximum(addr, 0)], 0)
            if (vals == -1).any():
                fail(f"shard {i}: the read for {ep} meets elements nobody wrote")
            want = _expected_read(plan, ep, g, link.source, link.operand)
            if vals.size != want.size or not np.array_equal(vals, want):
                fail(f"{ep} reads the wrong elements ({vals.size} moved, its port holds {want.size})")
            if ep in fed:
                fail(f"{ep} is fed twice")
            fed[ep] = i
    expected = {ep for ep, _ in consumer_ports(plan, link.consumer, link.source, g, link.operand)}
    if set(fed) != expected:
        fail(f"ports {sorted(map(str, expected - set(fed)))} are fed by no shard")
