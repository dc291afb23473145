"""The CNN settings of a config, checked: which mapping, and the per-layer directives.

```yaml
cnn:
  mapping: thesis            # stream (frame) | rows | thesis (default auto: whole frames when they fit, else rows)
  replicas: auto             # stream only: copies of the design (auto: as many as fit)
  mover_clock_mhz: 312.5     # mm2s / s2mm and PLIO clock
layers:
  conv1:
    mapping: {tile: [16, 32, 64], kernels: 16, k_chunks: 2, k_pad: 32, mmul: [4, 2, 4],
              plio_in: 4, pl_kernel: activation, pl_clock_mhz: 260}   # thesis
  conv3:
    mapping: {groups: 4}     # stream: output channel groups (cascade rows)
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..config import Config
from ..devices import Device
from ..errors import ConfigError, PlanError
from ..pareto import undominated
from ..passes.search import Exploration, Point, ranked
from ..progress import track
from .perf import estimate
from .plan import (
    CnnPlan,
    ThesisLayer,
    TileUse,
    check_fits,
    max_replicas,
    mmul_shape,
    residual_group_error,
    round_up,
    skip_groups,
    stream_plan,
)
from .stages import Stage

MAPPINGS = ("stream", "rows", "thesis", "auto")
_TOP = {"mapping", "replicas", "mover_clock_mhz"}
_STREAM_KEYS = {"groups"}
_THESIS_KEYS = {"tile", "kernels", "k_chunks", "k_pad", "mmul", "plio_in", "pl_kernel", "pl_clock_mhz"}
PL_KERNELS = ("activation", "pixelshuffle", "s2mm")


def _int(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{where} must be a positive integer, got {v!r}")
    return v


def design_settings(config: Config) -> dict[str, Any]:
    raw = dict(config.cnn)
    unknown = set(raw) - _TOP
    if unknown:
        raise ConfigError(f"cnn: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_TOP))}")
    mapping = str(raw.get("mapping", "auto")).lower()
    if mapping in ("ours", "frame"):
        mapping = "stream"
    if mapping not in MAPPINGS:
        raise ConfigError(f"cnn.mapping {raw['mapping']!r} is not one of {', '.join(MAPPINGS)}")
    replicas = raw.get("replicas", "auto")
    if replicas != "auto":
        replicas = _int(replicas, "cnn.replicas")
    clock = raw.get("mover_clock_mhz", 312.5)
    if not isinstance(clock, int | float) or clock <= 0:
        raise ConfigError(f"cnn.mover_clock_mhz must be a positive number, got {clock!r}")
    return {"mapping": mapping, "replicas": replicas, "mover_clock_hz": float(clock) * 1e6}


def _directives(config: Config, stage: Stage, allowed: set[str], mapping: str) -> dict[str, Any]:
    names = ([stage.name, *stage.aliases] + ([stage.shuffle_name] if stage.shuffle_name else [])  # its node(s)
             + ([stage.residual.name] if stage.residual else []))
    raw: dict[str, Any] = {}
    for n in names:
        raw.update(dict(config.layer(n).mapping))
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(f"layers.{stage.name}.mapping: key(s) {', '.join(sorted(unknown))} do not apply to the "
                          f"{mapping} mapping; allowed: {', '.join(sorted(allowed))}")
    return raw


# ------------------------------------------------------------------------------- stream ("ours")


def _group_options(stage: Stage, fixed: int | None) -> list[int]:
    if stage.kind != "conv":
        return [0]
    if fixed is not None:
        return [fixed]
    r2 = (stage.shuffle or 1) ** 2
    o = stage.out_channels
    return [g for g in range(1, min(o, 8) + 1) if o % g == 0 and (o // g) % r2 == 0]


def stream_candidates(device: Device, stages: tuple[Stage, ...], config: Config,
                      settings: dict[str, Any]) -> tuple[list[CnnPlan], PlanError | None]:
    """Every legal stream mapping: each combination of output-group counts (divisors of each
    convolution's channels, at most one per array row) whose tiles fit their memory, with the
    config's replicas, or for ``auto`` as many as the array and its PLIOs hold (and, when the
    config has a target, every power of two below that too); the first reason one failed.  A
    convolution with a fused residual add takes its skip producer's group count (``skip_groups``)."""
    fixed: dict[str, int | None] = {}
    for s in stages:
        d = _directives(config, s, _STREAM_KEYS, "stream")
        fixed[s.name] = _int(d["groups"], f"layers.{s.name}.mapping.groups") if "groups" in d else None
        if fixed[s.name] is not None and s.kind != "conv":
            raise ConfigError(f"layers.{s.name}.mapping.groups: a {s.kind} layer keeps its producer's output groups; "
                              "groups apply to convolutions", hint="give the groups to the convolution before it")
    options = [(s.name, _group_options(s, fixed[s.name])) for s in stages]
    plans: list[CnnPlan] = []
    first_error: PlanError | None = None

    def walk(i: int, chosen: dict[str, int]) -> None:
        nonlocal first_error
        if i == len(options):
            try:
                plan = stream_plan(device, stages, chosen, 1)
                check_fits(plan)
            except PlanError as e:
                first_error = first_error or e
                return
            most = max_replicas(plan)
            if settings["replicas"] != "auto":
                reps = [settings["replicas"]]
                if reps[0] > most:
                    first_error = first_error or PlanError(f"{reps[0]} replicas do not fit the array (at most {most})")
                    return
            elif targeted(config):
                reps = sorted({most, *(1 << k for k in range(most.bit_length()) if 1 << k <= most)})
            else:
                reps = [most]
            plans.extend(CnnPlan("stream", device, stages, plan.layers, r, settings["mover_clock_hz"]) for r in reps)
            return
        name, opts = options[i]
        res = stages[i].residual
        if res is not None:  # the fused add reads the skip group by group: the same count
            tied = skip_groups(stages, res.skip_from, chosen)
            if tied not in opts:
                first_error = first_error or residual_group_error(stages[i], opts[0], tied)
                return
            opts = [tied]
        for g in opts:
            walk(i + 1, {**chosen, name: g} if g else chosen)

    walk(0, {})
    return plans, first_error


