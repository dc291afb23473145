"""The config's shape is a JSON Schema checked with ``jsonschema`` (issue 23, item 5): unknown keys
are refused with "did you mean" suggestions, wrong types are named with their key's path."""

from __future__ import annotations

import jsonschema
import onnx
import pytest

from aieflow.cli import main
from aieflow.config import config_schema, load_config_file, parse_config
from aieflow.errors import ConfigError
from aieflow.model_zoo import qdq_mlp


def refusal(raw) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    return e.value


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(config_schema())


@pytest.mark.parametrize("raw, message, hint", [
    ({"precison": "int8"}, "unknown config key(s) precison; allowed: activations, batch, cnn, layers, posts, "
     "precision, replicas, target", "did you mean 'precision'?"),
    ({"bacth": 8, "trget": "latency"}, "unknown config key(s) bacth, trget;",
     "did you mean 'batch' for 'bacth', 'target' for 'trget'?"),
    ({"layers": {"fc0": {"paralelism": {"cas_len": 2}}}}, "layers.fc0: unknown key(s) paralelism; allowed: accum,",
     "did you mean 'parallelism'?"),
    ({"layers": {"fc0": {"parallelism": {"cas_lne": 2}}}},
     "layers.fc0.parallelism: unknown key(s) cas_lne; allowed: cas_len, cas_num", "did you mean 'cas_len'?"),
    ({"layers": {"fc0": {"placement": {"colum": 1, "row": 0}}}}, "layers.fc0.placement must be [column, row]", None),
    ({"zzzz": 1}, "unknown config key(s) zzzz;", None),  # nothing close: no suggestion
])
def test_unknown_keys_are_refused_with_suggestions(raw, message, hint):
    e = refusal(raw)
    assert e.message.startswith(message)
    assert e.hint == hint


@pytest.mark.parametrize("raw, message", [
    ({"batch": 0}, "batch must be a positive integer, 'auto' or a list of positive integers, got 0"),
    ({"batch": True}, "batch must be a positive integer, 'auto' or a list of positive integers, got True"),
    ({"batch": [8, 2.0]}, "batch must be a positive integer, 'auto' or a list of positive integers, got [8, 2.0]"),
    ({"layers": {"fc0": {"parallelism": {"cas_len": 0}}}}, "layers.fc0.parallelism.cas_len must be a positive "
     "integer, got 0"),
    ({"layers": {"fc0": {"parallelism": {"cas_num": "2"}}}}, "layers.fc0.parallelism.cas_num must be a positive "
     "integer, got '2'"),
    ({"layers": {"fc0": {"parallelism": 3}}}, "layers.fc0.parallelism must be a mapping {cas_len: L, cas_num: N}, "
     "got 3"),
    ({"layers": {"fc0": {"placement": [1, -1]}}}, "layers.fc0.placement must be [column, row] of non-negative "
     "integers"),
    ({"layers": {"fc0": {"weight": 8}}}, "layers.fc0.weight must be a numeric type such as"),
    ({"layers": {"fc0": None}}, "layers.fc0 must be a mapping of settings, got None"),
    ({"layers": []}, "layers must be a mapping from layer name to that layer's settings, got []"),
    ({"replicas": "many"}, "replicas must be a positive integer or 'auto', got 'many'"),
    ({"target": 3}, "target must be a target such as 'latency'"),
    ({"precision": 8}, "precision must be a precision name (int8, int16, a16w8, a8w4, fp32, bf16, fp16), got 8"),
])
def test_wrong_types_name_the_key_path(raw, message):
    assert refusal(raw).message.startswith(message)


def test_the_nearest_problem_to_the_top_is_reported_first():
    assert refusal({"layers": {"fc0": {"parallelism": {"cas_len": 0}}}, "bacth": 8}).message.startswith(
        "unknown config key(s) bacth")


def test_what_the_schema_accepts_the_parsers_still_check():
    # the schema checks shapes; names, types and limits stay the parsers' (with their messages)
    assert "unknown precision 'int4'" in refusal({"precision": "int4"}).message
    assert "cannot parse numeric type" in refusal({"layers": {"fc0": {"output": "fixed<8"}}}).message
    assert "larger than 4096" in refusal({"batch": 5000}).message
    assert "target" in refusal({"target": "fastest"}).message


def test_every_key_of_the_schema_parses_and_round_trips():
    raw = {"precision": "a16w8", "batch": [8, 16], "target": "latency, tiles <= 40", "replicas": 2,
           "activations": {"sigmoid": "hls4ml"}, "cnn": {},
           "layers": {"fc0": {"precision": "int16", "parallelism": {"cas_len": 2, "cas_num": 1},
                              "placement": {"col": 3, "row": 0}, "input": "fixed<16,6>", "weight": "int8",
                              "bias": "int<32>", "output": "fixed<16,6,RND_CONV,SAT>", "weights": "resident"},
                      "rnn": {"recurrent_weight": "int8", "recurrent_bias": "int<32>", "accum": "int<32>",
                              "activations": {"tanh": "exact"}, "mapping": {"row_reuse": 2}}}}
    config = parse_config(raw)
    assert config.layer("fc0").placement == (3, 0) and config.layer("fc0").cas_len == 2
    back = config.to_json()
    jsonschema.Draft202012Validator(config_schema()).validate(back)  # what design.json records validates
    assert parse_config(back) == config


def test_a_config_file_with_a_typo_on_the_command_line(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("layers:\n  fc0:\n    parallelism: {cas_len: 2}\n    precison: int16\n")
    with pytest.raises(ConfigError) as e:
        load_config_file(cfg)
    assert str(e.value).startswith("layers.fc0: unknown key(s) precison") and e.value.hint == "did you mean 'precision'?"
    model = tmp_path / "m.onnx"
    onnx.save(qdq_mlp([16, 8]), model)
    assert main(["compile", str(model), "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "error: layers.fc0: unknown key(s) precison" in err and "hint: did you mean 'precision'?" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()

