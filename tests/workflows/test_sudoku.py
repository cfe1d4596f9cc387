"""``sudoku_workflow``: generation, the judge (upstream's cases), move parsing, step-wise episodes."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.workflows.scripted import ScriptedEngine
from trinity.common.models.client import load_tokenizer
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.workflows import Task, WorkflowError, make_workflow
from trinity.common.workflows.sudoku import sudoku_prompt
from trinity.common.workflows.sudoku_game import board_valid, generate_sudoku, parse_moves


@pytest.mark.parametrize(("size", "difficulty", "holes"), [(9, "medium", 40), (9, "easy", 27), (9, "hard", 54),
                                                            (4, "medium", 8)])
def test_generated_puzzles(size: int, difficulty: str, holes: int) -> None:
    puzzle, solution = generate_sudoku(size, difficulty, seed=3)
    assert (puzzle, solution) == generate_sudoku(size, difficulty, seed=3)
    assert board_valid(solution) and all(0 not in row for row in solution)
    assert sum(row.count(0) for row in puzzle) == holes
    assert all(p in (0, s) for prow, srow in zip(puzzle, solution, strict=True)
               for p, s in zip(prow, srow, strict=True))
    assert generate_sudoku(size, difficulty, seed=4)[1] != solution
    with pytest.raises(ValueError, match="perfect square"):
        generate_sudoku(6)


def test_judge_upstream_cases() -> None:
    board = [
        [5, 3, 0, 0, 7, 0, 0, 0, 0], [6, 0, 0, 1, 9, 5, 0, 0, 0], [0, 9, 8, 0, 0, 0, 0, 6, 0],
        [8, 0, 0, 0, 6, 0, 0, 0, 3], [4, 0, 0, 8, 0, 3, 0, 0, 1], [7, 0, 0, 0, 2, 0, 0, 0, 6],
        [0, 6, 0, 0, 0, 0, 2, 8, 0], [0, 0, 0, 4, 1, 9, 0, 0, 5], [0, 0, 0, 0, 8, 0, 0, 7, 9],
    ]
    assert board_valid(board)
    empty = [[0] * 9 for _ in range(7)]
    assert not board_valid([[1, 1, 0, 0, 0, 0, 0, 0, 0], *empty, [0] * 9])  # row
    assert not board_valid([[5] + [0] * 8, [5] + [0] * 8, *empty])  # column
    assert not board_valid([[1, 2, 3] + [0] * 6, [4, 1] + [0] * 7, *empty])  # block
    assert not board_valid([[1, 1, 0, 0], [0] * 4, [0] * 4, [0] * 4])
    assert not board_valid([[1, 2, 0, 0], [3, 1, 0, 0], [0] * 4, [0] * 4])


def test_parse_moves() -> None:
    assert parse_moves("0 2 4\n1 3 5\n", 9, 5) == [(0, 2, 4), (1, 3, 5)]
    assert parse_moves("\n 0 0 1 \n\n", 4, 5) == [(0, 0, 1)]
    assert parse_moves("0 2", 9, 5) is None
    assert parse_moves("0 9 1", 9, 5) is None  # off the board
    assert parse_moves("0 0 5", 4, 5) is None  # value too large for 4x4
    assert parse_moves("a b c", 9, 5) is None
    assert parse_moves("", 9, 5) is None
    assert parse_moves("\n".join(["0 0 1"] * 6), 9, 5) is None  # too many


PUZZLE = [[1, 0, 3, 0], [0, 4, 0, 2], [2, 0, 4, 0], [0, 3, 0, 1]]
SOLUTION = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]


def solver(per_step: int, wrong_at_step: int | None = None) -> Callable[[str], str]:
    """Reply with ``per_step`` correct moves for the board in the prompt (a wrong value at ``wrong_at_step``)."""

    def reply(prompt: str) -> str:
        step = int(re.search(r"Current step: (\d+)", prompt).group(1))  # type: ignore[union-attr]
        rows = prompt.split("Current board:\n", 1)[1].strip().split("\n")[:4]
        board = [[int(v) for v in row.split()] for row in rows]
        empty = [(r, c) for r in range(4) for c in range(4) if board[r][c] == 0][:per_step]
        moves = []
        for r, c in empty:
            value = SOLUTION[r][c]
            if step == wrong_at_step:
                value = value % 4 + 1
            moves.append(f"{r} {c} {value}")
        return "\n".join(moves)

    return reply


def test_episodes_step_by_step(tiny_model: Path) -> None:
    # scripted: the random tiny model cannot solve a Sudoku
    tokenizer = load_tokenizer(str(tiny_model))
    record = {"puzzle": PUZZLE, "solution": SOLUTION}
    workflow = make_workflow("sudoku_workflow", SamplingParams(max_tokens=32), {"max_moves_per_step": 3})
    engine = ScriptedEngine(tokenizer, solver(3))
    task = Task(prompt="", raw=record, repeat_times=2, index=7)
    experiences = workflow.run(engine, task)
    # 8 empty cells, 3 moves a step: 0, 0, then solved
    assert [(e.run_id, e.info["step"], e.reward) for e in experiences] == [
        (0, 0, 0.0), (0, 1, 0.0), (0, 2, 1.0), (1, 0, 0.0), (1, 1, 0.0), (1, 2, 1.0)]
    assert {e.group_id for e in experiences} == {task.group_id}
    assert [c[1] for c in engine.calls] == [2, 2, 2]  # both episodes in one call per step
    prompt = tokenizer.decode(experiences[1].tokens[: experiences[1].prompt_length].tolist())
    assert "Current step: 1\nRemaining steps: 19\n\nCurrent board:\n1 2 3 4\n3 4 0 2\n" in prompt
    # a rule broken at step 1 ends the episode with -1
    engine = ScriptedEngine(tokenizer, solver(3, wrong_at_step=1))
    experiences = workflow.run(engine, Task(prompt="", raw=record, repeat_times=1))
    assert [e.reward for e in experiences] == [0.0, -1.0]
    # malformed replies, writing a filled cell: -1 at once
    for text in ("I do not know", "0 0 2"):
        engine = ScriptedEngine(tokenizer, lambda _p, t=text: t)
        assert [e.reward for e in workflow.run(engine, Task(prompt="", raw=record))] == [-1.0]
    # max_steps: one correct move a step, 2 steps allowed
    short = make_workflow("sudoku_workflow", None, {"max_steps": 2})
    experiences = short.run(ScriptedEngine(tokenizer, solver(1)), Task(prompt="", raw=record))
    assert [e.reward for e in experiences] == [0.0, 0.0]


def test_prompt_and_tiny_model(tiny_model: Path) -> None:
    engine = HFEngine(str(tiny_model), max_prompt_tokens=1024, torch_threads=1)
    params = SamplingParams(temperature=1.0, max_tokens=8)
    workflow = make_workflow("sudoku_workflow", params, {"size": 4})
    task = Task(prompt="", raw={"seed": 11}, repeat_times=2)
    experiences = workflow.run(engine, task)
    puzzle, _ = generate_sudoku(4, "medium", seed=11)
    expected = engine.chat_prompt_tokens([{"role": "user", "content": sudoku_prompt(puzzle, 0, 20, 5, False)}])
    assert "The board is 4x4." in sudoku_prompt(puzzle, 0, 20, 5, False)
    assert {e.run_id for e in experiences} == {0, 1}
    for e in experiences:
        if e.info["step"] == 0:
            assert e.tokens[: e.prompt_length].tolist() == expected
        assert 1 <= e.response_length <= 8 and e.reward in (-1.0, 0.0, 1.0)
        assert e.action_mask is not None and bool(e.action_mask.all())
    with pytest.raises(WorkflowError, match="perfect square"):
        make_workflow("sudoku_workflow", None, {"size": 5})
    with pytest.raises(WorkflowError, match="square boards"):
        workflow.boards_of(Task(prompt="", raw={"puzzle": [[1, 0]], "solution": [[1, 2]]}))
