"""The fuzzing suite's quick profile (issue 16, item 7): random ONNX models, configs, devices,
names and inputs through compile -> predict -> save -> load -> predict (``tests/fuzz_models.py``).
Only ``AieflowError`` may escape, and the loaded design must predict bit for bit what the compiled
one did.  The long profile is ``make fuzz`` (``benchmarks/fuzz.py``)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from fuzz_models import KINDS, Case, Tally, _Builder, cases, first_words, run_case
from hypothesis import HealthCheck, given, settings
from onnx import TensorProto, helper, numpy_helper

import aieflow


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


# ------------------------------------------------------------------ what the fuzzer found


def test_empty_calibration_or_example_input_is_refused():
    """Zero samples crashed the CNN's float pass (ValueError in ops/pool.py), gave the importer a
    batch of 0 (misleading movement errors) and let a Dense chain 'calibrate' on nothing."""
    import aieflow
    from aieflow.errors import ConfigError

    b = _Builder(np.random.default_rng(0))
    x = b.one("Conv", ["x", b.weight(2, 1, 3, 3), b.weight(2)], kernel_shape=[3, 3])
    x = b.one("Flatten", [b.one("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])], axis=1)
    cnn = b.model((1, 6, 6), b.dense(x, 8, 3, "gemm"), [3])
    b = _Builder(np.random.default_rng(1))
    mlp = b.model((6,), b.dense("x", 6, 4, "gemm"), [4])
    for model, shape in ((cnn, (1, 6, 6)), (mlp, (6,))):
        empty = np.zeros((0, *shape), dtype=np.float32)
        with pytest.raises(ConfigError, match=r"calibration data has no values \(shape \(0,"):
            aieflow.compile(model, "vek280", calibration=empty)
        with pytest.raises(ConfigError, match=r"example input has no values"):
            aieflow.compile(model, "vek280", example_input=empty)


def _gru(r_shape=(1, 9, 3), b_shape=(1, 18)):
    """x [N, 2, 2] -> Transpose -> GRU(hidden 3) -> Y_h -> Squeeze, with R and B of the given shapes."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("W", (1, 9, 2)), ("R", r_shape), ("B", b_shape))]
    inits.append(numpy_helper.from_array(np.array([0], dtype=np.int64), "axes"))
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2], name="t"),
             helper.make_node("GRU", ["xt", "W", "R", "B"], ["y", "y_h"], hidden_size=3, linear_before_reset=1, name="gru"),
             helper.make_node("Squeeze", ["y_h", "axes"], ["out"], name="sq")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 2])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 3])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("which", ["R", "B"])
def test_recurrent_weights_of_the_wrong_shape_are_a_model_error(which):
    # found by the long profile: a wrong R or B ended in numpy's "array split does not result in an
    # equal division" inside the importer
    model = _gru(r_shape=(1, 9, 2)) if which == "R" else _gru(b_shape=(1, 17))
    x = np.random.default_rng(1).standard_normal((4, 2, 2)).astype(np.float32)
    with pytest.raises(aieflow.AieflowError, match=f"node 'gru' \\(GRU\\): {which} has shape"):
        aieflow.compile(model, device="vck190", example_input=x, calibration=x, config={"precision": "int16"})
    assert aieflow.compile(_gru(), device="vck190", example_input=x, calibration=x, config={"precision": "fp32"})


def test_a_float_dag_without_example_input_compiles():
    # found by the long profile: a bf16 token-mixing graph compiled without example input drew its
    # data files' random codes from a float type ('FloatType' object has no attribute 'min_code')
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in (("A", (2, 2)), ("B", (2, 4)))]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1], name="t0"),
             helper.make_node("MatMul", ["xt", "A"], ["m0"], name="mm0"),
             helper.make_node("Transpose", ["m0"], ["m1"], perm=[0, 2, 1], name="t1"),
             helper.make_node("MatMul", ["m1", "B"], ["y"], name="mm1")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 4])], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    d = aieflow.compile(model, device="vek280", config={"precision": "bf16", "batch": 8})
    x = rng.standard_normal((3, 2, 2)).astype(np.float32)
    assert d.predict(x).shape == (3, 2, 4) and "data/in_x.txt" in d.files
