"""Latency model of a recurrent mapping: one time step as a pipeline with a loop-carried edge.

Stages (AIE cycles; each built from ``perf/movement.py`` primitives and ``costs.py``):

    W x path (outside the loop, runs ahead on the next x):
      front<i>   a Conv1d front end's kernel i (front.py), per output step: its input steps in,
                 the scalar loops of its outputs; the window's lookahead is its delay
      w_mac      x over its PLIO, broadcast to the W kernels, their MACs and reductions
      w_route    W results as packets through the merges (to the PL, or the aggregator's ports)
    loop (step t needs h_{t-1}):
      h_in       h to the U kernels: hybrid, the PL writes the zero-padded h through one PLIO
                 ("return") and the switch broadcasts it ("broadcast"); aie, the aggregator's
                 stream broadcast ("broadcast")
      u_mac      U h after the last h word: the first row ends as the stream delivers, later rows
                 reuse the vector ("mac"); lane reductions or cascade ("reduction")
      route      packets through the merges, header + payload words serialised on each merged
                 stream, whatever the fan-in; hybrid at the PLIO's rate ("routing")
      aggregate  hybrid: the PL FSM at the PL clock (the last burst's rows through its pipeline);
                 aie: the aggregator's packet handling not hidden behind the routing, its W
                 packets beyond its idle time, and the gate math ("aggregation")

After the last step the dense head runs once in the aggregation epilogue (``head``: the AIE
aggregator's core, or the PL FSM at the PL clock, then the output words leave); it adds to the
sequence latency only, the FSM / aggregator take the next sample's first step after it.

The estimate of one layer (:func:`estimate_recurrent`) runs these stages as the stage graph of the
layer's mapped graph (``lower.costed``, :func:`mapped_cycles`): the W path and the U h path meet at
``aggregate``, the h return ``aggregate -> h_in`` is a recurrence, and step 0 has no h return (the
U kernels start from h = 0), so the first step is ``max(W path, u_mac + route) + aggregate``; the
interval is the loop's own latency unless the W path is slower (then latency grows with the input
size).  The search costs the same in closed form (:func:`graph_cycles`).  A compact or grid
layer (behind a Conv1d front end too: its front stages, then x over a stream into the tile(s)) and
a stack (``stack.estimate_stack``) run the stage graph of their mapped graph (:func:`mapped_cycles`,
:func:`stack_cycles`), the search included.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..devices import Device, get_device
from ..mapped.ir import Cost
from ..perf import movement as mv
from ..perf.simulate import run_pipeline
from . import front as fr
from .costs import (
    AGG_PACKET_CYCLES,
    AIE_HEAD_MAC_CYCLES,
    AIE_HEAD_OUT_CYCLES,
    COMPACT_STATE_COPY_CYCLES,
    PL_MERGE_II,
    ROW_LOOP_CYCLES,
    SPLIT_EXCHANGES,
    KernelTime,
    aie_gate_math_cycles,
    aie_head_cycles,
    chunk_cycles,
    column_chain,
    compact_gate_cycles,
    compact_head_cycles,
    compact_product_cycles,
    lanes,
    pl_fsm_depth,
    pl_head_cycles,
    row_kernel,
    split_exchange_cycles,
)
from .plan import MatvecMapping, RecurrentDims, RecurrentMapping, output_kernel

PARTS = ("return", "broadcast", "mac", "reduction", "routing", "aggregation")
WORD_BYTES = 4


@dataclass(frozen=True)
class StepStage:
    """One stage of the step, in AIE cycles: ``occupancy + delay`` is what it adds to the path,
    split into breakdown ``parts``; ``words`` is the data it moves and ``rate`` its slowest
    link in words per cycle (both 0 for compute)."""

    name: str
    kind: str
    bound: str
    occupancy: float
    delay: float
    parts: Mapping[str, float]
    words: float = 0.0
    rate: float = 0.0
    tiles: int = 0


@dataclass(frozen=True)
class RecurrentPerformance:
    mapping: RecurrentMapping
    step_latency_ns: float  # the loop's critical path: sum of the breakdown
    breakdown_ns: Mapping[str, float]  # PARTS, in order
    interval_ns: float  # steady-state time per step (what TVALID-to-TVALID measures)
    sequence_latency_ns: float  # one sample: fill + seq_len x interval + head
    fill_ns: float
    steps: int
    tiles: int
    interface_tiles: int
    bound: str  # "recurrence: <largest part>" or "input path: <stage> (<its bound>)"
    input_path_ns: Mapping[str, float]  # W path stages' occupancy per step
    stages: tuple[StepStage, ...]  # W path then loop
    head_ns: float = 0.0  # the dense head and the output words after the last step (epilogue)
    head_breakdown_ns: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # "head" compute, "output" words

    def to_json(self) -> dict[str, Any]:
        return {**sequence_json(self), "input_path_ns": dict(self.input_path_ns)}


def _kernel(m: MatvecMapping, k: int, arrival: float, device: Device, dims: RecurrentDims, product: str) -> KernelTime:
    kind = dims.kernel(product, m.distribution)  # what the emitted kernel runs: vector or scalar
    if m.distribution == "row":
        return row_kernel(m.rows, k, arrival, device, dims.pair, kind)
    return column_chain(m.rows, k, m.cas_len, arrival, device, dims.pair, kind)


def _padded_bytes(n: int, device: Device, pair: tuple[str, str]) -> int:
    """A vector zero-padded to whole lane groups (the kernels read it by vectors), as it travels:
    one 32-bit word per element whatever the type: fp32 as itself, bf16 as float words holding
    bf16 values (rnn_kernels.h), fixed-point codes as int32 (the emitted streams and PLIOs carry
    int32 codes whatever the type's width)."""
    lane = lanes(device.generation, pair)
    return math.ceil(n / lane) * lane * WORD_BYTES


def _drain(burst: float, total: float, spacing_window: float) -> float:
    """Time after the last burst starts until a serial resource has handled everything: the last
    burst, or the backlog when earlier bursts came faster than it could handle them."""
    return max(burst, total - spacing_window)


def _x_in(mapping: RecurrentMapping, device: Device, rows: int) -> StepStage:
    """x_t into a compact tile or a grid's W x partners (``rows`` up the array from the
    interface row), n_in words unpadded: through the x PLIO; behind a Conv1d front end, over the
    array's streams from the last front kernel in the column before the layer's (one hop across,
    ``rows`` up: the row-wise W x stream's count, ``step_stages``)."""
    x_bytes = mapping.dims.n_in * WORD_BYTES
    if mapping.dims.front:
        x = mv.stream_transfer(x_bytes, device, rows + 1)
        kind, rate = "stream", mv.core_stream_bytes_per_cycle(device) / WORD_BYTES
    else:
        x = mv.plio_stream_transfer(x_bytes, device, device.memory_tile_rows + rows, mapping.plio_bits)
        kind, rate = "plio", mv.plio_stream_bytes_per_cycle(device, mapping.plio_bits) / WORD_BYTES
    return StepStage("x_in", kind, x.bound, x.busy_cycles, x.latency_cycles,
                     MappingProxyType({"x_in": x.busy_cycles + x.latency_cycles}), words=mapping.dims.n_in, rate=rate)


def compact_stages(mapping: RecurrentMapping, device: Device) -> tuple[tuple[StepStage, ...], tuple[StepStage, ...]]:
    """The compact tile's step (rnn_compact.h): the W path is the Conv1d front end's stages
    (:func:`front_stages`), if any, then x_t arriving, n_in words unpadded (:func:`_x_in`: through
    its PLIO, or over a stream from the last front kernel; a stacked layer's x comes by stream from
    the previous layer: costed as a PLIO too, conservatively, as the spread mappings' stacks are;
    the stream FIFO holds x_t until the tile reads it); the loop is one stage, the tile's core: x_t
    read one word per cycle ("broadcast"), the W x and U h MACs ("mac"), their vector finish
    ("reduction"), the gate math and h copied for the next step ("aggregation").  Its recurrence
    is itself (h stays in the tile).  A front end before a compact layer is modelled, not
    generated (``plan._tile_limits``)."""
    dims, pair = mapping.dims, mapping.dims.pair
    x_in = _x_in(mapping, device, mapping.u_rows)
    rows = dims.gates * dims.n_h
    fu, fw = dims.finish_ops if dims.fixed else (0, 0)
    u_mac, u_fin = compact_product_cycles(rows, dims.n_h, device, pair, dims.kernel("u", "compact"), fu)
    w_mac, w_fin = compact_product_cycles(rows, dims.n_in, device, pair, dims.kernel("w", "compact"), fw)
    read = dims.n_in * WORD_BYTES / mv.core_stream_bytes_per_cycle(device)
    gates = compact_gate_cycles(dims.cell, dims.n_h, pair, dims.gate_form) + dims.n_h * COMPACT_STATE_COPY_CYCLES
    parts = {"broadcast": read, "mac": u_mac + w_mac, "reduction": u_fin + w_fin, "aggregation": gates}
    cell = StepStage("cell", "kernel", "compute", sum(parts.values()), 0.0, MappingProxyType(parts), tiles=1)
    return (*front_stages(mapping, device), x_in), (cell,)


def grid_stages(mapping: RecurrentMapping, device: Device) -> tuple[tuple[StepStage, ...], tuple[StepStage, ...]]:
    """The generated grid mapping's step (rnn_grid.h; ``grid.grid_step``'s parts): the W path is
    the Conv1d front end's stages (:func:`front_stages`), if any, then x_t (:func:`_x_in`: through
    its PLIO, or over a stream from the last front kernel), then the W x partners (x read, W x of
    the chain's rows, the finish, gx written on the cascade: ``grid_step``'s fill less its x PLIO),
    which run a step ahead; the loop is one stage, a chain (U h over each tile's column block, the
    partial sums down the cascade, the gate tile's finish, the gate math of its units and the gx
    read, the h exchange through the merge), whose recurrence is itself and the other chains'.  A
    front end before a grid layer is modelled, not generated (``plan._tile_limits``)."""
    from .grid import grid_step

    dims = mapping.dims
    g = grid_step(dims, device, mapping.chains, mapping.chain_len, mapping.gate_cycles or None, mapping.plio_bits)
    x = mv.plio_stream_transfer(dims.n_in * WORD_BYTES, device, device.memory_tile_rows + 1, mapping.plio_bits)
    fill = g.fill_ns * device.clock_hz / 1e9 - x.busy_cycles - x.latency_cycles  # grid_step's fill: x PLIO + partner
    partner = StepStage("w_partner", "kernel", "compute", fill, 0.0, MappingProxyType({"w_partner": fill}),
                        tiles=mapping.w_tiles)
    cell = StepStage("grid", "kernel", "compute", g.cycles, 0.0, g.parts, tiles=mapping.u_tiles + mapping.aggregator_tiles)
    return (*front_stages(mapping, device), _x_in(mapping, device, 1), partner), (cell,)


@dataclass(frozen=True)
class SplitStep:
    """One time step of the split mapping (issue 22; modelled, **not generated**): the compact
    cell's hidden units over ``split`` tiles with h all-gathered every step (costs.py, "split").
    ``parts`` are PARTS in AIE cycles of the slowest tile: broadcast = x_t read, mac = its U h
    (and W x unless ``w_ahead``), reduction = their vector finish, aggregation = its units' gate
    math + h copied to lane type (+ the W partner's lock hand-off), routing = the exchange."""

    split: int
    exchange: str
    w_ahead: bool  # W x on a partner tile per split tile (T more tiles), written ahead into memory
    units: int  # hidden units of the slowest tile
    tiles: int
    parts: Mapping[str, float]
    cycles: float  # one step: the sum of parts
    step_ns: float
    fill_ns: float  # x_0's arrival (and, w_ahead, the partner's first W x)
    head_ns: float  # the dense head on one tile after the last step, as the compact tile's, + output
    sequence_ns: float  # fill + seq_len x step + head


def split_step(dims: RecurrentDims, device: Device | str, split: int, exchange: str = "memory",
               w_ahead: bool = False, gate_cycles: float | None = None, plio_bits: int = mv.PLIO_BITS) -> SplitStep:
    """The split mapping's step, from the compact tile's counts (compact_product_cycles for G u
    rows, the finish's counted ops) and the exchange (split_exchange_cycles).  ``gate_cycles``:
    the gate math of u units (compact.split_gate_cycles, the generator's schedule); needed where
    the layer has a vector gate form, else the scalar / float count of compact_gate_cycles."""
    device = get_device(device)
    if exchange not in SPLIT_EXCHANGES:
        raise ValueError(f"exchange {exchange!r}: one of {', '.join(SPLIT_EXCHANGES)}")
    if not 1 <= split <= dims.n_h:
        raise ValueError(f"split {split}: 1..{dims.n_h} tiles (hidden {dims.n_h})")
    pair = dims.pair
    units = math.ceil(dims.n_h / split)
    if gate_cycles is None:
        if dims.gate_form:
            raise ValueError("a vector gate form: give gate_cycles (compact.split_gate_cycles)")
        gate_cycles = compact_gate_cycles(dims.cell, units, pair, ())
    rows = dims.gates * units
    fu, fw = dims.finish_ops if dims.fixed else (0, 0)
    u_mac, u_fin = compact_product_cycles(rows, dims.n_h, device, pair, dims.kernel("u", "compact"), fu)
    w_mac, w_fin = compact_product_cycles(rows, dims.n_in, device, pair, dims.kernel("w", "compact"), fw)
    read = dims.n_in * WORD_BYTES / mv.core_stream_bytes_per_cycle(device)
    handoff = mv.LOCK_ACQUIRE_CYCLES + mv.LOCK_RELEASE_CYCLES
    parts = {
        "return": 0.0,
        "broadcast": 0.0 if w_ahead else read,
        "mac": u_mac + (0.0 if w_ahead else w_mac),
        "reduction": u_fin + (0.0 if w_ahead else w_fin),
        "routing": split_exchange_cycles(exchange, split, units, dims.n_h, device, pair),
        "aggregation": gate_cycles + units * COMPACT_STATE_COPY_CYCLES + (handoff if w_ahead else 0.0),
    }
    parts = {k: float(parts[k]) for k in PARTS}
    cycles = sum(parts.values())
    x = mv.plio_stream_transfer(dims.n_in * WORD_BYTES, device, device.memory_tile_rows + 1, plio_bits)
    fill = x.busy_cycles + x.latency_cycles + ((read + w_mac + w_fin + handoff) if w_ahead else 0.0)
    n_y = dims.head[-1] if dims.head else dims.n_h
    out = mv.plio_stream_transfer(n_y * WORD_BYTES, device, 0, plio_bits)
    head = compact_head_cycles(dims.n_h, dims.head, dims.head_form, pair) + out.busy_cycles + out.latency_cycles
    ns = 1e9 / device.clock_hz
    return SplitStep(split, exchange, w_ahead, units, split * (2 if w_ahead else 1), MappingProxyType(parts), cycles,
                     cycles * ns, fill * ns, head * ns, (fill + dims.seq_len * cycles + head) * ns)


def step_stages(mapping: RecurrentMapping, device: Device | str) -> tuple[tuple[StepStage, ...], tuple[StepStage, ...]]:
    """(W path stages, loop stages) of one time step."""
    device = get_device(device)
    if mapping.compact:
        return compact_stages(mapping, device)
    if mapping.grid:
        return grid_stages(mapping, device)
    dims, pair, gen = mapping.dims, mapping.dims.pair, device.generation
    hybrid = mapping.aggregation == "hybrid"
    u, w = mapping.recurrent, mapping.input
    memrows = device.memory_tile_rows
    stream_words = mv.core_stream_bytes_per_cycle(device) / WORD_BYTES
    plio_words = mv.plio_stream_bytes_per_cycle(device, mapping.plio_bits) / WORD_BYTES
    link_words = plio_words if hybrid else stream_words  # merged streams end at the PL or the aggregator

    def link_busy(words: float) -> float:
        if hybrid:
            return mv.plio_stream_transfer(words * WORD_BYTES, device, 0, mapping.plio_bits).busy_cycles
        return mv.stream_transfer(words * WORD_BYTES, device).busy_cycles

    # ---- W path (after the convolution front end, if any)
    front = front_stages(mapping, device)
    x_bytes = _padded_bytes(dims.n_in, device, pair)
    x_hops = memrows + mapping.w_rows + mapping.w_columns // 2
    if front:  # x comes from the last front kernel over the array's streams
        x = mv.stream_transfer(x_bytes, device, mapping.w_rows + mapping.w_columns // 2 + 1)
    else:
        x = mv.plio_stream_transfer(x_bytes, device, x_hops, mapping.plio_bits)
    wk = _kernel(w, dims.n_in, x.busy_cycles, device, dims, "w")
    w_mac = StepStage(
        "w_mac", "kernel", x.bound, x.busy_cycles + wk.cycles, x.latency_cycles,
        MappingProxyType({"x_in": x.busy_cycles + x.latency_cycles, "mac": wk.mac, "reduction": wk.reduction}),
        words=x_bytes / WORD_BYTES, rate=stream_words if front else plio_words, tiles=mapping.w_tiles,
    )
    w_pk, w_wpp = w.packets()
    w_words = mv.packet_stream_words(w_wpp, mapping.w_fanin * w_pk)  # per merged stream / port
    w_hops = memrows + mapping.w_rows if hybrid else mapping.w_rows + (mapping.w_columns + mapping.u_columns) // 2
    w_link = link_busy(w_words)
    w_route = StepStage(
        "w_route", "stream", "plio" if hybrid and plio_words < stream_words else "stream", w_link,
        mv.STREAM_FIXED_CYCLES + w_hops * mv.SWITCH_HOP_CYCLES,
        MappingProxyType({"routing": w_link + mv.STREAM_FIXED_CYCLES + w_hops * mv.SWITCH_HOP_CYCLES}),
        words=w_words, rate=link_words,
    )

    # ---- loop: h in
    h_bytes = _padded_bytes(dims.n_h, device, pair)
    b_hops = mapping.u_rows + mapping.u_columns // 2 + (memrows if hybrid else 0)
    if hybrid:
        ret = mv.plio_stream_transfer(h_bytes, device, 0, mapping.plio_bits)
        hop = b_hops * mv.SWITCH_HOP_CYCLES
        h_in = StepStage(
            "h_in", "plio", ret.bound, ret.busy_cycles, ret.latency_cycles + hop,
            MappingProxyType({"return": ret.busy_cycles + ret.latency_cycles, "broadcast": hop}),
            words=h_bytes / WORD_BYTES, rate=plio_words,
        )
    else:
        bc = mv.stream_transfer(h_bytes, device, b_hops)
        h_in = StepStage(
            "h_in", "stream", "stream", bc.busy_cycles, bc.latency_cycles,
            MappingProxyType({"broadcast": bc.busy_cycles + bc.latency_cycles}),
            words=h_bytes / WORD_BYTES, rate=stream_words,
        )

    # ---- loop: U h
    uk = _kernel(u, dims.n_h, h_in.occupancy, device, dims, "u")
    u_mac = StepStage(
        "u_mac", "kernel", "compute", uk.cycles, 0.0,
        MappingProxyType({"mac": uk.mac, "reduction": uk.reduction}), tiles=mapping.u_tiles,
    )

    # ---- loop: routing (per merged stream / port; they run in parallel)
    u_pk, u_wpp = u.packets()
    burst_words = mv.packet_stream_words(u_wpp, mapping.u_fanin)  # the last row of each source
    total_words = mv.packet_stream_words(u_wpp, mapping.u_fanin * u_pk)
    window = (u_pk - 1) * uk.packet_spacing  # earlier rows' packets leave this much earlier
    routing = _drain(link_busy(burst_words), link_busy(total_words), window)
    if not hybrid:  # W packets share the aggregator's ports; they flow while h_in and u_mac run
        routing += max(0.0, w_link - (h_in.occupancy + h_in.delay + u_mac.occupancy))
    r_hops = memrows + mapping.u_rows if hybrid else mapping.u_rows + mapping.u_columns // 2
    r_lat = mv.STREAM_FIXED_CYCLES + r_hops * mv.SWITCH_HOP_CYCLES
    route = StepStage(
        "route", "stream", "plio" if hybrid and plio_words < stream_words else "stream", routing, r_lat,
        MappingProxyType({"routing": routing + r_lat}), words=burst_words, rate=link_words,
    )

    # ---- loop: aggregation
    if hybrid:
        fsm = mv.pl_kernel_transfer(fsm_items(mapping), PL_MERGE_II, pl_fsm_depth(dims.cell, pair), device)
        aggregate = StepStage(
            "aggregate", "pl", "pl", fsm.busy_cycles, fsm.latency_cycles,
            MappingProxyType({"aggregation": fsm.busy_cycles + fsm.latency_cycles}),
        )
    else:
        u_src = u.sources(dims)
        per_packet = AGG_PACKET_CYCLES + u_wpp - 1
        core = _drain(u_src * per_packet, u_src * u_pk * per_packet, window)
        w_core = w.sources(dims) * w_pk * (AGG_PACKET_CYCLES + w_wpp - 1)
        idle = u_mac.occupancy + h_in.delay + route.delay  # the core waits for U packets then
        work = max(0.0, core - routing) + max(0.0, w_core - idle) + aie_gate_math_cycles(dims.cell, dims.n_h, gen, pair)
        aggregate = StepStage(
            "aggregate", "kernel", "compute", work, 0.0, MappingProxyType({"aggregation": work}), tiles=1,
        )
    return (*front, w_mac, w_route), (h_in, u_mac, route, aggregate)


def fsm_items(mapping: RecurrentMapping) -> int:
    """Items a hybrid layer's PL FSM takes per step after the last U h packets arrive: the rows
    the last packet of each source on a merged stream completes (the lowering's ``PLKernel.items``)."""
    u = mapping.recurrent
    rows_last = 1 if u.distribution == "row" else u.rows  # rows each source's last packet completes
    return math.ceil(mapping.u_fanin / mapping.dims.gates) * rows_last


def front_stages(mapping: RecurrentMapping, device: Device) -> tuple[StepStage, ...]:
    """One stage per convolution of the front end (``front.py``), per output step (= one step of
    the layer): reading the input steps it consumes (the first from the x PLIO, later ones from the
    previous kernel's stream), the scalar loops of its outputs (the head's per-product and
    per-output costs), writing them.  The input steps an output's window reaches ahead (the
    first output waits for them) are its delay."""
    out = []
    for i, d in enumerate(mapping.dims.front):
        in_bytes = d.c_in * WORD_BYTES
        if i == 0:
            read = mv.plio_stream_transfer(in_bytes, device, device.memory_tile_rows + 1, mapping.plio_bits)
            rate = mv.plio_stream_bytes_per_cycle(device, mapping.plio_bits) / WORD_BYTES
        else:
            read = mv.stream_transfer(in_bytes, device, 1)
            rate = mv.core_stream_bytes_per_cycle(device) / WORD_BYTES
        per_output_reads = fr.steps_per_output(d) * read.busy_cycles
        pair = (f"i{d.input_bits}", f"i{d.weight_bits}")
        compute = fr.output_step_cycles(d, AIE_HEAD_MAC_CYCLES["fixed"], AIE_HEAD_OUT_CYCLES["fixed"], ROW_LOOP_CYCLES,
                                        chunk_cycles(device.generation, pair, vector_operand=False))
        ahead = fr.lookahead_steps(d) * read.busy_cycles + read.latency_cycles
        out.append(StepStage(
            f"front{i}", "kernel", "compute" if compute >= per_output_reads else read.bound, per_output_reads + compute, ahead,
            MappingProxyType({"x_in": per_output_reads, "front": compute}), words=d.c_in * fr.steps_per_output(d),
            rate=rate, tiles=1,
        ))
    return tuple(out)


def head_stage(mapping: RecurrentMapping, device: Device | str) -> StepStage:
    """The epilogue after the last step, in AIE cycles: the dense head (``dims.head``; none: the
    output is h itself) as emitted, then its output words leave.  hybrid: the FSM computes it at
    the PL clock and writes ``y_out`` two words per 64-bit beat; aie: the aggregator core
    computes it and streams ``y`` out through a PLIO."""
    device = get_device(device)
    dims, pair = mapping.dims, mapping.dims.pair
    n_y = dims.head[-1] if dims.head else dims.n_h
    if mapping.aggregation == "hybrid":
        ratio = device.clock_hz / device.pl_clock_hz
        compute = math.ceil(pl_head_cycles(dims.n_h, dims.head, pair) * ratio)
        out = math.ceil(math.ceil(n_y / 2) * ratio)
    else:  # the AIE aggregator's core (or its output kernel), or the compact tile (its vector head where it has one)
        compute = (compact_head_cycles(dims.n_h, dims.head, dims.head_form, pair) if mapping.compact or mapping.grid
                   else aie_head_cycles(dims.n_h, dims.head, pair))
        if mapping.grid:  # the head tile reads the last step's packets (one per chain) first
            word = mv.core_stream_bytes_per_cycle(device) / WORD_BYTES
            compute += (mv.packet_stream_words(mapping.recurrent.rows, mapping.chains) / word + mv.STREAM_FIXED_CYCLES
                        + mv.SWITCH_HOP_CYCLES)
        t = mv.plio_stream_transfer(n_y * WORD_BYTES, device, 0, mapping.plio_bits)
        out = t.busy_cycles + t.latency_cycles
    parts = {"head": compute, "output": out}
    relay = relay_stage(mapping, device)
    if relay is not None:  # the last h reaches the output kernel first
        parts = {"relay": relay.occupancy + relay.delay, **parts}
    return StepStage("head", "pl" if mapping.aggregation == "hybrid" else "kernel", "compute",
                     compute + parts.get("relay", 0.0), out, MappingProxyType(parts), words=n_y)


def relay_stage(mapping: RecurrentMapping, device: Device | str) -> StepStage | None:
    """The output kernel's hop (``plan.output_kernel``: a core with one output stream port), None
    without one: the aggregator's h words (zero-padded, as the U kernels read them) over a stream
    into the output kernel on the tile beside it (one switch hop), read one word per stream cycle
    (``movement.stream_transfer``; every element a 32-bit word: ``AggOutput`` reads ``X``, float or
    int32 codes, bf16 included).  Its output words then leave as the aggregator's did (the head
    stage's ``output``, or the next layer's x)."""
    device = get_device(device)
    if mapping.compact or mapping.grid or not output_kernel(mapping.aggregation, device):
        return None
    dims = mapping.dims
    lane = lanes(device.generation, dims.pair)
    h_bytes = math.ceil(dims.n_h / lane) * lane * WORD_BYTES  # AggCfg::NHP words of X (float or int32 codes; bf16 as float words)
    t = mv.stream_transfer(h_bytes, device, 1)
    return StepStage("relay", "stream", t.bound, t.busy_cycles, t.latency_cycles,
                     MappingProxyType({"relay": t.busy_cycles + t.latency_cycles}), words=h_bytes / WORD_BYTES,
                     rate=mv.core_stream_bytes_per_cycle(device) / WORD_BYTES, tiles=1)


def _summary(
    mapping: RecurrentMapping,
    device: Device,
    stages: tuple[tuple[StepStage, ...], tuple[StepStage, ...]],
    interval_cycles: float,
    seq_cycles: float,
) -> RecurrentPerformance:
    w_path, loop = stages
    ns = lambda c: mv.cycles_to_ns(c, device)  # noqa: E731
    breakdown = {p: 0.0 for p in PARTS}
    for s in loop:
        for k, v in s.parts.items():
            breakdown[k] += v
    step = sum(s.occupancy + s.delay for s in loop)
    if interval_cycles > step * (1 + 1e-9):
        neck = max(w_path, key=lambda s: s.occupancy)
        bound = f"input path: {neck.name} ({neck.bound})"
    else:
        bound = "recurrence: " + max(PARTS, key=lambda p: breakdown[p])
    steps = mapping.dims.seq_len
    head = head_stage(mapping, device)
    return RecurrentPerformance(
        mapping=mapping,
        step_latency_ns=ns(step),
        breakdown_ns=MappingProxyType({k: ns(v) for k, v in breakdown.items()}),
        interval_ns=ns(interval_cycles),
        sequence_latency_ns=ns(seq_cycles + head.occupancy + head.delay),
        fill_ns=ns(seq_cycles - steps * interval_cycles),
        steps=steps,
        tiles=mapping.tiles,
        interface_tiles=mapping.interface_tiles,
        bound=bound,
        input_path_ns=MappingProxyType({s.name: ns(s.occupancy) for s in w_path}),
        stages=(*w_path, *loop),
        head_ns=ns(head.occupancy + head.delay),
        head_breakdown_ns=MappingProxyType({k: ns(v) for k, v in head.parts.items()}),
    )


def estimate_closed(mapping: RecurrentMapping, device: Device | str) -> RecurrentPerformance:
    """The search's costing of one layer (``select.mapping_point``): row- and column-wise, the
    stage graph's timing in closed form (:func:`graph_cycles`); compact and grid, their stage graph
    (:func:`mapped_cycles`, memoised; behind a Conv1d front end too).  The head follows the last
    step."""
    device = get_device(device)
    stages = step_stages(mapping, device)
    interval, _, seq = search_cycles(mapping, device, stages)[1:]
    return _summary(mapping, device, stages, interval, seq)


def search_cycles(mapping: RecurrentMapping, device: Device,
                  stages: tuple[tuple[StepStage, ...], tuple[StepStage, ...]]) -> tuple[float, float, float, float]:
    """(step latency, interval, completion of the first step, completion of step ``seq_len``) in
    cycles, as the search costs them (:func:`estimate_closed`)."""
    steps = mapping.dims.seq_len
    step = sum(s.occupancy + s.delay for s in stages[1])  # the loop's critical path
    if not (mapping.compact or mapping.grid):
        return graph_cycles(stages, steps)
    interval, first, seq = mapped_cycles(mapping, device)
    return step, interval, first, seq


def closed_cycles(stages: tuple[tuple[StepStage, ...], tuple[StepStage, ...]], steps: int) -> tuple[float, float, float]:
    """(step latency, interval, sequence latency) in cycles of the step chain (the W path ahead of
    the loop, so the first step passes both), in closed form: the upper end of a stack's bounds
    (``stack.stack_bounds``)."""
    w_path, loop = stages
    step = sum(s.occupancy + s.delay for s in loop)
    interval = max(step, *(s.occupancy for s in w_path))
    first = sum(s.occupancy + s.delay for s in w_path) + step
    return step, interval, first + (steps - 1) * interval


def graph_cycles(stages: tuple[tuple[StepStage, ...], tuple[StepStage, ...]], steps: int) -> tuple[float, float, float, float]:
    """(step latency, interval, completion of the first step, completion of step ``steps``) in
    cycles of a row- or column-wise layer's stage graph (``lower.costed``), in closed form, for
    the search: the W path (a tandem of stages, the host supplying x at will) and the U path
    (``h_in``, ``u_mac``, ``route``) meet at ``aggregate``; step 0 has no h return (the U kernels
    start from h = 0) and step t + 1's ``h_in`` waits for step t's ``aggregate``, so with ``F(s)``
    a stage's occupancy + delay::

        W_t    = F(W path) + t x max(occupancy of the W path)
        done_0 = max(W_0, F(u_mac) + F(route)) + F(aggregate)
        done_t = max(W_t, done_{t-1} + F(h_in) + F(u_mac) + F(route)) + F(aggregate)

    the interval is the larger of the loop and the W path's busiest stage.  The stage graph's
    simulation equals it (tested on every candidate of the tests' searches)."""
    w_path, loop = stages
    f = {s.name: s.occupancy + s.delay for s in loop}
    step = sum(f.values())
    w_full, w_max = sum(s.occupancy + s.delay for s in w_path), max(s.occupancy for s in w_path)
    done = max(w_full, f["u_mac"] + f["route"]) + f["aggregate"]
    first = done
    for t in range(1, steps):
        done = max(w_full + t * w_max, done + f["h_in"] + f["u_mac"] + f["route"]) + f["aggregate"]
    return step, max(step, w_max), first, done


def _stage_cost(s: StepStage, device: Device) -> Cost:
    return Cost(s.name, s.kind, s.bound, mv.cycles_to_ns(s.occupancy, device), mv.cycles_to_ns(s.delay, device),
                s.tiles, s.occupancy)


def mapped_costs(mapping: RecurrentMapping, device: Device, inner: bool = False) -> dict[str, Cost]:
    """The step's stages as ``mapped.ir.Cost`` s by stage name (``lower.costed`` attaches them to
    the mapped graph's kernels, PLIOs, links and PL kernels), and the stages that do nothing per
    step: ``head_tile`` (the grid's head tile: it reads every step's packets while the chains run
    the next step; its read of the last step's is in :func:`head_stage`), ``y_out`` (the output
    words leave once, after the last step: :func:`head_stage`), ``output`` (the last layer's output
    kernel: its relay of the last h is in :func:`head_stage`) and ``to_pl`` (a hybrid layer's
    to-PL PLIOs: the routing stages are costed at the PLIO's rate).  ``inner``: the layer feeds
    another, so its output kernel carries its relay (:func:`relay_stage`) every step."""
    w_path, loop = step_stages(mapping, device)
    out = {s.name: _stage_cost(s, device) for s in (*w_path, *loop)}
    out["head_tile"] = Cost("head_tile", "kernel", "compute", 0.0, tiles=1)
    out["y_out"] = Cost("y_out", "plio", "plio", 0.0)
    out["to_pl"] = Cost("to_pl", "plio", "plio", 0.0)
    relay = relay_stage(mapping, device)
    if relay is not None:
        out["relay" if inner else "output"] = _stage_cost(relay, device) if inner else Cost("output", "kernel", "compute", 0.0, tiles=1)
    return out


def mapped_cycles(mapping: RecurrentMapping, device: Device, cache: bool = True) -> tuple[float, float, float]:
    """(interval, completion of the first step, completion of step ``seq_len``) in cycles:
    ``mapped.estimate.stage_graph`` of the layer's lowered, costed mapped graph (``lower.costed``)
    run over ``seq_len`` steps (at least 16, to measure the interval): :func:`stack_cycles` of
    the one layer."""
    return stack_cycles((mapping,), device, cache)


def stack_cycles(mappings: Sequence[RecurrentMapping], device: Device, cache: bool = True) -> tuple[float, float, float]:
    """:func:`stage_graph_cycles` of ``mappings`` (one layer, or a stack), memoised.

    Memoised (the search costs each candidate once, the chosen one's design estimate again):
    ``Device`` is unhashable, so the key is the catalog key with the (frozen, hashable) mappings,
    and only a catalog device is cached (a device changed with ``dataclasses.replace`` keeps its
    key but not its figures: it is costed afresh).  ``cache=False`` costs afresh."""
    from ..devices import DEVICES

    if cache and DEVICES.get(device.key) is device:
        return _mapped_cycles_memo(device.key, tuple(mappings))
    return stage_graph_cycles(tuple(mappings), device)


@functools.lru_cache(maxsize=4096)
def _mapped_cycles_memo(key: str, mappings: tuple[RecurrentMapping, ...]) -> tuple[float, float, float]:
    return stage_graph_cycles(mappings, get_device(key))


def stage_graph_cycles(mappings: Sequence[RecurrentMapping], device: Device) -> tuple[float, float, float]:
    """(interval, completion of the first step, completion of step ``seq_len``) in cycles of the
    layers ``mappings`` (one, or a stack: layer l + 1 reads layer l's h) lowered, costed
    (``lower.costed``) and run as ``mapped.estimate.stage_graph`` over ``seq_len`` steps (at least
    16, to measure the interval)."""
    from ..ir import Node
    from ..mapped.estimate import pipeline
    from ..mapped.place import staging
    from .lower import costed, groups, lower

    # names only: the estimate reads the costs, the lowering the layers' and convolutions' names;
    # lowered at the groups' staging (side by side), not placed: the costs read no tile
    layers = [Node(f"rnn{i}", m.dims.cell, (), ()) for i, m in enumerate(mappings)]
    nf = len(mappings[0].dims.front)
    front = fr.SequenceFront(tuple(Node(f"conv{i}", "conv1d", (), ()) for i in range(nf)), (), False) if nf else None
    at = staging(groups(layers, mappings, device)[0], device.generation.cascade_serpentine)
    mg = costed(lower(layers, mappings, device, front, at), mappings, device)
    steps = mappings[0].dims.seq_len
    sim = run_pipeline(pipeline(mg), batches=max(steps, 16))
    to_cycles = device.clock_hz / 1e9
    return sim.interval_ns * to_cycles, sim.completions_ns[0] * to_cycles, sim.completions_ns[steps - 1] * to_cycles


def estimate_recurrent(mapping: RecurrentMapping, device: Device | str) -> RecurrentPerformance:
    """Simulate ``seq_len`` steps (at least 16, to measure the interval) with
    ``perf.simulate.run_pipeline``; sequence latency is the completion of step ``seq_len`` plus the
    head (:func:`head_stage`).  Every mapping (row, column, hybrid, compact, grid; with or without
    a Conv1d front end) runs the stage graph of its mapped graph (:func:`mapped_cycles`)."""
    device = get_device(device)
    interval, _, done = mapped_cycles(mapping, device)
    return _summary(mapping, device, step_stages(mapping, device), interval, done)


def sequence_json(p: Any) -> dict[str, Any]:
    """The fields a layer's and a stack's performance share in ``design.json``."""
    return {
        "mapping": p.mapping.to_json(),
        "step_latency_ns": p.step_latency_ns,
        "breakdown_ns": dict(p.breakdown_ns),
        "interval_ns": p.interval_ns,
        "sequence_latency_ns": p.sequence_latency_ns,
        "fill_ns": p.fill_ns,
        "head_ns": p.head_ns,
        "head_breakdown_ns": dict(p.head_breakdown_ns),
        "steps": p.steps,
        "tiles": p.tiles,
        "interface_tiles": p.interface_tiles,
        "bound": p.bound,
    }
