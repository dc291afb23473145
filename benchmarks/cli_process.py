"""Whole-process compile times (issue 17, "Benchmarks"): ``aieflow compile`` from a model file to a
project on disk, timed as a user waits for it (a fresh process, wall clock, like ``/usr/bin/time``),
next to the peers' own pipelines run the same way.

    python benchmarks/cli_process.py [--runs 7] [--search-runs 1] [--no-aie4ml] [--no-hls4ml]

a. The 7x512 int8 QDQ MLP (``model_zoo.qdq_mlp([512] * 8)``) for VEK280: ``aieflow compile`` vs
   AIE4ML's own pipeline on the same weights, ``aie4ml.from_onnx(...)`` (ONNX import) then
   ``.write()`` (its passes, then writing its project); that stops before ``build()``, which runs
   ``make`` (Vitis).  AIE4ML installs from PyPI (``aie4ml[onnx]``) into its own virtual
   environment, made by this script under the cache directory when missing; if that fails its
   column is skipped with the reason.  It is given the same weights and int8 QDQ quantisation as a
   Gemm-form ONNX model (its importer's documented form; aieflow gets ``MatMul`` + ``Add``) with a
   static batch of 8 (its importer refuses dynamic shapes; 8 is the batch aieflow picks), and
   ``Part: xilinx_vek280_base``.  Two configurations: its default (``Optimize: resource``, a design
   search over the parallelism of every layer), and the parallelism that search chose pinned per
   layer (``LayerDirectives``), so that the search has one candidate and the rest of the pipeline
   is timed alone.
b. The top-tagging GRU of ``benchmarks/recurrent.py`` (20 steps of 6 inputs, GRU 20, Dense 64 + ReLU,
   Dense 1) at hls4ml's default types on VEK280 (int16): ``aieflow compile`` of its ONNX export
   (``--config`` with those types, ``--calibration``, ``--input``) vs hls4ml 1.x convert + write +
   compile (``recurrent.hls4ml_model``: ``convert_from_pytorch_model``, ``write``, the g++ build of
   its C simulation) of the PyTorch module with the same weights, run as a Python script.
c. ``aieflow compile`` of each composition the CLI compiles: an MLP with a softmax head, a Conv +
   BatchNorm classifier, a residual CNN and a GRU with a sigmoid head (ONNX exports).

Every command runs once untimed first (bytecode and template caches written, files in the page
cache: a user's second run), then ``--runs`` times, the contenders of a table interleaved
(A B A B ...), each into a fresh output directory; the median wall time is reported, with the
median CPU time (user + sys, children included) beside it.  Ratios are of medians from one run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
BENCH = ROOT / "benchmarks"
MLP_BATCH = 8  # the batch aieflow picks for the 7x512 MLP; AIE4ML's importer wants a static one

AIE4ML_DRIVER = """\
import json, sys
import aie4ml
model, out, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
aie4ml.from_onnx(model, config, output_dir=out).write()  # import, passes, project; no build()
"""

HLS4ML_DRIVER = """\
import sys
sys.path.insert(0, {bench!r})
import torch
from recurrent import Net, hls4ml_model
net = Net("GRU", 6, 20, (64,), 1)
net.load_state_dict(torch.load(sys.argv[1]))
hls4ml_model(net.eval(), 20, 6, sys.argv[2])  # convert, write, compile (g++)
"""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "aieflow-bench"


def child_env() -> dict[str, str]:
    """This environment with aieflow from this checkout, and bytecode written as an installed
    package has it (``PYTHONDONTWRITEBYTECODE`` would make every run compile every module)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    return env


def aieflow_command() -> list[str]:
    script = Path(sys.executable).parent / "aieflow"  # the console script pip installs
    return [str(script)] if script.is_file() else [sys.executable, "-m", "aieflow.cli"]


# ----------------------------------------------------------------------------- timing


@dataclass
class Contender:
    name: str
    command: list[str]  # "{out}" is replaced by a fresh output directory
    cwd: Path
    env: dict[str, str] | None = None
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    def run(self, out: Path, timed: bool = True) -> None:
        shutil.rmtree(out, ignore_errors=True)
        cmd = [c.replace("{out}", str(out)) for c in self.command]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=self.cwd, env=self.env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.name} failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-2000:]}"
                               f"\n{proc.stderr[-4000:]}")
        if timed:
            self.walls.append(wall)
            self.cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        shutil.rmtree(out, ignore_errors=True)

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpus)


def race(contenders: list[Contender], runs: int, scratch: Path) -> None:
    """One untimed warm-up each, then ``runs`` rounds, the contenders in turn in every round."""
    for c in contenders:
        c.run(scratch / "out", timed=False)
    for _ in range(runs):
        for c in contenders:
            c.run(scratch / "out")
            print(f"  {c.name}: {c.walls[-1]:.2f} s", file=sys.stderr, flush=True)


