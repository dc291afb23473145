"""ONNX frontend: an ONNX ``ModelProto`` (float or QDQ) to the aieflow float IR.

What is mapped (shapes in the IR exclude the batch dimension):

* ``Gemm`` (``transA=0``; ``transB``, ``alpha`` and ``beta`` folded into the parameters) and
  ``MatMul`` with a constant right operand -> ``dense``;
* ``Add`` of a constant -> ``bias_add`` (a later pass fuses it into the preceding ``dense``);
* ``Relu`` -> ``relu``; ``Flatten`` (``axis=1``) and ``Reshape`` that keeps the batch -> ``reshape``;
* ``Identity`` and inference ``Dropout`` disappear (their output is renamed to their input);
* ``QuantizeLinear`` / ``DequantizeLinear`` with per-tensor power-of-two scales and zero point 0
  become :class:`~aieflow.ir.QuantHints`: an activation Q->DQ pair is removed and its type recorded
  on the tensor; a constant through DQ (or Q->DQ) is folded to its exact float value and its type
  recorded for the parameter it becomes.

Constant subgraphs (``Constant``, ``Identity``, ``Transpose``, Q/DQ of constants) are folded, and
nodes that only compute a ``Reshape`` target shape at run time (``Shape``/``Gather``/``Concat``...)
are dropped when ONNX shape inference can resolve that shape.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import ConfigError, ModelError, UnsupportedOpError
from ..ir import Graph, ImportedModel, Node, QuantHints, Tensor, frozen_map
from ..numerics.types import AffineType, FixedType, Rounding, Saturation
from . import attention, batchnorm, onnx_masked_mean, patches, qonnx_channels_last, sequence
from .channels_last import OnnxChannelsLastMixin, permuted_rows
from .onnx_activation import ACTIVATION_OPS, OnnxActivationMixin, rewrite_patterns
from .onnx_conv import CONV_OPS, OnnxConvMixin
from .onnx_mask import OnnxMaskMixin
from .onnx_quant import QONNX_DOMAINS, QONNX_OPS, OnnxQuantMixin
from .onnx_recurrent import MOVEMENT_OPS, RECURRENT_OPS, Moved, OnnxRecurrentMixin

SUPPORTED_ONNX_OPS: tuple[str, ...] = (
    "Gemm",
    "MatMul",
    "Add",
    "Relu",
    "Flatten",
    "Reshape",
    "Identity",
    "Dropout",
    "Constant",
    "QuantizeLinear",
    "DequantizeLinear",
    "GRU",
    "LSTM",
    "Transpose / Squeeze / Unsqueeze / Slice / Gather (data movement that keeps the batch first, or takes a recurrent layer's last step)",
    "Add of two computed tensors (residual add)",
    "Concat / Split / Transpose of computed tensors (feature concat, split, transpose of the per-sample axes)",
    "MatMul with a constant on [rows, features] per sample (token / channel mixing)",
    "MatMul of two computed tensors (attention: Q K^T, A V; batched over heads)",
    "Mul / Div of a float model's tensor by a scalar constant, folded into the Gemm / MatMul before it (attention's 1 / sqrt(d))",
    "LayerNormalization (last axis)",
    "QONNX Quant / BipolarQuant / Trunc (power-of-two scales, zero point 0)",
    "Clip of QuantizeLinear codes (QCDQ narrow range); Mul / Div by a power of two (folded)",
    *CONV_OPS,
    *ACTIVATION_OPS,
)

# Domains whose QuantizeLinear / DequantizeLinear have the standard semantics.
_QDQ_DOMAINS = ("", "ai.onnx", "com.microsoft")
_FOLDABLE = ("Constant", "Identity", "Transpose", "Reshape", "QuantizeLinear", "DequantizeLinear", "Clip", "Mul",
             "Div", *QONNX_OPS, *patches.ONNX_CONSTANT_OPS)

# ONNX integer element types usable as quantised codes: (width, signed).
_ONNX_INT_BITS: dict[int, tuple[int, bool]] = {
    onnx.TensorProto.INT4: (4, True),
    onnx.TensorProto.UINT4: (4, False),
    onnx.TensorProto.INT8: (8, True),
    onnx.TensorProto.UINT8: (8, False),
    onnx.TensorProto.INT16: (16, True),
    onnx.TensorProto.UINT16: (16, False),
    onnx.TensorProto.INT32: (32, True),
    onnx.TensorProto.UINT32: (32, False),
}
_NUMPY_INT_BITS: dict[str, tuple[int, bool]] = {
    "int4": (4, True),
    "uint4": (4, False),
    "int8": (8, True),
    "uint8": (8, False),
    "int16": (16, True),
    "uint16": (16, False),
    "int32": (32, True),
    "uint32": (32, False),
}
_FLOAT_INPUT_TYPES = (
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.DOUBLE,
)

_QUANT_ADVICE = (
    "aieflow supports only power-of-two, per-tensor, symmetric quantisation (zero point 0); "
    "re-export the model with a symmetric per-tensor quantiser whose scales are powers of two"
)


@dataclass(frozen=True)
class _Const:
    """A folded constant.

    ``codes`` is (width, signed) when ``value`` holds integer quantisation codes; ``qtype`` is the
    fixed-point type when ``value`` is a float that is exactly representable in it (DQ output).
    """

    value: np.ndarray
    codes: tuple[int, bool] | None = None
    qtype: FixedType | None = None
    origin: str | None = None  # the node that quantised it (QONNX), for messages
    # A DequantizeLinear with float (or per-axis) scales or zero points: its integer codes, the
    # affine type, the per-channel axis of ``acodes`` (None: per tensor) and the zero points.
    affine: AffineType | None = None
    acodes: np.ndarray | None = None
    axis: int | None = None
    azp: np.ndarray | None = None


@dataclass(frozen=True)
class _PendingQ:
    """An activation QuantizeLinear waiting for its DequantizeLinear."""

    node: str
    source: str  # canonical name of the float tensor being quantised
    qtype: FixedType | AffineType
    zero_dtype: tuple[int, bool]


# --------------------------------------------------------------------------------------- loading


def _load(model: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    if isinstance(model, onnx.ModelProto):
        label = "<ModelProto>"
        if _missing_qonnx_opsets(model):
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            model = copy
            _add_qonnx_opsets(model)
        try:
            onnx.checker.check_model(model)
        except Exception as exc:  # noqa: BLE001 - any checker failure is a model error
            raise ModelError(f"cannot read ONNX model '{label}': {_first_line(exc)}") from None
        if qonnx_channels_last.uses_channels_last(model):  # unwrapped on a copy: the caller's model is not changed
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            model = copy
            qonnx_channels_last.unwrap(model)
        return model, label
    if not isinstance(model, str | os.PathLike):
        raise ConfigError(
            f"import_onnx expects a path to a .onnx file or an onnx.ModelProto, got {type(model).__name__}"
        )
    path = os.fspath(model)
    if not os.path.isfile(path):
        raise ModelError(f"cannot read ONNX model '{path}': no such file")
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises several unrelated types
        raise ModelError(
            f"cannot read ONNX model '{path}': {_first_line(exc)}",
            hint="the file is not a valid ONNX protobuf; re-export it",
        ) from None
    _load_external_data(proto, path)
    try:
        if _missing_qonnx_opsets(proto):
            _add_qonnx_opsets(proto)  # the checker needs them; the file is not changed
            onnx.checker.check_model(proto)
        else:
            # The path form also copes with models over 2 GB and external data.
            onnx.checker.check_model(path)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"cannot read ONNX model '{path}': {_first_line(exc)}") from None
    if qonnx_channels_last.uses_channels_last(proto):
        qonnx_channels_last.unwrap(proto)
    return proto, path


MAX_EXTERNAL_DATA_ENV = "AIEFLOW_MAX_EXTERNAL_DATA"
DEFAULT_MAX_EXTERNAL_DATA = 4 << 30  # bytes of external tensor data one model may read


def max_external_data() -> int:
    """The limit on a model's external tensor data in bytes: ``$AIEFLOW_MAX_EXTERNAL_DATA`` or 4 GiB."""
    raw = os.environ.get(MAX_EXTERNAL_DATA_ENV)
    if raw is None:
        return DEFAULT_MAX_EXTERNAL_DATA
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{MAX_EXTERNAL_DATA_ENV}={raw!r} is not a number of bytes", hint="e.g. 8589934592 for 8 GiB")
    return value


def _load_external_data(proto: onnx.ModelProto, path: str) -> None:
    """Read the tensors stored outside the .onnx file, after checking every one against its shape
    and dtype (a tensor's declared length must be its size; the file must hold it) and the total
    against :func:`max_external_data`, so a small model cannot make aieflow read gigabytes."""
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

    base = os.path.dirname(os.path.abspath(path))
    total, limit = 0, max_external_data()
    for tensor in _get_all_tensors(proto):
        if not uses_external_data(tensor):
            continue
        info = ExternalDataInfo(tensor)
        where = f"ONNX model '{path}', tensor '{tensor.name}'"
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        except Exception:  # noqa: BLE001 - unknown or packed (4-bit) element types
            raise ModelError(f"{where}: external data of element type {tensor.data_type} is not supported") from None
        shape = [int(d) for d in tensor.dims]
        if any(d < 0 for d in shape):
            raise ModelError(f"{where}: negative dimension in shape {shape}")
        need = math.prod(shape) * itemsize
        if info.length is not None and int(info.length) != need:
            raise ModelError(
                f"{where}: external data length {int(info.length):,} bytes does not match its shape {shape} "
                f"({need:,} bytes of {onnx.TensorProto.DataType.Name(tensor.data_type)})",
                hint="the model and its data file do not belong together; re-export the model",
            )
        total += need
        if total > limit:
            raise ModelError(
                f"{where}: the model's external data exceeds {limit:,} bytes ({total:,} bytes so far)",
                hint=f"set {MAX_EXTERNAL_DATA_ENV} to a larger number of bytes if you trust this model",
            )
        file = os.path.join(base, info.location)
        offset = int(info.offset or 0)
        try:
            size = os.path.getsize(file)
        except OSError as e:
            raise ModelError(f"{where}: cannot read its external data file '{info.location}': {e.strerror}") from None
        if size < offset + need:
            raise ModelError(
                f"{where}: external data file '{info.location}' holds {max(0, size - offset):,} bytes from "
                f"offset {offset:,}, the tensor (shape {shape}) needs {need:,}",
                hint="the data file is truncated or belongs to another model; re-export the model",
            )
        if info.length is None:  # read exactly the tensor, not the rest of the file
            tensor.external_data.add(key="length", value=str(need))
    try:
        onnx.external_data_helper.load_external_data_for_model(proto, base)
    except Exception as exc:  # noqa: BLE001 - onnx refuses unsafe locations with several types
        raise ModelError(f"cannot read the external data of ONNX model '{path}': {_first_line(exc)}") from None


