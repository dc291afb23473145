"""bf16 GRU / LSTM on AIE-ML (VEK280) and AIE-MLv2 (VEK385): ``predict`` against an independent
reference of the bf16 arithmetic (numpy float32 with the bf16 rounding written here), PyTorch
float within the stated tolerance, x86 verify bit-exact (row-wise, column-wise and compact; AIE and
hybrid aggregation), a mutation of the generated rounding caught, and the cycle model on the
catalog's bf16 MAC rate."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from aieflow.devices import get_device  # noqa: E402
from aieflow.errors import ConfigError, PlanError  # noqa: E402
from aieflow.recurrent.design import compile_recurrent  # noqa: E402
from aieflow.recurrent.model import estimate_recurrent  # noqa: E402
from aieflow.recurrent.plan import RecurrentOptions  # noqa: E402

# ----------------------------------------------------------------------------- independent reference


def bf16(x) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), as float32; finite inputs."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return r.astype(np.uint32).view(np.float32)


def f32_sigmoid(v):
    return (1.0 / (1.0 + np.exp(-v.astype(np.float64)))).astype(np.float32)


def f32_tanh(v):
    return np.tanh(v.astype(np.float64)).astype(np.float32)


def matvec(v, w, b, lanes):
    """v (batch, K) bf16 values, w (K, N), b (N,): float32 sums.  lanes 0: from the bias, k = 0, 1, ...
    lanes L: lane l sums k = l, l + L, ... from 0, lanes added pairwise (L/2 apart, halving), + b."""
    v, w, b = (np.asarray(a, dtype=np.float32) for a in (v, w, b))
    if lanes == 0:
        s = np.broadcast_to(b, (v.shape[0], w.shape[1])).copy()
        for k in range(w.shape[0]):
            s = (s + (v[:, k : k + 1] * w[k]).astype(np.float32)).astype(np.float32)
        return s
    acc = np.zeros((lanes, v.shape[0], w.shape[1]), dtype=np.float32)
    for k in range(w.shape[0]):
        acc[k % lanes] = acc[k % lanes] + v[:, k : k + 1] * w[k]
    while acc.shape[0] > 1:
        half = acc.shape[0] // 2
        acc = acc[:half] + acc[half:]
    return (acc[0] + b).astype(np.float32)


def reference(net, x, lanes, round_h=True):
    """The bf16 layer from the PyTorch module's own weights (canonical gate order written here)."""
    m = net.rnn
    n = m.hidden_size
    wi, wh = m.weight_ih_l0.detach().numpy(), m.weight_hh_l0.detach().numpy()
    bi, bh = m.bias_ih_l0.detach().numpy(), m.bias_hh_l0.detach().numpy()
    if isinstance(m, torch.nn.GRU):  # PyTorch [r, z, n] -> [z, r, h]
        order = np.r_[n : 2 * n, 0:n, 2 * n : 3 * n]
        wi, wh, bi, bh = wi[order], wh[order], bi[order], bh[order]
    w, u, b, rb = bf16(wi.T), bf16(wh.T), bf16(bi), bf16(bh)
    xs = bf16(np.asarray(x, dtype=np.float32))
    h = np.zeros((xs.shape[0], n), dtype=np.float32)
    c = np.zeros_like(h)
    one = np.float32(1)
    rh = bf16 if round_h else (lambda v: v)
    for t in range(xs.shape[1]):
        gx = matvec(xs[:, t], w, b, lanes)
        gh = matvec(h, u, rb, lanes)
        if isinstance(m, torch.nn.GRU):
            z = f32_sigmoid(gx[:, :n] + gh[:, :n])
            r = f32_sigmoid(gx[:, n : 2 * n] + gh[:, n : 2 * n])
            cand = f32_tanh(gx[:, 2 * n :] + r * gh[:, 2 * n :])
            h = rh(cand * (one - z) + h * z)
        else:
            pre = gx + gh
            i, f, o = (f32_sigmoid(pre[:, k * n : (k + 1) * n]) for k in (0, 1, 3))
            c = f32_tanh(pre[:, 2 * n : 3 * n]) * i + c * f
            h = rh(o * f32_tanh(c))
    return h


# ----------------------------------------------------------------------------- designs


class _Net(torch.nn.Module):
    def __init__(self, cell, n_in, n_h, head=False):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(n_in, n_h, batch_first=True)
        self.fc = torch.nn.Sequential(torch.nn.Linear(n_h, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)) if head else None

    def forward(self, x):
        out, _ = self.rnn(x)
        last = out[:, -1]
        return self.fc(last) if self.fc is not None else last


def _inputs(steps, n_in, seed):
    g = np.random.default_rng(seed)
    x = g.normal(0, 1.5, (40, steps, n_in)).astype(np.float32)
    x[0] = 0.0
    x[1] = 40.0  # saturates every gate
    x[2] = -40.0
    x[3] = np.float32(1 + 2**-8)  # a bf16 tie: rounds to even (1.0)
    x[4] = np.float32(1 + 3 * 2**-8)  # the other tie: rounds up
    x[5, :, ::2] = 1e-3
    return x


