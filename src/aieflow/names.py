"""The one sanitiser: nothing from a model file becomes code.

Every name that comes from a model (ONNX node / tensor / graph names, torch module paths, config
keys) passes through this module before it reaches a generated file:

- :func:`c_ident` turns it into a C / C++ / HLS identifier that is also a safe file-name stem and
  Make / cfg word: ``[A-Za-z0-9_]`` only, never a keyword, never starting with a digit, at most
  :data:`MAX_IDENT` characters (a long name keeps a hash of the whole so distinct names stay
  distinct);
- :func:`text` is what every template prints for a plain string (the Jinja environments of
  :mod:`aieflow.templating` apply it to every ``{{ }}`` value that is not :class:`Code`): control
  characters, non-ASCII, backslashes, quotes, backticks, ``$``, ``*`` and ``%`` are written as
  ``%XX`` (UTF-8 bytes), so a name inside a ``//`` or ``#`` comment cannot end the line, splice the
  next one, close a ``/* */`` comment, leave a string literal or expand in a shell or Makefile;
- :func:`comment` is :func:`text` bounded in length, for the emitters that build text in Python.

Text that is meant to be code (connections, arrays, include lines that aieflow writes from
identifiers it made) is wrapped in :class:`Code` by the emitter that builds it, from parts that
went through :func:`c_ident`; the property test ``tests/test_names.py`` renders every design kind with
hostile names and checks the generated sources tokenise to the same code as with plain names.
"""

from __future__ import annotations

import hashlib
import re

MAX_IDENT = 48
"""Longest identifier made from a name (file names and C identifiers stay far below OS / compiler
limits even with the prefixes and suffixes the emitters add)."""

MAX_COMMENT = 160
"""Longest escaped name written into a comment; longer ones end in ``...`` and a hash."""

# printable ASCII that is inert in every place a plain string is written (C++ / HLS comments and
# code, Makefile and cfg comments, Markdown, Python scripts): not the escape character itself, no
# quotes, backslash, backtick, dollar, or '*' (which could close or open a block comment)
_UNSAFE = re.compile(r"[^\x20-\x7e]|[\\\"'`$*%]")

_NON_IDENT = re.compile(r"[^0-9A-Za-z_]")

# C++20 keywords and alternative tokens, plus names the generated code or its headers define
_RESERVED = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
    nullptr operator or or_eq private protected public register reinterpret_cast requires return
    short signed sizeof static static_assert static_cast struct switch template this thread_local
    throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while
    xor xor_eq main std adf aie NULL assert errno""".split()
)


class Code(str):
    """A string that is safe to print as it is: code an emitter built from sanitised parts, or text
    this module already escaped.  Templates print it unchanged."""

    __slots__ = ()


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def c_ident(name: str) -> str:
    """A C identifier (and file-name stem) for ``name``: ``[A-Za-z0-9_]``, not a keyword, not
    starting with a digit, at most :data:`MAX_IDENT` characters.  Names that are already such
    identifiers come back unchanged; others have each other character replaced by ``_``; a name
    that had to be shortened ends in a hash of the whole name."""
    s = _NON_IDENT.sub("_", name)
    if not s or s[0].isdigit() or s in _RESERVED:
        s = f"l_{s}"
    if len(s) > MAX_IDENT:
        s = f"{s[: MAX_IDENT - 9]}_{_digest(name)}"
    return s


def unique_idents(names: list[str]) -> dict[str, str]:
    """:func:`c_ident` of every name, made unique in order (``_`` appended to later collisions)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        if name in out:
            continue
        s = c_ident(name)
        while s in taken:
            s += "_"
        out[name] = s
        taken.add(s)
    return out


def _escape(match: re.Match[str]) -> str:
    return "".join(f"%{b:02X}" for b in match.group(0).encode("utf-8", "surrogatepass"))


def text(value: str) -> Code:
    """``value`` with every character that is not inert everywhere written as ``%XX`` (its UTF-8
    bytes): safe in comments, Markdown and data files; the result holds no line break."""
    return Code(_UNSAFE.sub(_escape, value))


def comment(value: str) -> Code:
    """:func:`text` for a name inside a comment, at most :data:`MAX_COMMENT` characters long."""
    s = text(value)
    if len(s) > MAX_COMMENT:
        s = Code(f"{s[: MAX_COMMENT - 12]}...{_digest(value)}")
    return s


def finalize(value: object) -> object:
    """The Jinja ``finalize`` hook: plain strings are escaped by :func:`text`, :class:`Code` and
    numbers are printed as they are; any other object is printed as the :func:`text` of its ``str``."""
    if isinstance(value, Code | bool | int | float) or value is None:
        return value
    return text(str(value))
