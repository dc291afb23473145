"""The fuzzing suite's cases and runner (issue 16, item 7), shared by ``tests/test_fuzz.py`` (the
quick profile) and ``benchmarks/fuzz.py`` (the long one, ``make fuzz``).

A case is a small random ONNX model built with ``onnx.helper`` (MLP of Gemm / MatMul+Add / Relu /
Flatten / Reshape, a QDQ MLP with power-of-two scales, a CNN of Conv / MaxPool / AveragePool /
GlobalAveragePool, a GRU / LSTM, a DAG with residual Add / LayerNormalization / Split / Concat /
Transpose), perhaps broken on purpose (unsupported op, wrong shape, missing initializer, empty
dimension, NaN / inf / huge weights, bad attributes, wrong input type), perhaps with hostile node
and tensor names, a random config (precision, batch, target, layer overrides, unknown keys), a
random device, and random inputs (wrong shapes, NaN, inf, huge values, integer / bool dtypes).

:func:`run_case` takes it through compile -> predict -> save -> load -> predict: an
``AieflowError`` anywhere is an accepted outcome, any other exception is a failure, and the loaded
design must predict the same values (and ``raw=True`` codes) bit for bit as the compiled one.
"""

from __future__ import annotations

import tempfile
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
DEVICES = ("vck190", "vek280", "vek385")
PRECISIONS = ("int8", "int16", "a16w8", "fp32", "bf16")
KINDS = ("mlp", "qdq", "cnn", "rnn", "dag", "mixer")
MUTATIONS = (
    "unsupported_op", "wrong_weight_shape", "missing_initializer", "zero_dim", "nan_weight",
    "inf_weight", "huge_weight", "bad_attribute", "int_input", "no_output", "duplicate_output",
    "dynamic_dims",
)


@dataclass
class Case:
    kind: str
    model: onnx.ModelProto
    shape: tuple[int, ...]  # per-sample input shape of the valid model
    device: str
    config: Any
    example_input: Any
    calibration: Any
    inputs: list[Any]  # what predict is called with
    notes: list[str] = field(default_factory=list)  # mutations, hostile names

    def describe(self) -> str:
        def arr(a: Any) -> str:
            if isinstance(a, np.ndarray):
                return f"array{a.shape} {a.dtype}"
            return type(a).__name__ if a is not None else "None"

        return (f"kind={self.kind} shape={self.shape} device={self.device!r} notes={self.notes} "
                f"config={self.config!r:.400} example_input={arr(self.example_input)} "
                f"calibration={arr(self.calibration)} inputs={[arr(x) for x in self.inputs]}")


# --------------------------------------------------------------------------------- model builders


