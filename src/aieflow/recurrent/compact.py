"""The compact mapping's per-layer facts (issue 22): what the compact tile's vector finish does per
lane group, from the layer's types (``rnn_compact.h`` ``CompactProduct::finish``), for the cycle
model (``costs.compact_product_cycles``) and the emitter (``emit._compact_config``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..devices import Device
from ..ir import Node
from ..names import Code
from ..numerics import fixed
from ..numerics.types import FixedType, Rounding, Saturation
from ..ops import activations as act
from ..ops.recurrent import state_max_code
from .costs import (
    COMPACT_FINISH_ADD_OPS,
    COMPACT_FINISH_WRAP_OPS,
    COMPACT_GROUP_BLOCK,
    COMPACT_MODE_SEGMENT,
    gather_segments,
    list_schedule,
)
from .emit import _RND, _arr, _ints


def _cpp(form: str, *args: object) -> Code:
    """One piece of the vector kernels' C++: macro ``form`` of templates/recurrent/vgates.j2, rendered
    in the project's one Jinja environment (its printed values pass the sanitiser)."""
    from ..templating import environment

    return Code(getattr(environment("recurrent").get_template("vgates.j2").module, form)(*args))


def _aligned_const(ctype: str, name: str, values: np.ndarray) -> Code:
    """A vector-aligned constant array of the kernel (``values`` flattened, as integers)."""
    return _cpp("aligned_const", ctype, name, values.size, Code(_arr(_ints(values))))


def finish_ops(node: Node, kinds: tuple[str, str]) -> tuple[int, int]:
    """Vector ops per lane group of the (U h, W x) finish: the bias add, the aie::mac form's
    conversion to int32 lanes, the upshift of coarse products (SHIFT < 0) and the wrap of an
    accumulator narrower than 32 bits.  fp32 and scalar products have none (the bias is the
    lanes' start value, or part of hls4ml's scalar order)."""
    t = node.types
    if t is None or t.is_float:
        return (0, 0)
    out = []
    for recurrent, kind in zip((True, False), kinds, strict=True):
        if kind == "scalar":
            out.append(0)
            continue
        xt = t.output if recurrent else t.input
        wt = t.recurrent_weight if recurrent else t.weight
        shift = xt.frac + wt.frac - t.accum.frac
        ops = COMPACT_FINISH_ADD_OPS + (kind == "vector") + (shift < 0)
        if t.accum.saturation is Saturation.WRAP and t.accum.width < 32:
            ops += COMPACT_FINISH_WRAP_OPS
        out.append(ops)
    return out[0], out[1]


# ----------------------------------------------------------------------------- vector gate math
#
# The gate math of hls4ml's recurrence (ops/recurrent._gru_step_fixed / _lstm_step_fixed, and the
# scalar rnn_cell.h ``step``) written with AIE API vector ops on int32 lanes, one lane group of the
# hidden vector at a time, for the compact tile.  Each ap_fixed operation is reproduced exactly:
#
# * a sum of two accumulator codes is an int32 vector add (exact when the accumulator is narrower
#   than 32 bits; modular, which WRAP tolerates, at 32), then the type's overflow: WRAP an upshift
#   and an arithmetic downshift (modular, so any int32 wrap before it is harmless), SAT / SAT_SYM a
#   min and a max; a saturating 32-bit accumulator adds in accumulator lanes and saturates into
#   int32 (its own range);
# * a product and its cast (r * (U h + c), the state update) is aie::mul / aie::mac of int32 lanes
#   into exact accumulator lanes (acc64 on AIE-ML, acc80 on AIE), terms aligned to the finest grid
#   by upshifting an operand (proved to stay within int32), then one to_vector<int32>(shift) under
#   the target type's rounding mode, saturating to int32 for SAT types (so the clamp after it sees
#   a value on the right side of the range) or wrapping for WRAP types;
# * a table index x * N / 2L: the dyadic scale p / 2^m as aie::mul by p and to_vector<int32>(m)
#   under the index's rounding mode (AIE has no symmetric floor / ceil: both roundings and a select
#   by sign), + N / 2, clamped to the table; proved never to need hls4ml's 32-bit wraps;
# * the entry: rnn_cell.h's table read on the scalar unit for the group's real lanes, then cast to
#   the accumulator type as act_sigmoid / act_tanh cast it (an exact upshift onto its grid);
# * ``widen`` (issue 22): the + N / 2 and the clamp folded into a **widened table** instead, one
#   entry per raw index R(x N / 2L) the index's input type can give (its codes' range, R monotone:
#   the two ends bound it), entry k = the table's entry at clamp(k + N / 2, 0, N - 1), read through
#   a pointer offset by the lowest raw index; int16 entries where every entry fits.  The same entry
#   for every input, three vector ops fewer per table read (the add, the min, the max), at the
#   widened tables' memory (VectorGates.table_bytes; plan.compact_bytes counts it, and the compact
#   tile keeps the clamped form where they do not fit; a table larger than a tile's data memory
#   even in int16 is never built: that read keeps the clamp).
#
# Where a condition fails (float, exact activations, unsigned or wider types, negative fractional
# bits, a rounding mode the device lacks, a bound) the tile keeps the scalar rnn_cell.h step.

