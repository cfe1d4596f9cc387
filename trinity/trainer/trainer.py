"""The FSDP2 trainer's driver: N :class:`~trinity.trainer.fsdp_worker.FSDPWorker` ranks as Ray actors.

Usage (the launcher)::

    trainer = FSDPTrainer(config, checkpoint_dir=..., placement_group=pg)   # Ray must be initialised
    resumed = trainer.resume()              # None on a fresh run, else {"step", "extra", "path"}
    metrics = trainer.train_step(experiences, checkpoint_extra={"task_position": ..., "buffer_position": ...})
    trainer.save_checkpoint(extra)          # e.g. at the end of a run
    trainer.workers                          # rank handles, rank 0 first: what the Synchronizer takes
    trainer.shutdown()

A step: the experiences are padded into one :class:`~trinity.common.experience.Batch`,
split evenly across ranks (dummy rows fill the gap, see :mod:`trinity.trainer.batching`);
the ranks compute what the algorithm needs first (reference log-probs, critic
values, old log-probs when the experiences carry none); the driver computes
advantages on the whole batch (group baselines need every member of a group);
then every rank runs ``ppo_epochs`` optimizer steps over its shard in
micro-batches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import trinity.device
from trinity.algorithm import AdvantageInputs, compute_advantages, kl_reward_penalty, outcome_token_rewards
from trinity.common.config.schema import Config
from trinity.common.experience import Experience, make_batch
from trinity.trainer.batching import Rows, batch_rows, count_units, expand_pairs, shard_indices, take_rows
from trinity.trainer.checkpoint import CheckpointDir, CheckpointError, resolve_checkpoint
from trinity.trainer.fsdp_worker import FSDPWorker
from trinity.trainer.models import resolve_torch_compile
from trinity.trainer.plan import TrainingPlan, resolve_plan

logger = logging.getLogger(__name__)

#: Short names for the metrics users look at first.
_ALIASES = {"kl/loss_kl": "kl", "kl/reward_penalty_kl": "kl"}


def default_checkpoint_dir(config: Config) -> Path:
    """Return ``<checkpoint_root_dir>/<project>/<name>/checkpoints``."""
    return Path(config.checkpoint_root_dir) / config.project / config.name / "checkpoints"


def pad_token_id(config: Config) -> int:
    """Return the pad token id of the run's tokenizer (its EOS when it has no pad token)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config.model.tokenizer_path or config.model.model_path)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError(f"tokenizer of {config.model.model_path!r} has neither a pad nor an EOS token")
    return int(pad)


def worker_actor_options(
    num_cpus: float, placement_group: Any = None, bundle_index: int = 0
) -> dict[str, Any]:
    """Return Ray actor options for one trainer rank: one device of the selected backend plus ``num_cpus``."""
    options: dict[str, Any] = {
        "num_cpus": num_cpus,
        "runtime_env": {"env_vars": trinity.device.worker_env()},
    }
    options.update(trinity.device.ray_actor_resources(1))
    if placement_group is not None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            placement_group=placement_group, placement_group_bundle_index=bundle_index
        )
    return options


