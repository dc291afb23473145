"""Command line: ``aieflow devices | config | compile | explore | predict | verify | report | gemm | sweep``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np

from . import __version__
from .atomic import check_replaceable, output_path, write_text
from .errors import AieflowError, ConfigError

EXIT_USER_ERROR = 2
EXIT_INTERNAL = 3

log = logging.getLogger("aieflow.cli")  # not __name__: "__main__" under python -m aieflow.cli


def _load_npy(path: str, what: str) -> np.ndarray:
    """A .npy file of real numbers; mapped first, so a header claiming more data than the file
    holds is refused before anything is allocated."""
    from .inputs import real_array

    try:
        arr = np.load(path, allow_pickle=False, mmap_mode="r")
    except FileNotFoundError:
        raise ConfigError(f"{what} file '{path}' does not exist") from None
    except (ValueError, OSError, EOFError) as e:
        raise ConfigError(f"cannot read {what} file '{path}' as a .npy array: {e}") from None
    if not isinstance(arr, np.ndarray):  # an .npz archive
        raise ConfigError(f"{what} file '{path}' is an .npz archive; give one array as a .npy file")
    return np.array(real_array(arr, f"{what} file '{path}'"))


def cmd_devices(args: argparse.Namespace) -> int:
    from .devices import DEVICES

    if args.json:
        print(json.dumps({k: d.describe() for k, d in DEVICES.items()}, indent=2))
        return 0
    from .tables import plain

    for d in DEVICES.values():
        info = d.describe()
        print(f"{d.key} {d.board} ({d.part}), {d.generation.name}")
        rows = [[key, str(info[key])] for key in ("grid", "memory_tiles", "clock", "tile_memory", "streams", "cascade")]
        rows.append(["MACs/cycle", ", ".join(f"{k} {v:g}" for k, v in info["macs_per_cycle"].items())])
        rows.append(["mmul", ", ".join(f"{k} <{v}>" for k, v in info["mmul"].items())])
        if d.notes:
            rows.append(["note", d.notes])
        print(plain(rows, rule=False, indent="    "))
    return 0


def _config_from_args(args: argparse.Namespace):
    from .config import load_config_file, parse_config

    config = load_config_file(args.config) if args.config else parse_config(None)
    if args.precision or args.batch or args.target:
        raw = config.to_json()
        if args.precision:
            raw["precision"] = args.precision
        if args.batch:
            raw["batch"] = args.batch
        if args.target:
            raw["target"] = args.target
        # the options the user gave: the file's keys and these flags (not what to_json writes out)
        given = config.given | {k for k in ("precision", "batch", "target") if getattr(args, k)}
        config = replace(parse_config(raw), given=frozenset(given))
    return config


def _check_model(path: str) -> Path:
    model = Path(path)
    if not model.is_file():
        raise ConfigError(f"model file '{model}' does not exist")
    if model.suffix.lower() != ".onnx":
        raise ConfigError(
            f"'{model}' is not an .onnx file; the CLI compiles ONNX models",
            hint="for PyTorch modules call aieflow.compile(module, example_input=...) from Python, or export to ONNX",
        )
    return model


def cmd_explore(args: argparse.Namespace) -> int:
    from . import points
    from .api import explore

    if args.top is not None and args.top < 1:
        raise ConfigError(f"--top must be at least 1, got {args.top}", hint="e.g. --top 5")
    if args.pick is not None and not args.save_config:
        raise ConfigError("--pick chooses the point that --save-config writes; give --save-config FILE too",
                          hint="aieflow explore MODEL --save-config point.yaml --pick N (N: the # column)")
    model = _check_model(args.model)
    config = _config_from_args(args)
    calibration = _load_npy(args.calibration, "calibration") if args.calibration else None
    ex = explore(str(model), device=args.device, config=config, calibration=calibration)
    listed = points.numbered(ex)
    shown = points.ranking(ex, config)[: args.top] if args.top else list(listed)
    notes = []  # what was written where: after the table, or on stderr when stdout is JSON
    if args.save_config:
        point = points.by_id(ex, args.pick)
        header = (f"aieflow explore point {points.describe(ex, point)}\n"
                  f"of {model.name} on {args.device}, explored for target '{ex.target.to_string()}'\n"
                  f"compile it with: aieflow compile {model.name} --device {args.device} --config "
                  f"{Path(args.save_config).name}{' --calibration ' + args.calibration if args.calibration else ''} "
                  "--out DIR\n(the device and the calibration data are not part of a config: give the same ones)")
        points.save_config(args.save_config, ex, point, config, header)
        notes.append(f"wrote the config of point #{points.point_id(ex, point)} to {args.save_config}")
    if args.plot:
        from .pareto_plot import pareto_svg

        write_text(args.plot, pareto_svg(ex.front, ex.chosen, f"{model.name} on {args.device}: target "
                                         f"'{ex.target.to_string()}'"), "Pareto plot", "--plot")
        notes.append(f"wrote the Pareto plot to {args.plot}")
    if args.csv:
        write_text(args.csv, points.to_csv(ex, shown), "CSV", "--csv")
        notes.append(f"wrote {len(shown)} points to {args.csv}")
    if args.json:
        print(json.dumps(points.to_json(ex, config, args.top), indent=2))
        if not args.quiet:
            for note in notes:
                print(note, file=sys.stderr)
        return 0
    print(_explore_table(ex, listed, shown, args.top, points.ranking_target(ex, config).to_string()))
    for note in notes:
        print(note)
    return 0


def _explore_table(ex, listed: tuple, shown: list, top: int | None, ranked_by: str) -> str:
    """The listed points as a table, ``#`` their number for ``--pick``, the target's pick marked *."""
    from .points import _mappings, kind, point_id
    from .tables import render

    target = ex.target.to_string()
    if top:
        head = (f"the {len(shown)} best of {len(listed)} points by '{ranked_by}', the pick (*) first; "
                "# numbers them as aieflow explore without --top lists them")
    elif kind(ex) == "recurrent":
        layers = _mappings(ex.chosen)
        what = f"stacks of {len(layers)} recurrent layers" if len(layers) > 1 else "recurrent mappings"
        head = (f"Pareto front of {len(ex.front)} {what} ({ex.candidates} costed, each point's figures the estimate "
                f"compile gives it; latency = one sample's {layers[0].dims.seq_len} steps); target '{target}' picks *")
    else:
        batches = f" at batch {', '.join(map(str, ex.batches))}" if len(ex.batches) > 1 else ""
        head = (f"Pareto front of {len(ex.front)} plans{batches} ({ex.candidates} layer plans costed, each point's "
                f"figures the estimate compile gives it); target '{target}' picks *")
    if kind(ex) == "recurrent":
        from .recurrent.select import _spread
        from .recurrent.stack import _short

        def mapping(p) -> str:
            m = p.mapping
            if hasattr(m, "layers"):
                return " | ".join(_short(x) for x in m.layers)
            return f"U h {_spread(m.recurrent)}, W x {_spread(m.input)}, {m.aggregation}, fan-in {m.merge_fanin}"

        rows = [["#", "", "tiles", "sequence latency ns", "step ns", "interval ns", "mapping"]]
        for p in shown:
            rows.append([str(point_id(ex, p)), "*" if p == ex.chosen else "", str(p.tiles), f"{p.latency_ns:,.0f}",
                         f"{p.step_latency_ns:,.1f}", f"{p.interval_ns:,.1f}", mapping(p)])
    else:
        posts = any(getattr(p, "posts", "") for p in shown)  # both mappings of a chain's posts (passes/posts.py)
        rows = [["#", "", "tiles", "batch", "replicas", "latency ns", "interval ns", "ns / sample",
                 *(["posts"] if posts else []), "parallelism (cas_len x cas_num per layer)"]]
        for p in shown:
            rows.append([str(point_id(ex, p)), "*" if p == ex.chosen else "", str(p.tiles), str(p.batch),
                         str(p.replicas), f"{p.latency_ns:,.0f}", f"{p.interval_ns:,.0f}",
                         f"{p.sample_interval_ns:,.1f}", *([p.posts] if posts else []),
                         " ".join(f"{cl}x{cn}" for _, cl, cn in p.parallelism)])
    from .perf.bands import summary_line

    return head + "\n" + render(rows) + "\n" + summary_line()


