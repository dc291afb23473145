"""``aieflow.from_hls4ml``: an hls4ml ModelGraph compiled with its own precisions and weights,
checked against hls4ml's C simulation (``hls_model.compile(); hls_model.predict``), bit for bit.

The reference is hls4ml itself (its generated C++ built with g++ against the ap_types it ships) and,
for the weight codes, hls4ml's own weight text files read with ``fractions`` and rounded by a
rounding written here; nothing on the reference side imports aieflow.  One hls4ml compile per module.
"""

from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

hls4ml = pytest.importorskip("hls4ml", reason="hls4ml is not installed; its C simulation is the reference here")
torch = pytest.importorskip("torch")
if shutil.which("g++") is None:
    pytest.skip("g++ is needed to compile hls4ml's C simulation", allow_module_level=True)

import aieflow  # noqa: E402
from aieflow.errors import AieflowError, ConfigError, ModelError  # noqa: E402

RESULT = "ap_fixed<12,4,AP_RND_CONV,AP_SAT>"
W0 = "ap_fixed<8,2,AP_RND,AP_SAT>"  # half up: a tie the decimal text rounds down gets another code
W2 = "ap_fixed<8,2>"  # AP_TRN, AP_WRAP: a value just below a grid point whose text rounds onto it
TIE = 0.5 / 64  # exactly between codes 0 and 1 of W0 (6 fractional bits); '{:.6f}' writes 0.007812
BELOW = 0.25 - 2.0**-23  # float32 just under code 16 of W2; '{:.6f}' writes 0.250000
TIE_AT = (0, 2, 3)  # (Dense index in the Sequential, input row, output column) of the planted weights
BELOW_AT = (2, 4, 1)
# hls4ml's mode names -> how aieflow spells the same rounding / overflow (FixedType enums' values)
ROUNDING = {"TRN": "floor", "TRN_ZERO": "symmetric_floor", "RND": "positive_inf", "RND_ZERO": "symmetric_zero",
            "RND_INF": "symmetric_inf", "RND_MIN_INF": "negative_inf", "RND_CONV": "conv_even"}
SATURATION = {"WRAP": "none", "SAT": "saturate", "SAT_SYM": "symmetric"}


def _mlp():
    torch.manual_seed(7)
    m = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 5))
    with torch.no_grad():
        for (layer, row, col), value in ((TIE_AT, TIE), (BELOW_AT, BELOW)):
            m[layer].weight[col, row] = value  # torch holds (out, in)
    return m.eval()


def _convert(model, out: Path, edit=None, io_type="io_parallel"):
    cfg = hls4ml.utils.config_from_pytorch_model(model, input_shape=(16,), granularity="name",
                                                 default_precision="ap_fixed<16,6>", backend="Vitis")
    for name, layer in cfg["LayerName"].items():
        layer["Precision"]["result"] = RESULT
        if "weight" in layer["Precision"]:
            layer["Precision"]["weight"] = W0 if name == "_0" else W2
    if edit is not None:
        edit(cfg)
    return hls4ml.converters.convert_from_pytorch_model(model, hls_config=cfg, output_dir=str(out), backend="Vitis",
                                                        io_type=io_type)


@pytest.fixture(scope="module")
def hls(tmp_path_factory):
    out = tmp_path_factory.mktemp("hls4ml_mlp")
    hm = _convert(_mlp(), out / "prj")
    hm.compile()
    return hm, out / "prj"


@pytest.fixture(scope="module")
def designs(hls):
    hm, _ = hls
    return (aieflow.from_hls4ml(hm, device="vek280"),
            aieflow.from_hls4ml(hm, device="vek280", config={"weights_rounding": "hls4ml"}))


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(3)
    x = rng.uniform(-9, 9, (40, 16))  # beyond ap_fixed<12,4>'s [-8, 8): saturating inputs too
    edges = np.array([[-8.0] * 16, [8.0 - 2**-8] * 16, [(k + 0.5) / 256 for k in range(-8, 8)],
                      [0.0] * 16, [2.0**-9] * 16])  # the input type's edges, ties of its rounding, zero
    return np.concatenate([x, edges]).astype(np.float32)


