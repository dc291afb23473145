"""Safe output handling (issue 16): --force replaces only aieflow designs, a lock keeps two saves
apart, a failed write leaves the old design, predict writes exactly the path it is given."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import numpy as np
import onnx
import pytest
from test_cli_errors import run_cli

import aieflow
from aieflow.errors import AieflowError, ConfigError, OutputExistsError
from aieflow.model_zoo import qdq_mlp


@pytest.fixture
def design():
    return aieflow.compile(qdq_mlp([20, 16, 5], seed=0), device="vek280")


def hidden(path):
    return sorted(p.name for p in path.iterdir() if p.name.startswith("."))


def test_force_replaces_a_design_but_not_a_file_fifo_or_link(tmp_path, design):
    design.save(tmp_path / "d")
    design.save(tmp_path / "d", force=True)
    assert (tmp_path / "d" / "design.json").is_file()
    (tmp_path / "f").write_text("user file")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to(tmp_path / "d")
    for name, expect in (("f", "is not a directory"), ("pipe", "is not a directory"), ("link", "symbolic link")):
        with pytest.raises(OutputExistsError, match=expect):
            design.save(tmp_path / name, force=True)
    assert (tmp_path / "f").read_text() == "user file" and (tmp_path / "pipe").is_fifo()
    assert (tmp_path / "link").is_symlink() and (tmp_path / "d" / "design.json").is_file()
    assert hidden(tmp_path) == []


def test_force_leaves_a_dot_old_sibling_it_did_not_create(tmp_path, design):
    design.save(tmp_path / "d")
    (tmp_path / ".d.old").mkdir()
    (tmp_path / ".d.old" / "keep.txt").write_text("mine")
    design.save(tmp_path / "d", force=True)
    assert (tmp_path / ".d.old" / "keep.txt").read_text() == "mine"
    assert hidden(tmp_path) == [".d.old"]


@pytest.mark.parametrize("out,expect", [(".", "current directory"), ("..", "current directory"), ("", "empty string")])
def test_out_dot_dotdot_and_empty(tmp_path, out, expect):
    onnx.save(qdq_mlp([20, 16, 5], seed=0), tmp_path / "m.onnx")
    (tmp_path / "work").mkdir()
    r = run_cli("compile", str(tmp_path / "m.onnx"), "--out", out, "--force", "--quiet", cwd=tmp_path / "work")
    assert r.returncode == 2 and expect in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "work"]


def test_a_second_save_into_a_locked_directory_fails_cleanly(tmp_path, design):
    onnx.save(qdq_mlp([20, 16, 5], seed=0), tmp_path / "m.onnx")
    with open(tmp_path / ".d.lock", "w") as lock:  # what a running compile into d holds
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(OutputExistsError, match="another aieflow process is writing"):
            design.save(tmp_path / "d")
        r = run_cli("compile", str(tmp_path / "m.onnx"), "--out", str(tmp_path / "d"), "--quiet")
        assert r.returncode == 2 and "another aieflow process is writing" in r.stderr, r.stderr
    assert not (tmp_path / "d").exists()
    design.save(tmp_path / "d")  # the lock released, the save goes through and removes the lock file
    assert hidden(tmp_path) == []


def test_a_failed_write_keeps_the_old_design(tmp_path, design, monkeypatch):
    design.save(tmp_path / "d")
    before = (tmp_path / "d" / "design.json").read_text()

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "writestr", full)  # writing weights.npz runs out of space
    with pytest.raises(AieflowError, match="cannot write the design to .*No space left on device"):
        design.save(tmp_path / "d", force=True)
    assert (tmp_path / "d" / "design.json").read_text() == before
    assert hidden(tmp_path) == []


def test_predict_writes_exactly_the_output_path(tmp_path, design):
    design.save(tmp_path / "d")
    np.save(tmp_path / "x.npy", np.zeros((3, 20), dtype=np.float32))
    r = run_cli("predict", str(tmp_path / "d"), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.bin"))
    assert r.returncode == 0, r.stderr
    assert np.load(tmp_path / "y.bin").shape == (3, 5) and not (tmp_path / "y.bin.npy").exists()
    r = run_cli("predict", str(tmp_path / "d"), "--input", str(tmp_path / "x.npy"), "--output", "/dev/full")
    assert r.returncode == 2 and "cannot write the output to '/dev/full': No space left on device" in r.stderr, r.stderr
    assert not os.path.exists("/dev/full.npy")


def test_empty_out_from_the_api(design):
    with pytest.raises(ConfigError, match="empty string"):
        design.save("")


def _cmdlines_mentioning(text):
    found = []
    for proc in os.listdir("/proc"):
        if proc.isdigit():
            try:
                cmd = open(f"/proc/{proc}/cmdline", "rb").read()
            except OSError:
                continue
            if text.encode() in cmd:
                found.append(cmd)
    return found


def _mentioning(text):
    """(pid, command line) of every process whose command line mentions ``text``."""
    found = []
    for proc in os.listdir("/proc"):
        if proc.isdigit():
            try:
                cmd = open(f"/proc/{proc}/cmdline", "rb").read()
            except OSError:
                continue
            if text.encode() in cmd:
                found.append((int(proc), cmd))
    return found


def _processes_mentioning(text):
    return [pid for pid, _ in _mentioning(text)]


def _cmdlines_mentioning(text):
    return [cmd for _, cmd in _mentioning(text)]


@pytest.mark.skipif(shutil.which("g++") is None, reason="verify needs g++")
def _warm_headers(env, arch):
    """The shim's precompiled headers built into ``env``'s cache first, so that the SIGTERM below lands
    in the harness's own unit compiles (a header being written is the next test's case)."""
    code = f"from aieflow.verify import precompile_shim; assert all(p.is_file() for p in precompile_shim({arch}))"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=600)


def test_sigterm_during_verify_stops_the_compilers_and_removes_the_build(tmp_path, design):
    design.save(tmp_path / "d")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "AIEFLOW_CACHE_DIR": str(tmp_path / "cache")}
    _warm_headers({**env, "TMPDIR": str(tmp_path)}, design.device.generation.arch_macro)
    proc = subprocess.Popen([sys.executable, "-m", "aieflow.cli", "verify", str(tmp_path / "d"), "--jobs", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _processes_mentioning(str(tmp)) or proc.pid in _processes_mentioning(str(tmp)):
        assert proc.poll() is None and time.monotonic() < deadline, "no compiler started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    start = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated" in err, err
    assert time.monotonic() - start < 1.5  # compilers stopped, not waited for (a harness build takes seconds)
    assert _processes_mentioning(str(tmp)) == []  # no g++ / cc1plus left running
    assert list(tmp.iterdir()) == []  # the build directory is gone


def test_sigterm_while_the_shim_header_is_precompiled_leaves_no_compiler_and_no_partial_header(tmp_path, design):
    """A cold cache: the first compile a verify starts is the shim's precompiled header (110 MB).  A
    SIGTERM then stops it too: no compiler left, the build directory gone, no partial or staged .gch
    in the cache.  (Deleting a large file being written can wait for the disk under I/O load, so the
    bound here is looser than the unit compiles' 1.5 s.)"""
    design.save(tmp_path / "d")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cache = tmp_path / "cache"
    env = {**os.environ, "TMPDIR": str(tmp), "AIEFLOW_CACHE_DIR": str(cache)}
    proc = subprocess.Popen([sys.executable, "-m", "aieflow.cli", "verify", str(tmp_path / "d"), "--jobs", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(b"c++-header" in c for c in _cmdlines_mentioning(str(tmp))):
        assert proc.poll() is None and time.monotonic() < deadline, "no header compile started"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "terminated" in err, err
    assert _processes_mentioning(str(tmp)) == []
    assert list(tmp.iterdir()) == []
    pch = cache / "x86" / "pch"
    left = sorted(p.name for p in pch.iterdir()) if pch.exists() else []
    assert all(name.endswith(".gch") and not name.startswith(".") for name in left), left