def module_path(node: onnx.NodeProto) -> str | None:
    """The PyTorch module an exported node came from (``fc1``, ``blk.0``), or None: read from the
    dynamo exporter's ``namespace`` metadata (``": M/fc1: Linear/linear: aten.linear"``, the module
    segments carrying full paths) or the TorchScript exporter's scoped name (``/blk/blk.0/Gemm``, a
    segment repeating its parent's path or adding one name to it).  A module path is a config key
    for the layer, so a config written for a torch module also fits its ONNX export."""
    meta = {m.key: m.value for m in node.metadata_props}
    if "namespace" in meta:
        parts = [seg.split(":", 1)[0].strip() for seg in meta["namespace"].split("/")]
        modules = [p for p in parts[1:-1] if p]
        return modules[-1] if modules else None
    if node.name.startswith("/") and node.name.count("/") >= 2:
        path = ""
        for seg in node.name.split("/")[1:-1]:
            if not seg:
                return None
            path = seg if not path or seg.startswith(path + ".") else f"{path}.{seg}"
        return path
    return None


def module_paths(proto: onnx.ModelProto) -> dict[str, str]:
    """:func:`module_path` of every named node that has one (node name -> module path)."""
    return {n.name: p for n in proto.graph.node if n.name and (p := module_path(n)) is not None}


def _with_module_aliases(nodes: list[Node], paths: dict[str, str]) -> list[Node]:
    """Each layer answers to the module path of the ONNX node it came from as well (an alias), unless
    that is another layer's name."""
    names = {n.name for n in nodes}
    out = []
    for n in nodes:
        path = paths.get(n.name)
        if path and path not in names and path not in n.aliases:
            n = n.evolve(aliases=(path, *n.aliases))
        out.append(n)
    return out


def _missing_qonnx_opsets(proto: onnx.ModelProto) -> set[str]:
    """QONNX custom domains the graph uses without an opset import (qonnx's own tools and older
    exporters write such models; the ONNX checker refuses them)."""
    imported = {o.domain for o in proto.opset_import}
    custom = (*QONNX_DOMAINS, qonnx_channels_last.DOMAIN)
    return {n.domain for n in proto.graph.node if n.domain in custom} - imported


def _add_qonnx_opsets(proto: onnx.ModelProto) -> None:
    for domain in sorted(_missing_qonnx_opsets(proto)):
        proto.opset_import.append(onnx.helper.make_opsetid(domain, 1))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[0] if len(lines) == 1 else " ".join(ln.strip() for ln in lines[:3])


# --------------------------------------------------------------------------------------- helpers


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _code_bits(arr: np.ndarray, elem_type: int | None = None) -> tuple[int, bool] | None:
    if elem_type is not None and elem_type in _ONNX_INT_BITS:
        return _ONNX_INT_BITS[elem_type]
    return _NUMPY_INT_BITS.get(str(arr.dtype))


def _constant_node_value(node: onnx.NodeProto, name: str) -> _Const:
    attrs = {a.name: a for a in node.attribute}
    if "value" in attrs:
        tensor = attrs["value"].t
        arr = numpy_helper.to_array(tensor)
        return _Const(arr, _code_bits(arr, tensor.data_type))
    if "value_float" in attrs:
        return _Const(np.array(attrs["value_float"].f, dtype=np.float32))
    if "value_floats" in attrs:
        return _Const(np.array(list(attrs["value_floats"].floats), dtype=np.float32))
    if "value_int" in attrs:
        return _Const(np.array(attrs["value_int"].i, dtype=np.int64))
    if "value_ints" in attrs:
        return _Const(np.array(list(attrs["value_ints"].ints), dtype=np.int64))
    which = ", ".join(attrs) or "none"
    raise UnsupportedOpError(
        f"Constant node '{name}' uses attribute(s) {which}; only value, value_float(s) and "
        "value_int(s) are supported"
    )


def _pow2_frac(node_name: str, op: str, scale: np.ndarray) -> int:
    """``frac`` such that ``scale == 2**-frac``, or a clear error."""
    if scale.size != 1:
        raise UnsupportedOpError(
            f"node '{node_name}' ({op}) uses a per-axis scale with {scale.size} values; {_QUANT_ADVICE}"
        )
    s = float(np.asarray(scale, dtype=np.float64).reshape(-1)[0])
    if not (math.isfinite(s) and s > 0):
        raise UnsupportedOpError(f"node '{node_name}' ({op}) has scale {s!r}; {_QUANT_ADVICE}")
    mantissa, exponent = math.frexp(s)
    if mantissa != 0.5:
        raise UnsupportedOpError(
            f"node '{node_name}' ({op}) has scale {s!r}, which is not a power of two; {_QUANT_ADVICE}"
        )
    return -(exponent - 1)


def _is_pow2_symmetric(scale: np.ndarray, zp: _Const | None) -> bool:
    """A per-tensor power-of-two scale with zero point 0: a fixed-point type, taken exactly."""
    if scale.size != 1:
        return False
    s = float(np.asarray(scale, dtype=np.float64).reshape(-1)[0])
    if not (math.isfinite(s) and s > 0) or math.frexp(s)[0] != 0.5:
        return False
    return zp is None or not np.any(np.asarray(zp.value, dtype=np.float64) != 0)


def _activation_qtype(node_name: str, op: str, scale: np.ndarray, zp: _Const | None,
                      bits: tuple[int, bool]) -> FixedType | AffineType:
    """An activation's type: fixed point for a power-of-two scale and zero point 0, else affine
    (float scale, zero point: onnxruntime ``quantize_static``), per tensor only."""
    if _is_pow2_symmetric(scale, zp):
        return _fixed(bits, _pow2_frac(node_name, op, scale))
    if scale.size != 1 or (zp is not None and zp.value.size != 1):
        raise UnsupportedOpError(
            f"node '{node_name}' ({op}) quantises an activation per axis; aieflow takes per-tensor activation "
            "scales (per-channel scales on weights only)",
            hint="quantise activations per tensor (onnxruntime quantize_static does by default)")
    s = float(np.asarray(scale, dtype=np.float32).reshape(-1)[0])
    if not (math.isfinite(s) and s > 0):
        raise UnsupportedOpError(f"node '{node_name}' ({op}) has scale {s!r}; scales must be positive")
    if bits[0] not in (8, 16):
        raise UnsupportedOpError(
            f"node '{node_name}' ({op}) quantises an activation to {bits[0]} bits with a float scale; the AI "
            "Engine's activations are 8 or 16 bits", hint="quantise activations to (u)int8 or (u)int16")
    z = int(np.asarray(zp.value).reshape(-1)[0]) if zp is not None else 0
    try:
        return AffineType(bits[0], bits[1], (s,), z)
    except ConfigError as e:
        raise UnsupportedOpError(f"node '{node_name}' ({op}): {e.message}") from None


def _check_zero_point(node_name: str, op: str, zp: _Const | None) -> None:
    if zp is None:
        return
    if zp.value.size != 1:
        raise UnsupportedOpError(
            f"node '{node_name}' ({op}) uses a per-axis zero point; {_QUANT_ADVICE}"
        )
    if np.any(np.asarray(zp.value, dtype=np.float64) != 0):
        value = np.asarray(zp.value, dtype=np.float64).reshape(-1)[0]
        raise UnsupportedOpError(
            f"node '{node_name}' ({op}) has zero point {value:g}; {_QUANT_ADVICE}"
        )


def _check_qdq_attrs(node: onnx.NodeProto, name: str) -> dict:
    attrs = _attrs(node)
    if attrs.get("block_size", 0):
        raise UnsupportedOpError(
            f"node '{name}' ({node.op_type}) uses blocked quantisation (block_size="
            f"{attrs['block_size']}); {_QUANT_ADVICE}"
        )
    if node.op_type == "QuantizeLinear" and attrs.get("saturate", 1) != 1:
        raise UnsupportedOpError(
            f"node '{name}' (QuantizeLinear) has attribute saturate={attrs['saturate']}; only "
            "saturating quantisation is supported"
        )
    return attrs


def _q_output_bits(
    node: onnx.NodeProto, name: str, zp: _Const | None, attrs: dict
) -> tuple[int, bool]:
    """Element type a QuantizeLinear produces: from its zero point, output_dtype, or uint8."""
    if zp is not None:
        bits = zp.codes or _code_bits(zp.value)
    elif attrs.get("output_dtype", 0):
        bits = _ONNX_INT_BITS.get(attrs["output_dtype"])
    else:
        bits = (8, False)  # the ONNX default when y_zero_point is absent
    if bits is None:
        raise UnsupportedOpError(
            f"node '{name}' (QuantizeLinear) quantises to a non-integer type; only integer "
            "(int4/int8/int16/int32 and unsigned) quantisation is supported"
        )
    return bits


def _fixed(bits: tuple[int, bool], frac: int) -> FixedType:
    return FixedType(bits[0], frac, bits[1], Rounding.CONV_EVEN, Saturation.SATURATE)


def _exact_param(value: np.ndarray) -> np.ndarray:
    """float32 when that holds ``value`` exactly, float64 otherwise (e.g. 32-bit bias codes)."""
    as64 = np.asarray(value, dtype=np.float64)
    as32 = as64.astype(np.float32)
    if np.array_equal(as32.astype(np.float64), as64):
        return np.ascontiguousarray(as32)
    return np.ascontiguousarray(as64)


def _float_param(c: _Const) -> np.ndarray:
    if c.qtype is not None:
        return _exact_param(c.value)
    return np.ascontiguousarray(np.asarray(c.value, dtype=np.float32))


def _scale_qtype(qtype: FixedType | None, factor: float, node: str, attr: str) -> FixedType | None:
    """The type of ``factor * v`` for ``v`` of type ``qtype``: exact only for positive powers of two."""
    if qtype is None or factor == 1.0:
        return qtype
    mantissa, exponent = math.frexp(factor)
    if factor <= 0 or mantissa != 0.5:
        raise UnsupportedOpError(
            f"node '{node}' (Gemm) has {attr}={factor!r} applied to a quantised operand; only a "
            f"positive power of two can be folded exactly. Re-export with {attr}=1"
        )
    return FixedType(
        qtype.width, qtype.frac - (exponent - 1), qtype.signed, qtype.rounding, qtype.saturation
    )