def _text_code(value: str | float, frac: int, mode: str) -> int:
    """ap_fixed's rounding of ``value`` (decimal text, or a float's exact value) at ``frac``
    fractional bits, for the modes used here."""
    v = Fraction(value) * 2**frac
    floor = v.numerator // v.denominator
    if mode == "TRN" or v == floor:
        return floor
    if mode == "RND":  # half up
        return floor + (v - floor >= Fraction(1, 2))
    raise AssertionError(mode)


def test_types_are_hls4ml_per_layer(hls, designs):
    hm, _ = hls
    plain, _ = designs
    layers = {layer.name: layer for layer in hm.get_layers()}
    nodes = {n.name: n for n in plain.graph.nodes}
    assert set(nodes) == {"_0", "_2"} and nodes["_0"].aliases == ("_1",)  # the ReLU runs in _0's kernel

    def same(ours, precision):
        p = precision
        assert (ours.width, ours.width - ours.frac, ours.signed) == (p.width, p.integer, p.signed)
        assert ours.rounding.value == ROUNDING[p.rounding_mode.name]
        assert ours.saturation.value == SATURATION[p.saturation_mode.name]

    for name in ("_0", "_2"):
        t = nodes[name].types
        same(t.weight, layers[name].weights["weight"].type.precision)
        same(t.bias, layers[name].weights["bias"].type.precision)
        result = layers["_1" if name == "_0" else name].get_output_variable().type.precision
        same(t.output, result)
    same(nodes["_0"].types.input, layers["input_1"].get_output_variable().type.precision)


def test_weight_codes_follow_hls4ml_text_only_with_the_option(hls, designs):
    hm, prj = hls
    plain, texted = designs
    layers = {layer.name: layer for layer in hm.get_layers()}
    for design, from_text in ((plain, False), (texted, True)):
        for name, mode in (("_0", "RND"), ("_2", "TRN")):
            node = design.graph.node(name)
            var = layers[name].weights["weight"]
            text = (prj / "firmware" / "weights" / f"{var.name}.txt").read_text().strip().split(",")
            values = var.data.reshape(-1)
            frac = node.types.weight.frac
            want = [_text_code(s.strip(), frac, mode) if from_text else _text_code(float(v), frac, mode)
                    for s, v in zip(text, values, strict=True)]
            assert node.params["weight_q"].reshape(-1).tolist() == want
    # the planted weights: hls4ml's text moves them by one code
    assert plain.graph.node("_0").params["weight_q"][TIE_AT[1:]] == 1
    assert texted.graph.node("_0").params["weight_q"][TIE_AT[1:]] == 0
    assert plain.graph.node("_2").params["weight_q"][BELOW_AT[1:]] == 15
    assert texted.graph.node("_2").params["weight_q"][BELOW_AT[1:]] == 16


def test_predict_equals_hls4ml_csim(hls, designs):
    hm, _ = hls
    plain, texted = designs
    x = _inputs()
    want = np.asarray(hm.predict(x), dtype=np.float64).reshape(len(x), -1)
    got = np.asarray(texted.predict(x), dtype=np.float64)
    np.testing.assert_array_equal(got, want)
    # without the option the two planted weights get the exact codes: the outputs differ
    assert (np.asarray(plain.predict(x), dtype=np.float64) != want).any(axis=1).sum() > len(x) // 2


