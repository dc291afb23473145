"""Masked mean pooling over tokens with forward()'s run-time key padding mask (``ops/masked_mean.py``):
the two forms practitioners write, found in the fx graph before conversion.

* ``keep = ~mask; (x * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)``
* ``x.masked_fill(mask[..., None], 0).sum(1) / (~mask).sum(1, keepdim=True)``

``mask`` is forward()'s second input (boolean, True = padding), ``x`` a computed ``[B, T, E]``.
Accepted spellings: ``~mask`` / ``mask.logical_not()`` / ``torch.logical_not(mask)`` (and
``bitwise_not``) for ``keep``; ``t[..., None]`` / ``t[:, :, None]`` / ``t.unsqueeze(-1)`` (or ``2``)
for the feature axis; ``a * b`` either way round / ``torch.mul``; ``.sum(1)`` / ``.sum(dim=-2)`` /
``torch.sum`` over the tokens; ``/`` / ``torch.div`` without a rounding mode; ``.float()`` on the keep
or its count.  Any other use of the mask (another fill value, a count over other axes, a weighted or
``keepdim`` sum, a mask read elsewhere) is not matched, and the converter refuses the node that reads
the mask by name (``torch_frontend._Converter._input``).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

_SUM_TOKENS = (1, -2)
_SUM_KEYS = (1, -1)


@dataclass(frozen=True)
class MaskedMean:
    div: object  # the fx node of the division: the pooled output
    x: object  # the fx node of the pooled [B, T, E] tensor
    nodes: frozenset  # the fx nodes of the pattern (the division excluded), absorbed by it


def _call(n, functions=(), methods=()) -> bool:
    return (n.op == "call_function" and n.target in functions) or (n.op == "call_method" and n.target in methods)


def _arg(n, i: int, key: str, default=None):
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(key, default)


class _Matcher:
    def __init__(self, torch, mask):
        self.torch, self.mask = torch, mask
        self.seen: set = set()

    def _node(self, a):
        return a if isinstance(a, self.torch.fx.Node) else None

    def strip_float(self, n):
        while n is not None and _call(n, methods=("float",)) and len(n.args) == 1 and not n.kwargs:
            self.seen.add(n)
            n = self._node(n.args[0])
        return n

    def is_mask(self, n) -> bool:
        return self.strip_float(n) is self.mask if n is not None else False

    def is_keep(self, n) -> bool:
        n = self.strip_float(n)
        t = self.torch
        if n is None or not _call(n, (operator.invert, t.logical_not, t.bitwise_not), ("logical_not", "bitwise_not")):
            return False
        if len(n.args) != 1 or n.kwargs or self._node(n.args[0]) is not self.mask:
            return False
        self.seen.add(n)
        return True

    def last_axis(self, n, pred) -> bool:
        """``n`` is ``m[..., None]`` / ``m[:, :, None]`` / ``m.unsqueeze(-1 or 2)`` with ``pred(m)``."""
        n = self.strip_float(n)
        if n is None:
            return False
        if _call(n, (operator.getitem,)) and len(n.args) == 2:
            idx = n.args[1]
            full = slice(None)
            if not (idx == (Ellipsis, None) or idx == (full, full, None)):
                return False
        elif _call(n, (self.torch.unsqueeze,), ("unsqueeze",)):
            if _arg(n, 1, "dim") not in (-1, 2):
                return False
        else:
            return False
        if not pred(self._node(n.args[0])):
            return False
        self.seen.add(n)
        return True

    def product(self, n):
        """The pooled tensor of ``x * keep[..., None]`` / ``x.masked_fill(mask[..., None], 0)``, or None."""
        t = self.torch
        if _call(n, (operator.mul, t.mul), ("mul",)) and len(n.args) == 2 and not n.kwargs:
            a, b = (self._node(v) for v in n.args)
            for x, k in ((a, b), (b, a)):
                if x is not None and k is not None and self.last_axis(k, self.is_keep):
                    return x
            return None
        if _call(n, (t.masked_fill,), ("masked_fill",)) and len(n.args) == 3 and not n.kwargs:
            x, m, value = self._node(n.args[0]), self._node(n.args[1]), n.args[2]
            if x is not None and isinstance(value, int | float) and value == 0 and self.last_axis(m, self.is_mask):
                return x
        return None

    def token_sum(self, n, axes, keepdim: bool):
        if n is None or not _call(n, (self.torch.sum,), ("sum",)) or len(n.args) > 3:
            return None
        dim, kd = _arg(n, 1, "dim"), bool(_arg(n, 2, "keepdim", False))
        if isinstance(dim, list | tuple) and len(dim) == 1:
            dim = dim[0]
        if dim not in axes or kd != keepdim or set(n.kwargs) - {"dim", "keepdim"}:
            return None
        return self._node(n.args[0])

    def match(self, div) -> MaskedMean | None:
        t = self.torch
        if not _call(div, (operator.truediv, t.div, t.true_divide), ("div", "true_divide")):
            return None
        if len(div.args) != 2 or div.kwargs:
            return None
        num, den = self._node(div.args[0]), self._node(div.args[1])
        if num is None or den is None:
            return None
        self.seen = set()
        prod = self.token_sum(num, _SUM_TOKENS, False)
        x = self.product(prod) if prod is not None else None
        count = self.token_sum(self.strip_float(den), _SUM_KEYS, True)
        if x is None or count is None or not self.is_keep(count):
            return None
        nodes = self.seen | {num, prod, self.strip_float(den), den}
        return MaskedMean(div, x, frozenset(nodes))


def find(torch, gm, mask_name: str | None) -> dict[str, MaskedMean]:
    """The masked mean poolings of ``gm`` reading forward()'s second input ``mask_name``, by the fx
    name of their division.  A pattern whose intermediate values are read by anything outside the
    pooling is not matched (the reader is refused by the converter as any other use of the mask)."""
    if mask_name is None:
        return {}
    mask = next((n for n in gm.graph.nodes if n.op == "placeholder" and n.name == mask_name), None)
    if mask is None:
        return {}
    m = _Matcher(torch, mask)
    found = [mm for n in gm.graph.nodes if (mm := m.match(n)) is not None]
    while True:
        inside = set().union(*(mm.nodes for mm in found)) | {mm.div for mm in found}
        kept = [mm for mm in found if all(set(v.users) <= inside for v in mm.nodes)]
        if len(kept) == len(found):
            return {mm.div.name: mm for mm in kept}
        found = kept
