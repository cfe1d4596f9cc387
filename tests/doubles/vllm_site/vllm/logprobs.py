"""The log-probability record of one token."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Logprob:
    """A token's log-probability (or logit, per ``logprobs_mode``), its rank and its text."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


#: One dict per generated token: token id -> its ``Logprob``.
SampleLogprobs = list[dict[int, Logprob]]
