"""The HTML report and the Pareto plot, checked in a real headless browser (issue 23, items 2 and 3).

A report of every design kind (chain, DAG, CNN, recurrent, streamed, segmented, GEMM), reports of
designs with hostile names, the Pareto plot of every kind explore covers (chain through ``explore
--plot``, DAG, CNN, recurrent and a stack) and two control pages (one that logs
to the console and fetches from the network, one blank, so the checks are seen to fail) are all
opened in one batch of ``chromium --headless`` runs (``browser.py``).  Each report must load
without a console message (the page has a Content-Security-Policy, so a fetch or a script would
log one), its DOM must hold the tables and the inline SVG pictures with the design's own figures
and names (read from design.json / the design, not from the renderer), and its screenshot must
show the pictures' and the tables' colours.  Without Debian's chromium package those tests skip;
the tests of the renderer's content, options and errors run anyway.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from browser import colour_pixels, hex_rgb, needs_chromium, open_pages
from bs4 import BeautifulSoup
from cases import build_design, design_case
from onnx_files import export_onnx

import aieflow
from aieflow.cli import main
from aieflow.errors import AieflowError, ConfigError
from aieflow.graph_io import json_default
from aieflow.pareto_plot import pareto_svg
from aieflow.protocol import ModelDesign

BANDS = Path(__file__).resolve().parent.parent / "src" / "aieflow" / "perf" / "bands.json"

# one design of every kind
KINDS = ["chain-vek280", "dag", "cnn", "recurrent", "streamed-dense", "segmented", "gemm-vck190"]
HOSTILE = ["chain-vck190", "dag", "cnn", "recurrent", "segmented"]
LAYER_BLUE = "#4e79a7"  # placement_svg.PALETTE[0]: the first layer's rectangle (and the first bar kind)
INTERFACE = "#e8e0d0"  # the placement picture's interface row
TABLE_HEAD = "#f0f3f7"  # the report's table headers
PICK = "#e15759"


def _json(d):
    return json.loads(json.dumps(d.to_json(), default=json_default))


def _html_text(s: str) -> str:
    """``s`` as the report's text: the C0 controls but tab and line breaks (which HTML / XML cannot
    hold) as U+FFFD, line breaks as an HTML parser gives them back."""
    s = re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f]", "\ufffd", s)
    return s.replace("\r\n", "\n").replace("\r", "\n")


@pytest.fixture(scope="module")
def designs():
    return {kind: build_design(kind) for kind in KINDS}


def _hostile(kind, tmp):
    import onnx
    from hostile import rename_onnx

    model, x, device, config = design_case(kind)
    if not isinstance(model, onnx.ModelProto):
        export_onnx(model, x, tmp / f"{kind}.onnx")
        model = onnx.load(str(tmp / f"{kind}.onnx"))
    model = rename_onnx(model, str(tmp / "INJECTED"), long_every=4)
    if kind == "segmented":  # the first Gemm streams: its (hostile) node name is the config key
        gemms = [n.name for n in model.graph.node if n.op_type in ("Gemm", "MatMul")]
        config = {**config, "layers": {gemms[0]: {"weights": "streamed"}}}
    return aieflow.compile(model, device=device, example_input=x[:2], calibration=x, config=config), x


@pytest.fixture(scope="module")
def hostile_designs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    return {kind: _hostile(kind, tmp) for kind in HOSTILE}


def _mlp_onnx(tmp: Path) -> tuple[Path, Path]:
    model, x, _, _ = design_case("chain-vek280")
    export_onnx(model, x, tmp / "mlp.onnx")
    np.save(tmp / "x.npy", x)
    return tmp / "mlp.onnx", tmp / "x.npy"


EXPLORED = ["dag", "cnn", "recurrent", "recurrent-stack"]  # + the chain, through the CLI


@pytest.fixture(scope="module")
def explorations():
    out = {}
    for kind in EXPLORED:
        model, x, device, config = design_case(kind)
        if kind == "recurrent":  # hidden 16: on hidden 8 the compact tile dominates every spread (a front of one)
            from aieflow.model_zoo import gru_classifier

            model = gru_classifier(n_h=16)
        out[kind] = aieflow.explore(model, device=device, example_input=x[:2], calibration=x, config=config)
    return out


@pytest.fixture(scope="module")
def pages(designs, hostile_designs, explorations, tmp_path_factory):
    """Every page of this file, opened in the browser in one batch."""
    tmp = tmp_path_factory.mktemp("pages")
    paths = []
    for kind, (d, x) in designs.items():
        paths.append(tmp / f"{kind}.html")
        d.report_html(paths[-1], data=x)
    for kind, (d, x) in hostile_designs.items():
        paths.append(tmp / f"hostile-{kind}.html")
        d.report_html(paths[-1], data=x)
    onnx_path, x_path = _mlp_onnx(tmp)
    assert main(["explore", str(onnx_path), "--calibration", str(x_path), "--precision", "int8", "--batch", "auto",
                 "--plot", str(tmp / "pareto.svg")]) == 0
    paths.append(tmp / "pareto.svg")
    for kind, ex in explorations.items():
        paths.append(tmp / f"pareto-{kind}.svg")
        paths[-1].write_text(pareto_svg(ex.front, ex.chosen, kind))
    (tmp / "control-noisy.html").write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'\"><title>c</title></head><body><table><tr><th>x</th></tr></table>"
        '<img src="https://example.invalid/x.png"><script>console.error("boom")</script></body></html>')
    (tmp / "control-blank.html").write_text('<!DOCTYPE html><html><head><meta charset="utf-8"><title>b</title></head>'
                                            "<body></body></html>")
    paths += [tmp / "control-noisy.html", tmp / "control-blank.html"]
    return open_pages(paths, tmp / "shots")


# -------------------------------------------------------------------------------- the browser


@needs_chromium
def test_the_checks_can_fail(pages):
    noisy, blank = pages["control-noisy.html"], pages["control-blank.html"]
    assert len(noisy.console) >= 2, noisy.stderr  # the blocked fetch and console.error
    assert any("example.invalid" in line for line in noisy.console)
    assert blank.console == ()
    assert colour_pixels(blank.screenshot, hex_rgb(LAYER_BLUE)) == 0
    assert colour_pixels(blank.screenshot, hex_rgb(TABLE_HEAD)) == 0


@needs_chromium
@pytest.mark.parametrize("kind", KINDS)
def test_the_report_loads_in_the_browser_without_console_messages(pages, kind):
    page = pages[f"{kind}.html"]
    assert page.returncode == 0, page.stderr[-2000:]
    assert page.console == (), page.console
    assert "</html>" in page.dom


@needs_chromium
@pytest.mark.parametrize("kind", KINDS)
def test_the_dom_holds_the_tables_and_the_pictures(pages, designs, kind):
    d, x = designs[kind]
    j = _json(d)
    soup = BeautifulSoup(pages[f"{kind}.html"].dom, "html.parser")
    assert not soup.find_all(["script", "img", "link", "iframe", "object", "embed"])
    # the stage table: one row per stage of design.json's breakdown, its time, and for a kernel
    # stage the range the kernel band (bands.json, read here as a file) puts its published time in
    kernel = next(b for b in json.loads(BANDS.read_text())["bands"] if b["class"] == "kernel")
    breakdown = j["performance"]["breakdown"]
    rows = soup.select("#stage-table tbody.af-array tr")
    assert [r.find_all("td")[0].get_text() for r in rows] == list(breakdown)
    for r, part in zip(rows, breakdown.values(), strict=True):
        cells = [c.get_text() for c in r.find_all("td")]
        assert float(cells[3].replace(",", "")) == pytest.approx(part["ns"], abs=0.051)
        if part.get("kind") == "kernel":
            lo, hi = (float(v.replace(",", "")) for v in cells[6].removesuffix(" ns").split(" .. "))
            assert lo == pytest.approx(part["ns"] / (1 + kernel["high"]), abs=0.051) and lo <= part["ns"]
            assert hi == pytest.approx(part["ns"] / (1 + kernel["low"]), abs=0.051) and hi >= part["ns"]
        else:
            assert cells[6] == "no band"
    # the system block (DDR to DDR): one row per stage of design.json's performance.system, its
    # time, its term and the system band's wording (bands.json: no published figure of the class)
    system = next(b for b in json.loads(BANDS.read_text())["bands"] if b["class"] == "system")
    sysj = j["performance"].get("system")
    if sysj is None:
        assert soup.select_one("#system-stages") is None
        assert f"not modelled for {j['kind']}" in soup.select_one("#system-none").get_text()
    else:
        srows = [[c.get_text() for c in r.find_all("td")] for r in soup.select("#system-stages tr") if r.find("td")]
        assert [r[0] for r in srows] == [f"system: {k}" for k in sysj["breakdown"]]
        for r, part in zip(srows, sysj["breakdown"].values(), strict=True):
            assert float(r[3].replace(",", "")) == pytest.approx(part["ns"], abs=0.051)
            assert r[2] == part["on"] and r[5] == part["note"]
            assert system["figures"] == 0 and r[6].startswith("no band (system: no published figure checked")
        assert sysj["bound"] in soup.select_one("#system-stages th").get_text()
    figures = {r.th.get_text(): r.td.get_text() for r in soup.select("#figures tr")}
    value, unit = figures["latency"].split()[:2]
    scale = {"ns": 1, "\u00b5s": 1e3, "ms": 1e6, "s": 1e9}[unit]
    assert float(value) * scale == pytest.approx(j["performance"]["latency_ns"], rel=0.005)
    assert figures["compute tiles"] == f"{j['performance']['tiles_used']} of {j['resources']['compute_tiles_available']}"
    # the pictures, inline: the design's own placement picture and one bar per stage
    own = ET.fromstring(d.placement_svg())
    want = [e.get("data-layer") for e in own.iter() if e.tag.endswith("rect") and e.get("class") == "layer"]
    placement = soup.select_one("#placement svg")
    assert placement is not None and [e.get("data-layer") for e in placement.select("rect.layer")] == want
    assert [g.get("data-stage") for g in soup.select("#breakdown svg g.af-bar")] == list(breakdown)
    # numerics: every tensor with the type the design gave it (a GEMM: its operand types)
    tensors = [[c.get_text() for c in r.find_all("td")] for r in soup.select("#tensor-table tbody tr")]
    if isinstance(d, ModelDesign):
        assert [(t[0], t[2]) for t in tensors] == [(n, str(t.dtype)) for n, t in d.graph.tensors.items()]
        assert len(soup.select("#layer-table tbody tr")) == len(d.graph.nodes)
    else:
        assert [(t[0], t[2]) for t in tensors] == [(k, str(v)) for k, v in j["types"].items()]
    assert soup.select_one("#verify-status").get_text().startswith("not verified")
    assert (soup.select_one("#accuracy-table") is not None) == (x is not None)


@needs_chromium
@pytest.mark.parametrize("kind", KINDS)
def test_the_screenshot_shows_the_pictures_and_the_tables(pages, kind):
    shot = pages[f"{kind}.html"].screenshot
    assert colour_pixels(shot, hex_rgb(LAYER_BLUE)) > 100  # a layer's rectangle, a bar
    assert colour_pixels(shot, hex_rgb(INTERFACE)) > 100  # the placement picture's interface row
    assert colour_pixels(shot, hex_rgb(TABLE_HEAD)) > 100  # table headers


@needs_chromium
@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_names_stay_text_in_the_browser(pages, hostile_designs, kind):
    d, _ = hostile_designs[kind]
    page = pages[f"hostile-{kind}.html"]
    assert page.returncode == 0 and page.console == (), page.console  # no script ran, nothing fetched
    soup = BeautifulSoup(page.dom, "html.parser")
    assert not soup.find_all(["script", "img", "iframe", "object", "embed"])
    assert not [a for e in soup.find_all(True) for a in e.attrs if a.lower().startswith("on")]
    # the names come back as the same text, markup included
    names = [_html_text(r.find_all("td")[0].get_text()) for r in soup.select("#stage-table tbody.af-array tr")]
    assert names == [_html_text(n) for n in _json(d)["performance"]["breakdown"]]
    tensors = [_html_text(r.find("td").get_text()) for r in soup.select("#tensor-table tbody tr")]
    assert tensors == [_html_text(n) for n in d.graph.tensors]
    assert any("<script>" in n for n in tensors)  # the hostile names did reach the page
    assert colour_pixels(page.screenshot, hex_rgb(TABLE_HEAD)) > 100


@needs_chromium
@pytest.mark.parametrize("kind", ["chain", *EXPLORED])
def test_the_pareto_plot_shows_the_front_and_the_pick(pages, explorations, kind):
    page = pages["pareto.svg" if kind == "chain" else f"pareto-{kind}.svg"]
    assert page.returncode == 0 and page.console == (), page.console
    soup = BeautifulSoup(page.dom, "html.parser")
    assert len(soup.select("g.af-chosen")) == 2  # the pick, in both panels
    if kind in explorations:  # every point of the front in both panels
        ex = explorations[kind]
        assert len(soup.select("circle.af-point")) == 2 * (len(ex.front) + (ex.chosen not in ex.front))
    assert len(soup.select("circle.af-point")) > 4
    assert colour_pixels(page.screenshot, hex_rgb(PICK)) > 30
    assert colour_pixels(page.screenshot, hex_rgb(LAYER_BLUE)) > 30


# ---------------------------------------------------------------------- content without a browser


def test_every_kind_has_a_report_html(designs, tmp_path):
    for kind, (d, _) in designs.items():
        html = d.report_html(tmp_path / f"{kind}.html")
        assert (tmp_path / f"{kind}.html").read_text() == html
        assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_accuracy_is_against_the_float_model(designs):
    """The largest error shown is |predict - the torch model's own float output| (torch, not aieflow)."""
    import torch

    d, x = designs["chain-vek280"]
    model, _, _, _ = design_case("chain-vek280")
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).double().numpy()
    err = np.abs(d.predict(x) - ref)
    soup = BeautifulSoup(d.report_html(data=x), "html.parser")
    rows = {r.th.get_text(): r.td.get_text() for r in soup.select("#accuracy-table tr")}
    assert float(rows["largest |error|"]) == pytest.approx(err.max(), rel=1e-4)
    assert rows["samples"].startswith(f"{x.shape[0]} ")
    same = np.mean(np.argmax(d.predict(x), 1) == np.argmax(ref, 1))
    assert rows["same largest output (class)"] == f"{100 * same:.1f}% of samples"
    snr = 20 * math.log10(np.sqrt(np.mean(ref**2)) / np.sqrt(np.mean((d.predict(x) - ref) ** 2)))
    assert float(rows["signal-to-noise"].split()[0]) == pytest.approx(snr, abs=0.06)


