"""Every recipe under examples/ (upstream Trinity-RFT's schema) runs a few steps on the CPU with the tiny model.

One local Ray cluster serves all of them (a run joins the cluster of its
process); the tiny model is built once, by the first recipe, under the shared
checkpoint root the recipes read from ``TRINITY_CHECKPOINT_ROOT_DIR``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from trinity.common.config import load_config
from trinity.launcher import run_plan
from trinity.planner.run import resolve_run

REPO = Path(__file__).resolve().parents[2]
STEPS = 2


def run_example(recipe: str, root: Path, monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> list[dict[str, Any]]:
    """Run ``examples/<recipe>`` for :data:`STEPS` steps (with dotted-path ``overrides``); return its metric records."""
    monkeypatch.chdir(REPO)  # the recipes name their data relative to the repository
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(root))
    config = load_config(REPO / "examples" / recipe, {
        "trainer.total_steps": STEPS, "buffer.total_steps": STEPS, "monitor.progress": False,
        "monitor.plot": False, "monitor.monitor_type": "none", "cluster.cpus_per_bundle": 0.5, **overrides,
    })
    plan = resolve_run(config)
    assert run_plan(plan) == 0
    lines = (plan.run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def train_metrics(records: list[dict[str, Any]], *, learns: bool = True) -> list[dict[str, float]]:
    """Return the training steps' metrics; with ``learns`` every step must have had a gradient."""
    train = [r for r in records if r["phase"] == "train"]
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    for record in train:
        assert math.isfinite(record["metrics"]["loss"])
        assert record["metrics"]["grad_norm"] > 0 or not learns
    return [r["metrics"] for r in train]


def flat_group_rewards(steps: list[dict[str, float]]) -> None:
    """The random tiny model never writes math_workflow's answer format: every rollout gets the same -0.1, so the
    group advantages (and with a policy still equal to its reference, the whole loss) are 0."""
    for step in steps:
        assert step["reward_mean"] == pytest.approx(-0.1) and step["advantage_mean"] == 0.0


