"""hls4ml models in: ``aieflow.from_hls4ml(hls_model, device=..., config=...)``.

An hls4ml ``ModelGraph`` (what ``hls4ml.converters.convert_from_*`` returns) already holds what
aieflow's import and quantisation would otherwise decide: each layer's weights (float arrays, as
hls4ml holds them after its own optimisers) and each variable's precision.  This module reads both
and compiles them with aieflow's own pipeline: the layers become a float IR graph (Dense, ReLU),
the precisions become per-layer types of the config (``layers.<name>.input / weight / bias /
output``), under hls4ml's layer names.  Nothing is calibrated; every type is hls4ml's.

Mapped: ``Input``, ``Dense`` (checked against hls4ml's io_parallel and io_stream C simulations),
``Conv2D`` / ``Conv1D`` (as a 2-D convolution on the (C, 1, W) view) from hls4ml's channels-last pass (its ``Transpose`` layers identities in aieflow's
(C, H, W) graph, ``ZeroPadding2D`` the convolution's padding, a flattening ``Reshape`` a reshape with
the next Dense's rows put back into (C, H, W) order; a Keras model's channels-last image or
sequence input, which hls4ml leaves without a Transpose, stays the graph input behind an IR
``transpose`` view, and io_stream's ``ZeroPadding2D`` / ``1D`` on it the convolution's padding),
``GRU`` and ``LSTM`` converted from PyTorch, and ``GRU`` from Keras (forward, batch-first, tanh /
sigmoid, the framework's gate order as hls4ml keeps it; their weight, bias,
recurrent_weight, recurrent_bias, accum and result types and the sigmoid / tanh table's size and
``table_t`` become ``layers.<name>.*`` keys and ``activations``; checked against hls4ml's C
simulation) and ``Activation`` ``relu`` (fused into the Dense before it, whose result type it must
share) and ``linear`` (an identity when its type is its input's).  A Dense layer's ``accum_t`` must hold every
product and partial sum exactly (hls4ml's ``auto`` inference gives such a type): the AI Engine
accumulates exactly, so a narrower ``accum_t`` (which truncates or wraps in hls4ml) has no
equivalent.  Everything else is refused, naming the hls4ml layer and what to change.

hls4ml's C simulation reads weights from decimal text; ``config={"weights_rounding": "hls4ml"}``
reproduces that (``numerics.fixed.hls4ml_text_values``), see docs/hls4ml.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import ConfigError, ModelError
from ..ir import Graph, ImportedModel, Node, QuantHints, Tensor
from ..numerics.types import FixedType, parse_type
from ..ops import conv as conv_op
from ..ops.activations import FUNCTIONS as TABLE_FUNCTIONS
from ..ops.recurrent import GATE_ORDERS, make_node, output_shape, reorder_gates

# hls4ml precision classes whose C++ type is an ap_fixed (their rounding / overflow modes are
# aieflow's FixedType modes); integer, xnor, exponent and float types are refused by name
_FIXED_CLASSES = ("FixedPrecisionType",)
_HINT_PRECISION = "set it in the hls4ml config (LayerName.{layer}.Precision.{key}) to an ap_fixed<W,I[,Q[,O]]> type"


def _class_names(obj: Any) -> tuple[str, ...]:
    return tuple(c.__name__ for c in type(obj).__mro__)


def fixed_type(precision: Any, layer: str, key: str) -> FixedType:
    """hls4ml's precision object as aieflow's :class:`FixedType` (modes included), or a ModelError
    naming the layer and the precision key."""
    names = _class_names(precision)
    text = str(precision)
    if not any(n in names for n in _FIXED_CLASSES):
        what = ("an integer type: ap_int's conversion from a float weight truncates towards zero, which aieflow "
                "does not reproduce" if "IntegerPrecisionType" in names else f"a {type(precision).__name__}")
        raise ModelError(f"hls4ml precision '{key}' is {text} ({what}); aieflow maps ap_fixed / ap_ufixed types",
                         layer=layer, hint=_HINT_PRECISION.format(layer=layer, key=key)
                         + (" (ap_fixed<W,W> for integers)" if "IntegerPrecisionType" in names else ""))
    try:
        t = parse_type(text)
    except ConfigError as e:
        raise ModelError(f"hls4ml precision '{key}' {text}: {e.message}", layer=layer,
                         hint=_HINT_PRECISION.format(layer=layer, key=key)) from None
    if not isinstance(t, FixedType):  # pragma: no cover - parse_type of a fixed spelling
        raise ModelError(f"hls4ml precision '{key}' {text} is not fixed point", layer=layer)
    return t


def _output_type(layer: Any) -> FixedType:
    return fixed_type(layer.get_output_variable().type.precision, layer.name, "result")


def _input_layer(layer: Any, by_output: Mapping[str, Any]) -> Any:
    inputs = list(layer.inputs)
    if len(inputs) != 1 or inputs[0] not in by_output:
        raise ModelError(f"hls4ml layer reads {inputs}; from_hls4ml maps chains (each layer reading the one before)",
                         layer=layer.name)
    return by_output[inputs[0]]


def _types_entry(w_t, b_t, out_t, in_t=None) -> dict[str, str]:
    """A weighted layer's precision entry: its input type (the graph input's reader only), weight,
    output and, with a bias, the bias type."""
    entry = {"weight": w_t.to_string(), "output": out_t.to_string()}
    if in_t is not None:
        entry = {"input": in_t.to_string(), **entry}
    if b_t is not None:
        entry["bias"] = b_t.to_string()
    return entry


def _check_accum(layer: Any, in_t: FixedType, w_t: FixedType, b_t: FixedType | None, k: int) -> None:
    """``accum_t`` holds every product and partial sum exactly, as the AI Engine's accumulator does."""
    acc_p = layer.get_attr("accum_t")
    if acc_p is None:
        return
    acc = fixed_type(getattr(acc_p, "precision", acc_p), layer.name, "accum")
    frac = in_t.frac + w_t.frac
    fracs_ok = acc.frac >= frac and (b_t is None or acc.frac >= b_t.frac)
    # worst case over the types: k products at their largest magnitude plus the largest bias
    x_max = max(abs(in_t.min_code), in_t.max_code)
    w_max = max(abs(w_t.min_code), w_t.max_code)
    bound = k * x_max * w_max << max(0, acc.frac - frac)
    if b_t is not None:
        bound += max(abs(b_t.min_code), b_t.max_code) << max(0, acc.frac - b_t.frac)
    range_ok = bound <= acc.max_code and -bound >= acc.min_code
    if not (fracs_ok and range_ok):
        need_frac = max(frac, b_t.frac if b_t is not None else 0)
        need_int = (bound >> max(0, acc.frac - need_frac)).bit_length() + 1 - need_frac
        raise ModelError(
            f"accum_t {acc.to_string()} does not hold every product and partial sum exactly (input {in_t.to_string()} "
            f"x weight {w_t.to_string()} over {k} inputs, bias {b_t.to_string() if b_t else 'none'}); the AI Engine "
            "accumulates exactly, so hls4ml's rounding or wrapping of the sums has no equivalent",
            layer=layer.name,
            hint=f"set LayerName.{layer.name}.Precision.accum to 'auto' (or to a signed ap_fixed with at least "
            f"{need_frac} fractional and {need_int} integer bits) in the hls4ml config")


