"""The device catalog: generation and board differences are catalog fields with sources, and no code
outside ``devices.py`` decides anything by a generation's name (issue 17, item 8)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import aieflow
from aieflow import model_zoo
from aieflow.devices import AIE1, AIE_ML, AIE_MLV2, DEVICES, VCK190, VEK280, VEK385
from aieflow.errors import ConfigError
from aieflow.gemm.memory import PL_MEMORY

PACKAGE = Path(aieflow.__file__).resolve().parent
GENERATION_NAMES = {"aie", "aie-ml", "aie-mlv2"}
GENERATION_VARS = {"gen", "generation"}


def _is_generation_name(node: ast.AST) -> bool:
    """``<...>.generation.name``, ``gen.name`` or ``generation.name``."""
    if not (isinstance(node, ast.Attribute) and node.attr == "name"):
        return False
    v = node.value
    return (isinstance(v, ast.Attribute) and v.attr == "generation") or (isinstance(v, ast.Name) and v.id in GENERATION_VARS)


def generation_decisions(source: str) -> list[str]:
    """Places in ``source`` that decide by generation instead of asking the catalog: a generation's
    name used anywhere but inside an f-string (comparisons, ``in``, dict lookups, ``.get``), a dict
    keyed by generation names, a generation-name string other than ``"aie"`` (which also names the
    recurrent aggregator), and comparisons of ``arch_macro``."""
    tree = ast.parse(source)
    in_fstring = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FormattedValue) for n in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        if _is_generation_name(node) and id(node) not in in_fstring:
            found.append(f"line {node.lineno}: generation name used in code")
        elif isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value in GENERATION_NAMES for k in node.keys
        ):
            found.append(f"line {node.lineno}: dict keyed by generation name")
        elif isinstance(node, ast.Constant) and node.value in GENERATION_NAMES - {"aie"}:
            found.append(f"line {node.lineno}: generation name {node.value!r}")
        elif isinstance(node, ast.Compare) and any(
            isinstance(n, ast.Attribute) and n.attr == "arch_macro" for n in [node.left, *node.comparators]
        ):
            found.append(f"line {node.lineno}: decision on arch_macro")
    return found


@pytest.mark.parametrize(
    "code",
    [
        'snake = device.generation.name == "aie"',
        'east = d.generation.name != "aie"',
        'ok = gen.name in ("aie", "aie-ml")',
        'hint = {"aie": "a", "aie-ml": "b"}.get(device.generation.name, "c")',
        "c = CONSTANTS[gen.name]",
        "c = TABLE[plan.device.generation.name]",
        'PLATFORM = {"aie": "xilinx_vck190_base_202320_1"}',
        'tag = "acc48" if device.generation.arch_macro < 20 else "acc64"',
        'memtile = name == "aie-ml"',
        "x = f'{pick(device.generation.name)}' if generation.name else 0",
    ],
)
def test_the_scan_finds_each_kind_of_generation_decision(code):
    assert generation_decisions(code), code


def test_the_scan_allows_names_in_messages_and_catalog_fields():
    code = (
        'raise ConfigError(f"not available on {device.generation.name}; {gen.name!r}")\n'
        "snake = device.generation.cascade_serpentine\n"
        'agg = "aie" if x else "hybrid"\n'
        "build(files, design.device.generation.arch_macro)\n"
        "n = node.name == layer.name\n"
    )
    assert generation_decisions(code) == []


def test_no_generation_decisions_outside_the_catalog():
    files = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "devices.py" or p.parent != PACKAGE)
    assert len(files) > 50  # the whole package was scanned
    bad = {str(p.relative_to(PACKAGE)): found for p in files if (found := generation_decisions(p.read_text()))}
    assert bad == {}


# ------------------------------------------------------------------ the fields and their sources

GENERATION_FIELDS = ("cascade_serpentine", "srs_shift_max", "ups_shift_max", "neighbour_memories")
DEVICE_FIELDS = ("vitis_platform", "gemm_design")


@pytest.mark.parametrize("gen", [AIE1, AIE_ML, AIE_MLV2], ids=lambda g: g.name)
def test_every_generation_field_for_decisions_has_a_source(gen):
    for name in GENERATION_FIELDS:
        assert gen.sources.get(name, "").strip(), f"{gen.name}: no source for {name}"


@pytest.mark.parametrize("device", DEVICES.values(), ids=lambda d: d.key)
def test_every_device_field_for_decisions_has_a_source(device):
    for name in DEVICE_FIELDS:
        assert device.sources.get(name, "").strip(), f"{device.key}: no source for {name}"


def test_cascade_snakes_on_aie1_only():
    # versal-devices.md "cascade": AIE 384-bit horizontal only (AM009: east on even rows, west on odd
    # ones); AIE-ML 512-bit horizontal and vertical (AM020: west to east on every row).
    assert (AIE1.cascade_serpentine, AIE_ML.cascade_serpentine, AIE_MLV2.cascade_serpentine) == (True, False, False)
    for gen in (AIE1, AIE_ML, AIE_MLV2):  # a serpentine cascade has no vertical link, and the other way round
        assert gen.cascade_serpentine != gen.cascade_vertical


def test_widest_accumulator_lanes_per_generation():
    # versal-devices.md "accumulators": AIE 48-bit lanes for 8/16-bit operands (80-bit for 32-bit
    # ones, not in the catalog's pairs); AIE-ML 32-bit / 64-bit lanes.
    assert AIE1.widest_accumulator_bits == 48
    assert AIE_ML.widest_accumulator_bits == 64 and AIE_MLV2.widest_accumulator_bits == 64


def test_fp32_is_native_exactly_where_the_catalog_has_an_fp32_mac_rate():
    # versal-devices.md: fp32 8 MACs/cycle on AIE, emulated on AIE-ML; bf16 only on AIE-ML.
    assert [("fp32" in g.float_types) for g in (AIE1, AIE_ML, AIE_MLV2)] == [True, False, False]
    for gen in (AIE1, AIE_ML, AIE_MLV2):
        assert ("fp32" in gen.float_types) == (("fp32", "fp32") in gen.macs_per_cycle)


def test_each_board_names_its_own_vitis_platform():
    platforms = [d.vitis_platform for d in DEVICES.values()]
    assert len(set(platforms)) == len(platforms)
    for d in DEVICES.values():
        assert d.vitis_platform.startswith(f"xilinx_{d.key}_base"), d.vitis_platform
    assert VCK190.vitis_platform == "xilinx_vck190_base_202320_1"
    assert VEK280.vitis_platform == "xilinx_vek280_base_202320_1"


def test_generated_makefile_asks_for_the_board_platform():
    x = np.random.default_rng(0).uniform(-1, 1, size=(8, 32)).astype(np.float32)
    for key, want in (("vck190", "xilinx_vck190_base_202320_1"), ("vek385", "xilinx_vek385_base")):
        d = aieflow.compile(model_zoo.qdq_mlp([32, 16]), device=key, example_input=x, calibration=x)
        assert f"/path/to/{want}.xpfm" in d.files["Makefile"]


def test_gemm_design_follows_the_board_memories():
    assert (VCK190.gemm_design, VEK280.gemm_design, VEK385.gemm_design) == ("pl-memory", "memtile", "memtile")
    for d in DEVICES.values():
        if d.gemm_design == "memtile":
            assert d.memory_tiles > 0
        if d.gemm_design == "pl-memory":
            assert d.key in PL_MEMORY  # the PL capacities the VCK190 design blocks for
    assert aieflow.gemm(64, 64, 64, dtype="int8", device="vek280", design="best").plan.memtile
    assert not aieflow.gemm(64, 64, 64, dtype="int8", device="vck190").plan.memtile
    assert aieflow.gemm(64, 64, 64, dtype="int8", device="vek385", design="best").plan.memtile
    with pytest.raises(ConfigError, match="vek385"):  # the published design is VCK190's
        aieflow.gemm(64, 64, 64, dtype="int8", device="vek385")
