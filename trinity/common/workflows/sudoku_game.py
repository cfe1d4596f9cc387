"""Sudoku boards for upstream Trinity-RFT's ``sudoku_workflow``: generation, validity, moves.

Boards are ``size x size`` lists of ints (0: empty), ``size`` a perfect square
(9, 4). :func:`generate_sudoku` fills a board by randomised backtracking and
empties cells (a third, a half or two thirds of them for ``easy``/``medium``/
``hard``); :func:`board_valid` checks rows, columns and blocks for repeats
(empty cells allowed); :func:`parse_moves` reads ``row col value`` lines.
"""

from __future__ import annotations

import math
import random

Board = list[list[int]]
#: Share of cells emptied per difficulty.
HOLES = {"easy": (1, 3), "medium": (1, 2), "hard": (2, 3)}


def block_size(size: int) -> int:
    """Return the block side of a ``size`` board; raises ValueError unless ``size`` is a perfect square."""
    block = math.isqrt(size)
    if size < 1 or block * block != size:
        raise ValueError(f"a Sudoku size must be a perfect square (4, 9, ...), got {size}")
    return block


def _fits(board: Board, r: int, c: int, value: int, block: int) -> bool:
    if value in board[r] or any(row[c] == value for row in board):
        return False
    br, bc = r - r % block, c - c % block
    return all(board[i][j] != value for i in range(br, br + block) for j in range(bc, bc + block))


def _fill(board: Board, rng: random.Random, block: int) -> bool:
    size = len(board)
    empty = next(((r, c) for r in range(size) for c in range(size) if board[r][c] == 0), None)
    if empty is None:
        return True
    r, c = empty
    values = list(range(1, size + 1))
    rng.shuffle(values)
    for value in values:
        if _fits(board, r, c, value, block):
            board[r][c] = value
            if _fill(board, rng, block):
                return True
            board[r][c] = 0
    return False


def generate_sudoku(size: int = 9, difficulty: str = "medium", seed: int = 0) -> tuple[Board, Board]:
    """Return ``(puzzle, solution)``: a random solved board and a copy with cells emptied (0), seeded.

    Raises ValueError for a size that is not a perfect square or an unknown difficulty.
    """
    block = block_size(size)
    if difficulty not in HOLES:
        raise ValueError(f"unknown Sudoku difficulty {difficulty!r}; use one of {', '.join(HOLES)}")
    rng = random.Random(seed)
    solution: Board = [[0] * size for _ in range(size)]
    _fill(solution, rng, block)
    puzzle = [row[:] for row in solution]
    cells = [(r, c) for r in range(size) for c in range(size)]
    rng.shuffle(cells)
    num, den = HOLES[difficulty]
    for r, c in cells[: size * size * num // den]:
        puzzle[r][c] = 0
    return puzzle, solution


def board_valid(board: Board) -> bool:
    """Return True when no row, column or block of ``board`` repeats a value (0s are empty and ignored)."""
    size = len(board)
    block = block_size(size)
    groups = [list(row) for row in board]
    groups += [[board[r][c] for r in range(size)] for c in range(size)]
    groups += [[board[r][c] for r in range(br, br + block) for c in range(bc, bc + block)]
               for br in range(0, size, block) for bc in range(0, size, block)]
    return all(len(filled) == len(set(filled)) for filled in ([v for v in g if v] for g in groups))


def parse_moves(text: str, size: int, max_moves: int) -> list[tuple[int, int, int]] | None:
    """Return the ``row col value`` moves of ``text`` (one a line, 0-based cells), or None when malformed.

    Malformed: a non-blank line that is not three integers in range, no
    move, or more than ``max_moves`` moves.
    """
    moves = []
    for line in text.strip().splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3:
            return None
        try:
            r, c, v = (int(p) for p in parts)
        except ValueError:
            return None
        if not (0 <= r < size and 0 <= c < size and 1 <= v <= size):
            return None
        moves.append((r, c, v))
    return moves if 0 < len(moves) <= max_moves else None
