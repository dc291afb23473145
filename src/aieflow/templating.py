"""The one Jinja set-up of every emitter: templates print plain strings through the sanitiser
(:func:`aieflow.names.finalize`), so a name from a model can never become code by being printed.

Compiled templates are kept in the cache directory (:func:`aieflow.cache.cache_root`, ``templates``):
Jinja compiling the templates of a project anew took a tenth of a whole ``aieflow compile``.  An
entry is keyed by the template's name and file, Jinja's version and every environment option that
changes the code Jinja generates (delimiters, whitespace handling, autoescape, ``finalize``,
``undefined``, extensions, the parse-time policies: :func:`_options_key`), taken from the
environment that asks for the template, and checked by Jinja against the template's source
(a checksum) and Python's version; so a template compiled under other options or another Jinja is
never reused, only recompiled.  A cache that cannot be read or written is simply not used.
``AIEFLOW_TEMPLATE_CACHE=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from typing import Any

import jinja2

from .cache import cache_root
from .names import finalize


class _TemplateCache(jinja2.FileSystemBytecodeCache):
    """Jinja's file cache, minus its errors (a compile never fails because of its cache), with the
    options of the environment asking (:func:`_options_key`, taken when it asks, so one cache can
    serve environments with different options, and an option set after the environment was made
    counts) in every key."""

    def get_bucket(self, environment: jinja2.Environment, name: str, filename: str | None,
                   source: str) -> jinja2.bccache.Bucket:
        key = f"{self.get_cache_key(name, filename)}-{_options_key(environment)}"
        bucket = jinja2.bccache.Bucket(environment, key, self.get_source_checksum(source))
        self.load_bytecode(bucket)
        return bucket

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


def _name(value: Any) -> str:
    """A stable name of an option's value: a function or class by its qualified name."""
    if value is None or isinstance(value, bool | str | int):
        return repr(value)
    return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__qualname__)}"


def _options_key(env: jinja2.Environment) -> str:
    """A hash of what decides the code Jinja generates for a template in ``env`` (besides the
    template's source, which Jinja checks itself): Jinja's version and the environment's options."""
    options = [
        jinja2.__version__, env.block_start_string, env.block_end_string, env.variable_start_string,
        env.variable_end_string, env.comment_start_string, env.comment_end_string, env.line_statement_prefix,
        env.line_comment_prefix, env.trim_blocks, env.lstrip_blocks, env.newline_sequence,
        env.keep_trailing_newline, env.optimized, env.is_async, _name(env.autoescape), _name(env.finalize),
        _name(env.undefined), *sorted(env.extensions),
        # the policies read while parsing or compiling (ext.i18n.trimmed); the others are read at render time
        *sorted((k, _name(v)) for k, v in env.policies.items() if k.startswith(("compiler.", "ext."))),
    ]
    return hashlib.sha256(repr(options).encode()).hexdigest()[:16]


def _bytecode_cache() -> _TemplateCache | None:
    if os.environ.get("AIEFLOW_TEMPLATE_CACHE", "1") == "0":
        return None
    folder = cache_root() / "templates"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    return _TemplateCache(str(folder))


def cached_environment(**options: Any) -> jinja2.Environment:
    """``jinja2.Environment(**options)`` with the template cache, keyed by these options."""
    return jinja2.Environment(**options, bytecode_cache=_bytecode_cache())


@cache
def environment(folder: str) -> jinja2.Environment:
    """The environment of ``templates/<folder>``: strict about undefined variables, keeps trailing
    newlines, sanitises every printed value that is not :class:`aieflow.names.Code`."""
    return cached_environment(
        loader=jinja2.PackageLoader("aieflow", f"templates/{folder}"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        finalize=finalize,
    )


@cache
def html_environment(folder: str) -> jinja2.Environment:
    """The environment of the HTML templates in ``templates/<folder>``: every printed value is
    HTML-escaped (autoescape), the characters XML cannot hold (NUL, most C0 controls) replaced by
    U+FFFD, unless it is :class:`markupsafe.Markup` that aieflow built itself (the SVG pictures);
    strict about undefined variables.  Its templates share the cache: their entries are apart from
    the emitters' by the options in their keys."""
    from markupsafe import Markup

    from .svg_charts import clean

    def printable(value: object) -> object:
        return clean(value) if isinstance(value, str) and not isinstance(value, Markup) else value

    return cached_environment(
        loader=jinja2.PackageLoader("aieflow", f"templates/{folder}"),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        finalize=printable,
    )
