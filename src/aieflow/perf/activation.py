"""Cycle constants of the activation and softmax code: the scalar code (``templates/kernels/activation_fixed.h``),
shared by the DAG's standalone kernels (``dag/perf.py``), the CNN's post layer (``cnn/perf.py``) and
the activation / softmax fused into a Dense kernel (``perf/kernel.post_cycles``), and the DAG kernels'
vector forms (``dag_kernels.h``: ``aie::parallel_lookup``, the vector interpolation and softmax rows).

None has a published figure: each is **assumed** from the operations the code issues (stated at
each constant), and none was fitted.  They are the least certain part of any estimate that uses
them.
"""

from __future__ import annotations

from types import MappingProxyType

# Activation, scalar: per element a load, the index arithmetic, a data-dependent table load and a
# store.  Assumed: 4 cycles per element for a full table, 12 for the interpolation (a 64-bit
# multiply, emulated with 32-bit scalar multiplies, a shift and the clamp on top).
ACT_TABLE_CYCLES = 4
ACT_INTERP_CYCLES = 12
# Softmax, scalar: per element 2 cycles for the row maximum, 4 for the table lookup and the sum, 8
# for the 64-bit multiply, shift, clamp and store; per row 300 for the 64-bit software divide.
# Assumed.
SM_MAX_CYCLES = 2
SM_EXP_CYCLES = 4
SM_OUT_CYCLES = 8
SM_ROW_CYCLES = 300
# A scalar copy of one element between layouts (a load and a store on separate slots, plus the
# address arithmetic), as an in-memory transpose or the fused softmax's gather / scatter of a row
# out of the Dense output panels.  Assumed: 2 cycles per element.
COPY_CYCLES = 2


# The I-BERT integer forms (ops/activation.py), computed per element on the scalar unit.  Counted from
# activation_fixed.h, assumed 4 cycles per 64-bit multiply (composed from 32-bit multiplies, as
# ACT_INTERP_CYCLES assumes) and one per other operation: iexp 4 multiplies (D M, z L2, w^2, A poly)
# + 6 shifts / compares / subtractions = 22 (in place of the table read, SM_EXP_CYCLES / the vector
# form's SM_VEC_GATHER_CYCLES); igelu 4 multiplies (|x| C1, A w, . w, x (2^28 + L)) + 8 shifts,
# compares, the clamp, + a load and a store = 26 per element.  Assumed, no published figure.
SM_IEXP_CYCLES = 22
ACT_POLY_CYCLES = 26


# fp32 post layers (cnn_float_post.h, scalar: the CNN post layer and a fused post of an fp32 Dense layer): FP32_OP_CYCLES per float32 operation (assumed: one
# scalar float op issued on lane 0 of the vector unit, as recurrent/costs.py AIE_HEAD_MAC_CYCLES
# "float"; the AIE1 intrinsics guide: scalar float ops run in softfloat unless
# AIE_OPTION_SCALAR_FLOAT_ON_VECTOR maps them onto the vector datapath, docs/conv.md), the operations counted in ops/activation.py's definitions: exp 24 (range reduction 8,
# polynomial 13, scaling 3); a division FP32_DIV_OPS (assumed: AIE1 has no float divider, a
# reciprocal sequence in software); no published cycle figure.
FP32_OP_CYCLES = 2
FP32_EXP_OPS = 24
FP32_DIV_OPS = 16
FP32_FUNCTION_OPS = MappingProxyType({
    "relu": 2, "leaky_relu": 2, "clip": 2, "hard_sigmoid": 4, "hard_swish": 5, "elu": FP32_EXP_OPS + 4,
    "selu": FP32_EXP_OPS + 4, "sigmoid": FP32_EXP_OPS + 3 + FP32_DIV_OPS, "tanh": FP32_EXP_OPS + 4 + FP32_DIV_OPS,
    "silu": FP32_EXP_OPS + 4 + FP32_DIV_OPS})
FP32_SOFTMAX_VALUE_OPS = FP32_EXP_OPS + 5  # max, subtract, exp, add, the final multiply


def fp32_activation_cycles(values: int, function: str) -> int:
    """An fp32 activation (``cnn_float_post.h`` ``activation_f32``) over ``values`` values."""
    return values * FP32_FUNCTION_OPS[function] * FP32_OP_CYCLES


def fp32_softmax_cycles(rows: int, features: int) -> int:
    """An fp32 softmax (``cnn_float_post.h`` ``post``) over ``rows`` rows of ``features`` values."""
    return rows * (features * FP32_SOFTMAX_VALUE_OPS + FP32_DIV_OPS) * FP32_OP_CYCLES


def activation_cycles(values: int, interpolated: bool) -> int:
    """An activation over ``values`` codes."""
    return values * (ACT_INTERP_CYCLES if interpolated else ACT_TABLE_CYCLES)


def softmax_cycles(rows: int, features: int, integer: bool = False) -> int:
    """A softmax over ``rows`` rows of ``features`` contiguous codes (``integer``: the integer exp)."""
    exp = SM_IEXP_CYCLES if integer else SM_EXP_CYCLES
    return rows * (features * (SM_MAX_CYCLES + exp + SM_OUT_CYCLES) + SM_ROW_CYCLES)


