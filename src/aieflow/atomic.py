"""Atomic output directories: a save either leaves the complete new directory or nothing new."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from .errors import OutputExistsError


def save_directory(out_dir: str | os.PathLike, force: bool, write: Callable[[Path], None]) -> Path:
    """Run ``write(tmp)`` on a temporary sibling of ``out_dir`` and rename it into place.

    An error in ``write`` removes the temporary directory and leaves ``out_dir`` as it was; an
    existing ``out_dir`` is replaced only with ``force`` (moved aside, then deleted, so it survives
    a failure of the final rename).
    """
    out = Path(out_dir)
    if out.exists() and not force:
        raise OutputExistsError(f"output directory '{out}' already exists", hint="pass --force (force=True) to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        write(tmp)
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            if old.exists():
                shutil.rmtree(old)
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    """Write ``{relative path: text or bytes}`` under ``root``, creating folders."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