def test_grpo_gsm8k(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = run_example("grpo_gsm8k/gsm8k.yaml", root, monkeypatch)
    flat_group_rewards(train_metrics(records, learns=False))
    evals = [r for r in records if r["phase"] == "eval"]
    assert [r["step"] for r in evals] == [0, STEPS] and "gsm8k-eval/reward/mean" in evals[0]["metrics"]
    explore = [r for r in records if r["phase"] == "explore"]
    assert all(r["metrics"]["explore/stored_experiences"] == 16 for r in explore)  # 4 tasks x 4 rollouts


def test_sft_trains_on_the_assistant_tokens(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = train_metrics(run_example("sft/sft.yaml", root, monkeypatch))
    assert first["rows"] == 8 and second["sft_loss"] < first["sft_loss"] * 1.05
    assert 0 < first["tokens"] < 8 * 32  # only assistant tokens count


def test_dpo_starts_at_log_two(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, _ = train_metrics(run_example("dpo/dpo.yaml", root, monkeypatch))
    assert first["dpo_loss"] == pytest.approx(math.log(2), abs=1e-4)  # the policy is the reference at first
    assert first["rows"] == 8  # 4 pairs


def test_ppo_trains_a_critic(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = train_metrics(run_example("ppo/ppo.yaml", root, monkeypatch))
    assert all(math.isfinite(s["value_loss"]) and s["critic_grad_norm"] > 0 for s in steps)


def test_opmd_runs_with_the_explorer_ahead(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = run_example("opmd/opmd.yaml", root, monkeypatch)
    flat_group_rewards(train_metrics(records, learns=False))
    order = [(r["phase"], r["step"]) for r in records if r["phase"] in ("explore", "train")]
    assert order[:3] == [("explore", 1), ("explore", 2), ("train", 1)]  # sync_offset 1


def test_mix_adds_expert_rows(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for step in train_metrics(run_example("mix/mix.yaml", root, monkeypatch)):
        assert step["rows"] == 16 and step["expert_row_frac"] == 0.25
        assert math.isfinite(step["expert/sft_loss"])


def test_mix_with_ulysses_splits_expert_and_rollout_rows_alike(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's mix_chord recipe runs MIX with Ulysses 2: the expert (SFT) rows are split like the rollouts."""
    records = run_example("mix/mix.yaml", root, monkeypatch, **{
        "trainer.ulysses_sequence_parallel_size": 2, "cluster.gpu_per_node": 3, "name": "mix-ulysses"})
    for step in train_metrics(records):
        assert step["rows"] == 16 and step["expert_row_frac"] == 0.25
        assert math.isfinite(step["expert/sft_loss"]) and step["expert/sft_loss"] > 0


def test_ruler_rewards_come_from_the_judge(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny judge never writes a list of scores: every reward is 0, judge_success 0, the gold reward kept."""
    records = run_example("grpo_gsm8k_ruler/gsm8k_ruler.yaml", root, monkeypatch)
    for step in train_metrics(records, learns=False):
        assert step["reward_mean"] == 0.0 and step["advantage_mean"] == 0.0
    explore = [r["metrics"] for r in records if r["phase"] == "explore"]
    assert all(m["explore/judge_success/mean"] == 0.0 for m in explore)
    assert all(m["explore/gold_reward/mean"] == pytest.approx(-0.1) for m in explore)  # math_reward's format miss
    assert all(m["explore/stored_experiences"] == 16 for m in explore)


def test_grpo_lora_trains_an_adapter(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = run_example("grpo_lora_gsm8k/gsm8k.yaml", root, monkeypatch)
    flat_group_rewards(train_metrics(records, learns=False))
    state = json.loads(next((root / "examples" / "grpo-lora-gsm8k" / "checkpoints").glob("step-*/trainer_state.json"))
                       .read_text())
    assert state["lora"]["rank"] == 8  # the checkpoint holds the adapter (tests/e2e/test_lora_run.py: only it)


def test_grpo_ulysses_shares_each_sequence_over_two_ranks(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = run_example("grpo_ulysses_gsm8k/gsm8k.yaml", root, monkeypatch)
    flat_group_rewards(train_metrics(records, learns=False))
    evals = [r for r in records if r["phase"] == "eval"]
    assert [r["step"] for r in evals] == [0, STEPS]


def test_grpo_vlm_trains_on_images(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny vision-language model (built offline) rolls out on images and trains on the same images."""
    records = run_example("grpo_vlm/vlm.yaml", root, monkeypatch)
    steps = train_metrics(records, learns=False)
    assert all(step["rows"] == 16 and step["sync/checksum_match"] == 1 for step in steps)
    explore = [r["metrics"] for r in records if r["phase"] == "explore"]
    assert all(m["explore/failed"] == 0 and m["explore/experiences"] == 16 for m in explore)
    evals = [r for r in records if r["phase"] == "eval"]
    assert [r["step"] for r in evals] == [0, STEPS] and all(r["metrics"]["squares-eval/failed"] == 0 for r in evals)


def test_mix_vlm_trains_on_rollouts_and_expert_answers_with_images(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's mix_vlm shape: image rollouts and image SFT rows in one step, Ulysses 2 over packed rows."""
    records = run_example("mix_vlm/mix_vlm.yaml", root, monkeypatch)
    for step in train_metrics(records):
        # 4 of the 16 rows are expert rows; the fraction is averaged over token-sized micro-batches
        assert step["rows"] == 16 and 0.1 < step["expert_row_frac"] < 0.4
        assert math.isfinite(step["expert/sft_loss"]) and step["expert/sft_loss"] > 0
    explore = [r["metrics"] for r in records if r["phase"] == "explore"]
    assert all(m["explore/failed"] == 0 and m["explore/experiences"] == 12 for m in explore)
