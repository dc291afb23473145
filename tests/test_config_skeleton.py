"""hls4ml interoperability (issue 18, item 6): hls4ml's type spelling in configs, and the config
skeleton (``aieflow config MODEL``) that round-trips: skeleton -> edit -> compile uses every key."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

import aieflow
from aieflow.cli import main
from aieflow.config import load_config_file, parse_config
from aieflow.errors import AieflowError, ConfigError
from aieflow.numerics.types import FixedType, Rounding, Saturation, parse_type
from aieflow.skeleton import config_skeleton

torch = pytest.importorskip("torch", reason="torch is not installed (the 'torch' extra)")
from torch import nn  # noqa: E402

BREVITAS = Path(__file__).resolve().parent / "data" / "brevitas"

# ------------------------------------------------------------------------------ hls4ml's type spelling

R, S = Rounding, Saturation


@pytest.mark.parametrize("text, want", [
    ("ap_fixed<18,7,AP_RND_CONV,AP_SAT>", FixedType(18, 11, True, R.CONV_EVEN, S.SATURATE)),
    ("ap_fixed<8,3>", FixedType(8, 5, True, R.FLOOR, S.WRAP)),  # ap_fixed's defaults: AP_TRN, AP_WRAP
    ("ap_ufixed<8,0,AP_RND,AP_SAT>", FixedType(8, 8, False, R.POS_INF, S.SATURATE)),
    ("ap_int<8>", FixedType(8, 0, True, R.FLOOR, S.WRAP)),
    ("ap_uint<4>", FixedType(4, 0, False, R.FLOOR, S.WRAP)),
    ("ap_fixed<16,6,AP_TRN,AP_WRAP>", FixedType(16, 10, True, R.FLOOR, S.WRAP)),
    ("ap_fixed<16,6,AP_TRN_ZERO,AP_SAT_SYM>", FixedType(16, 10, True, R.SYM_FLOOR, S.SYMMETRIC)),
    ("ap_fixed<16,6,AP_RND_ZERO,AP_SAT>", FixedType(16, 10, True, R.SYM_ZERO, S.SATURATE)),
    ("ap_fixed<16,6,AP_RND_MIN_INF,AP_SAT>", FixedType(16, 10, True, R.NEG_INF, S.SATURATE)),
    ("ap_fixed<16,6,AP_RND_INF,AP_SAT>", FixedType(16, 10, True, R.SYM_INF, S.SATURATE)),
    (" ap_fixed< 16 , 6 , ap_rnd_conv , ap_sat , 0 > ", FixedType(16, 10, True, R.CONV_EVEN, S.SATURATE)),
    ("fixed<16,6,RND_CONV,SAT>", FixedType(16, 10, True, R.CONV_EVEN, S.SATURATE)),  # aieflow's own, as before
])  # fmt: skip
def test_hls4ml_type_spelling(text, want):
    assert parse_type(text) == want


def test_hls4ml_modes_aieflow_cannot_honour_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"overflow mode AP_SAT_ZERO in .* has no AI Engine equivalent.*AP_SAT"):
        parse_type("ap_fixed<8,3,AP_RND_CONV,AP_SAT_ZERO>")
    with pytest.raises(ConfigError, match="saturation-bits field '2'"):
        parse_type("ap_fixed<8,3,AP_RND_CONV,AP_WRAP,2>")
    with pytest.raises(ConfigError, match=r"layers.fc1: 'ap_fixed<16,6>' is a numeric type; 'precision' "
                                          r"takes a preset .*\n  hint: give types per tensor"):
        parse_config({"layers": {"fc1": {"precision": "ap_fixed<16,6>"}}})


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(12, 32)
            self.act = nn.ReLU()
            self.fc2 = nn.Linear(32, 5)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    return Mlp().eval()


X = np.random.default_rng(0).standard_normal((64, 12)).astype(np.float32)


def test_hls4ml_types_in_a_config_reach_the_design_and_trn_zero_is_refused_on_aie1():
    cfg = {"layers": {"fc1": {"output": "ap_fixed<8,3,AP_RND,AP_SAT_SYM>"}, "fc2": {"weight": "ap_fixed<8,1,AP_RND_CONV,AP_SAT>"}}}
    d = aieflow.compile(_mlp(), device="vek280", example_input=X[:2], calibration=X, config=cfg)
    fc1, fc2 = d.layers()
    assert fc1.types.output == FixedType(8, 5, True, R.POS_INF, S.SYMMETRIC)
    assert fc2.types.weight == FixedType(8, 7, True, R.CONV_EVEN, S.SATURATE)
    with pytest.raises(AieflowError, match=r"rounding mode symmetric_floor is not available on aie\n.*hint: AIE1 has no "
                                           r"symmetric floor/ceil \(TRN_ZERO\)"):
        aieflow.compile(_mlp(), device="vck190", example_input=X[:2], calibration=X,
                        config={"layers": {"fc1": {"output": "ap_fixed<8,3,AP_TRN_ZERO,AP_SAT>"}}})


# ------------------------------------------------------------------------------ the skeleton


def _exports(tmp_path: Path, module: nn.Module) -> dict[str, str]:
    paths = {}
    for dynamo in (True, False):
        path = tmp_path / f"mlp_{'dynamo' if dynamo else 'torchscript'}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (torch.from_numpy(X[:2]),), str(path), dynamo=dynamo,
                              dynamic_axes=None if dynamo else {"x": {0: "N"}}, input_names=["x"])
        paths["dynamo" if dynamo else "torchscript"] = str(path)
    return paths


def test_skeleton_names_layers_alike_for_a_torch_module_and_its_onnx_exports(tmp_path):
    module = _mlp()
    skeletons = {"torch": config_skeleton(module, example_input=X[:2], calibration=X)}
    for kind, path in _exports(tmp_path, module).items():
        skeletons[kind] = config_skeleton(path, calibration=X)
    configs = {k: s.config for k, s in skeletons.items()}
    assert list(configs["torch"]["layers"]) == ["fc1", "fc2"]
    assert configs["dynamo"] == configs["torch"] == configs["torchscript"]
    for s in skeletons.values():
        assert s.types["fc1"] == skeletons["torch"].types["fc1"] and "input" in s.types["fc1"]
        assert "input" not in s.types["fc2"]  # read for the first layer only


def _compile(model, cfg, **kw):
    return aieflow.compile(model, device="vek280", config=cfg, **kw)


def test_skeleton_edit_compile_round_trip_uses_every_key(tmp_path):
    path = _exports(tmp_path, _mlp())["torchscript"]
    sk = config_skeleton(path, calibration=X)
    plain = _compile(path, None, calibration=X)
    as_is = _compile(path, sk.config, calibration=X)
    # the skeleton is the default design: same types and plans as no config at all
    for a, b in zip(plain.layers(), as_is.layers(), strict=True):
        assert (a.types, a.plan.cas_len, a.plan.cas_num, a.plan.batch) == (b.types, b.plan.cas_len, b.plan.cas_num, b.plan.batch)
    assert {str(k) for k in sk.config["layers"]} == {"fc1", "fc2"}
    for n in as_is.layers():
        entry = sk.config["layers"][n.aliases[0]]  # the module path
        assert (entry["parallelism"]["cas_len"], entry["parallelism"]["cas_num"]) == (n.plan.cas_len, n.plan.cas_num)
    # edit a precision and a parallelism (through the YAML file, as a user would), compile, check both
    file = tmp_path / "skeleton.yaml"
    file.write_text(sk.to_yaml("header"))
    raw = yaml.safe_load(file.read_text())
    raw["layers"]["fc1"]["precision"] = "int16"
    raw["layers"]["fc2"]["parallelism"] = {"cas_len": 2, "cas_num": 1}
    file.write_text(yaml.safe_dump(raw))
    edited = _compile(path, load_config_file(file), calibration=X)
    fc1, fc2 = edited.layers()
    assert (fc1.types.input.width, fc1.types.weight.width, fc1.types.output.width) == (16, 16, 16)
    assert fc2.types.weight.width == 8 and fc2.types.input.width == 16  # fc2 stays int8 (a16w8 on its input)
    assert (fc2.plan.cas_len, fc2.plan.cas_num) == (2, 1)
    assert (plain.layers()[1].plan.cas_len, plain.layers()[0].types.output.width) == (1, 8)  # both edits changed it
    err = np.abs(edited.predict(X) - _mlp()(torch.from_numpy(X)).detach().numpy()).max()
    assert err < 0.1


def test_uncommenting_a_type_of_a_qonnx_skeleton_fixes_it(tmp_path):
    model = str(BREVITAS / "brevitas_mlp_qonnx.onnx")
    sk = config_skeleton(model)
    assert sk.types["fc1"]["output"] == "ufixed<8,3,RND_CONV,SAT>"  # the model's own QONNX types, no calibration
    # fc2's weights are a 4-bit Quant (scale 2^-5): a 4-bit type (int4 on AIE-ML; was held as fixed<8,3>)
    assert sk.types["fc2"]["weight"] == "fixed<4,-1,RND_CONV,SAT>"
    text = sk.to_yaml().replace("    # output: fixed<8,2,RND_CONV,SAT>", "    output: ap_fixed<12,4,AP_TRN,AP_SAT>")
    file = tmp_path / "c.yaml"
    file.write_text(text)
    d = _compile(model, load_config_file(file))
    assert d.layers()[1].types.output == FixedType(12, 8, True, R.FLOOR, S.SATURATE)


def test_model_granularity_writes_the_model_wide_keys_only():
    sk = config_skeleton(str(BREVITAS / "brevitas_mlp_qcdq.onnx"), granularity="model")
    assert sk.config == {"precision": "int8", "batch": 8, "replicas": 1}
    with pytest.raises(ConfigError, match="granularity 'layer'; choose one of name, model"):
        config_skeleton(str(BREVITAS / "brevitas_mlp_qcdq.onnx"), granularity="layer")


def test_cli_config_then_compile(tmp_path, capsys):
    path = _exports(tmp_path, _mlp())["dynamo"]
    np.save(tmp_path / "x.npy", X)
    out = tmp_path / "cfg.yaml"
    assert main(["config", path, "--calibration", str(tmp_path / "x.npy"), "-o", str(out)]) == 0
    assert "wrote the config skeleton (2 layers)" in capsys.readouterr().out
    text = out.read_text()
    assert text.startswith("# aieflow config skeleton of \"mlp_dynamo.onnx\"") and "  fc1:\n" in text
    cfg = yaml.safe_load(text)
    cfg["layers"]["fc1"]["parallelism"]["cas_num"] = 2
    out.write_text(yaml.safe_dump(cfg))
    assert main(["compile", path, "--config", str(out), "--calibration", str(tmp_path / "x.npy"),
                 "--out", str(tmp_path / "d"), "-q"]) == 0
    d = aieflow.load(tmp_path / "d")
    assert d.layers()[0].plan.cas_num == 2
    assert main(["config", path, "--granularity", "model"]) == 2  # a float model needs calibration
    err = capsys.readouterr().err
    assert "error: precision int8 needs calibration data" in err and "Traceback" not in err
    assert main(["config", path, "--calibration", str(tmp_path / "x.npy"), "-o", str(tmp_path / "c.json")]) == 0
    assert load_config_file(tmp_path / "c.json").layer("fc2").cas_len == 1
