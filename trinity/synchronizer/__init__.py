"""Moving the trainer's weights into the rollout engines: online (collective), checkpoint, memory.

* :mod:`~trinity.synchronizer.weight_sync`: the bucketed broadcast group (trainer rank 0 to the engines).
* :mod:`~trinity.synchronizer.checkpoint_sync`: atomic safetensors on a shared path.
* :mod:`~trinity.synchronizer.memory_sync`: the Ray object store.
* :mod:`~trinity.synchronizer.synchronizer`: one sync, timed and bounded by ``sync_timeout``.
* :mod:`~trinity.synchronizer.policy`: which steps sync, how far the explorer may run ahead.
"""

from trinity.synchronizer.checkpoint_sync import CheckpointSyncError, load_weights, save_weights
from trinity.synchronizer.policy import SyncPolicy
from trinity.synchronizer.synchronizer import (
    SyncError,
    Synchronizer,
    SyncReport,
    SyncTimeoutError,
    default_sync_path,
)
from trinity.synchronizer.weight_sync import (
    WeightSyncError,
    WeightSyncGroup,
    find_free_port,
    plan_buckets,
    state_dict_metas,
)

__all__ = [
    "CheckpointSyncError",
    "SyncError",
    "SyncPolicy",
    "SyncReport",
    "SyncTimeoutError",
    "Synchronizer",
    "WeightSyncError",
    "WeightSyncGroup",
    "default_sync_path",
    "find_free_port",
    "load_weights",
    "plan_buckets",
    "save_weights",
    "state_dict_metas",
]
