"""Named constants whose value may depend on the selected device backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SyncKind = Literal["collective", "checkpoint", "memory", "shared"]

#: Words accepted for ``synchronizer.sync_method`` besides a collective's own name.
SYNC_METHOD_WORDS = ("online", "offline", "checkpoint", "memory")


class SyncMethodError(ValueError):
    """``synchronizer.sync_method`` names something that cannot work with the selected backend."""


@dataclass(frozen=True)
class SyncMethod:
    """How new weights reach the rollout engines.

    ``online`` is a collective broadcast on the selected backend's collective
    (``nccl`` on CUDA, ``hccl`` on Ascend, ``gloo`` on CPU); ``offline`` and
    ``checkpoint`` write safetensors to a shared path; ``memory`` goes
    through the Ray object store. ``shared`` is no config word: mode colocate
    on a host-memory device hands weights over through a file both processes
    map (the layout chooses it). Parsing ``online`` asks the device façade,
    so no device name is written here.
    """

    #: What moves the weights.
    kind: SyncKind
    #: The torch.distributed backend when ``kind == "collective"``.
    collective: str | None = None

    @classmethod
    def parse(cls, value: str, collective: str | None = None) -> SyncMethod:
        """Return the method named by ``value``; ``collective`` defaults to the selected backend's.

        A collective's own name (the CUDA backend's, say) is accepted only when it is the
        selected backend's collective: asking NCCL on an Ascend cluster is an
        error, not a silent switch. Raises :class:`SyncMethodError`.
        """
        word = value.strip().lower()
        if word in ("offline", "checkpoint"):
            return cls("checkpoint")
        if word == "memory":
            return cls("memory")
        if collective is None:
            from trinity.device import get_collective_backend

            collective = get_collective_backend()
        if word in ("online", collective):
            return cls("collective", collective)
        raise SyncMethodError(
            f"sync_method {value!r} does not work with the selected device backend, whose collective is "
            f"{collective!r}; use one of: online (= {collective}), offline (= checkpoint), checkpoint, memory"
        )

    @classmethod
    def default(cls) -> SyncMethod:
        """The default method: a collective broadcast on the selected backend."""
        return cls.parse("online")

    def __str__(self) -> str:
        return self.collective if self.kind == "collective" and self.collective else self.kind
