"""Upstream Trinity-RFT's ``sudoku_workflow``: solve a Sudoku a few cells at a time, one experience per step.

Each step shows the model the rules, the step count and the current board
(a fresh single-turn prompt) and reads up to ``max_moves_per_step`` moves,
``row col value`` a line (0-based cells). A step's experience is rewarded
-1 and ends the episode when the reply is malformed, writes a filled cell or
breaks a rule; 1 and ends it when the board is solved; else 0, and the next
step follows, up to ``max_steps``. As upstream, an episode is several
experiences: they share the task's ``group_id`` and their episode's
``run_id`` (``info["step"]`` numbers them); episodes of a task run side by side.

The board comes from the record's ``puzzle`` and ``solution`` (lists of
rows, 0: empty), else it is generated (workflow args ``size``, 9, and
``difficulty``, ``medium``) from the record's ``seed`` (else its index), the
same for every episode of the task (upstream draws a fresh unseeded puzzle
per episode). Workflow args ``max_steps`` (20) and ``max_moves_per_step`` (5)
are upstream's fixed values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trinity.common.experience import Experience
from trinity.common.models.client import RolloutModel
from trinity.common.models.engine import SamplingParams
from trinity.common.workflows.base import Task, Workflow, WorkflowError, experience_from_completion
from trinity.common.workflows.single_turn import checked
from trinity.common.workflows.sudoku_game import Board, block_size, board_valid, generate_sudoku, parse_moves


def sudoku_prompt(board: Board, step: int, max_steps: int, max_moves: int, no_progress: bool) -> str:
    """Return upstream's step prompt for ``board`` (rules, format, step counts, the board)."""
    size, block = len(board), block_size(len(board))
    rendered = "\n".join(" ".join(str(v) for v in row) for row in board)
    prompt = (
        "You are playing a Sudoku game.\n\n"
        "Rules:\n"
        f"- The board is {size}x{size}.\n"
        "- 0 means empty.\n"
        f"- Numbers 1\u2013{size} must appear exactly once in every row, column, and {block}x{block} block.\n"
        "- You may only fill empty cells.\n\n"
        "Task:\n"
        "- In each step, output ONE OR MORE valid moves.\n"
        f"- You may output up to {max_moves} moves per step.\n\n"
        "Output format (STRICT):\n"
        "row col value\n"
        "row col value\n\n"
        "Example:\n"
        "0 2 4\n"
        "1 3 5\n\n"
        f"Current step: {step}\n"
        f"Remaining steps: {max_steps - step}\n\n"
        f"Current board:\n{rendered}\n"
    )
    if no_progress:
        prompt += (
            "\nYour previous response was invalid or had no effect. Please follow the rules and output format strictly."
        )
    return prompt


@dataclass
class _Episode:
    board: Board
    run_id: int
    step: int = 0
    done: bool = False
    last_board: Board | None = None
    experiences: list[Experience] = field(default_factory=list)


class SudokuWorkflow(Workflow):
    """Step-wise Sudoku (see the module); args ``max_steps``, ``max_moves_per_step``, ``size``, ``difficulty``."""

    def __init__(
        self,
        sampling: SamplingParams | None = None,
        *,
        max_steps: int = 20,
        max_moves_per_step: int = 5,
        size: int = 9,
        difficulty: str = "medium",
    ) -> None:
        super().__init__(sampling)
        if max_steps < 1 or max_moves_per_step < 1:
            raise WorkflowError(
                f"sudoku_workflow: max_steps and max_moves_per_step must be >= 1, got {max_steps}, {max_moves_per_step}"
            )
        try:
            block_size(size)
        except ValueError as exc:
            raise WorkflowError(f"sudoku_workflow: {exc}") from None
        self.max_steps, self.max_moves = max_steps, max_moves_per_step
        self.size, self.difficulty = size, difficulty

    def boards_of(self, task: Task) -> tuple[Board, Board]:
        """Return ``(puzzle, solution)`` of ``task`` (the record's, else generated); raises WorkflowError."""
        try:
            if "puzzle" in task.raw and "solution" in task.raw:
                puzzle = [[int(v) for v in row] for row in task.raw["puzzle"]]
                solution = [[int(v) for v in row] for row in task.raw["solution"]]
                block_size(len(puzzle))
                if len(solution) != len(puzzle) or any(len(row) != len(puzzle) for row in puzzle + solution):
                    raise ValueError("puzzle and solution must be square boards of one size")
                return puzzle, solution
            return generate_sudoku(self.size, self.difficulty, int(task.raw.get("seed", task.index)))
        except (TypeError, ValueError) as exc:
            raise WorkflowError(f"sudoku_workflow: task {task.index}: {exc}") from None

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        """Play ``repeat_times`` episodes side by side; return every step's experience, episode by episode."""
        puzzle, solution = self.boards_of(task)
        episodes = [_Episode([row[:] for row in puzzle], run_id) for run_id in range(task.repeat_times)]
        params = self.sampling_for(task, n=1)
        for _ in range(self.max_steps):
            active = [e for e in episodes if not e.done]
            if not active:
                break
            prompts = [[{"role": "user", "content": sudoku_prompt(
                e.board, e.step, self.max_steps, self.max_moves, e.last_board is not None and e.board == e.last_board,
            )}] for e in active]
            outputs = engine.chat(prompts, params)
            if len(outputs) != len(active):
                raise WorkflowError(f"engine answered {len(outputs)} prompts, {len(active)} were sent")
            for episode, completions in zip(active, outputs, strict=True):
                completion = checked(completions, 1)[0]
                reward = self._play(episode, completion.text, solution)
                info = {"step": episode.step, "metrics": {"step": float(episode.step)}}
                episode.experiences.append(experience_from_completion(task, completion, episode.run_id, reward, info))
                episode.step += 1
        return [experience for e in episodes for experience in e.experiences]

    def _play(self, episode: _Episode, reply: str, solution: Board) -> float:
        """Apply ``reply``'s moves to the episode's board; return the step's reward (ending the episode if due)."""
        episode.last_board = [row[:] for row in episode.board]
        moves = parse_moves(reply, len(episode.board), self.max_moves)
        if moves is None:
            episode.done = True
            return -1.0
        for r, c, v in moves:
            if episode.board[r][c] != 0:
                episode.done = True
                return -1.0
            episode.board[r][c] = v
        if not board_valid(episode.board):
            episode.done = True
            return -1.0
        if episode.board == solution:
            episode.done = True
            return 1.0
        return 0.0
