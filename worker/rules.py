"""The worker's error rules: which error moves the worker where, in one table beside ``worker.states``.

Both clients (``WorkerClient`` on its thread, ``AsyncWorkerClient`` on the service's event loop)
look each failure up here and only carry out what the row says; neither has an ``except`` chain
of its own that decides. The rows are tried in order and the first whose class the error is an
instance of wins, so the more specific classes come first. A failure that is no
``GroupCoordError`` at all (a bug) is not in the table: the clients stop on it.

What a row says:

- ``joining``: the trigger fired when the error ends a JoinGroup / SyncGroup attempt
  (``fail``: back to PreparingJoin and try again; ``stop``: the worker stops, ``fatal_error``).
- ``retry``: when the next attempt goes out (at once, after the backoff, or never).
- ``stable``: what a heartbeat answered with it does in Stable (``rejoin``; ``keep``: stay Stable
  with the tasks running, heartbeating the next coordinator, and re-join only once a whole
  session passed unheard; ``stop``).
- ``reset_member``: forget the member id and generation, and join as a new member.
- ``forget_generation``: forget the generation only and join again under the same member id, which
  may still be valid (Kafka's client does so on ILLEGAL_GENERATION, so the group does not wait its
  rebalance timeout for an id nobody will use again).
- ``rediscover``: the transport has already been told (``worker.lookup``): it follows the hint, or
  asks FindCoordinator again before the next call; COORDINATOR_LOAD_IN_PROGRESS keeps the address.
- ``tasks_lost``: what this worker runs may be someone else's now (``on_lost``, not a clean revoke):
  in the cooperative protocol when the membership is reset, in both when fenced.
- ``leaves``: on stopping, send LeaveGroup (a fenced member's place is not its own to leave).

``error_table_markdown()`` renders the table: the site's generated State machines page
(``docs/gen_reference.py``) shows it, and docs/asyncio.md carries it between
``<!-- worker-error-rules -->`` and ``<!-- /worker-error-rules -->`` and
``tests/worker/test_error_rules.py`` keeps the two equal (on a difference it prints the new table).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from groupcoord import errors
from groupcoord.worker.states import Trigger

__all__ = ["ERROR_RULES", "ErrorRule", "Retry", "StableAction", "error_table_markdown", "rule_for"]


class Retry(Enum):
    AT_ONCE = "at once"
    BACKOFF = "after the backoff"
    NEVER = "never (fatal)"


class StableAction(Enum):
    REJOIN = "rejoin"
    KEEP = "keep"
    STOP = "stop"


@dataclass(frozen=True)
class ErrorRule:
    error: type[errors.GroupCoordError]
    joining: Trigger
    retry: Retry
    stable: StableAction
    reset_member: bool = False
    forget_generation: bool = False
    rediscover: bool = False
    tasks_lost: str = ""
    """"" (a clean revoke), "cooperative" or "always"."""
    leaves: bool = True
    note: str = ""
    """Only for the docs: what else happens."""

    @property
    def fatal(self) -> bool:
        return self.retry is Retry.NEVER


# The table. First match wins: the more specific classes come first.
ERROR_RULES: tuple[ErrorRule, ...] = (
    ErrorRule(errors.RebalanceNeeded, "fail", Retry.AT_ONCE, StableAction.REJOIN),
    ErrorRule(errors.MemberIdRequiredError, "fail", Retry.AT_ONCE, StableAction.REJOIN,
              note="joins again with the member id the answer carries"),
    ErrorRule(errors.IllegalGenerationError, "fail", Retry.AT_ONCE, StableAction.REJOIN, forget_generation=True,
              tasks_lost="cooperative", note="joins again under its member id, which may still be valid"),
    ErrorRule(errors.ResetNeeded, "fail", Retry.AT_ONCE, StableAction.REJOIN, reset_member=True,
              tasks_lost="cooperative"),
    ErrorRule(errors.CoordinatorMovedError, "fail", Retry.BACKOFF, StableAction.KEEP, rediscover=True,
              tasks_lost="cooperative",
              note="also a transport failure (deadline passed, address refused); in Stable the tasks run on "
                   "until a session passes without a heartbeat, then it re-joins (cooperative tasks lost)"),
    ErrorRule(errors.InvalidAssignmentError, "fail", Retry.BACKOFF, StableAction.REJOIN,
              note="the leader's assignor failed or its answer was refused"),
    ErrorRule(errors.FencedInstanceIdError, "stop", Retry.NEVER, StableAction.STOP, tasks_lost="always",
              leaves=False, note="another process is this instance now"),
    ErrorRule(errors.AccessDenied, "stop", Retry.NEVER, StableAction.REJOIN,
              note="a gRPC status: fix the credentials or the ACLs"),
    ErrorRule(errors.RequestError, "stop", Retry.NEVER, StableAction.REJOIN,
              note="the request is wrong; a heartbeat refused so re-joins and the JoinGroup decides"),
    ErrorRule(errors.GroupCoordError, "fail", Retry.BACKOFF, StableAction.REJOIN,
              note="a code this version does not know (a newer coordinator)"),
)


def rule_for(error: BaseException) -> ErrorRule | None:
    """The row for ``error``, or None when it is no ``GroupCoordError`` (a bug: the clients stop)."""
    for rule in ERROR_RULES:
        if isinstance(error, rule.error):
            return rule
    return None


# ------------------------------------------------------------------ the docs' table


def _codes(rule: ErrorRule) -> str:
    """The wire codes whose class falls on ``rule`` (first match), or the class name."""
    names = [errors.code_name(code) for code, cls in sorted(errors.ERRORS_BY_CODE.items()) if _first(cls) is rule]
    if rule.error is errors.AccessDenied:
        names = ["UNAUTHENTICATED", "PERMISSION_DENIED"]
    if rule.error is errors.GroupCoordError:
        return "any other code"
    return ", ".join(f"`{n}`" for n in names) or f"`{rule.error.__name__}`"


def _first(cls: type[errors.GroupCoordError]) -> ErrorRule | None:
    for rule in ERROR_RULES:
        if issubclass(cls, rule.error):
            return rule
    return None


_STABLE_TEXT = {StableAction.REJOIN: "`rejoin`", StableAction.KEEP: "stays Stable, then `rejoin`",
                StableAction.STOP: "`stop`"}
_LOST_TEXT = {"": "no", "cooperative": "if cooperative", "always": "yes"}


def error_table_markdown() -> str:
    """The table as the docs show it (one row per rule)."""
    lines = [
        "| error (wire code) | Joining / Syncing | next attempt | Stable (heartbeat) | member id | tasks lost | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rule in ERROR_RULES:
        lines.append(" | ".join([
            f"| {_codes(rule)}",
            f"`{rule.joining}`" + (", next coordinator" if rule.rediscover else ""),
            rule.retry.value,
            _STABLE_TEXT[rule.stable],
            "reset" if rule.reset_member else "kept, generation reset" if rule.forget_generation else "kept",
            _LOST_TEXT[rule.tasks_lost] + ("" if rule.leaves else ", no LeaveGroup"),
            rule.note,
        ]) + " |")
    return "\n".join(lines) + "\n"
