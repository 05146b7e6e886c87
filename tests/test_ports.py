"""The tests' ports: a child that binds port 0 is read from its startup line (tests/listening.py); a ZooKeeper
whose picked port was taken before its JVM bound it starts again on another (tests/zookeeper_server.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from kazoo.client import KazooClient

from tests.listening import METRICS_LINE, SERVE_LINE, announced
from tests.zookeeper_server import ZooKeeperServer, free_port


def _child(tmp_path: Path, code: str) -> tuple[subprocess.Popen[str], Path]:
    log = tmp_path / "child.log"
    with log.open("w") as sink:
        return subprocess.Popen([sys.executable, "-c", code], stderr=sink, text=True), log


def test_the_address_is_read_from_the_line_the_child_prints_once_bound(tmp_path: Path) -> None:
    proc, log = _child(tmp_path, "import sys, time\n"
                                 "print('groupcoord serve: WARNING: listening on 127.0.0.1:0 without TLS', file=sys.stderr)\n"
                                 "print('groupcoord metrics on http://127.0.0.1:4321/metrics', file=sys.stderr)\n"
                                 "print('groupcoord coordinator listening on 127.0.0.1:1234 (store sqlite)', file=sys.stderr)\n"
                                 "sys.stderr.flush(); time.sleep(60)")
    try:
        assert announced(log, proc, SERVE_LINE) == "127.0.0.1:1234"  # not the warning's unbound 0
        assert announced(log, proc, METRICS_LINE) == "127.0.0.1:4321"
    finally:
        proc.kill()
        proc.wait()


def test_a_child_that_exits_before_listening_fails_at_once_with_its_log(tmp_path: Path) -> None:
    proc, log = _child(tmp_path, "import sys; print('groupcoord serve: cannot bind', file=sys.stderr); sys.exit(2)")
    with pytest.raises(AssertionError, match=r"exited \(2\) before listening(.|\n)*cannot bind"):
        announced(log, proc, seconds=600)


def test_serve_on_port_0_names_the_port_it_bound(tmp_path: Path, cli_env: dict[str, str]) -> None:
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "groupcoord.cli", "serve", "--listen", "127.0.0.1:0",
                                 "--store", "memory", "--metrics-listen", "127.0.0.1:0"],
                                stdout=subprocess.DEVNULL, stderr=sink, text=True, env=cli_env)
    try:
        for line in (SERVE_LINE, METRICS_LINE):
            host, _, port = announced(log, proc, line).rpartition(":")
            assert host == "127.0.0.1" and int(port) > 0
            socket.create_connection((host, int(port)), timeout=10).close()  # it is bound and listening
    finally:
        proc.terminate()
        proc.wait(30)


@contextmanager
def _impostor(port: int) -> Iterator[None]:
    """Another process's server on ``port`` that even answers ``srvr`` as a ZooKeeper would."""
    server = socket.create_server(("127.0.0.1", port))
    server.settimeout(0.2)
    stop = threading.Event()

    def answer() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"Zookeeper version: an impostor\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        server.close()


@pytest.mark.zookeeper
def test_a_zookeeper_whose_port_was_taken_starts_on_another_and_a_restart_keeps_its_own() -> None:
    zk = ZooKeeperServer()
    taken = zk.port
    try:
        with _impostor(taken):
            zk.start()
            assert zk.port != taken
        client = KazooClient(hosts=zk.hosts, timeout=10)
        client.start(30)
        try:
            client.create("/here", b"ours")
            assert client.get("/here")[0] == b"ours"  # the server reached is this one
        finally:
            client.stop()
            client.close()
        zk.stop()
        with _impostor(zk.port), pytest.raises(RuntimeError, match=f"could not bind 127.0.0.1:{zk.port}"):
            zk.start()  # its clients know this port: no silent move
    finally:
        zk.close()


def test_a_free_port_is_kept_in_time_wait_and_a_server_that_reuses_addresses_binds_it() -> None:
    port = free_port()
    held = [c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port]
    assert [c.status for c in held] == [psutil.CONN_TIME_WAIT]  # what keeps bind(0) and connect() off it
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # without SO_REUSEADDR: taken
    with socket.create_server(("127.0.0.1", port)) as server:  # create_server sets SO_REUSEADDR, as gRPC does
        assert server.getsockname()[1] == port