def test_io_stream_model_equals_its_csim(tmp_path):
    """An io_stream conversion (hls4ml's streaming dense wrappers) of the same MLP: the same
    arithmetic per layer, so from_hls4ml takes it and predict equals its C simulation."""
    hm = _convert(_mlp(), tmp_path / "stream", io_type="io_stream")
    assert hm.config.get_config_value("IOType") == "io_stream"
    hm.compile()
    x = _inputs()
    want = np.asarray(hm.predict(x), dtype=np.float64).reshape(len(x), -1)
    got = aieflow.from_hls4ml(hm, device="vek280", config={"weights_rounding": "hls4ml"}).predict(x)
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), want)


def test_verify_on_x86(designs):
    _, texted = designs
    result = texted.verify(samples=64)
    assert result.ok, result.verdict()


def test_refusals(hls, tmp_path):
    hm, _ = hls
    # a layer aieflow does not map, named
    m = torch.nn.Sequential(torch.nn.Linear(16, 4), torch.nn.Softmax(dim=-1))
    with pytest.raises(ModelError, match="Softmax|softmax") as e:
        aieflow.from_hls4ml(_convert(m, tmp_path / "sm"), device="vek280")
    assert e.value.layer == "_1"

    # a pooling layer after a convolution (both convert here; Conv2D is mapped, tests/test_from_hls4ml_conv.py)
    cnn = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(18, 2))
    cfg = hls4ml.utils.config_from_pytorch_model(cnn, input_shape=(1, 8, 8), granularity="name", backend="Vitis")
    hc = hls4ml.converters.convert_from_pytorch_model(cnn, hls_config=cfg, output_dir=str(tmp_path / "pool"),
                                                      backend="Vitis", io_type="io_parallel")
    with pytest.raises(ModelError, match="Pooling") as e:
        aieflow.from_hls4ml(hc, device="vek280")
    assert e.value.layer == "_1" and "aieflow.compile" in e.value.hint

    # an accumulator that rounds the sums
    def narrow(cfg):
        cfg["LayerName"]["_2"]["Precision"]["accum"] = "ap_fixed<16,6>"

    with pytest.raises(ModelError, match="accum_t") as e:
        aieflow.from_hls4ml(_convert(_mlp(), tmp_path / "acc", narrow), device="vek280")
    assert e.value.layer == "_2" and "Precision.accum" in e.value.hint

    # a ReLU whose type is not its Dense layer's
    def relu_type(cfg):
        cfg["LayerName"]["_1"]["Precision"]["result"] = "ap_ufixed<10,4>"

    with pytest.raises(ModelError, match="ReLU") as e:
        aieflow.from_hls4ml(_convert(_mlp(), tmp_path / "relu", relu_type), device="vek280")
    assert e.value.layer == "_1"
    # a config type the hls4ml model sets too; a float precision; not a ModelGraph
    with pytest.raises(ConfigError, match=r"layers\._0: weight"):
        aieflow.from_hls4ml(hm, config={"layers": {"_0": {"weight": "int8"}}})
    with pytest.raises(ConfigError, match="precision fp32"):
        aieflow.from_hls4ml(hm, config={"precision": "fp32"})
    with pytest.raises(ConfigError, match="ModelGraph"):
        aieflow.from_hls4ml(_mlp())


def test_weights_rounding_refused_where_it_does_not_apply():
    m = torch.nn.Sequential(torch.nn.Linear(8, 4))
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    with pytest.raises(ConfigError, match="did you mean") as e:
        aieflow.compile(m, example_input=x, config={"weights_roundng": "hls4ml"})
    assert "weights_rounding" in str(e.value) + (e.value.hint or "")
    with pytest.raises(ConfigError, match="weights_rounding must be one of"):
        aieflow.compile(m, example_input=x, config={"weights_rounding": "decimal"})
    with pytest.raises(ConfigError, match="weights_rounding: hls4ml") as e:
        aieflow.compile(m, device="vck190", example_input=x, config={"precision": "fp32", "weights_rounding": "hls4ml"})
    assert e.value.layer is not None
    conv = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(72, 2))
    xc = np.random.default_rng(1).standard_normal((2, 1, 8, 8)).astype(np.float32)
    with pytest.raises(AieflowError, match="weights_rounding: hls4ml"):
        aieflow.compile(conv, example_input=xc, config={"precision": "int8", "weights_rounding": "hls4ml"})


