"""A worker process killed with SIGKILL: its session expires and its tasks go to the others."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading

import pytest

from groupcoord.admin import AdminClient
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.processes import stop_processes

G = "killed"


@pytest.mark.slow
def test_sigkilled_worker_tasks_move_to_the_survivors(server: ServerThread, cli_env: dict[str, str]) -> None:
    admin = AdminClient(server.address)
    tasks = [f"t{i}" for i in range(6)]
    admin.put_tasks(G, tasks)
    procs: list[subprocess.Popen[str]] = []
    lines: dict[str, list[dict[str, object]]] = {}

    def pump(name: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines[name].append(json.loads(line))

    try:
        for i in range(3):
            name = f"w{i}"
            proc = subprocess.Popen(
                [sys.executable, "-m", "groupcoord.cli", "worker", "--group", G, "--coordinator", server.address,
                 "--name", name, "--session-timeout-ms", "1500", "--heartbeat-interval-ms", "100"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cli_env,
            )
            procs.append(proc)
            lines[name] = []
            threading.Thread(target=pump, args=(name, proc), daemon=True).start()

        def stable_with(n: int) -> object:
            def check(d: pb.DescribeGroupResponse) -> bool:
                return (d.state == pb.STABLE and len(d.members) == n
                        and sorted(t.task_id for m in d.members for t in m.assigned) == tasks)
            return check

        before = admin.wait_for(G, stable_with(3), 60)
        victim = procs[0]
        victim_member = next(m.member.member_id for m in before.members if m.member.client_id == "w0")
        victim_tasks = {t.task_id for m in before.members if m.member.member_id == victim_member for t in m.assigned}
        assert victim_tasks
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        after = admin.wait_for(G, stable_with(2), 30)
        assert after.generation > before.generation
        assert victim_member not in {m.member.member_id for m in after.members}
        survivors_tasks = {t.task_id for m in after.members for t in m.assigned}
        assert victim_tasks <= survivors_tasks
        # the survivors' own event streams say the same
        def last_assigned(name: str) -> list[str]:
            assigned = [e for e in lines[name] if e["event"] == "assigned"]
            return list(assigned[-1]["tasks"]) if assigned and assigned[-1]["generation"] == after.generation else []

        admin.wait_for(G, lambda d: all(last_assigned(n) for n in ("w1", "w2")), 10)
        assert sorted(last_assigned("w1") + last_assigned("w2")) == tasks
    finally:
        stop_processes(procs)
        admin.close()
