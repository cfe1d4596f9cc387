"""Loading a config as upstream Trinity-RFT does: OmegaConf YAML, upstream's keys, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plans import make_raw
from trinity.common.config import ConfigError, load_config, parse_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_upstream_defaults_fill_what_the_file_leaves_out() -> None:
    config = parse_config({"model": {"model_path": "m"}})
    assert config.mode == "both" and config.project == "Trinity-RFT" and config.name == "rft"
    assert config.algorithm.algorithm_type == "ppo" and config.algorithm.repeat_times == 1
    assert config.algorithm.optimizer.lr == 1e-6 and config.algorithm.optimizer.weight_decay == 0.01
    assert config.explorer.rollout_model.engine_type == "auto" and config.explorer.runner_per_model == 8
    assert config.synchronizer.sync_method == "nccl" and config.trainer.trainer_type == "verl"
    assert config.trainer.use_dynamic_bsz is True and config.cluster.ray_address == "auto"
    assert config.source.explicit == frozenset({"model", "model.model_path"})


def test_yaml_is_read_as_omegaconf_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_LR", "2e-5")
    monkeypatch.delenv("UNSET_VAR", raising=False)
    path = write(tmp_path, """
algorithm:
  optimizer:
    lr: 1e-6
    weight_decay: ${oc.env:TINY_LR}
model:
  model_path: ${oc.env:UNSET_VAR,fallback/model}
  max_response_tokens: 16
trainer:
  max_token_len_per_gpu: 4096
  trainer_config:
    critic:
      ppo_max_token_len_per_gpu: ${trainer.max_token_len_per_gpu}
""")
    config = load_config(path)
    assert config.algorithm.optimizer.lr == pytest.approx(1e-6)  # PyYAML would read the string "1e-6"
    assert config.algorithm.optimizer.weight_decay == pytest.approx(2e-5)  # a number from the environment
    assert config.model.model_path == "fallback/model"
    assert config.trainer.trainer_config["critic"]["ppo_max_token_len_per_gpu"] == 4096  # node interpolation


def test_numbers_in_strings_are_numbers_where_a_number_is_asked() -> None:
    config = parse_config(make_raw({"algorithm.optimizer.lr": "1e-5", "buffer.batch_size": "4",
                                    "trainer.use_dynamic_bsz": "false", "project": 2025}))
    assert config.algorithm.optimizer.lr == pytest.approx(1e-5) and config.buffer.batch_size == 4
    assert config.trainer.use_dynamic_bsz is False and config.project == "2025"
    with pytest.raises(ConfigError, match=r"^buffer\.batch_size: expected an integer, got str 'eight'$"):
        parse_config(make_raw({"buffer.batch_size": "eight"}))
    with pytest.raises(ConfigError, match=r"^algorithm\.optimizer\.lr: expected a number, got str 'fast'$"):
        parse_config(make_raw({"algorithm.optimizer.lr": "fast"}))


def test_missing_environment_variable_without_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    path = write(tmp_path, "model:\n  model_path: ${oc.env:NOT_SET_ANYWHERE}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: model.model_path: environment variable NOT_SET_ANYWHERE is not set and has no default; "
        "set it or write ${oc.env:NOT_SET_ANYWHERE,<default>}"
    )


@pytest.mark.parametrize(("override", "message"), [
    ({"trainer.save_intervl": 3}, r"^trainer\.save_intervl: unknown key; did you mean 'save_interval'\?$"),
    ({"buffer.train_tasks": {"path": "t"}},
     r"^buffer\.train_tasks: unknown key: this spelling of trinity-rft 0\.1 is now buffer\.explorer_input\.taskset$"),
    ({"trainer.trainer_num": 2}, r"^trainer\.trainer_num: unknown key: .* is now cluster\.gpu_per_node"),
    ({"buffer.explorer_input.taskset.prompt_key": "q"},
     r"is now buffer\.explorer_input\.taskset\.format\.prompt_key$"),
    ({"cluster.total_gpu_num": 8}, r"^cluster\.total_gpu_num: not a setting: it is derived from .*; remove it$"),
    ({"trainer.trainer_strategy": "megatron"}, r"'megatron' is not supported: Megatron-LM training is not supported"),
    ({"trainer.ulysses_sequence_parallel_size": 0}, r"^trainer\.ulysses_sequence_parallel_size: must be positive"),
    ({"synchronizer.sync_style": "whenever"}, r"^synchronizer\.sync_style: 'whenever' is not one of fixed, "),
    ({"model.lora_configs": [{"lora_rnak": 8}]}, r"^model\.lora_configs\[0\]\.lora_rnak: unknown key; did you mean"),
    ({"buffer.explorer_input.taskset.format.video_key": "clip"}, r"videos are not supported yet"),
    ({"mode": "explore_all"}, r"^mode: 'explore_all' is not one of both, colocate, explore, train, bench, serve$"),
    ({"algorithm.optimizer.lr_scheduler_type": "linear"}, r"is not one of constant, cosine$"),
    ({"algorithm.optimizer.clip_grad": 0.5}, r"clip_grad: 0\.5 differs from trainer\.grad_clip \(1\)"),
    ({"cluster.devices_per_node": 4, "cluster.gpu_per_node": 2}, r"are the same setting and disagree"),
])
def test_bad_or_unsupported_settings_are_one_line_naming_the_path(override: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config(make_raw(override))
    assert "\n" not in str(caught.value)


def test_devices_per_node_is_gpu_per_node() -> None:
    config = parse_config(make_raw({"cluster.gpu_per_node": None, "cluster.devices_per_node": 8}))
    assert config.cluster.gpu_per_node == 8


def test_inert_settings_are_accepted_and_recorded() -> None:
    config = parse_config(make_raw({"trainer.enable_preview": False, "log.group_by_node": True}))
    inert = dict(config.source.inert)
    assert "rollout previews are not logged" in inert["trainer.enable_preview"]
    assert "log.group_by_node" in inert
    # the default value of an inert setting is not worth a note
    assert "trainer.fix_actor_microbatch_loss_scale" not in inert


def test_load_config_names_the_file_and_applies_overrides_first(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  model_path: m\ntrainer:\n  save_intervl: 1\n")
    with pytest.raises(ConfigError, match=rf"^{path}: trainer\.save_intervl: unknown key"):
        load_config(path)
    good = write(tmp_path, "model:\n  model_path: m\nbuffer:\n  batch_size: ${trainer.save_interval}\n")
    assert load_config(good, {"trainer.save_interval": 4}).buffer.batch_size == 4
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    broken = write(tmp_path, "model: [unclosed\n")
    with pytest.raises(ConfigError, match=r"not valid YAML at line 2"):
        load_config(broken)
