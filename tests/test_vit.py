"""A small ViT-style image block on the DAG path (issue 19): patch embedding (a stride == kernel
Conv2d, or a reshape / permute into patches + Linear) as an input layout + Dense, the class token,
class-token pooling (frontends/patches.py).  The patch order against loops written here, the
imports against PyTorch / onnxruntime, the refusal, and the whole block on VEK280 int8: predict
vs PyTorch, x86 bit-exact, and a class-token row in the wrong place caught by the same build."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import aieflow
from aieflow.errors import AieflowError
from aieflow.frontends import import_model
from aieflow.ops.views import patch_index
from aieflow.passes.quantise import float_activations

E = 32


class ViT(nn.Module):
    def __init__(self, pool="cls", norm_first=True):
        super().__init__()
        self.pool = pool
        self.patch = nn.Conv2d(3, E, 4, stride=4)
        self.cls = nn.Parameter(torch.randn(1, 1, E) * 0.5)
        self.pos = nn.Parameter(torch.randn(1, 16 + (pool == "cls"), E) * 0.5)
        self.enc = nn.TransformerEncoderLayer(E, 2, 64, dropout=0.0, batch_first=True, norm_first=norm_first,
                                              activation="gelu")
        self.norm = nn.LayerNorm(E)
        self.head = nn.Linear(E, 10)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        if self.pool == "cls":
            t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], dim=1)
        t = self.enc(t + self.pos)
        t = t[:, 0] if self.pool == "cls" else t.mean(dim=1)
        return self.head(self.norm(t))


class MaskedViT(ViT):
    """The ViT with a run-time key padding mask over its 17 tokens (class token first): forward(x, mask)."""

    def forward(self, x, mask):
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], dim=1)
        t = self.enc(t + self.pos, src_key_padding_mask=mask)
        return self.head(self.norm(t[:, 0]))


def _images(seed=0, n=64, shape=(3, 16, 16)):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


@pytest.mark.parametrize("shape,k,lead", [((3, 16, 16), (4, 4), 0), ((2, 6, 8), (3, 2), 1), ((1, 4, 4), (4, 4), 2)])
def test_patch_order_matches_loops(shape, k, lead):
    c, h, w = shape
    want = [[-1] * (c * k[0] * k[1]) for _ in range(lead)]
    for i in range(h // k[0]):
        for j in range(w // k[1]):
            want.append([ch * h * w + (i * k[0] + a) * w + (j * k[1] + b)
                         for ch in range(c) for a in range(k[0]) for b in range(k[1])])
    assert patch_index(shape, k, lead).tolist() == want


@pytest.mark.parametrize("pool,norm_first", [("cls", True), ("cls", False), ("mean", True)])
def test_vit_imports_as_pytorch_computes(pool, norm_first):
    torch.manual_seed(1)
    m, x = ViT(pool, norm_first).eval(), _images(1)
    g = import_model(m, torch.from_numpy(x[:2])).graph
    ops = [n.op for n in g.nodes]
    assert ops[:3] == ["patches", "dense", "add_const"] and "conv2d" not in ops and "prepend_const" not in ops
    assert g.nodes[0].attrs["lead"] == (pool == "cls")
    with torch.no_grad():
        ref = m(torch.from_numpy(x)).numpy()
    assert np.abs(float_activations(g, x)[g.outputs[0]] - ref).max() < 1e-5


def test_hand_written_patches_fold_into_the_view_and_the_weight_rows():
    class Patchify(nn.Module):  # einops 'b c (h p) (w q) -> b (h w) (p q c)': features (ki, kj, c)
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.Linear(48, E), nn.Linear(E, 4)

        def forward(self, x):
            b = x.shape[0]
            p = x.reshape(b, 3, 4, 4, 4, 4).permute(0, 2, 4, 3, 5, 1).reshape(b, 16, 48)
            return self.head(torch.relu(self.emb(p)))

    torch.manual_seed(2)
    m, x = Patchify().eval(), _images(2)
    g = import_model(m, torch.from_numpy(x[:2])).graph
    assert [n.op for n in g.nodes][:2] == ["patches", "dense"]
    with torch.no_grad():
        ref = m(torch.from_numpy(x)).numpy()
    assert np.abs(float_activations(g, x)[g.outputs[0]] - ref).max() < 1e-5


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vit_onnx_export_imports_as_onnxruntime_computes(tmp_path, pool):
    import onnxruntime as ort

    torch.manual_seed(3)
    m, x = ViT(pool).eval(), _images(3, n=4)
    path = str(tmp_path / "vit.onnx")
    torch.onnx.export(m, (torch.from_numpy(x),), path, opset_version=17, dynamo=False)
    g = import_model(path, x).graph
    ops = [n.op for n in g.nodes]
    assert ops[:3] == ["patches", "dense", "add_const"] and "conv2d" not in ops and "prepend_const" not in ops
    assert g.nodes[0].attrs["lead"] == (pool == "cls")
    s = ort.InferenceSession(path)
    ref = s.run(None, {s.get_inputs()[0].name: x})[0]
    assert np.abs(float_activations(g, x)[g.outputs[0]] - ref).max() < 1e-5


def test_a_class_token_not_after_a_patch_embedding_is_refused_by_name():
    class Late(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.cls = nn.Linear(16, E), nn.Parameter(torch.randn(1, 1, E))
            self.head = nn.Linear(E, 4)

        def forward(self, x):
            t = torch.relu(self.emb(x))
            return self.head(torch.cat([self.cls.expand(x.shape[0], -1, -1), t], dim=1))

    torch.manual_seed(4)
    m = Late().eval()
    x = np.random.default_rng(4).standard_normal((16, 8, 16)).astype(np.float32)
    g = import_model(m, torch.from_numpy(x[:2])).graph
    with torch.no_grad():
        ref = m(torch.from_numpy(x)).numpy()
    assert np.abs(float_activations(g, x)[g.outputs[0]] - ref).max() < 1e-5  # emulated as written
    with pytest.raises(AieflowError, match=r"cat.*class token|class token"):
        aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x, config={"precision": "int8", "batch": 8})


def test_vit_compiles_predicts_and_verifies_bit_exact_and_a_misplaced_class_token_is_caught(monkeypatch):
    from aieflow.dag import plan as dag_plan
    from aieflow.dag import verify as dag_verify

    torch.manual_seed(0)
    m, x = ViT("cls").eval(), _images(0)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x, config={"precision": "int8", "batch": 8})
    assert isinstance(d, aieflow.dag.DagDesign) and "ConstAdd<" in "".join(d.files.values())
    with torch.no_grad():
        ref = m(torch.from_numpy(x)).numpy()
    assert np.abs(d.predict(x) - ref).max() <= 0.1 * np.abs(ref).max()
    e = d.estimate()
    assert e.latency_ns > 0 and e.interval_ns > 0
    v = d.verify(samples=8)
    assert v.ok, v.verdict()

    def late_class_token(graph, xq):  # the zero row written last instead of first
        y = dag_plan.host_layout(graph, xq)
        return np.roll(y, -1, axis=1)

    monkeypatch.setattr(dag_verify, "host_layout", late_class_token)
    bad = d.verify(samples=8)
    assert not bad.ok and bad.cached


def test_a_stride_equals_kernel_convolution_read_as_an_image_stays_a_convolution():
    m = nn.Sequential(nn.Conv2d(3, 8, 2, stride=2), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.Flatten(), nn.Linear(36, 3)).eval()
    g = import_model(m, torch.from_numpy(_images(n=2, shape=(3, 10, 10)))).graph
    assert [n.op for n in g.nodes].count("conv2d") == 2 and "patches" not in [n.op for n in g.nodes]


def test_class_token_pooling_is_a_row_read_and_the_link_checker_catches_a_wrong_row(monkeypatch):
    from aieflow.dag import links

    torch.manual_seed(6)
    m, x = ViT("cls").eval(), _images(6, shape=(3, 12, 20))  # 15 patches + the class token: 16 tokens
    m.pos, m.head = nn.Parameter(torch.randn(1, 16, E) * 0.5), nn.Linear(E, 8)
    m.eval()
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x, config={"precision": "int8", "batch": 8})
    (o,) = d.plan.operands["norm"]
    assert o.row == 0 and o.producer == "enc.add2" and not o.transposed
    assert [w for k in d.plan.links for w in k.word_problems()] == []  # runs of 32 bytes, one per sample
    with torch.no_grad():
        ref = m(torch.from_numpy(x)).numpy()
    assert np.abs(d.predict(x) - ref).max() <= 0.1 * np.abs(ref).max()

    real = links._rows_tiling

    def next_row(g, lo, hi, transposed, what, first_feature=0, features=None, row=None):
        return real(g, lo, hi, transposed, what, first_feature, features, None if row is None else row + 1)

    monkeypatch.setattr(links, "_rows_tiling", next_row)
    with pytest.raises(AieflowError, match="reads the wrong elements"):
        aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x, config={"precision": "int8", "batch": 8})


def test_vit_with_a_key_padding_mask_compiles_and_predicts_as_pytorch():
    """A patch-embedded ViT whose encoder reads a run-time key padding mask over its 17 tokens (the mask's
    length from the calibration masks, not the image's rows): VEK280 int8, every softmax reading the mask
    PLIO, predict within 0.1 of the largest output of PyTorch (random paddings of the patch tokens, one
    sample keeping only the class token); emulation only (its kernels: the 17-key masked softmax and the
    class-token ViT's, verified on x86 in test_runtime_masks.py / above)."""
    torch.manual_seed(3)
    m, x = MaskedViT("cls").eval(), _images(3)
    rng = np.random.default_rng(3)
    pad = rng.random((64, 17)) < rng.uniform(0.1, 0.7, (64, 1))
    pad[:, 0] = False  # the class token is never padded
    pad[1, 1:] = True  # only the class token kept
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                        config={"precision": "int8", "batch": 8})
    assert isinstance(d, aieflow.dag.DagDesign) and d.resources()["plio_in"] == 2
    mask = d.graph.inputs[1]
    assert d.graph.tensors[mask].shape == (17,)
    soft = [n for n in d.graph.nodes if n.op == "softmax"]
    assert len(soft) == 2 and all(n.inputs[1] == mask for n in soft)
    assert "SoftmaxPadded<" in d.files["src/graph.h"]
    with torch.enable_grad():  # PyTorch's autograd path (no nested-tensor fast path)
        ref = m(torch.from_numpy(x), torch.from_numpy(pad)).detach().numpy()
        unmasked = m(torch.from_numpy(x), torch.from_numpy(np.zeros_like(pad))).detach().numpy()
    y = d.predict(x, mask=pad)
    assert np.abs(y - ref).max() <= 0.1 * np.abs(ref).max()
    assert np.abs(unmasked - ref).max() > 0.5 * np.abs(ref).max()  # the mask matters at that tolerance


def test_mean_pooled_vit_compiles_and_predicts():
    torch.manual_seed(7)
    m, x = ViT("mean").eval(), _images(7)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x, config={"precision": "int8", "batch": 8})
    with torch.no_grad():
        ref = m(torch.from_numpy(x)).numpy()
    assert np.abs(d.predict(x) - ref).max() <= 0.1 * np.abs(ref).max()


