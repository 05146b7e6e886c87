"""Load in the consumer protocol: its members' load reports, and the shedder's interval on the coordinator.

Reports (``report_load``): a consumer-protocol member, and a classic member of a converted group, sends
ReportLoad as a classic member does (SPEC 3 and 5: the reports land in the sample log the statistics
job reads, and the job's snapshot comes back as PublishLoadSnapshot or ``serve --snapshots``). The same
bounds, then the same ``record_load``. A member that is not in the group, or a static member away
(epoch -2), is answered UNKNOWN_MEMBER_ID. A report does not renew a session: heartbeats do.

The shedder's interval (``LoadRechecks``): Pulsar's leader broker sheds on a timer
(``loadBalancerSheddingIntervalMinutes``), not per report, and the classic leader worker asks its
assignor's ``needs_rebalance`` every ``recheck_interval_s`` on the newest snapshot (``worker.leader``).
A consumer group does the same on the coordinator. A snapshot published for the group arms ``c-shed``
for one interval after the group's last check or target computation (several snapshots in one interval:
one check, on the newest). When it fires on a snapshot not checked before:

* a server-side assignor with the check: ``needs_rebalance`` runs off the loop (while it runs no target
  computation starts: the assignor's per-group state is not shared between two threads); a yes moves
  the group epoch, and the next target, whose full pass reads that snapshot, moves what the shedder
  picked (its plan is kept per snapshot, so the check and the pass agree);
* a ``client:<name>`` group: the epoch moves and the leader is asked with the snapshot; its assignor
  decides what moves (the shedder's history lives on the leader, so the coordinator cannot judge for it).
  The interval is that of the coordinator's own ``<name>``, when it has one with the check.

An assignor without the check (no ``recheck_interval_s``, or 0) reads a new snapshot at the group's next
change, as in the classic protocol.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from groupcoord.assignors.base import RebalanceCheck
from groupcoord.assignors.registry import UnknownAssignorError, get_assignor
from groupcoord.coordinator.model.consumer import ConsumerGroups
from groupcoord.coordinator.model.consumer_group import ConsumerGroup
from groupcoord.coordinator.model.consumer_target import TargetInputs, context_of, inputs_of
from groupcoord.coordinator.model.effects import Effect, Outbox, TimerKey, Token, error
from groupcoord.coordinator.model.leader_assignor import CLIENT_PREFIX, is_client
from groupcoord.coordinator.model.prechecks import Verdict, report_error
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["SHED_TIMER", "LoadRechecks", "report_load", "recheck_interval_s"]

log = logging.getLogger("groupcoord.consumer")
SHED_TIMER = "c-shed"
SnapshotKey = tuple[str, int]


def report_load(cg: ConsumerGroups, out: Outbox, request: pb.ReportLoadRequest, token: Token,
                checked: Verdict | None = None) -> None:
    """A member of a consumer-protocol group reports its load (``checked``: the bounds, run on a thread)."""
    group = cg.groups.get(request.group_id)
    member = group.members.get(request.member_id) if group is not None else None
    failure = None
    if member is None or member.away:
        failure = error(pb.UNKNOWN_MEMBER_ID, f"member {request.member_id!r} is not in group {request.group_id!r}")
    else:
        failure = checked.failure if checked is not None else report_error(cg.m.config, request)
    if failure is not None:
        out.reply(token, "", pb.ReportLoadResponse(error=failure))
        return
    out.record_load(request.group_id, request.member_id, request.report)
    out.reply(token, "", pb.ReportLoadResponse())


def recheck_interval_s(assignor_name: str) -> float:
    """Seconds between two load checks of a group using ``assignor_name`` (0: it has no check here)."""
    name = assignor_name[len(CLIENT_PREFIX):] if is_client(assignor_name) else assignor_name
    try:
        assignor = get_assignor(name)
    except UnknownAssignorError:
        return 0.0
    return float(assignor.recheck_interval_s or 0.0) if isinstance(assignor, RebalanceCheck) else 0.0


def _key(snapshot: pb.LoadSnapshot | None) -> SnapshotKey | None:
    return None if snapshot is None else (snapshot.snapshot_id, snapshot.created_ms)


@dataclass
class _Checked:
    at: float  # when the group was last checked
    snapshot: SnapshotKey  # on which snapshot


class LoadRechecks:
    """The ``c-shed`` timer of every consumer group of one model (see the module's docstring). What was
    checked is kept per group object, weakly: a group that is gone takes its entry with it."""

    def __init__(self, cg: ConsumerGroups) -> None:
        self.cg = cg
        self._checked: WeakKeyDictionary[ConsumerGroup, _Checked] = WeakKeyDictionary()

    def checked_on(self, group_id: str) -> SnapshotKey | None:
        """The snapshot the group was last checked on (tests, tools)."""
        group = self.cg.groups.get(group_id)
        checked = self._checked.get(group) if group is not None else None
        return checked.snapshot if checked is not None else None

    def published(self, out: Outbox, group_id: str) -> None:
        """A snapshot was published for ``group_id``: arm its check (again: the same deadline, so the
        snapshots of one interval share one check, which reads the newest)."""
        group = self.cg.groups.get(group_id)
        if group is None:
            return
        interval = recheck_interval_s(group.assignor)
        if not interval:
            return
        now = self.cg.m.clock.now()
        checked = self._checked.get(group)
        known = [at for at in (checked.at if checked else None, self.cg._last_assign.get(group_id)) if at is not None]
        since = max(known, default=now)
        out.arm(TimerKey(SHED_TIMER, group_id), max(0.0, since + interval - now))

    def fire(self, out: Outbox, key: TimerKey) -> None:
        group_id = key.group_id
        group = self.cg.groups.get(group_id)
        classic = self.cg.m.groups.get(group_id)
        if group is None or classic is None:
            return
        snapshot = _key(classic.load_snapshot)
        checked = self._checked.get(group)
        if snapshot is None or (checked is not None and snapshot == checked.snapshot):
            return
        if group.computing:  # a target is being computed (it reads this snapshot): check after it
            out.arm(key, self.cg.settings.assignment_interval_ms / 1000)
            return
        self._checked[group] = _Checked(self.cg.m.clock.now(), snapshot)
        if is_client(group.assignor):
            log.info("group %s: load snapshot %s: asking the leader for a target", group_id, snapshot[0],
                     extra={"event": "load_recheck", "group": group_id, "snapshot": snapshot[0]})
            self.cg._changed(out, group)
            return
        inputs = inputs_of(group, classic)
        group.computing = True
        out.offload(lambda: _needs_rebalance(inputs), lambda verdict: self._judged(group, verdict))

    def _judged(self, group: ConsumerGroup, verdict: Any) -> list[Effect]:
        """The check landed (on the loop): a yes moves the group epoch; changes held meanwhile go on."""
        out = Outbox(self.cg.to_record)
        if self.cg.groups.get(group.group_id) is not group:
            return []
        group.computing = False
        if verdict is True:
            log.info("group %s: assignor %s would move tasks on the newest load snapshot", group.group_id,
                     group.assignor, extra={"event": "load_recheck", "group": group.group_id})
            self.cg._changed(out, group)
            return out.effects()
        if isinstance(verdict, str):
            log.warning("group %s: load check failed: %s", group.group_id, verdict,
                        extra={"event": "load_recheck_failed", "group": group.group_id, "reason": verdict})
        if group.target_epoch < group.epoch:  # changes that came while it ran
            self.cg._ask_target(out, group)
        return out.effects()


def _needs_rebalance(inputs: TargetInputs) -> bool | str:
    """Off the loop: the assignor's answer, or why there is none."""
    try:
        assignor = get_assignor(inputs.assignor)
        return bool(isinstance(assignor, RebalanceCheck) and assignor.needs_rebalance(context_of(inputs)))
    except Exception as failure:  # noqa: BLE001 - a user's check must not stall the group: logged, then no
        return f"assignor {inputs.assignor!r}: {type(failure).__name__}: {failure}"
