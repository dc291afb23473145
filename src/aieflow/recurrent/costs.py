"""Cycle costs of the recurrent mapping's kernels: the row-wise and cascade matrix-vector kernels,
the AIE aggregator and the PL finite-state machine.

Rates come from the device catalog and ``perf/kernel.py`` (``mac_cycles``: the catalog's MACs per
cycle, e.g. 8 fp32 MACs per cycle per AIE1 tile; ``cascade_words``; the vector-op cost), so
nothing here re-derives a rate.  The constants below are the mapping's own: none is fitted (the
GRU paper publishes plots only, ``shared/spec/gru-on-aie.md``), each says "assumed" and why.
Kernels are free-running (an infinite loop on streams), so there is no call, lock or DMA cost per
step.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ..devices import Device, Generation
from ..perf.kernel import KERNEL_CONSTANTS, cascade_words, mac_cycles
from ..perf.movement import CASCADE_HOP_CYCLES

_BITS = MappingProxyType({"fp32": 32, "bf16": 16, "i8": 8, "i16": 16, "i32": 32})

# Assumed: fill and drain of one row's software-pipelined MAC loop (load-to-use latency plus the
# MAC pipeline before the accumulator can be read).  AM009 describes a multi-stage vector
# pipeline but no figure in the specs isolates it; at hidden sizes of 8-32 a row is 1-4 MAC
# cycles, so this term matters and its value is a stated assumption, not a measurement.
ROW_LOOP_CYCLES = 6

# Assumed: one product of the scalar fixed-point kernels (rnn_fixed.h, hls4ml's order on int64
# codes): the 64-bit product (about 3 ops on the 32-bit scalar unit), its cast to the accumulator
# (a 64-bit shift, about 3, and the wrap or clamp, about 4), the 64-bit add (2) and the partial
# sum's overflow (about 4): 16 scalar ops at one per cycle, the two loads co-issued.  Counted
# from the emitted code for TRN / WRAP with the type folded at compile time, not measured.
SCALAR_PRODUCT_CYCLES = 16

# Assumed: the vector_round kernel (recurrent/vector.py) issues, per chunk, the multiply, the
# shift-round-saturate of the products to int32 lanes and an int32 vector add: two vector
# operations (``vector_op_cycles`` each) beyond the MAC, not overlapped with it.
ROUND_CHUNK_EXTRA_OPS = 2

# Assumed: a fixed-point vector cascade tile (rnn_cascade.h) moves each lane group's partial sums
# from the cascade's accumulator lanes to int32 lanes and back (to_vector<int32>, from_vector):
# two vector operations (``vector_op_cycles`` each) per group per tile, not overlapped with the MACs.
CHAIN_CONVERT_OPS = 2

# Assumed: the last tile of a fixed-point vector chain finishes each of its rows (padding lanes
# are skipped) on the scalar unit, after the group's MACs: the exact sum moved onto the accumulator's grid (a 64-bit shift, about 2),
# the add of the bias (cast once, when the kernel is built; 2) and the accumulator's overflow
# (about 4), one op per cycle as counted for SCALAR_PRODUCT_CYCLES.
CHAIN_FINISH_ROW_CYCLES = 8

# Assumed: one halving stage of the lane reduction (a lane shuffle and a dependent vector add);
# log2(lanes) stages reduce a row's accumulator to one scalar.  Not isolated by any figure.
REDUCE_STAGE_CYCLES = 2

# Assumed: scalar work of the AIE aggregator per packet besides reading its payload words: read
# the header, mask the 5-bit packet ID, form the row index, store the value.  One scalar op per
# cycle with the stream read co-issued gives about 3.
AGG_PACKET_CYCLES = 3

# Assumed: one activation of one element by table lookup on the AIE's scalar unit: scale and
# convert to an index, clamp, load the entry, store it (one op per cycle).  AIE1 has no vector
# exp/tanh; the published design puts its LUTs in the PL.
AIE_LUT_CYCLES = 4

# Element-wise gate math per vector of lanes (vector ops, each ``vector_op_cycles`` of
# perf/kernel.py).  GRU: z and r pre-activations (W + U), r * (U_h h + c), + W_h x, (1 - z),
# (1 - z) * n, + z * h (a MAC): 7.  LSTM: four pre-activations, f * c, + i * c~ (a MAC),
# o * tanh(c): 7.
GATE_VECTOR_OPS: Mapping[str, int] = MappingProxyType({"gru": 7, "lstm": 7})
# Activations per element: GRU sigmoid z, r and tanh n; LSTM sigmoid i, f, o, tanh c~ and tanh(c).
ACTIVATIONS: Mapping[str, int] = MappingProxyType({"gru": 3, "lstm": 5})

# Assumed latencies (PL cycles) of the PL FSM's operators: typical Vitis HLS floating-point
# cores at ~300 MHz (fadd 5, fmul 4, float-to-index 3) and DSP fixed point (add 1, multiply 3);
# packet-ID decode 2; a LUT read from block RAM with its output register 2; formatting the output
# word 1.  No figure in the specs; the paper's FSM is described only by its four states.
PL_OP_CYCLES: Mapping[str, Mapping[str, int]] = MappingProxyType(
    {
        "float": MappingProxyType({"add": 5, "mul": 4, "index": 3}),
        "fixed": MappingProxyType({"add": 1, "mul": 3, "index": 1}),
    }
)
PL_DECODE_CYCLES = 2
PL_LUT_CYCLES = 2
PL_WRITE_CYCLES = 1
# Initiation interval of the FSM's packet-merge loop (rnn_fsm.h, ``fsm_step``): one 64-bit beat per
# PL cycle.  What the generated HLS requests: the flattened loop reads one beat per iteration, holds
# no loop of its own and carries ``#pragma HLS PIPELINE II=1`` (tests/test_recurrent_fsm.py reads it
# back).  Whether synthesis meets it is Vitis HLS's report; none was run here.
PL_MERGE_II = 1

# hls4ml's default table size (rnn-semantics.md): the AIE aggregator keeps one table per function.
LUT_ENTRIES = 1024


def element_bits(kind: str) -> int:
    return _BITS[kind]


def lanes(gen: Generation, pair: tuple[str, str]) -> int:
    """Vector lanes of one 256-bit load (one of the two load units, versal-devices.md) of the
    wider operand: 8 fp32 on AIE1, 16 bf16 on AIE-ML."""
    return _lanes(gen.load_bits_per_cycle, pair[0], pair[1])


@functools.cache
def _lanes(load_bits: int, a: str, b: str) -> int:  # the search asks this ~10^6 times
    return max(1, (load_bits // 2) // max(element_bits(a), element_bits(b)))


def chunk_cycles(gen: Generation, pair: tuple[str, str], vector_operand: bool = True) -> int:
    """Cycles per chunk of ``lanes`` MACs: the slowest of the MAC unit (the catalog's rate via
    perf/kernel.mac_cycles), the weight load and, row-wise, the vector load (one unit each)."""
    lane = lanes(gen, pair)
    unit = gen.load_bits_per_cycle // 2
    loads = [math.ceil(lane * element_bits(pair[1]) / unit)]
    if vector_operand:
        loads.append(math.ceil(lane * element_bits(pair[0]) / unit))
    return max(math.ceil(mac_cycles(lane, gen, pair)), *loads, 1)


def reduce_cycles(gen: Generation, pair: tuple[str, str]) -> int:
    """Lane reduction of one row's accumulator to a scalar."""
    return math.ceil(math.log2(lanes(gen, pair))) * REDUCE_STAGE_CYCLES


