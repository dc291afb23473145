"""ONNX ``GRU`` / ``LSTM`` and the data movement exporters put around them.

Exporters wrap a recurrent node in Transpose / Squeeze / Unsqueeze / Reshape / Slice / Gather
(``torch.onnx.export``: Transpose(x) -> GRU -> Squeeze -> Transpose -> Gather; the dynamo
exporter: Transpose -> GRU -> Transpose -> Reshape -> Transpose -> Gather; tf2onnx similar), and
compute the zero initial state from the input's shape (Shape / Gather / Concat / Expand /
ConstantOfShape).  Rather than matching each exporter's pattern, the importer tracks what every
movement op does to the *positions* of the elements:

* a data tensor that is not a plain IR tensor is a :class:`Moved`: for each of its elements (with
  a concrete batch), an id naming an element of an IR tensor (each IR tensor a reader reaches
  this way gets a range of ids: its batch-major flat positions plus an offset);
* a movement op is evaluated on that index array with ONNX's reference implementation
  (``onnx.reference``), so its exact semantics (negative indices, opset differences) come free;
* when an ordinary layer (or the graph output, or a recurrent node) reads a moved tensor, the
  index array must be the source in batch-major order (a reshape: an IR ``reshape`` node or
  nothing), or the last time step of a recurrent output (the node becomes
  ``return_sequences=False``); anything else is reported with the node's name.

Constant subgraphs (initial states, weights computed from initializers, shape arithmetic) are
folded by evaluating nodes whose inputs are all known with ``onnx.reference`` (:meth:`static`);
initial states, peepholes and sequence lengths must fold to zeros / the full length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..errors import ModelError, UnsupportedOpError
from ..ops.recurrent import GATE_ORDERS, gates, make_node, reorder_gates

MOVEMENT_OPS = ("Transpose", "Squeeze", "Unsqueeze", "Slice", "Gather", "Concat")
RECURRENT_OPS = ("GRU", "LSTM")
_DEFAULT_ACTIVATIONS = {"GRU": ("sigmoid", "tanh"), "LSTM": ("sigmoid", "tanh", "tanh")}
_READ_ADVICE = (
    "aieflow maps reshapes that keep the batch first and taking the last time step of a "
    "recurrent output (Y[-1], Y_h)"
)


@dataclass(frozen=True)
class Moved:
    """For each element of a tensor (batch ``B``), the id of the IR tensor element it holds."""

    index: np.ndarray
    producer: str  # node that produced it, for messages and names


@dataclass
class OnnxRnn:
    node_index: int  # position in the importer's node list
    name: str
    seq_len: int
    hidden: int
    mode: str | None = None  # "seq" | "last" once something reads it


def _decode(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class OnnxRecurrentMixin:
    """The part of the ONNX importer that handles recurrent nodes (see the module docstring)."""

    moved: dict[str, Moved]
    rnns: dict[str, OnnxRnn]  # IR output tensor -> recurrent node
    cells: dict[str, str]  # pseudo-source of an LSTM's Y_c -> node name
    id_bases: dict[str, int]  # IR tensor -> first id of its elements
    _id_spans: dict[str, int]  # IR tensor -> number of ids it owns
    _movement_batch: int | None

    # -- batch and static evaluation ----------------------------------------------------------------

    @property
    def movement_batch(self) -> int:
        """The concrete batch for id arrays: the model's, or a small prime that no input or
        initializer dimension uses (fixed at first use: every id array must agree on it)."""
        if self._movement_batch is None:
            if self.batch is not None:
                self._movement_batch = self.batch
            else:
                dims = {d for shape in self.shapes.values() for d in shape}
                dims |= {int(d) for init in self.g.initializer for d in init.dims}
                self._movement_batch = next(p for p in (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43) if p not in dims)
        return self._movement_batch

    def _run_node(self, node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One node through ``onnx.reference`` under the model's opsets."""
        # imported here: most models never need it, and it takes 20 ms to import
        from onnx.reference import ReferenceEvaluator

        vi = [helper.make_tensor_value_info(k, onnx.TensorProto.UNDEFINED, None) for k in feeds]
        outs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o]
        graph = helper.make_graph([node], "one", vi, outs)
        model = helper.make_model(graph, opset_imports=list(self.proto.opset_import))
        return ReferenceEvaluator(model).run(None, feeds)

    def static(self, t: str) -> np.ndarray | None:
        """Value of ``t`` if it does not depend on the data (with the movement batch), else None."""
        if not t:
            return None
        c = self._const(t)
        if c is not None:
            return np.asarray(c.value)
        if t in self._static_values:
            return self._static_values[t]
        self._static_values[t] = None  # guards cycles
        value = None
        if t in self._producer:
            node = self.g.node[self._producer[t]]
            try:
                value = self._static_node(node, t)
            except Exception:  # noqa: BLE001 - any evaluation failure means "not static"
                value = None
        self._static_values[t] = value
        return value

    def _static_node(self, node: onnx.NodeProto, t: str) -> np.ndarray | None:
        if node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Shape":
            full = self._full_shape(node.input[0])
            if full is None:
                return None
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            return np.array(full, dtype=np.int64)[attrs.get("start", 0) : attrs.get("end")]
        feeds = {}
        for i in node.input:
            if i:
                v = self.static(i)
                if v is None:
                    return None
                feeds[i] = v
        outs = self._run_node(node, feeds)
        for name, v in zip([o for o in node.output if o], outs, strict=False):
            self._static_values[name] = np.asarray(v)
        return self._static_values.get(t)

    def _full_shape(self, t: str) -> tuple[int, ...] | None:
        if t in self.moved:
            return tuple(self.moved[t].index.shape)
        c = self.canon(t)
        if c in self.shapes:
            return (self.movement_batch, *self.shapes[c])
        return None

    def _static_or_fail(self, t: str, name: str, op: str, what: str) -> np.ndarray:
        v = self.static(t)
        if v is None:
            raise UnsupportedOpError(
                f"node '{name}' ({op}) takes its {what} ('{t}') from the data; it must be a constant "
                "or computable from shapes"
            )
        return v

    # -- positions ------------------------------------------------------------------------------

    def _ids(self, source: str, shape: tuple[int, ...]) -> np.ndarray:
        """Element ids of a whole IR tensor (or pseudo-source) of per-sample ``shape``."""
        b = self.movement_batch
        size = b * int(np.prod(shape, dtype=np.int64))
        if source not in self.id_bases:
            self.id_bases[source] = max((base + self._id_spans[s] for s, base in self.id_bases.items()), default=0)
            self._id_spans[source] = size
        return self.id_bases[source] + np.arange(size, dtype=np.int64).reshape(b, *shape)

    def _source_of(self, ids: np.ndarray) -> tuple[str, np.ndarray] | None:
        """The one source all ``ids`` belong to, and the positions in it; None if they mix sources."""
        if ids.size == 0:
            return None
        lo, hi = int(ids.min()), int(ids.max())
        for s, base in self.id_bases.items():
            if base <= lo and hi < base + self._id_spans[s]:
                return s, ids - base
        return None

    def index_of(self, t: str, name: str, op: str) -> np.ndarray:
        """Element ids of a data tensor."""
        if t in self.moved:
            return self.moved[t].index
        c = self._data_input(t, name, op)
        return self._ids(c, self.shapes[c])

    def move(self, node: onnx.NodeProto, name: str) -> None:
        """A movement op on data tensors: apply it to the element ids."""
        data = node.input if node.op_type == "Concat" else node.input[:1]
        feeds = {t: self.index_of(t, name, node.op_type) for t in data if t}
        for k, t in enumerate(node.input):
            if t and t not in feeds:
                feeds[t] = self._static_or_fail(t, name, node.op_type, f"input {k}")
        try:
            out = self._run_node(node, feeds)[0]
        except Exception as exc:  # noqa: BLE001 - onnx.reference raises numpy's errors unchanged
            reason = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            shapes = ", ".join(f"{t} {list(np.shape(v))}" for t, v in feeds.items())
            raise UnsupportedOpError(
                f"node '{name}' ({node.op_type}) cannot be applied to its inputs ({shapes}, the data "
                f"tensors with a stand-in batch of {self.movement_batch}): {reason}",
                hint="a movement op that moves the batch axis (e.g. a Transpose before a Reshape) is not "
                "supported; keep the batch as dimension 0 and give Reshape -1 or the batch as its first entry",
            ) from None
        self.moved[node.output[0]] = Moved(np.asarray(out, dtype=np.int64), name)

    def materialise(self, t: str, user: str, op: str) -> str:
        """The IR tensor an ordinary reader of moved tensor ``t`` gets (see the module docstring)."""
        m = self.moved[t]
        b = self.movement_batch
        found = self._source_of(m.index)
        if found is None:
            raise UnsupportedOpError(
                f"node '{user}' ({op}) reads '{t}', which '{m.producer}' assembled from several "
                f"tensors; {_READ_ADVICE}"
            )
        source, idx = found
        if source in self.cells:
            raise UnsupportedOpError(
                f"node '{user}' ({op}) reads the cell state Y_c of LSTM '{self.cells[source]}'; "
                "aieflow's LSTM outputs the hidden state only",
                hint="use Y or Y_h",
            )
        rnn = self.rnns.get(source)
        shape = (rnn.seq_len, rnn.hidden) if rnn is not None else self.shapes[source]
        size = int(np.prod(shape, dtype=np.int64))
        flat = idx.reshape(b, -1) if idx.ndim >= 1 and idx.shape[0] == b else None
        if flat is not None and flat.shape[1] == size and np.array_equal(flat.reshape(-1), np.arange(b * size)):
            mode, ir_shape = "seq", shape
        elif rnn is not None and flat is not None and np.array_equal(flat, self._last_step(rnn)):
            mode, ir_shape = "last", (rnn.hidden,)
        else:
            what = f"the output of recurrent node '{rnn.name}'" if rnn else f"tensor '{source}'"
            raise UnsupportedOpError(
                f"node '{user}' ({op}) reads '{t}', which '{m.producer}' rearranged from {what} in a "
                f"way that mixes the batch with other dimensions or selects part of it; {_READ_ADVICE}"
            )
        if rnn is not None:
            self._use_rnn(source, mode)
        target = tuple(int(d) for d in idx.shape[1:])
        if target == tuple(ir_shape):
            return source
        self._emit(m.producer, "reshape", source, t, target, {"shape": target})
        del self.moved[t]
        return t

    def _last_step(self, rnn: OnnxRnn) -> np.ndarray:
        b, steps, n = self.movement_batch, rnn.seq_len, rnn.hidden
        return np.arange(b)[:, None] * steps * n + (steps - 1) * n + np.arange(n)[None, :]

    def _use_rnn(self, tensor: str, mode: str) -> None:
        """Fix what recurrent output ``tensor`` holds: all steps or (shape (n,)) the last."""
        rnn = self.rnns[tensor]
        if rnn.mode not in (None, mode):
            raise UnsupportedOpError(
                f"recurrent node '{rnn.name}' is read both as its whole output sequence and as its "
                "last step; aieflow gives a recurrent layer one output",
                hint="read one of them (the last step is also Y[-1] of the sequence)",
            )
        rnn.mode = mode
        if mode == "last":
            self.shapes[tensor] = (rnn.hidden,)

    def finish_recurrent(self) -> None:
        """Fix each recurrent node's output (all steps or the last) now that its readers are known."""
        for rnn in self.rnns.values():
            if rnn.mode == "last":
                node = self.nodes[rnn.node_index]
                self.nodes[rnn.node_index] = node.evolve(attrs=dict(node.attrs, return_sequences=False))

    # -- the recurrent node ---------------------------------------------------------------------------

    def recurrent(self, node: onnx.NodeProto, name: str) -> None:
        op = node.op_type
        cell = op.lower()
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self._check_recurrent_attrs(node, name, attrs)
        n = int(attrs["hidden_size"])
        g = gates(cell)
        layout = int(attrs.get("layout", 0))
        w = self._static_or_fail(node.input[1], name, op, "weights W")
        r = self._static_or_fail(node.input[2], name, op, "recurrence weights R")
        if w.ndim != 3 or w.shape[0] != 1 or w.shape[1] != g * n:
            raise ModelError(f"node '{name}' ({op}): W has shape {w.shape}, expected (1, {g * n}, input_size)")
        feats = int(w.shape[2])
        if r.shape != (1, g * n, n):
            raise ModelError(f"node '{name}' ({op}): R has shape {r.shape}, expected (1, {g * n}, {n})")
        bias = self._static_or_fail(node.input[3], name, op, "biases B") if len(node.input) > 3 and node.input[3] else np.zeros((1, 2 * g * n))
        if bias.shape != (1, 2 * g * n):
            raise ModelError(f"node '{name}' ({op}): B has shape {bias.shape}, expected (1, {2 * g * n})")
        x, steps = self._recurrent_input(node, name, layout, feats)
        self._check_zero_state(node, name, steps)
        order = GATE_ORDERS["onnx"][cell]
        y = self._fresh_tensor_name(f"{name}_h")
        ir = make_node(
            name,
            cell,
            x,
            y,
            seq_len=steps,
            weight=reorder_gates(w[0], cell, order).T,
            recurrent_weight=reorder_gates(r[0], cell, order).T,
            bias=reorder_gates(bias[0, : g * n], cell, order),
            recurrent_bias=reorder_gates(bias[0, g * n :], cell, order),
            return_sequences=True,  # finish_recurrent() decides
            reset_after=bool(attrs.get("linear_before_reset", 0)),
        )
        self.nodes.append(ir)
        self.shapes[y] = (steps, n)
        self.rnns[y] = OnnxRnn(len(self.nodes) - 1, name, steps, n)
        self._recurrent_outputs(node, name, y, layout, steps, n)

    def _check_recurrent_attrs(self, node: onnx.NodeProto, name: str, attrs: dict) -> None:
        op = node.op_type
        direction = _decode(attrs.get("direction", b"forward"))
        if direction != "forward":
            raise UnsupportedOpError(
                f"node '{name}' ({op}) has direction={direction}; only forward recurrent layers are supported",
                hint="export a unidirectional model (bidirectional=False / go_backwards=False)",
            )
        acts = tuple(_decode(a).lower() for a in attrs.get("activations", ())) or _DEFAULT_ACTIVATIONS[op]
        if acts != _DEFAULT_ACTIVATIONS[op]:
            raise UnsupportedOpError(
                f"node '{name}' ({op}) uses activations {list(acts)}; only the default "
                f"{list(_DEFAULT_ACTIVATIONS[op])} are supported"
            )
        for key in ("activation_alpha", "activation_beta", "clip"):
            if key in attrs:
                raise UnsupportedOpError(f"node '{name}' ({op}) sets attribute {key}; it is not supported")
        if attrs.get("input_forget", 0):
            raise UnsupportedOpError(f"node '{name}' (LSTM) couples the input and forget gates (input_forget=1); not supported")
        if "hidden_size" not in attrs:
            raise ModelError(f"node '{name}' ({op}) has no hidden_size attribute")

    def _recurrent_input(self, node: onnx.NodeProto, name: str, layout: int, feats: int) -> tuple[str, int]:
        """The batch-first IR tensor (per sample (T, F)) the node's X reads, and T."""
        op = node.op_type
        ids = self.index_of(node.input[0], name, op)
        found = self._source_of(ids)
        source, idx = found if found is not None else ("", ids)
        b = self.movement_batch
        if idx.ndim != 3 or idx.shape[2] != feats or idx.shape[1 - layout] != b:
            raise UnsupportedOpError(
                f"node '{name}' ({op}) reads X of shape {idx.shape} (with batch {b}); expected "
                f"{'[sequence, batch, ' if layout == 0 else '[batch, sequence, '}{feats}]"
            )
        steps = int(idx.shape[layout])
        expected = np.arange(b * steps * feats).reshape(b, steps, feats)
        if layout == 0:
            expected = expected.transpose(1, 0, 2)
        size = int(np.prod(self.shapes[source], dtype=np.int64)) if source else -1
        if source and source not in self.cells and size == steps * feats and not np.array_equal(idx, expected):
            # A channels-first sequence (a Conv1d's output, [batch, features, steps]) transposed into the
            # recurrent layer's layout: the IR reads it through an explicit transpose.
            channels_first = np.arange(b * feats * steps).reshape(b, feats, steps).transpose(0, 2, 1)
            if layout == 0:
                channels_first = channels_first.transpose(1, 0, 2)
            if np.array_equal(idx, channels_first):
                if tuple(self.shapes[source]) != (feats, steps):
                    view = self._fresh_tensor_name(f"{name}_channels")
                    self._emit(f"{name}_channels", "reshape", source, view, (feats, steps), {"shape": (feats, steps)})
                    source = view
                seq = self._fresh_tensor_name(f"{name}_x")
                self._emit(f"{name}_input", "transpose", source, seq, (steps, feats), {"perm": (1, 0)})
                return seq, steps
        if source in self.cells or size != steps * feats or not np.array_equal(idx, expected):
            batch_major = np.array_equal(idx.reshape(-1), np.arange(idx.size)) and layout == 0
            raise UnsupportedOpError(
                f"node '{name}' ({op}) reads X ('{node.input[0]}') "
                + (
                    "as [sequence, batch, features] straight from a batch-first tensor: the model's "
                    "input is time-major, and aieflow keeps the batch in dimension 0"
                    if batch_major
                    else "arranged in a way that is not a batch-first sequence of the data"
                ),
                hint="export with batch_first=True (PyTorch) or transpose the input inside the model",
            )
        if source in self.rnns:
            self._use_rnn(source, "seq")
        if tuple(self.shapes[source]) != (steps, feats):
            reshaped = self._fresh_tensor_name(f"{name}_x")
            self._emit(f"{name}_input", "reshape", source, reshaped, (steps, feats), {"shape": (steps, feats)})
            return reshaped, steps
        return source, steps

    def _check_zero_state(self, node: onnx.NodeProto, name: str, steps: int) -> None:
        op = node.op_type
        ins = list(node.input) + [""] * 8
        lens = ins[4]
        if lens:
            v = self._static_or_fail(lens, name, op, "sequence_lens")
            if np.any(np.asarray(v) != steps):
                raise UnsupportedOpError(f"node '{name}' ({op}) has sequence_lens {v}; every sequence must have all {steps} steps")
        for k, what in ((5, "initial_h"), (6, "initial_c"), (7, "peepholes P")):
            if op == "GRU" and k > 5:
                break
            if ins[k]:
                v = self._static_or_fail(ins[k], name, op, what)
                if np.any(np.asarray(v) != 0):
                    raise UnsupportedOpError(
                        f"node '{name}' ({op}) has a non-zero {what}; only a zero initial state and no "
                        "peepholes are supported"
                    )

    def _recurrent_outputs(self, node: onnx.NodeProto, name: str, y: str, layout: int, steps: int, n: int) -> None:
        seq = self._ids(y, (steps, n))  # ids of the IR output's elements (batch-first)
        outs = list(node.output) + ["", "", ""]
        if outs[0]:  # Y: (T, 1, B, n) or (B, T, 1, n)
            full = seq.transpose(1, 0, 2)[:, None] if layout == 0 else seq[:, :, None]
            self.moved[outs[0]] = Moved(full, name)
        if outs[1]:  # Y_h: (1, B, n) or (B, 1, n)
            last = seq[:, -1]
            self.moved[outs[1]] = Moved(last[None] if layout == 0 else last[:, None], name)
        if node.op_type == "LSTM" and outs[2]:
            cell = f"<cell state of {name}>"
            self.cells[cell] = name
            c = self._ids(cell, (n,))
            self.moved[outs[2]] = Moved(c[None] if layout == 0 else c[:, None], name)

    def _fresh_tensor_name(self, base: str) -> str:
        used = set(self.shapes) | {o for nd in self.g.node for o in nd.output} | {i.name for i in self.g.input}
        name, k = base, 1
        while name in used:
            name, k = f"{base}_{k}", k + 1
        return name
