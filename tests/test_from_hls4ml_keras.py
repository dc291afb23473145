"""``aieflow.from_hls4ml`` for hls4ml models converted from Keras (issue 18): saved Keras models
(tests/data/keras/hls4ml_*.keras, made with TensorFlow by tests/data/keras/make_keras_hls4ml.py,
with Keras' own float outputs) converted by hls4ml's Keras converter with hls4ml precisions, compiled
by aieflow, and checked against hls4ml's C simulation (``hls_model.compile(); hls_model.predict``:
its generated C++ built with g++ against the ap_types it ships), bit for bit, and on x86 (``verify``).

No TensorFlow at test time: hls4ml 1.3's file path (``KerasH5``, h5py only) parses Keras 2's HDF5
layout and fails on the files Keras 3 writes (``KeyError: 'batch_input_shape'``), and Keras 2 is not
installable beside Keras 3 here, so the ``.keras`` files are loaded with Keras 3 on its PyTorch
backend (``KERAS_BACKEND=torch``; the ``keras`` package is pure Python) and converted with
``convert_from_keras_model`` as a Keras user would.  Skipped, naming the package, where keras,
hls4ml, torch or g++ is missing.  Nothing on the reference side imports aieflow.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported: no TensorFlow needed
hls4ml = pytest.importorskip("hls4ml", reason="hls4ml is not installed; its C simulation is the reference here")
pytest.importorskip("torch", reason="torch is Keras 3's backend here (KERAS_BACKEND=torch)")
keras = pytest.importorskip("keras", reason="keras (Keras 3, pure Python: pip install keras) loads the .keras "
                            "fixtures on the torch backend; TensorFlow is not needed")
if keras.backend.backend() != "torch":
    pytest.skip(f"keras runs on the {keras.backend.backend()} backend in this process; these tests load the "
                "fixtures with KERAS_BACKEND=torch", allow_module_level=True)
if shutil.which("g++") is None:
    pytest.skip("g++ is needed to compile hls4ml's C simulation", allow_module_level=True)

import aieflow  # noqa: E402
from aieflow.errors import AieflowError, ModelError  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "keras"
INPUT = "ap_fixed<12,4,AP_RND_CONV,AP_SAT>"
RESULT = "ap_fixed<12,4,AP_RND_CONV,AP_SAT>"
# per case: (the fixture tests/data/keras/hls4ml_<model>.keras, hls4ml Precision entries by layer
# name (relu layers take their Dense / Conv's result), io_type, aieflow config)
_MLP = {"fc1": {"weight": "ap_fixed<8,2,AP_RND,AP_SAT>", "bias": "ap_fixed<10,4>"},
        "fc2": {"weight": "ap_fixed<8,1>", "bias": "ap_fixed<12,4,AP_RND_CONV,AP_SAT>"},
        "fc3": {"weight": "ap_fixed<8,2,AP_RND_CONV,AP_SAT>", "result": "ap_fixed<16,6,AP_RND_CONV,AP_SAT>"}}
_CONV = {name: {"weight": "ap_fixed<8,2,AP_RND_CONV,AP_SAT>", "bias": "ap_fixed<8,2,AP_RND_CONV,AP_SAT>"}
         for name in ("conv1", "conv2", "fc")}
# QKeras' types as hls4ml derives them (hls4ml.utils.config._get_precision_from_quantizer):
# quantized_bits(6, 0, alpha=1) -> ap_fixed<6,1,AP_RND_CONV,AP_SAT> (QDense kernel and bias),
# quantized_relu(6) -> ap_ufixed<6,0,AP_RND_CONV,AP_SAT> (QActivation), here on the QDense's result too
# (aieflow runs the ReLU in the Dense kernel: one output type); the last layer a QDense with no activation
_Q6 = "ap_fixed<6,1,AP_RND_CONV,AP_SAT>"
_QRELU6 = "ap_ufixed<6,0,AP_RND_CONV,AP_SAT>"
_QKERAS = {"fc1": {"weight": _Q6, "bias": _Q6, "result": _QRELU6}, "fc2": {"weight": _Q6, "bias": _Q6, "result": _QRELU6},
           "fc3": {"weight": _Q6, "bias": _Q6, "result": "ap_fixed<16,6,AP_RND_CONV,AP_SAT>"}}
CASES = {
    # the Dense weights in modes whose decimal text can move a code (AP_RND, AP_TRN): weights_rounding
    # hls4ml reproduces hls4ml's text
    "mlp": ("mlp", _MLP, "io_parallel", {"weights_rounding": "hls4ml"}),
    "qkeras": ("mlp", _QKERAS, "io_parallel", {"weights_rounding": "hls4ml"}),
    "cnn": ("cnn", _CONV, "io_parallel", {}),
    # io_stream: hls4ml pads in ZeroPadding2D / 1D layers of its own, on the channels-last graph input
    "cnn_stream": ("cnn", _CONV, "io_stream", {}),
    "conv1d": ("conv1d", _CONV, "io_parallel", {}),
    "conv1d_stream": ("conv1d", _CONV, "io_stream", {}),
    # every rounding and overflow mode among the types, a saturating accumulator; weights in
    # AP_RND_CONV (from_hls4ml rounds recurrent weights from their float values: docs/hls4ml.md)
    "gru": ("gru", {"gru": {"weight": "ap_fixed<10,3,AP_RND_CONV,AP_SAT>",
                            "recurrent_weight": "ap_fixed<12,2,AP_RND_CONV,AP_SAT>",
                            "bias": "ap_fixed<14,6,AP_RND_CONV,AP_SAT_SYM>",
                            "recurrent_bias": "ap_fixed<16,7,AP_RND_CONV,AP_WRAP>",
                            "accum": "ap_fixed<20,8,AP_RND_MIN_INF,AP_SAT>", "result": "ap_fixed<14,4,AP_RND,AP_SAT>"},
                    "fc": {"weight": "ap_fixed<8,2,AP_RND_CONV,AP_SAT>", "bias": "ap_fixed<8,2,AP_RND_CONV,AP_SAT>"}},
            "io_parallel", {}),
}
# the x86 verify runs one case per model kind (an io_stream case compiles to the io_parallel one's
# design: test_io_stream_compiles_to_the_io_parallel_design)
VERIFIED = ("mlp", "qkeras", "cnn", "conv1d", "gru")


def _load(model: str):
    return keras.models.load_model(DATA / f"hls4ml_{model}.keras"), np.load(DATA / f"hls4ml_{model}.npz")


def _convert(kind: str, out: str):
    model, _ = _load(CASES[kind][0])
    _, precisions, io_type, _ = CASES[kind]
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name", backend="Vitis",
                                               default_precision="ap_fixed<16,6>")
    layers = cfg["LayerName"]
    layers["x"]["Precision"]["result"] = INPUT
    for name, entry in layers.items():
        if name == "x":
            continue
        base = name.removesuffix("_relu")
        prec = {"result": RESULT, **precisions.get(base, {})}
        for key, value in prec.items():
            if key in entry["Precision"] or key == "result":
                entry["Precision"][key] = value if name == base or key == "result" else entry["Precision"][key]
        if name != base:  # the ReLU after a Dense / Conv2D: that layer's result type (aieflow runs it there)
            entry["Precision"]["result"] = prec["result"]
    return hls4ml.converters.convert_from_keras_model(model, hls_config=cfg, output_dir=out, backend="Vitis",
                                                      io_type=io_type)


class _OnDemand(dict):
    """A case's value made on its first use (a test selected with -k builds only its cases)."""

    def __init__(self, make):
        super().__init__()
        self.make = make

    def __missing__(self, kind):
        self[kind] = value = self.make(kind)
        return value


