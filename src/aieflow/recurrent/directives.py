"""The recurrent mapping keys of a config: ``layers.<gru or lstm layer>.mapping``, checked.

```yaml
target: latency_ns <= 5000     # optional: the search then picks what the keys leave open
layers:
  rnn:                         # the torch module path / ONNX node name (a num_layers > 1 module: rnn, or rnn_l1)
    mapping:
      distribution: row        # U h: row (streamed rows, published) | column (cascade chains) | compact (the whole
                               #   cell on one tile: then only plio_bits and kernel may be given besides) | grid
                               #   (R chains of hidden units, each a W x partner + C tiles: with chains, columns)
      chains: 4                # grid: R chains of ceil(n_h / R) hidden units (implies distribution: grid)
      columns: 2               # grid: C tiles per chain over U h's column blocks (default 1; implies distribution: grid)
      input_distribution: row  # W x (default: as distribution when that is given, else searched)
      aggregation: hybrid      # hybrid (PL FSM, published) | aie (aggregator kernel)
      row_reuse: 2             # rows per U h kernel / chain, fixed (default: grown only when needed)
      input_row_reuse: 4       # the same for W x
      cas_len: 3               # column: tiles per U h chain (implies distribution: column)
      input_cas_len: 2         # column: tiles per W x chain (implies input_distribution: column)
      merge_fanin: 3           # hybrid: packet streams per pktmerge
      streams_per_interface_tile: 1
      plio_bits: 64            # 32 | 64 | 128
      kernel: auto             # fixed point, row kernels and cascade chains: auto (vector where bit-exact) | vector | scalar
```

Every key is optional; ``auto`` (or leaving the key out) lets the planner (no target) or the
search (a ``target``) choose.  Fixed keys are constraints of the search.  The CNN path reads the
same ``mapping`` field with its own keys (``cnn/directives.py``); this module only reads it for
GRU / LSTM layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..errors import ConfigError, PlanError
from ..ir import Node
from ..ops.activation import per_element_variant
from .plan import AGGREGATIONS, COMPACT, DISTRIBUTIONS, GRID, RecurrentMapping, RecurrentOptions

KERNEL_CHOICES = ("auto", "vector", "scalar")
_INT_KEYS = ("row_reuse", "input_row_reuse", "cas_len", "input_cas_len", "merge_fanin", "streams_per_interface_tile",
             "chains", "columns")
_CHOICES: Mapping[str, tuple[str, ...]] = {
    "distribution": (*DISTRIBUTIONS, COMPACT, GRID),
    "input_distribution": (*DISTRIBUTIONS, COMPACT, GRID),
    "aggregation": AGGREGATIONS,
    "kernel": KERNEL_CHOICES,
}
KEYS = (*_CHOICES, *_INT_KEYS, "plio_bits")
_ALIASES = {"aggregation": {"pl": "hybrid", "fsm": "hybrid"}, "distribution": {"col": "column", "rows": "row"},
            "input_distribution": {"col": "column", "rows": "row"}}


@dataclass(frozen=True)
class LayerDirectives:
    """One recurrent layer's mapping keys: the options the planner / search take, and the kernel
    choice for fixed point (applied to the layer's dims, ``design.compile_recurrent``)."""

    options: RecurrentOptions
    kernel: str = "auto"
    given: tuple[str, ...] = ()  # the keys the config set
    key: str = ""  # the config's layer key they came from (a num_layers > 1 module's path, or the layer's name)

    @property
    def empty(self) -> bool:
        return not self.given


def _where(name: str, key: str | None = None) -> str:
    return f"layers.{name}.mapping" + (f".{key}" if key else "")


def _float_name(node) -> str | None:
    """The layer's float type name (``fp32`` / ``bf16``), None for fixed point."""
    t = node.types
    return t.output.name if t is not None and t.is_float else None


def parse_layer(name: str, raw: Mapping[str, Any], float_type: str | None) -> LayerDirectives:
    """Check one layer's ``mapping`` keys (``name``: the config key, for the messages)."""
    unknown = set(raw) - set(KEYS)
    if unknown:
        raise ConfigError(f"{_where(name)}: unknown key(s) {', '.join(sorted(map(str, unknown)))} for a recurrent layer; "
                          f"allowed: {', '.join(KEYS)}")
    values: dict[str, Any] = {}
    kernel = "auto"
    for key, value in raw.items():
        if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
            continue  # the planner / search chooses
        if key in _CHOICES:
            text = str(value).strip().lower()
            text = _ALIASES.get(key, {}).get(text, text)
            if text not in _CHOICES[key]:
                raise ConfigError(f"{_where(name, key)}: {value!r}; choose one of {', '.join(_CHOICES[key])} (or auto)")
            if key == "kernel":
                kernel = text
            else:
                values[key] = text
        elif key == "plio_bits":
            if value not in (32, 64, 128) or isinstance(value, bool):
                raise ConfigError(f"{_where(name, key)}: {value!r}; a PLIO is 32, 64 or 128 bits wide")
            values[key] = int(value)
        else:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{_where(name, key)} must be a positive integer (or auto), got {value!r}")
            values[key] = value
    if COMPACT in (values.get("distribution"), values.get("input_distribution")):
        if values.get("distribution") != COMPACT:
            raise ConfigError(f"{_where(name, 'input_distribution')}: compact computes W x in the tile that holds the "
                              "whole cell; it goes with distribution: compact (a compact U h with spread W x is not "
                              "generated)", hint="use distribution: compact, or a row / column input_distribution")
        extra = [k for k in values if k not in ("distribution", "input_distribution", "plio_bits")]
        if extra:
            raise ConfigError(f"{_where(name, extra[0])}: distribution: compact puts the whole cell on one tile, which has "
                              f"no {', '.join(extra)} to set", hint=f"remove {', '.join(extra)}, or use distribution row / column")
        values["input_distribution"] = COMPACT
    grid_keys = [k for k in ("chains", "columns") if k in values]
    if GRID in (values.get("distribution"), values.get("input_distribution")) or grid_keys:
        if values.get("distribution", GRID) != GRID or values.get("input_distribution", GRID) != GRID:
            raise ConfigError(f"{_where(name, grid_keys[0] if grid_keys else 'input_distribution')}: the grid mapping "
                              "(chains of hidden units, each a gate tile with its W x partner) goes with distribution: grid "
                              "for both products", hint="use distribution: grid with chains: R, or remove chains")
        extra = [k for k in values if k not in ("distribution", "input_distribution", "plio_bits", "chains", "columns")]
        if extra:
            raise ConfigError(f"{_where(name, extra[0])}: distribution: grid has no {', '.join(extra)} to set (it takes "
                              "chains, columns and plio_bits)", hint=f"remove {', '.join(extra)}, or use distribution row / column")
        values["distribution"] = values["input_distribution"] = GRID
    for chain, dist in (("cas_len", "distribution"), ("input_cas_len", "input_distribution")):
        if chain in values:
            if values.get(dist, "column") != "column":
                raise ConfigError(f"{_where(name, chain)}: chains apply to {dist}: column, but the layer asks for "
                                  f"{dist}: {values[dist]}", hint=f"remove {chain}, or set {dist}: column")
            values.setdefault(dist, "column")
    fp32 = float_type is not None  # a float layer (fp32 on AIE1, bf16 on AIE-ML / v2): vector kernels only
    if fp32 and kernel == "scalar":
        raise ConfigError(f"{_where(name, 'kernel')}: scalar applies to fixed point; {float_type} kernels are vector",
                          hint="remove the key, or use a fixed-point precision")
    d, wd = values.get("distribution"), values.get("input_distribution")
    if fp32 and d and wd and d != wd:
        raise ConfigError(f"{_where(name)}: {float_type} with distribution {d} and input_distribution {wd}: the emulator has one "
                          "float summation order per layer", hint="use the same distribution for both, or fixed point")
    # a fixed reuse: at least and at most that many rows (plan_recurrent would otherwise grow it)
    for key, cap in (("row_reuse", "row_reuse_max"), ("input_row_reuse", "input_row_reuse_max")):
        if key in values:
            values[cap] = values[key]
    if fp32 and d and not wd:
        values["input_distribution"] = d
    given = tuple(k for k in raw if k in values or (k == "kernel" and kernel != "auto"))
    return LayerDirectives(RecurrentOptions(**values), kernel, given, name)


def layer_directives(config: Config, layers: list[Node]) -> list[LayerDirectives]:
    """Each recurrent layer's directives (a torch ``num_layers > 1`` module's layers answer to
    its path too: the layer's own name wins)."""
    out = []
    for node in layers:
        names = (node.name, *node.aliases)
        key = next((n for n in names if n in config.layers), node.name)
        raw = config.layer(*names).mapping
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{_where(key)} must be a mapping of recurrent mapping keys, got {raw!r}")
        out.append(parse_layer(key, raw, _float_name(node)))
    return out


def check_head(config: Config, head: list[Node]) -> None:
    """The dense head runs in the aggregation epilogue: mapping keys on it would be ignored."""
    for node in head:
        names = (node.name, *node.aliases)
        if node.types is not None and per_element_variant(node):
            raise PlanError(f"{per_element_variant(node)} is computed by the DAG mapping's kernels only; the dense head "
                            f"after a recurrent layer computes the table form", layer=node.name,
                            hint=f"remove {per_element_variant(node)} from the config (or set it to table)")
        if config.layer(*names).mapping:
            key = next(n for n in names if n in config.layers)
            raise ConfigError(f"{_where(key)}: the dense head after a recurrent layer runs in the aggregation epilogue "
                              "(AIE aggregator or PL FSM); it takes no mapping keys",
                              hint="move the keys to the GRU / LSTM layer, or remove them")



def mapping_directives(m: RecurrentMapping) -> dict[str, Any]:
    """The ``layers.<name>.mapping`` keys that fix the mapping ``m`` (an ``explore`` point's): the
    config that compiles it without a target (``plan_recurrent`` then has one choice left)."""
    if m.compact:
        return {"distribution": COMPACT, "plio_bits": m.plio_bits}
    if m.grid:
        return {"distribution": GRID, "chains": m.chains, "columns": m.chain_len, "plio_bits": m.plio_bits}
    out: dict[str, Any] = {
        "distribution": m.recurrent.distribution, "input_distribution": m.input.distribution,
        "aggregation": m.aggregation, "row_reuse": m.recurrent.rows, "input_row_reuse": m.input.rows,
        "plio_bits": m.plio_bits,
    }
    if m.recurrent.distribution == "column":
        out["cas_len"] = m.recurrent.cas_len
    if m.input.distribution == "column":
        out["input_cas_len"] = m.input.cas_len
    if m.aggregation == "hybrid":  # build_mapping: each side's fan-in is min(merge_fanin, its sources)
        out["merge_fanin"] = max(m.u_fanin, m.w_fanin)
    return out
