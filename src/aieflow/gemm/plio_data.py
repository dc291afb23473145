"""The simulators' PLIO input files of a GEMM project (``data/ar<g>_<s>.txt``, ``data/br<j>.txt``):
what the PL mover streams into each PLIO during the graph's first iteration (L4 step 0 of the
first block: ``ic = jc = pc = 0``), so ``make x86sim`` / ``aiesim`` (graph.cpp runs
``AIEFLOW_ITERATIONS``, 1 by default) have input.  Written in numpy from the packing and
streaming order of ``templates/gemm/gemm_pl.h`` (``pack_a`` / ``pack_b`` / ``send_ar`` /
``send_br``); the AIE-ML memory-tile design's ``a<g>`` / ``b<b>`` PLIOs (one graph iteration per
block) from ``templates/gemm/ml_mover.cpp.j2``'s ``send_ac`` / ``send_lane``.  A GMIO design's
``data/br<j>.txt`` is the panel the GMIO DMA reads from DDR (graph.cpp's simulation main feeds it
with ``gm2aie_nb``).  ``golden_cr_files``: the Cr each tile's output PLIO carries in that iteration,
for every layout and element type.  The ports, their data files and the tiles each feeds are the
design's mapped graph's (``gemm/lower.py``, read through ``emit.project_ports``)."""

from __future__ import annotations

import numpy as np

from .plan import GemmPlan


def _ports(plan: GemmPlan):
    """The design's ports as its mapped graph gives them (``emit.project_ports`` of ``lower.lower``)."""
    from .emit import project_ports
    from .lower import lower

    return project_ports(plan, lower(plan))


def _text(values: np.ndarray, per_line: int, is_float: bool) -> str:
    vals = [f"{float(v):.9g}" for v in values] if is_float else [str(int(v)) for v in values]
    return "".join(" ".join(vals[i:i + per_line]) + "\n" for i in range(0, len(vals), per_line))


