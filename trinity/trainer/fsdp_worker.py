"""One rank of the FSDP2 trainer: the actor (policy), an optional frozen reference and an optional critic.

A :class:`FSDPWorker` runs as a Ray actor (one per trainer rank; plain
objects work too). The driver, :class:`~trinity.trainer.trainer.FSDPTrainer`,
constructs all ranks, asks rank 0 for a rendezvous address, then calls
:meth:`FSDPWorker.setup` on every rank at once. Every method marked
*collective* must be called on all ranks together (FSDP gathers parameters
in each forward, backward and state-dict call).

Device handling goes through :mod:`trinity.device` only: the process group
backend string (``cpu:gloo`` here, ``cpu:gloo,<device>:<collective>`` on an
accelerator), the rank's device assignment (made when the rank starts, before
the device runtime: :func:`trinity.device.assign_devices`), ``set_device``,
``torch_device`` and the mesh's device type.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import ray
import torch
from torch import nn

import trinity.device
from trinity.algorithm import (
    PolicyLossInputs,
    aggregate,
    compute_policy_loss,
    entropy_from_logits,
    entropy_loss,
    kl_loss,
    nec_from_logits,
)
from trinity.common.config.plan.run import RunPlan
from trinity.common.config.plan.trainer import OffloadPlan, OptimizerPlan
from trinity.common.models import vision
from trinity.common.models.checksum import state_dict_checksum, tied_alias_sources
from trinity.device.types import OffloadSupport
from trinity.trainer import lora, shared_prefix, ulysses
from trinity.trainer.batching import Rows, count_units, row_count, rows_from_wire, rows_to_wire, slice_rows
from trinity.trainer.checkpoint import CheckpointDir, read_state
from trinity.trainer.models import (
    accepts_logits_to_keep,
    device_mesh,
    first_response_column,
    fused_kernels_for,
    load_causal_lm,
    load_value_model,
    logprobs_and_entropy,
    packed_layout,
    shard_model,
    torch_dtype,
)
from trinity.trainer.offload import move_optimizer_state, shard_options
from trinity.trainer.plan import TOKEN_STATISTICS, TrainingPlan
from trinity.utils import plugins
from trinity.weight_transport.buckets import dtype_name
from trinity.weight_transport.protocol import TensorMeta, WeightSyncGroupInfo

# A rank started by a driver that loaded user plugins loads them too, before it unpickles a plan naming them.
plugins.load_in_worker()

#: The Ray concurrency group of a rank's weight-sync rendezvous, and how many may wait at once.
WEIGHT_SYNC_GROUP = "weight_sync"
WEIGHT_SYNC_THREADS = 4

logger = logging.getLogger(__name__)

# A vision-language model's output carries its image features as views (``image_outputs.pooler_output``); the
# trainer reads the logits only and never changes an output in place, which is what this FSDP2 warning is about.
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor", category=UserWarning)

#: Seconds the trainer's own process group waits in a collective before failing.
TRAINER_PG_TIMEOUT_S = 1800.0
#: Files of a model folder that are weights (not copied into a checkpoint's ``hf/``).
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5")


def hf_support_files(model_path: str | Path) -> list[Path]:
    """Return the files of a Hugging Face folder other than weights (config, tokenizer, templates).

    Empty when ``model_path`` is not a local folder (a hub name): the converter then needs ``--model-path``.
    """
    folder = Path(model_path)
    if not folder.is_dir():
        return []
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and not entry.name.endswith(_WEIGHT_SUFFIXES) and not entry.name.endswith(".index.json"):
            found.append(entry)
    return found


def _full_tensor(value: Any) -> torch.Tensor:
    full = getattr(value, "full_tensor", None)
    return full() if callable(full) else value  # type: ignore[no-any-return]


def _schedule(optimizer: OptimizerPlan, total_steps: int | None) -> Callable[[int], float]:
    def factor(step: int) -> float:
        return optimizer.factor(step, total_steps)

    return factor


class _Accumulator:
    """Token-weighted means of per-micro-batch metrics."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def add(self, metrics: dict[str, float], weight: float) -> None:
        if weight <= 0:
            return
        for name, value in metrics.items():
            if math.isfinite(value):
                self.sums[name] = self.sums.get(name, 0.0) + value * weight
                self.weights[name] = self.weights.get(name, 0.0) + weight


