"""The HTML report of any design kind: ``design.report_html()`` and ``aieflow report DIR --html FILE``.

One renderer for every kind, built on what they share (``protocol.py``, the common design.json
schema): the summary and figures from ``to_json()["performance"]`` / ``["resources"]``, the stage
table and breakdown chart from ``performance["breakdown"]``, the placement picture from
``placement_svg()``, the numerics from a model design's typed ``graph`` (a GEMM: its operand
types), accuracy against the float model run on the same graph's float weights when the user gives
data, and the verify record (``verify_record.py``).

One self-contained file: CSS inline, pictures inline SVG, no script at all, and a
Content-Security-Policy that forbids fetching anything.  Every value from the model (names,
shapes, the user's file names) is printed through Jinja's HTML autoescape; the SVG pictures are
built with every text escaped (``svg_charts.text``, ``placement_svg``) and must parse as XML
before they are inlined.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

import numpy as np

from .atomic import write_text
from .errors import AieflowError, ConfigError

KIND_NAMES = {
    "chain": "Dense chain",
    "dag": "DAG (fan-out, residual adds, views)",
    "cnn": "CNN",
    "recurrent": "recurrent (GRU / LSTM)",
    "streamed_dense": "Dense layer with weights streamed from DDR",
    "segmented": "segments joined through DDR",
    "gemm": "GEMM (C = A B)",
}
FLOAT_CHUNK = 4096  # samples per float-reference chunk (bounds the memory of the float pass)


def _json(design: Any) -> dict[str, Any]:
    """design.json as plain JSON values (numpy scalars and tuples converted)."""
    import json

    from .graph_io import json_default

    return json.loads(json.dumps(design.to_json(), default=json_default))


def _svg(svg: str, what: str) -> Any:
    """``svg`` as markup to inline, once it parses as XML (a picture aieflow drew)."""
    from markupsafe import Markup

    try:
        ET.fromstring(svg)
    except ET.ParseError as e:  # pragma: no cover - every picture is built escaped
        raise AieflowError(f"internal: the {what} is not well-formed SVG ({e})") from None
    return Markup(svg)


def _ns(v: float) -> str:
    from .svg_charts import duration

    return duration(v)


# ------------------------------------------------------------------------------------ summary


def _precision(j: Mapping[str, Any]) -> str:
    if j["kind"] == "gemm":
        t = j.get("types", {})
        return f"{t.get('a', '?')} x {t.get('b', '?')} -> {t.get('c', '?')}"
    config = j.get("config", {})
    p = str(config.get("precision", "-"))
    own = sorted({str(v["precision"]) for v in config.get("layers", {}).values()
                  if isinstance(v, Mapping) and "precision" in v} - {p})
    return p + (f" (some layers: {', '.join(own)})" if own else "")


def _figures(j: Mapping[str, Any]) -> list[tuple[str, str]]:
    perf, res = j["performance"], j["resources"]
    batch, replicas = perf["batch"], perf.get("replicas", 1)  # designs saved before replicas was common: 1
    samples = batch * replicas  # what one interval delivers
    copies = f" on each of {replicas} replicas" if replicas > 1 else ""
    rows = [
        ("latency", _ns(perf["latency_ns"]) + (f" ({perf['latency_ns']:,.1f} ns)" if perf["latency_ns"] >= 1e3 else "")
         + " for the first result"),
        ("interval", f"{_ns(perf['interval_ns'])} per batch of {batch}{copies}"
                     + (f" ({_ns(perf['interval_ns'] / samples)} per sample)" if samples > 1 else "")),
    ]
    if "step_interval_ns" in perf:
        rows.append(("step interval", f"{_ns(perf['step_interval_ns'])} per time step"))
    from .svg_charts import si

    rows += [
        ("throughput", si(perf["throughput_ops_per_s"], "OPS") + " (2 x MACs per second)"),
        ("bound", str(perf["bound"])),
        ("compute tiles", f"{perf['tiles_used']} of {res['compute_tiles_available']}"),
        ("memory tiles", str(perf["memory_tiles_used"])),
    ]
    return rows


# ------------------------------------------------------------------------------------- stages


def _band(part: Mapping[str, Any]) -> str:
    """A stage's error band: the one the design carries (``band_ns``: [low, high]); for a kernel
    stage, the range its time's published value lies in by the model's kernel band (an error e =
    model / published - 1 in [low, high] puts the published time in [ns / (1 + high), ns / (1 + low)];
    ``perf/bands.py``); else "no band"."""
    band = part.get("band_ns")
    if isinstance(band, (list, tuple)) and len(band) == 2 and all(isinstance(v, (int, float)) for v in band):
        return f"{band[0]:,.1f} .. {band[1]:,.1f} ns"
    if part.get("kind") == "kernel":
        from .perf.bands import band as model_band

        k = model_band("kernel")
        if k.known:
            return f"{part['ns'] / (1 + k.high):,.1f} .. {part['ns'] / (1 + k.low):,.1f} ns"
    return "no band"


def _stages(perf: Mapping[str, Any]) -> list[dict[str, Any]]:
    interval = perf["interval_ns"]
    slowest = max(p["ns"] for p in perf["breakdown"].values())
    rows = []
    for name, part in perf["breakdown"].items():
        rows.append({
            "name": name,
            "kind": str(part.get("kind", "-")),
            "per": str(part.get("per", "batch")),
            "ns": f"{part['ns']:,.1f}",
            "share": f"{100 * part['ns'] / interval:.1f}%" if interval else "-",
            "bound": str(part.get("bound", "-")),
            "band": _band(part),
            "slowest": part["ns"] == slowest,
        })
    return rows


def _system_stages(perf: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of design.json's ``performance.system`` (DDR to DDR: host, data movers, DDR around
    the array), each with the system band's wording (``perf/bands.py``: no published figure checked)."""
    from .perf.bands import band as model_band

    sj = perf.get("system")
    if not isinstance(sj, Mapping):
        return []
    text = model_band("system").text()
    interval = float(sj["interval_ns"])
    rows = []
    for name, part in sj["breakdown"].items():
        rows.append({"name": f"system: {name}", "kind": str(part.get("kind", "-")), "per": str(part.get("on", "-")),
                     "ns": f"{part['ns']:,.1f}",
                     "share": f"{100 * part['ns'] / interval:.1f}%" if interval else "-",
                     "bound": str(part.get("note", "-")), "band": text})
    return rows


