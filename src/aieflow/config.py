"""User configuration: one schema for the Python dict, YAML and JSON forms.

The shape of a config (its keys, the types of their values) is the JSON Schema
``schema/config.schema.json``, checked with ``jsonschema`` (:func:`check_schema`): an unknown key
is an error with a "did you mean" suggestion (a typo must not silently fall back to a default), a
wrong type names the key's path (``layers.fc0.parallelism.cas_len must be a positive integer, got
0``).  What a schema cannot say (precision names, numeric type strings, targets, batch limits) is
checked by the parsers below, so that later passes can trust every value.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import ConfigError, did_you_mean
from .ir import frozen_map
from .numerics.types import MAX_FRAC_BITS, MAX_INT_BITS, FixedType, NumericType, parse_type
from .ops.activations import activation_to_json, parse_activations

# precision name -> (activation kind, weight kind)
PRECISIONS: Mapping[str, tuple[str, str]] = frozen_map(
    {
        "int8": ("i8", "i8"),
        "int16": ("i16", "i16"),
        "a16w8": ("i16", "i8"),
        "a8w4": ("i8", "i4"),  # 8-bit activations, 4-bit weights (AIE-ML / AIE-MLv2 Dense layers)
        "fp32": ("fp32", "fp32"),
        "bf16": ("bf16", "bf16"),
        "fp16": ("fp16", "fp16"),  # IEEE binary16 (AIE-MLv2's float16), Dense chains only (options.py)
    }
)
_PRECISION_ALIASES = {"i8": "int8", "i16": "int16", "int16x8": "a16w8", "i16xi8": "a16w8", "float32": "fp32", "float16": "fp16", "half": "fp16",
                      "int8x4": "a8w4", "i8xi4": "a8w4", "w4a8": "a8w4"}
TYPE_KEYS = ("input", "weight", "bias", "output")
RECURRENT_TYPE_KEYS = ("recurrent_weight", "recurrent_bias", "accum")  # GRU / LSTM only
WEIGHTS_MODES = ("auto", "resident", "streamed")
# where an activation / softmax right after a Dense layer runs (passes/posts.py)
POSTS_MODES = ("auto", "fused", "standalone")
OBJECTIVES = ("resources", "latency", "throughput")
MAX_BATCH = 4096  # samples per graph iteration
MAX_AUTO_BATCH = 1024  # largest batch ``batch: auto`` tries
_BUDGETS = {"tiles": "max_tiles", "latency_ns": "max_latency_ns", "interval_ns": "max_interval_ns"}


def normalise_precision(value: Any, where: str) -> str:
    name = str(value).lower()
    name = _PRECISION_ALIASES.get(name, name)
    if name not in PRECISIONS and "<" in name:  # a type, as hls4ml's Precision is written
        raise ConfigError(
            f"{where}: {value!r} is a numeric type; 'precision' takes a preset ({', '.join(PRECISIONS)})",
            hint="give types per tensor instead: layers.<name>.input / .weight / .bias / .output (hls4ml's "
            "'ap_fixed<16,6,AP_RND_CONV,AP_SAT>' spelling is accepted there)",
        )
    if name not in PRECISIONS:
        raise ConfigError(
            f"{where}: unknown precision {value!r}; choose one of {', '.join(PRECISIONS)}"
        )
    return name


@dataclass(frozen=True)
class LayerConfig:
    """Per-layer overrides, keyed in :class:`Config` by the model's layer name."""

    precision: str | None = None
    types: Mapping[str, NumericType] = field(default_factory=frozen_map)
    cas_len: int | None = None
    cas_num: int | None = None
    placement: tuple[int, int] | None = None  # (column, row) of the layer's bottom-left tile
    # sigmoid / tanh implementations of recurrent layers (ops/activations.py), by function name
    activations: Mapping[str, Any] = field(default_factory=frozen_map)
    # CNN mapping directives (raw mapping; aieflow.cnn.directives validates them)
    mapping: Mapping[str, Any] = field(default_factory=frozen_map)
    # Dense weights on chip (resident), from DDR through a GEMM design (streamed), or the planner's
    # choice (auto: resident when it fits)
    weights: str = "auto"


@dataclass(frozen=True)
class Target:
    """What the planner optimises: an objective and optional budgets (all must hold)."""

    objective: str = "resources"  # fewest tiles | lowest latency | lowest interval
    max_tiles: int | None = None
    max_latency_ns: float | None = None
    max_interval_ns: float | None = None

    @property
    def searched(self) -> bool:
        """False for the default (fewest tiles, no budget): the planner's own choice is optimal."""
        return self != Target()

    def to_string(self) -> str:
        parts = [self.objective]
        for key, attr in _BUDGETS.items():
            v = getattr(self, attr)
            if v is not None:
                parts.append(f"{key} <= {v:g}")
        return ", ".join(parts)


