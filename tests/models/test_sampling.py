"""Top-k/top-p filtering and the log-prob recorder, on hand-made logits."""

from __future__ import annotations

import math

import torch

from trinity.common.models.sampling import LogprobRecorder, filter_logits, filtering_active


def test_top_k_keeps_the_k_largest() -> None:
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0, 0.0]])
    out = filter_logits(logits, top_k=2)
    assert torch.isfinite(out).tolist() == [[False, True, True, False, False]]
    assert torch.equal(filter_logits(logits, top_k=0), logits)
    assert not filtering_active(5, 0, 1.0) and filtering_active(5, 2, 1.0) and filtering_active(5, 0, 0.5)
    assert not filtering_active(5, 5, 1.0)


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    assert torch.isfinite(filter_logits(logits, top_p=0.7)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(filter_logits(logits, top_p=0.8)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(filter_logits(logits, top_p=0.81)).tolist() == [[True, True, True, False]]
    assert torch.isfinite(filter_logits(logits, top_p=0.01)).tolist() == [[True, False, False, False]]
    # top-k first, then top-p over the renormalised survivors
    assert torch.isfinite(filter_logits(logits, top_k=2, top_p=0.6)).tolist() == [[True, False, False, False]]


def test_recorder_gathers_the_previous_step_and_the_last_token() -> None:
    rec = LogprobRecorder(temperature=2.0, top_k=2)
    step0 = torch.tensor([[0.0, 2.0, 4.0]])
    step1 = torch.tensor([[4.0, 0.0, 0.0]])
    out0 = rec(torch.tensor([[7]]), step0)
    assert torch.isinf(out0[0, 0]) and out0[0, 2].item() == 2.0  # scaled by 1/T, then top-2
    rec(torch.tensor([[7, 2]]), step1)  # token 2 was sampled at step 0
    policy, sampling = rec.finish(torch.tensor([[2, 0]]))
    expected0 = torch.log_softmax(step0 / 2, -1)[0, 2].item()
    expected1 = torch.log_softmax(step1 / 2, -1)[0, 0].item()
    assert math.isclose(policy[0, 0].item(), expected0, rel_tol=1e-6)
    assert math.isclose(policy[0, 1].item(), expected1, rel_tol=1e-6)
    assert sampling is not None
    assert math.isclose(sampling[0, 0].item(), math.log(math.exp(2) / (math.exp(2) + math.exp(1))), rel_tol=1e-6)


def test_greedy_recorder_leaves_scores_unchanged() -> None:
    rec = LogprobRecorder(temperature=0.0)
    scores = torch.tensor([[0.0, 1.0]])
    assert torch.equal(rec(torch.tensor([[1]]), scores), scores)
    policy, sampling = rec.finish(torch.tensor([[1]]))
    assert sampling is None
    assert math.isclose(policy[0, 0].item(), torch.log_softmax(scores, -1)[0, 1].item(), rel_tol=1e-6)
