"""Masked mean pooling over tokens in an ONNX model (issue 19): the exports of the two PyTorch forms that
``frontends/torch_masked_mean.py`` takes, with ``mask`` the model's second graph input (boolean, True =
padding, ``[batch, T]``) and ``x`` a computed ``[batch, T, E]``, become the same ``masked_mean`` node
(``ops/masked_mean.py``) reading ``x`` and the mask.

What both exporters write (``torch.onnx.export`` with ``dynamo=False`` and ``dynamo=True``; Casts of the
0 / 1 keep values anywhere on the mask's side, where one exporter writes them and the other does not):

* ``(x * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)``, ``keep = ~mask``:
  ``Div(ReduceSum(Mul(x, Unsqueeze(Not(mask), -1)), [1], keepdims=0),
  ReduceSum(Not(mask), [1], keepdims=1))``;
* ``x.masked_fill(mask[..., None], 0).sum(1) / (~mask).sum(1, keepdim=True)``: the numerator
  ``ReduceSum(Where(Unsqueeze(mask, -1), 0, x), [1], keepdims=0)``.

The axes may be an input (opset 13+) or an attribute, negative or not.  Every node of the pattern but
``x``'s producer may be read only inside the pattern (``Not(mask)`` by both its sums); anything else
reading the mask is left to ``onnx_mask.py``, which refuses it by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OnnxMaskedMean:
    div: int  # index of the Div node in graph.node
    x: str  # the pooled tensor
    nodes: frozenset[int]  # the pattern's nodes (the Div included)


class _Graph:
    """The producers and readers of an ONNX graph's tensors, and its folded constants."""

    def __init__(self, importer, todo: list[int]):
        self.g = importer.g
        self.imp = importer
        self.todo = set(todo)
        self.producer: dict[str, int] = {}
        self.readers: dict[str, list[int]] = {}
        for i in todo:
            node = self.g.node[i]
            for o in node.output:
                if o:
                    self.producer[o] = i
            for t in node.input:
                if t:
                    self.readers.setdefault(t, []).append(i)

    def node(self, t: str):
        i = self.producer.get(t)
        return (None, None) if i is None else (i, self.g.node[i])

    def const(self, t: str) -> np.ndarray | None:
        c = self.imp._const(t)
        return None if c is None else np.asarray(c.value)

    def axes(self, node) -> list[int] | None:
        """A ReduceSum's / Unsqueeze's axes (an input from opset 13, else an attribute)."""
        if len(node.input) > 1 and node.input[1]:
            a = self.const(node.input[1])
            return None if a is None else [int(v) for v in a.reshape(-1)]
        for at in node.attribute:
            if at.name == "axes":
                return [int(v) for v in at.ints]
        return None

    @staticmethod
    def attr(node, key: str, default: int) -> int:
        return next((int(a.i) for a in node.attribute if a.name == key), default)

    def uncast(self, t: str, used: set[int]) -> str:
        """Follow Casts up from ``t`` (the 0 / 1 keep values keep their values), recording them."""
        while True:
            i, n = self.node(t)
            if n is None or n.op_type != "Cast":
                return t
            used.add(i)
            t = n.input[0]

    def is_mask(self, t: str) -> bool:
        return self.imp.canon(t) == self.imp.mask_input

    def keep(self, t: str, used: set[int]) -> bool:
        """``t`` is ``Not(mask)`` (through Casts on both sides of the Not)."""
        t = self.uncast(t, used)
        i, n = self.node(t)
        if n is None or n.op_type != "Not" or not self.is_mask(self.uncast(n.input[0], used)):
            return False
        used.add(i)
        return True

    def column(self, t: str, used: set[int], keep: bool) -> bool:
        """``t`` is ``Unsqueeze(Not(mask), -1)`` (``keep``) or ``Unsqueeze(mask, -1)``, through Casts."""
        t = self.uncast(t, used)
        i, n = self.node(t)
        if n is None or n.op_type != "Unsqueeze" or self.axes(n) not in ([-1], [2]):
            return False
        used.add(i)
        if keep:
            return self.keep(n.input[0], used)
        return self.is_mask(self.uncast(n.input[0], used))

    def token_sum(self, t: str, keepdims: int, rank: int, used: set[int]):
        """``t`` is a ReduceSum over the tokens (axis 1 of a rank-``rank`` tensor) with ``keepdims``: its node."""
        i, n = self.node(t)
        if n is None or n.op_type != "ReduceSum" or self.attr(n, "keepdims", 1) != keepdims:
            return None
        axes = self.axes(n)
        if axes is None or sorted(a % rank for a in axes) != [1]:
            return None
        used.add(i)
        return n

    def match(self, i: int) -> OnnxMaskedMean | None:
        div = self.g.node[i]
        used = {i}
        den = self.token_sum(self.uncast(div.input[1], used), 1, 2, used)
        if den is None or not self.keep(den.input[0], used):
            return None
        num = self.token_sum(div.input[0], 0, 3, used)
        if num is None:
            return None
        j, p = self.node(num.input[0])
        if p is None:
            return None
        used.add(j)
        x = None
        if p.op_type == "Mul":
            for a, b in ((p.input[0], p.input[1]), (p.input[1], p.input[0])):
                trial = set(used)
                if self.column(b, trial, keep=True):
                    x, used = a, trial
                    break
        elif p.op_type == "Where":
            zero = self.const(p.input[1])
            if zero is not None and zero.size == 1 and float(zero.reshape(-1)[0]) == 0.0 \
                    and self.column(p.input[0], used, keep=False):
                x = p.input[2]
        if x is None:
            return None
        for k in used:  # every pattern node read inside the pattern only (the Div by anything)
            if k == i:
                continue
            for o in self.g.node[k].output:
                if any(r not in used for r in self.readers.get(o, ())):
                    return None
        return OnnxMaskedMean(i, x, frozenset(used))


def find(importer, todo: list[int]) -> dict[int, OnnxMaskedMean]:
    """The masked mean poolings among the nodes ``todo`` of ``importer`` (an ``_OnnxImporter`` with a
    run-time mask), by their Div's index."""
    if importer.mask_input is None:
        return {}
    g = _Graph(importer, todo)
    found = {}
    for i in todo:
        if importer.g.node[i].op_type == "Div":
            mm = g.match(i)
            if mm is not None:
                found[i] = mm
    return found