def parse_target(raw: Any) -> Target:
    """``latency`` | ``throughput`` | ``resources`` | ``"latency_ns <= 2000"`` | ``"tiles <= 64"``,
    or a list of those (one objective at most).  A budget alone minimises tiles, except a tiles
    budget alone, which minimises latency."""
    items = raw if isinstance(raw, list | tuple) else [p for p in str(raw).split(",")]
    objective = None
    budgets: dict[str, float] = {}
    for item in items:
        text = str(item).strip()
        if text.lower() in OBJECTIVES:
            if objective is not None:
                raise ConfigError(f"target: two objectives ({objective}, {text}); give one")
            objective = text.lower()
            continue
        key, sep, value = text.partition("<=")
        key = key.strip()
        if not sep or key not in _BUDGETS:
            raise ConfigError(
                f"target: cannot read {text!r}",
                hint=f"use one of {', '.join(OBJECTIVES)} and/or budgets like 'latency_ns <= 2000', "
                "'interval_ns <= 500', 'tiles <= 64'",
            )
        try:
            v = float(value)
        except ValueError:
            raise ConfigError(f"target: {text!r} needs a number after '<='") from None
        if v <= 0:
            raise ConfigError(f"target: {text!r} must be positive")
        budgets[_BUDGETS[key]] = v
    if objective is None:
        objective = "latency" if set(budgets) == {"max_tiles"} else "resources"
    if "max_tiles" in budgets:
        budgets["max_tiles"] = int(budgets["max_tiles"])
    return Target(objective, **budgets)


@dataclass(frozen=True)
class Config:
    precision: str = "int8"
    batch: int = 8
    layers: Mapping[str, LayerConfig] = field(default_factory=frozen_map)
    target: Target = field(default_factory=Target)
    # ``batch: auto`` or ``batch: [8, 32]``: the search chooses the batch too ("auto": every
    # power-of-two multiple of the layers' mmul row blocks up to MAX_AUTO_BATCH).  None: fixed.
    batch_search: str | tuple[int, ...] | None = None
    activations: Mapping[str, Any] = field(default_factory=frozen_map)  # default for every layer
    # Copies of the whole design side by side on the array, each on its own batches.  None: the
    # search decides (more than one only for a throughput objective); a number fixes it.
    replicas: int | None = None
    cnn: Mapping[str, Any] = field(default_factory=frozen_map)  # CNN design settings (aieflow.cnn)
    # an activation / softmax right after a Dense layer: in its kernel ("fused"), its own kernel
    # ("standalone", the DAG mapping) or chosen by the target ("auto"; passes/posts.py)
    posts: str = "auto"
    # how float Dense weights / biases become codes: "exact" (the float value rounded by the type's
    # mode) or "hls4ml" (decimal text with the type's fractional bits of decimals, then rounded, as
    # hls4ml's C simulation reads its weight files: numerics/fixed.hls4ml_text_values)
    weights_rounding: str = "exact"
    # the top-level keys the user wrote (options.refuse_unsupported names those a design kind ignores)
    given: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def targeted(self) -> bool:
        """Whether the user gave a target (``resources`` too, which then means the fewest tiles the
        search finds, not the planner's default choice) or budgets."""
        return "target" in self.given or self.target.searched

    @property
    def searched(self) -> bool:
        """Whether the search pass has anything to choose (a target, or the batch)."""
        return self.targeted or self.batch_search is not None

    def layer(self, *names: str) -> LayerConfig:
        for n in names:
            if n in self.layers:
                return self.layers[n]
        return LayerConfig()

    def to_json(self) -> dict:
        batch: Any = self.batch if self.batch_search is None else self.batch_search
        out: dict[str, Any] = {
            "precision": self.precision,
            "batch": list(batch) if isinstance(batch, tuple) else batch,
            "layers": {},
        }
        if self.targeted:
            out["target"] = self.target.to_string()
        if self.replicas is not None:
            out["replicas"] = self.replicas
        if self.activations:
            out["activations"] = {k: activation_to_json(a) for k, a in self.activations.items()}
        for name, lc in self.layers.items():
            d: dict[str, Any] = {}
            if lc.precision:
                d["precision"] = lc.precision
            for k, t in lc.types.items():
                d[k] = t.to_string()
            if lc.cas_len or lc.cas_num:
                d["parallelism"] = {k: v for k, v in (("cas_len", lc.cas_len), ("cas_num", lc.cas_num)) if v}
            if lc.placement:
                d["placement"] = list(lc.placement)
            if lc.activations:
                d["activations"] = {k: activation_to_json(a) for k, a in lc.activations.items()}
            if lc.mapping:
                d["mapping"] = _plain(lc.mapping)
            if lc.weights != "auto":
                d["weights"] = lc.weights
            out["layers"][name] = d
        if self.cnn:
            out["cnn"] = _plain(self.cnn)
        if self.posts != "auto":
            out["posts"] = self.posts
        if self.weights_rounding != "exact":
            out["weights_rounding"] = self.weights_rounding
        return out


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where} must be a positive integer, got {value!r}")
    return value


