"""Recurrent layers (GRU, LSTM): IR conventions, float reference and emulation.

IR: op ``gru`` or ``lstm``; attrs ``seq_len``, ``input_size``, ``hidden_size``,
``return_sequences`` (all steps, per-sample shape ``(T, n)``, or the last, ``(n,)``) and, for GRU,
``reset_after`` (reset gate applied to ``h U_h + b'_h``: PyTorch, Keras ``reset_after=True``, ONNX
``linear_before_reset=1``).  The initial state is zero.  Parameters in one canonical gate order,
Keras' (also hls4ml's): GRU ``[z, r, h]``, LSTM ``[i, f, c, o]``; ``weight`` is ``(F, G n)``,
``recurrent_weight`` ``(n, G n)``, ``bias`` and ``recurrent_bias`` ``(G n,)`` (x W + b, h U + b').
Frontends reorder with :func:`reorder_gates` (PyTorch GRU ``[r, z, n]``, ONNX LSTM ``[i, o, f, c]``).

Numerics, per layer (the precision picks the mode; see docs/recurrent.md):

* ``fp32``: float32 arithmetic, every operation rounded to float32, dot products accumulated in
  increasing k from the bias (no FMA); activations exact or by table.
* ``bf16`` (AIE-ML / AIE-MLv2): as fp32 (sums in the mapping's order, gate math, c) on bf16
  operands (x, W, U, biases, and h, rounded to bf16 once per step: the state and the output).
* fixed point (int8 / int16 / a16w8): hls4ml 1.x static mode, operation by operation
  (``nnet_recurrent.h`` with the latency dense): each product ``x w`` is cast to the accumulator
  type, accumulated in input order from the cast bias; the input and recurrent parts are added and
  cast; gates go through the tables into the accumulator type; ``r * (h U + b')`` is cast; the new
  state is ``(res_T)(h~ (1 - z) + h z)`` (GRU) or ``c = (res_T)(c~ i + c f)``,
  ``h = (res_T)(o tanh(c))`` (LSTM), so the state is quantised to the result type at every step.

This module holds the IR conventions and the numerics.  The chain planner does not map these
layers (:func:`base.not_mapped`): ``api.compile`` hands graphs with a recurrent layer to
``aieflow.recurrent`` (row-wise / column-wise mappings, aggregation, emission, cycle model), and
``aieflow.emulate`` runs the quantised graph without a mapping.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from threadpoolctl import threadpool_limits

from ..config import PRECISIONS
from ..errors import ConfigError, ModelError, UnsupportedOpError
from ..ir import Node
from ..numerics import fixed
from ..numerics.types import FixedType, FloatType, NumericType, Rounding, Saturation, parse_type
from . import activations as act
from .base import OpFamily, QuantContext, not_mapped
from .dense import power_of_two_type

CANONICAL_GATES: Mapping[str, str] = {"gru": "zrh", "lstm": "ifco"}
# Gate orders of the frameworks, as letters of the canonical names (PyTorch's n and g are h and c).
GATE_ORDERS: Mapping[str, Mapping[str, str]] = {
    "pytorch": {"gru": "rzh", "lstm": "ifco"},
    "onnx": {"gru": "zrh", "lstm": "iofc"},
    "keras": {"gru": "zrh", "lstm": "ifco"},
}
TYPE_KEYS = ("weight", "bias", "recurrent_weight", "recurrent_bias", "accum", "output")
MAX_WIDTH = 32  # products of two codes stay below 2**62: exact in int64


def gates(cell: str) -> int:
    return len(CANONICAL_GATES[cell])


def reorder_gates(a: np.ndarray, cell: str, order: str, axis: int = 0) -> np.ndarray:
    """Blocks of ``a`` along ``axis``, given in gate ``order``, permuted into the canonical order."""
    canon = CANONICAL_GATES[cell]
    if sorted(order) != sorted(canon):
        raise ValueError(f"gate order {order!r} is not a permutation of {canon!r}")
    blocks = np.split(np.asarray(a), len(order), axis=axis)
    return np.concatenate([blocks[order.index(g)] for g in canon], axis=axis)


def make_node(
    name: str,
    cell: str,
    x: str,
    y: str,
    *,
    seq_len: int,
    weight: np.ndarray,
    recurrent_weight: np.ndarray,
    bias: np.ndarray,
    recurrent_bias: np.ndarray,
    return_sequences: bool,
    reset_after: bool = True,
    aliases: tuple[str, ...] = (),
) -> Node:
    """A recurrent IR node from canonical-order parameters (weight ``(F, G n)``, ...)."""
    g = gates(cell)
    f, gn = weight.shape
    n = gn // g
    expected = {"weight": (f, g * n), "recurrent_weight": (n, g * n), "bias": (g * n,), "recurrent_bias": (g * n,)}
    given = {"weight": weight, "recurrent_weight": recurrent_weight, "bias": bias, "recurrent_bias": recurrent_bias}
    for key, shape in expected.items():
        if given[key].shape != shape:
            raise ModelError(f"{cell.upper()} {key} has shape {given[key].shape}, expected {shape}", layer=name)
    attrs = {"seq_len": int(seq_len), "input_size": int(f), "hidden_size": int(n), "return_sequences": bool(return_sequences)}
    if cell == "gru":
        attrs["reset_after"] = bool(reset_after)
    params = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in given.items()}
    return Node(name, cell, (x,), (y,), attrs, params, aliases=aliases)


def output_shape(node: Node) -> tuple[int, ...]:
    n = node.attrs["hidden_size"]
    return (node.attrs["seq_len"], n) if node.attrs["return_sequences"] else (n,)


# ----------------------------------------------------------------------------- types


@dataclass(frozen=True)
class RecurrentTypes:
    """Per-layer numerics; hls4ml names: weight_t, bias_t, recurrent_weight_t, recurrent_bias_t,
    accum_t, result_t (``output``, which also holds the state) and the two tables."""

    input: NumericType
    weight: NumericType
    recurrent_weight: NumericType
    bias: NumericType
    recurrent_bias: NumericType
    accum: NumericType
    output: NumericType
    sigmoid: act.Activation
    tanh: act.Activation

    @property
    def is_float(self) -> bool:
        return isinstance(self.accum, FloatType)


_TYPE_FIELDS = ("input", "weight", "recurrent_weight", "bias", "recurrent_bias", "accum", "output")


def _types_to_json(t: RecurrentTypes) -> dict:
    d = {k: getattr(t, k).to_string() for k in _TYPE_FIELDS}
    d["activations"] = {f: act.activation_to_json(getattr(t, f)) for f in act.FUNCTIONS}
    return d


def _types_from_json(d: dict) -> RecurrentTypes:
    acts = act.parse_activations(d["activations"])
    return RecurrentTypes(*(parse_type(d[k]) for k in _TYPE_FIELDS), acts["sigmoid"], acts["tanh"])


# ----------------------------------------------------------------------------- float reference


def one_blas_thread(fn):
    """Run ``fn`` with BLAS on one thread: a time-step loop does ``seq_len`` small products
    ([batch, n] x [n, gates * n]) in sequence, too small for threads to pay, and a multi-threaded
    BLAS spinning on a busy machine made them 25x slower (8.2 s vs 0.33 s for 100 steps of
    200 x 128 x 384 on the 2-core development machine under load)."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return wrapped


