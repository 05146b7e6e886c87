"""The metrics endpoint: ``GET /metrics`` over HTTP or HTTPS, bounded whatever its callers do.

Issue 38: prometheus-client's threading WSGI server gave every connection a thread (1,000 idle
connections held 1,000 threads) and, wrapped in TLS, did each handshake on its one accepting thread
(one connection that never sent a ClientHello blocked every scrape). Here connections are served by
an asyncio loop on one thread of the endpoint's own, so an idle connection or an unfinished TLS
handshake costs a socket and no thread, and each waits at most ``idle_timeout_s`` (handshake,
request head, next request on a kept-alive connection) before it is closed. At most
``max_connections`` are open at once (past that a new one closes the oldest idle one, or is closed
itself when none is idle), a request head is at most ``MAX_HEAD_BYTES``, and the exposition itself (prometheus-client's encoder, which reads the
model on its loop) is rendered on a pool of ``workers`` threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http.client
import io
import socket
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

__all__ = ["MAX_HEAD_BYTES", "MetricsEndpoint", "MetricsServerLimits", "MetricsTls", "serve_metrics"]

MAX_HEAD_BYTES = 16 * 1024
"""A request line and headers longer than this are answered 431 and the connection closed."""


@dataclass(frozen=True)
class MetricsTls:
    """HTTPS for the metrics endpoint: PEM files; with ``client_ca``, scrapers must present a certificate it signed."""

    cert: str
    key: str
    client_ca: str = ""


@dataclass(frozen=True)
class MetricsServerLimits:
    """What one metrics endpoint may hold: open connections, seconds a connection may sit idle (or
    take over its TLS handshake or its request head), threads rendering scrapes."""

    max_connections: int = 256
    idle_timeout_s: float = 10.0
    workers: int = 2


@dataclass(frozen=True)
class _Answer:
    status: str
    headers: list[tuple[str, str]]
    body: bytes


class MetricsEndpoint:
    """An HTTP(S) server answering ``GET /metrics`` from one registry, on its own thread."""

    def __init__(self, registry: CollectorRegistry, sock: socket.socket, context: ssl.SSLContext | None,
                 authorized: Callable[[str], bool] | None, limits: MetricsServerLimits) -> None:
        self._registry = registry
        self._socket = sock
        self._context = context
        self._authorized = authorized
        self.limits = limits
        self.open_connections = 0
        self._idle: dict[asyncio.StreamWriter, None] = {}  # connections waiting for a request, oldest first
        self._pool = ThreadPoolExecutor(limits.workers, thread_name_prefix="metrics-render")
        self._loop = asyncio.new_event_loop()
        self._stopped = asyncio.Event()
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._run, name="metrics-http", daemon=True)
        self.thread.start()
        self._started.wait(10)

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    def close(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stopped.set)
        self.thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.set_exception_handler(_quiet_about_peers)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        server = await asyncio.start_server(
            self._connection, sock=self._socket, ssl=self._context, limit=MAX_HEAD_BYTES,
            ssl_handshake_timeout=self.limits.idle_timeout_s if self._context is not None else None)
        self._started.set()
        async with server:
            await self._stopped.wait()
            server.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open_connections >= self.limits.max_connections:
            if not self._idle:  # every one is being answered: this one waits for none of them
                writer.transport.abort()
                return
            oldest = next(iter(self._idle))  # an idle one makes way (a scraper reconnects)
            del self._idle[oldest]
            oldest.transport.abort()
        self.open_connections += 1
        try:
            while await self._one_request(reader, writer):
                pass
        except (TimeoutError, ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open_connections -= 1
            writer.transport.abort()  # answered in full (drained) or given up on: nothing left to flush

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; True if the connection stays open for another."""
        self._idle[writer] = None
        try:
            async with asyncio.timeout(self.limits.idle_timeout_s):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await self._write(writer, _Answer("431 Request Header Fields Too Large", [], b""), keep=False)
            return False
        finally:
            self._idle.pop(writer, None)
        line, _, rest = head.partition(b"\r\n")
        parts = line.decode("latin-1").split()
        headers = http.client.parse_headers(io.BytesIO(rest))
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._write(writer, _Answer("400 Bad Request", [], b"not an HTTP/1.x request\n"), keep=False)
            return False
        method, path, version = parts
        keep = version == "HTTP/1.1" and headers.get("Connection", "").lower() != "close"
        if method not in ("GET", "HEAD"):
            answer = _Answer("405 Method Not Allowed", [("Allow", "GET, HEAD")], b"")
        else:
            answer = await asyncio.get_running_loop().run_in_executor(
                self._pool, self._render, path, headers.get("Authorization", ""), headers.get("Accept", ""),
                headers.get("Accept-Encoding", ""))
        if method == "HEAD":
            answer = _Answer(answer.status, [*answer.headers, ("Content-Length", str(len(answer.body)))], b"")
        await self._write(writer, answer, keep=keep)
        return keep

    async def _write(self, writer: asyncio.StreamWriter, answer: _Answer, *, keep: bool) -> None:
        headers = list(answer.headers)
        if not any(name == "Content-Length" for name, _ in headers):
            headers.append(("Content-Length", str(len(answer.body))))
        headers.append(("Connection", "keep-alive" if keep else "close"))
        head = f"HTTP/1.1 {answer.status}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers) + "\r\n"
        writer.write(head.encode("latin-1") + answer.body)
        async with asyncio.timeout(self.limits.idle_timeout_s):  # a reader that never reads is dropped
            await writer.drain()

    def _render(self, path: str, authorization: str, accept: str, accept_encoding: str) -> _Answer:
        """The answer to a GET (on a worker thread: the registry's collectors wait on the model's loop)."""
        if self._authorized is not None:
            scheme, _, token = authorization.partition(" ")
            if not (scheme.lower() == "bearer" and token and self._authorized(token.strip())):
                return _Answer("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                                    ("WWW-Authenticate", 'Bearer realm="groupcoord metrics"')],
                               b"a bearer token is required (metrics_token_file)\n")
        if path.split("?", 1)[0] == "/favicon.ico":
            return _Answer("200 OK", [], b"")
        encoder, content_type = choose_encoder(accept)
        body = encoder(self._registry)
        headers = [("Content-Type", content_type)]
        if "gzip" in accept_encoding:
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        return _Answer("200 OK", headers, body)