def test_a_band_the_design_carries_is_shown(designs, monkeypatch):
    d, _ = designs["dag"]
    j = _json(d)
    first = next(iter(j["performance"]["breakdown"]))
    j["performance"]["breakdown"][first]["band_ns"] = [100.0, 140.5]
    monkeypatch.setattr(d, "to_json", lambda: j)
    soup = BeautifulSoup(d.report_html(), "html.parser")
    bands = [r.find_all("td")[6].get_text() for r in soup.select("#stage-table tbody.af-array tr")]
    kinds = [p.get("kind") for p in j["performance"]["breakdown"].values()]
    assert bands[0] == "100.0 .. 140.5 ns"
    assert all((b == "no band") == (k != "kernel") for b, k in zip(bands[1:], kinds[1:], strict=True))


class _Result:  # what every kind's verify result has: ok and verdict()
    def __init__(self, ok):
        self.ok = ok

    def verdict(self):
        return f"verify: {'PASS' if self.ok else 'FAIL'}, <b>16 samples</b>"


def test_the_verify_record_is_shown_and_a_stale_one_said(designs, tmp_path):
    from aieflow import verify_record

    d, _ = designs["recurrent"]
    out = d.save(tmp_path / "d")
    verify_record.write(out, _Result(True), samples=16, seed=3)
    soup = BeautifulSoup(d.report_html(verify=out), "html.parser")
    assert soup.select_one("#verify-status").get_text() == "verified: PASS, bit-exact"
    assert soup.select_one("#verify-verdict").get_text() == "verify: PASS, <b>16 samples</b>"  # text, not markup
    assert "seed 3" in soup.select_one("#verification").get_text()
    record = json.loads((out / "verify.json").read_text())
    record["design"] = "0" * 64  # written for another design.json
    (out / "verify.json").write_text(json.dumps(record))
    stale = BeautifulSoup(d.report_html(verify=out), "html.parser")
    assert stale.select_one("#verify-status").get_text().startswith("stale")
    aieflow.load(out)  # the record is no part of the design: it still loads, integrity checked
    fail = BeautifulSoup(d.report_html(verify=_Result(False)), "html.parser")
    assert fail.select_one("#verify-status").get_text() == "verified: FAIL"
    (out / "verify.json").write_text("[1, 2]")
    with pytest.raises(AieflowError, match="verify.json"):
        d.report_html(verify=out)
    with pytest.raises(ConfigError, match="verify="):
        d.report_html(verify={"passed": True})