class FSDPTrainer:
    """Drives ``config.trainer.trainer_num`` FSDP2 ranks running as Ray actors."""

    def __init__(
        self,
        config: Config,
        *,
        checkpoint_dir: str | Path | None = None,
        placement_group: Any = None,
        bundle_offset: int = 0,
        num_cpus_per_worker: float | None = None,
        in_process: bool = False,
    ) -> None:
        """Start the ranks and build the models (blocks until every rank is ready).

        ``in_process`` runs the one rank of a ``trainer_num: 1`` trainer in this
        process instead of a Ray actor (debugging, tests); it joins a process
        group of one here.
        """
        self.config = config
        self.plan: TrainingPlan = resolve_plan(config.algorithm)
        resolve_torch_compile(config.trainer.use_torch_compile)  # one clear error before any actor starts
        self.world_size = config.trainer.trainer_num
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else default_checkpoint_dir(config)
        self.pad_token_id = pad_token_id(config)
        self.step = 0
        self.in_process = in_process
        started = time.monotonic()
        if in_process:
            if self.world_size != 1:
                raise ValueError(f"in_process runs one rank; trainer.trainer_num is {self.world_size}")
            self.workers: list[Any] = [FSDPWorker(config, 0, 1, str(self.checkpoint_dir))]
        else:
            import ray

            cpus = float(config.cluster.cpus_per_bundle if num_cpus_per_worker is None else num_cpus_per_worker)
            remote_cls = ray.remote(FSDPWorker)
            self.workers = [
                remote_cls.options(**worker_actor_options(cpus, placement_group, bundle_offset + rank)).remote(
                    config, rank, self.world_size, str(self.checkpoint_dir)
                )
                for rank in range(self.world_size)
            ]
        try:
            address, port = self._on_all("node_address")[0]
            self.rank_info = self._on_all("setup", address, port, 0)
        except Exception:
            self.kill()
            raise
        logger.info("FSDP trainer: %d ranks ready in %.1f s", self.world_size, time.monotonic() - started)

    # -- training --------------------------------------------------------------------------

    def train_step(
        self, experiences: Sequence[Experience], checkpoint_extra: dict[str, Any] | None = None
    ) -> dict[str, float]:
        """Train on ``experiences`` (one step) and return its metrics; saves a checkpoint when one is due.

        ``checkpoint_extra`` is stored in that checkpoint (task-set and buffer positions).
        """
        started = time.monotonic()
        plan = self.plan
        rows_list = expand_pairs(experiences) if plan.paired else list(experiences)
        batch = make_batch(rows_list, self.pad_token_id)
        rows: Rows = batch_rows(batch)
        shards = shard_indices(len(batch), self.world_size, 2 if plan.paired else 1)

        wanted = []
        if plan.needs_old_logprobs and any(e.logprobs is None for e in rows_list):
            wanted.append("old_logprobs")
        if plan.use_reference:
            wanted.append("ref_logprobs")
        if plan.use_critic:
            wanted.append("values")
        if wanted:
            parts = self._per_rank("prepare", [(take_rows(rows, idx), wanted) for idx in shards])
            for name in wanted:
                merged = torch.zeros_like(rows["response_mask"])
                for indices, part in zip(shards, parts, strict=True):
                    for position, row in enumerate(indices):
                        if row >= 0:
                            merged[row] = part[name][position]
                rows[name] = merged

        metrics: dict[str, float] = {}
        if plan.advantage_fn is not None:
            metrics.update(self._advantages(rows, rows_list))

        mask = rows["response_mask"]
        units = {
            "policy": count_units(mask, plan.policy_units, paired=plan.paired),
            "agg": count_units(mask, "token" if plan.aggregation == "token-mean" else "seq"),
            "token": count_units(mask, "token"),
        }
        results = self._per_rank("update", [(take_rows(rows, idx), units) for idx in shards])
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
        if plan.advantage_fn is not None:
            metrics["advantage_mean"] = float(rows["advantages"][tokens].mean()) if bool(tokens.any()) else 0.0
        for source, alias in _ALIASES.items():
            if source in metrics:
                metrics[alias] = metrics[source]
        metrics["step_time_s"] = time.monotonic() - started
        interval = self.config.trainer.save_interval
        if interval > 0 and self.step % interval == 0:
            self.save_checkpoint(checkpoint_extra)
        return metrics

    def _advantages(self, rows: Rows, experiences: Sequence[Experience]) -> dict[str, float]:
        plan = self.plan
        assert plan.advantage_fn is not None
        metrics: dict[str, float] = {}
        if not plan.use_critic and plan.kl_target != "reward" and all(e.advantages is not None for e in experiences):
            return metrics  # the experience pipeline computed them already
        token_rewards = None
        if plan.kl_target == "reward":
            assert plan.kl_fn is not None
            token_rewards, kl_metrics = kl_reward_penalty(
                outcome_token_rewards(rows["rewards"], rows["response_mask"]), rows["old_logprobs"],
                rows["ref_logprobs"], rows["response_mask"], coef=plan.kl_coef, kl_fn=plan.kl_fn,
            )
            metrics.update(kl_metrics)
        inputs = AdvantageInputs(
            rewards=rows["rewards"], response_mask=rows["response_mask"], group_index=rows["group_index"],
            values=rows.get("values"), token_level_rewards=token_rewards,
        )
        advantages, returns = compute_advantages(plan.advantage_fn, inputs, **plan.advantage_options)
        rows["advantages"] = advantages.float()
        rows["returns"] = returns.float()
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

    def save_checkpoint(self, extra: dict[str, Any] | None = None) -> str:
        """Save a checkpoint of the current step with the launcher's ``extra``; return its folder."""
        paths = self._on_all("save_checkpoint", extra)
        assert paths[0] is not None
        return str(paths[0])

    def resume(self, path: str | Path | None = None) -> dict[str, Any] | None:
        """Restore the checkpoint ``path`` (a ``step-N`` folder or a checkpoint root; default: the latest).

        Returns ``{"step", "extra", "path"}``, or None when ``path`` is None and no checkpoint exists yet.
        Raises :class:`~trinity.trainer.checkpoint.CheckpointError` for a ``path`` holding none.
        """
        if path is None:
            latest = CheckpointDir(self.checkpoint_dir).latest()
            if latest is None:
                return None
            folder = latest
        else:
            folder = resolve_checkpoint(path)
        try:
            restored = self._on_all("load_checkpoint", str(folder))[0]
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc
            raise CheckpointError(f"cannot resume from {folder}: {type(cause).__name__}: {cause}") from exc
        self.step = int(restored["step"])
        return {"step": self.step, "extra": restored["extra"], "path": str(folder)}

    # -- weights ---------------------------------------------------------------------------

    def state_dict_checksums(self) -> list[str]:
        """Return each rank's checksum of the full (gathered) actor weights; all equal when healthy."""
        return list(self._on_all("state_dict_checksum"))

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Return the full actor weights (gathered on rank 0, as exported to the engines)."""
        return dict(self._on_all("full_state_dict")[0])

    def critic_state_dict(self) -> dict[str, torch.Tensor]:
        """Return the full critic weights (empty without a critic)."""
        return dict(self._on_all("critic_state_dict")[0])

    # -- fan-out ---------------------------------------------------------------------------

    def _on_all(self, method: str, *args: Any) -> list[Any]:
        """Call ``method(*args)`` on every rank at once and return the results, rank 0 first."""
        return self._per_rank(method, [args] * len(self.workers))

    def _per_rank(self, method: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        if self.in_process:
            return [getattr(worker, method)(*a) for worker, a in zip(self.workers, args, strict=True)]
        import ray

        return list(ray.get([getattr(w, method).remote(*a) for w, a in zip(self.workers, args, strict=True)]))

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
