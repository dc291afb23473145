"""The search's copy count (``passes/search.design_points`` ``most_copies``) checks each copy of a
replicated chain alone (``passes/emit.lower_copy``) and sums what the copies share
(``mapped/transport.shared_demand``): the verdict must be the whole design's check."""

from __future__ import annotations

import pytest

import aieflow
from aieflow.devices import get_device
from aieflow.errors import PlanError
from aieflow.mapped.place import replica_offsets, replicate
from aieflow.mapped.transport import check, shared_demand, shared_demand_fits
from aieflow.model_zoo import qdq_mlp
from aieflow.passes.emit import lower_chain, lower_copy


def _passes(mg, dev) -> bool:
    try:
        check(mg, dev)
    except PlanError:
        return False
    return True


# AIE1 direct buffers (vck190: 20 copies, 160 of 312 input PLIOs), AIE-ML memory-tile links
# (vek280: fc0's 8 cascade columns take 8 input PLIOs per copy of 9 tiles, so its 76 run out
# after 9 of the 32 copies the array holds)
@pytest.mark.parametrize("device, limited", [("vck190", False), ("vek280", True)])
def test_copies_checked_alone_agree_with_the_whole_design(device, limited):
    dev = get_device(device)
    model = qdq_mlp([256, 16, 16], seed=1)
    d = aieflow.compile(model, device=device, config={"layers": {"fc0": {"parallelism": {"cas_len": 8, "cas_num": 1}}, "fc1": {"parallelism": {"cas_len": 1, "cas_num": 1}}}})
    g, pl = d.graph, d.placement
    fit = len(replica_offsets(pl.rects, pl.columns, pl.rows, pl.snake, pl.keep_out))
    assert fit > 2
    whole = replicate(pl, fit)
    full = lower_chain(g, dev, whole)
    alone = [lower_copy(g, dev, whole, j) for j in range(fit)]
    # each copy alone is exactly its share of the whole lowering, in the same order
    for field in ("kernels", "buffers", "plios", "links"):
        assert tuple(x for mg in alone for x in getattr(mg, field)) == getattr(full, field)
    for j, mg in enumerate(alone):
        assert {k.replica for k in mg.kernels} == {j}
    verdicts = []
    for k in range(1, fit + 1):
        want = _passes(lower_chain(g, dev, replicate(pl, k)), dev)
        demand = tuple(map(sum, zip(*(shared_demand(mg) for mg in alone[:k]), strict=True)))
        got = all(_passes(mg, dev) for mg in alone[:k]) and shared_demand_fits(demand, dev)
        assert got == want, k
        verdicts.append(want)
    assert verdicts[0] and (False in verdicts) == limited  # both sides of the limit were compared
