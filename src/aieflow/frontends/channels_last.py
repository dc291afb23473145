"""Channels-last graphs as tf2onnx writes Keras models, folded onto aieflow's channels-first IR.

Keras holds images as ``[N, H, W, C]`` and sequences as ``[N, W, C]``; tf2onnx keeps that layout at
the graph's input and output and wraps every ONNX ``Conv`` / ``MaxPool`` (channels first by
definition) in Transposes, then pushes and cancels most of them.  What remains, and how each part
is folded (the element positions of every movement op are tracked by ``onnx_recurrent.Moved``):

* **the input transpose** (``Transpose(x, [0, 3, 1, 2])``, for a sequence ``Unsqueeze`` + the same
  Transpose, for one channel a ``Reshape``): a view of the whole graph input, emitted as an IR
  ``transpose`` (+ ``reshape``); the graph input keeps the user's channels-last layout, so
  ``predict`` takes what Keras takes.  The CNN mapping reads these leading views as the layout the
  host writes the input frames in (``cnn/stages.input_order``).
* **the Flatten before a Dense** (``Transpose(y, [0, 2, 3, 1])`` then a ``Reshape`` to ``[N, -1]``,
  its target constant or computed by ``Shape`` / ``Gather`` / ``Slice`` / ``Concat`` / ``Cast``): the
  Dense reads a permutation of a channels-first tensor's elements.  The permutation is folded into
  the Dense weight's rows (``W'[p[j]] = W[j]``, :func:`permuted_rows`), so the IR flattens in CHW
  order as a PyTorch model does, and no data moves at run time.
* **BatchNormalization as Mul + Add** (Keras' inference form ``x * s + t`` with per-channel constants
  of shape ``[1, C, 1, 1]``, or ``[1, C, 1]`` for a sequence) and a Conv1D's bias as an ``Add`` of
  ``[1, C, 1]`` after a ``Squeeze``: each becomes a ``batchnorm`` placeholder with ``gamma = s``
  (``beta = t``), variance 1 and eps 0, so ``batchnorm.fold`` folds it into the convolution before it
  exactly as an ONNX ``BatchNormalization`` (``x * s + t`` with ``s``, ``t`` as given).

A layout this does not recognise keeps the importer's named errors (the node, what it reads, and
what maps).
"""

from __future__ import annotations

import numpy as np

from . import batchnorm