def times(c: Contender) -> str:
    return ", ".join(f"{w:.2f}" for w in c.walls)


# ----------------------------------------------------------------------------- models


def gemm_form(model, batch: int):
    """The QDQ MLP with every ``MatMul`` + bias ``Add`` as one ``Gemm`` (same initializers, same
    QuantizeLinear / DequantizeLinear nodes) and a static batch."""
    import onnx
    from onnx import helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = list(m.graph.node)
    add_of = {n.input[0]: n for n in nodes if n.op_type == "Add"}
    fused, out = set(), []
    for n in nodes:
        if n.op_type == "MatMul" and n.output[0] in add_of:
            add = add_of[n.output[0]]
            fused.add(add.name)
            out.append(helper.make_node("Gemm", [n.input[0], n.input[1], add.input[1]], [add.output[0]], name=n.name))
        elif n.name not in fused:
            out.append(n)
    del m.graph.node[:]
    m.graph.node.extend(out)
    for vi in (*m.graph.input, *m.graph.output):
        dim = vi.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_param")
        dim.dim_value = batch
    onnx.checker.check_model(m)
    return m


def export_onnx(model, x: np.ndarray, path: Path) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = io.BytesIO()
        torch.onnx.export(model.eval(), (torch.from_numpy(x[:1]),), f, dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    path.write_bytes(f.getvalue())


def onnx_layer_names(path: Path, ops: tuple[str, ...]) -> list[str]:
    import onnx

    return [n.name for n in onnx.load(str(path)).graph.node if n.op_type in ops]


@dataclass
class Case:
    name: str
    args: list[str]  # after "aieflow compile": the model file and its options
    what: str


def compositions(d: Path) -> list[Case]:
    """The composition models of the tests (test_activation, test_frontend_parity, test_cnn_residual),
    exported to ONNX with calibration and example inputs as .npy files."""
    import torch
    from torch import nn

    from aieflow import model_zoo

    cases = []

    def case(name: str, model, x: np.ndarray, example: int, config: dict | None, what: str) -> None:
        export_onnx(model, x, d / f"{name}.onnx")
        np.save(d / f"{name}_cal.npy", x)
        np.save(d / f"{name}_in.npy", x[:example])
        args = [f"{name}.onnx", "--calibration", f"{name}_cal.npy", "--input", f"{name}_in.npy"]
        if config:
            (d / f"{name}.json").write_text(json.dumps(config))
            args += ["--config", f"{name}.json"]
        cases.append(Case(name, args, what))

    torch.manual_seed(9)
    mlp = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 5), nn.Softmax(dim=-1))
    x = (np.random.default_rng(9).standard_normal((256, 16)) * 2).astype(np.float32)
    case("mlp_softmax", mlp, x, 8, None, "MLP 16-64-32-5 + softmax head (int8)")

    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8, eps=1e-3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(8 * 7 * 7, 10))
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():  # non-trivial BatchNorm statistics, as tests/test_frontend_parity.py
        bn = cnn[1]
        bn.weight.copy_(torch.rand(8, generator=g) + 0.5)
        bn.bias.copy_(torch.rand(8, generator=g) - 0.5)
        bn.running_mean.copy_(torch.rand(8, generator=g) - 0.5)
        bn.running_var.copy_(torch.rand(8, generator=g) * 1.5 + 0.05)
    x = np.random.default_rng(1).random((16, 1, 16, 16), dtype=np.float32)
    case("conv_bn", cnn, x, 2, {"precision": "int8"}, "Conv 3x3 + BatchNorm + ReLU + MaxPool, Dense 392-10 (int8)")

    x = np.random.default_rng(1).standard_normal((64, 3, 8, 8)).astype(np.float32)
    case("residual_cnn", model_zoo.residual_cnn(relu_after_add=True), x, 1, None,
         "two convolutions with a skip Add (+ ReLU), global average pooling, Dense 8-4 (int8)")

    class GruSigmoid(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru, self.fc = nn.GRU(6, 16, batch_first=True), nn.Linear(16, 1)

        def forward(self, x):
            _, h = self.gru(x)
            return torch.sigmoid(self.fc(h[-1]))

    torch.manual_seed(10)
    x = np.random.default_rng(10).standard_normal((64, 10, 6)).astype(np.float32)
    case("gru_sigmoid", GruSigmoid(), x, 8, {"precision": "int8"}, "GRU 6-16 over 10 steps, Dense 16-1 + sigmoid (int8)")
    return cases


# ----------------------------------------------------------------------------- peers


def aie4ml_python(log) -> tuple[Path | None, str]:
    """The AIE4ML environment's interpreter (installed when missing) and its version, or None and why."""
    venv = cache_dir() / "aie4ml-venv"
    py = venv / "bin" / "python"
    check = [str(py), "-c", "import aie4ml, onnx; print(aie4ml.__version__)"]
    ok = py.is_file() and subprocess.run(check, capture_output=True).returncode == 0
    if not ok:
        log(f"installing aie4ml[onnx] from PyPI into {venv} ...")
        try:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, capture_output=True)
            subprocess.run([str(py), "-m", "pip", "install", "-q", "aie4ml[onnx]"], check=True, capture_output=True,
                           text=True, timeout=1800)
        except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            detail = getattr(e, "stderr", None) or str(e)
            return None, f"AIE4ML could not be installed ({type(e).__name__}): {str(detail).strip()[-300:]}"
    out = subprocess.run(check, capture_output=True, text=True)
    if out.returncode != 0:
        return None, f"AIE4ML does not import: {out.stderr.strip()[-300:]}"
    return py, out.stdout.strip()