class _Builder:
    """Nodes and initializers of one graph, with fresh tensor names."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def const(self, arr: np.ndarray, stem: str = "c") -> str:
        name = self.fresh(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(self, *shape: int, scale: float = 0.5) -> str:
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def node(self, op: str, inputs: list[str], n_out: int = 1, **attrs: Any) -> list[str]:
        outs = [self.fresh("t") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.fresh(op.lower()), **attrs))
        return outs

    def one(self, op: str, inputs: list[str], **attrs: Any) -> str:
        return self.node(op, inputs, **attrs)[0]

    def dense(self, x: str, n_in: int, n_out: int, style: str) -> str:
        if style == "gemm":
            return self.one("Gemm", [x, self.weight(n_in, n_out), self.weight(n_out)])
        if style == "gemm_t":  # transB with alpha / beta folded into the parameters
            return self.one("Gemm", [x, self.weight(n_out, n_in), self.weight(n_out)], transB=1, alpha=0.5, beta=2.0)
        y = self.one("MatMul", [x, self.weight(n_in, n_out)])
        return self.one("Add", [y, self.weight(n_out)]) if style == "matmul_add" else y

    def model(self, shape: tuple[int, ...], out: str, out_shape: list[Any]) -> onnx.ModelProto:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *shape])
        y = helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", *out_shape])
        graph = helper.make_graph(self.nodes, "fuzz", [x], [y], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)


DENSE_STYLES = ("gemm", "gemm_t", "matmul_add", "matmul")
small = st.integers(1, 8)


@st.composite
def mlp(draw) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    b = _Builder(np.random.default_rng(draw(st.integers(0, 2**16))))
    lead = draw(st.sampled_from(["plain", "flatten", "reshape"]))
    shape: tuple[int, ...] = (draw(small),) if lead == "plain" else (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    x, width = "x", int(np.prod(shape))
    if lead == "flatten":
        x = b.one("Flatten", [x], axis=1)
    elif lead == "reshape":
        x = b.one("Reshape", [x, b.const(np.array([draw(st.sampled_from([0, -1])), width], dtype=np.int64))])
    for _ in range(draw(st.integers(1, 3))):
        n = draw(small)
        x = b.dense(x, width, n, draw(st.sampled_from(DENSE_STYLES)))
        width = n
        if draw(st.booleans()):
            x = b.one("Relu", [x])
    return b.model(shape, x, [width]), shape


@st.composite
def qdq(draw) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    from aieflow.model_zoo import qdq_mlp

    widths = draw(st.lists(small, min_size=2, max_size=4))
    model = qdq_mlp(widths, seed=draw(st.integers(0, 2**16)), input_frac=draw(st.integers(3, 6)),
                    weight_frac=draw(st.integers(5, 8)), relu_last=draw(st.booleans()),
                    quantise_output=draw(st.booleans()), act_bits=draw(st.sampled_from([8, 16])))
    return model, (widths[0],)


@st.composite
def cnn(draw) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    b = _Builder(np.random.default_rng(draw(st.integers(0, 2**16))))
    c, h, w = draw(st.integers(1, 3)), draw(st.integers(3, 8)), draw(st.integers(3, 8))
    shape = (c, h, w)
    x = "x"
    for _ in range(draw(st.integers(1, 2))):
        k, s = draw(st.integers(1, 3)), draw(st.integers(1, 2))
        p = draw(st.integers(0, k // 2))
        oc = draw(st.integers(1, 4))
        if (h + 2 * p - k) // s + 1 < 1 or (w + 2 * p - k) // s + 1 < 1:
            break
        x = b.one("Conv", [x, b.weight(oc, c, k, k), b.weight(oc)], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
        c, h, w = oc, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        if draw(st.booleans()):
            x = b.one("Relu", [x])
    pool = draw(st.sampled_from(["none", "MaxPool", "AveragePool"]))
    if pool != "none" and h >= 2 and w >= 2:
        x = b.one(pool, [x], kernel_shape=[2, 2], strides=[2, 2])
        h, w = h // 2, w // 2
    if draw(st.booleans()):
        x = b.one("GlobalAveragePool", [x])
        h = w = 1
    x = b.one("Flatten", [x], axis=1)
    n = draw(small)
    x = b.dense(x, c * h * w, n, "gemm")
    return b.model(shape, x, [n]), shape


@st.composite
def rnn(draw) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    b = _Builder(np.random.default_rng(draw(st.integers(0, 2**16))))
    op = draw(st.sampled_from(["GRU", "LSTM"]))
    g = 3 if op == "GRU" else 4
    steps, feats, hidden = draw(st.integers(2, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    attrs = {"linear_before_reset": draw(st.sampled_from([1, 1, 1, 0]))} if op == "GRU" else {}
    xt = b.one("Transpose", ["x"], perm=[1, 0, 2])
    y_h = b.node(op, [xt, b.weight(1, g * hidden, feats), b.weight(1, g * hidden, hidden), b.weight(1, 2 * g * hidden)],
                 n_out=g - 1, hidden_size=hidden, **attrs)[1]
    x = b.one("Squeeze", [y_h, b.const(np.array([0], dtype=np.int64))])
    width = hidden
    if draw(st.booleans()):
        n = draw(small)
        x, width = b.dense(x, hidden, n, "gemm"), n
    return b.model((steps, feats), x, [width]), (steps, feats)


@st.composite
def dag(draw) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """Fan-out and a residual Add, LayerNormalization, Split + Concat."""
    b = _Builder(np.random.default_rng(draw(st.integers(0, 2**16))))
    f0 = f = draw(st.integers(2, 8))
    t = b.dense("x", f, f, "gemm")
    u = b.one("Relu", [b.dense(t, f, f, draw(st.sampled_from(DENSE_STYLES)))])
    x = b.one("Add", [t, u])
    if draw(st.booleans()):
        x = b.one("LayerNormalization", [x, b.weight(f), b.weight(f)], axis=-1, epsilon=1e-5)
    if draw(st.booleans()):
        k = draw(st.integers(1, f - 1))
        p, q = b.node("Split", [x, b.const(np.array([k, f - k], dtype=np.int64))], n_out=2, axis=1)
        # a Concat input that is not the last is written as wide as its cascade pads it: 16
        m = draw(st.integers(1, 4))
        x = b.one("Concat", [b.dense(p, k, 16, "gemm"), b.dense(q, f - k, m, "gemm")], axis=1)
        f = 16 + m
    n = draw(small)
    return b.model((f0,), b.dense(x, f, n, "gemm"), [n]), (f0,)


@st.composite
def mixer(draw) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """Token / channel mixing: MatMul on [rows, features] per sample and Transpose of the sample axes."""
    b = _Builder(np.random.default_rng(draw(st.integers(0, 2**16))))
    r, f = draw(st.integers(2, 4)), draw(st.integers(2, 4))
    x = b.one("Transpose", ["x"], perm=[0, 2, 1])  # [f, r]
    x = b.one("MatMul", [x, b.weight(r, r)])
    x = b.one("Transpose", [x], perm=[0, 2, 1])  # [r, f]
    y = b.one("MatMul", [x, b.weight(f, f)])
    x = b.one("Add", [x, y]) if draw(st.booleans()) else y
    n = draw(small)
    return b.model((r, f), b.one("MatMul", [x, b.weight(f, n)]), [r, n]), (r, f)


BUILDERS = {"mlp": mlp, "qdq": qdq, "cnn": cnn, "rnn": rnn, "dag": dag, "mixer": mixer}

# --------------------------------------------------------------------------------- mutations


def _float_inits(model: onnx.ModelProto) -> list[int]:
    return [i for i, t in enumerate(model.graph.initializer) if t.data_type == TensorProto.FLOAT and t.dims]


@st.composite
def mutate(draw, model: onnx.ModelProto, shape: tuple[int, ...]) -> tuple[onnx.ModelProto, str]:
    """A copy of ``model`` broken in one way (which one is returned)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    kind = draw(st.sampled_from(MUTATIONS))
    floats = _float_inits(m)
    if kind == "unsupported_op":
        op = draw(st.sampled_from(["Sin", "Softmax", "Sigmoid", "Mul", "NoSuchOp", "Loop", "Resize"]))
        out = g.output[0].name
        g.node[-1].output[0] = out + "_pre"
        g.node.append(helper.make_node(op, [out + "_pre"], [out], name="bad_op"))
    elif kind in ("wrong_weight_shape", "nan_weight", "inf_weight", "huge_weight") and floats:
        i = draw(st.sampled_from(floats))
        arr = numpy_helper.to_array(g.initializer[i]).copy()
        if kind == "wrong_weight_shape":
            arr = np.resize(arr, (arr.shape[0] + draw(st.integers(1, 3)), *arr.shape[1:]) if draw(st.booleans()) else arr.shape[::-1] + (1,))
        else:
            arr.reshape(-1)[draw(st.integers(0, arr.size - 1))] = {"nan_weight": np.nan, "inf_weight": -np.inf, "huge_weight": 3e38}[kind]
        g.initializer[i].CopyFrom(numpy_helper.from_array(arr.astype(np.float32), g.initializer[i].name))
    elif kind == "missing_initializer" and len(g.initializer):
        del g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
    elif kind == "zero_dim":
        dims = g.input[0].type.tensor_type.shape.dim
        dims[draw(st.integers(1, len(dims) - 1))].dim_value = 0
    elif kind == "bad_attribute":
        node = g.node[draw(st.integers(0, len(g.node) - 1))]
        name, value = draw(st.sampled_from([("transA", 1), ("axis", 0), ("dilations", [2, 2]), ("group", 2),
                                            ("ceil_mode", 1), ("direction", "bidirectional"), ("perm", [2, 0, 1]),
                                            ("epsilon", -1.0), ("kernel_shape", [9, 9]), ("no_such_attr", 3)]))
        for a in list(node.attribute):
            if a.name == name:
                node.attribute.remove(a)
        node.attribute.append(helper.make_attribute(name, value))
    elif kind == "int_input":
        g.input[0].type.tensor_type.elem_type = draw(st.sampled_from([TensorProto.INT32, TensorProto.DOUBLE, TensorProto.BOOL]))
    elif kind == "no_output":
        del g.output[:]
    elif kind == "duplicate_output":
        g.output.append(g.output[0])
    elif kind == "dynamic_dims":
        for d in g.input[0].type.tensor_type.shape.dim[1:]:
            d.dim_param = draw(st.sampled_from(["H", "W", ""]))
    else:
        kind += " (no-op)"
    return m, kind


