"""Splitting a step's batch across trainer ranks and micro-batches.

FSDP runs a collective in every forward and backward, so every rank must run
the same number of micro-batches of the same number of rows. The driver
therefore pads the batch with *dummy rows* (a copy of a real row whose
response mask is all zero: a valid forward that contributes nothing to any
loss term) until it splits evenly, and tells each rank how many micro-batches
to run. Loss terms are weighted by their share of the step's *units* (tokens,
sequences or pairs), so the gradient equals the one of the whole batch in one
piece, whatever the split.

Rows are carried as a ``dict[str, Tensor]`` whose tensors all have the batch
dimension first (``[B]``, ``[B, T]`` or ``[B, T-1]``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch

from trinity.common.experience import Batch, Experience
from trinity.trainer.plan import Units

Rows = dict[str, torch.Tensor]

#: Tensor dtypes numpy holds as they are (bfloat16 has no numpy dtype).
_NUMPY_DTYPES = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                           torch.float16, torch.float32, torch.float64})

#: Row fields that are zeroed in dummy rows (anything that could carry a loss).
_ZEROED_IN_DUMMY = ("response_mask", "advantages", "returns")


def expand_pairs(experiences: Sequence[Experience]) -> list[Experience]:
    """Return chosen and rejected rollouts interleaved (chosen 0, rejected 0, ...) for preference losses.

    Raises ValueError when an experience has no ``rejected_tokens``.
    """
    out: list[Experience] = []
    for index, exp in enumerate(experiences):
        if exp.rejected_tokens is None:
            raise ValueError(f"experience {index} has no rejected_tokens; a preference loss (DPO) needs pairs")
        rejected = Experience(tokens=exp.rejected_tokens, prompt_length=exp.prompt_length, reward=exp.reward,
                              group_id=exp.group_id, run_id=exp.run_id, model_version=exp.model_version)
        out.extend((exp, rejected))
    return out


def batch_rows(batch: Batch) -> Rows:
    """Return the tensors of ``batch`` as rows."""
    return {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}


def rows_batch(rows: Rows) -> Batch:
    """Return the :class:`Batch` made of the batch fields of ``rows`` (extras are left out)."""
    return Batch(**{f.name: rows[f.name] for f in dataclasses.fields(Batch)})


def row_count(rows: Rows) -> int:
    return int(rows["input_ids"].shape[0])


def shard_indices(rows: int, world_size: int, unit: int = 1) -> list[list[int]]:
    """Return, per rank, the row indices it trains on; ``-1`` marks a dummy row.

    Rows are dealt in contiguous blocks of ``unit`` rows (a DPO pair stays
    together); every rank gets the same number of rows (a multiple of ``unit``,
    at least one unit), dummies filling the shortfall at the end of a shard.
    """
    if rows <= 0 or rows % unit:
        raise ValueError(f"cannot shard {rows} rows in units of {unit}")
    units = rows // unit
    per_rank_units = max(1, math.ceil(units / world_size))
    shards: list[list[int]] = []
    for rank in range(world_size):
        first = rank * per_rank_units
        taken = list(range(first * unit, min(units, first + per_rank_units) * unit))
        shards.append(taken + [-1] * (per_rank_units * unit - len(taken)))
    return shards


def take_rows(rows: Rows, indices: Sequence[int]) -> Rows:
    """Return the rows at ``indices``; ``-1`` gives a dummy row (a copy of row 0 that trains nothing)."""
    real = [i if i >= 0 else 0 for i in indices]
    index = torch.tensor(real, dtype=torch.long)
    out = {name: tensor.index_select(0, index) for name, tensor in rows.items()}
    dummy = torch.tensor([i < 0 for i in indices], dtype=torch.bool)
    if bool(dummy.any()):
        for name in _ZEROED_IN_DUMMY:
            if name in out:
                value = out[name]
                shape = (-1,) + (1,) * (value.dim() - 1)
                out[name] = torch.where(dummy.view(shape), torch.zeros((), dtype=value.dtype), value)
    return out


def rows_to_wire(rows: Rows) -> dict[str, Any]:
    """Return ``rows`` for a call to a rank actor: CPU tensors of a numpy dtype as numpy arrays, others as they are.

    Ray sends numpy arrays as raw buffers, but pickles tensors' storage: on the
    quickstart's batch (300 KB) a call took about 3 ms instead of 6.
    """
    return {name: (tensor.numpy() if tensor.dtype in _NUMPY_DTYPES and tensor.device.type == "cpu" else tensor)
            for name, tensor in rows.items()}


def rows_from_wire(rows: dict[str, Any]) -> Rows:
    """Return the tensors of :func:`rows_to_wire`'s rows (numpy arrays copied out of Ray's read-only buffers)."""
    return {name: (torch.from_numpy(value.copy()) if not isinstance(value, torch.Tensor) else value)
            for name, value in rows.items()}


def micro_batches(rows: int, micro_batch_size: int, unit: int = 1) -> list[slice]:
    """Return the row slices of the micro-batches of a shard (size rounded up to a multiple of ``unit``)."""
    size = max(unit, math.ceil(micro_batch_size / unit) * unit)
    return [slice(start, min(rows, start + size)) for start in range(0, rows, size)]


def token_micro_batches(lengths: Sequence[int], max_tokens: int, unit: int = 1) -> list[slice]:
    """Return contiguous slices of ``unit``-row blocks whose padded size (rows x longest row) fits ``max_tokens``.

    A block that alone exceeds the budget becomes a micro-batch of its own.
    """
    slices: list[slice] = []
    start, longest = 0, 0
    for first in range(0, len(lengths), unit):
        block = list(lengths[first:first + unit])
        candidate = max(longest, *block)
        if first > start and candidate * (first + len(block) - start) > max_tokens:
            slices.append(slice(start, first))
            start, candidate = first, max(block)
        longest = candidate
    if start < len(lengths):
        slices.append(slice(start, len(lengths)))
    return slices


def balanced_micro_batches(lengths: Sequence[int], parts: int, unit: int = 1) -> list[slice]:
    """Return exactly ``parts`` contiguous, non-empty slices of ``unit``-row blocks with about equal tokens.

    Raises ValueError when there are fewer blocks than ``parts``.
    """
    blocks = [sum(lengths[i:i + unit]) for i in range(0, len(lengths), unit)]
    if parts < 1 or parts > len(blocks):
        raise ValueError(f"cannot split {len(blocks)} block(s) into {parts} micro-batch(es)")
    total = sum(blocks) or 1
    bounds = [0]
    cumulative = 0
    for index, tokens in enumerate(blocks):
        cumulative += tokens
        cuts_left = parts - len(bounds)
        if cuts_left and index + 1 < len(blocks) and (
            cumulative >= total * len(bounds) / parts or len(blocks) - (index + 1) == cuts_left
        ):
            bounds.append(index + 1)
    bounds.append(len(blocks))
    return [slice(a * unit, min(len(lengths), b * unit)) for a, b in itertools.pairwise(bounds)]


def plan_micro_batches(shard_lengths: Sequence[Sequence[int]], batching: Any, unit: int = 1) -> list[list[slice]]:
    """Return each rank's micro-batch slices for a ``BatchingPlan``; every rank gets the same number.

    FSDP runs collectives in every forward and backward, so all ranks must run
    as many micro-batches. With ``use_dynamic_bsz`` the count is the largest any
    rank needs to keep within ``max_token_len`` (rows x longest row), and every
    rank splits its rows into that many micro-batches of about equal tokens;
    otherwise micro-batches hold ``micro_batch_size`` rows.
    """
    if not batching.use_dynamic_bsz:
        return [micro_batches(len(lengths), batching.micro_batch_size, unit) for lengths in shard_lengths]
    count = max(len(token_micro_batches(lengths, batching.max_token_len, unit)) for lengths in shard_lengths)
    return [balanced_micro_batches(lengths, count, unit) for lengths in shard_lengths]


def slice_rows(rows: Rows, where: slice) -> Rows:
    """Return the rows in ``where``, trimmed to the longest sequence among them."""
    part = {name: tensor[where] for name, tensor in rows.items()}
    length = int(part["attention_mask"].sum(dim=1).max()) if part["attention_mask"].numel() else 0
    length = max(length, 2)
    width = part["input_ids"].shape[1]
    if length >= width:
        return part
    trimmed: Rows = {}
    for name, tensor in part.items():
        if tensor.dim() >= 2 and tensor.shape[1] == width:
            trimmed[name] = tensor[:, :length]
        elif tensor.dim() >= 2 and tensor.shape[1] == width - 1:
            trimmed[name] = tensor[:, : length - 1]
        else:
            trimmed[name] = tensor
    return trimmed


def count_units(response_mask: torch.Tensor, units: Units, *, paired: bool = False,
                rows: torch.Tensor | None = None) -> int:
    """Return how many units a loss term averages over in ``response_mask`` ([B, T-1]).

    ``token``: response tokens; ``seq``: rows with at least one response token;
    ``row``: every row (pairs when ``paired``), dummy rows included; ``step``: 1
    (the term is already a share of the whole step). ``rows`` ([B] bool)
    restricts the count to those rows.
    """
    if units == "step":
        return 1
    mask = response_mask != 0
    if rows is not None:
        mask = mask & rows.view(-1, 1).to(mask.device)
    if units == "token":
        return int(mask.sum())
    if units == "seq":
        return int(mask.any(dim=1).sum())
    count = int(rows.sum()) if rows is not None else int(mask.shape[0])
    return count // 2 if paired else count

