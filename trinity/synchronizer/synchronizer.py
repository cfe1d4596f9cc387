"""The synchronizer: one call moves the trainer's current weights into every rollout engine.

Usage (the launcher)::

    sync = Synchronizer(layout.sync_method, trainer.workers, engines, plan.sync,
                        checkpoint_path=default_sync_path(plan))
    policy = sync.policy                      # SyncPolicy: which steps sync, how far the explorer may lead
    if policy.should_sync(step):
        report = sync.sync(version=step)      # SyncReport: seconds, bytes, ...
    sync.close()

The trainer side is the list of trainer rank handles (rank 0 first; an
:class:`~trinity.trainer.trainer.FSDPTrainer` is accepted too); engines are
rollout engines implementing :class:`~trinity.common.models.engine.InferenceEngine`.
Either may be Ray actor handles (methods called with ``.remote``) or plain
in-process objects (called in worker threads, so blocking rendezvous calls
still run concurrently).

Methods:

* ``collective`` (``online``): once, trainer rank 0 hosts a
  :class:`~trinity.weight_transport.group.WeightSyncGroup` that every engine
  joins concurrently, each with as many ranks as it has tensor-parallel
  workers (``weight_sync_ranks``: 1 for ``hf``, the TP size for ``vllm``).
  Per sync: all trainer ranks gather the full state dict (rank 0 keeps
  it), the engines are told the metas (``receive_weights``, started before
  the broadcast), rank 0 broadcasts in buckets, and the synchronizer waits
  for everyone. A one-rank trainer's plan (its metas) cannot change during a
  run: from the second sync on, the engines start receiving it while the rank
  reads and broadcasts its weights in one call (``send_weights``); weights
  that no longer match it fail that sync at once, with the first tensor that
  differs, and the next sync reads the plan again.
* ``checkpoint``: rank 0 writes safetensors to the shared sync path
  (atomically, see :mod:`~trinity.synchronizer.checkpoint_sync`), then each
  engine loads them (``load_checkpoint_weights``). With no engines it still
  writes: a trainer publishing for an explorer in another job (mode ``train``).
* ``memory``: rank 0 puts the dict into the Ray object store, each engine
  loads it (``load_state_dict``).
* ``shared`` (mode colocate on a host-memory device): the one trainer rank
  writes its live weights into a memory-mapped file
  (:mod:`~trinity.weight_transport.shared_file`) that the engine mapped at
  the first sync; one call per sync, nothing sent to the engine. In the
  serial loop the rank writes them at the end of the training step's own
  call instead (``train_step(publish=sync.publish_target(version))``, then
  :meth:`Synchronizer.note_published`): the sync then makes no call at all.

With LoRA on ``vllm`` engines (every engine's ``takes_adapters()`` is
true), every method sends the adapter alone: the trainer ranks gather it,
rank 0 puts it into the Ray object store, and each engine serves it from
its LoRA slot (``load_adapter``). No weight-sync group is built.

Every sync is bounded by ``synchronizer.sync_timeout``; running past it
raises :class:`SyncTimeoutError`, one line naming the method, version and
the phase that did not finish.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trinity.common.config.plan.run import RunPlan, SyncPlan
from trinity.common.constants import SyncMethod
from trinity.errors import TrinityError, actor_death
from trinity.synchronizer.policy import SyncPolicy
from trinity.weight_transport import TensorMeta, WeightSyncGroupInfo, metas_bytes

logger = logging.getLogger(__name__)

DEFAULT_GROUP_NAME = "trinity-weight-sync"
#: Seconds between the lines saying what a sync still waits for.
REPORT_EVERY_S = 30.0


class SyncError(TrinityError, RuntimeError):
    """A sync failed (exit status 1)."""


class SyncTimeoutError(SyncError, TimeoutError):
    """A sync did not finish within ``synchronizer.sync_timeout``."""


@dataclass(frozen=True)
class SyncReport:
    """What one sync did and what it cost."""

    method: str
    version: int
    #: Wall time of the whole sync.
    seconds: float
    #: Bytes of weights moved (once, whatever the number of engines).
    bytes: int
    #: Time spent gathering the full state dict on trainer rank 0.
    gather_seconds: float
    #: Time spent moving and loading the weights (after the gather).
    transfer_seconds: float
    #: Time spent building the weight-sync group (first online sync only; else 0).
    setup_seconds: float = 0.0
    engines: int = 0
    #: The trainer wrote the weights within its training step's call (the shared method in the serial loop).
    written_in_step: bool = False

    def metrics(self) -> dict[str, float]:
        """Return the report as monitor metrics (``sync/...``)."""
        return {
            "sync/seconds": self.seconds,
            "sync/bytes": float(self.bytes),
            "sync/gather_seconds": self.gather_seconds,
            "sync/transfer_seconds": self.transfer_seconds,
            "sync/setup_seconds": self.setup_seconds,
            "sync/version": float(self.version),
            "sync/written_in_step": float(self.written_in_step),
        }


#: The sync settings used when none are given: online, every step, ten minutes per sync.
DEFAULT_SYNC = SyncPlan(method="online", interval=1, offset=0, timeout=600.0, bucket_size_mb=64, verify_checksums=False)


def default_sync_path(plan: RunPlan) -> Path:
    """Return ``<run folder>/sync_weights``: the checkpoint method's shared path."""
    return plan.run_dir / "sync_weights"