def test_bad_data_and_paths_are_refused_by_name(designs, tmp_path):
    gemm, _ = designs["gemm-vck190"]
    with pytest.raises(ConfigError, match="GEMM"):
        gemm.report_html(data=np.zeros((2, 2)))
    d, x = designs["dag"]
    with pytest.raises(ConfigError, match="shape"):
        d.report_html(data=x[:, :5])
    with pytest.raises(ConfigError, match="no samples"):
        d.report_html(data=x[:0])
    with pytest.raises(ConfigError, match="is a directory"):
        d.report_html(tmp_path)


# --------------------------------------------------------------------------------- the CLI


def test_cli_report_html_with_data_and_verify_record(designs, tmp_path, capsys):
    d, x = designs["segmented"]
    out = d.save(tmp_path / "d")
    np.save(tmp_path / "x.npy", x)
    from aieflow import verify_record

    verify_record.write(out, _Result(True), samples=8, seed=0)
    html = tmp_path / "r" / "report.html"
    assert main(["report", str(out), "--html", str(html), "--data", str(tmp_path / "x.npy")]) == 0
    assert f"HTML report: {html}" in capsys.readouterr().out
    soup = BeautifulSoup(html.read_text(), "html.parser")
    assert soup.select_one("#verify-status").get_text() == "verified: PASS, bit-exact"
    assert soup.select_one("#accuracy-table") is not None
    assert main(["report", str(out), "--data", str(tmp_path / "x.npy")]) == 2
    assert "--data" in capsys.readouterr().err
    assert main(["report", str(out), "--html", str(tmp_path / "x.npy" / "r.html")]) == 2
    assert "--html" in capsys.readouterr().err


