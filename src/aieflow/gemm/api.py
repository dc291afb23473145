"""``aieflow.gemm(m, n, k, ...)``: a GotoBLAS-style GEMM design for matrices too large for the array."""

from __future__ import annotations

from collections.abc import Mapping

from ..devices import Device, get_device
from ..errors import ConfigError, PlanError
from .design import GemmDesign
from .dtypes import get_type, output_type
from .memory import pl_memory
from .plan import DESIGNS
from .search import best_plan, published_plan


def gemm(m: int, n: int, k: int, dtype: str = "uint8", device: str | Device = "vck190", tiles: int = 1,
         design: str = "published", blocks: Mapping[str, int] | None = None, output: str | None = None
         ) -> GemmDesign:
    """Plan, model and generate C = A (m x k) B (k x n).

    ``design="published"``: the paper's design on ``tiles`` tiles (L4 only, one Ar stream, single Br,
    serial write-back).  ``design="best"``: the configuration with the lowest modelled latency using
    at most ``tiles`` tiles (the alternatives are recorded).  ``blocks``: optional mc / nc / kc
    overrides (validated against the memories).  ``output``: C type, default the narrowest exact one
    (int32 when k x max|a*b| fits, else int64; float32 for fp32).
    """
    if design not in DESIGNS:
        raise ConfigError(f"unknown GEMM design {design!r}; choose one of {', '.join(DESIGNS)}")
    dev = get_device(device)
    pl_memory(dev)  # devices without PL memory facts fail here, with a hint
    t = get_type(dtype)
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"GEMM dimension {name} must be a positive integer, got {v!r}")
    if not isinstance(tiles, int) or isinstance(tiles, bool) or tiles < 1:
        raise PlanError(f"tiles must be a positive integer, got {tiles!r}")
    out = output_type(t, k, output)
    if design == "best":
        plan, alts = best_plan(m, n, k, t, out, dev, tiles, blocks)
        return GemmDesign(plan, alts)
    return GemmDesign(published_plan(m, n, k, t, out, dev, tiles, blocks))
