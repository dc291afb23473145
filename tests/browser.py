"""Pages opened in a real headless browser: Debian's ``chromium`` package (independent of aieflow).

:func:`open_pages` loads every page in its own ``chromium --headless`` run (a few at a time), each
run dumping the DOM after load, taking a screenshot and logging the page's console to stderr
(``--enable-logging=stderr``: every console message, error, uncaught exception and blocked
request is a ``:CONSOLE`` line).  Without the package the tests that need it skip, naming it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="the headless-browser tests need Debian's 'chromium' package: apt-get install chromium "
           "(make test installs it when run as root)",
)
_CONSOLE = re.compile(r":CONSOLE[:(\]]")


@dataclass(frozen=True)
class Page:
    path: Path
    dom: str  # the DOM after load, serialised
    console: tuple[str, ...]  # every console line the page produced
    screenshot: Path
    returncode: int
    stderr: str


def _open(path: Path, out: Path, width: int, height: int) -> Page:
    png = out / f"{path.stem}.png"
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               "--disable-extensions", "--force-device-scale-factor=1", f"--user-data-dir={profile}",
               "--enable-logging=stderr", "--v=0", f"--window-size={width},{height}", f"--screenshot={png}",
               "--dump-dom", path.resolve().as_uri()]
        env = {**os.environ, "HOME": profile}
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, errors="replace")
    console = tuple(line for line in p.stderr.splitlines() if _CONSOLE.search(line))
    return Page(path, p.stdout, console, png, p.returncode, p.stderr)


def open_pages(paths: list[Path], out: Path, width: int = 1280, height: int = 2400, jobs: int = 3) -> dict[str, Page]:
    """``{file name: Page}`` for every page, ``jobs`` browsers at a time."""
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(jobs) as pool:
        pages = list(pool.map(lambda p: _open(p, out, width, height), paths))
    return {p.path.name: p for p in pages}


def colour_pixels(png: Path, rgb: tuple[int, int, int], tolerance: int = 6) -> int:
    """How many pixels of the screenshot are within ``tolerance`` of ``rgb`` in every channel."""
    import numpy as np
    from PIL import Image

    with Image.open(png) as im:
        px = np.asarray(im.convert("RGB"), dtype=np.int16)
    return int(np.all(np.abs(px - np.array(rgb, dtype=np.int16)) <= tolerance, axis=-1).sum())


def hex_rgb(colour: str) -> tuple[int, int, int]:
    c = colour.lstrip("#")
    return int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16)
