"""ESPCN x2 super-resolution (the thesis model): float reference vs aieflow's emulation.

Builds the PyTorch ESPCN from the thesis's trained weights, runs the five Set5 crops through the
float model and through ``aieflow.emulate(...).predict`` in four numerics (fp32 with exact tanh,
fp32 with the thesis's tanh lookup table, int8 and int16 post-training quantisation calibrated on
the low-resolution crops), and prints the PSNR of each against the ground truth.  See
docs/conv.md; the data is described in shared/spec/espcn-super-resolution.md.

    python examples/espcn/run.py [--data DIR] [--device vck190]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "espcn"
IMAGES = ("baby", "bird", "butterfly", "head", "woman")
MODES = {
    "fp32 exact tanh": {"precision": "fp32"},
    "fp32 LUT tanh (espcn-thesis)": {"precision": "fp32", "activations": {"tanh": "espcn-thesis"}},
    "int16 PTQ": {"precision": "int16"},
    "int8 PTQ": {"precision": "int8"},
}


def build_model(weights: Path):
    """The thesis's ESPCN (conv1 5x5 -> tanh -> conv3 3x3 -> tanh -> conv4 3x3 -> pixel shuffle),
    with its layer names, loaded from the npz."""
    from aieflow import model_zoo

    return model_zoo.espcn(weights)


def luma(path: Path) -> np.ndarray:
    """Y channel as PIL computes it, / 255, float32 (H, W)."""
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("YCbCr"), dtype=np.float32)[..., 0] / 255.0


def psnr(sr: np.ndarray, hr: np.ndarray) -> float:
    """Y channel, peak 1.0, no border shave, no clipping of the output."""
    mse = float(np.mean((sr.astype(np.float64) - hr.astype(np.float64)) ** 2))
    return 10.0 * np.log10(1.0 / mse)


def check_data(data: Path) -> None:
    needed = [data / "espcn_x2_weights.npz"] + [data / d / f"{n}.png" for d in ("lr", "hr") for n in IMAGES]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        sys.exit(
            f"ESPCN data not found: {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            + f"\nPass --data DIR pointing at the espcn data folder (default: {DEFAULT_DATA})."
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with espcn_x2_weights.npz, lr/ and hr/")
    parser.add_argument("--device", default="vck190", help="device whose numerics are emulated (fp32 needs AIE1: vck190)")
    args = parser.parse_args(argv)
    check_data(args.data)

    import torch

    import aieflow

    model = build_model(args.data / "espcn_x2_weights.npz")
    lr = np.stack([luma(args.data / "lr" / f"{n}.png") for n in IMAGES])[:, None]  # (5, 1, 16, 16)
    hr = np.stack([luma(args.data / "hr" / f"{n}.png") for n in IMAGES])[:, None]  # (5, 1, 32, 32)
    with torch.no_grad():
        outputs = {"float (PyTorch)": model(torch.from_numpy(lr)).numpy()}
    for label, config in MODES.items():
        emu = aieflow.emulate(model, device=args.device, example_input=lr, calibration=lr, config=config)
        outputs[label] = emu.predict(lr)

    print(f"ESPCN x2, Set5 crops (16x16 -> 32x32), PSNR in dB (Y, peak 1.0, no shave, no clipping), device {args.device}")
    print()
    print("| numerics | " + " | ".join(IMAGES) + " | mean | max abs diff vs float |")
    print("| --- | " + " | ".join("---:" for _ in IMAGES) + " | ---: | ---: |")
    ref = outputs["float (PyTorch)"]
    for label, y in outputs.items():
        values = [psnr(y[i, 0], hr[i, 0]) for i in range(len(IMAGES))]
        diff = float(np.max(np.abs(y - ref)))
        cells = " | ".join(f"{v:.2f}" for v in values)
        print(f"| {label} | {cells} | {np.mean(values):.2f} | {diff:.2e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
