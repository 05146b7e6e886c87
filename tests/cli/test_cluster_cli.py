"""``groupcoord cluster describe`` and the cluster-wide ``groups list``: against a standalone coordinator
(one shard), against real sharded coordinators on a real ZooKeeper (each group's calls at its shard's
leader, every coordinator listed), with one coordinator down, and with bad addresses."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from groupcoord.admin import AdminClient
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.cli.test_cli import run, run_here
from tests.coordinator.ha.sharded import Cluster
from tests.processes import stop_processes
from tests.zookeeper_server import ZooKeeperServer, wait_until

SHARDS = 8


def test_a_standalone_coordinator_is_one_shard(server: ServerThread, capsys: pytest.CaptureFixture[str]) -> None:
    AdminClient(server.address).put_tasks("g1", ["t"])
    result = run_here(capsys, "cluster", "describe", "--coordinator", server.address, "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert (view["mode"], view["shards"], view["failed"], view["moves"]) == ("standalone", 1, {}, [])
    assert view["coordinators"] == [{"address": server.address, "shards_led": 1, "answered": True}]
    assert view["shard_infos"] == [{"shard": 0, "leader": server.address, "epoch": 0, "state": "active",
                                    "groups": 1, "members": 0}]
    table = run_here(capsys, "cluster", "describe", "--coordinator", server.address)
    assert table.returncode == 0 and "standalone, 1 shard(s), 1 coordinator(s), 1 group(s)" in table.stdout


def test_members_of_both_protocols_are_counted(server: ServerThread, capsys: pytest.CaptureFixture[str]) -> None:
    """One classic member (JoinGroup) and two consumer-protocol members (GroupHeartbeat, epoch 0): 3."""
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.GroupCoordinatorStub(channel)
        join = pb.JoinGroupRequest(group_id="classic", client_id="c", session_timeout_ms=30_000,
                                   rebalance_timeout_ms=5_000, protocols=["round-robin"])
        join.member_id = stub.JoinGroup(join, timeout=10).member_id  # MEMBER_ID_REQUIRED first
        assert stub.JoinGroup(join, timeout=10).error.code == pb.NONE
        for name in ("k1", "k2"):
            beat = stub.GroupHeartbeat(pb.GroupHeartbeatRequest(group_id="consumer", member_epoch=0, client_id=name,
                                                                session_timeout_ms=30_000), timeout=10)
            assert beat.error.code == pb.NONE, beat.error.message
    result = run_here(capsys, "cluster", "describe", "--coordinator", server.address, "--json")
    assert result.returncode == 0, result.stderr
    assert [(s["groups"], s["members"]) for s in json.loads(result.stdout)["shard_infos"]] == [(2, 3)]


@pytest.mark.parametrize(("address", "status", "message"), [
    ("nohost", 2, "is not HOST:PORT"),
    ("127.0.0.1:1", 1, "no coordinator reached: 127.0.0.1:1 (connection refused)"),
])
def test_a_bad_or_unreachable_address_is_one_line(address: str, status: int, message: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for command in (("cluster", "describe"), ("groups", "list")):
        result = run_here(capsys, *command, "--coordinator", address)
        assert result.returncode == status and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and not result.stdout


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with ZooKeeperServer() as zk:
        # a long ZooKeeper session: a killed coordinator stays listed long enough to be seen down
        made = Cluster(tmp_path, zk, "/groupcoord/cli", shards=SHARDS, zk_session_s=20.0)
        try:
            yield made
        finally:
            stop_processes(made.procs)


@pytest.mark.slow
@pytest.mark.heavy  # three coordinator processes on ZooKeeper, one killed: 26 s of make test's 229 s
def test_groups_of_every_coordinator_are_listed_and_a_dead_one_is_named(
        cluster: Cluster, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = cluster.start(), cluster.start()
    leaders = cluster.wait_balanced([a, b])
    groups = [f"g{i}" for i in range(8)]
    on_b = [g for g in groups if leaders[shard_of(g, SHARDS)][0] == b]
    assert on_b and len(on_b) < len(groups), "groups on both coordinators: a weak test otherwise"
    with AdminClient(a) as admin:  # only a given: each group's calls go to its shard's leader
        for group in groups:
            admin.put_tasks(group, ["t0", "t1"])
        assert all(admin.describe_group(g).group_id == g for g in groups)
    with grpc.insecure_channel(b) as channel:  # b alone lists only its own shards' groups
        own = pb_grpc.GroupAdminStub(channel).ListGroups(pb.ListGroupsRequest(), timeout=5)
    assert sorted(g.group_id for g in own.groups) == sorted(on_b)

    listed = run(cli_env, "groups", "list", "--coordinator", a, "--json")
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    assert sorted(g["group"] for g in json.loads(listed.stdout)) == groups
    described = run(cli_env, "cluster", "describe", "--coordinator", a, "--json")
    assert described.returncode == 0, described.stderr
    view = json.loads(described.stdout)
    assert view["mode"] == "sharded" and view["shards"] == SHARDS and not view["failed"]
    assert sum(s["groups"] for s in view["shard_infos"]) == len(groups)  # each shard counted by its leader
    assert {c["address"]: c["shards_led"] for c in view["coordinators"]} == {a: SHARDS // 2, b: SHARDS // 2}

    # in this process from here: b stays listed only for its ZooKeeper session, and starting a CLI process
    # costs seconds on a loaded machine
    cluster.procs[1].send_signal(signal.SIGKILL)
    cluster.procs[1].wait(10)
    listed = run_here(capsys, "groups", "list", "--coordinator", a)
    assert listed.returncode == 0, (listed.stderr, cluster.log_of(a)[-3000:])  # a's log: why it did not answer
    assert f"coordinator {b} did not answer" in listed.stderr and len(listed.stderr.splitlines()) == 1
    assert sorted(line.split("\t")[0] for line in listed.stdout.splitlines()) == sorted(set(groups) - set(on_b))
    described = run_here(capsys, "cluster", "describe", "--coordinator", f"{b},{a}")  # b first: the next is asked
    assert described.returncode == 0, described.stderr
    assert f"coordinator {b} did not answer" in described.stderr
    row = next(line for line in described.stdout.splitlines() if line.startswith(b))
    assert row.split()[-1] == "no"
    assert run_here(capsys, "groups", "list", "--coordinator", b).returncode == 1  # nobody answers there
    wait_until(lambda: b not in run_here(capsys, "cluster", "describe", "--coordinator", a).stdout, 60,
               "b's session to end and a to lead every shard")


@pytest.mark.slow
def test_the_admin_client_reaches_a_coordinator_it_was_not_given_once_its_bootstrap_address_is_gone(
        cluster: Cluster) -> None:
    a, b = cluster.start(), cluster.start()
    cluster.wait_balanced([a, b])
    groups = [f"learn{i}" for i in range(8)]
    with AdminClient(a, timeout_s=10) as admin:  # the bootstrap list: a alone
        for group in groups:
            admin.put_tasks(group, ["t0"])
        assert admin.describe_cluster().coordinators  # DescribeCluster names b: learnt
        assert b in admin.known.learnt and admin.addresses == [a]
        proc = cluster.proc_of(a)
        proc.send_signal(signal.SIGTERM)  # a hands its shards over to b and goes away
        proc.wait(30)
        wait_until(lambda: set(cluster.leaders(b).values()) == {(b, e) for _, e in cluster.leaders(b).values()},
                   30, "b leads every shard")
        described = {g: admin.describe_group(g).group_id for g in groups}  # a refuses: b, never given, answers
        assert described == {g: g for g in groups}
        assert [g.group_id for g in admin.list_groups()] == sorted(groups)
        assert admin.answered_by == b
