"""The embedding example (examples/embedded_worker.py; the README and docs/worker.md show its core) runs
against a real coordinator and leaves cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys

from groupcoord.admin import AdminClient
from groupcoord.coordinator.rpc.server import ServerThread
from tests.conftest import ROOT


def test_embedded_worker_example(server: ServerThread, cli_env: dict[str, str]) -> None:
    with AdminClient(server.address) as admin:
        admin.put_tasks("shop", ["orders-0", "orders-1"])
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "embedded_worker.py"), "--coordinator", server.address,
             "--group", "shop"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env,
        )
        try:
            assert proc.stdout is not None
            seen = set()
            for line in proc.stdout:
                if line.startswith("working on"):
                    seen.add(line.split()[2])
                if len(seen) == 2:
                    break
            assert seen == {"orders-0#0", "orders-1#0"}
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
            assert proc.returncode == 0
            admin.wait_for("shop", lambda d: not d.members, 10)
        finally:
            if proc.poll() is None:
                proc.kill()
