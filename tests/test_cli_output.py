"""What the command line and the library say, and where (issue 23, item 1): -v / -q on every
command (before or after it), the ``aieflow`` loggers' stage messages for every design kind,
progress bars on a terminal only, and a Python API that prints nothing."""

from __future__ import annotations

import json
import logging
import os
import pty
import re
import select
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest

import aieflow
from aieflow.cli import build_parser, main
from aieflow.model_zoo import cnn_classifier, gru_classifier, qdq_mlp, residual_mlp


@pytest.fixture
def mlp(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(qdq_mlp([20, 16, 5], seed=0), path)
    return path


def _compile(capsys, mlp, tmp_path, *flags, before=()):
    code = main([*before, "compile", str(mlp), "--out", str(tmp_path / "d"), "--force", *flags])
    out, err = capsys.readouterr()
    return code, out, err


def test_default_prints_the_summary_and_no_log(capsys, mlp, tmp_path):
    code, out, err = _compile(capsys, mlp, tmp_path)
    assert code == 0 and "compute tiles" in out and out.rstrip().splitlines()[-1].startswith("wrote ")
    assert err == ""  # stderr is not a terminal here: no bars; warnings only, and there are none


def test_v_logs_info_and_vv_debug_to_stderr(capsys, mlp, tmp_path):
    code, out, err = _compile(capsys, mlp, tmp_path, "-v")
    assert code == 0 and "compute tiles" in out
    assert "compiled as a chain design" in err and "compiled a chain design in" in err
    assert "plan fc0:" not in err  # debug
    for before, after in (((), ("-vv",)), (("-vv",), ()), (("-v",), ("-v",))):  # both orders, and summed
        code, out, err = _compile(capsys, mlp, tmp_path, *after, before=before)
        assert code == 0
        for stage in ("import", "fuse", "quantise", "plan", "place", "emit"):
            assert re.search(rf"compile( \(chain\))?: {stage} done in", err), (before, after, err)
        assert "plan fc0: cas_len" in err and "aieflow.pipeline" in err
    assert "compiled" not in out  # the log goes to stderr only


def test_q_prints_only_the_result(capsys, mlp, tmp_path):
    outs = set()
    for before, after in (((), ("-q",)), (("-q",), ()), ((), ("--quiet",)), (("--quiet",), ())):
        code, out, err = _compile(capsys, mlp, tmp_path, *after, before=before)
        assert code == 0 and err == ""
        assert out.count("\n") == 1 and out.startswith(f"wrote {tmp_path / 'd'}/design.json")
        outs.add(out)
    assert len(outs) == 1
    code, out, err = _compile(capsys, mlp, tmp_path, "-q", "--batch", "0")
    assert code == 2 and out == "" and err.startswith("error: batch must be a positive integer")


def test_q_and_v_together_are_refused(capsys, mlp, tmp_path):
    code, out, err = _compile(capsys, mlp, tmp_path, "-v", before=("-q",))
    assert code == 2 and out == "" and "-q (--quiet) and -v (--verbose)" in err
    assert not (tmp_path / "d").exists()


def test_every_command_takes_v_and_q():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        flags = {o for a in p._actions for o in a.option_strings}
        assert {"-v", "--verbose", "-q", "--quiet"} <= flags, name
    args = parser.parse_args(["-vv", "devices", "-v"])
    assert (args.global_verbose, args.verbose) == (2, 1)


def test_q_hides_warnings_and_keeps_the_verdict(capsys, mlp, tmp_path):
    out_dir = tmp_path / "d"
    assert main(["compile", str(mlp), "--out", str(out_dir), "-q"]) == 0
    capsys.readouterr()
    assert main(["verify", str(out_dir), "--samples", "20", "--no-check", "-v"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("verify: PASS") and out.count("\n") == 1
    assert "warning: integrity check skipped (--no-check)" in err
    assert "running the x86 harness" in err and "x86 harness ran in" in err
    assert "building the x86 harness" in err or "is built already" in err
    assert main(["verify", str(out_dir), "--samples", "20", "--no-check", "-q"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("verify: PASS") and out.count("\n") == 1 and err == ""
    assert main(["-q", "predict", str(out_dir), "--input", str(_x(tmp_path)), "--output", str(tmp_path / "y.npy")]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("predicted 7 samples") and err == ""


def _x(tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((7, 20)).astype(np.float32))
    return tmp_path / "x.npy"


# ------------------------------------------------------------------------------ the library


def test_the_api_is_silent_and_the_progress_callback_still_works(capsys, caplog):
    steps = []
    d = aieflow.compile(qdq_mlp([20, 16, 5], seed=0), device="vek280", progress=steps.append)
    assert steps == ["import", "fuse", "quantise", "search", "plan", "pack", "place", "check", "emit"]
    assert d.files and capsys.readouterr() == ("", "")
    assert not [r for r in caplog.records if r.name.startswith("aieflow") and r.levelno >= logging.INFO]


X16 = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
IMG = np.random.default_rng(0).uniform(-1, 1, (2, 3, 32, 32)).astype(np.float32)
SEQ = np.random.default_rng(0).standard_normal((4, 5, 4)).astype(np.float32)
KINDS = {
    "chain": (lambda: qdq_mlp([20, 16, 5], seed=0), {}, ["import", "fuse", "quantise", "search", "plan", "pack", "place", "check", "emit"]),
    "dag": (residual_mlp, {"example_input": X16[:1], "calibration": X16, "config": {"precision": "int8"}},
            ["import", "fuse", "quantise", "plan", "place", "check", "emit"]),
    "cnn": (cnn_classifier, {"example_input": IMG, "device": "vck190", "config": {"precision": "int8"}},
            ["import", "fuse", "quantise", "lower", "plan", "check", "emit"]),
    "recurrent": (gru_classifier, {"example_input": SEQ, "device": "vck190", "config": {"precision": "int16"}},
                  ["import", "fuse", "quantise", "plan", "emit"]),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_design_kind_logs_its_stages_at_debug_level(kind, caplog):
    make, kwargs, stages = KINDS[kind]
    steps = []
    with caplog.at_level(logging.DEBUG, logger="aieflow"):
        d = aieflow.compile(make(), progress=steps.append, **kwargs)
    assert steps == stages
    assert d.to_json()["kind"] == kind
    text = [r.getMessage() for r in caplog.records if r.name.startswith("aieflow")]
    done = [m.split(": ", 1)[1].split(" done in")[0] for m in text if m.startswith("compile") and " done in " in m]
    assert done == stages, text
    assert f"compile ({kind}): emit done in" in " ".join(text)  # named by kind once the front end has told it
    assert any(m.startswith(f"compiled a {kind} design in") for m in text)
    detail = {"chain": "plan fc", "dag": "dag plan: batch", "cnn": "cnn stream mapping:", "recurrent": "recurrent layer"}[kind]
    assert any(m.startswith(detail) for m in text), text


# ------------------------------------------------------------------------------ progress bars


def _on_a_terminal(args: list[str]) -> tuple[int, str, bytes]:
    """Run the CLI with stderr on a pseudo-terminal (stdout a pipe): exit code, stdout, stderr bytes."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    p = subprocess.Popen([sys.executable, "-m", "aieflow.cli", *args], stdout=subprocess.PIPE, stderr=slave,
                         env=env)
    os.close(slave)
    err = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            err += chunk
        elif p.poll() is not None:
            break
    out = p.stdout.read().decode()
    os.close(master)
    return p.wait(), out, err


def test_bars_on_a_terminal_and_not_with_q_or_a_pipe(mlp, tmp_path):
    args = ["explore", str(mlp), "--batch", "auto", "--target", "throughput", "--top", "2"]
    code, out, err = _on_a_terminal(args)
    assert code == 0 and out.startswith("the 2 best of")
    assert b"cost the candidate designs as compiled" in err and b"\x1b[" in err  # a rich bar, drawn and cleared
    code, out_q, err = _on_a_terminal([*args, "-q"])
    assert code == 0 and out_q == out and err == b""
    piped = subprocess.run([sys.executable, "-c", "import sys; from aieflow.cli import main\n"
                            f"code = main({[*args]!r})\n"
                            "print('RICH' if any(m.startswith('rich') for m in sys.modules) else 'NO-RICH', file=sys.stderr)\n"
                            "sys.exit(code)"], capture_output=True, text=True)
    assert piped.returncode == 0 and piped.stdout == out
    assert piped.stderr == "NO-RICH\n"  # no bar, and rich not even imported


def test_a_compile_bar_and_the_log_above_it(mlp, tmp_path):
    code, out, err = _on_a_terminal(["compile", str(mlp), "--out", str(tmp_path / "d"), "-v"])
    assert code == 0 and "wrote" in out
    text = err.decode(errors="replace")
    assert " compile " in text and "0/9" in text  # the bar: nine passes, check included (a quick compile may end before it redraws)
    assert "compiled a chain design in" in text  # the log, printed through the bar's console
    meta = json.loads((tmp_path / "d" / "design.json").read_text())
    assert meta["kind"] == "chain"


class _Bars:
    """Stands in for rich's Progress (``progress._start``): records each bar's description, total
    and advances."""

    def __init__(self):
        self.bars = {}

    def add_task(self, description, total=None):
        self.bars[len(self.bars)] = {"description": description, "total": total, "done": 0}
        return len(self.bars) - 1

    def advance(self, task_id, n=1):
        self.bars[task_id]["done"] += n

    def update(self, task_id, description=None, total=None):
        self.bars[task_id].update({"total": total, **({"description": description} if description else {})})

    def remove_task(self, task_id):
        self.bars[task_id]["removed"] = True


def test_verify_builds_and_runs_and_sweeps_advance_their_bars(monkeypatch, tmp_path):
    from aieflow import progress, sweep

    fake = _Bars()
    monkeypatch.setattr(progress, "_bars", True)  # as cli_output sets it on a terminal
    monkeypatch.setattr(progress, "_start", lambda: fake)
    monkeypatch.setattr(progress, "_stop", lambda: None)
    monkeypatch.setenv("AIEFLOW_CACHE_DIR", str(tmp_path / "cache"))  # a build of its own: the build bar runs
    d = aieflow.compile(qdq_mlp([20, 16, 5], seed=0), device="vek280")
    assert d.verify(samples=8).ok
    spec = tmp_path / "spec.yaml"
    spec.write_text("models:\n  mlp: {zoo: qdq_mlp, args: {widths: [16, 8]}}\ndevices: [vek280]\n"
                    "configs: {plain: {}}\ngrid: {batch: [8, 16, 32]}\n")
    assert sweep.run(spec, tmp_path / "s", workers=0).ran == 3
    bars = {b["description"]: b for b in fake.bars.values()}
    assert all(b.get("removed") for b in bars.values())
    build = next(b for name, b in bars.items() if name.startswith("build the") and name.endswith("x86 harness"))
    assert build["total"] >= 2 and build["done"] == build["total"]  # every unit, then the link
    assert any(name.startswith("run the") and name.endswith("x86 harness") for name in bars)
    assert bars["sweep"]["total"] == 3 and bars["sweep"]["done"] == 3
    compiles = [b for name, b in bars.items() if name.startswith("compile (")]
    assert compiles and all(b["done"] == b["total"] for b in compiles)
