"""The leader-side assignor of the consumer protocol (KIP-848 specified it; Kafka never shipped it).

A group whose assignor is ``client:<name>`` has its target computed by one of its members, the
*leader*, with the user's assignor ``<name>`` on the worker. When the group epoch moves past the
target (``ConsumerGroups._start_target``), the coordinator elects a leader (the current one if it is
still a live consumer-protocol member, else the first such member) and puts a ``TargetRequest``
(the epoch, every member with its metadata and current target, the catalog, the load snapshot)
in the leader's next heartbeat answer. The leader answers in a later heartbeat with a
``TargetAnswer``: **only the members whose target changed**.

The coordinator checks only what changed: each listed member is in the group, no replica is given
twice among the listed members, and each replica a member *gains* is in the catalog and not kept
by a member the answer does not list (a running index replica -> member of the target, updated by
the answer's delta). Nothing else is read: an answer moving ten tasks costs ten look-ups.

The leader's assignor may split tasks (Pulsar's bundle split): the answer's ``splits`` are checked as a
coordinator-side split is, and for covering it (``leader_split``), then applied to the catalog in the
write that installs the target; each child waits for its parent's release (``split_lineage``).

Fallback: a leader that answers wrong (a check fails, its assignor failed: ``error``), or does
not answer within ``3 x heartbeat_interval_ms``, or a request that would exceed half of
``max_message_bytes``, makes the coordinator compute the target with its own assignor ``<name>``
(off the loop, as for a server-side group) when it has one, else keep the previous target (asked
again at the next change, or at once after a silent leader); the failing leader is not elected again
while another member can be.
"""

from __future__ import annotations

import logging

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.model import consumer_split
from groupcoord.coordinator.model.consumer_group import ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.consumer_steps import ConsumerSteps
from groupcoord.coordinator.model.consumer_target import TargetInputs, assignor_exists, check_target, compute_target
from groupcoord.coordinator.model.effects import Outbox, TimerKey
from groupcoord.coordinator.model.leader_split import LeaderSplit, check_covered, check_splits
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["CLIENT_PREFIX", "is_client", "ask", "attach", "take_answer", "timed_out", "leader_left", "check_delta"]

log = logging.getLogger("groupcoord.consumer")
CLIENT_PREFIX = "client:"
LEADER_TIMEOUT_BEATS = 3  # heartbeat intervals the leader has to answer


def is_client(assignor: str) -> bool:
    return assignor.startswith(CLIENT_PREFIX)


def _key(group_id: str) -> TimerKey:
    return TimerKey("c-leader", group_id)


def _eligible(member: ConsumerMember | None, skip: str) -> bool:
    return member is not None and member.classic is None and not member.away and member.member_id != skip


def _elect(group: ConsumerGroup) -> str:
    """The current leader if it can still lead, else the first member that can (stops at the first)."""
    if _eligible(group.members.get(group.leader_id), group.failed_leader):
        return group.leader_id
    found = next((m.member_id for m in group.members.values() if _eligible(m, group.failed_leader)), "")
    if not found:  # only the failed leader can lead: give it another chance
        found = next((m.member_id for m in group.members.values() if _eligible(m, "")), "")
    return found


def ask(cg: ConsumerSteps, out: Outbox, group: ConsumerGroup) -> None:
    """The group epoch moved: ask the leader for the target of this epoch (or fall back)."""
    group.leader_id = _elect(group)
    if not group.leader_id:
        _fall_back(cg, out, group, "no consumer-protocol member can lead")
        return
    classic = cg.m.groups.get(group.group_id)
    request = pb.TargetRequest(group_epoch=group.epoch, assignor=group.assignor[len(CLIENT_PREFIX):])
    for m in group.members.values():
        request.members.add(member_id=m.member_id, instance_id=m.instance_id, client_id=m.client_id, host=m.host,
                            metadata=m.metadata, assigned=[pb.TaskReplica(task_id=t.task_id, replica=t.replica)
                                                           for t in sorted(group.target_of(m.member_id))])
    if classic is not None:
        request.tasks.extend(classic.catalog_snapshot().in_order())
        if classic.load_snapshot is not None:
            request.load_snapshot.CopyFrom(classic.load_snapshot)
    size, most = request.ByteSize(), cg.m.config.max_message_bytes // 2
    if size > most:
        _fall_back(cg, out, group, f"the target request would be {size} bytes (half of max_message_bytes: {most})")
        return
    group.computing, group.asked = True, request
    group.asked_catalog = classic.catalog_version if classic is not None else None
    cg._last_assign[group.group_id] = cg.m.clock.now()
    out.arm(_key(group.group_id), LEADER_TIMEOUT_BEATS * cg.settings.heartbeat_interval_ms / 1000)


