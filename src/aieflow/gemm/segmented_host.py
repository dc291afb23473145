"""The one host program of a segmented design (issue 20): ``host/segments_host.cpp`` at the top of
the project runs every segment in order, moving each cut tensor's codes from one segment's outputs
into the next one's inputs (a resident segment's input / output PLIO streams in their panel layout,
a streamed segment's X / Y codes), and compares the last cut with ``data/Y_golden.txt``.

On the board it is linked with each segment's own XRT host code (``host/seg_NN.cpp`` wraps the
segment's ``host.cpp`` / ``dense_host.cpp`` in a namespace of its own, so two segments' definitions
never meet); on x86 (``make system-run``, ``-DAIEFLOW_X86``) each step is the segment's own x86
system run (its PL kernels as HLS C simulation around its graph on the shim).  The moves between
segments are the same code in both."""

from __future__ import annotations

import posixpath
from importlib import resources
from typing import Any

import numpy as np

from .. import __version__
from ..errors import UnsupportedOpError
from ..names import Code, c_ident, comment
from ..numerics.types import FixedType
from ..templating import environment
from ..vitis import HOST_TYPES

# numpy dtype of a streamed segment's X / Y codes -> the PLIO element name of vitis.HOST_TYPES
_NP_TYPES = {"int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16", "int32": "int32",
             "uint32": "uint32", "int64": "int64", "float32": "float"}


def _host_type(name: str, what: str) -> Code:
    if name not in HOST_TYPES:
        raise UnsupportedOpError(f"{what} carries '{name}' values, which the segmented host cannot move",
                                 hint="cut tensors are integer codes of 8 to 64 bits or float32")
    return Code(HOST_TYPES[name])


def _features(graph, tensor: str) -> int:
    return int(np.prod(graph.tensors[tensor].shape))


def _resident(spec, seg) -> dict[str, Any]:
    from ..passes.emit import dense_layers, plio_ports

    layers = dense_layers(seg.graph)
    first, final = layers[0], layers[-1]
    if (first.plan.batch, first.plan.batch_pad) != (final.plan.batch, final.plan.batch_pad):
        raise UnsupportedOpError(f"segment {spec.name}: its first and last layers run different batches")
    replicas = len(seg.placement.replicas)
    ins, outs = [], []
    for rep in range(replicas):
        pi, po = plio_ports(layers, rep)
        ins += [{"file": Code(posixpath.basename(p["file"])), "rep": rep, "lo": first.plan.k_range(p["c"])[0],
                 "hi": first.plan.k_range(p["c"])[1], "width": first.plan.k_slice, "panel": first.plan.in_panel}
                for p in pi]
        outs += [{"file": Code(posixpath.basename(p["file"])), "rep": rep, "lo": final.plan.n_range(p["r"])[0],
                  "hi": final.plan.n_range(p["r"])[1], "width": final.plan.n_slice, "panel": final.plan.out_panel}
                 for p in po]
    return {"batch": first.plan.batch, "batch_pad": first.plan.batch_pad, "replicas": replicas, "ins": ins, "outs": outs}


def _streamed(spec, seg) -> dict[str, Any]:
    x = np.dtype(seg.x_codes_np()).name
    y = np.dtype(seg.plan.epilogue.y_np).name
    return {"x_type": _host_type(_NP_TYPES.get(x, x), f"segment {spec.name}'s input X"),
            "y_type": _host_type(_NP_TYPES.get(y, y), f"segment {spec.name}'s output Y")}


def _segments(design) -> list[dict[str, Any]]:
    out = []
    for spec, seg in zip(design.specs, design.segments, strict=True):
        s = {"name": Code(spec.name), "ident": Code(c_ident(spec.name)), "kind": Code(spec.kind),
             "layers": Code(comment(", ".join(n.name for n in seg.graph.nodes))),
             "in_features": _features(design.graph, spec.input), "out_features": _features(design.graph, spec.output)}
        s.update(_resident(spec, seg) if spec.kind == "resident" else _streamed(spec, seg))
        out.append(s)
    return out


def _tensor_type(design, tensor: str) -> Code:
    t = design.graph.tensors[tensor].dtype
    return _host_type(t.c_type if isinstance(t, FixedType) else "float", f"tensor '{comment(tensor)}'")


def host_files(design) -> dict[str, str]:
    """``host/segments_host.cpp`` (the one host), ``host/seg_NN.cpp`` (each segment's host code in a
    namespace of its own, for the board) and ``host/plio_io.h``."""
    env = environment("gemm")
    segs = _segments(design)
    files = {"host/segments_host.cpp": env.get_template("segments_host.cpp.j2").render(
        version=__version__, name=Code(comment(design.graph.name)), segments=segs,
        in_features=_features(design.graph, design.graph.inputs[0]),
        out_type=_tensor_type(design, design.graph.outputs[0])),
        "host/plio_io.h": resources.files("aieflow").joinpath("templates/system/plio_io.h").read_text()}
    for s in segs:
        files[f"host/seg_{s['ident']}.cpp"] = env.get_template("segment_entry.cpp.j2").render(
            version=__version__, s=s, source=Code("host/dense_host.cpp" if s["kind"] == "streamed" else "host/host.cpp"))
    return files


def data_files(design, x_codes: np.ndarray, y_codes: np.ndarray) -> dict[str, str]:
    """``data/X.txt`` (the graph input's codes of every sample given), ``data/samples.txt`` and
    ``data/Y_golden.txt`` (the whole model's output codes, from the emulator), one value per line."""
    from ..mapped.text import format_values

    n = int(x_codes.shape[0])
    t_in = design.graph.tensors[design.graph.inputs[0]].dtype
    t_out = design.graph.tensors[design.graph.outputs[0]].dtype
    return {"data/samples.txt": f"{n}\n",
            "data/X.txt": format_values(np.asarray(x_codes).reshape(-1), t_in, 1),
            "data/Y_golden.txt": format_values(np.asarray(y_codes).reshape(-1), t_out, 1)}