def _recurrent(layer: Any, x: str, x_shape: tuple[int, ...]) -> tuple[Node, dict[str, Any]]:
    """An hls4ml ``GRU`` / ``LSTM`` layer as aieflow's recurrent IR node and its config entry (types,
    tables), or a ModelError naming the attribute that has no mapping."""
    cell = layer.class_name.lower()
    name = layer.name

    def refuse(what: str, hint: str) -> ModelError:
        return ModelError(f"hls4ml {layer.class_name} with {what} has no mapping in from_hls4ml", layer=name, hint=hint)

    # hls4ml keeps the framework's gate order: PyTorch's (r, z, n / i, f, g, o) or Keras' (z, r, h / i, f, c, o)
    framework = "pytorch" if layer.get_attr("pytorch", False) else "keras"
    if framework == "keras" and cell == "lstm":
        raise refuse("weights in Keras' layout (a Keras / QKeras LSTM: not checked against hls4ml's C simulation)",
                     "convert the PyTorch model with hls4ml, or compile the Keras model's ONNX export (tf2onnx) with "
                     "aieflow.compile and the types as layers.<name>.* keys; a Keras GRU is mapped")
    checks = (("direction", "forward", "bidirectional layers"), ("time_major", False, "time-major input"),
              ("pass_initial_states", False, "initial states passed in"), ("return_state", False, "returned states"),
              ("activation", "tanh", None), ("recurrent_activation", "sigmoid", None))
    for attr, want, what in checks:
        got = layer.get_attr(attr, want)
        if (str(got).lower() if isinstance(want, str) else bool(got)) != want:
            raise refuse(what or f"{attr} '{got}'",
                         f"use a forward {layer.class_name} with tanh / sigmoid, batch-first input and no initial "
                         "state (nn.GRU / nn.LSTM defaults with batch_first=True, or Keras' GRU / LSTM defaults)")
    if len(x_shape) != 2:
        raise refuse(f"input of shape {x_shape}", "feed it a (sequence, features) input")
    if cell == "gru" and str(layer.get_attr("apply_reset_gate", "after")).lower() != "after":
        raise refuse("the reset gate applied before the product (reset_after=False)", "use reset_after=True")
    order = GATE_ORDERS[framework][cell]
    data = {}
    for key in ("weight", "recurrent_weight", "bias", "recurrent_bias"):
        v = layer.weights.get(key)
        if v is None or v.data is None:
            raise refuse(f"no {key}", "keep the layer's biases (bias=True)")
        data[key] = np.asarray(v.data, dtype=np.float64)
    node = make_node(name, cell, x, name, seq_len=int(x_shape[0]),
                     weight=reorder_gates(data["weight"], cell, order, axis=1),
                     recurrent_weight=reorder_gates(data["recurrent_weight"], cell, order, axis=1),
                     bias=reorder_gates(data["bias"].reshape(-1), cell, order),
                     recurrent_bias=reorder_gates(data["recurrent_bias"].reshape(-1), cell, order),
                     return_sequences=bool(layer.get_attr("return_sequences", False)), reset_after=True)
    entry: dict[str, Any] = {key: fixed_type(layer.weights[key].type.precision, name, key).to_string() for key in data}
    acc = layer.get_attr("accum_t")
    entry["accum"] = fixed_type(getattr(acc, "precision", acc), name, "accum").to_string()
    table_t = layer.get_attr("table_t")
    table = {"size": int(layer.get_attr("table_size", 1024)),
             "entry": fixed_type(getattr(table_t, "precision", table_t), name, "table").to_string()}
    entry["activations"] = {f: dict(table) for f in TABLE_FUNCTIONS}
    return node, entry


