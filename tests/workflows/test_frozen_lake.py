"""``frozen_lake_workflow``: map generation, moves, holes, goal, slips, rendering, parsing, episodes."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.workflows.scripted import ScriptedEngine
from trinity.common.models.client import load_tokenizer
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.workflows import Task, WorkflowError, make_workflow
from trinity.common.workflows.frozen_lake import SYSTEM_PROMPT, FrozenLakeEnv
from trinity.common.workflows.frozen_lake_game import (
    FrozenLakeGame,
    MapError,
    check_map,
    generate_random_map,
    parse_action,
    render,
)

LAKE = ["SFF", "FHF", "FFG"]


def shortest_path(rows: list[str]) -> int | None:
    """Breadth-first moves from S to G avoiding holes (an independent check of reachability)."""
    size = len(rows)
    start = next((r, row.index("S")) for r, row in enumerate(rows) if "S" in row)
    queue, seen = deque([(start, 0)]), {start}
    while queue:
        (r, c), d = queue.popleft()
        if rows[r][c] == "G":
            return d
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < size and 0 <= nc < size and (nr, nc) not in seen and rows[nr][nc] != "H":
                seen.add((nr, nc))
                queue.append(((nr, nc), d + 1))
    return None


# ---------------------------------------------------------------- maps


def test_maps_are_deterministic_by_seed_and_valid() -> None:
    # pinned: upstream (gymnasium seeding) gives these maps for these records
    assert generate_random_map(4, 0.8, 42, 8) == (["FFSF", "FHFF", "FFFH", "GHFF"], (3, 0))
    assert generate_random_map(3, 0.7, 7, 8) == (["FSH", "FFH", "GHH"], (2, 0))
    maps = set()
    for seed in range(40):
        rows, goal = generate_random_map(5, 0.75, seed, 8)
        assert generate_random_map(5, 0.75, seed, 8) == (rows, goal)
        assert check_map(rows) == rows and len(rows) == 5 and all(len(r) == 5 for r in rows)
        assert rows[goal[0]][goal[1]] == "G" and sum(r.count("G") for r in rows) == 1
        distance = shortest_path(rows)
        assert distance is not None and distance <= 9  # upstream's check: G next to a tile reached in <= 8
        maps.add(tuple(rows))
    assert len(maps) > 30  # seeds give different maps
    with pytest.raises(MapError, match="size >= 2"):
        generate_random_map(1, 0.8, 0, 8)
    with pytest.raises(MapError, match="one start S"):
        check_map(["FFF", "FHG", "FFF"])


# ---------------------------------------------------------------- moves


def test_moves_walls_holes_and_goal() -> None:
    game = FrozenLakeGame(LAKE)
    game.reset()
    assert game.position == (0, 0)
    assert game.step(1) == (0.0, False, False)  # Left into the wall: stays
    assert game.step(4) == (0.0, False, False)  # Up into the wall
    assert game.step(3) == (0.0, False, True) and game.position == (0, 1)  # Right
    assert game.step(2) == (0.0, True, True) and game.tile == "H"  # Down into the hole: over, no reward
    game.reset()
    assert [game.step(a) for a in (3, 3, 2, 2)] == [(0.0, False, True)] * 3 + [(1.0, True, True)]
    assert game.tile == "G" and game.step(1) == (1.0, True, False)  # on the goal already, as upstream
    game.reset()
    assert game.step(0) == (0.0, False, False) and game.step(7) == (0.0, False, False)  # invalid actions


def gymnasium_walk(rows: list[str], seed: int, actions: list[int]) -> list[tuple[int, int]]:
    """Positions after each action under gymnasium's FrozenLake transition table (slippery), for comparison."""
    desc = np.asarray(rows, dtype="c")
    nrow, ncol = desc.shape
    rng = np.random.default_rng(seed)
    state = int(np.argmax(np.cumsum((desc == b"S").astype("float64").ravel()) > rng.random()))  # reset
    moves = {0: (0, -1), 1: (1, 0), 2: (0, 1), 3: (-1, 0)}  # gymnasium: Left, Down, Right, Up
    out = []
    for action in actions:
        g = action - 1
        row, col = divmod(state, ncol)
        if desc[row, col] in b"GH":
            table = [(1.0, state)]
        else:
            table = []
            for b in ((g - 1) % 4, g, (g + 1) % 4):
                dr, dc = moves[b]
                nr, nc = min(max(row + dr, 0), nrow - 1), min(max(col + dc, 0), ncol - 1)
                table.append((1.0 / 3.0, nr * ncol + nc))
        i = int(np.argmax(np.cumsum([p for p, _ in table]) > rng.random()))
        state = table[i][1]
        out.append(divmod(state, ncol))
    return out


