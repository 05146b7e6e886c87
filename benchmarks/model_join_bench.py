"""CPU of the classic model's steps when one member joins a Stable group, per member, in process.

``stream_bench`` measures the same rebalance end to end (gRPC, streams, a coordinator process on a
capped core), where run-to-run spread on a loaded machine hides a change of a few percent. This
drives the runtime without a network (a fake clock, records written inline, as ``coordinator.testing``
does but without its per-step invariant check) through what every member sends in that rebalance:
the newcomer's two JoinGroups, each member's heartbeat answered REBALANCE_IN_PROGRESS, each
member's JoinGroup, the leader's SyncGroup and every follower's. It counts ``time.process_time()``
of those steps, several rounds, and prints the median per member: a figure that moves little with
the machine's load.

    python benchmarks/model_join_bench.py                        # 1,000 and 10,000 members
    python benchmarks/model_join_bench.py --sizes 1000 --rounds 9

For an A/B, run it in turns against two trees: ``BENCH_TREE=<dir>`` imports the code of ``<dir>`` (for
example ``git archive main | tar -x -C /tmp/base``); compare the minima, which the load moves least.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# BENCH_TREE=<dir>: measure another tree's code (an A/B: ``git archive REV | tar -x -C <dir>``)
sys.path.insert(0, os.environ.get("BENCH_TREE") or str(Path(__file__).resolve().parents[1]))

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.runtime.writers import InlineWriter
from groupcoord.v1 import groupcoord_pb2 as pb

GROUP = "bench"
SESSION_MS, REBALANCE_MS = 60_000, 120_000


class Runner:
    """A runtime on a fake clock; each call one model step, its answer returned."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.runtime = CoordinatorRuntime(CoordinatorConfig(group_initial_rebalance_delay_ms=1000, group_max_size=100_000),
                                          clock=self.clock, writer=InlineWriter())
        self.model = self.runtime.model

    def call(self, step: Any, request: Any, response_type: type, *extra: Any) -> list[Any]:
        answers: list[Any] = []
        self.runtime.submit(lambda token: step(request, token, *extra), response_type, answers.append)
        return answers

    def join_request(self, member_id: str = "", client_id: str = "w") -> pb.JoinGroupRequest:
        return pb.JoinGroupRequest(group_id=GROUP, member_id=member_id, client_id=client_id,
                                   session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
                                   protocol_type="bench", protocols=["round-robin"],
                                   metadata=pb.MemberMetadata(rack="r1", capacity=1.0))

    def join(self, member_id: str, held: dict[str, list[Any]]) -> None:
        held[member_id] = self.call(self.model.join, self.join_request(member_id), pb.JoinGroupResponse, "10.0.0.1")

    def newcomer(self, held: dict[str, list[Any]]) -> None:
        first = self.call(self.model.join, self.join_request(), pb.JoinGroupResponse, "10.0.0.1")
        self.join(first[0].member_id, held)

    def sync_all(self, held: dict[str, list[Any]], prepared: dict[str, pb.SyncGroupRequest] | None = None) -> None:
        """The leader's SyncGroup (nothing assigned to anyone), then every follower's."""
        answers = {member_id: answer[0] for member_id, answer in held.items()}
        leader = next(a for a in answers.values() if a.leader_id == a.member_id)
        request = pb.SyncGroupRequest(group_id=GROUP, member_id=leader.member_id, generation=leader.generation)
        request.assignments.extend(pb.MemberAssignment(member_id=m.member_id) for m in leader.members)
        synced = [self.call(self.model.sync, request, pb.SyncGroupResponse)]
        for member_id, answer in answers.items():
            if member_id != leader.member_id:
                follower = (prepared or {}).get(member_id) or pb.SyncGroupRequest(
                    group_id=GROUP, member_id=member_id, generation=answer.generation)
                synced.append(self.call(self.model.sync, follower, pb.SyncGroupResponse))
        assert all(s and s[0].error.code == pb.NONE for s in synced), "a SyncGroup failed"

    def one_joins(self, members: list[str]) -> float:
        """One rebalance: a newcomer, every member told by its heartbeat, every member re-joins and syncs.
        Returns the CPU seconds of those steps (the requests are built before, as clients would)."""
        generation = self.model.groups[GROUP].generation
        beats = [pb.HeartbeatRequest(group_id=GROUP, member_id=m, generation=generation) for m in members]
        joins = [self.join_request(m) for m in members]
        follower_syncs = {m: pb.SyncGroupRequest(group_id=GROUP, member_id=m, generation=generation + 1)
                          for m in members}
        model = self.model
        held: dict[str, list[Any]] = {}
        started = time.process_time()
        self.newcomer(held)
        for beat in beats:
            answer = self.call(model.heartbeat, beat, pb.HeartbeatResponse)
            assert answer[0].error.code == pb.REBALANCE_IN_PROGRESS, answer
        for join in joins:
            held[join.member_id] = self.call(model.join, join, pb.JoinGroupResponse, "10.0.0.1")
        self.sync_all(held, follower_syncs)
        spent = time.process_time() - started
        assert all(answer and answer[0].error.code == pb.NONE for answer in held.values()), "a JoinGroup failed"
        members[:] = list(held)
        return spent


def form(runner: Runner, size: int) -> list[str]:
    """A Stable group of ``size``: every member's two joins within the initial delay, then one sync round."""
    held: dict[str, list[Any]] = {}
    for _ in range(size):
        runner.newcomer(held)
    for _ in range(100):  # the initial delay runs out (it grows while members arrive: bounded)
        if all(answer for answer in held.values()):
            break
        runner.clock.advance(1.0)
        runner.runtime.poll_timers()
    runner.sync_all(held)
    return list(held)


def measure(size: int, rounds: int) -> list[float]:
    """CPU microseconds per member of each round (``size`` members before the first)."""
    runner = Runner()
    members = form(runner, size - 1)
    per_member = []
    for _ in range(rounds):
        gc.collect()
        spent = runner.one_joins(members)
        per_member.append(spent / len(members) * 1e6)
    return per_member


def sizes_and_rounds(description: str, rounds: int) -> tuple[list[int], int]:
    """The command line both join benches take (this one and stream_join_bench): bad values exit 2 with one line."""
    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="group sizes, comma-separated (default 1000,10000)")
    parser.add_argument("--rounds", type=int, default=rounds, help=f"rebalances measured per size (default {rounds})")
    args = parser.parse_args()
    try:
        sizes = [int(part) for part in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r} is not a comma-separated list of whole numbers")
    if min(sizes) < 2 or args.rounds < 1:
        parser.error("sizes must be at least 2 and --rounds at least 1")
    return sizes, args.rounds


def main() -> None:
    sizes, rounds = sizes_and_rounds(__doc__ or "", 7)
    print(f"{'members':>8} {'median µs/member':>17} {'min':>7} {'max':>7}  (process CPU, {rounds} rounds)")
    for size in sizes:
        figures = measure(size, rounds)
        print(f"{size:>8,} {statistics.median(figures):>17.1f} {min(figures):>7.1f} {max(figures):>7.1f}", flush=True)


if __name__ == "__main__":
    main()
