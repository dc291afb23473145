"""Saved designs that cannot lie (issue 16, item 4).

Every save seals its directory (:func:`seal`, called by ``atomic.save_directory`` for every design
kind): design.json gets an ``integrity`` record with the SHA-256 of every file the save wrote
(``weights.npz``, each project file, nested segment designs) and of design.json's own content
without that record.  ``aieflow.load`` (and so ``predict``, ``verify``, ``report``) checks it first
(:func:`check`): an edited, swapped, missing or linked file is an :class:`AieflowError` naming it.
``aieflow.load(path, check=False)`` / ``--no-check`` skips the hash comparison (and says so); symbolic
links are refused either way, and only the recorded project files are read (:func:`read_project`),
so build outputs a user's ``make`` adds beside them are neither read nor checked.

This detects damage and edits, not a forger: anyone who can write the directory can write a new
record too (there is no key).  Designs saved before the record existed load without the check.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import AieflowError

RECORD = "integrity"
ALGORITHM = "sha256"
REDO = "re-run aieflow compile to write the design again (or load with --no-check / check=False to skip this check)"

_skip = contextvars.ContextVar("aieflow_integrity_skip", default=False)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(meta: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in meta.items() if k != RECORD}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            yield Path(dirpath) / name


def seal(root: Path) -> None:
    """Add the integrity record to ``root/design.json`` (a directory a save has just written)."""
    design = root / "design.json"
    meta = json.loads(design.read_text())
    files = {}
    for p in _files(root):
        rel = p.relative_to(root).as_posix()
        if rel != "design.json" and not p.name.endswith(".lock"):
            files[rel] = _digest(p.read_bytes())
    meta[RECORD] = {"algorithm": ALGORITHM, "design": _digest(_canonical(meta)), "files": files}
    design.write_text(json.dumps(meta, indent=2) + "\n")


def _regular(d: Path, rel: str) -> Path:
    """``d / rel`` when it and every folder between are real (no symbolic link anywhere)."""
    path = Path(rel)
    if path.is_absolute() or ".." in path.parts:
        raise AieflowError(f"'{d}/design.json' names a file outside the design: '{rel}'", hint=REDO)
    p = d
    for part in path.parts:
        p = p / part
        try:
            st = p.lstat()
        except FileNotFoundError:
            raise AieflowError(f"'{d}' is not a complete design: {rel} is missing", hint=REDO) from None
        if stat.S_ISLNK(st.st_mode):
            raise AieflowError(f"'{p}' is a symbolic link; aieflow does not follow links in a design directory",
                               hint="copy the real file into the design, or re-run aieflow compile")
    if not stat.S_ISREG(p.lstat().st_mode):
        raise AieflowError(f"'{p}' is not a regular file", hint=REDO)
    return p


def check(d: Path, meta: Mapping[str, Any], verify: bool = True) -> None:
    """Refuse a design whose files are not the ones its save wrote (``verify=False``: only that
    every recorded file is a real file, no link).  A design without a record (saved by an older
    aieflow) passes."""
    record = meta.get(RECORD)
    if record is None:
        return
    if not isinstance(record, Mapping) or record.get("algorithm") != ALGORITHM or not isinstance(record.get("files"), Mapping):
        raise AieflowError(f"'{d}/design.json' has a damaged integrity record", hint=REDO)
    verify = verify and not _skip.get()
    if verify and _digest(_canonical(meta)) != record.get("design"):
        raise AieflowError(f"'{d}/design.json' was changed after aieflow saved it (its content does not match "
                           "its integrity record)", hint=REDO)
    for rel, want in record["files"].items():
        p = _regular(d, rel)
        if verify and _digest(p.read_bytes()) != want:
            raise AieflowError(f"'{p}' was changed after aieflow saved the design (SHA-256 differs from design.json)",
                               hint=REDO)


def read_design_json(d: Path) -> dict[str, Any]:
    """design.json of ``d`` (a real file, a JSON object), as an :class:`AieflowError` when not."""
    if not (d / "design.json").is_symlink() and not (d / "design.json").exists():
        raise AieflowError(f"'{d}' is not an aieflow design directory: {d / 'design.json'} is missing")
    try:
        meta = json.loads(_regular(d, "design.json").read_text())
    except (OSError, ValueError) as e:
        raise AieflowError(f"cannot read design in '{d}': {e}") from None
    if not isinstance(meta, dict):
        raise AieflowError(f"'{d}/design.json' is not a design description (a JSON object)")
    return meta


def read_project(d: Path, meta: Mapping[str, Any]) -> dict[str, str]:
    """The project's text files (relative to ``d/project``): the recorded ones, else (older saves)
    every regular file below ``project/``; never through a symbolic link."""
    record = meta.get(RECORD)
    proj = d / "project"
    if record is not None:
        rels = [rel[len("project/"):] for rel in record["files"] if rel.startswith("project/")]
    elif proj.is_dir() and not proj.is_symlink():
        rels = [p.relative_to(proj).as_posix() for p in _files(proj) if not p.is_symlink()]
    else:
        rels = []
    out = {}
    for rel in rels:
        p = _regular(d, f"project/{rel}")
        try:
            out[rel] = p.read_text()
        except UnicodeDecodeError:
            continue  # binary data (GEMM operands): not project text
        except OSError as e:
            raise AieflowError(f"cannot read '{p}': {e.strerror}", hint=REDO) from None
    return out


@contextlib.contextmanager
def skipped() -> Iterator[None]:
    """Loads inside this block do not compare hashes (nested designs of a ``check=False`` load)."""
    token = _skip.set(True)
    try:
        yield
    finally:
        _skip.reset(token)