def test_slippery_moves_follow_gymnasium_and_the_seed() -> None:
    rows = ["SFFF", "FFFF", "FFFF", "FFFG"]
    actions = [3, 2, 3, 2, 1, 4, 3, 2, 2, 3]
    for seed in range(20):
        game = FrozenLakeGame(rows, is_slippery=True, seed=seed)
        game.reset()
        positions = []
        for action in actions:
            game.step(action)
            positions.append(game.position)
        assert positions == gymnasium_walk(rows, seed, actions)
    # intended, and each perpendicular direction, a third of the time each
    landed = []
    for seed in range(600):
        game = FrozenLakeGame(["FFF", "FSF", "FFG"], is_slippery=True, seed=seed)
        game.reset()
        game.step(3)  # Right: Right, or Down / Up by a slip
        landed.append(game.position)
    counts = {pos: landed.count(pos) for pos in set(landed)}
    assert set(counts) == {(1, 2), (2, 1), (0, 1)} and all(150 < n < 250 for n in counts.values())
    # a replayed episode slips the same way (the seed is reset)
    game = FrozenLakeGame(rows, is_slippery=True, seed=3)
    runs = []
    for _ in range(2):
        game.reset()
        runs.append([(game.step(a), game.position) for a in actions])
    assert runs[0] == runs[1]


# ---------------------------------------------------------------- rendering and parsing


def test_render_like_upstream() -> None:
    game = FrozenLakeGame(LAKE)
    game.reset()
    assert render(game) == " P \t _ \t _ \t\n _ \t O \t _ \t\n _ \t _ \t G \t"
    game.step(3)
    game.step(2)
    assert render(game) == " _ \t _ \t _ \t\n _ \t X \t _ \t\n _ \t _ \t G \t"
    game.reset()
    for action in (2, 2, 3, 3):
        game.step(action)
    assert render(game).endswith(" √ \t")


@pytest.mark.parametrize(
    ("reply", "action"),
    [("I go ```Up```", 4), ("```left``` no, ```Down```", 2), ("```3```", 3), ("``` right ```", 3),
     ("```jump```", 0), ("```5```", 0), ("Down", 0), ("", 0)],
)
def test_parse_action(reply: str, action: int) -> None:
    assert parse_action(reply) == action


# ---------------------------------------------------------------- the environment and the workflow


def test_environment_observations() -> None:
    env = FrozenLakeEnv(FrozenLakeGame(LAKE), agent_max_steps=3)
    system, user = env.reset()
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    assert user["content"] == (
        "Current Observation (0): \n P \t _ \t _ \t\n _ \t O \t _ \t\n _ \t _ \t G \t\n"
        "You have not achieved the goal, P has not reached G yet. Please give the next action.\n"
        "The maximum number of steps remaining is 3."
    )
    moved = env.step("```Right```")
    assert moved.observation is not None and moved.observation.startswith("Current Observation (1): \n _ \t P \t")
    assert "invalid" not in moved.observation and moved.observation.endswith("remaining is 2.")
    stuck = env.step("I think up")  # no action block: nothing moves
    assert stuck.observation is not None and "Your last response is invalid." in stuck.observation
    assert not stuck.done and stuck.reward == 0.0
    hole = env.step("```Down```")
    assert (hole.observation, hole.reward, hole.done) == (None, 0.0, True)
    assert env.metrics()["env_done"] == 1 and env.metrics()["success"] is False


def walker(moves: list[str]) -> Callable[[str], str]:
    """Reply with ``moves[k]`` on the k-th turn of an episode (counted from the transcript)."""

    def reply(prompt: str) -> str:
        turn = len(re.findall(r"Current Observation \(", prompt)) - 1
        return f"Let me think. ```{moves[min(turn, len(moves) - 1)]}```"

    return reply


