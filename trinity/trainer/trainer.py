"""The FSDP2 trainer's driver: N :class:`~trinity.trainer.fsdp_worker.FSDPWorker` ranks as Ray actors.

Usage (the launcher)::

    trainer = FSDPTrainer(plan, world_size=2, checkpoint_dir=..., placement_group=pg)   # Ray must be initialised
    resumed = trainer.resume()              # None on a fresh run, else {"step", "extra", "path"}
    metrics = trainer.train_step(experiences, checkpoint_extra={"task_position": ..., "buffer_position": ...})
    trainer.save_checkpoint(extra)          # e.g. at the end of a run
    trainer.workers                          # rank handles, rank 0 first: what the Synchronizer takes
    trainer.shutdown()

A step: the experiences are padded into one :class:`~trinity.common.experience.Batch`,
split evenly across ranks (dummy rows fill the gap, see :mod:`trinity.trainer.batching`);
the ranks compute what the algorithm needs first (reference log-probs, critic
values, old log-probs when the experiences carry none, the policy's log-probs
before the update for the decoupled objective); the driver computes
advantages on the whole batch (group baselines need every member of a group);
then every rank runs ``ppo_epochs`` optimizer steps over its shard in
micro-batches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

import trinity.device
from trinity.algorithm import (
    AdaptiveKLController,
    AdvantageInputs,
    compute_filtered_advantages,
    kl_reward_penalty,
    outcome_token_rewards,
)
from trinity.common.config.plan.run import RunPlan
from trinity.common.experience import Experience, make_batch
from trinity.common.models.vision import multimodal_rows
from trinity.errors import EXIT_USAGE
from trinity.monitor.keys import RANK_UPDATE_SECONDS, SAVE_SECONDS
from trinity.trainer.batching import (
    Rows,
    batch_rows,
    count_units,
    expand_pairs,
    plan_micro_batches,
    rows_batch,
    rows_from_wire,
    rows_to_wire,
    shard_indices,
    take_rows,
)
from trinity.trainer.checkpoint import (
    CheckpointDir,
    CheckpointError,
    CheckpointWriteError,
    describe,
    disk_write_problem,
    innermost_message,
    no_intact_checkpoint,
    resolve_checkpoint,
    room_problem,
    warn_rejected,
)
from trinity.trainer.fsdp_worker import FSDPWorker
from trinity.trainer.manifest import verify
from trinity.trainer.plan import TrainingPlan

logger = logging.getLogger(__name__)

#: Key of the adaptive KL controller's state among a checkpoint's extras.
KL_CONTROLLER = "kl_controller"
#: Key of the metrics of the step a checkpoint was saved at, among its extras.
STEP_METRICS = "step_metrics"

#: Folder of a checkpoint holding its Hugging Face export (``trainer.save_hf_checkpoint``).
HF_EXPORT = "huggingface"

#: Short names for the metrics users look at first.
_ALIASES = {"kl/loss_kl": "kl", "kl/reward_penalty_kl": "kl"}


def default_checkpoint_dir(plan: RunPlan) -> Path:
    """Return ``<run folder>/checkpoints``."""
    return plan.run_dir / "checkpoints"


def pad_token_id(model_path: str, trust_remote_code: bool = False) -> int:
    """Return the pad token id of the model's tokenizer (its EOS when it has no pad token)."""
    from transformers import AutoTokenizer

    from trinity.common.models.pretrained import load_pretrained

    tokenizer = load_pretrained(AutoTokenizer.from_pretrained, model_path, trust_remote_code=trust_remote_code)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError(f"tokenizer of {model_path!r} has neither a pad nor an EOS token")
    return int(pad)


def step_units(plan: TrainingPlan, rows: Rows) -> dict[str, int]:
    """Return the whole step's denominators of each loss term (every rank weighs its micro-batches by them)."""
    mask = rows["response_mask"]
    units = {
        "policy": count_units(mask, plan.policy_units, paired=plan.paired),
        "agg": count_units(mask, plan.agg_units),
        "token": count_units(mask, "token"),
    }
    if plan.expert_rows:
        expert = rows["expert_mask"].bool()
        usual_units, expert_units = plan.mix_units()
        units["usual"] = count_units(mask, usual_units, rows=~expert)
        units["expert"] = count_units(mask, expert_units, rows=expert)
        units["agg_usual"] = count_units(mask, plan.agg_units, rows=~expert)
    return units


