"""examples/asyncio_service.py as docs/asyncio.md runs it: two aiohttp services share the group's tasks,
``/assignment`` says who runs what, and SIGTERM stops one cleanly (its tasks move to the other)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from groupcoord.admin import AdminClient
from groupcoord.coordinator.rpc.server import ServerThread

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "asyncio_service.py"

pytest.importorskip("aiohttp")


def start(address: str, name: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """Start one service on a free port; returns it and its /assignment URL."""
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--coordinator", address, "--group", "shop", "--name", name, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("listening on "):
            return proc, line.split()[-1]
    raise AssertionError(f"{name} exited with {proc.wait()} before listening")


def assignment(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as answer:
        body: dict[str, Any] = json.load(answer)
        return body


def until(url: str, done: Any, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = assignment(url)
        if done(body):
            return body
        assert time.monotonic() < deadline, f"{url} never got there: {body}"
        time.sleep(0.1)


def test_two_services_share_the_tasks_and_one_stops_cleanly(server: ServerThread, cli_env: dict[str, str]) -> None:
    with AdminClient(server.address) as admin:
        admin.put_tasks("shop", ["orders-0", "orders-1", "orders-2", "orders-3"])
        procs: list[subprocess.Popen[str]] = []
        try:
            first, first_url = start(server.address, "svc-a", cli_env)
            procs.append(first)
            alone = until(first_url, lambda b: b["state"] == "Stable" and len(b["tasks"]) == 4)
            assert alone["tasks"] == ["orders-0#0", "orders-1#0", "orders-2#0", "orders-3#0"]

            second, second_url = start(server.address, "svc-b", cli_env)
            procs.append(second)
            shared = until(second_url, lambda b: b["state"] == "Stable" and len(b["tasks"]) == 2)
            mine = until(first_url, lambda b: b["generation"] == shared["generation"] and len(b["tasks"]) == 2)
            assert sorted(mine["tasks"] + shared["tasks"]) == alone["tasks"]

            second.send_signal(signal.SIGTERM)
            assert second.wait(30) == 0
            until(first_url, lambda b: b["state"] == "Stable" and len(b["tasks"]) == 4)
            group = admin.describe_group("shop")
            assert [m.member.client_id for m in group.members] == ["svc-a"]  # svc-b left, no session to wait out
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
