"""``aieflow sweep SPEC.yaml``: compile (and optionally verify) every point of models x devices x
configs x grid x targets, each point a task on Dask (``dask.distributed``), and gather the results
into one table (CSV, and Parquet when ``pyarrow`` is installed) and a Pareto plot per model and
device.  The spec format is in docs/sweeps.md.

- **Where the points run**: a local cluster of ``workers`` processes (default one per core, at most
  one per point), an existing cluster (``scheduler``: its address), or one by one in this process
  (``workers=0``: no Dask at all).  A point is a small picklable :class:`Point` (the model is named,
  not shipped: each worker builds or reads it) and :func:`run_point` returns a plain ``dict`` (and
  the design itself, a picklable object, when the spec asks to save the designs).
- **Resumable**: a point's result is written to ``OUT/points/<key>.json`` as soon as it arrives;
  ``key`` is a stable hash of everything that decides the result (the model's contents, the device,
  the merged config, the verify settings, aieflow's version), never of the labels.  A rerun skips
  every point with a result, so a sweep stopped midway finishes only the rest; editing one config
  reruns only its points.
- **Errors are results**: a point the compiler refuses (an :class:`AieflowError`) is ``refused``, an
  internal error is ``error`` (its traceback in the point's JSON), a point whose worker died is
  ``error`` too; the sweep goes on.  Only a bad spec or output directory stops it, before any point
  runs.
- **The x86 build cache** (verify) is ``cache_dir`` (the spec's key or ``--cache-dir``), else each
  machine's own (:func:`aieflow.cache.cache_root`): on one machine every worker shares it already;
  for workers on several machines give a directory they all mount.  Builds are keyed by the hash of
  their sources and staged atomically, and one build per key runs at a time (``verify.build_units``).
"""

from __future__ import annotations

import contextlib
import copy
import csv
import hashlib
import io
import itertools
import json
import logging
import os
import socket
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from . import __version__
from .atomic import _locked, output_path, write_text
from .errors import AieflowError, ConfigError, did_you_mean

log = logging.getLogger(__name__)

SPEC_KEYS = ("models", "devices", "configs", "grid", "targets", "verify", "save_designs", "cache_dir")
MODEL_KEYS = ("file", "zoo", "args", "input_shape", "calibration")
VERIFY_KEYS = ("samples", "seed")
ZOO = ("qdq_mlp", "torch_mlp", "espcn", "cnn_classifier", "residual_cnn", "residual_mlp", "gru_classifier")
MAX_POINTS = 100_000
MANIFEST = "sweep.json"
FORMAT = "aieflow-sweep"
CALIBRATION_SAMPLES = 64  # generated float samples of a model with ``input_shape`` and no calibration file

# the table: the point's labels, its grid values (``grid.KEY``), then these (``RESULTS``: what
# run_point measures), then ``pareto``
LABELS = ("point", "model", "device", "config", "target")
RESULTS = ("status", "kind", "latency_ns", "interval_ns", "batch", "replicas", "sample_interval_ns",
           "throughput_ops_per_s", "tiles_used", "memory_tiles_used", "bound", "verify", "verify_mismatches",
           "verify_cached", "compile_s", "verify_s", "error")
TIMINGS = ("compile_s", "verify_s")  # differ from run to run; everything else is the point's own result
FINISHED = ("ok", "refused", "error")  # a point with one of these is not run again (error: unless retried)


# ------------------------------------------------------------------------------------ the spec


@dataclass(frozen=True)
class ModelSpec:
    """A model of the spec: an ONNX file or a :mod:`aieflow.model_zoo` function and its arguments,
    with optional float samples (a ``.npy`` file, or ``input_shape`` for generated ones)."""

    label: str
    file: str | None = None  # absolute path of an .onnx file
    zoo: str | None = None
    args_json: str = "{}"  # the zoo function's keyword arguments, canonical JSON
    input_shape: tuple[int, ...] | None = None
    calibration: str | None = None  # absolute path of a .npy file
    digest: str = ""  # SHA-256 of the file's and the calibration's contents

    def identity(self) -> dict[str, Any]:
        """What decides the model (not its label, not where its files are)."""
        return {"zoo": self.zoo, "args": json.loads(self.args_json), "input_shape": self.input_shape,
                "contents": self.digest}


