"""A standalone BatchNorm (issue 17 item 5): one that folds neither into the layer before it nor into
the one after it becomes a per-feature ``scale_shift`` node, ``y = x s + t`` (ops/scale_shift.py).

Float: the import equals PyTorch / onnxruntime (1e-5).  Fixed point and bf16: the family's emulation
equals a reference written here from the module's definition in Python integers / numpy bit
operations (random codes, the input type's edge codes, saturating shifts; bf16: random values over
40 binades, signed zeros, subnormals, overflow, NaN), and the multiplier and shift codes equal an
independent rounding of s and t.  On the DAG path the int8 and the bf16 kernels (dag_kernels.h
ScaleShift, dag_kernels_bf16.h ScaleShiftBf16) run bit-exact with predict on x86 (VEK280); fp32 is
refused by name.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from onnx import helper
from test_frontend_parity import (
    EPS,
    FP32,
    INT8,
    _bn_inits,
    _export,
    _gemm_model,
    _ort,
    _randomise_bn,
    _torch,
    needs_gxx,
)
from torch import nn

import aieflow
from aieflow.api import _state
from aieflow.dag.design import DagDesign
from aieflow.dag.plan import plan_dag
from aieflow.errors import PlanError
from aieflow.frontends import import_onnx, import_torch
from aieflow.numerics.types import FloatType
from aieflow.ops.registry import family
from aieflow.ops.scale_shift import ScaleShiftTypes
from aieflow.pipeline import run_pipeline


class AddBnAdd(nn.Module):
    """A BatchNorm after a residual Add whose output feeds another Add: neither fold applies."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.bn = (
            nn.Linear(16, 16),
            nn.Linear(16, 16),
            nn.BatchNorm1d(16, eps=EPS),
        )

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        z = self.bn(self.fc2(h) + h)
        return z + h


def _model(name: str):
    torch.manual_seed(1)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    if name == "bn_last":
        m = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.BatchNorm1d(16, eps=EPS))
    else:
        m = AddBnAdd()
    return _randomise_bn(m, seed=13), x


def _s_t(bn: nn.modules.batchnorm._BatchNorm):
    s = bn.weight.detach().double().numpy() / np.sqrt(bn.running_var.double().numpy() + bn.eps)
    return s, bn.bias.detach().double().numpy() - bn.running_mean.double().numpy() * s


@pytest.mark.parametrize("name, bn_name", [("bn_last", "2"), ("add_bn_add", "bn")])
def test_a_batchnorm_neither_fold_takes_is_a_scale_shift_equal_to_pytorch_and_onnxruntime(
    name, bn_name
):
    model, x = _model(name)
    bn = next(m for m in model.modules() if isinstance(m, nn.BatchNorm1d))
    s, t = _s_t(bn)
    proto = _export(model, x[:2], "torchscript-nofold")
    for source, graph in (
        ("pytorch", import_torch(model, x[:2]).graph),
        ("onnx", import_onnx(proto).graph),
    ):
        (node,) = [n for n in graph.nodes if n.op == "scale_shift"]
        assert source == "onnx" or node.name == bn_name
        np.testing.assert_allclose(node.params["scale"], s, rtol=1e-6, err_msg=source)
        np.testing.assert_allclose(node.params["shift"], t, rtol=1e-6, atol=1e-7, err_msg=source)
    want = _torch(model, x)
    np.testing.assert_allclose(_ort(proto, x), want, rtol=1e-5, atol=1e-5)
    for source in (model, proto):
        emu = aieflow.emulate(source, device="vck190", example_input=x[:2], config=FP32)
        np.testing.assert_allclose(emu.predict(x), want, rtol=1e-5, atol=1e-5)
        q = aieflow.emulate(
            source, device="vek280", example_input=x[:2], calibration=x, config=INT8
        )
        assert np.abs(q.predict(x) - want).max() < 0.05 * np.abs(want).max()