def _parse_layer(name: str, raw: Mapping[str, Any]) -> LayerConfig:
    """One layer's settings, their shape checked by the schema already."""
    where = f"layers.{name}"
    precision = normalise_precision(raw["precision"], where) if "precision" in raw else None
    types: dict[str, NumericType] = {}
    for key in (*TYPE_KEYS, *RECURRENT_TYPE_KEYS):
        if key in raw:
            try:
                types[key] = parse_type(raw[key])
            except ConfigError as e:
                raise ConfigError(f"{where}.{key}: {e}") from None
            t = types[key]
            if isinstance(t, FixedType) and (t.int_bits > MAX_INT_BITS or t.frac > MAX_FRAC_BITS):
                raise ConfigError(
                    f"{where}.{key}: numeric type {raw[key]!r} has {t.int_bits} integer and {t.frac} fractional "
                    f"bits; at most {MAX_INT_BITS} integer and {MAX_FRAC_BITS} fractional bits (its values must "
                    "be normal float32 numbers)"
                )
            if key in ("weight", "bias", "recurrent_weight", "recurrent_bias") and isinstance(types[key], FixedType) and not types[key].signed:
                raise ConfigError(f"{where}.{key}: unsigned weights/biases are not supported; use a signed type")
    cas_len = cas_num = None
    if "parallelism" in raw:
        par = raw["parallelism"]
        if "cas_len" in par:
            cas_len = _positive_int(par["cas_len"], f"{where}.parallelism.cas_len")
        if "cas_num" in par:
            cas_num = _positive_int(par["cas_num"], f"{where}.parallelism.cas_num")
    placement = None
    if "placement" in raw:
        p = raw["placement"]
        if isinstance(p, Mapping):
            p = (p.get("column", p.get("col")), p.get("row"))
        placement = (int(p[0]), int(p[1]))
    acts = parse_activations(raw["activations"], f"{where}.activations") if "activations" in raw else {}
    mapping = raw.get("mapping") or {}
    weights = str(raw.get("weights", "auto")).lower()
    if weights not in WEIGHTS_MODES:
        raise ConfigError(f"{where}.weights: {raw['weights']!r}; choose one of {', '.join(WEIGHTS_MODES)}")
    return LayerConfig(precision, frozen_map(types), cas_len, cas_num, placement, frozen_map(acts),
                       frozen_map(dict(mapping)), weights)


def _plain(m: Any) -> Any:
    """A (possibly frozen) mapping of directives as plain JSON-able dicts / lists."""
    if isinstance(m, Mapping):
        return {str(k): _plain(v) for k, v in m.items()}
    if isinstance(m, list | tuple):
        return [_plain(v) for v in m]
    return m


def parse_config(raw: Mapping[str, Any] | Config | None) -> Config:
    if raw is None:
        return Config()
    if isinstance(raw, Config):
        return raw
    if not isinstance(raw, Mapping):
        raise ConfigError(f"config must be a mapping (dict / YAML / JSON object), got {type(raw).__name__}")
    check_schema(raw)
    precision = normalise_precision(raw.get("precision", "int8"), "precision")
    batch, batch_search = _parse_batch(raw.get("batch", 8))
    layers_raw = raw.get("layers") or {}
    layers = {str(k): _parse_layer(str(k), v) for k, v in layers_raw.items()}
    target = parse_target(raw["target"]) if raw.get("target") is not None else Target()
    acts = parse_activations(raw["activations"]) if raw.get("activations") is not None else {}
    replicas = raw.get("replicas")
    if replicas == "auto":
        replicas = None
    elif replicas is not None:
        replicas = _positive_int(replicas, "replicas")
    cnn = raw.get("cnn") or {}
    posts = str(raw.get("posts") or "auto")
    weights_rounding = str(raw.get("weights_rounding") or "exact")
    return Config(precision, batch, frozen_map(layers), target, batch_search, frozen_map(acts), replicas,
                  cnn=frozen_map(dict(cnn)), posts=posts, weights_rounding=weights_rounding, given=frozenset(k for k, v in raw.items() if v is not None))


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a config: ``schema/config.schema.json``."""
    return json.loads(resources.files("aieflow").joinpath("schema/config.schema.json").read_text())


@cache
def _validator() -> Any:
    """The schema's validator, with JSON's integers only (Python's ``True`` and ``2.0`` are not
    layer counts; jsonschema would take ``2.0`` for an integer)."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine("integer", lambda _, v: isinstance(v, int) and not isinstance(v, bool))
    return jsonschema.validators.extend(base, type_checker=checker)(config_schema())


