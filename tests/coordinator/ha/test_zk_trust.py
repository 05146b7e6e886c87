"""Znodes the coordinator did not create with its credentials stop its start (issue 26 item 5),
against a real ZooKeeper."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.security import OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from groupcoord.cli import main
from groupcoord.coordinator.ha.election import connect
from groupcoord.coordinator.ha.zk_security import load_zk_security
from groupcoord.coordinator.ha.zk_trust import check_znodes, foreign_writers, own_identity
from tests.zookeeper_server import ZooKeeperServer

USER, PASSWORD = "groupcoord", "correct-horse"


def test_only_the_coordinators_identity_may_change_a_znode() -> None:
    ours = make_digest_acl(USER, PASSWORD, all=True)
    own = (ours.id.scheme, ours.id.id)
    assert foreign_writers([ours], own) == []
    assert foreign_writers([ours, make_acl("world", "anyone", read=True)], own) == []  # reading is not changing
    assert foreign_writers([ours, make_acl("world", "anyone", all=True)], own) == ["world:anyone"]
    assert foreign_writers([make_digest_acl("neighbour", "pw", write=True)], own)[0].startswith("digest:neighbour:")


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


def credentials(tmp_path: Path) -> Path:
    path = tmp_path / "zk.creds"
    path.write_text(f"{USER}:{PASSWORD}\n")
    path.chmod(0o600)
    return path


@pytest.mark.zookeeper
@pytest.mark.slow
def test_a_root_or_candidate_a_neighbour_can_change_is_named_and_stops_the_start(
        zk: ZooKeeperServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    creds = credentials(tmp_path)
    security = load_zk_security(auth="digest", credentials_file=creds, tls_ca=None, tls_cert=None, tls_key=None)
    own = own_identity(security)
    assert own is not None
    ours = connect(zk.hosts, session_timeout=6.0, security=security)
    neighbour = connect(zk.hosts, session_timeout=6.0)
    try:
        root = f"/groupcoord/trust-{uuid.uuid4().hex[:8]}"
        assert check_znodes(ours, root, own) is None  # nothing there yet: the coordinator creates it, protected
        ours.ensure_path(f"{root}/election")
        ours.ensure_path(f"{root}/groups")
        assert check_znodes(ours, root, own) is None
        # a neighbour got in first elsewhere: a root it made, world-writable
        planted = f"/neighbour-{uuid.uuid4().hex[:8]}/groupcoord"
        neighbour.create(planted, b"", acl=OPEN_ACL_UNSAFE, makepath=True)
        problem = check_znodes(ours, planted, own)
        assert problem is not None and f"znode {planted} exists and world:anyone may change it" in problem
        # or a candidate of its own in an election node left open
        open_root = f"/open-{uuid.uuid4().hex[:8]}"
        ours.create(open_root, b"", makepath=True)
        ours.create(f"{open_root}/election", b"", acl=OPEN_ACL_UNSAFE)
        neighbour.create(f"{open_root}/election/leader", b"10.9.9.9:9400", acl=OPEN_ACL_UNSAFE, ephemeral=True)
        problem = check_znodes(ours, open_root, own)
        assert problem is not None and f"znode {open_root}/election exists" in problem
        # serve refuses to start on it, with one line, unless told to trust it
        code = main(["serve", "--store", "zookeeper", "--zk", zk.hosts, "--zk-root", planted, "--zk-auth", "digest",
                     "--zk-credentials-file", str(creds), "--listen", "127.0.0.1:0", "--data-dir",
                     str(tmp_path / "d")])
        err = capsys.readouterr().err
        assert code == 2 and f"znode {planted} exists and world:anyone may change it" in err
        assert "--zk-trust-existing" in err and "Traceback" not in err
    finally:
        for client in (ours, neighbour):
            client.stop()
            client.close()


def test_zk_root_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--store", "zookeeper", "--zk", "127.0.0.1:1", "--zk-root", "relative/path",
                 "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d")])
    assert code == 2 and "zk_root must be an absolute znode path" in capsys.readouterr().err
