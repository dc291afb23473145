"""bf16 through the DAG kernels on AIE-ML / AIE-MLv2 (issue 24 item 4): residual Add, LayerNorm,
the activation family and softmax.

The emulator's bf16 numerics are checked against references written here from the documented
algorithms (docs/numerics.md "bf16 DAG kernels"), importing nothing from aieflow: bf16 rounding
by integer arithmetic on the float32 bit pattern (nearest, ties to even; NaN stays NaN), the
activation functions from Python's math module.  The generated C++ (dag_kernels_bf16.h) is then
built against the x86 shim and compared bit for bit with the emulator, and the designs are
compared with float32 PyTorch within the documented tolerance.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
import torch
from test_dag_plan import MiniMixer, Residual

import aieflow
from aieflow.dag.design import DagDesign
from aieflow.ops import activation as act_ops
from aieflow.ops.layernorm import layernorm_bf16

TOLERANCE = 2.0**-6  # bf16 designs: max |y - torch| <= 2^-6 max |torch| (docs/numerics.md)


# ------------------------------------------------------------------ independent references
def ref_bf16(v: float) -> float:
    """float -> float32 -> bf16 (nearest, ties to even) by integers; NaN -> NaN."""
    (u,) = struct.unpack("<I", struct.pack("<f", v))
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x7FFFFF):
        return float("nan")
    lower = u & 0xFFFF
    hi = u >> 16
    if lower > 0x8000 or (lower == 0x8000 and hi & 1):
        hi += 1
    return struct.unpack("<f", struct.pack("<I", (hi & 0xFFFF) << 16))[0]


def f32(v: float) -> float:
    return struct.unpack("<f", struct.pack("<f", v))[0]


def all_bf16() -> np.ndarray:
    return (np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)).view(np.float32)


def ref_function(name: str, x: float) -> float:
    try:
        if name == "relu":
            return x if x > 0 else 0.0  # relu(-0) = +0
        if name == "sigmoid":
            return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0
        if name == "tanh":
            return math.tanh(x)
        if name == "gelu":
            return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))
        if name == "silu":
            return x / (1.0 + math.exp(-x)) if x > -700 else -0.0
        if name == "elu":
            return x if x > 0 else math.expm1(x) + 0.0  # elu(-0) = +0, as relu
        if name == "leaky_relu":
            return x if x >= 0 else f32(0.01) * x
        if name == "hard_swish":
            return x * min(max(x / 6.0 + 0.5, 0.0), 1.0)
        if name == "exp":
            return math.exp(x)
    except OverflowError:
        return float("inf")
    raise AssertionError(name)


def bits(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, dtype=np.float32).view(np.uint32)


def test_reference_rounding_on_ties_subnormals_and_overflow():
    # the test's own rounding against hand-made values (independent of aieflow)
    assert ref_bf16(1.0 + 2.0**-8) == 1.0  # tie, even stays
    assert ref_bf16(1.0 + 3 * 2.0**-8) == 1.0 + 2.0**-6  # tie, odd rounds up
    assert ref_bf16(1.0 + 2.0**-8 + 2.0**-20) == 1.0 + 2.0**-7  # above the tie
    assert ref_bf16(3.4028234663852886e38) == math.inf  # the largest float32 is past the largest bf16: inf
    assert ref_bf16(2.0**-133) == 2.0**-133  # a bf16 subnormal is kept
    assert math.isnan(ref_bf16(math.nan))


def test_to_bf16_matches_the_reference_on_random_and_edge_values():
    from aieflow.numerics.fixed import to_bf16

    rng = np.random.default_rng(3)
    u = rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 1 << 16, 2000, dtype=np.uint32) << np.uint32(16)) | np.uint32(0x8000)
    edge = np.concatenate([u, ties, np.array([0, 0x80000000, 1, 0x007FFFFF, 0x7F7FFFFF, 0x7F800000, 0xFF800000],
                                             dtype=np.uint32)])
    x = edge.view(np.float32)
    got = to_bf16(x)
    want = np.array([ref_bf16(float(v)) for v in x], dtype=np.float32)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert (bits(got)[~nan] == bits(want)[~nan]).all()


@pytest.mark.parametrize("function", ["relu", "sigmoid", "tanh", "gelu", "silu", "elu", "leaky_relu",
                                      "hard_swish"])
def test_bf16_activation_table_is_exactly_rounded_on_every_bf16_input(function):
    table, window, rules = act_ops.bf16_table(function, {})
    x = all_bf16()
    got = act_ops.apply_bf16_table(x, table, window, rules)
    finite = np.isfinite(x)
    want = np.array([ref_bf16(f32(ref_function(function, float(v)))) for v in x[finite]], dtype=np.float32)
    assert (bits(got[finite]) == bits(want)).all(), np.flatnonzero(bits(got[finite]) != bits(want))[:5]
    assert np.isnan(got[np.isnan(x)]).all()  # NaN passes through
    # +-inf follow the large-|x| rule: the function's limit (sigmoid 0 / 1, relu 0 / inf)
    if function == "sigmoid":
        assert got[x == np.inf][0] == 1.0 and got[x == -np.inf][0] == 0.0
    assert table.size <= act_ops.BF16_TABLE_LIMIT


def test_bf16_softmax_follows_the_documented_algorithm():
    table, window, rules = act_ops.bf16_table("exp", {}, negative_only=True)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((40, 24)) * rng.choice([0.1, 1.0, 8.0, 100.0], (40, 1))).astype(np.float32)
    x[0] = 0.0  # all equal
    x[1, :3] = -np.inf
    x[2, 5] = 3e38  # huge spread
    x = np.array([[ref_bf16(float(v)) for v in r] for r in x], dtype=np.float32)
    got = act_ops.softmax_bf16(x, table, window, rules)
    for r in range(x.shape[0]):
        m = max(float(v) for v in x[r])
        e = [ref_bf16(f32(math.exp(ref_bf16(f32(float(v) - m))))) for v in x[r]]
        s = 0.0
        for v in e:
            s = f32(s + v)
        inv = f32(1.0 / s)
        want = np.array([ref_bf16(f32(v * inv)) for v in e], dtype=np.float32)
        assert (bits(got[r]) == bits(want)).all(), r


def test_bf16_layernorm_follows_the_documented_float32_sequence():
    rng = np.random.default_rng(7)
    n = 32
    x = (rng.standard_normal((30, n)) * rng.choice([1e-3, 1.0, 50.0], (30, 1))).astype(np.float32)
    x[0] = 1.0  # constant row: variance 0, eps only
    x = np.array([[ref_bf16(float(v)) for v in r] for r in x], dtype=np.float32)
    g = np.array([ref_bf16(float(v)) for v in rng.standard_normal(n)], dtype=np.float32)
    b = np.array([ref_bf16(float(v)) for v in rng.standard_normal(n)], dtype=np.float32)
    eps = f32(1e-5)
    got = layernorm_bf16(x, g, b, np.float32(eps))
    for r in range(x.shape[0]):
        s = 0.0
        for v in x[r]:
            s = f32(s + float(v))
        mu = f32(s / n)
        c = [f32(float(v) - mu) for v in x[r]]
        acc = 0.0
        for v in c:
            acc = f32(acc + f32(v * v))
        rs = f32(1.0 / f32(math.sqrt(f32(f32(acc / n) + eps))))
        want = [ref_bf16(f32(f32(f32(c[i] * rs) * float(g[i])) + float(b[i]))) for i in range(n)]
        assert (bits(got[r]) == bits(np.array(want, dtype=np.float32))).all(), r


def _compile(model, shape, device, batch, seed=0):
    torch.manual_seed(seed)
    x = np.random.default_rng(seed).standard_normal((64, *shape)).astype(np.float32)
    d = aieflow.compile(model.eval(), device=device, example_input=x[:4], calibration=x,
                        config={"precision": "bf16", "batch": batch})
    assert isinstance(d, DagDesign)
    return d, x


def _within_tolerance(d, model, x):
    y = d.predict(x)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    assert np.abs(y - ref).max() <= TOLERANCE * np.abs(ref).max()


class Heads(torch.nn.Module):
    """GELU, a sigmoid joined back by a residual Add, a softmax head."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.a(x))
        return torch.softmax(self.b(torch.sigmoid(h) + h), dim=-1)


