"""The recurrent mappings lowered into the mapped graph (issue 17, migration step 4): one
:class:`~aieflow.mapped.ir.Kernel` per AI Engine kernel instance (the Conv1d front end's ``SeqConv``
kernels, each layer's row kernels or cascade chain tiles for U h and W x, its AIE aggregator or its
compact tile), the packet merges as :class:`~aieflow.mapped.ir.PacketSwitch` es with their route
IDs, the PLIOs, the links between them (stream broadcasts of x and h, cascades along a chain, packet
streams into and out of the merges) and each hybrid layer's PL aggregation FSM as a
:class:`~aieflow.mapped.ir.PLKernel`.  The dense head after the last layer has no kernel of its
own: it runs in that layer's aggregation epilogue (the aggregator, the FSM or the compact tile).
``mapped/adf.py`` writes the design's ``src/graph.h`` from it, ``project.system_project`` the FSMs'
system.cfg connections.

Names (the x86 harness, ``project.py``, reads the kernels by them): layer ``l``'s kernels ``u<l>[i]``
and ``w<l>[i]`` (a column-wise product: ``cas`` tiles per source, chain-major), ``agg<l>`` (and
its output kernel ``o<l>`` where a core has one output stream port: ``plan.output_kernel``; the
aggregator's one port is then broadcast to the U kernels and ``o<l>``) or ``c<l>`` (compact), the
front end's ``front[i]``; merges ``m<l>_<i>``; PLIOs ``x<l>``, ``h<l>``,
``to_pl<l>[i]``, ``y_out`` (named ``rnn_l<l>_x``, ``rnn_l<l>_h``, ``rnn_l<l>_m<i>``, ``rnn_y`` in the
graph and system.cfg).

Tiles: the one placer (``mapped/place.py``) places the groups (:func:`groups`: the front end's
column, one rectangle per layer) read off the design lowered unplaced (:func:`recurrent_problem`,
:func:`place_recurrent`); each kernel carries its group's position plus its tile in the group
(:func:`tiles`), the blocks the latency model counts switch hops on and ``aieflow report`` draws.
The kernels are not location-constrained (aiecompiler places them; ``Kernel.pinned`` is False).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from ..devices import Device
from ..ir import Node
from ..mapped.ir import Kernel, Link, MappedGraph, PacketSwitch, Plio, PLKernel, Port
from ..mapped.place import Block, Cell, Placement, Problem, problem, solve, staging
from ..names import c_ident
from . import front as fr
from .costs import PL_MERGE_II, pl_fsm_depth
from .emit import Layout, layout, ns, packet_id
from .grid import block_merges
from .model import fsm_items
from .plan import RecurrentMapping, output_kernel

SOURCE = "kernels/rnn_kernels.cc"
METHOD = "greedy-right"  # the placer's method for the recurrent groups (place_recurrent)
FRONT = "Conv1d front end"  # the front end's placement group (not an identifier: no layer is named so)
FSM_SOURCE = "pl/rnn_fsm.cpp"


def _x_from_plio(li: int, mappings: Sequence[RecurrentMapping]) -> bool:
    """Layer ``li``'s x arrives through its own PLIO (the design's input, or a PL FSM's output)."""
    return li == 0 or mappings[li - 1].aggregation == "hybrid"


def _col(lay: Layout, tag: str) -> tuple[bool, int]:
    return (lay.u_column, lay.u_cas) if tag == "u" else (lay.w_column, lay.w_cas)


def sender(li: int, lay: Layout, s: int) -> str:
    """The kernel that sends source ``s``'s packets (a row kernel, or a chain's last tile)."""
    nu = len(lay.u)
    tag, i = ("u", s) if s < nu else ("w", s - nu)
    column, cas = _col(lay, tag)
    return f"{tag}{li}[{i * cas + cas - 1 if column else i}]"


def y_port(li: int, mappings: Sequence[RecurrentMapping], device: Device) -> Port:
    """The AIE port layer ``li``'s output (h, or the head's) leaves by: the compact tile's stream,
    the output kernel's (``o<l>``, where a core has one output stream port: ``plan.output_kernel``)
    or the AIE aggregator's second output (a hybrid layer's output leaves the PL FSM instead)."""
    if mappings[li].compact:
        return Port(f"c{li}", "out", 0)
    if mappings[li].grid:
        return Port(f"gh{li}", "out", 0)
    if output_kernel(mappings[li].aggregation, device):
        return Port(f"o{li}", "out", 0)
    return Port(f"agg{li}", "out", 1)


