"""A console on its own event-loop thread in front of a real coordinator, and HTTP helpers."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from groupcoord.cli.console import plan_for
from groupcoord.console.serve import BackgroundConsole, ConsoleOptions
from groupcoord.coordinator.rpc.server import ServerThread

TOKEN = "console-test-token"


class ConsoleThread(BackgroundConsole):
    """The console on its own thread, with HTTP helpers that present the token."""

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
