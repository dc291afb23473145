"""``aieflow sweep`` (issue 23, item 4): every point a task on a local multi-process Dask cluster
gives the same table as the points run one by one in this process; a sweep stopped midway finishes
only the rest when run again; errors of a point are its result; the x86 build cache is shared."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import aieflow
from aieflow import sweep
from aieflow.cli import main
from aieflow.errors import AieflowError, ConfigError
from aieflow.model_zoo import qdq_mlp

# 2 devices x 3 configs x 3 batches x 3 cascade lengths = 54 points; cas_len 32 leaves the first
# layer's tiles without input features (16 of them): those 18 points are refused, and recorded
SPEC = """\
models:
  mlp: {zoo: qdq_mlp, args: {widths: [16, 32, 8]}}
devices: [vek280, vck190]
configs:
  plain: {}
  fast: {target: latency}
  two_copies: {replicas: 2}
grid:
  batch: [8, 16, 32]
  layers.fc0.parallelism.cas_len: [1, 2, 32]
"""
POINTS = 54


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


def comparable(rows):
    return [{k: v for k, v in r.items() if k not in sweep.TIMINGS} for r in rows]


def stored(out):
    """point key -> (mtime in ns, the run that wrote it) of the per-point result files."""
    return {p.stem: (p.stat().st_mtime_ns, json.loads(p.read_text())["run"]) for p in (out / "points").glob("*.json")}


def csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_54_point_sweep_on_two_dask_workers_equals_the_points_run_one_by_one(spec, tmp_path):
    serial = sweep.run(spec, tmp_path / "serial", workers=0)
    dask = sweep.run(spec, tmp_path / "dask", workers=2)
    assert len(serial.rows) == len(dask.rows) == POINTS and serial.ran == dask.ran == POINTS
    assert serial.count("ok") == 36 and serial.count("refused") == 18  # 18: cas_len 32
    assert comparable(dask.rows) == comparable(serial.rows)
    # the points ran in the cluster's two worker processes, not here
    workers = {json.loads(p.read_text())["worker"] for p in (tmp_path / "dask" / "points").glob("*.json")}
    assert len(workers) == 2 and not any(w.endswith(f":{os.getpid()}") for w in workers)
    # the tables on disk: the same apart from the timings; the Parquet table holds the CSV's rows
    a, b = csv_rows(tmp_path / "serial" / "results.csv"), csv_rows(tmp_path / "dask" / "results.csv")
    assert comparable(a) == comparable(b) and len(a) == POINTS
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(tmp_path / "dask" / "results.parquet").to_pylist()
    assert comparable(table) == comparable(dask.rows)
    # every model and device has its Pareto plot, an SVG document with a point per finished point
    for device in ("vek280", "vck190"):
        svg = ET.parse(tmp_path / "dask" / "pareto" / f"mlp-{device}.svg").getroot()
        circles = [c for c in svg.iter("{http://www.w3.org/2000/svg}circle") if "af-point" in c.get("class", "")]
        assert len(circles) == 2 * 18  # two panels, 18 finished points per device


def test_a_point_s_row_is_what_compile_gives(spec, tmp_path):
    rows = sweep.run(spec, tmp_path / "s", workers=0).rows
    model = qdq_mlp([16, 32, 8])
    # rows: device, config (plain, fast, two_copies), batch, cas_len, the last varying fastest
    for i in (0, 13, 19, 40):  # vek280 plain, fast (a latency target), two copies; vck190 fast
        r = rows[i]
        config = {"layers": {"fc0": {"parallelism": {"cas_len": r["grid.layers.fc0.parallelism.cas_len"]}}},
                  "batch": r["grid.batch"], **({"replicas": 2} if r["config"] == "two_copies" else {}),
                  **({"target": "latency"} if r["config"] == "fast" else {})}
        perf = aieflow.compile(model, device=r["device"], config=config).to_json()["performance"]
        assert r["status"] == "ok"
        assert (r["latency_ns"], r["interval_ns"], r["tiles_used"], r["batch"]) == (
            perf["latency_ns"], perf["interval_ns"], perf["tiles_used"], perf["batch"])
    refused = next(r for r in rows if r["status"] == "refused")
    with pytest.raises(AieflowError) as e:
        aieflow.compile(model, device=refused["device"], config={
            "batch": refused["grid.batch"], "layers": {"fc0": {"parallelism": {"cas_len": 32}}},
            **({"replicas": 2} if refused["config"] == "two_copies" else {})})
    assert refused["error"] == str(e.value)
    # the Pareto column: no finished point of the same device has at most every figure of a front point
    for r in rows:
        if r["pareto"]:
            same = [q for q in rows if q["status"] == "ok" and q["device"] == r["device"]]
            fig = lambda q: (q["tiles_used"], q["latency_ns"], q["sample_interval_ns"])  # noqa: E731
            assert not any(all(a <= b for a, b in zip(fig(q), fig(r), strict=True)) and fig(q) != fig(r) for q in same)


def test_a_sweep_stopped_midway_then_rerun_finishes_only_the_rest(spec, tmp_path):
    out = tmp_path / "s"
    arrived = []

    def stop_after_20(point, result):  # Ctrl-C while the cluster is busy with the others
        arrived.append(point.key)
        if len(arrived) == 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep.run(spec, out, workers=2, on_point=stop_after_20)
    first = stored(out)
    assert set(first) == set(arrived) and len(first) == 20
    table = csv_rows(out / "results.csv")  # written on the way out: the rest pending
    assert sum(r["status"] == "pending" for r in table) == POINTS - 20
    time.sleep(0.01)  # a rewritten file would get a later mtime

    again = sweep.run(spec, out, workers=2)
    assert (again.done_before, again.ran, again.pending) == (20, POINTS - 20, 0)
    second = stored(out)
    assert {k: second[k] for k in first} == first  # the 20 results untouched
    new_runs = {run for k, (_, run) in second.items() if k not in first}
    assert len(second) == POINTS and len(new_runs) == 1 and new_runs != {r for _, r in first.values()}
    # and the finished sweep equals one run in a single go
    whole = sweep.run(spec, tmp_path / "whole", workers=0)
    assert comparable(again.rows) == comparable(whole.rows)
    assert sweep.run(spec, out, workers=0).ran == 0  # nothing left


def test_the_cli_limit_runs_part_now_and_the_rest_later(spec, tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "0", "--limit", "10"]) == 0
    text = capsys.readouterr().out
    assert f"{POINTS} points ({POINTS} distinct): 0 done before, 10 run now" in text
    assert f"{POINTS - 10} pending" in text and "the Pareto points" in text
    assert len(stored(out)) == 10
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "0", "-q"]) == 0
    text = capsys.readouterr().out
    assert f"10 done before, {POINTS - 10} run now; 36 ok, 18 refused" in text and "Pareto points" not in text
    assert len(stored(out)) == POINTS


def test_killed_by_sigterm_and_rerun(tmp_path):
    # a real kill: the CLI in its own process, SIGTERM once two of six slow points have their
    # results (a throughput target searches the replica counts: about a second a point)
    spec = tmp_path / "slow.yaml"
    spec.write_text("models:\n  mlp: {zoo: qdq_mlp, args: {widths: [16, 32, 8]}}\ndevices: [vek280]\n"
                    "grid:\n  batch: [8, 16, 24, 32, 40, 48]\ntargets: [throughput]\n")
    out = tmp_path / "s"
    cmd = [sys.executable, "-m", "aieflow.cli", "sweep", str(spec), "--out", str(out), "--workers", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "points").is_dir() or len(list((out / "points").glob("*.json"))) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated" in err
    first = stored(out)
    assert 2 <= len(first) < 6
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"{len(first)} done before, {6 - len(first)} run now; 6 ok" in r.stdout
    second = stored(out)
    assert {k: second[k] for k in first} == first and len(second) == 6


@pytest.mark.skipif(shutil.which("g++") is None, reason="verify builds the x86 harness with g++")
def test_verify_points_share_one_x86_build(tmp_path):
    # two points whose designs generate the same C++ (a QDQ model carries its own types, so the
    # precision key changes nothing): on two workers at once, one builds and the other waits for it
    spec = tmp_path / "v.yaml"
    spec.write_text("models:\n  mlp: {zoo: qdq_mlp, args: {widths: [16, 32, 8]}}\ndevices: [vek280]\n"
                    "configs:\n  a: {}\n  b: {precision: int8}\nverify: {samples: 8}\n")
    cache = tmp_path / "cache"
    result = sweep.run(sweep.load_spec(spec, cache_dir=cache), tmp_path / "s", workers=2)
    assert [r["verify"] for r in result.rows] == ["pass", "pass"]
    assert sorted(r["verify_cached"] for r in result.rows) == [False, True]
    assert len([p for p in cache.iterdir() if (p / "harness").is_file()]) == 1  # the one build, in the given cache


def test_an_existing_scheduler_and_saved_designs(tmp_path):
    from dask.distributed import LocalCluster

    spec = tmp_path / "spec.yaml"
    spec.write_text("models:\n  mlp: {zoo: qdq_mlp, args: {widths: [16, 32, 8]}}\ndevices: [vek280, vck190]\n"
                    "save_designs: true\n")
    # a worker process of its own: the designs come back pickled
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        result = sweep.run(spec, tmp_path / "s", scheduler=cluster.scheduler_address)
    assert result.ran == 2 and result.count("ok") == 2
    workers = {json.loads(p.read_text())["worker"] for p in (tmp_path / "s" / "points").glob("*.json")}
    assert len(workers) == 1 and not workers.pop().endswith(f":{os.getpid()}")
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    for r in result.rows:  # the designs came back from the workers (pickled) and were saved
        d = aieflow.load(tmp_path / "s" / "designs" / r["point"])
        want = aieflow.compile(qdq_mlp([16, 32, 8]), device=r["device"])
        assert d.estimate().latency_ns == r["latency_ns"]
        np.testing.assert_array_equal(d.predict(x), want.predict(x))


def test_bad_specs_name_the_key_and_what_to_change(tmp_path, capsys):
    def refused(text, *args):
        spec = tmp_path / "bad.yaml"
        spec.write_text(text)
        code = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "0", *args])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err
        assert not (tmp_path / "o").exists()  # refused before anything was written
        return err

    model = "models:\n  m: {zoo: qdq_mlp, args: {widths: [8, 8]}}\n"
    err = refused(model + "devise: [vek280]\n")
    assert "unknown key(s) devise" in err and "did you mean 'devices'?" in err
    assert "devices: unknown device 'vek208'" in refused(model + "devices: [vek208]\n")
    assert "did you mean 'qdq_mlp'?" in refused("models:\n  m: {zoo: qdq_mpl}\n")
    err = refused(model + "configs:\n  c: {bacth: 8}\n")
    assert "configs.c" in err and "bacth" in err
    err = refused(model + "grid:\n  layers.fc0.parallelism.cas_len: [1, 0]\n")
    assert "layers.fc0.parallelism.cas_len = 0" in err and "positive integer" in err
    assert "models.m.file: " in refused("models:\n  m: missing.onnx\n")
    assert "verify.samples" in refused(model + "verify: {samples: 0}\n")
    assert "--workers and --scheduler" in refused(model, "--scheduler", "tcp://127.0.0.1:1")


def test_the_output_must_be_a_sweep_directory(spec, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not a sweep directory"):
        sweep.run(spec, other, workers=0)
    assert sorted(p.name for p in other.iterdir()) == ["keep.txt"]


def test_a_point_that_crashes_is_recorded_and_retried_on_request(tmp_path, monkeypatch):
    spec = tmp_path / "spec.yaml"
    spec.write_text("models:\n  mlp: {zoo: qdq_mlp, args: {widths: [16, 32, 8]}}\ndevices: [vek280, vck190]\n")
    import aieflow.api

    real = aieflow.api.compile

    def broken(model, device, **kw):
        if device == "vck190":
            raise RuntimeError("a bug")
        return real(model, device=device, **kw)

    monkeypatch.setattr(aieflow.api, "compile", broken)
    first = sweep.run(spec, tmp_path / "s", workers=0)
    assert [r["status"] for r in first.rows] == ["ok", "error"]
    assert first.rows[1]["error"] == "internal error: RuntimeError: a bug"
    assert "Traceback" in json.loads((tmp_path / "s" / "points" / f"{first.rows[1]['point']}.json").read_text())["traceback"]
    monkeypatch.setattr(aieflow.api, "compile", real)
    assert sweep.run(spec, tmp_path / "s", workers=0).ran == 0  # finished, even if in error
    retried = sweep.run(spec, tmp_path / "s", workers=0, retry_errors=True)
    assert retried.ran == 1 and [r["status"] for r in retried.rows] == ["ok", "ok"]


def test_the_key_is_the_point_s_contents_not_its_labels(tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text("models:\n  one: {zoo: qdq_mlp, args: {widths: [16, 8], seed: 1}}\n"
                 "configs:\n  x: {batch: 16, precision: int8}\n")
    b = tmp_path / "b.yaml"  # other labels, keys in another order: the same point
    b.write_text("configs:\n  y: {precision: int8, batch: 16}\n"
                 "models:\n  two: {zoo: qdq_mlp, args: {seed: 1, widths: [16, 8]}}\n")
    c = tmp_path / "c.yaml"  # another seed: another model
    c.write_text("models:\n  one: {zoo: qdq_mlp, args: {widths: [16, 8], seed: 2}}\n"
                 "configs:\n  x: {batch: 16, precision: int8}\n")
    (ka,), (kb,), (kc,) = ([p.key for p in sweep.load_spec(s).points] for s in (a, b, c))
    assert ka == kb != kc


def test_the_example_spec_is_a_valid_sweep_of_72_points():
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "sweep" / "dense.yaml"
    s = sweep.load_spec(example)
    assert len(s.points) == 72 == len({p.key for p in s.points})
    assert {p.device for p in s.points} == {"vek280", "vck190"} and s.grid_keys == ("batch", "layers.fc0.parallelism.cas_len")