def permuted_rows(w: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The weight ``w'`` with ``x @ w' == x[order] @ w`` for every ``x``: row ``order[j]`` of ``w'``
    is row ``j`` of ``w`` (``order`` a permutation of ``range(len(w))``)."""
    out = np.empty_like(w)
    out[order] = w
    return out


def per_channel(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """The per-channel vector of a constant that broadcasts over a channels-first per-sample
    ``shape`` ((C, H, W) or (C, W)) along the channels only (``[1, C, 1, 1]``, ``[C, 1, 1]``,
    ``[1, C, 1]`` ...), else None (a scalar or a per-feature constant takes the ordinary path)."""
    v = np.asarray(value)
    if len(shape) not in (2, 3) or v.ndim < len(shape) or v.ndim > len(shape) + 1 or shape[0] == 1:
        return None
    lead = v.shape[: v.ndim - len(shape)]
    body = v.shape[v.ndim - len(shape):]
    if any(d != 1 for d in lead) or body[0] != shape[0] or any(d != 1 for d in body[1:]):
        return None
    return np.asarray(v, dtype=np.float64).reshape(-1)


class OnnxChannelsLastMixin:
    """Folding of tf2onnx's channels-last patterns (see the module docstring) for the ONNX importer."""

    def channel_affine(self, name: str, op: str, x: str, y: str, value: np.ndarray) -> bool:
        """``y = x * value`` (Mul) or ``x + value`` (Add) with a per-channel ``value`` on an image or
        sequence ``x``: a ``batchnorm`` placeholder (folded into the convolution before it); False
        when ``value`` is not per channel."""
        src = self.lifted.get(x, x)
        s = per_channel(value, self.shapes[x])
        if s is None:
            return False
        c = s.size
        ones, zeros = np.ones(c), np.zeros(c)
        gamma, beta = (s, zeros) if op == "Mul" else (ones, s)
        out = self._fresh_tensor_name(f"{y}_image") if x in self.lifted else y
        self.shapes[out] = self.shapes[src]
        self.nodes.append(batchnorm.make_node(name, src, out, c, gamma, beta, zeros, ones, 0.0))
        if x in self.lifted:
            self._unlift(name, out, y)
        return True

    def flatten_order(self, t: str) -> tuple[str, np.ndarray] | None:
        """For a moved 2-D tensor ``t`` (``[N, F]``) that holds, per sample, a permutation of all
        the elements of one IR tensor: (that tensor, the permutation ``p``: feature ``j`` is the
        source's element ``p[j]`` in its own flat order); None otherwise, or for the identity."""
        if t not in self.moved:
            return None
        ids, b = self.moved[t].index, self.movement_batch
        found = self._whole(ids)
        if found is None or ids.ndim != 2 or ids.shape[0] != b:
            return None
        src, pos = found
        per = int(np.prod(self.shapes[src], dtype=np.int64))
        if ids.shape[1] != per:
            return None
        order = pos - (np.arange(b, dtype=np.int64) * per)[:, None]
        if not (np.array_equal(order, np.broadcast_to(order[:1], order.shape))
                and np.array_equal(np.sort(order[0]), np.arange(per))):
            return None  # mixes samples, or repeats / drops elements
        if np.array_equal(order[0], np.arange(per)):
            return None  # a plain flatten: the ordinary path
        return src, order[0]

    def flatten_permuted(self, t: str, user: str) -> tuple[str, np.ndarray] | None:
        """The IR flatten of the source of ``t`` (see :meth:`flatten_order`) and the permutation,
        or None."""
        found = self.flatten_order(t)
        if found is None:
            return None
        src, order = found
        flat = self._fresh_tensor_name(f"{t}_chw")
        self._emit(self._fresh_node_name(self.moved[t].producer), "reshape", src, flat, (order.size,),
                   {"shape": (order.size,)})
        return flat, order

    def whole_view(self, ids: np.ndarray):
        """``ids`` (batch first) as a transpose of a whole IR tensor's per-sample axes followed by a
        reshape (a channels-last sequence's ``Unsqueeze`` + ``Transpose`` into ``[N, C, 1, W]``):
        (source, perm, shape), or None."""
        import itertools

        b = self.movement_batch
        found = self._whole(ids)
        if found is None or ids.ndim < 2 or ids.shape[0] != b:
            return None
        src, pos = found
        shape = self.shapes[src]
        size = b * int(np.prod(shape, dtype=np.int64))
        if pos.size != size or len(shape) > 4:
            return None
        ref = np.arange(size).reshape(b, *shape)
        for perm in itertools.permutations(range(len(shape))):
            if np.array_equal(np.transpose(ref, (0, *(p + 1 for p in perm))).reshape(pos.shape), pos):
                return src, perm, tuple(int(d) for d in ids.shape[1:])
        return None

    def emit_whole_view(self, t: str, src: str, perm: tuple[int, ...], shape: tuple[int, ...]) -> str:
        base = self.moved[t].producer
        x = src
        if tuple(perm) != tuple(range(len(perm))):
            x = self._fresh_tensor_name(f"{t}_t")
            self._emit(self._fresh_node_name(f"{base}_transpose"), "transpose", src, x,
                       tuple(self.shapes[src][p] for p in perm), {"perm": tuple(perm)})
        self._emit(self._fresh_node_name(base), "reshape", x, t, shape, {"shape": shape})
        del self.moved[t]
        return t