def attach(group: ConsumerGroup, member: ConsumerMember, response: pb.GroupHeartbeatResponse) -> None:
    """The leader's heartbeat answer carries the pending request, once."""
    if group.asked is not None and member.member_id == group.leader_id and not group.asked_sent:
        response.compute_target.CopyFrom(group.asked)
        group.asked_sent = True


def take_answer(cg: ConsumerSteps, out: Outbox, group: ConsumerGroup, member: ConsumerMember,
                answer: pb.TargetAnswer) -> None:
    """The leader's answer (in its heartbeat): installed if it checks, else the fallback. A late
    answer (another epoch, or from a member no longer asked) is ignored."""
    asked = group.asked
    if asked is None or member.member_id != group.leader_id or answer.group_epoch != asked.group_epoch:
        log.info("group %s: target answer for epoch %d from %s ignored (not asked)", group.group_id,
                 answer.group_epoch, member.member_id)
        return
    out.cancel(_key(group.group_id))
    delta, split = _checked_answer(cg, group, answer)
    if isinstance(delta, str):
        group.failed_leader = member.member_id
        _fall_back(cg, out, group, f"leader {member.member_id}: {delta}", asked.group_epoch)
        return
    _install_delta(group, delta)
    if split is not None:  # the catalog after the split, written with the target
        consumer_split.apply(cg.m, group, split.tasks, split.splits)
    group.target_epoch, group.last_error, group.failed_leader = asked.group_epoch, "", ""
    group.computing, group.asked, group.asked_sent = False, None, False
    cg._persist(out, group)
    if group.target_epoch < group.epoch:
        cg._ask_target(out, group)


def timed_out(cg: ConsumerSteps, out: Outbox, group: ConsumerGroup) -> None:
    if group.asked is None:
        return
    group.failed_leader = group.leader_id
    gone = group.leader_id not in group.members or group.members[group.leader_id].away
    _fall_back(cg, out, group, f"leader {group.leader_id} left the group before it answered" if gone else
               f"leader {group.leader_id} did not answer within {LEADER_TIMEOUT_BEATS} heartbeat intervals",
               group.asked.group_epoch, ask_again=True)


def leader_left(cg: ConsumerSteps, out: Outbox, group: ConsumerGroup) -> bool:
    """The group changed while a leader is asked: if that leader is gone (left, session ended) or away, it
    will not answer; fall back now rather than after the timeout (True: the caller asks for the new epoch)."""
    leader = group.members.get(group.leader_id)
    if group.asked is None or (leader is not None and not leader.away):
        return False
    timed_out(cg, out, group)
    return True


def _checked_answer(cg: ConsumerSteps, group: ConsumerGroup, answer: pb.TargetAnswer
                    ) -> tuple[dict[str, frozenset[TaskReplica]] | str, LeaderSplit | None]:
    """The answer's changed targets and its split (None: none), or why the answer cannot be used."""
    if answer.error:
        return f"the leader's assignor failed: {answer.error}", None
    split = check_splits(cg.m, group, answer) if answer.splits else None
    if isinstance(split, str):
        return split, None
    classic = cg.m.groups.get(group.group_id)
    catalog = split.tasks if split is not None else classic.catalog_snapshot().tasks if classic is not None else {}
    delta = check_delta(group, answer, catalog)
    if split is not None and not isinstance(delta, str):
        uncovered = check_covered(split, delta, _index(group), group.members)
        if uncovered:
            return uncovered, None
    return delta, split


