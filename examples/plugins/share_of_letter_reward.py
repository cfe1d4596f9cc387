"""A reward in upstream Trinity-RFT's shape (a ``RewardFn`` class), registered as ``share_of_letter``.

Built with the task set's ``reward_fn_args`` and called with keywords, it
returns named parts that add up to the reward. With the quickstart:

    trinity run --config examples/quickstart/cpu.yaml --plugin-dir examples/plugins \
        --set buffer.explorer_input.taskset.default_reward_fn_type=share_of_letter

the quickstart's own workflow scores its rollouts with it.
"""

from __future__ import annotations

from typing import Any

from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn


@REWARD_FUNCTIONS.register_module("share_of_letter")
class ShareOfLetter(RewardFn):
    """The share of the response's characters that are the answer's letter, minus a length penalty."""

    def __init__(self, penalty_per_char: float = 0.0, **kwargs: Any) -> None:
        self.penalty_per_char = penalty_per_char

    def __call__(self, response: str, truth: Any = None, **kwargs: Any) -> dict[str, float]:
        letter = str(truth or "")[:1]
        text = response.strip()
        share = text.count(letter) / len(text) if text and letter else 0.0
        return {"share": share, "length_penalty": -self.penalty_per_char * len(text)}
