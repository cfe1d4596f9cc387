"""Shared prompt prefixes: a micro-batch's distinct prompts run once, with the log-probs, entropies, gradients and
optimizer steps of the padded forward (real transformers models, a real one-rank FSDP2 trainer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.trainer.support import make_experiences, make_trainer_plan
from trinity.common.experience import make_batch
from trinity.trainer import shared_prefix
from trinity.trainer.batching import batch_rows
from trinity.trainer.models import logprobs_and_entropy
from trinity.trainer.trainer import FSDPTrainer

VOCAB = 97


def _rows(prompts: list[list[int]], responses: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``response_mask`` of prompt + response rows."""
    width = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    real = torch.zeros_like(ids)
    trained = torch.zeros(len(prompts), width - 1)
    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        ids[i, : len(prompt) + len(response)] = torch.tensor(prompt + response)
        real[i, : len(prompt) + len(response)] = 1
        trained[i, len(prompt) - 1 : len(prompt) - 1 + len(response)] = 1
    return ids, real, trained


def _groups(seed: int = 0, sizes: tuple[int, ...] = (5, 9, 3), samples: int = 4
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for length in sizes:
        prompt = torch.randint(3, VOCAB, (length,), generator=generator).tolist()
        for _ in range(samples):
            prompts.append(prompt)
            count = int(torch.randint(1, 7, (1,), generator=generator))
            responses.append(torch.randint(3, VOCAB, (count,), generator=generator).tolist())
    return _rows(prompts, responses)


def _model(kind: str = "qwen2", **extra: Any) -> nn.Module:
    """A small random causal LM of ``kind`` on sdpa, in float32 (four query heads over two key heads)."""
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128)
    if kind == "llama":
        config: Any = transformers.LlamaConfig(**common, **extra)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.Qwen2Config(**common, **extra)
        model = transformers.Qwen2ForCausalLM(config)
    model.config._attn_implementation = "sdpa"
    return model.eval()


def test_the_layout_runs_each_distinct_prompt_once_and_predicts_every_response_token() -> None:
    ids, real, trained = _groups()
    layout = shared_prefix.shared_prefix_layout(ids, real, trained)
    assert layout is not None
    assert (layout.rows, layout.groups) == (12, 3)
    responses = int(trained.sum())
    assert layout.tokens == 5 + 9 + 3 + responses  # three prompts, then every response token
    assert int(layout.predicted.sum()) == responses
    assert bool((layout.predicted <= trained.bool()).all())
    assert torch.equal(layout.targets, ids[:, 1:][trained.bool()])
    # each suffix's positions continue its prompt's
    assert layout.positions[:5].tolist() == list(range(5))
    first_suffix = layout.suffix_index[0, 0]
    assert int(layout.positions[first_suffix]) == 5


def test_rows_that_share_nothing_keep_the_padded_forward() -> None:
    ids, real, trained = _rows([[5, 6, 7], [5, 6, 8]], [[9, 10], [11]])
    assert shared_prefix.shared_prefix_layout(ids, real, trained) is None


