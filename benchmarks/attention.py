"""A transformer jet tagger or a small ViT block on VEK280 / VEK385 (issue 19): compile, predict vs
PyTorch, x86 verify, modelled latency / throughput with the per-stage breakdown, PyTorch CPU timings
in the same run.

    python benchmarks/attention.py [--model tagger|tagger-masked|vit|vit-12x20] [--verify-samples N]
                                   [--configs vek280:int8,vek280:int16,...]
    python benchmarks/attention.py --configs vek280:bf16,vek385:bf16 --verify vek280:bf16   # bf16 only

``--model vit``: a 16 x 16 x 3 image, a 4 x 4 stride-4 Conv2d patch embedding to 32 (16 patches), a
class token (17 tokens), a positional add, one pre-norm ``nn.TransformerEncoderLayer`` (2 heads,
GELU MLP 64), class-token pooling ``x[:, 0]``, LayerNorm, a 10-class Linear head
(frontends/patches.py).  ``vit-12x20``: the same on a 12 x 20 image (15 patches + the class token:
16 tokens) with 8 classes, so every memory-tile run is a whole number of 32-bit words.

The model (written by hand from what maps today; docs/attention.md): 16 particles x 16 features,
a ReLU embedding to 32, two pre-norm encoder blocks (LayerNorm, two-head self-attention with the
heads split by view / transpose, residual Add, LayerNorm, a 32 -> 64 -> 32 GELU MLP, residual Add),
mean pooling over the particles (``x.mean(dim=1, keepdim=True)``: exact, frontends/pooling.py), a
5-class Linear head and softmax; the MLP's activation is ``F.gelu`` (the DAG Activation kernel's
table / interpolation).  Weights are random (seeded): the
benchmark measures mapping and timing, not tagging accuracy.

Every number printed comes from this run: ``estimate()`` (the documented model, docs/performance.md;
the matmul stage's constants are assumed, docs/attention.md), ``predict`` against PyTorch float,
``verify`` on x86 against ``predict``, and PyTorch on this machine's CPU.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time

import numpy as np
import torch
from torch import nn

import aieflow

PARTICLES, FEATURES, EMBED, HEADS, CLASSES, BLOCKS = 16, 16, 32, 2, 5, 2
BATCH = 8  # the config default (per graph iteration); the int8 designs on AIE-MLv2 take 16 (see run)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(EMBED, EMBED) for _ in range(4))

    def forward(self, x):
        t, dh = x.shape[1], EMBED // HEADS
        q, k, v = (f(x).view(-1, t, HEADS, dh).transpose(1, 2) for f in (self.q, self.k, self.v))
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), dim=-1)
        return self.o((a @ v).transpose(1, 2).reshape(-1, t, EMBED))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(EMBED), nn.LayerNorm(EMBED)
        self.att = Attention()
        self.fc1, self.fc2 = nn.Linear(EMBED, 2 * EMBED), nn.Linear(2 * EMBED, EMBED)

    def forward(self, x):
        x = x + self.att(self.ln1(x))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class JetTagger(nn.Module):
    def __init__(self, blocks: int = BLOCKS):
        super().__init__()
        self.embed = nn.Linear(FEATURES, EMBED)
        self.blocks = nn.Sequential(*[Block() for _ in range(blocks)])
        self.head = nn.Linear(EMBED, CLASSES)

    def forward(self, x):
        x = self.blocks(torch.relu(self.embed(x)))
        pooled = x.mean(dim=1, keepdim=True)  # [N, 1, 32]
        return torch.softmax(self.head(pooled), dim=-1)  # [N, 1, 5]


class ViT(nn.Module):
    def __init__(self, image=(3, 16, 16), classes=10):
        super().__init__()
        tokens = (image[1] // 4) * (image[2] // 4) + 1
        self.patch = nn.Conv2d(image[0], EMBED, 4, stride=4)
        self.cls = nn.Parameter(torch.randn(1, 1, EMBED) * 0.5)
        self.pos = nn.Parameter(torch.randn(1, tokens, EMBED) * 0.5)
        self.enc = nn.TransformerEncoderLayer(EMBED, HEADS, 2 * EMBED, dropout=0.0, batch_first=True, norm_first=True,
                                              activation="gelu")
        self.norm, self.head = nn.LayerNorm(EMBED), nn.Linear(EMBED, classes)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], dim=1)
        return self.head(self.norm(self.enc(t + self.pos)[:, 0]))


class MaskedTagger(nn.Module):
    """``--model tagger-masked``: variable particle counts, the padding a run-time key padding mask
    (forward(x, mask), docs/attention.md "Run-time key padding masks"): a ReLU embedding to 32, two
    pre-norm ``nn.TransformerEncoderLayer`` blocks (2 heads, GELU MLP 64) in an ``nn.TransformerEncoder``
    reading ``src_key_padding_mask``, the first particle's token pooled (never padded), a 5-class head."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(FEATURES, EMBED)
        layer = nn.TransformerEncoderLayer(EMBED, HEADS, 2 * EMBED, dropout=0.0, batch_first=True, norm_first=True,
                                           activation="gelu")
        self.enc = nn.TransformerEncoder(layer, BLOCKS, enable_nested_tensor=False)
        self.head = nn.Linear(EMBED, CLASSES)

    def forward(self, x, mask):
        return self.head(self.enc(torch.relu(self.embed(x)), src_key_padding_mask=mask)[:, 0])