def targeted(config: Config) -> bool:
    """Whether the user gave a target (``resources`` too): then it ranks the candidates; without
    one the stream mapping keeps the most frames per second."""
    return config.targeted


def _pick(points: list[Point], config: Config) -> Point:
    if targeted(config):
        return ranked(tuple(points), config.target)[0]
    return max(points, key=lambda p: (1 / p.sample_interval_ns, -p.tiles))


def plan_point(plan: CnnPlan) -> Point:
    """The plan as a point of the search (``passes.search``): tiles, latency, interval and the
    layers' rectangles; a batch is one frame per replica."""
    e = estimate(plan)
    shape = tuple((lay.stage, lay.cas_len, lay.cas_num) for lay in plan.layers)
    return Point(plan.tiles, e.latency_s * 1e9, e.interval_s * 1e9, shape, 1, plan.replicas)


def stream_design(device: Device, stages: tuple[Stage, ...], config: Config, settings: dict[str, Any]) -> CnnPlan:
    """The stream mapping: without a target the performance model's best frames per second (ties
    to fewer tiles); with one, ``passes.search.ranked`` picks among every candidate by the target
    (fewest tiles, latency, interval per frame, budgets), as for chains and DAGs."""
    plans, first_error = stream_candidates(device, stages, config, settings)
    if not plans:
        raise first_error or PlanError("no stream mapping fits")
    points = [plan_point(p) for p in track(plans, "cost the CNN stream mappings")]
    return plans[points.index(_pick(points, config))]


def explore_stream(device: Device, stages: tuple[Stage, ...], config: Config) -> Exploration:
    """``aieflow explore`` for a CNN: the Pareto front (tiles, latency, interval per frame) of the
    stream mappings ``compile`` chooses among (with ``cnn.mapping: auto``, the default, the rows plan
    too: a point whose ``mapping`` is "rows"), and the target's pick; each point's figures are the
    design estimate (``cnn.perf.estimate``, ``rows.estimate_rows``) of that very plan."""
    settings = design_settings(config)
    _check_device(device, stages)
    if settings["mapping"] not in ("stream", "auto"):
        raise ConfigError(f"explore searches the stream mapping (and, with auto, the rows plan); the "
                          f"{settings['mapping']} mapping is fixed", hint="leave cnn.mapping out (auto) to explore")
    # every replica count is a candidate on the front; the pick is compile's (the target's, or
    # without one the most frames per second)
    wide = replace(config, given=config.given | {"target"})
    if settings["mapping"] == "auto":  # and the rows plan, which auto ranks beside them
        plans, points, stream_error, rows_error = _candidates(device, stages, wide, settings)
        if not plans:
            raise stream_error
    else:
        plans, first_error = stream_candidates(device, stages, wide, settings)
        if not plans:
            raise first_error or PlanError("no stream mapping fits")
        points = [plan_point(p) for p in track(plans, "cost the CNN stream mappings")]
    key = lambda p: (p.tiles, p.latency_ns, p.sample_interval_ns)  # noqa: E731
    front = tuple(undominated(list(points), key))
    return Exploration(config.target, front, _pick(points, config), len(points), (1,))


