"""The models of tests/test_cnn_rows.py (defined here, imported by the tests) at 256 x 256 x 3 on the row-streamed mapping
(``cnn.mapping: rows``) of each device, in int8 and in the device's float type (fp32 on VCK190, bf16
on VEK280 / VEK385): the model's latency, frames per second, bound, compute and memory tiles
(docs/conv.md "Row streaming"), or the PlanError's reason where a combination does not map.

* ``unet``: the tiny U-Net (encoder conv, 2 x 2 max pooling, middle conv + nearest 2 x upsampling,
  decoder conv on the concat of the upsampled map and the encoder's skip, 1 x 1 conv).  On AIE1 the
  decoder reads its two parts on two stream ports; on AIE-ML / AIE-MLv2 (one port) they meet in a
  memory-tile row buffer;
* ``bilinear-res-unet``: the same with a bilinear (half_pixel) upsampling, a decoder of 8 channels
  and a residual block after it, relu(r2(relu(r1(d))) + d), before the 1 x 1 conv;
* ``classifier``: conv 3 -> 8, 2 x 2 max pooling, conv 8 -> 16, global average pooling, Dense 16 ->
  10, softmax.

    python benchmarks/cnn_rows.py

Every aieflow number is the performance model's (``cnn/rows.estimate_rows``, assumed constants,
none fitted); no published figure of this network exists to compare with, and none was measured on
a board.  In the same run, PyTorch's own float inference of each model on this machine's CPU (one
thread; batch 1 latency and batch 8 frames per second, medians of repeated runs) for comparison.
"""

from __future__ import annotations

import os
import platform
import time

import numpy as np
import torch
from torch import nn

import aieflow
from aieflow.errors import AieflowError


class TinyUNet(nn.Module):
    """Encoder conv, 2 x 2 max pooling, middle conv + nearest 2 x upsampling, decoder conv on the
    concat of the upsampled map and the encoder's skip, 1 x 1 output conv."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.e = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.m = nn.Conv2d(8, 8, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.d = nn.Conv2d(16, 4, 3, padding=1)
        self.o = nn.Conv2d(4, 3, 1)

    def forward(self, x):
        h = torch.relu(self.e(x))
        g = self.up(torch.relu(self.m(self.pool(h))))
        return self.o(torch.relu(self.d(torch.cat([g, h], dim=1))))


class BiResUNet(nn.Module):
    """The tiny U-Net with a bilinear decoder upsampling (align_corners=False: half_pixel) and a
    ResNet block after the decoder: z = relu(r2(relu(r1(d))) + d)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.e = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.m = nn.Conv2d(8, 8, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.d = nn.Conv2d(16, 8, 3, padding=1)
        self.r1 = nn.Conv2d(8, 8, 3, padding=1)
        self.r2 = nn.Conv2d(8, 8, 3, padding=1)
        self.o = nn.Conv2d(8, 3, 1)

    def forward(self, x):
        h = torch.relu(self.e(x))
        g = self.up(torch.relu(self.m(self.pool(h))))
        d = torch.relu(self.d(torch.cat([g, h], dim=1)))
        return self.o(torch.relu(self.r2(torch.relu(self.r1(d))) + d))


class Classifier(nn.Module):
    """conv, max pooling, conv, global average pooling, Dense, softmax."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.b = nn.Conv2d(8, 16, 3, padding=1)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = torch.relu(self.b(self.pool(torch.relu(self.a(x)))))
        return torch.softmax(self.fc(self.gap(h).flatten(1)), dim=1)


class Stride2(nn.Module):
    """Conv 3 -> 8 (padding 1) + ReLU, 2 x 2 max pooling, conv 8 -> 4 with stride 2 (padding 1):
    readers that take two rows per output row (tests/test_cnn_rows.py's small CNN; not in MODELS,
    benchmarks/rows_stream_room.py runs it)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.b = nn.Conv2d(8, 4, 3, stride=2, padding=1)

    def forward(self, x):
        return self.b(self.pool(torch.relu(self.a(x))))


MODELS = {"unet": TinyUNet, "bilinear-res-unet": BiResUNet, "classifier": Classifier}
RUNS = (("vck190", "int8"), ("vek280", "int8"), ("vek385", "int8"), ("vck190", "fp32"), ("vek280", "bf16"),
        ("vek385", "bf16"))


def _median_s(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def torch_cpu(model: nn.Module, repeats: int = 10) -> tuple[float, float]:
    """(batch-1 latency in us, batch-8 frames/s) of the float model on one CPU thread."""
    x1 = torch.from_numpy(np.random.default_rng(2).standard_normal((1, 3, 256, 256)).astype(np.float32))
    x8 = torch.from_numpy(np.random.default_rng(3).standard_normal((8, 3, 256, 256)).astype(np.float32))
    with torch.inference_mode():
        t1 = _median_s(lambda: model(x1), repeats)
        t8 = _median_s(lambda: model(x8), max(3, repeats // 3))
    return t1 * 1e6, 8 / t8


def main() -> None:
    torch.set_num_threads(1)
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, torch {torch.__version__} "
          f"(one thread), load average {os.getloadavg()[0]:.1f}")
    cal = np.random.default_rng(1).standard_normal((4, 3, 256, 256)).astype(np.float32)
    print("| model | device | latency (us) | frames/s | bound | tiles | memory tiles |")
    print("| --- | --- | ---: | ---: | --- | ---: | ---: |")
    for name, model in MODELS.items():
        lat, fps = torch_cpu(model().eval())
        print(f"| {name} | PyTorch float, this CPU (1 thread; frames/s at batch 8) | {lat:,.1f} | {fps:,.1f} | - | - | - |")
        for device, precision in RUNS:
            try:
                d = aieflow.compile(model().eval(), device, cal[:1], calibration=cal,
                                    config={"precision": precision, "cnn": {"mapping": "rows"}})
            except AieflowError as err:
                print(f"| {name} | {device} {precision} | refused: {str(err).splitlines()[0]} | | | | |")
                continue
            e = d.estimate()
            print(f"| {name} | {device} {precision} | {e.latency_s * 1e6:,.1f} | {e.fps:,.1f} | {e.bound} | "
                  f"{e.tiles_used} | {e.memory_tiles_used} |")


if __name__ == "__main__":
    main()