def plio_files(plan: GemmPlan, a: np.ndarray, b: np.ndarray) -> dict[str, str]:
    """``{data/<port>.txt: text}`` for every Ar and Br port (PLIO, or GMIO: the same panel, read by
    graph.cpp's simulation main); ``a``: (m, k), ``b``: (k, n).
    The memory-tile design: its a<g> / b<b> PLIOs (:func:`memtile_plio_files`)."""
    if plan.memtile:
        return memtile_plio_files(plan, a, b)
    c, blk = plan.config, plan.blocks
    ms, ks, ns = plan.dtype.mmul
    mr, nr, mc, nc, kc = blk.mr, blk.nr, blk.mc, blk.nc, blk.kc
    rb, cb = mr // ms, nr // ns
    rounds = mc // c.tiles_i // mr
    per = rb // c.ar_streams
    lanes = 16 // plan.dtype.bytes  # elements per 128-bit PLIO word (gemm_cfg::A_PER_WORD)
    fp = plan.dtype.is_float
    ac = np.zeros((mc, kc), dtype=a.dtype)  # pack_a of block (ic, pc) = (0, 0), zero-padded
    ac[:min(a.shape[0], mc), :min(a.shape[1], kc)] = a[:mc, :kc]  # a's own m (a Dense layer's samples)
    bc = np.zeros((kc, nc), dtype=b.dtype)  # pack_b of block (jc, pc) = (0, 0)
    bc[:min(b.shape[0], kc), :min(b.shape[1], nc)] = b[:kc, :nc]
    ports = _ports(plan)
    files = {}
    for p in ports.ar:  # send_ar of the port's group and stream
        g, s = p.group, p.stream
        parts = []
        for rnd in range(rounds):  # send_ar: micro-panel q, k step p, the stream's row blocks, (i, kk)
            q = g * rounds + rnd
            panel = ac[q * mr:(q + 1) * mr].reshape(rb, ms, kc // ks, ks).transpose(2, 0, 1, 3)
            parts.append(panel[:, s * per:(s + 1) * per].ravel())
        files[p.file] = _text(np.concatenate(parts), lanes, fp)
    for p in ports.br + ports.gbr:  # send_br of panel j: (k step p, column block cb, kk, jj); zeros past the panels
        # (GMIO Br: the same panel as gemm_pack_b_ddr lays it out in DDR, fed by graph.cpp's simulation main)
        j = p.lane
        if j < nc // nr:
            win = bc[:, j * nr:(j + 1) * nr].reshape(kc // ks, ks, cb, ns).transpose(0, 2, 1, 3).ravel()
        else:
            win = np.zeros(kc * nr, dtype=b.dtype)
        files[p.file] = _text(win, lanes, fp)
    return files


def memtile_plio_files(plan: GemmPlan, a: np.ndarray, b: np.ndarray) -> dict[str, str]:
    """The memory-tile design's first graph iteration (block ic = jc = pc = 0), in ml_mover.cpp's
    send order: ``data/a<g>.txt`` group g's Ac share (rows g MC_TILE .. + MC_TILE, columns 0 .. KC,
    row-major), ``data/b<b>.txt`` for each L4 lane j the Bc memory tile b holds, for every L4 step
    the lane's kc x nr Br panel row-major (panel = step TILES_J + j; zeros past the block's last
    panel and past A / B's edges)."""
    c, blk = plan.config, plan.blocks
    mc_tile, kc, nr, nc = blk.mc // c.tiles_i, blk.kc, blk.nr, blk.nc
    lanes = 16 // plan.dtype.bytes
    fp = plan.dtype.is_float
    ac = np.zeros((blk.mc, kc), dtype=a.dtype)
    ac[:min(a.shape[0], blk.mc), :min(a.shape[1], kc)] = a[:blk.mc, :kc]
    bc = np.zeros((kc, nc), dtype=b.dtype)
    bc[:min(b.shape[0], kc), :min(b.shape[1], nc)] = b[:kc, :nc]
    panels, steps = nc // nr, -(-(nc // nr) // c.tiles_j)
    ports = _ports(plan)
    files = {p.file: _text(ac[p.group * mc_tile:(p.group + 1) * mc_tile].ravel(), lanes, fp) for p in ports.ar}
    for p in ports.br:
        parts = [bc[:, (s * c.tiles_j + j) * nr:(s * c.tiles_j + j + 1) * nr] if s * c.tiles_j + j < panels
                 else np.zeros((kc, nr), dtype=b.dtype) for j in p.lanes for s in range(steps)]
        files[p.file] = _text(np.concatenate([q.ravel() for q in parts]), lanes, fp)
    return files


def golden_cr_files(plan: GemmPlan, a: np.ndarray, b: np.ndarray) -> dict[str, str]:
    """``{data/golden_cr<t>.txt: text}``: what tile t's Cr PLIO carries in the graph's first
    iteration (the one the input files above hold), for ``make x86sim`` / ``aiesim`` to compare.
    The first iteration is L4 step 0 of block 0 (``ic = jc = pc = 0``): tile t = g TILES_J + j
    takes Br panel j; the memory-tile design's is the whole block 0: for each L4 step s, panel
    s TILES_J + j (zero past the block's last panel).  In gemm_tile.h's order: per step and
    micro-kernel round, per (row block, column block) the MS x NS block of Cr row-major, an int64
    design's as its hi = floor(c / 2^16) block then its lo = c - hi 2^16 block.  Cr = the round's MR
    rows of Ac times the panel (the first KC of k): exact integer sums; fp32: each lane from +0.0,
    float32(a b) added for k in order (one rounding per product and per addition, the order
    ``emulate.gemm`` gives each k block).  The GMIO design's Br panels are the ``data/br<j>.txt``
    that graph.cpp's simulation main feeds through GMIO."""
    c, blk = plan.config, plan.blocks
    ms, _, ns = plan.dtype.mmul
    mr, nr, mc, nc, kc = blk.mr, blk.nr, blk.mc, blk.nc, blk.kc
    mc_tile = mc // c.tiles_i
    rounds = mc_tile // mr
    steps = -(-(nc // nr) // c.tiles_j) if plan.memtile else 1  # L4 steps in the first graph iteration
    fp = plan.dtype.is_float
    dt = np.float32 if fp else np.int64
    ac = np.zeros((mc, kc), dtype=dt)
    ac[:min(a.shape[0], mc), :min(a.shape[1], kc)] = a[:mc, :kc]
    bc = np.zeros((kc, max(nc, steps * c.tiles_j * nr)), dtype=dt)  # zero panels past the block's last
    bc[:min(b.shape[0], kc), :min(b.shape[1], nc)] = b[:kc, :nc]

    def micro_kernel(ar: np.ndarray, br: np.ndarray) -> np.ndarray:
        if not fp:
            return ar @ br
        acc = np.zeros((mr, nr), dtype=np.float32)
        for p in range(kc):
            acc += ar[:, p:p + 1] * br[p:p + 1, :]  # float32 product, then float32 sum
        return acc

    files = {}
    for port in _ports(plan).cr:  # tile t = g TILES_J + j, the Cr port it writes
        g, j = port.group, port.lane
        out = []
        for s in range(steps):
            q = s * c.tiles_j + j  # the tile's Br panel in this step
            for rnd in range(rounds):
                row = g * mc_tile + rnd * mr
                cr = micro_kernel(ac[row:row + mr], bc[:, q * nr:(q + 1) * nr])
                for r in range(mr // ms):
                    for cb in range(nr // ns):
                        block = cr[r * ms:(r + 1) * ms, cb * ns:(cb + 1) * ns].ravel()
                        if plan.output.wide:
                            hi = block >> 16  # floor
                            out += [hi, block - (hi << 16)]
                        else:
                            out.append(block)
        files[f"data/golden_{port.var}.txt"] = _text(np.concatenate(out), 4, fp)
    return files