def check_schema(raw: Mapping[str, Any]) -> None:
    """Raise the :class:`ConfigError` of the first problem the schema finds in ``raw`` (the one
    nearest the top: an unknown top-level key before a wrong value deeper down): an unknown key
    with the allowed ones and a "did you mean" hint, a wrong value with its key's path, what it
    must be and what it is."""
    errors = list(_validator().iter_errors(_plain(raw)))
    if not errors:
        return
    e = min(errors, key=lambda e: (len(e.absolute_path), [str(k) for k in e.absolute_path],
                                   e.validator != "additionalProperties"))
    path = ".".join(str(k) for k in e.absolute_path)
    if e.validator == "additionalProperties":
        allowed = sorted(e.schema.get("properties", {}))
        unknown = [k for k in e.instance if k not in allowed]
        text = f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}"
        raise ConfigError(f"{path}: {text}" if path else f"unknown config key(s) {text[len('unknown key(s) '):]}",
                          hint=did_you_mean(unknown, allowed))
    what = e.schema.get("description") if isinstance(e.schema, Mapping) else None
    got = repr(e.instance)
    got = got if len(got) <= 80 else got[:77] + "..."
    if what is None:
        raise ConfigError(f"{path or 'config'}: {e.message}")
    raise ConfigError(f"{path or 'config'} must be {what}, got {got}")


def _one_batch(value: Any, where: str = "batch") -> int:
    batch = _positive_int(value, where)
    if batch > MAX_BATCH:
        raise ConfigError(f"{where} {batch} is larger than {MAX_BATCH} samples per graph iteration; use a smaller batch")
    return batch


def _parse_batch(raw: Any) -> tuple[int, str | tuple[int, ...] | None]:
    """``8`` (fixed), ``auto`` or a list of candidates (the search picks one for the target)."""
    if isinstance(raw, str) and raw.strip().lower() == "auto":
        return 8, "auto"
    if isinstance(raw, str) and raw.strip().isdigit():
        return _one_batch(int(raw)), None
    if isinstance(raw, list | tuple):
        if not raw:
            raise ConfigError("batch: an empty list of candidates; give at least one batch size or 'auto'")
        options = tuple(sorted({_one_batch(v, "batch candidate") for v in raw}))
        return (options[0], None) if len(options) == 1 else (options[0], options)
    return _one_batch(raw), None


MAX_CONFIG_BYTES = 1 << 20  # a config file is a few KiB; refuse anything near a megabyte


def _yaml_loader():
    """PyYAML's safe loader with anchors and aliases refused: aliases are what a "billion laughs"
    file uses to expand a few lines into gigabytes, and a config needs none."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                mark = event.start_mark
                raise ConfigError(
                    f"line {mark.line + 1}: YAML anchors and aliases "
                    f"(&{event.anchor} / *{event.anchor}) are not allowed",
                    hint="write the repeated values out in full",
                )
            return super().compose_node(parent, index)

    return NoAliasLoader


def load_config_file(path: str | os.PathLike) -> Config:
    return parse_config(read_mapping_file(path))


def read_mapping_file(path: str | os.PathLike, what: str = "config file") -> Any:
    """The contents of a YAML (JSON for ``.json``) file of at most :data:`MAX_CONFIG_BYTES`, UTF-8,
    without YAML anchors or aliases; every problem an error naming the file (``what``: its role)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"{what} '{p}' is {size:,} bytes; a {what} is at most {MAX_CONFIG_BYTES:,} bytes",
                hint="is this the right file?",
            )
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read {what} '{p}': {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{what} '{p}' is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r})",
            hint="save the file as UTF-8",
        ) from None
    try:
        if p.suffix.lower() == ".json":
            return json.loads(text)
        import yaml

        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except ConfigError as e:
        raise ConfigError(f"{what} '{p}' {e.message}", hint=e.hint) from None
    except Exception as e:  # noqa: BLE001 - any parser error is the user's file
        raise ConfigError(f"cannot parse {what} '{p}': {e}") from None