# --------------------------------------------------------------------------------- hostile names

HOSTILE_PARTS = ("\n// injected\n", "\r", '"', "'", "*/", "/*", "\\", "$(touch x)", "`id`", "\u202e", "\u2028",
                 "\U0001f600", "\x00", "\x7f", "\t", "#define int long\n", "??/", "%s%n", "..", "/", " ")
hostile_text = st.one_of(
    st.lists(st.sampled_from(HOSTILE_PARTS), min_size=1, max_size=4).map("".join),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.integers(200, 70_000).map(lambda n: "n" * n),
)


@st.composite
def rename(draw, model: onnx.ModelProto) -> onnx.ModelProto:
    """Every node, tensor and the graph given a hostile name (tensors kept distinct)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    names: dict[str, str] = {}

    def tensor(old: str) -> str:
        if old and old not in names:
            names[old] = f"{len(names)}{draw(hostile_text)}"  # the prefix keeps them distinct
        return names.get(old, old)

    for vi in [*g.input, *g.output, *g.value_info]:
        vi.name = tensor(vi.name)
    for init in g.initializer:
        init.name = tensor(init.name)
    for node in g.node:
        node.name = draw(hostile_text)
        node.input[:] = [tensor(t) for t in node.input]
        node.output[:] = [tensor(t) for t in node.output]
    g.name = draw(hostile_text)
    return m


# --------------------------------------------------------------------------------- configs and inputs

fixed_type = st.builds(
    lambda w, i, r, s: f"fixed<{w},{i},{r},{s}>",
    st.integers(2, 24), st.integers(-2, 12), st.sampled_from(["RND", "TRN", "RND_CONV"]), st.sampled_from(["SAT", "WRAP"]),
)
bad_fixed_type = st.builds(
    lambda w, i, r, s: f"fixed<{w},{i},{r},{s}>",
    st.integers(-2, 80), st.integers(-80, 80), st.sampled_from(["RND", "TRN", "FOO", ""]), st.sampled_from(["SAT", "BAR", ""]),
)
GOOD_TYPES = ("fixed<8,3,RND,SAT>", "fixed<16,6>", "ap_fixed<12,4,AP_RND_CONV,AP_SAT>", "fixed<4,1,TRN,WRAP>", "fp32", "bf16")
BAD_TYPES = ("fixed<0,0>", "fixed<64,70>", "nonsense", "ufixed<8,2>", "", "fixed<8,3,RND,SAT", "int4x")
GOOD_BATCH = (1, 2, 4, 8, 16, "auto", "8", [4, 8], [1, 2, 16])
BAD_BATCH = (0, -1, 5000, 2.5, [], [0, 4], "eight", True, None)
GOOD_TARGET = ("latency", "throughput", "resources", "tiles <= 8", "latency_ns <= 100", "interval_ns <= 1e9",
               ["latency", "tiles <= 64"])
BAD_TARGET = ("latency, throughput", "tiles <= -1", "speed", "latency_ns <= fast", 3, "<=")


def pick(good: Any, bad: Any, hostile: bool) -> Any:
    """A valid value, or with ``hostile`` half the time an invalid one."""
    return st.one_of(good, bad) if hostile else good


@st.composite
def layer_override(draw, hostile: bool) -> dict[str, Any]:
    keys = ["precision", "input", "weight", "bias", "output", "accum", "parallelism", "weights"]
    out: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(keys + (["placement", "bogus"] if hostile else [])),
                             min_size=1, max_size=3, unique=True)):
        if key == "precision":
            out[key] = draw(pick(st.sampled_from(PRECISIONS), st.just("int4"), hostile))
        elif key == "parallelism":
            out[key] = {"cas_len": draw(st.integers(0 if hostile else 1, 4)), "cas_num": draw(st.integers(1, 4))}
        elif key == "placement":
            out[key] = [draw(st.integers(-1, 60)), draw(st.integers(0, 10))]
        elif key == "weights":
            out[key] = draw(pick(st.sampled_from(["auto", "resident", "streamed"]), st.just("ddr"), hostile))
        elif key == "bogus":
            out[key] = 1
        else:
            out[key] = draw(pick(st.one_of(st.sampled_from(GOOD_TYPES), fixed_type),
                                 st.one_of(st.sampled_from(BAD_TYPES), bad_fixed_type), hostile))
    return out


def _layer_names(model: onnx.ModelProto) -> list[str]:
    return [n.name for n in model.graph.node if n.op_type in ("Gemm", "MatMul", "Conv", "GRU", "LSTM")]


@st.composite
def config(draw, model: onnx.ModelProto, hostile: bool) -> Any:
    """A config dict for ``model`` (layer overrides name its layers); with ``hostile`` invalid
    values, unknown keys and non-mappings too."""
    if hostile and draw(st.integers(0, 5)) == 5:
        return draw(st.sampled_from([[], "int8", {"precision": "int3"}, {"layers": []}, {"layers": {"x": 1}}]))
    if draw(st.integers(0, 5)) == 5:
        return None
    cfg: dict[str, Any] = {}
    if draw(st.booleans()):
        cfg["precision"] = draw(pick(st.sampled_from([*PRECISIONS, "i16xi8", "float32"]), st.sampled_from(["int4", "", "INT8x"]), hostile))
    if draw(st.booleans()):
        cfg["batch"] = draw(pick(st.sampled_from(GOOD_BATCH), st.sampled_from(BAD_BATCH), hostile))
    if draw(st.integers(0, 3)) == 0:
        cfg["target"] = draw(pick(st.sampled_from(GOOD_TARGET), st.sampled_from(BAD_TARGET), hostile))
    if draw(st.integers(0, 5)) == 0:
        cfg["replicas"] = draw(pick(st.sampled_from([1, 2, "auto"]), st.sampled_from([0, -2, "many"]), hostile))
    names = _layer_names(model)
    if names and draw(st.integers(0, 2)) == 0:
        choices = [*names, "no_such_layer"] if hostile else names
        keys = draw(st.lists(st.sampled_from(choices), min_size=1, max_size=2, unique=True))
        cfg["layers"] = {k: draw(layer_override(hostile)) for k in keys}
    if hostile and draw(st.integers(0, 5)) == 5:
        cfg[draw(st.sampled_from(["precison", "bacth", "\x00", "layers.x"]))] = 1
    return cfg


@st.composite
def array(draw, shape: tuple[int, ...], hostile: bool = True) -> Any:
    """Float samples of ``shape`` (batch first), or with ``hostile`` something wrong about them."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n = draw(st.integers(1, 6))
    x = (rng.standard_normal((n, *shape)) * draw(st.sampled_from([0.1, 1.0, 4.0]))).astype(np.float32)
    what = draw(st.sampled_from(["ok"] * 6 + (["nan", "inf", "huge", "wrong_shape", "no_batch", "int", "bool",
                                                "float64", "list", "empty"] if hostile else [])))
    if what in ("nan", "inf", "huge"):
        x.reshape(-1)[draw(st.integers(0, x.size - 1))] = {"nan": np.nan, "inf": np.inf, "huge": -3e38}[what]
    elif what == "wrong_shape":
        x = np.ones((n, *shape[:-1], shape[-1] + 1), dtype=np.float32)
    elif what == "no_batch":
        x = x[0]
    elif what == "int":
        x = (x * 10).astype(np.int32)
    elif what == "bool":
        x = x > 0
    elif what == "float64":
        x = x.astype(np.float64)
    elif what == "list":
        x = x.tolist()
    elif what == "empty":
        x = x[:0]
    return x


