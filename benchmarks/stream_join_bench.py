"""CPU of one member joining a Stable classic group over Session streams, per member, in process: the stream layer
and the model together, with no network.

``model_join_bench`` measures the model's steps alone; ``stream_bench`` the whole rebalance end to end, where the
load moves the coordinator's CPU by a fifth from run to run. This runs the coordinator's own stream code
(``SessionStream``: batches read, checks, dispatch, answers framed and queued, RebalanceStarted pushed) on an
asyncio loop, three streams whose gRPC context is a queue in and a list out, and the real runtime (records
written on its writer thread). A group of N-1 is formed over the streams; then, per round, the newcomer joins
(twice) and every member re-joins and syncs, the leader with an assignment for every member (parsed off the loop
past 256 KiB, as at 10,000), in batches of 100 as the worker's stream sends them. It counts
``time.process_time()`` from the newcomer's first JoinGroup to every member synced, less the requests' building,
and checks every answer (NONE) and every member told of the rebalance.

    python benchmarks/stream_join_bench.py                      # 1,000 and 10,000 members
    python benchmarks/stream_join_bench.py --sizes 1000 --rounds 9

``BENCH_TREE=<dir>`` imports the code of ``<dir>`` for an A/B (``git archive REV | tar -x -C <dir>``): run both
side by side, so they share the machine's load, and compare round by round.
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("BENCH_TREE") or str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))  # model_join_bench, beside it
from model_join_bench import sizes_and_rounds

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.rpc.service import CoordinatorServicer
from groupcoord.coordinator.rpc.session_envelope import BATCH_METADATA
from groupcoord.coordinator.rpc.session_registry import SessionRegistry
from groupcoord.coordinator.rpc.session_stream import SessionStream
from groupcoord.coordinator.runtime.router import as_router
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb

GROUP, STREAMS, BATCH = "bench", 3, 100
SESSION_MS, REBALANCE_MS = 600_000, 120_000


class Context:
    """A Session call's gRPC side: what the client sends waits in a queue, what the coordinator writes in a list."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.out: list[bytes] = []
        self.tag = 0

    async def read(self) -> bytes:
        return await self.inbox.get()

    async def write(self, data: bytes) -> None:
        self.out.append(data)

    def peer(self) -> str:
        return "ipv4:127.0.0.1:40000"

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((BATCH_METADATA, "1"),)  # reads batched answers, as the worker's stream does

    async def send_initial_metadata(self, metadata: Any) -> None:
        return None

    async def abort(self, code: Any, details: str) -> None:
        raise RuntimeError(f"the stream ended: {code} {details}")

    def batches(self, kind: str, requests: list[Any]) -> list[bytes]:
        """``requests`` as batches of ``BATCH``, each request under a new tag."""
        built = []
        for start in range(0, len(requests), BATCH):
            batch = pb.SessionRequest()
            for request in requests[start:start + BATCH]:
                self.tag += 1
                getattr(batch.batch.add(tag=self.tag), kind).CopyFrom(request)
            built.append(batch.SerializeToString())
        return built

    def one(self, kind: str, request: Any) -> bytes:
        self.tag += 1
        return pb.SessionRequest(tag=self.tag, **{kind: request}).SerializeToString()

    def answers(self) -> list[pb.SessionResponse]:
        """What was written since the last call, batches opened."""
        found: list[pb.SessionResponse] = []
        for data in self.out:
            response = pb.SessionResponse.FromString(data)
            found.extend(response.batch or [response])
        self.out.clear()
        return found


def join_request(member_id: str = "") -> pb.JoinGroupRequest:
    return pb.JoinGroupRequest(group_id=GROUP, member_id=member_id, session_timeout_ms=SESSION_MS,
                               rebalance_timeout_ms=REBALANCE_MS, protocol_type="bench", protocols=["round-robin"])


