"""``aieflow explore`` you can act on (issue 23, item 3): ``--top N``, ``--csv``, a complete
``--json`` and ``--save-config FILE --pick N``, whose config ``aieflow compile`` turns into exactly
that point (the issue's "must hold", for a Dense, a recurrent and a CNN model, through the CLI)."""

from __future__ import annotations

import csv
import json

import numpy as np
import onnx
import pytest
import yaml
from onnx_files import export_onnx

from aieflow.cli import main
from aieflow.model_zoo import cnn_classifier, gru_classifier, qdq_mlp

REL = 1e-9


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    onnx.save(qdq_mlp([32, 64, 48, 16], seed=1), d / "mlp.onnx")
    (d / "batches.yaml").write_text("batch: [8, 32]\ntarget: throughput\n")
    seq = np.random.default_rng(0).standard_normal((4, 5, 4)).astype(np.float32)
    np.save(d / "seq.npy", seq)
    # hidden 16: on the default hidden 8 the compact tile (its gate math shortened, issue 22) is faster
    # than every row-wise spread, so the front would hold it alone
    export_onnx(gru_classifier(n_h=16), seq[:1], d / "gru.onnx")
    img = np.random.default_rng(0).uniform(-1, 1, (2, 3, 32, 32)).astype(np.float32)
    np.save(d / "img.npy", img)
    export_onnx(cnn_classifier(), img[:1], d / "cnn.onnx")
    return d


