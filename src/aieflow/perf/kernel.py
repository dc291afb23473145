"""Cycle model of one call of the Dense kernel (``templates/kernels/dense.h``) on one tile.

The model follows what the template issues rather than a generic GEMM roofline, because the
published single-kernel figures (``shared/spec/dense-on-aie-ml.md``) are within a few percent of
peak and the remaining cycles come from the kernel's own structure:

    cycles       = call + blocks * block_cycles
    blocks       = (BATCH / M / b) * (NS / N / b)          b x b accumulator blocking (b = 2)
    block_cycles = KS / K * ii + serial
    ii           = max(MAC cycles of the b*b mmuls, ceil(vector-load instructions / 2 units))
    serial       = per-accumulator overhead (pipeline fill/drain; more with 64-bit lanes)
                 + bias prologue (bias loads + one upshift/copy per accumulator)
                 + ReLU (one vector max per 512 output bits)
                 + cascade words read and written (1 word per cycle)
                 + stores the inner loop cannot hide (vector SRS stores, or element stores when
                   the output panel is not the mmul N)

The inner loop is software pipelined, so loads and MACs overlap and ``ii`` is the busier of the
two; everything in ``serial`` sits between inner loops of consecutive blocks.  Constants fitted to
published figures say so at their definition; AIE1 and AIE-MLv2 have no published figure for this
kernel and reuse AIE-ML's fitted constants (stated in :data:`CONSTANTS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..devices import Device, Generation
from ..ops.dense import DensePlan, DenseTypes

SPEC_DENSE = "shared/spec/dense-on-aie-ml.md"
SPEC_DEVICES = "shared/spec/versal-devices.md"

BIAS_BITS = 32  # dense.h: TB is int32 (integer) or float; one bias value per accumulator lane
VECTOR_ALU_BITS = 512  # one vector ALU op (max, upshift, copy) covers 512 bits; UG1529 native widths


@dataclass(frozen=True)
class KernelConstants:
    """The non-catalog cycle costs of the kernel on one generation, each with where it comes from."""

    call_cycles: float  # per kernel call: entry, rounding/saturation mode writes, loop setup
    acc_overhead_cycles: float  # per accumulator per block: inner-loop fill/drain, SRS issue
    acc64_overhead_cycles: float  # extra per accumulator per block when lanes are 64-bit
    store_hide_cycles: float  # store-slot cycles per block that overlap the MAC drain
    vector_op_cycles: float  # per exposed vector op in the block prologue/epilogue
    element_store_cycles: float  # per element when the output panel is not the mmul N
    sources: Mapping[str, str]


# Fitted on AIE-ML (VEK280, 1.25 GHz) to the calibration table "single-kernel throughput" of
# shared/spec/dense-on-aie-ml.md (aiesimulator, B = 128); see benchmarks/validate.py for the errors.
AIE_ML_CONSTANTS = KernelConstants(
    # Assumed, not fitted: no published figure isolates the call cost; <0.3% of every calibration
    # workload.  Function entry, two mode-register writes, loop-counter setup.
    call_cycles=16.0,
    # FITTED: least squares on the two base (no bias, no ReLU) calibration figures of
    # dense-on-aie-ml.md, i8 x i8 128x128 = 613 GOPS and i16 x i8 128x128 = 314 GOPS (both 128
    # blocks of 4 accumulators).  Published cycles (2 * MACs / GOPS * 1.25 GHz) minus the MAC bound,
    # the call and two lock hand-offs leave 336.8 and 289.1 cycles: (336.8 + 289.1) / (2 * 512).
    acc_overhead_cycles=0.611,
    # FITTED: to the i16 x i16 64x64 base figure of dense-on-aie-ml.md (138 GOPS = 9,498 cycles;
    # 1,282 beyond MAC bound + call + locks, of which 313 are the acc32 overhead above):
    # (1282.0 - 313.0) / 512.  Empirical: we know of no mechanism in the public documentation, only
    # that the 64-bit-lane figure needs it.
    acc64_overhead_cycles=1.893,
    # FITTED (lower bound): the i16 x i8 base figure of dense-on-aie-ml.md stores 8 cycles per block
    # (4 x 512-bit outputs) with no visible penalty, so at least 8 store cycles hide; set to that.
    store_hide_cycles=8.0,
    # Assumed from the architecture, not fitted: the VLIW word has one vector ALU slot
    # (versal-devices.md "VLIW up to 7-way"), so each exposed vector op costs one cycle.  The
    # bias + ReLU calibration figures are predicted with it (held out; see validation.md).
    vector_op_cycles=1.0,
    # Assumed: one scalar store issue per cycle (versal-devices.md: one store unit per tile).
    element_store_cycles=1.0,
    sources=MappingProxyType(
        {
            "acc_overhead_cycles": f"fitted: {SPEC_DENSE} i8xi8 and i16xi8 base GOPS",
            "acc64_overhead_cycles": f"fitted: {SPEC_DENSE} i16xi16 base GOPS",
            "store_hide_cycles": f"bounded by: {SPEC_DENSE} i16xi8 base GOPS",
            "call_cycles": "assumed",
            "vector_op_cycles": f"assumed: one vector slot per VLIW word ({SPEC_DEVICES})",
            "element_store_cycles": f"assumed: one store unit ({SPEC_DEVICES})",
        }
    ),
)

# No published figure measures this kernel on AIE1 or AIE-MLv2: reuse the AIE-ML constants.
CONSTANTS: Mapping[str, KernelConstants] = MappingProxyType(
    {
        "aie": AIE_ML_CONSTANTS,
        "aie-ml": AIE_ML_CONSTANTS,
        "aie-mlv2": AIE_ML_CONSTANTS,
    }
)


@dataclass(frozen=True)
class KernelShape:
    """One instantiation of the Dense kernel template (what ``layers.h`` sets), plus its tile role."""

    mmul: tuple[int, int, int]
    batch: int  # BATCH: padded batch, a multiple of blocking * M
    ks: int  # KS: input features of this tile (multiple of K)
    ns: int  # NS: output features of this tile (multiple of blocking * N)
    in_bits: int
    weight_bits: int
    out_bits: int
    acc_bits: int  # accumulator lane width (32 for float accumulation)
    bias: bool  # accumulators start from the bias (first tile of a cascade row)
    relu: bool
    cascade_in: bool
    cascade_out: bool
    out_panel: int  # OUT_P; == N means one vector store per accumulator
    blocking: int = 2  # dense.h uses 2 x 2; 1 models an unblocked kernel (AMD tutorial)

    @property
    def macs(self) -> int:
        return self.batch * self.ks * self.ns

    @property
    def stores(self) -> bool:
        return not self.cascade_out


@dataclass(frozen=True)
class KernelCycles:
    """Cycles of one kernel call, attributed to what sets each part of the critical path (the
    five parts sum to ``cycles``): the pipelined inner loop counts as compute or load, whichever
    sets its initiation interval; the serial work between inner loops as store, cascade, load
    (bias) or overhead."""

    cycles: float
    compute: float
    load: float
    store: float
    cascade: float
    overhead: float  # call + per-block fill/drain + prologue/epilogue vector ops
    bound: str  # the largest part: "compute", "load", "store", "cascade" or "overhead"
    blocks: int
    block_cycles: float
    ii: int  # inner-loop initiation interval
    mac_ii: float  # MAC cycles per inner iteration
    load_ii: int  # vector-load cycles per inner iteration
    macs: int
    peak_macs_per_cycle: float

    @property
    def efficiency(self) -> float:
        """Share of the tile's peak MAC rate this call sustains."""
        return self.macs / (self.peak_macs_per_cycle * self.cycles) if self.cycles else 0.0


