"""Test double of ``torch_npu._C._distributed_c10d``: the ``ProcessGroupHCCL`` class, not the real one.

Modelled on the class torch_npu registers as torch's ``hccl`` backend: built
as ``ProcessGroupHCCL(store, rank, size, options)`` with a
``ProcessGroupHCCL.Options`` (``is_high_priority_stream``, ``_timeout``,
``global_ranks_in_group``, ``group_id``, ``hccl_config``); anything else is a
``TypeError``, as pybind11 raises it. Like HCCL, construction does not contact
the other members: the communicator is created on the first collective, and
that is the rendezvous. The double runs its collectives through a real
``ProcessGroupGloo`` on the same store, so ranks really exchange data; unlike
HCCL it moves **CPU** tensors (the double has no NPU tensors).
"""

import datetime

#: torch_npu's default timeout of an HCCL group (torch's default process-group timeout).
DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)


class _Options:
    """Double of ``ProcessGroupHCCL.Options``."""

    def __init__(self, is_high_priority_stream=False):
        self.is_high_priority_stream = is_high_priority_stream
        self._timeout = DEFAULT_TIMEOUT
        self.global_ranks_in_group = []
        self.group_id = ""
        self.hccl_config = {}
        self.backend = "hccl"


class ProcessGroupHCCL:
    """Double of ``torch_npu._C._distributed_c10d.ProcessGroupHCCL``."""

    Options = _Options
    #: Every group constructed in this process, in order (double-only).
    created = []

    def __init__(self, store, rank, size, options=None):
        options = _Options() if options is None else options
        if not isinstance(options, _Options):
            raise TypeError(
                "__init__(): incompatible constructor arguments; expected options of type "
                f"torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options, got {type(options).__name__}"
            )
        if not isinstance(options._timeout, datetime.timedelta):
            raise TypeError(f"options._timeout must be a datetime.timedelta, got {options._timeout!r}")
        self._store = store
        self._rank = int(rank)
        self._size = int(size)
        self.options = options
        self.shut_down = False
        self._gloo = None
        ProcessGroupHCCL.created.append(self)

    def rank(self):
        """This member's rank."""
        return self._rank

    def size(self):
        """The group's size."""
        return self._size

    def _connected(self):
        if self.shut_down:
            raise RuntimeError("ProcessGroupHCCL is shut down")
        if self._gloo is None:
            from torch.distributed import PrefixStore, ProcessGroupGloo

            self._gloo = ProcessGroupGloo(
                PrefixStore("hccl-double", self._store), self._rank, self._size, self.options._timeout
            )
        return self._gloo

    def broadcast(self, tensor, root, timeout=None):
        """Broadcast ``tensor`` in place from ``root``; returns the work handle (``wait()``)."""
        return self._connected().broadcast(tensor, root)

    def shutdown(self):
        """Release the communicator."""
        self.shut_down = True
        if self._gloo is not None:
            self._gloo.shutdown()
            self._gloo = None
