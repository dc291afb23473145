"""Issue 5: "hidden sizes from 8 to 256 and inputs from 1 to 1,024 compile, verify on x86 and
estimate".  Every corner (8/1, 8/1024, 256/1, 256/1024) and a middle size compiles and estimates
in fp32 and fixed point; the generated C++ of each corner (alternating precision and cell, so both
are built at each extreme) and of the middle (int16, on the VEK280: AIE-ML) runs on x86
bit-exactly.  Short sequences keep the builds to a few binaries of modest size."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from aieflow.recurrent.design import compile_recurrent  # noqa: E402
from aieflow.recurrent.plan import violations  # noqa: E402

STEPS = 2


class _Last(torch.nn.Module):
    def __init__(self, cell: str, n_in: int, n_h: int):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(n_in, n_h, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0][:, -1]


def _compile(cell: str, n_in: int, n_h: int, precision: str, device: str = "vck190"):
    torch.manual_seed(n_in + n_h)
    net = _Last(cell, n_in, n_h).eval()
    x = torch.randn(24, STEPS, n_in)
    return compile_recurrent(net, device, x[:2], {"precision": precision}, x), net, x


CORNERS = [(1, 8), (1024, 8), (1, 256), (1024, 256)]
MIDDLE = (100, 48)


@pytest.mark.parametrize("precision", ["fp32", "int16"])
def test_every_corner_and_the_middle_compile_and_estimate(precision):
    for i, (n_in, n_h) in enumerate([*CORNERS, MIDDLE]):
        cell = ("GRU", "LSTM")[i % 2]
        d, net, x = _compile(cell, n_in, n_h, precision)
        m, p = d.mapping, d.estimate()
        assert not violations(m, d.device), (n_in, n_h)
        assert (m.dims.n_in, m.dims.n_h, m.dims.seq_len) == (n_in, n_h, STEPS)
        eps = 1e-6 * p.sequence_latency_ns  # float sums of ns
        assert 0 < p.step_latency_ns <= p.step_interval_ns + eps and p.sequence_latency_ns >= STEPS * p.step_interval_ns - eps
        assert abs(sum(p.breakdown_ns.values()) - p.step_latency_ns) < 1e-6
        assert p.tiles == m.tiles <= d.device.compute_tiles
        y = d.predict(x.numpy())
        assert y.shape == (len(x), n_h)
        if precision == "fp32":  # the emulator is the float32 model, in the kernels' order
            np.testing.assert_allclose(y, net(x).detach().numpy(), rtol=1e-4, atol=2e-5)


VERIFIED = [
    ("GRU", 1, 8, "fp32", "vck190"),
    ("LSTM", 1024, 8, "int16", "vck190"),
    ("LSTM", 1, 256, "fp32", "vck190"),
    ("GRU", 1024, 256, "int16", "vck190"),
    ("LSTM", *MIDDLE, "int16", "vek280"),  # AIE-ML: one aggregator port, its own lanes and limits
]


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
@pytest.mark.parametrize("case", VERIFIED, ids=lambda c: "-".join(map(str, c)))
def test_corners_run_bit_exactly_on_x86(case, tmp_path):
    cell, n_in, n_h, precision, device = case
    d, _, _ = _compile(cell, n_in, n_h, precision, device)
    result = d.verify(samples=4, cache_dir=tmp_path)
    assert result.ok, result.verdict()
    assert result.values == 4 * n_h