@dataclass(frozen=True)
class KernelTime:
    """A product's critical kernel after the last vector word arrives (cycles), split as the
    breakdown reports it, plus the spacing of its packets."""

    mac: float
    reduction: float
    packet_spacing: float  # cycles between a source's consecutive packets (row-wise)

    @property
    def cycles(self) -> float:
        return self.mac + self.reduction


def row_kernel(rows: int, k: int, arrival: float, device: Device, pair: tuple[str, str], kind: str = "vector") -> KernelTime:
    """Row-wise kernel of ``rows`` rows over ``k`` columns whose vector arrives over ``arrival``
    cycles.  Vector kernels (``kind`` "vector" / "vector_round", recurrent/vector.py): the first
    row runs as the stream delivers (limited by the stream, or by the MACs if they are slower),
    later rows reuse the vector from local memory; each row is reduced.  The scalar fixed-point
    kernel reads the whole vector, then runs ``k`` products per row one at a time."""
    gen = device.generation
    if kind == "scalar":
        row = k * SCALAR_PRODUCT_CYCLES + ROW_LOOP_CYCLES
        return KernelTime(rows * row, 0.0, row)
    ii = chunk_cycles(gen, pair)
    if kind == "vector_round":
        ii += ROUND_CHUNK_EXTRA_OPS * KERNEL_CONSTANTS.vector_op_cycles
    chunks = math.ceil(k / lanes(gen, pair))
    first_end = max(arrival + ii, chunks * ii) + ROW_LOOP_CYCLES
    row = chunks * ii + ROW_LOOP_CYCLES
    red = reduce_cycles(gen, pair)
    return KernelTime(first_end - arrival + (rows - 1) * row, rows * red, row + red)


