"""Mean over the tokens of [B, T, E] (issue 19 item 3, frontends/pooling.py): it maps as a transpose,
a Dense T -> 1 of weights 2^-k and a transpose back; checked here against an independent reference
(plain Python integers: the exact sum of the T codes, one round half to even into the output type,
saturation), refused by name for a non-power-of-two T, and run bit for bit on x86 once.

The reference imports nothing from aieflow: it reads the codes and fractional bits the design
reports and recomputes the mean itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import aieflow
from aieflow.errors import AieflowError


class Pool(nn.Module):
    def __init__(self, tokens: int = 16):
        super().__init__()
        self.a, self.h = nn.Linear(16, 32), nn.Linear(32, 5)

    def forward(self, x):
        h = self.a(x)
        h = h + torch.relu(h)  # a residual Add: a graph, the DAG mapping
        return self.h(h.mean(dim=1, keepdim=True))


def _ref_mean(codes: np.ndarray, frac_in: int, frac_out: int, width: int) -> np.ndarray:
    """codes [N, T, E] -> [N, 1, E]: exact sum, then one rounding (half to even), saturation."""
    n, t, e = codes.shape
    k = t.bit_length() - 1
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    out = np.zeros((n, 1, e), dtype=np.int64)
    for i in range(n):
        for j in range(e):
            s = sum(int(v) for v in codes[i, :, j])
            shift = frac_in + k - frac_out  # value = s 2^-(frac_in + k); output grid 2^-frac_out
            q = s * (1 << -shift) if shift <= 0 else _round_half_even(s, shift)
            out[i, 0, j] = min(hi, max(lo, q))
    return out


def _round_half_even(s: int, shift: int) -> int:
    q, r = divmod(s, 1 << shift)  # floor division: r >= 0
    half = 1 << (shift - 1)
    return q + 1 if r > half or (r == half and q % 2) else q


def _compile(precision: str, tokens: int = 16):
    torch.manual_seed(3)
    x = np.random.default_rng(3).standard_normal((64, tokens, 16)).astype(np.float32)
    m = Pool().eval()
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": precision, "batch": 8})
    return m, d, x


@pytest.mark.parametrize("precision", ["int8", "int16"])
def test_token_mean_is_the_exact_sum_rounded_once(precision):
    m, d, x = _compile(precision)
    assert [n.op for n in d.graph.nodes] == ["dense", "activation", "add", "transpose", "dense", "transpose", "dense"]
    assert type(d).__name__ == "DagDesign"
    pool = d.graph.nodes[4]
    t_in, t_out = pool.types.input, pool.types.output
    assert np.all(np.asarray(pool.params["weight_q"]) * 2.0**-pool.types.weight.frac == 1 / 16)
    rng = np.random.default_rng(4)
    # random rows, large rows (saturating the Add's output), and all-equal rows (ties)
    xs = np.concatenate([rng.standard_normal((24, 16, 16)), 8 * rng.standard_normal((4, 16, 16)),
                         np.repeat(rng.standard_normal((4, 1, 16)), 16, axis=1)]).astype(np.float32)
    tr = d.trace(d.quantise_input(xs))
    src = tr[d.graph.nodes[2].outputs[0]]  # the Add's output codes [N, T, E]
    got = tr[d.graph.nodes[5].outputs[0]]  # the pooled codes [N, 1, E]
    want = _ref_mean(np.asarray(src), t_in.frac, t_out.frac, t_out.width)
    assert np.array_equal(np.asarray(got), want)
    with torch.no_grad():
        ref = m(torch.from_numpy(x[:32])).numpy()
    assert np.max(np.abs(d.predict(x[:32]) - ref)) < (0.05 if precision == "int8" else 0.001)


def test_token_mean_over_a_non_power_of_two_is_refused_by_name():
    x = np.random.default_rng(5).standard_normal((16, 12, 16)).astype(np.float32)
    with pytest.raises(AieflowError, match=r"averages 12 tokens.*power-of-two"):
        aieflow.compile(Pool().eval(), device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": 8})


def test_token_mean_runs_bit_exact_on_x86():
    _, d, x = _compile("int8")
    v = d.verify(samples=8)
    assert v.ok, v.verdict()


def _onnx_pool(tokens: int, opset: int, keepdim: bool = True, dynamo: bool = False):
    import io

    import onnx

    class P(Pool):
        def forward(self, x):
            h = self.a(x)
            h = h + torch.relu(h)
            return self.h(h.mean(dim=1, keepdim=keepdim))

    torch.manual_seed(3)
    m = P().eval()
    x = np.random.default_rng(3).standard_normal((64, tokens, 16)).astype(np.float32)
    f = io.BytesIO()
    if dynamo:
        torch.onnx.export(m, (torch.from_numpy(x[:1]),), f, opset_version=opset, dynamo=True)
    else:
        torch.onnx.export(m, torch.from_numpy(x[:1]), f, opset_version=opset, dynamo=False)
    return m, onnx.load_from_string(f.getvalue()), x


@pytest.mark.parametrize("opset", [13, 18])  # 13: axes an attribute; 18: axes an input
def test_onnx_reduce_mean_over_tokens_is_the_token_mean(opset):
    m, proto, x = _onnx_pool(16, opset)
    rm = next(n for n in proto.graph.node if n.op_type == "ReduceMean")
    assert (len(rm.input) > 1) == (opset >= 18)
    d = aieflow.compile(proto, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": 8})
    assert [n.op for n in d.graph.nodes] == ["dense", "activation", "add", "transpose", "dense", "transpose", "dense"]
    pool = d.graph.nodes[4]
    assert pool.name == rm.name
    assert np.all(np.asarray(pool.params["weight_q"]) * 2.0**-pool.types.weight.frac == 1 / 16)
    tr = d.trace(d.quantise_input(x[:16]))
    src, got = tr[d.graph.nodes[2].outputs[0]], tr[d.graph.nodes[5].outputs[0]]
    want = _ref_mean(np.asarray(src), pool.types.input.frac, pool.types.output.frac, pool.types.output.width)
    assert np.array_equal(np.asarray(got), want)
    with torch.no_grad():
        ref = m(torch.from_numpy(x[:32])).numpy()
    assert np.max(np.abs(d.predict(x[:32]) - ref)) < 0.05


def test_onnx_reduce_mean_over_a_non_power_of_two_is_refused_by_name():
    _, proto, x = _onnx_pool(12, 13)
    with pytest.raises(AieflowError, match=r"ReduceMean.*averages 12 tokens.*power-of-two"):
        aieflow.compile(proto, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": 8})