def worker_actor_options(
    num_cpus: float, placement_group: Any = None, bundle_index: int = 0, env: dict[str, str] | None = None,
    device_share: float = 1.0,
) -> dict[str, Any]:
    """Return Ray actor options for one trainer rank: ``device_share`` of one device plus ``num_cpus``.

    A share below 1 leaves the rest of the device to an engine in the same bundle (mode colocate).
    """
    from trinity.utils import plugins
    from trinity.utils.worker_env import quiet_worker_env

    options: dict[str, Any] = {
        "num_cpus": num_cpus,
        # the user's plugins (custom losses, advantages, ...) load in the rank: see trinity.trainer.fsdp_worker
        "runtime_env": {"env_vars": {**quiet_worker_env(), **(env or {}), **plugins.worker_env(),
                                     **trinity.device.worker_env()}},
    }
    options.update(trinity.device.ray_actor_resources(device_share))
    if placement_group is not None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            placement_group=placement_group, placement_group_bundle_index=bundle_index
        )
    return options


def remote_worker_class() -> Any:
    """Return :class:`FSDPWorker` as a Ray actor class, with its weight-sync rendezvous in a thread group of its own."""
    import ray

    from trinity.trainer.fsdp_worker import WEIGHT_SYNC_GROUP, WEIGHT_SYNC_THREADS

    return ray.remote(concurrency_groups={WEIGHT_SYNC_GROUP: WEIGHT_SYNC_THREADS})(FSDPWorker)  # type: ignore[call-overload]


def export_checkpoint(folder: Path) -> Path:
    """Write the Hugging Face model of the checkpoint ``folder`` to ``<folder>/huggingface``; return that folder.

    Raises ConversionError, and CheckpointWriteError (exit status 2, one line
    naming the export folder) when the disk refused the export (full,
    read-only, over quota): the checkpoint itself stays intact.
    """
    from trinity.manager.checkpoint_converter import convert_checkpoint
    from trinity.utils.worker_env import hf_progress_bars_off

    target = folder / HF_EXPORT
    try:
        with hf_progress_bars_off():
            return convert_checkpoint(folder, target, overwrite=True, check=False)
    except Exception as exc:
        problem = disk_write_problem(exc, folder)
        if problem is None:
            raise
        raise CheckpointWriteError(
            f"cannot export the Hugging Face model to {target}: {problem.strerror or problem} (the checkpoint "
            f"{folder} is intact); free space there or point checkpoint_root_dir at a writable folder with room, "
            f"then `trinity convert {folder} {target}` writes the export"
        ) from exc