@dataclass(frozen=True)
class Point:
    """One compile of a sweep; :func:`run_point` runs it anywhere aieflow is installed."""

    key: str  # the stable hash: results are stored and found under it
    model: ModelSpec
    device: str
    config_label: str
    target: str | None  # the spec's target for this point, else the config's own (None: none)
    grid: tuple[tuple[str, Any], ...]  # (dotted config key, value) of the point's grid combination
    config_json: str  # the merged config (configs entry + grid + target), canonical JSON
    verify: tuple[int | None, int] | None  # (samples or the kind's default, seed), or no verify
    cache_dir: str | None = None  # the x86 build cache verify uses (None: the machine's own)
    save_design: bool = False

    @property
    def config(self) -> dict[str, Any]:
        return json.loads(self.config_json)

    def labels(self) -> dict[str, Any]:
        return {"point": self.key, "model": self.model.label, "device": self.device, "config": self.config_label,
                "target": self.target or "", **{f"grid.{k}": v for k, v in self.grid}}


@dataclass(frozen=True)
class Sweep:
    path: Path
    points: tuple[Point, ...]  # in the spec's order: models, devices, configs, grid, targets
    grid_keys: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return (*LABELS, *(f"grid.{k}" for k in self.grid_keys), *RESULTS, "pareto")


def load_spec(path: str | os.PathLike, verify: bool | None = None, cache_dir: str | os.PathLike | None = None) -> Sweep:
    """Read and check a sweep spec (YAML, or JSON for ``.json``); every point's config is parsed
    here, so a mistake is an error naming the spec's key before anything runs.  ``verify`` (the
    command line's ``--verify``) turns verification on with the spec's settings; ``cache_dir``
    replaces the spec's ``cache_dir``."""
    from .config import read_mapping_file

    p = Path(path)
    where = f"sweep spec '{p}'"
    raw = read_mapping_file(p, "sweep spec")
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping with 'models' and optionally {', '.join(SPEC_KEYS[1:])}; "
                          f"got {type(raw).__name__}", hint="see docs/sweeps.md for the format")
    _known(raw, SPEC_KEYS, where)
    base = p.parent
    models = _models(raw.get("models"), base, where)
    devices = _devices(raw.get("devices", ["vek280"]), where)
    configs = _configs(raw.get("configs"), base, where)
    grid_keys, combos = _grid(raw.get("grid"), where)
    targets = _targets(raw.get("targets"), where)
    checks = _verify(raw.get("verify", False), where)
    if verify and checks is None:
        checks = (None, 0)
    if cache_dir is None and raw.get("cache_dir") is not None:
        if not isinstance(raw["cache_dir"], str) or not raw["cache_dir"]:
            raise ConfigError(f"{where}: cache_dir must be a directory name, got {raw['cache_dir']!r}")
        cache_dir = base / raw["cache_dir"]
    save = raw.get("save_designs", False)
    if not isinstance(save, bool):
        raise ConfigError(f"{where}: save_designs must be true or false, got {save!r}")
    total = len(models) * len(devices) * len(configs) * len(combos) * len(targets)
    if total > MAX_POINTS:
        raise ConfigError(f"{where} has {total:,} points; a sweep has at most {MAX_POINTS:,}",
                          hint="split it into several sweeps")
    points = []
    cache = str(Path(cache_dir).resolve()) if cache_dir is not None else None
    for model, device, (label, cfg), combo, target in itertools.product(models, devices, configs, combos, targets):
        merged = _merged(cfg, combo, target, f"{where}: configs.{label}")
        _check_config(merged, label, combo, target, where)
        key = point_key(model, device, merged, checks)
        shown = target if target is not None or merged.get("target") is None else _target_text(merged["target"])
        points.append(Point(key, model, device, label, shown, combo, _canonical(merged), checks, cache, save))
    return Sweep(p, tuple(points), grid_keys)


def _target_text(raw: Any) -> str:
    from .config import parse_target

    return parse_target(raw).to_string()


def point_key(model: ModelSpec, device: str, config: Mapping[str, Any], verify: Any) -> str:
    """The stable hash of a point: the same model contents, device, config and verify settings with
    the same aieflow give the same key, on any machine, in any order of keys."""
    ident = {"aieflow": __version__, "model": model.identity(), "device": device, "config": config,
             "verify": None if verify is None else list(verify)}
    return hashlib.sha256(_canonical(ident).encode()).hexdigest()[:20]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _known(raw: Mapping, allowed: Sequence[str], where: str) -> None:
    unknown = [k for k in raw if k not in allowed]
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; allowed: {', '.join(allowed)}",
                          hint=did_you_mean(map(str, unknown), allowed))


