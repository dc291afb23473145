"""Saved designs that cannot lie (issue 16, item 4): every save records the SHA-256 of each file it
wrote and of design.json's own content; ``aieflow.load`` (so ``predict``, ``verify``, ``report``)
refuses edited, swapped, missing or linked files; ``--no-check`` / ``check=False`` skips the hash
comparison and says so, never the refusal of symbolic links.  The hashes are computed here with
hashlib, independently of ``aieflow.integrity``."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
import torch

import aieflow
from aieflow.cli import main
from aieflow.model_zoo import qdq_mlp, residual_mlp, torch_mlp

X = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)


def _designs():
    torch.manual_seed(0)
    return {
        "chain": aieflow.compile(qdq_mlp([16, 24, 8]), device="vck190", example_input=X[:4], config={"batch": 8}),
        "dag": aieflow.compile(residual_mlp(), device="vek280", example_input=X[:4], calibration=X,
                               config={"precision": "int8", "batch": 8}),
        "segmented": aieflow.compile(torch_mlp([16, 32, 8]), device="vck190", example_input=X[:4], calibration=X,
                                     config={"precision": "int8", "layers": {"0": {"weights": "streamed"}}}),
    }


@pytest.fixture(scope="module")
def designs():
    return _designs()


@pytest.fixture(params=["chain", "dag", "segmented"])
def saved(request, designs, tmp_path):
    d = designs[request.param]
    return d, d.save(tmp_path / request.param)


def test_the_record_holds_every_file_with_its_sha256(saved):
    _, out = saved
    meta = json.loads((out / "design.json").read_text())
    record = meta["integrity"]
    on_disk = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p != out / "design.json")
    assert sorted(record["files"]) == on_disk and len(on_disk) > 3
    for rel, digest in record["files"].items():
        assert hashlib.sha256((out / rel).read_bytes()).hexdigest() == digest
    body = {k: v for k, v in meta.items() if k != "integrity"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    assert record["design"] == hashlib.sha256(canonical).hexdigest()


def test_an_edited_design_json_is_refused(saved):
    _, out = saved
    meta = json.loads((out / "design.json").read_text())
    meta["source"] = meta.get("source", "") + " (edited)"
    (out / "design.json").write_text(json.dumps(meta))
    with pytest.raises(aieflow.AieflowError, match="design.json' was changed after aieflow saved it"):
        aieflow.load(out)


def test_weights_from_another_model_are_refused(saved, tmp_path):
    d, out = saved
    weights = next(p for p in sorted(out.rglob("weights.npz")))
    arrays = dict(np.load(weights))
    key = next(iter(arrays))
    arrays[key] = arrays[key] + 1  # same shapes, other values: only the hash can tell
    np.savez_compressed(weights, **arrays)
    with pytest.raises(aieflow.AieflowError, match=r"weights.npz' was changed after aieflow saved the design"):
        aieflow.load(out)
    # the escape hatch loads it (and then predicts with the swapped weights: it says what it skips)
    back = aieflow.load(out, check=False)
    assert back.predict(X[:4]).shape == d.predict(X[:4]).shape


def test_edited_missing_and_linked_project_files_are_refused(saved, tmp_path):
    _, out = saved
    src = next(p for p in sorted(out.rglob("*.h")) if "project" in p.parts)
    original = src.read_text()
    src.write_text(original + "\nint injected = 1;\n")
    with pytest.raises(aieflow.AieflowError, match="was changed after aieflow saved the design"):
        aieflow.load(out)
    outside = tmp_path / "elsewhere.h"
    outside.write_text(original)  # the same bytes, through a link: refused even so, and even unchecked
    src.unlink()
    os.symlink(outside, src)
    for check in (True, False):
        with pytest.raises(aieflow.AieflowError, match="is a symbolic link"):
            aieflow.load(out, check=check)
    src.unlink()
    with pytest.raises(aieflow.AieflowError, match=f"{src.name} is missing"):
        aieflow.load(out)


def test_files_a_build_adds_beside_the_project_are_neither_read_nor_refused(saved):
    d, out = saved
    proj = next(p for p in sorted(out.rglob("project")) if p.is_dir())
    (proj / "Work").mkdir()
    (proj / "Work" / "libadf.a").write_bytes(bytes(range(256)) * 4)  # binary build output
    back = aieflow.load(out)
    np.testing.assert_array_equal(back.predict(X[:4]), d.predict(X[:4]))
    assert not any(rel.startswith("Work/") for rel in getattr(back, "files", {}))


def test_a_design_saved_before_the_record_loads(designs, tmp_path):
    d = designs["chain"]
    out = d.save(tmp_path / "old")
    meta = json.loads((out / "design.json").read_text())
    del meta["integrity"]
    (out / "design.json").write_text(json.dumps(meta))
    np.testing.assert_array_equal(aieflow.load(out).predict(X[:4]), d.predict(X[:4]))


def test_the_cli_refuses_a_changed_design_and_no_check_says_what_it_skips(designs, tmp_path, capsys):
    out = designs["chain"].save(tmp_path / "c")
    np.save(tmp_path / "x.npy", X[:4])
    meta = json.loads((out / "design.json").read_text())
    meta["source"] = "edited"
    (out / "design.json").write_text(json.dumps(meta))
    args = ["predict", str(out), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]
    assert main(args) == 2
    assert "was changed after aieflow saved it" in capsys.readouterr().err
    assert main([*args, "--no-check"]) == 0
    assert "integrity check skipped (--no-check)" in capsys.readouterr().err
    assert np.load(tmp_path / "y.npy").shape == (4, 8)


@pytest.mark.parametrize("outside", ["/etc/hostname", "../elsewhere.h", "project/../../elsewhere.h"])
def test_a_record_naming_a_file_outside_the_design_is_refused(designs, tmp_path, outside):
    out = designs["chain"].save(tmp_path / "c")
    meta = json.loads((out / "design.json").read_text())
    meta["integrity"]["files"][outside] = "0" * 64  # the record is not covered by its own hash
    (out / "design.json").write_text(json.dumps(meta))
    with pytest.raises(aieflow.AieflowError, match="names a file outside the design"):
        aieflow.load(out)