# ------------------------------------------------------------------------------- thesis


def thesis_design(device: Device, stages: tuple[Stage, ...], config: Config, settings: dict[str, Any]) -> CnnPlan:
    """The thesis's design from the per-layer directives (examples/espcn/thesis.yaml)."""
    layers: list[ThesisLayer] = []
    limit = device.generation.data_memory_bytes
    for s in stages:
        if s.residual is not None:
            raise PlanError(f"the thesis mapping runs chains of fp32 convolutions; the residual add "
                            f"'{s.residual.name}' (onto '{s.name}', skip from '{s.residual.skip_name}') is mapped "
                            "by the stream mapping only", layer=s.residual.name,
                            hint="leave cnn.mapping out (stream) for residual networks")
        if s.concat is not None:
            raise PlanError(f"the thesis mapping runs chains of fp32 convolutions; the concat '{s.concat.name}' "
                            f"read by '{s.name}' is mapped by the stream mapping only", layer=s.concat.name,
                            hint="leave cnn.mapping out (stream) for networks with concatenated skips")
    for i, s in enumerate(stages):
        if s.kind != "conv" or not s.is_float:
            raise PlanError("the thesis mapping runs fp32 convolutions only (+ a final pixel shuffle)", layer=s.name,
                            hint="use precision fp32 and cnn.mapping stream for other layers")
        if s.up != (1, 1) or s.groups > 1 or s.dilation != (1, 1):
            what = "a nearest upsampling" if s.up != (1, 1) else "grouped / dilated convolutions"
            raise PlanError(f"the thesis mapping does not run {what}", layer=s.name,
                            hint="leave cnn.mapping out (stream)")
        d = _directives(config, s, _THESIS_KEYS, "thesis")
        where = f"layers.{s.name}.mapping"
        missing = {"tile", "kernels"} - set(d)
        if missing:
            raise ConfigError(f"{where}: the thesis mapping needs {', '.join(sorted(missing))} for every convolution")
        tile = d["tile"]
        if not isinstance(tile, list | tuple) or len(tile) != 3:
            raise ConfigError(f"{where}.tile must be [tile_m, tile_k, tile_n], got {tile!r}")
        tm, tk, tn = (_int(v, f"{where}.tile") for v in tile)
        m, k, n = s.out_channels, s.geometry.patch, s.geometry.pixels
        k_pad = _int(d.get("k_pad", k), f"{where}.k_pad")
        if k_pad < k:
            raise ConfigError(f"{where}.k_pad {k_pad} is smaller than the layer's K = {k}")
        if tk != k_pad:
            raise ConfigError(f"{where}.tile K {tk} must be the whole (padded) K = {k_pad}; K is cut with k_chunks")
        if m % tm or n % tn:
            raise PlanError(f"the {m} x {k_pad} x {n} product does not split into {tm} x {tk} x {tn} tiles", layer=s.name)
        mm = tuple(_int(v, f"{where}.mmul") for v in d.get("mmul", mmul_shape(device, s)))
        if mm != mmul_shape(device, s):
            raise ConfigError(f"{where}.mmul {list(mm)}: fp32 on {device.generation.name} uses "
                              f"{list(mmul_shape(device, s))}")
        if tm % mm[2] or tn % mm[0] or k_pad % mm[1]:
            raise PlanError(f"tile {tm} x {k_pad} x {tn} is not whole aie::mmul<{mm[0]},{mm[1]},{mm[2]}> blocks "
                            "(pixels x K x channels)", layer=s.name)
        chunks = _int(d.get("k_chunks", 1), f"{where}.k_chunks")
        if k_pad % chunks or (k_pad // chunks) % mm[1]:
            raise PlanError(f"K = {k_pad} does not split into {chunks} chunks of whole mmul blocks", layer=s.name)
        kernels = _int(d["kernels"], f"{where}.kernels")
        if kernels != (m // tm) * (n // tn):
            raise PlanError(f"{kernels} kernels were asked for; {m} x {n} in {tm} x {tn} tiles makes "
                            f"{(m // tm) * (n // tn)}", layer=s.name)
        plio_in = _int(d.get("plio_in", n // tn), f"{where}.plio_in")
        if (n // tn) % plio_in:
            raise PlanError(f"{n // tn} N blocks cannot share {plio_in} input PLIOs evenly", layer=s.name)
        last = i == len(stages) - 1
        pl_kernel = d.get("pl_kernel", ("pixelshuffle" if s.shuffle else "s2mm") if last else "activation")
        if pl_kernel not in PL_KERNELS:
            raise ConfigError(f"{where}.pl_kernel {pl_kernel!r} is not one of {', '.join(PL_KERNELS)}")
        if last != (pl_kernel != "activation") or (pl_kernel == "pixelshuffle") != bool(s.shuffle):
            raise PlanError(f"pl_kernel {pl_kernel} does not fit this layer's place in the network", layer=s.name,
                            hint="activation between convolutions; pixelshuffle (or s2mm) after the last")
        clock = d.get("pl_clock_mhz", device.pl_clock_hz / 1e6)
        if not isinstance(clock, int | float) or clock <= 0:
            raise ConfigError(f"{where}.pl_clock_mhz must be a positive number, got {clock!r}")
        if s.activation not in (None, "tanh") or (s.activation == "tanh" and s.table is None):
            raise PlanError("the thesis mapping's PL activation kernel is the tanh lookup table", layer=s.name,
                            hint="set activations: {tanh: espcn-thesis}")
        mem = (k_pad * tn * 4  # patch window (single buffered)
               + tm * k_pad * 4  # weights
               + tm * mm[0] * 4  # bias block
               + tm * tn * 4  # output window
               + (tm * tn * 4 if chunks > 1 else 0)  # partial sums between K chunks
               + 1024)
        layers.append(ThesisLayer(s.name, m, k, k_pad, n, tm, tn, chunks, mm, plio_in, kernels, TileUse(mem, limit),
                                  pl_kernel, float(clock) * 1e6))
    plan = CnnPlan("thesis", device, stages, tuple(layers), 1, settings["mover_clock_hz"])
    total = sum(lay.kernels for lay in layers)
    if total > device.compute_tiles:
        raise PlanError(f"{total} kernels do not fit the array's {device.compute_tiles} tiles")
    return plan


def _check_device(device: Device, stages: tuple[Stage, ...]) -> None:
    gen = device.generation
    for s in stages:
        name = s.in_type.name if s.is_float else ""
        if name and name not in gen.float_types:
            need = "AIE1 (vck190)" if name == "fp32" else "AIE-ML or AIE-MLv2 (vek280, vek385)"
            raise PlanError(f"{name} convolutions need {need}; {device.key} has {gen.name}", layer=s.name,
                            hint=f"use precision {' or '.join(sorted(gen.float_types) + ['an integer precision'])} "
                            f"on {device.key}")


def _refuse_bf16(stages: tuple[Stage, ...], mapping: str) -> None:
    """bf16 runs on the stream and rows mappings (templates/cnn/cnn_kernels.h, rows_kernels.h).  The
    thesis's design is fp32 on both sides of the PL boundary: its AIE kernels are fp32
    ``aie::mmul<4, 2, 4>`` blocks (thesis_kernels.h), its PL kernels move four float32 values per
    128-bit word and its PL activation kernel is the fp32 espcn-thesis tanh table (thesis_pl.h).  A
    bf16 version needs bf16 AIE kernels, 16-bit PL lanes and a PL port of the bf16 tanh table
    (ops/activation.py), none of which exists: refused, naming that (docs/conv.md)."""
    for s in stages:
        if s.is_float and s.in_type.name == "bf16":
            raise PlanError(f"the {mapping} mapping has no bf16 kernels: it is the thesis's fp32 design (fp32 "
                            "aie::mmul<4,2,4> AIE kernels; PL kernels that move four float32 values per 128-bit word "
                            "and apply the fp32 espcn-thesis tanh table), and a bf16 version of the AIE kernels and of "
                            "the PL tanh (the exactly rounded bf16 table) is not written; bf16 CNNs run on the stream "
                            "and rows mappings", layer=s.name,
                            hint="leave cnn.mapping out (stream or rows), or use an integer precision")


def make_plan(device: Device, stages: tuple[Stage, ...], config: Config) -> CnnPlan:
    settings = design_settings(config)
    _check_device(device, stages)
    if settings["mapping"] == "thesis":
        _refuse_bf16(stages, settings["mapping"])
    if settings["mapping"] == "thesis":
        if config.targeted:
            raise ConfigError("config option 'target' does not apply to the thesis mapping: its directives fix the "
                              "design", hint="leave target out, or use cnn.mapping stream")
        return thesis_design(device, stages, config, settings)
    if settings["mapping"] == "rows":
        return rows_design(device, stages, config, settings)
    if settings["mapping"] == "auto":
        return auto_design(device, stages, config, settings)
    return stream_design(device, stages, config, settings)


def rows_point(plan: CnnPlan) -> Point:
    """The rows plan as a point of the search: its estimate (``rows.estimate_rows``, what compile
    reports), one kernel per layer, one frame per graph iteration."""
    from .rows import estimate_rows

    e = estimate_rows(plan)
    shape = tuple((lay.stage, 1, 1) for lay in plan.layers)
    return Point(plan.tiles, e.latency_s * 1e9, e.interval_s * 1e9, shape, 1, 1, mapping="rows")


def _candidates(device: Device, stages: tuple[Stage, ...], config: Config, settings: dict[str, Any]):
    """``cnn.mapping: auto``'s candidates: every stream plan and the rows plan, each with its point
    (stream first, so that ranking ties go to whole frames), and why each mapping did not fit (None
    where it did)."""
    plans, stream_error = stream_candidates(device, stages, config, settings)
    points = [plan_point(p) for p in track(plans, "cost the CNN stream mappings")]
    if plans:
        stream_error = None
    else:
        stream_error = stream_error or PlanError("no stream mapping fits")
    try:
        rows = rows_design(device, stages, config, settings, searched=True)
    except (PlanError, ConfigError) as e:
        return plans, points, stream_error, e
    return [*plans, rows], [*points, rows_point(rows)], stream_error, None


def _figures(p: Point) -> str:
    return (f"latency {p.latency_ns / 1e3:,.1f} us, {1e9 / p.sample_interval_ns:,.0f} frames/s, "
            f"{p.tiles} tiles")


def auto_design(device: Device, stages: tuple[Stage, ...], config: Config, settings: dict[str, Any]) -> CnnPlan:
    """``cnn.mapping: auto``: both mappings costed with the estimates compile reports (the stream
    plans' ``cnn.perf.estimate``, the rows plan's ``rows.estimate_rows``) and ranked together by the
    target (``passes.search.ranked``: its objective and budgets), or without one by frames per
    second (fewer tiles on a tie); a tie goes to the stream mapping.  Where only one fits, that
    one; where neither, a PlanError naming both reasons.  The plan's ``choice`` says which and why."""
    plans, points, stream_error, rows_error = _candidates(device, stages, config, settings)
    if not plans:
        assert stream_error is not None and rows_error is not None
        raise PlanError(f"{stream_error.message} (whole frames, the stream mapping); and the rows mapping: "
                        f"{rows_error}", layer=getattr(stream_error, "layer", None),
                        hint=getattr(stream_error, "hint", None))
    chosen = _pick(points, config)
    plan = plans[points.index(chosen)]
    by = f"target {config.target.to_string()}" if targeted(config) else "frames per second"
    if stream_error is not None:
        why = f"rows: whole frames do not fit ({_reason(stream_error)})"
    elif rows_error is not None:
        why = f"stream: the rows mapping does not fit ({_reason(rows_error)})"
    else:
        alt = _best([p for p in points if p.mapping != chosen.mapping], config)
        why = (f"{plan.mapping} by {by}: {_figures(chosen)}; {'rows' if plan.mapping == 'stream' else 'stream'}: "
               f"{_figures(alt)}")
    return replace(plan, choice=" ".join(why.split()))


def _reason(e: Exception) -> str:
    """An error's text without its hint (the layer and the message)."""
    return str(e).split("\n")[0]


def _best(points: list[Point], config: Config) -> Point:
    """The target's pick among ``points``, or where none meets its budgets the most frames per second."""
    try:
        return _pick(points, config)
    except PlanError:
        return min(points, key=lambda p: (p.sample_interval_ns, p.tiles))


def rows_design(device: Device, stages: tuple[Stage, ...], config: Config, settings: dict[str, Any],
                searched: bool = False) -> CnnPlan:
    """The rows mapping (``cnn/rows.py``): one kernel per stage, no choices to search; a target
    (unless ``auto`` ranks this plan beside the stream plans: ``searched``) and per-layer ``groups``
    are refused by name."""
    from .rows import rows_plan

    if config.targeted and not searched:
        raise ConfigError("config option 'target' does not apply to the rows mapping: one kernel per layer, nothing "
                          "to search", hint="leave target out, or use cnn.mapping stream")
    for s in stages:
        d = _directives(config, s, _STREAM_KEYS, "rows")
        if d:
            raise ConfigError(f"layers.{s.name}.mapping: {', '.join(sorted(d))} do(es) not apply to the rows mapping "
                              "(one kernel per layer)", hint="leave layers.<name>.mapping out with cnn.mapping rows")
    return rows_plan(device, stages, settings)


def describe(raw: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in raw.items())


__all__ = ["make_plan", "design_settings", "round_up"]
