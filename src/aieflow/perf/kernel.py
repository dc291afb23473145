"""Cycle model of one call of the Dense kernel (``templates/kernels/dense.h``) on one tile.

The model follows what the template issues rather than a generic GEMM roofline, because the
published single-kernel figures (``shared/spec/dense-on-aie-ml.md``) are within a few percent of
peak and the remaining cycles come from the kernel's own structure:

    cycles       = call + blocks * block_cycles
    blocks       = (BATCH / M / bm) * (NS / N / bn)        bm x bn accumulator blocking (2 x 2)
    block_cycles = KS / K * ii + serial
    ii           = max(MAC cycles of the bm*bn mmuls, A-side loads, W-side loads)
    serial       = per-accumulator overhead (pipeline fill/drain, SRS issue)
                 + extra per op on 64-bit-lane accumulators (SRS; bias upshift and copy)
                 + bias prologue (bias loads + one upshift/copy per accumulator)
                 + ReLU (one vector max per 512 output bits)
                 + cascade words read and written (1 word per cycle)
                 + stores the inner loop cannot hide (vector SRS stores, or element stores when
                   the output panel is not the mmul N)
                 + wide-output epilogue (outputs over 512 bits per accumulator in a blocked
                   kernel: one conversion per accumulator, and none of the stores hide)

The inner loop is software pipelined, so loads and MACs overlap and ``ii`` is the busier of the
MAC unit and the two load units (A-side operands on one, W-side on the other, the way
``versal-devices.md`` states a shape's load limit: "the slowest of loading A, loading B,
computing"); everything in ``serial`` sits between inner loops of consecutive blocks.  Constants
fitted to published figures say so at their definition, with the figure; AIE1 and AIE-MLv2 have no
published figure for this kernel and reuse AIE-ML's fitted constants (stated in :data:`KERNEL_CONSTANTS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from ..devices import Device, Generation
from ..families.dense.resident_cascade import cascade_role
from ..ops.dense import DensePlan, DenseTypes, cascade_chunk_lanes, element_bits
from .activation import (
    COPY_CYCLES,
    activation_cycles,
    fp32_activation_cycles,
    fp32_softmax_cycles,
    softmax_cycles,
)

SPEC_DENSE = "shared/spec/dense-on-aie-ml.md"
SPEC_DEVICES = "shared/spec/versal-devices.md"

BIAS_BITS = 32  # dense.h: TB is int32 (integer) or float; one bias value per accumulator lane
VECTOR_ALU_BITS = 512  # one vector ALU op (max, upshift, copy) covers 512 bits; UG1529 native widths
# Assumed: a vector register holds 512 bits (the x0-x11 registers of the AIE-ML listing in AMD's
# tutorial; not in the specs).  An accumulator whose output vector is wider (int32 from a 32-lane
# accumulator: 1,024 bits) needs a register pair to convert into (see wide_output_cycles).
VECTOR_REGISTER_BITS = 512

SPEC_TUTORIAL = f"{SPEC_DENSE} (AMD AIE-ML tutorial, int8 64x64x64)"


@dataclass(frozen=True)
class KernelConstants:
    """The non-catalog cycle costs of the kernel on one generation, each with where it comes from."""

    call_cycles: float  # per kernel call: entry, rounding/saturation mode writes, loop setup
    acc_overhead_cycles: float  # per accumulator per block: inner-loop fill/drain, SRS issue
    acc64_op_cycles: float  # extra per operation on a 64-bit-lane accumulator (drain/SRS, bias init)
    store_hide_cycles: float  # store-slot cycles per block that overlap the MAC drain
    wide_output_cycles: float  # per accumulator per block whose output exceeds one vector register
    vector_op_cycles: float  # per exposed vector op in the block prologue/epilogue
    element_store_cycles: float  # per element when the output panel is not the mmul N
    sources: Mapping[str, str]


# Fitted on AIE-ML (VEK280, 1.25 GHz) to the published single-kernel figures of
# shared/spec/dense-on-aie-ml.md (aiesimulator); see docs/validation.md for every error.  Each
# FITTED constant names the one figure (or two) it was solved from; all other figures of that
# spec are predicted with the constants below and are held out.
AIE_ML_CONSTANTS = KernelConstants(
    # Assumed, not fitted: no published figure isolates the call cost; <0.3% of every calibration
    # workload.  Function entry, two mode-register writes, loop-counter setup.
    call_cycles=16.0,
    # FITTED: least squares on the two base (no bias, no ReLU) figures of dense-on-aie-ml.md
    # "Calibration: single-kernel throughput", i8 x i8 128x128 = 613 GOPS and i16 x i8 128x128 =
    # 314 GOPS (both 128 blocks of 4 accumulators).  Published cycles (2 * MACs / GOPS * 1.25 GHz)
    # minus the MAC bound, the call and two lock hand-offs leave 336.8 and 289.1 cycles:
    # (336.8 + 289.1) / (2 * 512).
    acc_overhead_cycles=0.611,
    # FITTED: to the i16 x i16 64x64 base figure of the same table (138 GOPS = 9,498 cycles;
    # 1,282 beyond MAC bound + call + locks, of which 313 are the acc32 overhead above):
    # (1282.0 - 313.0) / 512, i.e. per accumulator and block, for the one operation on it (the
    # drain and SRS, or the cascade write).  Mechanism assumed, not documented in the specs: 64-bit
    # lanes halve the MAC rate (i16 x i16 64 MACs/cycle against 128 for i16 x i8,
    # versal-devices.md), as if each 64-bit lane took two 32-bit lane slices, so operations on a
    # 64-bit-lane accumulator cost extra.  The model therefore also charges it for the other
    # operations that write such an accumulator, the bias upshift and copy in the prologue.  That
    # use is a held-out prediction: i16 x i16 + bias + ReLU (114 GOPS) comes out -2.1%, where
    # charging the prologue as on 32-bit lanes gave +6.7%.
    acc64_op_cycles=1.893,
    # FITTED (lower bound): the i16 x i8 base figure of dense-on-aie-ml.md stores 8 cycles per block
    # (4 x 512-bit outputs) with no visible penalty, so at least 8 store cycles hide; set to that.
    store_hide_cycles=8.0,
    # FITTED: to the AMD tutorial's optimised int8 64x64x64 kernel with 32-bit output (1,750 cycles,
    # dense-on-aie-ml.md, "Also public (AMD AIE-ML tutorial)").  AMD's write-up of that kernel
    # (Vitis-Tutorials, AIE-ML Design_Tutorials/01, ComputeOptimization.md) says the 16-bit stores
    # "can be interleaved very easily in the inner-loop code" while the 32-bit version has
    # "difficulties to schedule load/store/compute operations"; its 16-bit listing keeps all twelve
    # 512-bit vector registers (x0-x11) busy in the loop, and a 32-lane int32 result needs two.  So
    # when an accumulator's output exceeds one vector register in a blocked kernel the model hides
    # none of its stores (store_hide does not apply) and charges this much per accumulator for the
    # conversion that no longer fuses into the store.  With 24 = call + two lock hand-offs, 64 blocks
    # of two accumulators, 16 = four k steps at ii 4 and 8 = the stores of two 1,024-bit outputs:
    # (1750 - 24 - 64 * (16 + 2 * 0.611 + 8)) / (64 * 2) = 0.873, about one vector op per
    # accumulator.  Modelling the kernel as 2 x 2 blocks of <4,8,8> instead gives the same value.
    # The unblocked first version keeps its overlap (AMD measured 2,092 cycles with 32-bit and 2,089
    # with 16-bit output), and so does the model (one accumulator: not "blocked").
    wide_output_cycles=0.873,
    # Assumed from the architecture, not fitted: the VLIW word has one vector ALU slot
    # (versal-devices.md "VLIW up to 7-way"), so each exposed vector op costs one cycle.  The
    # bias + ReLU figures are predicted with it (held out; see validation.md).
    vector_op_cycles=1.0,
    # Assumed: one scalar store issue per cycle (versal-devices.md: one store unit per tile).
    element_store_cycles=1.0,
    sources=MappingProxyType(
        {
            "call_cycles": "assumed",
            "acc_overhead_cycles": f"fitted: {SPEC_DENSE} i8xi8 and i16xi8 base GOPS",
            "acc64_op_cycles": f"fitted: {SPEC_DENSE} i16xi16 base GOPS",
            "store_hide_cycles": f"bounded by: {SPEC_DENSE} i16xi8 base GOPS",
            "wide_output_cycles": f"fitted: {SPEC_TUTORIAL}, 32-bit output, 1,750 cycles",
            "vector_op_cycles": f"assumed: one vector slot per VLIW word ({SPEC_DEVICES})",
            "element_store_cycles": f"assumed: one store unit ({SPEC_DEVICES})",
        }
    ),
)

# The constants of every generation: no published figure measures this kernel on AIE1 or AIE-MLv2,
# so they reuse the AIE-ML fit (per-generation constants would be a field of the device catalog).
KERNEL_CONSTANTS: KernelConstants = AIE_ML_CONSTANTS


@dataclass(frozen=True)
class KernelShape:
    """One instantiation of the Dense kernel template (what ``layers.h`` sets), plus its tile role."""

    mmul: tuple[int, int, int]
    batch: int  # BATCH: padded batch, a multiple of blocking * M
    ks: int  # KS: input features of this tile (multiple of K)
    ns: int  # NS: output features of this tile (multiple of blocks_n * N)
    in_bits: int
    weight_bits: int
    out_bits: int
    acc_bits: int  # accumulator lane width (32 for float accumulation)
    bias: bool  # accumulators start from the bias (first tile of a cascade row)
    relu: bool
    cascade_in: bool
    cascade_out: bool
    out_panel: int  # OUT_P; == N means one vector store per accumulator
    blocking: int = 2  # row blocks of A per iteration: dense.h uses 2 (x 2 column blocks)
    col_blocking: int | None = None  # column blocks of W per iteration; None: same as ``blocking``

    @property
    def blocks_n(self) -> int:
        return self.blocking if self.col_blocking is None else self.col_blocking

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
    bound: str  # the largest part: "compute", "load", "store", "cascade", "overhead" or "post"
    blocks: int
    block_cycles: float
    ii: int  # inner-loop initiation interval
    mac_ii: float  # MAC cycles per inner iteration
    load_ii: int  # vector-load cycles per inner iteration
    macs: int
    peak_macs_per_cycle: float
    post: float = 0.0  # a fused activation / softmax after the stores (last tiles only)

    @property
    def efficiency(self) -> float:
        """Share of the tile's peak MAC rate this call sustains."""
        return self.macs / (self.peak_macs_per_cycle * self.cycles) if self.cycles else 0.0


