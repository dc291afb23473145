"""The one Jinja set-up of every emitter: templates print plain strings through the sanitiser
(:func:`aieflow.names.finalize`), so a name from a model can never become code by being printed."""

from __future__ import annotations

from functools import cache

import jinja2

from .names import finalize


@cache
def environment(folder: str) -> jinja2.Environment:
    """The environment of ``templates/<folder>``: strict about undefined variables, keeps trailing
    newlines, sanitises every printed value that is not :class:`aieflow.names.Code`."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("aieflow", f"templates/{folder}"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        finalize=finalize,
    )
