"""``guess_number``: a small multi-turn game, the example of :class:`MultiTurnWorkflow`.

The environment holds a secret integer in ``[low, high]`` (the task's
answer). Each reply should be a number; the environment answers "Higher."
or "Lower." until the guess is right (reward 1, episode over). An episode
that runs out of turns gets ``0.5 * (1 - distance / (high - low))`` for its
closest guess (0 when no reply held a number in range).
"""

from __future__ import annotations

import re
from typing import Any

from trinity.common.models.engine import SamplingParams
from trinity.common.workflows.base import Task, WorkflowError
from trinity.common.workflows.multi_turn import Environment, EnvStep, MultiTurnWorkflow

_INT_RE = re.compile(r"-?\d+")
DEFAULT_PROMPT = "I am thinking of a number from {low} to {high}. Guess it: answer with one number."


class GuessNumberEnv(Environment):
    """Higher/lower feedback on guesses of ``secret``."""

    def __init__(self, secret: int, low: int, high: int, prompt: str = DEFAULT_PROMPT) -> None:
        if not low <= secret <= high:
            raise WorkflowError(f"secret {secret} is outside [{low}, {high}]")
        self.secret, self.low, self.high = secret, low, high
        self.prompt = prompt
        self.guesses: list[int | None] = []
        self.solved = False

    def reset(self) -> list[dict[str, str]]:
        """Return the opening question."""
        return [{"role": "user", "content": self.prompt.format(low=self.low, high=self.high)}]

    def step(self, reply: str) -> EnvStep:
        """Judge the first integer of ``reply``."""
        found = _INT_RE.search(reply)
        guess = int(found.group(0)) if found else None
        self.guesses.append(guess)
        if guess is None or not self.low <= guess <= self.high:
            return EnvStep(f"Answer with one number from {self.low} to {self.high}.")
        if guess == self.secret:
            self.solved = True
            return EnvStep(None, reward=1.0, done=True)
        return EnvStep("Higher." if guess < self.secret else "Lower.")

    def finish(self) -> float:
        """Return the closeness bonus of an unsolved episode (0 when solved: the step paid 1)."""
        valid = [g for g in self.guesses if g is not None and self.low <= g <= self.high]
        if self.solved or not valid:
            return 0.0
        closest = min(abs(g - self.secret) for g in valid)
        return 0.5 * (1.0 - closest / max(1, self.high - self.low))

    def metrics(self) -> dict[str, Any]:
        """Return the secret, the guesses and whether it was found."""
        return {"secret": self.secret, "guesses": self.guesses, "solved": self.solved}


class GuessNumberWorkflow(MultiTurnWorkflow):
    """Guess the task's answer (an integer) with higher/lower hints; workflow args ``low``, ``high``, ``max_turns``."""

    def __init__(
        self,
        sampling: SamplingParams | None = None,
        *,
        low: int = 1,
        high: int = 16,
        max_turns: int = 4,
        max_total_tokens: int = 1024,
    ) -> None:
        super().__init__(sampling, max_turns=max_turns, max_total_tokens=max_total_tokens)
        if low >= high:
            raise WorkflowError(f"guess_number needs low < high, got {low}, {high}")
        self.low, self.high = low, high

    def make_env(self, task: Task, run_id: int) -> Environment:
        """Return the game of ``task``: its answer is the secret; its prompt, when it has {low}/{high}, the opening."""
        try:
            secret = int(task.answer)
        except (TypeError, ValueError):
            raise WorkflowError(f"guess_number needs an integer answer (the secret), got {task.answer!r}") from None
        prompt = str(task.prompt) if task.prompt and "{low}" in str(task.prompt) else DEFAULT_PROMPT
        return GuessNumberEnv(secret, self.low, self.high, prompt)
