"""The FSDP2 trainer: actor, optional reference and critic, across ranks that run as Ray actors.

* :class:`~trinity.trainer.trainer.FSDPTrainer`: the driver the launcher holds.
* :class:`~trinity.trainer.fsdp_worker.FSDPWorker`: one rank.
* :mod:`~trinity.trainer.checkpoint`: atomic, resumable checkpoints.
* :mod:`~trinity.trainer.plan`: what a step computes, from the algorithm config.

Names are imported on first use: ``trinity.trainer.plan`` is read at config
load time and must not pull in torch.
"""

from trinity.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "CheckpointDir": "checkpoint",
    "CheckpointError": "checkpoint",
    "resolve_checkpoint": "checkpoint",
    "FSDPWorker": "fsdp_worker",
    "TorchCompileUnsupportedError": "models",
    "resolve_torch_compile": "models",
    "PlanError": "plan",
    "TrainingPlan": "plan",
    "resolve_plan": "plan",
    "FSDPTrainer": "trainer",
    "default_checkpoint_dir": "trainer",
})
