"""What ``aieflow explore`` does with an exploration's points, for every design kind it explores
(chain, DAG, CNN, recurrent): number them, rank them by the target, flatten them into CSV / JSON
records, and write the config that ``aieflow compile`` turns into exactly one of them.

A point's config is the user's (the keys they gave) with the target and any searched batch
taken out and the point's choices fixed (``tests/test_explore_equals_compile.py`` compiles them):

- chain: ``batch``, ``replicas`` and every Dense layer's ``parallelism: {cas_len, cas_num}``;
- DAG: ``batch`` and every Dense node's ``parallelism``;
- a chain whose activations / softmax may run in the Dense kernel or on their own
  (``passes/posts.py``): its points also set ``posts`` (``fused``: the chain's keys;
  ``standalone``: the DAG's);
- CNN: every convolution's ``mapping: {groups: N}`` (a point's ``cas_num``) and ``cnn.replicas``;
  the rows plan's point (``mapping`` "rows"): ``cnn.mapping: rows``;
- recurrent: every GRU / LSTM layer's ``mapping`` keys (``recurrent.directives.mapping_directives``).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from .atomic import write_text
from .config import Config, Target
from .errors import ConfigError, PlanError
from .passes.search import ranked


def kind(ex: Any) -> str:
    return getattr(ex, "kind", "chain")


def numbered(ex: Any) -> tuple[Any, ...]:
    """The points ``explore`` lists, in its order (the Pareto front, fewest tiles first, then the
    target's pick when it is not on the front); point ``i`` (1-based) is ``--pick i``."""
    front = tuple(ex.front)
    return front if ex.chosen in front else (*front, ex.chosen)


def point_id(ex: Any, point: Any) -> int:
    return numbered(ex).index(point) + 1


def by_id(ex: Any, pick: int | None) -> Any:
    """Point ``pick`` (1-based, as listed), or the target's pick for None."""
    if pick is None:
        return ex.chosen
    points = numbered(ex)
    if not 1 <= pick <= len(points):
        raise ConfigError(f"--pick {pick}: explore lists points 1 to {len(points)}",
                          hint="give a number from the # column of the table (or the 'id' of --json)")
    return points[pick - 1]


def ranking_target(ex: Any, config: Config) -> Target:
    """The target ``compile`` picks by: the config's; a CNN without one: the most frames per second."""
    return Target("throughput") if kind(ex) == "cnn" and not config.targeted else ex.target


def ranking(ex: Any, config: Config) -> list[Any]:
    """The listed points best first by the target (budgets met, then its objective's order), the
    target's pick first: what ``--top N`` shows.  A CNN without a target ranks by frames per
    second, as its compile picks."""
    try:
        order = ranked(numbered(ex), ranking_target(ex, config))
    except PlanError:  # no point meets the budgets: the pick alone (compile would refuse it)
        order = []
    return [ex.chosen, *(p for p in order if p != ex.chosen)]


def _mappings(p: Any) -> tuple[Any, ...]:
    """A recurrent point's layer mappings (one, or a stack's)."""
    return tuple(p.mapping.layers) if hasattr(p.mapping, "layers") else (p.mapping,)


def _shape(ex: Any, p: Any) -> str:
    if kind(ex) == "recurrent":
        return " | ".join(m.describe() for m in _mappings(p))
    return " ".join(f"{name}:{cl}x{cn}" for name, cl, cn in p.parallelism)


def record(ex: Any, p: Any) -> dict[str, Any]:
    """One point as a flat record (a CSV row): its id, whether the target picks it, tiles, batch,
    replicas, latency, interval (per graph iteration; recurrent: per step), interval per sample
    (recurrent: per sequence, the design's ``interval_ns``) and its parallelism / mapping."""
    rec = {
        "id": point_id(ex, p), "pick": p == ex.chosen, "tiles": p.tiles, "batch": p.batch,
        "replicas": getattr(p, "replicas", 1), "latency_ns": p.latency_ns, "interval_ns": p.interval_ns,
        "sample_interval_ns": p.sample_interval_ns,
    }
    if kind(ex) == "recurrent":
        rec["step_latency_ns"] = p.step_latency_ns
        rec["mapping"] = _shape(ex, p)
    else:
        rec["parallelism"] = _shape(ex, p)  # layer:cas_len x cas_num (CNN: x output groups)
    if getattr(p, "posts", ""):
        rec["posts"] = p.posts
    if getattr(p, "mapping", "") and kind(ex) == "cnn":
        rec["mapping"] = p.mapping
    return rec


def to_csv(ex: Any, points: list[Any]) -> str:
    rows = [record(ex, p) for p in points]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def to_json(ex: Any, config: Config, top: int | None = None) -> dict[str, Any]:
    """``explore --json``: the exploration's own JSON with the kind, and for the pick and every
    front point its ``id`` and the ``config`` that compiles it; with ``top``, the ``top`` ids best
    first (``ranking``)."""
    out = {"kind": kind(ex), **ex.to_json()}
    out["chosen"] = {"id": point_id(ex, ex.chosen), **out["chosen"], "config": point_config(ex, ex.chosen, config)}
    out["pareto_front"] = [{"id": point_id(ex, p), **d, "config": point_config(ex, p, config)}
                           for p, d in zip(ex.front, out["pareto_front"], strict=True)]
    if top is not None:
        out["top"] = [point_id(ex, p) for p in ranking(ex, config)[:top]]
    from .perf.bands import band

    out["error_band"] = band("array").to_json()  # of every point's latency and interval (perf/bands.py)
    return out


# ------------------------------------------------------------------------------ the config


def _key(names: tuple[str, ...], layers: dict[str, Any]) -> str:
    """Where a layer's settings go: the name the user already gave it (the node's or an alias, as
    ``Config.layer`` looks them up), else the node's."""
    return next((n for n in names if n in layers), names[0])


def _names(ex: Any, name: str) -> tuple[str, ...]:
    return next((names for names in ex.config_names if names[0] == name), (name,))


def point_config(ex: Any, point: Any, base: Config) -> dict[str, Any]:
    """The config (a plain dict, as a YAML / JSON file holds it) that ``aieflow compile`` turns
    into exactly ``point`` of ``ex`` (an ``aieflow.explore`` result for the config ``base``)."""
    given = base.to_json()
    raw: dict[str, Any] = {k: v for k, v in given.items() if k in base.given and k not in ("target", "batch", "replicas")}
    layers: dict[str, Any] = {name: dict(lc) for name, lc in given["layers"].items()}
    k = kind(ex)
    if k in ("chain", "dag"):
        for name, cl, cn in point.parallelism:
            key = _key(_names(ex, name), layers)
            layers[key] = {**layers.get(key, {}), "parallelism": {"cas_len": cl, "cas_num": cn}}
        raw["batch"] = point.batch
        posts = getattr(point, "posts", "")
        if posts:  # explore listed both mappings of the chain's posts (passes/posts.py)
            raw["posts"] = posts
        if k == "chain" and posts != "standalone":
            raw["replicas"] = point.replicas
    elif k == "cnn" and getattr(point, "mapping", "") == "rows":  # the rows plan: nothing to set but the mapping
        raw["cnn"] = {**{key: v for key, v in given.get("cnn", {}).items() if key != "replicas"}, "mapping": "rows"}
    elif k == "cnn":
        if not ex.config_names:
            raise ConfigError("this CNN exploration does not name its convolutions; run aieflow.explore again")
        convs = {names[0]: names for names in ex.config_names}
        for name, _, groups in point.parallelism:
            if name in convs:
                key = _key(convs[name], layers)
                entry = layers.setdefault(key, {})
                entry["mapping"] = {**entry.get("mapping", {}), "groups": groups}
        raw["cnn"] = {**given.get("cnn", {}), "replicas": point.replicas}
    elif k == "recurrent":
        from .recurrent.directives import mapping_directives

        mappings = _mappings(point)
        if len(ex.config_names) != len(mappings):
            raise ConfigError("this recurrent exploration does not name its layers; run aieflow.explore again")
        for names, m in zip(ex.config_names, mappings, strict=True):
            key = _key(names, layers)
            entry = layers.setdefault(key, {})
            entry["mapping"] = {**entry.get("mapping", {}), **mapping_directives(m)}
    else:
        raise ConfigError(f"explore points of {k} designs cannot be written as a config")
    if layers:
        raw["layers"] = layers
    return raw


def save_config(path: str | Path, ex: Any, point: Any, base: Config, header: str = "") -> dict[str, Any]:
    """Write :func:`point_config` to ``path`` as YAML (JSON for a ``.json`` name), ``header`` as
    comment lines above it; returns the config written."""
    import json

    import yaml

    raw = point_config(ex, point, base)
    path = Path(path)
    if path.suffix.lower() == ".json":
        text = json.dumps(raw, indent=2) + "\n"
    else:
        comments = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
        text = comments + yaml.safe_dump(raw, sort_keys=False)
    write_text(path, text, "config", "--save-config")
    return raw


def describe(ex: Any, point: Any) -> str:
    """``#3: 12 tiles, batch 8, 1 replica(s), latency 1,234 ns, interval 567 ns``."""
    interval = (f"step interval {point.interval_ns:,.1f} ns, sequence interval {point.sample_interval_ns:,.0f} ns"
                if kind(ex) == "recurrent" else f"interval {point.interval_ns:,.0f} ns")
    posts = f", posts {point.posts}" if getattr(point, "posts", "") else ""
    posts += ", the rows mapping" if getattr(point, "mapping", "") == "rows" else ""
    return (f"#{point_id(ex, point)}: {point.tiles} tiles, batch {point.batch}, {getattr(point, 'replicas', 1)} "
            f"replica(s), latency {point.latency_ns:,.0f} ns, {interval}{posts}")
