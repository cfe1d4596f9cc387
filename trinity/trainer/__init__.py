"""The FSDP2 trainer: actor, optional reference and critic, across ranks that run as Ray actors.

* :class:`~trinity.trainer.trainer.FSDPTrainer`: the driver the launcher holds.
* :class:`~trinity.trainer.fsdp_worker.FSDPWorker`: one rank.
* :mod:`~trinity.trainer.checkpoint`: atomic, resumable checkpoints.
* :mod:`~trinity.trainer.plan`: what a step computes, from the algorithm config.
"""

from trinity.trainer.checkpoint import CheckpointDir, CheckpointError, resolve_checkpoint
from trinity.trainer.fsdp_worker import FSDPWorker
from trinity.trainer.models import TorchCompileUnsupportedError, resolve_torch_compile
from trinity.trainer.plan import PlanError, TrainingPlan, resolve_plan
from trinity.trainer.trainer import FSDPTrainer, default_checkpoint_dir

__all__ = [
    "CheckpointDir",
    "CheckpointError",
    "FSDPTrainer",
    "FSDPWorker",
    "PlanError",
    "TorchCompileUnsupportedError",
    "TrainingPlan",
    "default_checkpoint_dir",
    "resolve_checkpoint",
    "resolve_plan",
    "resolve_torch_compile",
]
