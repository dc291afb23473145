"""Two folds that shorten the compact tile's vector gate math (issue 22), each against hls4ml's
definition for every input it can see.

1. Widened activation tables: the vector gate math reads each table
through a pointer offset by the lowest raw index, ``table[raw]``, instead of hls4ml's clamped
``table[clamp(raw + N/2, 0, N-1)]``; the widened table must give the same entry for **every**
code the index's input type can hold.

The reference here imports nothing from aieflow's recurrent code: hls4ml's index is written out
from its definition (``int(x * N / (2L))`` for hls4ml's truncating tables, ``floor`` for a flooring
one, + N/2, clamped), the entries are hls4ml's tables (``TableSpec.codes``, checked entry by entry
against hls4ml's C++ in test_recurrent_hls4ml.py).  The widened tables and the offsets are parsed
from the emitted C++ (``rnn_vgates.h`` text), and checked over every code of the input type: the
read stays inside the array, and the entry is hls4ml's.

2. The wrap of a gate's sum folded into its table index: for a WRAP type of w < 32 bits the kernel
upshifts the int32 sum by k = 32 - w (the lanes' add and shift are modular), multiplies by the
scale's numerator p and shift-round-saturates by m + k.  The (k, p, m + k) of every such index are
parsed from the emitted C++ and that arithmetic (written out here: int32 wrap, exact product,
rounding by the table's rule) is compared with hls4ml's index of the wrapped sum over every int32
sum within 2^17 of zero (both wrap edges of a 16-bit type, any sum of two 16-bit codes) and 200,000
random int32 sums (the lanes may hold any int32 when an operand's own wrap is left to the sum, as
the GRU's r (U h)_n is).

x86 verify of the whole compact tile with both folds: test_recurrent_compact.py (top-tagging GRU on
VEK280 and VCK190, LSTM on VEK280).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from aieflow.devices import get_device  # noqa: E402
from aieflow.numerics.types import Rounding, parse_type  # noqa: E402
from aieflow.ops import activations as act  # noqa: E402
from aieflow.recurrent.compact import vector_gates  # noqa: E402  (the code under test)
from aieflow.recurrent.design import compile_recurrent  # noqa: E402
from aieflow.recurrent.plan import RecurrentOptions  # noqa: E402

KEYS = ("input", "weight", "recurrent_weight", "bias", "recurrent_bias", "accum", "output")
HLS4ML = dict.fromkeys(KEYS, "fixed<16,6>")
_TABLE = re.compile(r"static const (int16|int32) (VT\d+)\[(\d+)\] = \{([^}]*)\};")
_GATHER = re.compile(r"rnnv::gather<L>\((?:(VT\d+) ([+-]) (\d+)|cell::ACT_\w+_T), \w+, n\)")


class _Rnn(torch.nn.Module):
    def __init__(self, cell: str, n_in: int, n_h: int):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(n_in, n_h, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0]


def _node(cell: str, device: str, types: dict):
    torch.manual_seed(0)
    net = _Rnn(cell, 3, 5).eval()
    x = torch.randn(8, 3, 3)
    d = compile_recurrent(net, device, x[:2], {"precision": "int16", "layers": {"rnn": dict(types)}}, x,
                          RecurrentOptions(distribution="compact"))
    return next(n for n in d.graph.nodes if n.op in ("gru", "lstm"))


def _hls4ml_index(codes: np.ndarray, frac: int, a: act.TableSpec) -> np.ndarray:
    """hls4ml's raw index of inputs ``codes * 2**-frac`` (before + N/2): x * N / (2L) rounded by the
    table's rule, in integers (2L is an integer for these tables)."""
    span = 2 * a.limit
    assert span.denominator == 1
    num, den = codes.astype(np.int64) * a.size, int(span) << frac
    if a.index_rounding is Rounding.SYM_FLOOR:  # C's int(): toward zero
        return np.sign(num) * (np.abs(num) // den)
    assert a.index_rounding is Rounding.FLOOR
    return num // den


def _reads(text: str) -> tuple[dict[str, np.ndarray], list[tuple[str, int]]]:
    tables = {name: np.array([int(v) for v in body.replace("\n", " ").split(",") if v.strip()], dtype=np.int64)
              for _, name, n, body in _TABLE.findall(text)}
    for _, name, n, _ in _TABLE.findall(text):
        assert tables[name].size == int(n)
    # (widened table, offset), or (None, 0) for a clamped read of rnn_cell.h's table
    gathers = [(name or None, 0 if not name else int(off) if sign == "+" else -int(off))
               for name, sign, off in _GATHER.findall(text)]
    return tables, gathers


CASES = [
    # cell, device, types: hls4ml's default (16-bit WRAP accumulator, truncating index, VEK280's symmetric
    # rounding); a saturating 20-bit accumulator, a narrower result (LSTM's tanh(c) index reads the result
    # type), AIE's select path for the truncating index (VCK190)
    ("GRU", "vek280", HLS4ML),
    ("LSTM", "vek280", HLS4ML),
    ("GRU", "vek280", {**HLS4ML, "accum": "fixed<20,8,RND,SAT>"}),
    # the same on VCK190: the tanh table (2^15 raw indices, 64 KB of int16) exceeds its 32 KB tile: clamped
    ("GRU", "vck190", {**HLS4ML, "accum": "fixed<20,8,RND,SAT>"}),
    ("LSTM", "vck190", {**HLS4ML, "accum": "fixed<18,7,RND,SAT>", "output": "fixed<12,3,TRN,SAT>"}),
]


@pytest.mark.parametrize("cell, device, types", CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_widened_table_reads_hls4ml_entry_for_every_input_code(cell, device, types):
    node = _node(cell, device, types)
    vg = vector_gates(node, get_device(device), "ns", widen=True)
    assert not isinstance(vg, str), vg
    tables, gathers = _reads(vg.text)
    assert vg.text.count(", 0, 1023)") == sum(name is None for name, _ in gathers)  # the index clamp: clamped reads only
    sig, tanh = act.hls4ml_table("sigmoid"), act.hls4ml_table("tanh")
    acc, res = parse_type(types["accum"]), parse_type(types.get("output", types["accum"]))
    # the reads in program order (recurrent/compact._generate): GRU r, then z and the candidate in the order the
    # list schedule finds shorter (compact._scheduled: z's read before or after the candidate's); LSTM i, f, g,
    # o, tanh(c).  Every read must give hls4ml's entry under one of the orders.
    orders = ([[(sig, acc), (sig, acc), (tanh, acc)], [(sig, acc), (tanh, acc), (sig, acc)]] if cell == "GRU"
              else [[(sig, acc), (sig, acc), (tanh, acc), (sig, acc), (tanh, res)]])
    assert all(len(gathers) == len(e) for e in orders)
    assert vg.table_bytes == sum(t.size * (2 if f"int16 {n}[" in vg.text else 4) for n, t in tables.items())
    memory = get_device(device).generation.data_memory_bytes
    problems = [_read_problems(gathers, tables, e, memory) for e in orders]
    assert [] in problems, (cell, device, problems)


def _read_problems(gathers, tables, expect, memory) -> list[str]:
    """What differs from hls4ml when the reads compute ``expect``'s (table, input type) in order."""
    out = []
    for (name, off), (a, ty) in zip(gathers, expect, strict=True):
        codes = np.arange(ty.min_code, ty.max_code + 1, dtype=np.int64)  # every code, both edges included
        raw = _hls4ml_index(codes, ty.frac, a)
        # widened unless its int16 entries alone would exceed the tile's data memory
        if (name is None) != ((int(raw.max()) - int(raw.min()) + 1) * 2 > memory):
            out.append(f"{a.function}: widened {name is not None}")
        if name is None:
            continue
        entry = a.codes().astype(np.int64)[np.clip(raw + a.size // 2, 0, a.size - 1)]
        at = raw + off
        table = tables[name]
        if at.min() < 0 or at.max() >= table.size:  # no read outside the array
            out.append(f"{name}: reads outside the array")
            continue
        bad = np.flatnonzero(table[at] != entry)
        if bad.size:
            out.append(f"{name}: code {codes[bad[0]]} reads {table[at[bad[0]]]}, hls4ml {entry[bad[0]]}")
        if at.min() != 0 or at.max() != table.size - 1:  # no larger than the input type needs
            out.append(f"{name}: larger than the input type needs")
    return out


def test_tables_that_do_not_fit_the_tile_keep_the_clamp():
    """VCK190's 32 KB tile cannot hold the top-tagging GRU's 24 KB of widened tables with its weights
    and head: the compact tile keeps hls4ml's clamped index; VEK280's 64 KB can."""
    torch.manual_seed(0)
    net = _Rnn("GRU", 6, 20).eval()
    x = torch.randn(8, 4, 6)
    for device, widened in (("vek280", True), ("vck190", False)):
        d = compile_recurrent(net, device, x[:2], {"precision": "int16", "layers": {"rnn": dict(HLS4ML)}}, x,
                              RecurrentOptions(distribution="compact"))
        form = d.mapping.dims.gate_form
        assert (form[6] > 0) == widened, device
        text = d.files["src/rnn_vgates.h"]
        assert ("rnnv::clamp" in text) == (not widened) and ("VT0" in text) == widened


# a gate sum's add (a), or the GRU's r (U h)_n + (W x)_n from one accumulator (r), upshifted
_FOLD = re.compile(r"const vi (u\d+) = aie::upshift\(([ar]\d+), (\d+)\);\n\s*const auto (p\d+) = aie::mul\(\1, int32\((\d+)\)\);")


def _int32(v: np.ndarray) -> np.ndarray:
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


def _round_shift(v: np.ndarray, s: int, rule: Rounding) -> np.ndarray:
    """v / 2^s rounded: floor, ceil (AIE's two directed modes, picked by sign for C's truncation on
    AIE) or toward zero."""
    if rule is Rounding.FLOOR:
        return v >> s
    if rule is Rounding.CEIL:
        return -((-v) >> s)
    assert rule is Rounding.SYM_FLOOR
    return np.sign(v) * (np.abs(v) >> s)


@pytest.mark.parametrize("cell, device", [("GRU", "vek280"), ("GRU", "vck190"), ("LSTM", "vek280")])
def test_wrap_folded_into_the_index_is_hls4ml_index_of_the_wrapped_sum(cell, device):
    node = _node(cell, device, HLS4ML)
    vg = vector_gates(node, get_device(device), "ns", widen=True)
    text = vg.text
    acc = parse_type(HLS4ML["accum"])
    sig, tanh = act.hls4ml_table("sigmoid"), act.hls4ml_table("tanh")
    folds = _FOLD.findall(text)
    assert len(folds) == (3 if cell == "GRU" else 4)  # every gate sum's wrap folded into its index
    # the only wraps left: the stored states' (GRU h; LSTM c, h): r (U h)_n's is left to its sum's index too
    assert text.count("rnnv::wrap") == (1 if cell == "GRU" else 2)
    # the indices in program order: GRU r, z, candidate; LSTM i, f, g, o
    order = [sig, sig, tanh] if cell == "GRU" else [sig, sig, tanh, sig]
    rng = np.random.default_rng(0)
    sums = np.concatenate([np.arange(-(1 << 17), (1 << 17) + 1), rng.integers(-(1 << 31), 1 << 31, 200_000)])
    for (_, _, k, prod, p), a in zip(folds, order, strict=True):
        k, p = int(k), int(p)
        shifts = [int(v) for v in re.findall(rf"{prod}\.template to_vector<int32>\((\d+)\)", text)]
        assert p == a.scale.numerator and k == 32 - acc.width
        lanes = _int32(_int32(sums) << k)  # the modular add's result, upshifted modulo 2^32
        wrapped = _int32(sums << (32 - acc.width)) >> (32 - acc.width)  # ap_fixed's WRAP of the sum
        ref = _hls4ml_index(wrapped, acc.frac, a)
        if len(shifts) == 1:  # one shift-round-saturate under the table's rounding (VEK280)
            got = _round_shift(lanes * p, shifts[0], a.index_rounding)
        else:  # AIE: floor and ceil, picked by the sign of the lanes (C's truncation)
            assert len(shifts) == 2 and shifts[0] == shifts[1]
            down, up = _round_shift(lanes * p, shifts[0], Rounding.FLOOR), _round_shift(lanes * p, shifts[0], Rounding.CEIL)
            got = np.where(lanes < 0, up, down)
        bad = np.flatnonzero(got != ref)
        assert bad.size == 0, f"{cell} {device}: sum {sums[bad[0]]} gives index {got[bad[0]]}, hls4ml {ref[bad[0]]}"
