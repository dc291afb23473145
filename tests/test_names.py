"""Nothing from a model file becomes code (issue 16, item 1).

Every design kind is compiled twice from the same ONNX model, once with plain names and once with
hostile ones (newlines, CR, ``*/``, quotes, backslashes, ``$()``, backticks, Make rules, unicode,
NUL, 10,000 characters), and the two saved designs must tokenise to the same code
(``hostile.compare_projects``); the hostile design's generated C++ is then built and run by
``verify``, which must pass without anything injected running.  The sanitiser itself
(``aieflow.names``) is checked on arbitrary text.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx_files import export_onnx

import aieflow
from aieflow import names
from aieflow.model_zoo import cnn_classifier, espcn, gru_classifier, qdq_mlp, residual_mlp

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# ---------------------------------------------------------------- the sanitiser


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_identifiers_are_short_plain_and_never_keywords(name):
    s = names.c_ident(name)
    assert IDENT.fullmatch(s), s
    assert len(s) <= names.MAX_IDENT
    assert s not in {"int", "class", "main", "return", "std", "define"}
    if IDENT.fullmatch(name) and len(name) <= names.MAX_IDENT and re.search(r"\d", name) and "char" not in name:
        assert s == name  # plain names (no keyword has a digit, but char16_t and the like) are kept


@given(st.text(min_size=1, max_size=60), st.text(min_size=1, max_size=60))
@settings(max_examples=200, deadline=None)
def test_long_names_stay_distinct(a, b):
    long_a, long_b = "x" * 200 + a, "x" * 200 + b
    if long_a != long_b:
        assert names.c_ident(long_a) != names.c_ident(long_b)
    got = names.unique_idents(["x" * 60, "x" * 60 + "!", "fc1", "fc1!", "fc1?"])
    assert len(set(got.values())) == 5


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_text_is_inert_printable_ascii(value):
    s = names.text(value)
    assert re.fullmatch(r"[\x20-\x7e]*", s)
    for bad in ("\\", '"', "'", "`", "$", "*"):
        assert bad not in s
    # reversible: the escape is the UTF-8 bytes of the character
    back = re.sub(rb"%([0-9A-F]{2})", lambda m: bytes([int(m.group(1), 16)]), s.encode()).decode("utf-8", "surrogatepass")
    assert back == value
    assert len(names.comment(value)) <= names.MAX_COMMENT


def test_templates_print_plain_strings_escaped_and_code_as_it_is():
    from aieflow.templating import environment

    t = environment("project").from_string("// {{ a }}\n{{ b }}\n")
    out = t.render(a='x\n system("y"); /* */', b=names.Code('call("z");\n'))
    assert out == '// x%0A system(%22y%22); /%2A %2A/\ncall("z");\n\n'


# ---------------------------------------------------------------- every design kind


def _onnx(model, x, tmp_path):
    import onnx

    path = tmp_path / "model.onnx"
    export_onnx(model, x, path)
    return onnx.load(str(path))


def _mlp(dims):
    torch.manual_seed(0)
    layers = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


def _case(kind, tmp_path):
    """(onnx model, example input, device, config, the design class name)."""
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    if kind in ("dense-vck190", "dense-vek280"):
        x = rng.standard_normal((16, 16)).astype(np.float32)
        return qdq_mlp([16, 24, 8]), x, kind.split("-")[1], {"batch": 8}, "Design"
    if kind == "dag":
        x = rng.standard_normal((16, 16)).astype(np.float32)
        return _onnx(residual_mlp(), x, tmp_path), x, "vek280", {"precision": "int16", "batch": 8}, "DagDesign"
    if kind == "cnn":
        x = rng.uniform(-1, 1, (8, 3, 32, 32)).astype(np.float32)
        return _onnx(cnn_classifier(), x, tmp_path), x, "vck190", {"precision": "int8"}, "CnnDesign"
    if kind == "cnn-thesis":
        x = rng.uniform(0, 1, (4, 1, 16, 16)).astype(np.float32)
        return _onnx(espcn(), x, tmp_path), x, "vck190", yaml.safe_load(THESIS_YAML.read_text()), "CnnDesign"
    if kind == "recurrent":
        x = rng.standard_normal((8, 5, 4)).astype(np.float32)
        return _onnx(gru_classifier(), x, tmp_path), x, "vck190", {"precision": "int16"}, "RecurrentDesign"
    if kind == "streamed":
        x = rng.standard_normal((16, 16)).astype(np.float32) * 2
        return _onnx(_mlp([16, 32, 16, 8]), x, tmp_path), x, "vck190", {"precision": "int8"}, "SegmentedDesign"
    if kind == "dag-softmax":  # standalone activation and softmax kernels (ops/activation.py) in a graph
        x = rng.standard_normal((16, 16)).astype(np.float32)
        return _onnx(_ActResidual().eval(), x, tmp_path), x, "vek280", {"precision": "int8", "batch": 8}, "DagDesign"
    if kind == "dense-softmax":  # an activation and a softmax fused into the Dense kernels (ops/post.py)
        x = rng.standard_normal((16, 16)).astype(np.float32)
        net = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.Sigmoid(), torch.nn.Linear(24, 8),
                                  torch.nn.Softmax(dim=-1)).eval()
        return _onnx(net, x, tmp_path), x, "vck190", {"precision": "int8", "batch": 8}, "Design"
    if kind == "recurrent-front":  # a Conv1d front end before a GRU (recurrent/front.py)
        x = rng.standard_normal((8, 3, 6)).astype(np.float32)
        return _onnx(_ConvGru().eval(), x, tmp_path), x, "vek280", {"precision": "int8"}, "RecurrentDesign"
    raise AssertionError(kind)


class _ActResidual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        return torch.softmax(self.b(torch.sigmoid(self.a(x)) + x), dim=-1)


class _ConvGru(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 4, 3, padding=1)
        self.gru = torch.nn.GRU(4, 5, batch_first=True)
        self.fc = torch.nn.Linear(5, 2)

    def forward(self, x):
        o, _ = self.gru(torch.relu(self.conv(x)).transpose(1, 2))
        return torch.sigmoid(self.fc(o[:, -1]))


KINDS = ["dense-vck190", "dense-vek280", "dag", "dag-softmax", "dense-softmax", "cnn", "cnn-thesis", "recurrent", "recurrent-front",
         "streamed"]
THESIS_YAML = Path(__file__).resolve().parents[1] / "examples" / "espcn" / "thesis.yaml"


def _compile(kind, tmp_path, marker):
    from hostile import rename_onnx

    model, x, device, config, cls = _case(kind, tmp_path)
    model = rename_onnx(model, marker)
    if kind == "streamed":  # the second Gemm streams: its (hostile) node name is the config key
        gemms = [n.name for n in model.graph.node if n.op_type in ("Gemm", "MatMul")]
        config = {**config, "layers": {gemms[1]: {"weights": "streamed"}}}
    if kind == "cnn-thesis":  # the thesis's per-layer keys (conv1, conv3, conv4) on the renamed Conv nodes
        convs = [n.name for n in model.graph.node if n.op_type == "Conv"]
        config["layers"] = dict(zip(convs, config["layers"].values(), strict=True))
    d = aieflow.compile(model, device=device, example_input=x[:8], calibration=x, config=config)
    assert type(d).__name__ == cls
    return d, x


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_names_generate_the_same_code(kind, tmp_path):
    from hostile import compare_projects, text_files

    marker = tmp_path / "INJECTED"
    plain, _ = _compile(kind, tmp_path, None)
    bad, _ = _compile(kind, tmp_path, str(marker))
    a, b = plain.save(tmp_path / "plain"), bad.save(tmp_path / "bad")
    ren = compare_projects(a, b)
    # the hostile names did reach the project (as identifiers, or escaped in comments), so the
    # comparison was not vacuous
    texts = [t for rel, t in text_files(b).items() if not rel.endswith(".json")]
    assert (any(k.startswith("n00") and v != k for k, v in ren.fwd.items())
            or any("%0Astatic int injected_" in t for t in texts))
    back = aieflow.load(b)
    x = _case(kind, tmp_path)[1][:8]
    np.testing.assert_array_equal(back.predict(x), bad.predict(x))


@needs_gxx
@pytest.mark.parametrize("kind", KINDS)
def test_hostile_names_verify_bit_exact_and_run_nothing(kind, tmp_path):
    marker = tmp_path / "INJECTED"
    d, _ = _compile(kind, tmp_path, str(marker))
    r = d.verify(samples=16)
    assert r.ok, r.verdict()
    assert not marker.exists(), "a command from a node name ran"