def _enable_gradient_checkpointing(model: nn.Module) -> None:
    """Recompute activations in backward (transformers' own switch; non-reentrant, as FSDP2 needs)."""
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers 5.x's name
    if callable(enable):
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
        return
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if callable(enable):
        enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _reshard(model: nn.Module) -> None:
    """Free the gathered weights FSDP2 keeps after a forward with no backward: ``parameters()`` are the shards again."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def _checkpoint_in_eval(model: nn.Module) -> int:
    """Make the layers set to recompute their activations do so in eval mode; return how many layers that is.

    transformers recomputes a layer only while the layer is in training mode,
    and the trainer keeps its models in eval mode (no dropout). Only those
    layers are marked training, not their children, so dropout stays off.
    """
    layers = 0
    for module in model.modules():
        if getattr(module, "gradient_checkpointing", False) is True:
            module.training = True
            layers += 1
    return layers


class FSDPWorker:
    """One trainer rank. Construct cheaply, then call :meth:`setup` on every rank concurrently."""

    def __init__(self, run: RunPlan, rank: int, world_size: int, checkpoint_dir: str | None = None, *,
                 use_torch_compile: bool = False, total_steps: int | None = None) -> None:
        self.run = run
        self.settings = run.trainer
        self.rank = rank
        self.world_size = world_size
        self.plan: TrainingPlan = run.algorithm
        self.use_torch_compile = use_torch_compile
        self.total_steps = total_steps
        self.checkpoints = CheckpointDir(checkpoint_dir) if checkpoint_dir else None
        self.step = 0
        #: The compute dtype (``auto`` resolved by the device backend) and the attention kernel for it.
        self.dtype_name = trinity.device.resolve_dtype(run.trainer.dtype)
        self.compute_dtype = torch_dtype(self.dtype_name)
        self.attention = trinity.device.attention_implementation(self.dtype_name).implementation
        self._sync_state: dict[str, torch.Tensor] | None = None
        self._shared_weights: Any = None  # mode colocate's shared file (SharedWeights), from the first publish
        self._shared_sources: dict[str, torch.Tensor] = {}
        self._shared_key: tuple[Any, ...] = ()
        #: ``gather_weights(stream=True)`` with two or more ranks: the sharded tensors to gather, and their metas.
        self._stream_entries: list[tuple[lora.ExportEntry, dict[str, torch.Tensor]]] | None = None
        self._stream_metas: list[TensorMeta] = []
        self._weight_sync: Any = None
        #: Models (by id) whose micro-batches run their shared prompt prefixes once.
        self._shares_prefix: set[int] = set()
        #: The shared-prefix layout of the logits :meth:`_token_logprobs` returned last (None: another layout).
        self._logits_layout: shared_prefix.SharedPrefixLayout | None = None
        self._told_sharing = False
        #: Ulysses: ranks sharing each sequence, this rank's group and place in it (set by :meth:`setup`).
        self.sequence_parallel = run.trainer.ulysses_size
        self.sequence_group: Any = None
        self.sequence_rank = 0
        self._last_shard: ulysses.SequenceShard | None = None
        self._ready = False
        #: This rank's device on its node (claimed, or Ray's), masked before the device runtime starts.
        self.devices = trinity.device.assign_devices(1, make_current=False)

    # -- setup -----------------------------------------------------------------------------

    def node_address(self) -> tuple[str, int]:
        """Return ``(address, free port)`` on this rank's node (rank 0 hosts rendezvous stores)."""
        from trinity.weight_transport.addresses import find_free_port, node_ip_address

        return node_ip_address(), find_free_port()

    def setup(self, master_addr: str, master_port: int, local_rank: int | None = None) -> dict[str, Any]:
        """Join the trainer's process group and build the models and optimizers (collective).

        ``local_rank`` is the visible device to use; None: the one this rank was assigned.
        """
        import torch.distributed as dist

        started = time.monotonic()
        if local_rank is None:
            local_rank = self.devices.local_index or 0
        trinity.device.set_device(local_rank)
        self.device = trinity.device.torch_device()
        if not dist.is_initialized():
            dist.init_process_group(
                backend=trinity.device.get_process_group_backend(),
                init_method=f"tcp://{master_addr}:{master_port}",
                rank=self.rank,
                world_size=self.world_size,
                timeout=datetime.timedelta(seconds=TRAINER_PG_TIMEOUT_S),
            )
        settings = self.settings
        trinity.device.manual_seed(settings.seed)
        self.mesh = device_mesh(self.world_size)
        model_path = self.run.model.path
        remote_code = self.run.model.trust_remote_code
        self._join_sequence_groups()
        policy_attention: str | dict[str, str] | None = self.attention
        if self.sequence_parallel > 1:
            ulysses.register()
            policy_attention = ulysses.attention_implementation(model_path, self.attention)

        support = trinity.device.offload_support() if settings.offloads else None
        actor = load_causal_lm(model_path, trust_remote_code=remote_code, attn_implementation=policy_attention)
        self.trainable_params = sum(p.numel() for p in actor.parameters())
        if settings.lora is not None:
            self.trainable_params = lora.inject(actor, settings.lora)
        if settings.gradient_checkpointing:
            _enable_gradient_checkpointing(actor)
        #: The policy's config: vision-language rows take their placeholder ids from it.
        self._model_config = actor.config
        #: A vision-language policy's ``get_rope_index`` (its 3-D rotary positions; the same for every copy of
        #: the model, it reads the config only), else None.
        self._rope_index = vision.rope_index(actor) if vision.is_vision_language(actor.config) else None
        #: The config again where the model takes ``mm_token_type_ids`` (transformers 5), else None.
        self._token_types_config = (actor.config if self._rope_index is not None
                                    and vision.takes_token_types(self._rope_index) else None)
        self.actor = self._shard(actor, settings.offload, support, "actor")
        self.actor.eval()  # no dropout in RL fine-tuning; gradients still flow
        if settings.gradient_checkpointing:
            _checkpoint_in_eval(self.actor)
        self.optimizer, self.scheduler = self._optimizer(self.actor, settings.optimizer)

        self.reference: nn.Module | None = None
        #: With LoRA the reference model is the actor with its adapters off (the base), not a second model.
        self.reference_is_base = self.plan.use_reference and settings.lora is not None
        if self.plan.use_reference and not self.reference_is_base:
            reference = load_causal_lm(model_path, trust_remote_code=remote_code,
                                       attn_implementation=policy_attention)
            reference.requires_grad_(False)
            self.reference = self._shard(reference, settings.reference_offload, support, "reference model")
            self.reference.eval()

        self.critic: nn.Module | None = None
        self.critic_optimizer: torch.optim.Optimizer | None = None
        self.critic_scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
        if self.plan.use_critic:
            critic_plan = settings.critic
            if critic_plan is None:
                raise RuntimeError("the algorithm trains a critic but the trainer plan has no critic settings")
            trinity.device.manual_seed(settings.seed + 1)  # same value-head init on every rank
            critic = load_value_model(critic_plan.path, trust_remote_code=remote_code,
                                      attn_implementation=self.attention)
            if critic_plan.gradient_checkpointing:
                _enable_gradient_checkpointing(critic.backbone)
            self.critic = self._shard(critic, critic_plan.offload, support, "critic")
            self.critic.eval()
            if critic_plan.gradient_checkpointing:
                _checkpoint_in_eval(self.critic)
            self.critic_optimizer, self.critic_scheduler = self._optimizer(self.critic, critic_plan.optimizer)

        for name, model in (("actor", self.actor), ("reference model", self.reference)):
            if model is not None and settings.share_prompt_prefix and self.sequence_parallel == 1:
                why = shared_prefix.try_enable(model, self.device)
                _reshard(model)  # the check's forward leaves the root's weights gathered, kept for a backward
                if why is None:
                    self._shares_prefix.add(id(model))
                elif self.rank == 0:
                    logger.info("trainer: the %s runs every row's prompt (no shared prefixes): %s", name, why)
        head = logprobs_and_entropy
        self._head: Callable[..., tuple[torch.Tensor, torch.Tensor | None]] = (
            torch.compile(head, dynamic=True) if self.use_torch_compile else head
        )
        self._ready = True
        params = sum(p.numel() for p in self.actor.parameters())
        logger.info("trainer rank %d/%d ready in %.1f s", self.rank, self.world_size, time.monotonic() - started)
        return {
            "rank": self.rank,
            "backend": trinity.device.get_process_group_backend(),
            "device": str(self.device),
            "local_params": int(params),
            "use_torch_compile": self.use_torch_compile,
            "reference": self.reference is not None or self.reference_is_base,
            "trainable_params": int(self.trainable_params),
            "critic": self.critic is not None,
            "assignment": self.devices.as_record(),
        }

    def _join_sequence_groups(self) -> None:
        """Make the Ulysses groups (consecutive ranks; collective: every rank makes every group) and join one."""
        import torch.distributed as dist

        size = self.sequence_parallel
        if size == 1:
            return
        if self.world_size % size:
            raise RuntimeError(f"trainer.ulysses_sequence_parallel_size {size} does not divide the trainer's "
                               f"{self.world_size} ranks")
        for first in range(0, self.world_size, size):
            group = dist.new_group(list(range(first, first + size)))
            if first <= self.rank < first + size:
                self.sequence_group = group
        self.sequence_rank = self.rank % size

    def _shard(self, model: nn.Module, offload: OffloadPlan, support: OffloadSupport | None, owner: str) -> nn.Module:
        """Shard ``model`` with FSDP2 on the mesh; place it on the device, or leave it on the host when offloaded."""
        options = shard_options(offload, support, owner) if support is not None else {}
        sharded = shard_model(model, self.mesh, self.compute_dtype, **options)
        if not offload.params:
            sharded.to(self.device)
        else:  # the parameters stay on the host (FSDP2 brings each layer over); buffers are not FSDP2's: moved here
            for module in sharded.modules():
                for name, buffer in module.named_buffers(recurse=False):
                    module._buffers[name] = buffer.to(self.device)
        return sharded

    def _optimizer_step(self, optimizer: torch.optim.Optimizer, offload: OffloadPlan) -> None:
        """Step ``optimizer``; with optimizer offload alone its state comes to the device for the step only."""
        if offload.optimizer and not offload.params:
            move_optimizer_state(optimizer, self.device)
            optimizer.step()
            move_optimizer_state(optimizer, "cpu")
        else:
            optimizer.step()

    def _park_optimizer_state(self) -> None:
        """Move the state of each optimizer offloaded alone to the host (after a checkpoint load put it anywhere)."""
        critic_offload = self.settings.critic.offload if self.settings.critic is not None else None
        for optimizer, offload in ((self.optimizer, self.settings.offload),
                                   (self.critic_optimizer, critic_offload)):
            if optimizer is not None and offload is not None and offload.optimizer and not offload.params:
                move_optimizer_state(optimizer, "cpu")

    def _optimizer(
        self, model: nn.Module, plan: OptimizerPlan
    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer: torch.optim.Optimizer
        if plan.kind == "sgd":
            optimizer = torch.optim.SGD(params, lr=plan.lr, weight_decay=plan.weight_decay)
        else:
            optimizer = torch.optim.AdamW(params, lr=plan.lr, betas=plan.betas, weight_decay=plan.weight_decay,
                                          fused=fused_kernels_for(params) or None)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(plan, self.total_steps))
        return optimizer, scheduler

    @property
    def temperature(self) -> float:
        temperature = self.settings.temperature
        return temperature if temperature > 0 else 1.0

    # -- training --------------------------------------------------------------------------

    def _to_device(self, rows: Rows) -> Rows:
        return {name: tensor.to(self.device) for name, tensor in rows.items()}

    @torch.no_grad()
    def prepare(self, rows: Rows, wanted: Sequence[str], cuts: Sequence[slice]) -> Rows:
        """Return ``[B, T-1]`` tensors for the shard (collective) among ``old_logprobs``, ``proximal_logprobs``
        (both the actor's log-probs before the update), ``entropies`` and ``nec`` (the actor's per-token
        entropy and Clip_V's N before the update), ``ref_logprobs`` and ``values``.

        ``cuts`` are the shard's micro-batches (every rank gets as many).
        """
        self._check_ready()
        rows = rows_from_wire(rows)
        count, width = row_count(rows), rows["input_ids"].shape[1] - 1
        out = {name: torch.zeros((count, width), dtype=torch.float32) for name in wanted}
        for where in cuts:
            mb = self._to_device(slice_rows(rows, where))
            ids, mask = mb["input_ids"], mb["attention_mask"]
            length = ids.shape[1] - 1
            actor_fields = [name for name in ("old_logprobs", "proximal_logprobs") if name in out]
            statistics = [name for name in TOKEN_STATISTICS if name in out]
            if actor_fields or statistics:
                logprobs, entropy, logits = self._token_logprobs(self.actor, mb, "entropies" in statistics)
                for name in actor_fields:
                    out[name][where, :length] = logprobs.float().cpu()
                if entropy is not None:
                    out["entropies"][where, :length] = entropy.float().cpu()
                if "nec" in statistics:
                    out["nec"][where, :length] = self._per_token(logits, mb, nec_from_logits).cpu()
            if "ref_logprobs" in out:
                logprobs = self._reference_logprobs(mb)
                out["ref_logprobs"][where, :length] = logprobs.float().cpu()
            if "values" in out:
                if self.critic is None:
                    raise RuntimeError("values asked for, but this trainer has no critic")
                values = self.critic(ids, mask, **vision.model_inputs(mb, self._token_types_config))[:, :-1]
                out["values"][where, :length] = values.float().cpu()
        return rows_to_wire(out)

    def _reference_logprobs(self, mb: Rows) -> torch.Tensor:
        """The reference model's token log-probs of the micro-batch: the base's (adapters off) in a LoRA run."""
        if self.reference_is_base:
            with lora.adapters_off(self.actor):
                return self._token_logprobs(self.actor, mb, False)[0]
        if self.reference is None:
            raise RuntimeError("ref_logprobs asked for, but this trainer has no reference model")
        return self._token_logprobs(self.reference, mb, False)[0]

    def update(self, rows: Rows, units: dict[str, int], cuts: Sequence[slice],  # noqa: PLR0917 - Ray calls
               critic_cuts: Sequence[slice] = (), global_step: int = 1,
               publish: tuple[str, int] | None = None) -> dict[str, Any]:
        """Run ``ppo_epochs`` optimizer steps on the shard (collective); return this rank's metric parts.

        ``units`` holds the whole step's (all ranks') denominators: ``policy``
        (units of the policy loss), ``agg`` (units of the KL / entropy
        aggregation) and ``token`` (response tokens, for the critic).
        ``cuts`` / ``critic_cuts`` are the shard's micro-batches for the actor
        and the critic (every rank gets as many); ``global_step`` is the step
        being taken (1 for the first), for losses with a schedule. ``publish``:
        ``(path, version)`` of the shared weights file to write the updated
        weights into (:meth:`publish_shared_weights`), in this same call;
        the result's ``published`` is then ``(path, metas, bytes, seconds)``.
        """
        self._check_ready()
        started = time.monotonic()
        rows = rows_from_wire(rows)
        acc = _Accumulator()
        grad_norms: list[float] = []
        critic_grad_norms: list[float] = []
        skipped = 0
        loss_total = 0.0
        epochs = self.settings.ppo_epochs
        lr = float(self.scheduler.get_last_lr()[0])
        for _epoch in range(epochs):
            for where in cuts:
                loss_total += self._actor_micro_batch(self._to_device(slice_rows(rows, where)), units, acc,
                                                      global_step)
            norm = self._clip(self.actor, self.settings.grad_clip)
            grad_norms.append(norm)
            if math.isfinite(norm):
                self._optimizer_step(self.optimizer, self.settings.offload)
            else:
                skipped += 1
            self.optimizer.zero_grad(set_to_none=True)
            if self.critic is not None:
                critic_grad_norms.append(self._critic_epoch(rows, units, critic_cuts, acc))
        self.scheduler.step()
        if self.critic_scheduler is not None:
            self.critic_scheduler.step()
        self.step += 1
        published = None
        if publish is not None:
            writing = time.monotonic()
            path, metas, nbytes = self.publish_shared_weights(*publish)
            published = (path, metas, nbytes, time.monotonic() - writing)
        return {
            "published": published,
            "sums": acc.sums,
            "weights": acc.weights,
            "loss": loss_total / epochs,
            "grad_norm": grad_norms,
            "critic_grad_norm": critic_grad_norms,
            "skipped_steps": skipped,
            "lr": lr,
            "step": self.step,
            "seconds": time.monotonic() - started,
        }

    def _actor_micro_batch(self, mb: Rows, units: dict[str, int], acc: _Accumulator, global_step: int) -> float:
        """Forward and backward one micro-batch of the actor; return its share of the step's loss."""
        plan = self.plan
        world = self.world_size
        mask = mb["response_mask"]
        tokens = float(count_units(mask, "token"))
        w_policy = count_units(mask, plan.policy_units, paired=plan.paired) * world / max(1, units["policy"])
        w_agg = count_units(mask, plan.agg_units) * world / max(1, units["agg"])
        normalizer = float(self.run.model.max_response_tokens)
        expert = mb["expert_mask"].bool() if plan.expert_rows else None
        step_metrics: dict[str, float] = {}

        with_entropy = plan.entropy_fn is not None and plan.entropy_fn != "none"
        logprobs, entropy, logits = self._token_logprobs(self.actor, mb, with_entropy)
        inputs = PolicyLossInputs(
            logprobs=logprobs,
            response_mask=mask,
            old_logprobs=mb.get("old_logprobs") if plan.needs_old_logprobs else None,
            proximal_logprobs=mb.get("proximal_logprobs") if plan.needs_proximal_logprobs else None,
            advantages=mb.get("advantages"),
            ref_logprobs=mb.get("ref_logprobs"),
            expert_mask=expert,
            global_step=global_step if plan.needs_global_step else None,
            usual_share=self._share(mask, units, "usual", ~expert) if expert is not None else None,
            expert_share=self._share(mask, units, "expert", expert) if expert is not None else None,
            agg_normalizer=normalizer,
        )
        policy_loss, metrics = compute_policy_loss(plan.policy_loss_fn, inputs, **plan.policy_loss_options)
        step_metrics.update(metrics)
        total = policy_loss * w_policy
        if plan.kl_loss is not None:
            kl_term, metrics = kl_loss(logprobs, mb["ref_logprobs"], mask, coef=plan.kl_loss.coef,
                                       kl_fn=plan.kl_loss.fn, aggregation=plan.loss_agg_mode,
                                       old_logprobs=mb.get("old_logprobs"), normalizer=normalizer)
            step_metrics.update(metrics)
            total = total + kl_term * w_agg
        if with_entropy:
            assert entropy is not None and plan.entropy_fn is not None
            bonus, metrics = entropy_loss(plan.entropy_fn, entropy, mask, entropy_coef=plan.entropy_coef,
                                          loss_agg_mode=plan.loss_agg_mode, expert_mask=expert,
                                          normalizer=normalizer)
            step_metrics.update(metrics)
            w_entropy = w_agg
            if plan.entropy_fn == "mix" and expert is not None:
                w_entropy = count_units(mask, plan.agg_units, rows=~expert) * world / max(1, units["agg_usual"])
            total = total - bonus * w_entropy
        else:
            step_metrics["entropy"] = self._entropy_metric(logits, mb)
        if not total.requires_grad:  # every rank must run backward: FSDP reduces gradients collectively
            total = total + logits.sum() * 0.0
        with self._split_held():  # gradient checkpointing runs the sequence-parallel forward again
            torch.autograd.backward(total)
        acc.add(step_metrics, tokens)
        return float(total.detach()) / world / self.sequence_parallel  # a group's ranks all hold its whole loss

    def _token_logprobs(self, model: nn.Module, mb: Rows, with_entropy: bool
                        ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Forward ``model`` on the micro-batch; return ``[B, T-1]`` token log-probs (and entropies) and the logits.

        Only positions from the first response token on are computed past the
        model body (its LM head, the log-softmax, the entropy): the earlier
        ones are prompt positions that no loss reads, and come back as zeros.
        The logits returned are those kept positions only (``[B, K, V]``).
        With ``pack_sequences`` the rows run unpadded, end to end in one
        sequence (:meth:`_packed_token_logprobs`).
        """
        self._logits_layout = None
        images = vision.model_inputs(mb, self._token_types_config)
        if not images and id(model) in self._shares_prefix:
            layout = shared_prefix.shared_prefix_layout(mb["input_ids"], mb["attention_mask"], mb["response_mask"])
            if layout is not None:
                return self._shared_prefix_token_logprobs(model, mb, layout, with_entropy)
        if self.sequence_parallel > 1:
            return self._sequence_parallel_token_logprobs(model, mb, with_entropy, images)
        if self.settings.pack_sequences:
            return self._packed_token_logprobs(model, mb, with_entropy, images)
        return self._padded_token_logprobs(model, mb, with_entropy, images)

    def _padded_token_logprobs(self, model: nn.Module, mb: Rows, with_entropy: bool, images: dict[str, torch.Tensor]
                               ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """:meth:`_token_logprobs` of the rows as they are, padded (with ``images``: their image inputs)."""
        ids = mb["input_ids"]
        start = first_response_column(mb["response_mask"])
        kwargs: dict[str, Any] = dict(images)
        if start and accepts_logits_to_keep(model):
            kwargs["logits_to_keep"] = ids.shape[1] - start
        logits = model(input_ids=ids, attention_mask=mb["attention_mask"], use_cache=False, **kwargs).logits
        logits = logits[:, logits.shape[1] - (ids.shape[1] - start):]
        logprobs, entropy = self._head(logits, ids[:, start:], self.temperature, with_entropy)
        if start:
            logprobs = torch.nn.functional.pad(logprobs, (start, 0))
            if entropy is not None:
                entropy = torch.nn.functional.pad(entropy, (start, 0))
        return logprobs, entropy, logits

    def _packed_token_logprobs(self, model: nn.Module, mb: Rows, with_entropy: bool,
                               images: dict[str, torch.Tensor] | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """As :meth:`_token_logprobs`, with the rows packed into one sequence of their real tokens (no padding).

        ``position_ids`` restart at 0 for each row, which is how the model's
        attention keeps the rows apart (no token attends across a row boundary).
        With ``images`` each row also gets its own 3-D rotary positions
        (:func:`~trinity.common.models.vision.packed_positions`).
        The logits returned are the packed ones (``[1, N, V]``).
        """
        ids = mb["input_ids"]
        rows, width = ids.shape
        layout = packed_layout(mb["attention_mask"])
        packed = ids[layout.real].unsqueeze(0)
        positions = layout.positions.unsqueeze(0)
        extra: dict[str, torch.Tensor] = {}
        if images:
            positions = vision.packed_positions(self._rope_index, mb, layout.real, layout.positions,
                                                self._model_config)
            extra = {name: images[name] for name in ("pixel_values", "image_grid_thw")}
        logits = model(input_ids=packed, position_ids=positions, use_cache=False, **extra).logits
        flat_logprobs, flat_entropy = self._head(logits, packed, self.temperature, with_entropy)
        predicted, source = layout.predicted, layout.source
        logprobs = flat_logprobs.new_zeros((rows, width - 1))
        logprobs[predicted] = flat_logprobs[0, source]
        entropy = None
        if flat_entropy is not None:
            entropy = flat_entropy.new_zeros((rows, width - 1))
            entropy[predicted] = flat_entropy[0, source]
        return logprobs, entropy, logits

    def _split_held(self) -> contextlib.AbstractContextManager[None]:
        """The Ulysses split of the last forward, held for its backward (no-op without sequence parallelism)."""
        if self._last_shard is None:
            return contextlib.nullcontext()
        return ulysses.sharding(self._last_shard)

    def _sequence_shard(self, layout: Any) -> ulysses.SequenceShard:
        lengths = [int(n) for n in layout.real.sum(dim=1)]
        return ulysses.SequenceShard(self.sequence_group, self.sequence_parallel, self.sequence_rank,
                                     ulysses.padded_segments(lengths, self.sequence_parallel))

    def _sequence_parallel_token_logprobs(self, model: nn.Module, mb: Rows, with_entropy: bool,
                                          images: dict[str, torch.Tensor] | None = None
                                          ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """As :meth:`_packed_token_logprobs`, the packed sequence split over the rank's Ulysses group.

        This rank runs its slice of the sequence (:mod:`.ulysses`); the
        log-probs (and entropies) of every slice are gathered, so each rank of
        the group returns the whole micro-batch's. The logits returned are
        this rank's slice's (``[1, N / P, V]``): see :meth:`_packed_statistic`.
        With ``images`` every rank embeds the whole sequence, images included,
        and its language model runs its slice (:func:`.ulysses.language_model_slice`).
        """
        ids = mb["input_ids"]
        rows, width = ids.shape
        layout = packed_layout(mb["attention_mask"])
        shard = self._last_shard = self._sequence_shard(layout)
        packed = ids[layout.real]
        tokens = packed.numel()
        padded = torch.nn.functional.pad(packed, (0, shard.total - tokens + 1))  # +1: the last slice's next token
        positions = torch.cat([layout.positions,
                               torch.arange(shard.total - tokens, device=packed.device, dtype=layout.positions.dtype)])
        mine = shard.local()
        if images:
            spatial = vision.packed_positions(self._rope_index, mb, layout.real, layout.positions, self._model_config)
            tail = positions[tokens:].view(1, 1, -1).expand(4, 1, -1)
            everything = torch.cat([spatial, tail], dim=2)
            with ulysses.sharding(shard), ulysses.language_model_slice(model, mine):
                logits = model(input_ids=padded[: shard.total].unsqueeze(0), position_ids=everything,
                               pixel_values=images["pixel_values"], image_grid_thw=images["image_grid_thw"],
                               use_cache=False).logits
        else:
            with ulysses.sharding(shard):
                logits = model(input_ids=padded[mine].unsqueeze(0), position_ids=positions[mine].unsqueeze(0),
                               use_cache=False).logits
        # the head predicts token t + 1 from position t: one more logits row (never read) lines the next tokens up
        ahead = torch.nn.functional.pad(logits, (0, 0, 0, 1))
        nexts = padded[mine.start:mine.stop + 1].unsqueeze(0)
        local_logprobs, local_entropy = self._head(ahead, nexts, self.temperature, with_entropy)
        flat_logprobs = ulysses.gather_sequence(local_logprobs[0], shard)[:tokens - 1]
        logprobs = flat_logprobs.new_zeros((rows, width - 1))
        logprobs[layout.predicted] = flat_logprobs[layout.source]
        entropy = None
        if local_entropy is not None:
            flat_entropy = ulysses.gather_sequence(local_entropy[0], shard)[:tokens - 1]
            entropy = flat_entropy.new_zeros((rows, width - 1))
            entropy[layout.predicted] = flat_entropy[layout.source]
        return logprobs, entropy, logits

    def _packed_statistic(self, scaled: torch.Tensor, mb: Rows, statistic: Callable[[torch.Tensor], torch.Tensor]
                          ) -> torch.Tensor:
        """``statistic`` of each packed prediction (positions 0..N-2) from packed logits ``scaled`` (no gradient);
        with Ulysses, ``scaled`` is this rank's slice and the group's slices are gathered."""
        if self._last_shard is None:
            return statistic(scaled[0, :-1])
        tokens = int(mb["attention_mask"].sum())
        return ulysses.gather_sequence(statistic(scaled[0]), self._last_shard)[:tokens - 1]

    def _shared_prefix_token_logprobs(self, model: nn.Module, mb: Rows, layout: shared_prefix.SharedPrefixLayout,
                                      with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """As :meth:`_token_logprobs`, with each distinct prompt prefix run once (:mod:`.shared_prefix`).

        The logits returned are the kept ones (``[1, K, V]``); ``_logits_layout`` says where each came from.
        """
        layout = layout.to(self.device)
        if not self._told_sharing and self.rank == 0:
            self._told_sharing = True
            logger.info("trainer: shared prompt prefixes: %d rows in %d prefix groups run %d tokens instead of %d",
                        layout.rows, layout.groups, layout.tokens, int(mb["attention_mask"].sum()))
        flat_logprobs, flat_entropy, logits = shared_prefix.token_logprobs(model, layout, self.temperature,
                                                                          with_entropy)
        self._logits_layout = layout
        shape = tuple(mb["response_mask"].shape)
        logprobs = flat_logprobs.new_zeros(shape)
        logprobs[layout.predicted] = flat_logprobs
        entropy = None
        if flat_entropy is not None:
            entropy = flat_entropy.new_zeros(shape)
            entropy[layout.predicted] = flat_entropy
        return logprobs, entropy, logits

    def _per_token(self, logits: torch.Tensor, mb: Rows, statistic: Callable[[torch.Tensor], torch.Tensor]
                   ) -> torch.Tensor:
        """Return ``[B, T-1]`` float32 ``statistic`` of each predicted distribution (``logits / temperature``),
        aligned as :meth:`_token_logprobs`'s log-probs, from the logits it returned; 0 where none was computed."""
        scaled = logits.detach()
        if self.temperature != 1.0:
            scaled = scaled / self.temperature
        rows, width = mb["input_ids"].shape
        out = torch.zeros((rows, width - 1), dtype=torch.float32, device=scaled.device)
        if self._logits_layout is not None:
            out[self._logits_layout.predicted] = statistic(scaled[0])[self._logits_layout.source].float()
            return out
        if self.settings.pack_sequences:
            layout = packed_layout(mb["attention_mask"])
            out[layout.predicted] = self._packed_statistic(scaled, mb, statistic)[layout.source].float()
            return out
        values = statistic(scaled[:, :-1]).float()
        out[:, width - 1 - values.shape[1]:] = values
        return out

    def _entropy_metric(self, logits: torch.Tensor, mb: Rows) -> float:
        """Return the mean entropy over the micro-batch's response tokens (no gradient), from the returned logits."""
        mask = mb["response_mask"]
        with torch.no_grad():
            scaled = logits.detach()
            if self.temperature != 1.0:
                scaled = scaled / self.temperature
            if self._logits_layout is not None:
                shared = self._logits_layout
                values = entropy_from_logits(scaled[0])[shared.source]
                return float(aggregate(values.unsqueeze(0), mask[shared.predicted].unsqueeze(0), "token-mean"))
            if self.settings.pack_sequences:
                layout = packed_layout(mb["attention_mask"])
                values = self._packed_statistic(scaled, mb, entropy_from_logits)[layout.source]
                return float(aggregate(values.unsqueeze(0), mask[layout.predicted].unsqueeze(0), "token-mean"))
            kept = mask[:, mask.shape[1] - (scaled.shape[1] - 1):]
            return float(aggregate(entropy_from_logits(scaled[:, :-1]), kept, "token-mean"))

    def _share(self, mask: torch.Tensor, units: dict[str, int], part: str, rows: torch.Tensor) -> float:
        """Return this micro-batch's share of the step's ``part`` (``usual``/``expert``) loss units."""
        usual_units, expert_units = self.plan.mix_units()
        unit = usual_units if part == "usual" else expert_units
        return count_units(mask, unit, rows=rows) / max(1, units[part])

    def _critic_epoch(self, rows: Rows, units: dict[str, int], cuts: Sequence[slice], acc: _Accumulator) -> float:
        """One optimizer pass of the critic over its micro-batches; return its gradient norm."""
        assert self.critic is not None and self.critic_optimizer is not None and self.settings.critic is not None
        world = self.world_size
        for where in cuts:
            mb = self._to_device(slice_rows(rows, where))
            tokens = float(count_units(mb["response_mask"], "token"))
            value_loss, metrics = self._value_loss(mb, w_tokens=tokens * world / max(1, units["token"]))
            torch.autograd.backward(value_loss)
            acc.add(metrics, tokens)
        norm = self._clip(self.critic, self.settings.critic.grad_clip)
        if math.isfinite(norm):
            self._optimizer_step(self.critic_optimizer, self.settings.critic.offload)
        self.critic_optimizer.zero_grad(set_to_none=True)
        return norm

    def _value_loss(self, mb: Rows, w_tokens: float) -> tuple[torch.Tensor, dict[str, float]]:
        assert self.critic is not None
        mask = mb["response_mask"]
        values = self.critic(mb["input_ids"], mb["attention_mask"],
                             **vision.model_inputs(mb, self._token_types_config))[:, :-1]
        old = mb["values"]
        returns = mb["returns"]
        assert self.settings.critic is not None
        clip = self.settings.critic.cliprange_value
        clipped = old + (values - old).clamp(-clip, clip)
        unclipped_error = (values - returns) ** 2
        clipped_error = (clipped - returns) ** 2
        per_token = 0.5 * torch.maximum(unclipped_error, clipped_error)
        loss = aggregate(per_token, mask, self.settings.critic.loss_agg_mode)
        with torch.no_grad():
            clip_frac = aggregate((clipped_error > unclipped_error).float(), mask, "token-mean")
            mean_value = aggregate(values.detach(), mask, "token-mean")
        metrics = {"value_loss": float(loss.detach()), "value_clip_frac": float(clip_frac),
                   "values_mean": float(mean_value)}
        return loss * w_tokens, metrics

    @staticmethod
    def _clip(model: nn.Module, grad_clip: float) -> float:
        params = [p for p in model.parameters() if p.grad is not None]
        if not params:
            return 0.0
        max_norm = grad_clip if grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(_full_tensor(norm))

    # -- state dicts -----------------------------------------------------------------------

    def _export_dtype(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The weights as engines get them: merged with the adapters of a LoRA run, in the compute dtype."""
        if self.settings.lora is not None:
            state = lora.merged_state(state, self.settings.lora.scaling)
        if self.compute_dtype == torch.float32:
            return state
        return {k: v.to(self.compute_dtype) if v.is_floating_point() else v for k, v in state.items()}

    def full_state_dict(self, *, all_ranks: bool = False, copy: bool = True) -> dict[str, torch.Tensor]:
        """Gather the actor's full weights (collective): on CPU on rank 0 (every rank with ``all_ranks``).

        With one rank the "gathered" tensors are the live parameters: they are
        copied unless ``copy=False`` (the caller reads them before the next update).
        """
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        self._check_ready()
        options = StateDictOptions(full_state_dict=True, cpu_offload=not all_ranks)
        state = cast(dict[str, torch.Tensor], get_model_state_dict(self.actor, options=options))
        if all_ranks:
            state = {k: v.detach().cpu() for k, v in state.items()}
        if self.world_size == 1:
            state = {k: v.detach().clone() if copy else v.detach() for k, v in state.items()}
        return self._export_dtype(state)

    def _tied_aliases(self) -> set[str]:
        """Names of parameters that are another parameter under a second name (tied embeddings)."""
        return set(tied_alias_sources(self.actor))

    def state_dict_checksum(self, adapter: bool = False) -> str:
        """Return the checksum of the full actor weights as exported to engines (collective; same on every rank);
        with ``adapter``, of the LoRA adapter as :meth:`adapter_for_sync` sends it."""
        if adapter:
            return state_dict_checksum(self._adapter_tensors())
        return state_dict_checksum(self.full_state_dict(all_ranks=True))

    def _adapter_tensors(self) -> dict[str, torch.Tensor]:
        """The LoRA adapter's full matrices under PEFT's file names, in the engines' dtype on the CPU
        (collective: every rank)."""
        from torch.distributed.tensor import DTensor

        if self.settings.lora is None:
            raise RuntimeError("this trainer trains no LoRA adapter: there is no adapter to send")
        live = {name: value for name, value in self.actor.state_dict().items() if lora.is_adapter(name)}
        full = {name: (value.full_tensor() if isinstance(value, DTensor) else value).detach()
                .to(self._export_dtype_of(value)).cpu().clone() for name, value in live.items()}
        return lora.adapter_state(full)

    def adapter_for_sync(self) -> list[Any] | None:
        """Gather the LoRA adapter (collective); rank 0 puts it into the Ray object store and returns
        ``[ObjectRef, bytes]`` of ``{"config": PEFT's adapter_config, "tensors": {...}}``; other ranks None."""
        from trinity.synchronizer.memory_sync import put_payload
        from trinity.weight_transport.buckets import state_dict_bytes

        self._check_ready()
        tensors = self._adapter_tensors()
        if self.rank != 0:
            return None
        assert self.settings.lora is not None
        config = lora.adapter_config(self.settings.lora, self.run.model.path, tensors)
        return [put_payload({"config": config, "tensors": tensors}), state_dict_bytes(tensors)]

    def critic_state_dict(self) -> dict[str, torch.Tensor]:
        """Gather the critic's full weights on rank 0 (collective); empty without a critic."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        if self.critic is None:
            return {}
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = cast(dict[str, torch.Tensor], get_model_state_dict(self.critic, options=options))
        return {k: v.detach().clone() for k, v in state.items()} if self.world_size == 1 else state

    def optimizer_state(self) -> dict[str, Any]:
        """Return this rank's optimizer state as plain full tensors (collective; for tests and diagnostics)."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        _, optim_state = get_state_dict(self.actor, self.optimizer)
        optim = cast(dict[str, Any], optim_state)
        state = {
            name: {key: _full_tensor(value).detach().cpu().clone() for key, value in entry.items()}
            for name, entry in optim["state"].items()
        }
        return {"state": state, "lr": float(self.scheduler.get_last_lr()[0]), "step": self.step}

    def memory_report(self) -> dict[str, int]:
        """This rank's share of the actor: trainable parameters (whole model), and the bytes of its local shards
        of parameters and of optimizer state (0 before the first step creates the state)."""
        from torch.distributed.tensor import DTensor

        def local_bytes(value: Any) -> int:
            if not isinstance(value, torch.Tensor):
                return 0
            local = value.to_local() if isinstance(value, DTensor) else value
            return int(local.numel() * local.element_size())

        optimizer_bytes = sum(local_bytes(v) for entry in self.optimizer.state.values() for v in entry.values())
        return {"trainable_params": int(self.trainable_params),
                "parameter_bytes": sum(local_bytes(p) for p in self.actor.parameters()),
                "optimizer_state_bytes": optimizer_bytes}

    def activation_bytes(self, rows: Rows, cuts: Sequence[slice]) -> int:
        """The bytes the actor's forward keeps for its backward (weights aside), on the largest of the shard's
        micro-batches (collective; nothing is trained). For benchmarks: activation memory per rank."""
        self._check_ready()
        rows = rows_from_wire(rows)
        largest = 0
        kept: dict[int, int] = {}

        def keep(tensor: torch.Tensor) -> torch.Tensor:
            if not isinstance(tensor, nn.Parameter):  # the gathered weights are the same at any split
                storage = tensor.untyped_storage()
                kept[storage.data_ptr()] = storage.nbytes()
            return tensor

        for where in cuts:
            mb = self._to_device(slice_rows(rows, where))
            kept.clear()
            with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
                logprobs = self._token_logprobs(self.actor, mb, False)[0]
            largest = max(largest, sum(kept.values()))
            del logprobs
        _reshard(self.actor)
        return largest

    # -- checkpoints -----------------------------------------------------------------------

    def save_checkpoint(self, extra: dict[str, Any] | None = None) -> str | None:
        """Write a checkpoint of this step (collective); rank 0 commits it and returns its folder."""
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import get_state_dict
        from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

        self._check_ready()
        if self.checkpoints is None:
            raise RuntimeError("this trainer has no checkpoint folder")
        if self.rank == 0:
            staging = self.checkpoints.begin(self.step)
            for file in hf_support_files(self.run.model.path):
                (staging / "hf").mkdir(exist_ok=True)
                shutil.copy2(file, staging / "hf" / file.name)
        dist.barrier()
        staging = self.checkpoints.staging_path(self.step)
        model_state, optim_state = self._actor_checkpoint_state()
        dcp_save({"model": model_state, "optim": optim_state}, checkpoint_id=str(staging / "actor"))
        if self.critic is not None:
            assert self.critic_optimizer is not None
            critic_model, critic_optim = get_state_dict(self.critic, self.critic_optimizer)
            dcp_save({"model": critic_model, "optim": critic_optim}, checkpoint_id=str(staging / "critic"))
        dist.barrier()
        committed: str | None = None
        if self.rank == 0:
            state = {
                "step": self.step,
                "world_size": self.world_size,
                "algorithm": self.plan.algorithm,
                "model_path": self.run.model.path,
                "dtype": self.dtype_name,
                "critic": self.critic is not None,
                "lora": lora.plan_record(self.settings.lora) if self.settings.lora is not None else None,
                "scheduler": self.scheduler.state_dict(),
                "critic_scheduler": self.critic_scheduler.state_dict() if self.critic_scheduler else None,
                "extra": extra or {},
                "saved_at": time.time(),
            }
            path = self.checkpoints.commit(self.step, state, self.settings.max_checkpoints or 0)
            committed = str(path)
        dist.barrier()
        return committed

    def _actor_checkpoint_state(self) -> tuple[dict[str, Any], Any]:
        """The actor's model and optimizer state as its checkpoint holds them (a LoRA run's: adapters only, the
        base being its model folder)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        options = StateDictOptions(ignore_frozen_params=self.settings.lora is not None)
        model_state, optim_state = get_state_dict(self.actor, self.optimizer, options=options)
        if self.settings.lora is not None:  # a tied weight's second name survives ignore_frozen_params
            model_state = {name: value for name, value in model_state.items() if lora.is_adapter(name)}
        return model_state, optim_state

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        """Restore weights, optimizer, schedulers and step from the checkpoint folder ``path`` (collective).

        Returns ``{"step": ..., "extra": ...}``.
        """
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

        self._check_ready()
        folder = Path(path)
        state = read_state(folder)
        if bool(state.get("lora")) != (self.settings.lora is not None):
            kind = "a LoRA adapter" if state.get("lora") else "the full model"
            raise RuntimeError(f"{folder} holds {kind}, but this run trains "
                               f"{'a LoRA adapter' if self.settings.lora is not None else 'the full model'}; "
                               "resume with the model.lora_configs the checkpoint was written with")
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        # a LoRA checkpoint's model part is the adapters (DCP's load fails if one is missing): the base is not loaded
        options = StateDictOptions(strict=self.settings.lora is None)
        model_state, optim_state = self._actor_checkpoint_state()
        loaded: dict[str, Any] = {"model": model_state, "optim": optim_state}
        dcp_load(loaded, checkpoint_id=str(folder / "actor"))
        set_state_dict(self.actor, self.optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"],
                       options=options)
        self.scheduler.load_state_dict(state["scheduler"])
        if self.critic is not None:
            assert self.critic_optimizer is not None and self.critic_scheduler is not None
            if not (folder / "critic").is_dir():
                raise RuntimeError(f"{folder} holds no critic, but this trainer trains one")
            critic_model, critic_optim = get_state_dict(self.critic, self.critic_optimizer)
            loaded = {"model": critic_model, "optim": critic_optim}
            dcp_load(loaded, checkpoint_id=str(folder / "critic"))
            set_state_dict(self.critic, self.critic_optimizer, model_state_dict=loaded["model"],
                           optim_state_dict=loaded["optim"])
            if state.get("critic_scheduler"):
                self.critic_scheduler.load_state_dict(state["critic_scheduler"])
        self._park_optimizer_state()
        self.step = int(state["step"])
        return {"step": self.step, "extra": state.get("extra", {})}

    # -- weight sync (trainer side of the synchronizer) ------------------------------------

    @ray.method(concurrency_group=WEIGHT_SYNC_GROUP)
    def init_weight_sync(self, info: WeightSyncGroupInfo) -> None:
        """Rank 0: host the weight-sync group as its rank 0 (blocks until the engines join). Others: no-op.

        As a Ray actor it runs in a thread of its own (:data:`WEIGHT_SYNC_GROUP`):
        when an engine dies during the rendezvous, this call waits out its
        timeout there while the rank keeps answering, and a new group can be
        built at once.
        """
        from trinity.weight_transport.group import WeightSyncGroup

        if self.rank != 0:
            return
        if self._weight_sync is not None:
            self._weight_sync.close()
        self._weight_sync = WeightSyncGroup.create(info)

    def gather_weights(self, stream: bool = False) -> list[TensorMeta] | None:
        """Gather the full weights for a sync (collective); rank 0 keeps them and returns their metas.

        A tied parameter's second name (``lm_head.weight`` tied to the input
        embedding) is left out: it is the same tensor, and the engines, built
        from the same model folder, tie it as well.

        ``stream`` (a broadcast follows, on every rank): with two or more ranks
        nothing is gathered yet; the metas come from the sharded parameters'
        full shapes, and :meth:`broadcast_weights` gathers one tensor at a time
        as its bucket is packed, so no rank ever holds the whole model.
        """
        from trinity.weight_transport.buckets import state_dict_metas

        self._check_ready()
        aliases = self._tied_aliases()  # the engines tie them too: the first name carries the tensor
        if stream and self.world_size > 1:
            live = self.actor.state_dict()
            self._stream_entries = [(entry, {name: live[name] for name in entry.sources})
                                    for entry in self._export_entries(live) if entry.name not in aliases]
            metas = []
            for entry, sources in self._stream_entries:
                base = sources[entry.source]
                metas.append(TensorMeta(entry.name, dtype_name(self._export_dtype_of(base)),
                                        tuple(int(n) for n in base.shape)))
            self._stream_metas = metas
            return metas if self.rank == 0 else None
        self._stream_entries = None
        # sent (or stored) before the next update changes them; one rank's only shard is the whole tensor
        state = self._one_rank_state() if self.world_size == 1 else self.full_state_dict(copy=False)
        if self.rank != 0:
            return None
        self._sync_state = {name: value for name, value in state.items() if name not in aliases}
        return state_dict_metas(self._sync_state)

    def send_weights(self, bucket_bytes: int, metas: Sequence[TensorMeta]) -> int:
        """One-rank trainer: read the live weights and broadcast them to engines receiving with ``metas``.

        ``metas`` is the plan of an earlier sync, which the synchronizer keeps:
        one call per sync instead of :meth:`gather_weights` then
        :meth:`broadcast_weights`. Returns the bytes sent. Weights that no
        longer match ``metas`` are not sent: the true plan's header goes out
        (every receiver refuses it at once) and WeightSyncError names the first
        tensor that differs.
        """
        if self.world_size != 1:
            raise RuntimeError(f"send_weights is the one-rank path; this trainer has {self.world_size} ranks")
        if self._weight_sync is None:
            raise RuntimeError("init_weight_sync was not called on trainer rank 0")
        held = self.gather_weights()
        assert held is not None
        try:
            self._weight_sync.require_plan(metas, held, bucket_bytes)
        except Exception:
            self._sync_state = None
            raise
        return self.broadcast_weights(bucket_bytes)

    def _one_rank_state(self) -> dict[str, torch.Tensor]:
        """The live weights of a one-rank trainer in the export dtype, without the state-dict gather machinery."""
        from torch.distributed.tensor import DTensor

        state = {
            name: (value.to_local() if isinstance(value, DTensor) else value).detach()
            for name, value in self.actor.state_dict().items()
        }
        return self._export_dtype(state)

    def _export_entries(self, state: dict[str, torch.Tensor]) -> list[lora.ExportEntry]:
        """The tensors engines get, each with the state-dict entries it is made of (adapters merged in LoRA)."""
        if self.settings.lora is not None:
            return lora.export_entries(state)
        return [lora.ExportEntry(name, name) for name in state]

    def _export_dtype_of(self, value: torch.Tensor) -> torch.dtype:
        return self.compute_dtype if value.is_floating_point() else value.dtype

    def _gathered_tensors(self, entries: list[tuple[lora.ExportEntry, dict[str, torch.Tensor]]]
                          ) -> Iterator[torch.Tensor]:
        """Yield each entry's full tensor in the export dtype, gathering sharded ones (collective, in order)."""
        from torch.distributed.tensor import DTensor

        scaling = self.settings.lora.scaling if self.settings.lora is not None else 1.0
        for entry, sources in entries:
            gathered = {name: (value.full_tensor() if isinstance(value, DTensor) else value).detach()
                        for name, value in sources.items()}
            full = lora.merge_entry(entry, gathered, scaling)
            wanted = self._export_dtype_of(full)
            yield full if full.dtype == wanted else full.to(wanted)

    def broadcast_weights(self, bucket_bytes: int) -> int:
        """Broadcast the gathered weights to the engines; return the bytes sent (0 on ranks other than 0).

        After ``gather_weights(stream=True)`` every rank calls this (each
        tensor is gathered from the shards as rank 0 packs it); otherwise rank 0 only.
        """
        from trinity.weight_transport.buckets import metas_bytes, state_dict_bytes

        entries, self._stream_entries = self._stream_entries, None
        if entries is not None:
            tensors = self._gathered_tensors(entries)
            if self.rank != 0:
                for _ in tensors:  # the gathers rank 0's stream takes part in
                    pass
                return 0
            if self._weight_sync is None:
                raise RuntimeError("init_weight_sync was not called on trainer rank 0")
            self._weight_sync.broadcast_stream(self._stream_metas, tensors, bucket_bytes)
            return metas_bytes(self._stream_metas)
        state = self._take_sync_state()
        if self._weight_sync is None:
            raise RuntimeError("init_weight_sync was not called on trainer rank 0")
        self._weight_sync.broadcast_state_dict(state, bucket_bytes)
        return state_dict_bytes(state)

    def save_sync_weights(self, folder: str, version: int) -> int:
        """Rank 0: write the gathered weights for the checkpoint sync method; return the bytes written."""
        from trinity.synchronizer.checkpoint_sync import save_weights
        from trinity.weight_transport.buckets import state_dict_bytes

        state = self._take_sync_state()
        save_weights(state, folder, version)
        return state_dict_bytes(state)

    def put_sync_weights(self) -> list[Any]:
        """Rank 0: put the gathered weights into the Ray object store; return ``[ObjectRef]`` (a list, so Ray
        hands the reference back instead of the value)."""
        from trinity.synchronizer.memory_sync import put_state_dict

        return [put_state_dict(self._take_sync_state())]

    def _take_sync_state(self) -> dict[str, torch.Tensor]:
        if self.rank != 0:
            raise RuntimeError("only trainer rank 0 holds the gathered weights")
        if self._sync_state is None:
            raise RuntimeError("gather_weights must run (on every rank) before the weights are sent")
        state, self._sync_state = self._sync_state, None
        return state

    def publish_shared_weights(self, path: str, version: int) -> tuple[str, list[TensorMeta], int]:
        """One-rank trainer: write the live weights into the shared file ``path`` as ``version``.

        Mode colocate's handover on a host-memory device: the first call
        creates the file (the engine then maps it; in the temporary folder
        when ``path``'s has no room); each later call copies the weights in
        under the file's write lock. Returns the file's path, the tensors'
        metas and the file's size. Raises RuntimeError on a trainer of several
        ranks, WeightSyncError when no folder has room.
        """
        from trinity.weight_transport.shared_file import SharedWeights, layout, room_for

        if self.world_size != 1:
            raise RuntimeError(f"shared-file weights need a one-rank trainer; this one has {self.world_size}")
        self._check_ready()
        parameters = list(self.actor.named_parameters())
        key = (path, tuple(id(p) for _, p in parameters))
        fresh = self._shared_weights is None or self._shared_key != key
        if fresh or self.settings.lora is not None:  # merged weights are new tensors: made again for every version
            self._shared_sources = self._shared_source_tensors(parameters)
        if fresh:
            metas = [TensorMeta(name, dtype_name(self._export_dtype_of(value)), tuple(int(n) for n in value.shape))
                     for name, value in self._shared_sources.items()]
            if self._shared_weights is not None:
                self._shared_weights.close(unlink=True)
            target = room_for(Path(path), layout(metas)[1])
            self._shared_weights = SharedWeights(target, metas, create=True)
            self._shared_key = key
        self._shared_weights.write(self._shared_sources, version)
        return str(self._shared_weights.path), self._shared_weights.metas, self._shared_weights.nbytes

    def _shared_source_tensors(self, parameters: list[tuple[str, nn.Parameter]]) -> dict[str, torch.Tensor]:
        """What the shared file is written from: the one rank's live local weights (updated in place by every step,
        so kept, not re-read), or a LoRA run's merged weights."""
        from torch.distributed.tensor import DTensor

        aliases = self._tied_aliases()
        if self.settings.lora is not None:
            return {name: value for name, value in self._one_rank_state().items() if name not in aliases}
        return {name: (value.to_local() if isinstance(value, DTensor) else value).detach()
                for name, value in parameters if name not in aliases}

    def close_shared_weights(self) -> None:
        """Remove the shared weights file (the engine's mapping stays valid until it lets go)."""
        if self._shared_weights is not None:
            self._shared_weights.close(unlink=True)
            self._shared_weights = None

    def close_weight_sync(self) -> None:
        if self._weight_sync is not None:
            self._weight_sync.close()
            self._weight_sync = None

    # -- lifetime --------------------------------------------------------------------------

    def _check_ready(self) -> None:
        if not self._ready:
            raise RuntimeError("FSDPWorker.setup has not run")

    def ping(self) -> int:
        return os.getpid()

    def shutdown(self) -> None:
        """Leave the process groups (idempotent)."""
        import torch.distributed as dist

        self.close_weight_sync()
        if dist.is_initialized():
            dist.destroy_process_group()
        self._ready = False
