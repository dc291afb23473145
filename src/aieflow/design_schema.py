"""One design.json schema for every design kind (``schema/design.schema.json``).

Every kind's ``to_json`` carries the same top-level keys (``schema``, ``format``, ``version``,
``kind``, ``aieflow``, ``device``, ``source``, ``config``, ``resources``, ``performance``,
``project_files``) and a ``performance`` object that always has :data:`COMMON_PERFORMANCE`, written
by the one :func:`performance_json` from the design's ``estimate()`` (every kind's result follows
``protocol.Performance``); kind-specific keys are added beside them, never instead of them.
``tests/test_design_schema.py`` validates a design of every kind against the JSON Schema file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .protocol import Performance

SCHEMA_VERSION = 2
"""Version of the common schema (``"schema"`` in design.json; designs saved before it have none)."""

COMMON_PERFORMANCE = ("latency_ns", "interval_ns", "batch", "replicas", "throughput_ops_per_s", "bound",
                      "tiles_used", "memory_tiles_used", "breakdown")
"""What ``performance`` always holds: first result latency and steady-state interval of one batch
(ns), the samples per batch of one replica and the replicas side by side (``protocol.Performance``:
throughput = 2 x MACs per sample x batch x replicas / interval), 2 x MACs per second, what bounds the interval, compute and memory tiles,
and ``breakdown``: each stage's time per batch (``{"<stage>": {"ns": ..., ...}}``)."""


def breakdown(stages: Iterable[tuple[str, float, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """``{name: {"ns": ns, **extra}}`` in order; a repeated name gets ``#2``, ``#3``, ..."""
    out: dict[str, dict[str, Any]] = {}
    for name, ns, extra in stages:
        key, n = name, 1
        while key in out:
            n += 1
            key = f"{name}#{n}"
        out[key] = {"ns": float(ns), **extra}
    return out


def performance_json(perf: Performance, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """design.json's ``performance`` of every kind, read from the one protocol
    (:class:`aieflow.protocol.Performance`): the common keys from its attributes, ``breakdown`` from
    its ``breakdown_parts()`` (each stage's name, ns per batch and extra fields), then its own
    ``extra_json()`` keys and the design's ``extra`` ones, which cannot replace the common ones (an
    extra key that repeats a common one with the same value is dropped)."""
    from .perf.bands import band

    common = {"latency_ns": float(perf.latency_ns), "interval_ns": float(perf.interval_ns), "batch": int(perf.batch),
              "replicas": int(perf.replicas),
              "throughput_ops_per_s": float(perf.throughput_ops_per_s), "bound": str(perf.bound),
              "tiles_used": int(perf.tiles_used), "memory_tiles_used": int(perf.memory_tiles_used),
              "breakdown": breakdown(perf.breakdown_parts()),
              # the model's validation band of these figures (array-only designs: perf/bands.py)
              "error_band": band("array").to_json()}
    extra = {**perf.extra_json(), **(extra or {})}
    clash = sorted(k for k in set(extra) & set(common) if extra[k] != common[k])
    if clash:
        raise ValueError(f"kind-specific performance keys {clash} would replace common ones")
    return {**common, **{k: v for k, v in extra.items() if k not in common}}


def header(fmt: str, version: int, kind: str) -> dict[str, Any]:
    """The first keys of every design.json."""
    from . import __version__

    return {"schema": SCHEMA_VERSION, "format": fmt, "version": version, "kind": kind, "aieflow": __version__}


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of design.json."""
    return json.loads(resources.files("aieflow").joinpath("schema/design.schema.json").read_text())


def breakdown_text(perf: Mapping[str, Any]) -> str:
    """``performance["breakdown"]`` as report lines: each stage's time per batch and its share of
    the interval."""
    rows = [f"  breakdown per batch of {perf['batch']} (interval {perf['interval_ns']:,.1f} ns):"]
    from .perf.bands import band
    from .tables import plain

    table = [[name, f"{part['ns']:,.1f} ns", f"{100 * part['ns'] / perf['interval_ns'] if perf['interval_ns'] else 0.0:.1f}%"]
             for name, part in perf["breakdown"].items()]
    if table:
        rows.append(plain(table, rule=False, indent="    ", right=(1, 2)))

    rows.append(f"    (a stage's kernel time: {band('kernel').text()})")
    return "\n".join(rows)
