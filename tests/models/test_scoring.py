"""``score_tokens``: an engine's log-probs of given response tokens (a teacher scoring a student's rollouts)."""

from __future__ import annotations

import pytest
import torch

from trinity.common.models.client import EngineClient
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import EngineError, HFEngine

CONVERSATIONS = [
    [{"role": "user", "content": "What is 2 plus 3?"}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Repeat the letter b."}],
]


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.5])
def test_scores_equal_the_log_probs_sampling_reported(shared_engine: HFEngine, temperature: float) -> None:
    params = SamplingParams(temperature=temperature, max_tokens=10, n=3, seed=5)
    completions = [c for group in shared_engine.chat(CONVERSATIONS, params) for c in group]
    scores = shared_engine.score_tokens(
        [c.prompt_tokens.tolist() for c in completions], [c.response_tokens.tolist() for c in completions],
        temperature,
    )
    assert len(scores) == len(completions)
    for completion, score in zip(completions, scores, strict=True):
        assert score.dtype == torch.float32 and score.shape == completion.response_tokens.shape
        torch.testing.assert_close(score, completion.logprobs, atol=2e-5, rtol=0)


def test_greedy_sampling_is_scored_at_temperature_one(shared_engine: HFEngine) -> None:
    (completion,) = shared_engine.chat(CONVERSATIONS[:1], SamplingParams(temperature=0.0, max_tokens=6))[0]
    (at_zero,) = shared_engine.score_tokens([completion.prompt_tokens.tolist()],
                                            [completion.response_tokens.tolist()], 0.0)
    (at_one,) = shared_engine.score_tokens([completion.prompt_tokens.tolist()],
                                           [completion.response_tokens.tolist()], 1.0)
    torch.testing.assert_close(at_zero, at_one)
    torch.testing.assert_close(at_zero, completion.logprobs, atol=2e-5, rtol=0)


def test_batching_and_padding_do_not_change_scores(shared_engine: HFEngine) -> None:
    prompts = [[5, 6, 7], [8] * 20, [9, 10]]
    responses = [[11, 12, 13, 14], [15], [16, 17, 18, 19, 20, 21, 22]]
    together = shared_engine.score_tokens(prompts, responses)
    for prompt, response, score in zip(prompts, responses, together, strict=True):
        (alone,) = shared_engine.score_tokens([prompt], [response])
        torch.testing.assert_close(score, alone, atol=1e-5, rtol=0)
    # a score is a log-prob under the model: the full next-token distribution, temperature-scaled
    with torch.no_grad():
        logits = shared_engine.model(input_ids=torch.tensor([prompts[0] + responses[0]])).logits[0]
    expected = torch.log_softmax(logits[2:6] / 2.0, dim=-1).gather(1, torch.tensor(responses[0]).view(-1, 1))
    (at_two,) = shared_engine.score_tokens(prompts[:1], responses[:1], 2.0)
    torch.testing.assert_close(at_two, expected.squeeze(1), atol=1e-5, rtol=0)


def test_the_logit_budget_splits_batches_without_changing_scores(
    shared_engine: HFEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = [[5, 6, 7], [8] * 20, [9, 10], [4, 4]]
    responses = [[11, 12, 13, 14], [15], [16, 17, 18, 19, 20, 21, 22], []]
    together = shared_engine.score_tokens(prompts, responses)
    vocab = shared_engine.model.get_output_embeddings().weight.shape[0]
    monkeypatch.setattr(shared_engine, "score_logits_budget", 16 * vocab)  # rows x kept positions <= 16
    assert [len(c) for c in shared_engine._score_chunks(list(zip(prompts, responses, strict=True)))] == [3, 1]
    for split, whole in zip(shared_engine.score_tokens(prompts, responses), together, strict=True):
        torch.testing.assert_close(split, whole, atol=1e-5, rtol=0)


def test_edge_cases_and_errors(shared_engine: HFEngine) -> None:
    assert shared_engine.score_tokens([], []) == []
    (empty,) = shared_engine.score_tokens([[1, 2]], [[]])
    assert empty.shape == (0,)
    with pytest.raises(EngineError, match="2 prompts but 1 responses"):
        shared_engine.score_tokens([[1], [2]], [[3]])
    with pytest.raises(EngineError, match="prompt 0 is empty"):
        shared_engine.score_tokens([[]], [[3]])


def test_engine_client_scores_through_the_engine(shared_engine: HFEngine) -> None:
    client = EngineClient(shared_engine)
    (via_client,) = client.score_tokens([(5, 6, 7)], [(11, 12)], 0.8)
    (direct,) = shared_engine.score_tokens([[5, 6, 7]], [[11, 12]], 0.8)
    torch.testing.assert_close(via_client, direct)


def test_an_engine_without_scoring_says_so() -> None:
    class SamplesOnly:
        def model_version(self) -> int:
            return 0

    with pytest.raises(NotImplementedError, match=r"engine 2 \(SamplesOnly\) cannot score tokens.*engine_type: hf"):
        EngineClient(SamplesOnly(), index=2).score_tokens([[1]], [[2]])