def test_vit_design_saves_loads_and_fits_the_schema(tmp_path):
    import json
    from importlib import resources

    import jsonschema

    torch.manual_seed(8)
    m, x = ViT("cls").eval(), _images(8)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x, config={"precision": "int8", "batch": 8})
    d.save(tmp_path / "vit")
    d2 = aieflow.load(tmp_path / "vit")
    assert np.array_equal(d2.predict(x[:4]), d.predict(x[:4]))
    assert d2.graph.nodes[0].op == "patches" and tuple(d2.graph.nodes[0].attrs["kernel"]) == (4, 4)
    assert [o.row for o in d2.plan.operands["norm"]] == [0]
    # the project's input file is in patch order: the class token's zero row, then patch (0, 0) as (c, ki, kj)
    codes = np.array(d.files["data/in_x.txt"].split(), dtype=np.int64)
    q = d.quantise_input(x[:1])[0]
    assert codes.size == 8 * 17 * 48 and not codes[:48].any()  # one graph iteration: the sample, zero padding
    assert codes[48:96].tolist() == [int(q[c, a, b]) for c in range(3) for a in range(4) for b in range(4)]
    assert codes[96:144].tolist() == [int(q[c, a, 4 + b]) for c in range(3) for a in range(4) for b in range(4)]
    schema = json.loads(resources.files("aieflow").joinpath("schema/design.schema.json").read_text())
    jsonschema.validate(d.to_json(), schema)


