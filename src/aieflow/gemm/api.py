"""``aieflow.gemm(m, n, k, ...)``: a GotoBLAS-style GEMM design for matrices too large for the array."""

from __future__ import annotations

from collections.abc import Mapping

from ..devices import Device, get_device
from ..errors import ConfigError, PlanError
from ..mapped.transport import check as check_transport
from .aieml import check_device, is_memtile_device, ml_type
from .design import GemmDesign
from .dtypes import get_type, output_type
from .lower import lower
from .memory import pl_memory
from .plan import DESIGNS
from .search import best_plan, published_plan


def gemm(m: int, n: int, k: int, dtype: str = "uint8", device: str | Device = "vck190", tiles: int = 1,
         design: str = "published", blocks: Mapping[str, int] | None = None, output: str | None = None,
         br_transfer: str | None = None) -> GemmDesign:
    """Plan, model and generate C = A (m x k) B (k x n).

    ``design="published"``: the paper's design on ``tiles`` tiles (L4 only, one Ar stream, single Br,
    serial write-back).  ``design="best"``: the configuration with the lowest modelled latency using
    at most ``tiles`` tiles (the alternatives are recorded).  ``blocks``: optional mc / nc / kc
    overrides (validated against the memories).  ``output``: C type, default the narrowest exact one
    (int32 when k x max|a*b| fits, else int64; float32 for fp32).  ``br_transfer``: ``"gmio"`` makes
    ``best`` choose among designs whose Br comes from DDR through GMIO (VCK190; default: the PL
    streams it); on vek280 Br always goes through the memory tiles.
    """
    if design not in DESIGNS:
        raise ConfigError(f"unknown GEMM design {design!r}; choose one of {', '.join(DESIGNS)}")
    dev = get_device(device)
    check_device(dev)  # vck190 (PL memories) or vek280 (memory tiles); others fail here, with a hint
    if not is_memtile_device(dev):
        pl_memory(dev)
    t = get_type(dtype)
    if not is_memtile_device(dev) and t.pair not in dev.generation.macs_per_cycle:
        raise ConfigError(
            f"dtype {t.name} on {dev.key}: {dev.generation.name} has no {t.name} multiply-accumulate (catalog: no "
            f"{t.name} MAC rate), so aieflow generates no {t.name} GEMM for it",
            hint=f"use --device vek280 or vek385 for {t.name}, or fp32 / an integer dtype on {dev.key}")
    if is_memtile_device(dev):
        t = ml_type(t, dev)  # AIE-ML mmul shape and accumulator (fp32 refused with a hint)
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"GEMM dimension {name} must be a positive integer, got {v!r}")
    if not isinstance(tiles, int) or isinstance(tiles, bool) or tiles < 1:
        raise PlanError(f"tiles must be a positive integer, got {tiles!r}")
    out = output_type(t, k, output)
    if br_transfer not in (None, "stream", "gmio", "memtile"):
        raise ConfigError(f"unknown Br transfer {br_transfer!r}; choose stream or gmio (vck190)")
    if is_memtile_device(dev) and br_transfer not in (None, "memtile"):
        raise ConfigError(f"on {dev.key} Br reaches the tiles through the memory tiles, not {br_transfer}",
                          hint="leave --br-transfer out on vek280")
    if not is_memtile_device(dev) and br_transfer == "memtile":
        raise ConfigError(f"{dev.key} has no memory tiles", hint="use --br-transfer stream or gmio")
    if design == "published" and br_transfer == "gmio":
        raise ConfigError("the published design streams Br from the PL (the spec); GMIO Br is one of best's options",
                          hint="use --design best --br-transfer gmio")
    if design == "best":
        plan, alts = best_plan(m, n, k, t, out, dev, tiles, blocks,
                               transfer=br_transfer if br_transfer in ("stream", "gmio") else "stream")
    else:
        plan, alts = published_plan(m, n, k, t, out, dev, tiles, blocks), ()
    # the check pass, as the chain and the DAG run it: the placed mapped graph's links against the device
    check_transport(lower(plan), plan.device)
    return GemmDesign(plan, alts)
