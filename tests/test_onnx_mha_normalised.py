"""ONNX exports of nn.MultiheadAttention and nn.TransformerEncoderLayer import as the torch import of the
same model (issue 19): both exporters (TorchScript opset 17, dynamo opset 18), without and with a
run-time key padding mask, and a single-head nn.MultiheadAttention (no head split in the exports).  The exporters scale Q and K^T by d^(-1/4) each and slice the heads out of a
packed in_proj; frontends/attention.py moves the K^T factor onto Q (one 1/sqrt(d), in the Q projection)
and cuts the packed projection per head.  Checked: the fused graphs (what quantise reads) node for node
(ops, attributes, wiring, shapes, weights within float rounding), the ONNX float graph against
onnxruntime within 1e-5, and the int8 designs' codes identical for the same calibration data."""

from __future__ import annotations

import math
import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch
from cases import refused
from onnxruntime import quantization as quant
from test_qdq_affine import Reader
from test_runtime_masks import Constant, E, Encoder, Mha, T, _data, _padding
from torch import nn

import aieflow
from aieflow.frontends.onnx_frontend import import_onnx
from aieflow.frontends.torch_frontend import import_torch
from aieflow.ir import QuantHints
from aieflow.passes.fuse import fuse
from aieflow.passes.quantise import float_activations

N = 16  # the exported batch (the exports fix it in their Reshape targets)
HEADS = 2


class Plain(nn.Module):
    """An encoder layer (or Mha) with no mask: forward(x) only."""

    def __init__(self, src):
        super().__init__()
        self.src = src

    def forward(self, x):
        return self.src(x, None)


def _models(kind: str, masked: bool, heads: int = HEADS):
    torch.manual_seed(21)
    m = Mha(heads=heads) if kind == "mha" else Encoder()
    att = next(a for a in m.modules() if isinstance(a, nn.MultiheadAttention))
    # random biases (not the initial zeros): the packed bias's cut per role and head shows, and the
    # dynamo exporter keeps out_proj's (it drops a zero Gemm bias: a Dense without one, same function)
    with torch.no_grad():
        att.in_proj_bias.normal_(0, 0.5)
        att.out_proj.bias.normal_(0, 0.5)
    m.eval()
    if masked:
        return m
    return (Constant(m) if kind == "mha" else Plain(m)).eval()


def _export(m, x, pad, path, dynamo):
    args = (torch.from_numpy(x),) if pad is None else (torch.from_numpy(x), torch.from_numpy(pad))
    names = ["x"] if pad is None else ["x", "mask"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            m,
            args,
            str(path),
            opset_version=18 if dynamo else 17,
            input_names=names,
            output_names=["y"],
            dynamo=dynamo,
        )
    return str(path)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.shape(a) == np.shape(b) and np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _close(p, q) -> bool:
    p, q = np.asarray(p), np.asarray(q)
    return p.shape == q.shape and np.allclose(
        p.astype(np.float64), q.astype(np.float64), rtol=1e-6, atol=1e-7
    )


def _match(ga, gb) -> dict[str, str]:
    """A one-to-one map of ga's nodes onto gb's with the same op, attributes, output shapes, parameters
    (within float rounding) and wiring (the graph inputs by position); asserts that it exists and
    covers both graphs.  Node names and order are free."""
    tmap = dict(zip(ga.inputs, gb.inputs, strict=True))
    free = list(gb.nodes)
    names = {}
    for a in ga.nodes:
        ins = tuple(tmap.get(t) for t in a.inputs)
        assert None not in ins, a.name
        found = [
            b
            for b in free
            if b.op == a.op
            and b.inputs == ins
            and set(b.attrs) == set(a.attrs)
            and all(_same(a.attrs[k], b.attrs[k]) for k in a.attrs)
            and set(b.params) == set(a.params)
            and all(_close(a.params[k], b.params[k]) for k in a.params)
            and [gb.tensors[t].shape for t in b.outputs] == [ga.tensors[t].shape for t in a.outputs]
        ]
        assert found, f"no node of the ONNX import matches '{a.name}' ({a.op}) of the torch import"
        b = found[0]
        free.remove(b)
        names[a.name] = b.name
        tmap.update(zip(a.outputs, b.outputs, strict=True))
    assert not free, [b.name for b in free]
    assert tuple(tmap[t] for t in ga.outputs) == gb.outputs
    return names


def _fused(graph):
    return fuse(graph, QuantHints())[0]


