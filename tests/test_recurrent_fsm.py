"""The hybrid PL FSM's packet-merge loop (templates/recurrent/rnn_fsm.h, ``fsm_step``) is what the
performance model charges: one 64-bit beat per PL cycle.  Read back from the emitted project: the
loop reads exactly one beat per iteration, holds no loop of its own (UG1399: a pipelined loop
unrolls the loops inside it, which a run-time bound forbids) and carries ``PIPELINE II=<the
model's II>``; the collector calls inside it loop only over constant bounds.  Its bit-exactness is
tests/test_recurrent_verify.py's, test_recurrent_column.py's and test_recurrent_stacked.py's x86
runs; here it also compiles against Xilinx's open ap_types headers."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from cases import build_design  # noqa: E402

LOOPS = re.compile(r"\b(for|while|do)\b\s*[({]")


@pytest.fixture(scope="module")
def design():
    d, _ = build_design("recurrent")
    assert {m.aggregation for m in d.mappings} == {"hybrid"}
    return d


def _block(text: str, start: int) -> str:
    """The text between the brace at or after ``start`` and its match (comments removed first)."""
    i = text.index("{", start)
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    raise AssertionError("unbalanced braces")


def _code(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def _merge_loop(fsm: str) -> tuple[str, str]:
    """(the loop's header, its body): the one loop of ``fsm_step`` that reads ``merged``."""
    step = _block(fsm, fsm.index("void fsm_step("))
    reads = [m.start() for m in re.finditer(r"merged\[\w+\]\.read\(\)", step)]
    assert len(reads) == 1, "fsm_step reads the merged streams in one place"
    heads = [m for m in re.finditer(r"\bwhile\s*\((.*?)\)\s*\{", step) if m.start() < reads[0]]
    assert heads, "the merged streams are read inside a while loop"
    head = heads[-1]
    body = _block(step, head.end() - 1)
    assert reads[0] < head.end() + len(body), "the read is in the innermost while loop's body"
    return head.group(1), body


def test_the_merge_loop_is_one_pipelined_beat_per_iteration(design):
    from aieflow.recurrent import costs

    fsm = _code(design.files["src/rnn_fsm.h"])
    cond, body = _merge_loop(fsm)
    # the pragma opens the body, for synthesis only (g++ -Wall flags unknown pragmas)
    m = re.match(r"\s*#ifdef __SYNTHESIS__\s*\n\s*#pragma HLS PIPELINE II=(\d+)\s*\n\s*#endif", body)
    assert m, body[:200]
    assert int(m.group(1)) == costs.PL_MERGE_II == 1
    # exactly one beat per iteration, no loop inside (a pipelined loop unrolls its inner loops)
    assert len(re.findall(r"\.read\(", body)) == 1
    assert not LOOPS.search(body), LOOPS.search(body)
    # the done check is state (open sources, words left), not a loop over the port's sources
    assert "fsm_port_done" not in fsm
    assert re.fullmatch(r"\s*left > 0 \|\| open > 0\s*", cond)
    # the functions the body calls: only the collector's accept / done, whose loops are constant-bound
    called = set(re.findall(r"\b(\w+)\s*\(", body)) - {"if", "read", "range", "to_int", "from_word", "done", "accept"}
    assert called == set(), called
    collect = _code(design.files["src/rnn_collect.h"])
    for name in ("accept", "done"):
        fn = _block(collect, collect.index(f"bool {name}("))
        for bound in re.findall(r"\bfor\s*\([^;]*;\s*\w+\s*<\s*([\w:]+)", fn):
            assert bound == "SLOTS" and "static constexpr int SLOTS" in collect, (name, bound)
        assert not re.search(r"\b(while|do)\b", fn)


def test_the_system_model_reads_the_merge_loops_ii(design):
    from aieflow.perf import system

    perf = design.to_json()["performance"]
    info = {"in_bytes": 4, "out_bytes": 4}
    base = system.for_project("recurrent", design.files, perf, design.device, info)
    assert {k.ii for k in base.pl_kernels} == {1}
    files = dict(design.files)
    files["src/rnn_fsm.h"] = files["src/rnn_fsm.h"].replace("PIPELINE II=1", "PIPELINE II=3")
    assert files["src/rnn_fsm.h"] != design.files["src/rnn_fsm.h"]
    slower = system.for_project("recurrent", files, perf, design.device, info)
    assert {k.ii for k in slower.pl_kernels} == {3}


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_the_fsm_compiles_against_xilinx_ap_types(design, tmp_path):
    from aieflow.vitis import ap_types_include

    ap = ap_types_include()
    if ap is None:
        pytest.skip("Xilinx's ap_types headers are missing: pip install hls4ml (it ships them)")
    for rel, text in design.files.items():
        if rel.startswith(("src/", "pl/")) and rel.endswith((".h", ".cpp")):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text)
    # as tests/test_hw_project.py builds PL sources: the Xilinx headers' own false positives aside
    flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas", "-Wno-maybe-uninitialized"]
    r = subprocess.run(["g++", *flags, "-isystem", str(ap), f"-I{tmp_path / 'src'}", "-c",
                        str(tmp_path / "pl/rnn_fsm.cpp"), "-o", str(tmp_path / "fsm.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (ap / "etc" / "ap_private.h").is_file()  # Xilinx's header, not aieflow's shim of it
