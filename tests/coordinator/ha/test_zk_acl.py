"""The coordinator's znodes carry a digest ACL: other ZooKeeper clients can neither read nor rewrite
group records (a real ZooKeeper from Debian's package)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError

from groupcoord.coordinator.ha.election import LeaderElection, connect
from groupcoord.coordinator.ha.zk_security import load_zk_security
from groupcoord.coordinator.ha.zk_store import ZooKeeperStore
from tests.zookeeper_server import ZooKeeperServer, wait_until

pytestmark = [pytest.mark.zookeeper, pytest.mark.slow]


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


def test_group_znodes_are_readable_and_writable_only_with_the_coordinators_credentials(
    zk: ZooKeeperServer, tmp_path: Path
) -> None:
    creds = tmp_path / "zk.creds"
    creds.write_text("groupcoord:correct-horse\n")
    security = load_zk_security(auth="digest", credentials_file=creds, tls_ca=None, tls_cert=None, tls_key=None)
    root = f"/groupcoord/acl-{uuid.uuid4().hex[:8]}"
    client = connect(zk.hosts, session_timeout=6.0, security=security)
    election = LeaderElection(client, f"{root}/election", "127.0.0.1:9301", op_timeout=5.0, retry_delay=0.2)
    store = ZooKeeperStore(client, f"{root}/groups", election, op_timeout=5.0)
    others = []
    try:
        election.start()
        wait_until(election.is_leader, 30, "the coordinator to be active")
        store.save("orders", {"generation": 1})
        path = f"{root}/groups/g_orders"  # the store names a group znode g_<quoted id>
        acl, _ = client.get_acls(path)
        assert [(a.id.scheme, a.id.id.split(":")[0]) for a in acl] == [("digest", "groupcoord")]
        anonymous = connect(zk.hosts, session_timeout=6.0)
        intruder_creds = tmp_path / "intruder.creds"
        intruder_creds.write_text("groupcoord:guessed\n")
        intruder = connect(zk.hosts, session_timeout=6.0, security=load_zk_security(
            auth="digest", credentials_file=intruder_creds, tls_ca=None, tls_cert=None, tls_key=None))
        others += [anonymous, intruder]
        for other in others:
            with pytest.raises(NoAuthError):
                other.set(path, b"rewritten")
            with pytest.raises(NoAuthError):
                other.get(path)
            with pytest.raises(NoAuthError):
                other.delete(path)
            with pytest.raises(NoAuthError):  # nor plant a record of its own
                other.create(f"{root}/groups/g_planted", b"x")
        assert store.load_all() == {"orders": {"generation": 1}}
    finally:
        for other in others:
            other.stop()
            other.close()
        election.stop()
        client.stop()
        client.close()
