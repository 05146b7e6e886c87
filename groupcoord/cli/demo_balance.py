"""Act two's verdict: per group, the load per member before and after, what moved, and a self-check.

Pure: it reads two load snapshots (the one the imbalance was measured in, and the last one,
taken after the rebalances) and the assignment at each. CPU is what the workers reported
(the snapshot's worker rows); msg/s is the snapshot's per-task averages summed over who owns
each task, and the worker rows' own totals must agree with that sum, so a move is confirmed by
the workers' reports rather than assumed. ``failures`` is the demo's self-check: a strategy
expected to move must have moved a task and brought the hot member's load down.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from groupcoord.assignors.snapshot import LoadSnapshot

__all__ = ["MemberLoad", "Outcome", "failures", "format_outcome", "max_mean", "member_loads"]

CONFIRM_TOLERANCE = 0.05
"""relative gap allowed between a member's summed task rates and what its worker row says."""


@dataclass(frozen=True)
class MemberLoad:
    cpu: float
    """percent of the member's CPU limit, as the worker reported it."""
    msg: float
    """msg/s in + out of the tasks it owns, from the snapshot's per-task averages."""
    reported_msg: float
    """msg/s in + out the worker's own row totals (long-term averages of the tasks it reported)."""


def member_loads(snapshot: LoadSnapshot, tasks: Mapping[str, Sequence[str]], ids: Mapping[str, str]) -> dict[str, MemberLoad]:
    """Load per member name; ``tasks`` is name -> task ids it owns, ``ids`` name -> member id (the snapshot's key)."""
    loads = {}
    for name, owned in tasks.items():
        row = snapshot.workers.get(ids[name])
        cpu = 100.0 * row.cpu_usage / row.cpu_limit if row is not None and row.cpu_limit > 0 else 0.0
        msg = 0.0
        for task_id in owned:
            stats = snapshot.tasks.get(task_id)
            if stats is not None:
                msg += stats.short_msg_rate_in + stats.short_msg_rate_out
        reported = row.long_msg_rate_in + row.long_msg_rate_out if row is not None else 0.0
        loads[name] = MemberLoad(cpu, msg, reported)
    return loads


def max_mean(values: Sequence[float]) -> float:
    """The balance figure: busiest / mean (1.0 is perfectly even; 0 mean counts as even)."""
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else 1.0


@dataclass
class Outcome:
    """One group's story: before and after, with what the strategy was expected to do."""

    assignor: str
    hot: str
    foreign: str
    before_tasks: dict[str, tuple[str, ...]]
    after_tasks: dict[str, tuple[str, ...]]
    before: dict[str, MemberLoad]
    after: dict[str, MemberLoad]
    foreign_cpu: float = 0.0
    """percent of a core the foreign member's non-task process uses (for the picture)."""
    expect_move: bool = True
    note: str = ""
    moved_in_rounds: list[int] = field(default_factory=list)

    def moves(self) -> list[tuple[str, str, str]]:
        """(task, from, to) for every task whose owner changed, by task id."""
        was = {t: m for m, ts in self.before_tasks.items() for t in ts}
        now = {t: m for m, ts in self.after_tasks.items() for t in ts}
        return sorted((t, was[t], now[t]) for t in now if t in was and was[t] != now[t])

    def balance(self, figure: str) -> tuple[float, float]:
        """max/mean of ``figure`` ("cpu" or "msg") before and after."""
        return (max_mean([getattr(v, figure) for v in self.before.values()]),
                max_mean([getattr(v, figure) for v in self.after.values()]))


def failures(outcome: Outcome) -> list[str]:
    """What is wrong with ``outcome``, one sentence each (empty: the strategy did its job)."""
    found = []
    for when, loads in (("before", outcome.before), ("after", outcome.after)):
        for name, load in sorted(loads.items()):
            if abs(load.msg - load.reported_msg) > CONFIRM_TOLERANCE * max(load.msg, load.reported_msg, 1.0):
                found.append(f"{outcome.assignor}: {name}'s own reports ({load.reported_msg:.0f} msg/s) do not "
                             f"confirm its tasks' {load.msg:.0f} msg/s {when} the rebalance")
    if not outcome.expect_move:
        return found
    if not outcome.moves():
        found.append(f"{outcome.assignor} moved no task off the imbalance")
    hot_before, hot_after = outcome.before[outcome.hot], outcome.after[outcome.hot]
    if hot_after.cpu >= hot_before.cpu:
        found.append(f"{outcome.assignor}: the hot member's CPU did not go down "
                     f"({hot_before.cpu:.1f}% -> {hot_after.cpu:.1f}%)")
    if hot_after.msg >= hot_before.msg:
        found.append(f"{outcome.assignor}: the hot member's msg/s did not go down "
                     f"({hot_before.msg:.0f} -> {hot_after.msg:.0f})")
    return found


def _short(name: str) -> str:
    return name.rsplit("-", 1)[-1]


def format_outcome(outcome: Outcome) -> list[str]:
    """The group's table in at most 80 columns: member, CPU % and msg/s before -> after, then the moves."""
    lines = [f"  {'member':<24}{'CPU % before -> after':>24}{'msg/s before -> after':>24}"]
    for name in sorted(outcome.before):
        tag = " (hot)" if name == outcome.hot else " (+foreign CPU)" if name == outcome.foreign else ""
        b, a = outcome.before[name], outcome.after[name]
        lines.append(f"  {_short(name) + tag:<24}{b.cpu:>15.1f} -> {a.cpu:>5.1f}{b.msg:>15.0f} -> {a.msg:>5.0f}")
    cpu, msg = outcome.balance("cpu"), outcome.balance("msg")
    lines.append(f"  {'max/mean':<24}{cpu[0]:>15.2f} -> {cpu[1]:>5.2f}{msg[0]:>15.2f} -> {msg[1]:>5.2f}")
    moves = outcome.moves()
    if moves:
        rounds = ", ".join(map(str, outcome.moved_in_rounds))
        text = ", ".join(f"{t} {_short(a)}->{_short(b)}" for t, a, b in moves)
        lines.extend(textwrap.wrap(f"moved (round {rounds}): {text}", 80, initial_indent="  ",
                                   subsequent_indent="    "))
    else:
        text = "moved nothing" + (f": {outcome.note}" if outcome.note else "")
        lines.extend(textwrap.wrap(text, 80, initial_indent="  ", subsequent_indent="    "))
    return lines

