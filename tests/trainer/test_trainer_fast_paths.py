"""The trainer's fast paths give the numbers of the full computation with less work: the LM head, log-softmax
and entropy from the first response position on, AdamW on torch's fused kernels where torch has them, and a
one-rank sync reading the live weights without the state-dict gather."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.trainer.support import make_experiences, make_trainer_plan
from trinity.algorithm import entropy_from_logits
from trinity.common.experience import make_batch
from trinity.trainer.batching import batch_rows
from trinity.trainer.fsdp_worker import _checkpoint_in_eval
from trinity.trainer.models import (
    _has_fused_adamw_kernel,
    accepts_logits_to_keep,
    first_response_column,
    fused_kernels_for,
)
from trinity.trainer.trainer import FSDPTrainer


@pytest.fixture(scope="module")
def trainer(ray_local: Any, tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    plan = make_trainer_plan(tiny_path, tmp_path_factory.mktemp("window"), "grpo", world_size=1, micro_batch_size=8,
                             **{"algorithm.kl_loss_fn": "none", "trainer.share_prompt_prefix": False})
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    yield trainer
    trainer.shutdown()


def test_first_response_column_is_the_earliest_trained_position() -> None:
    mask = torch.zeros(3, 10)
    mask[0, 6:9] = 1
    mask[1, 4:7] = 1
    assert first_response_column(mask) == 4
    assert first_response_column(torch.zeros(2, 5)) == 0


def test_window_log_probs_equal_the_full_forward_and_the_head_sees_only_the_window(trainer: Any) -> None:
    worker = trainer.workers[0]
    experiences = make_experiences(groups=3, group_size=2, seed=3)  # prompts of 4, 5, 6 tokens
    rows = batch_rows(make_batch(experiences, trainer.pad_token_id))
    start = first_response_column(rows["response_mask"])
    assert start == 3 and accepts_logits_to_keep(worker.actor)

    with torch.no_grad():
        logprobs, entropy, logits = worker._token_logprobs(worker.actor, rows, True)
        full = worker.actor(input_ids=rows["input_ids"], attention_mask=rows["attention_mask"]).logits
    width = rows["input_ids"].shape[1]
    assert logits.shape[1] == width - start  # the LM head ran on the window only
    mask = rows["response_mask"].bool()
    expected = torch.log_softmax(full[:, :-1], dim=-1).gather(-1, rows["input_ids"][:, 1:, None]).squeeze(-1)
    assert entropy is not None and logprobs.shape == entropy.shape == expected.shape
    torch.testing.assert_close(logprobs[mask], expected[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy[mask], entropy_from_logits(full[:, :-1])[mask], rtol=1e-5, atol=1e-5)
    assert not logprobs[:, :start].any() and not entropy[:, :start].any()


def test_a_model_without_logits_to_keep_gets_the_full_forward() -> None:
    class Plain(nn.Module):
        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return input_ids

    assert not accepts_logits_to_keep(Plain())


def test_adamw_uses_fused_kernels_where_torch_has_them(trainer: Any) -> None:
    worker = trainer.workers[0]
    assert worker.optimizer.defaults["fused"] is True  # torch lists the CPU
    assert fused_kernels_for([nn.Parameter(torch.zeros(2))])
    assert not fused_kernels_for([nn.Parameter(torch.zeros(2, dtype=torch.long), requires_grad=False)])
    assert not fused_kernels_for([])
    assert not fused_kernels_for([nn.Parameter(torch.zeros(2, device="meta"))])  # not a device torch lists
    # a listed device whose plugin registers no fused kernel here (no device plugin provides one in the tests)
    assert _has_fused_adamw_kernel("cpu")
    assert not _has_fused_adamw_kernel(torch._C._get_privateuse1_backend_name())


def test_a_one_rank_sync_sends_the_weights_the_full_gather_gives(trainer: Any) -> None:
    from trinity.weight_transport import state_dict_metas

    worker = trainer.workers[0]
    full = worker.full_state_dict()
    metas = worker.gather_weights()
    sent = worker._take_sync_state()
    assert "lm_head.weight" not in sent and metas == state_dict_metas(sent)  # the tied alias goes once
    assert sent.keys() == full.keys() - {"lm_head.weight"}
    for name, tensor in sent.items():
        assert torch.equal(tensor, full[name]), name
    live = dict(worker.actor.named_parameters())["model.embed_tokens.weight"]
    assert sent["model.embed_tokens.weight"].data_ptr() == live.to_local().data_ptr()  # no copy


@pytest.fixture(scope="module")
def packing_trainer(ray_local: Any, tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    plan = make_trainer_plan(tiny_path, tmp_path_factory.mktemp("packed"), "grpo", world_size=1, micro_batch_size=8,
                             **{"algorithm.kl_loss_fn": "none", "trainer.share_prompt_prefix": False,
                                "trainer.trainer_config.actor_rollout_ref.model.use_remove_padding": True})
    assert plan.trainer.pack_sequences
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    yield trainer
    trainer.shutdown()


def test_packed_rows_give_the_padded_log_probs_and_train_the_same_step(trainer: Any, packing_trainer: Any) -> None:
    """use_remove_padding: the rows of a micro-batch run end to end without padding (position ids restart per
    row), with the log-probs, entropies and first step of the padded forward."""
    experiences = make_experiences(groups=3, group_size=3, seed=11, logprobs=True)
    rows = batch_rows(make_batch(experiences, trainer.pad_token_id))
    padded, packed = trainer.workers[0], packing_trainer.workers[0]
    with torch.no_grad():
        expected, expected_entropy, _ = padded._token_logprobs(padded.actor, rows, True)
        got, entropy, logits = packed._token_logprobs(packed.actor, rows, True)
    assert logits.shape[:2] == (1, int(rows["attention_mask"].sum()))  # one sequence, no padding
    mask = rows["response_mask"].bool()
    assert entropy is not None and expected_entropy is not None
    torch.testing.assert_close(got[mask], expected[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy[mask], expected_entropy[mask], rtol=1e-5, atol=1e-5)
    padded_step, packed_step = trainer.train_step(experiences), packing_trainer.train_step(experiences)
    for name in ("loss", "grad_norm", "entropy"):
        assert math.isclose(padded_step[name], packed_step[name], rel_tol=1e-4, abs_tol=1e-6), name


@pytest.fixture(scope="module")
def checkpointing_trainer(ray_local: Any, tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    plan = make_trainer_plan(
        tiny_path, tmp_path_factory.mktemp("recompute"), "grpo", world_size=1, micro_batch_size=8,
        **{"algorithm.kl_loss_fn": "none",
           "trainer.trainer_config.actor_rollout_ref.model.enable_gradient_checkpointing": True},
    )
    assert plan.trainer.gradient_checkpointing
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    yield trainer
    trainer.shutdown()


def _layer_runs_in_forward_and_backward(worker: Any, rows: dict[str, torch.Tensor]) -> tuple[int, dict[str, Any]]:
    """Count each decoder layer's MLP runs through one forward and backward; return the count and the grads.

    The MLPs' ``forward`` is counted, not a module hook: torch's checkpoint runs no hooks when it recomputes.
    """
    runs = []
    mlps = [module for name, module in worker.actor.named_modules() if name.endswith("mlp")]
    for mlp in mlps:
        def counted(*args: Any, _forward: Any = mlp.forward, **kwargs: Any) -> Any:
            runs.append(1)
            return _forward(*args, **kwargs)

        mlp.forward = counted
    try:
        logprobs, _, _ = worker._token_logprobs(worker.actor, rows, False)
        (logprobs * rows["response_mask"]).sum().backward()
    finally:
        for mlp in mlps:
            del mlp.forward
    grads = {n: p.grad.full_tensor().clone() for n, p in worker.actor.named_parameters() if p.grad is not None}
    worker.optimizer.zero_grad(set_to_none=True)
    return len(runs) // len(mlps), grads


def test_gradient_checkpointing_recomputes_the_layers_and_keeps_the_gradients(checkpointing_trainer: Any) -> None:
    """enable_gradient_checkpointing: the layers' activations are recomputed in backward, although the trainer
    keeps its models in eval mode (transformers checkpoints only layers in training mode); dropout stays off."""
    worker = checkpointing_trainer.workers[0]
    rows = batch_rows(make_batch(make_experiences(groups=2, group_size=3, seed=5), checkpointing_trainer.pad_token_id))
    recomputed_runs, recomputed = _layer_runs_in_forward_and_backward(worker, rows)
    marked = [m for m in worker.actor.modules() if getattr(m, "gradient_checkpointing", False) is True]
    for module in marked:  # eval mode throughout, as the trainer had it before: nothing is recomputed
        module.training = False
    try:
        plain_runs, plain = _layer_runs_in_forward_and_backward(worker, rows)
    finally:
        assert _checkpoint_in_eval(worker.actor) == len(marked)
    assert plain_runs == 1 and recomputed_runs == 2
    assert plain.keys() == recomputed.keys() and plain
    for name, grad in plain.items():
        torch.testing.assert_close(recomputed[name], grad, rtol=1e-5, atol=1e-6)
    attention = [m for n, m in worker.actor.named_modules() if n.endswith("self_attn")]
    assert attention and not any(m.training for m in attention)