def _sigmoid(x):
    return act.exact("sigmoid", x)


def _sequence(node: Node, x: np.ndarray) -> np.ndarray:
    t, f = node.attrs["seq_len"], node.attrs["input_size"]
    x = np.asarray(x)
    if x.ndim < 2 or int(np.prod(x.shape[1:])) != t * f:
        raise ModelError(f"input has per-sample shape {x.shape[1:]}, expected ({t}, {f})", layer=node.name)
    return x.reshape(x.shape[0], t, f)


@one_blas_thread
def float_forward(node: Node, x: np.ndarray, stats: dict[str, float] | None = None) -> np.ndarray:
    """Float64 reference with exact activations (calibration; ``stats`` collects max |value|)."""
    p = {k: node.params[k].astype(np.float64) for k in ("weight", "recurrent_weight", "bias", "recurrent_bias")}
    n = node.attrs["hidden_size"]
    xs = _sequence(node, x).astype(np.float64)
    gx_all = xs @ p["weight"] + p["bias"]
    h = np.zeros((xs.shape[0], n))
    c = np.zeros_like(h)
    outs = []

    def note(key, v):  # max |v| as max(max v, -min v): two reductions, no |v| temporary
        if stats is not None and v.size:
            stats[key] = max(stats.get(key, 0.0), float(v.max()), float(-v.min()))

    note("gates", gx_all)
    gx_steps = np.ascontiguousarray(gx_all.transpose(1, 0, 2))  # step-major: each step's gates contiguous
    for step in range(xs.shape[1]):
        gx = gx_steps[step]
        if node.op == "gru" and not node.attrs.get("reset_after", True):
            gh_zr = h @ p["recurrent_weight"][:, : 2 * n] + p["recurrent_bias"][: 2 * n]
            z, r = np.split(_sigmoid(gx[:, : 2 * n] + gh_zr), 2, axis=1)
            cand = np.tanh(gx[:, 2 * n :] + (r * h) @ p["recurrent_weight"][:, 2 * n :] + p["recurrent_bias"][2 * n :])
            note("gates", gh_zr)
            h = cand * (1 - z) + h * z
        elif node.op == "gru":
            gh = h @ p["recurrent_weight"] + p["recurrent_bias"]
            zr = gx[:, : 2 * n] + gh[:, : 2 * n]
            z, r = np.split(_sigmoid(zr), 2, axis=1)
            rh = r * gh[:, 2 * n :]
            cand_in = gx[:, 2 * n :] + rh
            note("gates", gh)
            note("gates", zr)
            note("gates", cand_in)
            h = np.tanh(cand_in) * (1 - z) + h * z
        else:
            pre = gx + h @ p["recurrent_weight"] + p["recurrent_bias"]
            note("gates", pre)
            i, f, o = (_sigmoid(pre[:, k * n : (k + 1) * n]) for k in (0, 1, 3))
            c = np.tanh(pre[:, 2 * n : 3 * n]) * i + c * f
            h = o * np.tanh(c)
            note("state", c)
        note("state", h)
        outs.append(h)
    return np.stack(outs, axis=1) if node.attrs["return_sequences"] else h


