"""Resolving a config into a plan: upstream's derived values, names checked at load time, veRL keys mapped."""

from __future__ import annotations

import pytest

from tests.plans import make_config, make_plan
from trinity.common.config import ConfigError
from trinity.common.config.verl_keys import VERL_KEYS, read_trainer_config
from trinity.planner.model import resolve_lengths
from trinity.planner.stages import stage_configs

ACTOR = "trainer.trainer_config.actor_rollout_ref.actor"


@pytest.mark.parametrize(("given", "expected"), [
    ((2048, None, 1024, 0), (2048, 1024, 1024, 0)),   # upstream's gsm8k example
    ((None, 64, 8, 0), (72, 64, 8, 0)),
    ((100, None, None, 0), (100, 50, 50, 0)),
    ((100, 30, None, 0), (100, 30, 70, 0)),
    ((100, None, 200, 0), (100, 1, 99, 0)),           # the response is cut to leave one prompt token
    ((100, 30, 20, 25), (100, 30, 20, 19)),           # min_response_tokens below the maximum
])
def test_lengths_are_derived_as_upstream_derives_them(given: tuple, expected: tuple) -> None:
    assert resolve_lengths(*given) == expected


def test_contradicting_or_missing_lengths_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"\(64 \+ 64\) exceeds model\.max_model_len \(100\)"):
        resolve_lengths(100, 64, 64, 0)
    with pytest.raises(ConfigError, match="max_model_len: cannot be derived"):
        make_plan({"model.max_prompt_tokens": None})


def test_the_plan_fills_upstreams_defaults() -> None:
    plan = make_plan({"buffer.batch_size": 3, "algorithm.repeat_times": 4, "model.temperature": 0.7,
                      "buffer.explorer_input.taskset.rollout_args": {"top_p": 0.9}})
    taskset = plan.buffer.train_taskset
    assert taskset is not None and taskset.workflow == "toy_repeat" and taskset.repeat_times == 4
    assert taskset.sampling == {"temperature": 0.7, "top_p": 0.9, "top_k": 0, "max_tokens": 8, "logprobs": 0}
    assert plan.buffer.train_batch_size == 12  # batch_size x repeat_times
    assert plan.buffer.experience is not None and plan.buffer.experience.kind == "queue"
    assert plan.trainer.temperature == 0.7  # the trainer scales logits as the rollouts were sampled
    assert plan.ray_namespace == "tests/run" and plan.run_dir.name == "run"


def test_an_unknown_storage_type_gets_the_closest_one() -> None:
    where = r"^buffer\.trainer_input\.experience_buffer\.storage_type: "
    with pytest.raises(ConfigError, match=where + r"'sqlite' is not one of queue, sql, file; did you mean 'sql'\?$"):
        make_plan({"buffer.trainer_input.experience_buffer": {"name": "b", "storage_type": "sqlite"}})
    with pytest.raises(ConfigError, match=where + r"'queu' is not one of queue, sql, file; did you mean 'queue'\?$"):
        make_plan({"buffer.trainer_input.experience_buffer": {"name": "b", "storage_type": "queu"}})


def test_top_logprobs_asked_of_the_rollouts_are_noted_as_having_no_effect() -> None:
    plan = make_plan({"buffer.explorer_input.taskset.rollout_args": {"logprobs": 20}})
    taskset = plan.buffer.train_taskset
    assert taskset is not None and taskset.sampling["logprobs"] == 0
    assert any(n.startswith("buffer.explorer_input.taskset.rollout_args.logprobs: 20 has no effect here")
               for n in plan.notes), plan.notes


def test_eval_task_sets_take_the_eval_workflow_first() -> None:
    plan = make_plan({"buffer.explorer_input.default_eval_workflow_type": "math",
                      "buffer.explorer_input.eval_tasksets": [{"path": "e.jsonl"}, {"path": "f.jsonl", "name": "f",
                                                                "default_workflow_type": "guess_number"}]})
    first, second = plan.buffer.eval_tasksets
    assert (first.name, first.workflow, first.repeat_times) == ("eval_taskset_0", "math", 1)
    assert (second.name, second.workflow) == ("f", "guess_number")


