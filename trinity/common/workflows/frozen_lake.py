"""Upstream Trinity-RFT's ``frozen_lake_workflow``: walk a text FrozenLake to the goal, one move per reply.

Task records are upstream's (``examples/grpo_frozen_lake/get_frozen_lake_data.py``):
``seed``, ``size`` and ``p`` (chance a tile is frozen) pick the map
(:func:`~trinity.common.workflows.frozen_lake_game.generate_random_map`);
workflow arg ``desc`` (a list of rows) fixes it instead. Each episode opens
with upstream's system prompt and the board; every reply's last
```` ```Up``` ```` block moves the player; the environment answers with the
new board (noting when the position did not change) until the goal (reward
1) or a hole (0) ends the episode, or ``agent_max_steps`` replies were made.
Episodes are one multi-turn experience each (:class:`MultiTurnWorkflow`:
environment tokens masked out of the action mask); all episodes of a task
play the same map, with the same slips for the same moves.

Workflow args, as upstream: ``env_max_steps`` (8: the goal must be this
close on a generated map), ``agent_max_steps`` (10: replies per episode),
``is_slippery`` (False), ``desc`` (None); and ``max_total_tokens`` (16384:
prompt plus all turns; upstream's limit is 10240 tokens after the prompt).
"""

from __future__ import annotations

from typing import Any

from trinity.common.models.engine import SamplingParams
from trinity.common.workflows.base import Task, WorkflowError
from trinity.common.workflows.frozen_lake_game import (
    FrozenLakeGame,
    MapError,
    generate_random_map,
    parse_action,
    render,
)
from trinity.common.workflows.multi_turn import Environment, EnvStep, MultiTurnWorkflow

#: Upstream's system prompt (RAGEN's format).
SYSTEM_PROMPT = """You are Qwen, created by Alibaba Cloud. You are a helpful assistant. You are walking on a frozen \
lake.

FrozenLake Quick Guide
Goal: Reach the goal (G). Player (P) and Goal (G) must overlap.

Symbols:
_ Frozen | O Hole | G Goal | P Player

Rules:
1. Avoid falling into holes (O).
2. Frozen tiles are slippery, you may move perpendicular to your intended direction.

Valid Action (separated by | ):
Up | Down | Left | Right

Rewards:
Fall into hole: 0
Reach goal: +1.0

You will be provided the current observation, please decide on the next Action.
You should show your thought process and then input the final action in ``` ```.
You should only output the NEXT ACTION at each interation in the ``` ```. For example, if you want to move up, \
you should output ```Up```.
You should plan ahead and need to achieve it in minimum number of steps.
You should be aware that frozen tiles can be slippery, but the chance is small and you should not overthink it.

Please show your thinking process and put the final action in ``` ```. In every turn, the final action MUST be \
one of Up, Down, Left, Right.
"""
_NOT_YET = "You have not achieved the goal, P has not reached G yet. Please give the next action."
_NO_CHANGE = (
    "\nYour last response is invalid. Your position didn't change at all. You may need to recheck your thinking "
    "process, action outputted, and the format of response. Remember, you should only output the NEXT ACTION at "
    "each interation in the ``` ```. For example, if you want to move up, you should output ```Up```."
)


class FrozenLakeEnv(Environment):
    """One FrozenLake episode: upstream's observations, moves and rewards."""

    def __init__(self, game: FrozenLakeGame, agent_max_steps: int) -> None:
        self.game = game
        self.agent_max_steps = agent_max_steps
        self.steps = 0
        self.total = 0.0
        self.actions: list[int] = []

    def observation(self, previous: str | None) -> str:
        """Return the user message showing the board after ``self.steps`` moves (``previous``: the board before)."""
        board = render(self.game)
        text = f"Current Observation ({self.steps}): \n{board}\n{_NOT_YET}"
        if previous is not None and previous == board:
            text += _NO_CHANGE
        if self.agent_max_steps - self.steps > 0:
            text += f"\nThe maximum number of steps remaining is {self.agent_max_steps - self.steps}."
        return text

    def reset(self) -> list[dict[str, str]]:
        """Return the system prompt and the first observation."""
        self.game.reset()
        self.steps, self.total, self.actions = 0, 0.0, []
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": self.observation(None)}]

    def step(self, reply: str) -> EnvStep:
        """Play the reply's action; the episode ends on the goal (reward 1) or in a hole."""
        before = render(self.game)
        action = parse_action(reply)
        self.actions.append(action)
        reward, done, _moved = self.game.step(action)
        self.steps += 1
        self.total += reward
        if done:
            return EnvStep(None, reward=reward, done=True)
        return EnvStep(self.observation(before), reward=reward)

    def metrics(self) -> dict[str, Any]:
        """Return upstream's episode facts (``env_steps``, ``env_done``, ``test_score``) and the actions."""
        return {
            "env_steps": self.steps,
            "env_done": 1 if self.game.finished else 0,
            "test_score": self.total,
            "success": self.game.tile == "G",
            "actions": self.actions,
            "metrics": {"env_steps": float(self.steps), "env_done": float(self.game.finished),
                        "test_score": self.total},
        }


class FrozenLakeWorkflow(MultiTurnWorkflow):
    """Text FrozenLake episodes on the task record's map; see the module docstring for the workflow args."""

    def __init__(
        self,
        sampling: SamplingParams | None = None,
        *,
        env_max_steps: int = 8,
        agent_max_steps: int = 10,
        is_slippery: bool = False,
        desc: list[str] | None = None,
        max_total_tokens: int = 16384,
    ) -> None:
        super().__init__(sampling, max_turns=agent_max_steps, max_total_tokens=max_total_tokens)
        if env_max_steps < 1:
            raise WorkflowError(f"frozen_lake_workflow: env_max_steps must be >= 1, got {env_max_steps}")
        self.env_max_steps = env_max_steps
        self.agent_max_steps = agent_max_steps
        self.is_slippery = bool(is_slippery)
        self.desc = list(desc) if desc is not None else None

    def game_of(self, task: Task) -> FrozenLakeGame:
        """Return the game of ``task``: ``desc``, else the map of the record's ``size``/``p``/``seed``.

        Raises WorkflowError for an unusable map or record.
        """
        seed = int(task.raw.get("seed", 42))
        try:
            if self.desc is not None:
                rows = self.desc
            else:
                rows, _goal = generate_random_map(
                    int(task.raw.get("size", 1)), float(task.raw.get("p", 0.8)), seed, self.env_max_steps
                )
            return FrozenLakeGame(rows, is_slippery=self.is_slippery, seed=seed)
        except (MapError, TypeError, ValueError) as exc:
            raise WorkflowError(f"frozen_lake_workflow: task {task.index}: {exc}") from None

    def make_env(self, task: Task, run_id: int) -> Environment:
        """Return a fresh episode of the task's map (every episode of a task plays the same map)."""
        return FrozenLakeEnv(self.game_of(task), self.agent_max_steps)
