"""Token sampling helpers shared by the ``hf`` engine: filtering and log-probability bookkeeping.

Two log-probabilities can be reported for a sampled token ``y`` at temperature ``T``:

* the *policy* log-prob ``log_softmax(logits / T)[y]`` over the whole
  vocabulary: what a trainer recomputes from the same tokens at the same
  temperature, so the importance ratio of an on-policy sample is exactly 1;
* the *sampling* log-prob under the distribution actually sampled from,
  after top-k / top-p filtering renormalised the kept tokens. It differs
  from the policy log-prob only when filtering is active.

Engines return the policy log-prob as :attr:`Completion.logprobs` and, when
filtering is active, the sampling log-prob as ``Completion.info["sampling_logprobs"]``.
Greedy decoding (``temperature == 0``) reports the policy log-prob at ``T = 1``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Return ``logits`` ([B, V]) with the tokens outside top-k, then outside top-p, set to ``-inf``.

    ``top_k <= 0`` and ``top_p >= 1`` disable the respective filter. Top-p keeps
    the smallest set of most likely tokens whose probability (renormalised after
    top-k) reaches ``top_p``; the most likely token is always kept.
    """
    out = logits
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, dim=-1, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        # drop a token when the tokens before it already reach top_p
        drop_sorted = (cumulative - torch.softmax(sorted_logits, dim=-1)) >= top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


def filtering_active(vocab_size: int, top_k: int, top_p: float) -> bool:
    """Return True when top-k or top-p would remove tokens from a vocabulary of ``vocab_size``."""
    return 0 < top_k < vocab_size or top_p < 1.0


class LogprobRecorder:
    """A logits processor for ``transformers`` generate that samples as configured and records log-probs.

    Called once per decoding step with the token ids so far and the next-token
    logits, it returns the scores to sample from (temperature-scaled and
    filtered; unchanged when greedy) and, at the next call, gathers the
    log-probs of the token that was sampled. Memory is one ``[B, V]`` step at a
    time, never the whole ``[B, L, V]`` history. Call :meth:`finish` with the
    generated ids afterwards.
    """

    def __init__(self, temperature: float, top_k: int = 0, top_p: float = 1.0,
                 suppress: Sequence[int] = ()) -> None:
        """``suppress``: token ids never sampled (their scores become ``-inf`` after the policy log-probs are
        taken, so those stay the model's own, as a trainer recomputes them)."""
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.suppress = torch.tensor(sorted(set(suppress)), dtype=torch.long)
        self._policy: list[torch.Tensor] = []
        self._sampling: list[torch.Tensor] = []
        self._last_policy: torch.Tensor | None = None
        self._last_sampling: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._last_policy is not None:
            self._gather(input_ids[:, -1])
        logits = scores.float()
        if self.temperature <= 0:  # greedy: argmax of the unchanged scores
            self._last_policy = torch.log_softmax(logits, dim=-1)
            return self._suppressed(scores)
        if self.temperature != 1.0:
            logits = logits / self.temperature
        self._last_policy = torch.log_softmax(logits, dim=-1)
        logits = self._suppressed(logits)
        if not filtering_active(logits.shape[-1], self.top_k, self.top_p):
            return logits
        filtered = filter_logits(logits, self.top_k, self.top_p)
        self._last_sampling = torch.log_softmax(filtered, dim=-1)
        return filtered

    def _suppressed(self, scores: torch.Tensor) -> torch.Tensor:
        if not self.suppress.numel():
            return scores
        out = scores.clone()
        out[:, self.suppress.to(out.device)] = float("-inf")
        return out

    def _gather(self, tokens: torch.Tensor) -> None:
        assert self._last_policy is not None
        index = tokens.long().view(-1, 1).to(self._last_policy.device)
        self._policy.append(self._last_policy.gather(1, index).squeeze(1))
        if self._last_sampling is not None:
            self._sampling.append(self._last_sampling.gather(1, index).squeeze(1))

    def finish(self, generated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Return the ``[B, L]`` policy log-probs of ``generated`` ([B, L] new ids) and the sampling ones (or None).

        A step recorded beyond ``L`` (generate may undo its last step) is ignored.
        """
        steps = generated.shape[1]
        if len(self._policy) < steps and self._last_policy is not None:
            self._gather(generated[:, len(self._policy)])
        if len(self._policy) < steps:
            raise RuntimeError(f"recorded {len(self._policy)} decoding steps for {steps} generated tokens")
        policy = torch.stack(self._policy[:steps], dim=1).cpu() if steps else torch.zeros(generated.shape[0], 0)
        sampling = None
        if self._sampling:
            sampling = torch.stack(self._sampling[:steps], dim=1).cpu()
        return policy, sampling
