"""N-dimensional memory-tile access patterns (``adf::tiling_parameters``, UG1079 / UG1603).

The chain's links (``passes/transport.Tiling``) need one traversal over a 2-D buffer.  A DAG's
links also read a tensor transposed (Mixer token mixing), which needs a 3-D view of the buffer
``[features, rows per sample, samples]`` and up to three traversal loops.  Semantics, as the
x86 shim implements them (``aieflow_shim/graph_exec.hpp``): the elements inside a tile are
visited dimension 0 first; ``traversal[0]`` is the innermost loop over tiles; coordinates at or
beyond ``boundary`` (reads) are zero padding.

:meth:`NdTiling.addresses` is this package's own numpy walk of that definition (independent of
the C++ shim), used by the link checker.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# UG1603 "Memory and DMA Programming", Table 1 (DMA features): the memory-tile DMA addresses up to 4
# dimensions (AM020's memory-tile buffer descriptor: D0..D3 wrap / step size, in 32-bit words; its
# fifth, "iteration" dimension offsets whole executions of the descriptor, which is what a tiling's
# ``repetition`` repeats).  ``NdTiling.address_dims`` counts the (stride, wrap) loops a pattern needs.
MEMTILE_ADDRESS_DIMS = 4


# AM020 / UG1603: AIE-ML DMAs (memory tile and interface) address 32-bit words: buffer-descriptor
# step sizes are counted in 32-bit words, and zero padding is inserted in whole words (mlir-aie's
# verifier enforces the same: "stride ... bytes, which is not divisible by 4").
DMA_WORD_BYTES = 4


def word_problems(t: NdTiling, element_bytes: int) -> tuple[str, ...]:
    """Why a pattern over elements of ``element_bytes`` would not map onto 32-bit-word DMA
    addressing (empty when it does): every contiguous run, offset, row pitch, dimension-0 stride
    and padding boundary must be a whole number of words."""
    if element_bytes >= DMA_WORD_BYTES:
        return ()
    w = DMA_WORD_BYTES // element_bytes
    out = []
    if t.tile[0] % w:
        out.append(f"runs of {t.tile[0]} element(s)")
    if t.offset[0] % w:
        out.append(f"offset {t.offset[0]}")
    if t.dims[0] % w and len(t.dims) > 1:
        out.append(f"row pitch {t.dims[0]}")
    out += [f"dimension-0 stride {x.stride}" for x in t.traversal if x.dimension == 0 and x.stride % w and x.wrap > 1]
    if t.boundary is not None and t.boundary[0] % w and t.boundary[0] < t.dims[0]:
        out.append(f"padding from element {t.boundary[0]}")
    return tuple(out)


@dataclass(frozen=True)
class Traversal:
    dimension: int
    stride: int
    wrap: int


@dataclass(frozen=True)
class NdTiling:
    """One port's access pattern over a buffer of ``dims`` elements (dimension 0 fastest);
    ``repetition``: how many times the whole traversal runs per buffer (``tiling_parameters::
    repetition``, UG1603), executions of the same buffer descriptor (AM020: the BD's iteration
    fields offset each execution), so no address dimension."""

    dims: tuple[int, ...]
    tile: tuple[int, ...]
    offset: tuple[int, ...]
    traversal: tuple[Traversal, ...] = ()
    boundary: tuple[int, ...] | None = None
    repetition: int = 1

    @property
    def tiles(self) -> int:
        return int(np.prod([t.wrap for t in self.traversal], dtype=np.int64)) if self.traversal else 1

    @property
    def elements(self) -> int:
        return int(np.prod(self.tile, dtype=np.int64)) * self.tiles * self.repetition

    @property
    def address_dims(self) -> int:
        """Address-generation dimensions the pattern needs (see ``MEMTILE_ADDRESS_DIMS``): its
        :meth:`address_loops`."""
        return len(self.address_loops())

    def _in_range(self) -> bool:
        """Whether every coordinate the pattern visits lies inside the buffer (no padding)."""
        if self.boundary is not None or any(x.stride < 0 for x in self.traversal):
            return False
        for d, (n, o, t) in enumerate(zip(self.dims, self.offset, self.tile, strict=True)):
            span = sum((x.wrap - 1) * x.stride for x in self.traversal if x.dimension == d)
            if o < 0 or o + t - 1 + span >= n:
                return False
        return True

    def address_loops(self) -> tuple[tuple[int, int], ...]:
        """The pattern as (stride, wrap) loops over the flat buffer, innermost first: the tile's
        dimensions (0 first), then the traversal loops.  A loop of wrap 1 moves nothing and is
        dropped; where the pattern stays inside the buffer (no padding), a loop whose stride is
        the whole span of the loop inside it (``stride == inner stride x inner wrap``) continues
        that loop and is one address dimension with it (a contiguous row of a full-width tile, a
        k-step loop followed by a step loop over the next dimension)."""
        scale = np.cumprod((1, *self.dims[:-1])).tolist()
        loops = [(scale[d], t) for d, t in enumerate(self.tile)]
        loops += [(x.stride * scale[x.dimension], x.wrap) for x in self.traversal]
        out: list[tuple[int, int]] = []
        merge = self._in_range()
        for stride, wrap in loops:
            if wrap == 1:
                continue
            if merge and out and stride == out[-1][0] * out[-1][1]:
                out[-1] = (out[-1][0], out[-1][1] * wrap)
            else:
                out.append((int(stride), wrap))
        return tuple(out)

    def addresses(self) -> np.ndarray:
        """Flat buffer address of every element in stream order; -1 = padding (outside
        ``boundary``, or outside the buffer for a pattern with a boundary)."""
        rank = len(self.dims)
        # tile origins: traversal[0] fastest
        origins = np.zeros((1, rank), dtype=np.int64) + np.asarray(self.offset, dtype=np.int64)
        for tr in self.traversal:  # each outer loop repeats all faster ones
            steps = np.arange(tr.wrap, dtype=np.int64) * tr.stride
            shifted = np.repeat(origins[None, :, :], tr.wrap, axis=0)
            shifted[:, :, tr.dimension] += steps[:, None]
            origins = shifted.reshape(-1, rank)
        # elements inside a tile: dimension 0 fastest
        grids = np.meshgrid(*[np.arange(t, dtype=np.int64) for t in reversed(self.tile)], indexing="ij")
        inner = np.stack([g.ravel() for g in reversed(grids)], axis=1)  # [tile elems, rank]
        coords = (origins[:, None, :] + inner[None, :, :]).reshape(-1, rank)
        lim = np.asarray(self.boundary or self.dims, dtype=np.int64)
        inside = ((coords >= 0) & (coords < lim)).all(axis=1)
        scale = np.cumprod((1, *self.dims[:-1])).astype(np.int64)
        addr = (coords * scale).sum(axis=1)
        return np.tile(np.where(inside, addr, -1), self.repetition)

    def to_template(self) -> dict:
        d = {
            "dims": list(self.dims),
            "tile": list(self.tile),
            "offset": list(self.offset),
            "traversal": [{"dimension": t.dimension, "stride": t.stride, "wrap": t.wrap} for t in self.traversal],
        }
        if self.boundary is not None:
            d["boundary"] = list(self.boundary)
        if self.repetition != 1:
            d["repetition"] = self.repetition
        return d


def render(t: NdTiling) -> str:
    """The ``adf::tiling({...})`` expression of one port (C++ designated initialisers)."""
    dims = ", ".join(map(str, t.dims))
    trav = ", ".join(f"{{.dimension = {x.dimension}, .stride = {x.stride}, .wrap = {x.wrap}}}" for x in t.traversal)
    parts = [
        f".buffer_dimension = {{{dims}}}",
        f".tiling_dimension = {{{', '.join(map(str, t.tile))}}}",
        f".offset = {{{', '.join(map(str, t.offset))}}}",
        f".tile_traversal = {{{trav}}}",
    ]
    if t.boundary is not None:
        parts.append(f".boundary_dimension = {{{', '.join(map(str, t.boundary))}}}")
    if t.repetition != 1:
        parts.append(f".repetition = {t.repetition}")
    return "adf::tiling({" + ", ".join(parts) + "})"
