"""Reading gRPC C-core's own log lines, so a failed TLS handshake becomes one event of ours.

grpcio gives Python no hook for a handshake that fails: no handler or interceptor runs, and the
C core logs the failure itself on stderr (``ssl_transport_security.cc] Handshake failed with
error SSL_ERROR_SSL: ...WRONG_VERSION_NUMBER``), without the client's address. The address is
in the C core's ``handshaker`` trace: when a handshake ends, ``handshaker.cc``'s
``CallNextHandshakerLocked: error=...`` line prints the connection's channel args, and those of
a server-side connection include ``grpc.internal.endpoint_peer_address``. gRPC reads
``GRPC_TRACE`` once, when the module is first imported, so the ``groupcoord`` command asks for
that trace before it imports gRPC (``handshake_trace_env``), and the serve process reads its own
stderr (``coordinator.process.stderr_relay``) through ``GrpcLogReader``.

This module is pure: lines in, decisions out (pass a line on, drop it, or report a failure). It
imports neither gRPC nor logging, so the command can use it before gRPC is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

__all__ = ["GrpcLogReader", "HandshakeFailure", "Passthrough", "handshake_trace_env", "reason_of"]

TRACER = "handshaker"

# absl's prefix: severity, MMDD hh:mm:ss.micros, thread id, file:line]
_PREFIX = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d{6}\s+(\d+) ([\w.\-/]+):(\d+)\] ?(.*)$")
_PEER = re.compile(r"grpc\.internal\.endpoint_peer_address=([^,}\s]+)")
_ERROR = re.compile(r"CallNextHandshakerLocked: error=(.*?)(?:\n=== Source Location Trace: ===| shutdown=)", re.DOTALL)
_SOURCE = re.compile(r"^src/\S+:\d+$")  # a status's source location, below "=== Source Location Trace: ==="

# what the failure most likely was, by the OpenSSL reason or the C core's words (a metric label:
# a small fixed set, never text a client chose)
_REASONS: tuple[tuple[str, str], ...] = (
    ("WRONG_VERSION_NUMBER", "not_tls"),
    ("HTTP_REQUEST", "not_tls"),
    ("PACKET_LENGTH_TOO_LONG", "not_tls"),
    ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "no_client_certificate"),
    ("CERTIFICATE_VERIFY_FAILED", "untrusted_client_certificate"),
    ("ALERT", "client_refused_server_certificate"),  # TLSV1_ALERT_UNKNOWN_CA, SSLV3_ALERT_BAD_CERTIFICATE...
    ("Socket closed", "closed"),
    ("Handshake read failed", "closed"),
    ("Connection reset", "closed"),
    ("timed out", "timeout"),
    ("Deadline", "timeout"),
)
REASONS = frozenset(label for _, label in _REASONS) | {"other"}


def handshake_trace_env(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The environment changes that turn the C core's ``handshaker`` trace on (``None``: it is on
    already, because the operator asked for it or for ``all``; the operator's lines then pass)."""
    traces = [name.strip() for name in environ.get("GRPC_TRACE", "").split(",") if name.strip()]
    if TRACER in traces or "all" in traces:
        return None
    return {"GRPC_TRACE": ",".join([*traces, TRACER])}


def reason_of(error: str) -> str:
    """The failure's kind (one of ``REASONS``) from the C core's error text."""
    for needle, label in _REASONS:
        if needle in error:
            return label
    return "other"


def _detail(error: str) -> str:
    """The error without gRPC's status wrapping: the OpenSSL part when there is one."""
    error = error.strip()
    error = error.removesuffix(": OK")
    start = error.find("SSL_ERROR_")
    if start >= 0:
        error = error[start:]
    return error.removesuffix(": Invalid certificate verification context")  # the C core's filler, not a cause


def _peer(arg: str) -> str:
    """``ipv4:127.0.0.1:5000`` -> ``127.0.0.1:5000``; ``ipv6:%5B::1%5D:5000`` -> ``[::1]:5000``."""
    arg = unquote(arg)
    for scheme in ("ipv4:", "ipv6:", "unix:", "unix-abstract:"):
        if arg.startswith(scheme):
            return arg[len(scheme):]
    return arg


def _continues(record: _Record, line: str) -> bool:
    """Whether an unprefixed ``line`` is the rest of ``record`` (a status's source locations, then
    the handshaker's args) rather than something else written to stderr."""
    text = line.strip()
    if text == "=== Source Location Trace: ===" or _SOURCE.match(text) or text.startswith("shutdown="):
        return True
    return not text and len(record.lines) > 1 and _SOURCE.match(record.lines[-1].strip()) is not None


