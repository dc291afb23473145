"""The fuzzing suite's quick profile (issue 16, item 7): random ONNX models, configs, devices,
names and inputs through compile -> predict -> save -> load -> predict (``tests/fuzz_models.py``).
Only ``AieflowError`` may escape, and the loaded design must predict bit for bit what the compiled
one did.  The long profile is ``make fuzz`` (``benchmarks/fuzz.py``)."""

from __future__ import annotations

import numpy as np
import onnx
from fuzz_models import KINDS, Case, Tally, cases, first_words, run_case
from hypothesis import HealthCheck, given, settings


def test_fuzz_quick_profile():
    tally = Tally()

    @settings(max_examples=400, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(cases())
    def one(case):
        outcome = run_case(case)
        tally.add(case, outcome)
        assert outcome.status in ("ok", "refused"), f"{case.describe()}\n{outcome.stage}: {outcome.detail}"

    one()
    # a generator that only made refused cases, or never compiled a kind, would pass vacuously
    assert tally.cases >= 400
    assert tally.by_status["ok"] >= 40 and tally.by_status["refused"] >= 40, tally.by_status
    assert {k.split(":")[0] for k in tally.by_kind if k.endswith(":ok")} == set(KINDS), tally.by_kind


def _case(model, device="vek280", **kw):
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    return Case("mlp", model, (6,), device, kw.get("config"), None, x, [x, x])


def test_the_runner_reports_internal_errors_and_mismatches(monkeypatch):
    from aieflow.model_zoo import qdq_mlp

    assert run_case(_case(qdq_mlp([6, 4]))).status == "ok"
    refused = run_case(_case(qdq_mlp([6, 4]), config={"precison": "int8"}))
    assert (refused.status, refused.stage) == ("refused", "compile")
    assert first_words(refused.detail) == "unknown config key(s) precison; allowed: activations,"
    import aieflow.design

    # an exception that is not an AieflowError is an error, with its traceback
    monkeypatch.setattr(aieflow.design.Design, "save", lambda *a, **k: 1 / 0)
    broken = run_case(_case(qdq_mlp([6, 4])))
    assert (broken.status, broken.stage) == ("error", "save") and "ZeroDivisionError" in broken.detail
    monkeypatch.undo()
    # a loaded design that predicts something else is a mismatch
    load = aieflow.load

    def off_by_one(path):
        d = load(path)
        monkeypatch.setattr(d, "predict", lambda x, raw=False: aieflow.design.Design.predict(d, x, raw) + 1)
        return d

    monkeypatch.setattr(aieflow, "load", off_by_one)
    assert run_case(_case(qdq_mlp([6, 4]))).status == "mismatch"


def test_hostile_names_reach_the_model():
    from fuzz_models import rename
    from hypothesis import find

    from aieflow.model_zoo import qdq_mlp

    model = find(rename(qdq_mlp([6, 4])), lambda m: any("\n" in n.name for n in m.graph.node))
    onnx.checker.check_model(model)
    assert any("\n" in n.name for n in model.graph.node)
