"""PyTorch frontend: an ``nn.Module`` to the aieflow float IR, through ``torch.fx``.

The module is traced with :func:`torch.fx.symbolic_trace` (in eval mode) and the example input is
run through the traced graph with ``ShapeProp`` to learn every tensor's shape; the batch dimension
(dimension 0) is dropped from the IR shapes.  ``torch`` is imported only when this runs.
"""

from __future__ import annotations

import itertools
import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError, ModelError, UnsupportedOpError
from ..ir import Graph, ImportedModel, Node, QuantHints, Tensor, frozen_map
from . import attention, batchnorm, pooling, sequence, torch_masked_mean
from .patches import token_select_nodes
from .torch_activation import SUPPORTED_FUNCTIONS as _ACT_FUNCTIONS
from .torch_activation import SUPPORTED_MODULES as _ACT_MODULES
from .torch_activation import ActivationMixin
from .torch_attention import SUPPORTED_FUNCTIONS as _ATT_FUNCTIONS
from .torch_attention import SUPPORTED_MODULES as _ATT_MODULES
from .torch_attention import AttentionMixin
from .torch_conv import SUPPORTED_FUNCTIONS as _CONV_FUNCTIONS
from .torch_conv import SUPPORTED_MODULES as _CONV_MODULES
from .torch_conv import ConvMixin
from .torch_encoder import SUPPORTED_MODULES as _ENC_MODULES
from .torch_encoder import EncoderMixin, dropout_paths, wrap_root
from .torch_recurrent import RecurrentMixin

if TYPE_CHECKING:
    import torch

SUPPORTED_TORCH_MODULES: tuple[str, ...] = (
    "nn.Linear",
    "nn.GRU / nn.LSTM (forward, zero initial state; read out[:, -1], h[-1] or the whole sequence)",
    "nn.ReLU",
    "nn.Flatten",
    "nn.Identity",
    "nn.Dropout",
    "nn.Sequential (nesting)",
    "nn.LayerNorm (over the last dimension)",
    *_CONV_MODULES,
    *_ACT_MODULES,
    *_ATT_MODULES,
    *_ENC_MODULES,
)
SUPPORTED_TORCH_FUNCTIONS: tuple[str, ...] = (
    "F.relu / torch.relu / Tensor.relu",
    "F.linear (with parameter weight and bias)",
    "torch.flatten / Tensor.flatten",
    "Tensor.view / Tensor.reshape / torch.reshape (batch kept as dimension 0)",
    "F.dropout (eval mode)",
    "Tensor.contiguous",
    "a + b / torch.add of two computed tensors (residual add)",
    "torch.cat / torch.concat (same-typed tensors; a class token torch.cat([cls.expand(B, -1, -1), x], 1))",
    "x[:, i] of [B, T, E] (class-token pooling)",
    "torch.mean / Tensor.mean over the tokens of [B, T, E] (dim 1 or -2, a power-of-two T)",
    "torch.split / torch.chunk / Tensor.split / Tensor.chunk (then indexing)",
    "Tensor.transpose / Tensor.permute / torch.transpose (batch kept as dimension 0)",
    "F.layer_norm (over the last dimension, parameter weight and bias)",
    *_CONV_FUNCTIONS,
    *_ACT_FUNCTIONS,
    *_ATT_FUNCTIONS,
)

_SUPPORTED_TEXT = (
    f"supported modules: {', '.join(SUPPORTED_TORCH_MODULES)}; supported functions: "
    f"{'; '.join(SUPPORTED_TORCH_FUNCTIONS)}"
)

# Shape queries: fx nodes that compute plain Python ints / sizes, e.g. x.size(0) in x.view(x.size(0), -1).
_SHAPE_METHODS = ("size", "dim", "numel")
_SHAPE_FUNCTIONS = (
    getattr,
    operator.getitem,
    operator.mul,
    operator.floordiv,
    operator.add,
    operator.sub,
)


def _fetch_attr(root: Any, target: str) -> Any:
    obj = root
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _to_numpy(t: Any) -> np.ndarray:
    return np.ascontiguousarray(t.detach().cpu().to(dtype=_torch().float32).numpy())


def _torch():
    import torch

    return torch


def _example_tensor(torch, example_input: Any):
    if isinstance(example_input, torch.Tensor):
        return example_input
    if isinstance(example_input, np.ndarray):
        return torch.from_numpy(np.asarray(example_input, dtype=np.float32))
    if isinstance(example_input, tuple | list) and all(isinstance(d, int) for d in example_input):
        if len(example_input) < 1:
            raise ConfigError("example_input shape must include the batch dimension")
        return torch.zeros(tuple(example_input), dtype=torch.float32)
    if isinstance(example_input, tuple | list):
        raise UnsupportedOpError(
            f"example_input has {len(example_input)} tensors; aieflow supports models with exactly "
            "one input for now"
        )
    raise ConfigError(
        "example_input must be a torch.Tensor, a numpy array, or a shape tuple (batch included), "
        f"got {type(example_input).__name__}"
    )