def _digest(path: Path, what: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as e:
        raise ConfigError(f"{what}: cannot read '{path}': {e.strerror}", hint="paths are relative to the spec file") from None


def _models(raw: Any, base: Path, where: str) -> list[ModelSpec]:
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{where}: models must be a mapping from a label to an .onnx file or "
                          "{{zoo: NAME, args: {{...}}}}", hint="e.g. models: {mlp: {zoo: qdq_mlp, args: {widths: [16, 32, 8]}}}")
    out = []
    for label, entry in raw.items():
        at = f"{where}: models.{label}"
        if isinstance(entry, str):
            entry = {"file": entry}
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{at} must be an .onnx file name or a mapping with 'file' or 'zoo', got {entry!r}")
        _known(entry, MODEL_KEYS, at)
        if ("file" in entry) == ("zoo" in entry):
            raise ConfigError(f"{at} needs exactly one of 'file' (an .onnx model) and 'zoo' (an aieflow.model_zoo "
                              "function)")
        digest = hashlib.sha256()
        file = zoo = None
        if "file" in entry:
            if not isinstance(entry["file"], str) or not entry["file"].lower().endswith(".onnx"):
                raise ConfigError(f"{at}.file must name an .onnx file, got {entry['file']!r}",
                                  hint="export PyTorch models to ONNX, or use a model_zoo entry")
            path = (base / entry["file"]).resolve()
            if not path.is_file():
                raise ConfigError(f"{at}.file: '{path}' does not exist", hint="paths are relative to the spec file")
            file = str(path)
            digest.update(_digest(path, f"{at}.file").encode())
        else:
            zoo = entry["zoo"]
            if zoo not in ZOO:
                raise ConfigError(f"{at}.zoo: {zoo!r} is not a model of aieflow.model_zoo; choose one of "
                                  f"{', '.join(ZOO)}", hint=did_you_mean(str(zoo), ZOO))
        args = entry.get("args", {})
        if not isinstance(args, Mapping) or (args and file):
            raise ConfigError(f"{at}.args must be a mapping of the zoo function's keyword arguments"
                              + (" (a file model takes none)" if file else f", got {args!r}"))
        shape = entry.get("input_shape")
        if shape is not None:
            if (not isinstance(shape, list) or not shape
                    or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape)):
                raise ConfigError(f"{at}.input_shape must be a list of positive integers (one sample's shape, "
                                  f"without the batch), got {shape!r}")
            shape = tuple(shape)
        calibration = None
        if entry.get("calibration") is not None:
            cal = entry["calibration"]
            if not isinstance(cal, str) or not cal.lower().endswith(".npy"):
                raise ConfigError(f"{at}.calibration must name a .npy file of float samples, got {cal!r}")
            path = (base / cal).resolve()
            calibration = str(path)
            digest.update(b"calibration\0" + _digest(path, f"{at}.calibration").encode())
        out.append(ModelSpec(str(label), file, zoo, _canonical(dict(args)), shape, calibration,
                             digest.hexdigest() if (file or calibration) else ""))
    return out


def _devices(raw: Any, where: str) -> list[str]:
    from .devices import DEVICES

    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: devices must be a list of device names ({', '.join(DEVICES)}), got {raw!r}")
    out = []
    for d in items:
        key = str(d).lower()
        if key not in DEVICES:
            raise ConfigError(f"{where}: devices: unknown device {d!r}; choose among {', '.join(DEVICES)}",
                              hint=did_you_mean(key, DEVICES))
        out.append(key)
    return out


def _configs(raw: Any, base: Path, where: str) -> list[tuple[str, dict[str, Any]]]:
    from .config import read_mapping_file

    if raw is None:
        return [("default", {})]
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{where}: configs must be a mapping from a label to a config (a mapping, as in a "
                          "--config file) or a config file name", hint="e.g. configs: {int8: {precision: int8}}")
    out = []
    for label, entry in raw.items():
        if isinstance(entry, str):
            entry = read_mapping_file(base / entry, f"config file of configs.{label}")
        if entry is None:
            entry = {}
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: configs.{label} must be a config mapping or a file name, got {entry!r}")
        out.append((str(label), copy.deepcopy(dict(entry))))
    return out