class FSDPTrainer:
    """Drives ``world_size`` FSDP2 ranks running as Ray actors."""

    def __init__(
        self,
        run: RunPlan,
        *,
        world_size: int = 1,
        use_torch_compile: bool = False,
        total_steps: int | None = None,
        checkpoint_dir: str | Path | None = None,
        placement_group: Any = None,
        bundle_offset: int = 0,
        num_cpus_per_worker: float | None = None,
        in_process: bool = False,
        device_share: float = 1.0,
    ) -> None:
        """Start the ranks and build the models (blocks until every rank is ready).

        ``use_torch_compile`` is the layout's decision (the backend's support);
        ``total_steps`` is the run's length in steps, for warmup ratios and the
        cosine schedule (None: unknown). ``in_process`` runs the one rank of a
        one-rank trainer in this process instead of a Ray actor (debugging,
        tests); it joins a process group of one here. ``device_share``: the
        share of its device each rank asks of Ray (below 1 when an engine shares it).
        """
        self.run = run
        self.plan: TrainingPlan = run.algorithm
        self.world_size = world_size
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else default_checkpoint_dir(run)
        self.pad_token_id = pad_token_id(run.model.path, run.model.trust_remote_code)
        penalty = self.plan.kl_penalty
        #: The KL penalty's adaptive coefficient (checkpointed with the run), or None.
        self.kl_controller = (
            AdaptiveKLController(penalty.coef, penalty.target_kl or 0.0, penalty.horizon or 0.0)
            if penalty is not None and penalty.adaptive
            else None
        )
        self.step = 0
        #: What the last ``train_step(publish=...)`` wrote: ``(path, metas, bytes, seconds)``; None otherwise.
        self.last_publication: tuple[str, list[Any], int, float] | None = None
        self.in_process = in_process
        started = time.monotonic()
        if in_process:
            if self.world_size != 1:
                raise ValueError(f"in_process runs one rank; this trainer has {self.world_size}")
            self.workers: list[Any] = [
                FSDPWorker(
                    run, 0, 1, str(self.checkpoint_dir), use_torch_compile=use_torch_compile, total_steps=total_steps
                )
            ]
        else:

            cpus = float(run.cluster.cpus_per_bundle if num_cpus_per_worker is None else num_cpus_per_worker)
            remote_cls = remote_worker_class()
            self.workers = [
                remote_cls.options(
                    **worker_actor_options(cpus, placement_group, bundle_offset + rank, run.explorer.env_vars,
                                           device_share=device_share)
                ).remote(
                    run,
                    rank,
                    self.world_size,
                    str(self.checkpoint_dir),
                    use_torch_compile=use_torch_compile,
                    total_steps=total_steps,
                )
                for rank in range(self.world_size)
            ]
        try:
            address, port = self._on_all("node_address")[0]
            self.rank_info = self._on_all("setup", address, port)
        except Exception:
            self.kill()
            raise
        logger.info("FSDP trainer: %d ranks ready in %.1f s", self.world_size, time.monotonic() - started)
        if run.trainer.lora is not None:
            trainable = int(self.rank_info[0]["trainable_params"])
            total = sum(int(info["local_params"]) for info in self.rank_info)
            logger.info("trainer: LoRA %s: %s trainable parameters of %s (%.2f%%)", run.trainer.lora.describe(),
                        f"{trainable:,}", f"{total:,}", 100.0 * trainable / max(1, total))

    # -- training --------------------------------------------------------------------------

    def train_step(
        self,
        experiences: Sequence[Experience],
        checkpoint_extra: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
        *,
        publish: tuple[str, int] | None = None,
    ) -> dict[str, float]:
        """Train on ``experiences`` (one step) and return its metrics; saves a checkpoint when one is due.

        A step that saved one reports the seconds the save took as ``time/save_s``.

        ``checkpoint_extra`` is stored in that checkpoint (task-set and buffer
        positions); a function is called only when the checkpoint is saved.
        ``publish`` (a one-rank trainer in mode colocate): ``(path, version)``
        of the shared weights file the rank writes the updated weights into
        within the same call (see :meth:`FSDPWorker.publish_shared_weights`);
        :attr:`last_publication` then holds what it wrote.
        """
        started = time.monotonic()
        plan = self.plan
        if plan.needs_teacher_logprobs and any(e.teacher_logprobs is None for e in experiences):
            raise ValueError(
                f"algorithm {plan.algorithm!r} trains on the teacher's log-probs, but some experiences carry none; "
                "use a workflow that asks a teacher model (e.g. on_policy_distill_math_workflow)"
            )
        if plan.needs_proximal_logprobs:
            missing = sum(e.logprobs is None for e in experiences)
            if missing:
                raise ValueError(
                    f"policy loss {plan.policy_loss_fn!r} with decoupled: true weights each token by the engine's "
                    f"log-probs, but {missing} of {len(experiences)} experiences carry none; train on experiences "
                    "from an engine that records log-probs, or set decoupled: false"
                )
        rows_list, batch, rows, shards, lengths = self._sharded(experiences)
        unit = 2 if plan.paired else 1
        trainer = self.run.trainer
        wanted = []
        if plan.needs_proximal_logprobs:  # the engine's log-probs stay the old (behaviour) ones
            wanted.append("proximal_logprobs")
        elif plan.needs_old_logprobs and (trainer.recompute_old_logprobs or any(e.logprobs is None for e in rows_list)):
            wanted.append("old_logprobs")
        if plan.use_reference:
            wanted.append("ref_logprobs")
        if plan.use_critic:
            wanted.append("values")
        wanted.extend(plan.token_statistics)
        if wanted:
            forward = plan_micro_batches(lengths, trainer.forward, unit)
            parts = [rows_from_wire(part) for part in self._per_rank(
                "prepare",
                [(self._wire(take_rows(rows, idx)), wanted, cuts) for idx, cuts in zip(shards, forward, strict=True)],
            )]
            for name in wanted:
                merged = torch.zeros_like(rows["response_mask"])
                for indices, part in zip(shards, parts, strict=True):
                    for position, row in enumerate(indices):
                        if row >= 0:
                            merged[row] = part[name][position]
                rows[name] = merged

        metrics: dict[str, float] = {}
        # advantages the buffer did not compute (experiences that bypassed the pipeline) are computed here
        if plan.advantage_fn is not None and (
            plan.advantage_in == "trainer" or any(e.advantages is None for e in rows_list)
        ):
            metrics.update(self._advantages(rows, len(rows_list)))

        mask = rows["response_mask"]
        units = step_units(plan, rows)
        actor_cuts = plan_micro_batches(lengths, trainer.batching, unit)
        critic_cuts = (
            plan_micro_batches(lengths, trainer.critic.batching, unit)
            if trainer.critic is not None
            else [[] for _ in shards]
        )
        step = self.step + 1
        if publish is not None and self.world_size != 1:
            raise ValueError(f"shared-file weights need a one-rank trainer; this one has {self.world_size}")
        results = self._per_rank(
            "update",
            [
                (self._wire(take_rows(rows, idx)), units, cuts, critic, step, publish)
                for idx, cuts, critic in zip(shards, actor_cuts, critic_cuts, strict=True)
            ],
        )
        self.last_publication = results[0].get("published")
        metrics.update(self._merge(results))
        self.step = int(results[0]["step"])
        tokens = mask != 0
        metrics.update(
            tokens=float(tokens.sum()),
            rows=float(len(rows_list)),
            response_length_mean=float(tokens.sum(dim=1).float().mean()),
            reward_mean=float(batch.rewards.mean()),
            step=float(self.step),
        )
        if plan.advantage_fn is not None and "advantages" in rows:
            metrics["advantage_mean"] = float(rows["advantages"][tokens].mean()) if bool(tokens.any()) else 0.0
        for source, alias in _ALIASES.items():
            if source in metrics:
                metrics[alias] = metrics[source]
        metrics["step_time_s"] = time.monotonic() - started
        metrics[RANK_UPDATE_SECONDS] = float(max(part["seconds"] for part in results))
        interval = self.run.trainer.save_interval
        if interval > 0 and self.step % interval == 0:
            extra = checkpoint_extra() if callable(checkpoint_extra) else checkpoint_extra
            # the step's own metrics, for a run killed after this save but before it logged them
            saving = time.monotonic()
            self.save_checkpoint({**(extra or {}), STEP_METRICS: dict(metrics)})
            metrics[SAVE_SECONDS] = time.monotonic() - saving
        return metrics

    def _sharded(self, experiences: Sequence[Experience]) -> tuple[list[Experience], Any, Rows, list[list[int]],
                                                                     list[list[int]]]:
        """The step's rows, its batch and tensors, each rank's row indices and their token lengths."""
        plan = self.plan
        rows_list = expand_pairs(experiences) if plan.paired else list(experiences)
        batch = make_batch(rows_list, self.pad_token_id)
        rows: Rows = batch_rows(batch)
        if any(e.multi_modal_inputs is not None for e in rows_list):  # images ride along as per-row tensors
            rows.update(multimodal_rows([e.multi_modal_inputs for e in rows_list]))
        # the ranks of a Ulysses group share their rows (each runs a slice of every sequence)
        sequence_parallel = self.run.trainer.ulysses_size
        groups = shard_indices(len(batch), self.world_size // sequence_parallel, 2 if plan.paired else 1)
        shards = [rows_of_group for rows_of_group in groups for _ in range(sequence_parallel)]
        lengths = [[int(v) for v in take_rows(rows, idx)["attention_mask"].sum(dim=1)] for idx in shards]
        return rows_list, batch, rows, shards, lengths

    def activation_bytes(self, experiences: Sequence[Experience]) -> list[int]:
        """Per rank, the bytes the actor's forward keeps for its backward on its largest micro-batch of
        ``experiences`` (the activation memory of a training step; nothing is trained). For benchmarks."""
        _, _, rows, shards, lengths = self._sharded(experiences)
        cuts = plan_micro_batches(lengths, self.run.trainer.batching, 2 if self.plan.paired else 1)
        return [int(n) for n in self._per_rank(
            "activation_bytes", [(self._wire(take_rows(rows, idx)), part) for idx, part in zip(shards, cuts,
                                                                                               strict=True)])]

    def _advantages(self, rows: Rows, batch_size: int) -> dict[str, float]:
        """Compute the trainer-side advantages (after the KL reward penalty, when there is one) into ``rows``."""
        plan = self.plan
        assert plan.advantage_fn is not None
        metrics: dict[str, float] = {}
        token_rewards = None
        penalty = plan.kl_penalty
        if penalty is not None:
            coef = self.kl_controller.coef if self.kl_controller is not None else penalty.coef
            token_rewards, kl_metrics = kl_reward_penalty(
                outcome_token_rewards(rows["rewards"], rows["response_mask"]),
                rows["old_logprobs"],
                rows["ref_logprobs"],
                rows["response_mask"],
                coef=coef,
                kl_fn=penalty.fn,
            )
            metrics.update(kl_metrics)
            if self.kl_controller is not None:
                self.kl_controller.update(kl_metrics["kl/reward_penalty_kl"], batch_size)
        inputs = AdvantageInputs.from_batch(
            rows_batch(rows), values=rows.get("values"), token_level_rewards=token_rewards,
            entropies=rows.get("entropies"), nec=rows.get("nec"),
        )
        advantages, returns, token_filter = compute_filtered_advantages(
            plan.advantage_fn, inputs, **plan.advantage_options
        )
        rows["advantages"] = advantages.float()
        rows["returns"] = returns.float()
        if token_filter is not None:  # the loss, its token counts and the KL / entropy terms see the clipped mask
            rows["response_mask"] = rows["response_mask"] * token_filter.keep.to(rows["response_mask"].dtype)
            metrics.update({f"advantage/{name}": value for name, value in token_filter.metrics.items()})
        return metrics

    @staticmethod
    def _merge(results: Sequence[dict[str, Any]]) -> dict[str, float]:
        sums: dict[str, float] = {}
        weights: dict[str, float] = {}
        for part in results:
            for name, value in part["sums"].items():
                sums[name] = sums.get(name, 0.0) + value
                weights[name] = weights.get(name, 0.0) + part["weights"][name]
        merged = {name: sums[name] / weights[name] for name in sums if weights[name] > 0}
        first = results[0]
        merged["loss"] = float(sum(part["loss"] for part in results))
        merged["grad_norm"] = float(first["grad_norm"][-1]) if first["grad_norm"] else 0.0
        if first["critic_grad_norm"]:
            merged["critic_grad_norm"] = float(first["critic_grad_norm"][-1])
        merged["lr"] = float(first["lr"])
        merged["skipped_steps"] = float(first["skipped_steps"])
        return merged

    # -- checkpoints -----------------------------------------------------------------------

    def save_checkpoint(self, extra: dict[str, Any] | None = None, *, final: bool = False) -> str:
        """Save a checkpoint of the current step with the launcher's ``extra``; return its folder.

        With ``trainer.save_hf_checkpoint`` ``always`` (or ``last`` and ``final``)
        the checkpoint also gets a Hugging Face export in ``<checkpoint>/huggingface``.
        Raises :class:`~trinity.trainer.checkpoint.CheckpointWriteError` when the
        disk is full, read-only or over quota (the previous checkpoint stays the latest).
        """
        if self.kl_controller is not None:
            extra = {**(extra or {}), KL_CONTROLLER: self.kl_controller.state_dict()}
        self._check_room()
        try:
            paths = self._on_all("save_checkpoint", extra)
        except BaseException as exc:  # DCP reports a failed write as a BaseException
            if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
                self._raise_write_problem(exc)
            raise
        assert paths[0] is not None
        mode = self.run.trainer.save_hf
        if mode == "always" or (mode == "last" and final):
            self.export_hf(paths[0])
        return str(paths[0])

    def _check_room(self) -> None:
        """Raise CheckpointWriteError before writing when the folder cannot hold another checkpoint like its latest."""
        problem = room_problem(self.checkpoint_dir)
        if problem is not None:
            raise CheckpointWriteError(
                f"cannot save the checkpoint of step {self.step}: {problem}; nothing was written and the latest "
                f"complete checkpoint is still {self._kept_checkpoint()}; free space there or "
                "point checkpoint_root_dir at a folder with room, then rerun the same command to resume"
            )

    def _kept_checkpoint(self) -> Path | None:
        """Return the newest checkpoint whose files all have their recorded sizes (no checksums: this is cheap)."""
        chosen, _ = CheckpointDir(self.checkpoint_dir).newest_intact(checksums=False)
        return chosen.path if chosen is not None else None

    def _raise_write_problem(self, exc: BaseException) -> None:
        """Raise CheckpointWriteError when a failed save was the disk's fault (full, read-only, over quota)."""
        problem = disk_write_problem(exc, self.checkpoint_dir)
        if problem is None:
            return
        latest = self._kept_checkpoint()
        kept = f"the latest complete checkpoint is still {latest}" if latest is not None else "no checkpoint was saved"
        raise CheckpointWriteError(
            f"cannot save the checkpoint of step {self.step} in {self.checkpoint_dir}: {problem.strerror or problem} "
            f"({kept}); free space there or point checkpoint_root_dir at a writable folder with room, then rerun "
            "the same command to resume"
        ) from exc

    def export_hf(self, checkpoint: str | Path | None = None) -> Path | None:
        """Write the Hugging Face model of ``checkpoint`` (default: the newest intact) to ``<checkpoint>/huggingface``.

        Returns the folder, or None when there is no checkpoint. Raises
        ConversionError, and CheckpointWriteError (see :func:`export_checkpoint`).
        """
        folder = Path(checkpoint) if checkpoint is not None else CheckpointDir(self.checkpoint_dir).usable_latest()
        if folder is None:
            return None
        exported = export_checkpoint(folder)
        logger.info("Hugging Face model of step %d: %s", self.step, exported)
        return exported

    def resume(self, path: str | Path | None = None) -> dict[str, Any] | None:
        """Restore the checkpoint ``path`` (a ``step-N`` folder or a checkpoint root; default: the latest).

        Returns ``{"step", "extra", "path"}``, or None when ``path`` is None and no checkpoint exists yet.
        Raises :class:`~trinity.trainer.checkpoint.CheckpointError` for a ``path`` holding none.
        """
        if path is None:
            chosen = self._newest_intact()
            if chosen is None:
                return None
            folder = chosen
        else:
            folder = resolve_checkpoint(path)
            verdict = verify(folder)
            if not verdict.intact:
                raise CheckpointError(
                    f"cannot resume from {folder}: {describe(verdict)}; choose an intact checkpoint "
                    f"(`trinity checkpoints verify {folder.parent}` lists them)",
                    exit_code=EXIT_USAGE,
                )
        try:
            restored = self._on_all("load_checkpoint", str(folder))[0]
        except BaseException as exc:  # DCP reports a failed read as a BaseException
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise CheckpointError(
                f"cannot resume from {folder}: {innermost_message(exc)}; the checkpoint is damaged or was written "
                f"for another model or trainer setup: delete {folder} to resume from the one before it, or set "
                "continue_from_checkpoint: false to start afresh"
            ) from exc
        self.step = int(restored["step"])
        extra = restored["extra"] or {}
        if self.kl_controller is not None and KL_CONTROLLER in extra:
            self.kl_controller.load_state_dict(extra[KL_CONTROLLER])
        return {"step": self.step, "extra": extra, "path": str(folder)}

    def _newest_intact(self) -> Path | None:
        """Return the newest intact checkpoint (warning once per newer damaged one), or None when there is none yet.

        Raises CheckpointError (exit status 2) when checkpoints exist but none is intact.
        """
        checkpoints = CheckpointDir(self.checkpoint_dir)
        chosen, rejected = checkpoints.newest_intact()
        if chosen is None:
            if rejected:
                raise no_intact_checkpoint(checkpoints.root, rejected)
            return None
        warn_rejected(rejected, chosen)
        return chosen.path

    # -- weights ---------------------------------------------------------------------------

    def state_dict_checksums(self, adapter: bool = False) -> list[str]:
        """Return each rank's checksum of the full (gathered) actor weights; all equal when healthy.

        ``adapter``: of the LoRA adapter alone, as an adapter sync sends it.
        """
        return list(self._on_all("state_dict_checksum", adapter))

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Return the full actor weights (gathered on rank 0, as exported to the engines)."""
        return dict(self._on_all("full_state_dict")[0])

    def memory_report(self) -> dict[str, int]:
        """The actor's trainable parameters, and its parameter and optimizer-state bytes summed over the ranks."""
        reports = self._on_all("memory_report")
        return {"trainable_params": int(reports[0]["trainable_params"]),
                "parameter_bytes": sum(int(r["parameter_bytes"]) for r in reports),
                "optimizer_state_bytes": sum(int(r["optimizer_state_bytes"]) for r in reports)}

    def critic_state_dict(self) -> dict[str, torch.Tensor]:
        """Return the full critic weights (empty without a critic)."""
        return dict(self._on_all("critic_state_dict")[0])

    # -- fan-out ---------------------------------------------------------------------------

    def _on_all(self, method: str, *args: Any) -> list[Any]:
        """Call ``method(*args)`` on every rank at once and return the results, rank 0 first."""
        return self._per_rank(method, [args] * len(self.workers))

    def _wire(self, rows: Rows) -> Rows | dict[str, Any]:
        """Rows as sent to the ranks: as they are in process, else in :func:`rows_to_wire`'s form."""
        return rows if self.in_process else rows_to_wire(rows)

    def _per_rank(self, method: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        if self.in_process:
            return [getattr(worker, method)(*a) for worker, a in zip(self.workers, args, strict=True)]
        import ray

        try:
            return list(ray.get([getattr(w, method).remote(*a) for w, a in zip(self.workers, args, strict=True)]))
        except Exception as exc:
            dead = self._dead_rank()
            if dead is not None:  # a live rank's collective failed because a peer died: report the death
                raise dead from exc
            raise

    def _dead_rank(self, timeout_s: float = 10.0) -> BaseException | None:
        """Return the error of the first rank actor whose process is gone, or None when every rank answers."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        for worker in self.workers:
            try:
                ray.get(worker.__ray_ready__.remote(), timeout=timeout_s)
            except RayActorError as exc:
                return exc
            except GetTimeoutError:
                continue  # busy, not dead
        return None

    # -- lifetime --------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Leave the process groups and end the rank actors."""
        if self.in_process:
            for worker in self.workers:
                worker.shutdown()
            self.workers = []
            return
        import ray

        try:
            ray.get([w.shutdown.remote() for w in self.workers], timeout=60)
        except Exception as exc:  # noqa: BLE001 - the actors are killed below anyway
            logger.debug("trainer shutdown: %s", exc)
        self.kill()

    def kill(self) -> None:
        """End the rank actors at once (no clean-up), as a crash would."""
        if self.in_process:
            self.shutdown()
            return
        import ray

        for worker in self.workers:
            try:
                ray.kill(worker, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.workers = []
