"""The one Pareto filter of aieflow: the search's fronts (Dense, DAG, CNN, recurrent layers and
stacks), the recurrent W x spreads it prunes, the Pareto plot's step line and the sweeps' fronts
all call :func:`undominated`.

Every figure is minimised.  An item is dropped when another beats or equals it in every figure; of
items with equal figures the first (in the given order) is kept.  The result is sorted by the
figures (a stable sort), so for the fronts ``(tiles, latency, interval)`` it is fewest tiles first.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def undominated(items: Iterable[T], key: Callable[[T], Sequence[float]]) -> list[T]:
    """The items whose ``key`` (a tuple of figures, each the smaller the better) no other item's
    beats or equals everywhere, sorted by ``key``.

    Sorted by the figures, an item can only be dominated by an earlier one, so one pass keeps an
    item unless an earlier survivor is at most its figures everywhere.  Up to three figures that
    test is a bisection in a staircase (O(n log n)); beyond, one vectorised comparison with the
    survivors so far per item.
    """
    order = sorted(((tuple(key(it)), it) for it in items), key=lambda kv: kv[0])
    if not order:
        return []
    dims = len(order[0][0])
    if dims <= 3:
        return [it for _, it in _staircase(order, dims)]
    figures = np.array([k for k, _ in order], dtype=float)
    kept = np.zeros(len(order), dtype=bool)
    for i, row in enumerate(figures):
        if not np.all(figures[kept] <= row, axis=1).any():
            kept[i] = True
    return [it for (_, it), k in zip(order, kept, strict=True) if k]


def _staircase(order: list[tuple[tuple, T]], dims: int) -> list[tuple[tuple, T]]:
    """The survivors of ``order`` (sorted by its first element) for at most three figures: the
    first figure is ordered already; the earlier survivors' minima in the second and third form a
    staircase (second ascending, third descending) searched by bisection."""
    if dims == 1:
        return order[:1]
    seconds: list[float] = []  # the staircase: second figure ascending
    thirds: list[float] = []  # the third figure descending along it (constant 0 for two figures)
    out = []
    for k, it in order:
        b, c = k[1], (k[2] if dims == 3 else 0.0)
        j = bisect.bisect_right(seconds, b)
        if j and thirds[j - 1] <= c:
            continue  # an earlier item is at most this one in every figure
        out.append((k, it))
        end = j  # the staircase points this one dominates (second >= b and third >= c)
        while end < len(seconds) and thirds[end] >= c:
            end += 1
        seconds[j:end] = [b]
        thirds[j:end] = [c]
    return out