def default_shared_path(plan: RunPlan) -> Path:
    """Return the shared method's file: in ``/dev/shm``, named after the run and its folder (one per run folder)."""
    import hashlib

    from trinity.weight_transport.shared_file import shared_file_path

    digest = hashlib.sha256(str(plan.run_dir).encode()).hexdigest()[:12]
    return shared_file_path(f"{plan.run_dir.name}-{digest}")


class _Calls:
    """Starts method calls on Ray actors (``.remote``) or in-process objects (a worker thread) and waits for them."""

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(2, threads), thread_name_prefix="trinity-sync")

    def start(self, target: Any, method: str, *args: Any) -> Any:
        function = getattr(target, method)
        remote = getattr(function, "remote", None)
        if remote is not None:
            return remote(*args)
        return self._pool.submit(function, *_resolve_refs(args))

    @staticmethod
    def wait(pending: Sequence[Any], deadline: float, what: str) -> list[Any]:
        """Return the results of every call in order; raise the first failure as soon as it happens.

        One participant failing (an engine whose process died) ends the wait at
        once, whatever the others still wait for (a rendezvous that would wait
        for it until the timeout). Raises SyncTimeoutError(``what``) past
        ``deadline``; says every :data:`REPORT_EVERY_S` seconds what it waits for.
        """
        results: list[Any] = [None] * len(pending)
        left = dict(enumerate(pending))
        begun = reported = time.monotonic()
        while left:
            now = time.monotonic()
            if now >= deadline:
                raise SyncTimeoutError(what)
            if now - reported >= REPORT_EVERY_S:
                reported = now
                logger.warning("weight sync: %s, %d of %d call(s) not answered after %.0f s", what, len(left),
                               len(pending), now - begun)
            refs = {index: item for index, item in left.items() if not isinstance(item, Future)}
            futures = {index: item for index, item in left.items() if isinstance(item, Future)}
            slice_s = max(0.0, min(deadline - now, 0.05 if futures else 1.0))
            if refs:
                import ray

                ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=slice_s)
                for index, ref in refs.items():
                    if ref in ready:
                        results[index] = ray.get(ref)  # a failed call raises here, at once
                        del left[index]
            elif futures:
                futures_wait(list(futures.values()), timeout=slice_s, return_when=FIRST_COMPLETED)
            for index, future in futures.items():
                if future.done():
                    results[index] = future.result()
                    del left[index]
        return results

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _answer(value: Any) -> Future[Any]:
    """A call already answered (an engine without the method)."""
    done: Future[Any] = Future()
    done.set_result(value)
    return done


