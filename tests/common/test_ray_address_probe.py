"""The address probe: a ``ray://`` client address is checked like a GCS address, in about two seconds at most."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent import futures

import pytest

from tests.listeners import http_listener
from trinity.common.ray_connect import RayConnectionError, address_problem, check_address, client_address


@pytest.fixture
def grpc_server() -> Iterator[str]:
    """Yield ``host:port`` of a real gRPC server (grpcio, which Ray's client server is built on)."""
    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


@pytest.fixture
def web_server() -> Iterator[str]:
    """Yield ``host:port`` of a listener that answers like an HTTP/1 web server."""
    with http_listener() as address:
        yield address


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_client_addresses_default_to_the_client_server_port() -> None:
    assert client_address("ray://head:20001") == "head:20001"
    assert client_address("ray://head") == "head:10001"
    assert client_address("ray://head:20001/namespace") == "head:20001"


def test_a_ray_client_address_where_a_grpc_server_answers_passes(grpc_server: str) -> None:
    assert address_problem(f"ray://{grpc_server}") is None
    check_address(f"ray://{grpc_server}")


def test_a_ray_client_address_where_nothing_listens_is_one_line_at_once() -> None:
    address = f"ray://127.0.0.1:{_closed_port()}"
    begin = time.monotonic()
    with pytest.raises(RayConnectionError) as caught:
        check_address(address)
    assert time.monotonic() - begin < 3
    assert caught.value.exit_code == 2
    expected = f"no Ray cluster answers at {address!r} (from cluster.ray_address): nothing answers there"
    assert expected in str(caught.value)


def test_a_ray_client_address_where_a_web_server_answers_is_refused(web_server: str) -> None:
    with pytest.raises(RayConnectionError, match="it is not a Ray client server"):
        check_address(f"ray://{web_server}")


def test_a_ray_temp_folder_too_long_for_unix_sockets_is_one_line(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import ray

    from trinity.common.ray_connect import RayConnectionError, connect

    long_folder = tmp_path / ("x" * 60)
    long_folder.mkdir()
    monkeypatch.setenv("RAY_TMPDIR", str(long_folder))
    monkeypatch.setenv("RAY_ADDRESS", "local")
    with pytest.raises(RayConnectionError) as caught:
        connect("auto", num_cpus=1)
    assert not ray.is_initialized()
    assert "longer than the 107 bytes a Unix socket allows; point RAY_TMPDIR at a shorter folder" in str(caught.value)
    assert caught.value.exit_code == 2
