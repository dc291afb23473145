"""The compiler: one declared list of passes, each a plain function from state to state.

    import -> fuse -> quantise -> search -> plan -> pack -> place -> check -> emit
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .config import Config
from .devices import Device
from .errors import ConfigError, ModelError
from .frontends import import_model
from .inputs import mask_keep
from .ir import Graph, QuantHints
from .mapped.transport import check as check_transport
from .ops.recurrent import one_blas_thread
from .ops.registry import family
from .passes.emit import dense_layers, emit_project, lowered_chain
from .passes.fuse import fuse
from .passes.place import Placement, check_placement, place
from .passes.plan import plan
from .passes.quantise import quantise
from .passes.search import apply as apply_point
from .passes.search import explore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class State:
    model: Any
    device: Device
    config: Config
    example_input: np.ndarray | None = None
    calibration: np.ndarray | None = None
    calibration_mask: Any = None  # calibration=(x, mask): the key padding masks of the calibration samples
    graph: Graph | None = None
    hints: QuantHints = field(default_factory=QuantHints)
    source: str = ""
    placement: Placement | None = None
    packed: bool = False
    files: dict[str, str] | None = None
    exploration: Any = None  # passes.search.Exploration when the config has a target
    timings: tuple[tuple[str, float], ...] = ()
    done: tuple[str, ...] = ()  # the passes already run on this state (run_pipeline resumes after them)


def _import(s: State) -> State:
    # a run-time key padding mask's token count: the calibration masks' (a patch-embedded ViT's mask covers its
    # tokens, not the image's rows); else the input's second axis
    tokens = None if s.calibration_mask is None or np.ndim(s.calibration_mask) != 2 else int(np.shape(s.calibration_mask)[1])
    imported = import_model(s.model, s.example_input, mask_tokens=tokens)
    g = imported.graph
    # a second input is a run-time key padding mask (frontends: softmax nodes read it, nothing else)
    if len(g.inputs) not in (1, 2) or len(g.outputs) != 1:
        raise ModelError(f"the model has {len(g.inputs)} inputs and {len(g.outputs)} outputs; aieflow supports one of each")
    log.debug("imported %s (%s): %d nodes", g.name, imported.source or "model", len(g.nodes))
    return replace(s, graph=g, hints=imported.hints, source=imported.source)


def _fuse(s: State) -> State:
    g, hints = fuse(s.graph, s.hints)
    _check_layer_names(g, s.config)
    return replace(s, graph=g, hints=hints)


def _check_layer_names(g: Graph, config: Config) -> None:
    """A config entry for a layer the model does not have is a typo, not something to ignore."""
    known = {name for n in g.nodes for name in (n.name, *n.aliases)}
    unknown = sorted(set(config.layers) - known)
    if unknown:
        names = ", ".join(n.name for n in g.nodes if not family(n.op, n.name).is_view)
        raise ConfigError(
            f"config names layer(s) {', '.join(unknown)} that the model does not have",
            hint=f"the model's layers are: {names}",
        )


def _calibration(s: State) -> np.ndarray | None:
    data = s.calibration if s.calibration is not None else s.example_input
    if data is None:
        return None
    x = np.asarray(data, dtype=np.float64)
    shape = s.graph.tensors[s.graph.inputs[0]].shape
    if x.shape[1:] != tuple(shape):
        if x.shape == tuple(shape):
            x = x[None]
        else:
            raise ConfigError(f"calibration data has shape {x.shape}; the model's input is (N, {', '.join(map(str, shape))})")
    return x


def _calibration_mask(s: State, x: np.ndarray | None) -> np.ndarray | None:
    """The keep bytes of the calibration samples' key padding masks (``calibration=(x, mask)``), or None
    (every key kept)."""
    if s.calibration_mask is None:
        return None
    if len(s.graph.inputs) < 2:
        raise ConfigError("calibration gives key padding masks (calibration=(x, mask)), but the model takes one "
                          "input", hint="pass calibration=x")
    if s.calibration is None or x is None:
        raise ConfigError("calibration=(x, mask) needs the samples x", hint="pass calibration=(x, mask)")
    return mask_keep(s.calibration_mask, x.shape[0], s.graph.tensors[s.graph.inputs[1]].shape[0],
                     "calibration mask")


def _quantise(s: State) -> State:
    x = _calibration(s)
    return replace(s, graph=quantise(s.graph, s.device, s.config, s.hints, x, _calibration_mask(s, x)))


def _search(s: State, force: bool = False) -> State:
    if not (force or s.config.searched):
        return s
    # every candidate is planned, placed and simulated as compiled (passes/search.design_points),
    # so the pick is placeable and meets the budgets by the design's own estimate
    ex = explore(s.graph, s.device, s.config)
    log.debug("search for target '%s' over batch %s: %d layer plans costed, a front of %d; chose %d tiles, batch %d, "
              "%d replica(s), latency %.0f ns, interval %.0f ns", ex.target.to_string(), ", ".join(map(str, ex.batches)),
              ex.candidates, len(ex.front), ex.chosen.tiles, ex.chosen.batch, ex.chosen.replicas, ex.chosen.latency_ns,
              ex.chosen.interval_ns)
    return replace(s, config=apply_point(s.config, ex.chosen, s.graph), exploration=ex)


def _plan(s: State) -> State:
    g = plan(s.graph, s.device, s.config)
    for n in dense_layers(g):
        p = n.plan
        log.debug("plan %s: cas_len %d x cas_num %d = %d tiles, batch %d", n.name, p.cas_len, p.cas_num, p.tiles, p.batch)
    return replace(s, graph=g)


def _pack(s: State) -> State:
    # Packing is a pure function of the plan (ops.dense.pack_tile); here we only prove every
    # tile's parameters fit its declared buffers before anything is emitted.
    from .ops.dense import kind_of, pack_tile

    for node in dense_layers(s.graph):
        p = node.plan
        per_item = 2 if kind_of(node.types.weight) == "i4" else 1  # int4 codes: two per byte
        for r in range(p.cas_num):
            for c in range(p.cas_len):
                packed = pack_tile(node, r, c)
                assert packed["weights"].size * per_item == p.k_slice * p.n_slice
    return replace(s, packed=True)


def _place(s: State) -> State:
    placement = place(s.graph, s.device, s.config)
    check_placement(placement, s.device)
    log.debug("placement: %s, wire cost %s%s, %d replica(s)", placement.method, placement.cost,
              " (optimal)" if placement.optimal else "", len(placement.replicas))
    return replace(s, placement=placement)


def _check(s: State) -> State:
    # the check pass: every link of the placed design, lowered into the mapped graph (which
    # emission reuses), against the device's transport limits (mapped/transport.py)
    check_transport(lowered_chain(s.graph, s.device, s.placement), s.device)
    return s


def _emit(s: State) -> State:
    from .design import Design

    d = Design(s.graph, s.device, s.config, s.placement, source=s.source, exploration=s.exploration)
    # the user's example input is written whole (``aieflow compile --input``); calibration data, two batches
    if s.example_input is not None:
        x = d.example_batch(s.example_input, batches=None)
    else:
        x = d.example_batch(s.calibration)
    xq = d.quantise_input(x)
    yq = one_blas_thread(d.run)(xq)  # the example batch: products too small for BLAS threads to pay
    files = emit_project(s.graph, s.device, s.placement, xq, yq, graph_name=s.graph.name)
    log.debug("emitted %d project files", len(files))
    return replace(s, files=files)


PIPELINE: tuple[tuple[str, Callable[[State], State]], ...] = (
    ("import", _import),
    ("fuse", _fuse),
    ("quantise", _quantise),
    ("search", _search),
    ("plan", _plan),
    ("pack", _pack),
    ("place", _place),
    ("check", _check),
    ("emit", _emit),
)


def run_pipeline(state: State, progress: Callable[[str], None] | None = None, stop_after: str | None = None) -> State:
    """Run the passes ``state`` has not been through yet, up to ``stop_after`` (all by default).

    A state that went through the front end (``stop_after="quantise"``) resumes from the search:
    the model is imported, fused and quantised once per compile, whatever path maps it."""
    timings = list(state.timings)
    done = list(state.done)
    for name, fn in PIPELINE:
        if name not in done:
            if progress:
                progress(name)
            t0 = time.perf_counter()
            state = fn(state)
            timings.append((name, time.perf_counter() - t0))
            done.append(name)
        if name == stop_after:
            break
    return replace(state, timings=tuple(timings), done=tuple(done))


def front_end(state: State, progress: Callable[[str], None] | None = None) -> State:
    """Import, fuse and quantise: the state every mapping path starts from."""
    return run_pipeline(state, progress, stop_after="quantise")