def _resolve_refs(args: Sequence[Any]) -> list[Any]:
    """Ray resolves top-level ObjectRef arguments of remote calls; do the same for in-process calls."""
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency
        return list(args)
    return [ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in args]


class Synchronizer:
    """Moves weights from the trainer to the engines with one :class:`~trinity.common.constants.SyncMethod`."""

    def __init__(
        self,
        method: SyncMethod | str,
        trainer: Any,
        engines: Sequence[Any],
        config: SyncPlan | None = None,
        *,
        checkpoint_path: str | Path | None = None,
        group_name: str = DEFAULT_GROUP_NAME,
        shared_path: str | Path | None = None,
    ) -> None:
        self.method = method if isinstance(method, SyncMethod) else SyncMethod.parse(method)
        self.config = config or DEFAULT_SYNC
        ranks = getattr(trainer, "workers", trainer)
        self.trainer_ranks: list[Any] = list(ranks) if isinstance(ranks, (list, tuple)) else [ranks]
        if not self.trainer_ranks:
            raise ValueError("the synchronizer needs the trainer's rank handles (rank 0 first)")
        self.engines = list(engines)
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path is not None else None
        if self.method.kind == "checkpoint" and self.checkpoint_path is None:
            raise ValueError("the checkpoint sync method needs a shared checkpoint_path (see default_sync_path)")
        self.shared_path = Path(shared_path) if shared_path is not None else None
        if self.method.kind == "shared" and self.shared_path is None:
            raise ValueError("the shared sync method needs the shared file's path (see default_shared_path)")
        #: Engines (by index) that mapped the shared file.
        self._attached: set[int] = set()
        #: ``(version, (path, metas, bytes, seconds))`` the trainer wrote into the shared file within its step.
        self._published: tuple[int, tuple[str, list[TensorMeta], int, float]] | None = None
        self.group_name = group_name
        self.policy = SyncPolicy.from_config(self.config)
        self.bucket_bytes = int(self.config.bucket_size_mb) << 20
        self._calls = _Calls(len(self.trainer_ranks) + len(self.engines) + 1)
        self._group_ready = False
        #: The online group built last (None before the first, and once a failed sync gave it up).
        self._group_info: WeightSyncGroupInfo | None = None
        self._groups_built = 0
        #: The one-rank trainer's weight plan, read at the first sync: later syncs send without asking for it.
        self._metas: list[TensorMeta] | None = None
        self.last_report: SyncReport | None = None
        #: Whether every engine serves the policy's LoRA adapter from a slot (asked once; None: not yet).
        self._adapters: bool | None = None

    def publish_target(self, version: int) -> tuple[str, int] | None:
        """Return ``(path, version)`` for a one-rank trainer to write its weights into within its step (the
        shared method), or None when this method cannot take weights that way."""
        if self.method.kind != "shared" or self.shared_path is None or len(self.trainer_ranks) != 1:
            return None
        return str(self.shared_path), version

    def note_published(self, version: int, publication: tuple[str, list[TensorMeta], int, float]) -> None:
        """Record that the trainer wrote ``version`` into the shared file (``(path, metas, bytes, seconds)``):
        the sync of that version makes no call to the trainer."""
        self._published = (version, publication)

    def replace_engine(self, index: int, engine: Any) -> None:
        """Sync ``engine`` in place of engine ``index`` from the next sync on (a fresh engine replacing a dead one).

        An online group cannot take a new member: the next sync builds a new
        group of every engine. Raises IndexError for an index outside the engines.
        """
        self.engines[index] = engine
        self._group_ready = False
        self._attached.discard(index)
        self._adapters = None

    # -- the online group ------------------------------------------------------------------

    def setup(self) -> float:
        """Build the online weight-sync group now (else the first sync does); return the seconds it took.

        Raises :class:`SyncTimeoutError` past ``synchronizer.sync_timeout``.
        """
        started = time.monotonic()
        try:
            return self._setup(started)
        except SyncTimeoutError as exc:
            raise SyncTimeoutError(
                f"weight-sync group setup ({self.method}) did not finish within synchronizer.sync_timeout = "
                f"{self.config.timeout:g} s while {exc.args[0] if exc.args else '?'}"
            ) from None

    def _setup(self, started: float) -> float:
        """Build the online group (idempotent); timeouts raise SyncTimeoutError naming the phase."""
        if self.method.kind != "collective" or self._group_ready or not self.engines:
            return 0.0
        if self.takes_adapters(started + self.config.timeout):
            return 0.0
        assert self.method.collective is not None
        deadline = started + self.config.timeout
        rank0 = self.trainer_ranks[0]
        address, port = self._calls.wait(
            [self._calls.start(rank0, "node_address")], deadline, "asking trainer rank 0 for an address"
        )[0]
        ranks = self._calls.wait(
            [self._calls.start(e, "weight_sync_ranks") for e in self.engines],
            deadline,
            "asking the engines how many ranks they bring",
        )
        first_ranks = [1 + sum(int(r) for r in ranks[:i]) for i in range(len(ranks))]
        self._groups_built += 1
        info = WeightSyncGroupInfo(
            master_addr=str(address),
            master_port=int(port),
            world_size=1 + sum(int(r) for r in ranks),
            rank_offset=1,
            group_name=f"{self.group_name}-{self._groups_built}",
            backend=self.method.collective,
            timeout_s=float(self.config.timeout),
        )
        pending = [self._calls.start(rank0, "init_weight_sync", info)]
        pending += [
            self._calls.start(engine, "init_weight_sync", info, first)
            for engine, first in zip(self.engines, first_ranks, strict=True)
        ]
        self._calls.wait(
            pending, deadline, f"building the {self.method.collective} weight-sync group of {info.world_size} ranks"
        )
        self._group_ready = True
        self._group_info = info
        return time.monotonic() - started

    def _give_up(self) -> None:
        """After a failed sync: the next sync builds a new group, and the members still waiting in a collective
        of this one leave it (``weight_transport.group.give_up``), so no trainer rank or engine stays blocked in
        it until the group's timeout, unable to answer the next sync."""
        self._group_ready = False
        self._metas = None
        info, self._group_info = self._group_info, None
        if info is not None:
            from trinity.weight_transport.group import give_up

            give_up(info)

    # -- one sync --------------------------------------------------------------------------

    def sync(self, version: int) -> SyncReport:
        """Move the trainer's current weights into every engine as ``version``; return the report.

        Raises :class:`SyncTimeoutError` past ``synchronizer.sync_timeout`` and
        :class:`SyncError` (with the cause) when a participant fails.
        """
        started = time.monotonic()
        try:
            return self._sync(version, started)
        except SyncTimeoutError as exc:
            self._give_up()  # a collective stopped half-way: the next sync builds a new group
            raise SyncTimeoutError(
                f"weight sync ({self.method}) of version {version} did not finish within "
                f"synchronizer.sync_timeout = {self.config.timeout:g} s while {exc.args[0] if exc.args else '?'}; "
                "check that every engine is alive, or raise synchronizer.sync_timeout"
            ) from None
        except Exception as exc:
            self._give_up()
            if isinstance(exc, SyncError):
                raise
            raise SyncError(f"weight sync ({self.method}) of version {version} failed: {_cause(exc)}") from exc

    def _sync(self, version: int, started: float) -> SyncReport:
        if not self.engines and self.method.kind != "checkpoint":  # a checkpoint sync also publishes for later
            return SyncReport(
                method=str(self.method), version=version, seconds=0.0, bytes=0, gather_seconds=0.0, transfer_seconds=0.0
            )
        if self.takes_adapters(started + self.config.timeout):
            return self._sync_adapter(version, started)
        if self.method.kind == "shared":
            published, self._published = self._published, None
            if published is not None and published[0] == version:
                return self._sync_written_in_step(version, started, published[1])
            return self._report(self._sync_shared(version, started), version, started, started, 0.0)
        setup_seconds = self._setup(started) if self.method.kind == "collective" else 0.0
        deadline = started + self.config.timeout
        if self._metas is not None:
            return self._send_known_plan(self._metas, version, started, setup_seconds)
        gather_started = time.monotonic()
        # a broadcast from two or more ranks streams: each tensor is gathered from the shards as it is sent
        stream = self.method.kind == "collective" and len(self.trainer_ranks) > 1
        gathered = self._calls.wait(
            [self._calls.start(r, "gather_weights", *((True,) if stream else ())) for r in self.trainer_ranks],
            deadline,
            "gathering the full state dict on the trainer ranks",
        )
        metas: list[TensorMeta] = gathered[0]
        nbytes = metas_bytes(metas)
        transfer_started = time.monotonic()
        rank0 = self.trainer_ranks[0]
        if self.method.kind == "collective":
            if not stream and len(self.trainer_ranks) == 1:  # the plan cannot change: later syncs skip asking
                self._metas = list(metas)
            receiving = [
                self._calls.start(e, "receive_weights", metas, version, self.bucket_bytes) for e in self.engines
            ]
            senders = self.trainer_ranks if stream else [rank0]
            sending = [self._calls.start(r, "broadcast_weights", self.bucket_bytes) for r in senders]
            self._calls.wait([*sending, *receiving], deadline, "broadcasting the weights to the engines")
        elif self.method.kind == "checkpoint":
            assert self.checkpoint_path is not None
            folder = str(self.checkpoint_path)
            self._calls.wait(
                [self._calls.start(rank0, "save_sync_weights", folder, version)],
                deadline,
                f"writing the weights to {folder}",
            )
            if self.engines:
                self._calls.wait(
                    [self._calls.start(e, "load_checkpoint_weights", folder, version) for e in self.engines],
                    deadline,
                    f"engines loading the weights from {folder}",
                )
        else:
            ref = self._calls.wait(
                [self._calls.start(rank0, "put_sync_weights")],
                deadline,
                "putting the weights into the Ray object store",
            )[0][0]
            self._calls.wait(
                [self._calls.start(e, "load_state_dict", ref, version) for e in self.engines],
                deadline,
                "engines loading the weights from the Ray object store",
            )
        return self._report(nbytes, version, started, transfer_started, setup_seconds,
                            gather_seconds=transfer_started - gather_started)

    def takes_adapters(self, deadline: float | None = None) -> bool:
        """Whether syncs send the LoRA adapter alone: every engine serves it from a LoRA slot (asked once)."""
        if self._adapters is None:
            if not self.engines:
                return False
            answers = self._calls.wait(
                [self._calls.start(e, "takes_adapters") if hasattr(e, "takes_adapters") else _answer(False)
                 for e in self.engines],
                deadline if deadline is not None else time.monotonic() + self.config.timeout,
                "asking the engines whether they serve a LoRA adapter",
            )
            self._adapters = all(bool(a) for a in answers)
        return self._adapters

    def _sync_adapter(self, version: int, started: float) -> SyncReport:
        deadline = started + self.config.timeout
        gathered = self._calls.wait([self._calls.start(r, "adapter_for_sync") for r in self.trainer_ranks],
                                    deadline, "gathering the LoRA adapter on the trainer ranks")
        ref, nbytes = gathered[0]
        transfer_started = time.monotonic()
        self._calls.wait([self._calls.start(e, "load_adapter", ref, version) for e in self.engines], deadline,
                         "engines loading the LoRA adapter into their slots")
        return self._report(int(nbytes), version, started, transfer_started, 0.0,
                            gather_seconds=transfer_started - started)

    def _send_known_plan(self, metas: list[TensorMeta], version: int, started: float, setup_seconds: float
                         ) -> SyncReport:
        """One trainer rank, plan known: the engines start receiving while the rank reads and sends, one call each."""
        deadline = started + self.config.timeout
        transfer_started = time.monotonic()
        receiving = [self._calls.start(e, "receive_weights", metas, version, self.bucket_bytes) for e in self.engines]
        sending = self._calls.start(self.trainer_ranks[0], "send_weights", self.bucket_bytes, metas)
        self._calls.wait([sending, *receiving], deadline, "broadcasting the weights to the engines")
        return self._report(metas_bytes(metas), version, started, transfer_started, setup_seconds)

    def _sync_written_in_step(self, version: int, started: float,
                              publication: tuple[str, list[TensorMeta], int, float]) -> SyncReport:
        """The shared method, the trainer having written ``version`` within its step (``(path, metas, bytes,
        seconds)``): map the file where no engine has; the write's seconds count as the sync's, the step's call not."""
        path, metas, nbytes, seconds = publication
        self._attach(path, metas, started + self.config.timeout)
        return self._report(nbytes, version, started - seconds, started - seconds, 0.0, written_in_step=True)

    def _sync_shared(self, version: int, started: float) -> int:
        """Write the weights into the shared file; let engines that have not mapped it map it; return its bytes."""
        assert self.shared_path is not None
        deadline = started + self.config.timeout
        path = str(self.shared_path)
        path, metas, nbytes = self._calls.wait(
            [self._calls.start(self.trainer_ranks[0], "publish_shared_weights", path, version)],
            deadline,
            f"writing the weights into {path}",
        )[0]
        self._attach(path, metas, deadline)
        return int(nbytes)

    def _attach(self, path: str, metas: list[TensorMeta], deadline: float) -> None:
        """Let the engines that have not mapped the shared file ``path`` map it."""
        fresh = [index for index in range(len(self.engines)) if index not in self._attached]
        if fresh:
            self._calls.wait(
                [self._calls.start(self.engines[i], "attach_shared_weights", path, metas) for i in fresh],
                deadline,
                f"engines mapping {path}",
            )
            self._attached.update(fresh)

    def _report(self, nbytes: int, version: int, started: float, transfer_started: float, setup_seconds: float,
                *, gather_seconds: float = 0.0, written_in_step: bool = False) -> SyncReport:
        finished = time.monotonic()
        report = SyncReport(
            method=str(self.method),
            version=version,
            seconds=finished - started,
            bytes=nbytes,
            gather_seconds=gather_seconds,
            transfer_seconds=finished - transfer_started,
            setup_seconds=setup_seconds,
            engines=len(self.engines),
            written_in_step=written_in_step,
        )
        self.last_report = report
        logger.info(
            "synced version %d to %d engines by %s: %.2f s, %.1f MB",
            version,
            len(self.engines),
            self.method,
            report.seconds,
            nbytes / 1e6,
        )
        return report

    def close(self) -> None:
        """Release the trainer side of the online group (or the shared file) and the worker threads."""
        if self.method.kind == "shared":  # whether or not an engine mapped it: a published file is removed
            try:
                self._calls.wait([self._calls.start(self.trainer_ranks[0], "close_shared_weights")],
                                 time.monotonic() + 30, "removing the shared weights file")
            except Exception as exc:  # noqa: BLE001 - closing must not fail a run that is ending
                logger.debug("removing the shared weights file: %s", exc)
        if self._group_ready:
            try:
                self._calls.wait(
                    [self._calls.start(self.trainer_ranks[0], "close_weight_sync")],
                    time.monotonic() + 30,
                    "closing the weight-sync group",
                )
            except Exception as exc:  # noqa: BLE001 - closing must not fail a run that is ending
                logger.debug("closing the weight-sync group: %s", exc)
            self._group_ready = False
        self._calls.close()


def _cause(exc: BaseException) -> str:
    death = actor_death(exc)
    if death is not None:  # a trainer rank or engine killed mid-sync: name it, not Ray's paragraph
        return f"{death} (its process was killed, ran out of memory or crashed)"
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    return f"{type(exc).__name__}: {exc}"
