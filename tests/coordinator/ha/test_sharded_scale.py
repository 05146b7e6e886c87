"""Sharding at scale: 3 ``groupcoord serve --sharded`` processes, 64 shards, 100 groups of 2 real
worker members each (4 member-host processes, ``tests/chaos/member_host.py``), a real ZooKeeper.

Each test brings the fleet to rest (every group Stable with both members and both tasks, the
ownership log agreeing), notes each group's coordinator and generation, does one thing to one
coordinator, and then checks what members saw: the groups of the other shards kept answering at
the same place with the same generation; the moved groups are Stable again at a new leader with
the same generation (no rebalance: nobody re-joined, no task was revoked or lost); and the
ownership checker of ``tests/chaos`` finds no task on two workers at once.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.chaos.cluster import env_with_tree
from tests.chaos.environments import LiveOwners
from tests.chaos.ownership import OwnershipLog, check
from tests.chaos.proxy import FaultProxy
from tests.coordinator.ha.sharded import Cluster, call, find_many, until_answered
from tests.deadlines import Deadline
from tests.processes import stop_processes
from tests.zookeeper_server import ZooKeeperServer, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.heavy]

SHARDS = 64
GROUPS = [f"g{i}" for i in range(100)]
HOSTS = 4  # member-host processes; group i has a member in hosts i % 4 and (i + 1) % 4
TASKS = 2
# a coordinator paused over half its ZooKeeper session drops every shard: 4 s keeps the 4 xdist workers'
# scheduling stalls on 2 cores under that, so only the fault moves shards
ZK_SESSION_S = 4.0
SESSION_MS = 10_000  # the members'
HEARTBEAT_MS = 1_000
REBALANCE_MS = 10_000
BUDGET_S = 120  # bringing the fleet to rest or the shards to balance: 4 such tests at once on 2 cores, shared


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@dataclass(frozen=True)
class Seen:
    """One group as its coordinator describes it."""

    address: str
    state: int
    generation: int
    members: int
    tasks: tuple[tuple[str, str], ...]  # (task, worker name)


@dataclass
class Fleet:
    """The coordinators, the member hosts and their ownership log."""

    cluster: Cluster
    log_path: Path
    hosts: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _channels: dict[str, grpc.Channel] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.log_path.touch()
        self.live = LiveOwners(self.log_path)

    def start_hosts(self) -> None:
        addresses = ",".join(self.cluster.addresses)
        for h in range(HOSTS):
            mine = [g for i, g in enumerate(GROUPS) if h in (i % HOSTS, (i + 1) % HOSTS)]
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
            err = open(self.log_path.with_name(f"host{h}.err"), "w")  # noqa: SIM115 - the child's stderr
            try:
                self.hosts.append(subprocess.Popen(
                    [sys.executable, "-m", "tests.chaos.member_host", "--coordinator", addresses, "--host", f"h{h}",
                     "--groups", ",".join(mine), "--session-timeout-ms", str(SESSION_MS),
                     "--heartbeat-interval-ms", str(HEARTBEAT_MS), "--rebalance-timeout-ms", str(REBALANCE_MS)],
                    stdout=fd, stderr=err, env=env_with_tree()))
            finally:
                os.close(fd)
                err.close()

    def describe(self, address: str, group: str, timeout: float = 5.0) -> pb.DescribeGroupResponse | None:
        if address not in self._channels:
            self._channels[address] = grpc.insecure_channel(address)
        try:
            answer: pb.DescribeGroupResponse = pb_grpc.GroupAdminStub(self._channels[address]).DescribeGroup(
                pb.DescribeGroupRequest(group_id=group), timeout=timeout)
        except grpc.RpcError:
            return None
        return answer

    def seen(self, group: str, address: str) -> Seen | None:
        """The group at ``address`` if that coordinator answers for it, else None."""
        d = self.describe(address, group)
        if d is None or d.error.code != pb.NONE:
            return None
        tasks = tuple(sorted((t.task_id, m.member.client_id) for m in d.members for t in m.assigned))
        return Seen(address, d.state, d.generation, len(d.members), tasks)

    def locate(self, bootstrap: list[str]) -> dict[str, str]:
        """group -> its coordinator's address (groups of leaderless shards left out)."""
        for address in bootstrap:
            try:
                found = find_many(address, GROUPS)
            except grpc.RpcError:
                continue
            return {f.group_id: f.address for f in found if f.error.code == pb.NONE}
        return {}

    def at_rest(self, group: str, seen: Seen | None) -> bool:
        if seen is None or seen.state != pb.STABLE or seen.members != 2:
            return False
        if sorted(t for t, _ in seen.tasks) != [f"{group}-t{i}" for i in range(TASKS)]:
            return False
        owners = self.live.owners
        return all(owners.get(task, set()) == {worker} for task, worker in seen.tasks)

    def rest(self, live: list[str], timeout: float = BUDGET_S) -> dict[str, Seen]:
        """Wait until every group is at rest at its shard's leader; returns what each looks like."""
        state: dict[str, Seen] = {}

        def done() -> bool:
            where = self.locate(live)
            self.live.refresh()
            for group in GROUPS:
                if group in state and state[group].address == where.get(group):
                    continue
                seen = self.seen(group, where[group]) if group in where else None
                if not self.at_rest(group, seen):
                    return False
                assert seen is not None
                state[group] = seen
            return True

        wait_until(done, timeout, "every group Stable with both members and tasks, as the log says")
        return state

    def events_since(self, since: float, kinds: tuple[str, ...] = ("joined", "revoked", "lost")) -> list[str]:
        """The members' lines of these kinds logged at or after ``since`` (wall clock): a rebalance shows here."""
        lines = self.log_path.read_text().splitlines()
        return [line for line in lines
                if line.strip() and (e := json.loads(line))["ts"] >= since and e["event"] in kinds]

    def overlaps(self) -> list[str]:
        report = check(OwnershipLog.read(self.log_path), session_s=SESSION_MS / 1000,
                       rebalance_timeout_s=REBALANCE_MS / 1000, heartbeat_s=HEARTBEAT_MS / 1000)
        return [str(o) for o in report.overlaps if not o.allowed]

    def close(self) -> None:
        for host in self.hosts:  # nothing left to check: no graceful leave of 200 members
            host.kill()
            host.wait(10)
        for channel in self._channels.values():
            channel.close()


