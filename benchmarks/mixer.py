"""The AIE4ML evaluation workloads on VEK280 (or VEK385): compile, verify on x86, estimate.

    python benchmarks/mixer.py [--samples N] [--device vek280|vek385]

`dense-on-aie-ml.md` lists MLP-Mixer blocks as matrices: token mixing runs an MLP over the rows of
X reshaped to [B*C, T], channel mixing over [B*T, C]; with those rows as samples each workload is a
chain of linear layers (ReLU fused after each).  Every workload is an int8 QDQ model compiled with
``target: throughput`` and ``batch: auto`` (the search picks parallelism, batch and the number of
copies of the design), verified
bit-exact on x86 against the emulator, and estimated by the performance model.  Prints a markdown
table: tiles, batch, modelled interval per sample, TOPS and efficiency vs the tiles' peak.
"""

from __future__ import annotations

import argparse
import time

import aieflow
from aieflow.model_zoo import qdq_mlp

# name -> (rows the paper feeds, layer widths)
WORKLOADS = {
    "Token MLP S/16": (512, [196, 256, 196]),
    "Channel MLP S/16": (196, [512, 2048, 512]),
    "Token MLP L/16": (1024, [196, 512, 196]),
    "2-layer MLP": (256, [1024, 1024, 1024]),
    "7-layer MLP": (1, [512] * 8),
}


def run(name: str, rows: int, widths: list[int], samples: int, device: str = "vek280") -> dict:
    model = qdq_mlp(widths, seed=1, relu_last=True, name=name.replace(" ", "_").replace("/", "_"))
    t0 = time.perf_counter()
    d = aieflow.compile(model, device=device, config={"batch": "auto", "target": "throughput"})
    compile_s = time.perf_counter() - t0
    v = d.verify(samples=samples)
    perf = d.estimate()
    macs = sum(a * b for a, b in zip(widths, widths[1:], strict=False))
    peak = perf.tiles_used * d.device.generation.macs_per_cycle[("i8", "i8")] * 2 * d.device.clock_hz
    sample_ns = perf.interval_ns / (perf.batch * perf.replicas)
    return {
        "name": name,
        "layers": " -> ".join(map(str, widths)),
        "tiles": perf.tiles_used,
        "batch": perf.batch,
        "replicas": perf.replicas,
        "sample_ns": sample_ns,
        "workload_us": sample_ns * rows / 1e3,
        "tops": perf.throughput_ops_per_s / 1e12,
        "efficiency": perf.throughput_ops_per_s / peak,
        "bound": perf.bound,
        "verify": f"{v.values:,} values bit-exact" if v.ok else f"MISMATCH ({v.mismatches})",
        "compile_s": compile_s,
        "macs": macs,
    }


