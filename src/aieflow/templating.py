"""The one Jinja set-up of every emitter: templates print plain strings through the sanitiser
(:func:`aieflow.names.finalize`), so a name from a model can never become code by being printed.

Compiled templates are kept in the cache directory (:func:`aieflow.cache.cache_root`, ``templates``):
Jinja compiling the templates of a project anew took a tenth of a whole ``aieflow compile``.  Jinja
checks each entry against the template's source (a checksum) and its own and Python's versions, so a
stale entry is recompiled, never used; a cache that cannot be read or written is simply not used.
``AIEFLOW_TEMPLATE_CACHE=0`` turns it off.
"""

from __future__ import annotations

import os
from functools import cache

import jinja2

from .cache import cache_root
from .names import finalize


class _TemplateCache(jinja2.FileSystemBytecodeCache):
    """Jinja's file cache, minus its errors: a compile never fails because of its cache."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # noqa: BLE001 - an unreadable or damaged entry: compile the template
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    if os.environ.get("AIEFLOW_TEMPLATE_CACHE", "1") == "0":
        return None
    folder = cache_root() / "templates"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    return _TemplateCache(str(folder))


@cache
def environment(folder: str) -> jinja2.Environment:
    """The environment of ``templates/<folder>``: strict about undefined variables, keeps trailing
    newlines, sanitises every printed value that is not :class:`aieflow.names.Code`."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("aieflow", f"templates/{folder}"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        finalize=finalize,
        bytecode_cache=_bytecode_cache(),
    )


@cache
def html_environment(folder: str) -> jinja2.Environment:
    """The environment of the HTML templates in ``templates/<folder>``: every printed value is
    HTML-escaped (autoescape), the characters XML cannot hold (NUL, most C0 controls) replaced by
    U+FFFD, unless it is :class:`markupsafe.Markup` that aieflow built itself (the SVG pictures);
    strict about undefined variables.  No bytecode cache: its entries are keyed by the template's
    source, not by the environment's options, and one report does not need it."""
    from markupsafe import Markup

    from .svg_charts import clean

    def printable(value: object) -> object:
        return clean(value) if isinstance(value, str) and not isinstance(value, Markup) else value

    return jinja2.Environment(
        loader=jinja2.PackageLoader("aieflow", f"templates/{folder}"),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        finalize=printable,
    )