@pytest.fixture(scope="module")
def hls(tmp_path_factory):
    """The hls4ml models, each converted and its C simulation compiled when a test first needs it."""

    def make(kind):
        hm = _convert(kind, str(tmp_path_factory.mktemp(f"keras_{kind}")))
        hm.compile()
        return hm

    return _OnDemand(make)


@pytest.fixture(scope="module")
def designs(hls):
    return _OnDemand(lambda kind: aieflow.from_hls4ml(hls[kind], device="vek280", config=CASES[kind][3]))


def _inputs(kind: str) -> np.ndarray:
    """The fixture's inputs, random ones beyond the input type's [-8, 8) (saturating), and edges:
    the type's ends, zero, ties of its rounding (odd multiples of 2^-9)."""
    _, data = _load(CASES[kind][0])
    x = data["x"]
    rng = np.random.default_rng(11)
    wide = rng.uniform(-10, 10, (24, *x.shape[1:]))
    edges = np.stack([np.full(x.shape[1:], v) for v in (-8.0, 8.0 - 2**-8, 0.0, 2**-9, 3 / 512, -5 / 512)])
    return np.concatenate([x, wide, edges]).astype(np.float32)


@pytest.mark.parametrize("kind", sorted({model for model, *_ in CASES.values()}))
def test_fixture_is_the_saved_keras_model(kind):
    """The .keras file loaded on the torch backend computes what TensorFlow's Keras computed when
    it was saved (its stored outputs): the fixture is the model the other tests convert."""
    model, data = _load(kind)
    np.testing.assert_allclose(model.predict(data["x"], verbose=0), data["y"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", list(CASES))
def test_predict_equals_hls4ml_csim(hls, designs, kind):
    x = _inputs(kind)
    want = np.asarray(hls[kind].predict(np.ascontiguousarray(x)), dtype=np.float64).reshape(len(x), -1)
    design = designs[kind]
    got = np.asarray(design.predict(x), dtype=np.float64).reshape(len(x), -1)
    np.testing.assert_array_equal(got, want)
    assert np.unique(got).size > 20


def test_layers_and_types_are_hls4ml_s(hls, designs):
    """Each model maps layer for layer under hls4ml's (Keras') names, the image input channels-last
    as Keras takes it, and the types are the hls4ml config's."""
    from aieflow.frontends.hls4ml_frontend import import_hls4ml

    ops = {kind: [(n.name, n.op) for n in designs[kind].graph.nodes if n.op != "relu"]
           for kind in ("mlp", "cnn", "gru", "conv1d")}
    assert ops["mlp"] == [("fc1", "dense"), ("fc2", "dense"), ("fc3", "dense")]
    assert ops["cnn"] == [("x_chw", "transpose"), ("conv1", "conv2d"), ("conv2", "conv2d"), ("flatten", "reshape"),
                          ("fc", "dense")]
    assert ops["gru"] == [("gru", "gru"), ("fc", "dense")]
    # the (steps, channels) input viewed as (C, W), then lifted to (C, 1, W)
    assert ops["conv1d"] == [("x_cw", "transpose"), ("conv1_as_image", "reshape"), ("conv1", "conv2d"),
                             ("conv2", "conv2d"), ("flatten", "reshape"), ("fc", "dense")]
    assert tuple(designs["conv1d"].graph.tensors["x"].shape) == (16, 3)
    _, q = import_hls4ml(hls["qkeras"])
    assert q["fc1"] == {"input": "fixed<12,4,RND_CONV,SAT>", "weight": "fixed<6,1,RND_CONV,SAT>",
                        "output": "ufixed<6,0,RND_CONV,SAT>", "bias": "fixed<6,1,RND_CONV,SAT>"}
    assert tuple(designs["cnn"].graph.tensors["x"].shape) == (8, 8, 3)  # predict takes what Keras takes
    _, mlp = import_hls4ml(hls["mlp"])
    assert mlp["fc1"] == {"input": "fixed<12,4,RND_CONV,SAT>", "weight": "fixed<8,2,RND,SAT>",
                          "output": "fixed<12,4,RND_CONV,SAT>", "bias": "fixed<10,4,TRN,WRAP>"}
    assert mlp["fc2"]["weight"] == "fixed<8,1,TRN,WRAP>" and mlp["fc3"]["output"] == "fixed<16,6,RND_CONV,SAT>"
    _, gru = import_hls4ml(hls["gru"])
    assert gru["gru"]["accum"] == "fixed<20,8,RND_MIN_INF,SAT>" and gru["gru"]["bias"] == "fixed<14,6,RND_CONV,SAT_SYM>"
    assert gru["gru"]["input"] == "fixed<12,4,RND_CONV,SAT>" and gru["gru"]["output"] == "fixed<14,4,RND,SAT>"


@pytest.mark.parametrize("kind", VERIFIED)
def test_verify_on_x86(designs, kind):
    """The generated kernels equal predict on x86 (a few samples)."""
    result = designs[kind].verify(_inputs(kind)[:4])
    assert result.ok, result.verdict()


def test_keras_float_outputs_are_approximated(designs):
    """The quantised MLP follows Keras' float outputs (the fixture's oracle), the precisions a
    quantisation of the model, not another model: a sanity bound (correlation 0.996 measured; a
    Dense weight matrix transposed or its rows permuted breaks it)."""
    _, data = _load("mlp")
    got = np.asarray(designs["mlp"].predict(data["x"]), dtype=np.float64).reshape(-1)
    assert np.corrcoef(got, data["y"].reshape(-1))[0, 1] > 0.98


def test_a_keras_gru_with_another_activation_is_refused(hls):
    """A Keras-layout recurrent layer is mapped now; one with an activation aieflow has no table for
    is still refused by name."""
    layer = next(la for la in hls["gru"].get_layers() if la.class_name == "GRU")
    old = layer.get_attr("activation")
    layer.set_attr("activation", "relu")
    try:
        with pytest.raises(ModelError, match="activation") as e:
            aieflow.from_hls4ml(hls["gru"], device="vek280")
        assert e.value.layer == "gru" and e.value.hint
    finally:
        layer.set_attr("activation", old)



@pytest.mark.parametrize("kind", ["cnn", "conv1d"])  # an io_stream MLP: tests/test_from_hls4ml.py
def test_io_stream_compiles_to_the_io_parallel_design(hls, designs, kind):
    """hls4ml's io_stream conversion (its ZeroPadding layers on the channels-last input folded into
    the convolution's padding) gives the io_parallel conversion's graph, types and codes."""
    from aieflow.frontends.hls4ml_frontend import import_hls4ml

    stream = f"{kind}_stream"
    assert any(la.class_name.startswith("ZeroPadding") for la in hls[stream].get_layers())
    assert import_hls4ml(hls[stream])[1] == import_hls4ml(hls[kind])[1]
    par, st = designs[kind].graph, designs[stream].graph
    assert [(n.name, n.op, n.attrs) for n in st.nodes] == [(n.name, n.op, n.attrs) for n in par.nodes]
    x = _inputs(kind)
    np.testing.assert_array_equal(designs[stream].predict(x, raw=True), designs[kind].predict(x, raw=True))


def test_a_weight_type_wider_than_16_bits_is_refused(hls):
    """A QKeras-style narrow weight type (6 bits) is held in the 8-bit container; one wider than the
    16-bit multiply is refused, naming the layer."""
    from hls4ml.model.types import FixedPrecisionType

    layer = next(la for la in hls["qkeras"].get_layers() if la.name == "fc2")
    var = layer.weights["weight"]
    old, accum = var.type.precision, layer.get_attr("accum_t")
    var.type.precision = FixedPrecisionType(18, 2, rounding_mode="RND_CONV", saturation_mode="SAT")
    layer.set_attr("accum_t", None)  # past from_hls4ml's accum_t check, to the weight's own
    try:
        with pytest.raises(AieflowError, match="at most 16 bits") as e:
            aieflow.from_hls4ml(hls["qkeras"], device="vek280")
        assert e.value.layer == "fc2"
    finally:
        var.type.precision = old
        layer.set_attr("accum_t", accum)