_INT31 = (1 << 31) - 1
_NAME = re.compile(r"\b[a-z]+[0-9]+\b")  # the generated values' names (stem + number)
_VEC, _MOVE, _LOAD, _LOAD2, _STORE = ({"vector": 1}, {"move": 1}, {"load": 1}, {"load": 2}, {"store": 1})
_ACC63 = 1 << 62  # |exact sums| kept below 2^62: safe in acc64 (and AIE's acc80) lanes
# roundings with R(x + n) = R(x) + n for every integer n (the GRU's (W x)_n fold, _generate)
_SHIFT_INVARIANT = frozenset({Rounding.FLOOR, Rounding.CEIL, Rounding.POS_INF, Rounding.NEG_INF})


@dataclass(frozen=True)
class VectorGates:
    """A layer's generated vector gate math: C++ (``VGates`` and its tables in the layer's
    namespace), its lane count, and what one lane group costs (for costs.compact_gate_cycles)."""

    text: str
    lanes: int
    ops: int  # vector ops per lane group (vector_op_cycles each)
    modes: int  # rounding / saturation mode writes per lane group
    lookups: int  # table reads per element (one per activation)
    cycles: int = 0  # a full lane group, list-scheduled (costs.list_schedule)
    cycles_last: int = 0  # the last lane group (its real lanes: the gathers read fewer entries)
    table_bytes: int = 0  # the widened tables (0: the clamped index into rnn_cell.h's tables)

    @property
    def form(self) -> tuple[int, ...]:
        """RecurrentDims.gate_form."""
        return (self.lanes, self.ops, self.modes, self.lookups, self.cycles, self.cycles_last, self.table_bytes)


def gate_lanes(device: Device) -> int:
    """int32 lanes per gate-math op: the catalog's int32 x int32 MACs per cycle (16 on AIE-ML,
    8 on AIE), so one aie::mul of a lane group issues in one cycle."""
    return int(device.generation.macs_per_cycle[("i32", "i32")])


class _NotExact(Exception):
    """A bound the vector form needs does not hold (the layer keeps the scalar step)."""


