"""Generated recurrent designs (row-wise kernels, AIE aggregator or hybrid PL FSM, dense head) run
on x86 and match the emulator bit for bit; the emulator itself is checked against PyTorch."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import aieflow  # noqa: E402
from aieflow.errors import PlanError  # noqa: E402
from aieflow.recurrent.design import RecurrentDesign, compile_recurrent  # noqa: E402
from aieflow.recurrent.plan import RecurrentOptions  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


class _Net(torch.nn.Module):
    def __init__(self, cell: str, n_in: int, n_h: int, head: bool):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(n_in, n_h, batch_first=True)
        self.head = head
        if head:
            self.fc1, self.relu, self.fc2 = torch.nn.Linear(n_h, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        last = out[:, -1]
        return self.fc2(self.relu(self.fc1(last))) if self.head else last


def _design(cell, precision, aggregation, n_in, n_h, steps, head, seed=0, **opts) -> tuple[RecurrentDesign, torch.nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    net = _Net(cell, n_in, n_h, head).eval()
    x = torch.randn(64, steps, n_in) * 2.0
    d = compile_recurrent(net, "vck190", x[:4], {"precision": precision}, x, RecurrentOptions(aggregation=aggregation, **opts))
    return d, net, x


# top tagging (6 in, hidden 20, dense 64 -> 1) with fewer steps where the case is not the benchmark itself
CASES = [
    ("GRU", "fp32", "aie", 6, 20, 20, True),
    ("LSTM", "fp32", "hybrid", 6, 20, 20, True),
    ("GRU", "int16", "hybrid", 6, 20, 20, True),
    ("LSTM", "int16", "aie", 6, 20, 20, True),
    ("GRU", "int16", "aie", 1, 8, 4, False),
    ("LSTM", "fp32", "aie", 3, 9, 3, False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_generated_design_is_bit_exact_on_x86(case, tmp_path):
    d, net, x = _design(*case)
    result = d.verify(samples=6, cache_dir=tmp_path)
    assert result.ok, result.verdict()
    assert result.values == 6 * (1 if case[-1] else case[4])


def test_fp32_design_matches_pytorch_and_uses_the_kernel_order():
    d, net, x = _design("GRU", "fp32", "hybrid", 6, 20, 20, True)
    want = net(x).detach().numpy()
    got = d.predict(x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert d.layer.attrs["fp32_lanes"] == 8  # lane-wise MACs + tree reduction, as the row kernel does


def test_row_reuse_and_ids_survive_random_merge_order(tmp_path):
    d, _, _ = _design("GRU", "fp32", "aie", 5, 12, 3, False, row_reuse=4, input_row_reuse=3)
    assert d.mapping.recurrent.rows >= 4 and d.mapping.input.rows >= 3
    assert d.verify(samples=5, seed=3, cache_dir=tmp_path).ok


def test_compile_dispatches_recurrent_models(tmp_path):
    torch.manual_seed(1)
    net = _Net("GRU", 6, 20, True).eval()
    x = torch.randn(32, 20, 6)
    d = aieflow.compile(net, device="vck190", example_input=x[:4], calibration=x,
                        config={"precision": "fp32", "target": "latency_ns <= 20000"})
    assert isinstance(d, RecurrentDesign)
    assert d.exploration is not None and d.estimate().sequence_latency_ns <= 20000
    fewer = [p for p in d.exploration.front if p.latency_ns <= 20000 and p.tiles < d.exploration.chosen.tiles]
    assert not fewer  # the fewest tiles meeting the budget
    out = d.save(tmp_path / "gru")
    meta = (out / "design.json").read_text()
    assert '"breakdown_ns"' in meta and '"sequence_latency_ns"' in meta
    assert (out / "project" / "src" / "graph.h").is_file()


def test_bad_inputs_name_the_problem():
    torch.manual_seed(0)
    net = _Net("GRU", 4, 8, False).eval()
    x = torch.randn(16, 3, 4)
    with pytest.raises(PlanError, match="summation order"):  # fp32: one float order per layer (row or column)
        compile_recurrent(net, "vck190", x[:2], {"precision": "fp32"}, x,
                          RecurrentOptions(distribution="column", input_distribution="row"))
    with pytest.raises(PlanError, match="exact"):
        compile_recurrent(net, "vck190", x[:2], {"precision": "int16", "activations": {"sigmoid": "exact"}}, x)


class _Gru2(torch.nn.Module):
    """Two stacked GRU layers (torch num_layers=2) and a dense head on the last step."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(4, 8, num_layers=2, batch_first=True)
        self.fc = torch.nn.Linear(8, 2)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1])


def test_an_int8_gru_stack_on_vek385_with_aie_aggregation_is_bit_exact_on_x86(tmp_path):
    """Issue 24 (VEK385 int8 recurrent on x86) and issue 17 (one output stream port): on AIE-MLv2
    each layer's aggregator writes h on its one port, broadcast to its U kernels and its output
    kernel, which passes layer 0's h to layer 1 and runs the dense head after layer 1.  Six samples
    in one run, so every U kernel drops a sequence's last h at the next sequence's step 0."""
    torch.manual_seed(3)
    net = _Gru2().eval()
    x = torch.randn(32, 5, 4) * 2.0
    d = compile_recurrent(net, "vek385", x[:2], {"precision": "int8"}, x, RecurrentOptions(aggregation="aie"))
    assert d.device.key == "vek385" and d.device.generation.stream_out_ports == 1
    assert [m.aggregation for m in d.mappings] == ["aie", "aie"]
    graph = d.files["src/graph.h"]
    for li in range(2):
        assert f"o{li} = adf::kernel::create_object<AggOutput<rnn_l{li}::AggCfg>>(" in graph
        assert f"agg{li}.out[1]" not in graph
    r = d.verify(samples=6, cache_dir=tmp_path)
    assert r.ok, r.verdict()
    assert r.values == 6 * 2
