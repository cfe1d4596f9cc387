"""Moving the trainer's weights into the rollout engines: online (collective), checkpoint, memory.

The online broadcast itself is :mod:`trinity.weight_transport`; this package decides when and how to sync.

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

__all__ = [
    "CheckpointSyncError",
    "SyncError",
    "SyncPolicy",
    "SyncReport",
    "SyncTimeoutError",
    "Synchronizer",
    "default_sync_path",
    "load_weights",
    "save_weights",
]
