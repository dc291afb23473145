"""The main job: compile the example models for every AIE generation and print their reports.

Each example also checks the emulator against the framework's own output (onnxruntime for QDQ
models, PyTorch for float models), and runs the design's own generated C++ on x86 against the
open shim (`verify`, 1,000 samples, bit-exact with the emulator), so a broken build is visible
here, not only in the tests.

    python examples/run_examples.py --out out/examples
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

import aieflow
from aieflow.model_zoo import qdq_mlp, torch_mlp


def ort_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def check_verify(design: aieflow.Design) -> bool:
    """Run the design's generated C++ on x86 (open shim) and compare with predict, bit for bit."""
    result = design.verify(samples=1000)
    print(result.verdict())
    return result.ok


def banner(text: str) -> None:
    print("\n" + "=" * len(text) + f"\n{text}\n" + "=" * len(text))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/examples")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    failures = 0

    # 1. QDQ int8 MLP (ONNX), through the CLI, for VEK280; predict checked against onnxruntime.
    banner("1. QDQ int8 MLP 64-100-37-10 (ONNX, CLI) on VEK280")
    model = qdq_mlp([64, 100, 37, 10], seed=1)
    onnx.save(model, out / "qdq_mlp.onnx")
    x = (rng.standard_normal((4096, 64)) * 3).astype(np.float32)
    np.save(out / "qdq_mlp_input.npy", x)
    cli = [sys.executable, "-m", "aieflow.cli"]
    subprocess.run([*cli, "compile", str(out / "qdq_mlp.onnx"), "--device", "vek280", "--out", str(out / "qdq_mlp_vek280"), "--force", "--input", str(out / "qdq_mlp_input.npy")], check=True)
    subprocess.run([*cli, "predict", str(out / "qdq_mlp_vek280"), "--input", str(out / "qdq_mlp_input.npy"), "--output", str(out / "qdq_mlp_y.npy")], check=True)
    y = np.load(out / "qdq_mlp_y.npy")
    same = np.array_equal(y.astype(np.float32), ort_reference(model, x))
    print(f"predict == onnxruntime on {len(x)} samples: {same}")
    failures += not same
    failures += subprocess.run([*cli, "verify", str(out / "qdq_mlp_vek280"), "--samples", "1000"]).returncode != 0

    # 2. The same QDQ model on AIE1 and AIE-MLv2 (Python API).
    for dev in ("vck190", "vek385"):
        banner(f"2. QDQ int8 MLP on {dev.upper()}")
        d = aieflow.compile(model, device=dev, example_input=x[:16])
        d.save(out / f"qdq_mlp_{dev}", force=True)
        print(d.summary())
        same = np.array_equal(d.predict(x).astype(np.float32), ort_reference(model, x))
        print(f"predict == onnxruntime: {same}")
        failures += not same
        failures += not check_verify(d)

    # 3. PyTorch float MLP: fp32 on VCK190, int16 and int8 PTQ on VEK280.
    import torch

    net = torch_mlp([32, 64, 64, 8], seed=0)
    xt = rng.standard_normal((2048, 32)).astype(np.float32)
    ref = net(torch.from_numpy(xt)).detach().numpy()
    for dev, prec in (("vck190", "fp32"), ("vek280", "int16"), ("vek280", "int8"), ("vek280", "bf16")):
        banner(f"3. PyTorch MLP 32-64-64-8, {prec} on {dev.upper()}")
        d = aieflow.compile(net, device=dev, example_input=xt[:8], calibration=xt[:512], config={"precision": prec, "batch": 8})
        d.save(out / f"torch_mlp_{prec}_{dev}", force=True)
        print(d.summary())
        err = float(np.max(np.abs(d.predict(xt) - ref)))
        print(f"max |predict - torch| = {err:.3g}")
        failures += not check_verify(d)

    # 4. The benchmark MLP: 7 layers, 512 wide, int8, VEK280.
    banner("4. 7-layer 512-wide int8 MLP on VEK280")
    big = qdq_mlp([512] * 8, seed=3)
    xb = (rng.standard_normal((256, 512)) * 3).astype(np.float32)
    d = aieflow.compile(big, device="vek280", config={"batch": 8})
    d.save(out / "mlp7x512_vek280", force=True)
    print(d.summary())
    same = np.array_equal(d.predict(xb).astype(np.float32), ort_reference(big, xb))
    print(f"predict == onnxruntime: {same}")
    failures += not same
    failures += not check_verify(d)

    # 5. A recurrent model: the top-tagging GRU (6 inputs, hidden 20, 20 steps, dense 64 -> 1), fp32 on
    #    VCK190 (the published design's arithmetic, hybrid AIE + PL aggregation) and int16 on VEK280.
    class TopTagging(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.GRU(6, 20, batch_first=True)
            self.fc1, self.relu, self.fc2 = torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)

        def forward(self, x):
            return self.fc2(self.relu(self.fc1(self.rnn(x)[0][:, -1])))

    torch.manual_seed(0)
    gru = TopTagging().eval()
    xs = rng.standard_normal((512, 20, 6)).astype(np.float32)
    ref = gru(torch.from_numpy(xs)).detach().numpy()
    for dev, prec in (("vck190", "fp32"), ("vek280", "int16")):
        banner(f"5. GRU top tagging (PyTorch), {prec} on {dev.upper()}")
        d = aieflow.compile(gru, device=dev, example_input=xs[:8], calibration=xs, config={"precision": prec})
        d.save(out / f"gru_toptag_{dev}", force=True)
        d = aieflow.load(out / f"gru_toptag_{dev}")  # saved designs load back (design.json kind "recurrent")
        print(d.summary())
        print(f"max |predict - torch| = {float(np.max(np.abs(d.predict(xs) - ref))):.3g}")
        result = d.verify(samples=200)
        print(result.verdict())
        failures += not result.ok

    print(f"\n{'all examples OK' if not failures else f'{failures} example(s) FAILED'}; designs in {out}/")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
