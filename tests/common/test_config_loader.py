"""YAML config loading: types, unknown keys, env interpolation, rules — each error one line with the path."""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity.common.config import Config, ConfigError, load_config, parse_config

MINIMAL = {"model": {"model_path": "m"}, "buffer": {"train_tasks": {"path": "t.jsonl"}}}


def with_(**sections: dict) -> dict:
    raw = {key: dict(value) for key, value in MINIMAL.items()}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return raw


def test_minimal_config_fills_defaults() -> None:
    config = parse_config(MINIMAL)
    assert isinstance(config, Config)
    assert config.mode == "both" and config.cluster.device == "auto"
    assert config.synchronizer.sync_method == "online" and config.trainer.use_torch_compile is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (with_(buffer={"batch_sise": 4}), "buffer.batch_sise: unknown key; did you mean 'batch_size'?"),
        (with_(buffer={"batch_size": "four"}), "buffer.batch_size: expected an integer, got str 'four'"),
        (with_(buffer={"batch_size": 0}), "buffer.batch_size: must be at least 1, got 0"),
        (with_(mode="trian"), "mode: 'trian' is not one of 'both', 'explore', 'train', 'bench'; did you mean 'train'?"),
        (with_(explorer={"engine_type": "vlm"}), "explorer.engine_type: 'vlm' is not one of 'hf', 'vllm'"),
        (with_(trainer={"use_torch_compile": "yes"}), "trainer.use_torch_compile: expected true or false"),
        (with_(model={"top_p": 1.5}), "model.top_p: must be in (0, 1]"),
        (with_(buffer={"eval_tasks": [{"path": "e", "repat_times": 2}]}), "buffer.eval_tasks[0].repat_times: unknown"),
        (with_(algorithm={"optimizer": {"lr": -1}}), "algorithm.optimizer.lr: must be positive"),
        ({"buffer": {"train_tasks": {"path": "t"}}}, "model.model_path: required"),
        (with_(cluster=[1, 2]), "cluster: expected a section (mapping), got list"),
    ],
)
def test_bad_values_name_the_dotted_path(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_environment_interpolation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_PATH", "/models/tiny")
    monkeypatch.setenv("STEPS", "7")
    raw = with_(model={"model_path": "${oc.env:TINY_PATH}"}, buffer={"total_steps": "${oc.env:STEPS}"})
    raw["name"] = "run-${env:MISSING_SUFFIX,a}"
    config = parse_config(raw)
    assert config.model.model_path == "/models/tiny"
    assert config.buffer.total_steps == 7
    assert config.name == "run-a"


def test_missing_environment_variable_without_default() -> None:
    with pytest.raises(ConfigError, match="environment variable NOT_SET_ANYWHERE_42 is not set"):
        parse_config(with_(model={"model_path": "${oc.env:NOT_SET_ANYWHERE_42}"}))


def test_load_config_reports_the_file(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "model:\n  model_path: m\nbuffer:\n  train_tasks:\n    path: t.jsonl\ntrainer:\n  save_interval: 3\n"
    )
    assert load_config(good, overrides={"trainer.save_interval": 5}).trainer.save_interval == 5
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  model_path: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: not valid YAML at line \d+"):
        load_config(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("modle:\n  model_path: m\n")
    with pytest.raises(ConfigError, match=r"typo.yaml: modle: unknown key; did you mean 'mode' or 'model'\?"):
        load_config(typo)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.yaml")
