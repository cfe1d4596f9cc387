"""Every tensor the algorithms create lives on the inputs' device.

The meta device stands in for an accelerator: mixing it with a tensor created
on the default device raises, so a stray ``torch.zeros(...)`` without
``device=`` would fail here the way it would on a GPU or NPU.
"""

from __future__ import annotations

import torch

from trinity.algorithm import (
    KL_FNS,
    LOSS_AGGREGATIONS,
    AdvantageInputs,
    aggregate,
    compute_advantages,
    compute_kl,
    discounted_returns,
    entropy_from_logits,
    generalized_advantage_estimation,
    masked_whiten,
    outcome_token_rewards,
    token_logprobs,
)

META = torch.device("meta")


def test_tensor_functions_follow_the_input_device() -> None:
    mask = torch.ones(2, 3, device=META)
    values = torch.zeros(2, 3, device=META)
    rewards = torch.zeros(2, device=META)
    results = [
        *(aggregate(values, mask, mode) for mode in LOSS_AGGREGATIONS.names()),
        *(compute_kl(values, values, name) for name in KL_FNS.names()),
        entropy_from_logits(torch.zeros(2, 3, 5, device=META)),
        token_logprobs(torch.zeros(2, 4, 5, device=META), torch.zeros(2, 4, dtype=torch.long, device=META)),
        token_logprobs(
            torch.zeros(2, 4, 5, device=META, dtype=torch.bfloat16),
            torch.zeros(2, 4, dtype=torch.long, device=META),
            temperature=0.7,
        ),
        outcome_token_rewards(rewards, mask),
        discounted_returns(values, mask, 0.9),
        *generalized_advantage_estimation(values, values, mask, 0.9, 0.95),
        masked_whiten(values, mask),
        *compute_advantages(
            "reinforce_plus_plus", AdvantageInputs(rewards=rewards, response_mask=mask, token_level_rewards=values)
        ),
        *compute_advantages("gae", AdvantageInputs(rewards=rewards, response_mask=mask, values=values)),
        *compute_advantages("remax", AdvantageInputs(rewards=rewards, response_mask=mask, reward_baselines=rewards)),
        *compute_advantages(
            "jsd", AdvantageInputs(rewards=rewards, response_mask=mask, old_logprobs=values, teacher_logprobs=values)
        ),
        compute_kl(values, values, "corrected_k3", values),
    ]
    assert [r.device for r in results] == [META] * len(results)
