"""Failed TLS handshakes reach our logger with the client's address (``groupcoord serve`` reading its stderr).

The end-to-end test runs the real command with mTLS and ``--log-format json``; the others feed
``GrpcLogReader`` lines grpcio 1.85's C core wrote in those same cases (captured from a real
server), to pin down each decision.
"""

from __future__ import annotations

import json
import queue
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.channels import ClientSecurity
from groupcoord.coordinator.process.grpc_log import (
    GrpcLogReader,
    HandshakeFailure,
    Passthrough,
    handshake_trace_env,
)
from tests.processes import stop_processes
from tests.security_pki import Pki

_GRPC_OWN = re.compile(r"ssl_transport_security|handshaker\.cc|channel_trace|gRPC Tracers|Source Location Trace")


class _Stderr:
    """A child's stderr, line by line, on a thread (a silent child cannot hang the test)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        self._queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        stream = proc.stderr

        def pump() -> None:
            for line in stream:
                self._queue.put(line)

        self._thread = threading.Thread(target=pump, daemon=True)
        self._thread.start()

    def until(self, done: object, timeout_s: float = 30) -> None:
        """Read lines until ``done()`` holds (a deadline, never a sleep)."""
        deadline = time.monotonic() + timeout_s
        while not done():  # type: ignore[operator]
            try:
                self.seen.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"gave up waiting; stderr so far: {self.seen}") from None

    def rest(self) -> None:
        """Everything up to the end (call once the child has exited)."""
        self._thread.join(10)
        while not self._queue.empty():
            self.seen.append(self._queue.get())

    def events(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.seen if line.startswith("{")]


def _plaintext_client(port: int) -> int:
    """An HTTP/2 client without TLS; returns its own port."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        own = sock.getsockname()[1]
        assert sock.recv(64) == b""  # the server closes: no TLS, no gRPC
    return int(own)


def _client_without_certificate(port: int, ca: Path) -> int:
    """A TLS client that trusts the server but has no certificate of its own; returns its port."""
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        own = raw.getsockname()[1]
        try:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:  # TLS 1.3: the refusal comes after
                tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                tls.recv(64)
        except (ssl.SSLError, ConnectionError):
            pass  # the server's alert: certificate required
    return int(own)


@pytest.mark.slow
def test_handshake_failures_are_json_events_naming_the_client(tmp_path: Path, cli_env: dict[str, str]) -> None:
    pki = Pki(tmp_path / "pki")
    cert, key = pki.client("alice")
    proc = subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "serve", "--listen", "127.0.0.1:0", "--store", "memory",
         "--data-dir", str(tmp_path / "data"), "--log-format", "json", "--metrics-listen", "127.0.0.1:0",
         "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key), "--tls-client-ca", str(pki.ca_file)],
        env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        stderr = _Stderr(proc)
        stderr.until(lambda: any("coordinator listening on" in line for line in stderr.seen)
                     and any("metrics on" in line for line in stderr.seen))
        port = int(next(re.search(r"listening on 127\.0\.0\.1:(\d+)", line).group(1)  # type: ignore[union-attr]
                        for line in stderr.seen if "listening on 127.0.0.1:" in line))
        metrics = next(line.rsplit(" ", 1)[1].strip() for line in stderr.seen if "metrics on" in line)

        good = ClientSecurity(tls_ca=str(pki.ca_file), tls_cert=str(cert), tls_key=str(key))
        with AdminClient(f"127.0.0.1:{port}", security=good) as admin:
            try:
                admin.list_groups()  # a handshake that works says nothing
            except errors.GroupCoordError:
                pass  # what the ACLs think of alice is not this test's business
        plaintext = _plaintext_client(port)
        no_cert = _client_without_certificate(port, pki.ca_file)

        def failures() -> list[dict[str, object]]:
            return [e for e in stderr.events() if e.get("event") == "tls_handshake_failed"]

        stderr.until(lambda: len(failures()) >= 2)
        with urllib.request.urlopen(metrics, timeout=10) as response:
            scraped = response.read().decode()
    finally:
        stop_processes([proc])
    stderr.rest()

    by_peer = {e["peer"]: e for e in failures()}
    assert len(failures()) == 2, failures()
    assert by_peer[f"127.0.0.1:{plaintext}"]["reason"] == "not_tls"
    assert "WRONG_VERSION_NUMBER" in str(by_peer[f"127.0.0.1:{plaintext}"]["detail"])
    assert by_peer[f"127.0.0.1:{no_cert}"]["reason"] == "no_client_certificate"
    assert all(e["level"] == "warning" and e["logger"] == "groupcoord.tls" for e in failures())
    assert not [line for line in stderr.seen if _GRPC_OWN.search(line)], "gRPC's own lines got through"
    assert 'groupcoord_tls_handshake_failures_total{reason="not_tls"} 1.0' in scraped
    assert 'groupcoord_tls_handshake_failures_total{reason="no_client_certificate"} 1.0' in scraped


