"""Coordinator benchmarks: heartbeat capacity and rebalance latency.

    python benchmarks/coordinator_bench.py [--quick]

Heartbeat capacity: 1,000 members of one Stable group heartbeat as fast as
the load generator can send (asyncio, many calls in flight) against (a) the
coordinator and (b) a no-op server with the same service and message types,
one after the other in the same run; the server runs in its own process, the
load generator in this one. Reported: requests/s, p99 latency, and the ratio.

Transport floor (``--parts transport``): the no-op server's CPU per heartbeat when each is a unary
call (as the protocol's calls are) and when each is a message on its caller's own long-lived stream.

Rebalance, the coordinator's own share (``--parts model``): the same rebalance driven through
the runtime in this process, no network; CPU and wall time of the coordinator's steps alone.

Rebalance latency (``--parts rebalance``): N simulated members (asyncio, real gRPC, real
protocol: two-step join, sync, heartbeats every N/3,333 s, as members of a group that size
would; spread over several generator processes; the leader runs the round-robin assignor over
10·N tasks) form a Stable group; then one more member joins and we time until every member
holds the new generation's assignment. Also counted: the calls the members made meanwhile, and
what the no-op server would spend on as many heartbeats (its CPU per call, measured first): the
floor gRPC Python sets under the coordinator. Load averages are taken as each row ends.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

GROUP = "bench"


# ---------------------------------------------------------------- servers (child processes)


class NoopCoordinator(pb_grpc.GroupCoordinatorServicer):
    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse()


#: ``--parts transport``: the same heartbeat messages on one long-lived stream per caller instead of a
#: call each (a method of this benchmark's no-op server only; the coordinator has no such method).
STREAM_METHOD = "/bench.Transport/Heartbeats"


async def _noop_heartbeats(requests: Any, context: Any) -> Any:
    async for _ in requests:
        yield pb.HeartbeatResponse()


def _stream_handler() -> grpc.GenericRpcHandler:
    handler = grpc.stream_stream_rpc_method_handler(_noop_heartbeats, request_deserializer=pb.HeartbeatRequest.FromString,
                                                    response_serializer=pb.HeartbeatResponse.SerializeToString)
    return grpc.method_handlers_generic_handler("bench.Transport", {"Heartbeats": handler})


def bench_runtime(store: Any = None) -> Any:
    """The runtime every part of this benchmark measures: no initial rebalance delay (a group forms at
    once), sessions as short as 100 ms allowed; ``store`` None: in memory."""
    from groupcoord.coordinator.config import CoordinatorConfig
    from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime

    return CoordinatorRuntime(CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=100),
                              store=store)


def _serve(kind: str, members: int, port_queue: Any, store: str, secure: str = "") -> None:
    """``secure``: a folder of ``make_security``'s files; TLS on both servers, and on the coordinator
    bearer tokens and ACLs too."""
    async def main() -> None:
        credentials = None
        if secure:
            folder = Path(secure)
            credentials = grpc.ssl_server_credentials(
                [((folder / "server.key").read_bytes(), (folder / "server.pem").read_bytes())])
        if kind in ("noop", "noop-handlers"):
            server = grpc.aio.server()
            if kind == "noop":
                pb_grpc.add_GroupCoordinatorServicer_to_server(NoopCoordinator(), server)
                server.add_generic_rpc_handlers((_stream_handler(),))
            else:  # registered as the coordinator registers its servicers: parsers, serializer, _guarded
                from groupcoord.coordinator.rpc.service import _guarded, add_servicer

                class GuardedNoop(NoopCoordinator):
                    Heartbeat = _guarded(NoopCoordinator.Heartbeat)

                add_servicer(server, "GroupCoordinator", GuardedNoop(), None)
            port = (server.add_secure_port("127.0.0.1:0", credentials) if credentials is not None
                    else server.add_insecure_port("127.0.0.1:0"))
            await server.start()
            port_queue.put((port, [f"m{i}" for i in range(members)], 1))
            await server.wait_for_termination()
            return
        from groupcoord.coordinator.rpc.server import start_server

        backing: Any = None
        if store == "sqlite":
            import tempfile

            from groupcoord.coordinator.storage.sqlite_store import SqliteStore

            backing = SqliteStore(Path(tempfile.mkdtemp(prefix="bench-")) / "groups.db")
        coordinator = bench_runtime(store=backing)
        ids = _form_group_in_model(coordinator, members) if members else []
        if kind == "servicer":  # the servicer and runtime alone, on a plain server (no health, reflection, timers)
            from groupcoord.coordinator.rpc.service import CoordinatorServicer, add_servicer
            from groupcoord.coordinator.runtime.router import ShardRouter

            router = ShardRouter([coordinator])
            router.attach(asyncio.get_running_loop())
            plain = grpc.aio.server()
            add_servicer(plain, "GroupCoordinator", CoordinatorServicer(router), router)
            port = plain.add_insecure_port("127.0.0.1:0")
            await plain.start()
            port_queue.put((port, ids, coordinator.groups[GROUP].generation))
            await plain.wait_for_termination()
            return
        interceptors = None
        if secure:
            import tomllib

            from groupcoord.coordinator.auth.acl import parse_acls
            from groupcoord.coordinator.auth.guard import Guard, Policy
            from groupcoord.coordinator.auth.tokens import parse_tokens

            policy = Policy(tokens=parse_tokens((Path(secure) / "tokens").read_text()),
                            acls=parse_acls(tomllib.loads((Path(secure) / "acls.toml").read_text())))
            interceptors = [Guard(policy, owner_of=coordinator.model.member_principal)]
        running = await start_server(coordinator, "127.0.0.1:0", credentials=credentials, interceptors=interceptors)
        generation = coordinator.groups[GROUP].generation if members else 0
        port_queue.put((running.port, ids, generation))
        await running.server.wait_for_termination()

    logging_off()
    asyncio.run(main())


def make_security(folder: Path) -> tuple[bytes, str]:
    """A CA, a server certificate for 127.0.0.1, a token for principal ``bench`` and an ACL letting
    it be a member of the benchmark's group; returns the CA (for the client) and the token."""
    import hashlib
    import secrets

    import trustme

    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    issued.private_key_pem.write_to_path(str(folder / "server.key"))
    issued.cert_chain_pems[0].write_to_path(str(folder / "server.pem"))
    token = secrets.token_hex(16)
    (folder / "tokens").write_text(f"bench sha256:{hashlib.sha256(token.encode()).hexdigest()}\n")
    (folder / "acls.toml").write_text(f'[[acl]]\nprincipal = "User:bench"\ngroup = "{GROUP}"\n'
                                      'operations = ["member"]\n')
    return ca.cert_pem.bytes(), token


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def logging_off() -> None:
    import logging

    logging.disable(logging.WARNING)


