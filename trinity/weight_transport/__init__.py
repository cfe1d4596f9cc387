"""The weight-sync transport: how trainer rank 0 broadcasts weights to the rollout engines.

Both the engines (receivers) and the synchronizer and trainer (sender side)
import this package; it imports neither of them.

* :mod:`~trinity.weight_transport.protocol`: the messages (:class:`TensorMeta`,
  :class:`WeightSyncGroupInfo`) and :class:`WeightSyncError`.
* :mod:`~trinity.weight_transport.buckets`: the bucket plan both sides derive from the metas.
* :mod:`~trinity.weight_transport.group`: :class:`WeightSyncGroup`, the process group and its broadcasts.
* :mod:`~trinity.weight_transport.addresses`: where the group's store listens.
"""

from trinity.weight_transport.addresses import find_free_port, node_ip_address
from trinity.weight_transport.buckets import (
    DEFAULT_BUCKET_BYTES,
    metas_bytes,
    plan_buckets,
    state_dict_bytes,
    state_dict_metas,
)
from trinity.weight_transport.group import WeightSyncGroup
from trinity.weight_transport.protocol import TensorMeta, WeightSyncError, WeightSyncGroupInfo

__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "TensorMeta",
    "WeightSyncError",
    "WeightSyncGroup",
    "WeightSyncGroupInfo",
    "find_free_port",
    "metas_bytes",
    "node_ip_address",
    "plan_buckets",
    "state_dict_bytes",
    "state_dict_metas",
]
