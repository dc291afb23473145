"""A row-level reference of the rows CNN mapping's timing with each stream's room (tests only).

It imports nothing from ``aieflow``: it reads a plan's fields (stages' geometry and types, layers'
parts, row cycles, FIFO words, row buffers) and the assumed constants the test passes in, and
builds the rows of a few frames as a max-plus event graph (an event waits for each predecessor's
time plus a delay) evaluated exactly in topological order.  Its own row maps: output row ``oy``
reads input rows up to ``oy sh - pad_top + KH - 1``; an upsampling's stored row ``r`` is written
after conv row ``r // up`` (nearest) or the second row its bilinear interpolation reads (its own
coordinate transforms, ONNX Resize).  ``bounded=False``: every stream holds any number of rows
(``cnn/rows.estimate_rows``'s assumption); ``bounded=True``: a stream holds its FIFO's rows (a
memory-tile row buffer two more; a plain stream or PLIO none), so a producer's stored row ``x``
is written only once its reader has taken row ``x - room``, and a kernel computes its next row only
after its writes of the previous one returned (a full stream back-pressures the writer).
Skips held in DDR are not modelled (NotImplementedError)."""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Constants:
    call_cycles: float  # a kernel's call overhead, once per frame
    plio_bytes_per_cycle: float  # PLIO bytes per PL cycle
    gpool_finish_cycles_per_channel: float


