"""Shared helpers of the trainer and synchronizer tests: a local Ray, the tiny model, experiences, a test engine."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from tests.plans import make_plan
from trinity.common.config.plan.run import RunPlan
from trinity.common.experience import Experience
from trinity.weight_transport.protocol import TensorMeta, WeightSyncGroupInfo

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def start_ray() -> bool:
    """Start a fresh local Ray (2 CPUs) unless one runs in this process; return whether it was started here."""
    import ray

    if ray.is_initialized():
        return False
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}})
    return True


def local_ray() -> Iterator[Any]:
    """The body of a ``ray_local`` fixture: a fresh local Ray (:func:`start_ray`), stopped afterwards unless it
    was running already."""
    import ray

    started = start_ray()
    yield ray
    if started:
        ray.shutdown()


def tiny_model(folder: Path) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(folder)


def make_trainer_plan(model_path: Path, root: Path, algorithm: str = "grpo", *, world_size: int = 2,
                      micro_batch_size: int = 2, **overrides: Any) -> RunPlan:
    """Return the plan of a ``world_size``-rank CPU trainer (mode train) on the tiny model, checkpoints under ``root``.

    Micro-batches hold ``micro_batch_size`` rows; ``overrides`` are dotted config paths (upstream's schema).
    """
    actor = "trainer.trainer_config.actor_rollout_ref.actor"
    return make_plan({
        "mode": "train",
        "model.model_path": str(model_path),
        "checkpoint_root_dir": str(root),
        "algorithm.algorithm_type": algorithm,
        "algorithm.repeat_times": 1 if algorithm in ("ppo", "sft", "dpo") else 3,
        "cluster.gpu_per_node": world_size,
        # SFT/DPO read a data set (never loaded here: tests hand experiences to the trainer)
        "buffer.trainer_input.experience_buffer": (
            {"name": "data", "storage_type": "file", "path": "data.jsonl"} if algorithm in ("sft", "dpo")
            else {"name": "experience", "storage_type": "sql"}),
        f"{actor}.ppo_micro_batch_size_per_gpu": micro_batch_size,
        "trainer.trainer_config.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro_batch_size,
        **overrides,
    })


def make_experiences(
    groups: int = 2,
    group_size: int = 3,
    *,
    seed: int = 0,
    logprobs: bool = False,
    rejected: bool = False,
    vocab: int = 300,
) -> list[Experience]:
    """Return GRPO-style groups of rollouts with different prompt and response lengths and rewards."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for group in range(groups):
        prompt_length = 4 + group
        prompt = torch.randint(3, vocab, (prompt_length,), generator=generator)
        for run in range(group_size):
            length = 3 + (run + group) % 4
            response = torch.randint(3, vocab, (length,), generator=generator)
            out.append(Experience(
                tokens=torch.cat([prompt, response]),
                prompt_length=prompt_length,
                logprobs=-torch.rand(length, generator=generator) - 4.0 if logprobs else None,
                reward=float((run * 7 + group) % 3),
                group_id=f"task-{group}",
                run_id=run,
                rejected_tokens=torch.cat([prompt, torch.randint(3, vocab, (length + 1,), generator=generator)])
                if rejected else None,
            ))
    return out


class EngineDouble:
    """A rollout engine test double: a tiny HF model behind the engine contract the synchronizer drives.

    Also usable as a bare weight-sync peer (``join``/``receive``/``create``/``broadcast``).
    """

    def __init__(self, model_path: str | None = None) -> None:
        self.model: Any = None
        if model_path is not None:
            from transformers import AutoModelForCausalLM

            self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.version = 0
        self.group: Any = None
        self.release = threading.Event()
        self.delay_s = 0.0
        self.received: dict[str, torch.Tensor] = {}
        self.refuse_receive = False

    # -- the engine contract ---------------------------------------------------------------

    def weight_sync_ranks(self) -> int:
        return 1

    def init_weight_sync(self, info: WeightSyncGroupInfo, first_rank: int) -> None:
        from trinity.weight_transport.group import WeightSyncGroup

        self.group = WeightSyncGroup.join(info, first_rank)

    def receive_weights(self, metas: Sequence[TensorMeta], version: int, bucket_bytes: int) -> None:
        assert self.group is not None
        if self.refuse_receive:  # a receiver failing before it takes part (the sender's peers still wait)
            self.refuse_receive = False
            raise RuntimeError("receive refused by the test")
        self.load_state_dict(self.group.receive_state_dict(metas, bucket_bytes, "cpu"), version)

    def load_checkpoint_weights(self, folder: str, version: int) -> None:
        from trinity.synchronizer.checkpoint_sync import load_weights

        if self.delay_s:
            self.release.wait(self.delay_s)
        state, found = load_weights(folder)
        assert found == version, f"the sync path holds version {found}, expected {version}"
        self.load_state_dict(state, version)

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        self.received = dict(state_dict)
        if self.model is not None:  # like the real engines: every name known, a tied alias may be left out
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            from trinity.common.models.checksum import tied_alias_sources

            assert not unexpected and set(missing) <= set(tied_alias_sources(self.model)), (unexpected, missing)
        self.version = version

    def state_dict_checksum(self) -> str:
        from trinity.common.models.checksum import state_dict_checksum

        return state_dict_checksum(self.model.state_dict() if self.model is not None else self.received)

    def model_version(self) -> int:
        return self.version

    def set_delay(self, seconds: float) -> None:
        self.delay_s = seconds

    def refuse_next_receive(self) -> None:
        self.refuse_receive = True

    def broadcast_header(self, state_dict: Mapping[str, torch.Tensor], bucket_bytes: int) -> None:
        """Send only the plan's header, as a sender whose sync failed right after it."""
        from trinity.weight_transport.buckets import plan_buckets, plan_header, state_dict_metas

        metas = state_dict_metas(state_dict)
        self.group.broadcast_tensor(plan_header(metas, plan_buckets(metas, bucket_bytes)))

    # -- bare weight-sync peer -------------------------------------------------------------

    def join(self, info: WeightSyncGroupInfo, rank: int) -> None:
        from trinity.weight_transport.group import WeightSyncGroup

        self.group = WeightSyncGroup.join(info, rank)

    def create(self, info: WeightSyncGroupInfo) -> None:
        from trinity.weight_transport.group import WeightSyncGroup

        self.group = WeightSyncGroup.create(info)

    def receive(self, metas: Sequence[TensorMeta], bucket_bytes: int) -> str:
        from trinity.common.models.checksum import state_dict_checksum

        self.received = self.group.receive_state_dict(metas, bucket_bytes, "cpu")
        dtypes = {name: str(t.dtype) for name, t in self.received.items()}
        return state_dict_checksum(self.received) + "|" + repr(sorted(dtypes.items()))

    def broadcast(self, state_dict: Mapping[str, torch.Tensor], bucket_bytes: int) -> list[TensorMeta]:
        metas: list[TensorMeta] = self.group.broadcast_state_dict(state_dict, bucket_bytes)
        return metas

    def close_group(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group = None

    def node_address(self) -> tuple[str, int]:
        from trinity.weight_transport.addresses import find_free_port

        return "127.0.0.1", find_free_port()


class TrainerStub:
    """The trainer side of the synchronizer protocol with a plain state dict (one in-process rank)."""

    def __init__(self, state: Mapping[str, torch.Tensor]) -> None:
        self.state = {k: v.clone() for k, v in state.items()}
        self.group: Any = None
        self._gathered: dict[str, torch.Tensor] | None = None
        #: Calls of send_weights (the synchronizer's cached-plan path).
        self.sends = 0

    def perturb(self, value: float) -> None:
        for tensor in self.state.values():
            if tensor.is_floating_point():
                tensor.add_(value)

    def node_address(self) -> tuple[str, int]:
        from trinity.weight_transport.addresses import find_free_port

        return "127.0.0.1", find_free_port()

    def init_weight_sync(self, info: WeightSyncGroupInfo) -> None:
        from trinity.weight_transport.group import WeightSyncGroup

        self.group = WeightSyncGroup.create(info)

    def gather_weights(self) -> list[TensorMeta]:
        from trinity.weight_transport.buckets import state_dict_metas

        self._gathered = {k: v.clone() for k, v in self.state.items()}
        return state_dict_metas(self._gathered)

    def _take(self) -> dict[str, torch.Tensor]:
        assert self._gathered is not None
        state, self._gathered = self._gathered, None
        return state

    def broadcast_weights(self, bucket_bytes: int) -> int:
        self.group.broadcast_state_dict(self._take(), bucket_bytes)
        return 0

    def send_weights(self, bucket_bytes: int, metas: list[TensorMeta]) -> int:
        """The one-call send of a known plan, as FSDPWorker.send_weights: a changed plan is refused by the group."""
        self.sends += 1
        held = self.gather_weights()
        try:
            self.group.require_plan(metas, held, bucket_bytes)
        except Exception:
            self._gathered = None
            raise
        return self.broadcast_weights(bucket_bytes)

    def save_sync_weights(self, folder: str, version: int) -> int:
        from trinity.synchronizer.checkpoint_sync import save_weights

        save_weights(self._take(), folder, version)
        return 0

    def put_sync_weights(self) -> list[Any]:
        from trinity.synchronizer.memory_sync import put_state_dict

        return [put_state_dict(self._take())]

    def close_weight_sync(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group = None

    def checksum(self) -> str:
        from trinity.common.models.checksum import state_dict_checksum

        return state_dict_checksum(self.state)
