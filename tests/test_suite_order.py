"""tests/conftest.py's session order: the modules it runs first exist, and a collection puts them
first, each module's tests together and in their own order."""

from __future__ import annotations

from pathlib import Path

import conftest

HERE = Path(__file__).resolve().parent


def test_every_module_run_first_is_a_test_module():
    for name in conftest.HEAVY_FIRST:
        assert (HERE / name).is_file(), f"tests/conftest.py names {name}, which is not in tests/"
    assert len(set(conftest.HEAVY_FIRST)) == len(conftest.HEAVY_FIRST)


class _Item:
    def __init__(self, nodeid):
        self.nodeid = nodeid


def test_heavy_modules_go_first_then_by_test_count_and_tests_keep_their_order():
    ids = ["tests/test_a.py::x", "tests/test_a.py::y",
           "tests/test_b.py::p", "tests/test_b.py::q", "tests/test_b.py::r",
           "tests/test_names.py::n1", "tests/test_names.py::n2",
           "tests/test_attention_bf16.py::t"]
    items = [_Item(i) for i in ids]
    conftest.pytest_collection_modifyitems(None, None, items)
    assert [i.nodeid for i in items] == [
        "tests/test_names.py::n1", "tests/test_names.py::n2",  # HEAVY_FIRST's order: names first
        "tests/test_attention_bf16.py::t",
        "tests/test_b.py::p", "tests/test_b.py::q", "tests/test_b.py::r",
        "tests/test_a.py::x", "tests/test_a.py::y",
    ]
