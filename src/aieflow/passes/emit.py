"""Render the Vitis AIE project: graph, kernels, weights, PLIO data, Makefile, host stub.

Returns the files as a ``{relative path: text}`` mapping; writing them (atomically) is the
design's job, so a failure here can never leave a half-written directory.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import numpy as np

from .. import __version__
from ..devices import Device
from ..errors import UnsupportedOpError
from ..ir import Graph, Node
from ..mapped.adf import graph_header
from ..mapped.ir import Kernel, Link, MappedGraph, Plio, Port, SharedBuffer
from ..mapped.tiling import NdTiling, Traversal
from ..names import Code, c_ident, comment, unique_idents
from ..numerics.types import FixedType, FloatType, NumericType, Saturation
from ..ops.dense import (
    DensePlan,
    DenseTypes,
    cascade_chunk_lanes,
    kind_of,
    memory_homes,
    pack_tile,
    to_panels,
)
from ..ops.post import fused_post, is_fused_post, post_constants, written
from ..ops.registry import family
from ..templating import environment
from ..vitis import system_files
from .place import Placement
from .transport import memtile_link

PLIO_BITS = 64

_ENV = environment("project")


def acc_tag(t: DenseTypes) -> str:
    return "accfloat" if t.is_float else f"acc{t.acc_bits}"


def dense_layers(graph: Graph) -> list[Node]:
    """The chain's Dense layers (views and activations / softmax fused into them left out)."""
    layers = []
    for n in graph.nodes:
        fam = family(n.op, n.name)
        if fam.is_view or is_fused_post(graph, n):
            continue
        if n.op != "dense":
            raise UnsupportedOpError(f"op '{n.op}' cannot be emitted yet", layer=n.name)
        layers.append(n)
    return layers


def tile_role(p: DensePlan, c: int, requant: bool = False) -> str:
    """The dense.h kernel class of cascade position ``c``; a requantising layer's storing tiles
    (``requant``: float scales, ops/dense.quantise_affine) hold its multipliers: ``...Rq``."""
    if p.cas_len == 1:
        return "DenseSingleRq" if requant else "DenseSingle"
    if c == 0:
        return "DenseFirst"
    if c == p.cas_len - 1:
        return "DenseLastRq" if requant else "DenseLast"
    return "DenseMiddle"


def is_requant(node: Node) -> bool:
    return "rq_mult" in node.params


def roles_of(p: DensePlan, requant: bool = False) -> list[str]:
    return sorted({tile_role(p, c, requant) for c in range(p.cas_len)})


