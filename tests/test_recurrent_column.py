"""Column-wise cascade emission of recurrent layers: chains of tiles split the vector, pass partial
sums on the cascade and send their rows as one packet into the same aggregation as row kernels.
Generated designs run on x86 bit for bit against the emulator (fp32: sequential summation from
the bias, checked against PyTorch; fixed point: hls4ml's order); the search considers the
cascade; what stays unsupported fails clearly."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from aieflow.errors import PlanError  # noqa: E402
from aieflow.numerics import fixed  # noqa: E402
from aieflow.recurrent.design import compile_recurrent  # noqa: E402
from aieflow.recurrent.emit import layout  # noqa: E402
from aieflow.recurrent.plan import RecurrentDims, RecurrentOptions  # noqa: E402
from aieflow.recurrent.select import choose_mapping, costed_points  # noqa: E402

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


class _Net(torch.nn.Module):
    def __init__(self, cell: str, n_in: int, n_h: int, head: int = 0):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(n_in, n_h, batch_first=True)
        self.fc = torch.nn.Linear(n_h, head) if head else None

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1]) if self.fc is not None else out[:, -1]


def _column(cas: int, in_cas: int, rows: int, in_rows: int | None = None, **kw) -> RecurrentOptions:
    return RecurrentOptions(distribution="column", input_distribution="column", cas_len=cas, input_cas_len=in_cas,
                            row_reuse=rows, input_row_reuse=in_rows or rows, **kw)


def _data(shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 2.0


# id, device, cell, n_in, n_h, steps, precision, options, head
CASES = [
    # 12 rows = two lane groups of 8 fp32; blocks 4/4/4 and 3/2; odd packets (13 words) through the PL beats
    ("gru-fp32-hybrid-cas3x2", "vck190", "GRU", 5, 12, 4, "fp32", _column(3, 2, 12, aggregation="hybrid"), 3),
    # 9 rows in one 16-lane group (7 padding lanes), uneven blocks 3/3/3/3 and 1 x 5, acc48 in two cascade words
    ("lstm-int16-aie-cas4x5", "vck190", "LSTM", 5, 12, 4, "int16", _column(4, 5, 9, aggregation="aie"), 0),
    # U h by chains, W x by row kernels (fixed point: both keep hls4ml's order)
    ("gru-int16-hybrid-mixed", "vck190", "GRU", 7, 10, 3, "int16",
     RecurrentOptions(distribution="column", input_distribution="row", cas_len=2, row_reuse=5, aggregation="hybrid"), 2),
    # AIE-ML: acc64 cascade lanes, 16-lane int16 groups
    ("lstm-int16-vek280-cas2", "vek280", "LSTM", 3, 6, 3, "int16", _column(2, 1, 6, aggregation="hybrid"), 0),
    # chains of one tile (ColOnly): the planner's default column spread
    ("gru-int8-aie-single", "vck190", "GRU", 1, 8, 3, "int8",
     RecurrentOptions(distribution="column", input_distribution="column", aggregation="aie"), 0),
    # AIE-MLv2 (issue 24): 64-lane int8 groups (the catalog's 2 x 512-bit loads), the one-port AIE aggregator
    ("gru-int8-vek385-cas2", "vek385", "GRU", 3, 10, 3, "int8", _column(2, 1, 10, aggregation="aie"), 2),
]


@needs_gxx
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_column_design_is_bit_exact_on_x86(case):
    _, device, cell, n_in, n_h, steps, precision, opts, head = case
    torch.manual_seed(11)
    net = _Net(cell, n_in, n_h, head).eval()
    x = _data((48, steps, n_in), 4)
    d = compile_recurrent(net, device, x[:4], {"precision": precision}, x, opts)
    m = d.mapping
    assert m.recurrent.distribution == "column"
    if opts.cas_len:
        assert m.recurrent.cas_len == opts.cas_len and m.u_tiles == m.recurrent.sources(m.dims) * opts.cas_len
    lay = layout(m, d.device)
    assert all(s.words == s.rows for s in lay.u)  # one packet per chain carries its rows
    result = d.verify(samples=14, seed=5)
    assert result.ok, result.verdict()
    assert result.values == 14 * (head or n_h)


def test_fp32_column_order_is_sequential_from_the_bias_and_matches_pytorch():
    torch.manual_seed(3)
    net = _Net("GRU", 6, 12, 0).eval()
    x = _data((32, 5, 6), 8)
    d = compile_recurrent(net, "vck190", x[:4], {"precision": "fp32"}, x, _column(3, 2, 12))
    assert d.layer.attrs["fp32_lanes"] == 0  # the chains' order, not the row kernels' lanes + tree
    np.testing.assert_allclose(d.predict(x.numpy()), net(x).detach().numpy(), rtol=1e-4, atol=1e-5)
    # independent reference of that order for the input projection: k = 0, 1, ... from the bias
    n = d.layer
    xs = x.numpy().reshape(-1, 6).astype(np.float32)
    w, b = n.params["weight_q"].astype(np.float32), n.params["bias_q"].astype(np.float32)
    want = b[None].repeat(len(xs), 0)
    for k in range(6):
        want = (want + (xs[:, k : k + 1] * w[k][None]).astype(np.float32)).astype(np.float32)
    np.testing.assert_array_equal(fixed.float32_dot_sequential(xs, w, b), want)


def test_search_considers_the_cascade_and_row_wise_wins_as_published():
    """The model's trend: row-wise streams reach the lowest latency (the published choice); the
    column-wise cascade is costed and selectable."""
    for n_in, n_h in ((6, 20), (64, 64), (1024, 128)):
        dims = RecurrentDims("gru", n_in, n_h, 10)
        row = choose_mapping(dims, "vck190", "latency", RecurrentOptions(distribution="row"))
        col = choose_mapping(dims, "vck190", "latency", RecurrentOptions(distribution="column"))
        assert col.chosen.mapping.recurrent.distribution == "column"
        assert row.chosen.latency_ns <= col.chosen.latency_ns, (n_in, n_h)
    pool = costed_points(RecurrentDims("gru", 6, 20, 10), "vck190", RecurrentOptions())
    assert {p.mapping.recurrent.distribution for p in pool} == {"row", "column", "compact"}  # + the one-tile cell
    assert any(p.mapping.recurrent.distribution != p.mapping.input.distribution for p in pool)  # mixed ones too


def test_target_search_includes_column_and_fp32_never_mixes():
    torch.manual_seed(5)
    net = _Net("LSTM", 4, 8, 0).eval()
    x = _data((24, 3, 4), 2)
    d = compile_recurrent(net, "vck190", x[:2], {"precision": "fp32", "target": "latency_ns <= 50000"}, x,
                          RecurrentOptions(distribution="column"))
    assert d.mapping.recurrent.distribution == d.mapping.input.distribution == "column"
    d = compile_recurrent(net, "vck190", x[:2], {"precision": "fp32", "target": "tiles <= 40"}, x)
    ex = d.exploration
    assert all(p.mapping.recurrent.distribution == p.mapping.input.distribution for p in ex.front)
    assert d.mapping.tiles <= 40  # a tiles budget alone ranks by latency (passes/search.ranked)
    assert ex.chosen.latency_ns == min(p.latency_ns for p in ex.front if p.tiles <= 40)


def test_unsupported_column_requests_fail_clearly():
    torch.manual_seed(0)
    net = _Net("GRU", 4, 8, 0).eval()
    x = _data((16, 3, 4), 0)
    with pytest.raises(PlanError, match="summation order"):
        compile_recurrent(net, "vck190", x[:2], {"precision": "fp32"}, x,
                          RecurrentOptions(distribution="row", input_distribution="column"))
    with pytest.raises(PlanError, match="chains of exactly 7"):  # 8 columns in 7 blocks leaves a tile without any
        compile_recurrent(net, "vck190", x[:2], {"precision": "int16"}, x, _column(7, 1, 8))
