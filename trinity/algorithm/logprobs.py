"""Log-probabilities of the tokens a sequence actually continues with."""

from __future__ import annotations

import torch

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def token_logprobs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """Return ``log softmax(logits[:, t] / temperature)[input_ids[:, t+1]]`` as a ``[B, T-1]`` tensor.

    ``logits`` is ``[B, T, V]`` and ``input_ids`` ``[B, T]``; position ``t`` of the
    result is the log-probability of token ``t + 1`` (the :class:`~trinity.common.experience.Batch`
    alignment). No full log-softmax is materialised: each value is the gathered
    logit minus ``logsumexp`` over the vocabulary. Half-precision logits are
    upcast to float32 ``chunk_rows`` rows at a time (default 1), so the float32
    copy never exceeds one chunk; float32/float64 logits are processed at once
    unless ``chunk_rows`` is given. The result is float32 for half-precision
    input, else the logits' dtype; gradient flows to ``logits``.

    Raises ValueError for mismatched shapes, a non-positive temperature or chunk size.
    """
    if logits.dim() != 3 or input_ids.dim() != 2 or logits.shape[:2] != input_ids.shape:
        raise ValueError(
            f"expected logits [B, T, V] and input_ids [B, T], got {tuple(logits.shape)} and {tuple(input_ids.shape)}"
        )
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if chunk_rows is not None and chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
    rows = logits.shape[0]
    low_precision = logits.dtype in _LOW_PRECISION
    if chunk_rows is None:
        chunk_rows = 1 if low_precision else max(rows, 1)
    predicting = logits[:, :-1]
    targets = input_ids[:, 1:].long().unsqueeze(-1)
    pieces = []
    for start in range(0, rows, chunk_rows):
        chunk = predicting[start : start + chunk_rows]
        if low_precision:
            chunk = chunk.float()
        if temperature != 1.0:
            chunk = chunk / temperature
        picked = chunk.gather(-1, targets[start : start + chunk_rows]).squeeze(-1)
        pieces.append(picked - torch.logsumexp(chunk, dim=-1))
    if not pieces:
        dtype = torch.float32 if low_precision else logits.dtype
        return logits.new_zeros(input_ids.shape[0], max(input_ids.shape[1] - 1, 0), dtype=dtype)
    return torch.cat(pieces, dim=0)