@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_bf16_residual_mlp_runs_bit_exact_on_x86(device):
    model = Residual()
    d, x = _compile(model, (32,), device, 8)
    kinds = {d.plan.node(n).op for n in d.plan.compute}
    assert kinds == {"dense", "add"} and "src/kernels/dag_kernels_bf16.h" in d.files
    assert "ResidualAddBf16" in d.files["src/graph.h"]
    v = d.verify(samples=24)
    assert v.ok, v.verdict()
    edge = x[:16].copy()
    edge[0] = 1e30
    edge[1] = 1e-40  # subnormal inputs
    edge[2] = 1.0 + 2.0**-8  # bf16 ties
    v2 = d.verify(edge)
    assert v2.ok, v2.verdict()
    _within_tolerance(d, model, x[:32])


def test_bf16_mixer_block_runs_bit_exact_on_x86():
    model = MiniMixer()
    d, x = _compile(model, (16, 32), "vek280", 2)
    assert "LayerNormBf16" in d.files["src/graph.h"]
    v = d.verify(samples=12)
    assert v.ok, v.verdict()
    _within_tolerance(d, model, x[:16])


def test_bf16_activations_and_softmax_run_bit_exact_on_x86_on_vek385(tmp_path):
    model = Heads()
    d, x = _compile(model, (32,), "vek385", 8)
    for cls in ("ActivationBf16", "SoftmaxBf16", "ResidualAddBf16"):
        assert cls in d.files["src/graph.h"]
    edge = x[:16] * np.float32(40.0)  # saturated sigmoid / GELU regions, softmax spread
    edge[0] = 1e-39
    v = d.verify(edge)
    assert v.ok, v.verdict()
    v2 = d.verify(samples=24)
    assert v2.ok, v2.verdict()
    _within_tolerance(d, model, x[:32])
    # the tables, windows and rules travel with a saved design
    d.save(tmp_path / "d")
    again = aieflow.load(tmp_path / "d")
    assert (bits(again.predict(x[:16])) == bits(d.predict(x[:16]))).all()


@pytest.mark.parametrize("device", ["vek280", "vek385"])
def test_a_bf16_dense_chain_is_within_the_tolerance_of_float32_pytorch(device):
    """The chain (resident Dense, no DAG: its bf16 kernels are the Dense bf16 ones, x86-verified in
    tests/test_verify.py) against float32 PyTorch, the same documented bound as the DAG designs."""
    from aieflow.design import Design

    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 24), torch.nn.ReLU(),
                                torch.nn.Linear(24, 10)).eval()
    x = np.random.default_rng(4).standard_normal((64, 32)).astype(np.float32)
    d = aieflow.compile(model, device=device, example_input=x[:4], calibration=x, config={"precision": "bf16"})
    assert isinstance(d, Design) and not isinstance(d, DagDesign)
    y = d.predict(x)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    err = np.abs(y - ref).max()
    assert err <= TOLERANCE * np.abs(ref).max(), err
    assert err > 0  # bf16 does round