def test_names_are_checked_before_anything_starts_with_the_closest_name() -> None:
    with pytest.raises(ConfigError, match=r"^buffer\.explorer_input\.default_workflow_type: unknown workflow "
                                          r"'toy_repat'; did you mean 'toy_repeat'"):
        make_plan({"buffer.explorer_input.default_workflow_type": "toy_repat"})
    with pytest.raises(ConfigError, match=r"^buffer\.explorer_input\.taskset\.default_workflow_type: unknown "
                                          r"workflow 'toy_repat'"):
        make_plan({"buffer.explorer_input.taskset.default_workflow_type": "toy_repat"})
    with pytest.raises(ConfigError, match=r"^buffer\.explorer_input\.eval_tasksets\[0\]\.default_reward_fn_type: "
                                          r"unknown reward function 'math_acuracy'; did you mean 'math_accuracy'"):
        make_plan({"buffer.explorer_input.eval_tasksets": [{"path": "e.jsonl",
                                                            "default_reward_fn_type": "math_acuracy"}]})
    with pytest.raises(ConfigError, match=r"^buffer\.explorer_input\.default_reward_fn_type: unknown reward"):
        make_plan({"buffer.explorer_input.default_reward_fn_type": "math_acuracy"})
    with pytest.raises(ConfigError, match=r"algorithm.*unknown algorithm 'grop'; did you mean 'grpo'"):
        make_plan({"algorithm.algorithm_type": "grop"})
    with pytest.raises(ConfigError, match=r"algorithm\.sample_strategy: unknown sample strategy 'defualt'"):
        make_plan({"algorithm.sample_strategy": "defualt"})
    with pytest.raises(ConfigError, match=r"operators\[0\]\.name: unknown experience operator 'scael'"):
        make_plan({"data_processor.experience_pipeline.operators": [{"name": "scael"}]})


def test_a_workflow_named_by_its_python_path_is_imported() -> None:
    plan = make_plan({"buffer.explorer_input.default_workflow_type": "trinity.common.workflows.math.MathWorkflow"})
    assert plan.buffer.train_taskset is not None
    with pytest.raises(ConfigError, match=r"unknown workflow 'examples\.bots\.Flow': not a registered name, and "
                                          r"importing it as a Python path failed \(ModuleNotFoundError"):
        make_plan({"buffer.explorer_input.default_workflow_type": "examples.bots.Flow"})


def test_sft_and_dpo_train_on_a_data_set_in_mode_train() -> None:
    sft = {"mode": "train", "algorithm.algorithm_type": "sft", "buffer.train_batch_size": 8,
           "buffer.trainer_input.experience_buffer": {"name": "sft", "storage_type": "file", "path": "sft.jsonl",
                                                      "format": {"prompt_type": "messages",
                                                                 "messages_key": "messages"}}}
    plan = make_plan(sft)
    assert plan.buffer.dataset is not None and plan.buffer.dataset.schema == "sft"
    assert plan.buffer.experience is None and plan.buffer.train_batch_size == 8
    assert plan.sync.method == "checkpoint"  # no explorer: weights are published as checkpoints, as upstream does
    with pytest.raises(ConfigError, match="sft trains on a data set, so it runs in mode train, not both"):
        make_plan({**sft, "mode": "both"})
    with pytest.raises(ConfigError, match=r"experience_buffer\.path: required: the DPO data set"):
        make_plan({**sft, "algorithm.algorithm_type": "dpo", "buffer.trainer_input.experience_buffer.path": None})


def test_sync_styles_resolve_to_upstreams_names() -> None:
    plan = make_plan({"synchronizer.sync_style": "explorer_driven", "synchronizer.sync_interval": 2})
    assert (plan.sync.style, plan.sync.interval) == ("explorer_driven", 2)
    assert make_plan({"synchronizer.sync_style": "dynamic_by_trainer"}).sync.style == "trainer_driven"
    assert make_plan({"synchronizer.sync_style": "dynamic_by_explorer"}).sync.style == "explorer_driven"
    assert make_plan({}).sync.style == "fixed"
    assert not any("sync_style" in note for note in plan.notes)


