"""The server-side assignor of the consumer protocol: a group's target computed from a frozen copy.

The model takes ``TargetInputs`` on the event loop (references to frozen member views, the
catalog snapshot of one version, the latest load snapshot) and the runtime runs
``compute_target`` on a checker thread: the assignor (any ``Assignor`` by name: the built-ins,
``register``-ed ones, entry points) never holds the loop. ``check_target`` turns its answer into
the target the model installs, or says why it cannot be used; an answer that splits tasks (Pulsar's
auto bundle split) is checked against the catalog after its splits (``SplitTarget``), which the model
applies to the catalog with the target (``consumer_split``).

Incremental (``target_for``): when the group has a target computed from a catalog this process still
holds, the job first works out what changed since (members in and out, catalog keys added and
deleted) and offers it to an ``IncrementalAssignor``; its answer is checked for what moved only
(``check_moves``; an answer that fails it is dropped for the full pass). No previous target here (a new group, a restart, a failover), a catalog task
edited in place, or the assignor declining: the full pass, as ever.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, is_, is_not

from groupcoord.assignors.base import (
    Assignment,
    AssignmentContext,
    AssignorError,
    MemberInfo,
    TaskReplica,
    TaskSpec,
)
from groupcoord.assignors.incremental import IncrementalAssignor, TargetChange
from groupcoord.assignors.registry import UnknownAssignorError, get_assignor
from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
from groupcoord.coordinator.model.consumer_group import ConsumerGroup, ConsumerMember, owning
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.model.reconcile import Reconciled
from groupcoord.coordinator.model.validation import AssignmentRejected, apply_splits
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import snapshot_from_pb, task_pb, task_spec

__all__ = ["TargetInputs", "SplitTarget", "context_of", "compute_target", "check_target", "assignor_exists", "target_for",
           "change_since", "check_moves", "inputs_of", "installed"]

Target = dict[str, frozenset[TaskReplica]]
_NONE: frozenset[TaskReplica] = frozenset()
_info_of = attrgetter("info")
_reconciled_of = attrgetter("reconciled")


@dataclass(frozen=True, slots=True)
class TargetInputs:
    """What one computation reads: nothing here changes after it is taken (``members`` is derived
    from it once, on first read)."""

    group_id: str
    epoch: int
    assignor: str
    views: tuple[MemberInfo, ...]
    """Each member as the assignor places it; with ``owned`` set, without what it owns (the views the
    coordinator keeps per member: an incremental round reads them, its basis the previous target)."""
    catalog: CatalogSnapshot | None
    load_snapshot: pb.LoadSnapshot | None
    # the previous target (of the members still here), the catalog it was computed from, and the
    # replicas of members gone since: an incremental computation's basis (None: none here)
    previous: Mapping[str, frozenset[TaskReplica]] | None = None
    previous_catalog: CatalogSnapshot | None = None
    orphans: frozenset[TaskReplica] = frozenset()
    owned: tuple[Reconciled, ...] | None = None
    """Each member's reconciliation state, in ``views`` order (None: the views say what each owns)."""
    _members: tuple[MemberInfo, ...] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def members(self) -> tuple[MemberInfo, ...]:
        """Every member as a full pass reads it, with what it owns: built on first read (off the loop,
        and only when a full pass or a check of the whole group runs)."""
        built = self._members
        if built is None:
            built = self.views if self.owned is None else tuple(
                owning(view, reconciled) for view, reconciled in zip(self.views, self.owned, strict=True))
            object.__setattr__(self, "_members", built)
        return built


def assignor_exists(name: str) -> bool:
    """Whether ``name`` resolves to an assignor in this process (imports it on first use); a leader-side
    one, ``client:<name>``, runs on a member (``leader_assignor``): any name."""
    if name.startswith("client:"):
        return len(name) > len("client:")
    try:
        get_assignor(name)
    except UnknownAssignorError:
        return False
    return True


def context_of(inputs: TargetInputs) -> AssignmentContext:
    """What the assignor reads (off the loop: the catalog and the snapshot are converted here)."""
    tasks: tuple[TaskSpec, ...] = ()
    if inputs.catalog is not None:
        tasks = tuple(task_spec(task) for task in inputs.catalog.in_order())
    snapshot = snapshot_from_pb(inputs.load_snapshot) if inputs.load_snapshot is not None else None
    return AssignmentContext(group_id=inputs.group_id, generation=inputs.epoch, members=inputs.members,
                             tasks=tasks, load_snapshot=snapshot)


