"""QONNX channels-last wrappers (issue 25 item 1, ``frontends/qonnx_channels_last.py``).

qonnx's ``ConvertToChannelsLastAndClean`` turns a channels-first CNN's Conv / MaxPool /
BatchNormalization into ``qonnx.custom_op.channels_last`` ops on NHWC tensors (a Conv's weight as
[O, KH, KW, I]) behind a Transpose after the input, and reorders the Dense after a Flatten.  The
models here are made by qonnx itself from PyTorch exports (Conv2d + BatchNorm + ReLU + MaxPool +
Flatten + Linear, and a Conv1d one).  Checked: the files hold the wrapped ops (not vacuous); aieflow
imports them and its fp32 ``predict`` equals onnxruntime on the channels-first export and qonnx's own
execution of the channels-last file within float rounding; an int8 design of the channels-last file
predicts the same codes as one of the channels-first export; a file without the domain's opset
import reads the same; a wrapped op other than the three is refused by name.  The references
(onnxruntime, qonnx) import nothing from aieflow.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("qonnx")
ort = pytest.importorskip("onnxruntime")
from onnx_files import export_onnx  # noqa: E402
from qonnx.core.modelwrapper import ModelWrapper  # noqa: E402
from qonnx.core.onnx_exec import execute_onnx  # noqa: E402
from qonnx.transformation.channels_last import ConvertToChannelsLastAndClean  # noqa: E402
from qonnx.transformation.infer_shapes import InferShapes  # noqa: E402
from torch import nn  # noqa: E402

import aieflow  # noqa: E402
from aieflow.errors import ModelError  # noqa: E402

DOMAIN = "qonnx.custom_op.channels_last"


class Cnn2d(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.bn(self.conv(x)))), 1))


class Cnn1d(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv1d(2, 6, 5, padding=2)
        self.pool = nn.MaxPool1d(2)
        self.fc = nn.Linear(6 * 8, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


CASES = {"conv2d_bn": (Cnn2d, (3, 8, 8)), "conv1d": (Cnn1d, (2, 16))}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """name -> (channels-first export, qonnx's channels-last file)."""
    out = {}
    for name, (cls, shape) in CASES.items():
        d = tmp_path_factory.mktemp(name)
        first = d / "first.onnx"
        export_onnx(
            cls().eval(), np.zeros((1, *shape), np.float32), first, do_constant_folding=False
        )  # BN kept
        w = (
            ModelWrapper(str(first))
            .transform(InferShapes())
            .transform(ConvertToChannelsLastAndClean())
        )
        last = d / "last.onnx"
        w.save(str(last))
        out[name] = (first, last)
    return out


def _data(shape, n=8, seed=3):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


@pytest.mark.parametrize("name", CASES)
def test_the_files_hold_channels_last_wrappers(files, name):
    wrapped = {n.op_type for n in onnx.load(str(files[name][1])).graph.node if n.domain == DOMAIN}
    assert wrapped == (
        {"Conv", "BatchNormalization", "MaxPool"} if name == "conv2d_bn" else {"Conv", "MaxPool"}
    )


@pytest.mark.parametrize("name", CASES)
def test_fp32_predict_equals_onnxruntime_and_qonnx(files, name):
    first, last = files[name]
    shape = CASES[name][1]
    x = _data(shape)
    d = aieflow.compile(str(last), "vck190", x[:1], calibration=x, config={"precision": "fp32"})
    got = np.asarray(d.predict(x), np.float32)
    sess = ort.InferenceSession(str(first))
    want = np.concatenate(
        [sess.run(None, {sess.get_inputs()[0].name: x[i : i + 1]})[0] for i in range(len(x))]
    )
    w = ModelWrapper(str(last))
    q = np.concatenate(
        [
            execute_onnx(w, {w.graph.input[0].name: x[i : i + 1]})[w.graph.output[0].name]
            for i in range(len(x))
        ]
    )
    np.testing.assert_allclose(
        q, want, rtol=1e-5, atol=1e-5
    )  # qonnx agrees with the channels-first file
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", CASES)
def test_int8_designs_of_both_files_predict_the_same(files, name):
    first, last = files[name]
    x = _data(CASES[name][1], n=16, seed=4)
    cfg = {"precision": "int8"}
    a = aieflow.compile(str(first), "vek280", x[:1], calibration=x, config=cfg)
    b = aieflow.compile(str(last), "vek280", x[:1], calibration=x, config=cfg)
    assert b.plan.mapping == a.plan.mapping
    np.testing.assert_array_equal(np.asarray(b.predict(x)), np.asarray(a.predict(x)))


def test_without_the_domains_opset_import_reads_the_same(files, tmp_path):
    first, last = files["conv2d_bn"]
    m = onnx.load(str(last))
    keep = [o for o in m.opset_import if o.domain != DOMAIN]
    del m.opset_import[:]
    m.opset_import.extend(keep)
    bare = tmp_path / "bare.onnx"
    onnx.save(m, str(bare))
    x = _data(CASES["conv2d_bn"][1])
    a = aieflow.compile(str(last), "vck190", x[:1], calibration=x, config={"precision": "fp32"})
    b = aieflow.compile(str(bare), "vck190", x[:1], calibration=x, config={"precision": "fp32"})
    np.testing.assert_array_equal(np.asarray(b.predict(x)), np.asarray(a.predict(x)))
    c = aieflow.compile(
        m, "vck190", x[:1], calibration=x, config={"precision": "fp32"}
    )  # a ModelProto too
    np.testing.assert_array_equal(np.asarray(c.predict(x)), np.asarray(a.predict(x)))
    assert not [
        o for o in m.opset_import if o.domain == DOMAIN
    ]  # the caller's proto is not changed


def test_other_wrapped_ops_are_refused_by_name(files):
    m = onnx.load(str(files["conv2d_bn"][1]))
    node = next(n for n in m.graph.node if n.domain == DOMAIN and n.op_type == "MaxPool")
    node.op_type, node.name = "AveragePool", "odd_pool"
    with pytest.raises(
        ModelError,
        match=r"node 'odd_pool' \(qonnx.custom_op.channels_last AveragePool\): only "
        r"channels-last Conv, MaxPool, BatchNormalization",
    ):
        aieflow.compile(m, "vck190", _data((3, 8, 8))[:1], config={"precision": "fp32"})