def cmd_config(args: argparse.Namespace) -> int:
    from .skeleton import config_skeleton

    model = _check_model(args.model)
    config = _config_from_args(args)
    calibration = _load_npy(args.calibration, "calibration") if args.calibration else None
    sk = config_skeleton(str(model), device=args.device, config=config, calibration=calibration,
                         granularity=args.granularity)
    as_json = bool(args.output) and Path(args.output).suffix.lower() == ".json"
    if as_json:
        text = sk.to_json()
    else:
        name = json.dumps(model.name)  # quoted: a file name cannot end the comment line
        header = "\n".join([
            f"aieflow config skeleton of {name} for {args.device} (granularity {args.granularity}): the design "
            "'aieflow compile' builds without a config.",
            "Edit any key, then: aieflow compile MODEL --device DEVICE --config THIS_FILE"
            + (" --calibration X.npy" if args.calibration else ""),
            "Commented types are what each layer gets now; uncomment one to fix it (hls4ml's "
            "ap_fixed<W,I,AP_RND_CONV,AP_SAT> spelling is accepted).",
        ])
        text = sk.to_yaml(header)
    if args.output:
        write_text(args.output, text, "config skeleton", "--output")
        print(f"wrote the config skeleton ({len(sk.config.get('layers', {}))} layers) to {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    from .api import compile as compile_model

    out = Path(args.out)
    check_replaceable(output_path(args.out), args.out, args.force)  # before the work, not only after it
    model = _check_model(args.model)
    config = _config_from_args(args)
    calibration = _load_npy(args.calibration, "calibration") if args.calibration else None
    example = _load_npy(args.input, "input") if args.input else None

    design = compile_model(str(model), device=args.device, example_input=example, config=config, calibration=calibration)
    design.save(out, force=args.force)
    if not args.quiet:
        print(design.summary() + "\n")
    print(f"wrote {out}/design.json and {out}/project/ ({len(design.files)} files)")
    return 0


def _write_npy(path: Path, y: np.ndarray) -> None:
    """Save ``y`` to exactly ``path`` (numpy's ``save`` would append ``.npy``): a regular file is
    written beside it and renamed into place (never half-written); a device or pipe is written to."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not path.is_file():
            with open(path, "wb") as f:
                np.save(f, y)
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                np.save(f, y)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot write the output to '{path}': {e.strerror or e}", hint="pass another --output") from None


def _load_design(args: argparse.Namespace):
    """``aieflow.load`` of the command's design directory; ``--no-check`` skips (and says so) the
    comparison of its files with design.json's integrity record."""
    from .design import load

    if args.no_check:
        log.warning("integrity check skipped (--no-check): the files' SHA-256 are not compared with design.json's "
                    "record; symbolic links are still refused")
    return load(args.design, check=not args.no_check)


def _load_operands(path: str) -> tuple[np.ndarray, np.ndarray]:
    """A GEMM's A and B from an .npz archive (arrays ``A`` and ``B``)."""
    from .inputs import real_array

    try:
        with np.load(path, allow_pickle=False) as z:
            if not isinstance(z, np.lib.npyio.NpzFile) or not {"A", "B"} <= set(z.files):
                raise ConfigError(f"input file '{path}' must be an .npz archive with arrays A and B (C = A B)",
                                  hint="np.savez('ab.npz', A=a, B=b)")
            return (np.array(real_array(z["A"], f"array A of '{path}'")),
                    np.array(real_array(z["B"], f"array B of '{path}'")))
    except FileNotFoundError:
        raise ConfigError(f"input file '{path}' does not exist") from None
    except (ValueError, OSError, EOFError) as e:
        raise ConfigError(f"cannot read input file '{path}' as an .npz archive: {e}") from None


def cmd_predict(args: argparse.Namespace) -> int:
    from .protocol import ModelDesign

    design = _load_design(args)
    out = Path(args.output)
    if not isinstance(design, ModelDesign):  # a GEMM design: C = A B from an .npz of A and B
        if args.raw:
            raise ConfigError("--raw does not apply to GEMM designs: C holds the exact sums already")
        y = design.predict(*_load_operands(args.input))
        _write_npy(out, y)
        print(f"predicted C {list(y.shape)} ({y.dtype}) -> {out}")
        return 0
    x = _load_npy(args.input, "input")
    y = design.predict(x, raw=args.raw)
    _write_npy(out, y)
    print(f"predicted {y.shape[0]} samples -> {out} ({'integer codes' if args.raw else 'real values'}, shape {list(y.shape)})")
    return 0


EXIT_MISMATCH = 1
NO_CHECK = ("do not compare the design's files with the SHA-256 record in design.json (for a design you edited "
            "on purpose); symbolic links are refused anyway")


def cmd_verify(args: argparse.Namespace) -> int:
    from .protocol import ModelDesign

    design = _load_design(args)
    if args.seed < 0:
        raise ConfigError(f"--seed must be a non-negative integer, got {args.seed}", hint="e.g. --seed 0")
    gemm = not isinstance(design, ModelDesign)
    if gemm and args.samples is not None:
        raise ConfigError("--samples does not apply to GEMM designs: verify runs one C = A B",
                          hint="leave --samples out, or give --input ab.npz with A and B")
    samples = 1000 if args.samples is None else args.samples
    if samples < 1:
        raise ConfigError(f"--samples must be at least 1, got {samples}")
    log.info("verifying %s: its x86 harness built against the aieflow shim, compared bit for bit with predict",
             args.design)
    if gemm:
        operands = _load_operands(args.input) if args.input else (None, None)
        result = design.verify(*operands, seed=args.seed, jobs=args.jobs)
    else:
        x = _load_npy(args.input, "input") if args.input else None
        result = design.verify(x, samples=samples, seed=args.seed, jobs=args.jobs)
    print(result.verdict())
    _record_verify(args, result, None if gemm else samples)
    return 0 if result.ok else EXIT_MISMATCH


def _record_verify(args: argparse.Namespace, result, samples: int | None) -> None:
    """Keep the verdict beside the design (DIR/verify.json) for ``report --html``; a directory
    that cannot be written is said, not an error (the verdict is printed already)."""
    from .verify_record import write

    try:
        write(args.design, result, samples=samples, seed=args.seed, inputs=args.input)
    except OSError as e:
        print(f"note: the verify record was not written to {args.design}: {e.strerror or e}", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int:
    if args.data and not args.html:
        raise ConfigError("--data is for the HTML report's accuracy section", hint="add --html FILE, or leave --data out")
    design = _load_design(args)
    data = _load_npy(args.data, "data") if args.data else None
    if args.html:  # before the text, so a refused --data leaves nothing half done
        from .html_report import render

        write_text(args.html, render(design, data=data, verify=Path(args.design)), "HTML report", "--html")
    print(design.report())
    svg = Path(args.svg) if args.svg else Path(args.design) / "placement.svg"
    try:
        svg.parent.mkdir(parents=True, exist_ok=True)
        svg.write_text(design.placement_svg())
    except OSError as e:
        raise ConfigError(f"cannot write the placement picture to '{svg}': {e.strerror}", hint="pass --svg FILE") from None
    print(f"\nplacement picture: {svg}")
    if args.html:
        print(f"HTML report: {args.html}")
    return 0


def cmd_gemm(args: argparse.Namespace) -> int:
    from .gemm import gemm

    out = Path(args.out)
    check_replaceable(output_path(args.out), args.out, args.force)  # before the work, not only after it
    blocks = {k: v for k, v in (("mc", args.mc), ("nc", args.nc), ("kc", args.kc)) if v is not None}
    design = gemm(args.m, args.n, args.k, dtype=args.dtype, device=args.device, tiles=args.tiles,
                  design=args.design, blocks=blocks or None, output=args.output, br_transfer=args.br_transfer)
    design.save(out, force=args.force)
    if not args.quiet:
        print(design.summary() + "\n")
    print(f"wrote {out}/design.json and {out}/project/")
    if args.verify:
        result = design.verify()
        print(result.verdict())
        return 0 if result.ok else EXIT_MISMATCH
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from . import sweep
    from .tables import render

    spec = sweep.load_spec(args.spec, verify=args.verify or None, cache_dir=args.cache_dir)
    result = sweep.run(spec, args.out, workers=args.workers, scheduler=args.scheduler, limit=args.limit,
                       retry_errors=args.retry_errors)
    distinct = len({p.key for p in spec.points})
    statuses = ", ".join(f"{result.count(s)} {s}" for s in ("ok", "refused", "error", "pending") if result.count(s))
    print(f"sweep {args.spec}: {len(spec.points)} points ({distinct} distinct): {result.done_before} done before, "
          f"{result.ran} run now; {statuses}")
    front = [r for r in result.rows if r["pareto"]]
    if front and not args.quiet:
        verified = any(r["verify"] for r in front)
        rows = [["model", "device", "config", "target", *spec.grid_keys, "tiles", "latency ns", "ns / sample",
                 *(["verify"] if verified else [])]]
        for r in sorted(front, key=lambda r: (r["model"], r["device"], r["tiles_used"], r["latency_ns"])):
            grid = [r[f"grid.{k}"] if isinstance(r[f"grid.{k}"], str) else json.dumps(r[f"grid.{k}"])
                    for k in spec.grid_keys]
            rows.append([r["model"], r["device"], r["config"], r["target"] or "-", *grid, str(r["tiles_used"]),
                         f"{r['latency_ns']:,.0f}", f"{r['sample_interval_ns']:,.1f}",
                         *([r["verify"] or "-"] if verified else [])])
        print("\nthe Pareto points of each model and device (tiles, latency, interval per sample):")
        print(render(rows))
    failed = [r for r in result.rows if r["status"] in ("refused", "error")]
    for r in failed[:10]:
        log.warning("point %s (%s on %s, config %s%s): %s: %s", r["point"], r["model"], r["device"], r["config"],
                    f", target {r['target']}" if r["target"] else "", r["status"], r["error"].splitlines()[0])
    if len(failed) > 10:
        log.warning("... and %d more points refused or in error: their messages are in results.csv", len(failed) - 10)
    tables = [str(f) for f in result.files if f.suffix != ".svg"]
    plots = sum(f.suffix == ".svg" for f in result.files)
    print("\nwrote " + ", ".join(tables) + (f" and {plots} Pareto plot(s) in {Path(args.out) / 'pareto'}" if plots else ""))
    return EXIT_MISMATCH if any(r["verify"] == "fail" for r in result.rows) else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aieflow", description="Compile neural networks to AMD Versal AI Engine designs.")
    p.add_argument("--version", action="version", version=f"aieflow {__version__}")
    _add_verbosity(p, "global_verbose", "global_quiet")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("devices", help="list the supported devices and their facts")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_devices)

    s = sub.add_parser("config", help="write a config skeleton: every layer under the name the compiler uses, "
                       "its precision and mapping keys (edit it, then compile with --config)")
    s.add_argument("model", help="model file (.onnx)")
    s.add_argument("--device", default="vek280", help="vck190, vek280 or vek385 (default vek280)")
    s.add_argument("--granularity", choices=["name", "model"], default="name",
                   help="name: one entry per layer (default); model: the model-wide keys only")
    s.add_argument("-o", "--output", metavar="FILE", help="write the skeleton to FILE (YAML; JSON for .json) "
                   "instead of standard output")
    s.add_argument("--config", help="a config to start from (its keys are kept)")
    s.add_argument("--calibration", help=".npy float samples for post-training quantisation (float models)")
    s.add_argument("--precision", help="default precision: int8, int16, a16w8, fp32, bf16, fp16 (vek385 Dense chains)")
    s.add_argument("--batch", help="samples per graph iteration")
    s.set_defaults(func=cmd_config, target=None)

    s = sub.add_parser("compile", help="compile an ONNX model into DIR/design.json and DIR/project/")
    s.add_argument("model", help="model file (.onnx)")
    s.add_argument("--device", default="vek280", help="vck190, vek280 or vek385 (default vek280)")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--config", help="YAML or JSON config file")
    s.add_argument("--calibration", help=".npy float samples for post-training quantisation")
    s.add_argument("--input", help=".npy samples written to the project's PLIO data files")
    s.add_argument("--precision", help="default precision (overrides the config): int8, int16, a16w8, fp32, bf16, fp16 (vek385 Dense chains)")
    s.add_argument("--batch", help="samples per graph iteration, or 'auto' to let the search choose (overrides the config)")
    s.add_argument("--target", help="what to optimise: resources (default), latency, throughput, and/or budgets "
                   "like 'latency_ns <= 2000', 'tiles <= 64' (comma-separated)")
    s.add_argument("--force", action="store_true", help="replace DIR if it exists")
    s.set_defaults(func=cmd_compile)

    s = sub.add_parser("explore", help="list the Pareto front (tiles, latency, interval) of the plans for a model")
    s.add_argument("model", help="model file (.onnx)")
    s.add_argument("--device", default="vek280", help="vck190, vek280 or vek385 (default vek280)")
    s.add_argument("--config", help="YAML or JSON config file")
    s.add_argument("--calibration", help=".npy float samples for post-training quantisation")
    s.add_argument("--precision", help="default precision (overrides the config)")
    s.add_argument("--batch", help="samples per graph iteration, or 'auto' to let the search choose (overrides the config)")
    s.add_argument("--target", help="target used to mark the chosen plan (see compile --target)")
    s.add_argument("--json", action="store_true", help="machine-readable output: every point with its id and config")
    s.add_argument("--top", type=int, metavar="N", help="list only the N best points by the target, its pick first")
    s.add_argument("--csv", metavar="FILE", help="also write the listed points to FILE as CSV")
    s.add_argument("--save-config", metavar="FILE",
                   help="write the config (YAML; JSON for .json) that 'aieflow compile' turns into exactly the "
                   "picked point")
    s.add_argument("--pick", type=int, metavar="N",
                   help="the point --save-config writes: N from the # column (default: the target's pick *)")
    s.add_argument("--plot", metavar="FILE.svg", help="draw the Pareto front (latency and interval per sample vs "
                   "tiles, the pick marked) as an SVG file")
    s.set_defaults(func=cmd_explore)

    s = sub.add_parser("predict", help="bit-exact emulation of a compiled design")
    s.add_argument("design", help="design directory written by 'aieflow compile'")
    s.add_argument("--input", required=True, help=".npy float input, shape (N, ...); a GEMM design: .npz with A and B")
    s.add_argument("--output", required=True, help=".npy file to write")
    s.add_argument("--raw", action="store_true", help="write integer output codes instead of real values")
    s.add_argument("--no-check", action="store_true", help=NO_CHECK)
    s.set_defaults(func=cmd_predict)

    s = sub.add_parser(
        "verify",
        help="build the design's own C++ for x86 against the open shim and compare it bit-exactly with predict",
    )
    s.add_argument("design", help="design directory written by 'aieflow compile'")
    s.add_argument("--samples", type=int, help="generated test samples (default 1000; not for GEMM designs)")
    s.add_argument("--seed", type=int, default=0, help="seed of the generated samples")
    s.add_argument("--input", help=".npy float samples to use instead of generated ones")
    s.add_argument("--jobs", type=int, help="parallel compiler processes (default: all cores)")
    s.add_argument("--no-check", action="store_true", help=NO_CHECK)
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("report", help="print a design's summary and draw its placement (DIR/placement.svg)")
    s.add_argument("design", help="design directory")
    s.add_argument("--svg", help="where to write the placement picture (default DIR/placement.svg)")
    s.add_argument("--html", metavar="FILE", help="also write the report as one self-contained HTML file")
    s.add_argument("--data", metavar="X.npy", help="float samples: the HTML report compares the design with the float "
                   "model on them (not for GEMM designs)")
    s.add_argument("--no-check", action="store_true", help=NO_CHECK)
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("gemm", help="GotoBLAS-style GEMM design (C = A B, large matrices streamed through the PL)")
    s.add_argument("--m", type=int, required=True, help="rows of A and C")
    s.add_argument("--n", type=int, required=True, help="columns of B and C")
    s.add_argument("--k", type=int, required=True, help="columns of A, rows of B")
    s.add_argument("--dtype", default="uint8", help="uint8 (default), int8, int16, fp32 (vck190) or bf16 (vek280, vek385)")
    s.add_argument("--device", default="vck190", help="vck190 (PL memories) or vek280 (memory tiles; --design best)")
    s.add_argument("--tiles", type=int, default=1, help="AI Engine tiles (best: at most this many)")
    s.add_argument("--design", default="published", choices=["published", "best"],
                   help="the paper's design, or the best one the performance model finds")
    s.add_argument("--mc", type=int, help="override the mc block size")
    s.add_argument("--nc", type=int, help="override the nc block size")
    s.add_argument("--kc", type=int, help="override the kc block size")
    s.add_argument("--output", help="C type: int32 or int64 (default: the narrowest exact one)")
    s.add_argument("--br-transfer", choices=["stream", "gmio"],
                   help="vck190, --design best: Br streamed by the PL (default) or read from DDR by GMIO")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--force", action="store_true", help="replace DIR if it exists")
    s.add_argument("--verify", action="store_true", help="also run the generated C++ on x86 (bit-exact check)")
    s.set_defaults(func=cmd_gemm)
    s = sub.add_parser("sweep", help="compile (and verify) every point of a sweep spec (models x devices x configs "
                       "x grid x targets), each a task on Dask; resumable (docs/sweeps.md)")
    s.add_argument("spec", help="sweep spec (YAML, or JSON for .json): models, devices, configs, grid, targets, verify")
    s.add_argument("--out", required=True, help="the sweep's directory: results.csv / .parquet, pareto/*.svg, one "
                   "result file per point (a rerun runs only the points without one)")
    s.add_argument("--workers", type=int, metavar="N", help="local Dask worker processes (default: one per core, at "
                   "most one per point); 0: run the points one after the other in this process, without Dask")
    s.add_argument("--scheduler", metavar="ADDRESS", help="run on the Dask cluster whose scheduler is at ADDRESS "
                   "(e.g. tcp://host:8786) instead of a local one; its workers need aieflow installed")
    s.add_argument("--verify", action="store_true", help="also verify every point (its x86 build bit-exact with "
                   "predict), with the spec's verify settings if any")
    s.add_argument("--cache-dir", metavar="DIR", help="the x86 build cache of verify (default: the spec's cache_dir, "
                   "else $AIEFLOW_CACHE_DIR or ~/.cache/aieflow); a directory all workers see shares the builds")
    s.add_argument("--limit", type=int, metavar="N", help="run at most N of the points not done yet (a later run "
                   "does the rest)")
    s.add_argument("--retry-errors", action="store_true", help="run again the points that ended in an internal "
                   "error (status 'error'); refused points are not retried (the same compile refuses them again)")
    s.set_defaults(func=cmd_sweep)
    for s in sub.choices.values():  # -v / -q after the command as well as before it
        _add_verbosity(s, "verbose", "quiet_flag")
    return p


VERBOSE_HELP = "more messages on stderr: -v what is being done (info), -vv every stage's details (debug)"
QUIET_HELP = ("only errors and the result: no progress bars, warnings or summary (--quiet: the same; "
              "progress bars are also off when stderr is not a terminal)")


def _add_verbosity(p: argparse.ArgumentParser, verbose: str, quiet: str) -> None:
    p.add_argument("-v", "--verbose", action="count", default=0, dest=verbose, help=VERBOSE_HELP)
    p.add_argument("-q", "--quiet", action="store_true", dest=quiet, help=QUIET_HELP)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that ``finally`` blocks and context managers run: child
    processes are killed (``subprocess.run``, ``verify.build_units``) and temporary directories removed."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    from .progress import cli_output

    args = build_parser().parse_args(argv)
    args.verbose += args.global_verbose
    args.quiet = args.quiet_flag or args.global_quiet
    if args.quiet and args.verbose:
        print("error: -q (--quiet) and -v (--verbose) contradict each other; give one of them", file=sys.stderr)
        return EXIT_USER_ERROR
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    try:
        with cli_output(args.verbose, args.quiet):
            return _run(args)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    try:
        return args.func(args)
    except AieflowError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:  # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt as e:
        print("terminated" if isinstance(e, Terminated) else "interrupted", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except Exception as e:  # noqa: BLE001 - last resort: say it is our bug, not the user's
        print(f"internal error (please report): {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