# ----------------------------------------------------------------------------- quantise


def _layer_activations(ctx: QuantContext, is_float: bool) -> tuple[act.Activation, act.Activation]:
    """Layer setting > top-level setting > default (exact for fp32, the hls4ml tables otherwise)."""
    chosen = {}
    for f in act.FUNCTIONS:
        a = ctx.layer.activations.get(f) or ctx.config.activations.get(f)
        if a is None:
            a = act.ExactActivation(f) if is_float else act.hls4ml_table(f)
        chosen[f] = a
    return chosen["sigmoid"], chosen["tanh"]


def quantise(node: Node, ctx: QuantContext) -> Node:
    """fp32: float32 parameters.  Fixed point: explicit types > power-of-two PTQ defaults."""
    name = node.name
    precision = ctx.layer.precision or ctx.config.precision
    act_kind, w_kind = PRECISIONS[precision]
    for key in TYPE_KEYS:
        if any((n, key) in ctx.hints.params for n in (name, *node.aliases)):
            raise UnsupportedOpError(
                "QDQ-quantised recurrent parameters are not supported yet",
                layer=name,
                hint="export the float model and give the types in the config (layers.<name>.weight, ...)",
            )
    in_type = ctx.input_types[0]
    if w_kind == "i4":
        raise ConfigError(
            f"precision {precision} (4-bit weights) is for Dense layers; recurrent layers take 8- or 16-bit weights",
            layer=name,
            hint=f"give layers.{name}.precision: int8 (or int16 / a16w8) and keep a8w4 for the Dense layers",
        )
    if act_kind in ("fp32", "bf16"):
        return _quantise_float(node, ctx, in_type, precision, act_kind)
    return _quantise_fixed(node, ctx, in_type, precision, act_kind, w_kind)


def _quantise_float(node: Node, ctx: QuantContext, in_type: NumericType, precision: str, kind: str = "fp32") -> Node:
    """fp32: float32 everything.  bf16: weights, biases, the input and the output (= the state h)
    bf16, the accumulator (and the LSTM cell state c) fp32."""
    gen = ctx.device.generation
    if kind not in gen.float_types:
        hint = ("use vck190 (AIE1) for fp32, or int16 / int8 fixed point" if kind == "fp32" else
                "use vek280 / vek385 (AIE-ML / AIE-MLv2) for bf16, or fp32 / int16 / int8")
        raise ConfigError(f"precision {kind} is not available on {ctx.device.board} ({gen.name})",
                          layer=node.name, hint=hint)
    ft = FloatType(kind)
    if in_type != ft:
        raise ConfigError(
            f"input is {in_type} but the layer's precision is {precision}",
            layer=node.name,
            hint="use the same precision for all layers",
        )
    explicit = [k for k in TYPE_KEYS if k in ctx.layer.types and ctx.layer.types[k] != ft]
    if explicit:
        raise ConfigError(f"precision {kind} but other type(s) given for {', '.join(explicit)}", layer=node.name,
                          hint=f"drop the per-key types: a {kind} layer takes its types from the precision")
    sig, tanh = _layer_activations(ctx, True)
    acc = FloatType("fp32")
    types = RecurrentTypes(ft, ft, ft, ft, ft, acc, ft, sig, tanh)
    params = dict(node.params)
    for key in ("weight", "recurrent_weight", "bias", "recurrent_bias"):
        v = node.params[key].astype(np.float32)
        params[f"{key}_q"] = fixed.to_bf16(v) if kind == "bf16" else v
    return node.evolve(types=types, params=params)


def _ptq_types(node: Node, ctx: QuantContext, act_kind: str, w_kind: str) -> dict[str, FixedType]:
    """Power-of-two defaults from the parameters and a float64 run on the calibration data."""
    a_bits = 8 if act_kind == "i8" else 16
    w_bits = 8 if w_kind == "i8" else 16
    mode = (Rounding.CONV_EVEN, Saturation.SATURATE)

    def fit(v: float, bits: int) -> FixedType:
        return power_of_two_type(v, bits, *mode)

    def amax(a: np.ndarray) -> float:
        return float(np.max(np.abs(a))) if a.size else 0.0

    stats: dict[str, float] = {}
    calib = ctx.calibration.get(node.inputs[0])
    if calib is not None and calib.size:
        float_forward(node, calib, stats)
    p = node.params
    accum_max = max(1.0, stats.get("gates", 0.0), amax(p["bias"]), amax(p["recurrent_bias"]))
    accum = fit(accum_max, 2 * a_bits)
    return {
        "weight": fit(amax(p["weight"]), w_bits),
        "recurrent_weight": fit(amax(p["recurrent_weight"]), w_bits),
        "bias": accum,
        "recurrent_bias": accum,
        "accum": accum,
        # GRU states are convex combinations of tanh outputs: |h| < 1 whatever the calibration.
        "output": fit(max(stats.get("state", 0.0), 1.0 if node.op == "gru" else 0.0), a_bits),
    }


