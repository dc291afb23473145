"""Hostile names for the injection tests: ONNX models renamed, and a comparison of two generated
projects token by token (independent of aieflow: it imports nothing from it).

``rename_onnx`` gives every node, tensor and the graph of an ONNX model a new name; the hostile
names start with the plain name (so files sort in the same order) and go on with text meant to end
a comment, a string, a Make rule, a shell word or HTML markup and run code.  ``compare_projects`` checks that
two saved designs differ only in their names: C / C++ / HLS sources, Makefiles, cfg files and
shell scripts tokenise (comments dropped, line breaks kept) to the same tokens with one consistent
renaming of identifiers and string literals; Python scripts the same through ``tokenize``; SVG
pictures parse to the same elements; Markdown has the same lines; data files are equal.
"""

from __future__ import annotations

import io
import re
import tokenize
import xml.etree.ElementTree as ET
from pathlib import Path

# each ends something (a // comment, a /* comment, a string, a Make line, a shell word, HTML) and
# then tries to run `touch MARKER` (or, in HTML, a script)
FRAGMENTS = (
    '\nstatic int injected_{i} = std::system("touch {marker}");\n// ',
    "\r#include </dev/random>\r",
    '*/ int injected_{i} = std::system("touch {marker}"); /*',
    '"); std::system("touch {marker}"); ("',
    "\\\nint injected_{i} = 1;",
    "\n\ttouch {marker}\nall:\n\ttouch {marker}\n",
    "$(touch {marker})`touch {marker}`'\"",
    "\u00fc\u2028\u202e\U0001f600 \x00 \x7f\t\f\v",
    "??/\n#define int long\n",
    # HTML (the report): end a table cell and an attribute, then a script, an event handler, a comment
    '</td></tr></table>"><script>console.error("injected {i}")</script><img src=x onerror="console.error({i})">'
    "<svg onload=\"console.error({i})\"></svg><!-- ]]>",
)


def hostile(plain: str, i: int, marker: str, long: bool = False) -> str:
    """``plain`` followed by every fragment (and, with ``long``, 10,000 characters)."""
    tail = "".join(f.format(i=i, marker=marker) for f in FRAGMENTS)
    return plain + tail + ("x" * 10_000 if long else "")