@pytest.mark.skipif(__import__("shutil").which("g++") is None, reason="g++ is not installed")
def test_cli_verify_writes_the_record_the_report_shows(designs, tmp_path, capsys):
    d, _ = designs["chain-vek280"]
    out = d.save(tmp_path / "d")
    assert main(["verify", str(out), "--samples", "8", "--quiet"]) == 0
    record = json.loads((out / "verify.json").read_text())
    assert record["ok"] is True and record["samples"] == 8 and "PASS" in record["verdict"]
    assert main(["report", str(out), "--html", str(tmp_path / "r.html")]) == 0
    soup = BeautifulSoup((tmp_path / "r.html").read_text(), "html.parser")
    assert soup.select_one("#verify-verdict").get_text() == record["verdict"]


def test_cli_explore_plot(tmp_path, capsys):
    onnx_path, x_path = _mlp_onnx(tmp_path)
    svg = tmp_path / "plots" / "front.svg"
    assert main(["explore", str(onnx_path), "--calibration", str(x_path), "--precision", "int8", "--json",
                 "--plot", str(svg)]) == 0
    ex = json.loads(capsys.readouterr().out)
    root = ET.parse(svg).getroot()
    circles = [e for e in root.iter() if e.tag.endswith("circle") and e.get("class") == "af-point"]
    # every point of the front in both panels (the pick among them, drawn as the pick)
    assert len(circles) == 2 * (len(ex["pareto_front"]) + (ex["chosen"] not in ex["pareto_front"]))
    assert main(["explore", str(onnx_path), "--calibration", str(x_path), "--plot", str(x_path / "p.svg")]) == 2
    assert "--plot" in capsys.readouterr().err