def test_experience_buffers_and_recording() -> None:
    plan = make_plan({"buffer.trainer_input.experience_buffer": {"name": "b", "storage_type": "sql",
                                                                "path": "sqlite:///exp.db"}})
    assert plan.buffer.experience is not None and plan.buffer.experience.kind == "sqlite"
    assert plan.buffer.experience.path.endswith("/exp.db")
    recorded = make_plan({"buffer.trainer_input.experience_buffer": {"name": "b", "storage_type": "queue",
                                                                    "path": "sqlite:///gsm8k.db"}})
    assert recorded.buffer.record_path is not None and recorded.buffer.record_path.endswith("/gsm8k.db")
    default = make_plan({"data_processor.experience_pipeline.save_input": True})
    assert default.buffer.record_path is not None and default.buffer.record_path.endswith(
        "run/buffer/explorer_output.db")
    with pytest.raises(ConfigError, match=r"only SQLite databases"):
        make_plan({"buffer.trainer_input.experience_buffer": {"storage_type": "sql", "path": "mysql://h/db"}})
    unrecorded = make_plan({"buffer.trainer_input.experience_buffer": {"storage_type": "queue", "path": "./buf"}})
    assert unrecorded.buffer.record_path is None
    assert any("not recorded anywhere (as upstream)" in note for note in unrecorded.notes)
    replay = make_plan({"buffer.trainer_input.experience_buffer": {"replay_buffer": {
        "enable": True, "priority_fn": "decay_limit_randomization", "reuse_cooldown_time": 5,
        "priority_fn_args": {"use_count_limit": 2}}}})
    assert replay.buffer.experience is not None and replay.buffer.experience.replay is not None
    assert replay.buffer.experience.replay.priority_fn == "decay_limit_randomization"
    assert replay.buffer.experience.replay.cooldown == 5
    assert replay.buffer.experience.replay.priority_fn_args == {"use_count_limit": 2}
    assert make_plan({}).buffer.experience.replay is None  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=r"replay_buffer.priority_fn: unknown priority function 'linear_decy'.*"
                                          r"did you mean 'linear_decay'"):
        make_plan({"buffer.trainer_input.experience_buffer": {"replay_buffer": {"enable": True,
                                                                               "priority_fn": "linear_decy"}}})
    with pytest.raises(ConfigError, match=r"reuse_cooldown_time: -1.* is negative"):
        make_plan({"buffer.trainer_input.experience_buffer": {"replay_buffer": {"enable": True,
                                                                               "reuse_cooldown_time": -1}}})
    both_file = make_plan({"buffer.trainer_input.experience_buffer": {"storage_type": "file", "path": "x.jsonl"}})
    assert both_file.buffer.experience is not None and both_file.buffer.experience.kind == "queue"
    assert any("a queue is used, as upstream does" in n for n in both_file.notes)


def test_verl_keys_map_onto_the_trainer() -> None:
    plan = make_plan({
        f"{ACTOR}.ppo_micro_batch_size_per_gpu": 2, f"{ACTOR}.ppo_epochs": 2, f"{ACTOR}.grad_clip": 0.5,
        f"{ACTOR}.clip_ratio_high": 0.28, "trainer.use_dynamic_bsz": True, "trainer.max_token_len_per_gpu": 512,
        "trainer.trainer_config.algorithm.rollout_correction.bypass_mode": False,
    })
    trainer = plan.trainer
    assert (trainer.batching.micro_batch_size, trainer.ppo_epochs, trainer.grad_clip) == (2, 2, 0.5)
    assert trainer.batching.use_dynamic_bsz and trainer.batching.max_token_len == 512
    assert trainer.recompute_old_logprobs
    assert plan.algorithm.policy_loss_options["clip_range_high"] == 0.28
    assert any("actor.clip_ratio_high is applied as algorithm.policy_loss_fn_args.clip_range_high" in n
               for n in plan.notes)


def test_a_token_budget_below_one_sequence_is_raised_to_it() -> None:
    plan = make_plan({"trainer.max_token_len_per_gpu": 16, "model.max_model_len": 72})
    assert plan.trainer.batching.max_token_len == 72


