"""``toy_repeat``: a task a tiny, randomly initialised model learns with GRPO on a CPU in minutes.

The prompt asks to repeat a letter ("Repeat the letter b."); the reward
(``toy_repeat``) is the fraction of the response's characters, up to EOS,
that are that letter. A random policy over the tiny model's ~400 tokens
already scores a little (some of its ~400 tokens are or contain the letter:
about 0.01 on average over the default letters ``abcd``, 0.04 for ``a``) and
the score is graded, so GRPO groups have spread from the first step; a policy
that writes only the letter scores 1. Measured with the tiny model (hidden
64, 2 layers), 8 tasks x 16 rollouts, 8 new tokens, AdamW lr 2e-3, plain
GRPO on ``abcd``: the mean reward climbs from ~0.01 to ~0.6 by step 120 and
~0.99 by step 165 (about 21,000 rollouts; it must learn to read the letter
from the prompt). With one letter it takes ~30 steps.

:func:`write_toy_tasks` writes a deterministic task set (JSONL with
``question``/``answer`` keys, the task-set defaults). The quickstart's files
come from :func:`write_quickstart_tasks`::

    python -c "from trinity.common.workflows import write_quickstart_tasks as w; w('examples/quickstart/tasks')"
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any

from trinity.common.experience import Experience
from trinity.common.models.client import RolloutModel
from trinity.common.rewards import compute_reward
from trinity.common.workflows.base import Task, Workflow, WorkflowError, experience_from_completion

logger = logging.getLogger(__name__)

#: Letters of the default task sets.
DEFAULT_LETTERS = "abcd"
PROMPT = "Repeat the letter {letter}."


def toy_task(letter: str) -> dict[str, str]:
    """Return the task record asking to repeat ``letter``."""
    if len(letter) != 1:
        raise ValueError(f"a toy_repeat task needs one letter, got {letter!r}")
    return {"question": PROMPT.format(letter=letter), "answer": letter}


def toy_tasks(num_tasks: int, *, letters: str = DEFAULT_LETTERS, seed: int = 0) -> list[dict[str, str]]:
    """Return ``num_tasks`` task records: every letter equally often (as far as it divides), in a seeded order."""
    if num_tasks < 1 or not letters:
        raise ValueError(f"need at least one task and one letter, got {num_tasks} tasks and letters {letters!r}")
    chosen = [letters[i % len(letters)] for i in range(num_tasks)]
    random.Random(f"toy_repeat:{seed}").shuffle(chosen)
    return [toy_task(letter) for letter in chosen]


def write_toy_tasks(path: str | Path, num_tasks: int, *, letters: str = DEFAULT_LETTERS, seed: int = 0) -> Path:
    """Write :func:`toy_tasks` as JSONL to ``path`` (parents created) and return the path. Same input, same bytes."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(record, sort_keys=True) for record in toy_tasks(num_tasks, letters=letters, seed=seed)]
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def write_quickstart_tasks(folder: str | Path) -> tuple[Path, Path]:
    """Write the quickstart's ``train.jsonl`` (64 tasks) and ``eval.jsonl`` (16 tasks) into ``folder``."""
    root = Path(folder)
    return (
        write_toy_tasks(root / "train.jsonl", 64, seed=0),
        write_toy_tasks(root / "eval.jsonl", 16, seed=1),
    )


class ToyRepeatWorkflow(Workflow):
    """Chat "Repeat the letter X." and reward each of ``repeat_times`` answers with ``toy_repeat``."""

    default_reward_fn = "toy_repeat"
    _warned = False

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        """Sample ``task.repeat_times`` answers and reward each by the share of the target letter."""
        completions = engine.chat([[{"role": "user", "content": str(task.prompt)}]], self.sampling_for(task))[0]
        if len(completions) != task.repeat_times:
            raise WorkflowError(f"engine returned {len(completions)} completions, {task.repeat_times} were asked")
        name = self.reward_fn_of(task)
        if name != self.default_reward_fn and not self._warned:
            self._warned = True
            logger.warning("toy_repeat tasks rewarded with %r, not 'toy_repeat'; set the task set's reward_fn", name)
        experiences = []
        for run_id, completion in enumerate(completions):
            reward, parts = compute_reward(name, completion.text, task.answer)
            info: dict[str, Any] = {"reward_parts": parts}
            experiences.append(experience_from_completion(task, completion, run_id, reward, info))
        return experiences