def import_hls4ml(hls_model: Any) -> tuple[ImportedModel, dict[str, dict[str, str]]]:
    """The float IR graph of ``hls_model`` and the per-layer types (config ``layers`` entries)."""
    if not hasattr(hls_model, "get_layers"):
        raise ConfigError(f"from_hls4ml takes an hls4ml ModelGraph (hls4ml.converters.convert_from_*), got "
                          f"{type(hls_model).__name__}")
    layers = list(hls_model.get_layers())
    by_output: dict[str, Any] = {}
    nodes: list[Node] = []
    tensors: dict[str, Tensor] = {}
    types: dict[str, dict[str, str]] = {}
    tensor_of: dict[str, str] = {}  # hls4ml layer name -> the IR tensor holding its output
    type_of: dict[str, FixedType] = {}  # hls4ml layer name -> its result type
    dense_of: dict[str, str] = {}  # IR tensor -> the Dense / Conv2D layer whose output (after fusion) it is
    # hls4ml's channels-last pass: layers whose (C, H, W) output hls4ml holds as (H, W, C), and flattened
    # IR tensors whose hls4ml flattening ran in (H, W, C) order (the Dense after it has its rows so)
    hwc: set[str] = set()
    flat_hwc: dict[str, tuple[int, int, int]] = {}
    pad_of: dict[str, tuple[int, ...]] = {}  # ZeroPadding1D / 2D layers (io_stream): the next convolution's padding
    input_hint: dict[str, FixedType] = {}  # the graph input's type where its first reader is a view
    graph_input = None
    for layer in layers:
        cls = layer.class_name
        for out in layer.outputs:
            by_output[out] = layer
        if cls == "Input":
            if graph_input is not None:
                raise ModelError("the hls4ml model has more than one input; aieflow supports one", layer=layer.name)
            shape = tuple(int(d) for d in layer.get_output_variable().shape)
            graph_input = layer.name
            tensors[layer.name] = Tensor(layer.name, shape)
            tensor_of[layer.name] = layer.name
            type_of[layer.name] = _output_type(layer)
            continue
        src = _input_layer(layer, by_output)
        x = tensor_of[src.name]
        in_t = type_of[src.name]
        out_t = _output_type(layer)
        if src.name in pad_of and cls not in ("Conv2D", "Conv1D"):
            raise ModelError(f"{src.class_name} '{src.name}' feeds a {cls}; from_hls4ml maps it as the padding of the "
                             "convolution after it", layer=layer.name, hint="pad in the convolution (padding=...)")
        if cls == "Dense":
            w = np.asarray(layer.weights["weight"].data)
            w_t = fixed_type(layer.weights["weight"].type.precision, layer.name, "weight")
            params = {"weight": w.reshape(w.shape[0], -1) if w.ndim != 2 else w}
            b_t = None
            if "bias" in layer.weights and layer.weights["bias"].data is not None:
                params["bias"] = np.asarray(layer.weights["bias"].data).reshape(-1)
                b_t = fixed_type(layer.weights["bias"].type.precision, layer.name, "bias")
            k, n = params["weight"].shape
            if x in flat_hwc and k == int(np.prod(flat_hwc[x])):  # rows in (H, W, C) order -> (C, H, W)
                c, h, wd = flat_hwc[x]
                params["weight"] = params["weight"][np.arange(c * h * wd).reshape(h, wd, c).transpose(2, 0, 1).reshape(-1)]
            features = int(np.prod(tensors[x].shape))
            if k != features:
                raise ModelError(
                    f"Dense weight has shape {w.shape} for an input of {features} features: hls4ml holds it as "
                    "(outputs, inputs)", layer=layer.name,
                    hint="hls4ml 1.3's PyTorch converter transposes Linear weights only in its channels-last pass; "
                    "transpose them in the ModelGraph (layer.get_weights('weight').data = data.T) as its C "
                    "simulation needs too")
            _check_accum(layer, in_t, w_t, b_t, k)
            nodes.append(Node(layer.name, "dense", (x,), (layer.name,),
                              attrs={"in_features": k, "out_features": n, "activation": None}, params=params))
            tensors[layer.name] = Tensor(layer.name, (n,))
            # later layers read the type the layer before writes
            types[layer.name] = _types_entry(w_t, b_t, out_t, in_t if x == graph_input else None)
            dense_of[layer.name] = layer.name
        elif cls == "Conv2D":
            c_in = int(layer.get_attr("n_chan"))
            pad = pad_of.get(src.name, (0, 0, 0, 0))  # io_stream: in_height / in_width count its padding
            in_hw = (int(layer.get_attr("in_height")) - pad[0] - pad[2], int(layer.get_attr("in_width")) - pad[1] - pad[3])
            if (x == graph_input and src.name not in hwc and c_in == 1
                    and tuple(tensors[x].shape) == (*in_hw, 1)):
                # one channel: hls4ml's channels-last pass leaves the input (H, W, 1) without a
                # Transpose (the same memory order as (1, H, W), which the IR takes)
                tensors[x] = Tensor(x, (1, *tensors[x].shape[:2]))
                hwc.add(src.name)
            elif (x == graph_input and src.name not in hwc and tuple(tensors[x].shape) == (*in_hw, c_in)
                    and str(layer.get_attr("data_format", "channels_last")) == "channels_last"):
                # an input hls4ml takes channels-last itself (a Keras model: no Transpose layer): the
                # graph input keeps (H, W, C), as Keras and hls4ml's predict take it, and an IR
                # transpose views it as (C, H, W) (the CNN mapping reads it as the host's frame order,
                # cnn/stages.input_views); the input type comes with the graph input
                view = f"{x}_chw"
                nodes.append(Node(view, "transpose", (x,), (view,), {"perm": (2, 0, 1)}))
                tensors[view] = Tensor(view, (c_in, *in_hw))
                input_hint[graph_input] = in_t
                x = view
                hwc.add(src.name)
            if src.name not in hwc:
                raise ModelError("Conv2D on an input hls4ml holds channels-first: from_hls4ml maps the layout of "
                                 "hls4ml's channels-last pass", layer=layer.name,
                                 hint="convert with channels_last_conversion='full' (config_from_pytorch_model's default)")
            w = np.asarray(layer.weights["weight"].data)  # (kh, kw, C, O)
            if int(layer.get_attr("dilation", 1) or 1) != 1 or w.ndim != 4:
                raise ModelError(f"Conv2D with dilation {layer.get_attr('dilation')} / weight shape {w.shape} has no "
                                 "mapping in from_hls4ml", layer=layer.name, hint="use an undilated, ungrouped Conv2d")
            w_t = fixed_type(layer.weights["weight"].type.precision, layer.name, "weight")
            bias, b_t = None, None
            if "bias" in layer.weights and layer.weights["bias"].data is not None:
                bias = np.asarray(layer.weights["bias"].data).reshape(-1)
                b_t = fixed_type(layer.weights["bias"].type.precision, layer.name, "bias")
            _check_accum(layer, in_t, w_t, b_t, int(w.shape[0] * w.shape[1] * w.shape[2]))
            node = conv_op.make_node(
                layer.name, x, layer.name, tensors[x].shape, w.transpose(3, 2, 0, 1), bias,
                stride=(int(layer.get_attr("stride_height")), int(layer.get_attr("stride_width"))),
                padding=tuple(int(layer.get_attr(f"pad_{side}")) + p for side, p in zip(
                    ("top", "left", "bottom", "right"), pad_of.get(src.name, (0, 0, 0, 0)), strict=True)))
            nodes.append(node)
            hh, ww, oo = (int(d) for d in layer.get_output_variable().shape)
            tensors[layer.name] = Tensor(layer.name, (oo, hh, ww))
            hwc.add(layer.name)
            types[layer.name] = _types_entry(w_t, b_t, out_t, in_t if x == graph_input else None)
            dense_of[layer.name] = layer.name
        elif cls == "Conv1D":
            # as aieflow runs a 1-D convolution: a 2-D one on the (C, 1, W) view of the sequence
            pad = pad_of.get(src.name, (0, 0, 0, 0))
            width = int(layer.get_attr("in_width")) - pad[1] - pad[3]  # io_stream: in_width counts its padding
            if (x == graph_input and src.name not in hwc and tuple(tensors[x].shape) == (width, int(layer.get_attr("n_chan")))
                    and str(layer.get_attr("data_format", "channels_last")) == "channels_last"):
                # a Keras sequence input (steps, channels), which hls4ml takes channels-last without a
                # Transpose: the graph input keeps it, an IR transpose views it as (C, W) (lifted to
                # (C, 1, W) below; cnn/stages.input_views: the host writes the frames in that order)
                view = f"{x}_cw"
                nodes.append(Node(view, "transpose", (x,), (view,), {"perm": (1, 0)}))
                tensors[view] = Tensor(view, tensors[x].shape[::-1])
                x = view
                hwc.add(src.name)
            if src.name not in hwc:
                raise ModelError("Conv1D on an input hls4ml holds channels-first: from_hls4ml maps the layout of "
                                 "hls4ml's channels-last pass", layer=layer.name,
                                 hint="convert with channels_last_conversion='full' (config_from_pytorch_model's default)")
            w = np.asarray(layer.weights["weight"].data)  # (k, C, O)
            if int(layer.get_attr("dilation", 1) or 1) != 1 or w.ndim != 3:
                raise ModelError(f"Conv1D with dilation {layer.get_attr('dilation')} / weight shape {w.shape} has no "
                                 "mapping in from_hls4ml", layer=layer.name, hint="use an undilated, ungrouped Conv1d")
            if len(tensors[x].shape) == 2:
                c, width = tensors[x].shape
                lifted = f"{layer.name}_as_image"
                nodes.append(Node(lifted, "reshape", (x,), (lifted,), {"shape": (c, 1, width)}))
                tensors[lifted] = Tensor(lifted, (c, 1, width))
                x = lifted
            w_t = fixed_type(layer.weights["weight"].type.precision, layer.name, "weight")
            bias, b_t = None, None
            if "bias" in layer.weights and layer.weights["bias"].data is not None:
                bias = np.asarray(layer.weights["bias"].data).reshape(-1)
                b_t = fixed_type(layer.weights["bias"].type.precision, layer.name, "bias")
            _check_accum(layer, in_t, w_t, b_t, int(w.shape[0] * w.shape[1]))
            node = conv_op.make_node(
                layer.name, x, layer.name, tensors[x].shape, w.transpose(2, 1, 0)[:, :, None, :], bias,
                stride=(1, int(layer.get_attr("stride_width"))),
                padding=(0, int(layer.get_attr("pad_left")) + pad[1], 0, int(layer.get_attr("pad_right")) + pad[3]))
            nodes.append(node)
            ww, oo = (int(d) for d in layer.get_output_variable().shape)
            tensors[layer.name] = Tensor(layer.name, (oo, 1, ww))
            hwc.add(layer.name)
            if tensor_of[src.name] == graph_input:  # read through a view: the input tensor's type
                input_hint[graph_input] = in_t
            types[layer.name] = _types_entry(w_t, b_t, out_t)
            dense_of[layer.name] = layer.name
        elif cls in ("ZeroPadding1D", "ZeroPadding2D") and (src.name in hwc or x == graph_input) and out_t == in_t:
            # hls4ml's io_stream convolution pads in a layer of its own: zeros (code 0, real 0), as the
            # convolution's own padding; the IR tensor stays the unpadded one.  On a Keras model's
            # graph input (channels-last, no Transpose) the convolution after it adds the input's view
            sides = ("left", "right") if cls == "ZeroPadding1D" else ("top", "left", "bottom", "right")
            got = [int(layer.get_attr(f"pad_{side}")) for side in sides]
            pad_of[layer.name] = (0, got[0], 0, got[1]) if cls == "ZeroPadding1D" else tuple(got)
            tensor_of[layer.name] = x
            type_of[layer.name] = in_t
            if src.name in hwc:
                hwc.add(layer.name)
            continue
        elif cls == "Transpose" and len(tensors[x].shape) in (2, 3):
            perm = [int(p) for p in layer.get_attr("perm")]
            to_last, to_first = ([1, 2, 0], [2, 0, 1]) if len(tensors[x].shape) == 3 and perm != [1, 0] else ([1, 0], [1, 0])
            if perm == to_last and src.name not in hwc or perm == to_first and src.name in hwc:
                # hls4ml's channels-last pass: the IR keeps (C, H, W), so an identity here
                tensor_of[layer.name] = x
                type_of[layer.name] = in_t if out_t == in_t else out_t
                if out_t != in_t:
                    raise ModelError(f"Transpose with result {out_t.to_string()} from {in_t.to_string()}",
                                     layer=layer.name, hint="give the Transpose its input's precision")
                if src.name not in hwc:
                    hwc.add(layer.name)
                continue
            raise ModelError(f"Transpose {perm} has no mapping in from_hls4ml (the channels-last pass's are mapped)",
                             layer=layer.name, hint="leave the layout to hls4ml's channels-last conversion")
        elif cls == "Reshape" and out_t == in_t and len(layer.get_output_variable().shape) == 1:
            n = int(layer.get_output_variable().shape[0])
            nodes.append(Node(layer.name, "reshape", (x,), (layer.name,), {"shape": (n,)}))
            tensors[layer.name] = Tensor(layer.name, (n,))
            if src.name in hwc:
                flat_hwc[layer.name] = tuple(tensors[x].shape)
        elif cls in ("GRU", "LSTM"):
            node, entry = _recurrent(layer, x, tensors[x].shape)
            nodes.append(node)
            tensors[layer.name] = Tensor(layer.name, output_shape(node))
            entry["output"] = out_t.to_string()
            types[layer.name] = {"input": in_t.to_string(), **entry} if x == graph_input else entry
        elif cls == "Activation" and str(layer.get_attr("activation")).lower() == "relu":
            if x not in dense_of or types[dense_of[x]]["output"] != out_t.to_string():
                raise ModelError(
                    f"ReLU with result {out_t.to_string()} after '{src.name}' ({in_t.to_string()}): aieflow runs a "
                    "ReLU in the Dense / Conv2D layer before it, whose one output type both must share",
                    layer=layer.name,
                    hint=f"give LayerName.{layer.name}.Precision.result the Dense layer's result type "
                    f"({in_t.to_string()}) in the hls4ml config" if x in dense_of else
                    "a ReLU is mapped after a Dense or Conv2D layer only")
            nodes.append(Node(layer.name, "relu", (x,), (layer.name,)))
            tensors[layer.name] = Tensor(layer.name, tensors[x].shape)
            dense_of[layer.name] = dense_of[x]
            if src.name in hwc:
                hwc.add(layer.name)
        elif cls == "Activation" and str(layer.get_attr("activation")).lower() == "linear" and out_t == in_t:
            tensor_of[layer.name] = x  # an identity: hls4ml casts to the same type
            type_of[layer.name] = in_t
            if x in dense_of:
                dense_of[layer.name] = dense_of[x]
            if src.name in hwc:
                hwc.add(layer.name)
            continue
        else:
            what = f"{cls} '{layer.get_attr('activation')}'" if cls == "Activation" else cls
            raise ModelError(
                f"hls4ml layer of class {what} has no mapping in from_hls4ml, which maps Input, Dense, Conv2D, GRU, "
                "LSTM, ReLU, flattening Reshape and channels-last Transpose (and linear activations of their input's "
                "type)",
                layer=layer.name,
                hint="compile the PyTorch / ONNX model with aieflow.compile (its types written as layers.<name>.* "
                "in the config) for the layers aieflow maps there")
        tensor_of[layer.name] = layer.name
        type_of[layer.name] = out_t
    if graph_input is None or not nodes:
        raise ModelError("the hls4ml model has no Input layer or no Dense / GRU / LSTM layer to compile")
    last = layers[-1].name
    if last in hwc:
        raise ModelError("the model's output is an image or sequence hls4ml holds channels-last, which aieflow's "
                         "graph holds channels-first", layer=last,
                         hint="end the model with a Flatten and a Linear layer after the convolutions")

    graph = Graph(tuple(nodes), tensors, (graph_input,), (tensor_of[last],), name=str(getattr(
        getattr(hls_model, "config", None), "get_project_name", lambda: "hls4ml_model")()))
    graph.validate()
    return ImportedModel(graph, QuantHints(tensors=input_hint), source="hls4ml"), types


