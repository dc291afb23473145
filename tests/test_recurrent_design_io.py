"""Saved recurrent designs: ``aieflow.load`` and the CLI (compile an ONNX export of a PyTorch GRU,
explore, report, predict, verify a design directory) dispatch on design.json's kind."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from onnx_files import export_onnx  # noqa: E402

import aieflow  # noqa: E402
from aieflow.cli import main  # noqa: E402
from aieflow.errors import AieflowError  # noqa: E402
from aieflow.recurrent.design import RecurrentDesign, compile_recurrent  # noqa: E402
from aieflow.recurrent.plan import RecurrentOptions  # noqa: E402

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


class _Net(torch.nn.Module):
    def __init__(self, cell: str, n_in: int, n_h: int, outputs: int = 3):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(n_in, n_h, batch_first=True)
        self.fc1, self.fc2 = torch.nn.Linear(n_h, 8), torch.nn.Linear(8, outputs)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc2(torch.relu(self.fc1(out[:, -1])))


def _data(shape, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 1.5).astype(np.float32)


@pytest.mark.parametrize("cell, precision, aggregation", [("GRU", "fp32", "hybrid"), ("LSTM", "int16", "aie")])
def test_saved_design_loads_back_with_the_same_numbers_and_files(tmp_path, cell, precision, aggregation):
    torch.manual_seed(3)
    net = _Net(cell, 5, 12).eval()
    x = _data((40, 7, 5))
    d = compile_recurrent(net, "vck190", x[:4], {"precision": precision, "target": "latency_ns <= 100000"}, x,
                          RecurrentOptions(aggregation=aggregation))
    saved = d.save(tmp_path / "d")
    back = aieflow.load(saved)
    assert isinstance(back, RecurrentDesign)
    assert back.mapping == d.mapping and back.device == d.device and back.files == d.files
    np.testing.assert_array_equal(back.predict(x, raw=True), d.predict(x, raw=True))
    assert back.estimate().to_json() == d.estimate().to_json()
    assert back.summary() == d.summary()
    assert back.layer.attrs == d.layer.attrs  # fp32: the kernel's lane order survives (fp32_lanes)
    # saving the loaded design again writes the same design.json (exploration included)
    again = json.loads((back.save(tmp_path / "again") / "design.json").read_text())
    assert again == json.loads((saved / "design.json").read_text())
    assert again["exploration"] is not None and again["kind"] == "recurrent"


def test_load_rejects_a_broken_recurrent_design(tmp_path):
    torch.manual_seed(0)
    net = _Net("GRU", 3, 8).eval()
    x = _data((8, 4, 3))
    saved = compile_recurrent(net, "vck190", x[:2], {"precision": "fp32"}, x).save(tmp_path / "d")
    meta = json.loads((saved / "design.json").read_text())
    meta["mapping_fields"]["recurrent"]["rows"] = 1000  # rows of more kernels than the layer has
    meta["mapping_fields"]["u_tiles"] = 10_000
    meta.pop("integrity", None)  # as an older save (no record): the loader's own check speaks
    (saved / "design.json").write_text(json.dumps(meta))
    with pytest.raises(AieflowError, match="does not fit VCK190"):
        aieflow.load(saved)
    del meta["mapping_fields"]
    meta.pop("integrity", None)  # as an older save (no record): the loader's own check speaks
    (saved / "design.json").write_text(json.dumps(meta))
    with pytest.raises(AieflowError, match="re-run aieflow compile"):
        aieflow.load(saved)


@needs_gxx
def test_cli_compiles_an_onnx_gru_and_reads_the_design_back(tmp_path, capsys):
    torch.manual_seed(5)
    net = _Net("GRU", 4, 10).eval()
    x = _data((24, 6, 4), seed=1)
    model = tmp_path / "gru.onnx"
    export_onnx(net, x[:1], model)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "design"
    args = ["--device", "vck190", "--precision", "fp32", "--calibration", str(tmp_path / "x.npy")]
    assert main(["compile", str(model), "--out", str(out), "--quiet", *args]) == 0
    assert json.loads((out / "design.json").read_text())["kind"] == "recurrent"

    assert main(["explore", str(model), "--target", "latency", *args]) == 0
    text = capsys.readouterr().out
    assert "recurrent mappings" in text and "*" in text

    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "GRU 4 -> 10, 6 steps on VCK190" in text and "per step" in text
    svg = (out / "placement.svg").read_text()
    assert svg.startswith("<svg") and "U h" in svg and "W x" in svg

    assert main(["predict", str(out), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)

    assert main(["verify", str(out), "--samples", "5", "--quiet"]) == 0
    assert "verify: PASS, bit-exact" in capsys.readouterr().out
