"""The ADF graph (``src/graph.h``, UG1079 / UG1603) of a :class:`~aieflow.mapped.ir.MappedGraph`:
one template for every path that lowers into the mapped graph."""

from __future__ import annotations

import re

from ..names import Code
from ..templating import environment
from .ir import MappedGraph
from .tiling import render

_ENV = environment("mapped")
_CONNECT = {"cascade": "<adf::cascade>", "stream": "<adf::stream>", "packet": "<>"}
_ELEMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[(\d+)\]$")


def statements(g: MappedGraph) -> list[Code]:
    """Each kernel buffer port's ``adf::dimensions``, then every link's ``adf::connect`` (a cascade
    as ``adf::connect<adf::cascade>``, a stream as ``adf::connect<adf::stream>``, a packet stream
    as ``adf::connect<>``, a DDR segment as two stream connections through its GMIO pair), in the graph's order, then the buffers' location constraints and
    single-buffer ports."""
    out = []
    for k in g.kernels:
        for side, sizes in (("in", k.in_sizes), ("out", k.out_sizes)):
            out += [Code(f"adf::dimensions({k.var}.{side}[{i}]) = {{{n}}}") for i, n in enumerate(sizes) if n is not None]
    ddr = {id(link): name for name, link in g.ddr_links()}
    shared = {b.var for b in g.buffers}
    for n, link in enumerate(g.links):
        if link.kind == "ddr":  # the producer's stream into the output GMIO, the input GMIO into the reader's
            # stream port, or into a shared buffer's write port (its tiling says where: adf::connect)
            into = "" if link.dst.owner in shared else "<adf::stream>"
            out.append(Code(f"adf::connect<adf::stream>({link.src.ref()}, {ddr[id(link)]}_w.in[0])"))
            out.append(Code(f"adf::connect{into}({ddr[id(link)]}_r.out[0], {link.dst.ref()})"))
            continue
        if link.fifo_depth:  # a named net and its FIFO depth (UG1079 "FIFO Depth")
            out.append(Code(f"adf::connect<> net{n}({link.src.ref()}, {link.dst.ref()})"))
            out.append(Code(f"adf::fifo_depth(net{n}) = {int(link.fifo_depth)}"))
            continue
        out.append(Code(f"adf::connect{_CONNECT.get(link.kind, '')}({link.src.ref()}, {link.dst.ref()})"))
    for k in g.kernels:  # UG1079 buffer location constraints: ping and pong at their addresses
        for side, i, where in k.locations:
            at = ", ".join(f"adf::address({c}, {r}, 0x{off:04x})" for c, r, off in where)
            out.append(Code(f"adf::location<adf::buffer>({k.var}.{side}[{i}]) = {{{at}}}"))
        out += [Code(f"adf::single_buffer({k.var}.{side}[{i}])") for side, i in k.single]
    return out


def declarations(names: list[str]) -> list[str]:
    """Member declarators for ``names`` in order: a plain name as is, the elements ``a[0]`` ..
    ``a[n-1]`` of an array as one ``a[n]`` where its first element stands (the elements must be
    exactly 0 .. n-1)."""
    out: list[str] = []
    arrays: dict[str, list[int]] = {}
    for name in names:
        m = _ELEMENT.match(name)
        if m is None:
            out.append(name)
            continue
        base = m.group(1)
        if base not in arrays:
            arrays[base] = []
            out.append(base)
        arrays[base].append(int(m.group(2)))
    for base, idx in arrays.items():
        assert sorted(idx) == list(range(len(idx))), f"{base}: elements {sorted(idx)} are not 0 .. n-1"
    return [f"{n}[{len(arrays[n])}]" if n in arrays else n for n in out]


def graph_header(g: MappedGraph, graph_class: str, includes: tuple[str, ...] = ("layers.h",), **context) -> str:
    """``src/graph.h``: PLIOs and GMIO ports, shared buffers with their tilings, kernels with their sources and
    locations, packet switches, connections.  ``includes``: the headers declaring the kernel
    classes and their configurations (relative to src/; one in ``<...>`` is a system header);
    ``context``: ``version``, ``device``, ``title`` (the header comment, one comment line per line
    of it), optionally ``constants`` ((name, int value) pairs: ``static constexpr int`` members of
    the graph class)."""
    g.check()
    title = context.pop("title")
    constants = context.pop("constants", ())
    buffers = [{"var": b.var, "ctype": b.ctype, "dims": b.dims, "comment": b.comment, "repetitions": b.repetitions,
                "writes": [Code(render(t)) for t in b.writes], "reads": [Code(render(t)) for t in b.reads]}
               for b in g.buffers]
    kernels = [{"var": k.var, "cls": Code(k.cls), "args": Code(", ".join(k.args)), "source": k.source,
                "col": k.tile[0], "row": k.tile[1], "ratio": repr(float(k.ratio)), "pinned": k.pinned,
                "function": k.function} for k in g.kernels]
    # GMIO ports (DDR segments, the GEMM's GMIO Br): 64-byte bursts (UG1079 allows 64, 128 or 256),
    # the bandwidth asked for is the core stream's (32 bits per AIE cycle) in MB/s unless the port
    # names its own (``Plio.mbps``)
    device = context.get("device")
    mbps = int(device.generation.core_stream_bits // 8 * device.clock_hz / 1e6) if device is not None else 1000
    gmios = [{"name": name, "mbps": mbps, "transfers": link.segment[0], "bytes": link.segment[1]}
             for name, link in g.ddr_links()]
    plio_in = [p for p in g.plios if p.direction == "in" and not p.gmio]
    plio_out = [p for p in g.plios if p.direction == "out" and not p.gmio]
    gmio_ports = [p for p in g.plios if p.gmio]
    return _ENV.get_template("graph.h.j2").render(
        graph_class=graph_class, headers=g.headers, plio_in=plio_in, plio_out=plio_out, buffers=buffers,
        kernels=kernels, switches=g.switches, gmios=gmios, gmio_ports=gmio_ports, mbps=mbps, includes=includes,
        statements=statements(g), title_lines=title.split("\n"), constants=constants,
        decl_in=declarations([p.var for p in plio_in]), decl_out=declarations([p.var for p in plio_out]),
        decl_kernels=declarations([k.var for k in g.kernels]), **context)