def compute_target(inputs: TargetInputs) -> Assignment | str:
    """Run the group's assignor; its answer, or why there is none (a string, for the group's last error)."""
    context = context_of(inputs)
    try:
        return get_assignor(inputs.assignor).assign(context)
    except (AssignorError, UnknownAssignorError) as failure:
        return f"assignor {inputs.assignor!r}: {failure}"


@dataclass(frozen=True, slots=True)
class SplitTarget:
    """A target whose assignor split tasks (Pulsar's auto bundle split): ``target`` names the children,
    valid once ``tasks`` (the catalog after ``splits``) replaces catalog version ``base``; ``kept`` is the
    same target with the splits undone (each parent replica where its first child's went), for when the
    split cannot be applied (``consumer_split.accept``)."""

    target: Target
    kept: Target
    base: int
    tasks: dict[str, pb.Task]
    splits: tuple[pb.TaskSplit, ...]


def check_target(answer: Assignment | str, members: set[str],
                 catalog: CatalogSnapshot | None) -> Target | SplitTarget | str:
    """The target per member, or why the answer cannot be one: a replica given twice, or not in the
    catalog (after the answer's splits). Members gone meanwhile are dropped (their tasks wait for the
    next computation)."""
    if isinstance(answer, str):
        return answer
    known = catalog.tasks if catalog is not None else {}
    if answer.splits and catalog is not None:
        return _with_splits(answer, members, catalog)
    return _checked(answer.members, members, known)


def _with_splits(answer: Assignment, members: set[str], catalog: CatalogSnapshot) -> SplitTarget | str:
    """The target after the answer's splits and the same target without them, each checked against its catalog."""
    splits = tuple(pb.TaskSplit(parent_task_id=s.parent_task_id, children=[task_pb(c) for c in s.children])
                   for s in answer.splits)
    try:
        tasks = apply_splits(catalog.tasks, splits)
    except AssignmentRejected as refused:
        return f"the assignor's split: {refused}"
    target = _checked(answer.members, members, tasks)
    if isinstance(target, str):
        return target
    undone: dict[str, str] = {}  # child -> its parent
    for split in answer.splits:
        undone.update({child.task_id: split.parent_task_id for child in split.children})
    first = {split.children[0].task_id for split in answer.splits}
    kept_members = {member_id: [TaskReplica(undone[t.task_id], t.replica) if t.task_id in undone else t
                                for t in replicas if t.task_id not in undone or t.task_id in first]
                    for member_id, replicas in answer.members.items()}
    kept = _checked(kept_members, members, catalog.tasks)
    if isinstance(kept, str):
        return kept
    return SplitTarget(target, kept, catalog.version, tasks, splits)


def _checked(answer: Mapping[str, list[TaskReplica]], members: set[str], known: Mapping[str, pb.Task]) -> Target | str:
    """Each member's replicas, each given once and in ``known``; members not in ``members`` dropped."""
    seen: set[TaskReplica] = set()
    target: dict[str, frozenset[TaskReplica]] = {}
    for member_id, tasks in answer.items():
        given = frozenset(tasks)
        if len(given) != len(tasks) or not seen.isdisjoint(given):
            return f"the assignor gave a task replica twice (member {member_id!r})"
        seen |= given
        for task in given:
            spec = known.get(task.task_id)
            if spec is None or not 0 <= task.replica < max(spec.replicas, 1):
                return f"the assignor gave {task}, which is not in the catalog"
        if member_id in members:
            target[member_id] = given
    return target


def change_since(inputs: TargetInputs) -> TargetChange | None:
    """What changed since the previous target, or None when there is no basis for it. Off the loop:
    a catalog edit is found by comparing two snapshots' keys (C set operations)."""
    old, new, previous = inputs.previous_catalog, inputs.catalog, inputs.previous
    if previous is None or old is None or new is None:
        return None
    added: set[str] = set()
    gone: set[str] = set()
    if new is not old:
        added, gone = new.tasks.keys() - old.tasks.keys(), old.tasks.keys() - new.tasks.keys()
        if not old.plain() or any(new.tasks[t] is not old.tasks[t] for t in new.tasks.keys() & old.tasks.keys()):
            return None  # a task edited in place (replicas, pool, weight): placed afresh
    homeless = inputs.orphans | {TaskReplica(t, 0) for t in added}
    weight = next(iter(new.tasks.values())).weight or 1.0 if new.tasks else 1.0  # one weight when plain
    return TargetChange(previous=previous, members=inputs.views, homeless=frozenset(homeless),
                        removed=frozenset(TaskReplica(t, 0) for t in gone), total=len(new.tasks), plain=new.plain(),
                        group_id=inputs.group_id, weight=weight, snapshot_key=_key(inputs.load_snapshot))


