"""The lowered mapped graph of a plan, built once: emit and estimate of one compile (and every
repeated estimate of a design) share it.

A lowering is a function of frozen inputs (the planned graph or plan object, the placement, the
device), so :func:`memo` keeps its result with the object it was lowered from (``anchor``: the
chain's ``Graph``, a ``DagPlan``, a ``CnnPlan``) for as long as that object lives.  The other inputs
are part of the key by identity (a different placement of the same graph is lowered again) and
held by the entry, so an identity is never reused while the entry exists.  Nothing is shared
between two plans: a new plan object is a new anchor.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_MEMO: dict[int, dict[tuple, tuple[tuple, Any]]] = {}  # id(anchor) -> key -> (key objects, value)


def memo(anchor: object, what: str, objects: tuple, build: Callable[[], T]) -> T:
    """``build()``'s value for (``anchor``, ``what``, ``objects``), built on the first call and
    kept while ``anchor`` lives; ``objects`` are compared by identity."""
    slot = id(anchor)
    entries = _MEMO.get(slot)
    if entries is None:
        entries = _MEMO[slot] = {}
        weakref.finalize(anchor, _MEMO.pop, slot, None)
    key = (what, *map(id, objects))
    hit = entries.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], objects, strict=True)):
        return hit[1]
    value = build()
    entries[key] = (objects, value)
    return value


def peek(anchor: object, what: str, objects: tuple) -> Any:
    """The value :func:`memo` holds for these inputs, or None."""
    hit = _MEMO.get(id(anchor), {}).get((what, *map(id, objects)))
    return hit[1] if hit is not None and all(a is b for a, b in zip(hit[0], objects, strict=True)) else None
