"""The quantised graph as JSON plus named arrays: how every saved design kind stores its model.

A saved design must predict without the original model file, so ``design.json`` carries the graph
(nodes, attributes, types, optionally each node's plan) and ``weights.npz`` its parameters under
``"<node>/<param>"``.  Every design kind (Dense chain, recurrent, streamed Dense, ...) reads and
writes the graph through these functions so a design saved by one can be read by the others'
tools and the format changes in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .ir import Graph, Node, Tensor, frozen_map
from .numerics.types import parse_type
from .ops.registry import family


def graph_to_json(graph: Graph, plans: bool = False) -> dict[str, Any]:
    """The graph without its parameters (see :func:`graph_arrays`); ``plans`` adds each node's
    plan through its family's ``plan_to_json``."""
    nodes = []
    for n in graph.nodes:
        fam = family(n.op, n.name)
        node = {
            "name": n.name,
            "op": n.op,
            "inputs": list(n.inputs),
            "outputs": list(n.outputs),
            "attrs": {k: list(v) if isinstance(v, tuple) else v for k, v in n.attrs.items()},
            "aliases": list(n.aliases),
            "params": sorted(n.params),
            "types": fam.types_to_json(n.types) if n.types is not None and fam.types_to_json else None,
        }
        if plans:
            node["plan"] = fam.plan_to_json(n.plan) if n.plan is not None and fam.plan_to_json else None
        nodes.append(node)
    tensors = {
        k: {"shape": list(t.shape), "type": t.dtype.to_string() if t.dtype is not None else None}
        for k, t in graph.tensors.items()
    }
    return {"name": graph.name, "inputs": list(graph.inputs), "outputs": list(graph.outputs), "tensors": tensors,
            "nodes": nodes}


def graph_arrays(graph: Graph) -> dict[str, np.ndarray]:
    """Every node's parameters, keyed as :func:`graph_from_json` reads them."""
    return {f"{n.name}/{k}": np.asarray(v) for n in graph.nodes for k, v in n.params.items()}


def graph_from_json(g: Mapping[str, Any], weights: Mapping[str, Any]) -> Graph:
    """The inverse of :func:`graph_to_json` with the arrays of :func:`graph_arrays`; plans are read
    back where they were saved.  A missing array raises ``KeyError`` with its key."""
    tensors = {k: Tensor(k, tuple(v["shape"]), parse_type(v["type"]) if v["type"] else None)
               for k, v in g["tensors"].items()}
    nodes = []
    for nd in g["nodes"]:
        fam = family(nd["op"], nd["name"])
        plan = nd.get("plan")
        nodes.append(Node(
            name=nd["name"],
            op=nd["op"],
            inputs=tuple(nd["inputs"]),
            outputs=tuple(nd["outputs"]),
            attrs=frozen_map({k: tuple(v) if isinstance(v, list) else v for k, v in nd["attrs"].items()}),
            params=frozen_map({k: weights[f"{nd['name']}/{k}"] for k in nd["params"]}),
            types=fam.types_from_json(nd["types"]) if nd["types"] is not None and fam.types_from_json else None,
            plan=fam.plan_from_json(plan) if plan is not None and fam.plan_from_json else None,
            aliases=tuple(nd["aliases"]),
        ))
    return Graph(tuple(nodes), tensors, tuple(g["inputs"]), tuple(g["outputs"]), g.get("name", "model"))