def cascade_words(mn: int, acc_bits: int, cascade_bits: int) -> int:
    """Cascade transfers per accumulator (dense.h moves ``CASC_LANES`` lanes per word)."""
    return mn // cascade_chunk_lanes(mn, acc_bits, cascade_bits)


def mac_cycles(macs: float, gen: Generation, pair: tuple[str, str]) -> float:
    """Cycles to issue ``macs`` multiply-accumulates at the catalog's peak rate."""
    return macs / gen.macs_per_cycle[pair]


def mmul_step_cycles(mmul: tuple[int, int, int], in_bits: int, weight_bits: int, gen: Generation,
                     pair: tuple[str, str]) -> tuple[int, int, float]:
    """(cycles to load one A tile, to load one B tile, to compute) of one ``aie::mmul<M, K, N>``
    step: A (M x K) on one of the two load units, B (K x N) on the other, the MACs at the
    catalog's rate (versal-devices.md: a shape is limited by "the slowest of loading A, loading B,
    computing")."""
    m, k, n = mmul
    unit_bits = gen.load_bits_per_cycle // 2  # two load units (versal-devices.md)
    return (math.ceil(m * k * in_bits / unit_bits), math.ceil(k * n * weight_bits / unit_bits),
            mac_cycles(m * k * n, gen, pair))