# ----------------------------------------------------------------------------- tiles


def _block(n: int, rows: int, x0: int) -> list[tuple[int, int]]:
    """Row kernels column by column in a block ``rows`` high from column ``x0``."""
    return [(x0 + t // rows, t % rows) for t in range(n)]


def _chains(sources: int, cas: int, device: Device, x0: int) -> list[tuple[int, int]]:
    """Cascade chains along a row (longer than the array is wide: snaking, east on one row and back
    west on the next), stacked ``device.rows`` high, then the next group of columns; chain-major."""
    width = min(cas, device.columns)
    chain_rows = -(-cas // device.columns)
    out = []
    for i in range(sources):
        for j in range(cas):
            line, k = divmod(j, width)
            slot = i * chain_rows + line
            col = k if line % 2 == 0 else width - 1 - k
            out.append((x0 + (slot // device.rows) * width + col, slot % device.rows))
    return out


def _relative(li: int, m: RecurrentMapping, device: Device) -> dict[str, Cell]:
    """Layer ``li``'s kernels relative to its group's origin: the U h block from column 0, the W x
    block right of it, the aggregator (and its output kernel) in free slots of the U block (its
    last column first), or in its own column after the W x block when the plan gave it one; a compact
    layer's one tile."""
    if m.compact:
        return {f"c{li}": (0, 0)}
    if m.grid:  # per chain the W x partner, the partial-sum tiles, the gate tile west to east (the cascade),
        out = {}  # chains as rows; the head after
        c_n = m.chain_len
        for r in range(m.chains):
            col = (c_n + 1) * (r // device.rows)
            out[f"gw{li}[{r}]"] = (col, r % device.rows)
            for j in range(c_n - 1):
                out[f"gp{li}[{grid_part(r, j, c_n)}]"] = (col + 1 + j, r % device.rows)
            out[f"gc{li}[{r}]"] = (col + c_n, r % device.rows)
        out[f"gh{li}"] = (m.u_columns + m.w_columns, 0)
        return out
    lay = layout(m, device)
    out: dict[str, Cell] = {}
    for tag, x, rows in (("u", 0, m.u_rows), ("w", m.u_columns, m.w_rows)):
        column, cas = _col(lay, tag)
        nsrc = len(lay.u) if tag == "u" else len(lay.w)
        at = _chains(nsrc, cas, device, x) if column else _block(nsrc, max(rows, 1), x)
        out.update({f"{tag}{li}[{t}]": p for t, p in enumerate(at)})
    if m.aggregation != "hybrid":
        used = {p for k, p in out.items() if k.startswith(f"u{li}[")}
        # free slots of the whole U block, its last column first: the plan (plan.build_mapping) gives the
        # aggregator no column of its own when the block has room, wherever that room is (cascade chains
        # stacked device.rows high can leave it in an earlier column: AIE-MLv2's 4 rows)
        free = [(c, r) for c in range(m.u_columns - 1, -1, -1) for r in range(device.rows) if (c, r) not in used]
        own = [(m.u_columns + m.w_columns, r) for r in range(device.rows)]
        names = [f"agg{li}", *([f"o{li}"] if output_kernel(m.aggregation, device) else [])]
        out.update(zip(names, free if len(free) >= len(names) and not m.agg_columns else own, strict=False))
    return out


def groups(layers: Sequence[Node], mappings: Sequence[RecurrentMapping], device: Device
           ) -> tuple[tuple[Block, ...], dict[str, str], dict[str, Cell]]:
    """The placement groups (``mapped.place.Block``): the Conv1d front end's kernels one column
    (``FRONT``, a 1 x F group), then each layer one rectangle named after its node, the plan's
    ``columns`` wide (less the front's column) and as high as its kernels' rows (the aggregator
    may sit above a full U h column); with each kernel's group and its tile in the group."""
    shapes: list[Block] = []
    group_of: dict[str, str] = {}
    rel: dict[str, Cell] = {}
    if mappings and mappings[0].front_tiles:
        shapes.append(Block(FRONT, 1, mappings[0].front_tiles))
        for i in range(mappings[0].front_tiles):
            group_of[f"front[{i}]"], rel[f"front[{i}]"] = FRONT, (0, i)
    for li, (node, m) in enumerate(zip(layers, mappings, strict=True)):
        mine = _relative(li, m, device)
        shapes.append(Block(node.name, m.columns - m.front_columns, max(r for _, r in mine.values()) + 1))
        rel.update(mine)
        group_of.update(dict.fromkeys(mine, node.name))
    assert len({b.name for b in shapes}) == len(shapes), "group names repeat"
    return tuple(shapes), group_of, rel


def _staged(layers: Sequence[Node], mappings: Sequence[RecurrentMapping], device: Device,
            front: fr.SequenceFront | None) -> tuple[Placement, MappedGraph, Problem]:
    """The design lowered at ``mapped.place.staging`` of its :func:`groups`, and the problem
    read off that lowering."""
    shapes, group_of, _ = groups(layers, mappings, device)
    at = staging(shapes, device.generation.cascade_serpentine)
    mg = lower(layers, mappings, device, front, at)
    return at, mg, problem(mg, shapes, at, device, group_of=group_of)


def recurrent_problem(layers: Sequence[Node], mappings: Sequence[RecurrentMapping], device: Device,
                      front: fr.SequenceFront | None = None) -> Problem:
    """The recurrent mappings' placement problem (``mapped.place``): :func:`groups`, read off the
    design lowered unplaced (``mapped.place.staging``: the groups side by side); the edges are
    the links between groups (the front end's last convolution into layer 0's W x kernels, an
    AIE-aggregated or compact layer's output stream into the next; a hybrid layer's output reaches
    the next layer through its PL FSM, no link between the groups, so no edge)."""
    return _staged(layers, mappings, device, front)[2]


def place_recurrent(layers: Sequence[Node], mappings: Sequence[RecurrentMapping], device: Device,
                    front: fr.SequenceFront | None = None) -> Placement:
    """The one placer (``mapped/place.solve``) on :func:`recurrent_problem` with the
    ``greedy-right`` baseline (``METHOD``): the front end's column at column 0, each layer's
    rectangle right of the one before along row 0, the blocks the latency model counts switch
    hops on (``recurrent/model.py`` reads the plan's ``u_rows`` / ``u_columns`` / ``w_columns``,
    not tile positions, so branch and bound would move groups where the model does not look).
    The kernels are not location-constrained (``Kernel.pinned`` False): aiecompiler places them."""
    return solve(recurrent_problem(layers, mappings, device, front), METHOD)


def tiles(layers: Sequence[Node], mappings: Sequence[RecurrentMapping], device: Device,
          placement: Placement) -> dict[str, Cell]:
    """Each kernel's tile: its group's rectangle in ``placement`` plus its tile in the group."""
    _, group_of, rel = groups(layers, mappings, device)
    out = {}
    for var, (dc, dr) in rel.items():
        r = placement.rect(group_of[var])
        out[var] = (r.column + dc, r.row + dr)
    return out


# ----------------------------------------------------------------------------- costs


def _role(var: str, li: int, m: RecurrentMapping, inner: bool, front: bool) -> str | None:
    """The step-model stage (``model.mapped_costs``) that layer ``li``'s kernel or PLIO ``var``
    carries, None when ``var`` is not layer ``li``'s."""
    if var == f"x{li}":
        return "front0" if front else "x_in" if m.compact or m.grid else "w_mac"
    if front and var.startswith("front["):
        return f"front{var[6:-1]}"
    if var == "y_out":
        return "y_out"
    if var == f"c{li}":
        return "cell"
    if var == f"gh{li}":
        return "head_tile"
    if var.startswith((f"gw{li}[", f"gc{li}[", f"gp{li}[")):  # gp: a chain's partial-sum tiles (C > 1)
        return "w_partner" if var.startswith(f"gw{li}[") else "grid"
    if var.startswith(f"u{li}["):
        return "u_mac"
    if var.startswith(f"w{li}["):
        return "w_mac"
    if var == f"agg{li}":
        return "aggregate"
    if var == f"o{li}":  # the output kernel: the relay between layers, idle per step after the last (head_stage)
        return "relay" if inner else "output"
    if var == f"h{li}":
        return "h_in"
    if var.startswith(f"to_pl{li}["):
        return "to_pl"
    return None


def costed(mg: MappedGraph, mappings: Sequence[RecurrentMapping], device: Device) -> MappedGraph:
    """``mg`` with the step model's stages (``model.mapped_costs``, one set per layer, named
    ``l<i>.<stage>`` in a stack) attached to its kernels, PLIOs, links and PL kernels, for
    ``mapped.estimate.stage_graph``: one time step is one graph iteration.

    Row- and column-wise layers: the x PLIO and the W x kernels ``w_mac`` (or the Conv1d front
    end's kernels ``front<i>``, the x PLIO with the first), the W packet links into the merges
    ``w_route``, the U packet links ``route``, the U h kernels ``u_mac``, the aggregation
    ``aggregate`` (the AIE aggregator, or the PL FSM, whose to-PL PLIOs ``to_pl`` move nothing of
    their own: ``route`` / ``w_route`` are costed at the PLIO's rate); the h return ``h_in`` (the
    h PLIO, or the aggregator's broadcast links to the U kernels) is loop-carried (``Link.carried``,
    ``PLKernel.carried``): step t + 1's h_in waits for step t's aggregate, and step 0 has none (the
    U kernels start from h = 0 without reading).  So the W path and the U h path meet at the
    aggregation: the first step is ``max(W path, u_mac + route) + aggregate``.  An inner layer's
    output kernel carries its relay (``model.relay_stage``); the last layer's, and the output
    PLIO, move nothing per step (the head and its output words run once after the last step:
    ``model.head_stage``).  A stacked layer whose x comes by stream from the previous layer's
    output has that link carry its ``x_in`` (compact) or its x inside ``w_mac``.

    Compact and grid: the x PLIO ``x_in`` (behind a front end, the x PLIO with the first
    convolution ``front0``, the stream out of the last one ``x_in``), the compact tile ``cell``; the grid's W x partners
    ``w_partner``, its gate tiles ``grid`` (their h exchange through the merge stays inside the
    stage: each step's recurrence is the stage's own occupancy), its head tile nothing per step;
    with C > 1 tiles per chain the partial-sum tiles are in the ``grid`` stage too."""
    from .model import mapped_costs

    n = len(mappings)
    name = (lambda li, r: r) if n == 1 else (lambda li, r: r if r == "y_out" else f"l{li}.{r}")  # noqa: E731
    costs: dict[str, object] = {}
    owner: dict[str, tuple[int, str]] = {}  # kernel / PLIO -> (layer, role)
    for li, m in enumerate(mappings):
        front = li == 0 and bool(m.dims.front)
        c = mapped_costs(m, device, inner=li + 1 < n)
        costs.update({name(li, r): replace(x, name=name(li, r)) for r, x in c.items()})
        for v in [k.var for k in mg.kernels] + [p.var for p in mg.plios]:
            r = _role(v, li, m, li + 1 < n, front)
            if r is not None and v not in owner:
                owner[v] = (li, r)
    held = Counter(name(*owner[k.var]) for k in mg.kernels)  # a stage's tiles: the kernels carrying it
    costs.update({k: replace(x, tiles=held[k]) for k, x in costs.items() if k in held})
    layer_of = {k: owner[k][0] for k in owner}

    def cost(v: str):
        return costs[name(*owner[v])]

    def link_cost(ln: Link) -> Link:
        src, dst = ln.src.owner, ln.dst.owner
        if dst in layer_of and src in layer_of and layer_of[src] == layer_of[dst] - 1:  # a stream from the previous layer
            li = layer_of[dst]
            return replace(ln, cost=costs[name(li, "x_in")]) if mappings[li].compact else ln
        if src == last_front and owner.get(dst, (0, ""))[1] in ("cell", "w_partner"):  # the front end's steps into compact / grid
            return replace(ln, cost=costs[name(0, "x_in")])
        if ln.kind == "packet" and src in layer_of and src not in switches:  # a sender into its merge
            li, r = owner[src]
            return replace(ln, cost=costs[name(li, "route" if r == "u_mac" else "w_route")]) if r in ("u_mac", "w_mac") else ln
        if src in layer_of and owner[src][1] == "aggregate" and dst in layer_of and owner[dst][1] == "u_mac":
            return replace(ln, cost=costs[name(layer_of[src], "h_in")], carried=True)
        return ln

    switches = {sw.var for sw in mg.switches}
    last_front = f"front[{len(mappings[0].dims.front) - 1}]"
    kernels = tuple(replace(k, cost=cost(k.var)) for k in mg.kernels)
    plios = tuple(replace(p, cost=cost(p.var)) for p in mg.plios)
    pl = tuple(replace(k, cost=costs[name(int(k.name.rsplit("_l", 1)[1]), "aggregate")], carried=("h_out",))
               for k in mg.pl_kernels)
    return replace(mg, kernels=kernels, plios=plios, links=tuple(map(link_cost, mg.links)), pl_kernels=pl)


# ----------------------------------------------------------------------------- kernels


def _row_kernel(li: int, tag: str, i: int) -> tuple[str, tuple[str, ...]]:
    sp, up = ns(li), tag.upper()
    cfg = f"{sp}::{up}Cfg"
    w, b = f"{cfg}::ROWS * {cfg}::KP", f"{cfg}::ROWS"
    return f"RowKernel<{cfg}>", (
        f"std::vector<{cfg}::W>({sp}::{up}_W + {i} * {w}, {sp}::{up}_W + {i + 1} * {w})",
        f"std::vector<{cfg}::X>({sp}::{up}_B + {i} * {b}, {sp}::{up}_B + {i + 1} * {b})",
        f"{sp}::{up}_ROWS[{i}]")


def _chain_kernel(li: int, tag: str, i: int, j: int, cas: int) -> tuple[str, tuple[str, ...]]:
    sp, up = ns(li), tag.upper()
    cfg = f"{sp}::{up}Cfg"
    t = i * cas + j
    tw, tb = f"{cfg}::GROUPS * {cfg}::KC * {cfg}::LANES", f"{cfg}::GROUPS * {cfg}::LANES"
    cls = "ColOnly" if cas == 1 else "ColFirst" if j == 0 else "ColLast" if j + 1 == cas else "ColMid"
    return f"{cls}<{cfg}>", (
        f"std::vector<{cfg}::W>({sp}::{up}_W + {t} * {tw}, {sp}::{up}_W + {t + 1} * {tw})",
        f"std::vector<{cfg}::X>({sp}::{up}_B + {i} * {tb}, {sp}::{up}_B + {i + 1} * {tb})",
        f"{sp}::{up}_ROWS[{i}]", f"{sp}::{up}_C0[{j}]", f"{sp}::{up}_KC[{j}]")


def _compact_args(li: int) -> tuple[str, ...]:
    sp = ns(li)
    return tuple(f"std::vector<{sp}::{c}::{t}>({sp}::{a}, {sp}::{a} + {n})" for c, t, a, n in (
        ("CUCfg", "W", "CU_W", f"{sp}::CUCfg::K * {sp}::CUCfg::GP"), ("CUCfg", "X", "CU_B", f"{sp}::CUCfg::GP"),
        ("CWCfg", "W", "CW_W", f"{sp}::CWCfg::K * {sp}::CWCfg::GP"), ("CWCfg", "X", "CW_B", f"{sp}::CWCfg::GP")))


def grid_part(chain: int, block: int, chain_len: int) -> int:
    """The index in ``gp<l>`` of chain ``chain``'s partial-sum tile of column block ``block``."""
    return chain * (chain_len - 1) + block


def _grid_args(li: int, tag: str, cfg: str, r: int, tile: int = 0, tiles: int = 1, bias: bool = True) -> tuple[str, ...]:
    """Chain ``r``'s weight columns of its tile ``tile`` (of ``tiles``) and, with ``bias``, the chain's
    bias (emit._grid_weights: [chain][tile][k][rows], [chain][rows])."""
    sp = ns(li)
    c = f"{sp}::{cfg}"
    w, b, i = f"{c}::K * {c}::GP", f"{c}::GP", r * tiles + tile
    return (f"std::vector<{c}::W>({sp}::{tag}_W + {i} * {w}, {sp}::{tag}_W + {i + 1} * {w})",
            *([f"std::vector<{c}::X>({sp}::{tag}_B + {r} * {b}, {sp}::{tag}_B + {r + 1} * {b})"] if bias else []))


def _front_args(i: int) -> tuple[str, ...]:
    f = f"rnn_front::F{i}"
    return (f"std::vector<{f}::W>(rnn_front::F{i}_W, rnn_front::F{i}_W + {f}::COUTL * {f}::K * {f}::CIN)",
            f"std::vector<int32_t>(rnn_front::F{i}_B, rnn_front::F{i}_B + {f}::COUT)")


def lower(layers: Sequence[Node], mappings: Sequence[RecurrentMapping], device: Device,
          front: fr.SequenceFront | None = None, placement: Placement | None = None) -> MappedGraph:
    """The mapped graph of the recurrent ``layers`` (layer l + 1 reads layer l's h) with their
    ``mappings`` and the convolution ``front`` end before the first, each kernel on its tile in
    ``placement`` (by default :func:`place_recurrent`'s).  Kernels in the order the graph creates
    them (per layer: the aggregator, the front end, the U h kernels, the W x kernels, or the
    compact tile), links in the order it connects them."""
    layers, mappings = list(layers), list(mappings)
    if placement is None:  # place_recurrent, keeping the staged lowering
        staged, mg, prob = _staged(layers, mappings, device, front)
        placement = solve(prob, METHOD)
        if [(r.column, r.row) for r in placement.rects] == [(r.column, r.row) for r in staged.rects]:
            return mg  # placed where staged (side by side along row 0): the same tiles, the same graph
    at = tiles(layers, mappings, device, placement)
    kernels: list[Kernel] = []
    plios: list[Plio] = []
    links: list[Link] = []
    switches: list[PacketSwitch] = []
    pl: list[PLKernel] = []

    def kernel(var: str, node: str, cls: str, args: tuple[str, ...], ins: int, outs: int) -> None:
        kernels.append(Kernel(var, c_ident(node), cls, args, SOURCE, at[var], (None,) * ins, (None,) * outs,
                              ratio=1.0, pinned=False))

    def stream(src: Port, var: str, index: int = 0, kind: str = "stream") -> None:
        links.append(Link(kind, src, Port(var, "in", index)))

    def front_end(li: int, x_src: Port) -> Port:
        """Layer 0's input steps go through the convolutions first: the last one's output port."""
        if li == 0 and front is not None:
            for i, c in enumerate(front.convs):
                kernel(f"front[{i}]", c.name, f"SeqConv<rnn_front::F{i}>", _front_args(i), 1, 1)
                stream(x_src, f"front[{i}]")
                x_src = Port(f"front[{i}]", "out", 0)
        return x_src

    n = len(mappings)
    for li, (node, m) in enumerate(zip(layers, mappings, strict=True)):
        lay = layout(m, device)
        hybrid = m.aggregation == "hybrid"
        bits = m.plio_bits
        if _x_from_plio(li, mappings):
            plios.append(Plio(f"x{li}", "in", bits, f"data/l{li}_x.txt", name=f"rnn_l{li}_x"))
            x_src = Port(f"x{li}", "out", 0)
        else:
            x_src = y_port(li - 1, mappings, device)
        if m.compact or m.grid:  # a front end before them is modelled, not generated (plan._tile_limits)
            x_src = front_end(li, x_src)
        if m.compact:
            kernel(f"c{li}", node.name, f"CompactCell<{ns(li)}::CCfg>", _compact_args(li), 1, 1)
            stream(x_src, f"c{li}")
            continue
        if m.grid:  # rnn_grid.h: partners (x broadcast), partial-sum tiles and gate tiles (cascade in, h packets in), head
            sp, r_n, c_n = ns(li), m.chains, m.chain_len
            blocks = block_merges(m.dims.n_h, r_n, c_n)  # per-block merges + the head's (grid.py), or None: one merge
            merges = [range(r_n)] if blocks is None else [*blocks, range(r_n)]
            for i, mg in enumerate(merges):
                switches.append(PacketSwitch(f"m{li}_{i}", "merge", tuple(packet_id(r) for r in mg)))  # a chain: one ID
            kernel(f"gh{li}", node.name, f"GridHead<{sp}::GCfg>", (), 1, 1)
            for r in range(r_n):
                kernel(f"gw{li}[{r}]", node.name, f"GridInput<{sp}::GCfg>", _grid_args(li, "GW", "GWCfg", r), 1, 1)
                for j in range(c_n - 1):
                    kernel(f"gp{li}[{grid_part(r, j, c_n)}]", node.name, f"GridPart<{sp}::GCfg>",
                           (*_grid_args(li, "GU", "GUCfg", r, j, c_n, bias=False), str(j)), 2, 1)
                kernel(f"gc{li}[{r}]", node.name, f"GridCell<{sp}::GCfg>",
                       (*_grid_args(li, "GU", "GUCfg", r, c_n - 1, c_n), str(r), str(c_n - 1)), 2, 1)
            for r in range(r_n):
                stream(x_src, f"gw{li}[{r}]")
                chain = [f"gw{li}[{r}]", *(f"gp{li}[{grid_part(r, j, c_n)}]" for j in range(c_n - 1)), f"gc{li}[{r}]"]
                for a, b in zip(chain[:-1], chain[1:], strict=True):
                    links.append(Link("cascade", Port(a, "out", 0), Port(b, "in", 0)))
                for i, mg in enumerate(merges):  # the gate tile's packets into every merge that carries its chain
                    if r in mg:
                        stream(Port(f"gc{li}[{r}]", "out", 0), f"m{li}_{i}", mg.index(r), "packet")
            for j in range(c_n):  # the R tiles of column block j (the last: the gate tiles) read its merge
                for r in range(r_n):
                    t = f"gp{li}[{grid_part(r, j, c_n)}]" if j < c_n - 1 else f"gc{li}[{r}]"
                    stream(Port(f"m{li}_{0 if blocks is None else j}", "out", 0), t, 1, "packet")
            stream(Port(f"m{li}_{len(merges) - 1}", "out", 0), f"gh{li}", 0, "packet")
            continue
        if hybrid:
            plios.append(Plio(f"h{li}", "in", bits, f"data/l{li}_h.txt", name=f"rnn_l{li}_h"))
            h_src = Port(f"h{li}", "out", 0)
        else:
            one = output_kernel(m.aggregation, device)  # h only, broadcast to the U kernels and o<l>
            cls = f"Aggregator{len(lay.merges)}{'H' if one else ''}<{ns(li)}::AggCfg>"
            kernel(f"agg{li}", node.name, cls, (), len(lay.merges), 1 if one else 2)
            h_src = Port(f"agg{li}", "out", 0)
            if one:
                kernel(f"o{li}", node.name, f"AggOutput<{ns(li)}::AggCfg>", (), 1, 1)
                stream(h_src, f"o{li}")
        x_src = front_end(li, x_src)
        for tag, nsrc, src in (("u", len(lay.u), h_src), ("w", len(lay.w), x_src)):
            column, cas = _col(lay, tag)
            for i in range(nsrc):
                for j in range(cas if column else 1):
                    t = i * cas + j if column else i
                    var = f"{tag}{li}[{t}]"
                    cls, args = _chain_kernel(li, tag, i, j, cas) if column else _row_kernel(li, tag, i)
                    kernel(var, node.name, cls, args, 2 if column and j > 0 else 1, 1)
                    stream(src, var)
                    if column and j > 0:
                        links.append(Link("cascade", Port(f"{tag}{li}[{t - 1}]", "out", 0), Port(var, "in", 1)))
        for i, mg in enumerate(lay.merges):
            sw = f"m{li}_{i}"
            switches.append(PacketSwitch(sw, "merge", tuple(packet_id(j) for j in range(len(mg)))))
            for j, s in enumerate(mg):
                stream(Port(sender(li, lay, s), "out", 0), sw, j, "packet")
            if hybrid:
                plios.append(Plio(f"to_pl{li}[{i}]", "out", bits, f"data/l{li}_m{i}.txt", name=f"rnn_l{li}_m{i}"))
                stream(Port(sw, "out", 0), f"to_pl{li}[{i}]", 0, "packet")
            else:
                stream(Port(sw, "out", 0), f"agg{li}", i, "packet")
        if hybrid:
            pl.append(PLKernel(
                f"rnn_fsm_l{li}", FSM_SOURCE, tuple((f"merged_{i}", f"to_pl{li}[{i}]") for i in range(len(lay.merges))),
                (("h_out", f"h{li}"), ("y_out", f"x{li + 1}" if li + 1 < n else "")),
                PL_MERGE_II, pl_fsm_depth(m.dims.cell, m.dims.pair), fsm_items(m), m.dims.seq_len))
    if mappings[-1].aggregation != "hybrid":
        plios.append(Plio("y_out", "out", mappings[-1].plio_bits, "data/y.txt", name="rnn_y"))
        stream(y_port(n - 1, mappings, device), "y_out")
    return MappedGraph(tuple(kernels), (), tuple(plios), tuple(links), switches=tuple(switches), pl_kernels=tuple(pl))
