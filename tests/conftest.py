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

# Longest first: the modules with the largest summed durations in the fresh-clone CI of 7e1dd5c
# (`pytest --durations=200`, 2-core VM under load: test_hw_project ~1,470 s, test_search ~900 s,
# test_attention ~550 s, test_hw_project_gemm ~530 s, test_narrow_types ~390 s, ...), then the
# modules added since that each build large designs (run-time masks, float rows).  Each is one or a
# few whole-design x86 builds, system runs or searches; minutes each on a 2-core machine.
HEAVY_FIRST = (
    "test_hw_project.py",
    "test_search.py",
    "test_attention.py",
    "test_attention_tagger.py",  # four whole-tagger x86 builds (one block: 4-5 min each uncached on the loaded 2-core VM; two blocks: about 7)
    "test_recurrent_grid_generated.py",  # seven x86 builds (grids of 1 to 4 tiles per chain), ~8 min serial
    "test_hw_project_gemm.py",
    "test_narrow_types.py",
    "test_cnn_rows.py",
    "test_runtime_masks.py",
    "test_masked_mean_dag.py",  # five pooled-tagger x86 builds, bf16 one of them (about 1-2 min each on the loaded 2-core VM)
    "test_masked_mean_onnx.py",  # eleven ONNX exports (dynamo ~35-50 s each) and two int8 emulations, ~3 min serial
    "test_cnn_rows_float.py",
    "test_cnn_rows_ddr.py",
    "test_activation.py",
    "test_names.py",
    "test_cnn_grouped.py",
    "test_masks.py",
    "test_keras_tf2onnx.py",
    "test_recurrent_sizes.py",
    "test_dense_streamed.py",
    "test_attention_bf16.py",
    "test_vector_activation.py",
    "test_hw_project_thesis.py",
    "test_vit.py",
    "test_hw_project_segmented.py",
    "test_keras_onnx.py",
    "test_from_hls4ml_keras.py",
    "test_resize.py",
    "test_vector_masked_softmax.py",
    "test_bf16_runtime_masks.py",
    "test_mask_pitch.py",
    "test_qonnx.py",  # ~200 fast cases and three float-scale x86 builds (the CNN about 2 min on the loaded VM)
    "test_onnx_mha_normalised.py",  # ten exports (five dynamo) imported both ways, two int8 emulations each, a quantize_static: ~3 min serial
    "test_cnn_bf16.py",  # issue 24 item 4: seven x86 builds (classifier, residual, tanh / PReLU, rows), ~3 min serial
    "test_recurrent_bf16.py",  # five x86 builds (row, column, compact; AIE and hybrid aggregation), ~3 min serial
    "test_batchnorm_forward.py",  # five models imported both ways, fp32 and int8 compiles / emulations: ~80 s serial
    "test_scale_shift.py",  # two x86 builds (int8, bf16: ~20-30 s each on the loaded VM), int8 / int16 / bf16 emulations: ~75 s serial
    "test_dense_post_fp32.py",  # one x86 build (an fp32 MLP with fused SiLU / softmax on VCK190, ~20-50 s) and 12 compiles: ~1 min serial
    "test_fp16.py",  # one x86 build (a 2-layer float16 chain on VEK385, ~45 s) and a few compiles: ~1 min serial
    "test_qonnx_channels_last.py",  # eight compiles of qonnx-made models, no x86 build: ~40 s serial (loaded VM)
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