CASES = [
    (kind, masked, dynamo, HEADS)
    for kind in ("mha", "encoder")
    for masked in (False, True)
    for dynamo in (False, True)
] + [
    ("mha", False, False, 1),
    ("mha", True, True, 1),
]  # one head: the exporters write no head split


@pytest.mark.parametrize(
    "kind, masked, dynamo, heads",
    CASES,
    ids=[
        f"{k}-{'mask' if m else 'nomask'}-{'dynamo' if d else 'torchscript'}{'' if h == HEADS else f'-{h}head'}"
        for k, m, d, h in CASES
    ],
)
def test_onnx_attention_imports_as_the_torch_import(kind, masked, dynamo, heads, tmp_path):
    m, x = _models(kind, masked, heads), _data(21, 64)
    pad = _padding(21, 64) if masked else None
    path = _export(m, x[:N], None if pad is None else pad[:N], tmp_path / "m.onnx", dynamo)
    tg = import_torch(m, torch.from_numpy(x[:2])).graph
    og = import_onnx(path).graph
    names = _match(_fused(tg), _fused(og))
    dense = [n for n in tg.nodes if n.op == "dense"]
    assert (
        sum("q_proj" in n.name for n in dense) == heads == sum(n.op == "softmax" for n in tg.nodes)
    )
    assert not {"reshape", "transpose", "slice"} & {n.op for n in _fused(og).nodes}  # no view left
    assert len(names) == len(_fused(og).nodes) and "scale" not in {n.op for n in og.nodes}
    # the whole 1/sqrt(d) sits in Q: Q's weights are in_proj's Q rows times it, K's are K's rows as they are
    att = next(a for a in m.modules() if isinstance(a, nn.MultiheadAttention))
    w = att.in_proj_weight.detach().numpy().T.astype(np.float64)
    d = E // heads
    by_name = {n.name: n for n in _fused(og).nodes}
    for role, factor in (("q", 1 / math.sqrt(d)), ("k", 1.0), ("v", 1.0)):
        for h in range(heads):
            tail = f"{role}_proj_f{h * d}" if heads > 1 else f"{role}_proj"  # one head: no cut
            tn = next(n for n in _fused(tg).nodes if n.name.endswith(tail))
            got = np.asarray(by_name[names[tn.name]].params["weight"], dtype=np.float64)
            cols = {"q": 0, "k": E, "v": 2 * E}[role] + h * d
            assert np.allclose(got, w[:, cols : cols + d] * factor, rtol=1e-6, atol=1e-7), (role, h)
    # the float graph computes what onnxruntime computes
    feeds = {"x": x[:N]} if pad is None else {"x": x[:N], "mask": pad[:N]}
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = float_activations(og, x[:N], None if pad is None else (~pad[:N]).astype(np.uint8))[
        og.outputs[0]
    ]
    assert np.abs(got - ref).max() < 1e-5
    # the int8 designs: the same codes for the same calibration data
    cfg = {"precision": "int8"}
    cal = x if pad is None else (x, pad)
    te = aieflow.emulate(m, device="vek280", example_input=x[:1], calibration=cal, config=cfg)
    oe = aieflow.emulate(path, device="vek280", example_input=x[:1], calibration=cal, config=cfg)
    kw = {} if pad is None else {"mask": pad}
    codes = oe.predict(x, raw=True, **kw)
    assert np.array_equal(te.predict(x, raw=True, **kw), codes)
    assert len(np.unique(codes)) > 8  # codes that differ between samples and features


def test_a_qdq_quantised_mha_export_is_refused_by_name(tmp_path):
    """onnxruntime quantize_static (QDQ, int8) of the TorchScript export: its first QuantizeLinear reads the
    exporter's [T, N, E] view of the input, which the importer does not take; refused naming that node and
    saying what to do (export the float model, let aieflow quantise it).  Not imported yet (docs/attention.md)."""
    path = _export(_models("mha", False), _data(21, N), None, tmp_path / "f.onnx", False)
    q = str(tmp_path / "q.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quant.quantize_static(
            path,
            q,
            Reader((T, E), 1),
            quant_format=quant.QuantFormat.QDQ,
            activation_type=quant.QuantType.QInt8,
            weight_type=quant.QuantType.QInt8,
        )
    refused(
        lambda: import_onnx(q),
        "(QuantizeLinear) quantises",
        "mixes the batch",
        "(QDQ)",
        "calibration data",
    )