def test_pareto_svg_marks_a_pick_outside_the_front():
    from types import SimpleNamespace as P

    front = [P(tiles=2, latency_ns=900.0, sample_interval_ns=50.0, batch=8),
             P(tiles=8, latency_ns=300.0, sample_interval_ns=20.0, batch=8)]
    pick = P(tiles=16, latency_ns=250.0, sample_interval_ns=30.0, batch=1)
    root = ET.fromstring(pareto_svg(front, pick, title='<a "title">'))
    chosen = [e for e in root.iter() if e.get("class") == "af-chosen"]
    assert len(chosen) == 2  # one per panel
    titles = ["".join(e.itertext()) for e in chosen]
    assert all("pick: 16 tiles, batch 1" in t for t in titles)
    assert any(e.text == '<a "title">' for e in root.iter() if e.tag.endswith("text"))
    assert len([e for e in root.iter() if e.get("class") == "af-point"]) == 2 * 3


def test_a_design_compiled_with_a_target_shows_its_search():
    model, x, _, _ = design_case("chain-vek280")
    d = aieflow.compile(model, device="vek280", example_input=x[:2], calibration=x,
                        config={"precision": "int8", "target": "latency", "batch": "auto"})
    soup = BeautifulSoup(d.report_html(), "html.parser")
    ex = d.exploration
    assert len(soup.select("#exploration svg g.af-chosen")) == 2
    assert len(soup.select("#exploration circle.af-point")) == 2 * (len(ex.front) + (ex.chosen not in ex.front))
    plain, _ = build_design("chain-vek280")  # no target: no search to show
    assert BeautifulSoup(plain.report_html(), "html.parser").select_one("#exploration") is None


def test_the_per_sample_interval_counts_every_replica():
    """One interval delivers ``batch`` samples on each replica: 1,200 ns for a batch of 4 on 3
    replicas is 100 ns a sample (a design saved before ``replicas`` was common: one replica)."""
    from aieflow.html_report import _figures

    res = {"compute_tiles_available": 304}
    perf = {"latency_ns": 2000.0, "interval_ns": 1200.0, "batch": 4, "throughput_ops_per_s": 1e9, "bound": "x",
            "tiles_used": 12, "memory_tiles_used": 0}
    rows = dict(_figures({"performance": {**perf, "replicas": 3}, "resources": res}))
    assert "per batch of 4 on each of 3 replicas" in rows["interval"] and "(100 ns per sample)" in rows["interval"]
    rows = dict(_figures({"performance": perf, "resources": res}))
    assert "(300 ns per sample)" in rows["interval"] and "replicas" not in rows["interval"]