def _chart(perf: Mapping[str, Any], headline: str) -> Any:
    from .svg_charts import Bar, breakdown_svg

    bars = [Bar(name, float(p["ns"]), str(p.get("kind", p.get("per", "")))) for name, p in perf["breakdown"].items()]
    return _svg(breakdown_svg(bars, float(perf["interval_ns"]), f"time per batch of {perf['batch']}, by stage"),
                "breakdown chart")


def _exploration(j: Mapping[str, Any]) -> Any:
    """The Pareto plot of the exploration the design carries (a compile with a target), if any."""
    from types import SimpleNamespace

    from .pareto_plot import pareto_svg

    ex = j.get("exploration")
    if not isinstance(ex, Mapping) or not ex.get("pareto_front") or not isinstance(ex.get("chosen"), Mapping):
        return None
    keys = ("tiles", "latency_ns", "sample_interval_ns")
    if not all(k in p for p in [*ex["pareto_front"], ex["chosen"]] for k in keys):
        return None
    front = [SimpleNamespace(**{k: p[k] for k in (*keys, "batch") if k in p}) for p in ex["pareto_front"]]
    chosen = SimpleNamespace(**{k: ex["chosen"][k] for k in (*keys, "batch") if k in ex["chosen"]})
    return _svg(pareto_svg(front, chosen, f"the compile's search: target '{ex.get('target', '')}'"), "Pareto plot")


# ----------------------------------------------------------------------------------- numerics