def _explore_json(capsys, *args) -> dict:
    assert main(["explore", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _performance(capsys, tmp_path, model, config, *args) -> dict:
    out = tmp_path / "design"
    assert main(["compile", str(model), "--config", str(config), "--out", str(out), "--force", "-q", *args]) == 0
    capsys.readouterr()
    return json.loads((out / "design.json").read_text())["performance"]


def test_json_lists_every_point_completely(capsys, files):
    ex = _explore_json(capsys, str(files / "mlp.onnx"), "--config", str(files / "batches.yaml"))
    assert ex["kind"] == "chain"
    ids = [p["id"] for p in ex["pareto_front"]]
    assert ids == list(range(1, len(ids) + 1)) and ex["chosen"]["id"] in ids
    assert {p["batch"] for p in ex["pareto_front"]} == {8, 32} and any(p["replicas"] > 1 for p in ex["pareto_front"])
    for p in (ex["chosen"], *ex["pareto_front"]):
        assert {"tiles", "batch", "replicas", "latency_ns", "interval_ns", "sample_interval_ns", "parallelism"} <= set(p)
        assert set(p["parallelism"]) == {"fc0", "fc1", "fc2"}
        assert p["config"]["batch"] == p["batch"] and p["config"]["replicas"] == p["replicas"]
        assert p["config"]["layers"] == {k: {"parallelism": v} for k, v in p["parallelism"].items()}
        assert _close(p["sample_interval_ns"], p["interval_ns"] / (p["batch"] * p["replicas"]))


def test_top_csv_and_the_ranking(capsys, files, tmp_path):
    model = str(files / "mlp.onnx")
    ex = _explore_json(capsys, model, "--target", "latency")
    by_id = {p["id"]: p for p in ex["pareto_front"]}
    assert main(["explore", model, "--target", "latency", "--top", "4", "--csv", str(tmp_path / "p.csv")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"the 4 best of {len(by_id)} points by 'latency'")
    assert out[-1] == f"wrote 4 points to {tmp_path / 'p.csv'}"
    rows = [line.split() for line in out[3:7]]
    assert rows[0][1] == "*" and int(rows[0][0]) == ex["chosen"]["id"]
    listed = [by_id[int(r[0])] for r in rows]
    lat = [p["latency_ns"] for p in listed]
    assert lat == sorted(lat) and lat[0] == min(p["latency_ns"] for p in by_id.values())  # the latency target's order
    with open(tmp_path / "p.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [int(r["id"]) for r in table] == [p["id"] for p in listed]
    assert [r["pick"] for r in table] == ["True", "False", "False", "False"]
    for r, p in zip(table, listed, strict=True):
        assert (int(r["tiles"]), int(r["batch"]), int(r["replicas"])) == (p["tiles"], p["batch"], p["replicas"])
        assert float(r["latency_ns"]) == p["latency_ns"] and float(r["interval_ns"]) == p["interval_ns"]
        assert r["parallelism"] == " ".join(f"{k}:{v['cas_len']}x{v['cas_num']}" for k, v in p["parallelism"].items())
    assert _explore_json(capsys, model, "--target", "latency", "--top", "4")["top"] == [p["id"] for p in listed]
    # without --top: every point, numbered in order, the pick marked
    assert main(["explore", model, "--target", "latency"]) == 0
    lines = capsys.readouterr().out.splitlines()[3:]
    assert lines.pop().startswith("model error band of these figures: ")  # perf/bands.py
    assert [int(line.split()[0]) for line in lines] == sorted(by_id)
    assert [line.split()[1] == "*" for line in lines].count(True) == 1


def test_bad_top_and_pick_are_refused_before_the_work(capsys, files, tmp_path):
    model = str(files / "mlp.onnx")
    for args, message in (
        (["--top", "0"], "--top must be at least 1"),
        (["--pick", "2"], "--pick chooses the point that --save-config writes"),
        (["--save-config", str(tmp_path / "c.yaml"), "--pick", "999"], "--pick 999: explore lists points 1 to"),
        (["--save-config", str(tmp_path / "c.yaml"), "--pick", "0"], "--pick 0: explore lists points 1 to"),
    ):
        assert main(["explore", model, *args]) == 2
        out, err = capsys.readouterr()
        assert err.startswith(f"error: {message}") and "Traceback" not in err, err
    assert not (tmp_path / "c.yaml").exists()


def test_save_config_of_a_dense_point_compiles_to_it(capsys, files, tmp_path):
    model = files / "mlp.onnx"
    args = ["--device", "vck190", "--config", str(files / "batches.yaml")]
    ex = _explore_json(capsys, str(model), *args)
    # a point the target does not pick: the fewest tiles among those with more than one replica
    point = min((p for p in ex["pareto_front"] if p["replicas"] > 1 and p["id"] != ex["chosen"]["id"]),
                key=lambda p: p["tiles"])
    cfg = tmp_path / "point.yaml"
    assert main(["explore", str(model), *args, "--save-config", str(cfg), "--pick", str(point["id"]), "-q"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote the config of point #{point['id']} to {cfg}"
    text = cfg.read_text()
    assert text.startswith(f"# aieflow explore point #{point['id']}: {point['tiles']} tiles")
    assert "aieflow compile mlp.onnx --device vck190 --config point.yaml" in text
    saved = yaml.safe_load(text)
    assert "target" not in saved and saved["batch"] == point["batch"] and saved["replicas"] == point["replicas"]
    perf = _performance(capsys, tmp_path, model, cfg, "--device", "vck190")
    assert (perf["tiles_used"], perf["batch"], perf["replicas"]) == (point["tiles"], point["batch"], point["replicas"])
    assert _close(perf["latency_ns"], point["latency_ns"]) and _close(perf["interval_ns"], point["interval_ns"])


def test_save_config_of_a_gru_point_compiles_to_it(capsys, files, tmp_path):
    model = files / "gru.onnx"
    args = ["--device", "vck190", "--precision", "int16", "--calibration", str(files / "seq.npy"), "--target", "latency"]
    ex = _explore_json(capsys, str(model), *args)
    def dist(mapping: str) -> str:  # "U h row ..." / "U h column ..."; else "...: compact, ..." / "...: grid, ..."
        return mapping.split("U h ")[1].split()[0] if "U h " in mapping else mapping.split(": ")[1].split(",")[0]

    # the front mixes mappings (the one-tile compact cell and the generated grid's chains, or row-wise
    # spreads; column-wise points are dominated here once the compact tile is in the search)
    assert ex["kind"] == "recurrent" and len({dist(p["mapping"]) for p in ex["pareto_front"]}) >= 2
    for p in (ex["chosen"], *ex["pareto_front"]):
        assert {"tiles", "batch", "replicas", "latency_ns", "interval_ns", "sample_interval_ns", "mapping", "id",
                "config"} <= set(p)
    picks = {ex["chosen"]["id"], ex["pareto_front"][0]["id"],
             next(p["id"] for p in ex["pareto_front"] if dist(p["mapping"]) != dist(ex["chosen"]["mapping"]))}
    for pick in sorted(picks):
        point = next(p for p in ex["pareto_front"] if p["id"] == pick)
        cfg = tmp_path / f"gru{pick}.yaml"
        assert main(["explore", str(model), *args, "--save-config", str(cfg), "--pick", str(pick)]) == 0
        capsys.readouterr()
        saved = yaml.safe_load(cfg.read_text())
        assert set(saved) == {"precision", "layers"} and saved["precision"] == "int16"
        (entry,) = saved["layers"].values()
        assert entry["mapping"] == point["config"]["layers"][next(iter(saved["layers"]))]["mapping"]
        perf = _performance(capsys, tmp_path, model, cfg, "--device", "vck190", "--calibration", str(files / "seq.npy"))
        assert perf["tiles_used"] == point["tiles"] and perf["batch"] == point["batch"] == 1
        assert _close(perf["latency_ns"], point["latency_ns"])
        assert _close(perf["interval_ns"], point["sample_interval_ns"])  # a design's interval: one sequence
        assert _close(perf["step_interval_ns"], point["interval_ns"])


def test_save_config_of_a_cnn_point_compiles_to_it(capsys, files, tmp_path):
    model = files / "cnn.onnx"
    args = ["--device", "vck190", "--precision", "int8", "--calibration", str(files / "img.npy")]
    ex = _explore_json(capsys, str(model), *args)
    assert ex["kind"] == "cnn"
    front = ex["pareto_front"]
    picks = {front[0]["id"], min(front, key=lambda p: p["latency_ns"])["id"],
             next(p["id"] for p in front if p["replicas"] > 1 and p["id"] != ex["chosen"]["id"])}
    for pick in sorted(picks):
        point = next(p for p in front if p["id"] == pick)
        cfg = tmp_path / f"cnn{pick}.yaml"
        assert main(["explore", str(model), *args, "--save-config", str(cfg), "--pick", str(pick)]) == 0
        capsys.readouterr()
        saved = yaml.safe_load(cfg.read_text())
        if point.get("mapping") == "rows":  # cnn.mapping auto lists the rows plan beside the stream plans
            assert saved["cnn"] == {"mapping": "rows"} and "batch" not in saved and "layers" not in saved
        else:
            assert saved["cnn"] == {"replicas": point["replicas"]} and "batch" not in saved
            groups = {name: entry["mapping"]["groups"] for name, entry in saved["layers"].items()}
            assert len(groups) == 4 and all(name.endswith(("Conv", "Gemm")) for name in groups)  # the convolutions only
            assert all(groups[name] == point["parallelism"][name]["cas_num"] for name in groups)
        perf = _performance(capsys, tmp_path, model, cfg, "--device", "vck190", "--calibration", str(files / "img.npy"))
        assert (perf["tiles_used"], perf["replicas"]) == (point["tiles"], point["replicas"])
        assert perf["batch"] == point["batch"] == 1  # a frame per replica
        assert _close(perf["latency_ns"], point["latency_ns"]) and _close(perf["interval_ns"], point["interval_ns"])


def test_save_config_defaults_to_the_pick_and_keeps_the_users_layer_settings(capsys, files, tmp_path):
    model = files / "mlp.onnx"
    user = tmp_path / "user.yaml"
    user.write_text("precision: int8\ntarget: latency\nlayers:\n  fc1:\n    precision: int16\n")
    ex = _explore_json(capsys, str(model), "--config", str(user))
    cfg = tmp_path / "pick.json"
    assert main(["explore", str(model), "--config", str(user), "--save-config", str(cfg), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["chosen"] == ex["chosen"]
    assert err == f"wrote the config of point #{ex['chosen']['id']} to {cfg}\n"  # stdout stays JSON
    saved = json.loads(cfg.read_text())
    assert saved["layers"]["fc1"]["precision"] == "int16" and "target" not in saved
    perf = _performance(capsys, tmp_path, model, cfg)
    assert perf["tiles_used"] == ex["chosen"]["tiles"] and _close(perf["latency_ns"], ex["chosen"]["latency_ns"])
