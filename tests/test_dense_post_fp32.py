"""fp32 activations and softmax fused into the Dense kernel before them (issue 17 item 5: ops/post.py,
dense.h ``DensePost`` with ``POST_FLOAT`` 1, the CNN post layer's ``cnn_float_post.h``): an fp32 MLP
on VCK190 (AIE1: no memory tiles for a standalone kernel) with an activation between its layers and a
sigmoid / softmax head maps as a chain; its emulation is the float32 sequence the kernel computes
(checked against the independent reference of tests/test_cnn_float_post.py on random and extreme
inputs); it tracks PyTorch; one x86 build verifies it bit-exact; its cycles and memory account for
the post; an fp32 GELU (no kernel) is refused by name."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from test_cnn_float_post import _same, r_act, r_softmax
from torch import nn

import aieflow
from aieflow.design import Design
from aieflow.errors import PlanError

# The functions with an fp32 kernel, as docs/conv.md lists them (ReLU: the Dense kernel's own epilogue).
FUNCTIONS = {"leaky_relu": nn.LeakyReLU, "elu": nn.ELU, "selu": nn.SELU, "sigmoid": nn.Sigmoid,
             "tanh": nn.Tanh, "hard_sigmoid": nn.Hardsigmoid, "hard_swish": nn.Hardswish, "silu": nn.SiLU,
             "clip": nn.ReLU6}
# perf/activation.py's assumed constants, typed here from its comment: 2 cycles per float32 operation;
# sigmoid exp 24 + 3 + a division 16 operations; softmax 29 per value + 16 per row; a copy 2 per value.
OP, SIGMOID_OPS, SM_VALUE_OPS, SM_ROW_OPS, COPY = 2, 43, 29, 16, 2


def _data(n=64, seed=5):
    return np.random.default_rng(seed).standard_normal((n, 16)).astype(np.float32)


def _mlp(mid, head):
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(16, 40), mid(), nn.Linear(40, 5), head()).eval()


def _compile(model, x, **config):
    return aieflow.compile(model, device="vck190", example_input=x[:8], calibration=x,
                           config={"precision": "fp32", "batch": 4, **config})


def _ref(function: str, x: np.ndarray) -> np.ndarray:
    # PyTorch's ReLU6 is Clip(0, 6) and its Hardsigmoid has slope 1/6, the reference's constants
    return np.array([r_act(function, np.float32(v)) for v in x.ravel()], dtype=np.float32).reshape(x.shape)


@pytest.mark.parametrize("function", list(FUNCTIONS))
def test_an_fp32_activation_between_dense_layers_is_fused_and_emulated_as_the_kernel(function):
    x = _data()
    model = _mlp(FUNCTIONS[function], nn.Sigmoid)
    d = _compile(model, x)
    assert type(d) is Design  # the chain: no DAG kernel, no memory tile
    assert [n.plan.post for n in d.layers()] == [f"fp32:{function}", "fp32:sigmoid"]
    assert d.estimate().memory_tiles_used == 0
    act, head = (n for n in d.graph.nodes if n.op == "activation")
    # random, large (exp over- / underflow, the clamps) and tiny inputs through the fused pair
    xs = np.concatenate([x, x * 40.0, x * 1e-30]).astype(np.float32)
    tr = d.trace(xs)
    assert _same(tr[act.outputs[0]], _ref(function, tr[act.inputs[0]])).all()
    assert _same(tr[head.outputs[0]], _ref("sigmoid", tr[head.inputs[0]])).all()
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    # float32 kernels vs PyTorch's: exp within a few ulp (docs/conv.md), through two layers
    np.testing.assert_allclose(d.predict(x), want, rtol=1e-5, atol=1e-6)


def test_an_fp32_softmax_head_is_fused_and_emulated_as_the_kernel():
    x = _data()
    model = _mlp(nn.Tanh, lambda: nn.Softmax(dim=-1))
    d = _compile(model, x)
    assert [n.plan.post for n in d.layers()] == ["fp32:tanh", "fp32:softmax"]
    assert d.layers()[1].plan.cas_num == 1
    sm = next(n for n in d.graph.nodes if n.op == "softmax")
    xs = np.concatenate([x, x * 60.0]).astype(np.float32)
    tr = d.trace(xs)
    want = np.stack([r_softmax(row) for row in tr[sm.inputs[0]]])
    assert _same(tr[sm.outputs[0]], want).all()
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(d.predict(x), ref, rtol=1e-5, atol=1e-7)


def test_the_fused_posts_cycles_and_memory_are_accounted():
    from aieflow.perf.kernel import layer_kernel_cycles

    x = _data()
    for head, post in ((nn.Sigmoid, "fp32:sigmoid"), (lambda: nn.Softmax(dim=-1), "fp32:softmax")):
        d = _compile(_mlp(nn.ReLU, head), x)
        layer = d.layers()[1]
        p = layer.plan
        assert p.post == post
        role = "single" if p.cas_len == 1 else "last"
        k = layer_kernel_cycles(p, layer.types, False, d.device)[role]
        bare = layer_kernel_cycles(dataclasses.replace(p, post=""), layer.types, False, d.device)[role]
        if post == "fp32:sigmoid":
            assert k.post == p.batch * p.n_slice * SIGMOID_OPS * OP
        else:
            assert k.post == p.batch * (5 * SM_VALUE_OPS + SM_ROW_OPS) * OP + p.batch * (5 + p.n_slice) * COPY
        assert k.cycles == pytest.approx(bare.cycles + k.post)
        # memory: one output buffer of float32 values, no table; a softmax adds one row in and out
        # and the int32 row scratch; each 32-byte aligned
        pre = -(-p.batch_pad * p.n_slice * 4 // 32) * 32
        row = -(-p.n_slice * 4 // 32) * 32
        assert p.memory.post == (pre if post == "fp32:sigmoid" else pre + 3 * row)


def test_an_fp32_gelu_is_refused_by_name():
    x = _data()
    with pytest.raises(PlanError, match=r"gelu in fp32 has no kernel") as e:
        _compile(_mlp(nn.GELU, nn.Sigmoid), x)
    assert e.value.layer == "1" and "bf16" in e.value.hint


def test_the_fused_fp32_posts_run_bit_exact_on_x86():
    # one build (issue 17 item 5's x86 variant): SiLU between the layers, the softmax head
    x = _data()
    d = _compile(_mlp(nn.SiLU, lambda: nn.Softmax(dim=-1)), x)
    head = d.files["src/layers.h"]
    assert "POST_FLOAT = 1, POST_FN = 8" in head and "POST = 2" in head
    assert "src/kernels/cnn_float_post.h" in d.files
    xs = np.concatenate([x[:12], x[:12] * 40.0]).astype(np.float32)  # saturating sigmoid, exp underflow
    v = d.verify(xs)
    assert v.ok, v.verdict()