def test_a_row_that_trains_nothing_keeps_its_last_token_apart() -> None:
    ids, real, trained = _rows([[5, 6, 7], [5, 6, 7]], [[9, 10], [11, 12]])
    trained[1] = 0  # a dummy row: a copy that trains nothing
    layout = shared_prefix.shared_prefix_layout(ids, real, trained)
    assert layout is None  # its prefix (all but its last token) differs from row 0's prompt
    ids, real, trained = _rows([[5, 6, 7]] * 3, [[9, 10], [11, 12], [13]])
    trained[2] = 0
    layout = shared_prefix.shared_prefix_layout(ids, real, trained)
    assert layout is not None and layout.groups == 1  # [5, 6, 7] is every row's prefix
    assert layout.suffix_valid[2].sum() == 1 and int(layout.predicted[2].sum()) == 1


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_entropies_and_gradients_equal_the_padded_forward(kind: str, temperature: float) -> None:
    model = _model(kind)
    ids, real, trained = _groups(seed=1)
    mask = trained.bool()
    padded = model(input_ids=ids, attention_mask=real, use_cache=False).logits
    expected, expected_entropy = logprobs_and_entropy(padded, ids, temperature, True)
    assert expected_entropy is not None
    (expected * trained).sum().backward()
    expected_grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()

    assert shared_prefix.enable(model) is None
    layout = shared_prefix.shared_prefix_layout(ids, real, trained)
    assert layout is not None
    flat, flat_entropy, logits = shared_prefix.token_logprobs(model, layout, temperature, True)
    assert flat_entropy is not None
    assert logits.shape[1] == layout.keep.shape[0] < layout.tokens  # the LM head ran on the kept positions only
    assert layout.calls == 2  # both attention layers took the layout
    got = torch.zeros_like(expected)
    got[layout.predicted] = flat
    (got * trained).sum().backward()
    torch.testing.assert_close(got[mask], expected[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(flat_entropy, expected_entropy[layout.predicted], rtol=1e-5, atol=1e-5)
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None
        torch.testing.assert_close(parameter.grad, expected_grads[name], rtol=1e-4, atol=1e-5, msg=name)


def test_with_the_layout_absent_the_model_runs_plain_sdpa() -> None:
    model = _model()
    ids, real, _ = _groups(seed=2)
    before = model(input_ids=ids, attention_mask=real, use_cache=False).logits
    assert shared_prefix.enable(model) is None
    after = model(input_ids=ids, attention_mask=real, use_cache=False).logits
    torch.testing.assert_close(after, before)


def test_a_model_whose_attention_ignores_the_layout_is_caught() -> None:
    model = _model()  # plain sdpa: nothing reads the layout, every row would attend across the packed sequence
    ids, real, trained = _groups()
    layout = shared_prefix.shared_prefix_layout(ids, real, trained)
    assert layout is not None
    with pytest.raises(RuntimeError, match="ran 0 of its 2 attention layers"):
        shared_prefix.token_logprobs(model, layout, 1.0, False)


def test_models_it_cannot_run_say_why_and_keep_their_attention() -> None:
    sliding = _model(use_sliding_window=True, sliding_window=4, max_window_layers=0)
    why = shared_prefix.try_enable(sliding, torch.device("cpu"))
    assert why is not None and "sliding" in why
    assert sliding.config._attn_implementation == "sdpa"
    eager = _model()
    eager.config._attn_implementation = "eager"
    why = shared_prefix.try_enable(eager, torch.device("cpu"))
    assert why == "its attention is eager; shared prefixes run on sdpa only"
    supported = _model()
    assert shared_prefix.try_enable(supported, torch.device("cpu")) is None
    assert supported.config._attn_implementation == shared_prefix.ATTENTION_NAME


def _trainer(tiny_path: Path, root: Path, share: bool) -> FSDPTrainer:
    plan = make_trainer_plan(tiny_path, root, "grpo", world_size=1, micro_batch_size=4,
                             **{"trainer.share_prompt_prefix": share,
                                # plain SGD at lr 1: the step moves each weight by its (clipped) gradient, so equal
                                # weights after it mean equal gradients (AdamW's first step is lr * sign(gradient))
                                "algorithm.optimizer.optimizer_type": "sgd", "algorithm.optimizer.lr": 1.0,
                                "algorithm.optimizer.weight_decay": 0.0,
                                "trainer.trainer_config.actor_rollout_ref.actor.entropy_coeff": 0.01,
                                # the trainer recomputes the old log-probs (prepare's forward shares too)
                                "trainer.trainer_config.algorithm.rollout_correction.bypass_mode": False})
    return FSDPTrainer(plan, world_size=1, in_process=True)


def test_a_grpo_step_with_shared_prefixes_equals_the_padded_one(
    ray_local: Any, tiny_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    experiences = make_experiences(groups=3, group_size=4, seed=5, logprobs=True)
    results = {}
    for share in (False, True):
        trainer = _trainer(tiny_path, tmp_path / str(share), share)
        try:
            worker = trainer.workers[0]
            assert worker.reference is not None  # GRPO's KL loss: the reference model's log-probs too
            assert worker._shares_prefix == ({id(worker.actor), id(worker.reference)} if share else set())
            # the start-up check's forward left no gathered weights behind: every parameter is its shard again
            from torch.distributed.tensor import DTensor

            assert all(isinstance(p, DTensor) for p in worker.actor.parameters())
            rows = batch_rows(make_batch(experiences, trainer.pad_token_id))
            with caplog.at_level("INFO", logger="trinity.trainer.fsdp_worker"):
                metrics = trainer.train_step(experiences)
            results[share] = (metrics, trainer.full_state_dict(), rows)
        finally:
            trainer.shutdown()
    (plain, plain_weights, rows), (shared, shared_weights, _) = results[False], results[True]
    assert rows["input_ids"].shape[0] == 12
    assert "shared prompt prefixes: 4 rows in 1 prefix groups" in caplog.text
    assert plain["grad_norm"] > 0 and "entropy" in plain
    for key in ("loss", "entropy", "grad_norm"):
        assert shared[key] == pytest.approx(plain[key], rel=1e-4, abs=1e-6), key
    for name, value in plain_weights.items():
        torch.testing.assert_close(shared_weights[name], value, rtol=1e-5, atol=1e-5)
