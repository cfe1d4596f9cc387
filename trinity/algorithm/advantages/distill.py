"""On-policy distillation: per-token advantages from a teacher's log-probs of the student's samples.

Both read ``teacher_logprobs`` (the teacher's log-prob of each sampled token,
provided by the workflow) and ``old_logprobs`` (the student's sampling
log-probs); neither reads the reward.
"""

from __future__ import annotations

import math

import torch

from trinity.algorithm.advantage import AdvantageInputs
from trinity.algorithm.advantages.common import masked_tokens


def on_policy_distill_advantages(
    inputs: AdvantageInputs, *, kl_coef: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``kl_coef * (teacher_logprobs - old_logprobs)`` per response token, as advantages and returns.

    This is minus the per-token reverse KL estimate, so maximising it pulls the
    student towards the teacher. Raises ValueError without ``teacher_logprobs``
    or ``old_logprobs``.
    """
    teacher = inputs.require("teacher_logprobs", "on_policy_distill")
    student = inputs.require("old_logprobs", "on_policy_distill")
    with torch.no_grad():
        return masked_tokens(kl_coef * (teacher - student), inputs)


def jsd_advantages(
    inputs: AdvantageInputs,
    *,
    lambda_coef: float = 0.5,
    kl_coef: float = 1.0,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``-kl_coef * JSD`` per response token, as advantages and returns.

    With ``s``, ``t`` the student's and teacher's log-probs divided by
    ``temperature`` and ``b = lambda_coef``: ``b = 0`` gives ``s - t``,
    ``b = 1`` gives ``t - s``, otherwise the mixture ``m = log((1 - b) e^s + b e^t)``
    gives ``JSD = b (t - m) + (1 - b) (s - m)``, computed in log space.
    ``chunk_size`` (upstream's memory option) does not change the result.
    Raises ValueError without ``teacher_logprobs`` / ``old_logprobs``, for
    ``lambda_coef`` outside [0, 1], a non-positive ``temperature`` or ``chunk_size``.
    """
    if not 0.0 <= lambda_coef <= 1.0:
        raise ValueError(f"advantage function 'jsd': lambda_coef must be in [0, 1], got {lambda_coef}")
    if temperature <= 0:
        raise ValueError(f"advantage function 'jsd': temperature must be positive, got {temperature}")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"advantage function 'jsd': chunk_size must be at least 1, got {chunk_size}")
    teacher = inputs.require("teacher_logprobs", "jsd")
    student = inputs.require("old_logprobs", "jsd")
    with torch.no_grad():
        s = torch.where(inputs.mask, student, student.new_zeros(())) / temperature
        t = torch.where(inputs.mask, teacher, teacher.new_zeros(())) / temperature
        if lambda_coef == 0.0:
            jsd = s - t
        elif lambda_coef == 1.0:
            jsd = t - s
        else:
            mixture = torch.logaddexp(s + math.log1p(-lambda_coef), t + math.log(lambda_coef))
            jsd = lambda_coef * (t - mixture) + (1.0 - lambda_coef) * (s - mixture)
        return masked_tokens(-kl_coef * jsd, inputs)
