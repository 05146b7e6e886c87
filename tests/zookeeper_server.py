"""A real, throw-away ZooKeeper server for tests (Debian's ``zookeeper`` package, standalone mode).

    with ZooKeeperServer() as zk:          # free loopback port, temp data dir
        client = KazooClient(zk.hosts)     # "127.0.0.1:<port>"
        zk.restart()                       # same port, same data: sessions survive if quick enough

``require_zookeeper()`` (called by the constructor) skips the test when the package is missing,
unless ``CI=true``: then the missing package is a failure, so CI can never pass by skipping.
The server runs with ``tickTime=500`` so sessions as short as 1 s are allowed (tests use 2-4 s).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

import psutil
import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

__all__ = ["ZooKeeperServer", "expire_session", "free_port", "require_zookeeper", "wait_until", "zookeeper_classpath"]

ZOOKEEPER_JAR = Path(os.environ.get("ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
_LOGGING_JARS = ("/usr/share/java/slf4j-simple.jar",)  # optional: server log to stderr, else NOP logger
_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
BIND_ATTEMPTS = 5  # first starts on a new port after a BindException (the free port was taken meanwhile)


def zookeeper_classpath() -> str | None:
    """The classpath of Debian's ZooKeeper (its jar's manifest names the dependencies), or None."""
    if not ZOOKEEPER_JAR.is_file():
        return None
    return os.pathsep.join([str(ZOOKEEPER_JAR), *(j for j in _LOGGING_JARS if Path(j).is_file())])


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").is_file():
        return str(Path(home, "bin", "java"))
    return shutil.which("java")


def require_zookeeper() -> tuple[str, str]:
    """(java, classpath), or skip the test (fail it when CI=true) with how to install them."""
    java, classpath = _java(), zookeeper_classpath()
    if java and classpath:
        return java, classpath
    missing = "java" if not java else f"{ZOOKEEPER_JAR}"
    message = f"ZooKeeper tests need {missing}: apt-get install -y zookeeper (Debian's package, brings a JRE)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def free_port() -> int:
    """A loopback port free now and kept from others for about a minute, for a child to bind.

    Where a child can bind port 0 and say which port it bound, prefer that (tests/listening.py). Where the
    port must be known before the child starts (a JVM's config, an address handed to clients first), a
    port merely released would be free to anything on the machine until the child binds it. So the port
    is left in TIME_WAIT: one connection to it is accepted and closed from the listening side first, and
    Linux keeps the closed socket on the port for 60 s. Meanwhile neither another bind to port 0 nor an
    outgoing connection is given that port, while a server that binds it with SO_REUSEADDR (gRPC, Java's
    ServerSocketChannel, Python's socketserver and asyncio, Netty and Jetty all set it) binds it at once.
    """
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = int(listener.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            accepted.close()  # this side closes first: the TIME_WAIT is on the port itself
            client.recv(1)  # the close reached the client before it closes in turn
        return port


def _four_letter(port: int, word: bytes, timeout: float = 1.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
        return b"".join(chunks)


class ZooKeeperServer:
    """One standalone ZooKeeper process on 127.0.0.1; ``stop()``/``start()``/``restart()`` keep port and data."""

    def __init__(
        self,
        *,
        tick_ms: int = 500,
        start_timeout: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._java, self._classpath = require_zookeeper()
        self.port = free_port()
        self.host = "127.0.0.1"
        self._tmp = Path(tempfile.mkdtemp(prefix="groupcoord-zk-"))
        self._start_timeout = start_timeout
        self._monotonic = monotonic
        self._proc: subprocess.Popen[bytes] | None = None
        self._tick_ms = tick_ms
        self._served = False  # once a start succeeded, clients know the port: it is kept
        (self._tmp / "data").mkdir()
        self.config = self._tmp / "zoo.cfg"
        self._write_config()
        self.log_path = self._tmp / "zookeeper.log"

    def _write_config(self) -> None:
        self.config.write_text(
            f"tickTime={self._tick_ms}\n"
            f"minSessionTimeout={2 * self._tick_ms}\n"
            f"dataDir={self._tmp / 'data'}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,cons\n"
        )

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (benchmarks read its CPU)."""
        return None if self._proc is None else self._proc.pid

    @property
    def hosts(self) -> str:
        """The connection string for kazoo (``host:port``)."""
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        """Start the server and wait until it answers ``srvr`` on its port.

        The port is picked free in ``__init__`` and bound by the JVM a second or more later: anything on the
        machine may take it meanwhile. ZooKeeper then exits on a BindException, and a first start tries again
        on a new port (up to ``BIND_ATTEMPTS`` times). A later start (``restart()``) keeps the port its
        clients know, and fails."""
        for attempt in range(1, BIND_ATTEMPTS + 1):
            if self._start_once():
                self._served = True
                return
            if self._served or attempt == BIND_ATTEMPTS:
                raise RuntimeError(f"ZooKeeper could not bind {self.hosts} (taken by another process); see {self.log_path}")
            self.port = free_port()
            self._write_config()

    def _start_once(self) -> bool:
        """True once the server answers as itself; False if it exited because its port was taken."""
        if self._proc is not None:
            raise RuntimeError("ZooKeeper is already running")
        logged = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [self._java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dzookeeper.jmx.log4j.disable=true", "-cp", self._classpath, _MAIN,
                 str(self.config)],
                stdout=log, stderr=subprocess.STDOUT, cwd=self._tmp, start_new_session=True,
            )
        deadline = self._monotonic() + self._start_timeout
        while self._monotonic() < deadline:
            if self._proc.poll() is not None:
                with self.log_path.open("rb") as log:
                    log.seek(logged)
                    this_start = log.read().decode(errors="replace")
                self._proc = None
                if "java.net.BindException" in this_start:
                    return False
                raise RuntimeError(f"ZooKeeper exited; see {self.log_path}:\n" + this_start[-2000:])
            try:
                # the port answers, and it is this JVM's (not another process that took the port)
                if _four_letter(self.port, b"srvr").startswith(b"Zookeeper version") and self._listening():
                    return True
            except OSError:
                pass
            time.sleep(0.1)  # polling a condition with a deadline, not ordering events
        self.stop()
        raise RuntimeError(f"ZooKeeper did not answer on {self.hosts} within {self._start_timeout}s; see {self.log_path}")

    def _listening(self) -> bool:
        """Whether this server's JVM is the process listening on ``port``."""
        assert self._proc is not None
        try:
            connections = psutil.Process(self._proc.pid).net_connections("tcp")
        except psutil.Error:
            return False
        return any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port for c in connections)

    def stop(self) -> None:
        """Kill the server (SIGKILL: like a crash; its data stays for ``start()``)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        """Stop the server and remove its data."""
        self.stop()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def wait_until(predicate: Callable[[], object], timeout: float, what: str,
               monotonic: Callable[[], float] = time.monotonic) -> None:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass (then fail with ``what``)."""
    deadline = monotonic() + timeout
    while not predicate():
        if monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def expire_session(hosts: str, client: KazooClient, timeout: float = 60.0) -> None:
    """Have the server end ``client``'s session, as it would after a pause longer than the session.

    A twin client takes the session over with its id and password, and closes it. ``client`` is still running, so it
    reconnects at once and can take the session back before the twin's close is sent (CI saw the twin's ``start`` fail
    that way on a loaded machine). So this repeats until a twin offered the session id is told it has expired.
    """
    session_id, password = client.client_id
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=10.0)
        try:
            twin.start(timeout=10)  # raises if the session was taken back before it could be seen connected
        except KazooTimeoutError:
            continue  # start() has stopped and closed the twin
        expired = twin.client_id[0] != session_id  # told it had expired, the twin opened a session of its own
        twin.stop()  # closes the session it holds: the old one, or its own
        twin.close()
        if expired:
            return
    raise AssertionError(f"session {session_id:#x} still open after {timeout}s of closing it")