@st.composite
def cases(draw, kinds: tuple[str, ...] = KINDS) -> Case:
    """One case; each of the model, names, config, device and inputs is hostile with some
    probability (about a third of the cases are wholly valid)."""
    # the odds come from a seeded generator: hypothesis favours small integers, which would make
    # ``draw(integers(0, 4)) == 0`` much likelier than one in five
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def chance(p: float) -> bool:
        return bool(rng.random() < p)

    kind = kinds[int(rng.integers(len(kinds)))]
    model, shape = draw(BUILDERS[kind]())
    notes = []
    if chance(0.2):
        model, what = draw(mutate(model, shape))
        notes.append(what)
    if chance(0.2):
        model = draw(rename(model))
        notes.append("hostile names")
    bad_config = chance(0.2)
    if bad_config:
        notes.append("hostile config")
    cfg = draw(config(model, bad_config))
    device = DEVICES[int(rng.integers(len(DEVICES)))]
    if chance(0.05):
        device = draw(st.sampled_from(["vck5000", "", "VEK280 ", "../vek280", "vek280\n"]))
        notes.append("unknown device")
    bad_data = chance(0.15)
    if bad_data:
        notes.append("hostile example / calibration")
    example = None if chance(0.25) else draw(array(shape, hostile=bad_data))
    calibration = None if chance(0.3) else draw(array(shape, hostile=bad_data))
    inputs = [draw(array(shape, hostile=False)), draw(array(shape))]
    return Case(kind, model, shape, device, cfg, example, calibration, inputs, notes)