def _design(cell, device, dist, n_in=5, n_h=12, steps=4, head=False, seed=0, **opts):
    if dist == "column":  # chains of 2 (U h) and 3 (W x) tiles: cascades, uneven blocks
        opts = {"cas_len": 2, "input_cas_len": 3, **opts}
    torch.manual_seed(seed)
    net = _Net(cell, n_in, n_h, head).eval()
    x = _inputs(steps, n_in, seed)
    d = compile_recurrent(net, device, x[:4], {"precision": "bf16"}, x, RecurrentOptions(distribution=dist, **opts))
    return d, net, x


CASES = [("GRU", "vek280", "row"), ("LSTM", "vek280", "row"), ("GRU", "vek385", "compact"),
         ("LSTM", "vek385", "compact"), ("GRU", "vek385", "row"), ("LSTM", "vek280", "compact"),
         ("GRU", "vek280", "column"), ("LSTM", "vek385", "column")]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_predict_equals_the_independent_bf16_reference(case):
    cell, device, dist = case
    d, net, x = _design(cell, device, dist, n_in=21, n_h=12, steps=5, seed=len(cell) + len(device))
    lanes = 16 if dist == "row" else 0  # row kernels: bf16 lanes + halving tree; chains, compact: sequential from the bias
    assert d.mapping.aggregation == ("compact" if dist == "compact" else "aie")
    if dist == "column":
        assert (d.mapping.recurrent.distribution, d.mapping.input.distribution) == ("column", "column")
        assert (d.mapping.recurrent.cas_len, d.mapping.input.cas_len) == (2, 3)
    assert [k["why"] for k in d.to_json()["kernels"]] == ["bf16 lanes"]
    y = d.predict(x)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, reference(net, x, lanes))
    assert np.array_equal(y, bf16(y))  # h is bf16
    # the reference is sensitive to the state's rounding (h kept in fp32 differs)
    assert not np.array_equal(reference(net, x, lanes, round_h=False), y)


def test_bf16_predict_is_within_the_stated_tolerance_of_pytorch():
    """bf16 weights and state: |predict - PyTorch float32| <= 0.02 on h in [-1, 1] (documented in
    docs/recurrent.md), over 20 steps, hidden 32."""
    worst = 0.0
    for cell, device in (("GRU", "vek280"), ("LSTM", "vek385")):
        torch.manual_seed(3)
        net = _Net(cell, 8, 32).eval()
        x = np.random.default_rng(3).normal(0, 1, (64, 20, 8)).astype(np.float32)
        d = compile_recurrent(net, device, x[:4], {"precision": "bf16"}, x, RecurrentOptions(distribution="row"))
        err = np.abs(d.predict(x) - net(torch.from_numpy(x)).detach().numpy()).max()
        worst = max(worst, float(err))
        assert err <= 0.02, (cell, err)
    assert worst > 0  # bf16 does round


def test_refusals_name_the_mapping_and_the_reason():
    torch.manual_seed(0)
    net = _Net("GRU", 4, 8).eval()
    x = np.random.default_rng(0).normal(0, 1, (8, 3, 4)).astype(np.float32)
    # one float summation order per layer: U h and W x both row-wise or both column-wise (as fp32)
    with pytest.raises(PlanError, match="one float summation order per layer"):
        compile_recurrent(net, "vek280", x[:2], {"precision": "bf16"}, x,
                          RecurrentOptions(distribution="column", input_distribution="row"))
    # column-wise chains and the hybrid aggregation are mapped (no longer refused)
    d = compile_recurrent(net, "vek280", x[:2], {"precision": "bf16"}, x,
                          RecurrentOptions(distribution="column", aggregation="hybrid"))
    assert (d.mapping.recurrent.distribution, d.mapping.aggregation) == ("column", "hybrid")
    with pytest.raises(ConfigError, match="(?i)bf16 is not available on vck190"):
        compile_recurrent(net, "vck190", x[:2], {"precision": "bf16"}, x)
    # the messages name the layer's own float type, not fp32
    with pytest.raises(ConfigError, match=r"layers\.rnn\.mapping\.kernel: scalar applies to fixed point; bf16 kernels"):
        compile_recurrent(net, "vek280", x[:2], {"precision": "bf16", "layers": {"rnn": {"mapping": {"kernel": "scalar"}}}}, x)
    # with a target the search keeps one distribution for both products (AIE aggregation unless asked)
    d = compile_recurrent(net, "vek280", x[:2], {"precision": "bf16", "target": "latency_ns <= 100000"}, x)
    pts = d.exploration.front
    assert pts and all(p.mapping.aggregation in ("aie", "compact") for p in pts)
    assert all(p.mapping.recurrent.distribution == p.mapping.input.distribution for p in pts)