def _grid(raw: Any, where: str) -> tuple[tuple[str, ...], list[tuple[tuple[str, Any], ...]]]:
    """The grid's keys and every combination of its values (the first key varying slowest)."""
    if raw is None:
        return (), [()]
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{where}: grid must be a mapping from a config key (dotted for nested ones, e.g. "
                          "layers.fc0.parallelism.cas_len) to a list of values")
    keys = []
    for k, values in raw.items():
        if not isinstance(k, str) or not k or any(not part for part in k.split(".")):
            raise ConfigError(f"{where}: grid key {k!r} must be a config key, dotted for nested ones")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: grid.{k} must be a non-empty list of values, got {values!r}")
        keys.append(k)
    combos = [tuple(zip(keys, vs, strict=True)) for vs in itertools.product(*(raw[k] for k in keys))]
    return tuple(keys), combos


def _targets(raw: Any, where: str) -> list[str | None]:
    if raw is None:
        return [None]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: targets must be a list of targets (as compile --target takes), got {raw!r}",
                          hint="e.g. targets: [resources, latency, 'latency_ns <= 2000']")
    out = []
    for t in raw:
        if not isinstance(t, str) or not t.strip():
            raise ConfigError(f"{where}: targets: {t!r} is not a target", hint="e.g. latency, 'tiles <= 16'")
        out.append(t.strip())
    return out


def _verify(raw: Any, where: str) -> tuple[int | None, int] | None:
    if raw is False or raw is None:
        return None
    if raw is True:
        return (None, 0)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: verify must be true, false or {{samples: N, seed: S}}, got {raw!r}")
    _known(raw, VERIFY_KEYS, f"{where}: verify")
    samples, seed = raw.get("samples"), raw.get("seed", 0)
    for name, v, low in (("samples", samples, 1), ("seed", seed, 0)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low):
            raise ConfigError(f"{where}: verify.{name} must be an integer of at least {low}, got {v!r}")
    return (samples, seed)


def _merged(config: Mapping[str, Any], combo: tuple[tuple[str, Any], ...], target: str | None, where: str) -> dict:
    merged = copy.deepcopy(dict(config))
    for dotted, value in combo:
        node = merged
        *parents, last = dotted.split(".")
        for i, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{where}: the grid key '{dotted}' goes through "
                                  f"'{'.'.join(parents[:i + 1])}', which is not a mapping in this config")
            node = child
        node[last] = copy.deepcopy(value)
    if target is not None:
        merged["target"] = target
    return merged


def _check_config(merged: dict, label: str, combo: tuple, target: str | None, where: str) -> None:
    from .config import parse_config

    try:
        parse_config(merged)
    except ConfigError as e:
        what = [f"configs.{label}"] + [f"{k} = {v!r}" for k, v in combo] + ([f"target '{target}'"] if target else [])
        raise ConfigError(f"{where}: the config of the points with {', '.join(what)}: {e.message}", hint=e.hint) from None


# ---------------------------------------------------------------------------------- one point


@lru_cache(maxsize=8)
def _model(spec: ModelSpec) -> tuple[Any, Any]:
    """(the model, its float samples or None), built or read once per process."""
    import numpy as np

    if spec.file is not None:
        import onnx

        model = onnx.load(spec.file)
    else:
        from . import model_zoo

        model = getattr(model_zoo, spec.zoo)(**json.loads(spec.args_json))
    samples = None
    if spec.calibration is not None:
        samples = np.load(spec.calibration, allow_pickle=False)
    elif spec.input_shape is not None:
        rng = np.random.default_rng(0)
        samples = rng.standard_normal((CALIBRATION_SAMPLES, *spec.input_shape)).astype(np.float32)
    return model, samples