# --------------------------------------------------------------------------------- runner


@dataclass
class Outcome:
    status: str  # "ok" | "refused" | "error" | "mismatch"
    stage: str  # where it ended: compile, save, load, predict
    detail: str  # the AieflowError's message, the traceback or the mismatch


def first_words(message: str, n: int = 6) -> str:
    """A refusal's kind: the first words of its message with names and numbers blanked."""
    import re

    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", message, flags=re.DOTALL)
    text = re.sub(r"\d+", "N", text.split("\n")[0])
    return " ".join(text.split()[:n])[:100]


def _same(a: Any, b: Any) -> bool:
    return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
            and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def _predict(design: Any, x: Any, raw: bool) -> Any:
    """The prediction, or the AieflowError it raised (compared by type and message)."""
    from aieflow import AieflowError

    try:
        return design.predict(x, raw=raw)
    except AieflowError as e:
        return (type(e).__name__, str(e))


def run_case(case: Case) -> Outcome:
    """compile -> predict -> save -> load -> predict, bit for bit; only ``AieflowError`` may escape."""
    import aieflow
    from aieflow import AieflowError

    stage = "compile"
    try:
        design = aieflow.compile(case.model, case.device, case.example_input, case.config, case.calibration)
        stage = "predict"
        before = [_predict(design, x, raw) for x in case.inputs for raw in (False, True)]
        with tempfile.TemporaryDirectory(prefix="aieflow-fuzz-") as tmp:
            stage = "save"
            design.save(Path(tmp) / "d")
            stage = "load"
            loaded = aieflow.load(Path(tmp) / "d")
        stage = "predict after load"
        after = [_predict(loaded, x, raw) for x in case.inputs for raw in (False, True)]
    except AieflowError as e:
        return Outcome("refused", stage, str(e))
    except Exception:  # noqa: BLE001 - any other exception is what the fuzzer looks for
        return Outcome("error", stage, traceback.format_exc())
    for i, (a, b) in enumerate(zip(before, after, strict=True)):
        if not (_same(a, b) or (isinstance(a, tuple) and a == b)):
            what = f"input {i // 2} raw={bool(i % 2)}"
            return Outcome("mismatch", "compare", f"{what}: before save {a!r:.300}, after load {b!r:.300}")
    if isinstance(before[0], tuple) and not case.notes:  # a well-formed input to a valid model must predict
        return Outcome("error", "predict", f"a well-formed input was refused: {before[0]}")
    return Outcome("ok", "done", "")


@dataclass
class Tally:
    """What a run found: outcomes by status, refusals by first words, failures in full."""

    cases: int = 0
    by_status: Counter = field(default_factory=Counter)
    by_kind: Counter = field(default_factory=Counter)
    refusals: Counter = field(default_factory=Counter)
    failures: list[tuple[Case, Outcome]] = field(default_factory=list)

    def add(self, case: Case, outcome: Outcome) -> None:
        self.cases += 1
        self.by_status[outcome.status] += 1
        self.by_kind[f"{case.kind}:{outcome.status}"] += 1
        if outcome.status == "refused":
            self.refusals[f"{outcome.stage}: {first_words(outcome.detail)}"] += 1
        elif outcome.status != "ok":
            self.failures.append((case, outcome))