def _call(runtime: Any, method: str, request: Any) -> list[Any]:
    """One request through the runtime before it serves (writes inline); the answer, once it comes."""
    box: list[Any] = []
    response_type = getattr(pb, type(request).__name__.replace("Request", "Response"))
    runtime.submit(lambda token: getattr(runtime.model, method)(request, token), response_type, box.append)
    return box


def _form_group_in_model(coordinator: Any, members: int, tasks: int | None = None) -> list[str]:
    """Put ``members`` members in a Stable group directly through the model (setup, not measured),
    over ``tasks`` tasks (default one each), assigned round-robin."""
    replies: dict[str, Any] = {}
    ids: list[str] = []

    def join(member_id: str = "") -> Any:
        return _call(coordinator, "join", pb.JoinGroupRequest(
            group_id=GROUP, member_id=member_id, client_id="hb", session_timeout_ms=600_000,
            rebalance_timeout_ms=600_000, protocols=["round-robin"]))

    tasks = members if tasks is None else tasks
    _call(coordinator, "put_tasks",
          pb.PutTasksRequest(group_id=GROUP, tasks=[pb.Task(task_id=f"t{i}") for i in range(tasks)]))
    for _ in range(members):
        first = join()[0]
        ids.append(first.member_id)
        replies[first.member_id] = join(first.member_id)
    for member_id in ids:  # everybody re-joins so one phase holds all of them
        if replies[member_id]:
            replies[member_id] = join(member_id)
    generation = coordinator.groups[GROUP].generation
    leader = coordinator.groups[GROUP].leader_id
    request = pb.SyncGroupRequest(group_id=GROUP, member_id=leader, generation=generation)
    for i, member_id in enumerate(ids):
        request.assignments.add(member_id=member_id,
                                tasks=[pb.TaskReplica(task_id=f"t{t}") for t in range(i, tasks, members)])
    _call(coordinator, "sync", request)
    assert coordinator.groups[GROUP].state.value == "Stable", coordinator.groups[GROUP].state
    return ids


