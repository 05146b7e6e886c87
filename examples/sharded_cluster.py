"""A sharded cluster on one machine: three coordinators, workers that find theirs, a kill, a fourth.

Needs a running ZooKeeper (docs/scaling.md, "Start ZooKeeper"). Starts three
``groupcoord serve --sharded`` processes on free ports, one worker per group (threaded
``WorkerClient`` and asyncio ``AsyncWorkerClient`` alternately), each given a bootstrap list that
leaves out its group's coordinator; prints ``cluster describe``; SIGKILLs the coordinator leading
the most groups, then starts a fourth; and checks after each step that every worker followed its
group with the same member id and generation, its listener hearing of no rebalance. Exits 0 when
they all did, 1 otherwise.

    python examples/sharded_cluster.py --zk 127.0.0.1:2181

The coordinators get a 3 s ZooKeeper session (default 10 s) so the kill is over quickly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from groupcoord.admin import AdminClient, ClusterView
from groupcoord.assignors import TaskReplica
from groupcoord.cli.cluster import cluster_as_dict, print_cluster
from groupcoord.errors import GroupCoordError
from groupcoord.worker import AsyncWorkerClient, WorkerClient, WorkerConfig, WorkerState


class Heard:
    """A listener that remembers what it heard: after the first assignment, anything is a rebalance."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        self.events.append(f"assigned {len(tasks)} task(s) in generation {generation}")

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        self.events.append("revoked")

    def on_lost(self, tasks: Sequence[TaskReplica]) -> None:
        self.events.append("lost")


