"""``aieflow config MODEL``: a config skeleton to edit, like hls4ml's ``config_from_*_model``.

The skeleton is the config that compiles to exactly the design ``aieflow compile`` builds without
one: the user's own keys (``--config``), ``batch`` (and ``replicas`` for a Dense chain), and with
``granularity="name"`` one entry per layer holding its ``precision`` and its mapping keys
(``parallelism: {cas_len, cas_num}`` of a Dense layer, ``mapping`` of a convolution or a GRU /
LSTM, as ``aieflow explore --save-config`` writes them: :func:`aieflow.points.point_config`).
Every key it writes is one the compiler reads for that layer, so editing any of them changes the
design.  The numeric types each layer gets (from the model's quantisation or from calibration) are
written as comments; uncommenting one fixes that type.

Layers are keyed by the PyTorch module path when the model is a torch module or an export of one
(``fc1``, ``blk.0``: the ONNX importer gives exported layers their module path as an alias), so
the same file fits a module and its ONNX export; otherwise by the node name the compiler uses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

GRANULARITIES = ("name", "model")
# layer ops whose quantiser reads the layer's 'precision' (ops/*.py quantise)
PRECISION_OPS = ("dense", "conv2d", "gru", "lstm", "add", "activation", "layernorm", "matmul")


@dataclass(frozen=True)
class Skeleton:
    """A config (plain dict, as YAML / JSON holds it); per layer key, a note on the layer and the
    numeric types it gets (YAML comments: uncommented, a type is fixed)."""

    config: dict[str, Any]
    notes: Mapping[str, str] = field(default_factory=dict)
    types: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(self.config, indent=2) + "\n"

    def to_yaml(self, header: str = "") -> str:
        import yaml

        def dump(obj: Any) -> str:
            return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=1000)

        lines = [f"# {line}" if line else "#" for line in header.splitlines()]
        top = {k: v for k, v in self.config.items() if k != "layers"}
        if top:
            lines.append(dump(top).rstrip("\n"))
        layers = self.config.get("layers")
        if layers:
            lines.append("layers:")
            for key, entry in layers.items():
                if key in self.notes:
                    lines.append(f"  # {self.notes[key]}")
                block = dump({key: entry}).rstrip("\n")
                lines.extend(f"  {line}" for line in block.splitlines())
                lines.extend(f"    # {k}: {v}" for k, v in self.types.get(key, {}).items())
        return "\n".join(lines) + "\n"


def _layer_keys(graph, model: Any) -> dict[str, str]:
    """Node name -> the key its settings go under: the module path the importer gave it as an alias
    (a torch module's layers are named by it already) when no other layer answers to that name, else
    the node's name."""
    paths: set[str] = set()
    proto = _onnx_proto(model)
    if proto is not None:
        from .frontends.onnx_frontend import module_paths

        paths = set(module_paths(proto).values())
    count: dict[str, int] = {}
    for n in graph.nodes:
        for name in {n.name, *n.aliases}:
            count[name] = count.get(name, 0) + 1
    keys = {}
    for n in graph.nodes:
        key = next((a for a in n.aliases if a in paths and count[a] == 1), n.name)
        keys[n.name] = key
    return keys


def _onnx_proto(model: Any):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, str | os.PathLike):
        try:
            return onnx.load(os.fspath(model), load_external_data=False)
        except Exception:  # noqa: BLE001 - the import already read it; a second read failing only loses the keys
            return None
    return None


def _note(node) -> str:
    """What a layer is (no text from the model file: keys are written by YAML's own quoting,
    comments hold only aieflow's words and numbers)."""
    attrs = node.attrs
    if "in_features" in attrs and "out_features" in attrs:
        return f"{node.op} {attrs['in_features']} -> {attrs['out_features']}"
    return node.op


def _types(node, first: bool) -> dict[str, str]:
    """The types a Dense layer got, under the config keys that fix them (``input`` is read for the
    first layer only: later layers take their producer's output type)."""
    from .ops.dense import DenseTypes

    t = node.types
    if node.op != "dense" or not isinstance(t, DenseTypes):
        return {}
    keys = [k for k in ("input", "weight", "bias", "output") if getattr(t, k) is not None and (k != "input" or first)]
    return {k: getattr(t, k).to_string() for k in keys}


def config_skeleton(
    model: Any,
    device: str = "vek280",
    example_input: Any = None,
    config: Mapping[str, Any] | None = None,
    calibration: Any = None,
    granularity: str = "name",
) -> Skeleton:
    """The config skeleton of ``model`` (an ONNX path / ModelProto or a torch module, as
    :func:`aieflow.compile` takes): see the module docstring."""
    from .api import _state, explore
    from .config import Config, parse_config
    from .pipeline import front_end
    from .points import point_config

    if granularity not in GRANULARITIES:
        raise ConfigError(f"granularity {granularity!r}; choose one of {', '.join(GRANULARITIES)}",
                          hint="name: one entry per layer; model: the model-wide keys only")
    base: Config = parse_config(config)
    state = front_end(_state(model, device, example_input, base, calibration))
    graph = state.graph
    ex = explore(model, device=device, example_input=example_input, config=base, calibration=calibration)
    raw = point_config(ex, ex.chosen, base)
    raw.setdefault("precision", base.precision)
    raw = {"precision": raw.pop("precision"), **raw}
    if granularity == "model":
        raw.pop("layers", None)
        return Skeleton(raw)
    keys = _layer_keys(graph, model)
    by_name = {name: n for n in graph.nodes for name in (n.name, *n.aliases)}
    given = dict(raw.pop("layers", {}))
    layers: dict[str, dict[str, Any]] = {}
    notes: dict[str, str] = {}
    types: dict[str, dict[str, str]] = {}
    first = graph.consumers(graph.inputs[0])
    for n in graph.nodes:  # in graph order: every layer whose settings the compiler reads
        entry: dict[str, Any] = {}
        for name in (n.name, *n.aliases):
            if name in given:
                entry.update(given.pop(name))
                key = name if name in base.layers else keys[n.name]
                break
        else:
            key = keys[n.name]
        if n.op in PRECISION_OPS:
            entry = {"precision": base.layer(n.name, *n.aliases).precision or base.precision, **entry}
        if entry:
            layers[key] = entry
            notes[key] = _note(n)
            types[key] = _types(n, bool(first) and n is first[0])
    for name, entry in given.items():  # not a layer of the fused graph (cannot happen: point_config names them)
        layers[name if name not in by_name else keys[by_name[name].name]] = entry
    if layers:
        raw["layers"] = layers
    return Skeleton(raw, notes, types)
