"""``nn.TransformerEncoderLayer`` and ``nn.TransformerEncoder`` (stacks of it), for the torch converter.

torch.fx keeps both as leaf modules; they are written out here as the nodes their ``forward``
computes (PyTorch's ``torch/nn/modules/transformer.py``), with ``sa`` the self-attention of
``torch_attention._mha`` and ``ff(x) = linear2(activation(linear1(x)))``:

* ``norm_first=False``: ``x = norm1(x + sa(x))``, then ``x = norm2(x + ff(x))``;
* ``norm_first=True``: ``x = x + sa(norm1(x))``, then ``x = x + ff(norm2(x))``;
* ``nn.TransformerEncoder``: its layers in order, then its ``norm`` if it has one.

Dropout is the identity at inference: the importer traces in eval mode, and a layer the caller left
in training mode with a dropout probability above 0 is refused (call ``model.eval()``).  Mapped:
``batch_first=True``, activation ReLU or GELU (``"relu"`` / ``"gelu"``, ``F.relu`` / ``F.gelu``,
``nn.ReLU`` / ``nn.GELU`` either approximation).  A constant ``src_mask`` / ``mask`` (a buffer, as
``nn.MultiheadAttention``'s ``attn_mask``: ``torch_attention.attention_keep``) masks every layer's
softmax, and so does a constant ``src_key_padding_mask`` (a buffer, the same row for every sample:
``torch_attention.with_padding``) or one given as forward()'s second input (a run-time mask, one row per
sample: ``torch_attention.runtime_padding``); anything else is refused naming the module.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError

SUPPORTED_MODULES = (
    "nn.TransformerEncoderLayer (batch_first=True, norm_first either way, relu / gelu; eval mode)",
    "nn.TransformerEncoder (a stack of them, with or without its final norm)",
)


ROOT = "aieflow_root"


def wrap_root(module, torch):
    """An encoder (layer) compiled as the whole model, in a module that calls it (torch.fx traces
    into the root module but keeps a child ``nn.TransformerEncoder*`` whole); its layers keep their
    own names (``linear1``, ``layers.0.norm1``: :func:`_join` drops the wrapper's)."""
    if not isinstance(module, torch.nn.TransformerEncoderLayer | torch.nn.TransformerEncoder):
        return module

    class Root(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.add_module(ROOT, module)

        def forward(self, x):
            return getattr(self, ROOT)(x)

    return Root()


def _join(path: str, child: str) -> str:
    return child if path in ("", ROOT) else f"{path}.{child}"


def dropout_paths(module, torch) -> frozenset:
    """Paths of the encoder layers left in training mode with a dropout probability above 0."""
    out = set()
    for path, m in module.named_modules():
        if isinstance(m, torch.nn.TransformerEncoderLayer) and m.training:
            ps = [m.dropout.p, m.dropout1.p, m.dropout2.p, m.self_attn.dropout]
            if any(float(p) > 0 for p in ps):
                out.add(path)
    return frozenset(out)


class EncoderMixin:
    training_dropout: frozenset

    def encoder_module(self, fx_node, path: str, mod) -> bool:
        nn = self.torch.nn
        path = "" if path == ROOT else path
        if isinstance(mod, nn.TransformerEncoderLayer):
            args, kw = list(fx_node.args) + [None] * 4, fx_node.kwargs
            x = self._input(kw.get("src", args[0]), path)
            mask = self._encoder_mask(fx_node, path, kw.get("src_mask", args[1]), kw.get("is_causal", args[3]),
                                      kw.get("src_key_padding_mask", args[2]))
            self._alias(fx_node, self._encoder_layer(path, mod, x, mask))
            return True
        if isinstance(mod, nn.TransformerEncoder):
            args, kw = list(fx_node.args) + [None] * 4, fx_node.kwargs
            x = self._input(kw.get("src", args[0]), path)
            pad = kw.get("src_key_padding_mask", args[2])
            if pad is not None and getattr(mod, "use_nested_tensor", False):
                raise UnsupportedOpError(
                    f"module '{path or 'the model'}' (nn.TransformerEncoder) has a src_key_padding_mask with "
                    "enable_nested_tensor=True: under torch.no_grad() PyTorch then writes 0 at the padded tokens, "
                    "its autograd forward computes them; aieflow follows the latter and will not guess which you mean",
                    hint="build the encoder with enable_nested_tensor=False")
            mask = self._encoder_mask(fx_node, path, kw.get("mask", args[1]), kw.get("is_causal", args[3]), pad)
            for i, layer in enumerate(mod.layers):
                x = self._encoder_layer(_join(path, f"layers.{i}"), layer, x, mask)
            if mod.norm is not None:
                x = self._encoder_norm(_join(path, "norm"), mod.norm, x)
            self._alias(fx_node, x)
            return True
        return False

    # -- pieces ---------------------------------------------------------------------------------

    def _encoder_mask(self, fx_node, path: str, mask_arg, causal, pad=None):
        """The ``keep`` table of a constant ``src_mask`` (``is_causal`` is PyTorch's hint about it) and
        a constant ``src_key_padding_mask`` (``torch_attention.with_padding``)."""
        kind = type(self.gm.get_submodule(str(fx_node.target))).__name__
        if mask_arg is None and causal:
            raise UnsupportedOpError(f"module '{path or 'the model'}' ({kind}) has is_causal=True without a mask",
                                     hint="pass mask=nn.Transformer.generate_square_subsequent_mask(T) as a buffer")
        arg = fx_node.kwargs.get("src", fx_node.args[0] if fx_node.args else None)
        t = self.shapes[self._input(arg, path)][0]
        who = f"module '{path or 'the model'}' ({kind})"
        keep = self.attention_keep(who, mask_arg, False, t, t, true_keeps=False)
        return self.with_padding(who, keep, pad, t, t)

    def _encoder_layer(self, path: str, mod, x: str, mask) -> str:
        nn, F = self.torch.nn, self.F
        who = path or "the model"
        if path in self.training_dropout:
            raise UnsupportedOpError(
                f"module '{who}' (nn.TransformerEncoderLayer) is in training mode with dropout > 0",
                hint="call model.eval() before compiling (dropout is the identity at inference), or set dropout=0")
        why = self.mha_refusal(mod.self_attn)
        if why is None and len(self.shapes[x]) != 2:
            why = f"per-sample shape {self.shapes[x]} (aieflow maps [tokens, features] samples: batch_first=True)"
        act = mod.activation
        if act is F.relu or isinstance(act, nn.ReLU):
            function = "relu"
        elif act is F.gelu:
            function = "gelu"
        elif isinstance(act, nn.GELU):
            function = "gelu_tanh" if act.approximate == "tanh" else "gelu"
        else:
            function = None
            why = why or f"activation {getattr(act, '__name__', type(act).__name__)} (relu and gelu map)"
        if why:
            raise UnsupportedOpError(f"module '{who}' (nn.TransformerEncoderLayer) has {why}",
                                     hint="see docs/attention.md for the encoder layers aieflow maps")

        def sa(t: str) -> str:
            return self._mha_masked(_join(path, "self_attn"), mod.self_attn, t, t, t, mask)

        def ff(t: str) -> str:
            h = self._encoder_dense(_join(path, "linear1"), mod.linear1, t)
            a = self._tensor_name(_join(path, "act"), self.shapes[h])
            if function == "relu":
                self._node(_join(path, "activation"), "relu", (h,), a)
            else:
                self._node(_join(path, "activation"), "activation", (h,), a, {"function": function})
            return self._encoder_dense(_join(path, "linear2"), mod.linear2, a)

        if mod.norm_first:
            x = self._encoder_add(_join(path, "add1"), x, sa(self._encoder_norm(_join(path, "norm1"), mod.norm1, x)))
            return self._encoder_add(_join(path, "add2"), x, ff(self._encoder_norm(_join(path, "norm2"), mod.norm2, x)))
        x = self._encoder_norm(_join(path, "norm1"), mod.norm1, self._encoder_add(_join(path, "add1"), x, sa(x)))
        return self._encoder_norm(_join(path, "norm2"), mod.norm2, self._encoder_add(_join(path, "add2"), x, ff(x)))

    def _mha_masked(self, path: str, mod, q: str, k: str, v: str, mask) -> str:
        return self._mha(path, mod, q, k, v, mask)

    def _encoder_dense(self, path: str, lin, x: str) -> str:
        w = np.asarray(self._numpy(lin.weight), dtype=np.float32)
        params = {"weight": np.ascontiguousarray(w.T)}
        if lin.bias is not None:
            params["bias"] = np.asarray(self._numpy(lin.bias), dtype=np.float32).reshape(-1)
        y = self._tensor_name(f"{path}_out", (*self.shapes[x][:-1], int(w.shape[0])))
        self._node(path, "dense", (x,), y, {"in_features": int(w.shape[1]), "out_features": int(w.shape[0]),
                                            "activation": None}, params)
        return y

    def _encoder_norm(self, path: str, ln, x: str) -> str:
        n = self.shapes[x][-1]
        if tuple(ln.normalized_shape) != (n,):
            raise UnsupportedOpError(f"'{path}' normalises over {tuple(ln.normalized_shape)}; only the last "
                                     f"dimension ({n}) is supported")
        gamma = (np.asarray(self._numpy(ln.weight), dtype=np.float32).reshape(-1) if ln.weight is not None
                 else np.ones(n, np.float32))
        beta = (np.asarray(self._numpy(ln.bias), dtype=np.float32).reshape(-1) if getattr(ln, "bias", None) is not None
                else np.zeros(n, np.float32))
        y = self._tensor_name(f"{path}_out", self.shapes[x])
        self._node(path, "layernorm", (x,), y, {"eps": float(ln.eps), "features": int(n)},
                   {"gamma": gamma, "beta": beta})
        return y

    def _encoder_add(self, path: str, a: str, b: str) -> str:
        y = self._tensor_name(f"{path}_out", self.shapes[a])
        self._node(path, "add", (a, b), y)
        return y
