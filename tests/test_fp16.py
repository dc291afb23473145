"""float16 (IEEE binary16), the element type AIE-MLv2 adds, through the Dense chain on VEK385 (issue 24
item 3): the rounding against an exact-rational reference (tests/float_reference.py, which imports
nothing from aieflow), predict against the kernel's arithmetic written here from docs/numerics.md
(products exact in float32, float32 sums in k order from the bias, the output rounded to float16),
predict within the documented tolerance of float32 PyTorch, one x86 build bit-exact with predict, and
the refusals: off AIE-MLv2, and for every layer and design kind other than Dense (+ ReLU) chains."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from float_reference import f32, fp16
from hw_tools import make_host, needs_xrt

import aieflow
from aieflow.errors import AieflowError
from aieflow.model_zoo import cnn_classifier, gru_classifier, residual_mlp, torch_mlp
from aieflow.numerics.fixed import to_fp16

WIDTHS = [40, 24, 10]
CASCADE = {
    "0": {"parallelism": {"cas_len": 2, "cas_num": 2}}
}  # layer 0 passes accfloat partial sums
CACHE = Path(tempfile.gettempdir()) / "aieflow-test-fp16-cache"

# float32 values at binary16's edges, each with the result IEEE round-to-nearest-even gives (by hand)
EDGES = {
    65504.0: 65504.0,  # largest finite
    65519.99609375: 65504.0,  # just below the tie
    65520.0: np.inf,  # the tie past the largest finite rounds to the even 2^16: overflow
    -70000.0: -np.inf,
    2.0**-24: 2.0**-24,  # smallest subnormal
    2.0**-25: 0.0,  # tie between 0 and 2^-24: even is 0
    3 * 2.0**-25: 2.0**-23,  # tie between 2^-24 and 2^-23: even is 2^-23
    2.0**-26: 0.0,
    1023 * 2.0**-24: 1023 * 2.0**-24,  # largest subnormal
    2.0**-14 - 2.0**-25: 2.0**-14,  # tie between the largest subnormal and the smallest normal
    2.0**-14: 2.0**-14,  # smallest normal
    1 + 2.0**-11: 1.0,  # tie at 1: even is 1
    1 + 3 * 2.0**-11: 1 + 2.0**-9,  # tie: even is up
    1 + 2.0**-11 + 2.0**-20: 1 + 2.0**-10,  # just past the tie
    2049.0: 2048.0,  # integers: step 2 from 2048 on
    2051.0: 2052.0,
    -0.0: -0.0,
    np.inf: np.inf,
}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def test_the_rounding_equals_the_exact_reference_on_edges_and_random_float32():
    x = np.array(list(EDGES), dtype=np.float32)
    assert np.array_equal(
        _bits(to_fp16(x)), _bits(np.array(list(EDGES.values()), dtype=np.float32))
    )
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32)
    # exponents around binary16's range (2^-30 .. 2^20) are where the cases are; all of float32 too
    near = (codes & np.uint32(0x807FFFFF)) | (
        rng.integers(97, 148, size=codes.size).astype(np.uint32) << 23
    )
    for u in (codes, near):
        x = u.view(np.float32)
        x = x[~np.isnan(x)]
        ref = np.array([fp16(float(v)) for v in x], dtype=np.float32)
        assert np.array_equal(_bits(to_fp16(x)), _bits(ref))
    assert np.isnan(to_fp16(np.array([np.nan], dtype=np.float32))).all()


def _design(**config):
    net = torch_mlp(WIDTHS, seed=3)
    x = np.random.default_rng(0).standard_normal((64, WIDTHS[0])).astype(np.float32)
    d = aieflow.compile(
        net, device="vek385", example_input=x[:8], config={"precision": "fp16", **config}
    )
    return net, d


@pytest.fixture(scope="module")
def chain():
    return _design(layers=CASCADE)


def _reference(net, x: np.ndarray) -> np.ndarray:
    """The chain as docs/numerics.md states the fp16 Dense kernel: operands rounded to float16, each
    output starts from its (float16) bias, adds float32(x_k w_kn) for k = 0, 1, ... with one float32
    rounding per addition, is rounded to float16, then ReLU between the layers."""
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    rows = [[fp16(float(v)) for v in r] for r in x]
    for i, lin in enumerate(linears):
        w = [[fp16(float(v)) for v in col] for col in lin.weight.detach().numpy()]  # [N][K]
        b = [fp16(float(v)) for v in lin.bias.detach().numpy()]
        out = []
        for r in rows:
            y = []
            for n in range(len(b)):
                acc = b[n]
                for k, xv in enumerate(r):
                    acc = f32(acc + f32(xv * w[n][k]))
                v = fp16(acc)
                y.append(max(v, 0.0) if i < len(linears) - 1 else v)
            out.append(y)
        rows = out
    return np.array(rows, dtype=np.float32)


def test_predict_is_the_kernel_arithmetic_bit_for_bit(chain):
    net, d = chain
    assert [n.plan.mmul for n in d.layers()] == [(4, 8, 8)] * 2  # UG1529 AIE-MLv2 f16 x f16, native
    rng = np.random.default_rng(11)
    edge = np.array(
        [65504.0, 1000.0, -3000.0, 2.0**-24, 3 * 2.0**-25, 2.0**-14, 1 + 2.0**-11, -0.0],
        dtype=np.float32,
    )
    # a row of +-65504 in the signs of the first output's weights: its sum overflows binary16 to inf
    big = 65504.0 * np.sign(net[0].weight.detach().numpy()[0])
    x = np.concatenate(
        [
            rng.standard_normal((6, WIDTHS[0])) * rng.choice([1e-3, 1.0, 40.0], size=(6, 1)),
            rng.choice(edge, size=(4, WIDTHS[0])),
            big[None],
        ]
    ).astype(np.float32)
    y = d.predict(x)
    ref = _reference(net, x)
    assert not np.isfinite(ref[-1]).all() and np.isfinite(ref[:-1]).all()
    assert np.array_equal(y, ref, equal_nan=True)


def test_predict_is_within_the_fp16_tolerance_of_pytorch(chain):
    # docs/numerics.md: max |y - y_torch| <= 2^-9 max |y_torch| (binary16 keeps 11 significant bits)
    net, d = chain
    x = np.random.default_rng(5).standard_normal((256, WIDTHS[0])).astype(np.float32)
    want = net(torch.from_numpy(x)).detach().numpy()
    err = np.max(np.abs(d.predict(x) - want))
    assert 0 < err <= 2.0**-9 * np.max(np.abs(want))


@pytest.mark.parametrize("device, board", [("vek280", "VEK280"), ("vck190", "VCK190")])
def test_fp16_is_refused_off_aie_mlv2(device, board):
    x = np.zeros((4, 8), dtype=np.float32)
    with pytest.raises(AieflowError, match=f"precision fp16 is not available on {board}"):
        aieflow.compile(
            torch_mlp([8, 4], seed=0), device=device, example_input=x, config={"precision": "fp16"}
        )


def _sigmoid_head():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Sigmoid()).eval(), np.zeros(
        (4, 8), np.float32
    )


@pytest.mark.parametrize(
    "case, match",
    [
        ("cnn", r"\(conv2d\) reads a float16 tensor; precision fp16 is built for Dense layers"),
        ("residual", r"\(add\) reads a float16 tensor"),
        ("gru", r"\((gru|recurrent)\) reads a float16 tensor"),
        ("sigmoid", r"\(activation\) reads a float16 tensor"),
        ("streamed", "precision fp16 does not apply to streamed designs"),
        ("gemm", "unsupported GEMM dtype 'fp16'"),
    ],
)
def test_every_other_layer_and_kind_refuses_fp16_by_name(case, match):
    with pytest.raises(AieflowError, match=match):
        if case == "gemm":
            aieflow.gemm(64, 64, 64, dtype="fp16", device="vek385")
        elif case == "streamed":
            _design(layers={"0": {"weights": "streamed"}})
        else:
            model, x = {
                "cnn": lambda: (cnn_classifier(), np.zeros((1, 3, 32, 32), np.float32)),
                "residual": lambda: (residual_mlp(), np.zeros((4, 16), np.float32)),
                "gru": lambda: (gru_classifier(), np.zeros((1, 5, 4), np.float32)),
                "sigmoid": _sigmoid_head,
            }[case]()
            aieflow.compile(model, device="vek385", example_input=x, config={"precision": "fp16"})


@pytest.mark.skipif(
    shutil.which("g++") is None, reason="g++ not found: verify builds C++20 with g++"
)
def test_the_generated_chain_is_bit_exact_on_x86(chain):
    _, d = chain
    layers = d.files["src/layers.h"]
    assert layers.count("using TA = float16;") == 2 and layers.count("using ACC = accfloat;") == 2
    r = d.verify(samples=300, cache_dir=CACHE)
    assert r.samples == 300 and r.values == 300 * WIDTHS[-1]
    assert r.ok, r.verdict()


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
def test_the_host_plio_files_convert_float16_exactly_and_round_to_nearest_even(tmp_path):
    # templates/system/plio_io.h (the XRT host and the x86 system run): every finite binary16 value
    # survives text -> bits -> text, and float32 text rounds as the exact reference does
    import subprocess
    from importlib.resources import files

    header = files("aieflow") / "templates" / "system" / "plio_io.h"
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [
            np.array(list(EDGES), dtype=np.float32),
            (rng.standard_normal(2000) * rng.choice([1e-6, 1.0, 3e4], size=2000)).astype(
                np.float32
            ),
        ]
    )
    (tmp_path / "t.cpp").write_text(f'''#include "{header}"
#include <iostream>
int main() {{
    using T = aieflow_io::lane_traits<aieflow_io::fp16>;
    for (std::uint64_t h = 0; h < 65536; ++h)
        if (((h >> 10) & 31u) != 31u && T::parse(T::text(h)) != h) {{ std::cout << "roundtrip " << h << "\\n"; return 1; }}
    std::string tok;
    while (std::cin >> tok) std::cout << T::parse(tok) << "\\n";
}}
''')
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
            str(tmp_path / "t"),
            str(tmp_path / "t.cpp"),
        ],
        check=True,
    )
    text = "\n".join(f"{float(v):.9g}" for v in values)
    out = subprocess.run(
        [str(tmp_path / "t")], input=text, capture_output=True, text=True, check=True
    ).stdout.split()
    want = [int(np.float16(fp16(float(v))).view(np.uint16)) for v in values]
    assert [int(b) for b in out] == want


@needs_xrt
def test_the_fp16_host_program_compiles_against_xrt(chain, tmp_path):
    # the host of a float16 project (PLIO text in float16, `plio_io.h`) builds against the real XRT headers
    _, d = chain
    d.save(tmp_path / "d")
    proj = tmp_path / "d" / "project"
    r = make_host(proj)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (proj / "host.exe").is_file() and "xrt::graph" in (proj / "host/host.cpp").read_text()


def test_an_fp16_layer_that_does_not_fit_is_named_not_the_streamed_kind():
    # a resident chain that does not fit falls back to streamed weights, which fp16 does not take:
    # the error must be the layer that does not fit, not the fallback's precision refusal
    net = torch_mlp([4096, 2048, 10], seed=1)
    x = np.random.default_rng(0).standard_normal((8, 4096)).astype(np.float32)
    with pytest.raises(AieflowError, match=r"layer '0': 4096 x 2048 weights do not fit") as err:
        aieflow.compile(net, device="vek385", example_input=x, config={"precision": "fp16"})
    assert "streamed" not in str(err.value)


def test_a_layer_given_fp16_that_is_not_a_dense_is_refused_by_name_in_emulate_too():
    # an int8 model with one Add given precision fp16: refused naming it (not read as some other width)
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    with pytest.raises(AieflowError, match=r"layer 'add': the layer \(add\) is given precision fp16"):
        aieflow.emulate(residual_mlp(), device="vek385", example_input=x, config={"layers": {"add": {"precision": "fp16"}}})
