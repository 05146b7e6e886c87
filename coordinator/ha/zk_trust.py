"""Znodes the coordinator did not protect are not trusted (issue 26 item 5).

With ``zk_auth`` the coordinator creates every znode with an ACL for its own identity only
(``coordinator.ha.zk_security``). A znode that existed before (the root made by hand, or by a
neighbour, world-writable) keeps its ACL: a neighbour could then list groups, delete a record,
plant tasks that appear after a restart, or hold the election's leader node and keep every
coordinator a standby that sends clients to the neighbour's address.

So at start, before anything is read, ``check_znodes`` looks at the ACL of the root and of every
znode under it (election nodes and their candidates, group records, a sharded cluster's record
and shard nodes), and names the first one anyone but the coordinators' identity may change.
``serve`` refuses to start with that line unless ``--zk-trust-existing`` says the operator has
checked. (The root's ancestors are not checked: ``/`` itself is world-writable in a stock
ZooKeeper, and an ancestor's ACL does not let anyone change what is below it.)
``foreign_writers`` is the pure rule; the rest reads ZooKeeper.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kazoo.exceptions import NoNodeError
from kazoo.security import Permissions, make_digest_acl_credential

from groupcoord.coordinator.ha.zk_security import ZkSecurity

__all__ = ["check_znodes", "foreign_writers", "own_identity"]

_CHANGES = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN


def own_identity(security: ZkSecurity) -> tuple[str, str] | None:
    """(scheme, id) of the ACL entries the coordinators put on their znodes; None without ``zk_auth``."""
    if security.auth_scheme == "digest":
        return "digest", make_digest_acl_credential(security.username, security.password)
    if security.auth_scheme == "sasl":
        return "sasl", security.username
    return None


def foreign_writers(acls: Iterable[Any], own: tuple[str, str]) -> list[str]:
    """The ``scheme:id`` of every ACL entry that lets someone other than ``own`` change the znode
    (write its data, create or delete children, or change its ACL)."""
    return sorted({f"{acl.id.scheme}:{acl.id.id}" for acl in acls
                   if acl.perms & _CHANGES and (acl.id.scheme, acl.id.id) != own})


def check_znodes(client: Any, root: str, own: tuple[str, str], most: int = 200_000) -> str | None:
    """Why the coordinator must not trust what it finds under ``root`` (one line naming the znode),
    or None. Walks ``root`` and everything below it (election nodes and their candidates, group
    records, a sharded cluster's record and shard nodes), at most ``most`` znodes."""
    queue, seen = [root], 0
    while queue and seen < most:
        path = queue.pop()
        seen += 1
        try:
            acls, _stat = client.get_acls(path)
            children = client.get_children(path)
        except NoNodeError:
            continue
        others = foreign_writers(acls, own)
        if others:
            return (f"znode {path} exists and {', '.join(others)} may change it: the coordinator did not create it "
                    f"with its credentials (set its ACL to the coordinators' identity only, or start with "
                    f"--zk-trust-existing once checked)")
        queue.extend(f"{path.rstrip('/')}/{name}" for name in sorted(children, reverse=True))
    return None
