"""Where the weight-sync group's store listens: this machine's reachable address and a free port."""

from __future__ import annotations

import socket
from contextlib import closing


def find_free_port(host: str = "") -> int:
    """Return a TCP port that is free on this machine right now (bind to port 0, read it back)."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def node_ip_address() -> str:
    """Return an address of this machine the other group members can reach (Ray's node address when connected)."""
    try:
        import ray

        if ray.is_initialized():
            return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - fall back to the socket route below
        pass
    try:
        with closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as sock:
            sock.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
            return str(sock.getsockname()[0])
    except OSError:
        return "127.0.0.1"
