"""ONNX import of a run-time key padding mask given as the second graph input (issue 19,
frontends/onnx_mask.py): the exports of forward(x, mask) by both exporters against onnxruntime and
PyTorch (random jet-like paddings, rows keeping one key), the same IR as the torch import (the mask as
graph.inputs[1] read by each softmax as its second input), the run-time mask against the unmasked and
constant-mask exports' designs code for code, and what stays refused by name."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from cases import refused
from onnx import TensorProto, helper
from test_runtime_masks import Constant, Encoder, Mha, T, _data, _float_mask, _padding
from torch import nn

import aieflow
from aieflow.errors import AieflowError
from aieflow.frontends.onnx_frontend import import_onnx
from aieflow.frontends.torch_frontend import import_torch
from aieflow.passes.quantise import float_activations

N = 16  # the exported batch (the exports fix it in their Reshape targets)


def _export(m, x, pad, path, dynamo):
    torch.onnx.export(m, (torch.from_numpy(x), torch.from_numpy(pad)), str(path), opset_version=18 if dynamo else 17,
                      input_names=["x", "mask"], output_names=["y"], dynamo=dynamo)
    return str(path)


def _torch(m, x, pad):
    with torch.enable_grad():  # PyTorch's autograd path (no nested-tensor fast path)
        return m(torch.from_numpy(x), torch.from_numpy(pad)).detach().numpy()


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("make", [Mha, lambda: Mha(causal=True), Encoder], ids=["mha", "mha_causal", "encoder"])
def test_onnx_runtime_padding_imports_as_the_torch_graph_and_computes_as_onnxruntime(make, dynamo, tmp_path):
    torch.manual_seed(11)
    m, x, pad = make().eval(), _data(11, N), _padding(11, N)
    path = _export(m, x, pad, tmp_path / "m.onnx", dynamo)
    g = import_onnx(path).graph
    assert g.inputs == ("x", "mask") and g.tensors["mask"].shape == (T,)
    sms = [n for n in g.nodes if n.op == "softmax"]
    tg = import_torch(m, torch.from_numpy(x[:2])).graph
    assert len(sms) == sum(n.op == "softmax" for n in tg.nodes) == 2  # one per head, as the torch import
    assert all(n.inputs[1] == g.inputs[1] for n in sms)
    keeps = [n.params.get("keep") for n in sms]
    want = [n.params.get("keep") for n in tg.nodes if n.op == "softmax"]
    assert all((a is None and b is None) or np.array_equal(a, b) for a, b in zip(keeps, want, strict=True))
    got = float_activations(g, x, (~pad).astype(np.uint8))[g.outputs[0]]
    ref_ort = ort.InferenceSession(path).run(None, {"x": x, "mask": pad})[0]
    assert np.abs(got - ref_ort).max() < 1e-5
    assert np.abs(got - _torch(m, x, pad)).max() < 1e-5
    other = _padding(12, N)  # a different padding on the same import: the mask is read at run time
    got = float_activations(g, x, (~other).astype(np.uint8))[g.outputs[0]]
    assert np.abs(got - _torch(m, x, other)).max() < 1e-5


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_a_float_zero_minus_inf_mask_input_imports_too(dynamo, tmp_path):
    torch.manual_seed(12)
    m, x, pad = Mha().eval(), _data(12, N), _padding(12, N)
    fm = _float_mask(pad)
    path = _export(m, x, fm, tmp_path / "m.onnx", dynamo)
    g = import_onnx(path).graph
    assert g.inputs == ("x", "mask") and all(n.inputs[1] == "mask" for n in g.nodes if n.op == "softmax")
    got = float_activations(g, x, (~pad).astype(np.uint8))[g.outputs[0]]
    assert np.abs(got - ort.InferenceSession(path).run(None, {"x": x, "mask": fm})[0]).max() < 1e-5
    assert np.abs(got - _torch(m, x, fm)).max() < 1e-5


def test_a_mask_read_by_the_wrong_sample_isrefused(tmp_path, monkeypatch):
    """The importer proves that element [n, ..., k] of the scores reads mask[n, k] (an index map
    through the Reshape / Expand / Transpose nodes): a Transpose + Reshape that swaps samples and heads
    (same shape, onnxruntime runs it) is refused; taking that check out (tried once) imports it."""
    torch.manual_seed(13)
    m, x, pad = Mha().eval(), _data(13, N), _padding(13, N)
    path = _export(m, x, pad, tmp_path / "m.onnx", dynamo=False)
    proto = onnx.load(path)
    # TorchScript's last Reshape of the mask gives [N, H, 1, T]; read it as [H, N, 1, T] -> [N, H, 1, T]
    last = next(n for n in proto.graph.node if n.op_type == "Reshape" and n.output[0].endswith("Reshape_8_output_0"))
    proto.graph.initializer.append(helper.make_tensor("nh1t", TensorProto.INT64, [4], [N, 2, 1, T]))
    extra = [helper.make_node("Transpose", [last.output[0]], ["swapped"], perm=[1, 0, 2, 3]),
             helper.make_node("Reshape", ["swapped", "nh1t"], ["scrambled"])]
    for u in [n for n in proto.graph.node if last.output[0] in n.input]:
        u.input[list(u.input).index(last.output[0])] = "scrambled"
    at = list(proto.graph.node).index(last) + 1
    for k, n in enumerate(extra):
        proto.graph.node.insert(at + k, n)
    ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x, "mask": pad})  # a valid model
    with pytest.raises(AieflowError) as e:
        import_onnx(proto)
    assert "the second, 'mask', can only be a run-time key padding mask" in str(e.value) and "each sample's row" in str(e.value), str(e.value)


def test_onnx_runtime_mask_reproduces_the_unmasked_exports_design(tmp_path):
    """Quantised: the run-time mask design (ONNX) with an all-False mask gives the codes of the ONNX
    export of the same model without a mask (same calibration)."""
    torch.manual_seed(14)
    m, x = Mha().eval(), _data(14, 64)
    cfg = {"precision": "int8"}
    path = _export(m, x[:N], _padding(14, N), tmp_path / "rt.onnx", dynamo=False)
    none = np.zeros((64, T), dtype=bool)
    plain = str(tmp_path / "plain.onnx")
    torch.onnx.export(Constant(m).eval(), (torch.from_numpy(x[:N]),), plain, opset_version=17, input_names=["x"],
                      output_names=["y"], dynamo=False)
    rt = aieflow.emulate(path, device="vek280", example_input=x[:1], calibration=(x, none), config=cfg)
    pl = aieflow.emulate(plain, device="vek280", example_input=x[:1], calibration=x, config=cfg)
    assert np.array_equal(rt.predict(x, raw=True, mask=none), pl.predict(x, raw=True))
    pads = _padding(15, 64)
    got = rt.predict(x, raw=True, mask=pads)
    assert not np.array_equal(got, pl.predict(x, raw=True))  # the mask is read at run time
    assert np.array_equal(got[3:4], rt.predict(x[3:4], raw=True, mask=pads[3:4]))  # each sample its own row


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_a_constant_padding_buffer_imports_from_both_exporters(dynamo, tmp_path):
    """A key padding mask held as a buffer (the same keys padded for every sample): the TorchScript
    export folds it through Cast / Where / Reshape / Expand, the dynamo export adds it as a
    [1, heads, 1, T] mask.  Both import as a constant mask (float within 1e-5 of onnxruntime and
    PyTorch), and the quantised design computes the codes of the run-time mask design given that
    padding for every sample."""
    torch.manual_seed(16)
    m, x = Mha().eval(), _data(16, 64)
    row = np.arange(T) >= 9  # keys 9.. padded
    const = Constant(m, np.repeat(row[None], N, axis=0)).eval()
    path = str(tmp_path / "const.onnx")
    torch.onnx.export(const, (torch.from_numpy(x[:N]),), path, opset_version=18 if dynamo else 17,
                      input_names=["x"], output_names=["y"], dynamo=dynamo)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x[:N]})[0]
    with torch.enable_grad():
        pt = const(torch.from_numpy(x[:N])).detach().numpy()
    g = import_onnx(path).graph
    keeps = [n.params["keep"] for n in g.nodes if n.op == "softmax"]
    assert len(keeps) == 2 and all(np.array_equal(k, np.broadcast_to(~row, (T, T))) for k in keeps)
    got = float_activations(g, x[:N])[g.outputs[0]]
    assert np.abs(got - ref).max() <= 1e-5 and np.abs(got - pt).max() <= 1e-5
    pads = np.repeat(row[None], 64, axis=0)
    rt_path = _export(m, x[:N], pads[:N], tmp_path / "rt.onnx", dynamo)
    cfg = {"precision": "int8"}
    ce = aieflow.emulate(path, device="vek280", example_input=x[:1], calibration=x, config=cfg)
    re = aieflow.emulate(rt_path, device="vek280", example_input=x[:1], calibration=(x, pads), config=cfg)
    assert np.array_equal(ce.predict(x, raw=True), re.predict(x, raw=True, mask=pads))


def test_onnx_imported_quantised_design_follows_pytorch(tmp_path):
    torch.manual_seed(15)
    m, x, pad = Encoder().eval(), _data(15, 64), _padding(15, 64)
    path = _export(m, x[:N], pad[:N], tmp_path / "enc.onnx", dynamo=True)
    em = aieflow.emulate(path, device="vek280", example_input=x[:1], calibration=(x, pad),
                         config={"precision": "int16"})
    ref = _torch(m, x, pad)
    assert np.abs(em.predict(x, mask=pad) - ref).max() <= 0.05 * np.abs(ref).max()


def test_what_stays_refused_is_refused_by_name(tmp_path):
    torch.manual_seed(16)
    x, pad = _data(16, N), _padding(16, N)

    class Gated(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x, mask):
            return self.fc(x) * (~mask)[..., None].float()

    path = _export(Gated().eval(), x, pad, tmp_path / "gated.onnx", dynamo=False)
    refused(lambda: import_onnx(path), "the second, 'mask', can only be a run-time key padding mask", "key padding mask")

    class PerSampleAttnMask(nn.Module):  # a [N, T] mask broadcast over the queries' rows: not a padding
        def __init__(self):
            super().__init__()
            self.att = nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x, mask):
            att = mask[:, :, None].expand(-1, -1, T).repeat_interleave(2, dim=0)
            return self.att(x, x, x, attn_mask=att, need_weights=False)[0]

    path = _export(PerSampleAttnMask().eval(), x, pad, tmp_path / "psa.onnx", dynamo=False)
    refused(lambda: import_onnx(path), "the second, 'mask', can only be a run-time key padding mask")

    class Ints(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = Mha()

        def forward(self, x, mask):
            return self.m(x, mask.bool())

    path = _export(Ints().eval(), x, pad.astype(np.int64), tmp_path / "ints.onnx", dynamo=False)
    refused(lambda: import_onnx(path), "graph input 'mask'", "INT64", "boolean")

    class Three(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = Mha()

        def forward(self, x, mask, y):
            return self.m(x + y, mask)

    p3 = str(tmp_path / "three.onnx")
    torch.onnx.export(Three().eval(), (torch.from_numpy(x), torch.from_numpy(pad), torch.from_numpy(x)), p3,
                      opset_version=17, input_names=["x", "mask", "y"], output_names=["out"], dynamo=False)
    refused(lambda: import_onnx(p3), "3 graph inputs ('x', 'mask', 'y')", "key padding mask")