def _mac_friendly_accum(node: Node, acc: FixedType, in_type: FixedType, chosen: Mapping[str, FixedType]) -> FixedType:
    """The calibration's accumulator with the fractional bits dropped that the AI Engine's vector
    MACs need.  ``recurrent/vector.py`` proves a row kernel exact only when each row's worst-case
    sum of products, rounded per lane onto the accumulator's grid, fits 31 bits and cannot
    saturate the accumulator; a 2 x 16-bit accumulator with every fractional bit the calibration
    allows fails that for any real layer, and the kernels fall back to one product at a time.
    Fewer fractional bits (still far finer than the result type's) let them vectorise.  The
    kernel choice is proven again on the final types; this only makes the proof likely to hold.
    Worst cases: the input type's whole range for W x; |h| <= 1 for U h (``state_max_code``)."""
    res = chosen["output"]
    limit = min(2**31 - 1, acc.max_code)
    products = (
        (in_type, float(max(-in_type.min_code, in_type.max_code)), chosen["weight"], node.params["weight"], node.params["bias"]),
        (res, float(min(max(-res.min_code, res.max_code), 2.0 ** max(res.frac, 0))), chosen["recurrent_weight"],
         node.params["recurrent_weight"], node.params["recurrent_bias"]),
    )
    def worst(f: int, xt: FixedType, xmax: float, wt: FixedType, w: np.ndarray, b: np.ndarray) -> float:
        col = float(np.abs(fixed.quantize(w, wt)).sum(axis=0).max()) if w.size else 0.0
        bmax = float(np.max(np.abs(b))) if b.size else 0.0
        return xmax * col * 2.0 ** (f - xt.frac - wt.frac) + w.shape[0] + bmax * 2.0**f + 1

    frac = acc.frac
    for product in products:
        lowest = frac - 2 * acc.width  # no shift makes it fit: keep the calibration's accumulator
        while worst(frac, *product) > limit and frac > lowest:
            frac -= 1
        if worst(frac, *product) > limit:
            return acc
    return FixedType(acc.width, frac, acc.signed, acc.rounding, acc.saturation)


def _quantise_fixed(node: Node, ctx: QuantContext, in_type: NumericType, precision: str, act_kind: str, w_kind: str) -> Node:
    name = node.name
    if not isinstance(in_type, FixedType):
        raise ConfigError(
            f"input is {in_type} but the layer's precision is {precision}",
            layer=name,
            hint="use the same precision for all layers",
        )
    if node.op == "gru" and not node.attrs.get("reset_after", True):
        raise ConfigError(
            "fixed-point GRU emulation follows hls4ml, which applies the reset gate after the "
            "recurrent product (PyTorch, Keras reset_after=True, ONNX linear_before_reset=1); this "
            "layer applies it before",
            layer=name,
            hint="use precision fp32 for this layer, or retrain with reset_after=True",
        )
    given = {k: ctx.layer.types[k] for k in TYPE_KEYS if k in ctx.layer.types}
    defaults = _ptq_types(node, ctx, act_kind, w_kind) if len(given) < len(TYPE_KEYS) else {}
    chosen = {k: given.get(k, defaults.get(k)) for k in TYPE_KEYS}
    for key, t in [("input", in_type), *chosen.items()]:
        if not isinstance(t, FixedType):
            raise ConfigError(f"{key} type {t} is not fixed point, but the precision is {precision}", layer=name)
        if t.width > MAX_WIDTH:
            raise ConfigError(
                f"{key} type {t} is wider than {MAX_WIDTH} bits; the emulator forms exact products in int64",
                layer=name,
            )
    if "accum" not in given:
        acc = _mac_friendly_accum(node, chosen["accum"], in_type, chosen)
        chosen.update({k: acc for k in ("accum", "bias", "recurrent_bias") if k not in given})
    sig, tanh = _layer_activations(ctx, False)
    types = RecurrentTypes(in_type, chosen["weight"], chosen["recurrent_weight"], chosen["bias"], chosen["recurrent_bias"], chosen["accum"], chosen["output"], sig, tanh)
    params = dict(node.params)
    for key in ("weight", "recurrent_weight", "bias", "recurrent_bias"):
        params[f"{key}_q"] = fixed.quantize(node.params[key], getattr(types, key))
    out = node.evolve(types=types, params=params)
    _probe_extremes(out)
    return out


def _probe_extremes(node: Node) -> None:
    """Run the layer once on the input type's extreme and zero codes: types whose intermediates do
    not fit the 62 bits the emulator and the generated C++ compute in are refused here, at compile
    time, naming the layer (``emulate`` raises the ConfigError), not when the design predicts."""
    t = node.types.input
    steps, feats = node.attrs["seq_len"], node.attrs["input_size"]
    x = np.stack([np.full((steps, feats), c, dtype=np.int64) for c in (t.min_code, t.max_code, 0)])
    emulate(node, x)


# ----------------------------------------------------------------------------- emulate: fixed point