@contextmanager
def server_process(kind: str, members: int = 0, store: str = "memory",
                   secure: str = "") -> Iterator[tuple[int, int, list[str], int]]:
    """A server of ``kind`` in a process of its own while the block runs: (pid, port, member ids,
    generation)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(kind, members, queue, store, secure), daemon=True)
    proc.start()
    try:
        port, ids, generation = queue.get(timeout=300)  # a busy machine can take long to spawn one
        yield proc.pid, port, ids, generation
    finally:
        proc.terminate()
        proc.join(10)


# ---------------------------------------------------------------- heartbeat capacity


async def heartbeat_load(port: int, ids: list[str], generation: int, seconds: float, in_flight: int,
                         warmup: float = 1.0, server_pid: int | None = None,
                         secure: tuple[bytes, str] | None = None) -> tuple[float, float, int, float]:
    """Requests/s, p99 ms, errors, and the server process's CPU microseconds per request (NaN
    without ``server_pid``): the last does not depend on how much CPU the machine's other work
    leaves the server, so it compares servers on a busy machine where req/s cannot."""
    import psutil

    metadata: tuple[tuple[str, str], ...] = ()
    if secure is not None:
        root, token = secure
        credentials = grpc.ssl_channel_credentials(root_certificates=root)
        channels = [grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) for _ in range(4)]
        metadata = (("authorization", f"Bearer {token}"),)
    else:
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(4)]
    stubs = [pb_grpc.GroupCoordinatorStub(c) for c in channels]
    requests = [pb.HeartbeatRequest(group_id=GROUP, member_id=m, generation=generation) for m in ids]
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + warmup  # connections up, caches warm: not counted

    async def worker(index: int) -> None:
        nonlocal errors
        stub = stubs[index % len(stubs)]
        i = index
        while time.perf_counter() < deadline:
            request = requests[i % len(requests)]
            i += in_flight
            start = time.perf_counter()
            response = await stub.Heartbeat(request, metadata=metadata)
            latencies.append(time.perf_counter() - start)
            if response.error.code != pb.NONE:
                errors += 1

    await asyncio.gather(*(worker(i) for i in range(in_flight)))
    latencies.clear()
    errors = 0
    server = psutil.Process(server_pid) if server_pid is not None else None
    cpu = _cpu_of(server.pid) if server is not None else 0.0
    deadline = time.perf_counter() + seconds
    await asyncio.gather(*(worker(i) for i in range(in_flight)))
    cpu = _cpu_of(server.pid) - cpu if server is not None else float("nan")
    answered = len(latencies)
    for channel in channels:
        await channel.close()
    latencies.sort()
    rate = len(latencies) / seconds
    p99 = latencies[int(len(latencies) * 0.99) - 1] if latencies else float("nan")
    return rate, p99 * 1000, errors, 1e6 * cpu / max(1, answered)


async def stream_load(port: int, ids: list[str], generation: int, seconds: float, in_flight: int,
                      server_pid: int, warmup: float = 1.0) -> tuple[float, float]:
    """``heartbeat_load`` with each of the ``in_flight`` callers sending its heartbeats on one stream of its
    own, one at a time (send, await the answer): messages/s and the server's CPU microseconds per message."""
    import psutil

    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(4)]
    requests = [pb.HeartbeatRequest(group_id=GROUP, member_id=m, generation=generation) for m in ids]
    answered = 0
    start = time.perf_counter() + warmup  # connections up and warm before the count starts
    stop = start + seconds

    async def caller(index: int) -> None:
        nonlocal answered
        call = channels[index % len(channels)].stream_stream(
            STREAM_METHOD, request_serializer=pb.HeartbeatRequest.SerializeToString,
            response_deserializer=pb.HeartbeatResponse.FromString)()
        i = index
        while time.perf_counter() < stop:
            await call.write(requests[i % len(requests)])
            await call.read()
            answered += 1
            i += in_flight
        await call.done_writing()
        assert await call.code() == grpc.StatusCode.OK

    server = psutil.Process(server_pid)

    async def counted() -> tuple[int, float]:
        """Messages answered and server CPU seconds at the start of the counted window."""
        await asyncio.sleep(max(0.0, start - time.perf_counter()))
        return answered, _cpu_of(server.pid)

    at_start = asyncio.create_task(counted())
    await asyncio.gather(*(caller(i) for i in range(in_flight)))
    answered_before, cpu_before = await at_start
    cpu = _cpu_of(server.pid) - cpu_before
    for channel in channels:
        await channel.close()
    count = answered - answered_before
    return count / seconds, 1e6 * cpu / max(1, count)


def _cpu_of(pid: int) -> float:
    """A process's CPU seconds to the nanosecond (``cpu_cap.process_cpu_s``): psutil's 10 ms ticks read a
    loaded server's share of a one-second window as 0 now and then, and each row's CPU must be above 0."""
    from cpu_cap import process_cpu_s  # benchmarks/, first on sys.path when this runs as a script

    return process_cpu_s(pid)


def transport_table(members: int, seconds: float, rounds: int) -> None:
    """The no-op server's CPU per heartbeat as a unary call and as a message on a long-lived stream."""
    print(f"\nTransport floor: the no-op server answering {members} members' heartbeats, 256 callers, each a unary call "
          f"or each message on its caller's own stream; {seconds:.0f} s per kind and round; load average {_load()}")
    samples: dict[str, list[tuple[float, float]]] = {"unary call": [], "stream message": []}
    for _ in range(rounds):
        for name, runs in samples.items():
            with server_process("noop", members) as (pid, port, ids, generation):
                if name == "unary call":
                    rate, _, _, cpu = asyncio.run(heartbeat_load(port, ids, generation, seconds, 256, server_pid=pid))
                else:
                    rate, cpu = asyncio.run(stream_load(port, ids, generation, seconds, 256, pid))
            runs.append((rate, cpu))
    print(f"{'heartbeat as':<18}{'msg/s':>10}{'server CPU us/msg':>19}")
    medians = {name: (statistics.median(r for r, _ in runs), statistics.median(c for _, c in runs))
               for name, runs in samples.items()}
    for name, (rate, cpu) in medians.items():
        print(f"{name:<18}{rate:>10.0f}{cpu:>19.1f}")
    print(f"a stream message costs the server {medians['stream message'][1] / medians['unary call'][1]:.2f} of a unary "
          f"call; medians of {rounds} interleaved round(s); load average after: {_load()}. The end-to-end table's "
          "no-op floor is the unary figure: the protocol's calls are unary")


