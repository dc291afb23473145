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

_F32_LOWEST = float(np.finfo(np.float32).min)

ACTIVATION_OPS: tuple[str, ...] = (
    "Sigmoid",
    "Softmax (last axis)",
    "LeakyRelu / Elu / Selu / HardSigmoid / HardSwish",
    "Clip (constant bounds)",
    "Gelu (and PyTorch's erf decomposition)",
    "Mul(x, Sigmoid(x)) (SiLU)",
    "Add of a constant 0 / -inf mask, or Where(constant condition, scores, -inf), right before a Softmax "
    "(an attention mask); Where(IsNaN(p), 0, p) after it (the exporters' guard)",
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
                "Clip": self._onnx_clip, "Gelu": self._onnx_gelu, "Swish": self._onnx_swish,
                "Where": self._onnx_where, "IsNaN": self._onnx_isnan}

    # -- attention masks (issue 19) --------------------------------------------------------------
    # The exporters write a constant attention mask as Add(scores, M) (M 0 / -inf: MHA's float or
    # boolean attn_mask, SDPA's mask) or Where(cond, -inf, scores) (masked_fill) right before the
    # Softmax; SDPA's dynamo export follows the Softmax by Where(IsNaN(p), 0, p).  The mask becomes
    # the softmax node's keep table (ops/activation.py "masked softmax"), as the torch importer does.

    def _softmax_consumer(self, t: str) -> bool:
        users = [n for n in self.g.node if t in n.input]
        return len(users) == 1 and users[0].op_type == "Softmax" and not any(o.name == t for o in self.g.output)

    def _mask_keep(self, name: str, op: str, x: str, keep) -> np.ndarray:
        shape = self.shapes[x]
        if len(shape) < 2:
            raise UnsupportedOpError(f"node '{name}' ({op}) masks per-sample shape {shape}; an attention mask "
                                     "applies to [queries, keys] scores")
        tq, tk = shape[-2:]
        k = np.asarray(keep, dtype=bool)
        while k.ndim > 2 and (k == k[:1]).all():  # the same mask for every sample / head (batch, heads axes)
            k = k[0]
        try:
            k = np.broadcast_to(k, (tq, tk))
        except ValueError:
            raise UnsupportedOpError(f"node '{name}' ({op}) applies a mask of shape {tuple(np.shape(keep))} to "
                                     f"[{tq}, {tk}] scores; aieflow maps one [{tq}, {tk}] mask shared by every "
                                     "sample and head") from None
        if not k.any(axis=1).all():
            raise UnsupportedOpError(f"node '{name}' ({op}) masks every key of query row "
                                     f"{int(np.flatnonzero(~k.any(axis=1))[0])} (the softmax gives NaN there)",
                                     hint="keep at least one key per query")
        return k

    def _onnx_mask_add(self, node, name) -> bool:
        """Add(scores, constant mask) before a Softmax: True when it is one (recorded for the softmax)."""
        consts = [i for i, t in enumerate(node.input[:2]) if self._const(t) is not None]
        if len(consts) != 1 or not self._softmax_consumer(node.output[0]):
            return False
        m = np.asarray(self._const(node.input[consts[0]]).value, dtype=np.float64)
        if m.ndim < 2 or m.size == 1:  # a scalar / per-feature bias: not a mask
            return False
        # masked: -inf, or float32's lowest value (the dynamo exporter's SDPA boolean mask): exp of it is 0
        is_mask = np.all((m == 0) | (m == -np.inf) | (m == _F32_LOWEST))
        if m.shape[-2] == 1 and not (is_mask and (m != 0).any()):
            return False  # one row: a per-feature bias (a classifier's Add before its Softmax), the bias path
        if not is_mask:
            raise UnsupportedOpError(f"node '{name}' (Add) adds a constant of shape {m.shape} with values other than "
                                     "0 and -inf to the scores before a Softmax: a bias on the scores, which aieflow "
                                     "does not map", hint="use a boolean attention mask (docs/attention.md)")
        x = self._data_input(node.input[1 - consts[0]], name, "Add")
        self.softmax_keeps[node.output[0]] = (x, self._mask_keep(name, "Add", x, m == 0))
        return True

    def _onnx_isnan(self, node, name):
        self.isnan_of[node.output[0]] = self._data_input(node.input[0], name, "IsNaN")

    def _onnx_where(self, node, name):
        cond, a, b = node.input[:3]
        if cond in self.isnan_of:  # Where(IsNaN(p), 0, p): the identity on a softmax (never NaN here)
            p = self.isnan_of[cond]
            zero = self._const(a)
            if (zero is not None and np.all(np.asarray(zero.value) == 0) and self.canon(b) == p
                    and any(n.op == "softmax" and n.outputs[0] == p for n in self.nodes)):
                self.alias[node.output[0]] = p
                return
        c = self._const(cond)
        fills = [self._const(t) for t in (a, b)]
        if c is not None and self._softmax_consumer(node.output[0]) and sum(f is not None for f in fills) == 1:
            i = 0 if fills[0] is not None else 1
            fill = np.asarray(fills[i].value, dtype=np.float64)
            if not np.all(fill == -np.inf):
                raise UnsupportedOpError(f"node '{name}' (Where) fills the scores before a Softmax with values other "
                                         "than -inf: a bias on the scores, which aieflow does not map",
                                         hint="use masked_fill(mask, float('-inf'))")
            x = self._data_input((b, a)[i], name, "Where")
            cv = np.asarray(c.value, dtype=bool)
            self.softmax_keeps[node.output[0]] = (x, self._mask_keep(name, "Where", x, ~cv if i == 0 else cv))
            return
        raise UnsupportedOpError(f"node '{name}' (Where) is not mapped; aieflow maps Where as a constant attention "
                                 "mask right before a Softmax (Where(cond, -inf, scores)) and the exporters' "
                                 "Where(IsNaN(p), 0, p) after one")

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
        masked = self.softmax_keeps.get(node.input[0])
        x = masked[0] if masked else self._data_input(node.input[0], name, "Softmax")
        rank = len(self.shapes[x]) + 1
        axis = int(_attrs(node).get("axis", -1 if self.opset >= 13 else 1))
        if axis % rank != rank - 1:
            raise UnsupportedOpError(
                f"node '{name}' (Softmax) normalises axis {axis} of a rank-{rank} tensor; aieflow maps a softmax "
                "over the last axis", hint="use axis=-1 (transpose first if needed)")
        keep = None if masked is None or masked[1].all() else {"keep": masked[1].astype(np.uint8)}
        self._emit(name, "softmax", x, node.output[0], self.shapes[x], {"axis": -1, "features": int(self.shapes[x][-1])},
                   keep)
        if node.input[0] in self.mask_softmax:  # a run-time key padding mask: the softmax's second input
            self.nodes[-1] = self.nodes[-1].evolve(inputs=(x, self.mask_softmax[node.input[0]]))
