"""The DAG's vector activation and softmax kernels (issue 19, dag_kernels.h): 8-bit tables through
aie::parallel_lookup, 16-bit interpolation in vector lanes, softmax rows in vector lanes, on VEK280
(AIE-ML) and VEK385 (AIE-MLv2), int8 and int16, run on x86 bit for bit against the emulation
(random codes, the verify's edge rows, saturating inputs, all-equal softmax rows); the emulation
itself is checked against independent references in tests/test_activation.py, and the shim's lookup
against the documented layout in tests/test_shim_lut.py.  Also: which form each kernel's config
names, and that the cycle model follows the form."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn

import aieflow
from aieflow.devices import get_device
from aieflow.perf import activation as pa

FEATURES = 16


class Acts(nn.Module):
    """Standalone GELU, SiLU, sigmoid, tanh and a softmax head (the residual Add makes it a graph)."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(FEATURES, 32), nn.Linear(32, 32), nn.Linear(32, 32),
                                          nn.Linear(32, 16))

    def forward(self, x):
        h = nn.functional.gelu(self.a(x))
        g = torch.sigmoid(self.b(h)) + torch.tanh(self.c(nn.functional.silu(h)))
        return torch.softmax(self.d(g + h), dim=-1)


def _data(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, FEATURES)) * 2.0).astype(np.float32)


def _layers_h(d) -> str:
    (name,) = [p for p in d.files if p.endswith("layers.h")]
    return d.files[name]


@pytest.mark.parametrize("device,precision", [("vek280", "int8"), ("vek385", "int8"), ("vek280", "int16"),
                                              ("vek385", "int16")])
def test_vector_kernels_run_bit_exact_on_x86(device, precision):
    torch.manual_seed(19)
    x = _data(64, 19)
    # batch 16: the VEK385 int8 Dense takes AIE-MLv2's 8x8x8 mmul blocked 2 x 2 (16 rows per iteration)
    d = aieflow.compile(Acts().eval(), device=device, example_input=x[:16], calibration=x,
                        config={"precision": precision, "batch": 16})
    assert type(d).__name__ == "DagDesign"
    functions = sorted(n.attrs["function"] for n in d.graph.nodes if n.op == "activation")
    assert functions == ["gelu", "sigmoid", "silu", "tanh"]
    text = _layers_h(d)
    p = get_device(device).generation.lut_parallel_accesses
    if precision == "int8":  # every activation a parallel lookup with the generation's access count
        assert text.count(f"LUT_P = {p}, LUT_V = {get_device(device).generation.lut_repeat_bits // 16};") == 4
    else:  # every activation the vector interpolation
        assert len(re.findall(r"LUT_P = 0, LUT_V = 1;\n    static constexpr bool VEC = true;", text)) == 4
    assert "static constexpr bool VEC = true;  // vector rows" in text  # the softmax
    v = d.verify(samples=32)  # the verify's edge rows first, then random codes
    assert v.ok, v.verdict()
    v = d.verify(np.concatenate([x[:8] * 8.0, -x[8:16] * 8.0]))  # saturating inputs, both signs
    assert v.ok, v.verdict()


def test_softmax_rows_of_equal_logits_run_bit_exact_on_x86():
    torch.manual_seed(3)
    m = Acts().eval()
    with torch.no_grad():  # every softmax row equal: each output is 1/16
        m.d.weight.zero_()
        m.d.bias.fill_(0.25)
    x = _data(32, 3)
    d = aieflow.compile(m, device="vek280", example_input=x[:8], calibration=x,
                        config={"precision": "int8", "batch": 8})
    y = d.predict(x[:8], raw=True)
    assert np.all(y == y.flat[0]) and y.flat[0] == round(2.0**7 / 16)  # fixed<8,7>: 1/16 is 8 codes
    v = d.verify(x[:16])
    assert v.ok, v.verdict()


def test_the_cycle_model_follows_the_kernel_form():
    ml, v2 = get_device("vek280").generation, get_device("vek385").generation
    # 8-bit tables: 32 lanes per 32 / P cycles of lookups + 2; a scalar tail at the scalar constant
    assert pa.activation_form_cycles(1024, "lut", ml) == 32 * (32 // 4 + pa.ACT_LUT_EXTRA_CYCLES)
    assert pa.activation_form_cycles(1024, "lut", v2) == 32 * (32 // 8 + pa.ACT_LUT_EXTRA_CYCLES)
    assert pa.activation_form_cycles(40, "lut", ml) == (32 // 4 + 2) + 8 * pa.ACT_TABLE_CYCLES
    assert pa.activation_form_cycles(1024, "lut", ml) < pa.activation_cycles(1024, False) / 8
    # 16-bit interpolation: per 16 lanes 16 two-knot reads and the vector operations
    assert pa.activation_form_cycles(32, "vector", ml) == 2 * (16 * pa.ACT_VEC_GATHER_CYCLES + pa.ACT_VEC_CYCLES)
    assert pa.activation_form_cycles(32, "vector", ml) < pa.activation_cycles(32, True)
    # softmax rows of 16: one vector per row, the 16 rows' reciprocals in one vector pass per group
    assert pa.softmax_vector_cycles(4, 16) == (4 * (pa.SM_VEC_CYCLES + 16 + pa.SM_VEC_ROW_CYCLES + pa.SM_VEC_NORM_CYCLES)
                                               + pa.SM_RECIP_GROUP_CYCLES)
    assert pa.softmax_vector_cycles(17, 16) - pa.softmax_vector_cycles(16, 16) == (
        pa.SM_VEC_CYCLES + 16 + pa.SM_VEC_ROW_CYCLES + pa.SM_VEC_NORM_CYCLES + pa.SM_RECIP_GROUP_CYCLES)
    assert pa.softmax_vector_cycles(4, 16) < pa.softmax_cycles(4, 16)
