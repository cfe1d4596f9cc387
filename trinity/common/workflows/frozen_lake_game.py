"""The FrozenLake game of upstream Trinity-RFT's ``frozen_lake_workflow``, without gymnasium.

A square map of ``S`` (start), ``F`` (frozen), ``H`` (hole) and ``G`` (goal).
:func:`generate_random_map` draws the map of a task record (``size``, ``p``:
the chance a tile is frozen, ``seed``) exactly as upstream does, through
gymnasium's seeding: ``numpy.random.default_rng(seed)`` draws the tiles, then
start and goal until they differ, and retries until the goal is reachable
within ``max_steps`` moves (upstream's depth-first check). So a record gives
upstream's map.

:class:`FrozenLakeGame` is gymnasium's ``FrozenLakeEnv`` dynamics: actions
Left, Down, Right, Up; a move off the map stays put; stepping on ``H`` or
``G`` ends the game, ``G`` paying 1. On a slippery lake the player moves in
the intended direction or one of the two perpendicular ones, 1/3 each; the
game's random generator is seeded with the record's seed at :meth:`reset`
and used as gymnasium uses it (one draw at reset, one per move), so slips
match upstream's.

:func:`render` writes the board as upstream shows it to the model: one row a
line, each cell `` P \\t`` (player), `` _ \\t`` (frozen), `` O \\t`` (hole),
`` G \\t`` (goal), `` X \\t`` (player in a hole), `` √ \\t`` (player on the goal).
:func:`parse_action` reads a reply's last ```` ```...``` ```` block.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

#: Actions as the model names them (upstream's 1..4; 0 is "no valid action").
ACTIONS = {"left": 1, "down": 2, "right": 3, "up": 4}
INVALID_ACTION = 0
#: Row/column change of each action.
_MOVES = {1: (0, -1), 2: (1, 0), 3: (0, 1), 4: (-1, 0)}
#: Actions in gymnasium's order (Left, Down, Right, Up): a slip turns by one place either way.
_CYCLE = (1, 2, 3, 4)
_CELLS = {"F": " _ \t", "S": " _ \t", "H": " O \t", "G": " G \t"}
_PLAYER = {"F": " P \t", "S": " P \t", "H": " X \t", "G": " √ \t"}
_BLOCK_RE = re.compile(r"```(.*?)```", re.DOTALL)


class MapError(ValueError):
    """A FrozenLake map or its parameters are unusable."""


def goal_reachable(board: Sequence[Sequence[str]], max_steps: int) -> bool:
    """Return upstream's check that ``G`` can be reached from ``S`` avoiding holes (depth-first, ``max_steps``).

    Like upstream, a tile is visited once, by the first path that reaches it
    (last-in first-out, trying down, right, up, left), so a tile first reached
    by a long path is not revisited by a shorter one.
    """
    size = len(board)
    start = next((r, c) for r in range(size) for c in range(size) if board[r][c] == "S")
    frontier = [(*start, 0)]
    seen: set[tuple[int, int]] = set()
    while frontier:
        r, c, steps = frontier.pop()
        if steps > max_steps or (r, c) in seen:
            continue
        seen.add((r, c))
        for dr, dc in ((1, 0), (0, 1), (-1, 0), (0, -1)):
            nr, nc = r + dr, c + dc
            if not (0 <= nr < size and 0 <= nc < size):
                continue
            if board[nr][nc] == "G":
                return True
            if board[nr][nc] != "H":
                frontier.append((nr, nc, steps + 1))
    return False


def generate_random_map(size: int, p: float, seed: int, max_steps: int) -> tuple[list[str], tuple[int, int]]:
    """Return upstream's map for ``(size, p, seed)`` whose goal is reachable within ``max_steps``, and the goal.

    Raises MapError for a size below 2 (start and goal must differ) or a negative seed.
    """
    if size < 2:
        raise MapError(f"a FrozenLake map needs size >= 2 (start and goal differ), got {size}")
    if seed < 0:
        raise MapError(f"a FrozenLake seed must be >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    frozen = min(1.0, float(p))
    while True:
        board = rng.choice(["F", "H"], (size, size), p=[frozen, 1 - frozen]).tolist()
        while True:
            start = (int(rng.integers(0, size)), int(rng.integers(0, size)))
            goal = (int(rng.integers(0, size)), int(rng.integers(0, size)))
            if start != goal:
                break
        board[start[0]][start[1]] = "S"
        board[goal[0]][goal[1]] = "G"
        if goal_reachable(board, max_steps):
            return ["".join(row) for row in board], goal


def check_map(rows: Sequence[str]) -> list[str]:
    """Return ``rows`` as a list after checking it is a rectangle of S/F/H/G with one ``S``; raises MapError."""
    grid = [str(row) for row in rows]
    if not grid or any(len(row) != len(grid[0]) or set(row) - set("SFHG") for row in grid):
        raise MapError(f"a FrozenLake map is equal-length rows of S, F, H, G; got {grid!r}")
    if sum(row.count("S") for row in grid) != 1 or not any("G" in row for row in grid):
        raise MapError(f"a FrozenLake map needs one start S and a goal G; got {grid!r}")
    return grid


class FrozenLakeGame:
    """One FrozenLake board and the player on it (gymnasium's dynamics; see the module docstring)."""

    def __init__(self, rows: Sequence[str], *, is_slippery: bool = False, seed: int = 0) -> None:
        self.rows = check_map(rows)
        self.is_slippery = is_slippery
        self.seed = seed
        self.position = self._start()
        self.rng = np.random.default_rng(seed)

    def _start(self) -> tuple[int, int]:
        return next((r, row.index("S")) for r, row in enumerate(self.rows) if "S" in row)

    def reset(self) -> None:
        """Put the player back on the start and reseed the game's generator (gymnasium draws once here)."""
        self.rng = np.random.default_rng(self.seed)
        self.rng.random()
        self.position = self._start()

    @property
    def tile(self) -> str:
        """The tile under the player."""
        return self.rows[self.position[0]][self.position[1]]

    @property
    def finished(self) -> bool:
        """Whether the player is in a hole or on the goal."""
        return self.tile in "HG"

    def step(self, action: int) -> tuple[float, bool, bool]:
        """Move by ``action`` (1 Left, 2 Down, 3 Right, 4 Up) and return ``(reward, done, moved)``.

        An invalid action (not 1..4) changes nothing: ``(0, False, False)``. On
        the goal already: ``(1, True, False)``, as upstream.
        """
        if self.tile == "G":
            return 1.0, True, False
        if action not in _MOVES:
            return 0.0, False, False
        before = self.position
        draw = self.rng.random()  # gymnasium samples the transition even when only one is possible
        if self.tile != "H":
            if self.is_slippery:
                turn = int(np.argmax(np.cumsum([1.0 / 3.0] * 3) > draw)) - 1
                action = _CYCLE[(_CYCLE.index(action) + turn) % 4]
            dr, dc = _MOVES[action]
            size_r, size_c = len(self.rows), len(self.rows[0])
            self.position = (min(max(before[0] + dr, 0), size_r - 1), min(max(before[1] + dc, 0), size_c - 1))
        return (1.0 if self.tile == "G" else 0.0), self.finished, self.position != before


def render(game: FrozenLakeGame) -> str:
    """Return the board as upstream shows it (see the module docstring)."""
    lines = []
    for r, row in enumerate(game.rows):
        cells = [(_PLAYER if (r, c) == game.position else _CELLS)[tile] for c, tile in enumerate(row)]
        lines.append("".join(cells))
    return "\n".join(lines)


def parse_action(reply: str) -> int:
    """Return the action of ``reply``'s last ```` ```...``` ```` block (a direction or 1..4), else 0 (invalid)."""
    blocks = _BLOCK_RE.findall(reply)
    if not blocks:
        return INVALID_ACTION
    text = blocks[-1].strip().lower()
    if text in ACTIONS:
        return ACTIONS[text]
    if text.isdigit() and int(text) in _MOVES:
        return int(text)
    return INVALID_ACTION