class _Gen:
    """Straight-line C++ of one lane group, with its op and mode-write counts."""

    def __init__(self, device: Device, n_h: int, lanes: int, widen: bool = False) -> None:
        self.device, self.n_h, self.lanes, self.widen = device, n_h, lanes, widen
        # widened tables: (function, lowest raw index, highest) -> (name, C element type, entries)
        self.tables: dict[tuple[str, int, int], tuple[str, str, list[int]]] = {}
        self.lines: list[str] = []
        self.ops = self.modes = 0
        self.rnd: Rounding | None = None
        self.sat: bool | None = None
        self.k = 0
        # the schedule (costs.list_schedule): per operation its dependencies and segments; a gather's
        # segments depend on the group's real lanes, so they are kept as None and filled in later
        self.sched: list[tuple[tuple[int, ...], tuple | None]] = []
        self.names: dict[str, int] = {}  # value name -> its operation
        self.srs_since: list[int] = []  # shift-round-saturates since the last mode write
        self.mode_op: int | None = None

    def op(self, name: str | None, expr: str, segs: tuple | None, srs: bool = False, mode: bool = False) -> None:
        """Record one operation for the schedule: it depends on the values its expression reads, a
        shift-round-saturate also on the last mode write, a mode write on the shift-round-saturates
        issued under the previous mode."""
        deps = {self.names[v] for v in _NAME.findall(expr) if v in self.names}
        if (srs or mode) and self.mode_op is not None:
            deps.add(self.mode_op)
        if mode:
            deps.update(self.srs_since)
            self.srs_since = []
            self.mode_op = len(self.sched)
        elif srs:
            self.srs_since.append(len(self.sched))
        if name is not None:
            self.names[name] = len(self.sched)
        self.sched.append((tuple(sorted(deps)), segs))

    def cycles(self, n: int) -> int:
        """The group's list-scheduled cycles with ``n`` real lanes (its gathers read n entries)."""
        return list_schedule([(d, gather_segments(n) if segs is None else segs) for d, segs in self.sched])

    def name(self, stem: str) -> str:
        self.k += 1
        return f"{stem}{self.k}"

    def emit(self, expr: str, stem: str = "v", ops: int = 1, kind: str = "vi", segs: tuple | None = ()) -> str:
        """One value; ``ops`` counts its vector ops (the recount test), ``segs`` its schedule: ()
        derives it from the expression (a to_vector is a shift-round-saturate on a move slot, an
        rnnv::va an upshift on a move slot, the rest ``ops`` vector-slot cycles)."""
        v = self.name(stem)
        self.lines.append(_cpp("value", kind, v, expr))
        self.ops += ops
        srs = "to_vector" in expr
        if segs == ():
            moves = srs + expr.count("rnnv::va<")
            vec = max(ops - moves, 0)
            segs = tuple(x for x in ((_MOVE, moves), (_VEC, vec)) if x[1]) or ((_VEC, 1),)
        self.op(v, expr, segs, srs=srs)
        return v

    def store(self, arr: str, v: str) -> None:
        self.lines.append(_cpp("store", arr, v))
        self.op(None, v, ((_STORE, 1),))

    def load(self, arr: str, gate: int) -> str:
        off = gate * self.n_h
        if off % self.lanes == 0:
            return self.emit(_cpp("load", arr, off), "x", 0, segs=((_LOAD, 1),))
        # two aligned loads and a shuffle
        return self.emit(_cpp("load_unaligned", arr, off), "x", 1, segs=((_LOAD2, 1), (_VEC, 1)))

    def modes_for(self, rnd: Rounding | None, sat: bool) -> None:
        if rnd is not None and rnd != self.rnd:
            self.lines.append(_cpp("set_rounding", _RND[rnd]))
            self.rnd = rnd
            self.modes += 1
            self.op(None, "", (COMPACT_MODE_SEGMENT,), mode=True)
        if sat != self.sat:
            mode = "saturate" if sat else "none"
            self.lines.append(_cpp("set_saturation", mode))
            self.sat = sat
            self.modes += 1
            self.op(None, "", (COMPACT_MODE_SEGMENT,), mode=True)

    def overflow(self, v: str, t: FixedType) -> str:
        if t.saturation is Saturation.WRAP:
            return v if t.width >= 32 else self.emit(_cpp("wrap", v, t.width), "w", 2)
        lo = -t.max_code if t.saturation is Saturation.SYMMETRIC else t.min_code
        if t.width >= 32 and lo == t.min_code:
            return v  # to_vector<int32> saturated into int32, which is this type's range
        return self.emit(_cpp("clamp", v, lo, t.max_code), "s", 2)

    def add_cast(self, a: str, b: str, t: FixedType) -> str:
        if t.width < 32 or t.saturation is Saturation.WRAP:  # exact in int32 (or modular, which WRAP allows)
            return self.overflow(self.emit(_cpp("add", a, b), "a"), t)
        # a saturating 32-bit type: the exact sum in accumulator lanes, saturated into int32 = the type's range
        s = self.emit(_cpp("add", _cpp("acc", a), b), "a", 2, kind="acc")
        self.modes_for(None, True)
        v = self.emit(_cpp("to_int32", s, 0), "r")
        return v if t.saturation is Saturation.SATURATE else self.overflow(v, t)

    def srs(self, acc: str, shift: int, t: FixedType, lazy: bool = False) -> str:
        """``(t) acc`` shifted right by ``shift``; ``lazy``: a WRAP type's wrap left to the value's one
        use, a sum wrapped into the same type (the int32 lanes' adds are modular, so wrap(wrap(x) + y)
        = wrap(x + y))."""
        self.modes_for(t.rounding if shift > 0 else None, t.saturation is not Saturation.WRAP)
        v = self.emit(_cpp("to_int32", acc, shift), "r")
        return v if lazy and t.saturation is Saturation.WRAP else self.overflow(v, t)

    def index_of_sum(self, a: str, b: str, t: FixedType, spec: act.TableSpec) -> tuple[str, str]:
        """The table index of ``(t)(a + b)``.  A WRAP type of w < 32 bits folds its wrap into the
        index: one upshift by k = 32 - w leaves wrap_w(a + b) * 2^k in the int32 lanes (their add and
        shift are modular), and the index's shift-round-saturate shifts k bits more: the same
        rational under the same rounding, its sign the wrapped sum's (AIE's select), one vector op
        fewer than the wrap's upshift + downshift.  Where the longer shift or the scaled product
        would not fit (srs_shift_max, acc64 lanes) the sum is wrapped as add_cast wraps it."""
        if self._wrap_fold(t, spec):
            return self.index_of_wrapped(self.emit(_cpp("add", a, b), "a"), t, spec)
        return self.index(self.add_cast(a, b, t), t, spec)

    def _wrap_fold(self, t: FixedType, spec: act.TableSpec) -> bool:
        """Whether ``index_of_sum`` folds a WRAP type's wrap into the index (its docstring)."""
        m = (spec.scale.denominator << t.frac).bit_length() - 1
        k = 32 - t.width
        return (t.saturation is Saturation.WRAP and k > 0 and m + k <= self.device.generation.srs_shift_max
                and spec.scale.numerator << 31 < _ACC63)

    def index_of_wrapped(self, v: str, t: FixedType, spec: act.TableSpec) -> tuple[str, str]:
        """The table index of ``(t) v``, ``v`` a sum of a WRAP type ``t`` not yet wrapped (int32
        lanes, modular): the wrap folded into the index where ``_wrap_fold``, else wrapped first."""
        if self._wrap_fold(t, spec):
            k = 32 - t.width
            return self.index(self.emit(_cpp("upshift", v, k), "u"), t, spec, k)
        return self.index(self.overflow(v, t), t, spec)

    def index(self, c: str, ty: FixedType, a: act.TableSpec, pre: int = 0) -> tuple[str, str]:
        """The table index of ``c`` (codes of ``ty``, within its range; ``pre``: c holds them times
        2^pre, index_of_sum) and the table to read it from: hls4ml's clamped index into
        rnn_cell.h's table, or (``widen``) the raw index into a widened table read through an
        offset pointer."""
        frac = ty.frac
        p, q = a.scale.numerator, a.scale.denominator
        m = (q << frac).bit_length() - 1
        prod = self.emit(_cpp("mul", c, _cpp("int32", p)), "p", kind="acc")
        rnd = a.index_rounding
        if m == 0 or rnd in self.device.generation.rounding_modes:
            self.modes_for(rnd if m else None, False)  # m = 0: exact (c * p a multiple of 2^pre) in any mode
            raw = self.emit(_cpp("to_int32", prod, m + pre), "i")
        else:  # AIE: no symmetric floor / ceil: the two directed roundings, picked by sign
            toward, away = (Rounding.CEIL, Rounding.FLOOR) if rnd is Rounding.SYM_FLOOR else (Rounding.FLOOR, Rounding.CEIL)
            self.modes_for(Rounding.FLOOR, False)
            down = self.emit(_cpp("to_int32", prod, m + pre), "i")
            self.modes_for(Rounding.CEIL, False)
            up = self.emit(_cpp("to_int32", prod, m + pre), "i")
            neg, pos = (up, down) if toward is Rounding.CEIL else (down, up)
            del away
            raw = self.emit(_cpp("select", pos, neg, _cpp("lt", c, _cpp("int32", 0))), "i", 2)
        # the raw index's range over the input type's codes (R is monotone), every entry of it in the table
        lo, hi = (int(v) for v in fixed.round_shift(np.array([ty.min_code * p, ty.max_code * p], dtype=np.int64),
                                                     m, rnd))
        if not self.widen or (hi - lo + 1) * 2 > self.device.generation.data_memory_bytes:
            # clamped (a widened table that could not fit a tile's memory even alone is not built)
            table = _cpp("cell_table", a.function)
            return self.emit(_cpp("clamp", _cpp("add", raw, _cpp("int32", a.offset)), 0, a.size - 1), "i", 3), table
        key = (a.function, lo, hi)
        if key not in self.tables:
            codes = np.asarray(a.codes(), dtype=np.int64)
            entries = codes[np.clip(np.arange(lo, hi + 1) + a.offset, 0, a.size - 1)]
            small = entries.size == 0 or (int(entries.min()) >= -(1 << 15) and int(entries.max()) < 1 << 15)
            self.tables[key] = (f"VT{len(self.tables)}", "int16" if small else "int32", [int(v) for v in entries])
        name = self.tables[key][0]
        return raw, _cpp("table_at", name, lo)

    def table_decls(self) -> list[str]:
        """The widened tables' C++ (entry k - lowest raw index at position k)."""
        return [_aligned_const(ct, name, np.array(e)) for name, ct, e in self.tables.values()]

    @property
    def table_bytes(self) -> int:
        return sum(len(e) * (2 if ct == "int16" else 4) for _, ct, e in self.tables.values())

    def lookup(self, index: tuple[str, str], a: act.TableSpec, acc: FixedType) -> str:
        """The table's entry (``index``: the index and the table, from ``index``) cast to the
        accumulator type, as act_sigmoid / act_tanh cast it: an exact upshift (and the overflow,
        should an entry not fit the accumulator), or a shift-round-saturate when the entries are
        finer."""
        idx, table = index
        v = self.emit(_cpp("gather", table, idx), "t", 0, segs=None)  # costs.gather_segments(n)
        s = acc.frac - a.entry.frac
        big = int(np.abs(a.codes()).max()) if a.size else 0
        if s < 0:
            return self.srs(self.emit(_cpp("acc", v), "e", kind="acc"), -s, acc)
        if (big << s) > _INT31:
            raise _NotExact(f"a {a.function} entry shifted onto the accumulator's grid leaves the int32 lanes")
        if s:
            v = self.emit(_cpp("upshift", v, s), "e")
        fits = -(big << s) >= acc.min_code and (big << s) <= acc.max_code
        return v if fits else self.overflow(v, acc)

    def sum_cast(self, terms: list[tuple[str, int, str, int, int]], t: FixedType) -> str:
        """``(t)(sum of a * b)``: terms (a, |a| bound, b, |b| bound, frac of the product)."""
        top = max(f for *_, f in terms)
        acc = None
        for a, am, b, bm, f in terms:
            s = top - f
            if s:  # align the term to the finest grid: upshift the operand that stays within int32
                if (am << s) <= (bm << s) and (am << s) <= _INT31:
                    a = self.emit(_cpp("upshift", a, s), "u")
                elif (bm << s) <= _INT31:
                    b = self.emit(_cpp("upshift", b, s), "u")
                else:
                    raise _NotExact(f"aligning a term by {s} bits leaves the int32 lanes")
            acc = self.emit(_cpp("mul", a, b) if acc is None else _cpp("mac", acc, a, b), "m", kind="acc")
        return self.srs(acc, top - t.frac, t)


