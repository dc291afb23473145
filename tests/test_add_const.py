"""A constant added to every sample (issue 19: a transformer's positional embedding, ``x + self.pos``):
``add_const`` (ops/add_const.py).  The codes against an independent plain-Python reference (random
codes, saturating sums, several scale pairs; bf16 against exact rational sums rounded once), the
PyTorch and ONNX imports against PyTorch /
onnxruntime, the refusals, and a tagger with a positional embedding bit-exact on x86 (VEK280 int8)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

import aieflow
from aieflow.errors import AieflowError
from aieflow.frontends.torch_frontend import import_torch
from aieflow.numerics.types import FixedType
from aieflow.ops import add_const
from aieflow.passes.quantise import float_activations

T, E = 16, 32


def _ref(x: int, c: int, fa: int, fc: int, fo: int, lo: int, hi: int) -> int:
    """Align both to the finer grid, add exactly, round half to even into fo bits, saturate."""
    f = max(fa, fc)
    s = x * 2 ** (f - fa) + c * 2 ** (f - fc)
    sh = f - fo
    if sh == 0:
        v = s
    else:
        q, r = divmod(s, 2**sh)  # floor division: r in [0, 2^sh)
        half = 2 ** (sh - 1)
        v = q + (1 if r > half or (r == half and q % 2) else 0)
    return max(lo, min(hi, v))


@pytest.mark.parametrize("width,fa,fc,fo", [(8, 4, 6, 3), (8, 6, 2, 5), (16, 10, 12, 9), (16, 8, 8, 8)])
def test_constant_add_codes_match_an_integer_reference(width, fa, fc, fo):
    rng = random.Random(width + fa)
    ta, tc, to = FixedType(width, fa), FixedType(width, fc), FixedType(width, fo)
    c = np.array([[rng.randint(tc.min_code, tc.max_code) for _ in range(E)] for _ in range(T)])
    x = np.array([[[rng.choice((ta.min_code, ta.max_code, rng.randint(ta.min_code, ta.max_code)))
                    for _ in range(E)] for _ in range(T)] for _ in range(3)])
    f = max(fa, fc)
    t = add_const.ConstAddTypes(ta, tc, to, f - fa, f - fc, f - fo)
    node = aieflow.ir.Node(name="pos", op="add_const", inputs=("x",), outputs=("y",), types=t,
                           params={"constant": c.astype(np.float32), "constant_q": c})
    got = add_const.emulate(node, x)
    want = [[[_ref(int(x[s, i, j]), int(c[i, j]), fa, fc, fo, to.min_code, to.max_code) for j in range(E)]
             for i in range(T)] for s in range(3)]
    assert got.tolist() == want


class Tagger(nn.Module):
    def __init__(self, shape=(1, T, E), activation="relu"):
        super().__init__()
        self.emb = nn.Linear(16, E)
        self.pos = nn.Parameter(torch.randn(*shape) * 0.5)
        self.enc = nn.TransformerEncoderLayer(E, 2, 64, dropout=0.0, batch_first=True, norm_first=True,
                                              activation=activation)
        self.head = nn.Linear(E, 5)

    def forward(self, x):
        t = self.enc(self.emb(x) + self.pos)
        return torch.softmax(self.head(t.mean(dim=1, keepdim=True)), dim=-1)


def _data(seed=0, n=64):
    return np.random.default_rng(seed).standard_normal((n, T, 16)).astype(np.float32)


@pytest.mark.parametrize("shape", [(1, T, E), (T, E)])
def test_positional_add_imports_as_pytorch_computes(shape):
    torch.manual_seed(1)
    m, x = Tagger(shape).eval(), _data(1)
    g = import_torch(m, torch.from_numpy(x[:2])).graph
    assert [n.op for n in g.nodes][:2] == ["dense", "add_const"]
    with torch.no_grad():
        ref = m(torch.from_numpy(x)).numpy()
    assert np.abs(float_activations(g, x)[g.outputs[0]] - ref).max() < 1e-5


def test_positional_add_onnx_export_imports_as_onnxruntime_computes(tmp_path):
    import onnxruntime as ort

    from aieflow.frontends.onnx_frontend import import_onnx

    class Emb(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Linear(16, E), nn.Parameter(torch.randn(1, T, E))

        def forward(self, x):
            return torch.relu(self.emb(x) + self.pos)

    torch.manual_seed(2)
    m, x = Emb().eval(), _data(2, n=2)
    path = str(tmp_path / "pos.onnx")
    torch.onnx.export(m, (torch.from_numpy(x),), path, opset_version=17, dynamo=False)
    g = import_onnx(path).graph
    assert "add_const" in [n.op for n in g.nodes]
    s = ort.InferenceSession(path)
    ref = s.run(None, {s.get_inputs()[0].name: x})[0]
    assert np.abs(float_activations(g, x)[g.outputs[0]] - ref).max() < 1e-5


def test_unmapped_constant_adds_are_refused_by_name():
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Linear(16, E), nn.Parameter(torch.randn(E))  # broadcasts over tokens: not [T, E]

        def forward(self, x):
            return self.emb(x) + self.pos

    with pytest.raises(AieflowError, match=r"'pos' of shape \(32,\).*positional embedding"):
        import_torch(Bad().eval(), torch.from_numpy(_data(n=2)))


def _bf16_values(rng: random.Random, n: int) -> list[float]:
    """Random finite bf16 values (random bit patterns: every exponent, subnormals, both zeros)."""
    import struct

    out = []
    while len(out) < n:
        u = rng.getrandbits(16)
        if (u >> 7) & 0xFF == 0xFF:
            continue
        out.append(struct.unpack("<f", struct.pack("<I", u << 16))[0])
    return out


def test_bf16_constant_add_is_the_exact_sum_rounded_once():
    """bf16 add_const: y = bf16(float32(x) + float32(c)) (ops/add_const.py, the residual add's bf16
    rule) equals the exact rational sum of the two bf16 values rounded once to bf16, nearest even
    (tests/float_reference.py, integers and fractions only): random bit patterns at every exponent
    (gaps beyond the float32 significand included), ties both ways, overflow, signed zeros."""
    from fractions import Fraction

    from float_reference import bf16_exact

    from aieflow.numerics.types import FloatType

    bf = FloatType("bf16")
    rng = random.Random(19)
    big = 255 * 2.0**120  # the largest bf16
    pairs = [(1.0, 2.0**-8), (1.0 + 2.0**-7, 2.0**-8), (-1.0, -(2.0**-8)), (big, big), (big, 2.0**119),
             (big, 2.0**118), (-big, -(2.0**119)), (0.0, -0.0), (-0.0, -0.0), (-0.0, 0.0), (3.0, -3.0),
             (2.0**-133, 2.0**-133), (2.0**-126, -(2.0**-133)), (1.0, 2.0**-30), (2.0**100, -(2.0**60))]
    xs, cs = _bf16_values(rng, 4 * T * E), _bf16_values(rng, T * E)
    x = np.array(xs, dtype=np.float32).reshape(4, T, E)
    c = np.array(cs, dtype=np.float32).reshape(T, E)
    for k, (a, b) in enumerate(pairs):  # the edge pairs in sample 0, row 0
        x[0, 0, k], c[0, k] = a, b
    node = aieflow.ir.Node(name="pos", op="add_const", inputs=("x",), outputs=("y",),
                           types=add_const.ConstAddTypes(bf, bf, bf, 0, 0, 0),
                           params={"constant": c, "constant_q": c})
    got = np.asarray(add_const.emulate(node, x), dtype=np.float32)
    want = np.array([[[bf16_exact(Fraction(float(x[s, i, j])) + Fraction(float(c[i, j])),
                                  (bool(np.signbit(x[s, i, j])), bool(np.signbit(c[i, j]))))
                       for j in range(E)] for i in range(T)] for s in range(4)], dtype=np.float32)
    assert want[0, 0, 0] == 1.0 and want[0, 0, 1] == 1.0 + 2.0**-6  # ties to even, both ways
    assert want[0, 0, 3] == np.inf and want[0, 0, 4] == np.inf and want[0, 0, 5] == big
    assert np.signbit(want[0, 0, 8]) and not np.signbit(want[0, 0, 7]) and not np.signbit(want[0, 0, 10])
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_positional_add_compiles_predicts_and_verifies_bit_exact_on_x86():
    torch.manual_seed(0)
    m, x = Tagger().eval(), _data(0)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": 8})
    assert "ConstAdd<" in "".join(d.files.values())
    with torch.no_grad():
        ref = m(torch.from_numpy(x)).numpy()
    assert np.abs(d.predict(x) - ref).max() <= 0.1 * np.abs(ref).max()
    v = d.verify(samples=8)
    assert v.ok, v.verdict()


def test_variants_and_positional_add_designs_save_load_and_fit_the_schema(tmp_path):
    import json
    from importlib import resources

    import jsonschema

    torch.manual_seed(5)
    m, x = Tagger(activation="gelu").eval(), _data(5)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x,
                        config={"precision": "int8", "batch": 8,
                                "activations": {"softmax": "integer", "gelu": "polynomial"}})
    d.save(tmp_path / "pos")
    d2 = aieflow.load(tmp_path / "pos")
    assert np.array_equal(d2.predict(x[:4]), d.predict(x[:4]))
    assert [d2.plan.node(n).types for n in d2.plan.compute] == [d.plan.node(n).types for n in d.plan.compute]
    kinds = {(n.op, getattr(n.types, "variant", "")) for n in d2.graph.nodes}
    assert {("add_const", ""), ("softmax", "integer"), ("activation", "polynomial")} <= kinds
    schema = json.loads(resources.files("aieflow").joinpath("schema/design.schema.json").read_text())
    jsonschema.validate(d.to_json(), schema)
