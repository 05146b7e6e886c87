"""Can this coordinator write what it needs under its root? Checked at start (issue 38, item 5).

A neighbour on the same ZooKeeper may have created the root, the election, epoch and leader nodes
before us, readable by everyone and writable by no one but itself. ``zk_trust`` does not see it (it
looks for others who may *change* nodes), and the elections would then fail on every attempt
("NoAuthError") for ever. So before anything else the coordinator reads the ACL of each node it
will need to write, if it exists, and refuses to start with one line naming the first node it may
not use and that node's ACL.

What each node needs (``c`` create children, ``d`` delete children, ``w`` write data, ``r`` read):
the root ``c``; the unsharded ``election`` ``cd``, its ``epoch`` ``rw``, ``groups`` ``rcd``; a sharded
cluster's ``cluster`` ``r``, ``members`` ``rcd``, ``shards`` ``c``, each ``shards/<s>`` ``cd``, its
``epoch`` ``rw`` and ``groups`` ``rcd``. A ``leader`` node must be ephemeral: a persistent one was made
by hand and would hold the office for ever.

Whose rights count: ``world:anyone``'s, and the coordinator's own identity's (digest or SASL). An
entry of another scheme (``ip``, ``x509``, a custom provider) cannot be matched from the client's
side, so it is given the benefit of the doubt. ``missing`` is the pure rule; ``check_rights`` reads.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import Permissions

__all__ = ["check_rights", "describe_acl", "missing", "needs"]

_LETTERS = ((Permissions.READ, "r"), (Permissions.WRITE, "w"), (Permissions.CREATE, "c"),
            (Permissions.DELETE, "d"), (Permissions.ADMIN, "a"))
_MATCHED_SCHEMES = ("world", "digest", "sasl")  # the schemes whose ids we can compare with ours
R, W, C, D = Permissions.READ, Permissions.WRITE, Permissions.CREATE, Permissions.DELETE
EPHEMERAL = -1  # not a right: "if this node exists it must be ephemeral"


def letters(perms: int) -> str:
    return "".join(letter for bit, letter in _LETTERS if perms & bit) or "none"


def describe_acl(acls: Iterable[Any]) -> str:
    """``world:anyone=r, digest:bob:...=rwcda``: an ACL as zkCli shows it, on one line."""
    return ", ".join(f"{acl.id.scheme}:{acl.id.id}={letters(acl.perms)}" for acl in acls) or "empty"


def missing(acls: Iterable[Any], identities: Collection[tuple[str, str]], needed: int) -> int:
    """The rights of ``needed`` that no entry of ``acls`` grants to one of our ``identities``."""
    granted = 0
    for acl in acls:
        scheme, who = acl.id.scheme, acl.id.id
        if scheme not in _MATCHED_SCHEMES or (scheme, who) in identities:
            granted |= acl.perms
    return needed & ~granted


def needs(root: str, shards: int | None) -> list[tuple[str, int]]:
    """(node, rights) the coordinator will need, in the order to report the first problem; ``shards``
    None: an active/standby coordinator."""
    root = root.rstrip("/")
    if shards is None:
        return [(root, C), (f"{root}/election", C | D), (f"{root}/election/epoch", R | W),
                (f"{root}/election/leader", EPHEMERAL), (f"{root}/groups", R | C | D)]
    wanted = [(root, C), (f"{root}/cluster", R), (f"{root}/members", R | C | D), (f"{root}/shards", C)]
    for shard in range(shards):
        base = f"{root}/shards/{shard}"
        wanted += [(base, C | D), (f"{base}/epoch", R | W), (f"{base}/leader", EPHEMERAL), (f"{base}/groups", R | C | D)]
    return wanted


def check_rights(client: Any, root: str, identities: Collection[tuple[str, str]], shards: int | None,
                 timeout: float = 30.0) -> str | None:
    """One line naming the first node under ``root`` this coordinator could not use, or None.
    Nodes that do not exist yet are fine (we create them, under a parent we may create in)."""
    wanted = needs(root, shards)
    pending = [(path, right, client.exists_async(path) if right == EPHEMERAL else client.get_acls_async(path))
               for path, right in wanted]
    for path, right, result in pending:
        try:
            answer = result.get(timeout=timeout)
        except NoNodeError:
            continue
        except NoAuthError:
            return (f"znode {path} exists and this coordinator may not read its ACL: someone else created it; "
                    f"give the coordinators' identity rights on it (zkCli.sh setAcl) or remove it")
        if right == EPHEMERAL:
            if answer is not None and not answer.ephemeralOwner:
                return (f"znode {path} is a persistent node: no coordinator made it (a leader node is ephemeral) "
                        f"and it would hold the office for ever; remove it (zkCli.sh delete {path})")
            continue
        acls, _stat = answer
        lacking = missing(acls, identities, right)
        if lacking:
            return (f"znode {path} exists with ACL {describe_acl(acls)}: this coordinator lacks {letters(lacking)} "
                    f"of the {letters(right)} it needs there (r read, w write, c create, d delete); someone else "
                    f"created it: give the coordinators' identity those rights (zkCli.sh setAcl) or use another "
                    f"--zk-root")
    return None
