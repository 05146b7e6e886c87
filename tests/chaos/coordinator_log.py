"""What the coordinators' own logs say about a run, for the ownership checker's bounds.

The chaos coordinators log in JSON (``--log-format json``), one object per line with ``ts`` (UTC,
ISO 8601) and the ``extra=`` fields of the line. Three things are read from them:

* **Lost loop time** (``loop_lost`` and ``loop_late`` lines, field ``lost_s``: the process's total so
  far, ``coordinator.runtime.lag``). A coordinator extends sessions and rebalance deadlines by what
  its loop lost, so a task may stay unowned that much longer than the bound of a quiet machine.
  A restarted process counts from 0 again: totals are chained across restarts.
* **Shard moves**: from the moment no coordinator is in office for a shard (its last leader's
  ``unloaded`` line, or its SIGKILL, which logs nothing: the runner's fault lines say when) to the
  next ``in_office`` of that shard on any coordinator. The shard is the ``shard N:`` prefix of the
  message (none for an elected coordinator holding every group). The new leader restarts every
  member's session when it loads, so a gap during a move counts from the move's end, as a gap
  during a fault counts from its heal; a move no fault forced (a ZooKeeper session lost under load)
  is as long as the log shows.
* **Splits** (``tasks_split`` lines, field ``lineage``: child task id -> parent task id).
"""

from __future__ import annotations

import bisect
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from groupcoord.coordinator.runtime.shard_map import shard_of

__all__ = ["CoordinatorHistory", "Move"]

_SHARD = re.compile(r"^shard (\d+): ")


@dataclass(frozen=True)
class Move:
    """``shard`` (None: every group) had no coordinator in office from ``start`` to ``end``."""

    shard: int | None
    start: float
    end: float


@dataclass
class CoordinatorHistory:
    lost: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # name -> (ts, total lost, chained)
    moves: list[Move] = field(default_factory=list)
    split_from: dict[str, str] = field(default_factory=dict)  # child task id -> parent task id
    shards: int = 1

    @classmethod
    def parse(cls, logs: Mapping[str, Iterable[str]], *, shards: int = 1,
              kills: Iterable[tuple[float, str]] = ()) -> CoordinatorHistory:
        """``logs``: each coordinator's log lines by its name (lines that are not JSON are skipped);
        ``kills``: when each coordinator was SIGKILLed, by name (it logged no ``unloaded`` line)."""
        history = cls(shards=shards)
        offices: list[tuple[float, str, str, int | None]] = [(ts, "kill", name, None) for ts, name in kills]
        for name, lines in logs.items():
            totals: list[tuple[float, float]] = []
            chained = last = 0.0
            for entry in _entries(lines):
                ts, what = entry["_ts"], entry.get("event")
                if what in ("loop_lost", "loop_late") and "lost_s" in entry:
                    total = float(entry["lost_s"])
                    chained += total - last if total >= last else total  # a restart counts from 0
                    last = total
                    totals.append((ts, chained))
                elif what in ("in_office", "unloaded"):
                    found = _SHARD.match(str(entry.get("message", "")))
                    offices.append((ts, "in" if what == "in_office" else "out", name, int(found[1]) if found else None))
                elif what == "tasks_split":
                    history.split_from.update({str(c): str(p) for c, p in dict(entry.get("lineage", {})).items()})
            history.lost[name] = sorted(totals)
        history.moves = _moves(sorted(offices, key=lambda o: o[0]))
        return history

    def lost_between(self, start: float, stop: float) -> float:
        """The most any one coordinator's loop lost from ``start`` to ``stop``, as its log says: from its
        last total before ``start`` to its first after ``stop`` (what no line says yet is under a second)."""
        most = 0.0
        for totals in self.lost.values():
            times = [ts for ts, _ in totals]
            before = bisect.bisect_right(times, start) - 1
            after = bisect.bisect_left(times, stop)
            low = totals[before][1] if before >= 0 else 0.0
            high = totals[min(after, len(totals) - 1)][1] if totals else 0.0
            most = max(most, high - low)
        return most

    def moved_until(self, group: str, start: float, stop: float) -> float:
        """The latest end of a move of ``group``'s shard that overlapped ``start``-``stop`` (-inf: none)."""
        shard = shard_of(group, self.shards) if self.shards > 1 else None
        ends = [m.end for m in self.moves if (m.shard is None or m.shard == shard) and m.start < stop and m.end > start]
        return max(ends, default=float("-inf"))


def _entries(lines: Iterable[str]) -> Iterable[dict[str, object]]:
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
            entry["_ts"] = datetime.fromisoformat(str(entry["ts"])).timestamp()
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a kill, or someone else's output
        yield entry


def _moves(offices: list[tuple[float, str, str, int | None]]) -> list[Move]:
    """From the moment no coordinator is in office for a shard, as the lines say (an ``out`` line, or a
    SIGKILL: ``kill``, shard None), to the next ``in`` of that shard, any coordinator's."""
    in_office: dict[int | None, set[str]] = defaultdict(set)
    out_since: dict[int | None, float] = {}
    moves: list[Move] = []
    for ts, what, name, shard in offices:
        if what == "in":
            in_office[shard].add(name)
            began = out_since.pop(shard, None)
            if began is not None:
                moves.append(Move(shard, began, ts))
            continue
        for key in (list(in_office) if what == "kill" else [shard]):
            if name in in_office[key]:
                in_office[key].discard(name)
                if not in_office[key]:
                    out_since.setdefault(key, ts)
    return moves