def real_mixer(tokens: int = 64, channels: int = 128, blocks: int = 2):
    """A real MLP-Mixer stack (Tolstikhin et al. 2021): LayerNorm, token MLP over [C, T] with
    transposes around it, residual add, LayerNorm, channel MLP over [T, C], residual add."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(channels), nn.LayerNorm(channels)
            self.t1, self.t2 = nn.Linear(tokens, tokens // 2), nn.Linear(tokens // 2, tokens)
            self.c1, self.c2 = nn.Linear(channels, 4 * channels), nn.Linear(4 * channels, channels)

        def forward(self, x):
            x = x + self.t2(torch.relu(self.t1(self.ln1(x).transpose(1, 2)))).transpose(1, 2)
            return x + self.c2(torch.relu(self.c1(self.ln2(x))))

    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(blocks)]).eval()


def run_real_mixer(samples: int = 64, verify_samples: int = 8, batch: int = 2) -> None:
    """The real Mixer: emulation error against PyTorch's float result for every precision, then,
    for the fixed-point ones, compile for VEK280 through the DAG path (aieflow.dag), verify the
    generated project on x86 against the emulator and report the modelled tiles / interval / TOPS."""
    import numpy as np
    import torch

    model = real_mixer()
    x = np.random.default_rng(0).standard_normal((samples, 64, 128)).astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    print("| precision | device | ops | max abs error vs PyTorch fp32 | of max abs output | AI Engine mapping |")
    print("| --- | --- | --- | ---: | ---: | --- |")
    mapped = []
    for precision, device in (("int8", "vek280"), ("int16", "vek280"), ("bf16", "vek280")):
        em = aieflow.emulate(model, device=device, example_input=x, config={"precision": precision}, calibration=x)
        err = float(np.abs(em.predict(x) - ref).max())
        ops = ", ".join(f"{sum(n.op == op for n in em.graph.nodes)} {op}"
                        for op in ("dense", "layernorm", "add", "transpose"))
        try:
            t0 = time.perf_counter()
            d = aieflow.compile(model, device=device, example_input=x[:1], calibration=x,
                                config={"precision": precision, "batch": batch})
            mapped.append((precision, d, time.perf_counter() - t0))
            status = "compiles (DAG path)"
        except aieflow.AieflowError as e:
            status = f"not yet (layer {getattr(e, 'layer', None)}: {type(e).__name__})"
        print(f"| {precision} | {device} | {ops} | {err:.4f} | {err / np.abs(ref).max():.2%} | {status} |")
    print("\n| precision | batch | compute tiles | memory tiles | interval / sample | latency | TOPS | of peak | "
          "bound (stage) | x86 verify |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for precision, d, _ in mapped:
        e = d.estimate()
        v = d.verify(samples=verify_samples)
        pair = d.plan.node(next(n for n in d.plan.compute if d.plan.node(n).op == "dense")).types.pair
        peak = e.tiles_used * d.device.generation.macs_per_cycle[pair] * 2 * d.device.clock_hz
        verdict = f"{v.values:,} values bit-exact" if v.ok else f"MISMATCH ({v.mismatches})"
        print(f"| {precision} | {e.batch} | {e.tiles_used} | {e.memory_tiles_used} | {e.sample_ns / 1e3:,.2f} us | "
              f"{e.latency_ns / 1e3:,.1f} us | {e.throughput_ops_per_s / 1e12:.3f} | "
              f"{e.throughput_ops_per_s / peak:.1%} | {e.bound} ({e.bottleneck}) | {verdict} |")
    print("\n(modelled on VEK280 at 1.25 GHz; verified on x86 with aieflow's shim, "
          f"{verify_samples} samples incl. edge values; compile " + ", ".join(f"{s:.1f} s" for _, _, s in mapped) + ")")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1000, help="samples verified on x86 per workload")
    ap.add_argument("--device", default="vek280", help="board of the workload table (vek280 or vek385)")
    ap.add_argument("--real-mixer", action="store_true",
                    help="only the real 2-block MLP-Mixer (LayerNorm, transposes, residual adds): "
                    "emulation error, DAG compile, x86 verify, estimate")
    args = ap.parse_args()
    if args.real_mixer:
        run_real_mixer()
        return
    out = [run(name, rows, widths, args.samples, args.device) for name, (rows, widths) in WORKLOADS.items()]
    dev = aieflow.devices.get_device(args.device)
    print("| workload | layers | tiles | copies | batch | interval / row | whole input | TOPS | of peak | bound | x86 verify |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for r, (rows, _) in zip(out, WORKLOADS.values(), strict=True):
        print(f"| {r['name']} | {r['layers']} | {r['tiles']} | {r['replicas']} | {r['batch']} | {r['sample_ns']:.2f} ns | "
              f"{r['workload_us']:.2f} us ({rows} rows) | {r['tops']:.1f} | {r['efficiency']:.1%} | {r['bound']} | {r['verify']} |")
    print(f"\n(modelled on {dev.board} at {dev.clock_hz / 1e9:g} GHz; verified with the x86 shim; compile "
          + ", ".join(f"{r['compile_s']:.1f} s" for r in out) + ")")


if __name__ == "__main__":
    main()
