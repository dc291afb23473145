"""ONNX import of masked mean pooling over tokens (issue 19, frontends/onnx_masked_mean.py): the exports of
the two PyTorch forms (and their other spellings) by both exporters import into the same masked_mean node
as the torch import, compute within 1e-5 of onnxruntime (random prefix and scattered paddings, samples
keeping one token), the int8 design's codes equal the torch-imported design's, and a pooling of another
form stays refused by name."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from test_masked_mean import (
    T,
    Tagger,
    _data,
    _padding,
    _pool_a,
    _pool_a_spelt,
    _pool_b,
    _pool_b_spelt,
)
from test_masked_mean_dag import PooledTagger
from test_onnx_runtime_masks import _export, _torch

import aieflow
from aieflow.errors import AieflowError
from aieflow.frontends.onnx_frontend import import_onnx
from aieflow.frontends.torch_frontend import import_torch
from aieflow.passes.quantise import float_activations

N = 16  # the exported batch

POOLS = {"a": _pool_a, "b": _pool_b, "a_spelt": _pool_a_spelt, "b_spelt": _pool_b_spelt}


def _graph_ops(g):
    """The ops in order, the ONNX MatMul + Add's bias_add (fused into the Dense later) left out."""
    return [n.op for n in g.nodes if n.op != "bias_add"]


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("form", list(POOLS))
def test_masked_mean_exports_import_as_the_torch_graph_and_compute_as_onnxruntime(form, dynamo, tmp_path):
    torch.manual_seed(21)
    m, x, pad = PooledTagger(POOLS[form], 16).eval(), _data(21, N), _padding(21, N)
    path = _export(m, x, pad, tmp_path / "m.onnx", dynamo)
    g = import_onnx(path).graph
    (mm,) = [n for n in g.nodes if n.op == "masked_mean"]
    assert g.inputs == ("x", "mask") and mm.inputs[1] == g.inputs[1] and g.tensors[mm.outputs[0]].shape == (16,)
    assert g.tensors[mm.inputs[0]].shape == (T, 16)
    tg = import_torch(m, torch.from_numpy(x[:2])).graph
    assert _graph_ops(g) == _graph_ops(tg) == ["dense", "masked_mean", "dense"]
    got = float_activations(g, x, (~pad).astype(np.uint8))[g.outputs[0]]
    ref = ort.InferenceSession(path).run(None, {"x": x, "mask": pad})[0]
    assert np.abs(got - ref).max() < 1e-5
    assert np.abs(got - _torch(m, x, pad)).max() < 1e-5


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_the_quantised_design_of_the_export_equals_the_torch_designs_codes(dynamo, tmp_path):
    torch.manual_seed(22)
    x, pad = _data(22, N), _padding(22, N)
    # with an encoder layer reading the mask too: the pooling and the softmaxes share the mask input
    enc = Tagger(_pool_b, encoder=True).eval()
    path = _export(enc, x, pad, tmp_path / "enc.onnx", dynamo)
    g = import_onnx(path).graph
    assert sum(n.op == "masked_mean" for n in g.nodes) == 1 and sum(n.op == "softmax" for n in g.nodes) == 2
    ref = ort.InferenceSession(path).run(None, {"x": x, "mask": pad})[0]
    assert np.abs(float_activations(g, x, (~pad).astype(np.uint8))[g.outputs[0]] - ref).max() < 1e-5
    # the tagger's pooling: the export's int8 design and the torch import's, code for code
    m = PooledTagger(_pool_a, 16).eval()
    path = _export(m, x, pad, tmp_path / "m.onnx", dynamo)
    cal = (_data(23, 64), _padding(23, 64))
    cfg = {"precision": "int8"}
    eo = aieflow.emulate(path, device="vek280", calibration=cal, config=cfg)
    et = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=cal, config=cfg)
    xs, pads = _data(24, 48), _padding(24, 48, full=True)
    got, want = eo.predict(xs, mask=pads, raw=True), et.predict(xs, mask=pads, raw=True)
    assert np.array_equal(got, want) and np.any(got != 0)


def test_another_form_of_the_pooling_stays_refused_by_name(tmp_path):
    torch.manual_seed(25)
    x, pad = _data(25, N), _padding(25, N)
    fill_one = PooledTagger(lambda h, mask: h.masked_fill(mask[..., None], 1.0).sum(1) / (~mask).sum(1, keepdim=True), 16)
    path = _export(fill_one.eval(), x, pad, tmp_path / "m.onnx", False)
    with pytest.raises(AieflowError) as e:
        import_onnx(path)
    for w in ("second, 'mask', can only be a run-time key padding mask", "masked mean pooling", "'/Where'"):
        assert w in str(e.value), str(e.value)
