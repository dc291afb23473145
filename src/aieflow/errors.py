"""User-facing errors.

Every error a user can trigger with bad input is an :class:`AieflowError` whose message says which
layer, what is wrong and what to change; the CLI prints it without a traceback and exits non-zero.
"""

from __future__ import annotations

from collections.abc import Iterable


class AieflowError(Exception):
    """Base class: the message is written for the user."""

    def __init__(self, message: str, *, layer: str | None = None, hint: str | None = None):
        self.message = message  # without the layer and the hint, for errors that wrap another
        self.layer = layer
        self.hint = hint
        text = f"layer '{layer}': {message}" if layer else message
        if hint:
            text = f"{text}\n  hint: {hint}"
        super().__init__(text)


class ModelError(AieflowError):
    """The model cannot be read or contains something aieflow does not support."""


class UnsupportedOpError(ModelError):
    """An operator, attribute or pattern that aieflow cannot map."""


class ConfigError(AieflowError):
    """A configuration key, override or numeric type is invalid."""


class PlanError(AieflowError):
    """No legal mapping exists on the chosen device (too large, overrides do not fit)."""


class OutputExistsError(AieflowError):
    """The output directory exists and --force was not given."""


def did_you_mean(words: str | Iterable[object], choices: Iterable[object]) -> str | None:
    """``"did you mean 'precision'?"`` for the unknown key(s) ``words`` (one or an iterable) that
    are close to one of ``choices`` (difflib's similarity), else None: the hint of an unknown-key
    error."""
    import difflib

    names = [str(c) for c in choices]
    unknown = [words] if isinstance(words, str) else list(words)
    found = []
    for word in unknown:
        close = difflib.get_close_matches(str(word), names, n=1, cutoff=0.6)
        if close:
            found.append(f"'{close[0]}'" + (f" for '{word}'" if len(unknown) > 1 else ""))
    if not found:
        return None
    return "did you mean " + ", ".join(found) + "?"
