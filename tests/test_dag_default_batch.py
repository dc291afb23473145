"""A DAG design with no batch given settles on a batch the memory-tile tilers can cut.

AIE-MLv2's int8 mmul is 8x8x8 (UG1529's AIE-MLv2 row), blocked 2 x 2 by the Dense planner: 16 rows per
graph iteration, so the default batch of 8 cannot be cut there.  With no batch written, compile (and
explore's pick) take the first doubling that can; a batch the user writes is kept and refused by name."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import aieflow  # noqa: E402
from aieflow.errors import PlanError  # noqa: E402


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.n = torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.n(x + torch.relu(self.a(x)))


def _model_and_data():
    torch.manual_seed(5)
    return Residual().eval(), torch.randn(64, 16)


def test_no_batch_on_vek385_int8_takes_16_and_a_written_8_is_refused_by_rows():
    m, x = _model_and_data()
    d = aieflow.compile(m, device="vek385", example_input=x[:8], calibration=x, config={"precision": "int8"})
    assert type(d).__name__ == "DagDesign" and d.plan.batch == 16
    assert d.estimate().batch == 16
    with pytest.raises(PlanError, match=r"8 rows per graph iteration .* not a multiple of 16"):
        aieflow.compile(m, device="vek385", example_input=x[:8], calibration=x,
                        config={"precision": "int8", "batch": 8})


def test_the_default_stays_8_where_it_cuts_and_explore_picks_what_compile_builds():
    m, x = _model_and_data()
    d = aieflow.compile(m, device="vek280", example_input=x[:8], calibration=x, config={"precision": "int8"})
    assert d.plan.batch == 8
    e = aieflow.explore(m, device="vek385", example_input=x[:8], calibration=x, config={"precision": "int8"})
    assert e.chosen.batch == 16
    assert np.isfinite(e.chosen.latency_ns)
