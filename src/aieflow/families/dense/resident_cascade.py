"""The Dense family's resident-cascade variant (``dense/resident_cascade``, docs/ARCHITECTURE.md
"Direction: one compiler"): a planned Dense layer as its ``cas_num x cas_len`` rectangle of
``dense.h`` kernels with the weights resident in tile memory, lowered into the mapped graph
(:func:`lower`: its kernels on their placed tiles and the cascades along each row) and emitted
(:func:`kernel_files`: its ``layers.h`` configuration, one weight header per tile and its kernel
source).  The Dense chain (``passes/emit.py``) and the DAG (``dag/emit.py``) lower and emit every
Dense layer through this one module; they add only the links into and out of the rectangle.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from ... import __version__
from ...devices import Device
from ...ir import Node
from ...mapped.ir import Cost, Kernel, Link, Port
from ...mapped.text import c_array, float_literal, narrow_output
from ...names import Code
from ...numerics.types import FixedType, FloatType
from ...ops.dense import (
    DensePlan,
    DenseTypes,
    cascade_chunk_lanes,
    kind_of,
    memory_homes,
    pack_tile,
)
from ...ops.post import post_constants
from ...templating import environment

_ENV = environment("project")


def acc_tag(t: DenseTypes) -> str:
    return "accfloat" if t.is_float else f"acc{t.acc_bits}"


def cascade_role(p: DensePlan, c: int) -> str:
    """The role of cascade position ``c`` in its row: "single" (a row of one), "first", "middle" or
    "last"; the kernel class (:func:`tile_role`) and the cycle model (``perf/kernel.py``) follow it."""
    if p.cas_len == 1:
        return "single"
    if c == 0:
        return "first"
    return "last" if c == p.cas_len - 1 else "middle"


def tile_role(p: DensePlan, c: int, requant: bool = False) -> str:
    """The dense.h kernel class of cascade position ``c``; a requantising layer's storing tiles
    (``requant``: float scales, ops/dense.quantise_affine) hold its multipliers: ``...Rq``."""
    role = cascade_role(p, c)
    return f"Dense{role.capitalize()}" + ("Rq" if requant and role in ("single", "last") else "")


def is_requant(node: Node) -> bool:
    return "rq_mult" in node.params


def roles_of(p: DensePlan, requant: bool = False) -> list[str]:
    return sorted({tile_role(p, c, requant) for c in range(p.cas_len)})


@lru_cache(maxsize=1 << 16)  # pure; a search lowers the same tiles' names many times over
def tile_var(ident: str, r: int, c: int, replica: int = 0) -> str:
    return f"k_{ident}_r{r}_c{c}{replica_suffix(replica)}"


def replica_suffix(replica: int) -> str:
    """Names of replica 0 carry no suffix, so a single-copy design reads as before."""
    return f"_x{replica}" if replica else ""


def post_info(post: Node | None, plan: DensePlan) -> dict[str, Any]:
    """A fused activation / softmax's ``POST_*`` constants in a layer's config (``dense.h``
    DensePost); neutral ones without one."""
    if post is None:
        return {"op": 0, "float": 0, "fn": 0, "a": "0.0f", "b": "0.0f", "seg": 0, "sd": 0, "fo": 0, "min": 0, "lo": 0,
                "hi": 0, "size": 1, "rows": 1, "n": 1, "table": Code("0"), "text": ""}
    c = post_constants(post)
    return {**{k: c[k] for k in ("op", "float", "fn", "seg", "sd", "fo", "min", "lo", "hi", "size")},
            "a": float_literal(c["a"]), "b": float_literal(c["b"]), "rows": plan.batch,
            "n": plan.out_features, "table": c_array(c["table"], FixedType(32, 0)), "text": c["text"], "name": post.name}


def layer_info(node: Node, ident: str, device: Device, post: Node | None = None) -> dict[str, Any]:
    """A Dense layer's config (``layers.h``) and what the templates say of it; ``post``: the
    activation / softmax fused into its last tiles (``ops/post.py``)."""
    t: DenseTypes = node.types
    p: DensePlan = node.plan
    m, k, n = p.mmul
    mn = m * n
    if isinstance(t.output, FixedType):
        rounding, saturation = t.output.rounding.value, t.output.saturation.value
    else:
        rounding, saturation = "conv_even", "saturate"
    bias_type = t.bias if t.bias is not None else (FloatType("fp32") if t.is_float else FixedType(32, 0))
    return {
        "name": node.name,
        "cfg": f"{ident}_cfg",
        "ta": t.input.c_type,
        # int4 weights: the kernel's weight element is the AIE API's int4, stored two per byte in int8
        "tw": "int4" if kind_of(t.weight) == "i4" else t.weight.c_type,
        "tws": "int8" if kind_of(t.weight) == "i4" else t.weight.c_type,
        "w_pack": 2 if kind_of(t.weight) == "i4" else 1,
        "tb": "float" if t.is_float else bias_type.c_type,
        "to": t.output.c_type,
        "ty": (post.types.output if post is not None else t.output).c_type,
        "post": post_info(post, p),
        "acc": acc_tag(t),
        "m": m,
        "k": k,
        "n": n,
        "batch_pad": p.batch_pad,
        "k_slice": p.k_slice,
        "n_slice": p.n_slice,
        "out_panel": p.out_panel,
        "casc_lanes": cascade_chunk_lanes(mn, 32 if t.is_float else t.acc_bits, device.generation.cascade_bits),
        "shift": t.shift,
        "bias_shift": t.bias_shift,
        "relu": node.attrs.get("activation") == "relu",
        "has_bias": t.bias is not None,
        "rounding": rounding,
        "saturation": saturation,
        "narrow": narrow_output(t.output),
        "in_features": p.in_features,
        "out_features": p.out_features,
        "cas_len": p.cas_len,
        "cas_num": p.cas_num,
        "roles": roles_of(p, is_requant(node)),
        "rq": is_requant(node),
        "rq_zp": getattr(t.output, "zero_point", 0),
        "types_text": f"in {t.input}, w {t.weight}, b {t.bias}, out {t.output}, acc {acc_tag(t)}",
        "bias_type": bias_type,
    }


_NEIGHBOUR = {"own": (0, 0), "north": (0, 1), "south": (0, -1)}


def buffer_locations(p: DensePlan, device: Device, tile: tuple[int, int], inp: bool, out: bool):
    """Location constraints of a borrowing layer's own activation buffers (``Kernel.locations``):
    each ping and pong at the first bank ``memory_homes`` gave it, in the memory of the tile
    itself or of the neighbour lending it.  Nothing for a layer that borrows nothing."""
    if not p.borrows:
        return ()
    gen = device.generation
    homes = {h.buffer: h for h in memory_homes(p.memory, p.borrows, gen.bank_bytes, gen.memory_banks) or ()}

    def where(name: str) -> tuple[int, int, int]:
        h = homes[name]
        dc, dr = _NEIGHBOUR[h.memory]
        return tile[0] + dc, tile[1] + dr, h.bank * gen.bank_bytes

    out_ports = []
    if inp:
        out_ports.append(("in", 0, (where("input ping"), where("input pong"))))
    if out:
        out_ports.append(("out", 0, (where("output ping"), where("output pong"))))
    return tuple(out_ports)


def lower(node: Node, ident: str, placement, device: Device, *, replica: int = 0, own_in: bool = True,
          own_out: bool = True, cost: Cost | None = None) -> tuple[list[Kernel], list[Link]]:
    """Copy ``replica`` of the layer's rectangle: one kernel per cascade position on its placed
    tile (``placement.tile``: the generation's cascade direction, lender rows, the copy's offset),
    its ports' element counts (input panel slice; the cascade input after position 0; the output
    slice at the last position), ``cost`` on every kernel (the layer's stage), and a ``cascade``
    link between neighbouring positions of each row.  ``own_in`` / ``own_out``: whether the
    layer's input / output buffers are its own (a PLIO or memory-tile port at the other end) and
    may be pinned in a lender's memory (:func:`buffer_locations`), or shared with the neighbouring
    layer's kernels (a direct buffer link)."""
    p: DensePlan = node.plan
    cascade_east = not device.generation.cascade_serpentine
    requant = is_requant(node)
    kernels: list[Kernel] = []
    links: list[Link] = []
    for r in range(p.cas_num):
        for c in range(p.cas_len):
            sym = tile_var(ident, r, c)[2:]
            last = c == p.cas_len - 1
            at = placement.tile(node.name, r, c, cascade_east, replica)
            kernels.append(Kernel(
                tile_var(ident, r, c, replica), node.name, f"aieflow::{tile_role(p, c, requant)}<aieflow_design::{ident}_cfg>",
                (f"aieflow_design::{sym}_w", f"aieflow_design::{sym}_b"), f"kernels/{ident}.cc",
                at, (p.batch_pad * p.k_slice,) + ((None,) if c else ()),
                (p.batch_pad * p.n_slice if last else None,), replica,
                buffer_locations(p, device, at, own_in, own_out and last), cost=cost,
                borrowed=tuple((at[0] + _NEIGHBOUR[b][0], at[1] + _NEIGHBOUR[b][1]) for b in p.borrows)))
    for r in range(p.cas_num):
        for c in range(p.cas_len - 1):
            links.append(Link("cascade", Port(tile_var(ident, r, c, replica), "out", 0),
                              Port(tile_var(ident, r, c + 1, replica), "in", 1)))
    return kernels, links


def weight_headers(node: Node, ident: str) -> list[str]:
    """The layer's weight headers (``src/``-relative), one per tile, rows first."""
    p: DensePlan = node.plan
    return [f"weights/{tile_var(ident, r, c)[2:]}.h" for r in range(p.cas_num) for c in range(p.cas_len)]


def kernel_files(node: Node, ident: str, device: Device, post: Node | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The layer's ``layers.h`` configuration (:func:`layer_info`) and its files: one weight
    header per tile (:func:`weight_headers`; ``ops/dense.pack_tile``'s blocks in kernel order) and
    its kernel source ``src/kernels/<ident>.cc``."""
    L = layer_info(node, ident, device, post)
    p: DensePlan = node.plan
    files: dict[str, str] = {}
    for r in range(p.cas_num):
        for c in range(p.cas_len):
            sym = tile_var(ident, r, c)[2:]
            packed = pack_tile(node, r, c)
            w = packed["weights"]
            b = packed.get("bias", np.zeros(0))
            files[f"src/weights/{sym}.h"] = _ENV.get_template("weights.h.j2").render(
                version=__version__, L=L, r=r, c=c, sym=sym, w=w, b=b,
                w_text=c_array(w, node.types.weight), b_text=c_array(b, L["bias_type"]))
    files[f"src/kernels/{ident}.cc"] = _ENV.get_template("layer_kernel.cc.j2").render(version=__version__, L=L)
    return L, files


def kernel_classes(L: dict[str, Any]) -> list[str]:
    """The kernel classes the layer instantiates (one per role), for the x86 build's list."""
    return [f"aieflow::{role}<aieflow_design::{L['cfg']}>" for role in L["roles"]]
