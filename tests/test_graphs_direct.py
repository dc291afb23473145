"""Direct tile-to-tile links on AIE-ML (issue 7 item 3): when a producer's output buffers already
are its consumer's input buffers, the memory tile is skipped; the proof, the emitted graph, the
performance model and an x86 run all see it."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

import aieflow
from aieflow.errors import PlanError
from aieflow.model_zoo import torch_mlp
from aieflow.passes.transport import (
    check_direct_link,
    check_link,
    direct_link_possible,
    memtile_link,
)


def _compile(widths, precision="int8", device="vek280", layers=None, batch=8):
    model = torch_mlp(widths, seed=1)
    x = np.random.default_rng(0).normal(size=(128, widths[0])).astype(np.float32)
    return aieflow.compile(model, device=device, example_input=x[:batch],
                           config={"precision": precision, "batch": batch, "layers": layers or {}}, calibration=x)


@pytest.mark.parametrize("precision,device", [("int8", "vek280"), ("a16w8", "vek280"), ("int16", "vek385"),
                                              ("bf16", "vek280")])
def test_matching_layouts_link_directly(precision, device):
    d = _compile([64, 64, 48, 32], precision, device)
    ls = d.layers()
    assert [n.plan.link for n in ls] == ["plio", "buffer", "buffer"]
    for a, b in itertools.pairwise(ls):
        assert direct_link_possible(a, b)
        assert a.plan.out_panel == b.plan.in_panel  # the producer writes the consumer's K panels
        check_direct_link(a, b)
    graph = d.files["src/graph.h"]
    assert "adf::shared_buffer<" not in graph
    perf = d.estimate()
    assert not any(s.name.startswith("memtile") for s in perf.stages)
    assert d.resources()["memory_tiles"] == 0


def test_mismatched_layouts_keep_the_memory_tile():
    names = [n.name for n in _compile([64, 256, 32]).layers()]
    # producer split over 2 rows, consumer over 1 column: not the same buffers
    layers = {names[0]: {"parallelism": {"cas_len": 1, "cas_num": 2}}, names[1]: {"parallelism": {"cas_len": 1}}}
    d = _compile([64, 256, 32], layers=layers)
    a, b = d.layers()
    assert not direct_link_possible(a, b) and b.plan.link == "memtile"
    check_link(memtile_link(a, b), a, b)
    assert "adf::shared_buffer<" in d.files["src/graph.h"]


def test_direct_link_proof_catches_a_wrong_layout():
    a, b = _compile([64, 64, 32]).layers()
    check_direct_link(a, b)
    wrong_panel = a.evolve(plan=dataclasses.replace(a.plan, out_panel=16))
    with pytest.raises(PlanError, match="wrong features"):
        check_direct_link(wrong_panel, b)
    two_rows = a.evolve(plan=dataclasses.replace(a.plan, cas_num=2))
    with pytest.raises(PlanError, match="producer rows"):
        check_direct_link(two_rows, b)


def test_direct_links_with_cascades_run_bit_exact_on_x86(tmp_path):
    """Producer with 2 cascade rows -> consumer with 2 cascade columns (each row's buffer feeds one
    column, broadcast to the consumer's 2 rows), then into a single tile."""
    names = [n.name for n in _compile([64, 64, 64, 16]).layers()]
    shape = [(1, 2), (2, 2), (2, 1)]
    layers = {nm: {"parallelism": {"cas_len": cl, "cas_num": cn}} for nm, (cl, cn) in zip(names, shape, strict=True)}
    d = _compile([64, 64, 64, 16], layers=layers)
    assert [n.plan.link for n in d.layers()] == ["plio", "buffer", "buffer"]
    connects = [c for c in d.files["src/graph.h"].splitlines() if "adf::connect(" in c and ".out[0]" in c]
    assert len(connects) >= 2 * 2 + 2
    result = d.verify(samples=40, cache_dir=tmp_path)
    assert result.ok and result.values == 40 * 16
