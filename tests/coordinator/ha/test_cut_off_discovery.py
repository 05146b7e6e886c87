"""A coordinator cut off from ZooKeeper names no shard leader (issue 38, item 1).

Three ``groupcoord serve --sharded`` processes on a real ZooKeeper; the third reaches ZooKeeper
through a TCP proxy the test black-holes. Its view of the leaders is frozen at the cut, so it must
answer FindCoordinator with COORDINATOR_NOT_AVAILABLE for every shard until it has re-read them.
A real worker whose bootstrap list names the cut-off coordinator first (so every lookup round asks
it first) is in a group led by another coordinator, which the test SIGKILLs: the worker must reach
the shard's new leader within a lookup round of its election, while the cut lasts, with its
generation kept. Before the fix the cut-off coordinator went on naming the dead leader, and the
worker dialled it until its own session ran out.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import WorkerClient, WorkerConfig, WorkerState
from tests.chaos.proxy import FaultProxy
from tests.coordinator.ha.sharded import Cluster, call, find_many, until_answered
from tests.worker.test_e2e_grpc import Recorder
from tests.zookeeper_server import ZooKeeperServer, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.zookeeper]  # three coordinators, a worker, a cut: 25 s

SHARDS = 12
ZK_SESSION_S = 2.0
SESSION_MS = 30_000  # the worker's: far past the failover, so only a wrong address could make it re-join


@pytest.fixture
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


def one_group_per_shard() -> dict[int, str]:
    groups: dict[int, str] = {}
    i = 0
    while len(groups) < SHARDS:
        groups.setdefault(shard_of(f"g{i}", SHARDS), f"g{i}")
        i += 1
    return groups


def test_a_cut_off_coordinator_names_no_leader_and_workers_find_the_new_one(
        tmp_path: Path, zk: ZooKeeperServer) -> None:
    groups = one_group_per_shard()
    with FaultProxy(zk.port) as proxy, Cluster(tmp_path, zk, "/groupcoord/cut", shards=SHARDS,
                                               zk_session_s=ZK_SESSION_S) as cluster:
        a, b = cluster.start_many(2)
        c = cluster.start(zk_hosts=proxy.address)
        leaders = cluster.wait_balanced([a, b, c])
        shard = next(s for s, (leader, _) in sorted(leaders.items()) if leader == a)
        group = groups[shard]
        put = until_answered(lambda address: call(address, "PutTasks", pb.PutTasksRequest(
            group_id=group, tasks=[pb.Task(task_id="t1"), pb.Task(task_id="t2")])), c, group)
        assert isinstance(put, pb.PutTasksResponse) and put.error.code == pb.NONE, put
        worker = WorkerClient(WorkerConfig(
            group_id=group, coordinators=f"{c},{a},{b}", client_id="w", session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=200, rebalance_timeout_ms=10_000, retry_backoff_ms=20, retry_backoff_max_ms=200),
            Recorder())
        worker.start()
        try:
            assert worker.wait_until(lambda w: w.state is WorkerState.STABLE and w.coordinator_address == a, 30)
            generation = worker.generation

            proxy.blackhole()
            # within its session (kazoo suspends after two thirds of it without an answer), plus load
            wait_until(lambda: all(answer.error.code == pb.COORDINATOR_NOT_AVAILABLE
                                   for answer in find_many(c, list(groups.values()))),
                       30, f"{c}, cut off from ZooKeeper, naming no leader")
            cluster.proc_of(a).kill()
            cluster.proc_of(a).wait(10)

            named: list[tuple[str, int]] = []

            def new_leader_named() -> bool:
                answer = find_many(b, [group])[0]
                if answer.error.code == pb.NONE and answer.address != a:
                    named.append((answer.address, worker.coordinator_lookups))
                return bool(named)

            wait_until(new_leader_named, 30, f"a new leader for shard {shard} named by {b}")
            new_leader, lookups_then = named[0]
            assert worker.wait_until(lambda w: w.coordinator_address == new_leader
                                     and w.state is WorkerState.STABLE, 15), (
                f"the worker stayed at {worker.coordinator_address} while {b} named {new_leader}")
            # found by its next rounds, not after the cut: the rounds after the naming are the one in flight then
            # and those the new leader's own loading asks for (COORDINATOR_LOAD_IN_PROGRESS sends the worker to
            # look again; under load, loading takes a few of them): bounded, and far from a session's worth
            rounds = worker.coordinator_lookups - lookups_then
            assert rounds <= 10, (lookups_then, worker.coordinator_lookups)
            assert worker.generation == generation, "the worker re-joined: a rebalance from a coordinator fault"
            assert proxy.mode == "blackhole"  # all of this while the cut lasted
            # still cut off: still no leader named, and no stale hint either
            assert all(answer.error.code == pb.COORDINATOR_NOT_AVAILABLE
                       for answer in find_many(c, list(groups.values())))
            started = time.monotonic()
            proxy.heal()
            wait_until(lambda: find_many(c, [group])[0].address == new_leader, 30,
                       "the healed coordinator to name the new leader again")
            print(f"cut-off coordinator named the new leader {time.monotonic() - started:.2f}s after the heal")
        finally:
            worker.close()
