"""Code written from upstream Trinity-RFT's developer guide, loaded with ``--plugin-dir``, trains here unchanged.

Each plugin file below is the guide's code as a user writes it (the guide's
imports and class shapes; the glue a guide leaves to the reader, such as the
agent, is written the obvious way). Each runs as ``trinity run --config
examples/quickstart/cpu.yaml --plugin-dir DIR`` in a subprocess for two
steps: real Ray, the tiny model, the FSDP2 trainer, online sync.
"""

# ruff: noqa: E501 - the guides' code is quoted as written

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart" / "cpu.yaml"

#: develop_workflow.md, "Full Code Example".
GUIDE_FULL_EXAMPLE = '''
from typing import List

from trinity.common.experience import Experience
from trinity.common.models.model import ModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, Workflow


@WORKFLOWS.register_module("example_workflow")
class ExampleWorkflow(Workflow):
    can_reset: bool = True
    can_repeat: bool = True

    def __init__(self, task: Task, model: ModelWrapper, auxiliary_models: List):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.question = task.raw_task.get("question")
        self.answer = task.raw_task.get("answer")
        self.rollout_args = task.rollout_args

    def calculate_reward(self, response: str, truth: str) -> float:
        if response == truth:
            return 1.0
        else:
            return 0.0

    def run(self) -> List[Experience]:
        responses = self.model.chat(
            [{"role": "user", "content": f"Question:\\n{self.question}"}],
            n=self.rollout_args.n,
            temperature=self.rollout_args.temperature,
        )
        experiences = []
        for response in responses:
            reward: float = self.calculate_reward(response.response_text, self.answer)
            experiences.append(
                Experience(
                    tokens=response.tokens,
                    prompt_length=response.prompt_length,
                    reward=reward,
                    logprobs=response.logprobs,
                )
            )
        return experiences

    def reset(self, task: Task):
        self.question = task.raw_task.get("question")
        self.answer = task.raw_task.get("answer")

    def set_repeat_times(self, repeat_times, run_id_base):
        self.repeat_times = repeat_times
        self.run_id_base = run_id_base
'''

#: develop_workflow.md, "Using OpenAI API" (the agent is the reader's: here one call of the client).
GUIDE_OPENAI_API = '''
from typing import List

from trinity.common.experience import Experience
from trinity.common.models.model import ModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, Workflow


class MyAgent:
    def __init__(self, openai_client, question):
        self.client = openai_client
        self.question = question

    def run(self) -> str:
        reply = self.client.chat.completions.create(
            model=self.client.model_path, messages=[{"role": "user", "content": self.question}], max_tokens=8)
        return reply.choices[0].message.content or ""


@WORKFLOWS.register_module("example_openai_workflow")
class ExampleWorkflow(Workflow):

    def __init__(self, task: Task, model: ModelWrapper, auxiliary_models: List):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.model = model
        self.client = self.model.get_openai_client()
        self.agent = MyAgent(openai_client=self.client, question=task.raw_task["question"])
        self.answer = task.raw_task["answer"]

    def calculate_reward(self, response: str) -> float:
        return response.count(self.answer) / max(1, len(response))

    def run(self) -> List[Experience]:
        response = self.agent.run()
        reward = self.calculate_reward(response)
        experiences = self.model.extract_experience_from_history()
        for exp in experiences:
            exp.reward = reward
        return experiences
'''


def trinity_run(tmp_path: Path, plugin: str, workflow: str, *overrides: str) -> tuple[int, str, list[dict[str, Any]]]:
    """Run the quickstart for 2 steps with ``plugin`` loaded; return exit status, output and metrics rows."""
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    (folder / f"{workflow}.py").write_text(textwrap.dedent(plugin))
    return run_with_plugins(tmp_path, folder, "--set", f"buffer.explorer_input.default_workflow_type={workflow}",
                            *overrides)


