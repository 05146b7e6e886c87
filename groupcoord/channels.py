"""How clients (workers, the admin client, the CLI) open channels to a coordinator.

Two settings matter beyond gRPC's defaults:

- **Reconnect backoff, bounded.** gRPC's default backoff grows to minutes while the
  coordinator is down, so a worker could stay disconnected for seconds after a restarted
  coordinator is back and lose its session for an outage shorter than the session. Capped at
  a heartbeat interval, the worker reconnects within one interval of the coordinator's return.
- **A subchannel of its own.** gRPC shares one connection per address among all the channels
  of a process that have the same options. While one of them waits out its backoff to an
  address where nothing listened, a new channel to that address failed at once, even with a
  coordinator listening there again (a leftover client retrying a stopped coordinator's port
  made the next coordinator given that port unreachable to a new admin client). Each client
  connects on its own.
- **Receive limit matching the server's.** The leader's JoinGroup answer carries the whole
  catalog; gRPC's 4 MiB default would refuse answers the server sends for groups its limits
  allow.

``ClientSecurity`` opens the channel: plaintext, TLS, mTLS, and a bearer token on every call.
"""

from __future__ import annotations

import collections
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from groupcoord.addresses import is_loopback_host

__all__ = [
    "MAX_RECEIVE_BYTES",
    "ClientSecurity",
    "probe",
    "channel_options",
    "failure_reason",
    "is_loopback_address",
    "unsafe_file",
]

MAX_RECEIVE_BYTES = 256 * 1_048_576


def channel_options(reconnect_backoff_max_ms: int = 1_000) -> list[tuple[str, int]]:
    """gRPC channel options for a client that must come back quickly after an outage."""
    cap = max(100, reconnect_backoff_max_ms)
    return [
        ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
        ("grpc.initial_reconnect_backoff_ms", min(100, cap)),
        ("grpc.min_reconnect_backoff_ms", min(100, cap)),
        ("grpc.max_reconnect_backoff_ms", cap),
        ("grpc.use_local_subchannel_pool", 1),
    ]


def probe(channel: grpc.Channel, timeout_s: float) -> grpc.RpcError | None:
    """One gRPC health check on ``channel`` with ``timeout_s``: the error when it did not reach a server
    (UNAVAILABLE says why at once: refused, name not resolved, TLS; DEADLINE_EXCEEDED: nothing answered
    in ``timeout_s``), else None (any answer, even UNIMPLEMENTED or UNAUTHENTICATED, came from a
    server). Bounds how long a command waits on a wrong address to ``timeout_s``, not its call's timeout."""
    check = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda _: b"",
                                response_deserializer=lambda data: data)
    try:
        check(None, timeout=timeout_s)
    except grpc.RpcError as error:
        if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return error
    return None


_TLS_REASON = re.compile(r"SSL routines:[^:]*:([A-Z0-9_]+)|(CERTIFICATE_VERIFY_FAILED)")


def failure_reason(code: grpc.StatusCode | None, detail: str) -> str:
    """What a failed call's status says happened, in a few words: connection refused, name not resolved,
    TLS handshake failed (and OpenSSL's reason), timed out; else the code and gRPC's own words."""
    lowered = detail.lower()
    if "connection refused" in lowered:
        return "connection refused"
    if "resolving" in lowered or "dns resolution" in lowered or "lookup" in lowered:
        return "name not resolved"
    if "handshake" in lowered or "ssl" in lowered or "certificate" in lowered:
        match = _TLS_REASON.search(detail)
        return f"TLS handshake failed ({match.group(1) or match.group(2)})" if match else "TLS handshake failed"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED or "timed out" in lowered:
        return "timed out"
    name = code.name.lower() if code is not None else "failed"
    return f"{name}: {detail[:160]}" if detail else name


