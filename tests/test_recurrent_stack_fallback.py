"""``plan_stack`` when the layers' own plans do not fit together: the fastest stack that fits among
the published choices (row-wise, hybrid, one row block's gates per merge), checked by brute force."""

from __future__ import annotations

import itertools

import pytest

from aieflow.devices import get_device
from aieflow.recurrent.plan import (
    RecurrentDims,
    RecurrentOptions,
    plan_recurrent,
    published_options,
)
from aieflow.recurrent.select import costed_points
from aieflow.recurrent.stack import plan_stack, stack_violations


def test_the_fallback_is_the_fastest_published_stack_that_fits():
    dev = get_device("vck190")
    dims = [RecurrentDims("gru", 6, 40, 10), RecurrentDims("gru", 40, 40, 10, head=(3,))]
    alone = [plan_recurrent(d, dev) for d in dims]
    assert stack_violations(alone, dev)  # each fits alone, not both
    stack = plan_stack(dims, dev)
    assert not stack_violations(stack.layers, dev) and "fastest stack that fits" in stack.notes[0]
    assert all(m.recurrent.distribution == m.input.distribution == "row" and m.aggregation == "hybrid"
               and m.u_fanin == 3 for m in stack.layers)
    pts = [costed_points(d, dev, published_options(d, RecurrentOptions())) for d in dims]
    ns = 1e9 / dev.clock_hz

    def latency(combo):  # every layer's first step, then (T - 1) intervals of the slowest, then the head
        return (sum(p.cycles[0] for p in combo) + 9 * max(p.cycles[1] for p in combo) + combo[-1].cycles[3]) * ns

    fitting = [c for c in itertools.product(*pts) if not stack_violations([p.mapping for p in c], dev)]
    best = min(latency(c) for c in fitting)
    chosen = next(c for c in fitting if tuple(p.mapping for p in c) == stack.layers)
    assert latency(chosen) == pytest.approx(best, rel=1e-12)
