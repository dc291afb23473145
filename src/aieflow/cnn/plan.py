"""CNN mappings: how each stage's kernels are cut, what they hold, which tiles they use.

Two mapping styles, one plan type:

* ``stream`` (aieflow's own design, "ours"): every stage runs on the array.  A convolution is a
  ``cas_num x cas_len`` rectangle of tiles: cascade position j reads the whole input image of input
  channel group j (the output buffer of the producer's row j, broadcast to every row), gathers its
  im2col patches in tile memory (sliding window over the buffer: no PL im2col), multiplies them
  with its resident weight block (``aie::mmul``) and passes partial sums east on the cascade, in
  increasing input channel, which is the emulator's accumulation order; the last tile of a row
  applies the epilogue (SRS, ReLU / tanh table / PReLU, and a following pixel shuffle as a store
  permutation) and writes output channel group r.  Pooling runs one tile per channel group.  Frames
  stream through double-buffered windows, so stages overlap across frames; the design is replicated
  to fill the array.  The group counts are chosen by the performance model (``search.best_stream``).
* ``thesis`` (the ESPCN thesis's design, ``examples/espcn/thesis.yaml``): each convolution is an
  im2col matrix multiply cut into per-kernel output tiles (published tile shapes and kernel
  counts), K in chunks with partial sums, single-buffered windows over 128-bit PLIOs, and PL HLS
  kernels between layers for untile -> activation -> im2col -> tile and for the pixel shuffle.

Per-layer directives (``layers.<name>.mapping``) and the design-wide ``cnn`` settings are parsed in
:mod:`aieflow.cnn.directives`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..devices import Device
from ..errors import PlanError
from ..numerics.types import FloatType, NumericType
from .stages import Stage

STACK_BYTES = 1024  # stack + heap reserved per kernel (UG1079 default sizes are of this order)


def elem_bytes(t: NumericType) -> int:
    if isinstance(t, FloatType):
        return 2 if t.name == "bf16" else 4
    return max(1, t.container_bits // 8)


def kind(t: NumericType) -> str:
    if isinstance(t, FloatType):
        return t.name
    return "i8" if t.container_bits <= 8 else "i16" if t.container_bits <= 16 else "i32"


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass(frozen=True)
class TileUse:
    """Memory of one kernel: its own bytes and what it borrows from a neighbour (AIE1 tiles address
    the memories of their north / south / east / west neighbours; the thesis relies on this)."""

    bytes: int
    limit: int

    @property
    def borrowed(self) -> int:
        return max(0, self.bytes - self.limit)


@dataclass(frozen=True)
class StreamLayer:
    """One stage of the ``stream`` mapping: a cas_num x cas_len rectangle (pool: cas_len = 1)."""

    stage: str
    kind: str
    cas_len: int  # input channel groups (cascade length)
    cas_num: int  # output channel groups (rows)
    in_group: int  # input channels per group
    out_group: int  # output channels per group (before a fused shuffle)
    mmul: tuple[int, int, int]  # (pixels, k, channels) per aie::mmul block
    k_tile: int  # patch elements per cascade position (in_group * kh * kw)
    memory: TileUse
    first_col: int = 0  # placement: first column of the rectangle inside a replica
    skip: str = ""  # a fused residual add: the stage whose output windows the last tiles also read
    skip_bytes: int = 0  # that skip window, per row (double-buffered in the last tile: twice this)
    # a folded channel concat: (producer stage index or -1 for the input, producer row) per cascade position
    sources: tuple[tuple[int, int], ...] = ()

    @property
    def tiles(self) -> int:
        return self.cas_len * self.cas_num

    def to_json(self) -> dict:
        out = {"stage": self.stage, "kind": self.kind, "cas_len": self.cas_len, "cas_num": self.cas_num,
               "in_group": self.in_group, "out_group": self.out_group, "mmul": list(self.mmul),
               "k_tile": self.k_tile, "tile_bytes": self.memory.bytes, "borrowed_bytes": self.memory.borrowed,
               "first_col": self.first_col}
        if self.skip:  # only residual stages carry it, so earlier designs' plans compare equal on load
            out.update(skip=self.skip, skip_bytes=self.skip_bytes)
        if self.sources:  # only concat readers carry it
            out["sources"] = [list(v) for v in self.sources]
        return out


@dataclass(frozen=True)
class ThesisLayer:
    """One convolution of the ``thesis`` mapping: an im2col product M x K x N cut into kernels of
    tile_m x tile_k x tile_n, K in ``k_chunks`` chunks (partial sums in a local buffer)."""

    stage: str
    m: int  # output channels
    k: int  # patch elements, zero-padded to k_pad
    k_pad: int
    n: int  # output pixels
    tile_m: int
    tile_n: int
    k_chunks: int
    mmul: tuple[int, int, int]
    plio_in: int  # input PLIOs (each broadcast to the kernels of its N block)
    plio_out: int
    memory: TileUse
    pl_kernel: str  # the PL kernel after this layer ("activation", "pixelshuffle", "s2mm")
    pl_clock_hz: float

    @property
    def grid(self) -> tuple[int, int]:
        return (self.m // self.tile_m, self.n // self.tile_n)

    @property
    def kernels(self) -> int:
        return self.grid[0] * self.grid[1]

    def to_json(self) -> dict:
        return {"stage": self.stage, "matmul": [self.m, self.k_pad, self.n], "k_unpadded": self.k,
                "tile": [self.tile_m, self.k_pad, self.tile_n], "kernels": self.kernels, "grid": list(self.grid),
                "k_chunks": self.k_chunks, "mmul": list(self.mmul), "plio_in": self.plio_in,
                "plio_out": self.plio_out, "tile_bytes": self.memory.bytes, "borrowed_bytes": self.memory.borrowed,
                "pl_kernel": self.pl_kernel, "pl_clock_mhz": self.pl_clock_hz / 1e6}


@dataclass(frozen=True)
class CnnPlan:
    mapping: str  # "stream" | "rows" | "thesis"
    device: Device
    stages: tuple[Stage, ...] = field(repr=False)
    layers: tuple[StreamLayer, ...] | tuple[ThesisLayer, ...]
    replicas: int = 1
    mover_clock_hz: float = 312.5e6  # mm2s / s2mm and PLIO clock
    # ``cnn.mapping: auto``: why this mapping (the other one's figures, or why it did not fit);
    # "" where the config named the mapping (directives.auto_design)
    choice: str = ""

    @property
    def tiles_per_replica(self) -> int:
        if self.mapping == "stream":
            return sum(lay.tiles for lay in self.layers)
        return sum(lay.kernels for lay in self.layers)

    @property
    def tiles(self) -> int:
        return self.tiles_per_replica * self.replicas

    @property
    def borrowed_bytes(self) -> int:
        per = 0
        for lay in self.layers:
            n = lay.tiles if isinstance(lay, StreamLayer) else lay.kernels
            per += n * lay.memory.borrowed
        return per * self.replicas

    @property
    def plio_in(self) -> int:
        if self.mapping == "stream":
            return self.replicas
        return sum(lay.plio_in for lay in self.layers)

    @property
    def plio_out(self) -> int:
        if self.mapping == "stream":
            return self.layers[-1].cas_num * self.replicas
        return sum(lay.plio_out for lay in self.layers)

    def to_json(self) -> dict:
        return {"mapping": self.mapping, "replicas": self.replicas, "tiles": self.tiles,
                "tiles_per_replica": self.tiles_per_replica, "borrowed_bytes": self.borrowed_bytes,
                "plio_in": self.plio_in, "plio_out": self.plio_out,
                **({"mapping_choice": self.choice} if self.choice else {}),
                "layers": [lay.to_json() for lay in self.layers]}


# ------------------------------------------------------------------------------- stream mapping


def mmul_shape(device: Device, stage: Stage) -> tuple[int, int, int]:
    pair = (kind(stage.in_type), kind(stage.core.weight if stage.core else stage.in_type))
    shapes = device.generation.mmul_shapes
    if pair not in shapes:
        raise PlanError(f"{pair[0]} x {pair[1]} has no aie::mmul on {device.generation.name}", layer=stage.name,
                        hint="use fp32 (AIE1), bf16 (AIE-ML / AIE-MLv2), int8 or int16")
    return tuple(shapes[pair])


def table_bytes(stage: Stage, og: int) -> int:
    """The epilogue's table in tile memory: fp32 tanh LUT entries, or og per-channel code tables."""
    if stage.table is None:
        return 0
    if stage.is_float:
        return stage.table.size * 4
    return og * stage.table.shape[1] * elem_bytes(stage.conv_type)


