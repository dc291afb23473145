"""docs/hls4ml.md's aieflow side runs as written: its Python flow, its config (hls4ml's AP_ type
spellings included) and the refusal of an hls4ml key it quotes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import aieflow
from aieflow.errors import ConfigError

DOC = (Path(__file__).resolve().parents[1] / "docs" / "hls4ml.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC, flags=re.DOTALL)


class Net(torch.nn.Module):  # layers named as the page's config names them
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc0, self.fc1 = torch.nn.Linear(64, 32), torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.fc1(torch.relu(self.fc0(x)))


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)


def test_the_python_flow_runs_as_written(x, tmp_path, monkeypatch):
    (code,) = [b for b in blocks("python") if b.startswith("# aieflow")]
    monkeypatch.chdir(tmp_path)  # design.save("prj")
    env = {"model": Net().eval(), "x": x}
    exec(code.replace('print(design.verify().verdict())', 'verdict = "skipped: g++ build"'), env)  # noqa: S102
    design = env["design"]
    assert env["y"].dtype == np.float32 and env["y"].shape == (64, 10)
    assert (tmp_path / "prj" / "design.json").is_file()
    assert design.config.target.objective == "latency"


def test_the_config_compiles_with_the_types_it_gives(x):
    (cfg,) = [b for b in blocks("yaml") if b.startswith("# aieflow")]
    config = yaml.safe_load(cfg)
    design = aieflow.compile(Net().eval(), device="vck190", example_input=x[:8], calibration=x, config=config)
    fc1 = next(n for n in design.graph.nodes if n.name == "fc1" or "fc1" in n.aliases)
    assert fc1.types.weight.to_string() == "fixed<8,2,TRN,WRAP>"
    assert fc1.types.output.to_string() == "fixed<16,6,RND_CONV,SAT>"
    assert fc1.plan.cas_len == 2


def test_an_hls4ml_key_is_refused_as_the_page_says():
    with pytest.raises(ConfigError) as e:
        aieflow.compile(Net().eval(), example_input=np.zeros((8, 64), np.float32),
                        config={"layers": {"fc1": {"ReuseFactor": 2}}})
    assert "layers.fc1: unknown key(s) ReuseFactor; allowed:" in str(e.value)
    assert "layers.fc1: unknown key(s) ReuseFactor; allowed:" in DOC