def _bytes(t) -> int:
    name = getattr(t, "name", "")
    if name in ("fp32", "bf16"):
        return 4 if name == "fp32" else 2
    return max(1, t.container_bits // 8)


def need(s, oy: int) -> int:
    _, h, _ = s.geometry.in_shape
    return min(h - 1, oy * s.geometry.stride[0] - s.geometry.padding[0] + s.geometry.kernel[0] - 1)


def second_row(s, r: int) -> int:
    """The last conv row that stored row ``r`` of ``s`` needs."""
    n, up = s.out_hw[0], s.up[0]
    if up == 1 or s.up_mode == "nearest":
        return r // up
    if s.up_mode == "half_pixel":  # (r + 1/2) / up - 1/2, clamped at 0
        i0 = max(0, 2 * r + 1 - up) // (2 * up)
    elif s.up_mode == "align_corners":
        i0 = r * (n - 1) // max(1, n * up - 1) if n * up > 1 else 0
    elif s.up_mode == "asymmetric":
        i0 = r // up
    else:
        raise NotImplementedError(s.up_mode)
    return min(i0 + 1, n - 1)


def _global(s) -> bool:
    _, h, w = s.geometry.in_shape
    return s.kind == "pool" and s.geometry.kernel == (h, w) and not any(s.geometry.padding)


class _Graph:
    def __init__(self):
        self.preds = defaultdict(list)
        self.nodes = set()

    def edge(self, a, b, delay=0.0):
        self.nodes.update((a, b))
        self.preds[b].append((a, delay))

    def solve(self) -> dict:
        succ, indeg = defaultdict(list), dict.fromkeys(self.nodes, 0)
        for b, ps in self.preds.items():
            for a, _ in ps:
                succ[a].append(b)
                indeg[b] += 1
        todo, t = deque(n for n, k in indeg.items() if k == 0), {}
        while todo:
            n = todo.popleft()
            t[n] = max((t[a] + d for a, d in self.preds.get(n, ())), default=0.0)
            for b in succ[n]:
                indeg[b] -= 1
                if indeg[b] == 0:
                    todo.append(b)
        if len(t) != len(self.nodes):
            raise RuntimeError("deadlock: a cycle of full streams")
        return t


def simulate(plan, k: Constants, frames: int = 3, bounded: bool = True) -> tuple[float, float]:
    """``(latency, interval)`` in seconds: the first frame's last output row sent, and the spacing
    of the last two frames'."""
    stages, layers = plan.stages, plan.layers
    clock, pl = plan.device.clock_hz, plan.mover_clock_hz
    g, start = _Graph(), ("T0",)
    g.nodes.add(start)
    c0, h0, w0 = stages[0].geometry.in_shape
    p_in = c0 * w0 * _bytes(stages[0].in_type) / k.plio_bytes_per_cycle / pl
    call = k.call_cycles / clock
    rows = {-1: h0}
    for i, (s, lay) in enumerate(zip(stages, layers, strict=True)):
        rows[i] = 1 if lay.kind == "gpool" else s.out_hw[0] * s.up[0]

    def written(p, f, r):
        return ("W", p, f, r)

    for f in range(frames):  # the input PLIO, paced at its rate
        for r in range(h0):
            prev = written(-1, f, r - 1) if r else (written(-1, f - 1, h0 - 1) if f else start)
            g.edge(prev, written(-1, f, r), p_in)
    back = []  # (producer, take(f, x), room, reader's input rows)
    for i, (s, lay) in enumerate(zip(stages, layers, strict=True)):
        if lay.ddr_bytes and any(lay.ddr_bytes):
            raise NotImplementedError("a skip held in DDR")
        t = lay.row_cycles / clock
        fifo = lay.fifo_words or (0,) * len(lay.parts)
        h_in = s.geometry.in_shape[1]
        srcs = []
        for j, (p, ch) in enumerate(lay.parts):
            width = stages[p].out_shape[2] if p >= 0 else w0
            typ = stages[p].out_type if p >= 0 else stages[0].in_type
            srcs.append(
                (p, lambda f, x, p=p: written(p, f, x), fifo[j] * 4 // (ch * width * _bytes(typ)))
            )
        n_c = h_in if lay.kind == "gpool" else s.out_hw[0]
        for f in range(frames):
            g.edge(("D", i, f - 1, n_c - 1) if f else start, ("FS", i, f), call)
        if lay.merge_bytes:  # the parts meet in a memory-tile row buffer, one row per hop
            row_bytes = sum(ch for _, ch in lay.parts) * s.geometry.in_shape[2] * _bytes(s.in_type)
            hop = row_bytes / (plan.device.generation.core_stream_bits // 8) / clock
            for f in range(frames):
                for x in range(h_in):
                    for _, fn, _ in srcs:
                        g.edge(fn(f, x), ("M", i, f, x), hop)
                    prev = ("M", i, f, x - 1) if x else (("M", i, f - 1, h_in - 1) if f else None)
                    if prev:
                        g.edge(prev, ("M", i, f, x), hop)
            if bounded:
                for p, _, room in srcs:
                    back.append((p, lambda f, x, i=i: ("M", i, f, x), room + 2, h_in))
            srcs = [(None, lambda f, x, i=i: ("M", i, f, x), 0)]
        if lay.kind == "gpool":
            fin = s.out_channels * k.gpool_finish_cycles_per_channel / clock
            for f in range(frames):
                for r in range(h_in):
                    g.edge(("D", i, f, r - 1) if r else ("FS", i, f), ("S", i, f, r))
                    for _, fn, _ in srcs:
                        g.edge(fn(f, r), ("S", i, f, r))
                    g.edge(("S", i, f, r), ("D", i, f, r), t)
                g.edge(("D", i, f, h_in - 1), written(i, f, 0), fin)

            def take(f, x, i=i):
                return ("D", i, f, x - 1) if x else ("FS", i, f)
        else:
            for f in range(frames):
                for c in range(n_c):
                    g.edge(("D", i, f, c - 1) if c else ("FS", i, f), ("S", i, f, c))
                    if need(s, c) >= 0:
                        for _, fn, _ in srcs:
                            g.edge(fn(f, need(s, c)), ("S", i, f, c))
                    g.edge(("S", i, f, c), ("D", i, f, c), t)
                for r in range(rows[i]):
                    c = second_row(s, r)
                    g.edge(("D", i, f, c), written(i, f, r))
                    if bounded and c + 1 < n_c:  # its next row after the writes returned
                        g.edge(written(i, f, r), ("S", i, f, c + 1))
            first = {}  # input row -> the first output row that reads it
            for c in range(n_c - 1, -1, -1):
                for x in range(need(s, c) + 1):
                    first[x] = c

            def take(f, x, first=first, i=i, n_c=n_c):
                c = first.get(x)
                if c is None:
                    return ("D", i, f, n_c - 1)
                return ("D", i, f, c - 1) if c else ("FS", i, f)

        if bounded:
            for p, _, room in srcs:
                if p is None:  # the row buffer drains into the one port as the kernel takes rows
                    for f in range(frames):
                        for x in range(h_in):
                            g.edge(take(f, x), ("M", i, f, x))
                else:
                    back.append((p, take, room, h_in))
    last = len(stages) - 1
    c, h, w = stages[-1].out_shape
    p_out = c * w * _bytes(stages[-1].out_type) / k.plio_bytes_per_cycle / pl
    for f in range(frames):
        for r in range(h):
            prev = ("O", f, r - 1) if r else (("O", f - 1, h - 1) if f else None)
            g.edge(written(last, f, r), ("O", f, r), p_out)
            if prev:
                g.edge(prev, ("O", f, r), p_out)
            if bounded:
                g.edge(prev or start, written(last, f, r))
    for p, take, room, h_in in back:  # row x written once the reader took row x - room
        for f in range(frames):
            for x in range(rows[p]):
                ff, y = f, x - room
                if y < 0:
                    ff, y = f - 1, h_in + y
                    if ff < 0 or y < 0:
                        continue
                g.edge(take(ff, y), written(p, f, x))
    t = g.solve()
    outs = [t[("O", f, h - 1)] for f in range(frames)]
    return outs[0], outs[-1] - outs[-2]