def _quiet_about_peers(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """A scraper that hangs up or fails its TLS handshake is no error of ours; anything else is."""
    if isinstance(context.get("exception"), (ssl.SSLError, ConnectionError, TimeoutError)):
        return
    loop.default_exception_handler(context)


def serve_metrics(registry: CollectorRegistry, listen: str, *, tls: MetricsTls | None = None,
                  authorized: Callable[[str], bool] | None = None,
                  limits: MetricsServerLimits | None = None) -> MetricsEndpoint:
    """Serve ``registry`` on ``listen`` (HOST:PORT; port 0 picks a free one). OSError if it cannot bind.

    With ``authorized``, a scrape must send ``Authorization: Bearer TOKEN`` for which it returns True
    (Prometheus: ``authorization: {credentials_file: ...}``); anything else is answered 401 before the
    registry is read. The socket is bound here, so a bad address fails the caller, not the thread."""
    host, _, port = listen.rpartition(":")
    address = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, int(port)))
        sock.listen(128)
        sock.setblocking(False)
        context = None
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(tls.cert, tls.key)
            if tls.client_ca:
                context.load_verify_locations(tls.client_ca)
                context.verify_mode = ssl.CERT_REQUIRED
    except BaseException:
        with contextlib.suppress(OSError):
            sock.close()
        raise
    return MetricsEndpoint(registry, sock, context, authorized, limits or MetricsServerLimits())
