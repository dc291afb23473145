"""ESPCN x2 on the VCK190: the thesis's design (thesis.yaml) and aieflow's own designs, compiled.

Builds the model from the shared weights, compiles three designs with ``aieflow.compile``: the
thesis's mapping (``thesis.yaml``: im2col matmuls + PL kernels, fp32 with the tanh table), aieflow's
stream mapping in fp32 with the same table (equal numerics, so equal PSNR) and in int8, runs the
five Set5 crops through each design's ``predict`` and prints PSNR and the modelled latency, frames
per second, tiles and bound.  ``--verify`` also runs each design's generated C++ on x86 (minutes).

    python examples/espcn/designs.py [--data DIR] [--out DIR] [--verify]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import DEFAULT_DATA, IMAGES, build_model, check_data, luma, psnr  # noqa: E402

LUT = {"tanh": "espcn-thesis"}


def designs(model, lr: np.ndarray) -> dict:
    import aieflow

    configs = {
        "thesis (thesis.yaml)": yaml.safe_load((HERE / "thesis.yaml").read_text()),
        "ours fp32 (stream)": {"precision": "fp32", "activations": LUT},
        "ours int8 (stream)": {"precision": "int8", "activations": LUT},
    }
    return {label: aieflow.compile(model, device="vck190", example_input=lr, calibration=lr, config=cfg)
            for label, cfg in configs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=None, help="save each design's project under this folder")
    parser.add_argument("--verify", action="store_true", help="run each design's C++ on x86 against predict")
    args = parser.parse_args(argv)
    check_data(args.data)
    import torch

    model = build_model(args.data / "espcn_x2_weights.npz")
    lr = np.stack([luma(args.data / "lr" / f"{n}.png") for n in IMAGES])[:, None]
    hr = np.stack([luma(args.data / "hr" / f"{n}.png") for n in IMAGES])[:, None]
    with torch.no_grad():
        ref = model(torch.from_numpy(lr)).numpy()
    built = designs(model, lr)
    thesis_fps = built["thesis (thesis.yaml)"].estimate().fps
    print("ESPCN x2 on vck190, Set5 crops: PSNR (dB, Y, peak 1.0) and the modelled performance")
    print()
    print("| design | mean PSNR | " + " | ".join(IMAGES) + " | latency us | frames/s | x thesis | tiles | bound |")
    print("| --- | ---: | " + " | ".join("---:" for _ in IMAGES) + " | ---: | ---: | ---: | ---: | --- |")
    values = [psnr(ref[i, 0], hr[i, 0]) for i in range(len(IMAGES))]
    print(f"| float (PyTorch) | {np.mean(values):.2f} | " + " | ".join(f"{v:.2f}" for v in values) + " | | | | | |")
    for label, d in built.items():
        y = d.predict(lr)
        values = [psnr(y[i, 0], hr[i, 0]) for i in range(len(IMAGES))]
        e = d.estimate()
        print(f"| {label} | {np.mean(values):.2f} | " + " | ".join(f"{v:.2f}" for v in values)
              + f" | {e.latency_s * 1e6:,.1f} | {e.fps:,.0f} | {e.fps / thesis_fps:,.1f} | {d.plan.tiles} | {e.bound} |")
        if args.out:
            d.save(args.out / "_".join(label.split()[:2]), force=True)
    if args.verify:
        print()
        for label, d in built.items():
            print(f"{label}: {d.verify(lr).verdict()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
