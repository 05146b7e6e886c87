"""Sticky assignment: keep replicas where they run, move only what balance needs.

Every member reports the replicas it owns in its metadata (``MemberInfo.owned``
with ``owned_generation``, as Kafka's sticky and cooperative assignors carry
their previous assignment in the subscription); conflicting claims resolve as
in ``AssignmentContext.previous_owners()`` (highest generation wins). Moving a
task costs a stop, a state hand-over and a start, so this assignor keeps each
replica on its previous owner when that owner is still a member of the task's
pool and does not already hold another replica of the task, and then moves as
few replicas as balance requires.

Balance, per pool:

* All tasks of the pool weigh the same (the usual case): replica counts per
  member differ by at most one. Quotas are exact, ``floor`` or ``ceil`` of
  replicas / members. Members keeping ``ceil`` or more get the ``ceil``
  quotas first; the ones left over go to whichever member at ``floor`` can
  take a homeless replica without running its task twice. With one replica
  per task the number of moves is the minimum possible.
* Weights differ: the spread of total weight per member (heaviest member
  minus lightest) is at most the pool's heaviest replica weight — the bound
  a greedy "lightest member first" placement guarantees, and with equal
  weights the same "within one" rule. Replicas left without owner go,
  heaviest first, to the lightest member; then, while the spread is over the
  tolerance, the replica that best halves the gap moves from the heaviest to
  the lightest member. Fewest moves is a bin-packing problem, so here it is a
  good heuristic, not a proof; and when the distinct-member rule blocks
  every useful move the spread stays as it is.

Adding or removing one member moves at most ``ceil(replicas / members)``
replicas when tasks have one replica and the previous assignment was
balanced. With several replicas per task the distinct-member rule can force
one extra move per displaced replica (``m1`` and ``m2`` both run ``x`` and
``y``; ``m0`` leaves with ``x#0`` and ``y#0``; whoever takes both must give
up a third task), so the bound is twice that. A replica whose index is not
below the pool's member count is reported unassigned, as is every replica of
a pool without members. Input order is sorted by the context and no
randomness is used, so one input gives one output. The assignor is not
rack-aware.

Worked example: ``m-a`` owned ``t1, t2, t3``, ``m-b`` owned ``t4``, and
``m-c`` joins. Quotas are 2/1/1 for ``m-a``/``m-b``/``m-c`` (the ``ceil``
quota goes to ``m-a``, which keeps the most), so ``m-a`` keeps ``t1, t2``,
``m-b`` keeps ``t4`` and ``t3`` moves to ``m-c``: one move, the minimum.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from groupcoord.assignors.base import Assignment, AssignmentContext, AssignorError, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.incremental import TargetChange, rebalance_counts

__all__ = ["StickyAssignor"]


class StickyAssignor:
    name = "sticky"

    def assign(self, context: AssignmentContext) -> Assignment:
        result = Assignment(members={m.member_id: [] for m in context.members})
        pools: dict[str, list[TaskSpec]] = defaultdict(list)
        for task in context.tasks:
            if task.weight < 0:
                raise AssignorError(f"task {task.task_id!r} has negative weight {task.weight}")
            pools[task.pool].append(task)
        members_of: dict[str, list[MemberInfo]] = defaultdict(list)
        for member in context.members:
            members_of[member.pool].append(member)
        previous = _previous_claims(context)
        for pool in sorted(pools):
            _Pool(pool, pools[pool], members_of.get(pool, []), previous, result).run()
        return result

    def assign_incremental(self, change: TargetChange) -> dict[str, frozenset[TaskReplica]] | None:
        """The same count rule from the previous target alone (``assignors.incremental``), for a catalog of
        plain tasks and members in the default pool; ``None`` otherwise (the coordinator runs ``assign``)."""
        return rebalance_counts(change)


def _previous_claims(context: AssignmentContext) -> dict[tuple[str, int], tuple[str, TaskReplica]]:
    """``context.previous_owners()`` keyed by plain tuples, keeping the claimed object.

    Same rule (the claim with the highest ``owned_generation`` wins, the first
    member by id on a tie); tuple keys hash in C, which matters at 100,000
    replicas, and reusing the claimed ``TaskReplica`` saves rebuilding it.
    """
    claims: dict[tuple[str, int], tuple[int, str, TaskReplica]] = {}
    for member in context.members:
        generation, member_id = member.owned_generation, member.member_id
        for replica in member.owned:
            key = (replica.task_id, replica.replica)
            seen = claims.get(key)
            if seen is None or generation > seen[0]:
                claims[key] = (generation, member_id, replica)
    return {key: (member_id, replica) for key, (_, member_id, replica) in claims.items()}


class _Pool:
    """The sticky pass over one pool; members are handled by index for speed."""

    def __init__(
        self,
        pool: str,
        tasks: list[TaskSpec],
        members: list[MemberInfo],
        previous: dict[tuple[str, int], tuple[str, TaskReplica]],
        result: Assignment,
    ) -> None:
        self.label = repr(pool) if pool else "(default)"
        self.tasks = tasks
        self.ids = [m.member_id for m in members]
        self.previous = previous
        self.result = result
        self.held: list[list[TaskReplica]] = [[] for _ in self.ids]
        # task id -> indexes of members holding one of its replicas; only multi-replica tasks need it
        self.holders: dict[str, set[int]] = {}
        self.unplaced: list[TaskReplica] = []
        self.base = self.tokens = self.token_cursor = 0  # count mode: quota floor, larger quotas left
        self.count: list[int] = []

    def run(self) -> None:
        m = len(self.ids)
        if m == 0:
            reason = f"pool {self.label} has no members"
            for task in self.tasks:
                self.result.unassigned.update(dict.fromkeys(task.replica_ids(), reason))
            return
        self._keep_previous()
        if len({t.weight for t in self.tasks}) <= 1:
            self._balance_counts()
        else:
            self._balance_weights()
        for i, member_id in enumerate(self.ids):
            self.result.members[member_id] = self.held[i]

    def _keep_previous(self) -> None:
        """Tentatively keep every replica whose previous owner may still run it."""
        m, previous, held, unplaced = len(self.ids), self.previous, self.held, self.unplaced
        index: dict[str | None, int] = {mid: i for i, mid in enumerate(self.ids)}
        for task in self.tasks:
            task_id, count = task.task_id, task.replicas
            if count > m:
                reason = f"replication factor {count} exceeds the {m} member(s) of pool {self.label}"
                self.result.unassigned.update(dict.fromkeys(task.replica_ids()[m:], reason))
                count = m
            if count == 1:
                claim = previous.get((task_id, 0))
                i = None if claim is None else index.get(claim[0])
                if i is None or claim is None:
                    unplaced.append(TaskReplica(task_id, 0))
                else:
                    held[i].append(claim[1])
                continue
            holders: set[int] = set()
            self.holders[task_id] = holders
            for r in range(count):
                claim = previous.get((task_id, r))
                i = None if claim is None else index.get(claim[0])
                if i is None or claim is None or i in holders:
                    unplaced.append(TaskReplica(task_id, r))
                else:
                    held[i].append(claim[1])
                    holders.add(i)

    # -- equal weights: exact quotas ---------------------------------------------------------

    def _balance_counts(self) -> None:
        """Quotas ``base`` or ``base + 1``; the ``extra`` larger quotas are handed out lazily.

        Members keeping more than ``base + 1`` shed down to it; if more members
        sit at ``base + 1`` than there are larger quotas, the last of them shed
        one. What is left of the larger quotas ("tokens") goes to whichever
        member at ``base`` can take a replica without holding its task twice,
        so a replica is not forced onto a member that already runs its task.
        """
        held, m = self.held, len(self.ids)
        total = sum(map(len, held)) + len(self.unplaced)
        base, extra = divmod(total, m)
        cap = base + 1 if extra else base
        revoked_tasks: set[str] = set()
        for i in range(m):
            if len(held[i]) > cap:
                self.unplaced.extend(self._revoke(i, len(held[i]) - cap, revoked_tasks))
        at_cap = [i for i in range(m) if extra and len(held[i]) == cap]
        for i in at_cap[extra:]:
            self.unplaced.extend(self._revoke(i, 1, revoked_tasks))
        self.base, self.tokens = base, max(0, extra - len(at_cap))
        self.count = count = [len(mine) for mine in held]
        need = [i for i in range(m) if count[i] < base]
        self.token_cursor = 0
        first = 0
        for replica in self.unplaced:
            holders = self.holders.get(replica.task_id)
            while first < len(need) and count[need[first]] >= base:
                first += 1
            i = -1
            if holders is None:
                if first < len(need):
                    i = need[first]
            else:
                for k in range(first, len(need)):
                    if count[need[k]] < base and need[k] not in holders:
                        i = need[k]
                        break
            if i < 0:
                i = self._token_member(holders or ())
            if i < 0:
                receiver = need[first] if first < len(need) else self._token_member(())
                if receiver < 0:  # cannot happen: the quotas add up to the replicas to place
                    raise AssignorError(f"sticky: no member has room for {replica} in pool {self.label}")
                self._place_by_swap(replica, receiver)
                continue
            if count[i] == base:
                self.tokens -= 1
            if holders is not None:
                holders.add(i)
            held[i].append(replica)
            count[i] += 1

    def _token_member(self, holders: set[int] | tuple[()]) -> int:
        """A member at ``base`` not holding the task, while larger quotas remain; -1 if none."""
        if self.tokens <= 0:
            return -1
        count, base, m = self.count, self.base, len(self.ids)
        for start, stop in ((self.token_cursor, m), (0, m)):  # members filled later sit behind the cursor
            for i in range(start, stop):
                if count[i] == base and i not in holders:
                    if not holders:
                        self.token_cursor = i
                    return i
        return -1

    def _revoke(self, i: int, excess: int, revoked_tasks: set[str]) -> list[TaskReplica]:
        """Take ``excess`` replicas off member ``i``, newest-kept last first.

        For multi-replica tasks, prefer tasks no other member gave up already,
        so the receiving members are less likely to be offered two replicas of
        one task (which would cost an extra swap).
        """
        mine = self.held[i]
        if not self.holders:
            taken = mine[-excess:]
            del mine[-excess:]
            return taken
        picked: set[int] = set()
        for k in range(len(mine) - 1, -1, -1):
            if len(picked) == excess:
                break
            if mine[k].task_id not in revoked_tasks:
                picked.add(k)
        for k in range(len(mine) - 1, -1, -1):
            if len(picked) == excess:
                break
            picked.add(k)
        taken = [mine[k] for k in sorted(picked)]
        self.held[i] = [r for k, r in enumerate(mine) if k not in picked]
        for replica in taken:
            revoked_tasks.add(replica.task_id)
            holders = self.holders.get(replica.task_id)
            if holders is not None:
                holders.discard(i)
        return taken

    def _place_by_swap(self, replica: TaskReplica, receiver: int) -> None:
        """Place ``replica`` when every member with room already holds its task.

        A member ``x`` without the task hands the receiver one replica the
        receiver lacks and takes ``replica`` instead: ``x``'s count stays, the
        receiver's grows by one. Such a replica exists: ``x`` has no room, so it
        holds more replicas than the receiver, which cannot then hold a
        superset of ``x``'s tasks plus this one.
        """
        holders = self.holders[replica.task_id]
        for x in range(len(self.ids)):
            if x in holders:
                continue
            mine = self.held[x]
            for k in range(len(mine) - 1, -1, -1):
                other = mine[k]
                other_holders = self.holders.get(other.task_id)
                if other_holders is not None and receiver in other_holders:
                    continue
                mine[k] = replica
                holders.add(x)
                self.held[receiver].append(other)
                if other_holders is not None:
                    other_holders.discard(x)
                    other_holders.add(receiver)
                if self.count[receiver] == self.base:
                    self.tokens -= 1
                self.count[receiver] += 1
                return
        raise AssignorError(f"sticky: cannot place {replica} in pool {self.label} on distinct members")

    # -- unequal weights: spread within the heaviest replica ------------------------------------

    def _balance_weights(self) -> None:
        weight_of = {t.task_id: t.weight for t in self.tasks}
        held, m = self.held, len(self.ids)
        load = [sum(weight_of[r.task_id] for r in mine) for mine in held]
        tolerance = max(weight_of.values()) * (1 + 1e-9)
        # Shed members far over the mean first (cheap tail pops), so the greedy pass below does the
        # bulk of any large rebalance and the one-by-one evening out only fixes the last gaps.
        cap = (sum(load) + sum(weight_of[r.task_id] for r in self.unplaced)) / m + tolerance
        for i in range(m):
            mine = held[i]
            while load[i] > cap and mine:
                replica = mine.pop()
                load[i] -= weight_of[replica.task_id]
                self.unplaced.append(replica)
                holders = self.holders.get(replica.task_id)
                if holders is not None:
                    holders.discard(i)
        lightest = [(load[i], i) for i in range(m)]
        heapq.heapify(lightest)
        for replica in sorted(self.unplaced, key=lambda r: -weight_of[r.task_id]):  # stable: ties in task order
            taken = self.holders.get(replica.task_id)
            skipped = []
            while taken is not None and lightest[0][1] in taken:
                skipped.append(heapq.heappop(lightest))
            _, i = heapq.heappop(lightest)
            held[i].append(replica)
            load[i] += weight_of[replica.task_id]
            if taken is not None:
                taken.add(i)
            heapq.heappush(lightest, (load[i], i))
            for entry in skipped:
                heapq.heappush(lightest, entry)
        self._even_out(load, weight_of, tolerance)

    def _even_out(self, load: list[float], weight_of: dict[str, float], tolerance: float) -> None:
        """Move the replica that best halves the gap from heaviest to lightest until within tolerance."""
        held, m = self.held, len(self.ids)
        while True:
            heavy = max(range(m), key=lambda i: (load[i], -i))
            light = min(range(m), key=lambda i: (load[i], i))
            gap = load[heavy] - load[light]
            if gap <= tolerance:
                return
            best_k, best_score = -1, gap
            mine = held[heavy]
            for k in range(len(mine) - 1, -1, -1):
                replica = mine[k]
                w = weight_of[replica.task_id]
                if not 0 < w < gap:
                    continue
                holders = self.holders.get(replica.task_id)
                if holders is not None and light in holders:
                    continue
                score = abs(gap / 2 - w)
                if score < best_score:
                    best_k, best_score = k, score
                    if score <= gap * 0.05:
                        break
            if best_k < 0:
                return  # nothing on the heaviest member can go to the lightest: as even as moves allow
            replica = mine[best_k]
            mine[best_k] = mine[-1]
            mine.pop()
            held[light].append(replica)
            w = weight_of[replica.task_id]
            load[heavy] -= w
            load[light] += w
            holders = self.holders.get(replica.task_id)
            if holders is not None:
                holders.discard(heavy)
                holders.add(light)