def post_bytes(stage: Stage, og: int) -> int:
    """A post layer's tile memory (last tile of a row): the epilogue's codes before it, its table,
    and a softmax's int32 scratch row."""
    p = stage.post
    if p is None:
        return 0
    oh, ow = stage.out_hw
    scratch = og * 4 if p.op == "softmax" else 0
    return og * oh * ow * elem_bytes(p.in_type) + p.table.size * 4 + scratch


def stream_layer(device: Device, stage: Stage, in_groups: int, in_group: int, out_groups: int) -> StreamLayer:
    """Size one stage of the stream mapping; raises a PlanError naming the stage when it cannot fit."""
    limit = device.generation.data_memory_bytes
    eb_in, eb_out = elem_bytes(stage.in_type), elem_bytes(stage.out_type)
    _, h, w = stage.geometry.in_shape
    oh, ow = stage.out_hw
    if stage.kind == "pool":
        mem = 2 * in_group * h * w * eb_in + 2 * in_group * oh * ow * eb_out + STACK_BYTES
        return StreamLayer(stage.name, "pool", 1, in_groups, in_group, in_group, (1, 1, 1), 0, TileUse(mem, limit))
    o = stage.out_channels
    if o % out_groups:
        raise PlanError(f"{o} output channels do not split into {out_groups} equal groups", layer=stage.name)
    if stage.post is not None and stage.post.op == "softmax" and out_groups != 1:
        raise PlanError(f"the softmax '{stage.post.name}' after '{stage.name}' needs all its {o} outputs in one tile; "
                        f"{out_groups} output groups split them", layer=stage.name,
                        hint=f"remove layers.{stage.name}.mapping.groups (a softmax head takes 1)")
    og = o // out_groups
    r2 = (stage.shuffle or 1) ** 2
    if og % r2:
        raise PlanError(f"a group of {og} channels does not hold whole pixel-shuffle blocks of {r2}", layer=stage.name)
    mm = mmul_shape(device, stage)
    kh, kw = stage.geometry.kernel
    kt = in_group * kh * kw
    kt_pad, og_pad = round_up(kt, mm[1]), round_up(og, mm[2])
    eb_w = elem_bytes(stage.core.weight)
    res = stage.residual
    skip_bytes = og * oh * ow * elem_bytes(res.skip_type) if res else 0
    mem = (2 * in_group * h * w * eb_in  # input window (double buffered)
           + og_pad * kt_pad * eb_w  # resident weights
           + og_pad * mm[0] * 4  # bias block (repeated per pixel row, as the Dense kernel stores it)
           + mm[0] * kt_pad * eb_in  # gathered patch rows of one pixel block
           + 2 * og * oh * ow * stage.up[0] * stage.up[1] * eb_out  # output window (last tile of a row; upsampled)
           + 2 * skip_bytes  # a fused residual add's skip window (last tile of a row, double buffered)
           + (og * oh * ow * eb_out if stage.up_mode != "nearest" else 0)  # bilinear: the window before upsampling
           + table_bytes(stage, og)
           + post_bytes(stage, og)
           + STACK_BYTES)
    return StreamLayer(stage.name, "conv", in_groups, out_groups, in_group, og, mm, kt, TileUse(mem, limit),
                       skip=(res.skip_name if res else ""), skip_bytes=skip_bytes)


