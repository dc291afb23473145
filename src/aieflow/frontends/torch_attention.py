"""Attention in PyTorch models, for the torch converter (``torch_frontend._Converter``):

* ``a @ b`` / ``torch.matmul`` / ``torch.bmm`` / ``Tensor.matmul`` of two computed tensors: a
  ``matmul`` node (``ops/matmul.py``); a transpose of ``b``'s last two axes becomes its
  ``transpose_b`` (``frontends/attention.py``);
* ``x * c``, ``x / c`` (and ``torch.mul`` / ``torch.div``) by a Python number: a ``scale`` node that
  ``attention.fold_scales`` folds into the Dense layer before it (the Q projection);
* ``F.scaled_dot_product_attention(q, k, v)`` (no mask, not causal, no dropout): ``q`` scaled,
  ``matmul(q, k, transpose_b)``, softmax, ``matmul(., v)``;
* ``nn.MultiheadAttention(batch_first=True)`` without masks: Dense Q / K / V projections (the
  ``1 / sqrt(d)`` folded into Q's weights and bias), per head a feature slice of each, ``Q K^T``,
  softmax, ``A V``, the heads concatenated along the features, the output Dense projection.

Anything else (masks, causal attention, ``need_weights`` read, ``add_bias_kv``, separate
projection dimensions) is refused with an :class:`UnsupportedOpError` naming the module.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Node, frozen_map

SUPPORTED_MODULES = ("nn.MultiheadAttention (batch_first=True, self- or cross-attention, a constant attn_mask and / or "
                     "key_padding_mask, or a key_padding_mask given as forward()'s second input; output [0])",)
SUPPORTED_FUNCTIONS = (
    "a @ b / torch.matmul / torch.bmm / Tensor.matmul of two computed tensors (batched over heads)",
    "x * c / x / c by a Python number (folded into the Dense layer before it)",
    "F.scaled_dot_product_attention (a constant attn_mask or is_causal; no dropout)",
)


@dataclass(frozen=True)
class RuntimeKeep:
    """A run-time key padding mask: the graph input ``tensor`` (the keep bytes of each sample) and the
    constant ``keep`` table (``attention_keep``) it combines with, or None."""

    keep: np.ndarray | None
    tensor: str


class AttentionMixin:
    # -- helpers --------------------------------------------------------------------------------

    def _tensor_name(self, base: str, shape: tuple[int, ...]) -> str:
        name = self._unique(base)
        self.shapes[name] = tuple(int(d) for d in shape)
        return name

    def _node(self, name: str, op: str, xs: tuple[str, ...], y: str, attrs=None, params=None) -> None:
        self.nodes.append(Node(name=self._unique(name), op=op, inputs=xs, outputs=(y,),
                               attrs=frozen_map(attrs or {}), params=frozen_map(params or {})))

    def _check_matmul(self, name: str, a: str, b: str, transpose_b: bool) -> tuple[int, ...]:
        sa, sb = self.shapes[a], self.shapes[b]
        kb = sb[-1] if transpose_b else (sb[-2] if len(sb) >= 2 else None)
        if len(sa) < 2 or len(sa) != len(sb) or sa[:-2] != sb[:-2] or sa[-1] != kb:
            raise UnsupportedOpError(
                f"'{name}' multiplies per-sample shapes {sa} and {sb}{' (second transposed)' if transpose_b else ''}; "
                "aieflow maps a product of [..., M, K] by [..., K, N] with equal leading (head) dimensions",
                hint="keep the batch first and the heads equal on both operands (no broadcasting)")
        return (*sa[:-1], sb[-2] if transpose_b else sb[-1])

    # -- converters -----------------------------------------------------------------------------

    def attention_function(self, fx_node, fn, name: str) -> bool:
        torch, F = self.torch, self.F
        fx = torch.fx
        if self._shape(fx_node) is None:
            return False
        if fn in (operator.matmul, torch.matmul, torch.bmm):
            a, b = fx_node.args[:2]
            self._matmul_nodes(fx_node, name, a, b)
            return True
        if fn in (operator.mul, torch.mul, operator.truediv, torch.div, torch.true_divide):
            a, b = fx_node.args[:2]
            divide = fn in (operator.truediv, torch.div, torch.true_divide)
            if isinstance(a, fx.Node) and isinstance(b, int | float) and not isinstance(b, bool):
                self._scale(fx_node, name, a, 1.0 / b if divide else float(b))
                return True
            if isinstance(b, fx.Node) and isinstance(a, int | float) and not divide and not isinstance(a, bool):
                self._scale(fx_node, name, b, float(a))
                return True
            raise UnsupportedOpError(f"'{name}' multiplies or divides computed tensors element by element; aieflow "
                                     "maps a product or quotient by a Python number only (folded into the Dense "
                                     "layer before it)")
        if fn is F.scaled_dot_product_attention:
            self._sdpa(fx_node, name)
            return True
        return False

    def attention_method(self, fx_node, method: str, name: str) -> bool:
        if method in ("matmul", "bmm"):
            self._matmul_nodes(fx_node, name, fx_node.args[0], fx_node.args[1])
            return True
        if method in ("mul", "div", "__mul__", "__truediv__") and self._shape(fx_node) is not None:
            c = fx_node.args[1] if len(fx_node.args) > 1 else None
            if not isinstance(c, int | float) or isinstance(c, bool):
                raise UnsupportedOpError(f"'{name}' (Tensor.{method}) scales by a computed value; aieflow maps a "
                                         "scale by a Python number only")
            self._scale(fx_node, name, fx_node.args[0], 1.0 / c if method in ("div", "__truediv__") else float(c))
            return True
        return False

    def _matmul_nodes(self, fx_node, name: str, a_arg, b_arg) -> None:
        fx = self.torch.fx
        for arg in (a_arg, b_arg):
            if isinstance(arg, fx.Node) and arg.op == "get_attr":
                raise UnsupportedOpError(f"'{name}' multiplies by the parameter '{arg.target}'; a product with a "
                                         "weight must be an nn.Linear (or F.linear)")
        a, b = self._input(a_arg, name), self._input(b_arg, name)
        self._check_matmul(name, a, b, False)
        self._emit_multi(fx_node, name, "matmul", (a, b), {"transpose_b": False})

    def _scale(self, fx_node, name: str, x_arg, factor: float) -> None:
        if not math.isfinite(factor) or factor == 0:
            raise UnsupportedOpError(f"'{name}' scales by {factor}; a finite, non-zero constant is needed")
        self._emit(fx_node, name, "scale", self._input(x_arg, name), {"factor": float(factor)})

    def _sdpa(self, fx_node, name: str) -> None:
        args = list(fx_node.args) + [None] * 7
        kw = fx_node.kwargs
        mask = kw.get("attn_mask", args[3])
        dropout = kw.get("dropout_p", args[4] if args[4] is not None else 0.0)
        causal = kw.get("is_causal", args[5] if args[5] is not None else False)
        scale = kw.get("scale", None)
        if dropout:
            raise UnsupportedOpError(f"'{name}' (F.scaled_dot_product_attention) has dropout_p={dropout}; aieflow "
                                     "maps attention without dropout", hint="pass dropout_p=0 at inference")
        if kw.get("enable_gqa", False):
            raise UnsupportedOpError(f"'{name}' (F.scaled_dot_product_attention) has enable_gqa=True; not mapped")
        q, k, v = (self._input(kw.get(key, args[i]), name) for i, key in enumerate(("query", "key", "value")))
        d = self.shapes[q][-1]
        factor = float(scale) if scale is not None else 1.0 / math.sqrt(d)
        qs = self._tensor_name(f"{name}_q_scaled", self.shapes[q])
        self._node(f"{name}_scale", "scale", (q,), qs, {"factor": factor})
        s_shape = self._check_matmul(name, qs, k, True)
        s = self._tensor_name(f"{name}_scores", s_shape)
        self._node(f"{name}_qk", "matmul", (qs, k), s, {"transpose_b": True})
        keep = self.attention_keep(f"'{name}' (F.scaled_dot_product_attention)", mask, bool(causal),
                                   int(s_shape[-2]), int(s_shape[-1]), true_keeps=True)
        p = self._tensor_name(f"{name}_probs", s_shape)
        self._node(f"{name}_softmax", "softmax", (s,), p, {"axis": -1, "features": int(s_shape[-1])},
                   None if keep is None else {"keep": keep})
        out_shape = self._check_matmul(name, p, v, False)
        y = fx_node.name
        self.shapes[y] = self._per_sample(fx_node, name)
        if self.shapes[y] != out_shape:  # pragma: no cover - torch's own shape rule
            raise UnsupportedOpError(f"'{name}' produces {self.shapes[y]}, expected {out_shape}")
        self._node(f"{name}_av", "matmul", (p, v), y, {"transpose_b": False})

    def mha_module(self, fx_node, path: str, mod) -> None:
        """``nn.MultiheadAttention`` decomposed (module docstring); its output tuple's item 0 is the
        attention output, item 1 (the weights) is refused where read."""
        args = list(fx_node.args) + [None] * 6
        kw = fx_node.kwargs
        why = self.mha_refusal(mod)
        if why:
            raise UnsupportedOpError(f"module '{path}' (nn.MultiheadAttention) has {why}",
                                     hint="see docs/attention.md for the attention aieflow maps")
        q_in, k_in, v_in = (self._input(kw.get(key, args[i]), path) for i, key in enumerate(("query", "key", "value")))
        mask = kw.get("attn_mask", args[5])
        if mask is None and kw.get("is_causal", False):
            raise UnsupportedOpError(f"module '{path}' (nn.MultiheadAttention) has is_causal=True without an attn_mask "
                                     "(PyTorch takes is_causal as a hint about attn_mask)",
                                     hint="pass attn_mask=nn.Transformer.generate_square_subsequent_mask(T) as a buffer")
        who = f"module '{path}' (nn.MultiheadAttention)"
        tq, tk = self.shapes[q_in][0], self.shapes[k_in][0]
        keep = self.attention_keep(who, mask, False, tq, tk, true_keeps=False)
        keep = self.with_padding(who, keep, kw.get("key_padding_mask", args[3]), tq, tk)
        self.mha_outputs[fx_node.name] = (path, self._mha(path, mod, q_in, k_in, v_in, keep))

    def attention_keep(self, who: str, mask, causal: bool, tq: int, tk: int, true_keeps: bool):
        """The softmax's ``keep`` table ``[tq, tk]`` (uint8, 1 = the key takes part) of a constant mask
        ``mask`` (an fx get_attr node: a buffer or parameter) and / or ``causal``, or None without one.
        Boolean masks keep True (SDPA, ``true_keeps``) or mask True (nn.MultiheadAttention); float masks
        are added to the scores and map when every value is 0 (kept) or -inf (masked)."""
        fx = self.torch.fx
        keep = np.ones((tq, tk), dtype=bool)
        if mask is not None:
            if isinstance(mask, fx.Node) and mask.op == "placeholder":
                raise UnsupportedOpError(f"{who} has an attention mask given as a model input (per sample); aieflow "
                                         "maps a constant attn_mask and a run-time key padding mask only",
                                         hint="pass the per-sample padding as key_padding_mask / "
                                         "src_key_padding_mask; see docs/attention.md")
            if not (isinstance(mask, fx.Node) and mask.op == "get_attr"):
                raise UnsupportedOpError(f"{who} has an attention mask computed in forward(); aieflow maps a constant "
                                         "mask (a module buffer or parameter)",
                                         hint="compute the mask once and register it with self.register_buffer")
            tm = self._param(mask, who, "attention mask")
            m = tm.detach().cpu().numpy() if tm.dtype == self.torch.bool else np.asarray(self._numpy(tm))
            self.mask_attrs.add(mask.name)
            if m.ndim > 2 and all(d == 1 for d in m.shape[:-2]):
                m = m.reshape(m.shape[-2:])
            if m.ndim not in (1, 2) or m.shape[-1] != tk or (m.ndim == 2 and m.shape[0] not in (1, tq)):
                raise UnsupportedOpError(f"{who} has an attention mask of shape {tuple(m.shape)}; aieflow maps one "
                                         f"[{tq}, {tk}] mask shared by every sample and head")
            if m.dtype == np.bool_:
                keep &= np.broadcast_to(m if true_keeps else ~m, (tq, tk))
            else:
                f = np.asarray(m, dtype=np.float64)
                if not np.all((f == 0) | (f == -np.inf)):
                    raise UnsupportedOpError(f"{who} has an additive float mask with values other than 0 and -inf: a "
                                             "bias on the scores, which aieflow does not map", hint="use a boolean "
                                             "mask, or 0 / -inf (docs/attention.md)")
                keep &= np.broadcast_to(f == 0, (tq, tk))
        if causal:
            keep &= np.tril(np.ones((tq, tk), dtype=bool))
        if keep.all():
            return None
        if not keep.any(axis=1).all():
            raise UnsupportedOpError(f"{who} has an attention mask that masks every key of query row "
                                     f"{int(np.flatnonzero(~keep.any(axis=1))[0])} (PyTorch gives NaN there)",
                                     hint="keep at least one key per query")
        return keep.astype(np.uint8)

    def with_padding(self, who: str, keep, pad, tq: int, tk: int):
        """``keep`` (``attention_keep``'s table or None) with a constant key padding mask ``pad`` (an fx
        get_attr node, or None) applied: ``[B, tk]`` (or ``[tk]``) boolean (True = padding, ignored) or
        float 0 / -inf, every row the same (one padding for every sample).  Returns the combined
        ``[tq, tk]`` uint8 table or None, or a :class:`RuntimeKeep` when ``pad`` is forward()'s second
        input (:meth:`runtime_padding`)."""
        if pad is None:
            return keep
        fx = self.torch.fx
        if isinstance(pad, fx.Node) and pad.op == "placeholder" and pad.name == self.padding_input:
            return self.runtime_padding(who, keep, pad, tk)
        if not (isinstance(pad, fx.Node) and pad.op == "get_attr"):
            raise UnsupportedOpError(f"{who} has a key padding mask computed in forward(); aieflow maps a constant "
                                     "key padding mask (a module buffer) or one given as forward()'s second input "
                                     "(a run-time mask, one row per sample)", hint="pass the mask as forward(x, "
                                     "mask), or register it with self.register_buffer; see docs/attention.md")
        tm = self._param(pad, who, "key padding mask")
        m = tm.detach().cpu().numpy() if tm.dtype == self.torch.bool else np.asarray(self._numpy(tm))
        self.mask_attrs.add(pad.name)
        if m.ndim == 1:
            m = m[None, :]
        if m.ndim != 2 or m.shape[1] != tk:
            raise UnsupportedOpError(f"{who} has a key padding mask of shape {tuple(m.shape)}; aieflow maps [B, {tk}]")
        if m.dtype == np.bool_:
            kp = ~m
        else:
            f = np.asarray(m, dtype=np.float64)
            if not np.all((f == 0) | (f == -np.inf)):
                raise UnsupportedOpError(f"{who} has a float key padding mask with values other than 0 and -inf: a "
                                         "bias on the scores, which aieflow does not map",
                                         hint="use a boolean mask (True = padding)")
            kp = f == 0
        if not (kp == kp[:1]).all():
            raise UnsupportedOpError(f"{who} has a key padding mask whose rows differ (a padding per sample): a "
                                     "per-sample mask held in a buffer; a constant mask the same for every sample "
                                     "maps, and so does a per-sample one given as forward()'s second input",
                                     hint="pass the mask as forward(x, mask); see docs/attention.md")
        full = (np.ones((tq, tk), dtype=bool) if keep is None else np.asarray(keep, dtype=bool)) & kp[:1]
        if not full.any(axis=1).all():
            raise UnsupportedOpError(f"{who} has masks that mask every key of query row "
                                     f"{int(np.flatnonzero(~full.any(axis=1))[0])} (PyTorch gives NaN there)",
                                     hint="keep at least one key per query")
        return None if full.all() else full.astype(np.uint8)

    def runtime_padding(self, who: str, keep, pad, tk: int) -> RuntimeKeep:
        """A key padding mask given as forward()'s second input (``pad``, the fx placeholder): ``[B, tk]``,
        boolean (True = padding, ignored) or float 0 / -inf.  The graph reads it as its second input, the
        keep bytes of each sample (``ops/activation.py`` "run-time key padding mask"); ``keep`` (a constant
        ``attn_mask`` / ``src_mask`` table, or None) still applies."""
        meta = pad.meta.get("tensor_meta")
        shape = tuple(int(d) for d in meta.shape) if meta is not None else ()
        dtype = getattr(meta, "dtype", None)
        if len(shape) != 2 or shape[1] != tk:
            raise UnsupportedOpError(f"{who} has a run-time key padding mask '{pad.name}' of shape {shape}; aieflow "
                                     f"maps [batch, {tk}] (one row of keys per sample)")
        torch = self.torch
        if dtype != torch.bool and not (dtype is not None and dtype.is_floating_point):
            raise UnsupportedOpError(f"{who} has a run-time key padding mask '{pad.name}' of type {dtype}; aieflow "
                                     "takes a boolean mask (True = padding) or a float 0 / -inf one",
                                     hint="pass mask.bool() (True where the key is padding)")
        return RuntimeKeep(keep, pad.name)

    def _mha(self, path: str, mod, q_in: str, k_in: str, v_in: str, keep=None) -> str:
        """The nodes of ``nn.MultiheadAttention`` ``mod`` (checked by the caller) on the tensors
        ``q_in``, ``k_in``, ``v_in``, the scores masked by ``keep`` (``attention_keep``); returns its
        output tensor."""
        e, h = int(mod.embed_dim), int(mod.num_heads)
        d = e // h
        for t in (q_in, k_in, v_in):
            if len(self.shapes[t]) != 2 or self.shapes[t][-1] != e:
                raise UnsupportedOpError(f"module '{path}' (nn.MultiheadAttention) reads per-sample shape "
                                         f"{self.shapes[t]}; aieflow maps [tokens, {e}] samples (batch_first=True)")
        w = np.asarray(self._numpy(mod.in_proj_weight), dtype=np.float32)
        b = (np.asarray(self._numpy(mod.in_proj_bias), dtype=np.float32) if mod.in_proj_bias is not None
             else np.zeros(3 * e, np.float32))
        scale = 1.0 / math.sqrt(d)
        proj = {}
        for j, (role, x) in enumerate((("q", q_in), ("k", k_in), ("v", v_in))):
            wj, bj = w[j * e:(j + 1) * e], b[j * e:(j + 1) * e]
            if role == "q":  # the 1 / sqrt(d) of the scores, folded into the Q projection
                wj, bj = wj * np.float32(scale), bj * np.float32(scale)
            y = self._tensor_name(f"{path}_{role}", (self.shapes[x][0], e))
            self._node(f"{path}.{role}_proj", "dense", (x,), y,
                       {"in_features": e, "out_features": e, "activation": None},
                       {"weight": np.ascontiguousarray(wj.T), "bias": np.ascontiguousarray(bj)})
            proj[role] = y
        tq, tk = self.shapes[proj["q"]][0], self.shapes[proj["k"]][0]
        heads = []
        for k in range(h):
            parts = {}
            for role in ("q", "k", "v"):
                if h == 1:
                    parts[role] = proj[role]
                    continue
                rows = self.shapes[proj[role]][0]
                y = self._tensor_name(f"{path}_{role}{k}", (rows, d))
                self._node(f"{path}.{role}{k}", "slice", (proj[role],), y, {"axis": 1, "start": k * d, "stop": (k + 1) * d})
                parts[role] = y
            s = self._tensor_name(f"{path}_scores{k}", (tq, tk))
            self._node(f"{path}.qk{k}", "matmul", (parts["q"], parts["k"]), s, {"transpose_b": True})
            p = self._tensor_name(f"{path}_probs{k}", (tq, tk))
            table = keep.keep if isinstance(keep, RuntimeKeep) else keep
            self._node(f"{path}.softmax{k}", "softmax", (s, keep.tensor) if isinstance(keep, RuntimeKeep) else (s,),
                       p, {"axis": -1, "features": int(tk)}, None if table is None else {"keep": table})
            o = self._tensor_name(f"{path}_ctx{k}", (tq, d))
            self._node(f"{path}.av{k}", "matmul", (p, parts["v"]), o, {"transpose_b": False})
            heads.append(o)
        ctx = heads[0]
        if h > 1:
            ctx = self._tensor_name(f"{path}_ctx", (tq, e))
            self._node(f"{path}.heads", "concat", tuple(heads), ctx, {"axis": 1})
        y = self._tensor_name(f"{path}_out", (tq, e))
        ow = np.asarray(self._numpy(mod.out_proj.weight), dtype=np.float32)
        ob = mod.out_proj.bias
        params = {"weight": np.ascontiguousarray(ow.T)}
        if ob is not None:
            params["bias"] = np.asarray(self._numpy(ob), dtype=np.float32).reshape(-1)
        self._node(f"{path}.out_proj", "dense", (ctx,), y, {"in_features": e, "out_features": e, "activation": None},
                   params)
        return y

    @staticmethod
    def mha_refusal(mod) -> str | None:
        """Why ``nn.MultiheadAttention`` ``mod`` does not map (its construction), or None."""
        if not mod.batch_first:
            return "batch_first=False (aieflow keeps the batch as dimension 0: use batch_first=True)"
        if not mod._qkv_same_embed_dim:
            return "kdim / vdim differ from embed_dim"
        if mod.bias_k is not None or mod.bias_v is not None:
            return "add_bias_kv=True"
        if mod.add_zero_attn:
            return "add_zero_attn=True"
        return None

    def mha_getitem(self, fx_node) -> bool:
        src = fx_node.args[0] if fx_node.args else None
        if getattr(src, "name", None) not in self.mha_outputs:
            return False
        path, y = self.mha_outputs[src.name]
        if fx_node.args[1] != 0:
            if not fx_node.users:
                return True  # `out, _ = attn(...)`: the weights are never read
            raise UnsupportedOpError(f"'{fx_node.name}' reads the attention weights of module '{path}' "
                                     "(nn.MultiheadAttention output [1]); aieflow maps the attention output [0] only",
                                     hint="use out, _ = attn(x, x, x, need_weights=False)")
        self._alias(fx_node, y)
        return True