def run_point(point: Point) -> tuple[dict[str, Any], Any]:
    """Compile the point (and verify it, if asked): ``(result, design)``, the design only when the
    spec saves designs and the compile succeeded.  Never raises for the point's own failures: they
    are its result (``status`` and ``error``)."""
    start = time.perf_counter()
    out: dict[str, Any] = {"key": point.key, "status": "ok", "error": None,
                           "worker": f"{socket.gethostname()}:{os.getpid()}"}
    design = None
    try:
        from .api import compile as compile_model

        model, samples = _model(point.model)
        if hasattr(model, "SerializeToString"):  # an ONNX proto: each compile its own copy
            model = type(model).FromString(model.SerializeToString())
        design = compile_model(model, device=point.device, example_input=samples, config=point.config,
                               calibration=samples)
        out["compile_s"] = time.perf_counter() - start
        meta = design.to_json()
        perf = meta["performance"]
        replicas = int(perf.get("replicas", 1))
        out.update(kind=meta["kind"], latency_ns=perf["latency_ns"], interval_ns=perf["interval_ns"],
                   batch=perf["batch"], replicas=replicas,
                   sample_interval_ns=perf["interval_ns"] / (perf["batch"] * replicas),
                   throughput_ops_per_s=perf["throughput_ops_per_s"], tiles_used=perf["tiles_used"],
                   memory_tiles_used=perf["memory_tiles_used"], bound=perf["bound"])
        if point.verify is not None:
            samples_n, seed = point.verify
            t = time.perf_counter()
            kw: dict[str, Any] = {"seed": seed, "cache_dir": point.cache_dir}
            if samples_n is not None:
                kw["samples"] = samples_n
            result = design.verify(**kw)
            out.update(verify="pass" if result.ok else "fail", verify_mismatches=int(result.mismatches),
                       verify_cached=bool(result.cached), verify_s=time.perf_counter() - t)
    except AieflowError as e:
        out.update(status="refused", error=str(e))
    except Exception as e:  # noqa: BLE001 - an internal error of one point is that point's result
        out.update(status="error", error=f"internal error: {type(e).__name__}: {e}", traceback=traceback.format_exc())
    keep = point.save_design and out["status"] == "ok"
    return out, design if keep else None


def _lost(point: Point, e: BaseException) -> dict[str, Any]:
    """The result of a point whose task failed outside :func:`run_point` (its worker died, or the
    result could not be shipped back)."""
    return {"key": point.key, "status": "error", "error": f"the task failed on the cluster: {type(e).__name__}: {e}",
            "worker": None}


# ---------------------------------------------------------------------------------- the sweep


@dataclass
class SweepRun:
    """What :func:`run` did: the table's rows (every point of the spec, in its order), how many
    points were done before, run now and are still pending, and the files written."""

    rows: list[dict[str, Any]]
    done_before: int
    ran: int
    pending: int
    files: list[Path] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(r["status"] == status for r in self.rows)