def _acc_bits(gen: Generation, pair: tuple[str, str]) -> int:
    return 32 if pair[0] in ("fp32", "bf16") else gen.accumulators.get(pair, 32)


def column_chain(rows: int, k: int, cas_len: int, arrival: float, device: Device, pair: tuple[str, str],
                 kind: str = "vector") -> KernelTime:
    """Cascade chain: ``cas_len`` tiles split ``k`` columns; rows are the lanes.  Each tile runs
    its row groups (``lanes`` rows, one broadcast column per MAC) once its slice of the vector has
    arrived; partial sums pass east, one cascade word each way per group.  The last tile finishes
    ``cas_len - 1`` groups (plus a FIFO hop each) after the first, and never before the whole
    vector has arrived plus its own groups.  ``reduction`` is everything but the last tile's MACs
    (cascade words, loop drains, chain lag, and in fixed point the vector tiles' conversions and
    the last tile's per-row finish).  ``kind`` (rnn_cascade.h, recurrent/vector.py): "vector" one
    MAC of ``lanes`` rows per column at the catalog's rate (fp32, or fixed-point products on the
    accumulator grid), "vector_round" plus the per-lane rounding and int32 add per column (as
    row kernels), "scalar" each group's lanes (padding included) run their ``kc`` products one at
    a time."""
    gen = device.generation
    lane = lanes(gen, pair)
    groups = math.ceil(rows / lane)
    kc = math.ceil(k / cas_len)
    ii = chunk_cycles(gen, pair, vector_operand=False)
    fixed_vector = kind != "scalar" and pair[0] not in ("fp32", "bf16")
    op = KERNEL_CONSTANTS.vector_op_cycles
    if kind == "scalar":
        per_group = lane * kc * SCALAR_PRODUCT_CYCLES
    elif kind == "vector_round":
        per_group = kc * (ii + ROUND_CHUNK_EXTRA_OPS * op)
    else:
        per_group = kc * ii
    convert = CHAIN_CONVERT_OPS * op if fixed_vector else 0
    casc = cascade_words(lane, _acc_bits(gen, pair), gen.cascade_bits) * (min(2, cas_len - 1))
    block = per_group + convert + ROW_LOOP_CYCLES + casc
    first_slice = arrival * kc / k
    end = max(first_slice + (groups + cas_len - 1) * block + (cas_len - 1) * CASCADE_HOP_CYCLES, arrival + groups * block)
    if fixed_vector:
        end += rows * CHAIN_FINISH_ROW_CYCLES  # the last tile's rows on the scalar unit, not overlapped
    mac = groups * per_group
    return KernelTime(mac, end - arrival - mac, 0.0)


def aie_gate_math_cycles(cell: str, n_h: int, gen: Generation, pair: tuple[str, str]) -> float:
    """The AIE aggregator's gate math for the whole hidden vector: table activations per element
    on the scalar unit, element-wise ops per vector of lanes."""
    vec = math.ceil(n_h / lanes(gen, pair)) * GATE_VECTOR_OPS[cell] * KERNEL_CONSTANTS.vector_op_cycles
    return n_h * ACTIVATIONS[cell] * AIE_LUT_CYCLES + vec


def pl_fsm_depth(cell: str, pair: tuple[str, str]) -> int:
    """PL cycles from a row's last packet to its h element being formatted for output, along the
    longest dependency chain.  GRU: decode, z/r pre-activation add, index, LUT, r * (U h + c),
    + W x, index, tanh LUT, (1 - z) * n, + z * h.  LSTM: decode, add, index, LUT, f * c (with
    i * c~ in parallel), add, index, tanh LUT, o * tanh(c)."""
    op = PL_OP_CYCLES["float" if pair[0] in ("fp32", "bf16") else "fixed"]
    lut = op["index"] + PL_LUT_CYCLES
    if cell == "gru":
        chain = op["add"] + lut + op["mul"] + op["add"] + lut + op["mul"] + op["add"]
    else:
        chain = op["add"] + lut + op["mul"] + op["add"] + lut + op["mul"]
    return PL_DECODE_CYCLES + chain + PL_WRITE_CYCLES


