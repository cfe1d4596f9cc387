"""SFT/DPO batches straight from a data set, and the ``mix`` strategy's expert rows among rollout groups."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.buffer.factories import ids, make_exp, make_group
from trinity.buffer.dataset_source import DatasetSource, load_experiences
from trinity.buffer.errors import BufferExhaustedError, StorageTimeoutError, TaskPositionError
from trinity.buffer.mixing import MixStrategy, expert_rows
from trinity.buffer.sampling import SampleStrategy
from trinity.buffer.storage.jsonl import JsonlStorage
from trinity.common.config.plan.data import DatasetPlan
from trinity.common.config.schema import FormatConfig

REPO = Path(__file__).resolve().parents[2]


def experiences(count: int) -> list:
    return [make_exp(f"d{i}", reward=None) for i in range(count)]


def test_batches_run_over_the_epochs_then_the_source_is_exhausted() -> None:
    source = DatasetSource(experiences(5), 2, total_epochs=2, name="sft")
    served = []
    while True:
        try:
            served.append(ids(source.sample()))
        except BufferExhaustedError as exc:
            assert "data set 'sft' has served its 2 epoch(s)" in str(exc)
            break
    assert source.total_batches == 5
    assert served == [[("d0", 0), ("d1", 0)], [("d2", 0), ("d3", 0)], [("d4", 0), ("d0", 0)],
                      [("d1", 0), ("d2", 0)], [("d3", 0), ("d4", 0)]]


def test_a_restored_source_continues_with_the_next_batch() -> None:
    first = DatasetSource(experiences(6), 2, total_epochs=1, selector="shuffle", seed=3)
    first.sample()
    state = first.state_dict()
    expected = ids(first.sample())
    again = DatasetSource(experiences(6), 2, total_epochs=1, selector="shuffle", seed=3)
    again.load_state_dict(state)
    assert ids(again.sample()) == expected
    changed = DatasetSource(experiences(7), 2, total_epochs=1, selector="shuffle", seed=3)
    with pytest.raises(TaskPositionError, match="num_tasks 6 -> 7"):
        changed.load_state_dict(state)


def test_records_become_experiences_with_their_own_groups(tmp_path: Path) -> None:
    from tests.buffer.chat_fixtures import tiny_tokenizer

    data = DatasetPlan(name="sft", where="buffer.trainer_input.experience_buffer",
                       path=str(REPO / "examples" / "data" / "sft" / "messages"), split="train", subset_name=None,
                       format=FormatConfig(messages_key="messages"), schema="sft", total_epochs=1,
                       selector="sequential", seed=0)
    loaded = load_experiences(data, tiny_tokenizer(), cache_dir=str(tmp_path))
    assert len(loaded) == 22 and len({e.group_id for e in loaded}) == 22
    for experience in loaded:
        assert experience.action_mask is not None and 0 < int(experience.action_mask.sum()) <= len(experience.tokens)


def test_expert_rows_are_a_rounded_up_share() -> None:
    assert expert_rows(16, 0.25) == 4 and expert_rows(10, 0.25) == 3 and expert_rows(8, 0.0) == 0
    with pytest.raises(ValueError, match="expert_data_ratio must be in"):
        expert_rows(8, 1.5)


def test_mix_puts_marked_expert_rows_after_whole_rollout_groups(tmp_path: Path) -> None:
    storage = JsonlStorage(tmp_path / "buffer.jsonl", "rollouts")
    storage.put(make_group("g0", 2) + make_group("g1", 2))
    usual = SampleStrategy(storage, batch_size=2, group_size=2)
    mix = MixStrategy(usual, DatasetSource(experiences(3), 1, total_epochs=2, name="sft"))
    assert mix.batch_size == 2
    batch = mix.sample(trainer_version=0, timeout=1.0)
    assert ids(batch) == [("g0", 0), ("g0", 1), ("g1", 0), ("g1", 1), ("d0", 0)]
    rollouts, expert = batch[:4], batch[4]
    assert not any(e.is_expert for e in rollouts) and rollouts[1].reward == 1.0
    assert expert.is_expert and expert.reward == 0.0
    assert expert.logprobs is not None and torch.count_nonzero(expert.logprobs) == 0
    assert expert.advantages is not None and torch.count_nonzero(expert.advantages) == 0
    # an empty buffer times out before an expert row is taken: none is lost
    with pytest.raises(StorageTimeoutError):
        mix.sample(trainer_version=0, timeout=0.2)
    storage.put(make_group("g2", 2) + make_group("g3", 2))
    assert ids(mix.sample(trainer_version=0, timeout=1.0))[-1] == ("d1", 0)
    assert set(mix.state_dict()) == {"usual", "expert"}