@pytest.mark.parametrize(
    "extra",
    [
        [
            helper.make_node("Relu", ["h"], ["r"], name="act"),  # after a ReLU, the model output
            helper.make_node(
                "BatchNormalization",
                ["r", "scale", "beta", "mean", "var"],
                ["y"],
                name="norm",
                epsilon=EPS,
            ),
        ],
        [
            helper.make_node(
                "BatchNormalization",
                ["h", "scale", "beta", "mean", "var"],
                ["n"],
                name="norm",
                epsilon=EPS,
            ),
            helper.make_node("Add", ["n", "h"], ["y"], name="res"),
        ],  # the Add's output fans out, the BatchNorm feeds an Add
    ],
)
def test_onnx_batchnorms_neither_fold_takes_are_standalone(extra):
    rng = np.random.default_rng(0)
    model = _gemm_model(
        extra, {"w": rng.standard_normal((6, 4)), "b": rng.standard_normal(4), **_bn_inits(rng)}
    )
    x = rng.standard_normal((8, 6)).astype(np.float32)
    emu = aieflow.emulate(model, device="vck190", example_input=x, config=FP32)
    assert [n.name for n in emu.graph.nodes if n.op == "scale_shift"] == ["norm"]
    np.testing.assert_allclose(emu.predict(x), _ort(model, x), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------- bit-exact numerics


def _round_half_even_div(v: int, shift: int) -> int:
    if shift == 0:
        return v
    q, r = divmod(v, 1 << shift)  # floor division, 0 <= r < 2^shift
    half = 1 << (shift - 1)
    return q + 1 if r > half or (r == half and q % 2) else q


def _reference_codes(x: np.ndarray, m, c, shift_t: int, shift: int, width: int) -> np.ndarray:
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    out = np.empty(x.shape, dtype=np.int64)
    for i, j in np.ndindex(*x.shape):
        acc = int(x[i, j]) * int(m[j]) + int(c[j]) * 2**shift_t
        out[i, j] = min(hi, max(lo, _round_half_even_div(acc, shift)))
    return out


def _quantised_node(precision: str, scale_factor: float = 1.0):
    model, x = _model("bn_last")
    with torch.no_grad():
        model[2].weight.mul_(scale_factor)
    emu = aieflow.emulate(
        model, device="vek280", example_input=x[:2], calibration=x, config={"precision": precision}
    )
    return emu.graph.node("2")


@pytest.mark.parametrize(
    "precision, scale_factor", [("int8", 1.0), ("int16", 1.0), ("int8", 40.0), ("int16", 0.01)]
)
def test_fixed_point_emulation_is_bit_exact_against_an_integer_reference(precision, scale_factor):
    node = _quantised_node(precision, scale_factor)
    t = node.types
    width = t.input.width
    assert t.output.rounding.value == "conv_even" and t.output.saturation.value == "saturate"
    # the codes: s and t rounded half to even onto their types, independently
    s, c = node.params["scale"].astype(np.float64), node.params["shift"].astype(np.float64)
    m_want = np.clip(
        np.round(s * 2.0**t.scale.frac), -(2 ** (t.scale.width - 1)), 2 ** (t.scale.width - 1) - 1
    )
    c_want = np.clip(
        np.round(c * 2.0**t.offset.frac),
        -(2 ** (t.offset.width - 1)),
        2 ** (t.offset.width - 1) - 1,
    )
    np.testing.assert_array_equal(node.params["scale_q"], m_want)  # np.round: half to even
    np.testing.assert_array_equal(node.params["shift_q"], c_want)
    assert (
        t.shift_t == t.input.frac + t.scale.frac - t.offset.frac
        and t.shift == t.input.frac + t.scale.frac - t.output.frac
    )
    rng = np.random.default_rng(9)
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    x = rng.integers(lo, hi + 1, size=(200, 16))
    x[:4] = [[lo] * 16, [hi] * 16, [0] * 16, [lo + 1] * 16]  # edge codes
    got = family("scale_shift").emulate(node, x)
    want = _reference_codes(
        x, node.params["scale_q"], node.params["shift_q"], t.shift_t, t.shift, t.output.width
    )
    np.testing.assert_array_equal(got, want)
    # an output three bits finer than calibration chose: the edge codes saturate
    fine = node.evolve(
        types=replace(t, output=replace(t.output, frac=t.output.frac + 3), shift=t.shift - 3)
    )
    want = _reference_codes(
        x, node.params["scale_q"], node.params["shift_q"], t.shift_t, t.shift - 3, t.output.width
    )
    assert ((want == lo) | (want == hi)).sum() > 10
    np.testing.assert_array_equal(family("scale_shift").emulate(fine, x), want)


def _bf16(v: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest, ties to even) as float32, by bit operations."""
    b = np.asarray(v, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def test_bf16_emulation_is_the_float32_product_and_sum_rounded_once_to_bf16():
    model, x = _model("bn_last")
    emu = aieflow.emulate(model, device="vek280", example_input=x[:2], config={"precision": "bf16"})
    node = emu.graph.node("2")
    s, c = _bf16(node.params["scale"]), _bf16(node.params["shift"])
    np.testing.assert_array_equal(node.params["scale_q"], s)
    np.testing.assert_array_equal(node.params["shift_q"], c)
    rng = np.random.default_rng(4)
    xs = _bf16(
        rng.standard_normal((300, 16)).astype(np.float32)
        * np.float32(2.0) ** rng.integers(-20, 20, (300, 16))
    )
    with np.errstate(over="ignore", invalid="ignore"):
        xs[:6] = [
            [0.0] * 16,
            [-0.0] * 16,
            [2.0**-130] * 16,
            [-(2.0**-133)] * 16,
            [3e38] * 16,
            [np.nan] * 16,
        ]
        got = family("scale_shift").emulate(node, xs)
        # the float32 product (exact for bf16 x bf16), the float32 sum, one rounding to bf16
        want = _bf16(xs * s[None] + c[None])
    assert np.isinf(want[4]).any() and np.isnan(want[5]).all()
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# ------------------------------------------------------------------------------- mapping


@needs_gxx
def test_a_residual_mlp_with_a_batchnorm_after_the_add_verifies_bit_exact_on_x86():
    """VEK280 int8: Linear, Add, the standalone BatchNorm (the DAG ScaleShift kernel), Add."""
    model, x = _model("add_bn_add")
    design = aieflow.compile(
        model, device="vek280", example_input=x[:2], calibration=x, config=INT8
    )
    assert isinstance(design, DagDesign) and "scale_shift" in [n.op for n in design.graph.nodes]
    result = design.verify(x[:3])
    assert result.ok, result.verdict()
    result = design.verify(samples=3, seed=2)  # type-edge inputs (zeros, extremes)
    assert result.ok, result.verdict()


def test_a_batchnorm_at_the_output_maps_on_the_dag_path_and_predicts_as_emulated(tmp_path):
    model, x = _model("bn_last")
    design = aieflow.compile(
        model, device="vek280", example_input=x[:2], calibration=x, config=INT8
    )
    assert isinstance(design, DagDesign) and design.graph.nodes[-1].op == "scale_shift"
    emu = aieflow.emulate(model, device="vek280", example_input=x[:2], calibration=x, config=INT8)
    np.testing.assert_array_equal(design.predict(x), emu.predict(x))
    assert design.estimate().latency_ns > 0
    design.save(tmp_path / "d")
    # the scale_shift types and codes round-trip through design.json
    loaded = aieflow.load(tmp_path / "d")
    np.testing.assert_array_equal(loaded.predict(x), emu.predict(x))


@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_a_bf16_batchnorm_maps_on_the_dag_path_as_the_bf16_kernel_and_predicts_as_emulated(device):
    model, x = _model("add_bn_add")
    bf16 = {"precision": "bf16"}
    design = aieflow.compile(model, device=device, example_input=x[:2], calibration=x, config=bf16)
    assert isinstance(design, DagDesign) and "scale_shift" in [n.op for n in design.graph.nodes]
    assert "ScaleShiftBf16<aieflow_design::bn_cfg>" in design.files["src/graph.h"]
    emu = aieflow.emulate(model, device=device, example_input=x[:2], calibration=x, config=bf16)
    np.testing.assert_array_equal(design.predict(x).view(np.uint32), emu.predict(x).view(np.uint32))
    assert design.estimate().latency_ns > 0


@needs_gxx
def test_a_bf16_residual_mlp_with_a_batchnorm_after_the_add_verifies_bit_exact_on_x86():
    """VEK280 bf16: Linear, Add, the standalone BatchNorm (dag_kernels_bf16.h ScaleShiftBf16), Add."""
    model, x = _model("add_bn_add")
    design = aieflow.compile(
        model, device="vek280", example_input=x[:2], calibration=x, config={"precision": "bf16"}
    )
    assert "ScaleShiftBf16" in design.files["src/graph.h"]
    edge = x[:8].copy()
    edge[0] = 1e30  # overflow to infinity in float32
    edge[1] = 1e-40  # subnormal inputs
    edge[2] = 1.0 + 2.0**-8  # bf16 ties
    edge[3] = 0.0
    result = design.verify(np.concatenate([edge, x[8:16] * np.float32(300.0)]))
    assert result.ok, result.verdict()
    result = design.verify(samples=16, seed=3)
    assert result.ok, result.verdict()


def test_an_fp32_scale_shift_is_refused_by_name_on_the_dag_path():
    """fp32 never reaches the DAG from compile (VEK280 has no fp32 precision): the plan's own refusal, on
    the bf16 graph with the BatchNorm's types made fp32."""
    model, x = _model("bn_last")
    st = _state(model, "vek280", x[:2], {"precision": "bf16"}, x)
    st = run_pipeline(st, stop_after="quantise")
    fp32 = FloatType("fp32")
    nodes = [
        n.evolve(types=ScaleShiftTypes(fp32, fp32, fp32, fp32, 0, 0))
        if n.op == "scale_shift"
        else n
        for n in st.graph.nodes
    ]
    with pytest.raises(
        PlanError,
        match=r"layer '2': scale_shift kernels are generated for int8 / int16 and, .* for bf16; this layer is fp32",
    ):
        plan_dag(st.graph.with_nodes(nodes), st.device, st.config)
