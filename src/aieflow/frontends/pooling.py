"""Mean over the tokens of a per-sample ``[T, E]`` tensor (``x.mean(dim=-2)`` / ``mean(dim=1)`` on
``[B, T, E]``, ONNX ``ReduceMean`` over that axis), shared by both frontends.

It becomes the token-mixing layers the DAG mapping already runs: a transpose to ``[E, T]``, a
Dense ``T -> 1`` without bias whose weights are all ``2^-k`` (``T = 2^k``), a transpose back to
``[1, E]`` and, without ``keepdim``, a reshape to ``[E]``.  For ``T = 2^k`` this is exact: the
weight ``2^-k`` is one code at any weight type with at least ``k`` fractional bits, the Dense
kernel sums the products exactly in its accumulator, so the result is the exact integer sum of the
``T`` codes followed by one shift-round-saturate into the output type (its rounding mode: round
half to even by default; docs/attention.md).  Another ``T`` would need a weight ``1 / T`` that no
binary code holds exactly: refused by name.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Node, frozen_map


def token_mean_nodes(name: str, x: str, y: str, shape: tuple[int, ...], keepdim: bool,
                     unique) -> tuple[list[Node], dict[str, tuple[int, ...]]]:
    """The nodes computing ``y = mean(x, token axis)`` for per-sample ``shape = (T, E)``, and the
    per-sample shapes of the tensors they write (``unique`` makes node names unique)."""
    if len(shape) != 2:
        raise UnsupportedOpError(f"'{name}' takes a mean over the tokens of a per-sample shape {shape}; "
                                 "aieflow maps the mean over T of [T, E] samples (x.mean(dim=1) on [B, T, E])")
    t, e = shape
    if t < 1 or t & (t - 1):
        raise UnsupportedOpError(f"'{name}' averages {t} tokens; aieflow maps a token mean exactly only over a "
                                 "power-of-two count (weights 2^-k)", hint="pad the tokens to a power of two, or "
                                 "write the pooling as a Linear over the transposed tokens")
    xt, s, st = f"{y}__tokens", f"{y}__sum", f"{y}__pooled"
    w = np.full((t, 1), 1.0 / t, dtype=np.float32)
    nodes = [
        Node(name=unique(f"{name}_t"), op="transpose", inputs=(x,), outputs=(xt,), attrs=frozen_map({"perm": (1, 0)})),
        Node(name=unique(name), op="dense", inputs=(xt,), outputs=(s,),
             attrs=frozen_map({"in_features": t, "out_features": 1, "activation": None}),
             params=frozen_map({"weight": w})),
    ]
    shapes = {xt: (e, t), s: (e, 1)}
    if keepdim:
        nodes.append(Node(name=unique(f"{name}_back"), op="transpose", inputs=(s,), outputs=(y,),
                          attrs=frozen_map({"perm": (1, 0)})))
        shapes[y] = (1, e)
    else:
        nodes.append(Node(name=unique(f"{name}_back"), op="transpose", inputs=(s,), outputs=(st,),
                          attrs=frozen_map({"perm": (1, 0)})))
        nodes.append(Node(name=unique(f"{name}_flat"), op="reshape", inputs=(st,), outputs=(y,),
                          attrs=frozen_map({"shape": (e,)})))
        shapes[st], shapes[y] = (1, e), (e,)
    return nodes, shapes