def _prod(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


# ------------------------------------------------------------------------------------- importer


class _OnnxImporter(OnnxMaskMixin, OnnxRecurrentMixin, OnnxConvMixin, OnnxActivationMixin, OnnxQuantMixin, OnnxChannelsLastMixin):
    def __init__(
        self, proto: onnx.ModelProto, label: str, example_input_shape: tuple[int, ...] | None
    ):
        self.proto = proto
        self.label = label
        self.g = proto.graph
        self.example = (
            tuple(int(d) for d in example_input_shape) if example_input_shape is not None else None
        )
        self.consts: dict[str, _Const] = {}
        self.alias: dict[str, str] = {}
        self.pending_q: dict[str, _PendingQ] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.nodes: list[Node] = []
        self.hint_tensors: dict[str, FixedType] = {}
        self.hint_params: dict[tuple[str, str], FixedType] = {}
        self.batch: int | None = None
        self._inferred: dict[str, list] | None = None
        self._shape_values: dict[str, np.ndarray | None] = {}
        self._producer: dict[str, int] = {}
        self._names: list[str] = []
        # recurrent layers and the data movement around them (onnx_recurrent.py)
        self.moved = {}
        self.rnns = {}
        self.cells = {}
        self.id_bases = {}
        self._id_spans: dict[str, int] = {}
        self._movement_batch: int | None = None
        self._static_values: dict[str, np.ndarray | None] = {}
        # 1-D convolutional layers (sequence.py)
        self.lifted: dict[str, str] = {}
        self.unlifts: set[str] = set()
        # QONNX Trunc nodes on activations: (tensor, frac of its input scale, node), checked at the end
        self._truncs: list[tuple[str, int, str]] = []
        # attention masks before a Softmax: the masked tensor -> (scores, keep [Tq, Tk]); IsNaN outputs
        self.softmax_keeps: dict[str, tuple[str, np.ndarray]] = {}
        self.isnan_of: dict[str, str] = {}
        # a run-time key padding mask (the second graph input, onnx_mask.py)
        self.mask_input: str | None = None
        self.mask_views = {}
        self.mask_softmax: dict[str, str] = {}

    # -- naming ---------------------------------------------------------------------------------

    def _assign_names(self) -> None:
        used: set[str] = set()
        for i, node in enumerate(self.g.node):
            for o in node.output:
                if o:
                    self._producer[o] = i
            base = node.name or f"{node.op_type}_{i}"
            name = base
            if name in used:
                name = f"{base}_{i}"
            k = 1
            while name in used:
                name = f"{base}_{i}_{k}"
                k += 1
            used.add(name)
            self._names.append(name)

    def canon(self, t: str) -> str:
        while t in self.alias:
            t = self.alias[t]
        return t

    # -- inputs ---------------------------------------------------------------------------------

    def _read_inputs(self) -> str:
        for init in self.g.initializer:
            arr = numpy_helper.to_array(init)
            self.consts[init.name] = _Const(arr, _code_bits(arr, init.data_type))
        if self.g.sparse_initializer:
            raise UnsupportedOpError("sparse initializers are not supported; store weights densely")
        inputs = [i for i in self.g.input if i.name not in self.consts]
        if len(inputs) not in (1, 2):
            names = ", ".join(f"'{i.name}'" for i in inputs) or "none"
            raise UnsupportedOpError(
                f"the model has {len(inputs)} graph inputs ({names}); aieflow imports ONNX models with one input, "
                "or one input and a run-time key padding mask (docs/attention.md)",
                hint="export forward(x) or forward(x, mask) with mask a boolean key padding mask",
            )
        vi = inputs[0]
        name = vi.name
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedOpError(f"graph input '{name}' is not a tensor")
        tt = vi.type.tensor_type
        if tt.elem_type not in _FLOAT_INPUT_TYPES:
            raise UnsupportedOpError(
                f"graph input '{name}' has element type "
                f"{onnx.TensorProto.DataType.Name(tt.elem_type)}; aieflow imports float models "
                "(quantised models must use QuantizeLinear/DequantizeLinear on a float input)"
            )
        dims: list[int | None] | None = None
        if tt.HasField("shape"):
            dims = []
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value > 0:
                    dims.append(int(d.dim_value))
                else:
                    dims.append(None)
        self.shapes[name] = self._resolve_input_shape(name, tt, dims)
        if len(inputs) == 2:
            self.read_mask_input(inputs[1], name)
        return name

    def _resolve_input_shape(self, name: str, tt, dims: list[int | None] | None) -> tuple[int, ...]:
        ex = self.example
        advice = (
            "export the model with fixed feature sizes (only the batch, dimension 0, may be "
            "dynamic), or pass example_input (an input array or its shape, batch included)"
        )
        if dims is None:
            if ex is None:
                raise ModelError(f"graph input '{name}' has no shape; {advice}")
            if len(ex) < 1:
                raise ConfigError("example_input must include the batch dimension")
            self.batch = ex[0]
            return tuple(ex[1:])
        if len(dims) == 0:
            raise ModelError(
                f"graph input '{name}' is a scalar; aieflow expects dimension 0 to be the batch"
            )
        self.batch = dims[0]
        per_sample = list(dims[1:])
        if ex is not None:
            if len(ex) == len(dims):
                ex_sample = ex[1:]
                if self.batch is None:
                    self.batch = ex[0]
            elif len(ex) == len(dims) - 1:
                ex_sample = ex
            else:
                raise ConfigError(
                    f"example input shape {ex} does not match graph input '{name}' of rank "
                    f"{len(dims)} (give the shape with or without the batch dimension)"
                )
            for i, (d, e) in enumerate(zip(per_sample, ex_sample, strict=True), start=1):
                if d is not None and d != e:
                    raise ConfigError(
                        f"example input shape {ex} disagrees with graph input '{name}': dimension "
                        f"{i} is {d} in the model but {e} in the example"
                    )
            per_sample = list(ex_sample)
        for i, d in enumerate(per_sample, start=1):
            if d is None or d <= 0:
                raw = tt.shape.dim[i]
                what = (
                    f"symbolic '{raw.dim_param}'"
                    if raw.HasField("dim_param")
                    else f"{raw.dim_value}"
                    if raw.HasField("dim_value")
                    else "unknown"
                )
                raise ModelError(
                    f"graph input '{name}' has a dynamic dimension {i} ({what}); {advice}"
                )
        return tuple(int(d) for d in per_sample)

    # -- constant folding -----------------------------------------------------------------------

    def _const(self, t: str) -> _Const | None:
        return self.consts.get(t) if t else None

    def _is_const(self, t: str) -> bool:
        return t == "" or t in self.consts

    def _fold(self, node: onnx.NodeProto, name: str) -> None:
        op = node.op_type
        if op == "Constant":
            self.consts[node.output[0]] = _constant_node_value(node, name)
            return
        ins = [self._const(t) for t in node.input]
        if op == "Identity":
            self.consts[node.output[0]] = ins[0]
        elif op == "Transpose":
            perm = _attrs(node).get("perm")
            src = ins[0]
            if src.affine is not None:
                order = list(perm) if perm is not None else list(range(src.value.ndim))[::-1]
                self.consts[node.output[0]] = _Const(
                    np.transpose(src.value, perm), None, None, src.origin, src.affine,
                    np.transpose(src.acodes, perm), None if src.axis is None else order.index(src.axis),
                    src.azp)
            else:
                self.consts[node.output[0]] = _Const(
                    np.transpose(src.value, perm), src.codes, src.qtype, src.origin
                )
        elif op == "Reshape":  # a constant mask's reshapes (the TorchScript MHA export of a padding buffer)
            src, shape = ins[0], [int(d) for d in np.asarray(ins[1].value).reshape(-1)]
            if src.affine is not None:
                raise UnsupportedOpError(f"node '{name}' (Reshape) reshapes a per-channel quantised constant, which "
                                         "aieflow does not fold", hint="reshape the float weight before quantising it")
            if int(_attrs(node).get("allowzero", 0)) == 0:  # 0 keeps that dimension of the input
                shape = [np.shape(src.value)[i] if d == 0 else d for i, d in enumerate(shape)]
            try:
                value = np.reshape(src.value, shape)
            except ValueError:
                raise UnsupportedOpError(f"node '{name}' (Reshape) reshapes a constant of shape "
                                         f"{np.shape(src.value)} to {tuple(shape)}, which ONNX does not allow") from None
            self.consts[node.output[0]] = _Const(value, src.codes, src.qtype, src.origin)
        elif op == "DequantizeLinear":
            self.consts[node.output[0]] = self._fold_dq(node, name, ins)
        elif op == "QuantizeLinear":
            self.consts[node.output[0]] = self._fold_q(node, name, ins)
        elif op in QONNX_OPS and self.is_affine_quant(node, name):  # a float scale: as a QDQ's affine constant
            value, affine, codes, axis, zp = self.fold_affine_quant(node, name, ins[0].value)
            self.consts[node.output[0]] = _Const(value, None, None, name, affine, codes, axis, zp)
        elif op in QONNX_OPS:
            value, qtype = self.fold_quant_op(node, name, ins)
            self.consts[node.output[0]] = _Const(value, None, qtype, origin=name)
        elif op == "Clip":
            value, codes, qtype = self.fold_clip(node, name, ins)
            self.consts[node.output[0]] = _Const(value, codes, qtype, ins[0].origin)
        elif op in patches.ONNX_CONSTANT_OPS:  # a class token's Expand and the shape computing it
            self.consts[node.output[0]] = _Const(patches.onnx_constant(node, [c.value for c in ins], name))
        elif op in ("Mul", "Div"):
            value, codes, qtype = self.fold_mul(node, name, ins)
            origin = next((c.origin for c in ins if c.origin), None)
            self.consts[node.output[0]] = _Const(value, codes, qtype, origin)
        else:  # pragma: no cover - guarded by _FOLDABLE
            raise AssertionError(op)

    def _gather_token(self, node: onnx.NodeProto, name: str) -> None:
        """``Gather(x, i, axis=1)`` of ``[N, T, E]`` tokens with a constant scalar ``i`` (``x[:, i]``):
        class-token pooling (frontends/patches.token_select_nodes); any other Gather: the movement ops'."""
        idx = self._const(node.input[1]) if len(node.input) == 2 else None
        axis = int(_attrs(node).get("axis", 0))
        if (idx is None or np.ndim(idx.value) != 0 or self._is_const(node.input[0]) or node.input[0] in self.moved
                or len(self.shapes.get(node.input[0], ())) != 2 or axis not in (1, -2)):
            self.move(node, name)
            return
        x = self._data_input(node.input[0], name, "Gather")
        nodes, shapes = patches.token_select_nodes(name, x, node.output[0], self.shapes[x], int(idx.value),
                                                   self._fresh_node_name)
        self.nodes.extend(nodes)
        self.shapes.update(shapes)

    def _concat_const(self, node: onnx.NodeProto, name: str) -> None:
        """``Concat([constant, x], axis=1)`` of ``[N, k, E]`` class tokens and ``[N, T, E]`` tokens:
        ``prepend_const`` (ops/prepend_const.py); any other Concat: the movement ops'."""
        c = self._const(node.input[0]) if len(node.input) == 2 else None
        if c is None or self._is_const(node.input[1]):
            self.move(node, name)
            return
        x = self._data_input(node.input[1], name, "Concat")
        shape = self.shapes[x]
        axis = int(_attrs(node).get("axis", 0))
        v = np.asarray(c.value, dtype=np.float32)
        rows = v.reshape(-1, *v.shape[-2:]) if v.ndim == 3 else None
        if (len(shape) != 2 or axis not in (1, -2) or rows is None or rows.shape[-1] != shape[1]
                or not np.array_equal(rows, np.broadcast_to(rows[:1], rows.shape))):
            raise UnsupportedOpError(
                f"node '{name}' (Concat) joins a constant of shape {tuple(v.shape)} with per-sample shape {shape} on axis "
                f"{axis}; aieflow maps constant tokens [N, k, E] put in front of [N, T, E] tokens on axis 1 (a class token)")
        self._emit(name, "prepend_const", x, node.output[0], (shape[0] + rows.shape[1], shape[1]), {},
                   {"constant": np.ascontiguousarray(rows[0])})

    def _fold_dq(self, node: onnx.NodeProto, name: str, ins: list[_Const | None]) -> _Const:
        _check_qdq_attrs(node, name)
        x, scale = ins[0], ins[1]
        zp = ins[2] if len(ins) > 2 else None
        if x.codes is None:
            raise UnsupportedOpError(
                f"node '{name}' (DequantizeLinear) dequantises a {x.value.dtype} constant; "
                "expected integer codes"
            )
        if not _is_pow2_symmetric(scale.value, zp):
            return self._fold_affine_dq(node, name, x, scale, zp)
        frac = _pow2_frac(name, "DequantizeLinear", scale.value)
        _check_zero_point(name, "DequantizeLinear", zp)
        value = np.asarray(x.value, dtype=np.float64) * (2.0**-frac)
        return _Const(value, None, _fixed(x.codes, frac))

    def _fold_affine_dq(self, node: onnx.NodeProto, name: str, x: _Const, scale: _Const, zp: _Const | None) -> _Const:
        """A constant (weight, bias) dequantised with float or per-axis scales / zero points
        (onnxruntime ``quantize_static``): its codes and affine type, the value for the float
        reference.  Whether a Dense layer can take it is decided where it is used."""
        codes = np.asarray(x.value).astype(np.int64)
        s = np.asarray(scale.value, dtype=np.float32).reshape(-1)
        z = np.zeros_like(s, dtype=np.int64) if zp is None else np.asarray(zp.value).astype(np.int64).reshape(-1)
        axis = None
        if s.size > 1 or z.size > 1:
            axis = int(_attrs(node).get("axis", 1))
            axis = axis + codes.ndim if axis < 0 else axis
            if not 0 <= axis < codes.ndim or codes.shape[axis] not in (s.size,) or z.size not in (1, s.size):
                raise UnsupportedOpError(
                    f"node '{name}' (DequantizeLinear) has {s.size} scales for axis {axis} of a constant of shape "
                    f"{list(codes.shape)}")
        if not (np.all(np.isfinite(s)) and np.all(s > 0)):
            raise UnsupportedOpError(f"node '{name}' (DequantizeLinear) has a scale that is not positive and finite")
        shape = [1] * codes.ndim
        if axis is not None:
            shape[axis] = -1
        value = (codes - z.reshape(shape)).astype(np.float64) * s.astype(np.float64).reshape(shape)
        width, signed = x.codes
        if width not in (8, 16, 32):
            raise UnsupportedOpError(
                f"node '{name}' (DequantizeLinear) dequantises {width}-bit codes with float scales; aieflow takes "
                "8- and 16-bit weights and 32-bit biases")
        affine = AffineType(width, signed, tuple(float(v) for v in s), int(z.reshape(-1)[0]) if z.size == 1 else 0)
        return _Const(value, None, None, name, affine, codes, axis, z)

    def _fold_q(self, node: onnx.NodeProto, name: str, ins: list[_Const | None]) -> _Const:
        attrs = _check_qdq_attrs(node, name)
        x, scale = ins[0], ins[1]
        zp = ins[2] if len(ins) > 2 else None
        frac = _pow2_frac(name, "QuantizeLinear", scale.value)
        _check_zero_point(name, "QuantizeLinear", zp)
        bits = _q_output_bits(node, name, zp, attrs)
        qtype = _fixed(bits, frac)
        # round half to even (np.rint), then saturate: QuantizeLinear's definition.
        scaled = np.asarray(x.value, dtype=np.float64) * (2.0**frac)
        codes = np.clip(np.rint(scaled), qtype.min_code, qtype.max_code).astype(np.int64)
        return _Const(codes, bits)

    # -- liveness -------------------------------------------------------------------------------

    def _live_nodes(self, todo: list[int]) -> set[int]:
        """Indices (into graph.node) of non-constant nodes that feed a graph output.

        A Reshape's shape operand is not followed: when it is computed at run time the output
        shape comes from shape inference and the nodes computing it are dropped.
        """
        needed = {o.name for o in self.g.output}
        live: set[int] = set()
        for i in reversed(todo):
            node = self.g.node[i]
            if not any(o in needed for o in node.output if o):
                continue
            live.add(i)
            # Shape operands, indices, weights and initial states are folded, not computed.
            first_only = node.op_type in ("Reshape", *MOVEMENT_OPS, *RECURRENT_OPS) and node.op_type != "Concat"
            data_inputs = node.input[:1] if first_only else node.input
            needed.update(t for t in data_inputs if t)
        return live

    def _mha_refusal(self, exc: UnsupportedOpError) -> UnsupportedOpError:
        """An export of ``nn.MultiheadAttention`` (its packed ``in_proj_weight`` / ``in_proj_bias``) that
        does not map: say so, and what maps, beside the node that failed."""
        packed = next((i.name for i in self.g.initializer if i.name.rsplit(".", 1)[-1] in (
            "in_proj_weight", "in_proj_bias")), None)
        if packed is None:
            return exc
        return UnsupportedOpError(
            f"the model holds an nn.MultiheadAttention ('{packed}') whose ONNX export aieflow cannot map: "
            f"{exc.message}", layer=getattr(exc, "layer", None),
            hint="aieflow maps nn.MultiheadAttention(batch_first=True) called as attn(x, x, x, need_weights=False) "
                 "(a constant attn_mask, a key_padding_mask the same for every sample, or a run-time key_padding_mask "
                 "as the second graph input map), without add_bias_kv, "
                 "add_zero_attn or separate kdim / vdim"
                 + (f"; {exc.hint}" if exc.hint else ""))

    def _shape_only(self, todo: list[int]) -> set[int]:
        """Nodes whose values depend on tensor shapes alone (``Shape`` and arithmetic on it and on
        constants), e.g. the ``1 / sqrt(d)`` exporters write for ``F.scaled_dot_product_attention`` as
        ``Shape -> Slice -> Cast -> Sqrt -> Div``: not converted, but evaluated on demand
        (:meth:`_fold_shape_inputs`) once the shapes are known."""
        out: set[int] = set()
        produced_by = {o: i for i in todo for o in self.g.node[i].output if o}
        for i in todo:  # graph order: producers first
            node = self.g.node[i]
            if node.domain not in ("", "ai.onnx") or node.op_type in ("Loop", "Scan", "If"):
                continue
            if node.op_type == "Shape" or (node.op_type != "Size" and all(
                    not t or self._is_const(t) or produced_by.get(t) in out for t in node.input)
                    and any(produced_by.get(t) in out for t in node.input if t)):
                out.add(i)
        return out

    def _fold_shape_inputs(self, node: onnx.NodeProto, name: str, shape_only: set[int]) -> None:
        """Turn the inputs of ``node`` that come from shape-only nodes into constants (static shapes).
        Reshape and the movement ops evaluate their shape operands themselves (with the batch).  A
        value that reads the batch dimension itself gets the model's batch, or the stand-in batch of
        :attr:`movement_batch` when the export leaves it dynamic (not checked: attention's scales read
        the head width only)."""
        if node.op_type in ("Reshape", *MOVEMENT_OPS):
            return
        for t in node.input:
            if not t or t in self.consts or self._producer.get(t) not in shape_only:
                continue
            v = self.static(t)
            if v is None:
                raise UnsupportedOpError(
                    f"node '{name}' ({node.op_type}) reads '{t}', computed from tensor shapes that aieflow could "
                    "not evaluate", hint="export with static shapes (a fixed batch and sequence length)")
            self.consts[t] = _Const(np.asarray(v), None)

    # -- shape inference for run-time reshape targets -------------------------------------------

    @property
    def _inference_batch(self) -> int:
        # An unusual prime when the batch is unknown, so batch-mixing reshapes stand out.
        return self.batch if self.batch is not None else 9973

    def _inferred_shape(self, tensor: str) -> list | None:
        if self._inferred is None:
            model = onnx.ModelProto()
            model.CopyFrom(self.proto)
            inp = next(i for i in model.graph.input if i.name not in self.consts and i.name != self.mask_input)
            shape = inp.type.tensor_type.shape
            per_sample = self.shapes[inp.name]
            del shape.dim[:]
            # A concrete batch lets data propagation resolve -1 in targets like
            # Concat(Gather(Shape(x), 0), [-1]); a symbolic one cannot be divided out.
            shape.dim.add().dim_value = self._inference_batch
            # Drop recorded shapes (symbolic batch) so inference recomputes them all.
            del model.graph.value_info[:]
            for o in model.graph.output:
                o.type.tensor_type.ClearField("shape")
            for d in per_sample:
                shape.dim.add().dim_value = d
            try:
                inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
            except Exception:  # noqa: BLE001 - fall back to "unknown"
                self._inferred = {}
                return None
            out: dict[str, list] = {}
            for vi in (*inferred.graph.value_info, *inferred.graph.output):
                tt = vi.type.tensor_type
                if tt.HasField("shape"):
                    out[vi.name] = [
                        d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim
                    ]
            self._inferred = out
        return self._inferred.get(tensor)

    # -- emission helpers -----------------------------------------------------------------------

    def _data_input(self, t: str, node_name: str, op: str) -> str:
        if t in self.moved:
            return self.materialise(t, node_name, op)
        c = self.canon(t)
        if c in self.pending_q:
            q = self.pending_q[c]
            raise UnsupportedOpError(
                f"node '{node_name}' ({op}) reads the integer output of QuantizeLinear '{q.node}' "
                "directly; only QuantizeLinear -> DequantizeLinear pairs are supported"
            )
        if c not in self.shapes:
            raise ModelError(
                f"node '{node_name}' ({op}) reads tensor '{t}', which is never produced"
            )
        return c

    def _emit(
        self, name: str, op: str, x: str, y: str, shape: tuple[int, ...], attrs=None, params=None
    ):
        self.shapes[y] = tuple(int(d) for d in shape)
        self.nodes.append(
            Node(
                name=name,
                op=op,
                inputs=(x,),
                outputs=(y,),
                attrs=frozen_map(attrs or {}),
                params=frozen_map(params or {}),
            )
        )

    def _masked_mean(self, mm, node: onnx.NodeProto, name: str) -> None:
        """A masked mean pooling over the tokens (``onnx_masked_mean.py``): one ``masked_mean`` node reading
        the pooled tensor and the run-time mask, as the torch import's."""
        x = self._data_input(mm.x, name, "masked mean pooling")
        shape, tk = self.shapes[x], self.shapes[self.mask_input]
        if len(shape) != 2 or (shape[0],) != tuple(tk):
            raise UnsupportedOpError(f"node '{name}' (Div) pools a tensor of per-sample shape {shape} with the mask "
                                     f"'{self.mask_input}' of {tuple(tk)}; aieflow pools [T, E] tokens with a "
                                     "[batch, T] mask over the same tokens")
        y = node.output[0]
        self.shapes[y] = (int(shape[1]),)
        self.nodes.append(Node(name=name, op="masked_mean", inputs=(x, self.mask_input), outputs=(y,)))

    def _split_const_operand(self, node: onnx.NodeProto, name: str) -> tuple[str, _Const]:
        """For a binary op with one constant and one activation operand: (activation, constant)."""
        a, b = node.input[0], node.input[1]
        ca, cb = self._const(a), self._const(b)
        if ca is None and cb is None:
            raise UnsupportedOpError(
                f"node '{name}' ({node.op_type}) combines two computed tensors ('{a}' and '{b}'); "
                f"only {node.op_type} with a constant operand is supported for now"
            )
        if ca is not None and cb is not None:  # pragma: no cover - folded away before
            raise UnsupportedOpError(f"node '{name}' ({node.op_type}) has only constant operands")
        return (b, ca) if ca is not None else (a, cb)

    def _require_vector(self, x: str, name: str, op: str) -> int:
        shape = self.shapes[x]
        if len(shape) != 1:
            raise UnsupportedOpError(
                f"node '{name}' ({op}) multiplies an input of per-sample shape {shape}; dense layers "
                "need a 1-D feature vector per sample (add a Flatten before it)"
            )
        return shape[0]

    # -- converters -----------------------------------------------------------------------------

    def _gemm(self, node: onnx.NodeProto, name: str, rows: bool = False) -> None:
        if not rows and self._row_wise(node, name, self._gemm, rows=True):
            return
        attrs = _attrs(node)
        if attrs.get("transA", 0):
            raise UnsupportedOpError(
                f"node '{name}' (Gemm) has attribute transA=1; only transA=0 (activations as "
                "rows) is supported"
            )
        alpha = float(attrs.get("alpha", 1.0))
        beta = float(attrs.get("beta", 1.0))
        a, b = node.input[0], node.input[1]
        c_name = node.input[2] if len(node.input) > 2 else ""
        if c_name and self._const(c_name) is None:
            raise UnsupportedOpError(
                f"node '{name}' (Gemm) has a computed bias (input C); only a constant bias is supported"
            )
        x, k, wc, w = self._weight_operand(a, b, name, "Gemm", transpose=bool(attrs.get("transB", 0)), rows=rows)
        n = int(w.shape[1])
        cc = self._const(c_name) if c_name else None
        if (wc.affine is not None or (cc is not None and cc.affine is not None)) and (alpha != 1.0 or beta != 1.0):
            raise UnsupportedOpError(f"node '{name}' (Gemm) scales a float-scale quantised operand by alpha / beta; "
                                     "re-export with alpha=1 and beta=1")
        wq = _scale_qtype(wc.qtype, alpha, name, "alpha")
        if alpha != 1.0:
            w = np.asarray(w, dtype=np.float64) * alpha
        params = {"weight": _float_param(_Const(w, None, wq))}
        if wq is not None:
            self.hint_params[(name, "weight")] = wq
        if wc.affine is not None:
            self._affine_params(name, "Gemm", wc, bool(attrs.get("transB", 0)), params)
        if cc is not None and cc.affine is not None:
            self._affine_bias(name, "Gemm", cc, n, params)
            params["bias"] = np.asarray(self._bias_vector(cc.value, n, name, "Gemm", full_rank=2), dtype=np.float64)
        elif c_name:
            bias = self._bias_vector(cc.value, n, name, "Gemm", full_rank=2)
            bq = _scale_qtype(cc.qtype, beta, name, "beta")
            if beta != 1.0:
                bias = np.asarray(bias, dtype=np.float64) * beta
            params["bias"] = _float_param(_Const(bias, None, bq))
            if bq is not None:
                self.hint_params[(name, "bias")] = bq
        attrs_out = {"in_features": int(k), "out_features": n, "activation": None}
        self._emit(name, "dense", x, node.output[0], (*self.shapes[x][:-1], n) if rows else (n,), attrs_out, params)

    def _matmul(self, node: onnx.NodeProto, name: str) -> None:
        a, b = node.input[0], node.input[1]
        if self._const(a) is None and self._const(b) is None:
            self._dynamic_matmul(node, name)
            return
        if self._row_wise(node, name, self._matmul):
            return
        x, k, wc, _ = self._weight_operand(a, b, name, "MatMul", rows=True)
        n = int(wc.value.shape[1])
        if wc.qtype is not None:
            self.hint_params[(name, "weight")] = wc.qtype
        attrs_out = {"in_features": int(k), "out_features": n, "activation": None}
        shape = (*self.shapes[x][:-1], n)  # every row of a [rows, features] sample alike
        params = {"weight": _float_param(wc)}
        if wc.affine is not None:
            self._affine_params(name, "MatMul", wc, False, params)
        self._emit(name, "dense", x, node.output[0], shape, attrs_out, params)

    def _dynamic_matmul(self, node: onnx.NodeProto, name: str) -> None:
        """MatMul of two computed tensors (attention's Q K^T, A V): a ``matmul`` node; a Transpose of
        the second operand's last two axes becomes its ``transpose_b`` (``frontends/attention.py``)."""
        xa = self._data_input(node.input[0], name, "MatMul")
        xb = self._data_input(node.input[1], name, "MatMul")
        sa, sb = self.shapes[xa], self.shapes[xb]
        if len(sa) < 2 or len(sa) != len(sb) or sa[:-2] != sb[:-2] or sa[-1] != sb[-2]:
            raise UnsupportedOpError(
                f"node '{name}' (MatMul) multiplies computed tensors of per-sample shapes {sa} and {sb}; aieflow maps "
                "[..., M, K] by [..., K, N] with equal leading (head) dimensions", hint="no broadcasting")
        y = node.output[0]
        self.shapes[y] = (*sa[:-1], sb[-1])
        self.nodes.append(Node(name=name, op="matmul", inputs=(xa, xb), outputs=(y,),
                               attrs=frozen_map({"transpose_b": False}), params=frozen_map({})))

    def _weight_operand(self, a: str, b: str, name: str, op: str, transpose: bool = False, rows: bool = False):
        """Check ``a @ b`` is activation x constant 2-D weight; return (x, k, constant, weight)."""
        if self._const(a) is not None or self._const(b) is None:
            raise UnsupportedOpError(
                f"node '{name}' ({op}) must multiply the activation (first operand) by a constant "
                "weight (second operand)"
            )
        wc = self._const(b)
        # a channels-last Flatten (tf2onnx: Transpose to [N, H, W, C], Reshape to [N, -1]): the IR
        # flattens in CHW order and the weight's rows take the permutation (frontends/channels_last.py)
        permuted = self.flatten_permuted(a, name) if wc.value.ndim == 2 else None
        if permuted is not None:
            x, order = permuted
            axis = 1 if transpose else 0
            if wc.affine is not None and wc.axis == axis:
                raise UnsupportedOpError(f"node '{name}' ({op}) has per-row weight scales after a channels-last "
                                         "flatten; aieflow takes them per output feature")
            rows_of = lambda v: None if v is None else np.moveaxis(  # noqa: E731
                permuted_rows(np.moveaxis(np.asarray(v), axis, 0), order), 0, axis)
            wc = _Const(rows_of(wc.value), wc.codes, wc.qtype, wc.origin, wc.affine, rows_of(wc.acodes), wc.axis,
                        wc.azp)
        else:
            x = self._data_input(a, name, op)
        k = self.shapes[x][-1] if rows and len(self.shapes[x]) > 1 else self._require_vector(x, name, op)
        if wc.value.ndim != 2:
            raise UnsupportedOpError(
                f"node '{name}' ({op}) weight has rank {wc.value.ndim}; only a 2-D weight is supported"
            )
        if wc.qtype is not None and wc.qtype.width > 16:
            by = f" by '{wc.origin}'" if wc.origin else ""
            raise UnsupportedOpError(
                f"node '{name}' ({op}) has a weight quantised{by} to {wc.qtype.width}-bit codes; the AI Engine "
                "multiplies 8- or 16-bit weights",
                hint="quantise the weights to at most 16 bits (e.g. Brevitas Int8WeightPerTensorFixedPoint)")
        w = np.asarray(wc.value).T if transpose else np.asarray(wc.value)
        if wc.affine is not None:
            self._check_affine_weight(wc, name, op, transpose)
        if w.shape[0] != k:
            raise ModelError(
                f"node '{name}' ({op}): input has {k} features but the weight has {w.shape[0]} rows"
            )
        return x, k, wc, w

    def _check_affine_weight(self, wc: _Const, name: str, op: str, transpose: bool) -> None:
        """An affine (float-scale) weight: zero points 0, scales per tensor or per output feature."""
        if np.any(wc.azp != 0):
            raise UnsupportedOpError(
                f"node '{name}' ({op}) has weights with a non-zero zero point ({int(wc.azp[wc.azp != 0][0])}, "
                f"DequantizeLinear '{wc.origin}'); aieflow takes symmetric weights (zero point 0)",
                hint="quantise weights as QInt8 with symmetric ranges (onnxruntime quantize_static's default for "
                "weight_type=QuantType.QInt8; extra_options WeightSymmetric=True)")
        out_axis = 0 if transpose else 1
        if wc.axis is not None and wc.axis != out_axis:
            raise UnsupportedOpError(
                f"node '{name}' ({op}) has per-channel weight scales along the input features; aieflow takes them "
                "per output feature", hint="quantise per channel along the output axis (quantize_static's default)")
        if wc.affine.width > 16:
            raise UnsupportedOpError(f"node '{name}' ({op}) has {wc.affine.width}-bit weights; the AI Engine "
                                     "multiplies 8- or 16-bit weights")

    def _affine_params(self, name: str, op: str, wc: _Const, transpose: bool, params: dict) -> None:
        """Codes and type hint of an affine weight (the float ``weight`` param is for calibration)."""
        codes = wc.acodes.T if transpose else wc.acodes
        params["weight_codes"] = np.ascontiguousarray(codes.astype(np.int64))
        self.hint_params[(name, "weight")] = wc.affine

    def _affine_bias(self, name: str, op: str, cc: _Const, n: int, params: dict) -> None:
        if np.any(cc.azp != 0):
            raise UnsupportedOpError(f"node '{name}' ({op}) has a bias with a non-zero zero point; biases are "
                                     "int32 codes with zero point 0 (scale = input scale x weight scale)")
        codes = self._bias_vector(cc.acodes, n, name, op, full_rank=2)
        params["bias_codes"] = codes.astype(np.int64)
        scales = cc.affine.scale if len(cc.affine.scale) == n else cc.affine.scale * n
        self.hint_params[(name, "bias")] = AffineType(cc.affine.width, cc.affine.signed, tuple(scales), 0)

    def _bias_vector(
        self, value: np.ndarray, n: int, name: str, op: str, full_rank: int
    ) -> np.ndarray:
        """A constant that broadcasts along the last axis only, as an (n,) vector."""
        v = np.asarray(value)
        ok = v.ndim <= full_rank and all(d == 1 for d in v.shape[:-1])
        if ok and v.ndim >= 1 and v.shape[-1] not in (1, n):
            ok = False
        if not ok:
            raise UnsupportedOpError(
                f"node '{name}' ({op}) adds a constant of shape {tuple(v.shape)}; only a per-feature "
                f"bias of shape ({n},) (or a scalar) is supported"
            )
        return np.broadcast_to(v.reshape(-1) if v.ndim else v, (n,)).copy()

    def _add(self, node: onnx.NodeProto, name: str) -> None:
        if self._onnx_mask_add(node, name):  # a constant attention mask before a Softmax (onnx_activation.py)
            return
        if self._const(node.input[0]) is None and self._const(node.input[1]) is None:
            self._residual_add(node, name)
            return
        if self._row_wise(node, name, self._add):
            return
        t, c = self._split_const_operand(node, name)
        x = self._data_input(t, name, "Add")
        shape = self.shapes[x]
        cv = np.asarray(c.value)
        if (len(shape) == 2 and cv.ndim >= 2 and all(d == 1 for d in cv.shape[:-2]) and cv.shape[-2:] == shape
                and shape[0] > 1 and c.affine is None):
            # a constant of the sample's [T, E] shape (a positional embedding): ops/add_const.py
            self._emit(name, "add_const", x, node.output[0], shape, None,
                       {"constant": np.asarray(cv, dtype=np.float32).reshape(shape)})
            return
        if len(shape) == 0:
            raise UnsupportedOpError(
                f"node '{name}' (Add) adds to a scalar per sample; not supported"
            )
        if c.qtype is None and c.affine is None and self.channel_affine(name, "Add", x, node.output[0], c.value):
            return  # a per-channel shift of an image or sequence (channels_last.py)
        n = shape[-1]
        bias = self._bias_vector(c.value, n, name, "Add", full_rank=len(shape) + 1)
        if c.qtype is not None:
            self.hint_params[(name, "bias")] = c.qtype
        params = {"bias": _float_param(_Const(bias, None, c.qtype))}
        if c.affine is not None:
            self._affine_bias(name, "Add", c, n, params)
            params["bias"] = np.asarray(bias, dtype=np.float64)
        self._emit(name, "bias_add", x, node.output[0], shape, None, params)

    # -- graphs beyond chains (issue 7) ----------------------------------------------------------

    def _residual_add(self, node: onnx.NodeProto, name: str) -> None:
        a, b = (self._data_input(t, name, "Add") for t in node.input[:2])
        if self.shapes[a] != self.shapes[b]:
            raise UnsupportedOpError(
                f"node '{name}' (Add) adds per-sample shapes {self.shapes[a]} (tensor '{a}') and {self.shapes[b]} "
                f"(tensor '{b}'); only equal shapes (no broadcasting) are supported"
            )
        self._emit(name, "add", a, node.output[0], self.shapes[a])
        self.nodes[-1] = self.nodes[-1].evolve(inputs=(a, b))

    def _layernorm(self, node: onnx.NodeProto, name: str) -> None:
        attrs = _attrs(node)
        x = self._data_input(node.input[0], name, "LayerNormalization")
        shape = self.shapes[x]
        axis = int(attrs.get("axis", -1))
        if not shape or axis not in (-1, len(shape)):
            raise UnsupportedOpError(
                f"node '{name}' (LayerNormalization) normalises from axis {axis}; only the last axis is supported"
            )
        if int(attrs.get("stash_type", 1)) != 1 or len(node.output) > 1 and any(node.output[1:]):
            raise UnsupportedOpError(f"node '{name}' (LayerNormalization): only output Y (no Mean / InvStdDev)")
        n = shape[-1]

        def vector(i: int, default: float) -> np.ndarray:
            if len(node.input) <= i or not node.input[i]:
                return np.full(n, default, np.float32)
            c = self._const(node.input[i])
            if c is None:
                raise UnsupportedOpError(f"node '{name}' (LayerNormalization) has a computed scale or bias")
            return self._bias_vector(c.value, n, name, "LayerNormalization", full_rank=len(shape) + 1).astype(np.float32)

        # ONNX holds epsilon as a float32: read as the shortest decimal of that float32 (1e-5, not
        # 9.99999974e-06), the value PyTorch's eps has, so that both imports give one layer
        eps = float(str(np.float32(attrs.get("epsilon", 1e-5))))
        self._emit(name, "layernorm", x, node.output[0], shape, {"eps": eps, "features": int(n)},
                   {"gamma": vector(1, 1.0), "beta": vector(2, 0.0)})

    def _split(self, node: onnx.NodeProto, name: str) -> None:
        """Split of a data tensor: each output is a moved tensor (ids), a ``slice`` view once read."""
        feeds = {node.input[0]: self.index_of(node.input[0], name, "Split")}
        for k, t in enumerate(node.input[1:], start=1):
            if t:
                feeds[t] = self._static_or_fail(t, name, "Split", f"input {k}")
        outs = self._run_node(node, feeds)
        for o, v in zip([o for o in node.output if o], outs, strict=True):
            self.moved[o] = Moved(np.asarray(v, dtype=np.int64), name)

    def materialise(self, t: str, user: str, op: str) -> str:
        """A moved tensor as the IR sees it: a reshape (the recurrent mixin), else one transpose,
        slice or concat view of whole IR tensors."""
        try:
            y = super().materialise(t, user, op)
            self._register_unlift(y)
            return y
        except UnsupportedOpError:
            view = self._data_view(self.moved[t].index)
            if view is None:
                whole = self.whole_view(self.moved[t].index)
                if whole is not None:  # e.g. a channels-last sequence into [N, C, 1, W] (channels_last.py)
                    return self.emit_whole_view(t, *whole)
                heads = self._head_view(self.moved[t].index)
                if heads is None:
                    raise
                return self._emit_head_view(t, *heads)
        kind, sources, attrs = view
        base = self.moved[t].producer

        def fresh(stem: str) -> str:
            names = {n.name for n in self.nodes}
            name, k = stem, 1
            while name in names:
                name, k = f"{stem}_{k}", k + 1
            return name

        inputs = []
        for i, src in enumerate(sources):
            if isinstance(src, tuple):  # a slice of a tensor, as one part of a concat
                src, cut = src
                part = f"{t}_part{i}"
                shape = list(self.shapes[src])
                shape[cut["axis"]] = cut["stop"] - cut["start"]
                self.shapes[part] = tuple(shape)
                self.nodes.append(Node(name=fresh(f"{base}_slice"), op="slice", inputs=(src,), outputs=(part,),
                                       attrs=frozen_map(cut)))
                src = part
            inputs.append(src)
        self.shapes[t] = tuple(int(d) for d in self.moved[t].index.shape[1:])
        self.nodes.append(Node(name=fresh(base), op=kind, inputs=tuple(inputs), outputs=(t,), attrs=frozen_map(attrs)))
        del self.moved[t]
        return t

    def _register_unlift(self, y: str) -> None:
        """A materialised reshape that drops the unit height of a (C, 1, W) view (an exporter's
        Squeeze after a 1-D convolution run as 2-D) is an unlift (sequence.py): the 1-D layers after
        it read the view, and it goes when nothing else reads it."""
        node = self.nodes[-1] if self.nodes else None
        if node is None or node.op != "reshape" or node.outputs[0] != y or y in self.lifted:
            return
        src = self.shapes[node.inputs[0]]
        if len(src) == 3 and src[1] == 1 and tuple(self.shapes[y]) == (src[0], src[2]):
            self.lifted[y] = node.inputs[0]
            self.unlifts.add(node.name)

    def _head_view(self, ids: np.ndarray):
        """Attention's head split and merge as exporters write them: ``[T, H d]`` reshaped to ``[T, H, d]``
        and permuted (``[H, T, d]``, or ``[H, d, T]`` for K^T), or ``[H, T, d]`` permuted and reshaped to
        ``[T, H d]``: (source, reshape before or None, perm, reshape after or None), for
        ``frontends/attention.split_heads``."""
        b = self.movement_batch
        found = self._whole(ids)
        if found is None or ids.ndim < 3 or ids.shape[0] != b:
            return None
        src, pos = found
        shape = self.shapes[src]
        size = b * int(np.prod(shape, dtype=np.int64))
        cut = None
        if len(shape) == 2 and ids.ndim == 4 and pos.size < size and pos.size % (b * shape[0]) == 0:
            # a feature slice of a [T, D'] projection first (nn.MultiheadAttention's packed in_proj: q, k, v)
            width = pos.size // (b * shape[0])
            lo = int(pos.min()) % shape[1]
            if lo + width > shape[1]:
                return None
            ref = np.arange(size).reshape(b, *shape)[:, :, lo:lo + width]
            cut = {"axis": 1, "start": lo, "stop": lo + width}
            shape = (shape[0], width)
            size = pos.size
            pos = np.searchsorted(ref.reshape(-1), pos)  # positions within the slice (ref is sorted)
            if not np.array_equal(ref.reshape(-1)[np.clip(pos, 0, size - 1)], found[1]):
                return None
        if pos.size != size:
            return None
        ref = np.arange(size).reshape(b, *shape)
        if len(shape) == 2 and ids.ndim == 4:  # split: [T, D] -> [T, H, d] -> permuted
            t, dd = shape
            for h in range(1, dd + 1):  # one head first: its split is a view of the whole (nn.MultiheadAttention, 1 head)
                if dd % h:
                    continue
                split = (t, h, dd // h)
                r2 = ref.reshape(b, *split)
                for perm in itertools.permutations(range(3)):
                    if np.transpose(r2, (0, *(p + 1 for p in perm))).shape == pos.shape and np.array_equal(
                            np.transpose(r2, (0, *(p + 1 for p in perm))), pos):
                        return src, cut, split, perm, None
        if len(shape) == 3 and ids.ndim == 3:  # merge: [H, T, d] permuted -> [T, H d]
            for perm in itertools.permutations(range(3)):
                moved = np.transpose(ref, (0, *(p + 1 for p in perm)))
                if moved.size == pos.size and np.array_equal(moved.reshape(pos.shape), pos):
                    return src, None, None, perm, tuple(int(d) for d in pos.shape[1:])
        return None

    def _emit_head_view(self, t: str, src: str, cut, before, perm, after) -> str:
        base = self.moved[t].producer
        names = {n.name for n in self.nodes}

        def fresh(stem: str) -> str:
            name, k = stem, 1
            while name in names:
                name, k = f"{stem}_{k}", k + 1
            names.add(name)
            return name

        x = src
        steps = ([("slice", cut)] if cut else []) + ([("reshape", {"shape": before})] if before else []) + (
            [("transpose", {"perm": tuple(perm)})] if tuple(perm) != tuple(range(len(perm))) else []) + (
            [("reshape", {"shape": after})] if after else [])
        for k, (op, attrs) in enumerate(steps):
            y = t if k == len(steps) - 1 else fresh(f"{t}_{op}")
            if op == "slice":
                shape = (self.shapes[x][0], attrs["stop"] - attrs["start"])
            else:
                shape = attrs["shape"] if op == "reshape" else tuple(self.shapes[x][p] for p in attrs["perm"])
            self.shapes[y] = tuple(int(d) for d in shape)
            self.nodes.append(Node(name=fresh(f"{base}_{op}"), op=op, inputs=(x,), outputs=(y,),
                                   attrs=frozen_map(attrs)))
            x = y
        del self.moved[t]
        return t

    def _row_wise(self, node: onnx.NodeProto, name: str, convert, **kw) -> bool:
        """A row-wise op (MatMul / Gemm by a constant weight, Add of a per-feature constant) on a moved
        tensor whose rows mix the batch with other axes, as ``nn.MultiheadAttention``'s export holds its
        tokens (``[T, B, E]``, ``[T B, E]``): the op commutes with any permutation of whole rows, so it
        runs on the rows gathered batch first (``[B, R, n]``, in source order: the source itself, or a
        head merge) and its output is again a moved tensor, the rows put back where the export has them.
        False when ``node`` reads no such tensor (the ordinary path converts it)."""
        k = next((i for i, t in enumerate(node.input[:2]) if t and self._const(t) is None), None)
        if k is None or node.input[k] not in self.moved:
            return False
        t = node.input[k]
        ids, b = self.moved[t].index, self.movement_batch
        found = self._source_of(ids)
        if found is None or ids.ndim < 2:
            return False
        src, pos = found
        per = self._id_spans[src] // b
        lead = np.arange(b).reshape(b, *([1] * (ids.ndim - 1)))
        if ids.shape[0] == b and np.array_equal(pos // per, np.broadcast_to(lead, ids.shape)):
            return False  # batch first: an ordinary view
        n = ids.shape[-1]
        rows = ids.reshape(-1, n)
        order = np.argsort(rows[:, 0], kind="stable")
        canon = rows[order]
        if canon.shape[0] % b or not np.array_equal(
                pos.reshape(-1, n)[order] // per,
                np.broadcast_to(np.repeat(np.arange(b), canon.shape[0] // b)[:, None], canon.shape)):
            return False  # rows that mix samples: the ordinary path refuses them
        canon = canon.reshape(b, -1, n)
        names = set(self.shapes) | set(self.moved)
        tmp, y = f"{t}_rows", f"{node.output[0]}_rows"
        while tmp in names:
            tmp += "_"
        while y in names:
            y += "_"
        self.moved[tmp] = Moved(canon, self.moved[t].producer)
        x = self.materialise(tmp, name, node.op_type)
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[k], copy.output[0] = x, y
        convert(copy, name, **kw)
        n_out = self.shapes[y][-1]
        out = np.empty((rows.shape[0], n_out), dtype=np.int64)
        out[order] = self._ids(y, self.shapes[y]).reshape(-1, n_out)
        self.moved[node.output[0]] = Moved(out.reshape(*ids.shape[:-1], n_out), name)
        return True

    def _whole(self, ids: np.ndarray) -> tuple[str, np.ndarray] | None:
        """(IR tensor, positions) when ``ids`` all come from one ordinary IR tensor."""
        found = self._source_of(ids)
        if found is None or found[0] in self.rnns or found[0] in self.cells or found[0] not in self.shapes:
            return None
        return found

    def _data_view(self, ids: np.ndarray):
        """Recognise ``ids`` (batch first) as transpose / slice / concat of IR tensors."""
        b = self.movement_batch
        if ids.ndim < 2 or ids.shape[0] != b:
            return None
        found = self._whole(ids)
        if found is not None:
            src, pos = found
            shape = self.shapes[src]
            if len(shape) != ids.ndim - 1:
                return None
            size = b * int(np.prod(shape, dtype=np.int64))
            ref = np.arange(size).reshape(b, *shape)
            if pos.size == size:
                for perm in itertools.permutations(range(len(shape))):
                    if np.array_equal(np.transpose(ref, (0, *(p + 1 for p in perm))), pos):
                        return "transpose", [src], {"perm": perm}
                return None
            for axis in range(len(shape)):
                lo = int(np.unravel_index(int(pos.reshape(-1)[0]), ref.shape)[axis + 1])
                index = [slice(None)] * ref.ndim
                index[axis + 1] = slice(lo, lo + ids.shape[axis + 1])
                cut = ref[tuple(index)]
                if cut.shape == pos.shape and np.array_equal(cut, pos):
                    return "slice", [src], {"axis": axis, "start": lo, "stop": lo + ids.shape[axis + 1]}
            return None
        # concat: runs of whole tensors along one per-sample axis
        for axis in range(1, ids.ndim):
            sources, start = [], 0
            while start < ids.shape[axis]:
                stop = start + 1
                first = self._whole(np.take(ids, [start], axis=axis))
                if first is None:
                    break
                src = first[0]
                while stop < ids.shape[axis] and (nxt := self._whole(np.take(ids, [stop], axis=axis))) and nxt[0] == src:
                    stop += 1
                part_ids = np.take(ids, range(start, stop), axis=axis)
                part = self._whole(part_ids)
                size = b * int(np.prod(self.shapes[src]))
                if part is not None and part[1].shape[1:] == self.shapes[src] and np.array_equal(
                        part[1].reshape(-1), np.arange(size)):
                    sources.append(src)
                else:  # a contiguous slice of one tensor becomes a slice view feeding the concat
                    view = self._data_view(part_ids)
                    if view is None or view[0] != "slice" or view[2]["axis"] != axis - 1:
                        break
                    sources.append((src, view[2]))
                start = stop
            if start == ids.shape[axis] and len(sources) > 1:
                return "concat", sources, {"axis": axis - 1}
        return None

    def _relu(self, node: onnx.NodeProto, name: str) -> None:
        x = self._data_input(node.input[0], name, "Relu")
        self.elementwise(name, "relu", x, node.output[0])

    def _flatten(self, node: onnx.NodeProto, name: str) -> None:
        if node.input[0] in self.moved:
            self.move(node, name)
            return
        x = self._data_input(node.input[0], name, "Flatten")
        shape = self.shapes[x]
        axis = int(_attrs(node).get("axis", 1))
        rank = len(shape) + 1
        if axis < 0:
            axis += rank
        if axis != 1:
            raise UnsupportedOpError(
                f"node '{name}' (Flatten) has attribute axis={_attrs(node).get('axis')}; only axis=1 "
                "(keep the batch, flatten each sample) is supported"
            )
        out = (_prod(shape),)
        self._emit(name, "reshape", x, node.output[0], out, {"shape": out})

    def _reshape(self, node: onnx.NodeProto, name: str) -> None:
        if node.input[0] in self.moved:
            self.move(node, name)
            return
        x = self._data_input(node.input[0], name, "Reshape")
        in_shape = self.shapes[x]
        size = _prod(in_shape)
        advice = (
            "a Reshape must keep the batch as dimension 0 (e.g. x.reshape(x.shape[0], -1) or "
            "x.flatten(1))"
        )
        sc = self._const(node.input[1])
        batch_value = self.batch
        if sc is not None:
            target_arr = sc.value
        else:
            # Computed at run time, e.g. Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]): evaluate it
            # with a concrete batch, or failing that ask ONNX shape inference for the result.
            target_arr = self._eval_shape_tensor(node.input[1])
            batch_value = self._inference_batch
        if target_arr is not None:
            target = [int(v) for v in np.asarray(target_arr).reshape(-1)]
            out = self._reshape_target(node, name, in_shape, target, batch_value, advice)
        else:
            inferred = self._inferred_shape(node.output[0])
            if (
                inferred is None
                or len(inferred) < 1
                or any(d is None or d <= 0 for d in inferred[1:])
            ):
                raise UnsupportedOpError(
                    f"node '{name}' (Reshape) computes its target shape at run time and aieflow "
                    f"could not resolve it; export with a constant shape ({advice})"
                )
            if inferred[0] != self._inference_batch:
                raise UnsupportedOpError(
                    f"node '{name}' (Reshape) computes a target shape whose first dimension is "
                    f"not the batch; {advice}"
                )
            out = tuple(int(d) for d in inferred[1:])
        if _prod(out) != size or any(d < 0 for d in out):
            raise UnsupportedOpError(
                f"node '{name}' (Reshape) turns per-sample shape {in_shape} into {out}, which "
                f"changes the batch size; {advice}"
            )
        self._emit(name, "reshape", x, node.output[0], out, {"shape": out})

    def _reshape_target(
        self,
        node: onnx.NodeProto,
        name: str,
        in_shape: tuple[int, ...],
        target: list[int],
        batch_value: int | None,
        advice: str,
    ) -> tuple[int, ...]:
        """Per-sample output shape of a Reshape to ``target`` (batch included)."""
        size = _prod(in_shape)
        allowzero = int(_attrs(node).get("allowzero", 0))
        if not target:
            raise UnsupportedOpError(f"node '{name}' (Reshape) reshapes to a scalar; {advice}")
        first = target[0]
        if not (
            first == -1
            or (first == 0 and not allowzero)
            or (batch_value is not None and first == batch_value)
        ):
            raise UnsupportedOpError(
                f"node '{name}' (Reshape) has target shape {tuple(target)}, whose first "
                f"dimension {first} is not the batch; {advice}"
            )
        rest = []
        for i, d in enumerate(target[1:], start=1):
            if d == 0 and not allowzero:
                if i - 1 >= len(in_shape):
                    raise ModelError(
                        f"node '{name}' (Reshape): 0 at dimension {i} has no input dimension to copy"
                    )
                d = in_shape[i - 1]
            rest.append(d)
        if rest.count(-1) > (0 if first == -1 else 1):
            raise UnsupportedOpError(
                f"node '{name}' (Reshape) has target shape {tuple(target)} with more than one "
                f"inferred dimension; {advice}"
            )
        if -1 in rest:
            known = _prod([d for d in rest if d != -1])
            if known == 0 or size % known:
                raise ModelError(
                    f"node '{name}' (Reshape) cannot reshape {in_shape} to {tuple(target)}"
                )
            rest[rest.index(-1)] = size // known
        return tuple(rest)

    def _eval_shape_tensor(self, t: str) -> np.ndarray | None:
        """Value of a small integer tensor computed from tensor shapes, or None if unknown.

        Covers what exporters emit around ``x.view(x.size(0), -1)``: Shape, Gather, Unsqueeze,
        Squeeze, Concat, Slice, Cast, Identity and integer arithmetic, with the batch taken as
        :attr:`_inference_batch`.
        """
        if t in self._shape_values:
            return self._shape_values[t]
        value: np.ndarray | None = None
        c = self._const(t)
        if c is not None:
            value = np.asarray(c.value)
        elif t in self._producer:
            try:
                value = self._eval_shape_node(self.g.node[self._producer[t]])
            except (ValueError, IndexError, TypeError):
                value = None
        self._shape_values[t] = value
        return value

    def _eval_shape_node(self, node: onnx.NodeProto) -> np.ndarray | None:
        op, attrs = node.op_type, _attrs(node)
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            return None
        if op == "Shape":
            src = self.canon(node.input[0])
            if src not in self.shapes:
                return None
            full = np.array([self._inference_batch, *self.shapes[src]], dtype=np.int64)
            start, end = attrs.get("start", 0), attrs.get("end")
            return full[start:end]
        ins = []
        for i in node.input:
            if not i:
                ins.append(None)
                continue
            v = self._eval_shape_tensor(i)
            if v is None:
                return None
            ins.append(v)

        def axes_of(k: int):
            if "axes" in attrs:
                return list(attrs["axes"])
            return (
                [int(a) for a in ins[k].reshape(-1)]
                if len(ins) > k and ins[k] is not None
                else None
            )

        if op == "Identity":
            return ins[0]
        if op == "Cast":
            return ins[0].astype(np.int64) if attrs.get("to") in (6, 7) else None
        if op == "Gather":
            return np.take(ins[0], ins[1].astype(np.int64), axis=attrs.get("axis", 0))
        if op == "Unsqueeze":
            out = ins[0]
            axes = axes_of(1)
            rank = out.ndim + len(axes)
            for a in sorted(a + rank if a < 0 else a for a in axes):
                out = np.expand_dims(out, a)
            return out
        if op == "Squeeze":
            axes = axes_of(1)
            return np.squeeze(ins[0], axis=tuple(axes) if axes is not None else None)
        if op == "Concat":
            return np.concatenate([np.atleast_1d(v) for v in ins], axis=attrs.get("axis", 0))
        if op == "Slice":
            if "starts" in attrs:  # opset < 10
                starts, ends = attrs["starts"], attrs["ends"]
                axes, steps = attrs.get("axes"), None
            else:
                starts, ends = ins[1].tolist(), ins[2].tolist()
                axes = ins[3].tolist() if len(ins) > 3 and ins[3] is not None else None
                steps = ins[4].tolist() if len(ins) > 4 and ins[4] is not None else None
            if ins[0].ndim != 1 or (axes not in (None, [0], [-1])):
                return None
            step = steps[0] if steps else 1
            return ins[0][slice(int(starts[0]), int(ends[0]), int(step))]
        if op in ("Mul", "Add", "Sub", "Div"):
            a, b = (v.astype(np.int64) for v in ins)
            if op == "Div":
                return np.trunc(a / b).astype(np.int64) if np.all(b != 0) else None
            return {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract}[op](a, b)
        if op == "ReduceProd":
            keep = attrs.get("keepdims", 1)
            return np.prod(ins[0], keepdims=bool(keep)).astype(np.int64)
        return None

    def _passthrough(self, node: onnx.NodeProto, name: str) -> None:
        if node.op_type == "Dropout":
            if len(node.input) > 2 and node.input[2]:
                mode = self._const(node.input[2])
                if mode is None or bool(np.asarray(mode.value).reshape(-1)[0]):
                    raise UnsupportedOpError(
                        f"node '{name}' (Dropout) runs in training mode; export the model in eval mode"
                    )
            if len(node.output) > 1 and node.output[1]:
                used = any(node.output[1] in n.input for n in self.g.node) or any(
                    o.name == node.output[1] for o in self.g.output
                )
                if used:
                    raise UnsupportedOpError(f"node '{name}' (Dropout): its mask output is used")
        if node.input[0] in self.moved:
            self.moved[node.output[0]] = self.moved[node.input[0]]
            return
        x = self._data_input(node.input[0], name, node.op_type)
        self.alias[node.output[0]] = x

    def _quantize(self, node: onnx.NodeProto, name: str) -> None:
        attrs = _check_qdq_attrs(node, name)
        if not all(self._is_const(t) for t in node.input[1:]):
            raise UnsupportedOpError(
                f"node '{name}' (QuantizeLinear) has a computed scale or zero point"
            )
        try:
            x = self._data_input(node.input[0], name, "QuantizeLinear")
        except UnsupportedOpError as exc:
            if node.input[0] not in self.moved:
                raise
            raise UnsupportedOpError(
                f"node '{name}' (QuantizeLinear) quantises '{node.input[0]}', a view that mixes the batch with "
                "other axes (e.g. the [T, N, E] layout an nn.MultiheadAttention export computes in); quantised "
                f"(QDQ) nodes on such views are not imported ({exc.message})",
                hint="export the float model and compile it with a precision (int8 / int16) and calibration "
                "data: aieflow quantises attention itself (docs/attention.md)") from None
        scale = self._const(node.input[1])
        zp = self._const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        bits = _q_output_bits(node, name, zp, attrs)
        qtype = _activation_qtype(name, "QuantizeLinear", scale.value, zp, bits)
        self.pending_q[node.output[0]] = _PendingQ(name, x, qtype, bits)

    def _dequantize(self, node: onnx.NodeProto, name: str) -> None:
        _check_qdq_attrs(node, name)
        if not all(self._is_const(t) for t in node.input[1:]):
            raise UnsupportedOpError(
                f"node '{name}' (DequantizeLinear) has a computed scale or zero point"
            )
        src = self.canon(node.input[0])
        q = self.pending_q.get(src)
        if q is None:
            raise UnsupportedOpError(
                f"node '{name}' (DequantizeLinear) dequantises '{node.input[0]}', which is not "
                "produced by a QuantizeLinear; only QuantizeLinear -> DequantizeLinear pairs on "
                "float tensors are supported"
            )
        scale = self._const(node.input[1])
        zp = self._const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        dtype = _activation_qtype(name, "DequantizeLinear", scale.value, zp, q.zero_dtype)
        same = (dtype.frac == q.qtype.frac if isinstance(dtype, FixedType) and isinstance(q.qtype, FixedType)
                else dtype == q.qtype)  # a QCDQ Clip may have narrowed the Q's saturation: compare the grid
        if not same:
            raise UnsupportedOpError(
                f"node '{name}' (DequantizeLinear) uses {dtype} but its QuantizeLinear "
                f"'{q.node}' uses {q.qtype}; the pair must share one scale and zero point"
            )
        previous = self.hint_tensors.get(q.source)
        if previous is not None and previous != q.qtype:
            raise UnsupportedOpError(
                f"tensor '{q.source}' is quantised twice with different types ({previous} and "
                f"{q.qtype}, the second by '{q.node}'); give each tensor a single QuantizeLinear"
            )
        self.hint_tensors[q.source] = q.qtype
        self.alias[node.output[0]] = q.source

    # -- driver ---------------------------------------------------------------------------------

    def run(self) -> ImportedModel:
        self.g = rewrite_patterns(self.g)
        self._assign_names()
        graph_input = self._read_inputs()
        todo: list[int] = []
        for i, node in enumerate(self.g.node):
            name = self._names[i]
            if node.domain in QONNX_DOMAINS and node.op_type not in QONNX_OPS:
                raise UnsupportedOpError(
                    f"node '{name}' has op type '{node.op_type}' from the QONNX domain '{node.domain}', which "
                    f"aieflow does not support; it reads the QONNX ops {', '.join(QONNX_OPS)}",
                    hint="export the model from Brevitas with export_qonnx (FINN's streamlined ops such as "
                    "MultiThreshold are not read)")
            if node.domain not in (*_QDQ_DOMAINS, *QONNX_DOMAINS) or (
                node.domain == "com.microsoft"
                and node.op_type not in ("QuantizeLinear", "DequantizeLinear")
            ):
                raise UnsupportedOpError(
                    f"node '{name}' has op type '{node.op_type}' from domain '{node.domain}', which "
                    f"aieflow does not support; supported ONNX ops: {', '.join(SUPPORTED_ONNX_OPS)}"
                )
            if node.op_type in _FOLDABLE and (
                node.op_type == "Constant" or all(self._is_const(t) for t in node.input)
            ):
                self._fold(node, name)
            else:
                todo.append(i)
        live = self._live_nodes(todo)
        shape_only = self._shape_only(todo)
        converters = {
            "Gemm": self._gemm,
            "MatMul": self._matmul,
            "Add": self._add,
            "LayerNormalization": self._layernorm,
            "Split": self._split,
            "Relu": self._relu,
            "Flatten": self._flatten,
            "Reshape": self._reshape,
            "Identity": self._passthrough,
            "Dropout": self._passthrough,
            "QuantizeLinear": self._quantize,
            "DequantizeLinear": self._dequantize,
            **dict.fromkeys(MOVEMENT_OPS, self.move),
            "Concat": self._concat_const,
            "Gather": self._gather_token,
            **dict.fromkeys(RECURRENT_OPS, self.recurrent),
            **self.conv_converters(),
            **self.activation_converters(),
            **self.quant_converters(),  # Clip of QuantizeLinear codes first, then as an activation
        }
        for i in todo:  # control flow first: what feeds a Loop would otherwise be reported instead
            node = self.g.node[i]
            if i in live and node.op_type in ("Loop", "Scan", "If"):
                raise UnsupportedOpError(
                    f"node '{self._names[i]}' is an ONNX {node.op_type} (control flow), which aieflow does not "
                    "import; recurrent layers must arrive as ONNX GRU / LSTM nodes",
                    hint="tf2onnx 1.17 exports a Keras 3 GRU layer as a Loop (its LSTM as an LSTM node): export "
                    "the model from PyTorch, or replace the loop by an ONNX GRU node (linear_before_reset=1 for "
                    "Keras' default reset_after=True) holding the layer's weights",
                )
        pools = onnx_masked_mean.find(self, [i for i in todo if i in live and i not in shape_only])
        pooled = {k for mm in pools.values() for k in mm.nodes}
        try:
            for i in todo:
                if i not in live or i in shape_only:
                    continue
                node = self.g.node[i]
                name = self._names[i]
                if i in pools:  # a masked mean pooling over the tokens (onnx_masked_mean.py), at its Div
                    self._masked_mean(pools[i], node, name)
                    continue
                if i in pooled:
                    continue
                self._fold_shape_inputs(node, name, shape_only)
                if self.reads_mask(node):  # the run-time key padding mask (onnx_mask.py)
                    self.mask_node(node, name)
                    continue
                conv = converters.get(node.op_type)
                if conv is None:
                    raise UnsupportedOpError(
                        f"node '{name}' has op type '{node.op_type}', which aieflow does not support; "
                        f"supported ONNX ops: {', '.join(SUPPORTED_ONNX_OPS)}"
                    )
                conv(node, name)
        except UnsupportedOpError as exc:
            raise self._mha_refusal(exc) from None
        outputs = []
        for o in self.g.output:
            if o.name in self.consts:
                raise UnsupportedOpError(
                    f"graph output '{o.name}' is a constant; nothing to compute"
                )
            outputs.append(self._data_input(o.name, "<graph output>", "output"))
        self.finish_recurrent()
        self.check_truncs()
        nodes = sequence.simplify(self.nodes, outputs, self.unlifts, self.shapes)
        nodes = batchnorm.fold(nodes, self.shapes, outputs, quantised_params={n for n, _ in self.hint_params},
                               quantised_tensors=set(self.hint_tensors))
        nodes = attention.prepare(nodes, self.shapes, outputs)
        nodes = _with_module_aliases(nodes, module_paths(self.proto))
        tensors = {
            t: Tensor(t, s)
            for t, s in self.shapes.items()
            if t in (graph_input, self.mask_input) or any(t in n.outputs for n in nodes)
        }
        inputs = (graph_input,) if self.mask_input is None else (graph_input, self.mask_input)
        if self.mask_input is not None and not any(self.mask_input in n.inputs for n in nodes):
            raise UnsupportedOpError(
                f"the model's second graph input '{self.mask_input}' is not read as a key padding mask by any "
                "Softmax or masked mean pooling; aieflow takes a second input only as that", hint="see "
                "docs/attention.md, 'Run-time key padding masks'")
        graph = Graph(
            nodes=tuple(nodes),
            tensors=tensors,
            inputs=inputs,
            outputs=tuple(outputs),
            name=self.g.name or "model",
        )
        graph.validate()
        hints = QuantHints(tensors=self.hint_tensors, params=self.hint_params)
        return ImportedModel(graph=graph, hints=hints, source="onnx")


def import_onnx(
    model: str | os.PathLike | onnx.ModelProto,
    example_input_shape: tuple[int, ...] | None = None,
) -> ImportedModel:
    """Import an ONNX model (a path or a loaded ``ModelProto``) as a float IR graph plus QDQ hints.

    ``example_input_shape`` fixes input dimensions the model leaves dynamic; give it with the batch
    dimension (like ``x.shape``) or, when the model input has a known rank, without it.
    """
    proto, label = _load(model)
    return _OnnxImporter(proto, label, example_input_shape).run()