def values_per_word(t: NumericType) -> int:
    return max(1, PLIO_BITS // t.container_bits)


def _grid(count: int, per_line: int, item: str, sep: str, head: str, tail: str) -> str:
    """A %-format string of ``count`` items ``per_line`` to a line: ``head item sep item ... tail``,
    lines joined by newlines."""
    full, rest = divmod(count, per_line)
    lines = [head + sep.join([item] * per_line) + tail] * full
    if rest:
        lines.append(head + sep.join([item] * rest) + tail)
    return "\n".join(lines)


def _lines(values: np.ndarray, t: NumericType, per_line: int, sep: str, head: str, tail: str, float_spec: str) -> str:
    """``per_line`` values to a line, ``head item sep item ... tail``, lines joined by newlines:
    integers as ``str(int(v))``, floats as ``float_spec`` (every value finite).

    Weight headers hold millions of values, so nothing here makes a Python call per value: a
    small range of integers is printed by looking each value's text (with what follows it) up in a
    table of the range, anything else by one ``%`` with every value (formatted in C)."""
    flat = np.asarray(values).reshape(-1)
    if isinstance(t, FloatType):
        return _grid(flat.size, per_line, float_spec, sep, head, tail) % tuple(flat.astype(np.float64).tolist())
    if flat.dtype.kind not in "iub":  # integers held as floats: truncated, as int() does
        ints = list(map(int, flat.tolist()))
        return _grid(len(ints), per_line, "%d", sep, head, tail) % tuple(ints)
    lo, hi = (int(flat.min()), int(flat.max())) if flat.size else (0, 0)
    if hi - lo >= flat.size or hi - lo > 1 << 16:  # a table larger than the values it prints
        return _grid(flat.size, per_line, "%d", sep, head, tail) % tuple(flat.tolist())
    digits = [str(v) for v in range(lo, hi + 1)]
    within = np.array([d + sep for d in digits], dtype=object)
    index = flat.astype(np.int64) - lo
    items = within[index]
    if per_line <= flat.size:
        ends = np.array([d + tail + "\n" + head for d in digits], dtype=object)
        items[per_line - 1 :: per_line] = ends[index[per_line - 1 :: per_line]]
    items[-1] = digits[index[-1]] + tail
    return head + "".join(items.tolist())


def format_values(values: np.ndarray, t: NumericType, per_line: int) -> str:
    """PLIO text: ``per_line`` values to a line, separated by spaces (floats as ``%.9g``)."""
    if np.asarray(values).size == 0:
        return "\n"
    return _lines(values, t, per_line, " ", "", "", "%.9g") + "\n"


def _c_array(values: np.ndarray, t: NumericType, per_line: int = 16) -> Code:
    """The body of a C array initialiser: ``per_line`` values to a line, each followed by a comma."""
    if values.size == 0:
        return Code("    0")
    if isinstance(t, FloatType) and not np.isfinite(values).all():
        # a non-finite value prints as 0.0f (rare: formatted one by one)
        flat = np.asarray(values, dtype=np.float64).reshape(-1).tolist()
        items = tuple(f"{v:.8e}f" if np.isfinite(v) else "0.0f" for v in flat)
        return Code(_grid(len(items), per_line, "%s", ", ", "    ", ",") % items)
    # scientific notation always has a '.', so every item is a valid float literal ("0f" is not)
    return Code(_lines(values, t, per_line, ", ", "    ", ",", "%.8ef"))


def layer_idents(layers: list[Node]) -> dict[str, str]:
    """C identifiers of the layers (unique, stable: they name kernels, ports and files)."""
    return unique_idents([node.name for node in layers])


def tile_var(ident: str, r: int, c: int, replica: int = 0) -> str:
    return f"k_{ident}_r{r}_c{c}{replica_suffix(replica)}"


def replica_suffix(replica: int) -> str:
    """Names of replica 0 carry no suffix, so a single-copy design reads as before."""
    return f"_x{replica}" if replica else ""


def replica_share(x: np.ndarray, batch: int, replicas: int, replica: int) -> np.ndarray:
    """The samples ``replica`` runs: graph iterations replica, replica + R, ... of ``x`` (whose rows
    are a whole number of ``batch * replicas``)."""
    if replicas == 1:
        return x
    it = x.reshape(-1, replicas, batch, *x.shape[1:])
    return it[:, replica].reshape(-1, *x.shape[1:])


def replica_merge(parts: list[np.ndarray], batch: int) -> np.ndarray:
    """Inverse of :func:`replica_share`: interleave the replicas' outputs iteration by iteration."""
    if len(parts) == 1:
        return parts[0]
    stacked = np.stack([p.reshape(-1, batch, *p.shape[1:]) for p in parts], axis=1)
    return stacked.reshape(-1, *parts[0].shape[1:])


def plio_ports(layers: list[Node], replica: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Input PLIOs (one per cascade column of the first layer) and output PLIOs (one per row of
    the last layer) of one replica, with the data file each one reads or writes."""
    idents = layer_idents(layers)
    first, final = layers[0], layers[-1]
    x = replica_suffix(replica)
    plio_in = [
        {"var": f"in_{idents[first.name]}_c{c}{x}", "layer": first.name, "c": c} for c in range(first.plan.cas_len)
    ]
    plio_out = [
        {"var": f"out_{idents[final.name]}_r{r}{x}", "layer": final.name, "r": r} for r in range(final.plan.cas_num)
    ]
    for port in plio_in + plio_out:
        port["file"] = f"data/{port['var']}.txt"
    return plio_in, plio_out


def post_info(post: Node | None, plan: DensePlan) -> dict[str, Any]:
    """A fused activation / softmax's ``POST_*`` constants in a layer's config (``dense.h``
    DensePost); neutral ones without one."""
    if post is None:
        return {"op": 0, "seg": 0, "sd": 0, "fo": 0, "min": 0, "lo": 0, "hi": 0, "size": 1, "rows": 1, "n": 1,
                "table": Code("0"), "text": ""}
    c = post_constants(post)
    return {**{k: c[k] for k in ("op", "seg", "sd", "fo", "min", "lo", "hi", "size")}, "rows": plan.batch,
            "n": plan.out_features, "table": _c_array(c["table"], FixedType(32, 0)), "text": c["text"], "name": post.name}


def narrow_output(t) -> dict[str, Any] | None:
    """A fixed-point output type narrower than its container (``fixed<12,4>`` in int16): the range
    the kernel applies after the SRS (``templates/kernels/narrow.h``: Dense, the DAG's Add / LayerNorm /
    MatMul, the CNN's conv stages); None when the container is the type."""
    if not isinstance(t, FixedType) or t.width >= t.container_bits:
        return None
    wrap = t.container_bits - t.width if t.saturation is Saturation.WRAP else 0
    lo = -t.max_code if (t.saturation is Saturation.SYMMETRIC and t.signed) else t.min_code
    return {"type": t.to_string(), "lo": lo, "hi": t.max_code, "wrap": wrap}


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


def _tiling(t, dims) -> NdTiling:
    """A chain link's 2-D port pattern (``transport.Tiling``) as the mapped graph's N-D tiling."""
    return NdTiling(tuple(dims), tuple(t.tile), tuple(t.offset), (Traversal(0, t.stride, t.wrap),), t.boundary)


_NEIGHBOUR = {"own": (0, 0), "north": (0, 1), "south": (0, -1)}


def _own_buffer_ports(layers: list[Node], i: int, device: Device) -> tuple[bool, bool]:
    """Whether layer ``i``'s input and output buffers are its own (a PLIO or a memory-tile port
    at the other end), not shared with the neighbouring layer's kernels (a direct buffer link,
    whose place aiecompiler chooses for both ends)."""
    direct = device.memory_tile_rows == 0
    inp = i == 0 or not (direct or layers[i].plan.link == "buffer")
    out = i == len(layers) - 1 or not (direct or layers[i + 1].plan.link == "buffer")
    return inp, out


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


def _replica_graph(layers: list[Node], idents: dict[str, str], device: Device, placement: Placement, rep: int,
                   types: dict[str, NumericType], costs):
    """Kernels, links, memory-tile buffers and PLIOs of one copy of the design (``types``: what
    each layer's kernels write; ``costs``: copy 0's stage costs, which every copy carries)."""
    cascade_east = not device.generation.cascade_serpentine
    x = replica_suffix(rep)
    kernels: list[Kernel] = []
    for i, node in enumerate(layers):
        p: DensePlan = node.plan
        ident = idents[node.name]
        own_in, own_out = _own_buffer_ports(layers, i, device)
        for r in range(p.cas_num):
            for c in range(p.cas_len):
                sym = tile_var(ident, r, c)[2:]
                last = c == p.cas_len - 1
                at = placement.tile(node.name, r, c, cascade_east, rep)
                kernels.append(Kernel(
                    f"k_{sym}{x}", node.name, f"aieflow::{tile_role(p, c, is_requant(node))}<aieflow_design::{ident}_cfg>",
                    (f"aieflow_design::{sym}_w", f"aieflow_design::{sym}_b"), f"kernels/{ident}.cc",
                    at, (p.batch_pad * p.k_slice,) + ((None,) if c else ()),
                    (p.batch_pad * p.n_slice if last else None,), rep,
                    buffer_locations(p, device, at, own_in, own_out and last), cost=costs.kernel[node.name]))

    def kin(layer: Node, r: int, c: int, index: int = 0) -> Port:
        return Port(tile_var(idents[layer.name], r, c, rep), "in", index)

    def kout(layer: Node, r: int, c: int) -> Port:
        return Port(tile_var(idents[layer.name], r, c, rep), "out", 0)

    links: list[Link] = []
    memtiles: list[SharedBuffer] = []
    plio_in, plio_out = plio_ports(layers, rep)
    for i, node in enumerate(layers):
        p: DensePlan = node.plan
        ident = idents[node.name]
        for r in range(p.cas_num):
            for c in range(p.cas_len - 1):
                links.append(Link("cascade", kout(node, r, c), kin(node, r, c + 1, 1)))
        if i == 0:
            for port in plio_in:
                for r in range(p.cas_num):
                    links.append(Link("plio", Port(port["var"], "out", 0), kin(node, r, port["c"])))
        else:
            prev = layers[i - 1]
            pp: DensePlan = prev.plan
            if device.memory_tile_rows == 0 or p.link == "buffer":  # AIE1, or an AIE-ML direct link
                dma = costs.dma.get(node.name)  # None: the tiles share the buffer
                for r in range(pp.cas_num):
                    for rr in range(p.cas_num):
                        links.append(Link("buffer", kout(prev, r, pp.cas_len - 1), kin(node, rr, r), dma))
            else:
                link = memtile_link(prev, node, device.memtile_channels)  # checked by the plan pass
                names = [(f"mt_{ident}" if len(link.shards) == 1 else f"mt_{ident}_{j}") + x for j in range(len(link.shards))]
                relay = costs.relay.get(node.name)
                for j, sh in enumerate(link.shards):
                    # a relay shard is filled by the write stage and drained by the relay (a cost on
                    # its link); a shard of a relayed link is filled in the relay stage
                    is_relay = sh.reads[0][0].kind == "shard"
                    memtiles.append(SharedBuffer(
                        names[j], types[prev.name].c_type, tuple(sh.dims),
                        tuple(_tiling(t, sh.dims) for _, t in sh.writes), tuple(_tiling(t, sh.dims) for _, t in sh.reads),
                        comment(f"{prev.name} -> {node.name}, features {sh.base}..{sh.base + sh.dims[0] - 1}: "
                                f"{len(sh.writes)} writers in {pp.out_panel}-wide panels, {len(sh.reads)} readers "
                                f"in {p.in_panel}-wide panels"),
                        costs.write[node.name] if is_relay or relay is None else relay,
                        None if is_relay else costs.read[node.name]))
                    for w, (ep, _) in enumerate(sh.writes):
                        src = kout(prev, ep.index, pp.cas_len - 1) if ep.kind == "row" else Port(names[ep.index], "out", 0)
                        links.append(Link("memtile", src, Port(names[j], "in", w), relay if ep.kind == "shard" else None))
                    for rix, (ep, _) in enumerate(sh.reads):
                        if ep.kind == "column":
                            for rr in range(p.cas_num):
                                links.append(Link("memtile", Port(names[j], "out", rix), kin(node, rr, ep.index)))
        if i == len(layers) - 1:
            for port in plio_out:
                links.append(Link("plio", kout(node, port["r"], p.cas_len - 1), Port(port["var"], "in", 0)))
    return kernels, links, memtiles, plio_in, plio_out


def lower_chain(graph: Graph, device: Device, placement: Placement, copies: int | None = None) -> MappedGraph:
    """The Dense chain as a mapped graph: every replica's cascade tiles, its links (cascades, AIE1 /
    direct tile-to-tile buffers, memory-tile shared buffers), its PLIOs, the weight headers; each
    kernel, shard, PLIO and DMA link with its stage cost (:func:`aieflow.perf.simulate.chain_costs`,
    copy 0's for every copy).  ``copies``: lower only the first that many replicas (the estimate
    lowers copy 0 alone: every copy carries its costs, so the stage graph is the same)."""
    layers = dense_layers(graph)
    idents = layer_idents(layers)
    from ..perf.simulate import chain_costs  # perf/movement reads this module's PLIO width

    types = {n.name: written(graph, n)[1] for n in layers}
    costs = chain_costs(layers, device, placement)
    kernels: list[Kernel] = []
    links: list[Link] = []
    buffers: list[SharedBuffer] = []
    plios: list[Plio] = []
    for rep in range(len(placement.replicas) if copies is None else copies):
        k, c, m, pi, po = _replica_graph(layers, idents, device, placement, rep, types, costs)
        kernels += k
        links += c
        buffers += m
        plios += [Plio(p["var"], "in", PLIO_BITS, p["file"], cost=costs.plio_in) for p in pi]
        plios += [Plio(p["var"], "out", PLIO_BITS, p["file"], cost=costs.plio_out) for p in po]
    headers = tuple(f"weights/{tile_var(idents[n.name], r, c)[2:]}.h"
                    for n in layers for r in range(n.plan.cas_num) for c in range(n.plan.cas_len))
    return MappedGraph(tuple(kernels), tuple(buffers), tuple(plios), tuple(links), headers)


def lowered_chain(graph: Graph, device: Device, placement: Placement, copies: int | None = None) -> MappedGraph:
    """:func:`lower_chain`, built once per (planned graph, device, placement, copies) and kept with
    the graph (``mapped/cache.py``): the project's emission and every estimate of the design share
    it.  ``copies`` equal to the replica count is the whole design (``None``)."""
    from ..mapped.cache import memo

    n = len(placement.replicas)
    k = None if copies is None or copies >= n else copies
    return memo(graph, f"chain:{k}", (device, placement), lambda: lower_chain(graph, device, placement, k))


def emit_project(
    graph: Graph,
    device: Device,
    placement: Placement,
    inputs_q: np.ndarray,
    outputs_q: np.ndarray,
    graph_name: str = "aieflow",
) -> dict[str, str]:
    """All project files.  ``inputs_q`` / ``outputs_q`` are the quantised example batch(es) and
    their emulated outputs, written as PLIO input and golden files."""
    layers = dense_layers(graph)
    if not layers:
        raise UnsupportedOpError("the model has no dense layer to map onto the AI Engine")
    version = __version__
    graph_class = c_ident(graph_name).capitalize() + "Graph"
    idents = layer_idents(layers)
    infos = {n.name: layer_info(n, idents[n.name], device, fused_post(graph, n)) for n in layers}

    files: dict[str, str] = {}
    for node in layers:
        p: DensePlan = node.plan
        L = infos[node.name]
        for r in range(p.cas_num):
            for c in range(p.cas_len):
                sym = tile_var(idents[node.name], r, c)[2:]
                packed = pack_tile(node, r, c)
                w = packed["weights"]
                b = packed.get("bias", np.zeros(0))
                files[f"src/weights/{sym}.h"] = _ENV.get_template("weights.h.j2").render(
                    version=version, L=L, r=r, c=c, sym=sym, w=w, b=b,
                    w_text=_c_array(w, node.types.weight),
                    b_text=_c_array(b, L["bias_type"]),
                )
        files[f"src/kernels/{idents[node.name]}.cc"] = _ENV.get_template("layer_kernel.cc.j2").render(version=version, L=L)

    replicas = len(placement.replicas)
    mapped = lowered_chain(graph, device, placement)
    tiles, memtiles = list(mapped.kernels), list(mapped.buffers)
    ports = [plio_ports(layers, rep) for rep in range(replicas)]
    plio_in = [p for pi, _ in ports for p in pi]
    plio_out = [p for _, po in ports for p in po]

    first, final = layers[0], layers[-1]
    # each graph iteration runs every replica once, on its own batch
    iterations = int(inputs_q.shape[0] // (first.plan.batch * replicas)) if inputs_q.size else 1
    graph_var = "g"
    ctx = dict(
        version=version, device=device, graph_class=graph_class, graph_var=graph_var,
        tiles=tiles, memtiles=memtiles, plio_in=plio_in, plio_out=plio_out,
        layers=list(infos.values()), plio_bits=PLIO_BITS,
        iterations=max(1, iterations), batch=first.plan.batch, batch_pad=first.plan.batch_pad, replicas=replicas,
        platform_hint=device.vitis_platform,
    )
    files["src/layers.h"] = _ENV.get_template("layers.h.j2").render(**ctx)
    files["src/graph.h"] = graph_header(
        mapped, graph_class, version=version, device=device,
        title="ADF graph (UG1079 / UG1603): kernels, cascade chains, buffers"
              + (", memory-tile shared buffers" if memtiles else "") + ", PLIOs, locations.")
    files["src/graph.cpp"] = _ENV.get_template("graph.cpp.j2").render(**ctx)
    files["aie.cfg"] = _ENV.get_template("aie.cfg.j2").render(**ctx)
    files["x86/harness.cpp"] = _ENV.get_template("x86_harness.cpp.j2").render(**ctx)
    files["README.md"] = _ENV.get_template("README.md.j2").render(**ctx)
    kernels = resources.files("aieflow").joinpath("templates/kernels")
    files["src/kernels/dense.h"] = kernels.joinpath("dense.h").read_text()
    files["src/kernels/requant.h"] = kernels.joinpath("requant.h").read_text()
    files["src/kernels/narrow.h"] = kernels.joinpath("narrow.h").read_text()
    files["src/kernels/activation_fixed.h"] = kernels.joinpath("activation_fixed.h").read_text()
    for rep in range(replicas):
        share = [replica_share(a, first.plan.batch, replicas, rep) for a in (inputs_q, outputs_q)]
        files.update(plio_files(first, final, *share, *plio_ports(layers, rep), written(graph, final)[1]))
    tin, tout = first.types.input.c_type, written(graph, final)[1].c_type
    files.update(system_files(
        files, device=device, graph_class=graph_class, graph_var=graph_var,
        plio_in=[{**p, "ctype": tin} for p in plio_in],
        # output panels [features / panel][batch_pad][panel]: rows batch.. are padding
        plio_out=[{**p, "ctype": tout, "period": final.plan.batch_pad * final.plan.out_panel,
                   "real": final.plan.batch * final.plan.out_panel} for p in plio_out],
        iterations=ctx["iterations"], samples_per_iteration=first.plan.batch * replicas,
        classes=[f"aieflow::{role}<aieflow_design::{L['cfg']}>" for L in infos.values() for role in L["roles"]],
        tiles=tiles))
    return files


def plio_files(first: Node, final: Node, inputs_q: np.ndarray, outputs_q: np.ndarray, plio_in, plio_out,
               out_type: NumericType) -> dict[str, str]:
    """PLIO text files: the inputs, and the emulator's outputs (of type ``out_type``) as golden
    files."""
    out = plio_input_files(first, inputs_q, plio_in)
    texts = plio_output_texts(final, outputs_q, plio_out, out_type)
    out.update({f"data/golden_{port['var']}.txt": text for port, text in zip(plio_out, texts, strict=True)})
    return out


def _port_stream(x: np.ndarray, batch: int, batch_pad: int, width: int, panel: int, lo: int, hi: int) -> np.ndarray:
    """Features [lo, hi) of every batch of ``x``, each batch in panel layout, one after another."""
    x = x.reshape(x.shape[0], -1)
    batches = max(1, -(-x.shape[0] // batch))
    return np.concatenate(
        [to_panels(x[it * batch : (it + 1) * batch, lo:hi], batch_pad, width, panel) for it in range(batches)]
    )


def plio_input_files(first: Node, inputs_q: np.ndarray, plio_in) -> dict[str, str]:
    """Per iteration, each input port's panel-layout buffer, 64 bits per line."""
    p: DensePlan = first.plan
    tin = first.types.input
    return {
        port["file"]: format_values(
            _port_stream(inputs_q, p.batch, p.batch_pad, p.k_slice, p.in_panel, *p.k_range(port["c"])),
            tin,
            values_per_word(tin),
        )
        for port in plio_in
    }


def plio_output_texts(final: Node, outputs_q: np.ndarray, plio_out, tout: NumericType) -> list[str]:
    q: DensePlan = final.plan
    return [
        format_values(
            _port_stream(outputs_q, q.batch, q.batch_pad, q.n_slice, q.out_panel, *q.n_range(port["r"])),
            tout,
            values_per_word(tout),
        )
        for port in plio_out
    ]
