"""What ``aieflow verify DIR`` found, kept beside the design (``DIR/verify.json``) for the report.

The record names the design it checked by the SHA-256 of its design.json, so a report never
shows a verdict for another design: a record whose digest differs (the directory was written
again without the record being removed, or design.json was edited) reads back as stale.  The file
is not part of the design's integrity record (``integrity.py``): a design verifies without it, and
writing it does not change the design.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import AieflowError, ConfigError

FILE = "verify.json"
FORMAT = "aieflow-verify"
VERSION = 1


def _design_digest(design_dir: Path) -> str | None:
    try:
        return hashlib.sha256((design_dir / "design.json").read_bytes()).hexdigest()
    except OSError:
        return None


def from_result(result: Any, *, samples: int | None = None, seed: int | None = None,
                inputs: str | None = None) -> dict[str, Any]:
    """The record of a verify result (every kind's has ``ok`` and ``verdict()``): whether it
    passed, its verdict, what was compared (``inputs``: a file name, or generated with ``seed``)."""
    from . import __version__

    return {
        "format": FORMAT,
        "version": VERSION,
        "ok": bool(result.ok),
        "verdict": str(result.verdict()),
        "samples": samples,
        "seed": seed,
        "inputs": inputs if inputs is not None else "generated",
        "when": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "aieflow": __version__,
    }


def write(design_dir: str | os.PathLike, result: Any, **kwargs: Any) -> Path:
    """Write ``design_dir/verify.json`` for ``result`` (a temporary file renamed into place; a link
    there is replaced, never followed).  ``kwargs``: as :func:`from_result`."""
    d = Path(design_dir)
    record = {**from_result(result, **kwargs), "design": _design_digest(d)}
    path = d / FILE
    tmp = d / f".{FILE}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _damaged(path: Path, why: str) -> AieflowError:
    return AieflowError(f"the verify record '{path}' {why}",
                        hint=f"run 'aieflow verify {path.parent}' again, or delete {path.name}")


def read(design_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The record in ``design_dir`` (None when there is none), with ``stale`` set when it was
    written for another design.json than the one there now."""
    d = Path(design_dir)
    path = d / FILE
    if path.is_symlink():
        raise _damaged(path, "is a symbolic link; aieflow does not follow links in a design directory")
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise _damaged(path, f"cannot be read: {e}") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("ok"), bool) \
            or not isinstance(record.get("verdict"), str):
        raise _damaged(path, f"is not a {FORMAT} record (a JSON object with 'ok' and 'verdict')")
    record["stale"] = record.get("design") != _design_digest(d)
    return record


def status(verify: Any) -> dict[str, Any] | None:
    """A record from what the report was given: None, a record, a result of ``design.verify()``,
    or a design directory (its ``verify.json``, if any)."""
    if verify is None:
        return None
    if isinstance(verify, (str, os.PathLike)):
        return read(verify)
    if isinstance(verify, Mapping):
        if not isinstance(verify.get("ok"), bool) or not isinstance(verify.get("verdict"), str):
            raise ConfigError("verify= must be a result of design.verify(), a record with 'ok' (true / false) and "
                              "'verdict' (text), or the design directory holding verify.json")
        return {"stale": False, **verify}
    return {**from_result(verify), "stale": False}