def test_ppo_critic_settings_come_from_the_critic_section() -> None:
    plan = make_plan({"algorithm.algorithm_type": "ppo", "algorithm.repeat_times": 1,
                      "trainer.trainer_config.critic": {"optim": {"lr": 1e-5}, "cliprange_value": 0.5,
                                                        "ppo_micro_batch_size_per_gpu": 3}})
    critic = plan.trainer.critic
    assert critic is not None and critic.optimizer.lr == 1e-5 and critic.cliprange_value == 0.5
    assert critic.batching.micro_batch_size == 3
    assert make_plan({"algorithm.algorithm_type": "ppo"}).trainer.critic.optimizer.lr == 1e-6  # type: ignore[union-attr]
    assert make_plan({}).trainer.critic is None  # GRPO trains no critic


def test_conflicting_and_refused_verl_keys() -> None:
    with pytest.raises(ConfigError, match=r"actor\.optim\.lr \(0\.1\) and algorithm\.optimizer\.lr \(0\.001\) set the "
                                          r"same thing differently; keep algorithm\.optimizer\.lr"):
        make_plan({f"{ACTOR}.optim.lr": 0.1})
    assert make_plan({f"{ACTOR}.optim.lr": 0.001}).trainer.optimizer.lr == 0.001
    with pytest.raises(ConfigError, match=r"enable_activation_offload: True is not supported: activation offloading"):
        make_plan({"trainer.trainer_config.actor_rollout_ref.model.enable_activation_offload": True})
    with pytest.raises(ConfigError, match=r"actor\.strategy: 'megatron' is not supported"):
        make_plan({f"{ACTOR}.strategy": "megatron"})
    with pytest.raises(ConfigError, match=r"unknown veRL key; did you mean 'actor_rollout_ref\.actor\.ppo_epochs'"):
        make_plan({f"{ACTOR}.ppo_epoch": 2})
    assert make_plan({f"{ACTOR}.fsdp_config.param_offload": False}).trainer is not None


def test_every_verl_key_of_upstreams_examples_is_known() -> None:
    used = {
        "actor_rollout_ref.actor.checkpoint.load_contents", "actor_rollout_ref.actor.checkpoint.save_contents",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "actor_rollout_ref.model.use_remove_padding",
        "actor_rollout_ref.model.enable_gradient_checkpointing", "actor_rollout_ref.hybrid_engine",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "critic.optim.lr", "critic.cliprange_value",
        "critic.ppo_max_token_len_per_gpu", "critic.forward_max_token_len_per_gpu", "trainer.balance_batch",
        "trainer.max_actor_ckpt_to_keep", "trainer.max_critic_ckpt_to_keep", "algorithm.rollout_correction.bypass_mode",
    }
    assert used <= set(VERL_KEYS)
    settings = read_trainer_config({"trainer": {"balance_batch": False}})
    assert settings.mapped == {} and settings.inert[0][0] == "trainer.trainer_config.trainer.balance_batch"


def test_stages_replace_whole_sections_and_run_in_their_own_folder() -> None:
    config = make_config({"stages": [
        {"stage_name": "sft_warmup", "mode": "train", "algorithm": {"algorithm_type": "sft"},
         "buffer": {"train_batch_size": 4, "trainer_input": {"experience_buffer": {
             "storage_type": "file", "path": "sft.jsonl", "format": {"messages_key": "messages"}}}}},
        {"stage_name": "rft"},
    ]})
    first, second = stage_configs(config)
    assert (first.name, first.mode, first.algorithm.algorithm_type) == ("run/sft_warmup", "train", "sft")
    assert (second.name, second.mode, second.algorithm.algorithm_type) == ("run/rft", "both", "grpo")
    assert first.trainer.save_hf_checkpoint == "last" and config.trainer.save_hf_checkpoint == "last"
    assert first.source.is_set("algorithm.algorithm_type") and not first.source.is_set("algorithm.optimizer.lr")
    assert config.stages and config.name == "run"  # the user's config is not rewritten