def _index(group: ConsumerGroup) -> dict[TaskReplica, str]:
    """Replica -> member of the target; built once (O(target)), then kept by each delta."""
    if group.target_index is None:
        group.target_index = {t: mid for mid, tasks in group.target.items() for t in tasks}
    return group.target_index


def check_delta(group: ConsumerGroup, answer: pb.TargetAnswer,
                catalog: dict[str, pb.Task]) -> dict[str, frozenset[TaskReplica]] | str:
    """The new target of each listed member, or why the answer cannot be used (what changed only)."""
    listed: dict[str, frozenset[TaskReplica]] = {}
    seen: set[TaskReplica] = set()
    for entry in answer.assignments:
        tasks = frozenset(TaskReplica(t.task_id, t.replica) for t in entry.tasks)
        if entry.member_id in listed:
            return f"member {entry.member_id!r} listed twice"
        if len(tasks) != len(entry.tasks) or not seen.isdisjoint(tasks):
            return f"a task replica given twice (member {entry.member_id!r})"
        seen |= tasks
        if entry.member_id in group.members:  # a member gone meanwhile: dropped, as a server-side answer's
            listed[entry.member_id] = tasks
    index = _index(group)
    for member_id, tasks in listed.items():
        for task in tasks - group.target_of(member_id):
            spec = catalog.get(task.task_id)
            if spec is None or not 0 <= task.replica < max(spec.replicas, 1):
                return f"{task.task_id}#{task.replica} (for {member_id}) is not in the catalog"
            owner = index.get(task)
            if owner is not None and owner != member_id and owner not in listed and owner in group.members:
                return f"{task.task_id}#{task.replica} given to {member_id} stays with {owner}, not listed"
    return listed


def _install_delta(group: ConsumerGroup, delta: dict[str, frozenset[TaskReplica]]) -> None:
    index = _index(group)
    for member_id, tasks in delta.items():
        before = group.target_of(member_id)
        for task in before - tasks:
            if index.get(task) == member_id:
                del index[task]
        for task in tasks - before:
            index[task] = member_id
        group.target[member_id] = tasks


def _fall_back(cg: ConsumerSteps, out: Outbox, group: ConsumerGroup, why: str, asked_epoch: int | None = None,
               *, ask_again: bool = False) -> None:
    """No target from the leader for this epoch: the coordinator's own assignor of that name
    computes it, or the previous target stays (the next change asks again; one that came while the
    leader was asked, ``asked_epoch``, asks another leader now, and so does a leader's silence,
    ``ask_again``: a slow leader must not leave the group without a target until something changes)."""
    out.cancel(_key(group.group_id))
    group.asked, group.asked_sent, group.last_error = None, False, why
    name = group.assignor[len(CLIENT_PREFIX):]
    log.warning("group %s: no target from the leader for epoch %d: %s", group.group_id, group.epoch, why,
                extra={"event": "leader_target_failed", "group": group.group_id, "reason": why})
    if not assignor_exists(name):
        group.computing = False
        cg._persist(out, group)
        if asked_epoch is not None and (group.epoch > asked_epoch or ask_again):
            cg._ask_target(out, group)  # the failed leader is not elected while another member can lead
        return
    classic = cg.m.groups.get(group.group_id)
    catalog = classic.catalog_snapshot() if classic is not None else None
    inputs = TargetInputs(group.group_id, group.epoch, name, tuple(m.assignor_view() for m in group.members.values()),
                          catalog, classic.load_snapshot if classic is not None else None)
    ids = set(group.members)
    group.computing, group.target_index = True, None  # a whole new target: the index is rebuilt on next use
    cg._last_assign[group.group_id] = cg.m.clock.now()
    out.offload(lambda: check_target(compute_target(inputs), ids, catalog),
                lambda result: cg._install(group, inputs, result))  # a full pass: no basis