def dense_kernel_cycles(shape: KernelShape, gen: Generation, pair: tuple[str, str]) -> KernelCycles:
    """Cycle model of one call (see the module docstring for the formula)."""
    c = KERNEL_CONSTANTS
    m, k, n = shape.mmul
    bm, bn = shape.blocking, shape.blocks_n
    if shape.batch % (bm * m) or shape.ns % (bn * n) or shape.ks % k:
        raise ValueError(f"kernel shape {shape} is not a whole number of {bm}x{bn} mmul blocks")
    accs = bm * bn
    mn = m * n
    blocks = (shape.batch // (m * bm)) * (shape.ns // (n * bn))
    kb = shape.ks // k
    unit_bits = gen.load_bits_per_cycle // 2  # two load units (versal-devices.md)

    mac_iter = mac_cycles(accs * m * k * n, gen, pair)
    # A-side operands on one load unit, W-side on the other (versal-devices.md: a shape is limited
    # by "the slowest of loading A, loading B, computing"; dense-on-aie-ml.md: A and W from
    # different banks, two loads per cycle).
    a_step, w_step, _ = mmul_step_cycles(shape.mmul, shape.in_bits, shape.weight_bits, gen, pair)
    a_loads, w_loads = bm * a_step, bn * w_step
    load_iter = max(a_loads, w_loads)
    ii = max(math.ceil(mac_iter), load_iter, 1)

    acc64 = shape.acc_bits == 64
    # Prologue: bias vectors (one per column block) loaded, upshifted, copied to the other rows.
    bias_load = math.ceil(bn * math.ceil(mn * BIAS_BITS / unit_bits) / 2) if shape.bias else 0
    acc_ops = accs if shape.bias else 0  # upshift or copy into each accumulator
    ops = acc_ops
    # Epilogue: ReLU on each output vector.
    if shape.relu and shape.stores:
        ops += accs * math.ceil(mn * shape.out_bits / VECTOR_ALU_BITS)
    words = cascade_words(mn, shape.acc_bits, gen.cascade_bits)
    casc = accs * words * (int(shape.cascade_in) + int(shape.cascade_out))
    # Outputs wider than one vector register in a blocked kernel: conversion not fused into the
    # store, stores not hidden behind the MAC drain (see wide_output_cycles).
    wide = shape.stores and accs > 1 and mn * shape.out_bits > VECTOR_REGISTER_BITS
    if not shape.stores:
        store = 0.0
    elif shape.out_panel == n:
        store = float(accs * math.ceil(mn * shape.out_bits / gen.store_bits_per_cycle))
    else:  # dense.h scatters the block element by element into the wider panel
        store = accs * mn * c.element_store_cycles
    exposed_store = max(0.0, store - (0.0 if wide else c.store_hide_cycles))
    exposed_store += accs * c.wide_output_cycles if wide else 0.0
    per_acc = c.acc_overhead_cycles + (c.acc64_op_cycles if acc64 else 0.0)
    fixed = accs * per_acc + ops * c.vector_op_cycles + (acc_ops * c.acc64_op_cycles if acc64 else 0.0)
    serial = fixed + bias_load + casc + exposed_store
    block = kb * ii + serial
    cycles = c.call_cycles + blocks * block

    inner = blocks * kb * ii
    mac_bound = mac_iter >= load_iter
    parts = {
        "compute": inner if mac_bound else 0.0,
        "load": (0.0 if mac_bound else inner) + blocks * bias_load,
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


def role_shapes(plan: DensePlan, types: DenseTypes, relu: bool) -> dict[str, KernelShape]:
    """The distinct kernel instantiations of a layer, by role."""
    acc_bits = 32 if types.is_float else types.acc_bits
    base = dict(
        mmul=plan.mmul,
        batch=plan.batch_pad,
        ks=plan.k_slice,
        ns=plan.n_slice,
        in_bits=types.input.container_bits,
        weight_bits=element_bits(types.weight),  # 4 for packed int4 weights
        out_bits=types.output.container_bits,
        acc_bits=acc_bits,
        out_panel=plan.out_panel,
    )
    has_bias = types.bias is not None
    shapes: dict[str, KernelShape] = {}
    for pos in sorted({0, plan.cas_len - 1, min(1, plan.cas_len - 1)}):
        role = cascade_role(plan, pos)
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
    """Cycle model of every distinct tile role of a planned Dense layer (a fused activation /
    softmax on the roles that store the output: :func:`post_cycles`)."""
    gen = device.generation
    out = {role: dense_kernel_cycles(s, gen, types.pair) for role, s in role_shapes(plan, types, relu).items()}
    extra = post_cycles(plan)
    if extra:
        for role in ("single", "last"):
            if role in out:
                k = out[role]
                post = extra
                bound = "post" if post > max(k.compute, k.load, k.store, k.cascade, k.overhead) else k.bound
                out[role] = replace(k, cycles=k.cycles + post, post=post, bound=bound)
    return out


def post_cycles(plan: DensePlan) -> int:
    """The activation / softmax fused into the layer's last tiles (``dense.h`` DensePost, scalar,
    ``activation_fixed.h``; constants in ``perf/activation.py``, assumed): an activation over every
    code of the real batch rows; a softmax per real batch row over the real outputs, each row
    gathered out of the output panels and scattered back (the padded rows' zeros: vector stores,
    not counted)."""
    if not plan.post:
        return 0
    if plan.post.startswith("fp32:"):  # cnn_float_post.h's float32 operations (perf/activation.py FP32_*)
        function = plan.post[len("fp32:"):]
        if function == "softmax":
            return fp32_softmax_cycles(plan.batch, plan.out_features) + plan.batch * (plan.out_features + plan.n_slice) * COPY_CYCLES
        return fp32_activation_cycles(plan.batch * plan.n_slice, function)
    if plan.post == "softmax":
        copies = plan.batch * (plan.out_features + plan.n_slice)
        return softmax_cycles(plan.batch, plan.out_features) + copies * COPY_CYCLES
    return activation_cycles(plan.batch * plan.n_slice, plan.post == "interp")