def bring_up(cluster: Cluster, fleet: Fleet, coordinators: list[str]) -> dict[str, Seen]:
    """Balance the shards, put each group's tasks at its leader, start the members; wait for rest."""
    cluster.wait_balanced(coordinators, BUDGET_S)
    where = fleet.locate(coordinators)
    assert sorted(where) == sorted(GROUPS), "every shard has a leader once balanced"
    for group in GROUPS:  # as a client does: a shard may move between the lookup and the call (a coordinator's
        # ZooKeeper connection SUSPENDED at load 40-60 answered PutTasks NOT_COORDINATOR right after balancing)
        put = pb.PutTasksRequest(group_id=group, tasks=[pb.Task(task_id=f"{group}-t{i}") for i in range(TASKS)])
        answer = until_answered(lambda address, put=put: call(address, "PutTasks", put), coordinators[0], group)
        assert isinstance(answer, pb.PutTasksResponse) and answer.error.code == pb.NONE, answer
    fleet.start_hosts()
    return fleet.rest(coordinators)


@pytest.fixture
def cluster(tmp_path: Path, zk: ZooKeeperServer, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with Cluster(tmp_path, zk, f"/groupcoord/{request.node.name}", shards=SHARDS, zk_session_s=ZK_SESSION_S) as made:
        yield made


@pytest.fixture
def fleet(cluster: Cluster, tmp_path: Path) -> Iterator[Fleet]:
    made = Fleet(cluster, tmp_path / "ownership.log")
    try:
        yield made
    finally:
        made.close()


class Watch:
    """Asks every group of ``groups`` at its coordinator, over and over on a thread, until stopped; keeps
    the answers that were not the same Stable group at the same place with the same generation."""

    def __init__(self, fleet: Fleet, before: dict[str, Seen], groups: list[str]) -> None:
        self.bad: list[str] = []
        self.rounds = 0
        self._stop = threading.Event()

        def run() -> None:
            while not self._stop.is_set():
                for group in groups:
                    seen = fleet.seen(group, before[group].address)
                    if seen is None or seen.state != pb.STABLE or seen.generation != before[group].generation:
                        self.bad.append(f"{group}: {seen}")
                self.rounds += 1

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(30)
        return self.bad


def assert_no_rebalance(fleet: Fleet, before: dict[str, Seen], after: dict[str, Seen], since: float) -> None:
    changed = {g: (before[g].generation, after[g].generation) for g in GROUPS
               if before[g].generation != after[g].generation}
    assert not changed, f"generations changed (a rebalance): {changed}"
    assert fleet.events_since(since) == [], "members re-joined or stopped tasks"
    assert fleet.overlaps() == []


def stable_again(fleet: Fleet, before: dict[str, Seen], groups: list[str], live: list[str],
                 began: float) -> tuple[Callable[[], bool], dict[str, float]]:
    """A predicate: every group of ``groups`` Stable with its generation at a coordinator of ``live``;
    and the seconds from ``began`` (monotonic) at which each was first seen so."""
    back: dict[str, float] = {}

    def done() -> bool:
        where = fleet.locate(live)
        for group in groups:
            if group not in back and where.get(group) in live:
                seen = fleet.seen(group, where[group])
                if seen is not None and seen.state == pb.STABLE and seen.generation == before[group].generation:
                    back[group] = time.monotonic() - began
        return len(back) == len(groups)

    return done, back


def test_a_killed_coordinator_pauses_only_its_shards_groups(cluster: Cluster, fleet: Fleet) -> None:
    a, b, c = cluster.start_many(3)
    before = bring_up(cluster, fleet, [a, b, c])
    on_c = [g for g in GROUPS if before[g].address == c]
    others = [g for g in GROUPS if before[g].address != c]
    assert on_c and others
    watch = Watch(fleet, before, others)
    since, killed = time.time(), time.monotonic()
    cluster.proc_of(c).kill()
    done, back = stable_again(fleet, before, on_c, [a, b], killed)
    wait_until(done, SESSION_MS / 1000, "every group of the killed coordinator Stable again within its session")
    assert watch.stop() == [], "a group of another shard paused or changed"
    assert watch.rounds >= 1
    after = fleet.rest([a, b])
    assert all(after[g].address == before[g].address for g in others)
    assert_no_rebalance(fleet, before, after, since)
    print(f"SIGKILL: {len(on_c)} groups moved, Stable again after {max(back.values()):.2f}s at most; "
          f"{len(others)} others asked {watch.rounds} times each")


def test_a_fourth_coordinator_takes_shards_without_a_rebalance(cluster: Cluster, fleet: Fleet) -> None:
    a, b, c = cluster.start_many(3)
    before = bring_up(cluster, fleet, [a, b, c])
    since = time.time()
    d = cluster.start()
    cluster.wait_balanced([a, b, c, d], BUDGET_S)
    after = fleet.rest([a, b, c, d])
    moved = [g for g in GROUPS if after[g].address == d]
    assert moved, "no group moved to the fourth coordinator: a weak test"
    assert all(before[g].address != d for g in GROUPS)
    assert_no_rebalance(fleet, before, after, since)
    print(f"join: {len(moved)} groups moved to the fourth coordinator")


def shown_in(cluster: Cluster, address: str, shard: int) -> bool:
    """Whether ``address``'s view of the cluster names a leader for ``shard``."""
    return shard in cluster.leaders(address)


def test_a_coordinator_paused_past_its_zookeeper_session_serves_nothing_it_lost(
        cluster: Cluster, fleet: Fleet) -> None:
    a, b, c = cluster.start_many(3)
    before = bring_up(cluster, fleet, [a, b, c])
    on_b = [g for g in GROUPS if before[g].address == b]
    since = time.time()
    cluster.proc_of(b).send_signal(signal.SIGSTOP)
    try:
        done, _ = stable_again(fleet, before, on_b, [a, c], time.monotonic())
        wait_until(done, SESSION_MS / 1000, "b's groups Stable at a or c")
        taken = cluster.leaders(a)
        assert len(taken) == SHARDS and b not in {leader for leader, _ in taken.values()}
        where = fleet.locate([a])
        members = {g: fleet.describe(where[g], g) for g in on_b}  # the groups as their new leaders hold them
    finally:
        cluster.proc_of(b).send_signal(signal.SIGCONT)
    # b, resumed, before it looked at ZooKeeper again: no answer for a group it lost, no write
    for group, described in members.items():
        assert described is not None and described.error.code == pb.NONE, described
        member = described.members[0].member
        beat = call(b, "Heartbeat", pb.HeartbeatRequest(group_id=group, member_id=member.member_id,
                                                         generation=described.generation))
        join = call(b, "JoinGroup", pb.JoinGroupRequest(
            group_id=group, member_id="", client_id="intruder", session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS, protocols=["round-robin"]))
        for answer in (beat, join):
            code = answer.error.code  # type: ignore[attr-defined]
            if code in (pb.NOT_COORDINATOR, pb.COORDINATOR_NOT_AVAILABLE, pb.COORDINATOR_LOAD_IN_PROGRESS):
                continue  # b does not act for the group
            # b answered for the group: only after winning its shard back in a newer election. a's view
            # may not show the shard's leader yet (the shards are moving back to b), so wait for it; by
            # then the shard may even have moved on, but never with the epoch b was fenced at.
            shard = shard_of(group, SHARDS)
            wait_until(functools.partial(shown_in, cluster, a, shard), BUDGET_S, f"a leader for shard {shard} in a's view")
            assert cluster.leaders(a)[shard][1] > taken[shard][1], (group, answer)
    assert "stops leading shards" in cluster.log_of(b)
    cluster.wait_balanced([a, b, c], BUDGET_S)
    after = fleet.rest([a, b, c])
    assert_no_rebalance(fleet, before, after, since)


def logged_after(log: str, text: str, since: float) -> float | None:
    """The wall-clock time of the first line of ``log`` with ``text`` logged at or after ``since`` (logging's
    default time stamp: local time to the millisecond, this machine's clock)."""
    for line in log.splitlines():
        if text in line:
            try:
                at = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            except ValueError:
                continue
            if at >= since - 0.001:  # the stamp is cut to the millisecond
                return at
    return None


def test_a_coordinator_cut_off_from_zookeeper_stops_acting_and_others_take_over(
        cluster: Cluster, fleet: Fleet, zk: ZooKeeperServer) -> None:
    with FaultProxy(zk.port) as proxy:
        a, b = cluster.start_many(2)
        c = cluster.start(zk_hosts=proxy.address)
        before = bring_up(cluster, fleet, [a, b, c])
        on_c = [g for g in GROUPS if before[g].address == c]
        assert on_c
        since, cut = time.time(), time.monotonic()
        proxy.blackhole()
        stopped: dict[str, float] = {}

        def c_answers_none() -> bool:
            for group in on_c:
                if group not in stopped:
                    answer = fleet.describe(c, group)
                    if answer is not None and answer.error.code == pb.NOT_COORDINATOR:
                        stopped[group] = time.monotonic() - cut
            return len(stopped) == len(on_c)

        # within its ZooKeeper session, a quiet machine's figure: the probe's rounds (a call per group) and c's
        # own threads run late on a loaded one, so this is a hang guard; the order is checked from the logs below
        probe = Deadline(ZK_SESSION_S + 1.0)
        while not c_answers_none():
            assert not probe.passed(), f"the cut-off coordinator still acted for its shards after {probe.elapsed():.1f}s"
            time.sleep(0.05)
        done, back = stable_again(fleet, before, on_c, [a, b], cut)
        wait_until(done, SESSION_MS / 1000, "c's groups Stable at a or b")
        after = fleet.rest([a, b])
        assert all(after[g].address in (a, b) for g in GROUPS)
        assert_no_rebalance(fleet, before, after, since)
        # what keeps a group off two coordinators: c stopped acting before a or b led any shard it had
        c_stopped = logged_after(cluster.log_of(c), "stops leading shards", since)
        shards_of_c = {shard_of(g, SHARDS) for g in on_c}
        taken = [at for x in (a, b) for shard in shards_of_c
                 for at in [logged_after(cluster.log_of(x), f"leads shard {shard} (epoch", since)] if at is not None]
        assert c_stopped is not None and taken and c_stopped < min(taken), (c_stopped, sorted(taken)[:3])
        print(f"ZooKeeper cut: c stopped acting after {c_stopped - since:.2f}s by its log (answered so after "
              f"{max(stopped.values()):.2f}s), a or b led its first shard after {min(taken) - since:.2f}s; its "
              f"{len(on_c)} groups Stable elsewhere after {max(back.values()):.2f}s at most")
        proxy.heal()
        cluster.wait_balanced([a, b, c], BUDGET_S)
        stop_processes(cluster.procs)  # while c still reaches ZooKeeper: it leaves at once
