"""The Ray cluster as ``trinity backends`` shows it: what each node offers, read once and let go.

Only an address given on the command line (``--address``) or in
``RAY_ADDRESS`` connects, with the conventions ``trinity run`` follows:
``auto`` means the running local cluster Ray recorded, ``local`` a fresh
instance that ``trinity run`` would start. Neither starts anything here: when
there is no cluster to read, the view says why and the local probe decides.
Connecting as a driver leaves Ray's current-cluster record as it was; the
connection is closed before the command prints.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from trinity.cli.errors import EXIT_USAGE, CLIError

#: The environment variable Ray (and ``trinity run``) read the cluster address from.
RAY_ADDRESS_ENV = "RAY_ADDRESS"
#: Seconds to wait for a cluster's port to answer before saying it does not.
REACH_TIMEOUT_S = 2.0
#: Ray resources that are not something a device backend could be scheduled by.
_NOT_OFFERS = ("memory", "object_store_memory")


class NodeCount(TypedDict):
    """``count`` of a resource on each of ``nodes`` nodes."""

    #: Amount of the resource one node offers.
    count: float
    #: How many alive nodes offer exactly that amount.
    nodes: int


@dataclass(frozen=True)
class ClusterView:
    """What was read of the Ray cluster named on the command line or in ``RAY_ADDRESS``."""

    #: The address as given (``host:port``, ``auto``, ``local``, ``ray://...``).
    requested: str
    #: Where it was given: ``--address`` or ``RAY_ADDRESS``.
    origin: str
    #: The address connected to; None when nothing was connected (``local``, or ``auto`` with no cluster).
    address: str | None = None
    #: ``ray.cluster_resources()`` of the connected cluster; empty when not connected.
    resources: dict[str, float] = field(default_factory=dict)
    #: Resources of each alive node.
    nodes: list[dict[str, float]] = field(default_factory=list)
    #: Why no cluster was read, when none was; None otherwise.
    note: str | None = None

    @property
    def connected(self) -> bool:
        """True when a cluster was read (its resources decide the selection)."""
        return self.address is not None

    def offer(self, key: str) -> list[NodeCount]:
        """Return how much of ``key`` the nodes offer, grouped by amount (largest first); [] when none does."""
        counts = Counter(float(node[key]) for node in self.nodes if float(node.get(key, 0)) > 0)
        return [{"count": count, "nodes": nodes} for count, nodes in sorted(counts.items(), reverse=True)]

    def offers(self) -> dict[str, list[NodeCount]]:
        """Return the offer of every schedulable resource (``CPU``, ``GPU``, ``NPU``, custom keys), by key."""
        keys = sorted({key for node in self.nodes for key in node if _schedulable(key)})
        return {key: self.offer(key) for key in keys}


def _schedulable(key: str) -> bool:
    """Ray lists per-node labels (``node:<ip>``, ``accelerator_type:<name>``) and memory among resources."""
    return ":" not in key and key not in _NOT_OFFERS


def describe_offer(offer: Sequence[NodeCount]) -> str:
    """Return ``"8 on 2 nodes, 4 on 1 node"``, or ``"none"`` for an empty offer."""
    if not offer:
        return "none"
    return ", ".join(
        f"{group['count']:g} on {group['nodes']} node{'s' if group['nodes'] != 1 else ''}" for group in offer
    )


def requested_address(address: str | None, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """Return ``(address, origin)`` from ``--address`` or else ``RAY_ADDRESS``; None when neither is set."""
    if address is not None and address.strip():
        return address.strip(), "--address"
    env = os.environ if environ is None else environ
    from_env = env.get(RAY_ADDRESS_ENV, "").strip()
    return (from_env, RAY_ADDRESS_ENV) if from_env else None


def read_cluster(address: str | None, environ: Mapping[str, str] | None = None) -> ClusterView | None:
    """Connect to the cluster ``address`` (or ``RAY_ADDRESS``) names, read its resources, disconnect.

    Returns None when no address is given (Ray is then not imported). Raises
    :class:`CLIError` (exit 2) in one line when nothing answers at the address
    or Ray refuses the connection.
    """
    requested = requested_address(address, environ)
    if requested is None:
        return None
    target, origin = requested
    from trinity.common import ray_connect

    if target == "local":
        return ClusterView(
            target,
            origin,
            note=(
                f"{origin}=local: `trinity run` starts a fresh Ray instance on this machine, so the local probe decides"
            ),
        )
    if target == "auto":
        live = ray_connect.running_local_cluster()
        if live is None:
            return ClusterView(
                target,
                origin,
                note=(
                    f"{origin}=auto: no running local Ray cluster (none recorded, or it does not answer); "
                    "`trinity run` would start one here, so the local probe decides"
                ),
            )
        target = live
    problem = ray_connect.address_problem(target, REACH_TIMEOUT_S)
    if problem is not None:
        raise CLIError(
            f"no Ray cluster answers at {target!r} (from {origin}): {problem}; check the host:port (`ray status` "
            f"on the head node prints it), or leave out {origin} to see this machine alone",
            EXIT_USAGE,
        )
    return _read(target, origin, requested[0])


def _read(target: str, origin: str, requested: str) -> ClusterView:
    import ray

    from trinity.common import ray_connect

    try:
        connection = ray_connect.connect(address=target, log_to_driver=False)
    except ray_connect.RayConnectionError as exc:
        raise CLIError(f"{exc} (from {origin})", EXIT_USAGE) from None
    try:
        resources = {str(k): float(v) for k, v in ray.cluster_resources().items()}  # type: ignore[no-untyped-call]
        nodes = [
            {str(k): float(v) for k, v in node.get("Resources", {}).items()}
            for node in ray.nodes()  # type: ignore[no-untyped-call]
            if node.get("Alive")
        ]
    finally:
        ray_connect.disconnect(connection)
    return ClusterView(requested, origin, address=target, resources=resources, nodes=nodes)
