"""Dense layers whose weights do not fit on chip: streamed through a GotoBLAS GEMM design.

A resident Dense layer keeps every weight in tile memory (``ops/dense.py``); past the array's
capacity (e.g. 4096 x 4096 int8 = 16 MiB against 400 x 32 KB on VCK190) it cannot be planned.  The
streamed mapping keeps the weights in DDR and runs the layer as one GEMM (``gemm/plan.py``): either
C = X W (A = the activations, B = the weights: Br holds a panel of W) or C^T = W^T X^T (A = the
weights streamed as Ar and multicast, B = the activations: Br holds a panel of X and is reused by
every row of W).  The model picks the faster orientation.  The GEMM leaves exact sums in C; a PL
epilogue kernel (``templates/gemm/dense_epilogue.h.j2``) then applies the resident kernel's bias,
accumulator wrap, SRS and ReLU, so the layer computes exactly what :func:`aieflow.ops.dense.emulate`
computes.

Choice (config ``layers.<name>.weights``): ``resident`` (today's mapping, an error if it does not
fit), ``streamed`` (always), ``auto`` (default: resident when the resident planner finds a plan,
streamed otherwise).

Supported: integer Dense layers (int8, int16 or a16w8; bias and ReLU fused) with views (flatten /
reshape) before them on every GEMM device: VCK190 (the PL-memory GEMM: the PL memory facts of
``gemm/memory.py``) and VEK280 / VEK385 (the memory-tile GEMM of ``gemm/aieml.py``, the generation's
integer mmul shapes and accumulators; the same PL epilogue); fp32 ones on VCK190; bf16 ones on the
memory-tile bf16 GEMM of AIE-ML / AIE-MLv2 (VEK280, VEK385).  An fp32 or bf16 layer's values are the
GEMM's float order, not the resident kernel's (``gemm/streamed_float.py``): each kc block's sums
start at +0.0, the blocks are added into C, the bias comes last (bf16: then one rounding to bf16,
then ReLU); they may differ from the same layer resident in the last bits.  :func:`plan_streamed` plans one
such layer as a model of its own; a chain with resident layers too is cut into segments by
``gemm/segmented.py`` (which also makes the ``auto`` choice for chains).  Everything else fails
with a message that says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import design_schema
from ..config import Config
from ..devices import Device
from ..errors import ConfigError, PlanError
from ..ir import Graph, Node
from ..numerics.types import FixedType, FloatType
from ..ops.base import PlanContext
from ..ops.dense import DENSE, DenseTypes
from ..ops.registry import family
from .aieml import is_memtile_device, ml_type
from .dtypes import get_type, output_type
from .memory import pl_memory
from .perf import GemmPerformance, ddr_cycles, estimate
from .plan import GemmPlan
from .search import Alternative, best_plan

WEIGHTS_MODES = ("auto", "resident", "streamed")
ORIENTATIONS = ("xw", "wx")  # C = X W (A = activations) | C^T = W^T X^T (A = weights)
DEFAULT_TILES = 32  # the spec's largest experiment; `target: tiles <= T` changes it
SUPPORTED = ("a model whose only compute layer is one int8, int16, a16w8 or fp32 Dense layer on VCK190, or one "
             "int8, int16, a16w8 or bf16 Dense layer on VEK280 / VEK385, with its bias and ReLU, optionally after "
             "flatten / reshape views")


def weights_mode(config: Config, node: Node) -> str:
    """The layer's ``weights`` setting (``auto`` when the config does not say)."""
    return getattr(config.layer(node.name, *node.aliases), "weights", None) or "auto"


def dense_nodes(graph: Graph) -> list[Node]:
    return [n for n in graph.nodes if n.op == "dense"]


def resident_error(graph: Graph, node: Node, device: Device, config: Config) -> PlanError | None:
    """Why the layer cannot keep its weights on chip on its own (None: a resident plan exists).

    The layer is planned alone, as the first layer (its input from a PLIO): if that fails, no
    arrangement of the model can make it resident."""
    ctx = PlanContext(device, config, config.layer(node.name, *node.aliases), graph, None, 1)
    try:
        DENSE.plan(node, ctx)
    except PlanError as e:
        return e
    return None


@dataclass(frozen=True)
class Epilogue:
    """The resident Dense kernel's finish, applied by the PL to the GEMM's exact sums (integers), or
    the fp32 finish: ``c + bias`` then ReLU in float32 (``is_float``; the shifts are 0, no wrap)."""

    acc_bits: int
    bias_shift: int
    shift: int
    has_bias: bool
    relu: bool
    out_type: str
    out_width: int
    out_signed: bool
    out_min: int
    out_max: int
    wrap: bool
    rounding: str
    y_c_type: str
    y_np: str
    y_bytes: int
    is_float: bool = False
    bias_c_type: str = "std::int32_t"  # data/bias.bin: int32 codes, or float32 values
    bias_np: str = "int32"
    bf16: bool = False  # a bf16 layer: y = bf16(c + bias) (nearest, ties to even), then ReLU; Y as bf16 bits

    def to_json(self) -> dict:
        return {"acc_bits": self.acc_bits, "bias_shift": self.bias_shift, "shift": self.shift,
                "bias": self.has_bias, "relu": self.relu, "output": self.out_type}