@dataclass(frozen=True)
class Passthrough:
    """Text to write to the real stderr unchanged (its line ends included)."""

    text: str


@dataclass(frozen=True)
class HandshakeFailure:
    """A server-side TLS handshake that failed: ``peer`` is ``host:port`` (``None`` when the
    C core did not say), ``reason`` one of ``REASONS``, ``detail`` the C core's error."""

    peer: str | None
    reason: str
    detail: str


Output = Passthrough | HandshakeFailure


@dataclass
class _Record:
    """One log statement of the C core: its prefixed first line and any lines that continue it."""

    severity: str
    thread: str
    file: str
    message: str
    lines: list[str]
    at: float

    @property
    def text(self) -> str:
        return "".join(self.lines)


@dataclass
class GrpcLogReader:
    """Turns stderr lines into outputs. ``traced``: the ``handshaker`` trace is on; ``drop_trace``:
    because we asked for it, so its lines are ours to drop (the operator's own trace passes).

    A record ends at the next prefixed line or when ``flush`` finds it idle. The OpenSSL line
    ("Handshake failed with error ...") is held until a handshaker line repeats its text and
    names the peer: a server-side failure is then one ``HandshakeFailure`` and nothing else; a
    client-side one (this process dialling out) lets the held line through as gRPC wrote it, and
    so does ``hold_s`` passing without a pair. Without the trace there is no handshaker line, and
    the OpenSSL line alone becomes a failure with no peer."""

    traced: bool = True
    drop_trace: bool = True
    hold_s: float = 1.0
    _record: _Record | None = None
    _held: list[_Record] = field(default_factory=list)

    def feed(self, line: str, now: float) -> list[Output]:
        """One line (with its newline) read at ``now``."""
        match = _PREFIX.match(line.rstrip("\n"))
        if match is None:
            if self._record is not None and _continues(self._record, line):
                self._record.lines.append(line)
                return []
            return [*self._finish(), Passthrough(line)]
        out = self._finish()
        severity, thread, path, _, message = match.groups()
        self._record = _Record(severity, thread, path.rsplit("/", 1)[-1], message, [line], now)
        return out

    def flush(self, now: float, *, end: bool = False) -> list[Output]:
        """The record in progress (the writer has gone quiet, or the stream ended), and the held
        OpenSSL lines older than ``hold_s`` (every one at the ``end``)."""
        out = self._finish()
        keep = []
        for held in self._held:
            if end or now - held.at >= self.hold_s:
                out.append(self._unpaired(held))
            else:
                keep.append(held)
        self._held = keep
        return out

    def _finish(self) -> list[Output]:
        record, self._record = self._record, None
        if record is None:
            return []
        return self._decide(record)

    def _unpaired(self, held: _Record) -> Output:
        if self.traced:  # the handshaker line never came: the address is not known
            return Passthrough(held.text)
        return HandshakeFailure(None, reason_of(held.message), _detail(held.message))

    def _decide(self, record: _Record) -> list[Output]:
        if record.file == "ssl_transport_security.cc" and record.message.startswith("Handshake failed"):
            if not self.traced:
                return [HandshakeFailure(None, reason_of(record.message), _detail(record.message))]
            self._held.append(record)
            return []
        if record.file == "handshaker.cc" and record.message.startswith("CallNextHandshakerLocked: error="):
            return self._handshaker_step(record)
        if record.file == "trace.cc" and record.message == f"gRPC Tracers: {TRACER}":
            return [] if self.drop_trace else [Passthrough(record.text)]
        if record.file in ("handshaker.cc", "channel_trace.h") and "handshake" in record.message:
            return [] if self.drop_trace else [Passthrough(record.text)]
        return [Passthrough(record.text)]

    def _pair(self, error: str) -> _Record | None:
        """The held OpenSSL line this handshaker error repeats (the C core may log the two on
        different threads, so they pair by text; equal texts are interchangeable)."""
        for index, held in enumerate(self._held):
            said = held.message.removeprefix("Handshake failed with error ").strip()
            if said and said in error:
                return self._held.pop(index)
        return None

    def _handshaker_step(self, record: _Record) -> list[Output]:
        text = record.text
        out: list[Output] = [] if self.drop_trace else [Passthrough(text)]
        error_match = _ERROR.search(text)
        error = error_match.group(1).strip() if error_match else ""
        if not error or error == "OK":
            return out
        held = self._pair(error)
        peer = _PEER.search(text)
        if peer is None or "grpc.default_authority=" in text:  # a connection this process made
            return ([Passthrough(held.text)] if held is not None else []) + out
        return [HandshakeFailure(_peer(peer.group(1)), reason_of(error), _detail(error)), *out]