def cascade_words(mn: int, acc_bits: int, cascade_bits: int) -> int:
    """Cascade transfers per accumulator: dense.h moves ``CASC_LANES`` lanes per word, the widest
    count that fits the cascade and divides M*N (the rule of ``passes/emit.py``)."""
    lanes = max(1, cascade_bits // acc_bits)
    while mn % lanes:
        lanes -= 1
    return mn // lanes


def mac_cycles(macs: float, gen: Generation, pair: tuple[str, str]) -> float:
    """Cycles to issue ``macs`` multiply-accumulates at the catalog's peak rate."""
    return macs / gen.macs_per_cycle[pair]


def dense_kernel_cycles(shape: KernelShape, gen: Generation, pair: tuple[str, str]) -> KernelCycles:
    """Cycle model of one kernel call (see the module docstring for the formula)."""
    c = CONSTANTS[gen.name]
    m, k, n = shape.mmul
    b = shape.blocking
    if shape.batch % (b * m) or shape.ns % (b * n) or shape.ks % k:
        raise ValueError(f"kernel shape {shape} is not a whole number of {b}x{b} mmul blocks")
    accs = b * b
    mn = m * n
    blocks = (shape.batch // (m * b)) * (shape.ns // (n * b))
    kb = shape.ks // k
    unit_bits = gen.load_bits_per_cycle // 2  # two load units (versal-devices.md)

    mac_iter = mac_cycles(accs * m * k * n, gen, pair)
    load_instr = b * math.ceil(m * k * shape.in_bits / unit_bits) + b * math.ceil(k * n * shape.weight_bits / unit_bits)
    load_iter = math.ceil(load_instr / 2)
    ii = max(math.ceil(mac_iter), load_iter, 1)

    # Prologue: bias vectors (one per column block) loaded, upshifted, copied to the other rows.
    bias_load = math.ceil(b * math.ceil(mn * BIAS_BITS / unit_bits) / 2) if shape.bias else 0
    ops = accs if shape.bias else 0
    # Epilogue: ReLU on each output vector.
    if shape.relu and shape.stores:
        ops += accs * math.ceil(mn * shape.out_bits / VECTOR_ALU_BITS)
    words = cascade_words(mn, shape.acc_bits, gen.cascade_bits)
    casc = accs * words * (int(shape.cascade_in) + int(shape.cascade_out))
    if not shape.stores:
        store = 0.0
    elif shape.out_panel == n:
        store = float(accs * math.ceil(mn * shape.out_bits / gen.store_bits_per_cycle))
    else:  # dense.h scatters the block element by element into the wider panel
        store = accs * mn * c.element_store_cycles
    exposed_store = max(0.0, store - c.store_hide_cycles)
    per_acc = c.acc_overhead_cycles + (c.acc64_overhead_cycles if shape.acc_bits == 64 else 0.0)
    fixed = accs * per_acc + ops * c.vector_op_cycles
    serial = fixed + bias_load + casc + exposed_store
    block = kb * ii + serial
    cycles = c.call_cycles + blocks * block

    inner = blocks * kb * ii
    parts = {
        "compute": inner if mac_iter >= load_iter else 0.0,
        "load": (0.0 if mac_iter >= load_iter else inner) + blocks * bias_load,
        "store": blocks * exposed_store,
        "cascade": float(blocks * casc),
        "overhead": c.call_cycles + blocks * fixed,
    }
    bound = max(parts, key=lambda key: parts[key])  # dict order breaks ties: compute first
    return KernelCycles(
        cycles=cycles,
        compute=parts["compute"],
        load=parts["load"],
        store=parts["store"],
        cascade=parts["cascade"],
        overhead=parts["overhead"],
        bound=bound,
        blocks=blocks,
        block_cycles=block,
        ii=ii,
        mac_ii=mac_iter,
        load_ii=load_iter,
        macs=shape.macs,
        peak_macs_per_cycle=gen.macs_per_cycle[pair],
    )


# ----------------------------------------------------------------------------- roles of a layer


def tile_role(plan: DensePlan, position: int) -> str:
    """The kernel class a cascade position runs (as ``passes/emit.py`` instantiates them)."""
    if plan.cas_len == 1:
        return "single"
    if position == 0:
        return "first"
    return "last" if position == plan.cas_len - 1 else "middle"


def role_shapes(plan: DensePlan, types: DenseTypes, relu: bool) -> dict[str, KernelShape]:
    """The distinct kernel instantiations of a layer, by role."""
    acc_bits = 32 if types.is_float else types.acc_bits
    base = dict(
        mmul=plan.mmul,
        batch=plan.batch_pad,
        ks=plan.k_slice,
        ns=plan.n_slice,
        in_bits=types.input.container_bits,
        weight_bits=types.weight.container_bits,
        out_bits=types.output.container_bits,
        acc_bits=acc_bits,
        out_panel=plan.out_panel,
    )
    has_bias = types.bias is not None
    shapes: dict[str, KernelShape] = {}
    for pos in sorted({0, plan.cas_len - 1, min(1, plan.cas_len - 1)}):
        role = tile_role(plan, pos)
        first = role in ("single", "first")
        last = role in ("single", "last")
        shapes[role] = KernelShape(
            **base,
            bias=has_bias and first,
            relu=relu and last,
            cascade_in=not first,
            cascade_out=not last,
        )
    return shapes


def layer_kernel_cycles(plan: DensePlan, types: DenseTypes, relu: bool, device: Device) -> dict[str, KernelCycles]:
    """Cycle model of every distinct tile role of a planned Dense layer."""
    gen = device.generation
    return {role: dense_kernel_cycles(s, gen, types.pair) for role, s in role_shapes(plan, types, relu).items()}
