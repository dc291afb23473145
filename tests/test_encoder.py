"""nn.TransformerEncoderLayer / nn.TransformerEncoder (issue 19 import item): the nodes
frontends/torch_encoder.py writes compute what PyTorch computes (float graph against the module
itself: norm_first both ways, relu and gelu, stacks with a final norm, the dynamo ONNX export), the
quantised design predicts within the attention tests' tolerance, one layer verifies bit for bit on
x86 (VEK280 int8), and what does not map is refused by name."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
import torch
from torch import nn

import aieflow
from aieflow.errors import AieflowError
from aieflow.frontends.onnx_frontend import import_onnx
from aieflow.frontends.torch_frontend import import_torch
from aieflow.passes.quantise import float_activations

TOKENS, FEATURES = 16, 32
TOLERANCE = {"int8": 0.1, "int16": 0.01}  # as tests/test_attention.py: of the output's largest magnitude


def _data(seed=0, n=32):
    return np.random.default_rng(seed).standard_normal((n, TOKENS, FEATURES)).astype(np.float32)


def _layer(norm_first=False, activation="relu", seed=0, **kw):
    torch.manual_seed(seed)
    return nn.TransformerEncoderLayer(FEATURES, 2, 64, batch_first=True, norm_first=norm_first,
                                      activation=activation, **kw).eval()


class Tagger(nn.Module):
    """Two encoder layers in an nn.TransformerEncoder with a final norm, mean pooling, a head."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(FEATURES, 2, 64, batch_first=True, norm_first=True, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(FEATURES), enable_nested_tensor=False)
        self.head = nn.Linear(FEATURES, 5)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1, keepdim=True))


def _float_error(model, graph, x):
    """Against the module's forward with autograd on: its documented (slow) path.  Under no_grad
    PyTorch's fast path takes any nn.GELU as the erf form, approximate='tanh' included."""
    y = float_activations(graph, x)[graph.outputs[0]]
    with torch.enable_grad():
        ref = model(torch.from_numpy(x)).detach().numpy()
    return float(np.abs(y - ref).max())


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu", nn.GELU(approximate="tanh")])
def test_encoder_layer_imports_as_pytorch_computes_it(norm_first, activation):
    m, x = _layer(norm_first, activation), _data()
    g = import_torch(m, torch.from_numpy(x[:2])).graph
    assert _float_error(m, g, x) < 1e-5
    ops = [n.op for n in g.nodes]
    assert ops.count("layernorm") == 2 and ops.count("add") == 2 and ops.count("matmul") == 4
    assert ops[0] == ("layernorm" if norm_first else "dense")
    names = {n.name for n in g.nodes}
    assert {"linear1", "linear2", "norm1", "norm2", "self_attn.out_proj"} <= names


def test_encoder_stack_in_a_model_imports_as_pytorch_computes_it():
    torch.manual_seed(1)
    m, x = Tagger().eval(), _data(1)
    g = import_torch(m, torch.from_numpy(x[:2])).graph
    assert _float_error(m, g, x) < 1e-5
    ops = [n.op for n in g.nodes]
    assert ops.count("layernorm") == 5 and ops.count("matmul") == 8
    assert {"enc.layers.0.linear1", "enc.layers.1.norm2", "enc.norm"} <= {n.name for n in g.nodes}


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_dynamo_onnx_export_imports_as_pytorch_computes_it(norm_first):
    m, x = _layer(norm_first, "gelu"), _data()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.from_numpy(x[:4]),), f, opset_version=18, dynamo=True)
    g = import_onnx(onnx.load_from_string(f.getvalue())).graph
    assert _float_error(m, g, x) < 1e-5
    assert [n.op for n in g.nodes].count("matmul") == 4


def test_encoder_layer_compiles_predicts_and_verifies_bit_exact_on_x86():
    m, x = _layer(False, "gelu"), _data(n=64)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": 2})
    assert type(d).__name__ == "DagDesign"
    with torch.no_grad():
        ref = m(torch.from_numpy(x[:16])).numpy()
    assert np.abs(d.predict(x[:16]) - ref).max() <= TOLERANCE["int8"] * np.abs(ref).max()
    v = d.verify(samples=4)
    assert v.ok, v.verdict()


def _refused(model, x, *words):
    with pytest.raises(AieflowError) as e:
        import_torch(model, torch.from_numpy(x[:2]))
    for w in words:
        assert w in str(e.value), str(e.value)


def test_an_encoder_layer_in_training_mode_with_dropout_is_refused():
    x = _data()
    m = _layer(dropout=0.1).train()
    _refused(m, x, "training mode", "dropout", "model.eval()")
    assert m.training  # the caller's mode is given back
    m0 = _layer(dropout=0.0).train()  # dropout 0: nothing to ignore
    g = import_torch(m0, torch.from_numpy(x[:2])).graph
    assert _float_error(m0.eval(), g, x) < 1e-5


def test_unmapped_encoder_layers_are_refused_by_name():
    x = _data()
    torch.manual_seed(0)
    _refused(nn.TransformerEncoderLayer(FEATURES, 2, 64, batch_first=False).eval(), x,
             "nn.TransformerEncoderLayer", "batch_first=False")
    _refused(_layer(activation=torch.nn.functional.silu), x, "nn.TransformerEncoderLayer", "activation silu")

    class Padded(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = _layer()
            pad = torch.zeros(2, TOKENS, dtype=torch.bool)
            pad[1, 3] = True  # a padding of one sample only: a per-sample buffer (forward(x, mask) maps: test_runtime_masks.py)
            self.register_buffer("pad", pad)

        def forward(self, x):
            return self.enc(x, src_key_padding_mask=self.pad)

    _refused(Padded().eval(), x, "'enc'", "key padding mask whose rows differ", "forward()'s second input")
