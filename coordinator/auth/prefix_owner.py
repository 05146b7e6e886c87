"""Whose quotas a group counts against: the principal that administers its name (issue 38 item 3).

A tenant given ``member`` on a shared prefix (``ab-``) can create groups there by joining them.
Charged to their creator, such groups spent the member's quotas, and once the member had used its
own task quota the prefix's admin could not put its catalog in them ("the groups User:tenant-b
created would hold 1002 tasks"). A group's account is instead the principal holding ``admin`` on
the most specific ACL entry naming it: a literal entry over a prefixed one, a longer prefix over a
shorter; ``*`` and ``User:*`` name no owner. With no such principal (or two at the same level),
the creator stays the account, as before. Reads the policy in force at each call (a SIGHUP
reload replaces it) and costs O(ACL entries), once per group created.
"""

from __future__ import annotations

from collections.abc import Callable

from groupcoord.coordinator.auth.acl import WILDCARD, Acls, Operation, PatternType, ResourceType
from groupcoord.coordinator.auth.guard import Guard

__all__ = ["prefix_admin", "accounts_of"]


def prefix_admin(acls: Acls | None, group_id: str) -> str:
    """The principal that administers ``group_id`` by its most specific ACL entry, or ""."""
    if acls is None:
        return ""
    best: tuple[int, int] = (-1, -1)
    owners: set[str] = set()
    for entry in acls.entries:
        if (not entry.allow or entry.operation is not Operation.ADMIN or entry.resource_type is not ResourceType.GROUP
                or entry.name == WILDCARD or entry.principal == "User:*" or not entry.names_group(group_id)):
            continue
        rank = (int(entry.pattern is PatternType.LITERAL), len(entry.name))
        if rank > best:
            best, owners = rank, {entry.principal}
        elif rank == best:
            owners.add(entry.principal)
    if len(owners) != 1:
        return ""
    owner = owners.pop()
    return owner if acls.allows(owner, Operation.ADMIN, group_id) else ""  # a DENY elsewhere wins


def accounts_of(guard: Guard) -> Callable[[str, str], str]:
    """``(group_id, creator) -> account`` for ``CoordinatorModel.account_of``, from the guard's policy."""

    def account(group_id: str, creator: str) -> str:
        return prefix_admin(guard.policy.acls, group_id) or creator

    return account