def _flat(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out += _flat(v, f"{prefix}{k}.")
        return out
    return [(prefix.rstrip("."), "-" if value is None else str(value))]


def _numerics(design: Any, j: Mapping[str, Any]) -> dict[str, Any]:
    from .ops.registry import OP_FAMILIES
    from .protocol import ModelDesign

    if not isinstance(design, ModelDesign):
        types = j.get("types", {})
        return {"tensors": [{"name": k, "shape": "", "type": str(v), "producer": "-"} for k, v in types.items()],
                "layers": []}
    g = design.graph
    producer = {t: n.name for n in g.nodes for t in n.outputs}
    tensors = [{"name": name, "shape": " x ".join(map(str, t.shape)) or "scalar",
                "type": str(t.dtype) if t.dtype is not None else "-",
                "producer": producer.get(name, "graph input" if name in g.inputs else "-")}
               for name, t in g.tensors.items()]
    layers = []
    for n in g.nodes:
        fam = OP_FAMILIES.get(n.op)
        if n.types is None:
            types: list[tuple[str, str]] = []
        elif fam is not None and fam.types_to_json is not None:
            types = _flat(fam.types_to_json(n.types))
        else:
            types = [("type", str(n.types))]
        layers.append({"name": n.name, "op": n.op, "inputs": ", ".join(n.inputs), "outputs": ", ".join(n.outputs),
                       "types": types})
    return {"tensors": tensors, "layers": layers}


# ----------------------------------------------------------------------------------- accuracy


def float_reference(design: Any, x: np.ndarray) -> np.ndarray | None:
    """The float model's output for float samples ``x``: the design's graph run in float64 on its
    float weights (no quantisation), or None for a design without a float model (a GEMM)."""
    from .passes.quantise import float_activations
    from .protocol import ModelDesign

    if not isinstance(design, ModelDesign):
        return None
    g = design.graph
    parts = [float_activations(g, x[i: i + FLOAT_CHUNK])[g.outputs[0]] for i in range(0, x.shape[0], FLOAT_CHUNK)]
    return np.concatenate(parts) if parts else None


def accuracy(design: Any, data: Any) -> dict[str, Any]:
    """The design's outputs (its bit-exact emulation, ``predict``) against the float model on
    ``data``: errors, signal-to-noise ratio and, for a vector output, how often the largest output
    (the class) is the same."""
    from .inputs import real_array
    from .protocol import ModelDesign

    if not isinstance(design, ModelDesign):
        raise ConfigError("data (--data) does not apply to a GEMM design: it has no float model to compare with",
                          hint="leave data out; 'aieflow verify' checks a GEMM bit for bit")
    x = np.asarray(real_array(data, "data"))
    y = np.asarray(design.predict(x), dtype=np.float64)  # checks the shape against the design's input
    if y.shape[0] == 0:
        raise ConfigError("data holds no samples", hint="give at least one sample, shape (N, ...)")
    ref = float_reference(design, x.astype(np.float64, copy=False))
    if ref is None or ref.shape != y.shape:  # pragma: no cover - every model design has one
        raise AieflowError("internal: the float reference has another shape than the design's output")
    err = y - ref
    rms = float(np.sqrt(np.mean(err**2)))
    ref_rms = float(np.sqrt(np.mean(ref**2)))
    snr = math.inf if rms == 0 else (20 * math.log10(ref_rms / rms) if ref_rms > 0 else -math.inf)
    out = {
        "samples": int(y.shape[0]),
        "outputs": int(y[0].size),
        "max_abs": float(np.max(np.abs(err))),
        "mean_abs": float(np.mean(np.abs(err))),
        "rms": rms,
        "ref_rms": ref_rms,
        "snr_db": snr,
        "argmax": None,
    }
    if y.ndim == 2 and y.shape[1] > 1:
        out["argmax"] = float(np.mean(np.argmax(y, axis=1) == np.argmax(ref, axis=1)))
    return out


def _accuracy_rows(a: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = [
        ("samples", f"{a['samples']} ({a['outputs']} output values each)"),
        ("largest |error|", f"{a['max_abs']:.6g}"),
        ("mean |error|", f"{a['mean_abs']:.6g}"),
        ("RMS error", f"{a['rms']:.6g} (float output RMS {a['ref_rms']:.6g})"),
        ("signal-to-noise", "exact (no error)" if a["snr_db"] == math.inf else f"{a['snr_db']:.1f} dB"),
    ]
    if a["argmax"] is not None:
        rows.append(("same largest output (class)", f"{100 * a['argmax']:.1f}% of samples"))
    return rows


# ------------------------------------------------------------------------------------- report


def context(design: Any, data: Any = None, verify: Any = None) -> dict[str, Any]:
    """What the template prints (every value plain text, but the pictures)."""
    from . import __version__
    from .perf.bands import band as model_band
    from .verify_record import status

    j = _json(design)
    perf = j["performance"]
    headline = design.summary().splitlines()[0]
    dev = j["device"]
    acc = accuracy(design, data) if data is not None else None
    return {
        "headline": headline,
        "kind": KIND_NAMES.get(j["kind"], j["kind"]),
        "kind_key": j["kind"],
        "device": f"{dev.get('board', dev['key'])} ({dev.get('part', '?')}, {dev.get('generation', '?')}), "
                  f"{dev.get('grid', '')}",
        "precision": _precision(j),
        "source": j.get("source") or "-",
        "version": __version__,
        "figures": _figures(j),
        "stages": _stages(perf),
        "system_stages": _system_stages(perf),
        "system_figures": (f"{_ns(perf['system']['latency_ns'])} per run, {_ns(perf['system']['interval_ns'])} interval; "
                           f"bound: {perf['system']['bound']}") if "system" in perf else None,
        "system_band": model_band("system").text(),
        "any_band": any(_band(p) != "no band" for p in perf["breakdown"].values()),
        "kernel_band": model_band("kernel").text(),
        "array_band": model_band("array").text(),
        "chart": _chart(perf, headline),
        "placement": _svg(design.placement_svg(), "placement picture"),
        "numerics": _numerics(design, j),
        "accuracy": _accuracy_rows(acc) if acc is not None else None,
        "verify": status(verify),
        "exploration": _exploration(j),
        "text": design.report(),
    }


def render(design: Any, data: Any = None, verify: Any = None) -> str:
    from .templating import html_environment

    return html_environment("report").get_template("report.html.j2").render(**context(design, data, verify))


def report_html(design: Any, path: str | os.PathLike | None = None, data: Any = None, verify: Any = None) -> str:
    """The HTML report of ``design`` (any kind), written to ``path`` when given; returns the HTML.

    ``data``: float samples, shape (N, ...) as ``predict`` takes them, to compare the design with
    the float model (a GEMM refuses it).  ``verify``: a result of ``design.verify()``, or the
    design directory whose ``verify.json`` (written by ``aieflow verify``) to show; without one
    the report says the design was not verified.
    """
    html = render(design, data, verify)
    if path is not None:
        write_text(path, html, "HTML report", "path")
    return html
