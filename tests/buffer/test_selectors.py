"""Task selectors (upstream's develop_selector.md): the built-in curriculum and BOTS selectors, a user's selector,
and the task scheduler that asks them for batches, feeds them each step's pass rates and checkpoints them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.buffer.factories import make_exp
from tests.plans import make_plan
from trinity.buffer.errors import TaskFileError, TaskPositionError
from trinity.buffer.selector import SELECTORS, BaseSelector, DataSource
from trinity.buffer.selector.selectors import BetaPassRates, DifficultyBasedSelector, OfflineEasy2HardSelector
from trinity.buffer.task_scheduler import TaskScheduler
from trinity.common.config import ConfigError
from trinity.common.config.schema.buffer import DataSelectorConfig

#: Six tasks with the pass rates of a weak and a strong reference model.
WEAK = [0.0, 0.1, 0.2, 0.5, 0.8, 0.9]
STRONG = [0.2, 0.4, 0.6, 0.9, 1.0, 1.0]


def records() -> list[dict[str, Any]]:
    return [{"raw": {"question": f"q{i}", "weak": WEAK[i], "strong": STRONG[i]}, "index": i} for i in range(6)]


def config(kind: str, **kwargs: Any) -> DataSelectorConfig:
    return DataSelectorConfig(selector_type=kind, seed=3, feature_keys=["weak", "strong"], kwargs=kwargs)


def scheduler(kind: str = "difficulty_based", batch: int = 2, **kwargs: Any) -> TaskScheduler[Any]:
    return TaskScheduler(records(), batch, total_epochs=2, selector=kind, selector_config=config(kind, **kwargs),
                         name="train")


def indices(batch: list[dict[str, Any]] | None) -> list[int]:
    assert batch is not None
    return [task["index"] for task in batch]


def test_easy_to_hard_serves_the_easiest_first_round_and_round() -> None:
    selector = OfflineEasy2HardSelector(DataSource([r["raw"] for r in records()]), config("offline_easy2hard"))
    assert list(selector.get_indices(4)) == [5, 4, 3, 2]
    assert list(selector.get_indices(4)) == [1, 0, 5, 4]
    restored = OfflineEasy2HardSelector(DataSource([r["raw"] for r in records()]), config("offline_easy2hard"))
    restored.load_state_dict(selector.state_dict())
    assert list(restored.get_indices(2)) == list(selector.get_indices(2)) == [3, 2]


def test_difficulty_based_picks_the_tasks_nearest_the_target_and_learns() -> None:
    selector = DifficultyBasedSelector(DataSource([r["raw"] for r in records()]),
                                       config("difficulty_based", target_reward=0.5, tau=0, rho=0.5, lamb=0.0))
    assert len(set(selector.get_indices(2).tolist())) == 2  # priors: every task at 0.5, two distinct ones
    # the policy does as the strong model on tasks 0 and 1: it is strong; tasks near 0.5 for it are the hard ones
    selector.feedback([0, 1], [0.2, 0.4])
    estimator = selector.estimator
    assert estimator.ability == pytest.approx(1.0, abs=1e-3)
    rates = estimator.predict(np.random.default_rng(0), sample=False)
    assert rates[0] < rates[5]  # easy tasks are now estimated above hard ones
    picked = selector.get_indices(2).tolist()
    closest = np.argsort(np.abs(rates - 0.5))[:2].tolist()
    assert sorted(picked) == sorted(closest)


def test_the_estimate_is_saved_whole() -> None:
    estimator = BetaPassRates(np.array([WEAK, STRONG]).T, m=8)
    estimator.update([2, 3], [0.5, 1.0])
    again = BetaPassRates(np.array([WEAK, STRONG]).T, m=8)
    again.load_state_dict(estimator.state_dict())
    assert np.array_equal(again.alphas, estimator.alphas) and again.ability == estimator.ability
    with pytest.raises(ValueError, match="for 6 tasks, the task set has 2"):
        BetaPassRates(np.zeros((2, 2))).load_state_dict(estimator.state_dict())


def test_the_scheduler_feeds_each_steps_pass_rates_and_resumes_exactly() -> None:
    tasks = scheduler(target_reward=0.5, tau=0.5)
    assert tasks.total_batches == 6  # 2 epochs of 6 // 2 batches
    first = indices(tasks.next_batch())
    step = [make_exp(f"g{i}", run, reward=float(run == 0), task_set="train", task_index=i)
            for i in first for run in range(4)]  # each task passed once in four: pass rate 0.25
    step.append(make_exp("other", 0, reward=1.0, task_set="eval", task_index=first[0]))  # another set's: ignored
    tasks.feedback(step)
    estimator = tasks.picker.estimator
    assert estimator.ability is not None
    saved = tasks.state_dict()
    rest = [indices(b) for b in iter(tasks.next_batch, None)]
    assert len(rest) == 5 and tasks.position.epoch == 2
    resumed = scheduler(target_reward=0.5, tau=0.5)
    resumed.load_state_dict(saved)
    assert [indices(b) for b in iter(resumed.next_batch, None)] == rest


def test_a_selector_needs_its_columns_and_a_sound_state() -> None:
    with pytest.raises(KeyError, match="record 0 has no 'hardness'"):
        TaskScheduler(records(), 2, selector="offline_easy2hard", name="train",
                      selector_config=DataSelectorConfig(selector_type="offline_easy2hard", feature_keys=["hardness"]))
    with pytest.raises(ValueError, match="needs exactly 2 feature_keys"):
        TaskScheduler(records(), 2, selector="difficulty_based",
                      selector_config=DataSelectorConfig(selector_type="difficulty_based", feature_keys=["weak"]))
    tasks = scheduler()
    with pytest.raises(TaskPositionError, match="cannot resume selector 'difficulty_based'"):
        tasks.load_state_dict({**tasks.state_dict(), "picker": {"estimator": {"alphas": [1.0], "betas": [1.0]}}})


@pytest.fixture
def reversed_selector() -> Iterator[None]:
    """A user's selector in the guide's shape, registered as a plugin registers it (removed afterwards)."""

    @SELECTORS.register_module("reversed")
    class Reversed(BaseSelector):
        def __init__(self, data_source: DataSource, config: Any) -> None:
            super().__init__(data_source, config)
            self.size = data_source.dataset_size
            self.current_index = 0
            self.seen: list[tuple[list[int], list[float]]] = []

        def get_indices(self, batch_size: int, return_extra_info: bool = False) -> list[int]:
            picked = [self.size - 1 - (self.current_index + k) % self.size for k in range(batch_size)]
            self.current_index += batch_size
            return picked

        def feedback(self, indices: list[int], values: list[float]) -> None:
            self.seen.append((indices, values))

        def state_dict(self) -> dict[str, Any]:
            return {"current_index": self.current_index}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.current_index = state_dict.get("current_index", 0)

    yield
    SELECTORS._items.pop("reversed", None)


def test_a_users_selector_is_asked_and_told(reversed_selector: None) -> None:
    tasks = TaskScheduler(records(), 4, total_steps=2, selector="reversed", name="train",
                          selector_config=DataSelectorConfig(selector_type="reversed"))
    assert indices(tasks.next_batch()) == [5, 4, 3, 2]
    tasks.feedback([make_exp("g5", 0, reward=1.0, task_set="train", task_index=5),
                    make_exp("g5", 1, reward=0.0, task_set="train", task_index=5)])
    assert tasks.picker.seen == [([5], [0.5])]
    assert indices(tasks.next_batch()) == [1, 0, 5, 4] and tasks.next_batch() is None


def test_selectors_are_named_in_the_config(tmp_path: Path) -> None:
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(f'{{"question": "q{i}", "answer": "a", "weak": {w}, "strong": {s}}}\n'
                            for i, (w, s) in enumerate(zip(WEAK, STRONG, strict=True))))
    section = {"buffer.explorer_input.taskset.path": str(data),
               "buffer.explorer_input.taskset.data_selector": {"selector_type": "difficulty_based",
                                                               "feature_keys": ["weak", "strong"],
                                                               "kwargs": {"tau": 0.5}}}
    plan = make_plan(section)
    taskset = plan.buffer.train_taskset
    assert taskset is not None and taskset.selector == "difficulty_based"
    tasks = TaskScheduler.for_training(plan.buffer)
    assert tasks.picker is not None and tasks.picker.tau == 0.5
    section["buffer.explorer_input.taskset.data_selector"] = {"selector_type": "difficulty", "feature_keys": []}
    with pytest.raises(ConfigError, match=r"selector_type: 'difficulty' is not one of sequential, shuffle, random, "
                                          r"difficulty_based, offline_easy2hard"):
        make_plan(section)
    section["buffer.explorer_input.taskset.data_selector"] = {"selector_type": "offline_easy2hard",
                                                              "feature_keys": ["hardness"]}
    with pytest.raises(TaskFileError, match=r"data_selector: .*record 0 has no 'hardness'"):
        TaskScheduler.for_training(make_plan(section).buffer)


def test_the_dry_run_builds_the_selector(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from trinity.cli.main import main

    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(f'{{"question": "q{i}", "answer": "a", "weak": {w}, "strong": {s}}}\n'
                            for i, (w, s) in enumerate(zip(WEAK, STRONG, strict=True))))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "ckpt"))
    quickstart = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "cpu.yaml"
    base = ["run", "--config", str(quickstart), "--dry-run", "--set", "buffer.explorer_input.eval_tasksets=[]",
            "--set", f"buffer.explorer_input.taskset.path={data}"]
    good = "{selector_type: difficulty_based, feature_keys: [weak, strong]}"
    assert main([*base, "--set", f"buffer.explorer_input.taskset.data_selector={good}"]) == 0
    assert "user code     selector difficulty_based" in capsys.readouterr().out
    bad = "{selector_type: difficulty_based, feature_keys: [weak, question]}"
    assert main([*base, "--set", f"buffer.explorer_input.taskset.data_selector={bad}"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "feature_keys ['weak', 'question'] must be numeric columns" in error[0]
