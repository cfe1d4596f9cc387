"""How many training steps a run of mode both announces (LR schedules and the progress line read it)."""

from __future__ import annotations

from typing import Any

from tests.plans import make_plan
from trinity.launcher.session import Session
from trinity.launcher.steps import total_train_steps

MIX = {
    "algorithm.algorithm_type": "mix", "algorithm.repeat_times": 4, "buffer.batch_size": 3,
    "buffer.train_batch_size": 16, "algorithm.sample_strategy_args": {"expert_data_ratio": 0.25},
    "buffer.trainer_input.auxiliary_buffers": {"sft_dataset": {
        "name": "sft", "storage_type": "file", "schema_type": "sft", "path": "examples/data/sft/messages",
        "format": {"prompt_type": "messages", "messages_key": "messages"}}},
}


def _session(overrides: dict[str, Any]) -> Session:
    return Session(make_plan(overrides), connection=None, selection=None, layout=None)  # type: ignore[arg-type]


def test_a_mix_step_trains_on_one_explorer_steps_rollouts_beside_its_expert_rows() -> None:
    """16 rows = 4 expert + 12 rollouts (3 tasks x 4): one training step per explorer step."""
    assert total_train_steps(_session(MIX), 6) == 6


def test_a_step_of_rollouts_alone_spans_its_share_of_explorer_steps() -> None:
    plain = {"algorithm.repeat_times": 4, "buffer.batch_size": 3, "buffer.train_batch_size": 24}
    assert total_train_steps(_session(plain), 6) == 3  # 24 rows = two explorer steps' 12
    assert total_train_steps(_session({**plain, "trainer.total_steps": 2}), 6) == 2
