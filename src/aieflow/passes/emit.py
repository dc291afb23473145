"""Render the Vitis AIE project: graph, kernels, weights, PLIO data, Makefile, host stub.

Returns the files as a ``{relative path: text}`` mapping; writing them (atomically) is the
design's job, so a failure here can never leave a half-written directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from .. import __version__
from ..devices import Device
from ..errors import UnsupportedOpError
from ..families.dense import resident_cascade
from ..families.dense.resident_cascade import replica_suffix, tile_var
from ..ir import Graph, Node
from ..mapped.adf import graph_header
from ..mapped.ir import Cost, Kernel, Link, MappedGraph, Plio, Port, SharedBuffer
from ..mapped.text import PLIO_BITS, format_values, values_per_word
from ..mapped.tiling import NdTiling, Traversal
from ..names import c_ident, comment, unique_idents
from ..numerics.types import NumericType
from ..ops.dense import DensePlan, to_panels
from ..ops.post import fused_post, is_fused_post, written
from ..ops.registry import family
from ..perf import costs
from ..perf.simulate import input_bytes, output_bytes
from ..templating import environment
from ..vitis import system_files
from .place import Placement
from .transport import memtile_link

_ENV = environment("project")


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


def layer_idents(layers: list[Node]) -> dict[str, str]:
    """C identifiers of the layers (unique, stable: they name kernels, ports and files)."""
    return unique_idents([node.name for node in layers])


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


def _tiling(t, dims) -> NdTiling:
    """A chain link's 2-D port pattern (``transport.Tiling``) as the mapped graph's N-D tiling."""
    return NdTiling(tuple(dims), tuple(t.tile), tuple(t.offset), (Traversal(0, t.stride, t.wrap),), t.boundary)


def _own_buffer_ports(layers: list[Node], i: int, device: Device) -> tuple[bool, bool]:
    """Whether layer ``i``'s input and output buffers are its own (a PLIO or a memory-tile port
    at the other end), not shared with the neighbouring layer's kernels (a direct buffer link,
    whose place aiecompiler chooses for both ends)."""
    direct = device.memory_tile_rows == 0
    inp = i == 0 or not (direct or layers[i].plan.link == "buffer")
    out = i == len(layers) - 1 or not (direct or layers[i + 1].plan.link == "buffer")
    return inp, out


@dataclass(frozen=True)
class ChainCosts:
    """The cost annotations of a Dense chain's mapped graph (``perf/costs.py``), by layer: its
    kernel stage, and the stages of the link into it (memory-tile write, relay and read, or a tile
    DMA; none when the tiles share the buffer)."""

    plio_in: Cost
    plio_out: Cost
    kernel: Mapping[str, Cost]
    write: Mapping[str, Cost]
    relay: Mapping[str, Cost]
    read: Mapping[str, Cost]
    dma: Mapping[str, Cost]


def _direct_hops(pl: Placement, prev: Node, node: Node, cascade_east: bool = False) -> int | None:
    """Largest switch-hop distance of a direct buffer link (AIE1, or AIE-ML without a memory
    tile), or None when every consumer tile is a memory neighbour of its producer's last tile (the
    buffer is shared, nothing moves)."""
    worst = 0
    shared = True
    for r in range(prev.plan.cas_num):
        src = pl.tile(prev.name, r, prev.plan.cas_len - 1, cascade_east)
        for rr in range(node.plan.cas_num):
            dst = pl.tile(node.name, rr, r, cascade_east)
            d = abs(src[0] - dst[0]) + abs(src[1] - dst[1])
            shared = shared and d <= 1
            worst = max(worst, d)
    return None if shared else worst


def chain_costs(layers: list[Node], device: Device, placement: Placement) -> ChainCosts:
    """Each stage of the chain as copy 0 is placed (``perf/costs.py``, the DAG's cost functions):
    the PLIOs broadcast up the first layer's columns / out of the last layer's rows (from the
    rectangle's top row), each layer's cascade rectangle, each memory-tile link's write (from the
    producer's top row and last column), relay and read (to the consumer's top row), each direct
    link's tile DMA (the farthest producer -> consumer tile pair)."""
    if not layers:
        raise ValueError("the design has no planned layers")
    kernel, write, relay, read, dma = {}, {}, {}, {}, {}
    for i, node in enumerate(layers):
        kernel[node.name] = costs.dense_kernel(node, device)
        if not i:
            continue
        prev = layers[i - 1]
        rp, rn = placement.rect(prev.name), placement.rect(node.name)
        tag = f"{prev.name}->{node.name}"
        if node.plan.link == "memtile":
            link = memtile_link(prev, node, device.memtile_channels)
            tiles = link.memtiles(device)
            hops_in, hops_out = costs.memtile_link_hops(device, (rp,), rn)
            write[node.name] = costs.memtile(f"memtile_write:{tag}", output_bytes(prev.plan, prev.types),
                                             prev.plan.cas_num, device, hops_in, tiles)
            if link.relays:  # the relay shards copy their rows into the shard they feed, in parallel
                relay_bytes = max(sh.dims[0] * sh.dims[1] for sh in link.shards if sh.reads[0][0].kind == "shard")
                relay[node.name] = costs.memtile(f"memtile_relay:{tag}", relay_bytes * link.element_bytes,
                                                 link.relays, device, 1, tiles)
            read[node.name] = costs.memtile(f"memtile_read:{tag}", input_bytes(node.plan, node.types),
                                            node.plan.cas_len, device, hops_out, tiles)
        else:
            hops = _direct_hops(placement, prev, node, not device.generation.cascade_serpentine)
            if hops is not None:
                dma[node.name] = costs.tile_dma(f"dma:{tag}", output_bytes(prev.plan, prev.types), device, hops)
    first, last = layers[0], layers[-1]
    top = lambda n: placement.rect(n.name).row + placement.rect(n.name).height - 1  # noqa: E731
    return ChainCosts(costs.plio(f"plio_in:{first.name}", input_bytes(first.plan, first.types), device, top(first)),
                      costs.plio(f"plio_out:{last.name}", output_bytes(last.plan, last.types), device, top(last)),
                      kernel, write, relay, read, dma)


def _replica_graph(layers: list[Node], idents: dict[str, str], device: Device, placement: Placement, rep: int,
                   types: dict[str, NumericType], costs):
    """Kernels, links, memory-tile buffers and PLIOs of one copy of the design (``types``: what
    each layer's kernels write; ``costs``: copy 0's stage costs, which every copy carries)."""
    x = replica_suffix(rep)
    kernels: list[Kernel] = []
    cascades: dict[str, list[Link]] = {}
    for i, node in enumerate(layers):
        own_in, own_out = _own_buffer_ports(layers, i, device)
        k, cascades[node.name] = resident_cascade.lower(node, idents[node.name], placement, device, replica=rep,
                                                        own_in=own_in, own_out=own_out, cost=costs.kernel[node.name])
        kernels += k

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
        links += cascades[node.name]
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
    kernel, shard, PLIO and DMA link with its stage cost (:func:`chain_costs`,
    copy 0's for every copy).  ``copies``: lower only the first that many replicas (the estimate
    lowers copy 0 alone: every copy carries its costs, so the stage graph is the same)."""
    layers = dense_layers(graph)
    idents = layer_idents(layers)
    types = {n.name: written(graph, n)[1] for n in layers}
    costs = chain_costs(layers, device, placement)
    parts = [_copy_parts(layers, idents, device, placement, rep, types, costs)
             for rep in range(len(placement.replicas) if copies is None else copies)]
    headers = tuple(h for n in layers for h in resident_cascade.weight_headers(n, idents[n.name]))
    return MappedGraph(*(tuple(x for part in parts for x in part[i]) for i in range(4)), headers)


def lower_copy(graph: Graph, device: Device, placement: Placement, rep: int) -> MappedGraph:
    """Copy ``rep`` of the chain alone: the kernels, buffers, PLIOs and links :func:`lower_chain`
    gives it (every name carries the copy's suffix and every link joins two of the copy's own
    entities), without the weight headers."""
    layers = dense_layers(graph)
    types = {n.name: written(graph, n)[1] for n in layers}
    return MappedGraph(*_copy_parts(layers, layer_idents(layers), device, placement, rep, types,
                                    chain_costs(layers, device, placement)))


def _copy_parts(layers: list[Node], idents: dict[str, str], device: Device, placement: Placement, rep: int,
                types: dict[str, NumericType], costs) -> tuple[list[Kernel], list[SharedBuffer], list[Plio], list[Link]]:
    """One copy's (kernels, buffers, PLIOs, links), each PLIO with its stage cost."""
    k, c, m, pi, po = _replica_graph(layers, idents, device, placement, rep, types, costs)
    plios = [Plio(p["var"], "in", PLIO_BITS, p["file"], cost=costs.plio_in) for p in pi]
    plios += [Plio(p["var"], "out", PLIO_BITS, p["file"], cost=costs.plio_out) for p in po]
    return k, m, plios, c


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
    infos, files = {}, {}
    for n in layers:
        infos[n.name], own = resident_cascade.kernel_files(n, idents[n.name], device, fused_post(graph, n))
        files.update(own)

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
    files["src/kernels/cnn_float_post.h"] = kernels.joinpath("../cnn/cnn_float_post.h").read_text()  # dense.h's fp32 post
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
        classes=[c for L in infos.values() for c in resident_cascade.kernel_classes(L)],
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