def _sub_word(t, element_bytes: int) -> list[str]:
    """What of a memory-tile tiling is not whole 32-bit words (AM020: buffer-descriptor steps and
    lengths count 32-bit words), read off the tiling's fields (no aieflow code)."""
    out = []
    if (t.tile[0] * element_bytes) % 4:
        out.append(f"run {t.tile[0]}")
    if (t.offset[0] * element_bytes) % 4:
        out.append(f"offset {t.offset[0]}")
    if len(t.dims) > 1 and (t.dims[0] * element_bytes) % 4:
        out.append(f"pitch {t.dims[0]}")
    out += [f"stride {x.stride}" for x in t.traversal if x.dimension == 0 and x.wrap > 1 and (x.stride * element_bytes) % 4]
    return out


def _tilings(d):
    from aieflow.dag.perf import lowered_dag

    mg = lowered_dag(d.plan, d.placement, d.device)
    size = {"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "bfloat16": 2}
    for b in mg.buffers:
        for t in (*b.writes, *b.reads):
            yield b, t, size.get(b.ctype, 4)


def test_17_token_vit_moves_whole_words_and_without_the_padding_the_warning_returns(monkeypatch):
    """Issue 19: with a class token the scores are [17, 17]; they travel in rows padded to 20 int8
    (plan.row_pitches), and the 10 int8 classes leave through the output PLIO in rows of 12
    (plan.output_pitch): every memory-tile tiling of the mapped graph moves whole 32-bit words and
    the summary has no warning.  Mutation: no padding brings the sub-word runs and the warning back."""
    from aieflow.dag import plan as dag_plan

    torch.manual_seed(0)
    m, x = ViT("cls").eval(), _images(0)
    cfg = {"precision": "int8", "batch": 8}
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x, config=cfg)
    bad = [(b.var, _sub_word(t, e)) for b, t, e in _tilings(d) if _sub_word(t, e)]
    assert bad == []
    scores = [b for b in _tilings(d) if b[0].dims[:2] == (20, 17)]  # [pitch, tokens, samples]
    assert len({b.var for b, _, _ in scores}) == 4  # 2 heads x (scores, probs), one shard each
    assert d.plan.rows["enc.self_attn.softmax0"].features == 17 and d.plan.rows["enc.self_attn.softmax0"].pitch_out == 20
    assert d.plan.out_pitch == 12
    assert "WARNING" not in d.summary() and all(not k["dma_word_problems"] for k in d.to_json()["links"])
    with torch.no_grad():
        ref = m(torch.from_numpy(x)).numpy()
    assert np.abs(d.predict(x) - ref).max() <= 0.1 * np.abs(ref).max()

    monkeypatch.setattr(dag_plan, "row_pitches", lambda *a, **k: {})
    monkeypatch.setattr(dag_plan, "output_pitch", lambda *a, **k: 0)
    u = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x, config=cfg)
    runs = {r for b, t, e in _tilings(u) for r in _sub_word(t, e)}
    assert "run 17" in runs and "run 10" in runs
    assert "WARNING: 29 memory-tile port pattern(s)" in u.summary()
    assert np.array_equal(u.predict(x), d.predict(x))  # the padding changes no value


