"""Atomic output directories: a save either leaves the complete new directory or nothing new.

``force`` replaces only what aieflow wrote: a real directory holding a ``design.json`` file (or an
empty directory), never a file, a device, a symbolic link (or what it points to), the current
directory or one of its parents.  A lock file next to the output (``.NAME.lock``, removed
afterwards) makes a second concurrent save into the same directory fail at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import AieflowError, ConfigError, OutputExistsError
from .integrity import seal


def output_path(out_dir: str | os.PathLike) -> Path:
    """``out_dir`` as an absolute path (``.`` and ``..`` resolved, symlinks not followed); refused
    when empty, the file system root, or the current directory or one of its parents."""
    if not os.fspath(out_dir):
        raise ConfigError("the output directory is an empty string", hint="pass --out DIR")
    out = Path(os.path.abspath(out_dir))
    cwd = Path(os.path.abspath(os.getcwd()))
    if out == out.parent or out == cwd or out in cwd.parents:
        raise ConfigError(
            f"refusing to write the design over '{out_dir}' (the current directory or one of its parents)",
            hint="pass a new directory, e.g. --out my_design",
        )
    return out


def check_replaceable(out: Path, given: str | os.PathLike, force: bool) -> None:
    """Raise unless ``out`` may be written: it does not exist, or ``force`` and it is an aieflow
    design directory (or an empty directory)."""
    try:
        st = out.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise OutputExistsError(f"output '{given}' is a symbolic link; aieflow does not write through links",
                                hint="pass the directory it points to, or a new one")
    if not force:
        raise OutputExistsError(f"output directory '{given}' already exists", hint="pass --force (force=True) to replace it")
    if not stat.S_ISDIR(st.st_mode):
        raise OutputExistsError(f"output '{given}' exists and is not a directory; --force replaces only aieflow designs",
                                hint="remove it yourself or pass another --out")
    design = out / "design.json"
    if not (design.is_file() and not design.is_symlink()) and any(out.iterdir()):
        raise OutputExistsError(
            f"output directory '{given}' is not an aieflow design (it has no design.json); --force replaces only those",
            hint="remove it yourself or pass another --out",
        )


@contextlib.contextmanager
def _locked(out: Path, given: str | os.PathLike) -> Iterator[None]:
    """Hold ``.NAME.lock`` next to ``out`` (exclusive, not waiting); removed on exit."""
    path = out.with_name(f".{out.name}.lock")
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputExistsError(f"another aieflow process is writing '{given}' right now",
                                    hint="wait for it, or pass another --out") from None
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:  # the previous holder removed it after we opened it
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)


def save_directory(out_dir: str | os.PathLike, force: bool, write: Callable[[Path], None]) -> Path:
    """Run ``write(tmp)`` on a temporary sibling of ``out_dir`` and rename it into place.

    An error in ``write`` removes the temporary directory and leaves ``out_dir`` as it was; an
    existing design is replaced only with ``force`` (see the module docstring): moved aside to a
    fresh hidden name of its own, then deleted, so it survives a failure of the final rename.
    """
    out = output_path(out_dir)
    check_replaceable(out, out_dir, force)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the parent of output directory '{out_dir}': {e.strerror}") from None
    with _locked(out, out_dir):
        check_replaceable(out, out_dir, force)  # again, now that no other aieflow can change it
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        old = None
        try:
            write(tmp)
            seal(tmp)
            if out.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
                out.rename(old)  # onto our own empty directory: never anyone else's
            tmp.rename(out)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None and not out.exists():
                old.rename(out)
                old = None
            raise AieflowError(f"cannot write the design to '{out_dir}': {e.strerror or e}",
                               hint="check the free space and permissions there") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    return Path(out_dir)


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    """Write ``{relative path: text or bytes}`` under ``root``, creating folders."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def write_text(path: str | os.PathLike, content: str, what: str, option: str) -> Path:
    """Write ``content`` to ``path`` (a temporary file beside it renamed into place); an error
    names the file and the option that gave it."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_dir():
            raise ConfigError(f"cannot write the {what} to '{p}': it is a directory", hint=f"pass a file name to {option}")
        tmp.write_text(content, encoding="utf-8")
        os.replace(tmp, p)
    except OSError as e:
        raise ConfigError(f"cannot write the {what} to '{p}': {e.strerror or e}", hint=f"pass another {option}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return p
