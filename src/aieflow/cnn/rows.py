"""The row-streamed CNN mapping (``cnn.mapping: rows``): frames larger than the array holds.

Each stage is one kernel that runs once per frame (one graph iteration) and moves the frame row by
row: it reads input rows from its input stream(s) as it needs them into a line buffer of ``KH``
rows (``C_in x KH x W`` values in its tile memory: the window of one output row, with the frame's
top / bottom padding rows filled with the padding code), computes one output row with the stream
mapping's own convolution core (``ConvCore`` of ``cnn_kernels.h`` on a one-row "image" of
``KH`` rows: the same patches, products, order and epilogue, so the same values), and writes it
to its output stream(s) before it reads further.  A stride skips rows (read and dropped), a
pooling is the stream mapping's pooling window on the line buffer, a nearest upsampling writes
each output row ``up_h`` times, a channel concat reads one stream per part into the line buffer
(parts in channel order).  Weights stay resident.  Nothing holds a frame: tile memory is the line
buffer, the output row and the parameters.

A bilinear upsampling's stored row y reads conv rows ``i0(y)`` and ``i1(y) <= i0(y) + 1``
(:func:`up_rows`): the kernel computes conv rows as far as ``i1(y)`` into a ring of two (the one-row
look-ahead) and interpolates with the stream mapping's integer definition.  A fused residual add's
skip is one more row stream (:func:`_parts`): its row r comes with input row r (the convolution keeps
the frame's size), so the skip lags like a concat part and takes the same FIFO / memory-tile row
path; the kernel keeps ``KH`` skip rows.  A global pooling (the window is the whole unpadded frame:
a classifier's head) keeps one running sum or maximum per channel (Pool's step / finish) instead of
a line buffer, and a Dense (+ softmax) after it is a convolution of one row.

Float stages (fp32 on AIE1, bf16 on AIE-ML / v2) run the same kernels: the rows code only moves values
around the stream mapping's type-generic core, so a float model's rows and frame designs compute the
same values, and the per-row cost takes the stream mapping's float constants (the catalog's fp32 / bf16
MAC rate and mmul shape, ``perf.post_cycles`` for a float post layer).

A concat part that skips stages (a U-Net skip) is a second output stream of its producer into a
FIFO that holds the rows the reader has not reached yet (``adf::fifo_depth``, UG1079 DMA FIFO: a
memory tile on AIE-ML, a tile's data memory on AIE1); its depth is the dependency lag
(:func:`fifo_rows`).  What does not fit is a PlanError naming the layer and the size.  A stage that
writes more than one stored row after a computed row (an upsampling's ``up_h``: :func:`emit_burst`)
gets the same kind of FIFO on each of its streams, the burst's rows (a kernel-to-kernel stream holds a
few words: AM009 "Stream Switch Buffering and Latency"; a full one back-pressures the writer), so it
never waits for its reader to take a burst: the recurrence below assumes that room
(:func:`stream_room_rows`), checked against the same memory as the skip FIFOs, else sent to DDR.

Performance (:func:`estimate_rows`, assumed constants of ``cnn/perf.py``, none fitted): cycles
per output row per stage (the stream mapping's conv / pooling tile cycles of a one-row stage, the
call overhead once per frame), plus one cycle per value read from or written to a core stream and
per value moved in the line buffer; the rows' finishing times follow a recurrence (a row starts
when its last input row has arrived and the stage has finished its previous row), which includes
the pipeline's fill of ``KH - 1`` rows per layer; the interval is the busiest stage or PLIO per
frame.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..devices import Device
from ..errors import PlanError
from ..names import comment
from ..ops.conv import ConvGeometry
from . import perf
from .plan import (
    STACK_BYTES,
    CnnPlan,
    StreamLayer,
    TileUse,
    elem_bytes,
    kind,
    post_bytes,
    round_up,
    stream_layer,
    table_bytes,
)
from .stages import Stage

STREAM_CYCLES_PER_VALUE = 1.0  # a scalar readincr / writeincr of one value on a 32-bit core stream (assumed)
LINE_SHIFT_CYCLES_PER_VALUE = 1.0  # a scalar copy of one value when the line buffer slides down (assumed)
FIFO_SLACK_ROWS = 1  # one row in flight on top of the dependency lag
MERGE_ROOM_ROWS = 2  # a memory-tile row buffer's ping and pong: the room of a stream into it
DDR_SEGMENTS = 1  # skips held in DDR per design: the host moves one segment row by row (graph.cpp)
GLOBAL_POOL_FINISH_CYCLES_PER_CHANNEL = 8.0  # a global pooling's rounded division (or maximum) per channel (assumed)


@dataclass(frozen=True)
class RowLayer:
    """One stage of the rows mapping: one kernel, its stream ports and its line buffer."""

    stage: str
    kind: str  # "conv" | "pool" | "gpool" (a global pooling: sums / maxima per channel as the rows pass)
    parts: tuple[tuple[int, int], ...]  # (producer stage index, -1 the input PLIO; channels) per input stream
    outs: int  # output streams: the next stage, and a later concat reader
    line_rows: int  # KH
    line_bytes: int
    memory: TileUse
    row_cycles: float  # per computed output row (before an upsampling's copies)
    fifo_words: tuple[int, ...] = ()  # per input stream: adf::fifo_depth (32-bit words), 0: none
    col: int = 0
    outputs: int = 0  # output PLIOs (the last stage: 1)
    # The core's stream ports this stage uses (0: one per part / per reader).  Where the core has
    # fewer input ports than parts, the parts meet in a memory-tile row buffer (``merge_bytes``, its
    # ping and pong) that feeds one port; where it has fewer output ports than readers, one port
    # broadcasts to all of them.
    in_ports: int = 0
    out_ports: int = 0
    merge_bytes: int = 0
    # per input stream: the bytes of the DDR segment that holds a skip whose FIFO does not fit (the
    # producer's whole frame of that part, written row by row through an output GMIO and read back
    # through an input GMIO); 0: none
    ddr_bytes: tuple[int, ...] = ()

    tiles = 1
    kernels = 1

    @property
    def ins(self) -> int:
        return self.in_ports or len(self.parts)

    @property
    def outs_used(self) -> int:
        return self.out_ports or self.outs

    @property
    def merged(self) -> bool:
        return self.merge_bytes > 0

    @property
    def plio_in(self) -> int:
        return 1 if self.col == 0 else 0

    @property
    def plio_out(self) -> int:
        return self.outputs

    def to_json(self) -> dict:
        return {"stage": self.stage, "kind": self.kind, "parts": [list(p) for p in self.parts], "outs": self.outs,
                "line_rows": self.line_rows, "line_bytes": self.line_bytes, "tile_bytes": self.memory.bytes,
                "borrowed_bytes": self.memory.borrowed, "row_cycles": self.row_cycles,
                "fifo_words": list(self.fifo_words), "col": self.col, "stream_ports": [self.ins, self.outs_used],
                "merge_bytes": self.merge_bytes, "ddr_bytes": list(self.ddr_bytes)}


def is_global_pool(s: Stage) -> bool:
    """A pooling whose window is the whole unpadded frame (global average / max pooling)."""
    _, h, w = s.geometry.in_shape
    return s.kind == "pool" and s.geometry.kernel == (h, w) and not any(s.geometry.padding)


def row_kind(s: Stage) -> str:
    return "gpool" if is_global_pool(s) else s.kind


def bilinear(s: Stage) -> bool:
    return s.up != (1, 1) and s.up_mode != "nearest"


def row_geometry(s: Stage) -> ConvGeometry:
    """The one-row view of a stage: its window of ``KH`` input rows, no vertical padding, stride 1
    down: one output row of the same width."""
    c, _, w = s.geometry.in_shape
    kh, kw = s.geometry.kernel
    _, left, _, right = s.geometry.padding
    return ConvGeometry((c, kh, w), (kh, kw), (1, s.geometry.stride[1]), (0, left, 0, right))


def row_stage(s: Stage) -> Stage:
    """The one-row stage the kernel's ConvCore / Pool configuration describes; a bilinear
    upsampling is the rows kernel's own (it needs two conv rows: ``up_rows``), not the core's."""
    if bilinear(s):
        s = replace(s, up=(1, 1), up_mode="nearest", up_name="")
    return replace(s, geometry=row_geometry(s))


def up_rows(s: Stage, r: int) -> tuple[int, int]:
    """The conv output rows ``(i0, i1)`` that stored row ``r`` of ``s`` reads (ops/resize.py
    ``axis_weights``: bilinear; nearest: ``r // up``; none: ``r``)."""
    if not bilinear(s):
        return r // s.up[0], r // s.up[0]
    from ..ops.resize import axis_weights

    i0, i1, _, _ = axis_weights(s.out_hw[0], s.up[0], s.up_mode)
    return int(i0[r]), int(i1[r])


def row_stream_layer(device: Device, s: Stage) -> StreamLayer:
    """The stream mapping's one-tile layer of the one-row stage (its mmul shape, K per tile, the
    group sizes ``layer_cfg`` and the cost code read)."""
    c = s.geometry.in_shape[0]
    return stream_layer(device, row_stage(s), 1, c, 1)


def _parts(stages: tuple[Stage, ...], i: int) -> tuple[tuple[int, int], ...]:
    """The row streams stage ``i`` reads, ``(producer, channels)``: its input (a concat's parts in
    channel order), then a fused residual add's skip (its row r travels with input row r)."""
    s = stages[i]
    if s.concat is not None:
        parts = tuple((k, ch) for k, _, ch in s.concat.parts)
    else:
        parts = ((i - 1, s.geometry.in_shape[0]),)
    if s.residual is not None:
        k = s.residual.skip_from
        parts += ((k, stages[k].out_shape[0] if k >= 0 else s.out_shape[0]),)
    return parts


def skip_channels(s: Stage) -> int:
    return s.out_shape[0] if s.residual is not None else 0


def _refuse(s: Stage, device: Device) -> None:
    from .emit import ctype

    what = ""
    if s.residual is not None and (s.geometry.in_shape[1:] != s.out_shape[1:] or s.geometry.stride != (1, 1)):
        what = (f"the residual add '{s.residual.name}' on a {s.geometry.in_shape[1]} x {s.geometry.in_shape[2]} -> "
                f"{s.out_shape[1]} x {s.out_shape[2]} convolution (the skip's row r travels with input row r: "
                "the convolution keeps the frame's size)")
    elif s.residual is not None and ctype(s.residual.skip_type) != ctype(s.in_type):
        what = (f"the residual add '{s.residual.name}' whose skip is {s.residual.skip_type} beside an input of "
                f"{s.in_type} (one stream element type per kernel)")
    elif s.shuffle:
        what = f"the pixel shuffle '{s.shuffle_name}' after it"
    elif s.kind == "pool" and not is_global_pool(s) and (s.geometry.padding[0] or s.geometry.padding[2]):
        what = f"its top / bottom padding {s.geometry.padding[0]} / {s.geometry.padding[2]}"
    if what:
        raise PlanError(f"the rows mapping streams convolutions (ReLU / tables / activation and softmax heads, "
                        f"nearest and bilinear upsampling, residual adds), poolings without top / bottom padding, "
                        f"global poolings and channel concats; '{s.name}' has {what}", layer=s.name,
                        hint="use cnn.mapping stream (whole frames) for this network")


def _need(s: Stage, oy: int) -> int:
    """The last input row that output row ``oy`` of stage ``s`` reads (-1: none)."""
    _, h, _ = s.geometry.in_shape
    return min(h - 1, oy * s.geometry.stride[0] - s.geometry.padding[0] + s.geometry.kernel[0] - 1)


def emit_burst(s: Stage) -> int:
    """The most stored rows ``s`` writes after one computed row: a nearest upsampling's ``up_h``, a
    bilinear one's stored rows whose second conv row (:func:`up_rows`) is that row, else 1."""
    if row_kind(s) == "gpool":
        return 1
    counts: dict[int, int] = {}
    for r in range(s.out_hw[0] * s.up[0]):
        c = up_rows(s, r)[1]
        counts[c] = counts.get(c, 0) + 1
    return max(counts.values())


def fifo_rows(stages: tuple[Stage, ...], producer: int, reader: int) -> int:
    """Rows of ``producer``'s output (-1: the input) a FIFO into ``reader`` must hold so that the
    producer never waits on it while the reader waits for its other parts: the most rows the
    reader's other inputs need from the producer before the reader has taken them (dependency
    lag, independent of timing), plus the rows in flight: one, or the producer's burst
    (:func:`emit_burst`)."""

    memo: dict[tuple[int, int], int] = {}

    def needs(k: int, r: int) -> int:  # rows of `producer` that stored row r of stage k depends on
        if (k, r) not in memo:
            memo[k, r] = _needs(k, r)
        return memo[k, r]

    def _needs(k: int, r: int) -> int:
        if k == producer:
            return r + 1
        if k < 0 or k < producer:
            return 0
        oy = up_rows(stages[k], r)[1]
        n = _need(stages[k], oy)
        return max((needs(p, n) for p, _ in _parts(stages, k)), default=0) if n >= 0 else 0

    s = stages[reader]
    most = 0
    for oy in range(s.out_hw[0]):
        n = _need(s, oy)
        if n < 0:
            continue
        others = max((needs(p, n) for p, _ in _parts(stages, reader) if p != producer), default=0)
        taken = _need(s, oy - 1) + 1 if oy else 0
        most = max(most, others - taken)
    return max(0, most) + max(FIFO_SLACK_ROWS, emit_burst(stages[producer]) if producer >= 0 else 1)


def row_cycles(device: Device, s: Stage, lay: StreamLayer, out_ports: int = 1) -> float:
    """Cycles per output row: the stream mapping's tile cycles of the one-row stage less its call
    overhead (paid once per frame), plus the values the row reads from and writes to the core
    streams (the kernel writes each output row to each of its ``out_ports`` output ports:
    ``write_rows``) and moves in the line buffer."""
    rs = row_stage(s)
    c, h, w = s.geometry.in_shape
    kh, sh = s.geometry.kernel[0], s.geometry.stride[0]
    if row_kind(s) == "gpool":  # per input row: read and accumulate each value (its C results: after the last)
        return c * w * (STREAM_CYCLES_PER_VALUE + perf.POOL_CYCLES_PER_ELEMENT)
    if s.kind == "pool":
        core = perf.pool_tile_cycles(rs, lay)
    else:
        rate = device.generation.macs_per_cycle[(kind(s.in_type), kind(s.core.weight))]
        core = perf.conv_tile_cycles(rs, lay, True, rate)
    new_rows = min(sh, kh)
    ow = s.out_hw[1]
    skip = skip_channels(s) * w  # a residual's skip row, read with each input row
    io = (new_rows * (c * w + skip) + out_ports * s.out_channels * ow * s.up[0] * s.up[1]) * STREAM_CYCLES_PER_VALUE
    shift = max(0, kh - sh) * c * w * LINE_SHIFT_CYCLES_PER_VALUE
    # bilinear: the rows kernel interpolates up[0] x up[1] values per computed value, on average
    interp = s.out_channels * ow * s.up[0] * s.up[1] * perf.BILINEAR_CYCLES_PER_VALUE if bilinear(s) else 0.0
    return core - perf.KERNEL_CALL_CYCLES + io + shift + interp


def _joined(s: Stage) -> tuple[str, str]:
    """What joins a stage's row streams, for messages: its concat, else its residual add."""
    if s.concat is not None:
        return f"the concat '{s.concat.name}'", s.concat.name
    if s.residual is not None:
        return f"the residual add '{s.residual.name}'", s.residual.name
    return f"'{s.name}'", s.name


def _merge_bytes(device: Device, stages: tuple[Stage, ...], s: Stage, parts: tuple[tuple[int, int], ...],
                 width: int) -> int:
    """Bytes of the memory-tile row buffer in which the parts of ``s`` meet (ping and pong of one
    row of all their channels): one S2MM DMA channel per part and one MM2S channel into the core.
    PlanErrors name what the device's catalog lacks (memory tiles, DMA channels)."""
    g = device.generation
    label, what = _joined(s)
    if not device.memory_tile_bytes:
        raise PlanError(f"'{s.name}' reads {len(parts)} row streams ({label}); a {g.name} core has "
                        f"{g.stream_in_ports} input stream port(s) and {device.board} no memory tile to merge them in",
                        layer=s.name, hint="use cnn.mapping stream")
    if any(p < 0 for p, _ in parts):
        raise PlanError(f"{label} into '{s.name}' reads the network input: on a {g.name} core with "
                        f"{g.stream_in_ports} input stream port(s) its parts meet in a memory tile, which takes "
                        "kernel streams only in this mapping", layer=what, hint="use cnn.mapping stream")
    if len(parts) > device.memtile_channels:
        raise PlanError(f"{label} into '{s.name}' has {len(parts)} parts: one memory tile's "
                        f"{device.memtile_channels} S2MM DMA channels take at most {device.memtile_channels}",
                        layer=what, hint="fewer concat parts")
    if 2 * (len(parts) + 1) > device.memtile_bds:  # a ping and a pong descriptor per port
        raise PlanError(f"{label} into '{s.name}' needs {2 * (len(parts) + 1)} buffer descriptors, more "
                        f"than a memory tile's {device.memtile_bds}", layer=what, hint="fewer concat parts")
    return 2 * sum(ch for _, ch in parts) * width * elem_bytes(s.in_type)


def _ddr_skip(stages: tuple[Stage, ...], s: Stage, p: int, rows: int, nbytes: int, limit: int) -> int:
    """The bytes of the DDR segment that holds the skip from ``p`` into ``s`` whose FIFO (``rows``
    rows, ``nbytes``) is over the ``limit`` that holds one: the producer's whole frame of the part
    (its output GMIO writes it row by row, the reader's input GMIO reads each row back after the
    host has seen it written, into the reader's stream port or, where the reader's parts meet in a
    memory-tile row buffer (AIE-ML / v2), into that buffer's write port: the interface DMA's MM2S
    feeds the memory tile's S2MM channel, UG1603 "AI Engine-ML Memory Tile Access").  A PlanError
    where DDR cannot help: the skip is the network input (no kernel writes it; the input PLIO
    feeds both)."""
    label, what = _joined(s)
    src = f"'{stages[p].name}'" if p >= 0 else "the network input"
    head = (f"the skip from {src} into '{s.name}' ({label}) lags {rows} rows: a FIFO of {nbytes:,} B, more than the "
            f"{limit:,} B that hold it")
    if p < 0:
        raise PlanError(f"{head}, and a DDR segment takes a kernel's output stream (the network input reaches "
                        "the array by its PLIO only)", layer=what, hint="a smaller frame or fewer skip channels")
    _, h, w = stages[p].out_shape
    return stages[p].out_shape[0] * h * w * elem_bytes(stages[p].out_type)


def rows_plan(device: Device, stages: tuple[Stage, ...], settings: dict) -> CnnPlan:
    """The rows mapping of ``stages``: one kernel per stage; PlanErrors name the layer that does
    not map (an unsupported fusion, a tile over its memory, more streams than a core has, a skip
    FIFO over its memory)."""
    if settings.get("replicas", "auto") not in ("auto", 1):
        raise PlanError(f"cnn.replicas {settings['replicas']}: the rows mapping runs one copy of the network",
                        hint="leave cnn.replicas out with cnn.mapping rows")
    g = device.generation
    limit = g.data_memory_bytes
    fifo_limit = device.memory_tile_bytes or limit
    readers: dict[int, list[int]] = {}
    for i in range(len(stages)):
        for p, _ in _parts(stages, i):
            readers.setdefault(p, []).append(i)
    layers: list[RowLayer] = []
    for i, s in enumerate(stages):
        _refuse(s, device)
        parts = _parts(stages, i)
        outs = len(readers.get(i, [])) or 1
        c, _, w = s.geometry.in_shape
        in_ports, out_ports = min(len(parts), g.stream_in_ports), min(outs, g.stream_out_ports)
        merge = 0
        if len(parts) > g.stream_in_ports:  # the parts meet in a memory-tile row buffer
            merge = _merge_bytes(device, stages, s, parts, w)
        kh = s.geometry.kernel[0]
        eb_in, eb_out = elem_bytes(s.in_type), elem_bytes(s.out_type)
        line = c * kh * w * eb_in
        ow = s.out_hw[1]
        lay = row_stream_layer(device, s)
        if bilinear(s):  # two conv rows (the interpolation's i0 and i1) and one upsampled row
            out_row = s.out_channels * ow * (2 + s.up[1]) * eb_out
        else:
            out_row = s.out_channels * ow * s.up[0] * s.up[1] * eb_out
        out_row += skip_channels(s) * kh * w * eb_in  # a residual's skip rows in flight (KH at most)
        if row_kind(s) == "gpool":  # one running sum (or maximum) per channel, no line buffer
            line, kh = 0, 0
            mem = c * 8 + c * eb_out + STACK_BYTES
        elif s.kind == "pool":
            mem = line + out_row + STACK_BYTES
        else:
            mm = lay.mmul
            kt_pad, og_pad = round_up(lay.k_tile, mm[1]), round_up(lay.out_group, mm[2])
            rs = row_stage(s)
            mem = (line + og_pad * kt_pad * elem_bytes(s.core.weight) + og_pad * mm[0] * 4 * (2 if s.rq is not None else 1)
                   + mm[0] * kt_pad * eb_in + out_row + table_bytes(s, lay.out_group) + post_bytes(rs, lay.out_group)
                   + STACK_BYTES)
        if mem > limit:
            raise PlanError(f"'{s.name}' needs {mem:,} B of tile memory in the rows mapping (a line buffer of {kh} rows "
                            f"= {line:,} B, its output row, weights), more than the {limit:,} B of a tile",
                            layer=s.name, hint="fewer channels or a narrower frame; line buffers in memory tiles are "
                            "not mapped yet")
        fifo: list[int] = []
        ddr: list[int] = []
        fifo_bytes = 0
        for p, ch in parts:
            ddr.append(0)
            if p == i - 1 and len(readers.get(p, [])) <= 1:
                # the chain's own stream: backpressure, no deadlock; a burst (an upsampling's rows
                # after each computed row) gets a FIFO of its rows beyond the row buffer's
                burst = emit_burst(stages[p]) if p >= 0 else 1
                if burst <= (MERGE_ROOM_ROWS if merge else 1):
                    fifo.append(0)
                    continue
                rows = burst - (MERGE_ROOM_ROWS if merge else 0)
            else:
                rows = fifo_rows(stages, p, i)
            width = stages[p].out_shape[2] if p >= 0 else stages[0].geometry.in_shape[2]
            t = stages[p].out_type if p >= 0 else stages[0].in_type
            nbytes = rows * ch * width * elem_bytes(t)
            # the FIFO's room: a tile's memory (AIE1), or what the memory tile holds beside the row
            # buffer and the FIFOs already in it (AIE-ML / v2, where the parts meet there)
            room = fifo_limit - (merge + fifo_bytes if merge else 0)
            if nbytes > room:
                ddr[-1] = _ddr_skip(stages, s, p, rows, nbytes, room)
                fifo.append(0)
                continue
            fifo.append(-(-nbytes // 4))
            fifo_bytes += fifo[-1] * 4
        if merge and merge + fifo_bytes > device.memory_tile_bytes:
            label, what = _joined(s)
            raise PlanError(f"{label} into '{s.name}' needs its row buffer ({merge:,} B, ping and pong) and "
                            f"its skip FIFOs ({fifo_bytes:,} B) in one memory tile: {merge + fifo_bytes:,} B, more "
                            f"than its {device.memory_tile_bytes:,} B", layer=what,
                            hint="a narrower frame or fewer skip channels")
        layers.append(RowLayer(s.name, row_kind(s), parts, outs, kh, line, TileUse(mem, limit), row_cycles(device, s, lay, out_ports),
                               tuple(fifo), i, int(i == len(stages) - 1), in_ports, out_ports, merge,
                               tuple(ddr) if any(ddr) else ()))
    check_stream_room(stages, layers)
    segments = [(lay.stage, b) for lay in layers for b in lay.ddr_bytes if b]
    if len(segments) > DDR_SEGMENTS:
        raise PlanError(f"{len(segments)} skips need a DDR segment each ({', '.join(repr(n) for n, _ in segments)}); "
                        f"the host moves {DDR_SEGMENTS} segment row by row in this mapping (its rows and another "
                        "segment's arrive at rates the one host thread cannot interleave without stalling)",
                        layer=segments[DDR_SEGMENTS][0], hint="a smaller frame or fewer skip channels")
    if len(layers) > device.compute_tiles:
        raise PlanError(f"{len(layers)} kernels do not fit the array's {device.compute_tiles} tiles")
    return CnnPlan("rows", device, stages, tuple(layers), 1, settings.get("mover_clock_hz", 312.5e6))


def stream_room_rows(stages: tuple[Stage, ...], lay: RowLayer, j: int) -> float:
    """Rows that part ``j`` of ``lay``'s stage holds beyond the row its reader is taking: its FIFO's
    rows, plus a memory-tile row buffer's two (``MERGE_ROOM_ROWS``); a skip held in DDR the frame
    (unbounded here); a plain stream or PLIO none (a few words, AM009)."""
    if lay.ddr_bytes and lay.ddr_bytes[j]:
        return float("inf")
    p, ch = lay.parts[j]
    width = stages[p].out_shape[2] if p >= 0 else stages[0].geometry.in_shape[2]
    t = stages[p].out_type if p >= 0 else stages[0].in_type
    words = lay.fifo_words[j] if lay.fifo_words else 0
    return words * 4 // (ch * width * elem_bytes(t)) + (MERGE_ROOM_ROWS if lay.merged else 0)


def check_stream_room(stages: tuple[Stage, ...], layers: list[RowLayer] | tuple[RowLayer, ...]) -> None:
    """:func:`estimate_rows` lets a producer write its burst of stored rows (:func:`emit_burst`)
    without waiting for its reader: a PlanError naming the stream where the plan gives it less room."""
    for lay in layers:
        for j, (p, _) in enumerate(lay.parts):
            burst = emit_burst(stages[p]) if p >= 0 else 1
            room = stream_room_rows(stages, lay, j)
            if burst > 1 and room < burst:
                src = f"'{stages[p].name}'" if p >= 0 else "the network input"
                raise PlanError(f"the row stream from {src} into '{lay.stage}' holds {room:g} rows, but {src} writes "
                                f"{burst} rows after a computed row: it would wait for '{lay.stage}' to take them, "
                                "which the rows model does not count", layer=lay.stage,
                                hint="a FIFO of the burst's rows on that stream (fifo_words)")


# ------------------------------------------------------------------------------- performance


def ddr_skip_ready(device: Device, produced: list[float], row_bytes: int) -> tuple[list[float], float]:
    """When each row of a skip held in DDR reaches its reader, and the host's busy time per frame.

    The host (graph.cpp, host/host.cpp) moves the segment row by row in two threads.  The writer
    issues row r's write (``aie2gm``, blocking) once the previous one has returned: it completes at
    ``w(r) = max(produced(r), w(r - 1) + wait + start) + B / rate_w`` (the producer's row streams into
    the interface DMA as it is made; the first write is issued before any row is made), and the host
    sees it ``wait`` later.  The reader issues row r's read (``gm2aie``, blocking until the row has
    gone) once row r is written and row r - 1 has arrived and been seen: ``i(r) = max(w(r), a(r - 1)) +
    wait + start``; the row arrives at ``a(r) = i(r) + dma + B / rate_r`` (``dma`` a DMA's buffer
    descriptor start).  Rates: the slowest of the interface DMA channel (the catalog's stream width
    per AIE cycle), the NoC link (PG313) and the DDR interface (assumed DDR4-3200 x 64); ``start`` /
    ``wait``: perf/system.py's XRT figures (assumed: a GMIO call costs what an xrt::run start and
    wait cost; no GMIO figure found).  The host's busy time per frame is the busier thread's:
    ``H max(B / rate_w + wait + start, wait + start + dma + B / rate_r)``.  Not modelled: the
    producer's stall while a write is not issued (only the skip's rows are timed) and the time the
    reader takes to drain a row before the read returns."""
    from ..perf import movement
    from ..perf.system import (
        DDR_BYTES_PER_S,
        NOC_READ_BYTES_PER_S,
        NOC_WRITE_BYTES_PER_S,
        XRT_START_NS,
        XRT_WAIT_NS,
    )

    dma_rate = device.generation.stream_bits / 8 * device.clock_hz
    rate_w = min(dma_rate, NOC_WRITE_BYTES_PER_S, DDR_BYTES_PER_S)
    rate_r = min(dma_rate, NOC_READ_BYTES_PER_S, DDR_BYTES_PER_S)
    dma = movement.DMA_START_CYCLES / device.clock_hz
    wait, start = XRT_WAIT_NS * 1e-9, XRT_START_NS * 1e-9
    out: list[float] = []
    free, arrived = 0.0, float("-inf")  # the writer free to issue; the last row's arrival
    for made in produced:
        w = max(made, free) + row_bytes / rate_w
        free = w + wait + start
        arrived = max(w, arrived) + wait + start + dma + row_bytes / rate_r
        out.append(arrived)
    per_row = max(row_bytes / rate_w + wait + start, wait + start + dma + row_bytes / rate_r)
    return out, len(produced) * per_row


def estimate_rows(plan: CnnPlan) -> perf.CnnPerformance:
    """Latency, interval and bound of the rows mapping (module docstring).

    * input PLIO row r arrives at ``(r + 1) p_in``, ``p_in`` = bytes of a row / 16 B per PL cycle;
    * parts that meet in a memory-tile row buffer (a core with fewer input stream ports than parts):
      concat row r leaves it at ``merged(r) = max(max over parts of ready(r), merged(r - 1)) + hop``,
      ``hop`` = the row's bytes / the 32-bit stream per AIE cycle (its MM2S DMA channel, which also
      bounds the interval at ``H hop``); the stage reads ``merged`` as its one part;
    * stage s computes output row oy when every part's stored row ``need(oy)`` has arrived and its
      row oy - 1 is done: ``done(oy) = max(ready, done(oy - 1)) + t_s`` (the first row adds the call
      overhead); its stored rows (``up_h`` per computed row) are ready at ``done(oy)``;
    * a skip held in DDR: its rows ready at :func:`ddr_skip_ready` (the host's round trip per row);
    * the output PLIO sends row r at ``max(ready(r), sent(r - 1)) + p_out``; latency = the last;
    * interval = the largest of the stages' ``OH t_s + call``, the PLIOs' ``H p`` and a DDR skip's host
      time (:func:`ddr_skip_ready`)."""
    d, stages = plan.device, plan.stages
    clock, pl = d.clock_hz, plan.mover_clock_hz
    first, last = stages[0], stages[-1]
    c0, h0, w0 = first.geometry.in_shape
    p_in = c0 * w0 * elem_bytes(first.in_type) / perf.PLIO_BYTES_PER_CYCLE / pl
    ready: dict[int, list[float]] = {-1: [(r + 1) * p_in for r in range(h0)]}
    busy: list[perf.StagePerf] = [perf.StagePerf("input", "plio", h0 * p_in,
                                                 f"{h0} rows of {c0 * w0 * elem_bytes(first.in_type)} B, 128-bit PLIO")]
    call = perf.KERNEL_CALL_CYCLES / clock
    for i, (s, lay) in enumerate(zip(stages, plan.layers, strict=True)):
        t = lay.row_cycles / clock
        sources = [ready[p] for p, _ in lay.parts]
        for j, nbytes in enumerate(lay.ddr_bytes):
            if nbytes:  # a skip held in DDR: its rows arrive when the host has moved them there and back
                p = lay.parts[j][0]
                sources[j], host = ddr_skip_ready(d, ready[p], nbytes // len(ready[p]))
                busy.append(perf.StagePerf(f"{s.name} skip", "ddr", host,
                                           f"{len(ready[p])} rows of {nbytes // len(ready[p]):,} B through DDR "
                                           f"(GMIO, the host's write and read threads)"))
        if lay.merged:
            _, h_in, w_in = s.geometry.in_shape
            row_bytes = sum(ch for _, ch in lay.parts) * w_in * elem_bytes(s.in_type)
            hop = row_bytes / (d.generation.core_stream_bits // 8) / clock
            merged, at = [], 0.0
            for r in range(h_in):
                at = max(max(src[r] for src in sources), at) + hop
                merged.append(at)
            sources = [merged]
            busy.append(perf.StagePerf(f"{s.name} concat", "memtile", h_in * hop,
                                       f"{h_in} rows of {row_bytes:,} B through a memory-tile row buffer "
                                       f"({lay.merge_bytes:,} B, ping and pong), {d.generation.core_stream_bits}-bit "
                                       "DMA"))
        if lay.kind == "gpool":  # each input row accumulated as it arrives, the results after the last
            h_in = s.geometry.in_shape[1]
            fin = s.out_channels * GLOBAL_POOL_FINISH_CYCLES_PER_CHANNEL / clock
            done = call
            for r in range(h_in):
                done = max(sources[0][r], done) + t
            ready[i] = [done + fin]
            busy.append(perf.StagePerf(s.name, "aie", h_in * t + fin + call,
                                       f"1 kernel, {lay.row_cycles:,.0f} cycles per input row x {h_in} rows, "
                                       f"global {s.pool} pooling"))
            continue
        conv_done: list[float] = []
        done = call
        for oy in range(s.out_hw[0]):
            n = _need(s, oy)
            avail = max((src[n] for src in sources), default=0.0) if n >= 0 else 0.0
            done = max(avail, done) + t
            conv_done.append(done)
        ready[i] = [conv_done[up_rows(s, r)[1]] for r in range(s.out_hw[0] * s.up[0])]
        busy.append(perf.StagePerf(s.name, "aie", s.out_hw[0] * t + call,
                                   f"1 kernel, {lay.row_cycles:,.0f} cycles per row x {s.out_hw[0]} rows, "
                                   f"line buffer {lay.line_rows} rows ({lay.line_bytes:,} B)"))
    c, h, w = last.out_shape
    p_out = c * w * elem_bytes(last.out_type) / perf.PLIO_BYTES_PER_CYCLE / pl
    sent = 0.0
    for r in range(h):
        sent = max(ready[len(stages) - 1][r], sent) + p_out
    busy.append(perf.StagePerf("output", "plio", h * p_out, f"{h} rows of {c * w * elem_bytes(last.out_type)} B"))
    slowest = max(busy, key=lambda p: p.seconds)
    from ..mapped.estimate import resources
    from .emit_rows import lower

    tiles, memtiles = resources(lower(plan), plan.device)  # counted on the mapped graph, as the other mappings
    return perf.CnnPerformance(sent, slowest.seconds, 1, f"{slowest.where}: {comment(slowest.stage)}", tuple(busy),
                               sum(s.macs for s in stages), tiles_used=tiles, memory_tiles_used=memtiles)
