"""Module order of a test session, for ``make test``'s ``pytest -n auto --dist loadscope
--no-loadscope-reorder``.

loadscope hands each xdist worker one whole module at a time, in the order of the collection.
pytest-xdist's own reordering (on by default) sorts the modules by their number of tests, which
puts the few-test modules that each build one large design (minutes of g++) last: the run's tail
was one of them on one worker while the other sat idle.  Here the modules known to be the longest
go first (longest-job-first), then the rest by number of tests, as xdist would order them.  The
order of the tests inside a module is kept.  ``tests/test_suite_order.py`` checks that every name
below is a test module.
"""

from __future__ import annotations

from collections import Counter

# Longest first (each one or a few whole-design x86 builds or system runs; minutes each on a
# 2-core machine): the bf16 transformer tagger, the thesis project's two -O2 system-run builds, the
# hostile-name CNN verify, the rows U-Nets and classifiers, the ViT, the Keras models in four
# precisions, the segmented host.
HEAVY_FIRST = (
    "test_attention_bf16.py",
    "test_hw_project_thesis.py",
    "test_names.py",
    "test_cnn_rows.py",
    "test_vit.py",
    "test_keras_tf2onnx.py",
    "test_keras_onnx.py",
    "test_hw_project_segmented.py",
)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(session, config, items):
    counts = Counter(_module(item.nodeid) for item in items)

    def rank(item):
        mod = _module(item.nodeid)
        name = mod.rsplit("/", 1)[-1]
        first = HEAVY_FIRST.index(name) if name in HEAVY_FIRST else len(HEAVY_FIRST)
        return first, -counts[mod], mod

    items.sort(key=rank)  # stable: a module's tests keep their order
