"""``groupcoord demo``: the whole system on one machine, narrated.

Act 1: a coordinator (SQLite store) and worker processes form a group, take
tasks, lose a worker to SIGKILL and rebalance. Act 2: one group per load-aware
assignor, each with a hot member; workers report load, the Spark statistics job
turns the sample log into snapshots, each strategy moves tasks off the hot
member, and the demo prints and draws (PNG) the load per member before and
after. Exits 0 when every step checked out, 1 with a one-line reason otherwise
(including a strategy that should have relieved the hot member and did not).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from groupcoord.admin import AdminClient
from groupcoord.cli.common import STATS_EXTRA_HINT, missing_stats_extra
from groupcoord.cli.demo_console import keep_open, open_console
from groupcoord.cli.demo_load import act_two, session_ms, start_spark
from groupcoord.cli.narrate import DemoFailed, say, show_group, stable, subprocess_env, wait_for_group
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.process.load_reports import sample_sink
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.loadstats.sample_log import SampleLog
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["run_demo"]

DEMO_GROUP = "demo"


def _start_worker(address: str, name: str, env: dict[str, str], session: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "worker", "--group", DEMO_GROUP, "--coordinator", address,
         "--name", name, "--session-timeout-ms", str(session), "--heartbeat-interval-ms", str(session // 8)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            detail = {k: v for k, v in event.items() if k not in ("event", "worker", "member_id", "ts")}
            print(f"   [{name}] {event['event']:<8} {json.dumps(detail)}", flush=True)

    threading.Thread(target=pump, daemon=True).start()
    return proc


def act_one(address: str, admin: AdminClient, workers: int, tasks: int) -> None:
    """Worker processes form a group, one is SIGKILLed, the rest rebalance, then leave."""
    env = subprocess_env()
    task_ids = [f"task-{i}" for i in range(tasks)]
    say(f"task catalog of group '{DEMO_GROUP}': {' '.join(task_ids)}")
    admin.put_tasks(DEMO_GROUP, task_ids)
    say(f"starting {workers} worker processes (`groupcoord worker`), each printing its events as JSON")
    session = session_ms(3000)  # a SIGKILLed worker is noticed when it ends; longer on a loaded machine
    procs = [_start_worker(address, f"worker-{i}", env, session) for i in range(workers)]
    try:
        before = wait_for_group(admin, DEMO_GROUP, stable(workers, tasks), "group forms")
        say("the group is Stable: every task runs exactly once")
        show_group(admin, DEMO_GROUP)
        victim = procs[0]
        victim_id = next(m.member.member_id for m in before.members if m.member.client_id == "worker-0")
        say(f"killing worker-0 (pid {victim.pid}, member {victim_id}) with SIGKILL: no goodbye, "
            f"the coordinator notices when its {session / 1000:g} s session expires")
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        after = wait_for_group(admin, DEMO_GROUP, stable(workers - 1, tasks), "group rebalances after the kill")
        if victim_id in {m.member.member_id for m in after.members}:
            raise DemoFailed("the killed worker is still a member")
        say(f"rebalanced: generation {before.generation} -> {after.generation}, "
            f"the survivors run all {tasks} tasks")
        show_group(admin, DEMO_GROUP)
        say("stopping the other workers cleanly (they revoke their tasks and send LeaveGroup)")
        for proc in procs[1:]:
            proc.terminate()
        for proc in procs[1:]:
            proc.wait(20)
        wait_for_group(admin, DEMO_GROUP, lambda d: d.state == pb.EMPTY, "group empties")
        say("group is Empty again")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def plot_path(data_dir: str | None, plot: str | None) -> Path:
    """Where act two's PNG goes: ``--plot``, else the data directory, else the temp directory (the
    default data directory is deleted when the demo ends; the picture should outlive it)."""
    if plot:
        return Path(plot)
    return Path(data_dir or tempfile.gettempdir()) / "groupcoord-demo-load.png"


def run_demo(*, workers: int = 3, tasks: int = 8, data_dir: str | None = None, with_stats: bool = True,
             plot: str | None = None, console: bool = False) -> int:
    """Both acts against an in-process coordinator; 0 when every step checked out, 1 (2 for bad flags) otherwise."""
    if workers < 2:
        print("groupcoord demo: --workers must be at least 2 (one is killed)", file=sys.stderr)
        return 2
    missing = missing_stats_extra() if with_stats else None
    started = time.monotonic()
    try:
        with ExitStack() as stack:
            root = Path(data_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="groupcoord-demo-")))
            root.mkdir(parents=True, exist_ok=True)
            spark = None
            if with_stats and missing is None:
                say("starting local Spark for act two first, before this process runs any gRPC")
                spark, seconds = start_spark()
                stack.callback(spark.stop)
                print(f"   local Spark session started in {seconds:.1f}s", flush=True)
            store = SqliteStore(root / "groups.db")
            stack.callback(store.close)
            config = CoordinatorConfig(group_initial_rebalance_delay_ms=500, group_min_session_timeout_ms=1000)
            samples = SampleLog(root / "samples")
            stack.callback(samples.close)
            runtime = CoordinatorRuntime(config, store=store, on_load_report=sample_sink(samples))
            runtime.load()
            server = stack.enter_context(ServerThread(runtime))
            say(f"coordinator listening on {server.address} (data dir {root}, store {type(store).__name__})")
            admin = stack.enter_context(AdminClient(server.address))
            console_url = open_console(stack, server.address)
            act_one(server.address, admin, workers, tasks)
            if missing is not None:
                say(f"skipping act two (load statistics): {missing} is not installed; {STATS_EXTRA_HINT}")
            elif spark is not None:
                act_two(server.address, admin, root, samples, plot_path(data_dir, plot), spark)
            if console:
                keep_open(console_url)
        say(f"demo finished in {time.monotonic() - started:.1f}s")
        return 0
    except DemoFailed as failure:
        print(f"groupcoord demo: {failure}", file=sys.stderr)
        return 1