def from_hls4ml(
    hls_model: Any,
    device: str = "vek280",
    config: Mapping[str, Any] | None = None,
    example_input: Any = None,
    progress: Callable[[str], None] | None = None,
):
    """Compile an hls4ml ``ModelGraph`` with its weights and per-layer precisions.

    ``config`` takes aieflow's keys (``target``, ``batch``, ``layers.<name>.parallelism``,
    ``weights_rounding: hls4ml`` ...); the types come from ``hls_model`` and a config type for the
    same layer and key is refused.  ``example_input`` (float samples) fills the project's PLIO data.
    """
    from ..api import compile as compile_model  # noqa: A004

    if config is not None and not isinstance(config, Mapping):
        raise ConfigError(f"from_hls4ml: config must be a mapping of aieflow keys, got {type(config).__name__}")
    imported, types = import_hls4ml(hls_model)
    raw = dict(config or {})
    if str(raw.get("precision") or "int16").lower() in ("fp32", "bf16", "float32", "bfloat16"):
        raise ConfigError(f"from_hls4ml: precision {raw['precision']} would replace the hls4ml model's fixed-point "
                          "types", hint="leave precision out; the types are the hls4ml model's")
    raw.setdefault("precision", "int16")
    layers = {str(k): dict(v or {}) for k, v in (raw.get("layers") or {}).items()}
    for name, entry in types.items():
        mine = layers.setdefault(name, {})
        clash = sorted(k for k in entry if k in mine)
        if clash:
            raise ConfigError(f"layers.{name}: {', '.join(clash)} given in the config and by the hls4ml model",
                              layer=name, hint=f"change LayerName.{name}.Precision in the hls4ml config instead")
        mine.update(entry)
    raw["layers"] = layers
    return compile_model(imported, device=device, example_input=example_input, config=raw, progress=progress)