def test_weights_rounding_on_a_torch_model_uses_the_text():
    """The option is a config key of every compile: a torch MLP with explicit types gets the codes
    of hls4ml's text too (a tie under half-up rounding, as above)."""
    m = torch.nn.Sequential(torch.nn.Linear(4, 2))
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([[TIE, 0.1, -0.2, 0.3], [0.25 - 2.0**-23, 0.0, 0.5, -TIE]]))
    x = np.random.default_rng(2).standard_normal((8, 4)).astype(np.float32)
    layer = {"input": "ap_fixed<16,6,AP_RND_CONV,AP_SAT>", "weight": W0, "bias": "ap_fixed<16,6>",
             "output": "ap_fixed<16,6,AP_RND_CONV,AP_SAT>"}
    codes = {}
    for mode in ("exact", "hls4ml"):
        d = aieflow.compile(m, example_input=x, config={"precision": "int16", "weights_rounding": mode,
                                                         "layers": {"0": layer}})
        codes[mode] = d.graph.node("0").params["weight_q"]
        assert d.config.to_json().get("weights_rounding", "exact") == mode
    w = m[0].weight.detach().numpy().T
    assert codes["exact"].tolist() == [[_text_code(float(v), 6, "RND") for v in row] for row in w]
    assert codes["hls4ml"].tolist() == [[_text_code(f"{float(v):.6f}", 6, "RND") for v in row] for row in w]
    assert codes["exact"][0, 0] == 1 and codes["hls4ml"][0, 0] == 0  # the tie
    assert codes["exact"][0, 1] == codes["hls4ml"][0, 1] == 16  # 0.25 - 2**-23 rounds to 16 either way


@pytest.mark.parametrize(("out", "lo", "hi", "wrap"), [
    ("ap_fixed<12,4,AP_RND_CONV,AP_SAT>", -2048, 2047, 0),
    ("ap_fixed<12,4,AP_RND_CONV,AP_SAT_SYM>", -2047, 2047, 0),
    ("ap_fixed<12,4,AP_RND_CONV,AP_WRAP>", -2048, 2047, 4),
])
def test_narrow_output_range_in_the_kernel_config(out, lo, hi, wrap):
    """An output type narrower than its container gets its own range in layers.h (templates/kernels/narrow.h:
    executed on x86 by test_verify_on_x86 for AP_SAT); a container-wide one gets none."""
    m = torch.nn.Sequential(torch.nn.Linear(8, 4))
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    layer = {"input": "ap_fixed<16,6,AP_RND_CONV,AP_SAT>", "weight": "ap_fixed<8,2,AP_RND_CONV,AP_SAT>", "output": out}
    d = aieflow.compile(m, example_input=x, config={"precision": "int16", "layers": {"0": layer}})
    text = next(v for k, v in d.files.items() if k.endswith("layers.h"))
    assert f"OUT_LO = {lo}, OUT_HI = {hi};" in text and f"OUT_WRAP = {wrap};" in text
    layer["output"] = "ap_fixed<16,6,AP_RND_CONV,AP_SAT>"
    d = aieflow.compile(m, example_input=x, config={"precision": "int16", "layers": {"0": layer}})
    assert "OUT_LO" not in next(v for k, v in d.files.items() if k.endswith("layers.h"))


def test_the_design_saves_and_loads_with_hls4ml_types(designs, tmp_path):
    _, texted = designs
    texted.save(tmp_path / "prj")
    back = aieflow.load(tmp_path / "prj")
    x = _inputs()
    np.testing.assert_array_equal(back.predict(x), texted.predict(x))
    assert back.config.weights_rounding == "hls4ml"
    assert back.config.to_json()["layers"]["_0"]["output"] == "fixed<12,4,RND_CONV,SAT>"
