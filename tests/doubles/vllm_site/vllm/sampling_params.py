"""Sampling parameters with vLLM's validation rules (``ValueError`` on bad values)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import IntEnum

logger = logging.getLogger(__name__)

#: Temperatures below this mean greedy sampling (vLLM's ``_SAMPLING_EPS``).
SAMPLING_EPS = 1e-5
#: Positive temperatures below this are raised to it, as vLLM does (it warns of nan/inf otherwise).
MIN_POSITIVE_TEMPERATURE = 1e-2


class RequestOutputKind(IntEnum):
    """What each ``RequestOutput`` of a request carries."""

    #: Everything generated so far.
    CUMULATIVE = 0
    #: Only what is new since the last output.
    DELTA = 1
    #: Nothing until the request has finished, then everything.
    FINAL_ONLY = 2


@dataclass(kw_only=True)
class SamplingParams:
    """How to sample the completions of one request (vLLM's fields, subset)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    max_tokens: int | None = 16
    logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    #: Added to a token's logit before sampling (token id -> bias); the engine checks the ids against the vocabulary.
    logit_bias: dict[int, float] | None = None

    def __post_init__(self) -> None:
        """Normalise ``stop``/``stop_token_ids`` to lists and validate, as vLLM does on construction."""
        if 0 < self.temperature < MIN_POSITIVE_TEMPERATURE:
            logger.warning(
                "temperature %s is below %s; raised to %s as vLLM does",
                self.temperature,
                MIN_POSITIVE_TEMPERATURE,
                MIN_POSITIVE_TEMPERATURE,
            )
            self.temperature = MIN_POSITIVE_TEMPERATURE
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        else:
            self.stop = list(self.stop)
        self.stop_token_ids = [] if self.stop_token_ids is None else list(dict.fromkeys(self.stop_token_ids))
        self.output_kind = RequestOutputKind(self.output_kind)
        self._verify_args()
        if self.temperature < SAMPLING_EPS:
            # Greedy: the filters are meaningless, and n > 1 would give n equal completions.
            self.top_p = 1.0
            self.top_k = -1
            if self.n > 1:
                raise ValueError(f"n must be 1 when using greedy sampling, got {self.n}.")

    def _verify_args(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if not isinstance(self.top_k, int) or (self.top_k != -1 and self.top_k < 1):
            raise ValueError(f"top_k must be -1 (disable), or at least 1, got {self.top_k}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.logprobs is not None and self.logprobs < 0:
            raise ValueError(f"logprobs must be non-negative, got {self.logprobs}.")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}.")
        assert isinstance(self.stop, list)
        if not all(isinstance(s, str) for s in self.stop):
            raise ValueError(f"stop must be a string or a list of strings, got {self.stop!r}.")
        if any(not s for s in self.stop):
            raise ValueError("stop cannot contain an empty string.")
        if self.stop and not self.detokenize:
            raise ValueError(
                "stop strings are only supported when detokenize is True. Set detokenize=True to use stop."
            )
        if self.logit_bias is not None and not all(
                isinstance(t, int) and isinstance(b, (int, float)) for t, b in self.logit_bias.items()):
            raise ValueError(f"logit_bias must map token ids (int) to biases (float), got {self.logit_bias!r}.")
        assert isinstance(self.stop_token_ids, list)
        if not all(isinstance(t, int) for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must contain only integers, got {self.stop_token_ids}.")
