"""Connecting to Ray: the configured cluster, a running local one, or a fresh local one.

Addresses mean what they mean to Ray (and to upstream Trinity-RFT): an
address in the config (``cluster.ray_address``) is used as given; ``auto``
(the default) or none means ``RAY_ADDRESS`` when it is set (``ray job
submit`` sets it for its entrypoint), else a running local cluster, else a
fresh local one; ``local`` always starts a fresh local one. A bare
``ray.init()`` follows Ray's current-cluster record
(``<Ray temp dir>/ray_current_cluster``) even after that cluster died and
then fails; here a recorded cluster is used only when its GCS port answers.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trinity.errors import EXIT_USAGE, TrinityError


def current_cluster_file() -> Path:
    """Return where Ray records the local cluster a bare ``ray.init()`` joins (Ray's temp dir, as Ray finds it)."""
    base = os.environ.get("RAY_TMPDIR") or (os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None)
    return Path(base or "/tmp") / "ray" / "ray_current_cluster"


class RayConnectionError(TrinityError, RuntimeError):
    """Ray could not be reached or started; the message says what to do (exit status 2)."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class RayConnection:
    """How this process is connected to Ray."""

    #: The address connected to ("local" for a fresh local instance).
    address: str
    #: True when this process started the cluster (and should shut it down).
    started_here: bool
    #: True when this call initialised Ray in this process (False: it already was, leave it be).
    initialized_here: bool = True
    #: Where the address came from: ``cluster.ray_address``, ``RAY_ADDRESS``, ``default`` (auto) or ``existing``.
    origin: str = ""


def _answers(address: str, timeout_s: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def reachable(address: str, timeout_s: float = 1.0) -> bool:
    """Return True when something accepts a TCP connection at ``address`` (``host:port``) within ``timeout_s``."""
    return _answers(address, timeout_s)


#: What an HTTP/2 client sends first: the fixed preface, then an empty SETTINGS frame.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
#: Frame type of an HTTP/2 SETTINGS frame, the first frame every HTTP/2 (gRPC) server sends.
_H2_SETTINGS = 4


def _grpc_problem(address: str, service: str, timeout_s: float) -> str | None:
    """Return why ``address`` (``host:port``) does not answer like a gRPC server, naming ``service``, or None."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(_H2_PREFACE)
            header = b""
            while len(header) < 9:
                chunk = sock.recv(9 - len(header))
                if not chunk:
                    break
                header += chunk
    except ValueError:
        return "it is not a host:port address"
    except TimeoutError:
        return f"something listens there but did not answer as a {service} within {timeout_s:g} s"
    except OSError as exc:
        return f"nothing answers there ({exc.strerror or exc})"
    if len(header) == 9 and header[3] == _H2_SETTINGS:
        return None
    return f"something listens there but it is not a {service} (it does not speak Ray's gRPC protocol)"


def gcs_problem(address: str, timeout_s: float = 2.0) -> str | None:
    """Return why ``address`` (``host:port``) is not a Ray cluster's GCS, or None when it answers like one.

    Ray's GCS is a gRPC server, so it answers an HTTP/2 preface with a
    SETTINGS frame. Nothing listening, a listener that stays silent for
    ``timeout_s``, or one that answers anything else is a problem; the probe
    never waits longer than about ``timeout_s``.
    """
    return _grpc_problem(address, "Ray cluster", timeout_s)


#: The port of Ray's client server when a ``ray://`` address names none.
RAY_CLIENT_PORT = 10001


def client_address(address: str) -> str:
    """Return the ``host:port`` a ``ray://host[:port][/...]`` address connects to (port 10001 when none is given)."""
    rest = address[len("ray://") :].split("/", 1)[0]
    _, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return f"{rest}:{RAY_CLIENT_PORT}"
    return rest


def address_problem(address: str, timeout_s: float = 2.0) -> str | None:
    """Return why ``address`` (a GCS ``host:port`` or a ``ray://`` client address) is not Ray, or None.

    A ``ray://`` address is probed at its client server (see
    :func:`client_address`) the way :func:`gcs_problem` probes a GCS: Ray's
    client server is a gRPC server too.
    """
    if address.startswith("ray://"):
        return _grpc_problem(client_address(address), "Ray client server", timeout_s)
    return gcs_problem(address, timeout_s)


def running_local_cluster() -> str | None:
    """Return the GCS address of a live local cluster recorded by Ray, or None."""
    try:
        address = current_cluster_file().read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return address if address and _answers(address) else None


#: The environment variable Ray reads a cluster's address from.
RAY_ADDRESS_ENV = "RAY_ADDRESS"


def effective_address(configured: str = "", environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """Return ``(address, where it came from)`` for a configured ``cluster.ray_address``.

    A configured address other than ``auto`` wins (``cluster.ray_address``);
    otherwise ``RAY_ADDRESS`` when set (``RAY_ADDRESS``); otherwise ``auto``
    (``default``): a running local cluster, else a fresh one.
    """
    configured = (configured or "").strip()
    if configured and configured != "auto":
        return configured, "cluster.ray_address"
    env = os.environ if environ is None else environ
    from_env = env.get(RAY_ADDRESS_ENV, "").strip()
    if from_env:
        return from_env, RAY_ADDRESS_ENV
    return "auto", "default"


def check_address(address: str = "") -> None:
    """Raise :class:`RayConnectionError` when ``address`` (as :func:`effective_address` reads it) is not there.

    ``local`` and ``auto`` name no cluster and pass; a ``ray://`` client
    address is probed at its client server. The check takes about two
    seconds at most.
    """
    target, origin = effective_address(address)
    if target in ("local", "auto"):
        return
    problem = address_problem(target)
    if problem is not None:
        raise RayConnectionError(
            f"no Ray cluster answers at {target!r} (from {origin}): {problem}; check {origin} "
            "(`ray status` on the head node prints the address), or set it to local to start a cluster here"
        )


def connect(
    address: str = "",
    num_cpus: int | None = None,
    local_resources: Callable[[], Mapping[str, float]] | None = None,
    **init_kwargs: Any,
) -> RayConnection:
    """Connect to Ray at the address :func:`effective_address` makes of ``address`` (see the module docstring).

    ``local_resources()`` (asked only when a local cluster is started here)
    returns custom resources the new node offers beside the ones Ray detects.
    Raises :class:`RayConnectionError` when a given address cannot be reached.
    """
    import ray

    if ray.is_initialized():
        return RayConnection(address="existing", started_here=False, initialized_here=False, origin="existing")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    target, origin = effective_address(address)
    kwargs = {"include_dashboard": False, "logging_level": "WARNING", "log_to_driver": True, **init_kwargs}
    if target not in ("local", "auto"):
        check_address(target)
        try:
            ray.init(address=target, **kwargs)
        except Exception as exc:  # noqa: BLE001 - Ray raises many types here
            raise RayConnectionError(
                f"cannot connect to the Ray cluster at {target!r} (from {origin}; {type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); check {origin} and that `ray status` "
                "works there, or set it to local to start a cluster here"
            ) from None
        return RayConnection(address=target, started_here=False, origin=origin)
    live = running_local_cluster() if target != "local" else None
    if live:
        ray.init(address=live, **kwargs)
        return RayConnection(address=live, started_here=False, origin=origin)
    resources = dict(local_resources()) if local_resources is not None else {}
    try:
        ray.init(address="local", num_cpus=num_cpus, resources=resources or None, **kwargs)
    except OSError as exc:
        if "AF_UNIX path length" not in str(exc):
            raise
        folder = current_cluster_file().parent.parent
        raise RayConnectionError(
            f"cannot start a local Ray cluster: its socket paths under the Ray temp folder ({folder}) would be "
            "longer than the 107 bytes a Unix socket allows; point RAY_TMPDIR at a shorter folder "
            "(e.g. RAY_TMPDIR=/tmp/ray-mine)"
        ) from None
    from trinity.common import ray_reaper

    ray_reaper.start(ray_reaper.node_process_ids())  # a killed driver takes its cluster's processes with it
    return RayConnection(address="local", started_here=True, origin=origin)


def describe_connection(connection: RayConnection) -> str:
    """Return what a connection is, for the log: ``cluster at 10.0.0.5:6379 (from RAY_ADDRESS)``."""
    if connection.started_here:
        return "a fresh local cluster" + (f" (from {connection.origin})" if connection.origin != "default" else "")
    if connection.origin == "existing":
        return "the cluster this process was already connected to"
    source = "a running local cluster" if connection.origin == "default" else f"from {connection.origin}"
    return f"cluster at {connection.address} ({source})"


def disconnect(connection: RayConnection) -> None:
    """Disconnect this process from Ray (stopping the cluster when it was started here); no-op if Ray was already up."""
    import ray

    if connection.initialized_here and ray.is_initialized():
        ray.shutdown()
    if connection.started_here:
        from trinity.common import ray_reaper

        ray_reaper.stop()
