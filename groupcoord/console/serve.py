"""``groupcoord console`` as a process: its listener (plain, TLS or mTLS), its token, its address line.

The console is a client of the coordinators like the command line: it holds an ``AdminClient``
with the operator's own credentials, so it sees and may do exactly what the operator may.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import ssl
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

from aiohttp import web

from groupcoord.addresses import is_loopback_host
from groupcoord.admin import AdminClient
from groupcoord.channels import ClientSecurity
from groupcoord.console.app import ConsoleSettings, make_app
from groupcoord.console.source import ClusterSource, Planner

__all__ = ["BackgroundConsole", "ConsoleOptions", "RunningConsole", "run_console", "start_console"]


@dataclass(frozen=True, kw_only=True)
class ConsoleOptions:
    listen: str
    """HOST:PORT (port 0: any free port)."""
    coordinators: str
    security: ClientSecurity = field(default_factory=ClientSecurity)
    access_token: str | None = None
    """None: a random token, printed in the address (unless ``tls_client_ca`` asks for certificates)."""
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    allow_remove_members: bool = False
    planner: Planner | None = None


@dataclass
class RunningConsole:
    runner: web.AppRunner
    source: ClusterSource
    url: str
    """The address to open, with ``?token=`` when a token is asked."""
    port: int

    async def stop(self) -> None:
        await self.runner.cleanup()
        self.source.close()


def _ssl_context(options: ConsoleOptions) -> ssl.SSLContext | None:
    if not options.tls_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(options.tls_cert, options.tls_key or None)
        if options.tls_client_ca:
            context.load_verify_locations(options.tls_client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as error:
        raise ValueError(f"cannot use the console's certificate: {error}") from None
    return context


def _split(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen {listen!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def warning(options: ConsoleOptions) -> str | None:
    """Like ``serve``'s: a listener beyond loopback without TLS lets anyone on the path read the token."""
    host, _ = _split(options.listen)
    if options.tls_cert or is_loopback_host(host):
        return None
    return (f"groupcoord console: WARNING: listening on {options.listen} without TLS: the access token and every "
            "group's names and members cross the network in clear (use --console-tls-cert/--console-tls-key)")


async def start_console(options: ConsoleOptions, *, admin: AdminClient | None = None) -> RunningConsole:
    """Listening once this returns; ``url`` is the address to open."""
    host, port = _split(options.listen)
    context = _ssl_context(options)
    token = options.access_token
    if token is None and not (context is not None and options.tls_client_ca):
        token = secrets.token_urlsafe(24)
    admin = admin or AdminClient(options.coordinators, security=options.security, timeout_s=3.0)
    source = ClusterSource(admin, planner=options.planner)
    settings = ConsoleSettings(access_token=token, allow_remove_members=options.allow_remove_members,
                               secure_cookie=context is not None)
    runner = web.AppRunner(make_app(source, settings), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=context)
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        source.close()
        raise ValueError(f"cannot listen on {options.listen}: {error.strerror or error}") from None
    bound = runner.addresses[0][1]
    shown = f"[{host}]" if ":" in host else host
    scheme = "https" if context is not None else "http"
    url = f"{scheme}://{shown}:{bound}/" + (f"?token={token}" if token else "")
    return RunningConsole(runner, source, url, bound)


def run_console(options: ConsoleOptions, *, say: Callable[[str], None] | None = None) -> int:
    """Serve until SIGINT or SIGTERM; prints the address (with its token) once listening."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    problem = warning(options)
    if problem:
        say(problem)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        running = await start_console(options)
        say(f"groupcoord console on {running.url} (coordinators {options.coordinators}; "
            f"{'member removal allowed' if options.allow_remove_members else 'read-only'})")
        try:
            await stop.wait()
        finally:
            await running.stop()

    asyncio.run(main())
    return 0


class BackgroundConsole:
    """A console on an event loop of its own thread, for a process that has other work on its main
    thread (the demo, tests): listening once entered, stopped on exit."""

    def __init__(self, options: ConsoleOptions) -> None:
        self.options = options
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="groupcoord-console", daemon=True)
        self.running: RunningConsole | None = None

    def __enter__(self) -> Self:
        self._thread.start()
        try:
            self.running = asyncio.run_coroutine_threadsafe(start_console(self.options), self._loop).result(60)
        except BaseException:
            self._halt()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.running is not None:
            asyncio.run_coroutine_threadsafe(self.running.stop(), self._loop).result(30)
        self._halt()

    def _halt(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def url(self) -> str:
        assert self.running is not None, "not started"
        return self.running.url

    @property
    def base(self) -> str:
        """The address without the token."""
        return self.url.split("?")[0].rstrip("/")
