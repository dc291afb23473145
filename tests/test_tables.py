"""The command line's tables (issue 23, item 5): ``rich`` tables on a terminal, the plain aligned
text everywhere else (pipes, files, the design reports that also go into generated files)."""

from __future__ import annotations

import re

import onnx
import pytest

import aieflow.tables
from aieflow.cli import main
from aieflow.model_zoo import qdq_mlp
from aieflow.tables import plain, render

ROWS = [["#", "", "tiles", "latency ns", "mapping"],
        ["1", "*", "2", "1,226", "row x1"],
        ["12", "", "30", "17", "column 4 rows x 2 tiles"]]


def test_plain_is_the_aligned_text_the_reports_always_had():
    assert plain(ROWS) == (
        "#      tiles  latency ns  mapping\n"
        "--  -  -----  ----------  -----------------------\n"
        "1   *  2      1,226       row x1\n"
        "12     30     17          column 4 rows x 2 tiles"
    )
    assert plain(ROWS, rule=False).splitlines()[1] == "1   *  2      1,226       row x1"
    assert render(ROWS, terminal=False) == plain(ROWS)


def test_on_a_terminal_a_rich_table_with_every_cell():
    text = render(ROWS, terminal=True, width=100)
    assert "\x1b[" in text and "─" in text  # styled, ruled: rich, not the plain text
    lines = [line for line in text.splitlines() if "column 4 rows" in line]
    assert len(lines) == 1
    assert lines[0].index("30") < lines[0].index("17")  # the cells of a row stay in order
    for cell in ("1,226", "row x1", "*"):
        assert cell in text
    # numbers are right-aligned: the shorter latency ends where the longer one does
    row1 = next(line for line in text.splitlines() if "1,226" in line)
    row2 = lines[0]
    assert row1.index("1,226") + len("1,226") == row2.index("17") + len("17")
    narrow = render(ROWS, terminal=True, width=40)  # fits the terminal: long cells wrap, none is lost
    visible = re.sub(r"\x1b\[[0-9;]*m", "", narrow)
    assert all(len(line) <= 40 for line in visible.splitlines()) and "column 4" in visible and "x 2" in visible


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "mlp.onnx"
    onnx.save(qdq_mlp([32, 64, 16], seed=1), path)
    return path


def test_explore_prints_a_rich_table_on_a_terminal_and_plain_text_into_a_pipe(model, capsys, monkeypatch):
    assert main(["explore", str(model), "--target", "latency", "--top", "3"]) == 0
    piped = capsys.readouterr().out
    assert "\x1b[" not in piped and piped.splitlines()[2].startswith("-")  # header, its rule of dashes
    monkeypatch.setattr(aieflow.tables, "_isatty", lambda stream: True)
    assert main(["explore", str(model), "--target", "latency", "--top", "3"]) == 0
    term = capsys.readouterr().out
    assert "\x1b[" in term and "─" in term
    # the same points: every number of the plain table's rows is in the terminal's
    for line in piped.splitlines()[3:]:
        for cell in line.split():
            assert cell in term


def test_plain_indents_and_right_aligns_the_columns_asked():
    rows = [["a", "1.5 ns", "x"], ["longer name", "1,234.0 ns", "yz"]]
    assert plain(rows, rule=False, indent="    ", right=(1,)) == (
        "    a                1.5 ns  x\n"
        "    longer name  1,234.0 ns  yz"
    )


def test_a_report_table_stays_aligned_whatever_the_names():
    # the reports' breakdowns were f-strings padded to 44 / 48 columns: a longer stage name pushed
    # its row's figures out of line; they are tables.plain now
    from aieflow.design_schema import breakdown_text

    long = "memtile_relay:" + "a_very_long_layer_name_from_a_model_file" * 2
    perf = {"batch": 4, "interval_ns": 1000.0,
            "breakdown": {"kernel:fc1": {"ns": 1000.0}, long: {"ns": 12.5}}}
    lines = breakdown_text(perf).splitlines()
    rows = [line for line in lines if line.rstrip().endswith("%")]
    assert len(rows) == 2 and rows[1].lstrip().startswith(long)
    assert rows[0].endswith("1,000.0 ns  100.0%") and rows[1].endswith("12.5 ns    1.2%")
    assert len(rows[0]) == len(rows[1])  # the figures end in the same columns


def test_devices_lists_each_device_as_an_aligned_table(capsys):
    assert main(["devices"]) == 0
    blocks: list[list[str]] = []
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("    "):
            blocks[-1].append(line)
        else:
            blocks.append([])  # a device's heading
    assert len(blocks) >= 3 and all(len(b) >= 8 for b in blocks)
    for block in blocks:  # within a device, every value starts in the same column
        starts = {re.match(r"    \S+(?: \S+)*?\s{2,}", line).end() for line in block}
        assert len(starts) == 1, block