def test_workflow_reaches_the_goal_with_scripted_moves(tiny_model: Path) -> None:
    # scripted: the random tiny model does not write "```Right```"
    tokenizer = load_tokenizer(str(tiny_model))
    engine = ScriptedEngine(tokenizer, walker(["Right", "Right", "Down", "Down"]))
    workflow = make_workflow("frozen_lake_workflow", SamplingParams(max_tokens=16), {"desc": LAKE})
    experiences = workflow.run(engine, Task(prompt="", raw={"seed": 1}, repeat_times=2, index=5))
    assert [e.run_id for e in experiences] == [0, 1]
    for e in experiences:
        assert e.reward == 1.0 and e.info["turns"] == 4 and e.info["stop"] == "env"
        assert e.info["metrics"] == {"env_steps": 4.0, "env_done": 1.0, "test_score": 1.0}
        assert e.info["actions"] == [3, 3, 2, 2]
    # into the hole: the episode ends at once with nothing
    engine = ScriptedEngine(tokenizer, walker(["Right", "Down"]))
    (e,) = workflow.run(engine, Task(prompt="", raw={}, repeat_times=1))
    assert (e.reward, e.info["turns"], e.info["env_done"], e.info["success"]) == (0.0, 2, 1, False)
    # never moving: agent_max_steps replies, then it stops
    engine = ScriptedEngine(tokenizer, walker(["Stay"]))
    workflow = make_workflow("frozen_lake_workflow", None, {"desc": LAKE, "agent_max_steps": 3})
    (e,) = workflow.run(engine, Task(prompt="", raw={}, repeat_times=1))
    assert (e.reward, e.info["turns"], e.info["stop"], e.info["env_done"]) == (0.0, 3, "turns", 0)


@pytest.fixture(scope="module")
def long_engine(tiny_model: Path) -> Iterator[HFEngine]:
    """The tiny model with room for the FrozenLake prompt (~900 tiny-tokenizer tokens)."""
    yield HFEngine(str(tiny_model), max_prompt_tokens=2048, max_batch_size=8, torch_threads=1)


def test_workflow_on_the_tiny_model(long_engine: HFEngine) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=12)
    workflow = make_workflow("frozen_lake_workflow", params, {"agent_max_steps": 3, "max_total_tokens": 2000})
    task = Task(prompt="", raw={"seed": 42, "size": 4, "p": 0.8}, repeat_times=2, index=1)
    experiences = workflow.run(long_engine, task)
    assert [e.run_id for e in experiences] == [0, 1] and {e.group_id for e in experiences} == {task.group_id}
    first = long_engine.chat_prompt_tokens([{"role": "system", "content": SYSTEM_PROMPT},
                                            {"role": "user", "content": experiences[0].info["messages"][1]["content"]}])
    for e in experiences:
        assert " P \t" in e.info["messages"][1]["content"]  # the seed-42 map: ["FFSF", "FHFF", "FFFH", "GHFF"]
        assert e.info["messages"][1]["content"].startswith("Current Observation (0): \n _ \t _ \t P \t _ \t\n")
        assert e.tokens[: e.prompt_length].tolist() == first
        mask = e.action_mask
        assert mask is not None and e.logprobs is not None and mask.shape == e.logprobs.shape == (e.response_length,)
        replies = sum(1 for m in e.info["messages"] if m["role"] == "assistant")
        assert 1 <= replies <= 3 and 0 < int(mask.sum()) <= 12 * replies
        assert bool((e.logprobs[~mask] == 0).all()) and bool((e.logprobs[mask] < 0).all())
        assert e.reward == e.info["test_score"] and e.reward in (0.0, 1.0)
        # the generated stretches are scored by the engine as the policy log-probs
        generated = torch.nonzero(mask).squeeze(1)
        start = int(generated[0])
        end = start
        while end + 1 < len(mask) and bool(mask[end + 1]):
            end += 1
        (score,) = long_engine.score_tokens([e.tokens[: e.prompt_length].tolist()],
                                            [e.response_tokens[: end + 1].tolist()], 1.0)
        torch.testing.assert_close(e.logprobs[: end + 1], score, atol=2e-5, rtol=0)


def test_bad_records_are_workflow_errors() -> None:
    workflow = make_workflow("frozen_lake_workflow")
    with pytest.raises(WorkflowError, match="task 3: a FrozenLake map needs size >= 2"):
        workflow.make_env(Task(prompt="", raw={"seed": 1}, index=3), 0)  # upstream's default size 1
    with pytest.raises(WorkflowError, match="bad workflow_args"):
        make_workflow("frozen_lake_workflow", None, {"max_steps": 3})
