"""``groupcoord demo``: the whole system on one machine, narrated.

Act 1: a coordinator (SQLite store) and worker processes form a group, take
tasks, lose a worker to SIGKILL and rebalance. Act 2: workers report load, the
Spark statistics job turns the sample log into a snapshot, and groups running
each Pulsar assignor rebalance with it. Exits 0 when every step checked out,
1 with a one-line reason otherwise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["run_demo"]

DEMO_GROUP = "demo"


class DemoFailed(Exception):
    """A step did not reach its expected state in time."""


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def _describe(admin: Any, group: str) -> None:
    from groupcoord.cli.main import _print_describe, describe_as_dict

    _print_describe(describe_as_dict(admin.describe_group(group)))


def _wait(admin: Any, group: str, check: Callable[[pb.DescribeGroupResponse], bool], what: str,
          timeout: float = 60) -> pb.DescribeGroupResponse:
    try:
        response: pb.DescribeGroupResponse = admin.wait_for(group, check, timeout)
        return response
    except TimeoutError as error:
        raise DemoFailed(f"{what}: {error}") from None


def _stable(members: int, tasks: int) -> Callable[[pb.DescribeGroupResponse], bool]:
    def check(d: pb.DescribeGroupResponse) -> bool:
        return d.state == pb.STABLE and len(d.members) == members and sum(len(m.assigned) for m in d.members) == tasks

    return check


def _start_worker(address: str, name: str, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "worker", "--group", DEMO_GROUP, "--coordinator", address,
         "--name", name, "--session-timeout-ms", "2000", "--heartbeat-interval-ms", "250"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            detail = {k: v for k, v in event.items() if k not in ("event", "worker", "member_id")}
            print(f"   [{name}] {event['event']:<8} {json.dumps(detail)}", flush=True)

    threading.Thread(target=pump, daemon=True).start()
    return proc


def act_one(address: str, admin: Any, workers: int, tasks: int) -> None:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    task_ids = [f"task-{i}" for i in range(tasks)]
    say(f"task catalog of group '{DEMO_GROUP}': {' '.join(task_ids)}")
    admin.put_tasks(DEMO_GROUP, task_ids)
    say(f"starting {workers} worker processes (`groupcoord worker`), each printing its events as JSON")
    procs = [_start_worker(address, f"worker-{i}", env) for i in range(workers)]
    try:
        before = _wait(admin, DEMO_GROUP, _stable(workers, tasks), "group forms")
        say("the group is Stable: every task runs exactly once")
        _describe(admin, DEMO_GROUP)
        victim = procs[0]
        victim_id = next(m.member.member_id for m in before.members if m.member.client_id == "worker-0")
        say(f"killing worker-0 (pid {victim.pid}, member {victim_id}) with SIGKILL: no goodbye, "
            "the coordinator notices when its 2 s session expires")
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        after = _wait(admin, DEMO_GROUP, _stable(workers - 1, tasks), "group rebalances after the kill")
        if victim_id in {m.member.member_id for m in after.members}:
            raise DemoFailed("the killed worker is still a member")
        say(f"rebalanced: generation {before.generation} -> {after.generation}, "
            f"the survivors run all {tasks} tasks")
        _describe(admin, DEMO_GROUP)
        say("stopping the other workers cleanly (they revoke their tasks and send LeaveGroup)")
        for proc in procs[1:]:
            proc.terminate()
        for proc in procs[1:]:
            proc.wait(20)
        _wait(admin, DEMO_GROUP, lambda d: d.state == pb.EMPTY, "group empties")
        say("group is Empty again")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def run_demo(*, workers: int = 3, tasks: int = 8, data_dir: str | None = None, with_stats: bool = True) -> int:
    from coordinator.config import CoordinatorConfig
    from coordinator.coordinator import GroupCoordinator
    from coordinator.load_reports import attach_sample_log
    from coordinator.server import ServerThread
    from groupcoord.admin import AdminClient

    if workers < 2:
        print("groupcoord demo: --workers must be at least 2 (one is killed)", file=sys.stderr)
        return 2
    temp = None if data_dir else tempfile.TemporaryDirectory(prefix="groupcoord-demo-")
    root = Path(data_dir or temp.name)  # type: ignore[union-attr]
    root.mkdir(parents=True, exist_ok=True)
    store = _open_demo_store(root)
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=500, group_min_session_timeout_ms=1000)
    coordinator = GroupCoordinator(config, store=store)
    coordinator.load()
    samples = _open_sample_log(root)
    if samples is not None:
        attach_sample_log(coordinator, samples)
    started = time.monotonic()
    try:
        with ServerThread(coordinator) as server:
            say(f"coordinator listening on {server.address} (data dir {root}, store {type(store).__name__})")
            with AdminClient(server.address) as admin:
                act_one(server.address, admin, workers, tasks)
                if with_stats:
                    from groupcoord.cli.demo_load import act_two

                    act_two(server.address, admin, root, samples)
        say(f"demo finished in {time.monotonic() - started:.1f}s")
        return 0
    except DemoFailed as failure:
        print(f"groupcoord demo: {failure}", file=sys.stderr)
        return 1
    finally:
        if samples is not None:
            samples.close()
        store.close()
        if temp is not None:
            temp.cleanup()


def _open_demo_store(root: Path) -> Any:
    try:
        from coordinator.sqlite_store import SqliteStore
    except ImportError:
        from coordinator.store import MemoryStore

        return MemoryStore()
    return SqliteStore(root / "groups.db")


def _open_sample_log(root: Path) -> Any:
    try:
        from loadstats.sample_log import SampleLog
    except ImportError:
        return None
    return SampleLog(root / "samples")