# ----------------------------------------------------------------------------- dense head
# The head (rnn_cell.h ``head()``) runs once per sample after the last step, in the aggregation
# epilogue: on the AIE aggregator's core (aie) or in the PL FSM (hybrid).  The emitted code is the
# emulator's plain loops (one product at a time, hls4ml's order), so it is costed as written: no
# vectorisation on the AIE, no unrolling pragma in the HLS.

# Assumed: one head product on the aggregator's scalar path.  Fixed point: a 32x32 multiply and a
# 64-bit add (two 32-bit ops) at one scalar op per cycle, 3; fp32: AIE1 has no scalar float unit,
# each product and add issue on lane 0 of the vector float unit, 2 (the fpmac issues every cycle
# but the dependent add chain waits on it).  No figure in the specs isolates either.
AIE_HEAD_MAC_CYCLES: Mapping[str, int] = MappingProxyType({"float": 2, "fixed": 3})
# Assumed: per output of a fixed-point head layer, bias add, wrap, round-shift and saturate (and
# the ReLU compare) as scalar ops; float: bias load and the ReLU select.
AIE_HEAD_OUT_CYCLES: Mapping[str, int] = MappingProxyType({"float": 2, "fixed": 6})
# In the PL the head's output loop carries ``#pragma HLS PIPELINE II=1`` (rnn_cell.h), which
# unrolls the product loop: one output per PL cycle after the pipeline's depth, a multiply and
# the add chain; floats are not reassociated by HLS (a chain of ``k`` fadds), integers are (an
# adder tree of ceil(log2 k) levels).  Fixed point adds round-shift and saturate (assumed 1 each).
PL_HEAD_OUT_FIXED_CYCLES = 2


def _numeric(pair: tuple[str, str]) -> str:
    return "float" if pair[0] in ("fp32", "bf16") else "fixed"


