"""Per-group access control lists, after Kafka's ACL model, as pure data and one decision function.

An entry says: *principal* is allowed (or denied) *operation* on the groups a *resource pattern*
names. As in Kafka's ``AclAuthorizer``/``StandardAuthorizer``:

- a resource pattern is a type (``group`` or ``cluster``), a name and a pattern type: ``literal``
  (the exact name, or ``*`` for every group) or ``prefixed`` (every group whose id starts with it);
- principals are ``User:NAME`` strings; ``User:*`` matches every principal;
- a matching DENY wins over any ALLOW; with no matching ALLOW the answer is no (Kafka's
  ``allow.everyone.if.no.acl.found=false``);
- super users (Kafka's ``super.users``) may do everything, whatever the entries say.

Operations (ours, not Kafka's): ``member`` (join, sync, heartbeat, leave, report load),
``describe`` (describe; list shows only such groups) and ``admin`` (catalog edits, delete group,
remove members, publish a load snapshot). Each implies the ones below it, as Kafka's ALL implies
every operation and READ/WRITE/ALTER imply DESCRIBE: ``admin`` ⊃ ``member`` ⊃ ``describe``.
``admin`` on the ``cluster`` resource is ``admin`` on every group.

File format (TOML; see ``parse_acls``)::

    super_users = ["User:CN=ops"]

    [[acl]]
    principal = "User:worker-shop"
    group = "shop"                 # or: group = "shop-", pattern = "prefixed"; group = "*": every group
    operations = ["member"]
    # permission = "deny"          # default "allow"

    [[acl]]
    principal = "User:operator"
    cluster = true                 # the cluster resource: admin on every group
    operations = ["admin"]
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DECISION_BYTES_KEPT", "DECISION_KEY_MAX_CHARS", "DECISIONS_KEPT", "AclError", "AclEntry", "Acls", "Operation", "PatternType", "ResourceType", "WILDCARD", "parse_acls"]

WILDCARD = "*"


class AclError(ValueError):
    """An ACL file that does not say what it means (the message names the entry and the key)."""


class Operation(enum.IntEnum):
    """Ordered: each operation implies every lower one."""

    DESCRIBE = 1
    MEMBER = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


class PatternType(enum.Enum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class ResourceType(enum.Enum):
    GROUP = "group"
    CLUSTER = "cluster"


@dataclass(frozen=True, kw_only=True)
class AclEntry:
    principal: str
    resource_type: ResourceType
    name: str
    pattern: PatternType
    operation: Operation
    allow: bool = True

    def names_group(self, group_id: str) -> bool:
        if self.resource_type is ResourceType.CLUSTER:
            return True
        if self.pattern is PatternType.PREFIXED:
            return group_id.startswith(self.name)
        return self.name in (WILDCARD, group_id)

    def names_principal(self, principal: str) -> bool:
        return self.principal in (principal, "User:*")

    def grants(self, operation: Operation) -> bool:
        """Does this entry speak about ``operation``? An ALLOW of admin allows member too; a DENY of
        describe denies member and admin too (they would reveal what describe does)."""
        return self.operation >= operation if self.allow else self.operation <= operation


DECISIONS_KEPT = 4096
"""Decisions an ``Acls`` remembers (every heartbeat asks one); past that it forgets them all and
starts again, so a caller naming ever new groups costs time, never memory."""
DECISION_BYTES_KEPT = 1_048_576
"""And at most this many characters of principals and group ids in the decisions remembered."""
DECISION_KEY_MAX_CHARS = 1_024
"""A decision about a longer group id or principal is made each time, never remembered (issue 38: 16
JoinGroups naming 8 MiB group ids held 128 MiB here). The guard refuses ids over ``max_id_length``
before asking; this bound holds whatever the caller."""


@dataclass(frozen=True)
class Acls:
    """The whole policy: entries and super users. ``allows`` is the one decision. It is remembered
    per (principal, operation, group): a policy is replaced as a whole on reload, never changed."""

    entries: tuple[AclEntry, ...] = ()
    super_users: frozenset[str] = frozenset()
    _decided: dict[tuple[str, Operation, str | None], bool] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _decided_chars: list[int] = field(default_factory=lambda: [0], init=False, repr=False, compare=False)
    _somewhere: dict[tuple[str, Operation], bool] = field(default_factory=dict, init=False, repr=False,
                                                          compare=False)

    def allows(self, principal: str, operation: Operation, group_id: str | None) -> bool:
        """May ``principal`` do ``operation`` on ``group_id`` (None: on the cluster itself)?"""
        key = (principal, operation, group_id)
        decided = self._decided.get(key)
        if decided is None:
            decided = self._decide(principal, operation, group_id)
            self._remember(key, decided, len(principal) + len(group_id or ""))
        return decided

    def _remember(self, key: tuple[str, Operation, str | None], decided: bool, chars: int) -> None:
        if chars > DECISION_KEY_MAX_CHARS:
            return
        total = self._decided_chars
        if len(self._decided) >= DECISIONS_KEPT or total[0] + chars > DECISION_BYTES_KEPT:
            self._decided.clear()
            total[0] = 0
        self._decided[key] = decided
        total[0] += chars

    def allows_somewhere(self, principal: str, operation: Operation) -> bool:
        """Might ``principal`` do ``operation`` on some group? False only when no entry could allow it,
        so a call needing it can be refused from its metadata alone, before its body is read. Asked on
        every call: remembered per (principal, operation), as ``allows`` is (a group id of None)."""
        decided = self._somewhere.get((principal, operation))
        if decided is None:
            decided = principal in self.super_users or any(
                e.allow and e.names_principal(principal) and e.grants(operation) for e in self.entries)
            if len(self._somewhere) >= DECISIONS_KEPT:  # principals come from the token file or the CA
                self._somewhere.clear()
            self._somewhere[(principal, operation)] = decided
        return decided

    def remembered(self) -> tuple[int, int]:
        """(decisions, characters of their keys) remembered now."""
        return len(self._decided), self._decided_chars[0]

    def _decide(self, principal: str, operation: Operation, group_id: str | None) -> bool:
        if principal in self.super_users:
            return True
        relevant = [
            e for e in self.entries
            if e.names_principal(principal) and e.grants(operation)
            and (e.names_group(group_id) if group_id is not None else e.resource_type is ResourceType.CLUSTER)
        ]
        if any(not e.allow for e in relevant):
            return False
        return any(e.allow for e in relevant)


_ENTRY_KEYS = {"principal", "group", "cluster", "pattern", "operations", "permission"}


def parse_acls(document: Mapping[str, Any], *, source: str = "ACL file") -> Acls:
    """Build the policy from a parsed TOML document; anything unknown or ambiguous is an ``AclError``."""
    unknown = sorted(set(document) - {"super_users", "acl"})
    if unknown:
        raise AclError(f"{source}: unknown key(s) {', '.join(unknown)} (expected super_users and [[acl]] tables)")
    supers = document.get("super_users", [])
    if not isinstance(supers, list) or not all(isinstance(p, str) for p in supers):
        raise AclError(f"{source}: super_users must be a list of principals")
    for principal in supers:
        _check_principal(principal, f"{source}: super_users")
    raw_entries = document.get("acl", [])
    if not isinstance(raw_entries, list):
        raise AclError(f"{source}: acl must be an array of tables ([[acl]])")
    entries: list[AclEntry] = []
    for index, raw in enumerate(raw_entries, start=1):
        entries.extend(_parse_entry(raw, f"{source}: [[acl]] #{index}"))
    return Acls(tuple(entries), frozenset(supers))


def _parse_entry(raw: Any, where: str) -> Iterable[AclEntry]:
    if not isinstance(raw, dict):
        raise AclError(f"{where}: not a table")
    unknown = sorted(set(raw) - _ENTRY_KEYS)
    if unknown:
        raise AclError(f"{where}: unknown key(s) {', '.join(unknown)}")
    principal = raw.get("principal")
    if not isinstance(principal, str):
        raise AclError(f"{where}: principal is required (e.g. \"User:worker-shop\")")
    _check_principal(principal, where)
    cluster = raw.get("cluster", False)
    if not isinstance(cluster, bool):
        raise AclError(f"{where}: cluster must be true or false")
    if cluster == ("group" in raw):
        raise AclError(f"{where}: name exactly one resource: group = \"NAME\" or cluster = true")
    group = raw.get("group", "")
    if not cluster and (not isinstance(group, str) or not group):
        raise AclError(f"{where}: group must be a non-empty string (\"*\" for every group)")
    try:
        pattern = PatternType(raw.get("pattern", "literal"))
    except ValueError:
        raise AclError(f"{where}: pattern must be literal or prefixed, not {raw.get('pattern')!r}") from None
    if cluster and "pattern" in raw:
        raise AclError(f"{where}: the cluster resource takes no pattern")
    if pattern is PatternType.PREFIXED and group == WILDCARD:
        raise AclError(f"{where}: a prefixed pattern cannot be \"*\" (use literal \"*\" for every group)")
    permission = raw.get("permission", "allow")
    if permission not in ("allow", "deny"):
        raise AclError(f"{where}: permission must be allow or deny, not {permission!r}")
    operations = raw.get("operations")
    if not isinstance(operations, list) or not operations:
        raise AclError(f"{where}: operations must be a non-empty list of member, describe, admin")
    parsed: list[Operation] = []
    for name in operations:
        try:
            parsed.append(Operation[str(name).upper()])
        except KeyError:
            raise AclError(f"{where}: unknown operation {name!r} (member, describe, admin)") from None
    if cluster and parsed != [Operation.ADMIN]:
        raise AclError(f"{where}: the cluster resource takes operations = [\"admin\"] only")
    for operation in parsed:
        yield AclEntry(
            principal=principal,
            resource_type=ResourceType.CLUSTER if cluster else ResourceType.GROUP,
            name="" if cluster else group,
            pattern=pattern,
            operation=operation,
            allow=permission == "allow",
        )


def _check_principal(principal: str, where: str) -> None:
    kind, sep, name = principal.partition(":")
    if kind != "User" or not sep or not name:
        raise AclError(f"{where}: principal {principal!r} must look like User:NAME (User:* for everyone)")