def _codes(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "f":
        if not np.array_equal(x, np.round(x)):
            raise ValueError("fixed-point emulation expects integer codes")
        return x.astype(np.int64)
    return x.astype(np.int64)


# The step loop keeps values as (features, batch) arrays, so numpy's inner loops run along the
# batch (long, contiguous) rather than along the 3n or 4n gates, and in int32 where every
# intermediate provably fits (_state_dtype): half int64's memory traffic.  Both are the emulator's
# throughput (benchmarks/recurrent.py), not its arithmetic, which is the same in either dtype
# (tests/test_recurrent_dense_fast.py and test_recurrent_fast_paths.py compare the two).

_CHUNK = 1 << 18  # products per chunk in the saturating dense (temporaries stay in cache)
_BATCH_ELEMENTS = 1 << 18  # (outputs x batch) per block of the TRN / WRAP dense's k-by-k loop


def _dense_fixed(x: np.ndarray, xt: FixedType, w: np.ndarray, wt: FixedType, b: np.ndarray, bt: FixedType, acc: FixedType) -> np.ndarray:
    """hls4ml ``dense_latency`` of ``x`` (rows, K) into ``acc``: (rows, N) int64 codes."""
    return _dense_cols(np.asarray(x).T, xt, w, wt, b, bt, acc, np.int64).T


def _dense_cols(xc: np.ndarray, xt: FixedType, w: np.ndarray, wt: FixedType, b: np.ndarray, bt: FixedType,
                acc: FixedType, dtype: type) -> np.ndarray:
    """hls4ml ``dense_latency`` on columns: ``xc`` (K, batch) -> (N, batch) codes of ``acc`` as
    ``dtype``.  Each product cast, summed in input order from the cast bias, every partial sum
    cast (only overflow: the terms share the grid)."""
    k, cols = xc.shape
    n = w.shape[1]
    init = fixed.cast(b, bt.frac, acc)
    pfrac = xt.frac + wt.frac
    if acc.saturation is Saturation.WRAP and 0 < pfrac - acc.frac < 31 and acc.rounding is Rounding.FLOOR:
        return _dense_trn_wrap(xc, w, init, pfrac - acc.frac, acc, dtype)
    lo = -acc.max_code if (acc.saturation is Saturation.SYMMETRIC and acc.signed) else acc.min_code
    init = init[:, None]
    wc = np.asarray(w, dtype=np.int64).T[:, :, None]  # (N, K, 1)
    out = np.empty((n, cols), dtype=dtype)
    step = max(1, _CHUNK // max(1, k * n))
    for s in range(0, cols, step):
        prods = fixed.cast(wc * _as64(xc[None, :, s : s + step]), pfrac, acc)  # (N, K, c)
        total = init + prods.sum(axis=1)
        if acc.saturation is Saturation.WRAP:
            out[:, s : s + step] = fixed.wrap(total, acc.width, acc.signed)  # modular: order is free
            continue
        bound = np.abs(init) + np.abs(prods).sum(axis=1)
        if np.all(bound <= min(acc.max_code, -lo)):
            out[:, s : s + step] = total  # no partial sum can saturate
            continue
        run = np.broadcast_to(init, total.shape).copy()
        for i in range(k):
            run = np.clip(run + prods[:, i], lo, acc.max_code)
        out[:, s : s + step] = run
    return out


def _as64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int64, copy=False)


def _dense_trn_wrap(xc: np.ndarray, w: np.ndarray, init: np.ndarray, shift: int, acc: FixedType, dtype: type) -> np.ndarray:
    """``_dense_cols`` for hls4ml's default accumulator (TRN, WRAP), the emulator's hot loop:
    wrapping each product and each partial sum is one wrap of the exact sum (arithmetic modulo
    2**width), and TRN is an arithmetic shift, so each product is shifted and added in place, k
    by k, over blocks of the batch; in int32 when the data's bounds allow."""
    k, cols = xc.shape
    n = w.shape[1]
    mx = int(max(xc.max(), -xc.min())) if xc.size else 0
    mw = int(np.max(np.abs(w))) if w.size else 0
    bound = int(np.max(np.abs(init))) + k * ((mx * mw >> shift) + 1) if n else 0
    dt = np.int32 if mx * mw < 1 << 31 and bound < 1 << 31 else np.int64
    xs = xc.astype(dt, copy=False)
    wc = np.asarray(w).astype(dt)[:, :, None]  # (K, N, 1): a scalar per output row
    b = np.asarray(init).astype(dt)[:, None]
    narrow = fixed.NARROW_DTYPES.get((acc.width, acc.signed))
    out = np.empty((n, cols), dtype=dtype)
    step = max(1, _BATCH_ELEMENTS // max(1, n))
    for s in range(0, cols, step):
        blk = xs[:, s : s + step]
        total = np.empty((n, blk.shape[1]), dtype=dt)
        total[...] = b
        term = np.empty_like(total)
        for i in range(k):
            np.multiply(wc[i], blk[i], out=term)
            np.right_shift(term, shift, out=term)
            total += term
        # C casts between integer types are modular: fixed.wrap by a narrowing cast when it can
        out[:, s : s + step] = total.astype(narrow) if narrow is not None else fixed.wrap(total, acc.width, acc.signed)
    return out


def state_max_code(t: RecurrentTypes, op: str) -> int:
    """The largest |h| code the fixed-point recurrence can produce, at most the result type's.

    Kernels that must prove a product sum fits (``recurrent/vector.py``) would otherwise take the
    whole result type's range for h, although h is bounded by the gate tables: an LSTM's
    ``h = (res_T)(o tanh(c))`` by max|o| max|tanh|; a GRU's ``h = (res_T)(h~ (1 - z) + h z)``, from
    h = 0 and with every z in [0, 1], by max|h~| (a convex combination).  Casting a value of at
    most B onto the result grid gives a code of at most ceil(B 2^frac) in every rounding mode; if
    that code overflows the type, the wrap or clip can reach anything, and so does the bound."""
    res, acc = t.output, t.accum
    type_max = max(-res.min_code, res.max_code)
    if not all(isinstance(a, act.TableSpec) for a in (t.sigmoid, t.tanh)):
        return type_max  # exact activations: no table to bound them by

    def outputs(a: act.TableSpec) -> np.ndarray:
        """Every code the table can write into the accumulator type: its entries, cast."""
        return fixed.cast(a.codes(), a.entry.frac, acc)

    def value(code: int) -> Fraction:
        return Fraction(code) / Fraction(2) ** acc.frac

    sig, tanh = outputs(t.sigmoid), outputs(t.tanh)
    tanh_max = value(int(np.abs(tanh).max()))
    if op == "gru":
        if sig.min() < 0 or value(int(sig.max())) > 1:
            return type_max  # some z outside [0, 1]: not a convex combination
        bound = tanh_max
    else:
        bound = value(int(np.abs(sig).max())) * tanh_max
    code = math.ceil(bound * Fraction(2) ** res.frac)
    return code if code <= min(res.max_code, -res.min_code) else type_max


def _state_dtype(t: RecurrentTypes, op: str) -> type:
    """int32 when every intermediate of the step provably fits it, else int64.

    The bounds: the types' largest codes, and for the gates the activation tables' largest
    entries (sigmoid and tanh outputs are small whatever the accumulator's range; type bounds
    alone would overflow int32 for hls4ml's default ``ap_fixed<16,6>``).  Table maps cover codes
    within +-2**15, so the accumulator and result types must too."""
    acc, res = t.accum, t.output
    in_map = all(-act.MAP_HALF <= ty.min_code and ty.max_code < act.MAP_HALF for ty in (acc, res))
    if not in_map or not all(isinstance(a, act.TableSpec) for a in (t.sigmoid, t.tanh)):
        return np.int64

    def largest(ty: FixedType) -> int:
        return max(-ty.min_code, ty.max_code)

    def table_max(a: act.TableSpec, frac: int) -> int:
        m = act.code_map(a, frac, acc)
        return int(max(-m.min(), m.max()))

    fa = acc.frac
    ma, mr = largest(acc), largest(res)
    ms, mt = table_max(t.sigmoid, fa), table_max(t.tanh, fa)
    if op == "gru":
        f1 = max(fa, 0)
        one_minus_z = (1 << f1) + (ms << (f1 - fa))
        sums = [[(mt * one_minus_z, fa + f1), (mr * ms, res.frac + fa)]]
        products = [ms * ma, one_minus_z]
    else:
        sums = [[(mt * ms, 2 * fa), (mr * ms, res.frac + fa)], [(ms * table_max(t.tanh, res.frac), 2 * fa)]]
        products = []
    for terms in sums:
        top = max(f for _, f in terms)
        products.append(sum(m << (top - f) for m, f in terms))
    return np.int32 if max(products) < 1 << 31 else np.int64


def _cast(codes: np.ndarray, frac: int, to: FixedType, dtype: type) -> np.ndarray:
    """``fixed.cast`` as ``dtype``: in int32, a plain shift (TRN) and a narrowing cast (WRAP) or a
    clip (saturation) where they are the whole cast; anything else through ``fixed.cast``."""
    shift = frac - to.frac
    if dtype is np.int32 and (shift == 0 or (0 < shift < 31 and to.rounding is Rounding.FLOOR)):
        v = codes >> shift if shift else codes
        if to.saturation is not Saturation.WRAP:
            lo = -to.max_code if (to.saturation is Saturation.SYMMETRIC and to.signed) else to.min_code
            return np.clip(v, lo, to.max_code)
        narrow = fixed.NARROW_DTYPES.get((to.width, to.signed))
        if narrow is not None:
            return v.astype(narrow).astype(np.int32)
    return fixed.cast(codes, frac, to).astype(dtype, copy=False)


def _activation(a: act.Activation, codes: np.ndarray, frac: int, out: FixedType, dtype: type) -> np.ndarray:
    if dtype is np.int32:  # _state_dtype: a table, codes within the map
        return act.code_map(a, frac, out, np.int32)[codes + act.MAP_HALF]
    return act.apply_fixed(a, codes, frac, out)


def _sum_cast(terms: list[tuple[np.ndarray, int]], out: FixedType, dtype: type = np.int64) -> np.ndarray:
    """``(out_T)(t1 + t2 + ...)`` for exact terms ``(codes, frac)``: aligned exactly, cast once."""
    top = max(f for _, f in terms)
    if dtype is np.int32:  # _state_dtype proved the aligned sum fits
        total = sum(codes << (top - f) for codes, f in terms)
        return _cast(total, top, out, dtype)
    total = np.zeros(np.broadcast_shapes(*(c.shape for c, _ in terms)), dtype=np.int64)
    bound = 0
    for codes, f in terms:
        m = int(np.max(np.abs(codes))) if codes.size else 0
        bound += m << (top - f)
        if bound >= 1 << 62:
            raise OverflowError(
                f"an intermediate needs more than 62 bits (types with {top} fractional bits); "
                "use narrower accumulator / result types"
            )
        total += _as64(codes) << (top - f)
    return fixed.cast(total, top, out)


def _gru_step_fixed(gx, gh, h, t: RecurrentTypes, n: int, dt: type = np.int64) -> np.ndarray:
    """One GRU step on (gates, batch) codes."""
    acc, res = t.accum, t.output
    fa = acc.frac
    zr = _activation(t.sigmoid, _cast(gx[: 2 * n] + gh[: 2 * n], fa, acc, dt), fa, acc, dt)
    z, r = zr[:n], zr[n:]
    rh = _cast(r * gh[2 * n :], 2 * fa, acc, dt)
    cand = _activation(t.tanh, _cast(gx[2 * n :] + rh, fa, acc, dt), fa, acc, dt)
    f1 = max(fa, 0)  # (1 - z) is exact: 1 needs no fractional bits, z needs fa
    one_minus_z = (1 << f1) - (z << (f1 - fa))
    return _sum_cast([(cand * one_minus_z, fa + f1), (h * z, res.frac + fa)], res, dt)


def _lstm_step_fixed(gx, gh, h, c, t: RecurrentTypes, n: int, dt: type = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """One LSTM step on (gates, batch) codes."""
    acc, res = t.accum, t.output
    fa = acc.frac
    ifo_idx = np.r_[0 : 2 * n, 3 * n : 4 * n]
    ifo = _activation(t.sigmoid, _cast(gx[ifo_idx] + gh[ifo_idx], fa, acc, dt), fa, acc, dt)
    i, f, o = ifo[:n], ifo[n : 2 * n], ifo[2 * n :]
    pre = _cast(gx[2 * n : 3 * n] + gh[2 * n : 3 * n], fa, acc, dt)
    cand = _activation(t.tanh, pre, fa, acc, dt)
    c = _sum_cast([(cand * i, 2 * fa), (c * f, res.frac + fa)], res, dt)
    c_act = _activation(t.tanh, c, res.frac, acc, dt)
    h = _sum_cast([(o * c_act, 2 * fa)], res, dt)
    return h, c


def _emulate_fixed(node: Node, x: np.ndarray, dtype: type | None = None) -> np.ndarray:
    """``dtype`` forces the step's integer type (tests compare int32 with int64); by default
    :func:`_state_dtype` picks it."""
    t: RecurrentTypes = node.types
    n = node.attrs["hidden_size"]
    dt = dtype or _state_dtype(t, node.op)
    xs = _codes(_sequence(node, x))
    bsz, steps, feats = xs.shape
    p = node.params
    xc = np.ascontiguousarray(xs.transpose(2, 1, 0)).reshape(feats, steps * bsz)  # (F, steps x batch)
    gx_all = _dense_cols(xc, t.input, p["weight_q"], t.weight, p["bias_q"], t.bias, t.accum, dt)
    gx_all = gx_all.reshape(-1, steps, bsz)
    h = np.zeros((n, bsz), dtype=dt)
    c = np.zeros_like(h)
    outs = []
    for s in range(steps):
        gh = _dense_cols(h, t.output, p["recurrent_weight_q"], t.recurrent_weight, p["recurrent_bias_q"],
                         t.recurrent_bias, t.accum, dt)
        if node.op == "gru":
            h = _gru_step_fixed(gx_all[:, s], gh, h, t, n, dt)
        else:
            h, c = _lstm_step_fixed(gx_all[:, s], gh, h, c, t, n, dt)
        outs.append(h)
    if node.attrs["return_sequences"]:
        return np.stack(outs).transpose(2, 0, 1).astype(np.int64)  # (batch, steps, n)
    return h.T.astype(np.int64)


# ----------------------------------------------------------------------------- emulate: fp32


_F32_BLOCK = 1 << 18  # lane accumulators' elements per block of columns


def _dot32(xc: np.ndarray, w: np.ndarray, b: np.ndarray, lanes: int = 0) -> np.ndarray:
    """``x @ w + b`` in float32 on columns: ``xc`` (K, batch) -> (N, batch).  ``lanes`` 0:
    sequential in k from the bias (no kernel bound).  ``lanes`` L (attr ``fp32_lanes``, set when
    the layer is mapped by ``recurrent/``): the row kernel's order: k padded with zeros to a
    multiple of L, lane l accumulates k = l, l + L, ... from +0 (aie::mac, product and sum
    rounded), lanes reduced by a halving tree (aie::reduce_add), then the bias added.  The padded
    products are left out: each is +0 (0 x 0) and a lane that starts at +0 is never -0, so adding
    +0 changes nothing."""
    xc = np.asarray(xc, dtype=np.float32)
    w = np.asarray(w, dtype=np.float32)
    k, cols = xc.shape
    n = w.shape[1]
    wc = w[:, :, None]  # (K, N, 1): a scalar per output row
    bias = np.asarray(b, dtype=np.float32)[:, None]
    out = np.empty((n, cols), dtype=np.float32)
    step = max(1, _F32_BLOCK // max(1, max(lanes, 1) * n))
    prod_buf = np.empty((n, min(step, cols)), dtype=np.float32)
    accs_buf = np.empty((lanes, n, min(step, cols)), dtype=np.float32)
    for s in range(0, cols, step):
        blk = xc[:, s : s + step]
        prod = prod_buf[:, : blk.shape[1]]
        if not lanes:
            acc = out[:, s : s + step]
            acc[...] = bias
            for i in range(k):
                np.multiply(wc[i], blk[i], out=prod)
                acc += prod
            continue
        accs = accs_buf[:, :, : blk.shape[1]]
        accs.fill(0)
        for i in range(k):
            np.multiply(wc[i], blk[i], out=prod)
            accs[i % lanes] += prod
        width = lanes
        while width > 1:
            width //= 2
            accs = accs[:width] + accs[width : 2 * width]
        np.add(accs[0], bias, out=out[:, s : s + step])
    return out


def _emulate_float(node: Node, x: np.ndarray) -> np.ndarray:
    """float32 emulation on (features, batch) columns, like the fixed point's.  bf16 (the
    layer's output type): x and the parameters are bf16 (so every product is exact in float32),
    sums, gate math and the LSTM cell state c are float32, and the new h is rounded to bf16 once
    per step (round to nearest even): the state the MACs read and the layer's output."""
    t: RecurrentTypes = node.types
    n = node.attrs["hidden_size"]
    bf16 = t.output.name == "bf16"
    rnd = fixed.to_bf16 if bf16 else (lambda v: v)  # noqa: E731
    xs = rnd(_sequence(node, x).astype(np.float32))
    bsz, steps, feats = xs.shape
    p = node.params
    w, u, b, rb = (p[k].astype(np.float32) for k in ("weight_q", "recurrent_weight_q", "bias_q", "recurrent_bias_q"))
    lanes = int(node.attrs.get("fp32_lanes", 0))
    xc = np.ascontiguousarray(xs.transpose(2, 1, 0)).reshape(feats, steps * bsz)
    gx_all = _dot32(xc, w, b, lanes).reshape(-1, steps, bsz)
    sig = lambda v: act.apply_float32(t.sigmoid, v)  # noqa: E731 - local shorthand
    tanh = lambda v: act.apply_float32(t.tanh, v)  # noqa: E731
    one = np.float32(1)
    h = np.zeros((n, bsz), dtype=np.float32)
    c = np.zeros_like(h)
    outs = []
    for s in range(steps):
        gx = gx_all[:, s]
        if node.op == "gru" and not node.attrs.get("reset_after", True):
            zr = sig(gx[: 2 * n] + _dot32(h, u[:, : 2 * n], rb[: 2 * n]))
            z, r = zr[:n], zr[n:]
            cand = tanh(gx[2 * n :] + _dot32(rnd(r * h), u[:, 2 * n :], rb[2 * n :]))
            h = rnd(cand * (one - z) + h * z)
        elif node.op == "gru":
            gh = _dot32(h, u, rb, lanes)
            zr = sig(gx[: 2 * n] + gh[: 2 * n])
            z, r = zr[:n], zr[n:]
            cand = tanh(gx[2 * n :] + r * gh[2 * n :])
            h = rnd(cand * (one - z) + h * z)
        else:
            pre = gx + _dot32(h, u, rb, lanes)
            i, f, o = (sig(pre[k * n : (k + 1) * n]) for k in (0, 1, 3))
            c = tanh(pre[2 * n : 3 * n]) * i + c * f
            h = rnd(o * tanh(c))
        outs.append(h)
    if node.attrs["return_sequences"]:
        return np.ascontiguousarray(np.stack(outs).transpose(2, 0, 1))  # (batch, steps, n)
    return np.ascontiguousarray(h.T)


@one_blas_thread
def emulate(node: Node, x: np.ndarray) -> np.ndarray:
    """Bit-exact emulation of the layer's numerics (see the module docstring)."""
    if node.types is None:
        raise ConfigError("the layer has not been quantised", layer=node.name)
    if node.types.is_float:
        return _emulate_float(node, x)
    try:
        return _emulate_fixed(node, x)
    except OverflowError as e:  # types whose intermediates leave the int64 the kernels compute in
        raise ConfigError(f"the layer's fixed-point types need intermediates beyond 62 bits ({e})", layer=node.name,
                          hint=f"use fewer fractional bits in layers.{node.name}.accum / output") from None


# ----------------------------------------------------------------------------- plan


def _family(name: str) -> OpFamily:
    return OpFamily(
        name=name,
        float_forward=float_forward,
        emulate=emulate,
        quantise=quantise,
        plan=not_mapped,
        types_to_json=_types_to_json,
        types_from_json=_types_from_json,
    )


GRU = _family("gru")
LSTM = _family("lstm")