def test_cycle_model_uses_the_catalogs_bf16_mac_rate():
    d, _, _ = _design("GRU", "vek280", "row", n_in=64, n_h=64, steps=4, row_reuse=8)
    m = d.mapping
    assert m.dims.pair == ("bf16", "bf16")
    dev = get_device("vek280")
    gen = dev.generation
    rates = dict(gen.macs_per_cycle)
    slow = dataclasses.replace(dev, generation=dataclasses.replace(
        gen, macs_per_cycle={**rates, ("bf16", "bf16"): rates[("bf16", "bf16")] / 32}))
    base, slower = estimate_recurrent(m, dev), estimate_recurrent(m, slow)
    assert m.recurrent.rows >= 8  # rows after the first are MAC-bound, not stream-bound
    assert slower.breakdown_ns["mac"] > base.breakdown_ns["mac"]


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@needs_gxx
@pytest.mark.parametrize("case", [("GRU", "vek280", "row", True, "aie"), ("LSTM", "vek385", "compact", False, None),
                                  ("GRU", "vek280", "row", True, "hybrid"), ("LSTM", "vek385", "column", False, "hybrid"),
                                  ("GRU", "vek280", "column", False, "aie")],
                         ids=lambda c: "-".join(map(str, c)))
def test_x86_verify_is_bit_exact(case, tmp_path):
    """Hybrid: the PL FSM (pl/rnn_fsm.cpp, run as C++) does the gate math and rounds h with
    rnn_fixed.h round_bf16, which HLS compiles (no bfloat16 type in the PL code)."""
    cell, device, dist, head, agg = case
    d, _, _ = _design(cell, device, dist, head=head, aggregation=agg)
    assert d.mapping.aggregation == (agg or "compact")
    cell_h = d.files["src/rnn_cell.h"]
    assert "rnn::round_bf16(v)" in cell_h and "bfloat16" not in cell_h
    assert "using W = rnn_bf16_lane;" in d.files["src/rnn_config.h"]
    if agg == "hybrid":
        assert "bfloat16" not in d.files["pl/rnn_fsm.cpp"] + d.files["src/rnn_fsm.h"]
    r = d.verify(samples=5, cache_dir=tmp_path)
    assert r.ok, r.verdict()
    if head:  # mutation: the generated gate math keeps h in fp32 -> verify must see it
        bad = dataclasses.replace(d, files={**d.files, "src/rnn_cell.h": cell_h.replace(
            "rnn::round_bf16(v)", "v")})
        r2 = bad.verify(samples=5, cache_dir=tmp_path / "mutant")
        assert not r2.ok


def test_predict_follows_each_mappings_summation_order():
    """Products 2^24, fifteen of 1/16, -2^24 into the candidate gate: summed from the bias in k
    order (the compact tile) the 1/16s vanish against 2^24 (float32 spacing 2 there); in 16 bf16
    lanes (row kernels) lane 0 cancels exactly and the 1/16s survive: h = tanh(15/16) / 2 vs 0."""
    torch.manual_seed(0)
    net = _Net("GRU", 17, 1).eval()
    with torch.no_grad():
        for p in net.rnn.parameters():
            p.zero_()
        net.rnn.weight_ih_l0[2] = torch.tensor([4096.0] + [1 / 16] * 15 + [-4096.0])  # PyTorch's n gate row
    x = np.zeros((4, 1, 17), dtype=np.float32)
    x[:, 0, :] = [4096.0] + [1.0] * 15 + [4096.0]
    want = {"row": bf16(np.float32(np.tanh(np.float32(15 / 16))) * np.float32(0.5)), "compact": np.float32(0),
            "column": np.float32(0)}
    for dist, lanes in (("row", 16), ("compact", 0), ("column", 0)):
        d = compile_recurrent(net, "vek280", x[:2], {"precision": "bf16"}, x, RecurrentOptions(distribution=dist))
        y = d.predict(x)
        np.testing.assert_array_equal(y, reference(net, x, lanes))
        np.testing.assert_array_equal(y, np.full((4, 1), want[dist], dtype=np.float32))


def test_bf16_h_and_x_are_costed_as_the_float_words_the_kernels_stream():
    """rnn_kernels.h: a bf16 layer's vectors travel as 32-bit float words holding bf16 values, so the
    model's h broadcast and x transfer carry one word per (lane-padded) element, as fp32's do; they
    were costed at 2 bytes per element (half their words)."""
    from aieflow.recurrent.model import step_stages
    from aieflow.recurrent.plan import RecurrentDims, plan_recurrent

    dev = get_device("vek280")
    for agg in ("aie", "hybrid"):
        m = plan_recurrent(RecurrentDims("gru", 6, 20, 20, pair=("bf16", "bf16")), dev,
                           RecurrentOptions(aggregation=agg, plio_bits=64))
        pre, loop = step_stages(m, dev)
        stages = {s.name: s for s in (*pre, *loop)}
        lane = 16  # the recurrent kernels' bf16 lanes on AIE-ML
        assert stages["h_in"].words == -(-20 // lane) * lane, agg  # 32, not 16
        assert stages["w_mac"].words == -(-6 // lane) * lane, agg
