"""``groupcoord demo`` prints the console's address while it runs; ``--console`` keeps it open at the end."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request

import pytest

from tests.processes import stop_processes

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # the demo's act one: worker processes, a minute of CPU


def test_the_demo_prints_the_console_and_keeps_it_open_with_the_flag(cli_env: dict[str, str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "demo", "--skip-stats", "--console", "--workers", "2", "--tasks", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env)
    seen: list[str] = []
    kept: re.Match[str] | None = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the demo's own deadlines end it if it never gets there
            seen.append(line)
            out = "".join(seen).replace("\n    ", " ")  # the narration wraps at 80 columns
            kept = re.search(r"the console stays open \(Ctrl-C to end\): (http\S+)", out)
            if kept:
                break
        assert kept is not None, out
        address = re.search(r"web console on (http://127\.0\.0\.1:\d+/\?token=\S+)", out)
        assert address is not None, out
        assert out.index("web console on") < out.index("the group is Stable")  # while the demo runs
        assert kept.group(1) == address.group(1)
        base, token = address.group(1).split("/?token=")
        groups = urllib.request.Request(f"{base}/groups", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(groups, timeout=30) as answer:
            page = answer.read().decode()
        assert answer.status == 200 and 'href="/group?id=demo"' in page
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        stop_processes([proc])
