"""A console on its own event-loop thread in front of a real coordinator, and HTTP helpers."""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any, Self

import pytest

from groupcoord.cli.console import plan_for
from groupcoord.console.serve import ConsoleOptions, RunningConsole, start_console
from groupcoord.coordinator.rpc.server import ServerThread

TOKEN = "console-test-token"


class ConsoleThread:
    """``start_console`` on a loop of its own; ``base`` is its address without the token."""

    def __init__(self, options: ConsoleOptions) -> None:
        self.options = options
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="console", daemon=True)
        self.running: RunningConsole | None = None

    def __enter__(self) -> Self:
        self._thread.start()
        self.running = asyncio.run_coroutine_threadsafe(start_console(self.options), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.running is not None
        asyncio.run_coroutine_threadsafe(self.running.stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def base(self) -> str:
        assert self.running is not None
        return self.running.url.split("?")[0].rstrip("/")

    def get(self, path: str, *, token: str | None = TOKEN, **headers: str) -> tuple[int, dict[str, str], str]:
        """(status, headers, body) of a GET, redirects not followed."""
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return _open(urllib.request.Request(self.base + path, headers=headers))

    def post(self, path: str, form: dict[str, str], **headers: str) -> tuple[int, dict[str, str], str]:
        body = urllib.parse.urlencode(form).encode()
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-www-form-urlencoded",
                   **headers}
        return _open(urllib.request.Request(self.base + path, data=body, headers=headers, method="POST"))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _open(request: urllib.request.Request) -> tuple[int, dict[str, str], str]:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def console_for(server: ServerThread, **options: Any) -> ConsoleThread:
    settings: dict[str, Any] = {"listen": "127.0.0.1:0", "coordinators": server.address, "access_token": TOKEN,
                                "planner": plan_for, **options}
    return ConsoleThread(ConsoleOptions(**settings))


@pytest.fixture
def console(server: ServerThread) -> Iterator[ConsoleThread]:
    with console_for(server) as running:
        yield running
