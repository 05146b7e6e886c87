"""Errors that say what happened: each way of not reaching a coordinator (or ZooKeeper) has its own
one line, and none waits for the call's timeout. Real sockets on loopback: a closed port, a plaintext
gRPC server asked over TLS, a listener that never speaks."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.admin import AdminClient, CoordinatorUnreachableError
from groupcoord.channels import ClientSecurity
from groupcoord.cli import main
from groupcoord.coordinator.rpc.server import ServerThread
from tests.chaos.proxy import FaultProxy
from tests.security_pki import Pki

CALL_TIMEOUT_S = 30.0  # what a command would wait if the connect were not bounded (1 s)


@pytest.fixture
def silent() -> Iterator[str]:
    """A port that takes connections (the kernel's backlog) and never answers a byte."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def _closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def _failure(address: str, security: ClientSecurity | None = None,
             timeout_s: float = CALL_TIMEOUT_S) -> tuple[str, float]:
    started = time.monotonic()
    with AdminClient(address, timeout_s=timeout_s, security=security, retry_unreachable=False) as admin, \
            pytest.raises(CoordinatorUnreachableError) as failure:
        admin.describe_group("shop")
    return str(failure.value), time.monotonic() - started


def test_a_refused_address_says_so_without_waiting_for_the_call_timeout(silent: str) -> None:
    closed = _closed_port()
    said, took = _failure(closed)
    assert said == f"no coordinator reached: {closed} (connection refused)" and took < CALL_TIMEOUT_S / 2


def test_a_port_that_takes_connections_and_never_speaks_is_timed_out_by_the_calls_timeout(silent: str) -> None:
    """Told apart from a slow coordinator only by waiting: the call's own timeout (the CLI's 5 s) bounds it."""
    said, took = _failure(silent, timeout_s=2.0)
    assert said == f"no coordinator reached: {silent} (timed out)"
    assert took < CALL_TIMEOUT_S / 2


def test_a_name_that_does_not_resolve_and_a_failed_tls_handshake(tmp_path: Path) -> None:
    said, _ = _failure("no-such-host.invalid:9400")
    assert said == "no coordinator reached: no-such-host.invalid:9400 (name not resolved)"
    pki = Pki(tmp_path)
    with ServerThread() as plaintext:  # a coordinator without TLS, asked over TLS
        address = plaintext.address
        said, took = _failure(address, ClientSecurity(tls_ca=str(pki.ca_file)))
    assert said.startswith(f"no coordinator reached: {address} (TLS handshake failed"), said
    assert took < CALL_TIMEOUT_S / 2


def test_every_bootstrap_address_is_named_with_its_own_reason(silent: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The command line's own settings: refused at once, the silent port after the call's 5 s."""
    closed = _closed_port()
    status = main(["cluster", "describe", "--coordinator", f"{closed},{silent}"])
    err = capsys.readouterr().err
    assert status == 1 and len(err.strip().splitlines()) == 1, err
    assert f"{closed} (connection refused)" in err and f"{silent} (timed out" in err


def test_serve_without_its_zookeeper_says_refused_in_one_line(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    zk = _closed_port()
    status = main(["serve", "--store", "zookeeper", "--zk", zk, "--listen", "127.0.0.1:0", "--data-dir",
                   str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert status == 2
    assert err.strip().splitlines()[-1] == f"groupcoord serve: cannot reach ZooKeeper: {zk} (connection refused)"
    assert "kazoo" not in err and "Traceback" not in err


def test_a_coordinator_slow_to_answer_is_waited_for_not_called_unreachable() -> None:
    """Every byte 0.4 s late (a starved coordinator): the 0.2 s probe times out, but the port takes
    connections, so the call waits for the connection with its own timeout and is answered."""
    with ServerThread() as server, FaultProxy(server.port) as proxy:
        proxy.delay(0.4)
        with AdminClient(proxy.address, timeout_s=CALL_TIMEOUT_S, connect_timeout_s=0.2,
                         retry_unreachable=False) as admin:
            assert admin.put_tasks("slow", ["t0"]) == 1
            assert admin.describe_group("slow").group_id == "slow"