def _reasons(node: Node, device: Device) -> list[str]:
    """Why the vector gate math would not be exact (empty: it is)."""
    t = node.types
    if t is None or t.is_float:
        return ["float gate math (rnn_cell.h's scalar step)"]
    out = []
    acc, res = t.accum, t.output
    for name, ty in (("accumulator", acc), ("result", res)):
        if not ty.signed or ty.width > 32:
            out.append(f"the {name} type {ty} is not a signed type of at most 32 bits")
        if ty.frac < 0 or ty.frac > 30:
            out.append(f"the {name} type {ty} has {ty.frac} fractional bits (0..30 are vectorised)")
    for a in (t.sigmoid, t.tanh):
        if not isinstance(a, act.TableSpec):
            out.append(f"{a.label} {getattr(a, 'function', '')} activation: no table to read")
    if out:
        return out
    gen = device.generation
    sig, tanh = t.sigmoid, t.tanh
    index_inputs = [(sig, acc), (tanh, acc)] + ([(tanh, res)] if node.op == "lstm" else [])
    for a, ty in index_inputs:
        p, q = a.scale.numerator, a.scale.denominator
        den = q << ty.frac
        m = den.bit_length() - 1
        if den & (den - 1):
            out.append(f"the {a.function} index divides by {den}, not a power of two")
            continue
        if m > gen.srs_shift_max:
            out.append(f"the {a.function} index shifts {m} bits > {gen.srs_shift_max}")
        big = max(-ty.min_code, ty.max_code) * p
        if (big >> m) + 1 + a.offset > _INT31 or big >= _ACC63:
            out.append(f"the {a.function} index of {ty} could need hls4ml's 32-bit wraps")
    shifts = [(acc.frac, acc)]  # r * (U h + c): 2 fa -> fa
    if node.op == "gru":
        shifts.append((acc.frac + max(acc.frac, res.frac) - res.frac, res))
    else:
        shifts += [(acc.frac + max(acc.frac, res.frac) - res.frac, res), (2 * acc.frac - res.frac, res)]
    for s, ty in shifts:
        if s < 0:
            out.append(f"a cast into {ty} gains bits ({-s}): not a shift-round-saturate")
        elif s > gen.srs_shift_max:
            out.append(f"a cast into {ty} shifts {s} bits > {gen.srs_shift_max}")
        elif s > 0 and ty.rounding not in gen.rounding_modes:
            out.append(f"{ty.rounding.value} rounding (of {ty}) is not a per-lane mode of {gen.name}")
    return out