def free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def wait(predicate: Callable[[], bool], timeout: float, what: str, detail: Callable[[], str] | None = None) -> float:
    """Seconds until ``predicate`` held (polled); SystemExit naming ``what`` (and ``detail()``) after ``timeout``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            more = f": {detail()}" if detail is not None else ""
            raise SystemExit(f"sharded_cluster: timed out after {timeout:.0f}s waiting for {what}{more}")
        time.sleep(0.05)
    return time.monotonic() - start


class Cluster:
    def __init__(self, zk: str, root: str, shards: int, workdir: Path) -> None:
        self.zk, self.root, self.shards, self.workdir = zk, root, shards, workdir
        self.coordinators: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> str:
        address = free_address()
        name = f"c{len(self.coordinators) + 1}"
        log = (self.workdir / f"{name}.log").open("wb")
        self.coordinators[address] = subprocess.Popen(
            [sys.executable, "-m", "groupcoord.cli", "serve", "--listen", address, "--advertise", address,
             "--data-dir", str(self.workdir / name), "--store", "zookeeper", "--zk", self.zk, "--zk-root", self.root,
             "--sharded", "--shards", str(self.shards), "--zk-session-timeout-s", "3",
             "--initial-rebalance-delay-ms", "0"], stdout=log, stderr=subprocess.STDOUT)
        return address

    def live(self) -> list[str]:
        return [a for a, p in self.coordinators.items() if p.poll() is None]

    def view(self) -> ClusterView | None:
        try:
            with AdminClient(",".join(self.live()), timeout_s=2) as admin:
                return admin.describe_whole_cluster()
        except GroupCoordError:  # not up yet
            return None

    def balanced(self) -> bool:
        """Every live coordinator leads shards and every shard has a live leader, as they all see it."""
        view, live = self.view(), self.live()
        if view is None or sorted(c.address for c in view.coordinators) != sorted(live):
            return False
        return all(c.shards_led > 0 for c in view.coordinators) and all(s.leader in live for s in view.shard_infos)

    def stop(self) -> None:
        for proc in self.coordinators.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.coordinators.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


class Members:
    """One member per group; asyncio ones on one event loop of their own thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.clients: dict[str, Any] = {}  # group -> WorkerClient | AsyncWorkerClient
        self.heard: dict[str, Heard] = {}
        self.identity: dict[str, tuple[str, int]] = {}

    def start(self, group: str, bootstrap: list[str], asyncio_client: bool) -> None:
        config = WorkerConfig(group_id=group, coordinators=tuple(bootstrap), client_id=f"w-{group}",
                              heartbeat_interval_ms=500, session_timeout_ms=10_000, retry_backoff_ms=50,
                              retry_backoff_max_ms=1_000)
        self.heard[group] = Heard()
        if asyncio_client:
            client = AsyncWorkerClient(config, self.heard[group])
            asyncio.run_coroutine_threadsafe(client.start(), self.loop).result(10)
            self.clients[group] = client
        else:
            self.clients[group] = WorkerClient(config, self.heard[group]).start()

    def stable(self) -> bool:
        return all(c.state is WorkerState.STABLE and c.assigned_tasks for c in self.clients.values())

    def at(self, leaders: dict[str, str]) -> bool:
        """Every member Stable at its group's coordinator."""
        return self.stable() and all(c.coordinator_address == leaders[g] for g, c in self.clients.items())

    def elsewhere(self, leaders: dict[str, str]) -> str:
        """The members not yet Stable at their group's coordinator, for a timeout's message."""
        late = [f"{g}: {c.state.value} at {c.coordinator_address} (coordinator {leaders.get(g)})"
                for g, c in self.clients.items()
                if not (c.state is WorkerState.STABLE and c.assigned_tasks and c.coordinator_address == leaders.get(g))]
        return "; ".join(late[:5]) + (f" (+{len(late) - 5} more)" if len(late) > 5 else "")

    def unchanged(self) -> list[str]:
        """What changed since ``identity`` was taken: nothing, when no member rebalanced."""
        changed = []
        for group, client in self.clients.items():
            if (client.member_id, client.generation) != self.identity[group] or len(self.heard[group].events) != 1:
                changed.append(f"{group}: {self.identity[group]} -> {(client.member_id, client.generation)}, "
                               f"heard {self.heard[group].events}")
        return changed

    def close(self) -> None:
        async def close_async() -> None:
            await asyncio.gather(*(c.close() for c in self.clients.values() if isinstance(c, AsyncWorkerClient)))

        for client in self.clients.values():
            if isinstance(client, WorkerClient):
                client.close()
        asyncio.run_coroutine_threadsafe(close_async(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)


def leaders_of(cluster: Cluster, groups: list[str]) -> dict[str, str]:
    with AdminClient(",".join(cluster.live())) as admin:
        return {entry.group_id: entry.address for entry in admin.find_coordinators(groups)}


def report(cluster: Cluster, members: Members, step: str, seconds: float) -> bool:
    view = cluster.view()
    assert view is not None
    print(f"\n== {step}: every worker at its group's coordinator after {seconds:.1f}s\n")
    print_cluster(cluster_as_dict(view))
    changed = members.unchanged()
    for line in changed:
        print(f"REBALANCED {line}")
    print(f"\n{len(members.clients) - len(changed)} of {len(members.clients)} member(s) kept member id, generation "
          "and tasks")
    return not changed


def run(args: argparse.Namespace, workdir: Path) -> int:
    cluster, members = Cluster(args.zk, args.zk_root, args.shards, workdir), Members()
    groups = [f"shop-{i}" for i in range(args.groups)]
    try:
        for _ in range(3):
            cluster.start()
        wait(cluster.balanced, 60, "three coordinators leading shards")
        with AdminClient(",".join(cluster.live())) as admin:
            for group in groups:
                admin.put_tasks(group, [f"{group}-task"])
        leaders = leaders_of(cluster, groups)
        for index, group in enumerate(groups):  # a bootstrap list without the group's coordinator
            members.start(group, [a for a in cluster.live() if a != leaders[group]], asyncio_client=index % 2 == 1)
        # asked again at each look: a shard may still move while the three settle
        seconds = wait(lambda: members.at(leaders_of(cluster, groups)), 60,
                       "every worker Stable at its group's coordinator",
                       lambda: members.elsewhere(leaders_of(cluster, groups)))
        leaders = leaders_of(cluster, groups)
        members.identity = {g: (c.member_id, c.generation) for g, c in members.clients.items()}
        ok = report(cluster, members, "three coordinators", seconds)

        busiest = max(cluster.live(), key=lambda a: list(leaders.values()).count(a))
        cluster.coordinators[busiest].send_signal(signal.SIGKILL)
        print(f"\n== SIGKILL {busiest} (it led {list(leaders.values()).count(busiest)} of the groups)")
        start = time.monotonic()
        wait(cluster.balanced, 60, "the live coordinators leading every shard")
        wait(lambda: members.at(leaders_of(cluster, groups)), 60, "every worker at its group's new coordinator",
             lambda: members.elsewhere(leaders_of(cluster, groups)))
        ok = report(cluster, members, "after the kill", time.monotonic() - start) and ok

        fourth = cluster.start()
        print(f"\n== a fourth coordinator: {fourth}")
        start = time.monotonic()
        wait(cluster.balanced, 60, "the fourth coordinator leading shards")
        wait(lambda: members.at(leaders_of(cluster, groups)), 60, "every worker at its group's coordinator",
             lambda: members.elsewhere(leaders_of(cluster, groups)))
        ok = report(cluster, members, "after the fourth joined", time.monotonic() - start) and ok
        return 0 if ok else 1
    finally:
        members.close()
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--zk", required=True, help="ZooKeeper HOST:PORT")
    parser.add_argument("--zk-root", default=f"/groupcoord/example-{int(time.time())}",
                        help="the cluster's ZooKeeper path (default: a new one per run)")
    parser.add_argument("--shards", type=int, default=12)
    parser.add_argument("--groups", type=int, default=12)
    args = parser.parse_args()
    # the workers log each move they follow as a warning ("NOT_COORDINATOR ... keeping tasks"): expected here
    logging.getLogger("groupcoord.worker").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="groupcoord-sharded-") as workdir:
        return run(args, Path(workdir))


if __name__ == "__main__":
    sys.exit(main())
