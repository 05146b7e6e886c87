"""A TCP proxy between workers and the coordinator that delays and drops traffic on command.

    with FaultProxy(upstream_port) as proxy:   # workers dial proxy.address
        proxy.delay(0.3)                       # every chunk, both ways, 300 ms late
        proxy.blackhole()                      # bytes vanish; connections stay open (a partition)
        proxy.drop()                           # every connection closed now, new ones closed at once
        proxy.heal()                           # pass-through again; connections that lost bytes are closed
        proxy.point_at(other_port)             # new connections go to another upstream (a replacement process)

It runs its own event loop on a daemon thread; every command returns once the loop applied it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Self

__all__ = ["FaultProxy"]


class FaultProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self._upstream = (upstream_host, upstream_port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-proxy", daemon=True)
        self._mode = "pass"  # pass | delay | blackhole | drop
        self._delay_s = 0.0
        self._writers: set[asyncio.StreamWriter] = set()
        self._tainted = False  # bytes were lost: existing connections must not carry on
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def mode(self) -> str:
        return self._mode

    def start(self) -> Self:
        self._thread.start()
        self._server = self._run(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def close(self) -> None:
        if self._server is not None:
            server = self._server
            self._server = None

            async def shut() -> None:
                server.close()
                self._close_all()
                await server.wait_closed()

            with contextlib.suppress(Exception):
                self._run(shut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ commands

    def delay(self, seconds: float) -> None:
        self._set("delay", seconds)

    def blackhole(self) -> None:
        self._set("blackhole")

    def drop(self) -> None:
        self._set("drop")

    def heal(self) -> None:
        self._set("pass")

    def point_at(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        """Connections accepted from now on go to ``upstream_host:upstream_port`` (open ones stay where they go):
        a replacement process bound to a port of its own stays behind the proxy's address."""

        async def apply() -> None:
            self._upstream = (upstream_host, upstream_port)

        self._run(apply())

    def _set(self, mode: str, delay_s: float = 0.0) -> None:
        async def apply() -> None:
            self._mode, self._delay_s = mode, delay_s
            if mode in ("blackhole", "drop"):
                self._tainted = True
            if mode == "drop" or (mode == "pass" and self._tainted):
                self._close_all()
                self._tainted = False

        self._run(apply())

    def _run(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ the loop's side

    def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self._mode == "drop":
            client_w.close()
            return
        try:
            up_r, up_w = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_w.close()
            return
        self._writers |= {client_w, up_w}
        try:
            await asyncio.gather(self._pump(client_r, up_w), self._pump(up_r, client_w))
        finally:
            for writer in (client_w, up_w):
                self._writers.discard(writer)
                writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                if self._mode == "delay":
                    await asyncio.sleep(self._delay_s)
                if self._mode in ("blackhole", "drop") or writer.is_closing():
                    continue  # lost on the way
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