SHAPES = {"tagger": (PARTICLES, FEATURES), "tagger-masked": (PARTICLES, FEATURES), "vit": (3, 16, 16),
          "vit-12x20": (3, 12, 20)}
WHICH = ["tagger"]


def model(which: str = "tagger", blocks: int = BLOCKS) -> nn.Module:
    """``blocks``: the tagger's encoder blocks (tests/test_attention_tagger.py builds one and two:
    one keeps every op kind with half the kernels to build on x86)."""
    WHICH[0] = which
    torch.manual_seed(0)
    if which == "tagger":
        return JetTagger(blocks).eval()
    if which == "tagger-masked":
        return MaskedTagger().eval()
    return ViT(SHAPES[which], 10 if which == "vit" else 8).eval()


def data(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, *SHAPES[WHICH[0]])).astype(np.float32)


def padding(n: int, seed: int = 1) -> np.ndarray | None:
    """``tagger-masked``: seeded particle counts 1..16 per sample (True = padded), else None."""
    if WHICH[0] != "tagger-masked":
        return None
    k = np.random.default_rng(seed).integers(1, PARTICLES + 1, n)
    return np.arange(PARTICLES)[None, :] >= k[:, None]


def forward(m: nn.Module, x: np.ndarray, pad: np.ndarray | None) -> np.ndarray:
    if pad is None:
        with torch.no_grad():
            return m(torch.from_numpy(x)).numpy()
    with torch.enable_grad():  # PyTorch's documented (autograd) forward, no nested-tensor fast path
        return m(torch.from_numpy(x), torch.from_numpy(pad)).detach().numpy()


def torch_timing(m: nn.Module, batch: int, threads: int | None, repeats: int) -> float:
    """Median wall time of one forward pass (seconds) at ``batch``, under ``torch.no_grad``."""
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        x = torch.from_numpy(data(batch, seed=1))
        pad = padding(batch)
        args = (x,) if pad is None else (x, torch.from_numpy(pad))  # tagger-masked: PyTorch's fast path may run
        with torch.no_grad():
            for _ in range(3):
                m(*args)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                m(*args)
                times.append(time.perf_counter() - t0)
        return statistics.median(times)
    finally:
        torch.set_num_threads(old)


