"""The intermediate representation: a typed dataflow graph of nodes and tensors.

Shapes exclude the batch dimension: the batch is a property of the design (samples per graph
iteration), not of the network.  Every pass takes a :class:`Graph` and returns a new one; nodes and
tensors are frozen so a pass cannot mutate what an earlier pass produced.

``Node.op`` names an op family in :data:`aieflow.ops.registry.OP_FAMILIES`.  Family-specific data
lives in ``attrs`` (small, JSON-able values), ``params`` (numpy arrays: weights, biases), and after
the quantise / plan passes in ``types`` and ``plan`` (frozen dataclasses owned by the family).
"""

from __future__ import annotations

import copyreg
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from .errors import ModelError
from .numerics.types import NumericType


def frozen_map(items: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> Mapping:
    """A read-only mapping, so frozen dataclasses stay frozen all the way down."""
    return MappingProxyType(dict(items or {}))


def _reduce_mapping_proxy(m: MappingProxyType) -> tuple[Any, tuple[dict]]:
    return frozen_map, (dict(m),)


# Designs (graphs, configs, plans) pickle, so sweeps can ship them between processes: a read-only
# mapping pickles as a copy of its contents.
copyreg.pickle(MappingProxyType, _reduce_mapping_proxy)


@dataclass(frozen=True)
class Tensor:
    """A value flowing between nodes; ``shape`` excludes the batch dimension."""

    name: str
    shape: tuple[int, ...]
    dtype: NumericType | None = None  # None until the quantise pass assigns a type

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


@dataclass(frozen=True, eq=False)
class Node:
    """One operation.  ``name`` is the user's name for it (ONNX node name, torch module path)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=frozen_map)
    params: Mapping[str, np.ndarray] = field(default_factory=frozen_map)
    types: Any = None  # family-specific frozen dataclass, set by the quantise pass
    plan: Any = None  # family-specific frozen dataclass, set by the plan pass
    aliases: tuple[str, ...] = ()  # other user names that answer to this node (fused nodes)

    def __post_init__(self) -> None:
        for key in ("attrs", "params"):
            if not isinstance(getattr(self, key), MappingProxyType):
                object.__setattr__(self, key, frozen_map(getattr(self, key)))
        for key in ("inputs", "outputs", "aliases"):
            object.__setattr__(self, key, tuple(getattr(self, key)))

    def evolve(self, **changes: Any) -> Node:
        return replace(self, **changes)


@dataclass(frozen=True, eq=False)
class Graph:
    """Nodes in topological order, the tensors they connect, and the graph's inputs/outputs."""

    nodes: tuple[Node, ...]
    tensors: Mapping[str, Tensor]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    name: str = "model"

    def __post_init__(self) -> None:
        if not isinstance(self.tensors, MappingProxyType):
            object.__setattr__(self, "tensors", frozen_map(self.tensors))
        for key in ("nodes", "inputs", "outputs"):
            object.__setattr__(self, key, tuple(getattr(self, key)))

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name or name in n.aliases:
                return n
        raise KeyError(name)

    def producer(self, tensor: str) -> Node | None:
        return self._producers.get(tensor)

    def consumers(self, tensor: str) -> list[Node]:
        return list(self._consumers.get(tensor, ()))

    # The graph and its nodes are frozen, so these indexes (built on first use) stay true; they
    # make a lowering's per-layer look-ups (ops/post.fused_post) O(1) instead of a scan of the nodes.
    @cached_property
    def _producers(self) -> dict[str, Node]:
        out: dict[str, Node] = {}
        for n in self.nodes:
            for t in n.outputs:
                out.setdefault(t, n)
        return out

    @cached_property
    def _consumers(self) -> dict[str, tuple[Node, ...]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for t in dict.fromkeys(n.inputs):
                out.setdefault(t, []).append(n)
        return {t: tuple(ns) for t, ns in out.items()}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_producers", "_consumers")}

    def with_nodes(self, nodes: Iterable[Node], tensors: Mapping[str, Tensor] | None = None) -> Graph:
        return replace(self, nodes=tuple(nodes), tensors=frozen_map(self.tensors if tensors is None else tensors))

    def with_tensor_types(self, types: Mapping[str, NumericType]) -> Graph:
        tensors = {k: (replace(t, dtype=types[k]) if k in types else t) for k, t in self.tensors.items()}
        return replace(self, tensors=frozen_map(tensors))

    def validate(self) -> None:
        """Check the graph is well formed: every tensor produced once, topological order, names unique."""
        for t in self.inputs:
            if t not in self.tensors:
                raise ModelError(f"graph input '{t}' has no tensor description")
        produced = set(self.inputs)
        names: set[str] = set()
        for n in self.nodes:
            if n.name in names:
                raise ModelError(f"two nodes are both called '{n.name}'; node names must be unique")
            names.add(n.name)
            for t in n.inputs:
                if t not in produced:
                    raise ModelError(f"node '{n.name}' reads tensor '{t}' before it is produced")
                if t not in self.tensors:
                    raise ModelError(f"node '{n.name}' reads unknown tensor '{t}'")
            for t in n.outputs:
                if t in produced:
                    raise ModelError(f"tensor '{t}' is produced twice (second time by '{n.name}')")
                if t not in self.tensors:
                    raise ModelError(f"node '{n.name}' writes unknown tensor '{t}'")
                produced.add(t)
        for t in self.outputs:
            if t not in produced:
                raise ModelError(f"graph output '{t}' is never produced")


@dataclass(frozen=True)
class QuantHints:
    """Numeric types a model already carries (QDQ ONNX): taken exactly as given.

    ``tensors`` maps activation tensor names to their types; ``params`` maps
    ``(node_name, param_name)`` to the type of that weight or bias.
    """

    tensors: Mapping[str, NumericType] = field(default_factory=frozen_map)
    params: Mapping[tuple[str, str], NumericType] = field(default_factory=frozen_map)

    def __post_init__(self) -> None:
        for key in ("tensors", "params"):
            value = getattr(self, key)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, key, frozen_map(value))

    @property
    def empty(self) -> bool:
        return not self.tensors and not self.params


@dataclass(frozen=True)
class ImportedModel:
    """What a frontend returns: a float graph, plus any quantisation the model already carries."""

    graph: Graph
    hints: QuantHints = field(default_factory=QuantHints)
    source: str = ""  # "onnx" or "torch", for reports