def rename_onnx(model, marker: str | None, long_every: int = 3):
    """A copy of ``model`` with node ``i`` named ``n{i:03d}`` and tensor ``j`` named ``t{j:03d}``
    (``marker`` None), or those names made hostile (every ``long_every``-th 10,000 characters long);
    the graph is named ``g`` likewise.  Tensor names are renamed in every place they appear."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph

    def name(kind: str, i: int) -> str:
        plain = f"{kind}{i:03d}"
        return plain if marker is None else hostile(plain, i, marker, long=i % long_every == 0)

    tensors: dict[str, str] = {}

    def tensor(old: str) -> str:
        if not old:
            return old
        if old not in tensors:
            tensors[old] = name("t", len(tensors))
        return tensors[old]

    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = tensor(vi.name)
    for init in g.initializer:
        init.name = tensor(init.name)
    for i, node in enumerate(g.node):
        node.name = name("n", i)
        for k, t in enumerate(node.input):
            node.input[k] = tensor(t)
        for k, t in enumerate(node.output):
            node.output[k] = tensor(t)
    g.name = name("g", 0)
    return m


# ---------------------------------------------------------------- tokenising

_CPP_TOKEN = re.compile(
    r"""(?P<comment>//[^\n]*|/\*.*?\*/)
      | (?P<newline>\n)
      | (?P<space>[ \t\f\v]+)
      | (?P<string>"(?:\\.|[^"\\\n])*")
      | (?P<char>'(?:\\.|[^'\\\n])*')
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<number>\.?[0-9](?:[eEpP][+-]|[A-Za-z0-9_.'])*)
      | (?P<punct>::|->|<<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||\+\+|--|[-+*/%&|^]=|\#\#|\.\.\.|[{}\[\]();:,.?<>=!~+\-*/%&|^\#])
      | (?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)


def cpp_tokens(text: str) -> list[tuple[str, str]]:
    """C / C++ tokens after line splicing, comments dropped (a block comment keeps its line
    breaks), line breaks as tokens.  Anything a C++ lexer would not accept is an ``other`` token."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\\\n", "")
    out = []
    for m in _CPP_TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "space":
            continue
        if kind == "comment":
            out += [("newline", "\n")] * m.group().count("\n")
            continue
        out.append((kind, m.group()))
    return out


# a single-quoted shell word is one string token (nothing expands inside it)
_SHELL_TOKEN = re.compile(r"(?P<newline>\n)|(?P<space>[ \t]+)|(?P<string>'[^'\n]*')|(?P<ident>[A-Za-z0-9_]+)|(?P<punct>.)",
                          re.DOTALL)


def hash_comment_tokens(text: str) -> list[tuple[str, str]]:
    """Makefile / cfg / shell tokens: ``#`` comments dropped (a backslash before the line break
    would continue them, so it is kept as a token), words and single characters."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = []
    for line in text.split("\n"):
        if line.lstrip().startswith("#") and not line.lstrip().startswith("#!"):
            line = "#" + ("\\" if line.endswith("\\") else "")
        lines.append(line)
    return [(m.lastgroup, m.group()) for m in _SHELL_TOKEN.finditer("\n".join(lines)) if m.lastgroup != "space"]


def python_tokens(text: str) -> list[tuple[str, str]]:
    out = []
    for t in tokenize.generate_tokens(io.StringIO(text).readline):
        if t.type in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        kind = {tokenize.NAME: "ident", tokenize.STRING: "string"}.get(t.type, tokenize.tok_name[t.type])
        out.append((kind, t.string))
    return out


class Renaming:
    """One consistent renaming of identifiers / string literals from the plain project to the
    hostile one (a bijection over the whole project)."""

    def __init__(self) -> None:
        self.fwd: dict[str, str] = {}
        self.back: dict[str, str] = {}

    def check(self, a: str, b: str, where: str) -> None:
        if self.fwd.setdefault(a, b) != b or self.back.setdefault(b, a) != a:
            raise AssertionError(f"{where}: '{a}' becomes both '{self.fwd[a]}' and '{b}' "
                                 f"(or '{b}' stands for both '{self.back[b]}' and '{a}')")


def compare_tokens(a: list[tuple[str, str]], b: list[tuple[str, str]], ren: Renaming, where: str) -> None:
    for i, (ta, tb) in enumerate(zip(a, b)):  # noqa: B905 (lengths compared below, after the first difference)
        if ta[0] in ("ident", "string") and ta[0] == tb[0]:
            ren.check(ta[1], tb[1], where)
        elif ta != tb:
            ctx = " ".join(t[1] for t in b[max(0, i - 8): i + 8])
            raise AssertionError(f"{where}: token {i} is {ta!r} with plain names but {tb!r} with hostile ones: ...{ctx}...")
    assert len(a) == len(b), f"{where}: {len(a)} tokens with plain names, {len(b)} with hostile ones"


CPP = {".h", ".hpp", ".cc", ".cpp", ".c"}
HASH = {".cfg", ".sh", ".mk"}


def text_files(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix not in {".npz", ".bin", ".npy"}:
            out[str(p.relative_to(root))] = p.read_bytes().decode("utf-8")
    return out


def compare_projects(plain: Path, bad: Path) -> Renaming:
    """Assert that the saved design ``bad`` (hostile names) is ``plain`` with other names."""
    a, b = text_files(plain), text_files(bad)
    assert len(a) == len(b), f"{len(a)} files with plain names, {len(b)} with hostile ones"
    ren = Renaming()
    for (pa, ta), (pb, tb) in zip(a.items(), b.items(), strict=True):
        where = f"{pb} (plain: {pa})"
        compare_tokens(cpp_tokens(pa), cpp_tokens(pb), ren, f"file name {where}")
        assert "\x00" not in tb and "\r" not in tb, f"{where}: a NUL or CR reached the file"
        suffix = Path(pa).suffix
        name = Path(pa).name
        if suffix in CPP:
            compare_tokens(cpp_tokens(ta), cpp_tokens(tb), ren, where)
        elif suffix in HASH or name == "Makefile":
            compare_tokens(hash_comment_tokens(ta), hash_comment_tokens(tb), ren, where)
        elif suffix == ".py":
            compare_tokens(python_tokens(ta), python_tokens(tb), ren, where)
        elif suffix == ".svg":
            ea, eb = ET.fromstring(ta), ET.fromstring(tb)
            assert [e.tag for e in ea.iter()] == [e.tag for e in eb.iter()], f"{where}: other SVG elements"
        elif suffix == ".md":
            assert ta.count("\n") == tb.count("\n"), f"{where}: other lines"
            assert ta.count("`") == tb.count("`"), f"{where}: other code spans"
        elif suffix == ".json":
            pass  # design.json is JSON (every string escaped by the serialiser); checked by loading it back
        else:
            assert ta == tb, f"{where}: data differs"
    return ren