def _bounds(node: Node) -> tuple[int, int, int, int]:
    """(largest |sigmoid entry|, |tanh entry|, |h|, |c|) codes, the entries cast to the accumulator."""
    t = node.types
    sig = int(np.abs(fixed.cast(t.sigmoid.codes(), t.sigmoid.entry.frac, t.accum)).max())
    tanh = int(np.abs(fixed.cast(t.tanh.codes(), t.tanh.entry.frac, t.accum)).max())
    res = max(-t.output.min_code, t.output.max_code)
    return sig, tanh, min(res, state_max_code(t, node.op)), res


def _scheduled(node: Node, device: Device, n: int, widen: bool) -> tuple[_Gen, list[int]]:
    """The gate math of ``n`` hidden units in the program order the list schedule finds shorter
    (``_generate``'s ``z_late``: the GRU's z table read before or after the candidate's; the first on
    a tie), with its term bounds.  Raises _NotExact."""
    lanes = gate_lanes(device)
    groups = -(-n // lanes)
    last = n - (groups - 1) * lanes
    best = None
    for z_late in (False, True) if node.op == "gru" else (False,):
        g = _Gen(device, n, lanes, widen)
        terms = _generate(g, node, *_bounds(node), z_late=z_late)
        cycles = (groups - 1) * g.cycles(lanes) + g.cycles(last)
        if best is None or cycles < best[0]:
            best = (cycles, g, terms)
    return best[1], best[2]


def _generate(g: _Gen, node: Node, ms: int, mt: int, mh: int, mc: int, z_late: bool = False) -> list[int]:
    """One lane group's gate math into ``g``; returns the state update's term bounds (their sum
    below 2^62 keeps the accumulator lanes exact).  ``z_late``: the GRU's z table read after the
    candidate's in program order (``_scheduled``)."""
    t = node.types
    acc, res = t.accum, t.output
    fa, fr = acc.frac, res.frac
    top = max(2 * fa, fr + fa)
    if node.op == "gru":
        if (1 << fa) + ms > _INT31:
            raise _NotExact("1 - z leaves the int32 lanes")
        # program order = the list schedule's priority: r's chain (r, r (U h)_n, the candidate) first,
        # z's index beside it and z's table read beside r's or (z_late, issue 22: the table reads share
        # the store unit) after the candidate's, where the scheduler fits it into the slots between r's
        # and the candidate's; in the update the candidate's product last (exact integer sums in the
        # accumulator lanes: their order does not change the result)
        r = g.lookup(g.index_of_sum(g.load("gx", 1), g.load("gh", 1), acc, t.sigmoid), t.sigmoid, acc)
        zi = g.index_of_sum(g.load("gx", 0), g.load("gh", 0), acc, t.sigmoid)
        z = None if z_late else g.lookup(zi, t.sigmoid, acc)
        # r (U h)_n's wrap: left to the sum with (W x)_n, wrapped into the same type
        if acc.saturation is Saturation.WRAP and (acc.rounding in _SHIFT_INVARIANT or fa == 0) and fa <= g.device.generation.ups_shift_max:
            # (W x)_n folded into the product's accumulator (issue 22): R((r gh + gx 2^fa) / 2^fa) =
            # R(r gh / 2^fa) + gx for a rounding that commutes with integer shifts, so the product
            # starts from gx upshifted (a move, off r's path) and the add leaves the chain
            gxn = g.emit(_cpp("acc", g.load("gx", 2), fa), "e", kind="acc")
            rh = g.srs(g.emit(_cpp("mac", gxn, r, g.load("gh", 2)), "m", kind="acc"), fa, acc, lazy=True)
            cand = g.lookup(g.index_of_wrapped(rh, acc, t.tanh), t.tanh, acc)
        else:
            rh = g.srs(g.emit(_cpp("mul", r, g.load("gh", 2)), "m", kind="acc"), fa, acc, lazy=True)
            cand = g.lookup(g.index_of_sum(g.load("gx", 2), rh, acc, t.tanh), t.tanh, acc)
        z = g.lookup(zi, t.sigmoid, acc) if z_late else z
        omz = g.emit(_cpp("sub", _cpp("int32", 1 << fa), z), "o")
        hv = g.emit(_cpp("load", "h"), "h", 0, segs=((_LOAD, 1),))
        hn = g.sum_cast([(hv, mh, z, ms, fr + fa), (cand, mt, omz, (1 << fa) + ms, 2 * fa)], res)
        g.store("h", hn)
        return [(mt * ((1 << fa) + ms)) << (top - 2 * fa), (mh * ms) << (top - fr - fa)]
    # each gate's index then its table read, in gate order (i, f, g, o: o is needed last); in c's
    # update the candidate's product last (exact sums in the accumulator lanes, in any order)
    spec = [t.sigmoid, t.sigmoid, t.tanh, t.sigmoid]
    i, f, cand, o = (g.lookup(g.index_of_sum(g.load("gx", k), g.load("gh", k), acc, spec[k]), spec[k], acc)
                     for k in range(4))
    cv = g.emit(_cpp("load", "c"), "c", 0, segs=((_LOAD, 1),))
    cn = g.sum_cast([(cv, mc, f, ms, fr + fa), (cand, mt, i, ms, 2 * fa)], res)
    g.store("c", cn)
    ca = g.lookup(g.index(cn, res, t.tanh), t.tanh, acc)
    hn = g.sum_cast([(o, ms, ca, mt, 2 * fa)], res)
    g.store("h", hn)
    return [max((mt * ms) << (top - 2 * fa), 0) + ((mc * ms) << (top - fr - fa)), ms * mt]


def vector_gates(node: Node, device: Device, space: str, widen: bool = True, units: int | None = None,
                 struct: str = "VGates") -> VectorGates | str:
    """The layer's vector gate math for the compact tile, or why it keeps the scalar step;
    ``widen``: table reads through widened tables (no index clamp), else hls4ml's clamped index.
    ``units`` (the grid mapping's chain tile, rnn_grid.h): the gate math of that many hidden units,
    gate-stacked with stride ``units`` (as ``split_gate_cycles`` schedules it), as struct ``struct``."""
    bad = _reasons(node, device)
    if bad:
        return "; ".join(bad)
    n = units if units is not None else node.attrs["hidden_size"]
    lanes = gate_lanes(device)
    try:
        g, terms = _scheduled(node, device, n, widen)
    except _NotExact as e:
        return str(e)
    if node.op == "gru" and sum(terms) >= _ACC63 or node.op == "lstm" and max(terms) >= _ACC63:
        return "the state update's exact sum could exceed the accumulator lanes"
    groups = -(-n // lanes)
    text = _cpp("gates", space, lanes, widen, g.table_decls(), struct, groups, n, g.lines)
    last = n - (groups - 1) * lanes
    return VectorGates(text, lanes, g.ops, g.modes, 3 if node.op == "gru" else 5, g.cycles(lanes), g.cycles(last),
                       g.table_bytes)


# ----------------------------------------------------------------------------- vector dense head
#
# The dense head after the last layer (ops/dense.py's integer arithmetic: exact products summed,
# + (b << bias_shift), wrapped to the accumulator's width, round-shifted by ``shift`` under the
# output's rounding, the output's overflow, ReLU) in column form on int32 lanes: outputs are the
# lanes, each input adds aie::mac of its weight column by the broadcast input into exact
# accumulator lanes started from the bias (upshifted into the lanes), a block of up to
# COMPACT_GROUP_BLOCK output groups per pass over the inputs (independent accumulators in one loop,
# as CompactProduct::terms; each lane still adds its terms in input order).  The wrap is an identity when
# the layer's largest |sum| is below 2^(acc_bits - 1), or (32-bit accumulators) a wrapping
# to_vector<int32>(0); then one to_vector<int32>(shift) under the output's rounding mode, and the
# output's overflow and ReLU as vector ops.  Activations / softmax in the head, or a layer outside
# these conditions, keep the scalar head (rnn_cell.h ``head``).
# A later layer with fewer outputs than lanes (top tagging's 64 -> 1) runs in **dot form** instead:
# per output, its inputs are the lanes (the previous layer's padded outputs, zero-initialised), one
# element-wise aie::mac per lane group of inputs into exact accumulator lanes (the bias in lane 0),
# then the lanes' exact sum: each lane's 64-bit sum p split into hi = floor(p / 2^16)
# (to_vector<int32>(16) under floor rounding, no saturation) and lo = p - hi 2^16 in [0, 2^16)
# (the wrapping to_vector<int32>(0) minus hi upshifted by 16: int32 adds are modular), both summed
# by aie::reduce_add (int32, modular: exact while the layer's largest |sum| is below 2^46), and the
# sum rebuilt in the accumulator lanes as aie::accum(hi sum, 16) + lo sum; then the lane form's
# finish.  The accumulator's own lanes are never added across (its sizes below 4 lanes are not
# native, UG1603 / UG1079 "Accumulator Registers").  A layer whose sums could wrap its accumulator
# (a 32-bit one), or reach 2^46, keeps the lane form (the dot form's wrap is not verified on x86).
_DOT_SPLIT = 16  # the hi / lo split of a lane's exact sum (bits of lo)
_DOT_BOUND = 1 << 46  # a dot-form sum's bound below which hi's int32 sum is exact


@dataclass(frozen=True)
class VectorHead:
    """The head's C++ (``VHead`` in the layer's namespace), its lanes and per layer the vector
    ops and mode writes of one output group's finish (for costs.compact_head_cycles)."""

    text: str
    lanes: int
    finish: tuple[int, ...]
    dots: tuple[int, ...] = ()  # per layer 1 where it runs in dot form (inputs as lanes), else 0

    @property
    def form(self) -> tuple[int, ...]:
        """RecurrentDims.head_form: (lanes, finish per layer, dot flag per layer)."""
        return (self.lanes, *self.finish, *self.dots)


def reduce_add_ops(lanes: int) -> int:
    """Vector ops of one aie::reduce_add over ``lanes`` int32 lanes: a halving tree, one shuffle
    and one add per level (assumed: UG1529 documents the operation, not its schedule)."""
    return 2 * max(lanes.bit_length() - 1, 0)


def vector_head(head: list[Node], n_h: int, h_type: FixedType, device: Device, space: str) -> VectorHead | str:
    """The head's vector form for the compact tile (``h_type``: the state's type), or why it
    keeps the scalar loops."""
    if not head:
        return "no head"
    gen = device.generation
    lanes = gate_lanes(device)
    decl, body, finish, dots = [], [], [], []
    src, width = "h", n_h
    xmax = max(-h_type.min_code, h_type.max_code)
    for li, d in enumerate(head):
        if d.op != "dense":
            return f"{d.op} in the head (its table / softmax runs on the scalar unit)"
        t = d.types
        if t is None or t.is_float:
            return "a float head"
        out = t.output
        w = np.asarray(d.params["weight_q"], dtype=np.int64)
        k, m = w.shape
        b = d.params.get("bias_q")
        b = np.zeros(m, dtype=np.int64) if b is None else np.asarray(b, dtype=np.int64)
        if k != width:
            return f"dense layer {d.name} reads {k} features, its input has {width}"
        if not out.signed or out.width > 32:
            return f"the head's output type {out} is not a signed type of at most 32 bits"
        if t.shift < 0 or t.shift > gen.srs_shift_max or t.bias_shift > gen.ups_shift_max:
            return f"the head's shifts ({t.shift}, bias {t.bias_shift}) are not shift-round-saturates"
        if t.shift > 0 and out.rounding not in gen.rounding_modes:
            return f"{out.rounding.value} rounding is not a per-lane mode of {gen.name}"
        if w.size and int(np.abs(w).max()) > _INT31 or b.size and int(np.abs(b).max()) > _INT31:
            return "head weights or biases wider than 32 bits"
        bound = xmax * int(np.abs(w).sum(axis=0).max() if w.size else 0) + (int(np.abs(b).max()) << t.bias_shift)
        if bound >= _ACC63:
            return "a head sum could leave the accumulator lanes"
        wraps = bound >= 1 << (t.acc_bits - 1)
        if wraps and t.acc_bits != 32:
            return f"a head sum could wrap its {t.acc_bits}-bit accumulator"
        mp = -(-m // lanes) * lanes
        if li > 0 and m < lanes and not wraps and bound < _DOT_BOUND:
            # dot form (the comment above): src holds the previous layer's k outputs padded to kp lanes
            kp = -(-k // lanes) * lanes
            wt = np.zeros((m, kp), dtype=np.int64)
            wt[:, :k] = w.T
            bd = np.zeros((m, lanes), dtype=np.int64)
            bd[:, 0] = b
            decl += [_aligned_const("int32", f"VHT{li}", wt), _aligned_const("int32", f"VHD{li}", bd)]
            dst = "yv" if li == len(head) - 1 else f"a{li}"
            g = _Gen(device, 0, lanes)
            g.modes_for(None, False)
            lo = g.emit(_cpp("to_int32", "s", 0), "w")
            g.modes_for(Rounding.FLOOR, False)
            hi = g.emit(_cpp("to_int32", "s", _DOT_SPLIT), "w")
            low = g.emit(_cpp("sub", lo, _cpp("upshift", hi, _DOT_SPLIT)), "w", 2)
            red = reduce_add_ops(lanes) + 1  # + the broadcast back into lanes
            sh = g.emit(_cpp("lanes_sum", hi), "w", red)
            sl = g.emit(_cpp("lanes_sum", low), "w", red)
            acc = g.emit(_cpp("add", _cpp("acc", sh, _DOT_SPLIT), sl), "w", 2, kind="acc")
            y = g.srs(acc, t.shift, out)
            if d.attrs.get("activation") == "relu":
                y = g.emit(_cpp("max", y, _cpp("int32", 0)), "y")
            finish.append(g.ops + g.modes + 1)  # + the bias upshift into the lanes
            dots.append(1)
            body.append(_cpp("head_dot", li, dst, mp, m, kp, src, t.bias_shift, g.lines, y))
            src, width, xmax = dst, m, max(-out.min_code, out.max_code)
            continue
        dots.append(0)
        wa = np.zeros((k, mp), dtype=np.int64)
        wa[:, :m] = w
        ba = np.zeros(mp, dtype=np.int64)
        ba[:m] = b
        decl += [_aligned_const("int32", f"VHW{li}", wa), _aligned_const("int32", f"VHB{li}", ba)]
        dst = "yv" if li == len(head) - 1 else f"a{li}"
        g = _Gen(device, 0, lanes)
        acc = "s"
        if wraps:  # the accumulator's 32-bit wrap: keep the low 32 bits, then round from them
            g.modes_for(None, False)
            low = g.emit(_cpp("to_int32", "s", 0), "w")
            acc = g.emit(_cpp("acc", low), "w", kind="acc")
        y = g.srs(acc, t.shift, out)
        if d.attrs.get("activation") == "relu":
            y = g.emit(_cpp("max", y, _cpp("int32", 0)), "y")
        finish.append(g.ops + g.modes + 1)  # + the bias upshift into the lanes
        # a block of up to COMPACT_GROUP_BLOCK output groups per pass over the inputs (inputs outer, the
        # block's groups inner, as CompactProduct::terms): independent accumulators, each lane's terms
        # still added in input order; then each group's finish
        blk = COMPACT_GROUP_BLOCK * lanes
        body.append(_cpp("head_lanes", li, dst, mp, blk, COMPACT_GROUP_BLOCK, k, src, t.bias_shift, g.lines, y))
        src, width, xmax = dst, m, max(-out.min_code, out.max_code)
    text = _cpp("head", space, decl, lanes, body, width)
    return VectorHead(text, lanes, tuple(finish), tuple(dots))


def split_gate_cycles(node: Node, device: Device, units: int, widen: bool = True) -> int | None:
    """The vector gate math of one split tile (costs.split_exchange_cycles: ``units`` hidden units
    per tile, gate-stacked rows ``gate * units``), list-scheduled as ``vector_gates`` schedules the
    compact tile's: the same generator with ``units`` in place of n_h (its gate-row offsets, so
    aligned or unaligned loads, follow), per lane group its real lanes' gathers, + ROW_LOOP_CYCLES
    per group (costs.compact_gate_cycles); ``widen`` as vector_gates (a split or grid tile holds
    few weights, so the widened tables are assumed to fit: docs/recurrent.md).  None where the
    layer has no vector gate math."""
    from .costs import ROW_LOOP_CYCLES

    if _reasons(node, device):
        return None
    lanes = gate_lanes(device)
    try:
        g, _ = _scheduled(node, device, units, widen)
    except _NotExact:
        return None
    groups = -(-units // lanes)
    last = units - (groups - 1) * lanes
    return (groups - 1) * g.cycles(lanes) + g.cycles(last) + groups * ROW_LOOP_CYCLES