# ----------------------------------------------------------------------------- vector forms
# dag_kernels.h Activation / Softmax take a vector form where these predicates say so (the emitter
# writes the same answer into the kernel's config); the scalar constants above cost the rest.
#
# Activation, 8-bit input, full table (``lut``): aie::parallel_lookup of 32 lanes.  Assumed: one
# table access per lane, ``lut_parallel_accesses`` of them per cycle (UG1603: 4 on AIE-ML, 8 on
# AIE-MLv2), so 32 / P cycles per 32 lanes, plus ACT_LUT_EXTRA_CYCLES for the vector load, the
# int16 -> int8 SRS and the store where they do not overlap the lookups.  No published cycle figure.
ACT_LUT_LANES = 32
ACT_LUT_EXTRA_CYCLES = 2
# Activation, 16-bit input, interpolation (``vector``): per element the two knots read by the scalar
# unit (a lane extract, two data-dependent loads on the two load units, two stores on the one store
# unit: the store unit bounds it at 2 cycles), per 16 lanes 6 vector operations (downshift, upshift,
# sub, mul, mac, SRS; then max, min and the narrowing SRS share bundles with them and the store).
# Assumed, no published figure.
ACT_VEC_GATHER_CYCLES = 2
ACT_VEC_CYCLES = 6
ACT_VEC_LANES = 16
# Softmax, rows of whole 16-lane vectors: per 16 lanes 1 cycle for the running maximum, 3 for the
# index (widen, sub + downshift, min, store), 1 for the sum, 5 for the output (mul, accumulator add,
# mac, SRS, min, narrowing SRS, store); per element 1 for the exp read (two loads on the two load
# units and one store); per row SM_VEC_ROW_CYCLES for reduce_max, reduce_add and the broadcast, and
# SM_VEC_NORM_CYCLES for S's bit length (a 6-step binary search, ~3 cycles a step), the shift and
# three stores.  Per group of 16 rows SM_RECIP_GROUP_CYCLES for the 16 reciprocals at once
# (row_recip.h softmax_inv16): counted from the code, 78 vector operations of which 17 are 32 x
# 32-bit multiplies into 64-bit lanes, assumed one operation per cycle and 4 cycles per such multiply
# (composed from 16-bit multiplies on AIE-ML): 78 + 17 * 3 = 129.  (Was SM_ROW_CYCLES, the 300-cycle
# software divide, per row.)  Assumed, no published figure.
SM_VEC_CYCLES = 10
SM_VEC_GATHER_CYCLES = 1
SM_VEC_ROW_CYCLES = 20
SM_VEC_NORM_CYCLES = 24
SM_RECIP_GROUP_CYCLES = 129
# The vector rows with a run-time key padding mask (SoftmaxVec KEYED, dag_kernels.h SoftmaxPadded): per 16
# lanes the kept lanes are formed three times (for the maximum, the index and the exp entries), each a
# 16-byte load of the sample's mask row and an aie::ge (2 operations), plus three aie::select and the store
# of the zeroed exp entries: 3 * 2 + 4 = 10; a constant attention mask combined with it adds a load of its
# KEEP row and an aie::min to each of the three (6).  Counted from the code, assumed one operation per cycle
# and none overlapped with the row's other work (an upper estimate), no published figure.
SM_VEC_KEEP_CYCLES = 10
SM_VEC_CONST_KEEP_CYCLES = 6


def activation_form(types, generation) -> str:
    """``lut`` (8-bit input, full table, a generation with aie::lut), ``vector`` (16-bit input,
    interpolation) or ``scalar``; float types: ``float``."""
    if types.is_float:
        return "float"
    if types.variant == "polynomial":
        return "polynomial"
    if types.segment_bits == 0 and types.input.container_bits == 8 and generation.lut_parallel_accesses > 0:
        return "lut"
    if types.input.container_bits == 16 and 1 <= types.segment_bits <= 14:
        return "vector"
    return "scalar"


def softmax_vectorised(types, features: int, masked: bool = False, runtime: bool = False) -> bool:
    """Whether ``dag_kernels.h`` Softmax / SoftmaxPadded takes its vector rows (its ``VEC``): integer rows of
    whole 16-lane vectors, unmasked or with a run-time key padding mask (``runtime``, SoftmaxPadded: a
    constant attention mask combined with it or not); a constant attention mask alone (``masked``, not
    ``runtime``) takes the scalar rows of ``activation_fixed.h``."""
    return (not masked or runtime) and not types.is_float and features % 16 == 0 and features > 0


def activation_form_cycles(values: int, form: str, generation) -> int:
    """An activation over ``values`` codes in the given form (the scalar tail after the vectors at
    the scalar constants)."""
    if form == "lut":
        vec = values // ACT_LUT_LANES
        per = ACT_LUT_LANES // generation.lut_parallel_accesses + ACT_LUT_EXTRA_CYCLES
        return vec * per + (values - vec * ACT_LUT_LANES) * ACT_TABLE_CYCLES
    if form == "polynomial":
        return values * ACT_POLY_CYCLES
    if form == "vector":
        vec = values // ACT_VEC_LANES
        return (vec * (ACT_VEC_LANES * ACT_VEC_GATHER_CYCLES + ACT_VEC_CYCLES)
                + (values - vec * ACT_VEC_LANES) * ACT_INTERP_CYCLES)
    return activation_cycles(values, form == "interpolated")


def softmax_vector_cycles(rows: int, features: int, integer: bool = False, runtime: bool = False,
                          constant: bool = False) -> int:
    """The vector softmax over ``rows`` rows of ``features`` (a multiple of 16) codes (``integer``: the
    integer exp per element in place of the table read; ``runtime``: a run-time key padding mask's keep
    lanes, ``constant``: with a constant attention mask combined)."""
    gather = SM_IEXP_CYCLES if integer else SM_VEC_GATHER_CYCLES
    per16 = SM_VEC_CYCLES + ((SM_VEC_KEEP_CYCLES + (SM_VEC_CONST_KEEP_CYCLES if constant else 0)) if runtime else 0)
    return (rows * ((features // 16) * per16 + features * gather + SM_VEC_ROW_CYCLES
                    + SM_VEC_NORM_CYCLES)
            + -(-rows // 16) * SM_RECIP_GROUP_CYCLES)