def run(
    spec: Sweep | str | os.PathLike,
    out: str | os.PathLike,
    workers: int | None = None,
    scheduler: str | None = None,
    limit: int | None = None,
    retry_errors: bool = False,
    on_point: Callable[[Point, dict[str, Any]], None] | None = None,
) -> SweepRun:
    """Run the points of ``spec`` that ``out`` holds no result for (with ``retry_errors`` also those
    that ended in an internal error; at most ``limit`` of them), then write the table and plots.

    ``workers``: local Dask worker processes (None: one per core, at most one per point to run;
    0: every point in this process, one after the other, without Dask); ``scheduler``: the address
    of a running Dask scheduler to use instead.  ``on_point(point, result)`` is called in this
    process as each result has been stored.  Interrupted (Ctrl-C, SIGTERM), the results that
    arrived are kept and the table is written with the rest ``pending``.
    """
    from .progress import task

    sweep = spec if isinstance(spec, Sweep) else load_spec(spec)
    if workers is not None and workers < 0:
        raise ConfigError(f"--workers must be 0 (no Dask) or more, got {workers}")
    if workers is not None and scheduler:
        raise ConfigError("--workers and --scheduler both say where the points run; give one",
                          hint="--scheduler uses the workers of that cluster")
    if limit is not None and limit < 0:
        raise ConfigError(f"--limit must be 0 or more, got {limit}")
    root = output_path(out)
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the parent of --out '{out}': {e.strerror}") from None
    with _locked(root, out):
        _prepare(root, out, sweep)
        results = _stored(root, sweep)
        todo, seen = [], set()
        for p in sweep.points:
            r = results.get(p.key)
            if p.key in seen or (r is not None and not (retry_errors and r["status"] == "error")):
                continue
            seen.add(p.key)
            todo.append(p)
        before = sum(k in results and not (retry_errors and results[k]["status"] == "error")
                     for k in {p.key for p in sweep.points})  # distinct points with a result kept
        if limit is not None:
            todo = todo[:limit]
        log.info("sweep %s: %d points (%d distinct), %d done before, %d to run now", sweep.path, len(sweep.points),
                 len({p.key for p in sweep.points}), before, len(todo))
        run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        ran = 0
        files: list[Path] = []

        with task("sweep", len(todo)) as bar:
            def record(point: Point, result: dict[str, Any], design: Any) -> None:
                nonlocal ran
                result = {**result, "run": run_id, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
                if design is not None:
                    design.save(root / "designs" / point.key, force=True)
                write_text(root / "points" / f"{point.key}.json", json.dumps(result, indent=1, default=str),
                           "point result", "--out")
                results[point.key] = result
                ran += 1
                bar.advance()
                log.info("point %s (%s on %s, %s): %s", point.key, point.model.label, point.device,
                         point.config_label, result["status"])
                if on_point is not None:
                    on_point(point, result)

            try:
                if not todo:
                    pass
                elif workers == 0:
                    for p in todo:
                        record(p, *run_point(p))
                else:
                    _on_dask(todo, workers, scheduler, record)
            finally:
                rows = table_rows(sweep, results)
                files = write_outputs(root, sweep, rows)
    return SweepRun(rows, before, ran, sum(r["status"] == "pending" for r in rows), files)


def _on_dask(todo: list[Point], workers: int | None, scheduler: str | None,
             record: Callable[[Point, dict[str, Any], Any], None]) -> None:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ConfigError("sweeps on Dask need the dask.distributed package",
                          hint="pip install 'aieflow[sweep]', or run the points one by one in this process "
                          "with --workers 0") from None
    with contextlib.ExitStack() as stack:
        if scheduler:
            try:
                client = stack.enter_context(Client(scheduler, timeout="20s"))
            except (OSError, TimeoutError, ValueError) as e:
                raise ConfigError(f"cannot connect to the Dask scheduler at '{scheduler}': {e}",
                                  hint="give the address the scheduler prints (tcp://HOST:8786), or leave "
                                  "--scheduler out for a local cluster") from None
        else:
            n = workers or min(os.cpu_count() or 1, len(todo))
            log.info("starting a local Dask cluster of %d worker processes", n)
            cluster = stack.enter_context(LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                       dashboard_address=None, silence_logs=logging.ERROR))
            client = stack.enter_context(Client(cluster))
        futures = {client.submit(run_point, p, key=f"aieflow-sweep-{p.key}", pure=False): p for p in todo}
        try:
            for fut in as_completed(futures):
                point = futures[fut]
                try:
                    result, design = fut.result()
                except Exception as e:  # noqa: BLE001 - the worker died, or the result did not come back
                    result, design = _lost(point, e), None
                record(point, result, design)
        except BaseException:
            client.cancel(list(futures))
            raise


def _prepare(root: Path, given: str | os.PathLike, sweep: Sweep) -> None:
    """``root`` is a new or empty directory, or a sweep's own (its ``sweep.json``): nothing else
    is written into."""
    manifest = root / MANIFEST
    if root.is_symlink():
        raise ConfigError(f"--out '{given}' is a symbolic link; aieflow does not write through links",
                          hint="pass the directory it points to, or a new one")
    if root.exists():
        if not root.is_dir():
            raise ConfigError(f"--out '{given}' exists and is not a directory", hint="pass a new directory")
        if not manifest.is_file() and any(root.iterdir()):
            raise ConfigError(f"--out '{given}' is not a sweep directory (it has no {MANIFEST}) and is not empty",
                              hint="pass a new directory, or the one an earlier run of this sweep wrote")
        if manifest.is_file():
            try:
                old = json.loads(manifest.read_text())
                ok = isinstance(old, dict) and old.get("format") == FORMAT
            except (OSError, ValueError):
                ok = False
            if not ok:
                raise ConfigError(f"--out '{given}': {MANIFEST} is not an aieflow sweep's",
                                  hint="pass a new directory")
    try:
        (root / "points").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the sweep directory '{given}': {e.strerror}", hint="pass another --out") from None
    write_text(manifest, json.dumps({"format": FORMAT, "version": 1, "aieflow": __version__,
                                     "spec": str(sweep.path.resolve()), "points": len(sweep.points),
                                     "columns": list(sweep.columns)}, indent=1), "sweep manifest", "--out")