def test_the_hf_engine_batch_fits_a_step_unless_set() -> None:
    def batch(**overrides: object) -> int:
        return make_plan(overrides).explorer.rollout.max_batch_size

    # a step's rows per engine, so one generate call serves the step
    assert batch(**{"buffer.batch_size": 8, "algorithm.repeat_times": 16}) == 128
    assert batch(**{"buffer.batch_size": 8, "algorithm.repeat_times": 16,
                    "explorer.rollout_model.engine_num": 2, "cluster.gpu_per_node": 3}) == 64
    assert batch(**{"buffer.batch_size": 2, "algorithm.repeat_times": 3}) == 32  # at least 32: evaluation batches
    assert batch(**{"buffer.batch_size": 64, "algorithm.repeat_times": 16}) == 256  # bounded
    assert batch(**{"buffer.batch_size": 8, "algorithm.repeat_times": 16,
                    "explorer.rollout_model.max_batch_size": 24}) == 24
    with pytest.raises(ConfigError, match=r"explorer\.rollout_model\.max_batch_size: must be positive"):
        make_plan({"explorer.rollout_model.max_batch_size": 0})


def test_the_openai_api_settings_become_the_engine_groups_api_plan() -> None:
    on = {"explorer.rollout_model.enable_openai_api": True}
    assert make_plan().explorer.rollout.api is None
    api = make_plan({**on, "explorer.rollout_model.enable_history": True, "explorer.rollout_model.api_port": 9100,
                     "explorer.rollout_model.enable_auto_tool_choice": True,
                     "explorer.rollout_model.tool_call_parser": "hermes"}).explorer.rollout.api
    assert api is not None and api.history and api.auto_tool_choice and api.tool_call_parser == "hermes"
    assert api.port == 9100 and api.host is None  # the node's Ray address
    for overrides, message in [
        ({"explorer.rollout_model.enable_history": True},
         r"^explorer\.rollout_model\.enable_history: applies to the OpenAI API; set explorer\.rollout_model\."
         r"enable_openai_api: true"),
        ({**on, "explorer.rollout_model.tool_call_parser": "llama4"},
         r"^explorer\.rollout_model\.tool_call_parser: 'llama4' is not one of hermes$"),
        ({**on, "explorer.rollout_model.enable_auto_tool_choice": True},
         r"^explorer\.rollout_model\.enable_auto_tool_choice: needs explorer\.rollout_model\.tool_call_parser"),
        ({**on, "explorer.rollout_model.api_port": 70000}, r"api_port: 70000 is not a port"),
    ]:
        with pytest.raises(ConfigError, match=message):
            make_plan(overrides)


def test_an_external_auxiliary_model_takes_no_device_and_needs_its_url_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    judge = {"name": "judge", "engine_type": "external",
             "external_model_config": {"base_url_env": "TEST_JUDGE_URL", "model_name": "gpt-judge"}}
    monkeypatch.delenv("TEST_JUDGE_URL", raising=False)
    with pytest.raises(ConfigError, match=r"^explorer\.auxiliary_models\[0\]\.external_model_config\.base_url_env: "
                                          r"the environment variable TEST_JUDGE_URL is not set"):
        make_plan({"explorer.auxiliary_models": [judge]})
    monkeypatch.setenv("TEST_JUDGE_URL", "http://judge.example/v1")
    (aux,) = make_plan({"explorer.auxiliary_models": [judge]}).explorer.auxiliary
    assert aux.external is not None and aux.external.model_name == "gpt-judge" and aux.devices == 0
    assert aux.external.api_key_env == "OPENAI_API_KEY"
    with pytest.raises(ConfigError, match=r"^explorer\.rollout_model\.engine_type: 'external' is not one of auto, "
                                          r"vllm, hf$"):  # the policy is trained here: it runs on the run's engines
        make_plan({"explorer.rollout_model.engine_type": "external"})


def test_mode_serve_turns_on_the_openai_api_it_serves_with_a_note() -> None:
    served = make_plan({"mode": "serve"})
    assert served.explorer.rollout.api is not None
    assert any(n.startswith("explorer.rollout_model.enable_openai_api: turned on: mode serve") for n in served.notes)
    plan = make_plan({"mode": "serve", "explorer.rollout_model.enable_openai_api": True})
    assert plan.uses_explorer and not plan.uses_trainer and plan.buffer.experience is None
    with pytest.raises(ConfigError, match=r"service_status_check_interval: .* at least 1, got 0"):
        make_plan({"mode": "serve", "explorer.rollout_model.enable_openai_api": True,
                   "explorer.service_status_check_interval": 0})