def test_bf16_vit_compiles_predicts_within_the_bf16_tolerance_and_verifies_bit_exact():
    """Issue 19: the 17-token ViT in bf16 on VEK280: the class token folded as in int8 (a zero input
    row, its constant in the bf16 positional add), every computing layer bf16 (ConstAddBf16 for the
    positional add), within the bf16 tolerance of the other bf16 attention tests (max |y - torch| <=
    2^-6 max |torch|, docs/numerics.md), the scores in rows of 18 bf16 (whole words), bit-exact on
    x86 (one build).  The positional constant is rounded once to bf16 (checked by integers)."""
    from fractions import Fraction

    from float_reference import bf16_exact

    torch.manual_seed(0)
    m, x = ViT("cls").eval(), _images(0)
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=x, config={"precision": "bf16", "batch": 8})
    assert all(d.plan.node(n).types.output.name == "bf16" for n in d.plan.compute)
    assert [n.op for n in d.graph.nodes][:3] == ["patches", "dense", "add_const"] and d.graph.nodes[0].attrs["lead"] == 1
    assert "ConstAddBf16<" in "".join(d.files.values())
    pos = d.graph.node("add")
    c, q = np.asarray(pos.params["constant"], dtype=np.float32), np.asarray(pos.params["constant_q"], dtype=np.float32)
    want = np.array([bf16_exact(Fraction(float(v))) for v in c.reshape(-1)], dtype=np.float32).reshape(c.shape)
    assert np.array_equal(q.view(np.uint32), want.view(np.uint32))
    assert d.plan.rows["enc.self_attn.softmax1"].pitch_out == 18 and d.plan.out_pitch == 0  # 10 bf16: 5 words
    assert [w for k in d.plan.links for w in k.word_problems()] == [] and "WARNING" not in d.summary()
    with torch.no_grad():
        ref = m(torch.from_numpy(x)).numpy()
    y = d.predict(x)
    assert np.abs(y - ref).max() <= 2.0**-6 * np.abs(ref).max(), np.abs(y - ref).max()
    v = d.verify(samples=8)
    assert v.ok, v.verdict()
    assert v.values == 8 * 10