def _stored(root: Path, sweep: Sweep) -> dict[str, dict[str, Any]]:
    """The finished results in ``root/points`` of this sweep's points (a damaged file: run again)."""
    out = {}
    for key in {p.key for p in sweep.points}:
        path = root / "points" / f"{key}.json"
        if not path.is_file():
            continue
        try:
            r = json.loads(path.read_text())
        except (OSError, ValueError):
            r = None
        if isinstance(r, dict) and r.get("key") == key and r.get("status") in FINISHED:
            out[key] = r
        else:
            log.warning("the stored result %s is damaged; the point runs again", path)
    return out


def table_rows(sweep: Sweep, results: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per point of the spec: its labels and grid values, its result (``pending`` when
    there is none yet) and ``pareto``: whether no other finished point of the same model and
    device has at most its tiles, latency and interval per sample (None unless ``ok``)."""
    rows = []
    for p in sweep.points:
        row = {c: None for c in sweep.columns}
        row.update(p.labels())
        r = results.get(p.key)
        if r is None:
            row["status"] = "pending"
        else:
            row.update({k: r.get(k) for k in RESULTS})
        rows.append(row)
    from .pareto import undominated

    def figures(r: Mapping[str, Any]) -> tuple:
        return (r["tiles_used"], r["latency_ns"], r["sample_interval_ns"])

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["status"] == "ok":
            groups.setdefault((row["model"], row["device"]), []).append(row)
    for group in groups.values():
        front = {figures(r) for r in undominated(group, figures)}
        for row in group:
            row["pareto"] = figures(row) in front
    return rows


def to_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({c: _cell(r[c]) for c in columns})
    return out.getvalue()


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"))
    return v


def _typed_columns(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """The rows for a typed table (Parquet): a column whose values are not all of one scalar type
    (a grid of mixed values, or of lists) holds their JSON text."""
    mixed = set()
    for c in columns:
        kinds = {type(r[c]) for r in rows if r[c] is not None}
        if len(kinds) > 1 or kinds & {list, dict}:
            mixed.add(c)
    return [{c: (None if r[c] is None else json.dumps(r[c])) if c in mixed else r[c] for c in columns} for r in rows]


def write_outputs(root: Path, sweep: Sweep, rows: list[dict[str, Any]]) -> list[Path]:
    """``results.csv``, ``results.parquet`` (when pyarrow is installed) and ``pareto/MODEL-DEVICE.svg``
    for every model and device with finished points; each file written whole or not at all."""
    from .pareto_plot import pareto_svg

    files = [write_text(root / "results.csv", to_csv(rows, sweep.columns), "results table", "--out")]
    parquet = root / "results.parquet"
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        log.warning("pyarrow is not installed: the results are in results.csv only (pip install 'aieflow[sweep]')")
        parquet.unlink(missing_ok=True)  # not an earlier run's table beside this one's
    else:
        tmp = parquet.with_name(f".{parquet.name}.{os.getpid()}.tmp")
        try:
            pq.write_table(pa.Table.from_pylist(_typed_columns(rows, sweep.columns)), tmp)
            os.replace(tmp, parquet)
        except OSError as e:
            raise ConfigError(f"cannot write the results table to '{parquet}': {e.strerror or e}",
                              hint="check the free space and permissions there") from None
        finally:
            tmp.unlink(missing_ok=True)
        files.append(parquet)
    plots = root / "pareto"
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r["status"] == "ok":
            groups.setdefault((r["model"], r["device"]), []).append(r)
    written = set()
    for (model, device), group in groups.items():
        name = _file_name(f"{model}-{device}", written)
        pts = [SimpleNamespace(tiles=r["tiles_used"], latency_ns=r["latency_ns"],
                               sample_interval_ns=r["sample_interval_ns"], batch=r["batch"]) for r in group]
        svg = pareto_svg(pts, None, f"sweep {sweep.path.name}: {model} on {device}", what="sweep points")
        files.append(write_text(plots / name, svg, "Pareto plot", "--out"))
        written.add(name)
    if plots.is_dir():
        for old in plots.glob("*.svg"):  # an earlier run's plot of a model or device no longer swept
            if old.name not in written:
                old.unlink(missing_ok=True)
    return files


def _file_name(stem: str, taken: set[str]) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem).strip(".") or "plot"
    name, n = f"{safe}.svg", 1
    while name in taken:
        n += 1
        name = f"{safe}-{n}.svg"
    return name