def bench_heartbeats(
    members: int, seconds: float, in_flight: int, stores: list[str], rounds: int = 3, tls: bool = False
) -> list[tuple[str, float, float, int, float]]:
    """Median req/s, median p99 and total errors per server, over ``rounds`` interleaved rounds.

    Servers take turns within each round (no-op, then each store), so a burst of load from a
    neighbour on a shared machine hits every server alike instead of one whole series."""
    import tempfile

    servers = [("noop", "memory")] + [("coordinator", s) for s in stores]
    samples: dict[str, list[tuple[float, float, int, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as folder:
        secure = make_security(Path(folder)) if tls else None
        for _ in range(rounds):
            for kind, store in servers:
                with server_process(kind, members, store, folder if tls else "") as (pid, port, ids, generation):
                    measured = asyncio.run(heartbeat_load(port, ids, generation, seconds, in_flight,
                                                          server_pid=pid, secure=secure))
                name = kind if kind == "noop" else f"coordinator ({store})"
                samples.setdefault(f"{name} TLS" if tls else name, []).append(measured)
    return [
        (name, statistics.median(r for r, _, _, _ in runs), statistics.median(p for _, p, _, _ in runs),
         sum(e for _, _, e, _ in runs), statistics.median(c for _, _, _, c in runs))
        for name, runs in samples.items()
    ]


LAYERS = (
    ("noop", "no-op server"),
    ("noop-handlers", "+ our handlers"),
    ("servicer", "+ servicer and runtime"),
    ("coordinator", "+ the rest of the server"),
)
"""Heartbeat servers built up from the no-op one, a layer at a time: the no-op servicer registered as
ours are (request parsers, response serializer, ``_guarded``); our servicer and runtime on a plain
``grpc.aio`` server; the whole server (``start_server``: health, reflection, admin, timers)."""


def bench_layers(members: int, seconds: float, in_flight: int, rounds: int) -> list[tuple[str, float, float]]:
    """Median req/s and server CPU us per request of each layer, over interleaved rounds."""
    samples: dict[str, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for kind, name in LAYERS:
            with server_process(kind, members) as (pid, port, ids, generation):
                rate, _, _, cpu = asyncio.run(heartbeat_load(port, ids, generation, seconds, in_flight,
                                                             server_pid=pid))
            samples.setdefault(name, []).append((rate, cpu))
    return [(name, statistics.median(r for r, _ in runs), statistics.median(c for _, c in runs))
            for name, runs in samples.items()]


def servicer_in_process(members: int, calls: int) -> float:
    """CPU us per heartbeat of the servicer's own path, awaited directly (no gRPC): router, runtime,
    model step, effects, metrics."""
    from groupcoord.coordinator.rpc.service import CoordinatorServicer
    from groupcoord.coordinator.runtime.router import ShardRouter

    class Context:
        def peer(self) -> str:
            return "ipv4:127.0.0.1:1"

    async def run() -> float:
        runtime = bench_runtime()
        ids = _form_group_in_model(runtime, members)
        router = ShardRouter([runtime])
        router.attach(asyncio.get_running_loop())
        servicer, context = CoordinatorServicer(router), Context()
        generation = runtime.groups[GROUP].generation
        requests = [pb.HeartbeatRequest(group_id=GROUP, member_id=m, generation=generation) for m in ids]
        for request in requests:  # warm
            await servicer.Heartbeat(request, context)  # type: ignore[arg-type]
        start = time.process_time()
        for i in range(calls):
            await servicer.Heartbeat(requests[i % len(requests)], context)  # type: ignore[arg-type]
        return (time.process_time() - start) / calls * 1e6

    return asyncio.run(run())


def layers_table(members: int, seconds: float, quick: bool) -> None:
    rounds = 1 if quick else 3
    print(f"\nHeartbeat cost layer by layer: {members} members, {seconds:.0f} s per server and round, 256 calls in "
          f"flight, plaintext; load average {_load()}")
    print(f"{'layer':<28}{'req/s':>10}{'server CPU us/req':>19}{'+ us/req':>10}")
    before = None
    for name, rate, cpu in bench_layers(members, seconds, 256, rounds):
        added = "" if before is None else f"{cpu - before:>+10.1f}"
        print(f"{name:<28}{rate:>10.0f}{cpu:>19.1f}{added}")
        before = cpu
    inline = servicer_in_process(members, 2_000 if quick else 20_000)
    print(f"{'servicer path in-process':<28}{'':>10}{inline:>19.1f}   (awaited directly, no gRPC)")
    print(("medians of interleaved rounds" if not quick else "one round (--quick)") +
          f"; load average after: {_load()}. + us/req: the server CPU a layer adds to the one above it")


# ---------------------------------------------------------------- rebalance latency


def heartbeat_interval(members: int, rate: float = 3333) -> float:
    """What members of a group this size would use: ``rate`` heartbeats/s in all (by default 3 s at 10,000,
    0.3 s at 1,000)."""
    return max(0.05, members / rate)


class SimMember:
    """One member speaking the real protocol over asyncio gRPC."""

    def __init__(self, stub: pb_grpc.GroupCoordinatorStub, name: str, heartbeat_s: float) -> None:
        self.stub = stub
        self.name = name
        self.heartbeat_s = heartbeat_s
        self.member_id = ""
        self.generation = -1
        self.tasks: list[pb.TaskReplica] = []
        self.stable = asyncio.Event()
        self.stopped = False
        self.calls = 0  # RPCs made: the server's work in calls, whatever each costs it
        self.leader_s = 0.0  # time spent as the leader: building the context, the assignor, the SyncGroup

    async def run(self) -> None:
        from groupcoord.assignors.registry import get_assignor
        from groupcoord.wire import context_from_join, sync_request_from_assignment

        while not self.stopped:
            self.stable.clear()
            request = pb.JoinGroupRequest(group_id=GROUP, member_id=self.member_id, client_id=self.name,
                                          session_timeout_ms=60_000, rebalance_timeout_ms=120_000,
                                          protocols=["round-robin"])
            self.calls += 1
            join = await self.stub.JoinGroup(request)
            if join.error.code == pb.MEMBER_ID_REQUIRED:
                self.member_id = join.member_id
                continue
            if join.error.code != pb.NONE:
                continue
            self.generation = join.generation
            if join.leader_id == self.member_id:
                started = time.perf_counter()
                assignment = get_assignor(join.protocol).assign(context_from_join(GROUP, join))
                sync = sync_request_from_assignment(GROUP, self.member_id, join.generation, assignment)
                self.leader_s = time.perf_counter() - started
            else:
                sync = pb.SyncGroupRequest(group_id=GROUP, member_id=self.member_id, generation=join.generation)
            self.calls += 1
            result = await self.stub.SyncGroup(sync)
            if result.error.code != pb.NONE:
                continue
            self.tasks = list(result.tasks)
            self.stable.set()
            while not self.stopped:
                await asyncio.sleep(self.heartbeat_s * random.uniform(0.9, 1.1))  # as members spread out
                self.calls += 1
                beat = await self.stub.Heartbeat(pb.HeartbeatRequest(
                    group_id=GROUP, member_id=self.member_id, generation=self.generation))
                if beat.error.code != pb.NONE:
                    break


def _generator(port: int, names: list[str], heartbeat_s: float, conn: Any) -> None:
    """One load-generator process: its share of the members, and a report to the parent whenever all
    of them (and the newcomer, once asked for) hold one generation: (generation, replicas, leader s), busy
    share and calls made, the last two since the mark."""
    logging_off()
    asyncio.run(_generate(port, names, heartbeat_s, conn))


async def _generate(port: int, names: list[str], heartbeat_s: float, conn: Any) -> None:
    options = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) for _ in range(2)]
    stubs = [pb_grpc.GroupCoordinatorStub(c) for c in channels]
    sims = [SimMember(stubs[i % len(stubs)], name, heartbeat_s) for i, name in enumerate(names)]
    tasks = [asyncio.create_task(s.run()) for s in sims]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    calls0 = 0
    last: Any = None
    while True:
        while conn.poll():
            message = conn.recv()
            if message == "stop":
                for s in sims:
                    s.stopped = True
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                for channel in channels:
                    await channel.close()
                return
            if message == "mark":  # the measured window starts: busy share and calls from here
                cpu0, wall0 = time.process_time(), time.perf_counter()
                calls0 = sum(s.calls for s in sims)
            elif message == "newcomer":
                sims.append(SimMember(stubs[0], "new", heartbeat_s))
                tasks.append(asyncio.create_task(sims[-1].run()))
        generations = {s.generation for s in sims}
        state = None
        if len(generations) == 1 and all(s.stable.is_set() for s in sims):
            state = (sims[0].generation, sum(len(s.tasks) for s in sims), max(s.leader_s for s in sims))
        if state != last:
            busy = (time.process_time() - cpu0) / max(1e-9, time.perf_counter() - wall0)
            conn.send((state, busy, sum(s.calls for s in sims) - calls0))
            last = state
        await asyncio.sleep(0.005)


def _runqueue_wait_s(pid: int) -> float:
    """Seconds the process's threads have spent runnable but waiting for a CPU (Linux schedstat; 0 elsewhere)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def _wait_all(conns: list[Any], done: Any, timeout: float) -> list[Any]:
    """Read the generators' reports until ``done(states)`` holds; the last report of each."""
    from multiprocessing.connection import wait

    latest: list[Any] = [(None, 0.0, 0)] * len(conns)
    deadline = time.perf_counter() + timeout
    while not done([report[0] for report in latest]):
        left = deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError(f"generators report {[report[0] for report in latest]}")
        for conn in wait(conns, timeout=left):
            latest[conns.index(conn)] = conn.recv()
    return latest


def rebalance_latency(port: int, members: int, heartbeat_s: float, processes: int,
                      server_pid: int | None = None) -> dict[str, float]:
    """N members over ``processes`` generator processes form a Stable group; then one more joins.
    Returns the seconds to form, the newcomer's latency (until every member holds the new generation's
    tasks), the generators' idle share while it ran, the server process's CPU share (of one core)
    meanwhile, the calls the members made in that window, and the leader's own time."""
    import psutil

    server = psutil.Process(server_pid) if server_pid is not None else None
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 256 << 20)])
    pb_grpc.GroupAdminStub(channel).PutTasks(
        pb.PutTasksRequest(group_id=GROUP, tasks=[pb.Task(task_id=f"t{i}") for i in range(10 * members)]))
    channel.close()
    ctx = mp.get_context("spawn")
    names = [f"m{i}" for i in range(members)]
    pipes = [ctx.Pipe() for _ in range(processes)]
    procs = [ctx.Process(target=_generator, args=(port, names[i::processes], heartbeat_s, child), daemon=True)
             for i, (_, child) in enumerate(pipes)]
    conns = [parent for parent, _ in pipes]
    started = time.perf_counter()
    for proc in procs:
        proc.start()
    try:
        def same_generation(states: list[Any]) -> bool:
            return all(s is not None for s in states) and len({s[0] for s in states}) == 1 \
                and sum(s[1] for s in states) == 10 * members

        formed_states = _wait_all(conns, same_generation, 600)
        formed = time.perf_counter() - started
        old = formed_states[0][0][0]
        for conn in conns:
            conn.send("mark")
        server_cpu = _cpu_of(server.pid) if server is not None else 0.0
        server_wait = _runqueue_wait_s(server_pid) if server_pid is not None else 0.0
        start = time.perf_counter()
        conns[0].send("newcomer")

        def moved_on(states: list[Any]) -> bool:
            return same_generation(states) and states[0][0] > old

        final = _wait_all(conns, moved_on, 600)
        latency = time.perf_counter() - start
        server_busy = (_cpu_of(server.pid) - server_cpu) / latency if server is not None else float("nan")
        waited = (_runqueue_wait_s(server_pid) - server_wait) / latency if server_pid is not None else float("nan")
        return {"formed": formed, "latency": latency, "idle": 1 - max(report[1] for report in final),
                "server": server_busy, "waited": waited, "calls": sum(report[2] for report in final),
                "leader": max(report[0][2] for report in final)}
    finally:
        for conn in conns:
            conn.send("stop")
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.terminate()


