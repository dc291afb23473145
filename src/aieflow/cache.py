"""Where aieflow keeps what it can rebuild: ``$AIEFLOW_CACHE_DIR``, else ``$XDG_CACHE_HOME/aieflow``,
else ``~/.cache/aieflow`` (x86 builds of ``verify``, compiled templates)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("AIEFLOW_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "aieflow"