def run_with_plugins(tmp_path: Path, folder: Path, *overrides: str) -> tuple[int, str, list[dict[str, Any]]]:
    """Run the quickstart for 2 steps with the plugins of ``folder``; return exit status, output and metrics rows."""
    ray_tmp = tempfile.mkdtemp(prefix="tru-", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    env = {k: v for k, v in os.environ.items() if k not in ("TRINITY_PLUGIN_DIRS", "RAY_ADDRESS")}
    env.update(TRINITY_CHECKPOINT_ROOT_DIR=str(tmp_path / "ckpt"), RAY_AUTH_MODE="disabled", RAY_TMPDIR=ray_tmp,
               TRINITY_TASKSET_PATH=str(REPO / "examples" / "quickstart" / "tasks" / "train.jsonl"))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "trinity.cli.main", "run", "--config", str(QUICKSTART), "--plugin-dir", str(folder),
             "--set", "buffer.total_steps=2",
             "--set", "buffer.explorer_input.eval_tasksets=[]", "--set", "explorer.eval_on_startup=false",
             "--set", "monitor.progress=false", *overrides],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400, check=False)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    metrics = tmp_path / "ckpt" / "quickstart" / "toy-repeat-grpo" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    return done.returncode, done.stderr, rows


def test_the_workflow_guides_full_example_trains_two_steps(tmp_path: Path) -> None:
    code, output, rows = trinity_run(tmp_path, GUIDE_FULL_EXAMPLE, "example_workflow")
    assert code == 0, output[-3000:]
    train = [r["metrics"] for r in rows if r["phase"] == "train"]
    assert [r["step"] for r in rows if r["phase"] == "train"] == [1, 2]
    assert all(m["rows"] == 128 for m in train)  # 8 tasks x 16 rollouts of one chat call each, 8 groups


@pytest.mark.parametrize("repeats", [4])
def test_the_workflow_guides_openai_api_example_trains_two_steps(tmp_path: Path, repeats: int) -> None:
    code, output, rows = trinity_run(
        tmp_path, GUIDE_OPENAI_API, "example_openai_workflow",
        "--set", "explorer.rollout_model.enable_openai_api=true", "--set", "explorer.rollout_model.enable_history=true",
        "--set", f"algorithm.repeat_times={repeats}")
    assert code == 0, output[-3000:]
    train = [r["metrics"] for r in rows if r["phase"] == "train"]
    assert len(train) == 2 and all(m["rows"] == 8 * repeats for m in train)  # one recorded call per run


@pytest.mark.parametrize("setting", ["buffer.explorer_input.default_workflow_type=exact_answer",
                                     "buffer.explorer_input.taskset.default_reward_fn_type=share_of_letter"])
def test_the_plugin_examples_train_as_their_readme_says(tmp_path: Path, setting: str) -> None:
    code, output, rows = run_with_plugins(tmp_path, REPO / "examples" / "plugins", "--set", setting)
    assert code == 0, output[-3000:]
    train = [r["metrics"] for r in rows if r["phase"] == "train"]
    assert len(train) == 2 and all(m["rows"] == 128 for m in train)
    explore = [r["metrics"] for r in rows if r["phase"] == "explore"]
    if "exact_answer" in setting:
        assert all("explore/exact/mean" in m for m in explore)  # the workflow's own metric reached the monitor
    else:
        assert "rewarded with 'share_of_letter'" in output  # the quickstart's workflow scored with the plugin's reward