def hls4ml_version() -> str | None:
    try:
        import hls4ml
    except ImportError:
        return None
    return hls4ml.__version__ if shutil.which("g++") else None


# ----------------------------------------------------------------------------- main


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}, "
            f"load average {os.getloadavg()[0]:.2f} at the start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="timed runs of every command (default 7)")
    ap.add_argument("--search-runs", type=int, default=1,
                    help="timed runs of AIE4ML's default pipeline with its design search (about a minute each)")
    ap.add_argument("--no-aie4ml", action="store_true")
    ap.add_argument("--no-hls4ml", action="store_true")
    args = ap.parse_args()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    import onnx

    sys.path.insert(0, str(BENCH))
    import recurrent

    from aieflow import model_zoo

    env = child_env()
    aieflow_cli = aieflow_command()
    started = machine()
    lines = [f"Machine: {started}. aieflow runs as `{' '.join(Path(a).name for a in aieflow_cli)}`; "
             f"{args.runs} timed runs per command after one untimed run, contenders interleaved, median wall time "
             "(CPU = user + sys of the process and its children)."]
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aieflow-cli-bench-") as tmp:
        d = Path(tmp)

        # ---- a. the 7x512 MLP vs AIE4ML
        log("a. 7x512 int8 MLP for VEK280")
        mlp = model_zoo.qdq_mlp([512] * 8)
        onnx.save(mlp, d / "mlp.onnx")
        onnx.save(gemm_form(mlp, MLP_BATCH), d / "mlp_gemm.onnx")
        ours = Contender("aieflow compile", [*aieflow_cli, "compile", "mlp.onnx", "--device", "vek280", "--out", "{out}",
                                             "--quiet"], d, env)
        peers, note = [], ""
        py, version = (None, "skipped (--no-aie4ml)") if args.no_aie4ml else aie4ml_python(log)
        if py is not None:
            (d / "aie4ml_driver.py").write_text(AIE4ML_DRIVER)
            base = {"Part": "xilinx_vek280_base", "AIEConfig": {"Iterations": 1}}
            search = Contender(f"AIE4ML {version}, default (design search)",
                               [str(py), "aie4ml_driver.py", "mlp_gemm.onnx", "{out}", json.dumps(base)], d, None)
            log("  AIE4ML's default pipeline once (untimed), for the parallelism its search chooses ...")
            probe = d / "probe"
            shutil.rmtree(probe, ignore_errors=True)
            subprocess.run(search.command[:3] + [str(probe), json.dumps(base)], cwd=d, check=True, capture_output=True)
            chosen = json.loads((probe / "aie_pipeline.json").read_text())["optimizer"]["parallelism"]
            shutil.rmtree(probe, ignore_errors=True)
            pinned_cfg = {**base, "LayerDirectives": {k.removesuffix("_aie"): {"parallelism": v} for k, v in chosen.items()}}
            pinned = Contender(f"AIE4ML {version}, its search's parallelism pinned",
                               [str(py), "aie4ml_driver.py", "mlp_gemm.onnx", "{out}", json.dumps(pinned_cfg)], d, None)
            race([ours, pinned], args.runs, d)
            for _ in range(args.search_runs):  # about a minute each; the probe above was its warm-up
                search.run(d / "out")
                log(f"  {search.name}: {search.walls[-1]:.2f} s")
            peers = [pinned] + ([search] if search.walls else [])
            par = sorted({(v["cas_num"], v["cas_length"], v.get("contract")) for v in chosen.values()})
            note = (f"AIE4ML is given `mlp_gemm.onnx` (the same int8 weights and QDQ nodes, `Gemm` instead of `MatMul` "
                    f"+ `Add`, batch {MLP_BATCH}) and `Part: xilinx_vek280_base`; its search chose cas_num x cas_length "
                    f"{', '.join(f'{a} x {b} ({c})' for a, b, c in par)} per layer, which the pinned configuration "
                    "gives it as `LayerDirectives`.")
        else:
            race([ours], args.runs, d)
            note = f"AIE4ML column skipped: {version}"
        lines += ["", "a. 7x512 int8 QDQ MLP for VEK280, model file to project on disk:", "",
                  "| pipeline | median s | CPU s | runs s | vs aieflow |", "| --- | ---: | ---: | --- | ---: |",
                  f"| `aieflow compile mlp.onnx --device vek280` | {ours.wall:.2f} | {ours.cpu:.2f} | {times(ours)} | 1 |"]
        for p in peers:
            lines.append(f"| {p.name} | {p.wall:.2f} | {p.cpu:.2f} | {times(p)} | {p.wall / ours.wall:.1f}x |")
        lines += ["", note]

        # ---- b. GRU tagger vs hls4ml
        log("b. top-tagging GRU, int16 for VEK280")
        import torch

        torch.manual_seed(sum(map(ord, "top tagging" + "GRU")))
        net = recurrent.Net("GRU", 6, 20, (64,), 1).eval()
        x = np.random.default_rng(1).standard_normal((200, 20, 6)).astype(np.float32)
        export_onnx(net, x, d / "gru.onnx")
        torch.save(net.state_dict(), d / "gru.pt")
        np.save(d / "gru_cal.npy", x)
        np.save(d / "gru_in.npy", x[:4])
        cfg = recurrent.aieflow_int16_config(net)
        names = dict(zip(("rnn", *[n for n in net.names if n.startswith("fc")]),
                         onnx_layer_names(d / "gru.onnx", ("GRU", "Gemm", "MatMul")), strict=True))
        cfg["layers"] = {names[k]: v for k, v in cfg["layers"].items()}  # the ONNX export's layer names
        (d / "gru.json").write_text(json.dumps(cfg))
        ours = Contender("aieflow compile", [*aieflow_cli, "compile", "gru.onnx", "--device", "vek280", "--config",
                                             "gru.json", "--calibration", "gru_cal.npy", "--input", "gru_in.npy",
                                             "--out", "{out}", "--quiet"], d, env)
        hls = None if args.no_hls4ml else hls4ml_version()
        if hls:
            (d / "hls4ml_driver.py").write_text(HLS4ML_DRIVER.format(bench=str(BENCH)))
            peer = Contender(f"hls4ml {hls} convert + write + compile", [sys.executable, "hls4ml_driver.py", "gru.pt",
                                                                           "{out}"], d, env)
            race([ours, peer], args.runs, d)
        else:
            race([ours], args.runs, d)
        lines += ["", "b. Top-tagging GRU (20 x 6 -> GRU 20 -> Dense 64 + ReLU -> Dense 1), hls4ml's default types "
                  "(int16) on VEK280, model file to project on disk:", "",
                  "| pipeline | median s | CPU s | runs s | vs aieflow |", "| --- | ---: | ---: | --- | ---: |",
                  f"| `aieflow compile gru.onnx --device vek280 --config ...` | {ours.wall:.2f} | {ours.cpu:.2f} | "
                  f"{times(ours)} | 1 |"]
        if hls:
            lines.append(f"| {peer.name} (PyTorch module, `io_parallel`) | {peer.wall:.2f} | {peer.cpu:.2f} | "
                         f"{times(peer)} | {peer.wall / ours.wall:.1f}x |")
        else:
            lines += ["", "hls4ml column skipped: hls4ml or g++ is not installed (or --no-hls4ml)."]

        # ---- c. compositions
        log("c. compositions")
        cases = compositions(d)
        contenders = [Contender(c.name, [*aieflow_cli, "compile", *c.args, "--device", "vek280", "--out", "{out}",
                                         "--quiet"], d, env) for c in cases]
        race(contenders, args.runs, d)
        lines += ["", "c. `aieflow compile` of each composition (ONNX export, VEK280), model file to project on disk:", "",
                  "| model | median s | CPU s | runs s |", "| --- | ---: | ---: | --- |"]
        for c, k in zip(cases, contenders, strict=True):
            lines.append(f"| {c.what} | {k.wall:.2f} | {k.cpu:.2f} | {times(k)} |")
    lines += ["", f"Load average {os.getloadavg()[0]:.2f} at the end; the whole benchmark took "
                  f"{time.perf_counter() - t_start:.0f} s."]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