def epilogue_of(node: Node) -> Epilogue:
    t: DenseTypes = node.types
    out = t.output
    relu = node.attrs.get("activation") == "relu"
    if isinstance(out, FloatType):
        bf16 = out.name == "bf16"  # Y leaves as bf16 bit patterns (std::uint16_t), as the GEMM's operands
        return Epilogue(acc_bits=0, bias_shift=0, shift=0, has_bias=t.bias is not None, relu=relu,
                        out_type=out.to_string(), out_width=16 if bf16 else 32, out_signed=True, out_min=0,
                        out_max=0, wrap=False, rounding="ieee_nearest_even",
                        y_c_type="std::uint16_t" if bf16 else "float", y_np="uint16" if bf16 else "float32",
                        y_bytes=2 if bf16 else 4, is_float=True, bias_c_type="float", bias_np="float32", bf16=bf16)
    assert isinstance(out, FixedType)
    for what, v in (("SRS shift", t.shift), ("bias shift", t.bias_shift)):
        if not 0 <= v <= 62:
            raise PlanError(f"{what} {v} is outside 0..62, which the streamed epilogue supports", layer=node.name,
                            hint="choose output / bias types closer to the accumulator's scale")
    hi = out.max_code
    lo = -hi if (out.saturation.value == "symmetric" and out.signed) else out.min_code
    bits = out.container_bits
    return Epilogue(
        acc_bits=t.acc_bits, bias_shift=t.bias_shift, shift=t.shift, has_bias=t.bias is not None,
        relu=relu, out_type=out.to_string(), out_width=out.width,
        out_signed=out.signed, out_min=lo, out_max=hi, wrap=out.saturation.value == "none",
        rounding=out.rounding.value, y_c_type=f"std::{'' if out.signed else 'u'}int{bits}_t",
        y_np=f"{'' if out.signed else 'u'}int{bits}", y_bytes=bits // 8,
    )


def gemm_dtype(node: Node) -> str:
    """The GEMM element type holding both operands exactly (a16w8 widens the weights to int16; fp32
    and bf16 run as the fp32 / bf16 GEMM, in its own float order)."""
    t: DenseTypes = node.types
    if isinstance(t.weight, FloatType) or isinstance(t.input, FloatType):
        for name in ("fp32", "bf16"):
            if all(isinstance(v, FloatType) and v.name == name for v in (t.input, t.weight, t.output)):
                return name
        raise ConfigError(
            f"streamed weights are implemented for int8, int16, a16w8, fp32 and bf16 (input, weights and output "
            f"of one float type); this layer is {t.weight} (input {t.input}, output {t.output})",
            layer=node.name,
            hint="use precision fp32 (vck190) or bf16 (vek280 / vek385) for the whole layer, or an integer precision",
        )
    assert isinstance(t.input, FixedType) and isinstance(t.weight, FixedType)
    if t.input.width <= 8 and t.weight.width <= 8 and t.input.signed and t.weight.signed:
        return "int8"
    if t.input.width <= 16 and t.weight.width <= 16 and (t.input.signed or t.input.width < 16):
        return "int16"
    raise ConfigError(f"input {t.input} x weight {t.weight} has no exact GEMM type", layer=node.name)


@dataclass(frozen=True)
class StreamedDensePlan:
    layer: str
    orientation: str
    batch: int
    in_features: int
    out_features: int
    gemm: GemmPlan
    epilogue: Epilogue
    reason: str  # why the weights are streamed
    alternatives: tuple[Alternative, ...]  # of the chosen orientation's GEMM search
    orientations: dict  # orientation -> modelled total cycles of its best GEMM

    @property
    def weight_bytes(self) -> int:
        return self.in_features * self.out_features * self.gemm.dtype.bytes


@dataclass(frozen=True)
class StreamedDensePerformance:
    """The layer's modelled cost for one call of ``batch`` samples: the GEMM (packing included:
    the weights come from DDR every call) and the epilogue's DDR pass."""

    gemm: GemmPerformance
    epilogue_cycles: float
    cycles: float
    latency_ns: float
    interval_ns: float
    throughput_ops_per_s: float
    bound: str

    batch: int = 1  # samples per call (protocol.Performance)
    memory_tiles_used: int = 0  # set by the design from its mapped graph (gemm/lower.streamed_resources)
    replicas: int = 1  # one copy of the layer (protocol.Performance)

    @property
    def tiles_used(self) -> int:
        return self.gemm.tiles_used

    def breakdown_parts(self) -> list[tuple[str, float, dict]]:
        """``protocol.Performance``, one call of ``batch`` samples: weight packing, the GEMM, the
        epilogue."""
        ns = 1e9 / self.gemm.clock_hz
        return [("weights from DDR (packing)", self.gemm.packing_cycles * ns, {}),
                ("AI Engine GEMM", self.gemm.cycles * ns, {"bound": self.gemm.bound}),
                ("epilogue (DDR)", self.epilogue_cycles * ns, {})]

    def extra_json(self) -> dict:
        """The cycles and the GEMM's own figures."""
        return {"cycles": self.cycles, "epilogue_cycles": self.epilogue_cycles,
                "gemm": design_schema.performance_json(replace(self.gemm, memory_tiles_used=self.memory_tiles_used))}