def noop_cpu_per_call(seconds: float = 3.0) -> float:
    """The no-op gRPC server's CPU microseconds per heartbeat under load (256 in flight): what gRPC Python
    itself costs a call on this machine, the coordinator's work aside."""
    with server_process("noop", 1000) as (pid, port, ids, generation):
        return asyncio.run(heartbeat_load(port, ids, generation, seconds, 256, server_pid=pid))[3]


def bench_rebalance(sizes: list[int], processes: int | None = None, rate: float = 3333,
                    floor_seconds: float = 3.0) -> Iterator[dict[str, Any]]:
    """One row per size, as each is measured (a size that fails leaves the rows before it printed).
    ``floor``: the window's calls at the no-op server's CPU per call, in seconds of one core."""
    noop_us = noop_cpu_per_call(floor_seconds)
    for n in sizes:
        with server_process("coordinator") as (pid, port, _, _):
            heartbeat_s = heartbeat_interval(n, rate)
            count = processes or max(2, min(8, n // 1500))
            row = rebalance_latency(port, n, heartbeat_s, count, pid)
        yield {"n": n, "processes": count, "heartbeat": heartbeat_s, **row, "load": _load(),
               "noop_us": noop_us, "floor": row["calls"] * noop_us / 1e6}


def model_rebalance(members: int, profile: Any = None, tasks: int | None = None) -> dict[str, float]:
    """The coordinator's own share of a rebalance (no network): a Stable group of ``members`` over
    10·N tasks, one more joins, every member heartbeats (told to re-join), re-joins and syncs, the
    followers first, then the leader with a round-robin assignment. Every request goes through the
    runtime as the server's would (effects carried out, metrics observed, records written inline).
    ``coordinator`` is the time in the runtime; ``leader`` the leader's own work (its context, the
    assignor, its SyncGroup), timed apart; the answer sizes are the leader's JoinGroup answer and its
    SyncGroup request. ``profile``: a ``cProfile.Profile`` enabled in the coordinator's parts only;
    ``tasks``: another catalog size (benchmarks/protocol_bench.py)."""
    from groupcoord.assignors.registry import get_assignor
    from groupcoord.coordinator.runtime.heap import pace_collector
    from groupcoord.wire import context_from_join, sync_request_from_assignment

    pace_collector()  # as a server's runtime does when it attaches to its loop
    runtime = bench_runtime()
    ids = _form_group_in_model(runtime, members, tasks=10 * members if tasks is None else tasks)
    generation = runtime.groups[GROUP].generation

    def join_request(member_id: str) -> pb.JoinGroupRequest:
        return pb.JoinGroupRequest(group_id=GROUP, member_id=member_id, client_id="hb", session_timeout_ms=600_000,
                                   rebalance_timeout_ms=600_000, protocols=["round-robin"])

    beats = [pb.HeartbeatRequest(group_id=GROUP, member_id=m, generation=generation) for m in ids]
    joins = [join_request(m) for m in ids]
    # the set-up's garbage (and an earlier run's runtime) collected now: a serving coordinator has none
    # of it, and whichever step set off the full collection would pay for it. The group stays tracked.
    gc.collect()
    coordinator = cpu = 0.0
    if profile is not None:
        profile.enable()
    cpu_start = time.process_time()
    start = time.perf_counter()
    newcomer = _call(runtime, "join", join_request(""))[0].member_id
    answers = {newcomer: _call(runtime, "join", join_request(newcomer))}
    for beat, join in zip(beats, joins, strict=True):
        _call(runtime, "heartbeat", beat)  # answered REBALANCE_IN_PROGRESS
        answers[join.member_id] = _call(runtime, "join", join)
    coordinator += time.perf_counter() - start
    cpu += time.process_time() - cpu_start
    if profile is not None:
        profile.disable()
    leader_join = next(box[0] for box in answers.values() if box[0].leader_id == box[0].member_id)
    syncs = [pb.SyncGroupRequest(group_id=GROUP, member_id=m, generation=leader_join.generation)
             for m in answers if m != leader_join.member_id]
    if profile is not None:
        profile.enable()
    cpu_start = time.process_time()
    start = time.perf_counter()
    for sync in syncs:
        _call(runtime, "sync", sync)  # held until the leader's
    coordinator += time.perf_counter() - start
    cpu += time.process_time() - cpu_start
    if profile is not None:
        profile.disable()
    start = time.perf_counter()
    assignment = get_assignor("round-robin").assign(context_from_join(GROUP, leader_join))
    leader_sync = sync_request_from_assignment(GROUP, leader_join.member_id, leader_join.generation, assignment)
    leader = time.perf_counter() - start
    if profile is not None:
        profile.enable()
    cpu_start = time.process_time()
    start = time.perf_counter()
    _call(runtime, "sync", leader_sync)
    coordinator += time.perf_counter() - start
    cpu += time.process_time() - cpu_start
    if profile is not None:
        profile.disable()
    assert runtime.groups[GROUP].state.value == "Stable"
    return {"coordinator": coordinator, "cpu": cpu, "leader": leader, "join_bytes": leader_join.ByteSize(),
            "sync_bytes": leader_sync.ByteSize()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--stores", default="memory,sqlite", help="coordinator stores to measure heartbeats with")
    parser.add_argument("--parts", default="heartbeats,layers,transport,model,rebalance",
                        help="comma-separated subset of: heartbeats, layers, transport, model, rebalance")
    parser.add_argument("--heartbeat-rate", type=float, default=3333,
                        help="end to end: heartbeats/s of the whole group (interval N/rate; default 3,333: 3 s at 10,000)")
    parser.add_argument("--no-tls", action="store_true", help="skip the heartbeat comparison over TLS")
    parser.add_argument("--sizes", default="", help="group sizes for model and rebalance (default 1000,3000,10000)")
    args = parser.parse_args(argv)
    parts = {p for p in args.parts.split(",") if p}
    unknown = parts - {"heartbeats", "layers", "transport", "model", "rebalance"}
    if unknown:
        parser.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    logging_off()
    members = 100 if args.quick else 1000
    seconds = 1.0 if args.quick else 5.0
    stores = [s for s in args.stores.split(",") if s]
    print(f"cpus: {os.cpu_count()}  python {sys.version.split()[0]}  grpcio {grpc.__version__}")
    if "heartbeats" in parts:
        heartbeat_table(members, seconds, stores, args.quick, not args.no_tls)
    if "layers" in parts:
        layers_table(members, seconds, args.quick)
    if "transport" in parts:
        transport_table(members, seconds, 1 if args.quick else 3)
    sizes = [int(n) for n in args.sizes.split(",") if n] or ([50, 200] if args.quick else [1000, 3000, 10000])
    if "model" in parts:
        model_table(sizes)
    if "rebalance" in parts:
        rebalance_table(sizes, args.heartbeat_rate, args.quick)
    return 0


def heartbeat_table(members: int, seconds: float, stores: list[str], quick: bool, tls: bool) -> None:
    rounds = 1 if quick else 5
    for secure in ([False, True] if tls else [False]):
        what = ("TLS on both; on the coordinator also bearer tokens and ACLs (the guard interceptor)"
                if secure else "plaintext, no security, metrics on")
        print(f"\nHeartbeat capacity: {members} members, {seconds:.0f} s per server and round, 256 calls in flight, "
              f"{what}; load average {_load()}")
        print(f"{'server':<28}{'req/s':>10}{'p99 ms':>10}{'errors':>8}{'ratio vs no-op':>16}"
              f"{'server CPU us/req':>19}{'CPU ratio':>11}")
        rows = bench_heartbeats(members, seconds, 256, stores if not secure else ["memory"], rounds=rounds, tls=secure)
        base, base_cpu = rows[0][1], rows[0][4]
        for name, rate, p99, errors, cpu in rows:
            print(f"{name:<28}{rate:>10.0f}{p99:>10.2f}{errors:>8}{rate / base:>16.2f}{cpu:>19.1f}"
                  f"{base_cpu / cpu:>11.2f}")
        by_name = {name: rate for name, rate, _, _, _ in rows}
        if "coordinator (memory)" in by_name and "coordinator (sqlite)" in by_name:
            print(f"sqlite / memory heartbeat capacity: "
                  f"{by_name['coordinator (sqlite)'] / by_name['coordinator (memory)']:.2f}"
                  " (heartbeats write nothing; target >= 0.90)")
        print(("medians of interleaved rounds" if not quick else "one round (--quick)") +
              f"; load average after: {_load()}. Target: ratio >= 0.90 vs the no-op (security off). CPU ratio: "
              "the no-op server's CPU per request over this server's, which a busy machine disturbs far less "
              "than req/s")


def model_table(sizes: list[int]) -> None:
    print("\nRebalance, the coordinator's own share: one member joins a Stable group of N over 10·N tasks, driven "
          "through the runtime in-process (no gRPC): every member heartbeats, re-joins and syncs")
    print(f"{'N':>7}{'coordinator s':>15}{'CPU s':>8}{'CPU us/member':>15}{'leader s':>10}{'JoinGroup bytes':>17}"
          f"{'SyncGroup bytes':>17}  load average")
    shares: dict[int, tuple[float, float]] = {}
    for n in sizes:
        row = model_rebalance(n)
        shares[n] = (row["coordinator"], row["cpu"])
        print(f"{n:>7}{row['coordinator']:>15.3f}{row['cpu']:>8.3f}{1e6 * row['cpu'] / n:>15.0f}{row['leader']:>10.3f}"
              f"{row['join_bytes']:>17,}{row['sync_bytes']:>17,}  {_load()}")
    small, large = sizes[0], sizes[-1]
    print(f"coordinator share {large:,} / {small:,}: {shares[large][0] / shares[small][0]:.1f}x wall, "
          f"{shares[large][1] / shares[small][1]:.1f}x CPU for {large // small}x the members (target <= 11x, and "
          "<= 0.5 s at 10,000). coordinator s: wall time in the runtime; CPU s: this process's CPU time over "
          "the same steps (what a busy machine disturbs least); per member: CPU; leader s: the leader's context, "
          "round-robin assignor and SyncGroup; bytes: the leader's JoinGroup answer and SyncGroup request")


def rebalance_table(sizes: list[int], rate: float, quick: bool = False) -> None:
    print("\nRebalance end to end: N members in generator processes (real gRPC, two-step join, heartbeat every "
          f"N/{rate:,.0f} s, round-robin leader); one more joins; until every member holds the new generation's tasks")
    print(f"{'N':>7}{'procs':>7}{'heartbeat s':>13}{'form s':>9}{'join s':>9}{'generator idle':>16}{'server CPU':>12}"
          f"{'server waited':>15}{'calls':>8}{'CPU us/call':>13}{'no-op floor s':>15}{'leader s':>10}  load average")
    noop_us = float("nan")
    for row in bench_rebalance(sizes, rate=rate, floor_seconds=1.0 if quick else 3.0):
        noop_us = row["noop_us"]
        cpu_us = 1e6 * row["server"] * row["latency"] / max(1, row["calls"])
        print(f"{row['n']:>7}{row['processes']:>7}{row['heartbeat']:>13.2f}{row['formed']:>9.2f}{row['latency']:>9.3f}"
              f"{row['idle']:>16.0%}{row['server']:>12.0%}{row['waited']:>15.0%}{row['calls']:>8}{cpu_us:>13.0f}"
              f"{row['floor']:>15.2f}{row['leader']:>10.3f}  {row['load']}", flush=True)
    print("join s: targets < 0.5 s at 1,000 and < 5 s at 10,000; a member hears of the rebalance at its next "
          "heartbeat, so the interval bounds it from below; generator idle: the least idle generator process's "
          "share of wall time not spent on CPU while the newcomer joined (near 0%: the generator was the limit); server CPU: the coordinator process's CPU time over the same window, "
          "as a share of one core (near 100%: the coordinator was the limit); server waited: the time its threads "
          "were ready to run but waited for a CPU taken by other work on the machine, as a share of the same window; "
          "calls: the RPCs the members made in that window (heartbeats, joins, syncs); CPU us/call: the server's CPU "
          f"over them; no-op floor: those calls at the no-op gRPC server's CPU per heartbeat ({noop_us:.0f} us, "
          "measured first, 256 in flight), in seconds of one core: what gRPC Python alone takes, before any "
          "coordination, with heartbeats as the cheapest call")


if __name__ == "__main__":
    sys.exit(main())