class Coordinator:
    """The runtime on this loop, on a fake clock, and three streams with their contexts."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.runtime = CoordinatorRuntime(CoordinatorConfig(
            group_initial_rebalance_delay_ms=3000, group_max_size=100_000, group_max_session_timeout_ms=SESSION_MS,
            group_max_pending_members=20_000, group_max_pending_members_per_principal=20_000), clock=self.clock)
        router = as_router(self.runtime)
        router.attach(asyncio.get_running_loop())
        registry, servicer = SessionRegistry(router), CoordinatorServicer(router)
        self.contexts = [Context() for _ in range(STREAMS)]
        self.streams = [SessionStream(router, servicer, None, registry, c, "") for c in self.contexts]  # type: ignore[arg-type]
        self.tasks = [asyncio.get_running_loop().create_task(s.run()) for s in self.streams]
        self.ids: list[list[str]] = [[] for _ in range(STREAMS)]  # each stream's members

    @property
    def group(self) -> Group:
        return self.runtime.model.groups[GROUP]

    def send(self, stream: int, data: list[bytes]) -> None:
        for each in data:
            self.contexts[stream].inbox.put_nowait(each)

    async def until(self, done: Callable[[], bool], *, quiet: bool = True, timeout_s: float = 600) -> None:
        """Until ``done()`` and (``quiet``) nothing is in flight, queued or being written anywhere."""
        deadline = time.monotonic() + timeout_s
        while not (done() and (not quiet or self._quiet())):
            if time.monotonic() > deadline:
                raise TimeoutError("the rebalance did not end")
            await asyncio.sleep(0.002)

    def _told(self) -> bool:
        """The rebalance's record landed and its news went out (members that join before it are not told)."""
        return (self.group.state.name == "PREPARING_REBALANCE" and self.runtime.in_flight == 0
                and not any(s._outbox for s in self.streams))

    def _quiet(self) -> bool:
        runtime = self.runtime
        return (runtime.waiting() == 0 and runtime.in_flight == 0
                and all(s.in_flight == 0 and not s._outbox for s in self.streams))

    def syncs(self, generation: int) -> tuple[int, bytes, list[list[bytes]]]:
        """The leader's stream, its SyncGroup (an entry for every member) and every follower's, by stream."""
        leader = self.group.leader_id
        at = next(n for n, ids in enumerate(self.ids) if leader in ids)
        request = pb.SyncGroupRequest(group_id=GROUP, member_id=leader, generation=generation)
        request.assignments.extend(pb.MemberAssignment(member_id=m) for m in self.group.members)
        followers = [c.batches("sync_group", [pb.SyncGroupRequest(group_id=GROUP, member_id=m, generation=generation)
                                              for m in ids if m != leader]) for c, ids in zip(self.contexts, self.ids)]
        return at, self.contexts[at].one("sync_group", request), followers

    async def sync_all(self, generation: int) -> None:
        at, leader, followers = self.syncs(generation)
        self.send(at, [leader])
        for stream, batches in enumerate(followers):
            self.send(stream, batches)
        await self.until(lambda: self.group.state.name == "STABLE")

    async def form(self, size: int) -> None:
        """``size`` members over the streams, joined (twice each) within the initial delay and synced."""
        for stream, context in enumerate(self.contexts):
            count = size // STREAMS + (stream < size % STREAMS)
            self.send(stream, context.batches("join_group", [join_request()] * count))
        await self.until(lambda: GROUP in self.runtime.model.groups and len(self.group.pending_members) == size)
        for stream, context in enumerate(self.contexts):
            self.ids[stream] = [a.join_group.member_id for a in context.answers()]
            self.send(stream, context.batches("join_group", [join_request(m) for m in self.ids[stream]]))
        await self.until(lambda: len(self.group.members) == size, quiet=False)
        for _ in range(100):  # the initial delay runs out (it grows while members arrive: bounded)
            if self.group.state.name == "AWAITING_SYNC":
                break
            self.clock.advance(3.5)
            self.runtime.poll_timers()
            await asyncio.sleep(0.01)
        await self.sync_all(self.group.generation)
        for context in self.contexts:
            context.answers()

    async def one_joins(self) -> tuple[float, int]:
        """One rebalance; its CPU seconds (the requests' building left out) and the members synced."""
        generation, newcomer = self.group.generation, self.contexts[0]
        gc.collect()
        started = time.process_time()
        self.send(0, [newcomer.one("join_group", join_request())])
        await self.until(lambda: len(self.group.pending_members) == 1)
        member_id = newcomer.answers()[0].join_group.member_id
        self.send(0, [newcomer.one("join_group", join_request(member_id))])
        await self.until(self._told, quiet=False)
        building = time.process_time()
        joins = [c.batches("join_group", [join_request(m) for m in ids]) for c, ids in zip(self.contexts, self.ids)]
        built = time.process_time()
        for stream, batches in enumerate(joins):
            self.send(stream, batches)
        await self.until(lambda: self.group.state.name == "AWAITING_SYNC")
        self.ids[0].append(member_id)
        building2 = time.process_time()
        at, leader, followers = self.syncs(generation + 1)
        built2 = time.process_time()
        self.send(at, [leader])
        for stream, batches in enumerate(followers):
            self.send(stream, batches)
        await self.until(lambda: self.group.state.name == "STABLE")
        spent = time.process_time() - started - (built - building) - (built2 - building2)
        self._check(len(self.group.members))
        return spent, len(self.group.members)

    def _check(self, size: int) -> None:
        """Every member told, every JoinGroup and SyncGroup answered NONE (the newcomer's first aside)."""
        answers = [a for c in self.contexts for a in c.answers()]
        kinds = [a.WhichOneof("body") for a in answers]
        joins = [a.join_group for a, kind in zip(answers, kinds) if kind == "join_group"]
        syncs = [a.sync_group for a, kind in zip(answers, kinds) if kind == "sync_group"]
        told = kinds.count("news")
        assert told >= size - 2, f"{told} members told of the rebalance, of {size}"
        assert len(joins) == size and all(j.error.code == pb.NONE for j in joins), "a JoinGroup failed"
        assert len(syncs) == size and all(s.error.code == pb.NONE for s in syncs), "a SyncGroup failed"

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()


async def measure(size: int, rounds: int) -> list[float]:
    """CPU microseconds per member of each round (``size`` members before the first)."""
    coordinator = Coordinator()
    try:
        await coordinator.form(size - 1)
        per_member = []
        for _ in range(rounds):
            spent, members = await coordinator.one_joins()
            per_member.append(spent / members * 1e6)
        return per_member
    finally:
        coordinator.close()


def main() -> None:
    sizes, rounds = sizes_and_rounds(__doc__ or "", 5)
    print(f"{'members':>8} {'median µs/member':>17} {'min':>7} {'max':>7}  (process CPU, {rounds} rounds; "
          f"load average {os.getloadavg()[0]:.1f})")
    for size in sizes:
        figures = asyncio.run(measure(size, rounds))
        print(f"{size:>8,} {statistics.median(figures):>17.1f} {min(figures):>7.1f} {max(figures):>7.1f}  "
              f"rounds: {', '.join(f'{f:.0f}' for f in figures)}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except (TimeoutError, AssertionError) as failure:  # one line, no traceback
        print(f"stream_join_bench: stopped: {type(failure).__name__}: {failure}", file=sys.stderr)
        sys.exit(1)