def head_layers(n_h: int, head: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """(inputs, outputs) of each head layer; the first reads the hidden vector."""
    widths = (n_h, *head)
    return tuple(zip(widths[:-1], widths[1:], strict=True))


def aie_head_cycles(n_h: int, head: tuple[int, ...], pair: tuple[str, str]) -> int:
    """AIE cycles of the head on the aggregator core, as emitted (scalar loops)."""
    kind = _numeric(pair)
    return sum(m * (k * AIE_HEAD_MAC_CYCLES[kind] + AIE_HEAD_OUT_CYCLES[kind] + ROW_LOOP_CYCLES)
               for k, m in head_layers(n_h, head))


def pl_head_cycles(n_h: int, head: tuple[int, ...], pair: tuple[str, str]) -> int:
    """PL cycles of the head in the FSM, as emitted: per layer, ``m`` outputs at II 1 after the
    pipeline's depth (multiply, the add chain or tree, fixed point's round and saturate, write)."""
    kind = _numeric(pair)
    op = PL_OP_CYCLES[kind]
    total = 0
    for k, m in head_layers(n_h, head):
        adds = k if kind == "float" else math.ceil(math.log2(k + 1))  # + the bias
        post = 0 if kind == "float" else PL_HEAD_OUT_FIXED_CYCLES
        total += m + op["mul"] + adds * op["add"] + post + PL_WRITE_CYCLES
    return total


# ----------------------------------------------------------------------------- compact tile
# The compact mapping's kernel (templates/recurrent/rnn_compact.h, CompactCell) runs one step per
# call on one core: read x_t, the W x and U h products in column form (rows are the lanes: one
# aie::mac or aie::mul of a weight column by a broadcast element per lane group and column, as a
# cascade chain of one tile), a vector finish per lane group, the gate math, h copied into the
# MAC's lane type for the next step.  Nothing overlaps between these phases (each reads what the
# previous wrote), so the step is their sum.  Within a phase the model follows the VLIW schedule:
# each operation takes an issue slot of the core's instruction word (VLIW_SLOTS), the products'
# pipelined column loop runs at the initiation interval its busiest slot sets, and the gate math's
# straight-line code is list-scheduled (list_schedule).  Rates and costs reused from the model
# above: chunk_cycles / mac_cycles (catalog MAC rate and load width), ROW_LOOP_CYCLES,
# SCALAR_PRODUCT_CYCLES and perf/kernel.py's vector_op_cycles.

# Public: the core's VLIW instruction word issues, per cycle, one scalar operation, up to two
# moves, two vector loads, one vector store and one vector instruction (AMD WP552, "AI Engine
# Architecture": "a 7-way very long instruction word"; AM020 / AM027 list the same units on AIE-ML
# and AIE-MLv2: two load units, one store unit, one vector unit, the scalar unit).  The register
# moves (AM009 / AM020 / AM027 "Register Move Functionality") include the shift-round-saturate
# path from an accumulator to a vector register (to_vector, srs) and the upshift path from a
# vector to an accumulator (from_vector, ups), and moves into special registers (the mode control
# register that aie::set_rounding / set_saturation write).  Everything else the compact kernel
# issues on vectors (add, sub, mul, mac, shifts, min, max, select, compare, broadcast) takes the
# vector slot: the model puts a broadcast there too, no public source places it on a move.
VLIW_SLOTS: Mapping[str, int] = MappingProxyType({"scalar": 1, "move": 2, "load": 2, "store": 1, "vector": 1})

# Assumed: the products' column loop keeps at most this many lane groups' sums in registers per
# pass over the columns (rnn_compact.h BLOCK): one broadcast of x_k serves the block.  Four, as the
# Dense kernel's 2 x 2 accumulator blocking (perf/kernel.py), which keeps its accumulators and
# operands within the twelve 512-bit vector registers; not measured for this kernel.
COMPACT_GROUP_BLOCK = 4

# Counted from rnn_compact.h: the vector finish of one lane group of a fixed-point vector product
# is one vector add (the bias, cast when the kernel is built), plus one upshift when the products
# are coarser than the accumulator (SHIFT < 0), plus an upshift and an arithmetic downshift when
# the accumulator wraps at fewer than 32 bits; the aie::mac form adds its to_vector<int32>(0).
COMPACT_FINISH_ADD_OPS = 1
COMPACT_FINISH_WRAP_OPS = 2

# Counted from the emitted scalar gate math (rnn_cell.h ``step``, the AIE aggregator's code) as
# scalar operations at one per cycle, the convention of SCALAR_PRODUCT_CYCLES: a 64-bit add 2, a
# 64-bit multiply 3, an ap_fixed cast 7 (shift about 3, wrap or clamp about 4), a table index 15
# (64-bit multiply 3, round-shift about 6, two 32-bit wraps 4, clamp 2), a table read 8 (the load
# and the entry's cast to the accumulator).  GRU per element: two pre-activations (2 + 7 each),
# three lookups (15 + 8 each), r * (U h + c) (3 + 7), the candidate's pre-activation (2 + 7),
# 1 - z (2), the update (two multiplies 6, alignment 2, add 2, cast 7), the stores 2: 127.
# LSTM: four pre-activations (9 each), five lookups (23 each), c (17), h (10), stores 3: 181.
SCALAR_GATE_CYCLES: Mapping[str, int] = MappingProxyType({"gru": 127, "lstm": 181})
# Assumed: float gate math on AIE1, which has no scalar floating-point unit: each float add or
# multiply issues on lane 0 of the vector unit (2 cycles, as AIE_HEAD_MAC_CYCLES["float"]), and
# an activation (exact: float64 exp / tanh, rounded; or a table index formed in float64) is a
# software double-precision routine.  No figure in the specs; 150 cycles is an order of magnitude
# for such a routine on a 32-bit core without a double-precision unit, not a measurement.
FLOAT_GATE_OPS: Mapping[str, int] = MappingProxyType({"gru": 8, "lstm": 6})
FLOAT_ACTIVATION_CYCLES = 150
# Counted: h copied into the U h product's lane type after the gate math, one element per cycle
# (load, narrow, store co-issued).
COMPACT_STATE_COPY_CYCLES = 1

# A schedule segment: (slots one cycle of it takes, cycles); an empty dict is a wait (a dependent
# operation's latency with nothing issued for it).
Segment = tuple[Mapping[str, int], int]


def list_schedule(ops: Sequence[tuple[Sequence[int], Sequence[Segment]]]) -> int:
    """Cycles of straight-line code on the VLIW core: operations in program order, each after the
    operations it depends on (indices into ``ops``) have finished, its segments one after another,
    each cycle of a segment in the first cycle from then on where all its slots are free
    (VLIW_SLOTS); a dependent operation may issue in the cycle after the one it reads from (unit
    latency: the model counts issue slots, not the vector pipeline's depth, which no public figure
    gives).  Greedy and in order, as a compiler's list scheduler of one basic block."""
    used: dict[str, dict[int, int]] = {k: {} for k in VLIW_SLOTS}
    finish: list[int] = []
    for deps, segs in ops:
        t = max((finish[d] for d in deps), default=0)
        for need, n in segs:
            for _ in range(n):
                while any(used[k].get(t, 0) + c > VLIW_SLOTS[k] for k, c in need.items()):
                    t += 1
                for k, c in need.items():
                    used[k][t] = used[k].get(t, 0) + c
                t += 1
        finish.append(t)
    return max(finish, default=0)


def compact_product_cycles(rows: int, k: int, device: Device, pair: tuple[str, str], kind: str,
                           finish_ops: int) -> tuple[float, float]:
    """(MAC cycles, finish cycles) of one compact product: ``rows`` gate-stacked rows over ``k``
    columns, as rnn_compact.h's CompactProduct runs it.  Vector forms: per block of up to
    COMPACT_GROUP_BLOCK lane groups a software-pipelined loop over the columns whose iteration
    issues one broadcast of x_k (vector slot) and per group the weight column's loads (the two
    load units), the MAC (``mac_cycles`` at the catalog's rate, vector slot) and for vector_round
    the product's shift-round-saturate (a move) and an int32 add (vector slot); its initiation
    interval is the busiest slot's, plus the loop's fill and drain (ROW_LOOP_CYCLES) per block;
    then ``finish_ops`` vector ops per group (fixed point).  Scalar: every padded row's products
    one at a time."""
    gen = device.generation
    lane = lanes(gen, pair)
    groups = math.ceil(rows / lane)
    op = KERNEL_CONSTANTS.vector_op_cycles
    if kind == "scalar":
        return groups * lane * (k * SCALAR_PRODUCT_CYCLES + ROW_LOOP_CYCLES), 0.0
    mac = max(math.ceil(mac_cycles(lane, gen, pair)), 1)
    w_loads = math.ceil(lane * element_bits(pair[1]) / (gen.load_bits_per_cycle // 2))
    rnd = kind == "vector_round"
    total = 0.0
    for b in range(0, groups, COMPACT_GROUP_BLOCK):
        g = min(COMPACT_GROUP_BLOCK, groups - b)
        slots = {"vector": op * (1 + g * (mac + rnd)), "move": g * rnd, "load": g * w_loads + 1}  # + x_k's load
        ii = max(math.ceil(v / VLIW_SLOTS[s]) for s, v in slots.items())
        total += k * ii + ROW_LOOP_CYCLES
    return total, groups * finish_ops * op


# Public (the register moves above): one write of the core's rounding or saturation mode
# (aie::set_rounding / aie::set_saturation) is a move into the mode control register, one move
# slot for a cycle; the vector gate math writes them where consecutive casts need different modes,
# and the schedule keeps every shift-round-saturate after the write it depends on and before the
# next one.
COMPACT_MODE_SEGMENT: Segment = (MappingProxyType({"move": 1}), 1)
# Counted from rnnv::gather (rnn_compact.h), the table read of the vector gate math for the n real
# lanes of a group, on the scalar side: the index vector stored (one store), then per element the
# index loaded, the entry loaded at the table's base plus the index (the load unit's indexed
# addressing) and stored for the vector reload: two loads and a store, which the element loop,
# software pipelined, issues one element per cycle (the two load units, the store unit); the first
# element's chain (index load, entry load, store) leaves COMPACT_GATHER_FILL_CYCLES before the
# loop's steady state, assumed one cycle per dependent load (no public load-to-use figure); then
# the entries reloaded as a vector (one load).
COMPACT_GATHER_FILL_CYCLES = 2


def gather_segments(n: int) -> tuple[Segment, ...]:
    """The schedule segments of one rnnv::gather of ``n`` real lanes (COMPACT_GATHER_FILL_CYCLES)."""
    return ((MappingProxyType({"store": 1}), 1), (MappingProxyType({"load": 2, "store": 1}), n),
            (MappingProxyType({}), COMPACT_GATHER_FILL_CYCLES), (MappingProxyType({"load": 1}), 1))


def compact_gate_cycles(cell: str, n_h: int, pair: tuple[str, str], form: tuple[int, ...] = ()) -> float:
    """The gate math of the whole hidden vector.  ``form`` (RecurrentDims.gate_form): the vector
    form's (lanes, vector ops per group, mode writes per group, table reads per element, cycles of
    a full group, cycles of the last group[, widened tables' bytes]), the cycles list-scheduled (list_schedule) by the
    generator that emits the code (recurrent/compact.py); per group plus the loop's fill and
    drain (ROW_LOOP_CYCLES).  Empty: the scalar step (rnn_cell.h), as counted above."""
    if form:
        lanes_, _ops, _modes, _lookups, full, last = form[:6]  # form[6]: the widened tables' bytes
        groups = math.ceil(n_h / lanes_)
        return (groups - 1) * full + last + groups * ROW_LOOP_CYCLES
    if pair[0] in ("fp32", "bf16"):
        acts = ACTIVATIONS[cell]
        return n_h * (FLOAT_GATE_OPS[cell] * AIE_HEAD_MAC_CYCLES["float"] + acts * FLOAT_ACTIVATION_CYCLES)
    return n_h * SCALAR_GATE_CYCLES[cell]


def head_form_layers(form: tuple[int, ...], layers: int) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """RecurrentDims.head_form split: (lanes, per layer the finish's ops, per layer 1 for the dot
    form); a form without the dot flags (saved before them) is every layer in lane form."""
    dots = tuple(form[1 + layers:]) or (0,) * layers
    return form[0], tuple(form[1:1 + layers]), dots


def compact_head_cycles(n_h: int, head: tuple[int, ...], form: tuple[int, ...], pair: tuple[str, str]) -> float:
    """The compact tile's dense head.  ``form`` (RecurrentDims.head_form): the vector head's lanes
    and, per layer, the vector ops and mode writes of one output group's finish, counted by the
    generator (recurrent/compact.vector_head), and whether the layer runs in dot form.  Lane form:
    per output group one aie::mac per input (int32 lanes at the catalog's int32 x int32 rate: one
    cycle for a group, recurrent/compact.gate_lanes), the groups in blocks of COMPACT_GROUP_BLOCK
    sharing one loop over the inputs (one fill and drain per block), then each group's finish.  Dot
    form (a later layer with fewer outputs than lanes): per output one element-wise aie::mac per
    lane group of inputs, the loop's fill and drain, the finish (the exact lane sum's ops included).
    Then the outputs copied out one per cycle.  Empty: the scalar head loops, as the AIE
    aggregator's (aie_head_cycles)."""
    if not form:
        return aie_head_cycles(n_h, head, pair)
    layers = head_layers(n_h, head)
    lanes_, finish, dots = head_form_layers(form, len(layers))
    total = 0.0
    for (k, m), ops, dot in zip(layers, finish, dots, strict=True):
        fin = ROW_LOOP_CYCLES + ops * KERNEL_CONSTANTS.vector_op_cycles
        if dot:
            total += m * (math.ceil(k / lanes_) + fin)
            continue
        groups = math.ceil(m / lanes_)
        total += groups * (k + ops * KERNEL_CONSTANTS.vector_op_cycles) + math.ceil(groups / COMPACT_GROUP_BLOCK) * ROW_LOOP_CYCLES
    return total + (head[-1] if head else n_h)


# ----------------------------------------------------------------------------- split (issue 22)
# The "split" mapping (modelled, not generated): the compact cell's hidden units partitioned over
# T tiles.  Tile i owns u = ceil(n_h / T) units: its z / r / n (GRU) or i / f / c / o (LSTM) rows
# of U and W, gate-stacked (G u rows, the compact tile's column form with u in place of n_h), its
# units' gate math and new h; every step the T slices of h are all-gathered, so each tile's U h
# reads the whole h.  The tiles run in lockstep (all equal but the last, which owns fewer units),
# so a step is the slowest tile's: the compact tile's phases for u units plus the exchange.
# Exchanges (the ways h can move between tiles without leaving the array):
#   memory  - neighbouring data memories with locks (UG1079 / UG1603 "Data Communication via AI
#             Engine Data Memory"; AM009 / AM020 / AM027: a core addresses its own data memory and
#             three neighbours', catalog ``neighbour_memories``); each producer stores its slice
#             into the shared module(s) and releases a lock, each consumer acquires one lock per
#             producer (binary locks on AIE1; AIE-ML's counting locks could take them with one
#             acquire: counted per producer anyway, conservative) and reads the slices inside its
#             U h column loop (the x_k loads the product already counts);
#   cascade - the accumulator cascade runs one way (east, and on AIE-ML also vertically): the
#             slices collect down a chain of T tiles (hop i carries i slices as int32 lanes at
#             ``cascade_bits`` per cycle, + CASCADE_HOP_CYCLES), and the last tile streams the
#             whole h back to every tile (a broadcast stream, one 32-bit word per cycle);
#   stream  - each tile writes its slice as one packet (header + u words) onto a stream broadcast
#             to the others; each reads the other T - 1 packets through its one input port
#             (pktmerge), one word per cycle, as the AIE aggregator's port.
# Lock costs are perf/movement.py's (LOCK_ACQUIRE_CYCLES 3, LOCK_RELEASE_CYCLES 1, assumed there);
# stream start and hops its STREAM_FIXED_CYCLES and SWITCH_HOP_CYCLES.
SPLIT_EXCHANGES = ("memory", "cascade", "stream")


def split_memory_modules(tiles: int, gen: Generation) -> int:
    """Data-memory modules every producer writes its slice into so that each of ``tiles`` tiles
    can read every slice: one module is addressed by 1 + len(neighbour_memories) cores (own and
    the neighbours', by symmetry: 4 on every generation), so up to that many tiles share one;
    beyond, the tiles sit around two modules (a 2 x 3 block reaches both) and each slice is stored
    in both.  More than two modules' reach is not modelled (ValueError)."""
    reach = 1 + len(gen.neighbour_memories)
    if tiles <= reach:
        return 1
    if tiles <= 2 * reach:
        return 2
    raise ValueError(f"{tiles} tiles: more than two shared data memories' reach ({2 * reach} cores)")


def split_exchange_cycles(exchange: str, tiles: int, units: int, n_h: int, device: Device,
                          pair: tuple[str, str]) -> float:
    """Cycles of one step's all-gather of h over ``tiles`` tiles (``units`` per tile, the slowest
    tile's), from its last unit's new h (in the U h product's lane type) to the moment every tile
    may start its next U h.  memory: the producer's stores (``store_bits_per_cycle``, one per
    module it writes), one lock release per module, then the consumer's lock acquire per other
    producer (``movement.LOCK_ACQUIRE_CYCLES`` each, back to back on the scalar unit: the last
    producer's release is seen by the first acquire that follows it) and, after its U h, the
    releases of the slices it read (``LOCK_RELEASE_CYCLES`` each; the ping-pong pair keeps the
    producer's next acquire of a free buffer off the path).  cascade, stream: as described above,
    with ``movement.STREAM_FIXED_CYCLES`` and one switch hop (the tiles are neighbours)."""
    from ..perf import movement as mv

    gen = device.generation
    if tiles < 2:
        return 0.0
    if exchange == "memory":
        modules = split_memory_modules(tiles, gen)
        bits = units * element_bits(pair[0])
        stores = modules * math.ceil(bits / gen.store_bits_per_cycle)
        return (stores + modules * mv.LOCK_RELEASE_CYCLES + (tiles - 1) * mv.LOCK_ACQUIRE_CYCLES
                + (tiles - 1) * mv.LOCK_RELEASE_CYCLES)
    word = mv.core_stream_bytes_per_cycle(device) / 4  # 32-bit words per cycle on a core port
    if exchange == "cascade":
        hops = sum(math.ceil(i * units * 32 / gen.cascade_bits) + CASCADE_HOP_CYCLES for i in range(1, tiles))
        back = mv.stream_transfer(n_h * 4, device, 1)
        return hops + back.busy_cycles + back.latency_cycles + n_h / word  # the last tile writes, all read
    if exchange == "stream":
        write = mv.packet_stream_words(units, 1) / word
        read = mv.packet_stream_words(units, tiles - 1) / word
        return write + mv.STREAM_FIXED_CYCLES + mv.SWITCH_HOP_CYCLES + read
    raise ValueError(f"exchange {exchange!r}: one of {', '.join(SPLIT_EXCHANGES)}")