def import_torch(module: torch.nn.Module, example_input: Any, mask_tokens: int | None = None) -> ImportedModel:
    """Import a PyTorch module as a float IR graph.

    ``example_input`` is a sample input batch (tensor or array) or its shape, batch included.
    ``mask_tokens``: the length of ``forward(x, mask)``'s key padding mask (None: ``x``'s second axis).
    """
    try:
        import torch
        import torch.fx
        from torch.fx.passes.shape_prop import ShapeProp
    except ImportError:
        raise ModelError(
            "PyTorch is not installed; install the torch extra: pip install aieflow[torch]"
        ) from None
    if not isinstance(module, torch.nn.Module):
        raise ConfigError(f"import_torch expects a torch.nn.Module, got {type(module).__name__}")
    for pname, value in itertools.chain(module.named_parameters(), module.named_buffers()):
        if value.device.type == "meta":
            raise ModelError(
                f"parameter '{pname}' of {type(module).__name__} is a 'meta' tensor: it has a shape but no values",
                hint="load the weights (e.g. module.to_empty(device='cpu') then load_state_dict) before compiling",
            )
    x = _example_tensor(torch, example_input)
    if x.dim() < 1:
        raise ConfigError("example_input must have a batch dimension (dimension 0)")

    # the importer traces in eval mode and gives every module its own mode back afterwards; a
    # BatchNorm the caller left in training mode is refused (torch_conv: call model.eval())
    modes = [(m, m.training) for m in module.modules()]
    training_bn = frozenset(
        path for path, m in module.named_modules() if m.training and isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
    )
    training_dropout = dropout_paths(module, torch)
    module.eval()
    try:
        try:
            gm = torch.fx.symbolic_trace(wrap_root(module, torch))
        except Exception as exc:  # noqa: BLE001 - fx raises many types (TraceError, TypeError...)
            raise ModelError(
                f"cannot trace {type(module).__name__} with torch.fx: {_first_line(exc)}",
                hint="forward() must be traceable by torch.fx: no control flow or Python logic that "
                "depends on tensor values; move such logic out of forward()",
            ) from None
        threads = torch.get_num_threads()
        try:
            # one intra-op thread: these runs only find shapes (a small example batch), and torch's
            # thread pool spinning on a busy machine made a 100-step GRU take seconds instead of ms
            torch.set_num_threads(1)
            args = (x,)
            if sum(n.op == "placeholder" for n in gm.graph.nodes) == 2:
                # forward(x, mask): the mask is a key padding mask over the input's tokens (docs/attention.md);
                # nothing masked, so the shapes come out as for any mask
                tokens = int(x.shape[1]) if mask_tokens is None else int(mask_tokens)
                args = (x, torch.zeros((int(x.shape[0]), tokens), dtype=torch.bool))
            with torch.no_grad():
                gm(*args)  # a plain run first: ShapeProp prints a traceback when a node fails
                ShapeProp(gm).propagate(*args)
        except Exception as exc:  # noqa: BLE001
            padded = (f" with a second input '{list(gm.graph.nodes)[1].name}' of shape {tuple(args[1].shape)} "
                      "(aieflow takes a second input only as a boolean key padding mask, [batch, tokens])"
                      if len(args) > 1 else "")
            raise ModelError(
                f"running example_input of shape {tuple(x.shape)}{padded} through {type(module).__name__} "
                f"failed: {_first_line(exc)}",
                hint="check that example_input has the shape the model expects, batch included" + (
                    "; a per-sample attn_mask is not mapped (docs/attention.md); a mask over other tokens than the "
                    "input's second axis (a patch-embedded ViT) takes its length from calibration=(x, mask)"
                    if padded else ""),
            ) from None
        finally:
            torch.set_num_threads(threads)
        return _Converter(torch, gm, int(x.shape[0]), type(module).__name__, training_bn,
                          training_dropout).run()
    finally:
        for m, mode in modes:
            m.training = mode


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class _Converter(RecurrentMixin, ConvMixin, ActivationMixin, AttentionMixin, EncoderMixin):
    def __init__(self, torch, gm, batch: int, model_name: str, training_bn: frozenset = frozenset(),
                 training_dropout: frozenset = frozenset()):
        self.torch = torch
        self.F = torch.nn.functional
        self.gm = gm
        self.batch = batch
        self.model_name = model_name
        self.nodes: list[Node] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.alias: dict[str, str] = {}
        self.attrs: dict[str, Any] = {}  # get_attr node name -> tensor
        self.used_names: set[str] = set()
        self.input_name: str | None = None
        self.padding_input: str | None = None  # forward()'s second input: a run-time key padding mask
        self.pending = {}  # fx node name -> recurrent value not yet an IR tensor (torch_recurrent.py)
        self.splits: dict[str, tuple[str, int, list[tuple[int, int]]]] = {}  # fx split -> (x, axis, ranges)
        self.lifted: dict[str, str] = {}  # (C, W) tensor -> its (C, 1, W) view (sequence.py)
        self.unlifts: set[str] = set()
        self.training_bn = training_bn
        self.training_dropout = training_dropout
        self.mask_attrs: set[str] = set()  # get_attr nodes read as constants (attention masks, positional adds)
        self.const_rows: dict[str, Any] = {}  # fx node of cls.expand(...) -> the get_attr it expands
        self.mha_outputs: dict[str, tuple[str, str]] = {}  # fx node of an nn.MultiheadAttention -> (path, output)

    # -- helpers --------------------------------------------------------------------------------

    def _unique(self, base: str) -> str:
        name, k = base, 1
        while name in self.used_names:
            name = f"{base}_{k}"
            k += 1
        self.used_names.add(name)
        return name

    def _shape(self, fx_node) -> tuple[int, ...] | None:
        meta = fx_node.meta.get("tensor_meta")
        if meta is None or not hasattr(meta, "shape"):
            return None
        return tuple(int(d) for d in meta.shape)

    def _per_sample(self, fx_node, name: str) -> tuple[int, ...]:
        full = self._shape(fx_node)
        if full is None:
            raise UnsupportedOpError(
                f"'{name}' does not produce a single tensor; {_SUPPORTED_TEXT}"
            )
        if len(full) < 1 or full[0] != self.batch:
            raise UnsupportedOpError(
                f"'{name}' produces shape {full}, which does not keep the batch ({self.batch}) as "
                "dimension 0; aieflow needs every layer to keep dimension 0 as the batch"
            )
        return full[1:]

    def _numpy(self, t) -> np.ndarray:
        return _to_numpy(t)

    def _input(self, arg, name: str) -> str:
        fx = self.torch.fx
        if not isinstance(arg, fx.Node):
            raise UnsupportedOpError(f"'{name}' takes a non-tensor input {arg!r}")
        if arg.name in self.pending:
            return self.materialise(arg.name, name)
        t = arg.name
        while t in self.alias:
            t = self.alias[t]
        if t == self.padding_input:
            raise UnsupportedOpError(
                f"'{name}' reads the model's second input '{t}'; aieflow takes a second input only as a key padding "
                "mask (nn.MultiheadAttention key_padding_mask, an encoder's src_key_padding_mask) or in masked mean "
                "pooling over the tokens: keep = ~mask; (x * keep[..., None]).sum(1) / keep.sum(1, keepdim=True), or "
                "x.masked_fill(mask[..., None], 0).sum(1) / (~mask).sum(1, keepdim=True)",
                hint="pass the mask straight to the attention module, or pool in one of those forms; see "
                "docs/attention.md")
        if t not in self.shapes:
            raise UnsupportedOpError(
                f"'{name}' reads '{arg.name}', which is not a supported tensor; {_SUPPORTED_TEXT}"
            )
        return t

    def _emit(self, fx_node, name: str, op: str, x: str, attrs=None, params=None) -> None:
        y = fx_node.name
        self.shapes[y] = self._per_sample(fx_node, name)
        self.nodes.append(
            Node(
                name=self._unique(name),
                op=op,
                inputs=(x,),
                outputs=(y,),
                attrs=frozen_map(attrs or {}),
                params=frozen_map(params or {}),
            )
        )

    def _dense(self, fx_node, name: str, x: str, weight, bias) -> None:
        in_shape = self.shapes[x]
        if len(in_shape) < 1:
            raise UnsupportedOpError(f"'{name}' (linear) receives a scalar per sample; it needs features")
        # a per-sample [rows, features] input (token / channel mixing) multiplies every row
        w = _to_numpy(weight).T  # torch stores (out, in); the IR wants (in, out)
        if w.shape[0] != in_shape[-1]:
            raise ModelError(
                f"'{name}' (linear): input has {in_shape[-1]} features but the weight expects {w.shape[0]}"
            )
        params = {"weight": np.ascontiguousarray(w)}
        if bias is not None:
            params["bias"] = _to_numpy(bias).reshape(-1)
        attrs = {
            "in_features": int(w.shape[0]),
            "out_features": int(w.shape[1]),
            "activation": None,
        }
        self._emit(fx_node, name, "dense", x, attrs, params)

    def _reshape(self, fx_node, name: str, x: str) -> None:
        out = self._per_sample(fx_node, name)
        if int(np.prod(out, dtype=np.int64)) != int(np.prod(self.shapes[x], dtype=np.int64)):
            raise UnsupportedOpError(
                f"'{name}' reshapes per-sample shape {self.shapes[x]} to {out}, mixing samples of "
                "the batch; keep dimension 0 as the batch (e.g. x.flatten(1))"
            )
        self._emit(fx_node, name, "reshape", x, {"shape": out})

    def _flatten_dims(self, name: str, x: str, start: int, end: int) -> None:
        rank = len(self.shapes[x]) + 1
        s = start + rank if start < 0 else start
        if s == 0 and rank > 1:
            raise UnsupportedOpError(
                f"'{name}' flattens from dimension {start}, which merges the batch; use start_dim=1"
            )
        del end  # the output shape comes from shape propagation

    def _alias(self, fx_node, x: str) -> None:
        self.alias[fx_node.name] = x

    # -- node kinds -----------------------------------------------------------------------------

    def _call_module(self, fx_node) -> None:
        nn = self.torch.nn
        path = str(fx_node.target)
        mod = self.gm.get_submodule(path)
        kind = type(mod).__name__
        if isinstance(mod, nn.GRU | nn.LSTM):
            self.recurrent_module(fx_node, path, mod)
            return
        if isinstance(mod, nn.MultiheadAttention):
            self.mha_module(fx_node, path, mod)
            return
        if self.encoder_module(fx_node, path, mod):
            return
        x = self._input(fx_node.args[0], path) if fx_node.args else None
        if x is None or len(fx_node.args) != 1 or fx_node.kwargs:
            raise UnsupportedOpError(
                f"module '{path}' ({kind}) must be called with a single tensor"
            )
        if self.conv_module(fx_node, path, mod, x) or self.activation_module(fx_node, path, mod, x):
            return
        if isinstance(mod, nn.Linear):
            self._dense(fx_node, path, x, mod.weight, mod.bias)
        elif isinstance(mod, nn.ReLU):
            self.elementwise(fx_node, path, "relu", x)
        elif isinstance(mod, nn.Flatten):
            self._flatten_dims(path, x, mod.start_dim, mod.end_dim)
            self._reshape(fx_node, path, x)
        elif isinstance(mod, nn.Identity | nn.Dropout):
            self._alias(fx_node, x)
        elif isinstance(mod, nn.LayerNorm):
            self._layernorm(fx_node, path, x, tuple(mod.normalized_shape), mod.weight, mod.bias, mod.eps)
        else:
            raise UnsupportedOpError(
                f"module '{path}' has type {type(mod).__module__}.{kind}, which aieflow does not "
                f"support; {_SUPPORTED_TEXT}"
            )

    def _arg(self, fx_node, index: int, key: str, default: Any) -> Any:
        if len(fx_node.args) > index:
            return fx_node.args[index]
        return fx_node.kwargs.get(key, default)

    def _call_function(self, fx_node) -> None:
        torch, F = self.torch, self.F
        fn = fx_node.target
        name = fx_node.name
        src = fx_node.args[0] if fx_node.args else None
        if fn is operator.getitem and isinstance(src, torch.fx.Node) and src.name in self.pending:
            self.pending_getitem(fx_node)
            return
        if fn is operator.getitem and self.mha_getitem(fx_node):
            return
        if self.attention_function(fx_node, fn, name):
            return
        if fn is torch.transpose and isinstance(src, torch.fx.Node):
            self._call_method(fx_node, "transpose")
            return
        if fn is operator.getitem and self._token_select(fx_node, name):
            return
        if fn is operator.getitem and isinstance(src, torch.fx.Node) and src.name in self.splits:
            self._split_item(fx_node, src.name)
            return
        if fn in (torch.split, torch.chunk, torch.tensor_split) and isinstance(src, torch.fx.Node):
            self._call_method(fx_node, {torch.split: "split", torch.chunk: "chunk"}.get(fn, "tensor_split"))
            return
        if fn in (torch.permute,) and isinstance(src, torch.fx.Node):
            self._call_method(fx_node, "permute")
            return
        if fn in (operator.add, torch.add) and self._shape(fx_node) is not None and len(fx_node.args) == 2 and all(
            isinstance(a, torch.fx.Node) for a in fx_node.args
        ):
            if any(a.op == "get_attr" for a in fx_node.args):  # x + a parameter / buffer: a positional embedding
                self._const_add(fx_node, name)
            else:
                self._residual_add(fx_node, name)
            return
        if fn in (torch.cat, torch.concat):
            self._concat(fx_node, name)
            return
        if fn is F.layer_norm:
            x = self._input(fx_node.args[0], name)
            shape = self._arg(fx_node, 1, "normalized_shape", None)
            w_arg, b_arg = self._arg(fx_node, 2, "weight", None), self._arg(fx_node, 3, "bias", None)
            weight = self._param(w_arg, name, "weight") if w_arg is not None else None
            bias = self._param(b_arg, name, "bias") if b_arg is not None else None
            self._layernorm(fx_node, name, x, tuple(shape), weight, bias, float(self._arg(fx_node, 4, "eps", 1e-5)))
            return
        if self._shape(fx_node) is None and fn in _SHAPE_FUNCTIONS:
            return  # a shape query (x.shape[0]...); consumed by a reshape, whose shape we know
        if self.conv_function(fx_node, fn, name) or self.activation_function(fx_node, fn, name):
            return
        if fn in (F.relu, torch.relu, torch.relu_):
            self.elementwise(fx_node, name, "relu", self._input(fx_node.args[0], name))
        elif fn is F.linear:
            x = self._input(fx_node.args[0], name)
            w_arg = self._arg(fx_node, 1, "weight", None)
            b_arg = self._arg(fx_node, 2, "bias", None)
            weight = self._param(w_arg, name, "weight")
            bias = self._param(b_arg, name, "bias") if b_arg is not None else None
            self._dense(fx_node, name, x, weight, bias)
        elif fn is torch.flatten:
            x = self._input(fx_node.args[0], name)
            self._flatten_dims(name, x, int(self._arg(fx_node, 1, "start_dim", 0)), -1)
            self._reshape(fx_node, name, x)
        elif fn is torch.reshape:
            self._reshape(fx_node, name, self._input(fx_node.args[0], name))
        elif fn is F.dropout:
            if self._arg(fx_node, 2, "training", True) is not False:
                raise UnsupportedOpError(
                    f"'{name}' (F.dropout) is traced with training=True; pass training=self.training "
                    "so eval mode disables it"
                )
            self._alias(fx_node, self._input(fx_node.args[0], name))
        else:
            label = getattr(fn, "__qualname__", None) or repr(fn)
            module = getattr(fn, "__module__", None)
            label = f"{module}.{label}" if module else label
            raise UnsupportedOpError(
                f"function call '{name}' ({label}) is not supported by aieflow; {_SUPPORTED_TEXT}"
            )

    def _call_method(self, fx_node, method: str | None = None) -> None:
        method = method or str(fx_node.target)
        name = fx_node.name
        if fx_node.args and getattr(fx_node.args[0], "name", None) in self.pending:
            if self.pending_method(fx_node, method):
                return
        if method in _SHAPE_METHODS and self._shape(fx_node) is None:
            return
        if self.attention_method(fx_node, method, name):
            return
        if method == "expand" and getattr(fx_node.args[0], "op", None) == "get_attr":  # a class token, cat reads it
            self.const_rows[fx_node.name] = fx_node.args[0]
            return
        x = self._input(fx_node.args[0], name)
        if method in ("transpose", "swapaxes", "swapdims", "permute") and self.maybe_time_major_view(fx_node, method, x):
            return
        if self.conv_method(fx_node, method, name, x) or self.activation_method(fx_node, method, name, x):
            return
        if method in ("relu", "relu_"):
            self.elementwise(fx_node, name, "relu", x)
        elif method == "flatten":
            self._flatten_dims(name, x, int(self._arg(fx_node, 1, "start_dim", 0)), -1)
            self._reshape(fx_node, name, x)
        elif method in ("view", "reshape"):
            self._reshape(fx_node, name, x)
        elif method == "contiguous":
            self._alias(fx_node, x)
        elif method in ("transpose", "swapaxes", "swapdims", "permute"):
            self._transpose(fx_node, name, method, x)
        elif method in ("split", "chunk", "tensor_split"):
            self._split(fx_node, name, method, x)

        else:
            raise UnsupportedOpError(
                f"method call '{name}' (Tensor.{method}) is not supported by aieflow; {_SUPPORTED_TEXT}"
            )

    # -- graphs beyond chains (issue 7) ----------------------------------------------------------

    def _emit_multi(self, fx_node, name: str, op: str, xs: tuple[str, ...], attrs=None, params=None) -> None:
        y = fx_node.name
        self.shapes[y] = self._per_sample(fx_node, name)
        self.nodes.append(Node(name=self._unique(name), op=op, inputs=xs, outputs=(y,),
                               attrs=frozen_map(attrs or {}), params=frozen_map(params or {})))

    def _residual_add(self, fx_node, name: str) -> None:
        a, b = (self._input(arg, name) for arg in fx_node.args[:2])
        if self.shapes[a] != self.shapes[b]:
            raise UnsupportedOpError(
                f"'{name}' adds per-sample shapes {self.shapes[a]} (from '{a}') and {self.shapes[b]} (from '{b}'); "
                "only equal shapes (no broadcasting) are supported"
            )
        if fx_node.kwargs.get("alpha", 1) != 1:
            raise UnsupportedOpError(f"'{name}' (torch.add) has alpha != 1; only a plain sum is supported")
        self._emit_multi(fx_node, name, "add", (a, b))

    def _const_add(self, fx_node, name: str) -> None:
        """``x + C`` with ``C`` a module parameter / buffer of the sample's shape (a leading 1 allowed):
        ``add_const`` (ops/add_const.py), the constant shared by every sample."""
        i = 0 if fx_node.args[0].op == "get_attr" else 1
        if fx_node.args[1 - i].op == "get_attr":
            raise UnsupportedOpError(f"'{name}' adds two parameters; nothing is computed from the input")
        if fx_node.kwargs.get("alpha", 1) != 1:
            raise UnsupportedOpError(f"'{name}' (torch.add) has alpha != 1; only a plain sum is supported")
        x = self._input(fx_node.args[1 - i], name)
        c = np.asarray(self._numpy(_fetch_attr(self.gm, str(fx_node.args[i].target))), dtype=np.float32)
        shape = self.shapes[x]
        if c.ndim == len(shape) + 1 and c.shape[0] == 1:
            c = c[0]
        if tuple(c.shape) != tuple(shape):
            raise UnsupportedOpError(
                f"'{name}' adds the constant '{fx_node.args[i].target}' of shape {tuple(c.shape)} to per-sample shape "
                f"{shape}; aieflow maps a constant of the sample's shape (a positional embedding [1, T, E] or [T, E])")
        if len(shape) != 2:
            raise UnsupportedOpError(f"'{name}' adds a constant to per-sample shape {shape}; aieflow maps [tokens, "
                                     "features] samples")
        self.mask_attrs.add(fx_node.args[i].name)  # read here as a constant
        self._emit_multi(fx_node, name, "add_const", (x,), None, {"constant": c})

    def _concat(self, fx_node, name: str) -> None:
        items = self._arg(fx_node, 0, "tensors", [])
        consts = [self.const_rows.get(a.name, a if a.op == "get_attr" else None) for a in items]
        if any(c is not None for c in consts):
            self._prepend_const(fx_node, name, items, consts)
            return
        xs = tuple(self._input(arg, name) for arg in items)
        rank = len(self.shapes[xs[0]]) + 1
        dim = int(self._arg(fx_node, 1, "dim", 0))
        axis = (dim + rank if dim < 0 else dim) - 1
        if axis < 0:
            raise UnsupportedOpError(f"'{name}' concatenates along the batch; use a feature dimension")
        self._emit_multi(fx_node, name, "concat", xs, {"axis": axis})

    def _prepend_const(self, fx_node, name: str, items, consts) -> None:
        """``torch.cat([cls.expand(B, -1, -1), x], dim=1)`` with ``cls`` a parameter ``[1, k, E]`` /
        ``[k, E]``: ``prepend_const`` (ops/prepend_const.py, a class token)."""
        if len(items) != 2 or consts[0] is None or consts[1] is not None:
            raise UnsupportedOpError(f"'{name}' concatenates a parameter with tensors other than as [constant, x]; "
                                     "aieflow maps a class token put in front: torch.cat([cls.expand(B, -1, -1), x], 1)")
        x = self._input(items[1], name)
        shape = self.shapes[x]
        rank = len(shape) + 1
        dim = int(self._arg(fx_node, 1, "dim", 0))
        c = np.asarray(self._numpy(_fetch_attr(self.gm, str(consts[0].target))), dtype=np.float32)
        if c.ndim == 3 and c.shape[0] == 1:
            c = c[0]
        if len(shape) != 2 or (dim + rank if dim < 0 else dim) != 1 or c.ndim != 2 or c.shape[1] != shape[1]:
            raise UnsupportedOpError(
                f"'{name}' concatenates the constant '{consts[0].target}' of shape {tuple(c.shape)} with per-sample shape "
                f"{shape} along dim {dim}; aieflow maps constant tokens [1, k, E] put in front of [B, T, E] along dim 1")
        self.mask_attrs.add(consts[0].name)
        self._emit_multi(fx_node, name, "prepend_const", (x,), None, {"constant": c})

    def _token_select(self, fx_node, name: str) -> bool:
        """``x[:, i]`` of ``[B, T, E]``: class-token pooling (frontends/patches.token_select_nodes)."""
        src, index = fx_node.args[0], fx_node.args[1]
        if not (isinstance(src, self.torch.fx.Node) and isinstance(index, tuple) and len(index) == 2
                and index[0] == slice(None) and isinstance(index[1], int)):
            return False
        x = self._input(src, name)
        nodes, shapes = token_select_nodes(name, x, fx_node.name, self.shapes[x], index[1], self._unique)
        self.nodes.extend(nodes)
        self.shapes.update(shapes)
        return True

    def _transpose(self, fx_node, name: str, method: str, x: str) -> None:
        rank = len(self.shapes[x]) + 1
        args = [a for a in fx_node.args[1:]]
        if method == "permute":
            dims = list(args[0]) if len(args) == 1 and isinstance(args[0], tuple | list) else list(args)
        else:
            d0, d1 = (int(a) for a in args[:2])
            dims = list(range(rank))
            d0, d1 = d0 % rank, d1 % rank
            dims[d0], dims[d1] = dims[d1], dims[d0]
        dims = [int(d) % rank for d in dims]
        if dims[0] != 0:
            raise UnsupportedOpError(f"'{name}' ({method}) moves the batch dimension; keep dimension 0 in place")
        self._emit(fx_node, name, "transpose", x, {"perm": tuple(d - 1 for d in dims[1:])})

    def _token_mean(self, fx_node, name: str, x: str, keepdim: bool) -> None:
        """``mean(dim=1)`` of ``[B, T, E]`` (torch_conv._mean sends it here): frontends/pooling.py."""
        nodes, shapes = pooling.token_mean_nodes(name, x, fx_node.name, self.shapes[x], keepdim, self._unique)
        self.nodes.extend(nodes)
        self.shapes.update(shapes)

    def _split(self, fx_node, name: str, method: str, x: str) -> None:
        shape = self.shapes[x]
        rank = len(shape) + 1
        dim = int(self._arg(fx_node, 2, "dim", 0))
        axis = (dim + rank if dim < 0 else dim) - 1
        if axis < 0:
            raise UnsupportedOpError(f"'{name}' ({method}) splits the batch; split a feature dimension")
        size = shape[axis]
        arg = self._arg(fx_node, 1, "split_size_or_sections" if method == "split" else "chunks", None)
        if method == "split" and isinstance(arg, int):
            sizes = [min(arg, size - i) for i in range(0, size, arg)]
        elif method == "split" and isinstance(arg, tuple | list):
            sizes = [int(s) for s in arg]
        elif method == "chunk" and isinstance(arg, int):
            step = -(-size // arg)
            sizes = [min(step, size - i) for i in range(0, size, step)]
        else:
            raise UnsupportedOpError(f"'{name}' ({method}) with argument {arg!r} is not supported")
        bounds = np.cumsum([0, *sizes]).tolist()
        self.splits[fx_node.name] = (x, axis, list(zip(bounds[:-1], bounds[1:], strict=True)))

    def _split_item(self, fx_node, split: str) -> None:
        x, axis, ranges = self.splits[split]
        index = fx_node.args[1]
        if not isinstance(index, int):
            raise UnsupportedOpError(f"'{fx_node.name}' indexes a split with {index!r}; use an integer")
        lo, hi = ranges[index]
        self._emit(fx_node, fx_node.name, "slice", x, {"axis": axis, "start": int(lo), "stop": int(hi)})

    def _layernorm(self, fx_node, name: str, x: str, normalized: tuple, weight, bias, eps: float) -> None:
        n = self.shapes[x][-1] if self.shapes[x] else 0
        if tuple(int(d) for d in normalized) != (n,):
            raise UnsupportedOpError(
                f"'{name}' normalises over {tuple(normalized)}; only the last dimension ({n}) is supported"
            )
        gamma = _to_numpy(weight).reshape(-1) if weight is not None else np.ones(n, np.float32)
        beta = _to_numpy(bias).reshape(-1) if bias is not None else np.zeros(n, np.float32)
        self._emit(fx_node, name, "layernorm", x, {"eps": float(eps), "features": int(n)},
                   {"gamma": gamma, "beta": beta})

    def _param(self, arg, name: str, what: str):
        fx = self.torch.fx
        if isinstance(arg, fx.Node) and arg.op == "get_attr":
            return _fetch_attr(self.gm, str(arg.target))
        raise UnsupportedOpError(
            f"'{name}' (F.linear) takes its {what} from a computed value; the {what} must be a "
            "module parameter or buffer"
        )

    def _masked_mean(self, mm) -> None:
        """A masked mean pooling over the tokens (``torch_masked_mean.py``): one ``masked_mean`` node
        reading the pooled tensor and forward()'s second input."""
        name = mm.div.name
        x = self._input(mm.x, name)
        shape, tk = self.shapes[x], self.shapes[self.padding_input]
        if len(shape) != 2 or (shape[0],) != tuple(tk):
            raise UnsupportedOpError(f"'{name}' pools a tensor of per-sample shape {shape} with the mask "
                                     f"'{self.padding_input}' of {tuple(tk)}; aieflow pools [T, E] tokens with a "
                                     "[batch, T] mask over the same tokens", layer=name)
        self._emit(mm.div, name, "masked_mean", x)
        node = self.nodes[-1]
        self.nodes[-1] = Node(name=node.name, op=node.op, inputs=(x, self.padding_input), outputs=node.outputs)
        if self.shapes[name] != (shape[1],):  # pragma: no cover - the pattern sums the tokens away
            raise UnsupportedOpError(f"'{name}' pools to {self.shapes[name]}, not ({shape[1]},)", layer=name)

    def _reads_padding_as_mask(self, fx_node) -> bool:
        """Whether ``fx_node`` reads the run-time key padding mask (forward()'s second input) as the
        attention modules take it, or does not read it at all; any other use is refused (``_input``)."""
        if all(a.name != self.padding_input for a in fx_node.all_input_nodes):
            return True
        nn = self.torch.nn
        kinds = (nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerEncoder)
        return fx_node.op == "call_module" and isinstance(self.gm.get_submodule(str(fx_node.target)), kinds)

    # -- driver ---------------------------------------------------------------------------------

    def run(self) -> ImportedModel:
        outputs: list[str] = []
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) not in (1, 2):
            names = ", ".join(n.name for n in placeholders) or "none"
            raise UnsupportedOpError(
                f"{self.model_name}.forward takes {len(placeholders)} inputs ({names}); aieflow "
                "supports one input, or one input and a key padding mask (docs/attention.md)"
            )
        if len(placeholders) == 2:
            self.padding_input = placeholders[1].name  # read only as a key padding mask (torch_attention)
        pools = torch_masked_mean.find(self.torch, self.gm, self.padding_input)  # masked mean pooling
        absorbed = set().union(*(p.nodes for p in pools.values())) if pools else set()
        for fx_node in self.gm.graph.nodes:
            if fx_node in absorbed:
                continue  # part of a masked mean pooling, emitted at its division
            if fx_node.name in pools:
                self._masked_mean(pools[fx_node.name])
            elif fx_node.op == "placeholder" and fx_node.name == self.padding_input:
                self.shapes[fx_node.name] = self._per_sample(fx_node, fx_node.name)
            elif fx_node.op == "placeholder":
                self.input_name = fx_node.name
                self.shapes[fx_node.name] = self._per_sample(fx_node, fx_node.name)
            elif fx_node.op == "get_attr":
                continue  # read through _param by the node that uses it
            elif self.padding_input is not None and not self._reads_padding_as_mask(fx_node):
                self._input(next(a for a in fx_node.all_input_nodes if a.name == self.padding_input), fx_node.name)
            elif fx_node.op == "call_module":
                self._call_module(fx_node)
            elif fx_node.op == "call_function":
                self._call_function(fx_node)
            elif fx_node.op == "call_method":
                self._call_method(fx_node)
            elif fx_node.op == "output":
                result = fx_node.args[0]
                items = result if isinstance(result, tuple | list) else (result,)
                outputs = [self._input(r, "output") for r in items]
        for fx_node in self.gm.graph.nodes:
            if fx_node.op == "get_attr" and fx_node.name not in self.mask_attrs and any(
                u.op != "call_function" or u.target not in (self.F.linear, self.F.layer_norm) for u in fx_node.users
            ):
                users = ", ".join(u.name for u in fx_node.users)
                raise UnsupportedOpError(
                    f"parameter '{fx_node.target}' is used directly by {users}; only nn.Linear / "
                    "F.linear may read parameters"
                )
        nodes = sequence.simplify(self.nodes, outputs, self.unlifts, self.shapes)
        nodes = batchnorm.fold(nodes, self.shapes, outputs)
        nodes = attention.prepare(nodes, self.shapes, outputs)
        inputs: tuple[str, ...] = (self.input_name,)
        if self.padding_input is not None:
            if not any(self.padding_input in n.inputs for n in nodes):
                raise UnsupportedOpError(
                    f"{self.model_name}.forward's second input '{self.padding_input}' is not a key padding mask "
                    "(nn.MultiheadAttention key_padding_mask, an encoder's src_key_padding_mask) nor read by a masked "
                    "mean pooling over the tokens; aieflow takes a second model input only as that", hint="see docs/attention.md, 'Run-time key padding masks'")
            inputs = (self.input_name, self.padding_input)
        tensors = {t: Tensor(t, s) for t, s in self.shapes.items()}
        graph = Graph(
            nodes=tuple(nodes),
            tensors=tensors,
            inputs=inputs,
            outputs=tuple(outputs),
            name=self.model_name,
        )
        graph.validate()
        return ImportedModel(graph=graph, hints=QuantHints(), source="torch")
