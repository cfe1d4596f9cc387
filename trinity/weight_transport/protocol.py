"""What trainer rank 0 and the rollout engines tell each other about a weight broadcast."""

from __future__ import annotations

from dataclasses import dataclass


class WeightSyncError(RuntimeError):
    """The weight-sync group could not be built, or a broadcast did not match what the receiver expected."""


@dataclass(frozen=True)
class TensorMeta:
    """Name, dtype and shape of one weight tensor, sent ahead of a broadcast."""

    name: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class WeightSyncGroupInfo:
    """How an engine joins the trainer's weight-sync process group."""

    master_addr: str
    master_port: int
    #: Trainer rank 0 plus every engine rank (an engine contributes ``weight_sync_ranks()`` ranks).
    world_size: int
    #: Rank of the first engine rank (1: the trainer holds rank 0 only).
    rank_offset: int
    group_name: str
    #: torch.distributed backend: the device backend's collective (``gloo``/``nccl``/``hccl``).
    backend: str
    timeout_s: float
