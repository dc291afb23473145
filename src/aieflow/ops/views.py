"""Views: reshapes that only reinterpret a row-major sample, so they cost no kernel and no tile."""

from __future__ import annotations

import numpy as np

from ..ir import Node
from .base import OpFamily, QuantContext, keeps_input_type, one_type_family


def _forward(node: Node, x: np.ndarray) -> np.ndarray:
    return x.reshape((x.shape[0], *node.attrs["shape"]))


RESHAPE = one_type_family("reshape", _forward, is_view=True)  # a view keeps its input's type


# ----------------------------------------------------------------------------- data-movement views
# Transpose, Concat and Split move data but compute nothing: on AIE-ML they are realised by the
# memory-tile tilers that join the layers around them (no kernel, no tile).  Their emulation is
# the exact permutation of codes, so the types pass through unchanged.


def _transpose(node: Node, x: np.ndarray) -> np.ndarray:
    perm = tuple(int(p) for p in node.attrs["perm"])  # per-sample axes (batch excluded)
    return np.transpose(x, (0, *(p + 1 for p in perm)))


def _concat(node: Node, *xs: np.ndarray) -> np.ndarray:
    axis = int(node.attrs["axis"])  # per-sample axis
    return np.concatenate(xs, axis=axis + 1)


def _slice(node: Node, x: np.ndarray) -> np.ndarray:
    axis = int(node.attrs["axis"]) + 1
    index = [slice(None)] * x.ndim
    index[axis] = slice(int(node.attrs["start"]), int(node.attrs["stop"]))
    return x[tuple(index)]


def _quantise_concat(node: Node, ctx: QuantContext) -> Node:
    from ..errors import ConfigError

    types = set(ctx.input_types)
    if len(types) != 1:
        raise ConfigError(
            f"the concatenated tensors have different types ({', '.join(str(t) for t in ctx.input_types)}); "
            "a concat is a view and cannot convert",
            layer=node.name,
            hint="give the layers that produce them the same output type (config layers.<name>.output)",
        )
    return keeps_input_type(node, ctx)


def _not_emitted(node: Node, ctx) -> Node:
    from ..errors import PlanError

    raise PlanError(
        f"{node.op} views are emulated bit-exactly but their memory-tile tilers are not generated yet",
        layer=node.name,
        hint="use aieflow.emulate(model, ...) for bit-exact predictions of this model",
    )


def _view(name: str, fn, quantise=keeps_input_type) -> OpFamily:
    return one_type_family(name, fn, quantise=quantise, plan=_not_emitted, is_view=True)


TRANSPOSE = _view("transpose", _transpose)
CONCAT = _view("concat", _concat, _quantise_concat)
SLICE = _view("slice", _slice)


# ----------------------------------------------------------------------------- input layouts
# ``patches``: a ViT patch embedding's input view (frontends/patches.py).  An image ``[C, H, W]``
# seen as ``lead + P`` rows of ``C kh kw`` features: row ``lead + i Wp + j`` is the patch at
# ``(i, j)`` (``Wp = W / kw``), its features in the order ``(c, ki, kj)`` (a Conv2d weight
# ``[E, C, kh, kw]`` reshaped to ``[E, C kh kw]``); the ``lead`` first rows are zero (the rows a
# class token takes, frontends/patches.py).  On the DAG path it is the input PLIO's layout: the host
# writes the image in this order (``dag/plan.host_layout``); no kernel moves it.


def patch_index(shape: tuple[int, ...], kernel: tuple[int, int], lead: int = 0) -> np.ndarray:
    """``[lead + P, C kh kw]`` positions in the flat ``[C, H, W]`` sample; -1 for a zero row."""
    c, h, w = (int(d) for d in shape)
    kh, kw = (int(k) for k in kernel)
    ids = np.arange(c * h * w).reshape(c, h // kh, kh, w // kw, kw)
    rows = ids.transpose(1, 3, 0, 2, 4).reshape((h // kh) * (w // kw), c * kh * kw)
    return np.concatenate([np.full((lead, rows.shape[1]), -1, dtype=np.int64), rows])


def _patches(node: Node, x: np.ndarray) -> np.ndarray:
    ids = patch_index(x.shape[1:], tuple(node.attrs["kernel"]), int(node.attrs.get("lead", 0)))
    flat = x.reshape(x.shape[0], -1)
    out = flat[:, np.maximum(ids, 0)]
    out[:, ids < 0] = 0
    return out


PATCHES = one_type_family("patches", _patches, plan=_not_emitted, is_view=True)