@dataclass(frozen=True, kw_only=True)
class ClientSecurity:
    """How a client proves who it is and checks the coordinator: PEM file paths and a token file.

    ``tls_ca`` turns TLS on (the CA that signed the coordinator's certificate); ``tls_cert`` +
    ``tls_key`` add a client certificate (mTLS: its subject is the principal). ``token_file`` holds
    a bearer token (one line) sent as ``authorization: Bearer <token>`` on every call; without TLS
    it is only sent to a loopback address. Files are read when a channel is opened.
    """

    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    token_file: str = ""

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("--tls-cert and --tls-key go together")
        if self.tls_cert and not self.tls_ca:
            raise ValueError("--tls-cert needs --tls-ca (the CA that signed the coordinator's certificate)")

    def open_channel(self, address: str, options: list[tuple[str, int]]) -> grpc.Channel:
        """A channel to ``address`` with this security (``ValueError``: one line, never a secret)."""
        credentials = self._credentials(address)
        if credentials is not None:
            channel = grpc.secure_channel(address, credentials, options=options)
        else:
            channel = grpc.insecure_channel(address, options=options)
        if self.token_file:
            channel = grpc.intercept_channel(channel, _BearerToken(self.token()))
        return channel

    def open_aio_channel(self, address: str, options: list[tuple[str, int]]) -> grpc.aio.Channel:
        """``open_channel`` for ``grpc.aio``; the token goes with each call (``call_metadata``)."""
        credentials = self._credentials(address)
        if credentials is not None:
            return grpc.aio.secure_channel(address, credentials, options=options)
        return grpc.aio.insecure_channel(address, options=options)

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        """Headers every call carries: the bearer token, if any (read now)."""
        return (("authorization", f"Bearer {self.token()}"),) if self.token_file else ()

    def _credentials(self, address: str) -> Any:
        """TLS credentials, or None for plaintext (where a token may go to loopback only)."""
        if self.tls_ca:
            key = _read(self.tls_key, "--tls-key", secret=True) if self.tls_key else None
            cert = _read(self.tls_cert, "--tls-cert") if self.tls_cert else None
            return grpc.ssl_channel_credentials(_read(self.tls_ca, "--tls-ca"), key, cert)
        if self.token_file and not is_loopback_address(address):
            raise ValueError(f"a token is sent to {address} only over TLS: add --tls-ca")
        return None

    def check(self, addresses: Sequence[str] = ()) -> None:
        """Read every file now, so a wrong path is a usage error at start, not a failure later; and
        refuse to send a token in plaintext to any of ``addresses`` that is not loopback."""
        for address in addresses:
            if self.token_file and not self.tls_ca and not is_loopback_address(address):
                raise ValueError(f"a token is sent to {address} only over TLS: add --tls-ca")
        for path, what in ((self.tls_ca, "--tls-ca"), (self.tls_cert, "--tls-cert"), (self.tls_key, "--tls-key")):
            if path:
                _read(path, what, secret=what == "--tls-key")
        if self.token_file:
            self.token()

    def token(self) -> str:
        text = _read(self.token_file, "--token-file", secret=True).decode("utf-8", errors="replace").strip()
        if not text or any(c.isspace() for c in text):
            raise ValueError(f"--token-file {self.token_file}: expected the token alone on one line")
        return text


def unsafe_file(path: str | os.PathLike[str], what: str, *, secret: bool = True) -> str | None:
    """Why a credential file must not be used, or None (a missing file is the reader's error).

    Like ssh with a private key: a ``secret`` (a key, a token, a password) that others may read, or
    any such file (an ACL) that anyone but its owner and group may change, is refused with one line.
    Group-readable stays allowed (0640 with a service group is a common deployment)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None
    if secret and mode & 0o004:
        return f"{what} {path} is readable by others (mode {mode:04o}): chmod o-rwx {path}"
    if mode & 0o002:
        return f"{what} {path} is writable by others (mode {mode:04o}): chmod o-w {path}"
    return None


def _read(path: str, what: str, *, secret: bool = False) -> bytes:
    problem = unsafe_file(path, what) if secret else None
    if problem is not None:
        raise ValueError(problem)
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise ValueError(f"cannot read {what} {path}: {error.strerror}") from None


def is_loopback_address(address: str) -> bool:
    """``host:port`` on localhost, 127.0.0.0/8 or ::1."""
    return is_loopback_host(address.rpartition(":")[0])


class _CallDetails(
    collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                                            "compression")),
    grpc.ClientCallDetails,
):
    pass


class _BearerToken(grpc.UnaryUnaryClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every call (TLS or loopback only: see ``ClientSecurity``)."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def __repr__(self) -> str:
        return "_BearerToken(<hidden>)"

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = [*(details.metadata or ()), self._header]
        return continuation(_CallDetails(details.method, details.timeout, metadata, details.credentials,
                                         details.wait_for_ready, details.compression), request)
