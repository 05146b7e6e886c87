"""A neighbour's read-only nodes under the root stop the start with one line (issue 38, item 5),
against a real ZooKeeper. Before, the start-up check passed (nobody else could *change* the nodes)
and the election failed on "NoAuthError" for ever."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from groupcoord.cli import main
from groupcoord.coordinator.ha.election import connect
from groupcoord.coordinator.ha.zk_rights import C, D, R, W, check_rights, describe_acl, missing
from tests.zookeeper_server import ZooKeeperServer

WORLD = {("world", "anyone")}


def test_only_rights_granted_to_us_or_to_anyone_count() -> None:
    read_only = [make_acl("world", "anyone", read=True), make_digest_acl("neighbour", "pw", all=True)]
    assert missing(read_only, WORLD, R | W) == W
    assert missing(read_only, WORLD, R) == 0
    ours = make_digest_acl("groupcoord", "pw", all=True)
    assert missing([ours], WORLD | {(ours.id.scheme, ours.id.id)}, R | W | C | D) == 0
    assert missing([ours], WORLD, C) == C  # an identity we do not hold
    assert missing([make_acl("ip", "10.0.0.1", all=True)], WORLD, W) == 0  # cannot tell from here: not refused
    assert describe_acl(read_only[:1]) == "world:anyone=r"


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def neighbour(zk: ZooKeeperServer) -> Iterator[KazooClient]:
    client = connect(zk.hosts, session_timeout=6.0)
    client.add_auth("digest", "neighbour:pw")
    try:
        yield client
    finally:
        client.stop()
        client.close()


def read_only() -> list[object]:
    return [make_acl("world", "anyone", read=True), make_digest_acl("neighbour", "pw", all=True)]


def serve(zk: ZooKeeperServer, root: str, tmp_path: Path, *extra: str) -> int:
    return main(["serve", "--store", "zookeeper", "--zk", zk.hosts, "--zk-root", root, "--zk-session-timeout-s", "4",
                 "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), *extra])


@pytest.mark.zookeeper
@pytest.mark.slow
def test_read_only_nodes_made_by_a_neighbour_stop_the_start_with_one_line(
        zk: ZooKeeperServer, neighbour: KazooClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = f"/ro-{uuid.uuid4().hex[:8]}/groupcoord"
    neighbour.create(root, b"", acl=read_only(), makepath=True)
    for name in ("election", "election/epoch", "election/leader"):
        neighbour.create(f"{root}/{name}", b'{"address": "10.9.9.9:9400"}', acl=read_only())
    assert serve(zk, root, tmp_path) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"znode {root} exists with ACL world:anyone=r, digest:neighbour:" in lines[0]
    assert "lacks c of the c it needs" in lines[0]

    # the root opened, the epoch still read-only: named next; then the hand-made leader node
    neighbour.set_acls(root, OPEN_ACL_UNSAFE)
    neighbour.set_acls(f"{root}/election", OPEN_ACL_UNSAFE)
    assert serve(zk, root, tmp_path) == 2
    assert f"znode {root}/election/epoch exists with ACL world:anyone=r" in capsys.readouterr().err
    neighbour.set_acls(f"{root}/election/epoch", OPEN_ACL_UNSAFE)
    assert serve(zk, root, tmp_path) == 2
    assert f"znode {root}/election/leader is a persistent node" in capsys.readouterr().err


@pytest.mark.zookeeper
@pytest.mark.slow
def test_a_sharded_coordinator_names_the_shard_node_it_may_not_write(
        zk: ZooKeeperServer, neighbour: KazooClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = f"/ro-{uuid.uuid4().hex[:8]}/groupcoord"
    neighbour.create(f"{root}/shards/3/epoch", b"", acl=OPEN_ACL_UNSAFE, makepath=True)
    neighbour.set_acls(f"{root}/shards/3/epoch", read_only())
    assert serve(zk, root, tmp_path, "--sharded", "--shards", "8") == 2
    err = capsys.readouterr().err
    assert f"znode {root}/shards/3/epoch exists with ACL world:anyone=r" in err and "lacks w of the rw" in err
    # the nodes a coordinator made itself pass; the check reads only the ACLs, it writes nothing
    ours = connect(zk.hosts, session_timeout=6.0)
    try:
        mine = f"/own-{uuid.uuid4().hex[:8]}/groupcoord"
        ours.create(f"{mine}/shards/0/epoch", b"", makepath=True)
        assert check_rights(ours, mine, WORLD, 8) is None
        assert check_rights(ours, root, WORLD, 8) is not None
        assert ours.get(f"{root}/shards/3/epoch")[1].version == 0
    finally:
        ours.stop()
        ours.close()
