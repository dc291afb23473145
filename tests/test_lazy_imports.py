"""``import aieflow`` and ``aieflow compile`` of an ONNX Dense chain import only what they use
(issue 17, benchmarks: the CLI as a whole process is what users wait for)."""

from __future__ import annotations

import json
import subprocess
import sys

import onnx

from aieflow import model_zoo

HEAVY = ("torch", "onnxruntime", "jsonschema", "aieflow.gemm", "aieflow.cnn", "aieflow.dag", "aieflow.recurrent")


def _modules(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def _loaded(modules: set[str], prefix: str) -> bool:
    return any(m == prefix or m.startswith(prefix + ".") for m in modules)


def test_import_aieflow_imports_no_part_of_the_compiler():
    mods = _modules("import aieflow")
    assert "aieflow" in mods
    for heavy in (*HEAVY, "numpy", "onnx", "jinja2", "aieflow.api", "aieflow.design"):
        assert not _loaded(mods, heavy), heavy


def test_the_public_names_still_resolve():
    mods = _modules(
        "import aieflow\n"
        "assert callable(aieflow.compile) and callable(aieflow.load) and callable(aieflow.gemm)\n"
        "assert issubclass(aieflow.AieflowError, Exception) and aieflow.Design.__name__ == 'Design'\n"
        "from aieflow import emulate, explore, gemm\n"
        "assert gemm is aieflow.gemm and set(aieflow.__all__) <= set(dir(aieflow))\n"
        "try:\n    aieflow.no_such_name\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit(1)\n"
    )
    assert "aieflow.gemm" in mods and "aieflow.api" in mods


def test_cli_compile_of_an_onnx_dense_chain_imports_only_the_chain(tmp_path):
    model = tmp_path / "mlp.onnx"
    onnx.save(model_zoo.qdq_mlp([16, 32, 8]), model)
    out = tmp_path / "out"
    mods = _modules(
        "from aieflow.cli import main\n"
        f"assert main(['compile', {str(model)!r}, '--device', 'vek280', '--out', {str(out)!r}, '--quiet']) == 0\n"
    )
    assert (out / "design.json").is_file()
    for heavy in HEAVY:
        assert not _loaded(mods, heavy), heavy
