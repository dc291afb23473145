"""Progress bars for the long steps, and the command line's logging set-up.

Library code reports progress through :func:`task` / :func:`track` and logs through the standard
``logging`` module (``logging.getLogger(__name__)``: one ``aieflow`` hierarchy).  Neither shows
anything by itself: the package installs only a ``NullHandler``, and bars are off until
:func:`cli_output` (used by ``aieflow.cli.main`` and nothing else) turns them on, which it does only
when stderr is a terminal and ``-q`` was not given.  ``rich`` is imported only then, so neither
``import aieflow``, the Python API nor a command whose stderr is a pipe pays for it.

A Python user who wants the messages configures logging as usual, e.g.
``logging.basicConfig(); logging.getLogger("aieflow").setLevel(logging.DEBUG)``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)

_lock = threading.RLock()
_bars = False  # set by cli_output: stderr is a terminal and the user did not ask for -q
_live: Any = None  # the rich Progress while at least one task is open
_open = 0


class _NullTask:
    """What :func:`task` yields while bars are off: every call does nothing."""

    def advance(self, n: float = 1) -> None:
        pass

    def update(self, description: str | None = None, total: float | None = None) -> None:
        pass


NULL_TASK = _NullTask()


class _Task:
    def __init__(self, progress: Any, task_id: Any) -> None:
        self._progress = progress
        self._id = task_id

    def advance(self, n: float = 1) -> None:
        self._progress.advance(self._id, n)

    def update(self, description: str | None = None, total: float | None = None) -> None:
        kw: dict[str, Any] = {"total": total}  # None: an indeterminate (pulsing) bar
        if description is not None:
            kw["description"] = description
        self._progress.update(self._id, **kw)


def bars_enabled() -> bool:
    return _bars


def _start() -> Any:
    global _live, _open
    with _lock:
        if _live is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            _live = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=Console(file=sys.stderr), transient=True)
            _live.start()
        _open += 1
        return _live


def _stop() -> None:
    global _live, _open
    with _lock:
        _open -= 1
        if _open == 0 and _live is not None:
            _live.stop()
            _live = None


@contextlib.contextmanager
def task(description: str, total: float | None = None) -> Iterator[_Task | _NullTask]:
    """A progress bar for one step (``total`` units; None: unknown, the bar pulses), shown while the
    block runs, on stderr, when the command line turned bars on; otherwise a task that does nothing.
    ``advance`` may be called from several threads."""
    if not _bars:
        yield NULL_TASK
        return
    progress = _start()
    task_id = progress.add_task(description, total=total)
    try:
        yield _Task(progress, task_id)
    finally:
        progress.remove_task(task_id)
        _stop()


def track(items: Iterable[Any], description: str, total: int | None = None) -> Iterator[Any]:
    """``items``, one bar unit each (``total``: their number where ``len`` does not give it)."""
    if not _bars:
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with task(description, total) as t:
        for item in items:
            yield item
            t.advance()


class Stages:
    """A compile's stages (``import``, ``fuse``, ..., ``emit``, each design kind its own): calling it
    with a stage's name ends the previous stage (logged at debug level with its time), starts the
    named one, passes the name on to the caller's ``progress`` callback (``aieflow.compile``'s
    argument) and advances the ``compile`` bar.  It is itself such a callback, so the passes and the
    design kinds' compile functions take it where they take ``progress``."""

    def __init__(self, callback: Callable[[str], None] | None, bar: _Task | _NullTask, total: int | None) -> None:
        self._callback = callback
        self._bar = bar
        self.started = 0  # stages begun so far
        self._current: str | None = None
        self._t0 = self._start = time.perf_counter()
        self.kind = ""  # the design kind, once the front end has told it
        self.total(total)

    def total(self, n: int | None, kind: str | None = None) -> None:
        """The stages the compile will have in all (None: not known), once the design kind is known."""
        self.kind = kind or self.kind
        self._bar.update(description=self._what(), total=n)

    def _what(self) -> str:
        return f"compile ({self.kind})" if self.kind else "compile"

    def __call__(self, stage: str) -> None:
        self._finish()
        self._current = stage
        self.started += 1
        log.debug("%s: %s ...", self._what(), stage)
        if self._callback is not None:
            self._callback(stage)

    def _finish(self) -> None:
        now = time.perf_counter()
        if self._current is not None:
            log.debug("%s: %s done in %.3f s", self._what(), self._current, now - self._t0)
            self._bar.advance()
        self._t0 = now

    def close(self) -> None:
        self._finish()
        self._current = None
        log.info("compiled a %s design in %.2f s (%d stages)", self.kind or "model's", time.perf_counter() - self._start,
                 self.started)


@contextlib.contextmanager
def compile_stages(callback: Callable[[str], None] | None, total: int | None) -> Iterator[Stages]:
    with task("compile", total) as bar:
        stages = Stages(callback, bar, total)
        ok = False
        try:
            yield stages
            ok = True
        finally:
            if ok:
                stages.close()


# ------------------------------------------------------------------------------ the command line

class _Formatter(logging.Formatter):
    """``[  0.42s] message`` (seconds since the command started); warnings and errors say so; at
    debug level the logger's name too."""

    def __init__(self, debug: bool) -> None:
        super().__init__()
        self.debug = debug
        self.start = time.time()

    def format(self, record: logging.LogRecord) -> str:
        msg = super().format(record)
        level = f"{record.levelname.lower()}: " if record.levelno >= logging.WARNING else ""
        name = f"{record.name}: " if self.debug else ""
        return f"[{record.created - self.start:6.2f}s] {level}{name}{msg}"


class _StderrHandler(logging.Handler):
    """Writes to ``sys.stderr`` as it is when the record comes (not when the handler was made): while
    bars are shown, rich redirects it so that messages appear above the bars."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging's own convention
            self.handleError(record)


def cli_level(verbosity: int, quiet: bool) -> int:
    """The ``aieflow`` logger's level for ``-v`` (info), ``-vv`` (debug), ``-q`` (errors only) and
    neither (warnings)."""
    if quiet:
        return logging.ERROR
    return {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)


@contextlib.contextmanager
def cli_output(verbosity: int = 0, quiet: bool = False, bars: bool | None = None) -> Iterator[None]:
    """The command line's logging and progress for the duration of one command: the ``aieflow``
    logger's records at :func:`cli_level` to stderr, and bars when ``bars`` (default: stderr is a
    terminal and not ``quiet``).  Everything is put back afterwards (``main`` may be called more
    than once in a process, e.g. in tests)."""
    global _bars
    logger = logging.getLogger("aieflow")
    handler = _StderrHandler()
    level = cli_level(verbosity, quiet)
    handler.setFormatter(_Formatter(debug=level <= logging.DEBUG))
    saved = (logger.level, _bars)
    logger.addHandler(handler)
    logger.setLevel(level)
    if bars is None:
        bars = not quiet and _isatty(sys.stderr)
    _bars = bars
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        _bars = saved[1]


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed streams
        return False
