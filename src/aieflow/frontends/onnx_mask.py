"""A run-time key padding mask given as an ONNX model's second graph input (issue 19), for the ONNX
importer: the exports of ``forward(x, mask)`` with ``mask`` passed as ``nn.MultiheadAttention``'s
``key_padding_mask`` or an encoder's ``src_key_padding_mask`` (docs/attention.md, "Run-time key padding
masks").

Both exporters write the mask as ``[Cast ->] Where(mask, -inf, 0) -> Reshape [N, 1, 1, S] -> Expand
[N, H, 1, S] [-> Reshape ...] -> Add(scores, .) -> Softmax``.  The importer follows the mask through
those nodes as an index array (the flat position ``n S + k`` in the ``[N, S]`` mask that each element of
the tensor copies; numpy's reshape / broadcast / expand_dims / transpose on it), and at the ``Add`` before the
Softmax proves that element ``[n, ..., k]`` of the scores is masked by ``mask[n, k]``: the key padding
mask of sample ``n``, whatever head or query.  The softmax then reads the graph's second input as the
torch importer writes it (``torch_attention.runtime_padding``), so the IR is the same.  A constant
``attn_mask`` added to the padding before the scores (``Add(mask view, constant 0 / -inf)``) becomes the
softmax's ``keep`` table, as the torch import's.  Any other reader of the mask is refused naming the
node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ..errors import UnsupportedOpError

_F32_LOWEST = float(np.finfo(np.float32).min)
MASK_OPS = ("Cast", "Where", "Reshape", "Expand", "Unsqueeze", "Transpose", "Identity", "Add")
_WHAT = ("aieflow maps a run-time mask (a second graph input) only as a key padding mask added to the attention "
         "scores right before a Softmax, as the exporters write nn.MultiheadAttention's key_padding_mask and an "
         "encoder layer's src_key_padding_mask, or in a masked mean pooling over the tokens "
         "((x * keep[..., None]).sum(1) / keep.sum(1, keepdim=True) with keep = ~mask, or its masked_fill form)")
_HINT = "export forward(x, mask) with mask a boolean [batch, tokens] key padding mask; see docs/attention.md"


@dataclass(frozen=True)
class _MaskView:
    """A tensor computed from the run-time mask: ``index`` (the tensor's full shape, batch first) holds
    the flat position in the ``[N, S]`` mask each element copies; ``additive`` once the boolean mask has
    become 0 / -inf; ``keep`` a constant ``[Tq, S]`` table added to it (a constant attn_mask), or None."""

    index: np.ndarray
    additive: bool
    keep: np.ndarray | None = None


def _is_minus_inf(v: np.ndarray) -> bool:
    return bool(np.all((v == -np.inf) | (v == _F32_LOWEST)))


class OnnxMaskMixin:
    """Mixed into ``_OnnxImporter``; ``self.mask_input`` is the second graph input's name or None."""

    def read_mask_input(self, vi, x: str) -> str:
        """The second graph input ``vi`` as a run-time key padding mask over the tokens of input ``x``
        (``[N, T, E]``): ``[N, T]`` boolean (True = padding) or float (0 kept, -inf padding)."""
        name = vi.name
        tt = vi.type.tensor_type
        dims = [int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]
        tokens = self.shapes[x][0] if self.shapes[x] else None
        if len(dims) != 2 or dims[1] != tokens:
            raise UnsupportedOpError(f"graph input '{name}' (the second) has shape {dims}; aieflow takes a second "
                                     f"input only as a run-time key padding mask [batch, {tokens}] over the tokens of "
                                     f"'{x}'", hint=_HINT)
        if tt.elem_type == onnx.TensorProto.BOOL:
            additive = False
        elif tt.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE):
            additive = True
        else:
            raise UnsupportedOpError(f"graph input '{name}' (a key padding mask) has element type "
                                     f"{onnx.TensorProto.DataType.Name(tt.elem_type)}; aieflow takes a boolean mask "
                                     "(True = padding) or a float 0 / -inf one", hint="export with mask.bool()")
        batch = dims[0] or self._inference_batch
        self.mask_input = name
        self.shapes[name] = (tokens,)
        self.mask_views = {name: _MaskView(np.arange(batch * tokens).reshape(batch, tokens), additive)}
        self.mask_softmax: dict[str, str] = {}  # the masked scores (Add output) -> the mask input
        return name

    def reads_mask(self, node) -> bool:
        return self.mask_input is not None and any(self.canon(t) in self.mask_views for t in node.input if t)

    def _mask_refuse(self, node, name: str, why: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"the model has 2 graph inputs; the second, '{self.mask_input}', can only be a run-time "
                                  f"key padding mask, but node '{name}' ({node.op_type}) reads it {why}".rstrip() + f"; "
                                  f"{_WHAT}", hint=_HINT)

    def mask_node(self, node, name: str) -> None:
        """Follow the run-time mask through ``node`` (it reads it), or refuse the node by name."""
        op = node.op_type
        views = self.mask_views
        if op not in MASK_OPS:
            raise self._mask_refuse(node, name, "")
        v = views.get(self.canon(node.input[0]))
        out = node.output[0]
        if op == "Identity":
            views[out] = v
        elif op == "Transpose":
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            views[out] = _MaskView(np.transpose(v.index, perm), v.additive, v.keep)
        elif op == "Cast":
            to = int(next((a.i for a in node.attribute if a.name == "to"), 0))
            if v.additive != (to != onnx.TensorProto.BOOL):
                raise self._mask_refuse(node, name, f"and casts it to {onnx.TensorProto.DataType.Name(to)}")
            views[out] = v
        elif op == "Where":
            fills = [self._const(t) for t in node.input[1:3]]
            if v is None or v.additive or any(f is None for f in fills):
                raise self._mask_refuse(node, name, "other than as Where(mask, -inf, 0)")
            a, b = (np.asarray(f.value, dtype=np.float64) for f in fills)
            if not (_is_minus_inf(a) and np.all(b == 0)):
                raise self._mask_refuse(node, name, "as Where(mask, a, b) with (a, b) other than (-inf, 0) (True = "
                                        "padding)")
            shape = np.broadcast_shapes(v.index.shape, a.shape, b.shape)
            views[out] = _MaskView(np.broadcast_to(v.index, shape), True, v.keep)
        elif op in ("Reshape", "Expand", "Unsqueeze"):
            arg = self._eval_shape_tensor(node.input[1]) if len(node.input) > 1 and node.input[1] else None
            if op == "Unsqueeze" and arg is None:
                arg = next((list(a.ints) for a in node.attribute if a.name == "axes"), None)
            if v is None or arg is None:
                raise self._mask_refuse(node, name, f"with a {op} whose shape or axes aieflow could not evaluate")
            arg = [int(d) for d in np.asarray(arg).reshape(-1)]
            idx = v.index
            try:
                if op == "Reshape":
                    zero = int(next((a.i for a in node.attribute if a.name == "allowzero"), 0)) == 0
                    idx = idx.reshape([idx.shape[i] if (d == 0 and zero) else d for i, d in enumerate(arg)])
                elif op == "Expand":
                    idx = np.broadcast_to(idx, np.broadcast_shapes(idx.shape, tuple(arg)))
                else:
                    idx = np.expand_dims(idx, tuple(a % (idx.ndim + len(arg)) for a in arg))
            except ValueError as exc:
                raise self._mask_refuse(node, name, f"with a {op} to {arg} that does not apply to its shape "
                                        f"{v.index.shape} ({exc})") from None
            views[out] = _MaskView(idx, v.additive, v.keep)
        elif op == "Add":
            self._mask_add(node, name)

    def _mask_add(self, node, name: str) -> None:
        views = self.mask_views
        ins = [self.canon(t) for t in node.input[:2]]
        vi = [i for i, t in enumerate(ins) if t in views]
        if len(vi) != 1:
            raise self._mask_refuse(node, name, "on both operands of an Add")
        v, other = views[ins[vi[0]]], node.input[1 - vi[0]]
        if not v.additive:
            raise self._mask_refuse(node, name, "as a boolean added to a tensor")
        c = self._const(other)
        if c is not None:  # a constant attn_mask added to the padding: its keep table
            m = np.asarray(c.value, dtype=np.float64)
            if not np.all((m == 0) | (m == -np.inf) | (m == _F32_LOWEST)) or m.ndim < 2:
                raise self._mask_refuse(node, name, f"and adds a constant of shape {m.shape} with values other than "
                                        "0 and -inf (a bias, not an attention mask)")
            keep = m == 0
            while keep.ndim > 2 and keep.shape[0] == 1:
                keep = keep[0]
            if keep.ndim != 2:
                raise self._mask_refuse(node, name, f"and adds a constant mask of shape {m.shape}; aieflow maps one "
                                        "[queries, keys] mask shared by every sample and head")
            if v.keep is not None:
                keep = keep & v.keep
            try:
                idx = np.broadcast_to(v.index, np.broadcast_shapes(v.index.shape, m.shape))
            except ValueError:
                raise self._mask_refuse(node, name, f"and adds a constant of shape {m.shape} that does not "
                                        f"broadcast with it ({v.index.shape})") from None
            views[node.output[0]] = _MaskView(idx, True, keep)
            return
        if not self._softmax_consumer(node.output[0]):
            raise self._mask_refuse(node, name, "added to a tensor that no Softmax reads right after")
        x = self._data_input(other, name, "Add")
        shape = self.shapes[x]
        tk = self.shapes[self.mask_input][0]
        batch, full = v.index.shape[0], None
        try:
            full = np.broadcast_to(v.index, np.broadcast_shapes(v.index.shape, (batch, *shape)))
        except ValueError:
            pass
        want = (np.arange(batch).reshape(batch, *([1] * len(shape))) * tk
                + np.arange(shape[-1]) if shape else None)
        if full is None or full.shape != (batch, *shape) or shape[-1] != tk or not np.array_equal(full, np.broadcast_to(
                want, full.shape)):
            raise self._mask_refuse(node, name, f"added to scores of per-sample shape {shape} in an arrangement "
                                    "other than each sample's row over the keys (the last axis)")
        keep = v.keep
        if keep is not None:
            keep = np.broadcast_to(keep, shape[-2:])
            if not keep.any(axis=1).all():
                raise self._mask_refuse(node, name, f"with a constant mask that masks every key of query row "
                                        f"{int(np.flatnonzero(~keep.any(axis=1))[0])}")
        self.softmax_keeps[node.output[0]] = (x, np.ones(shape[-2:], bool) if keep is None else np.array(keep))
        self.mask_softmax[node.output[0]] = self.mask_input
