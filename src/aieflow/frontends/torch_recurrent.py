"""``nn.GRU`` / ``nn.LSTM`` in the PyTorch frontend.

A recurrent module returns a tuple (output sequence, final state(s)); models then pick what they
use: ``out[:, -1]``, ``h[-1]``, ``h.squeeze(0)``, the whole sequence (``out.flatten(1)``), and for
``batch_first=False`` modules ``x.transpose(0, 1)`` on the way in and ``out[-1]`` or
``out.transpose(0, 1)`` on the way out.  Those values are tracked symbolically (:class:`Pending`)
and the IR nodes are emitted when a supported layer first reads one: reading the last step makes
the layer ``return_sequences=False``, reading the sequence makes it ``True``.  A module with
``num_layers=L`` becomes L nodes ``<path>_l0 .. <path>_l{L-1}`` that answer to ``<path>`` in the
config; PyTorch's gate orders are converted to the canonical ones (``ops/recurrent.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Node
from ..ops.recurrent import GATE_ORDERS, make_node, output_shape, reorder_gates

_ADVICE = (
    "use the last step (out[:, -1] / h[-1]) or the whole sequence of the last layer (e.g. "
    "out.flatten(1))"
)


@dataclass
class RnnModule:
    """One call of an nn.GRU / nn.LSTM and what the model has read from it."""

    path: str
    call: str  # fx node name of the call
    cell: str  # "gru" | "lstm"
    module: Any
    x: str  # IR tensor holding the batch-first input sequence
    seq_len: int
    mode: str | None = None  # "seq" | "last" once a layer reads it
    tensor: str = ""
    nodes: list[Node] = field(default_factory=list)


@dataclass(frozen=True)
class Pending:
    """A value derived from a recurrent call (or a time-major view) that is not an IR tensor yet.

    kind: tuple (the call's result), seq (output sequence; ``time_major`` as the module returns
    it), states / state_tuple / cell (final states), last (last step of the last layer),
    time_major_input (a batch-first IR tensor seen through ``transpose(0, 1)``).
    """

    kind: str
    rnn: RnnModule | None = None
    time_major: bool = False
    tensor: str = ""


def _is_all(s: Any) -> bool:
    return isinstance(s, slice) and s == slice(None)


def _last_index(i: Any, size: int) -> bool:
    return isinstance(i, int) and not isinstance(i, bool) and i in (-1, size - 1)


class RecurrentMixin:
    """The part of the torch converter that handles recurrent modules (see the module docstring)."""

    pending: dict[str, Pending]

    # -- entry points called by the converter -------------------------------------------------------

    def recurrent_module(self, fx_node, path: str, mod) -> None:
        nn = self.torch.nn
        cell = "gru" if isinstance(mod, nn.GRU) else "lstm"
        kind = type(mod).__name__
        if mod.bidirectional:
            raise UnsupportedOpError(
                f"module '{path}' ({kind}) is bidirectional; only forward recurrent layers are supported",
                hint="use bidirectional=False",
            )
        if getattr(mod, "proj_size", 0):
            raise UnsupportedOpError(f"module '{path}' (LSTM) has proj_size={mod.proj_size}; projections are not supported")
        if len(fx_node.args) != 1 or fx_node.kwargs:
            raise UnsupportedOpError(
                f"module '{path}' ({kind}) is called with an initial state; only the default zero "
                "initial state is supported",
                hint=f"call self.{path}(x) without h0",
            )
        arg = fx_node.args[0]
        x = self._rnn_input(arg, path, kind, mod.batch_first)
        shape = self.shapes[x]
        if len(shape) != 2 or shape[1] != mod.input_size:
            raise UnsupportedOpError(
                f"module '{path}' ({kind}) reads per-sample shape {shape}; it expects (sequence, "
                f"{mod.input_size})"
            )
        rnn = RnnModule(path, fx_node.name, cell, mod, x, shape[0])
        self.pending[fx_node.name] = Pending("tuple", rnn)

    def pending_getitem(self, fx_node) -> None:
        src = self.pending[fx_node.args[0].name]
        key = fx_node.args[1]
        rnn = src.rnn
        out: Pending | None = None
        if src.kind == "tuple" and key == 0:
            out = Pending("seq", rnn, time_major=not rnn.module.batch_first)
        elif src.kind == "tuple" and key == 1:
            out = Pending("states" if rnn.cell == "gru" else "state_tuple", rnn)
        elif src.kind == "state_tuple" and key in (0, 1):
            out = Pending("states" if key == 0 else "cell", rnn)
        elif src.kind == "states" and self._selects_last_layer(key, rnn.module.num_layers):
            out = Pending("last", rnn)
        elif src.kind == "cell":
            out = Pending("cell", rnn)
        elif src.kind == "seq" and self._selects_last_step(key, rnn.seq_len, src.time_major):
            out = Pending("last", rnn)
        if out is None:
            raise UnsupportedOpError(
                f"'{fx_node.name}' indexes the {self._describe(src)} with {key!r}; {_ADVICE}"
            )
        self.pending[fx_node.name] = out

    def pending_method(self, fx_node, method: str) -> bool:
        """Track a method on a pending value; False when it is an ordinary layer reading a value
        that becomes an IR tensor (the converter then handles it as usual)."""
        src = self.pending[fx_node.args[0].name]
        args = fx_node.args[1:]
        out: Pending | None = None
        if method == "contiguous":
            out = src
        elif method == "squeeze" and src.kind == "states" and src.rnn.module.num_layers == 1 and args in ((0,), (-3,)):
            out = Pending("last", src.rnn)
        elif src.kind == "seq" and src.time_major and self._swaps_first_two(method, args, 3):
            out = Pending("seq", src.rnn, time_major=False)
        if out is None:
            if src.kind == "last" or (src.kind == "seq" and not src.time_major):
                return False
            raise UnsupportedOpError(
                f"'{fx_node.name}' applies Tensor.{method}{tuple(args)!r} to the {self._describe(src)}; {_ADVICE}"
            )
        self.pending[fx_node.name] = out
        return True

    def maybe_time_major_view(self, fx_node, method: str, x: str) -> bool:
        """``x.transpose(0, 1)`` of a batch-first (B, T, F) tensor for a batch_first=False module."""
        if len(self.shapes[x]) == 2 and self._swaps_first_two(method, fx_node.args[1:], 3):
            self.pending[fx_node.name] = Pending("time_major_input", tensor=x)
            return True
        return False

    def materialise(self, fx_name: str, user: str) -> str:
        """The IR tensor for a pending value a supported layer reads (emitting the RNN nodes)."""
        p = self.pending[fx_name]
        if p.kind == "seq" and not p.time_major:
            return self._emit_rnn(p.rnn, "seq")
        if p.kind == "last":
            return self._emit_rnn(p.rnn, "last")
        raise UnsupportedOpError(f"'{user}' reads the {self._describe(p)}; {_ADVICE}")

    # -- helpers ------------------------------------------------------------------------------------

    def _rnn_input(self, arg, path: str, kind: str, batch_first: bool) -> str:
        if not isinstance(arg, self.torch.fx.Node):
            raise UnsupportedOpError(f"module '{path}' ({kind}) takes a non-tensor input {arg!r}")
        p = self.pending.get(arg.name)
        if batch_first:
            if p is not None:
                return self.materialise(arg.name, path)
            return self._input(arg, path)
        if p is not None and p.kind == "time_major_input":
            return p.tensor
        if p is not None and p.kind == "seq" and p.time_major:  # stacked time-major modules
            return self._emit_rnn(p.rnn, "seq")
        raise UnsupportedOpError(
            f"module '{path}' ({kind}, batch_first=False) reads '{arg.name}' as [sequence, batch, "
            "features]; aieflow keeps the batch in dimension 0 everywhere",
            hint="feed it x.transpose(0, 1) of a batch-first input, or use batch_first=True",
        )

    @staticmethod
    def _selects_last_layer(key: Any, layers: int) -> bool:
        if isinstance(key, tuple):
            return len(key) >= 1 and _last_index(key[0], layers) and all(_is_all(k) for k in key[1:])
        return _last_index(key, layers)

    @staticmethod
    def _selects_last_step(key: Any, steps: int, time_major: bool) -> bool:
        if time_major:
            return RecurrentMixin._selects_last_layer(key, steps)
        if not isinstance(key, tuple) or len(key) < 2:
            return False
        return _is_all(key[0]) and _last_index(key[1], steps) and all(_is_all(k) for k in key[2:])

    @staticmethod
    def _swaps_first_two(method: str, args: tuple, rank: int) -> bool:
        dims = tuple(a % rank if isinstance(a, int) else a for a in args)
        if method in ("transpose", "swapaxes", "swapdims"):
            return sorted(dims) == [0, 1]
        if method == "permute":
            perm = dims[0] if len(dims) == 1 and isinstance(dims[0], tuple | list) else dims
            return tuple(perm) == (1, 0, 2)
        return False

    @staticmethod
    def _describe(p: Pending) -> str:
        name = f"'{p.rnn.path}'" if p.rnn else ""
        return {
            "tuple": f"(output, state) tuple of {name}",
            "seq": f"time-major output sequence of {name} (sequence first)" if p.time_major else f"output sequence of {name}",
            "states": f"final hidden states of every layer of {name}",
            "state_tuple": f"(h, c) tuple of {name}",
            "cell": f"LSTM cell state of {name} (aieflow's LSTM outputs the hidden state only)",
            "last": f"last hidden state of {name}",
            "time_major_input": "time-major view (transpose(0, 1)) of a batch-first tensor",
        }[p.kind]

    def _emit_rnn(self, rnn: RnnModule, mode: str) -> str:
        if rnn.mode is not None:
            if rnn.mode != mode:
                raise UnsupportedOpError(
                    f"module '{rnn.path}' is read both as its whole output sequence and as its last "
                    "step; aieflow gives a recurrent layer one output",
                    hint="read one of them (the last step is out[:, -1] of the sequence)",
                )
            return rnn.tensor
        mod = rnn.module
        layers = mod.num_layers
        order = GATE_ORDERS["pytorch"][rnn.cell]
        x = rnn.x
        for k in range(layers):
            last = k == layers - 1
            name = self._unique(rnn.path if layers == 1 else f"{rnn.path}_l{k}")
            y = f"{rnn.call}_{mode}" if last else f"{rnn.call}_l{k}"

            def param(stem: str, k=k) -> np.ndarray | None:
                t = getattr(mod, f"{stem}_l{k}", None)
                return None if t is None else self._numpy(t)

            w_ih, w_hh = param("weight_ih"), param("weight_hh")
            gn = w_ih.shape[0]
            b_ih = param("bias_ih") if mod.bias else np.zeros(gn, np.float32)
            b_hh = param("bias_hh") if mod.bias else np.zeros(gn, np.float32)
            node = make_node(
                name,
                rnn.cell,
                x,
                y,
                seq_len=rnn.seq_len,
                weight=reorder_gates(w_ih, rnn.cell, order).T,
                recurrent_weight=reorder_gates(w_hh, rnn.cell, order).T,
                bias=reorder_gates(b_ih, rnn.cell, order),
                recurrent_bias=reorder_gates(b_hh, rnn.cell, order),
                return_sequences=(not last) or mode == "seq",
                reset_after=True,
                aliases=(rnn.path,) if layers > 1 else (),
            )
            self.nodes.append(node)
            self.shapes[y] = output_shape(node)
            x = y
        rnn.mode, rnn.tensor = mode, x
        return x