def estimate_streamed(p: StreamedDensePlan) -> StreamedDensePerformance:
    g = estimate(p.gemm)
    c_bytes = {"int32": 4, "int64": 8, "float32": 4}[p.gemm.output.name]
    y_bytes = p.epilogue.y_bytes
    elems = p.batch * p.out_features
    dev = p.gemm.device
    epi = ddr_cycles(elems * c_bytes, dev) + ddr_cycles(elems * y_bytes, dev) + ddr_cycles(p.out_features * 4, dev)
    cycles = g.total_cycles + epi
    ns = cycles / p.gemm.device.clock_hz * 1e9
    parts = {"weights from DDR (packing)": g.packing_cycles, f"AI Engine GEMM ({g.bound})": g.cycles,
             "epilogue (DDR)": epi}
    bound = max(parts, key=parts.get)
    macs = p.batch * p.in_features * p.out_features
    return StreamedDensePerformance(g, epi, cycles, ns, ns, 2 * macs / (ns * 1e-9), bound, batch=p.batch)


def plan_streamed(graph: Graph, device: Device, config: Config, node: Node, reason: str,
                  orientation: str | None = None) -> StreamedDensePlan:
    """The streamed mapping of ``node`` (the model's only compute layer): both orientations
    costed, the faster chosen (``orientation`` forces one)."""
    others = [n.name for n in graph.nodes if n is not node and not family(n.op, n.name).is_view]
    if others:
        raise PlanError(
            f"{reason}; streamed weights are supported for {SUPPORTED}, but the model also has layer(s) "
            f"{', '.join(others)}",
            layer=node.name,
            hint="compile this layer as a model of its own (the others resident in a second design), or make "
                 "it fit on chip (narrower precision, smaller batch, a larger device)",
        )
    t = get_type(gemm_dtype(node))
    if is_memtile_device(device):
        # AIE-ML / AIE-MLv2: the memory-tile GEMM (gemm/aieml.py) stages the blocks in memory tiles, not
        # in PL UltraRAM / Block RAM, so it needs no PL memory figures; integer types take the
        # generation's mmul shape and accumulator (catalog), as the resident GEMM does; fp32 is refused
        try:
            ml_type(t, device)
        except ConfigError as e:
            raise PlanError(f"{reason}; streamed weights need a GEMM design, and {e.message}", layer=node.name,
                            hint=e.hint) from None
    elif t.name == "bf16":  # AIE1 has no bf16 MACs
        raise PlanError(f"{reason}; a bf16 layer streams through the bf16 GEMM, which needs bf16 MACs, and "
                        f"{device.key} ({device.generation.name}) has none", layer=node.name,
                        hint="use --device vek280 or vek385 for bf16 streamed weights, or precision fp32 on vck190")
    else:
        try:
            pl_memory(device)
        except ConfigError as e:
            raise PlanError(f"{reason}; streamed weights need a GEMM design, and {e.message}", layer=node.name,
                            hint="use --device vck190 (int8 / int16 / fp32), vek280 or vek385 (int8 / int16 / "
                            "bf16) for streamed weights, or make the layer fit on chip (a smaller batch, a "
                            "narrower precision)") from None
    ep = epilogue_of(node)
    batch = config.batch
    k, n = int(node.attrs["in_features"]), int(node.attrs["out_features"])
    out = output_type(t, k)
    tiles = min(device.compute_tiles, config.target.max_tiles or DEFAULT_TILES)
    shapes = {"xw": (batch, n, k), "wx": (n, batch, k)}
    found: dict[str, tuple[GemmPlan, tuple[Alternative, ...]]] = {}
    errors = []
    if orientation not in (None, *ORIENTATIONS):
        raise ConfigError(f"orientation {orientation!r}; choose one of {', '.join(ORIENTATIONS)}")
    for o in (orientation,) if orientation else ORIENTATIONS:
        try:
            found[o] = best_plan(*shapes[o], t, out, device, tiles, None)
        except (PlanError, ConfigError) as e:
            errors.append(f"{o}: {str(e).splitlines()[0]}")
    if not found:
        raise PlanError(f"{reason}, and no streamed GEMM fits either ({'; '.join(errors)})", layer=node.name)
    totals = {o: estimate(p).total_cycles for o, (p, _) in found.items()}
    chosen = min(found, key=lambda o: (totals[o], estimate(found[o][0]).cycles, ORIENTATIONS.index(o)))
    gp, alts = found[chosen]
    return StreamedDensePlan(node.name, chosen, batch, k, n, gp, ep, reason, alts, totals)