# grpcio 1.85.3, GRPC_TRACE=handshaker, a plaintext client at 127.0.0.1:50744 (args shortened)
PLAINTEXT = """\
I1127 00:18:47.065741    6423 trace.cc:91] gRPC Tracers: handshaker
I1127 00:18:47.075568    6720 handshaker.cc:80] handshake_manager 0x7f8004002140: adding handshaker endpoint_info [0x7f8004001240] at index 0
I1127 00:18:47.075685    6720 handshaker.cc:155] CallNextHandshakerLocked: error=OK shutdown=false index=0, args={endpoint=0x7f8004001c60, args={grpc.internal.security_connector=0x558f2bacac30}, read_buffer.Length()=0, exit_early=0}
I1127 00:18:47.075699    6720 channel_trace.h:396] handshake manager 0x7f8004002140:  calling handshaker endpoint_info at index 0
I1127 00:18:47.075856    6719 ssl_transport_security.cc:2563] Handshake failed with error SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER: Invalid certificate verification context
I1127 00:18:47.075886    6721 handshaker.cc:155] CallNextHandshakerLocked: error=UNKNOWN: Ssl handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER: Invalid certificate verification context: OK
=== Source Location Trace: === 
src/core/util/status_helper.cc:68
 shutdown=false index=2, args={endpoint=0x7f8004001c60, args={grpc.internal.endpoint_local_address=ipv4:127.0.0.1:35463, grpc.internal.endpoint_peer_address=ipv4:127.0.0.1:50744, grpc.internal.server_credentials=0x558f2bac9d20}, read_buffer.Length()=0, exit_early=0}
I1127 00:18:47.075903    6721 channel_trace.h:396] handshake manager 0x7f8004002140: Failed with error: UNKNOWN: Ssl handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER: Invalid certificate verification context: OK
=== Source Location Trace: === 
src/core/util/status_helper.cc:68

"""

# the same process dialling out to a closed port (a client-side handshaker: grpc.default_authority)
CLIENT_SIDE = """\
I1127 00:16:59.889177   19865 handshaker.cc:155] CallNextHandshakerLocked: error=UNKNOWN: Failed to connect to remote host: Connection refused
=== Source Location Trace: ===
src/core/lib/event_engine/posix_engine/posix_engine.cc:309
 shutdown=false index=1, args={endpoint=(nil), args={grpc.default_authority=localhost:33075, grpc.http2_scheme=https}, read_buffer.Length()=0, exit_early=0}
"""


def _read(reader: GrpcLogReader, text: str, at: float = 0.0) -> list[Passthrough | HandshakeFailure]:
    out: list[Passthrough | HandshakeFailure] = []
    for line in text.splitlines(keepends=True):
        out += reader.feed(line, at)
    return out + reader.flush(at)


def test_a_plaintext_client_is_one_failure_with_its_address_and_nothing_else() -> None:
    out = _read(GrpcLogReader(), "kernel says hi\n" + PLAINTEXT + "after\n")
    assert out == [
        Passthrough("kernel says hi\n"),
        HandshakeFailure("127.0.0.1:50744", "not_tls",
                         "SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER"),
        Passthrough("after\n"),
    ]


def test_the_operators_own_trace_passes_through_beside_the_event() -> None:
    out = _read(GrpcLogReader(drop_trace=False), PLAINTEXT)
    assert next(o for o in out if isinstance(o, HandshakeFailure)).peer == "127.0.0.1:50744"
    passed = "".join(o.text for o in out if isinstance(o, Passthrough))
    assert "gRPC Tracers: handshaker" in passed and "CallNextHandshakerLocked: error=UNKNOWN" in passed
    assert "ssl_transport_security" not in passed  # the event says it


def test_without_the_trace_the_openssl_line_is_a_failure_without_a_peer() -> None:
    ssl_line = next(line + "\n" for line in PLAINTEXT.splitlines() if "ssl_transport_security" in line)
    assert _read(GrpcLogReader(traced=False), ssl_line) == [
        HandshakeFailure(None, "not_tls",
                         "SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER")]


def test_a_connection_this_process_makes_is_not_a_client_failure() -> None:
    assert _read(GrpcLogReader(), CLIENT_SIDE) == []
    ssl_line = "I1127 00:16:59.889100   19865 ssl_transport_security.cc:2563] Handshake failed with error X: y\n"
    reader = GrpcLogReader()
    assert reader.feed(ssl_line, 0.0) == []  # held, waiting for its handshaker line
    assert reader.flush(0.5) == []
    assert reader.flush(1.5) == [Passthrough(ssl_line)]  # none came: written as gRPC wrote it


def test_the_trace_is_asked_for_once_and_the_operators_tracers_are_kept() -> None:
    assert handshake_trace_env({}) == {"GRPC_TRACE": "handshaker"}
    assert handshake_trace_env({"GRPC_TRACE": "api, tcp"}) == {"GRPC_TRACE": "api,tcp,handshaker"}
    assert handshake_trace_env({"GRPC_TRACE": "handshaker"}) is None
    assert handshake_trace_env({"GRPC_TRACE": "all"}) is None


# A process whose real stderr nobody reads: the relay's writer blocks on it, its queue fills, and
# the reader must drop and count rather than stop draining the pipe gRPC writes to.
_STUCK_STDERR = """
import os, sys, time
from groupcoord.coordinator.process.stderr_relay import start_relay
unread, stuck = os.pipe()
os.dup2(stuck, 2)  # the relay's "real" stderr: a 64 KiB pipe no one reads
relay = start_relay(os.environ, max_lines=50)
refused = 0
for n in range(5000):
    try:
        os.write(2, b"I1127 00:00:00.000000 1 some.cc:1] line %05d %s\\n" % (n, b"x" * 150))
    except BlockingIOError:
        refused += 1  # the relay's own pipe full: gRPC's write fails, it never waits
deadline = time.monotonic() + 20
while relay.dropped == 0 and time.monotonic() < deadline:
    time.sleep(0.01)
print(relay.dropped, refused, flush=True)
os._exit(0)
"""


def test_a_stuck_stderr_makes_the_relay_drop_and_count_never_block_the_writer(cli_env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-c", _STUCK_STDERR], check=False, env=cli_env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    dropped, refused = map(int, done.stdout.split())
    assert dropped > 0  # counted, while all 5000 writes returned
    assert dropped + refused < 5000  # and what fitted was read, not lost