def run(device: str, precision: str, verify_samples: int, m: nn.Module, x: np.ndarray) -> dict:
    t0 = time.perf_counter()
    # no batch in the config: compile takes 8 (BATCH) where the memory-tile tilers can cut it, else
    # its first doubling (AIE-MLv2's 8x8x8 int8 mmul needs 16 rows: the pooled head's 1 row per sample)
    pad = padding(x.shape[0])
    d = aieflow.compile(m, device=device, example_input=x[:1], calibration=x if pad is None else (x, pad),
                        config={"precision": precision})
    compile_s = time.perf_counter() - t0
    ref = forward(m, x[:64], None if pad is None else pad[:64])
    y = d.predict(x[:64]) if pad is None else d.predict(x[:64], mask=pad[:64])
    err = float(np.abs(y - ref).max())
    agree = float(np.mean(y.argmax(-1) == ref.argmax(-1)))
    e = d.estimate()
    verdict = "not run (--verify)"
    if verify_samples:
        v = d.verify(samples=verify_samples)
        verdict = f"{v.values:,} values bit-exact" if v.ok else f"MISMATCH ({v.mismatches})"
    kinds: dict[str, list[float]] = {}
    for s in e.stages:
        kind = d.plan.node(s.name).op if s.kind == "kernel" else s.kind
        kinds.setdefault(kind, []).append(s.occupancy_ns)
    words = sum(len(k.word_problems()) for k in d.plan.links)
    return {"device": device, "precision": precision, "design": d, "perf": e, "err": err, "agree": agree,
            "verify": verdict, "compile_s": compile_s, "kinds": kinds, "words": words}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(SHAPES), default="tagger")
    ap.add_argument("--verify-samples", type=int, default=4, help="samples verified on x86 (0: skip)")
    ap.add_argument("--configs", default="vek280:int8,vek280:int16,vek385:int8,vek385:int16,vek280:bf16,vek385:bf16")
    ap.add_argument("--verify", default="vek280:int8",
                    help="configs verified on x86 ('all', or a list; one build takes minutes on a 2-core machine)")
    ap.add_argument("--repeats", type=int, default=50, help="PyTorch timing repeats (median)")
    args = ap.parse_args()
    m = model(args.model)
    x = data(512)
    configs = args.configs.split(",")
    checked = set(configs) if args.verify == "all" else set(args.verify.split(","))
    rows = [run(*c.split(":"), args.verify_samples if c in checked else 0, m, x) for c in configs]

    print("| device | precision | compute tiles | memory tiles | latency | batch | interval per batch | samples / s | "
          "bound (stage) | max err vs PyTorch | argmax agrees | x86 verify | sub-word DMA patterns |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: |")
    for r in rows:
        e = r["perf"]
        print(f"| {r['device']} | {r['precision']} | {e.tiles_used} | {e.memory_tiles_used} | "
              f"{e.latency_ns / 1e3:,.1f} us | {e.batch} | {e.interval_ns / 1e3:,.2f} us | {e.batch / (e.interval_ns * 1e-9):,.0f} | "
              f"{e.bound} ({e.bottleneck}) | {r['err']:.4f} | {r['agree']:.0%} | {r['verify']} | {r['words']} |")

    print("\nPer-stage breakdown (occupancy per batch (the table's batch), each stage's kind: count, slowest, sum):\n")
    kinds = sorted({k for r in rows for k in r["kinds"]})
    print("| stage kind | " + " | ".join(f"{r['device']} {r['precision']}" for r in rows) + " |")
    print("| --- |" + " ---: |" * len(rows))
    for k in kinds:
        cells = []
        for r in rows:
            v = r["kinds"].get(k)
            cells.append(f"{len(v)}: {max(v) / 1e3:,.2f} / {sum(v) / 1e3:,.2f} us" if v else "-")
        print(f"| {k} | " + " | ".join(cells) + " |")

    print("\nPyTorch CPU (float32, torch.no_grad, median of "
          f"{args.repeats}; {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs):\n")
    print("| threads | batch 1 | batch 1,024 | samples / s at 1,024 |")
    print("| --- | ---: | ---: | ---: |")
    for threads, label in ((1, "1 (torch.set_num_threads(1))"), (None, f"default ({torch.get_num_threads()})")):
        t1 = torch_timing(m, 1, threads, args.repeats)
        tk = torch_timing(m, 1024, threads, max(5, args.repeats // 10))
        print(f"| {label} | {t1 * 1e6:,.0f} us | {tk * 1e3:,.2f} ms | {1024 / tk:,.0f} |")
    print("\n(compile " + ", ".join(f"{r['compile_s']:.1f} s" for r in rows) + f"; torch {torch.__version__})")


if __name__ == "__main__":
    main()