def test_the_algorithm_guides_opmd_trains_two_steps(tmp_path: Path) -> None:
    """develop_algorithm.md's OPMD: its GroupAdvantage, PolicyLossFn and AlgorithmType, named by the config."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    shutil.copy(REPO / "tests" / "algorithm" / "guide_opmd_plugin.py", folder / "guide_opmd.py")
    code, output, rows = run_with_plugins(tmp_path, folder, "--set", "algorithm.algorithm_type=guide_opmd")
    assert code == 0, output[-3000:]
    train = [r["metrics"] for r in rows if r["phase"] == "train"]
    assert len(train) == 2 and all(m["rows"] == 128 for m in train)
    assert all("opmd_loss" in m for m in train)  # the guide's loss class computed the loss
    explore = [r["metrics"] for r in rows if r["phase"] == "explore"]
    assert all("pipeline/guide_opmd/group_advantages/group_baseline/mean" in m for m in explore)  # its metrics


def test_the_operator_guides_reward_filter_runs_in_a_training_run(tmp_path: Path) -> None:
    """develop_operator.md's RewardFilter (an ExperienceOperatorV1), named in the config's experience pipeline."""
    from tests.buffer.test_operators import GUIDE_OPERATOR

    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "reward_filter.py").write_text(GUIDE_OPERATOR)
    operators = "[{name: guide_reward_filter, args: {threshold: 0.0}}, {name: pass_rate_calculator}]"
    code, output, rows = run_with_plugins(tmp_path, folder, "--set",
                                          f"data_processor.experience_pipeline.operators={operators}")
    assert code == 0, output[-3000:]
    explore = [r["metrics"] for r in rows if r["phase"] == "explore"]
    train = [r["metrics"] for r in rows if r["phase"] == "train"]
    assert len(explore) == 2 and len(train) == 2
    assert all(m["pipeline/guide_reward_filter/filtered_count"] == 0 for m in explore)  # every reward is >= 0
    assert all("pipeline/pass_rate_calculator/selection/valid_ratio" in m for m in explore)


#: develop_workflow.md, "LLM-as-a-judge Support" (``self.do_something()`` is the reader's: one chat reply here).
GUIDE_JUDGE = '''
from typing import List, Optional

from trinity.common.experience import Experience
from trinity.common.models.model import ModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, Workflow


@WORKFLOWS.register_module("judged_workflow")
class MyWorkflow(Workflow):
    def __init__(
        self,
        *,
        task: Task,
        model: ModelWrapper,
        auxiliary_models: Optional[List[ModelWrapper]] = None,
    ):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.judge_model = self.auxiliary_models[0]  # OpenAI client auto-derived from ModelWrapper

    def do_something(self):
        return self.model.chat([{"role": "user", "content": self.task.raw_task["question"]}], max_tokens=4)[0]

    def run(self) -> List[Experience]:
        response = self.do_something()
        reward_response = self.judge_model.chat.completions.create(
            model=self.judge_model.model_path,
            messages=[
                {
                    "role": "system",
                    "content": "You are a judge. You need to give a score from 0 to 1 based on the quality of the answer.",
                },
                {
                    "role": "user",
                    "content": f"Question:\\n{self.task.raw_task['question']}\\nAnswer:\\n{response.response_text}\\nPlease give a score from 0 to 1.",
                },
            ],
            temperature=0.0,
            max_tokens=10,
        )
        # Parse the reward score
        reward = float(reward_response.choices[0].message.content.strip())
        return [
            Experience(
                tokens=response.tokens,
                prompt_length=response.prompt_length,
                reward=reward,
                logprobs=response.logprobs,
            )
        ]
'''


def test_the_workflow_guides_llm_judge_example_trains_two_steps(tmp_path: Path) -> None:
    """The judge is an auxiliary model no config key turns the API on for (upstream serves it anyway): a copy of
    the tiny model taught to answer every judging request with a score, as a real judge would."""
    from tests.models.teach import teach_replies
    from trinity.common.models.tiny import build_tiny_model

    system = "You are a judge. You need to give a score from 0 to 1 based on the quality of the answer."
    chats = [([{"role": "system", "content": system},
               {"role": "user", "content": f"Question:\nRepeat the letter {letter}.\nAnswer:\n{answer}\n"
                                           "Please give a score from 0 to 1."}], "0.5")
             for letter in "abcdefgh" for answer in (letter, "xyz", f"{letter} {letter}")]
    judge = teach_replies(build_tiny_model(tmp_path / "base"), tmp_path / "judge", chats, steps=150)
    auxiliary = f"[{{model_path: {judge}, max_prompt_tokens: 256, max_response_tokens: 8, max_model_len: 512}}]"
    code, output, rows = trinity_run(tmp_path, GUIDE_JUDGE, "judged_workflow", "--set", "cluster.gpu_per_node=3",
                                     "--set", "cluster.cpus_per_bundle=0.5",
                                     "--set", f"explorer.auxiliary_models={auxiliary}",
                                     "--set", "algorithm.repeat_times=4")
    assert code == 0, output[-3000:]
    train = [r["metrics"] for r in rows if r["phase"] == "train"]
    assert len(train) == 2 and all(m["rows"] == 32 for m in train)  # 8 tasks x 4 runs, one reply each
    explore = [r["metrics"] for r in rows if r["phase"] == "explore"]
    assert all(m["reward/mean"] == 0.5 for m in explore)  # every reward is the judge's score


def test_a_difficulty_based_run_feeds_its_selector_and_checkpoints_it(tmp_path: Path) -> None:
    """BOTS' selector on the quickstart's tasks, with two made-up reference pass rates per task."""
    source = REPO / "examples" / "quickstart" / "tasks" / "train.jsonl"
    tasks = tmp_path / "tasks.jsonl"
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    tasks.write_text("".join(json.dumps({**row, "weak": (i % 8) / 10, "strong": (i % 8) / 10 + 0.2}) + "\n"
                             for i, row in enumerate(rows)))
    selector = "{selector_type: difficulty_based, feature_keys: [weak, strong], kwargs: {target_reward: 0.5, tau: 0.5}}"
    code, output, metric_rows = run_with_plugins(
        tmp_path, tmp_path, "--set", f"buffer.explorer_input.taskset.path={tasks}",
        "--set", f"buffer.explorer_input.taskset.data_selector={selector}", "--set", "trainer.save_interval=2")
    assert code == 0, output[-3000:]
    assert len([r for r in metric_rows if r["phase"] == "train"]) == 2
    states = list((tmp_path / "ckpt" / "quickstart" / "toy-repeat-grpo").rglob("*.json"))
    saved = [json.loads(p.read_text()) for p in states if '"picker"' in p.read_text()]
    assert saved, [str(p) for p in states]
    picker = json.dumps(saved[-1])
    assert '"ability"' in picker and '"ability": null' not in picker  # the explored steps' pass rates were fed


@pytest.mark.parametrize("advantage", ["clipb", "clipv"])
def test_upstreams_entropy_clip_advantages_drop_tokens_in_a_training_run(tmp_path: Path, advantage: str) -> None:
    """``examples/entropy``'s algorithm section (grpo_verl with clipb / clipv) on the quickstart, a low ``mu``.

    The trainer recomputes the entropies (and Clip_V's N) before the update;
    some negative-advantage tokens leave the loss, no positive one does.
    """
    args = "{mu: 0.3}" if advantage == "clipb" else "{mu: 0.3, max_frac: 0.05}"
    code, output, rows = run_with_plugins(
        tmp_path, tmp_path, "--set", "algorithm.algorithm_type=grpo_verl", "--set", f"algorithm.advantage_fn={advantage}",
        "--set", f"algorithm.advantage_fn_args={args}", "--set", "synchronizer.sync_interval=1")
    assert code == 0, output[-3000:]
    train = [r["metrics"] for r in rows if r["phase"] == "train"]
    assert len(train) == 2
    assert all(m["advantage/frac_clipped_pos"] == 0.0 for m in train)
    assert any(m["advantage/frac_clipped_neg"] > 0.0 for m in train), train
    assert all(0.0 < m["advantage/frac_clipped"] < 1.0 for m in train if m["advantage/frac_clipped_neg"] > 0)
