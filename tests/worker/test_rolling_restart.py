"""A rolling restart of 5 real worker processes: static members keep the generation and the
assignment; the same restart with dynamic members rebalances."""

from __future__ import annotations

import subprocess
import sys

import pytest

from groupcoord.admin import AdminClient
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.processes import stop_processes

TASKS = [f"t{i}" for i in range(10)]


def start(address: str, group: str, name: str, env: dict[str, str], static: bool) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "groupcoord.cli", "worker", "--group", group, "--coordinator", address,
               "--name", name, "--session-timeout-ms", "10000", "--heartbeat-interval-ms", "200",
               "--rebalance-timeout-ms", "5000"]
    if static:
        command += ["--instance-id", name]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, env=env)


def assignment(described: pb.DescribeGroupResponse) -> dict[str, list[str]]:
    """Who runs what, by client name (the same across restarts for both kinds of member)."""
    return {m.member.client_id: sorted(t.task_id for t in m.assigned) for m in described.members}


def settled(names: list[str], replaced: dict[str, str]) -> object:
    def check(d: pb.DescribeGroupResponse) -> bool:
        ids = {m.member.client_id: m.member.member_id for m in d.members}
        return (d.state == pb.STABLE and sorted(ids) == sorted(names)
                and sorted(t.task_id for m in d.members for t in m.assigned) == sorted(TASKS)
                and all(ids.get(name) != old for name, old in replaced.items()))
    return check


def rolling_restart(server: ServerThread, env: dict[str, str], group: str, static: bool) -> tuple[int, int, bool]:
    """Restart each of 5 workers in turn (SIGTERM, wait for exit, start again); returns the generation
    before and after, and whether every worker ended up with the tasks it had before."""
    admin = AdminClient(server.address)
    admin.put_tasks(group, TASKS)
    names = [f"w{i}" for i in range(5)]
    procs = {name: start(server.address, group, name, env, static) for name in names}
    try:
        before = admin.wait_for(group, settled(names, {}), 60)
        for name in names:
            old_member = next(m.member.member_id for m in admin.describe_group(group).members
                              if m.member.client_id == name)
            procs[name].terminate()
            procs[name].wait(15)
            procs[name] = start(server.address, group, name, env, static)
            admin.wait_for(group, settled(names, {name: old_member}), 60)
        after = admin.describe_group(group)
        return before.generation, after.generation, assignment(after) == assignment(before)
    finally:
        stop_processes(procs.values())
        admin.close()


@pytest.mark.slow
def test_a_rolling_restart_of_static_workers_keeps_generation_and_assignment(
    server: ServerThread, cli_env: dict[str, str]
) -> None:
    before, after, same = rolling_restart(server, cli_env, "static-roll", static=True)
    assert after == before, f"static members rebalanced: generation {before} -> {after}"
    assert same


@pytest.mark.slow
def test_the_same_restart_with_dynamic_workers_rebalances(server: ServerThread, cli_env: dict[str, str]) -> None:
    before, after, _ = rolling_restart(server, cli_env, "dynamic-roll", static=False)
    assert after >= before + 5  # at least one rebalance per restart (leave, then join)
