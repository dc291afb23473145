"""ONNX activations and softmax, for the ONNX importer: ``Sigmoid``, ``Softmax`` (last axis),
``LeakyRelu``, ``Elu``, ``Selu``, ``HardSigmoid``, ``HardSwish``, ``Clip`` (constant bounds), ``Gelu``
(opset 20) become ``activation`` / ``softmax`` nodes (``ops/activation.py``).

Exporters decompose some activations; :func:`rewrite_patterns` folds those back first (small
graph rewrites on a copy of the model, FINN style):

* ``Mul(x, Sigmoid(x))`` (PyTorch's ``nn.SiLU``) -> ``Swish`` (alpha 1);
* ``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)`` and its operand orders (PyTorch's
  ``nn.GELU()`` below opset 20) -> ``Gelu``.

PyTorch's tanh-approximated GELU below opset 20 is a longer chain that is not recognised (export
with opset 20, where it is a ``Gelu`` node).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import UnsupportedOpError
from ..ops.activation import float32

ACTIVATION_OPS: tuple[str, ...] = (
    "Sigmoid",
    "Softmax (last axis)",
    "LeakyRelu / Elu / Selu / HardSigmoid / HardSwish",
    "Clip (constant bounds)",
    "Gelu (and PyTorch's erf decomposition)",
    "Mul(x, Sigmoid(x)) (SiLU)",
)


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    out = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.output:
            a = _attrs(n)
            if "value" in a:
                out[n.output[0]] = numpy_helper.to_array(a["value"])
            elif "value_float" in a:
                out[n.output[0]] = np.asarray(a["value_float"], dtype=np.float32)
    return out


def rewrite_patterns(graph: onnx.GraphProto) -> onnx.GraphProto:
    """A copy of ``graph`` with the decomposed activations above as single nodes (or ``graph``
    itself when there are none)."""
    nodes = list(graph.node)
    consts = _constants(graph)
    outputs = {o.name for o in graph.output}
    readers: dict[str, list[int]] = {}
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for t in n.input:
            readers.setdefault(t, []).append(i)
        for t in n.output:
            producer[t] = i

    def only_reader(t: str) -> int | None:
        r = readers.get(t, [])
        return r[0] if len(r) == 1 and t not in outputs else None

    def const_near(t: str, value: float) -> bool:
        c = consts.get(t)
        return c is not None and c.size == 1 and math.isclose(float(c.reshape(-1)[0]), value, rel_tol=1e-6)

    def other(node: onnx.NodeProto, t: str) -> str | None:
        ins = list(node.input)
        if len(ins) != 2 or t not in ins:
            return None
        return ins[1] if ins[0] == t else ins[0]

    drop: set[int] = set()
    replace: dict[int, onnx.NodeProto] = {}
    for i, n in enumerate(nodes):
        if i in drop:
            continue
        if n.op_type == "Sigmoid":  # SiLU: x * sigmoid(x)
            x, s = n.input[0], n.output[0]
            j = only_reader(s)
            if j is not None and nodes[j].op_type == "Mul" and other(nodes[j], s) == x:
                drop.add(j)
                replace[i] = helper.make_node("Swish", [x], [nodes[j].output[0]], name=n.name, alpha=1.0)
        elif n.op_type == "Erf":  # GELU: x * 0.5 * (1 + erf(x / sqrt 2))
            d = producer.get(n.input[0])
            if d is None or nodes[d].op_type != "Div" or not const_near(nodes[d].input[1], math.sqrt(2.0)):
                continue
            x = nodes[d].input[0]
            a = only_reader(n.output[0])
            if a is None or nodes[a].op_type != "Add" or not const_near(other(nodes[a], n.output[0]) or "", 1.0):
                continue
            m1 = only_reader(nodes[a].output[0])
            if m1 is None or nodes[m1].op_type != "Mul":
                continue
            first = other(nodes[m1], nodes[a].output[0])
            m2 = only_reader(nodes[m1].output[0])
            if m2 is None or nodes[m2].op_type != "Mul":
                continue
            second = other(nodes[m2], nodes[m1].output[0])
            if not ((first == x and const_near(second or "", 0.5)) or (const_near(first or "", 0.5) and second == x)):
                continue
            if only_reader(nodes[d].output[0]) != i:
                continue
            drop.update((d, a, m1, m2))
            replace[i] = helper.make_node("Gelu", [x], [nodes[m2].output[0]], name=nodes[d].name or n.name)
    if not replace:
        return graph
    out = onnx.GraphProto()
    out.CopyFrom(graph)
    del out.node[:]
    out.node.extend(replace.get(i, n) for i, n in enumerate(nodes) if i not in drop)
    return out


class OnnxActivationMixin:
    """The converters above (see ``onnx_frontend._OnnxImporter``)."""

    shapes: dict
    proto: onnx.ModelProto

    @property
    def opset(self) -> int:
        return next((int(o.version) for o in self.proto.opset_import if o.domain in ("", "ai.onnx")), 1)

    def activation_converters(self) -> dict[str, Callable[[onnx.NodeProto, str], None]]:
        return {"Sigmoid": self._onnx_sigmoid, "Softmax": self._onnx_softmax, "LeakyRelu": self._onnx_leaky_relu,
                "Elu": self._onnx_elu, "Selu": self._onnx_selu, "HardSigmoid": self._onnx_hard_sigmoid, "HardSwish": self._onnx_hard_swish,
                "Clip": self._onnx_clip, "Gelu": self._onnx_gelu, "Swish": self._onnx_swish}

    def _onnx_act(self, node: onnx.NodeProto, name: str, function: str, **params: float) -> None:
        x = self._data_input(node.input[0], name, node.op_type)
        self._emit(name, "activation", x, node.output[0], self.shapes[x], {"function": function, **float32(params)})

    def _onnx_sigmoid(self, node, name):
        self._onnx_act(node, name, "sigmoid")

    def _onnx_leaky_relu(self, node, name):
        self._onnx_act(node, name, "leaky_relu", alpha=float(_attrs(node).get("alpha", 0.01)))

    def _onnx_elu(self, node, name):
        self._onnx_act(node, name, "elu", alpha=float(_attrs(node).get("alpha", 1.0)))

    def _onnx_selu(self, node, name):
        a = _attrs(node)
        self._onnx_act(node, name, "selu", alpha=float(a.get("alpha", 1.67326319217681884765625)),
                       gamma=float(a.get("gamma", 1.05070102214813232421875)))

    def _onnx_hard_sigmoid(self, node, name):
        a = _attrs(node)
        self._onnx_act(node, name, "hard_sigmoid", alpha=float(a.get("alpha", 0.2)), beta=float(a.get("beta", 0.5)))

    def _onnx_hard_swish(self, node, name):
        self._onnx_act(node, name, "hard_swish")

    def _onnx_gelu(self, node, name):
        approximate = _attrs(node).get("approximate", b"none")
        approximate = approximate.decode() if isinstance(approximate, bytes) else str(approximate)
        self._onnx_act(node, name, "gelu_tanh" if approximate == "tanh" else "gelu")

    def _onnx_swish(self, node, name):
        alpha = float(_attrs(node).get("alpha", 1.0))
        if alpha != 1.0:
            raise UnsupportedOpError(f"node '{name}' (Swish) has alpha {alpha}; aieflow maps alpha 1 (SiLU)")
        self._onnx_act(node, name, "silu")

    def _onnx_clip(self, node, name):
        a = _attrs(node)
        lo, hi = a.get("min"), a.get("max")  # opset < 11: attributes
        for k, what in ((1, "min"), (2, "max")):
            if len(node.input) > k and node.input[k]:
                c = self._const(node.input[k])
                if c is None:
                    raise UnsupportedOpError(f"node '{name}' (Clip) takes its {what} from a computed tensor; "
                                             "only constant bounds map")
                v = float(np.asarray(c.value).reshape(-1)[0])
                lo, hi = (v, hi) if what == "min" else (lo, v)
        big = 3.0e38
        lo, hi = -big if lo is None else float(lo), big if hi is None else float(hi)
        if lo == 0.0 and hi >= big:
            x = self._data_input(node.input[0], name, "Clip")
            self._emit(name, "relu", x, node.output[0], self.shapes[x])
            return
        self._onnx_act(node, name, "clip", min=lo, max=hi)

    def _onnx_softmax(self, node, name):
        x = self._data_input(node.input[0], name, "Softmax")
        rank = len(self.shapes[x]) + 1
        axis = int(_attrs(node).get("axis", -1 if self.opset >= 13 else 1))
        if axis % rank != rank - 1:
            raise UnsupportedOpError(
                f"node '{name}' (Softmax) normalises axis {axis} of a rank-{rank} tensor; aieflow maps a softmax "
                "over the last axis", hint="use axis=-1 (transpose first if needed)")
        self._emit(name, "softmax", x, node.output[0], self.shapes[x], {"axis": -1, "features": int(self.shapes[x][-1])})