def _key(snapshot: pb.LoadSnapshot | None) -> tuple[str, int] | None:
    """A snapshot's identity, as the load-aware assignors tell snapshots apart."""
    return None if snapshot is None else (snapshot.snapshot_id, snapshot.created_ms)


def check_moves(change: TargetChange, target: Mapping[str, frozenset[TaskReplica]], members: set[str],
                catalog: CatalogSnapshot) -> Target | str:
    """An incremental answer checked for what moved: every member has a target, and what a member
    gained was free (homeless, or given up by another) and is given once, and is in the catalog."""
    if target.keys() != members:
        return "the incremental target does not name exactly the group's members"
    previous = change.previous
    free: set[TaskReplica] = set(change.homeless)
    gained: list[TaskReplica] = []
    # the members whose set is not the previous one's object, found in C: a handful of 10,000
    for member_id in compress(target, map(is_not, target.values(), map(previous.get, target, repeat(_NONE)))):
        had, tasks = previous.get(member_id, _NONE), target[member_id]
        free |= had - tasks
        gained += tasks - had
    if len(set(gained)) != len(gained) or not free.issuperset(gained):
        return "the incremental target gives a task replica twice, or one that its holder keeps"
    known = catalog.tasks
    if any(task.replica != 0 or task.task_id not in known for task in gained):
        return "the incremental target gives a task replica that is not in the catalog"
    return dict(zip(target, map(frozenset, target.values())))  # a frozenset's frozenset is itself


def target_for(inputs: TargetInputs, members: set[str]) -> Target | SplitTarget | str:
    """The new target (off the loop): incremental when the assignor can and there is a basis, else a full pass."""
    change = change_since(inputs)
    if change is not None and inputs.catalog is not None:
        try:
            assignor = get_assignor(inputs.assignor)
            answer = assignor.assign_incremental(change) if isinstance(assignor, IncrementalAssignor) else None
        except (AssignorError, UnknownAssignorError) as failure:
            return f"assignor {inputs.assignor!r}: {failure}"
        checked = check_moves(change, answer, members, inputs.catalog) if answer is not None else None
        if isinstance(checked, dict):
            return checked  # else (declined, or refused: a broken shortcut must not stall the group) the full pass
    if inputs.catalog is not None:
        inputs.catalog.plain()  # O(catalog) as this pass is: every incremental round after it reads it
    return check_target(compute_target(inputs), members, inputs.catalog)


def inputs_of(group: ConsumerGroup, classic: Group | None) -> TargetInputs:
    """What the next computation reads, taken on the loop: references and O(members) copies only (each
    member's placement view is kept until its metadata changes; what it owns is added off the loop,
    and only when a full pass runs)."""
    catalog = classic.catalog_snapshot() if classic is not None else None
    members = group.members.values()
    views = tuple(map(_info_of, members))  # each member's kept view, in C; built for those without one
    if any(map(is_, views, repeat(None))):
        views = tuple(map(ConsumerMember.placement_view, members))
    owned = tuple(map(_reconciled_of, members))
    target, here = group.target, group.members.keys()
    previous = dict(target) if target.keys() <= here else {m: target[m] for m in here if m in target}  # C, usually
    return TargetInputs(group.group_id, group.epoch, group.assignor, views, catalog,
                        classic.load_snapshot if classic is not None else None, previous=previous,
                        previous_catalog=group.target_catalog, orphans=frozenset(group.orphans), owned=owned)


def installed(group: ConsumerGroup, inputs: TargetInputs, target: Target) -> None:
    """Install a computed target: members gone meanwhile are dropped, and their replicas are the next
    computation's orphans; the catalog it read is the next one's basis."""
    here = group.members.keys()
    if target.keys() <= here:  # nobody left meanwhile (the usual case): no pass over the members in Python
        group.target, group.orphans = target, set()
    else:
        group.target = {member_id: tasks for member_id, tasks in target.items() if member_id in here}
        group.orphans = set().union(*(tasks for member_id, tasks in target.items() if member_id not in here))
    group.target_catalog = inputs.catalog
