"""Cycle constants of the scalar activation and softmax code (``templates/kernels/activation_fixed.h``),
shared by the DAG's standalone kernels (``dag/perf.py``), the CNN's post layer (``cnn/perf.py``) and
the activation / softmax fused into a Dense kernel (``perf/kernel.post_cycles``).

None has a published figure: each is **assumed** from the operations the code issues (stated at
each constant), and none was fitted.  They are the least certain part of any estimate that uses
them.
"""

from __future__ import annotations

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


def activation_cycles(values: int, interpolated: bool) -> int:
    """An activation over ``values`` codes."""
    return values * (ACT_INTERP_CYCLES if interpolated else ACT_TABLE_CYCLES)


def softmax_cycles(rows: int, features: int) -> int:
    """A softmax over ``rows`` rows of ``features`` contiguous codes."""
    return rows * (features * (SM_MAX_CYCLES + SM_EXP_CYCLES + SM_OUT_CYCLES) + SM_ROW_CYCLES)