def skip_groups(stages: tuple[Stage, ...], k: int, groups: dict[str, int]) -> int:
    """Output channel groups of stage ``k`` (-1: the network input, one window) under ``groups``: a
    pooling keeps its input's groups."""
    while k >= 0 and stages[k].kind == "pool":
        k -= 1
    return 1 if k < 0 else groups.get(stages[k].name, 1)


def residual_group_error(stage: Stage, got: int, want: int) -> PlanError:
    r = stage.residual
    src = f"'{r.skip_name}'" if r.skip_from >= 0 else "the network input"
    return PlanError(f"the residual add is fused into '{stage.name}', whose {got} output channel group(s) must "
                     f"each read the matching group of the skip from {src}, which has {want}", layer=r.name,
                     hint=f"give '{stage.name}' and the skip's producer the same layers.<name>.mapping.groups "
                     "(or leave them out)")


def concat_sources(stages: tuple[Stage, ...], stage: Stage, groups: dict[str, int]) -> tuple[tuple[int, int], ...]:
    """(producer stage, producer row) for each cascade position of a convolution that reads a
    channel concat: the parts in channel order, each part's output groups in order.  Every window
    must hold the same number of channels (one kernel configuration for the cascade)."""
    c = stage.concat
    sizes = [(name, ch, skip_groups(stages, k, groups)) for k, name, ch in c.parts]
    if len({ch // g for _, ch, g in sizes}) != 1 or any(ch % g for _, ch, g in sizes):
        what = ", ".join(f"{ch} channels of " + (f"'{n}' in {g} group(s)" if k >= 0 else "the network input (1 window)")
                         for (k, _, _), (n, ch, g) in zip(c.parts, sizes, strict=True))
        raise PlanError(f"'{stage.name}' reads the concat '{c.name}' of {what}: its cascade reads them window by "
                        "window, and the windows hold different channel counts", layer=c.name,
                        hint="give the concatenated layers output groups (layers.<name>.mapping.groups) of one "
                        "channel count each")
    return tuple((k, r) for (k, _, _), (_, _, g) in zip(c.parts, sizes, strict=True) for r in range(g))


def stream_plan(device: Device, stages: tuple[Stage, ...], groups: dict[str, int], replicas: int) -> CnnPlan:
    """The stream mapping with ``groups[stage] = cas_num`` for each convolution."""
    layers: list[StreamLayer] = []
    in_groups, in_group = 1, stages[0].geometry.in_shape[0]
    col = 0
    for s in stages:
        out_groups = in_groups if s.kind == "pool" else groups.get(s.name, 1)
        if s.residual is not None:
            want = skip_groups(stages, s.residual.skip_from, groups)
            if want != out_groups:
                raise residual_group_error(s, out_groups, want)
        sources: tuple[tuple[int, int], ...] = ()
        if s.concat is not None:
            sources = concat_sources(stages, s, groups)
            in_groups, in_group = len(sources), s.geometry.in_shape[0] // len(sources)
        lay = stream_layer(device, s, in_groups, in_group, out_groups)
        lay = StreamLayer(**{**lay.__dict__, "first_col": col, "sources": sources})
        col += lay.cas_len
        layers.append(lay)
        in_groups, in_group = lay.cas_num, lay.out_group // (s.shuffle or 1) ** 2
    return CnnPlan("stream", device, stages, tuple(layers), replicas)


def check_fits(plan: CnnPlan) -> None:
    for lay in plan.layers:
        if isinstance(lay, StreamLayer) and lay.memory.borrowed:
            raise PlanError(f"a tile needs {lay.memory.bytes:,} B of data memory, more than the "
                            f"{lay.memory.limit:,} B of one tile", layer=lay.stage,
                            hint="give the layer more output groups (layers.<name>.mapping.groups), or use int8")
        if lay.cas_num > plan.device.rows:
            raise PlanError(f"{lay.cas_num} cascade rows do not fit the array's {plan.device.rows} rows", layer=lay.stage)
    width = sum(lay.cas_len for lay in plan.layers)
    if width > plan.device.columns:
        raise PlanError(f"the design is {width} columns wide; the array has {plan.device.columns}")


def max_replicas(plan: CnnPlan) -> int:
    """Copies side by side: array columns, and input / output PLIOs."""
    d = plan.device
    width = sum(lay.cas_len for lay in plan.layers)
    height = max(lay.cas_num for lay in plan.layers)
    per_col = max(1, d.rows // height)
    by_area = (d.columns // width) * per_col
    by_plio_in = d.plio_columns * d.plio_in_per_column
    by_plio_out = (d.plio_columns * d.plio_out_per_column) // max(1, plan.layers[-1].cas_num)
    return max(1, min(by_area, by_plio_in, by_plio_out))
