"""``aieflow.from_hls4ml`` for hls4ml's Conv2D / Conv1D layers (PyTorch models converted with hls4ml's
channels-last pass, io_parallel and io_stream): the ModelGraph's weights and precisions compiled
by aieflow's CNN mapping, checked against hls4ml's C simulation (``hls_model.compile();
hls_model.predict``), bit for bit.  Nothing on the reference side imports aieflow.  Skipped, with
the reason, where hls4ml, torch or g++ is missing.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

hls4ml = pytest.importorskip("hls4ml", reason="hls4ml is not installed; its C simulation is the reference here")
torch = pytest.importorskip("torch")
if shutil.which("g++") is None:
    pytest.skip("g++ is needed to compile hls4ml's C simulation", allow_module_level=True)

import aieflow  # noqa: E402
from aieflow.errors import ModelError  # noqa: E402

RESULT = "ap_fixed<12,4,AP_RND_CONV,AP_SAT>"
WEIGHT = "ap_fixed<8,2,AP_RND_CONV,AP_SAT>"


def _cnn(channels: int):
    torch.manual_seed(5)
    if channels == 0:  # the 1-D case: 2 channels x 16 steps
        return torch.nn.Sequential(torch.nn.Conv1d(2, 4, 3, padding=1), torch.nn.ReLU(),
                                   torch.nn.Conv1d(4, 3, 3, stride=2), torch.nn.ReLU(), torch.nn.Flatten(),
                                   torch.nn.Linear(3 * 7, 5)).eval()
    return torch.nn.Sequential(torch.nn.Conv2d(channels, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(4, 3, 3, stride=2), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(3 * 3 * 3, 5)).eval()


def _convert(out: str, io_type: str, channels: int):
    model = _cnn(channels)
    cfg = hls4ml.utils.config_from_pytorch_model(model, input_shape=_shape(channels), granularity="name", backend="Vitis",
                                                 default_precision="ap_fixed<16,6>")
    for layer in cfg["LayerName"].values():
        layer["Precision"]["result"] = RESULT
        for key in ("weight", "bias"):
            if key in layer["Precision"]:
                layer["Precision"][key] = WEIGHT
    return hls4ml.converters.convert_from_pytorch_model(model, hls_config=cfg, output_dir=out, backend="Vitis",
                                                        io_type=io_type)


def _shape(channels: int) -> tuple[int, ...]:
    return (2, 16) if channels == 0 else (channels, 8, 8)


# (io_type, input channels; 0: Conv1d): one channel is held (H, W, 1) by hls4ml, without a Transpose layer
@pytest.fixture(scope="module", params=[("io_parallel", 2), ("io_stream", 2), ("io_parallel", 1), ("io_parallel", 0),
                                        ("io_stream", 0)],
                ids=["io_parallel", "io_stream", "io_parallel-1ch", "conv1d-io_parallel", "conv1d-io_stream"])
def hls(request, tmp_path_factory):
    io_type, channels = request.param
    hm = _convert(str(tmp_path_factory.mktemp(io_type)), io_type, channels)
    hm.compile()
    return hm, channels


def _inputs(channels: int) -> np.ndarray:
    rng = np.random.default_rng(9)
    x = rng.uniform(-9, 9, (60, *_shape(channels)))  # beyond ap_fixed<12,4>'s [-8, 8): saturating inputs too
    edges = np.stack([np.full(_shape(channels), v) for v in (-8.0, 8.0 - 2**-8, 0.0, 2**-9, 3 / 512)])
    return np.concatenate([x, edges]).astype(np.float32)


def test_predict_equals_hls4ml_csim(hls):
    hls, channels = hls
    x = _inputs(channels)
    want = np.asarray(hls.predict(np.ascontiguousarray(x)), dtype=np.float64).reshape(len(x), -1)
    # AP_RND_CONV weights: hls4ml's decimal text gives the exact rounding's codes (docs/hls4ml.md)
    design = aieflow.from_hls4ml(hls, device="vek280")
    lift = ["reshape"] if channels == 0 else []  # (C, W) -> (C, 1, W)
    assert [n.op for n in design.graph.nodes if n.op != "relu"] == [*lift, "conv2d", "conv2d", "reshape", "dense"]
    got = np.asarray(design.predict(x), dtype=np.float64).reshape(len(x), -1)
    np.testing.assert_array_equal(got, want)
    assert np.unique(got).size > 30


def test_a_transpose_of_its_own_is_refused(hls):
    hls, channels = hls
    if channels == 1:
        pytest.skip("one channel: no Transpose layer")
    layer = next(la for la in hls.get_layers() if la.class_name == "Transpose")
    old = layer.get_attr("perm")
    layer.set_attr("perm", [0, 2, 1])
    try:
        with pytest.raises(ModelError, match="Transpose") as e:
            aieflow.from_hls4ml(hls, device="vek280")
        assert e.value.layer == layer.name and e.value.hint
    finally:
        layer.set_attr("perm", old)


def test_verify_on_x86(hls):
    """The generated kernels of the hls4ml model's design equal predict on x86 (one case: the
    kernels do not depend on how the model came in)."""
    hls, channels = hls
    if channels == 1 or hls.config.get_config_value("IOType") != "io_parallel":
        pytest.skip("one build suffices")
    design = aieflow.from_hls4ml(hls, device="vek280")
    result = design.verify(_inputs(channels)[:8])
    assert result.ok, result.verdict()


def test_an_image_output_is_refused_by_name(tmp_path):
    """hls4ml holds a convolution's output channels-last, aieflow's graph channels-first: a model
    that ends on one is refused, naming the layer and the fix."""
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.ReLU()).eval()
    cfg = hls4ml.utils.config_from_pytorch_model(model, input_shape=(2, 6, 6), granularity="name", backend="Vitis")
    for layer in cfg["LayerName"].values():
        layer["Precision"]["result"] = RESULT
    hm = hls4ml.converters.convert_from_pytorch_model(model, hls_config=cfg, output_dir=str(tmp_path / "img"),
                                                      backend="Vitis", io_type="io_parallel")
    with pytest.raises(ModelError, match="channels-last") as e:
        aieflow.from_hls4ml(hm, device="vek280")
    assert e.value.layer == "_1" and "Flatten" in e.value.hint
