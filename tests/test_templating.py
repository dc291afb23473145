"""The compiled-template cache (``aieflow.templating``): an entry is reused only by an environment
whose options generate the same code; it was keyed by the template alone (issue 23, item 6)."""

from __future__ import annotations

import jinja2
import pytest

from aieflow import templating

SOURCE = {"t.j2": "{{ x }}|{% if y %}{{ y }}{% endif %}"}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AIEFLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("AIEFLOW_TEMPLATE_CACHE", raising=False)
    return tmp_path / "templates"


def entries(folder):
    return sorted(p.name for p in folder.iterdir())


def render(env):
    return env.get_template("t.j2").render(x="<b>", y="")


def test_environments_with_other_options_do_not_share_an_entry(cache_dir):
    plain = templating.cached_environment(loader=jinja2.DictLoader(SOURCE))
    assert render(plain) == "<b>|"
    escaping = templating.cached_environment(loader=jinja2.DictLoader(SOURCE), autoescape=True)
    assert render(escaping) == "&lt;b&gt;|"
    shouting = templating.cached_environment(loader=jinja2.DictLoader(SOURCE), finalize=str.upper)
    assert render(shouting) == "<B>|"
    assert len(entries(cache_dir)) == 3


def test_the_same_options_reuse_the_entry(cache_dir):
    first = templating.cached_environment(loader=jinja2.DictLoader(SOURCE), autoescape=True)
    render(first)
    stored = entries(cache_dir)
    again = templating.cached_environment(loader=jinja2.DictLoader(SOURCE), autoescape=True)
    compiled = []
    original = again.compile
    again.compile = lambda *a, **k: compiled.append(a) or original(*a, **k)  # type: ignore[method-assign]
    assert render(again) == "&lt;b&gt;|"
    assert compiled == [] and entries(cache_dir) == stored  # loaded from the cache, not compiled


def test_a_key_keyed_by_the_template_alone_would_have_served_the_wrong_code(tmp_path):
    # the control: Jinja's own file cache, as aieflow used it, hands the unescaped template's code
    # to the escaping environment (so the test above can fail)
    bcc = jinja2.FileSystemBytecodeCache(str(tmp_path))
    render(jinja2.Environment(loader=jinja2.DictLoader(SOURCE), bytecode_cache=bcc))
    wrong = jinja2.Environment(loader=jinja2.DictLoader(SOURCE), autoescape=True, bytecode_cache=bcc)
    assert render(wrong) == "<b>|"


def test_another_jinja_version_gets_its_own_entry(cache_dir, monkeypatch):
    env = templating.cached_environment(loader=jinja2.DictLoader(SOURCE))
    key = templating._options_key(env)
    monkeypatch.setattr(jinja2, "__version__", "0.0.0")
    assert templating._options_key(env) != key


def test_a_damaged_entry_is_recompiled(cache_dir):
    render(templating.cached_environment(loader=jinja2.DictLoader(SOURCE)))
    (entry,) = cache_dir.iterdir()
    entry.write_bytes(b"not bytecode")
    assert render(templating.cached_environment(loader=jinja2.DictLoader(SOURCE))) == "<b>|"


def test_the_emitters_and_the_html_report_have_different_keys(cache_dir):
    templating.environment.cache_clear()
    templating.html_environment.cache_clear()
    try:
        code = templating.environment("project")
        html = templating.html_environment("report")
        assert code.bytecode_cache is not None and html.bytecode_cache is not None
        assert templating._options_key(code) != templating._options_key(html)
    finally:
        templating.environment.cache_clear()
        templating.html_environment.cache_clear()


def test_one_cache_shared_by_two_environments_keeps_their_code_apart(cache_dir):
    # the key is taken from the environment asking, not from the one the cache was made for
    shared = templating._bytecode_cache()
    plain = jinja2.Environment(loader=jinja2.DictLoader(SOURCE), bytecode_cache=shared)
    escaping = jinja2.Environment(loader=jinja2.DictLoader(SOURCE), autoescape=True, bytecode_cache=shared)
    assert render(plain) == "<b>|" and render(escaping) == "&lt;b&gt;|"
    assert len(entries(cache_dir)) == 2


def test_an_option_set_after_the_environment_was_made_counts(cache_dir):
    render(templating.cached_environment(loader=jinja2.DictLoader(SOURCE)))
    later = templating.cached_environment(loader=jinja2.DictLoader(SOURCE))
    later.autoescape = True  # before its first template: Jinja compiles with it
    assert render(later) == "&lt;b&gt;|"


def test_a_parse_time_policy_is_in_the_key(cache_dir):
    source = {"t.j2": "{% trans %}  a\n  b  {% endtrans %}"}
    trimmed = templating.cached_environment(loader=jinja2.DictLoader(source), extensions=["jinja2.ext.i18n"])
    trimmed.policies["ext.i18n.trimmed"] = True
    trimmed.install_null_translations()
    assert trimmed.get_template("t.j2").render() == "a b"
    kept = templating.cached_environment(loader=jinja2.DictLoader(source), extensions=["jinja2.ext.i18n"])
    kept.install_null_translations()
    assert kept.get_template("t.j2").render() == "  a\n  b  "
    assert len(entries(cache_dir)) == 2
