"""The quantised graph as JSON plus named arrays: how every saved design kind stores its model.

A saved design must predict without the original model file, so ``design.json`` carries the graph
(nodes, attributes, types, optionally each node's plan) and ``weights.npz`` its parameters under
``"<node index>/<param>"``.  Every design kind (Dense chain, recurrent, streamed Dense, ...) reads and
writes the graph through these functions so a design saved by one can be read by the others'
tools and the format changes in one place.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import AieflowError
from .ir import Graph, Node, Tensor, frozen_map
from .numerics.types import type_from_json
from .ops.registry import family


def json_default(obj: Any) -> Any:
    """``json.dumps(default=...)`` for design.json: numpy scalars as Python numbers, tuples as lists."""
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


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
    """Every node's parameters, keyed ``"<node index>/<param>"`` as :func:`graph_from_json` reads
    them (never by the node's name: a name from a model is no safe zip member name)."""
    return {f"{i}/{k}": np.asarray(v) for i, n in enumerate(graph.nodes) for k, v in n.params.items()}


def _param(weights: Mapping[str, Any], i: int, name: str, key: str) -> Any:
    """Node ``i``'s parameter ``key``; older saves keyed it by the node's name."""
    new = f"{i}/{key}"
    return weights[new] if new in weights else weights[f"{name}/{key}"]


def graph_from_json(g: Mapping[str, Any], weights: Mapping[str, Any]) -> Graph:
    """The inverse of :func:`graph_to_json` with the arrays of :func:`graph_arrays`; plans are read
    back where they were saved.  A missing array raises ``KeyError`` with its key."""
    tensors = {k: Tensor(k, tuple(v["shape"]), type_from_json(v["type"]) if v["type"] else None)
               for k, v in g["tensors"].items()}
    nodes = []
    for i, nd in enumerate(g["nodes"]):
        fam = family(nd["op"], nd["name"])
        plan = nd.get("plan")
        nodes.append(Node(
            name=nd["name"],
            op=nd["op"],
            inputs=tuple(nd["inputs"]),
            outputs=tuple(nd["outputs"]),
            attrs=frozen_map({k: tuple(v) if isinstance(v, list) else v for k, v in nd["attrs"].items()}),
            params=frozen_map({k: _param(weights, i, nd["name"], k) for k in nd["params"]}),
            types=fam.types_from_json(nd["types"]) if nd["types"] is not None and fam.types_from_json else None,
            plan=fam.plan_from_json(plan) if plan is not None and fam.plan_from_json else None,
            aliases=tuple(nd["aliases"]),
        ))
    return Graph(tuple(nodes), tensors, tuple(g["inputs"]), tuple(g["outputs"]), g.get("name", "model"))


REDO = "re-run aieflow compile to write the design again"


@dataclass(frozen=True)
class SavedDesign:
    """What every design kind's ``load`` reads first: ``design.json``, the graph with its weights
    and the project files as they are on disk."""

    path: Path
    meta: dict[str, Any]
    graph: Graph
    files: dict[str, str]


# An int64 array (integer codes) whose values fit a narrower integer is stored narrow, under its key
# with this suffix, and read back as int64: the 7x512 MLP's weight codes take 1.8 MB instead of 15 MB.
NARROWED = "@int64"
_NARROW = (np.int8, np.int16, np.int32)


def _stored(key: str, value: np.ndarray) -> tuple[str, np.ndarray]:
    if value.dtype == np.int64 and value.size:
        lo, hi = int(value.min()), int(value.max())
        for narrow in _NARROW:
            info = np.iinfo(narrow)
            if info.min <= lo and hi <= info.max:
                return key + NARROWED, value.astype(narrow)
    return key, value


def write_weights(path: str | os.PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    """``arrays`` as an ``.npz`` archive that ``np.load`` reads, written the same byte for byte
    every time (entries sorted by key, a fixed timestamp: numpy's ``savez`` stamps the current
    time), stored without compression (deflating the 7x512 MLP's arrays took a quarter of the whole
    ``aieflow compile``), integer codes in the narrowest integer that holds them (:data:`NARROWED`).
    Archives saved deflated or with wide codes still load."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        for key, value in sorted(arrays.items()):
            name, value = _stored(key, np.asarray(value))
            buf = io.BytesIO()
            np.lib.format.write_array(buf, value, allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            z.writestr(info, buf.getbuffer())


def read_weights(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every array of a saved design's ``weights.npz``, read now (narrowed codes widened back to
    int64): an empty, truncated or corrupt archive is an :class:`AieflowError` naming the file
    (FileNotFoundError passes through)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            out = {}
            for k in archive.files:
                if k.endswith(NARROWED):
                    out[k.removesuffix(NARROWED)] = archive[k].astype(np.int64)
                else:
                    out[k] = archive[k]
            return out
    except FileNotFoundError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise AieflowError(
            f"'{path}' is not a readable weights archive ({type(e).__name__}: {e or 'empty'})",
            hint="the design directory is damaged; re-run aieflow compile to write it again",
        ) from None


def read_saved_design(path: str | os.PathLike, kind: str, fmt: str, version: int) -> SavedDesign:
    """Read a design directory written by a ``save`` that stores the graph (``graph_to_json``,
    ``graph_arrays``); any damage is an :class:`AieflowError` naming the file (``kind`` names the
    design kind in messages)."""
    d = Path(path)
    try:
        meta = json.loads((d / "design.json").read_text())
        weights = read_weights(d / "weights.npz")
    except FileNotFoundError as e:
        raise AieflowError(f"'{d}' is not a loadable {kind} design: {e.filename} is missing", hint=REDO) from None
    except (OSError, ValueError) as e:
        raise AieflowError(f"cannot read the {kind} design in '{d}': {e}") from None
    if meta.get("format") != fmt or meta.get("version") != version or "graph" not in meta:
        raise AieflowError(f"'{d}/design.json' is format {meta.get('format')!r} version {meta.get('version')!r} "
                           f"without a graph; this aieflow reads {fmt!r} version {version}", hint=REDO)
    try:
        graph = graph_from_json(meta["graph"], weights)
    except KeyError as e:
        raise AieflowError(f"'{d}/weights.npz' lacks {e}", hint=REDO) from None
    from .integrity import read_project

    files = read_project(d, meta)
    if not files:
        raise AieflowError(f"'{d}/project' is missing or empty", hint=REDO)
    return SavedDesign(d, meta, graph, files)
