"""AsyncWorkerClient against a real coordinator on loopback: the threaded client's behaviour tests where
they apply, and the asyncio ones (coroutine listeners awaited before re-join, changes(), cancellation,
unclosed warning, no thread of its own, a blocked loop).

Each test is a coroutine run by ``asyncio.run``; the admin client is synchronous, so it is called
through ``asyncio.to_thread`` (a blocking call on the loop would stall the clients' heartbeats).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import tomllib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from groupcoord import AsyncWorkerClient, errors
from groupcoord.admin import AdminClient
from groupcoord.assignors.base import TaskReplica
from groupcoord.channels import ClientSecurity
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.storage.store import MemoryStore
from groupcoord.coordinator.testing import FakeOffice
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import WorkerConfig, WorkerState

G = "orders"


def config(address: str, name: str, **overrides: Any) -> WorkerConfig:
    settings: dict[str, Any] = {
        "group_id": G, "coordinators": address, "client_id": name, "session_timeout_ms": 3000,
        "heartbeat_interval_ms": 100, "rebalance_timeout_ms": 5000, "retry_backoff_ms": 20,
        "retry_backoff_max_ms": 200,
    }
    settings.update(overrides)
    return WorkerConfig(**settings)


class Events:
    """A listener of coroutines that notes what it was told, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, tuple[str, ...]]] = []

    async def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        self.events.append(("assigned", generation, tuple(str(t) for t in tasks)))

    async def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        self.events.append(("revoked", -1, tuple(str(t) for t in tasks)))

    async def on_lost(self, tasks: Sequence[TaskReplica]) -> None:
        self.events.append(("lost", -1, tuple(str(t) for t in tasks)))

    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self.events]


async def described(admin: AdminClient, done: Callable[[pb.DescribeGroupResponse], bool],
                    timeout: float = 20) -> pb.DescribeGroupResponse:
    """Poll the group (off the loop) until ``done`` holds; fails at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        group = await asyncio.to_thread(admin.describe_group, G)
        if done(group):
            return group
        assert time.monotonic() < deadline, f"group never got there: {group}"
        await asyncio.sleep(0.05)


async def settled(clients: Sequence[AsyncWorkerClient], admin: AdminClient, tasks: int) -> pb.DescribeGroupResponse:
    """The group is Stable with exactly ``clients`` and ``tasks`` replicas, and each client runs what the
    coordinator says it does, in the group's generation."""
    def done(d: pb.DescribeGroupResponse) -> bool:
        owned = {m.member.member_id: len(m.assigned) for m in d.members}
        return (d.state == pb.STABLE and sum(owned.values()) == tasks
                and set(owned) == {c.member_id for c in clients} and len(owned) == len(clients)
                and all(c.state is WorkerState.STABLE and c.generation == d.generation
                        and len(c.assigned_tasks) == owned[c.member_id] for c in clients))
    return await described(admin, done)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


# ------------------------------------------------------------------ the threaded client's behaviour


def test_group_forms_and_rebalances_on_join_and_leave(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, [f"t{i}" for i in range(6)])

    async def scenario() -> None:
        async with AsyncWorkerClient(config(server.address, "w0"), Events()) as a, \
                AsyncWorkerClient(config(server.address, "w1"), Events()) as b:
            group = await settled([a, b], admin, 6)
            assert sorted(str(t) for c in (a, b) for t in c.assigned_tasks) == sorted(f"t{i}#0" for i in range(6))
            assert group.leader_id in {a.member_id, b.member_id} and group.protocol == "round-robin"
            assert a.is_leader != b.is_leader
            async with AsyncWorkerClient(config(server.address, "w2"), Events()) as c:
                await settled([a, b, c], admin, 6)
                assert {len(w.assigned_tasks) for w in (a, b, c)} == {2}
            assert c.state is WorkerState.DOWN and c.assigned_tasks == () and c.member_id == ""
            after = await settled([a, b], admin, 6)
            assert len(after.members) == 2

    try:
        run(scenario)
    finally:
        admin.close()


def test_a_member_that_vanishes_is_expelled_after_its_session(server: ServerThread) -> None:
    """A member that stops without LeaveGroup (as a killed process does): the others rebalance once its
    session has run out."""
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a", "b"])

    async def scenario() -> None:
        async with AsyncWorkerClient(config(server.address, "stays", session_timeout_ms=1000), Events()) as stays:
            gone = await AsyncWorkerClient(config(server.address, "gone", session_timeout_ms=1000), Events()).start()
            before = await settled([stays, gone], admin, 2)
            await gone.close(leave_group=False)
            after = await described(admin, lambda d: d.state == pb.STABLE and len(d.members) == 1
                                    and d.generation > before.generation)
            assert await stays.wait_until(lambda c: c.generation == after.generation and len(c.assigned_tasks) == 2, 10)

    try:
        run(scenario)
    finally:
        admin.close()


def test_eager_revokes_everything_before_each_rejoin_and_listeners_are_awaited(server: ServerThread) -> None:
    """on_revoked is a coroutine that takes a while to stop its tasks: the JoinGroup waits for it."""
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a"])
    trace: list[str] = []

    class Slow(Events):
        async def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
            trace.append("revoking")
            await asyncio.sleep(0.3)  # stopping a task cleanly takes time
            trace.append(f"revoked while {client.state.value}")
            await super().on_revoked(tasks)

    listener = Slow()
    client = AsyncWorkerClient(config(server.address, "w"), listener)

    async def scenario() -> None:
        async with client:
            first = await settled([client], admin, 1)
            await asyncio.to_thread(admin.put_tasks, G, ["b"])
            second = await described(admin, lambda d: d.generation > first.generation and d.state == pb.STABLE
                                     and sum(len(m.assigned) for m in d.members) == 2)
            assert await client.wait_until(lambda c: c.generation == second.generation, 10)
        assert listener.kinds() == ["assigned", "revoked", "assigned", "revoked"]
        # the member stayed in PreparingJoin until on_revoked returned: no JoinGroup went out meanwhile
        assert trace[1] == "revoked while PreparingJoin"

    try:
        run(scenario)
    finally:
        admin.close()


def test_plain_function_listeners_work_and_one_that_raises_is_logged(server: ServerThread,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a"])
    calls: list[str] = []

    class Plain:
        def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
            calls.append("assigned")
            raise RuntimeError("the service's own bug")

        def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
            calls.append("revoked")

    async def scenario() -> None:
        async with AsyncWorkerClient(config(server.address, "w"), Plain()) as client:
            await settled([client], admin, 1)
            assert client.fatal_error is None
        assert calls == ["assigned", "revoked"]

    try:
        run(scenario)
    finally:
        admin.close()
    assert "listener on_assigned raised" in caplog.text


def test_a_listener_that_hangs_past_the_rebalance_timeout_is_cancelled_and_the_member_leaves(
        server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a", "b"])
    seen: dict[str, Any] = {}

    class Hangs(Events):
        hang = True

        async def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
            if self.hang:
                self.hang = False
                try:
                    await asyncio.Event().wait()  # never returns
                except asyncio.CancelledError:
                    seen["cancelled"] = True
                    raise
            await super().on_revoked(tasks)

    async def scenario() -> None:
        other = AsyncWorkerClient(config(server.address, "other"), Events())
        hangs = AsyncWorkerClient(config(server.address, "hangs", rebalance_timeout_ms=1500), Hangs())
        async with hangs:
            await settled([hangs], admin, 2)
            first_id = hangs.member_id
            async with other:  # a rebalance: hangs must revoke, and hangs there
                group = await described(admin, lambda d: d.state == pb.STABLE and len(d.members) == 2
                                        and sum(len(m.assigned) for m in d.members) == 2
                                        and first_id not in {m.member.member_id for m in d.members})
                assert seen.get("cancelled") is True
                assert await hangs.wait_until(lambda c: c.state is WorkerState.STABLE
                                              and c.generation == group.generation, 10)
                assert hangs.member_id != first_id and hangs.fatal_error is None  # joined again as a new member

    try:
        run(scenario)
    finally:
        admin.close()
    assert "did not return within the rebalance timeout" in caplog.text
    assert "leaving the group: a listener hung" in caplog.text


def test_coordinator_failover_keeps_the_generation_and_the_tasks() -> None:
    """The active hangs and a standby takes over from the same store: the member moves there within its
    session, same generation, nothing revoked."""
    cfg = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    store = MemoryStore()
    release = threading.Event()
    office = FakeOffice(in_office=False)
    with ServerThread(CoordinatorRuntime(cfg, store=store)) as first, \
            ServerThread(CoordinatorRuntime(cfg, store=store, office=office)) as second:
        office.change(address=first.address)
        admin = AdminClient(first.address)
        admin.put_tasks(G, ["a", "b"])
        listener = Events()
        frozen = threading.Thread(target=lambda: first.call(lambda: release.wait(30), timeout=60))

        async def scenario() -> None:
            client = AsyncWorkerClient(config(f"{first.address},{second.address}", "w", session_timeout_ms=6000),
                                       listener)
            async with client:
                before = await settled([client], admin, 2)
                frozen.start()
                hung_at = time.monotonic()
                office.change(in_office=True, address=second.address)
                with AdminClient(second.address) as new_admin:
                    heard = await asyncio.to_thread(
                        new_admin.wait_for, G, lambda d: d.state == pb.STABLE and time.monotonic() - hung_at > 1
                        and [m.last_seen_ms_ago < 300 for m in d.members] == [True], 10)
                assert heard.generation == before.generation == client.generation
                assert client.coordinator_address == second.address and client.state is WorkerState.STABLE
                assert listener.kinds() == ["assigned"]
                await client.close(leave_group=False)

        try:
            run(scenario)
        finally:
            release.set()
            frozen.join(30)
            admin.close()


@pytest.mark.parametrize("static", [False, True])
def test_cooperative_moves_only_what_moves_over_two_generations(server: ServerThread, static: bool) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, [f"t{i}" for i in range(4)])

    def coop(name: str, listener: Events) -> AsyncWorkerClient:
        return AsyncWorkerClient(config(server.address, name, rebalance_protocol="cooperative", assignors=("sticky",),
                                        instance_id=name if static else ""), listener)

    async def scenario() -> None:
        first = Events()
        async with coop("a", first) as a:
            before = await settled([a], admin, 4)
            assert a.rebalance_protocol == "cooperative"
            async with coop("b", Events()) as b:
                after = await settled([a, b], admin, 4)
                assert after.generation == before.generation + 2  # the revoke, then the hand-over
                assert len(a.assigned_tasks) == len(b.assigned_tasks) == 2
                # a stopped only the two it gave away, and was never told to stop the rest
                revoked = [tasks for kind, _, tasks in first.events if kind == "revoked"]
                assert len(revoked) == 1 and len(revoked[0]) == 2
                assert set(revoked[0]).isdisjoint(str(t) for t in a.assigned_tasks)
                await b.close(leave_group=True)

    try:
        run(scenario)
    finally:
        admin.close()


def test_a_static_member_restarted_within_its_session_gets_its_tasks_back(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, [f"t{i}" for i in range(4)])

    def static(name: str) -> AsyncWorkerClient:
        return AsyncWorkerClient(config(server.address, name, instance_id=f"inst-{name}",
                                        session_timeout_ms=10_000), Events())

    async def scenario() -> None:
        steady = Events()
        a = AsyncWorkerClient(config(server.address, "a", instance_id="inst-a", session_timeout_ms=10_000), steady)
        async with a:
            b = await static("b").start()
            before = await settled([a, b], admin, 4)
            seen, b_tasks = len(steady.events), b.assigned_tasks
            await b.close()  # static: no LeaveGroup
            b = await static("b").start()  # the same instance, a new process
            after = await settled([a, b], admin, 4)
            assert after.generation == before.generation and b.assigned_tasks == b_tasks
            assert steady.events[seen:] == []
            await b.close(leave_group=True)
            await a.close(leave_group=True)

    try:
        run(scenario)
    finally:
        admin.close()


def test_a_fenced_static_member_stops_with_the_error_and_loses_its_tasks(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["t0", "t1"])

    async def scenario() -> None:
        old_listener = Events()
        async with AsyncWorkerClient(config(server.address, "old", instance_id="same"), old_listener) as old:
            await settled([old], admin, 2)
            async with AsyncWorkerClient(config(server.address, "new", instance_id="same"), Events()) as new:
                assert await old.wait_until(lambda c: c.state is WorkerState.DOWN, 10)
                assert isinstance(old.fatal_error, errors.FencedInstanceIdError)
                assert old.assigned_tasks == () and old_listener.kinds()[-1] == "lost"
                assert await new.wait_until(lambda c: len(c.assigned_tasks) == 2, 10)
                await new.close(leave_group=True)

    try:
        run(scenario)
    finally:
        admin.close()


def test_a_request_the_coordinator_refuses_is_fatal(server: ServerThread) -> None:
    async def scenario() -> None:
        # the test server allows sessions from 200 ms up to its maximum; one beyond it is refused
        async with AsyncWorkerClient(config(server.address, "w", session_timeout_ms=10_000_000), Events()) as client:
            assert await client.wait_until(lambda c: c.state is WorkerState.DOWN, 10)
            assert isinstance(client.fatal_error, errors.InvalidSessionTimeoutError)

    run(scenario)


def test_load_reports_and_metrics() -> None:
    from groupcoord.worker.load import demo_load_reporter

    reports: list[tuple[str, str, pb.LoadReport]] = []
    cfg = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    runtime = CoordinatorRuntime(cfg, on_load_report=lambda group, member, report: reports.append(
        (group, member, report)))
    registry = CollectorRegistry()
    reporter = demo_load_reporter("w")

    async def report(client: AsyncWorkerClient) -> pb.LoadReport | None:  # a coroutine works too
        return reporter(client)  # type: ignore[arg-type]

    with ServerThread(runtime) as server, AdminClient(server.address) as admin:
        admin.put_tasks(G, ["a"])

        async def scenario() -> None:
            async with AsyncWorkerClient(config(server.address, "w"), Events(), metrics_registry=registry,
                                         load_reporter=report) as client:
                await settled([client], admin, 1)
                assert await client.wait_until(lambda c: bool(reports), 10)
                group, member, _ = reports[0]
                assert (group, member) == (G, client.member_id)
                labels = {"group": G, "client": "w"}
                assert registry.get_sample_value("groupcoord_worker_owned_tasks", labels) == 1
                assert registry.get_sample_value("groupcoord_worker_state", {**labels, "state": "Stable"}) == 1
                assert registry.get_sample_value("groupcoord_worker_rebalances_total", labels) == 1

        run(scenario)
    assert reports[0][2].tasks[0].task_id == "a"


# ------------------------------------------------------------------ asyncio's own


def test_changes_yields_every_change_and_waits_for_the_loop_body(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a"])

    async def scenario() -> None:
        seen: list[tuple[str, tuple[str, ...], str]] = []
        async with AsyncWorkerClient(config(server.address, "w")) as client:
            async def consume() -> None:
                async for change in client.changes():
                    seen.append((change.kind, tuple(str(t) for t in change.tasks), client.state.value))
                    if change.kind == "revoked":
                        await asyncio.sleep(0.2)  # stopping takes a while: the re-join waits for it
                        seen.append(("stopped", (), client.state.value))

            consumer = asyncio.create_task(consume())
            await asyncio.sleep(0)  # let it start listening before the first change
            first = await settled([client], admin, 1)
            await asyncio.to_thread(admin.put_tasks, G, ["b"])
            await described(admin, lambda d: d.generation > first.generation and d.state == pb.STABLE)
            assert await client.wait_until(lambda c: len(c.assigned_tasks) == 2, 10)
        await asyncio.wait_for(consumer, 5)  # the iteration ends when the client closes
        kinds = [kind for kind, _, _ in seen]
        assert kinds == ["assigned", "revoked", "stopped", "assigned", "revoked", "stopped"]
        assert seen[2][2] == "PreparingJoin"  # still there when the loop body finished stopping

    try:
        run(scenario)
    finally:
        admin.close()


@pytest.mark.parametrize("static", [False, True])
def test_cancelling_the_owning_task_leaves_a_dynamic_member_and_keeps_a_static_one(
        server: ServerThread, static: bool) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a"])
    listener = Events()

    async def scenario() -> None:
        ready = asyncio.Event()

        async def service() -> None:
            async with AsyncWorkerClient(config(server.address, "w", instance_id="w" if static else "",
                                                session_timeout_ms=10_000), listener) as client:
                await client.wait_until(lambda c: bool(c.assigned_tasks), 20)
                ready.set()
                await asyncio.Event().wait()  # serve forever

        owner = asyncio.create_task(service())
        await asyncio.wait_for(ready.wait(), 20)
        owner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await owner
        assert listener.kinds() == ["assigned", "revoked"]  # tasks stopped cleanly either way
        group = await asyncio.to_thread(admin.describe_group, G)
        if static:
            assert [m.member.instance_id for m in group.members] == ["w"]  # kept for a restart
        else:
            assert list(group.members) == []

    try:
        run(scenario)
    finally:
        admin.close()


def test_an_unclosed_client_warns_when_garbage_collected(server: ServerThread) -> None:
    async def scenario() -> None:
        await AsyncWorkerClient(config(server.address, "leaky", session_timeout_ms=1000), Events()).start()

    run(scenario)  # ends with the client neither closed nor referenced
    with pytest.warns(ResourceWarning, match="unclosed AsyncWorkerClient 'leaky'"):
        gc.collect()


#: Threads that are not the clients': the loop's executor (``asyncio.to_thread`` runs the admin calls there)
#: and the pools of the coordinator this test hosts in its own process, which start a thread when work first
#: needs one (a second checker thread once two heavy requests overlap: seen in CI).
NOT_THE_CLIENTS = ("asyncio_", "groupcoord-check", "groupcoord-store")


def own_threads() -> set[str]:
    """Threads of the process that a client could have started."""
    return {t.name for t in threading.enumerate() if not t.name.startswith(NOT_THE_CLIENTS)}


def test_the_clients_run_on_the_loop_without_threads_of_their_own(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, [f"t{i}" for i in range(10)])

    async def scenario() -> None:
        one = AsyncWorkerClient(config(server.address, "w0"), Events())
        async with one:
            await settled([one], admin, 10)
            with_one = own_threads()
            more = [AsyncWorkerClient(config(server.address, f"w{i}"), Events()) for i in range(1, 10)]
            for client in more:
                await client.start()
            try:
                await settled([one, *more], admin, 10)
                assert own_threads() == with_one  # ten members, not one thread more than one
                assert all(c._task is not None and c._task.get_loop() is asyncio.get_running_loop()
                           for c in [one, *more])
            finally:
                for client in more:
                    await client.close()

    try:
        run(scenario)
    finally:
        admin.close()


def test_a_blocked_loop_is_detected_and_logged(server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="groupcoord.worker")
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a"])

    async def scenario() -> None:
        async with AsyncWorkerClient(config(server.address, "w", heartbeat_interval_ms=200,
                                            session_timeout_ms=3000), Events()) as client:
            await settled([client], admin, 1)
            time.sleep(0.6)  # noqa: ASYNC251 - the fault under test: the service blocks its loop (3 intervals)
            assert await client.wait_until(lambda c: c.loop_lag.stalls > 0, 5)  # the probe's next tick saw it
            # the probe ticks every 0.25 s: it sees the block less the part that fell before its next tick
            assert client.loop_lag.stalls >= 1 and client.loop_lag.worst_s >= 0.3
            assert client.state is WorkerState.STABLE  # within the session: nothing lost

    try:
        run(scenario)
    finally:
        admin.close()
    assert "w: the event loop was blocked for 0." in caplog.text and "heartbeats were late" in caplog.text


def test_tls_and_token(tmp_path: Path) -> None:
    from groupcoord.coordinator.auth.acl import parse_acls
    from groupcoord.coordinator.auth.guard import Guard, Policy
    from groupcoord.coordinator.auth.tokens import parse_tokens
    from tests.security_pki import Pki, Tokens

    pki, tokens = Pki(tmp_path / "pki"), Tokens(tmp_path)
    (tmp_path / "pki").mkdir(exist_ok=True)
    for name in ("root", "worker"):
        tokens.new(name)
    acls = parse_acls(tomllib.loads(f'super_users = ["User:root"]\n[[acl]]\nprincipal = "User:worker"\n'
                                    f'group = "{G}"\noperations = ["member"]\n'))
    cfg = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    runtime = CoordinatorRuntime(cfg)
    guard = Guard(Policy(mtls=False, tokens=parse_tokens(tokens.server_file().read_text()), acls=acls),
                  owner_of=runtime.model.member_principal)
    with ServerThread(runtime, credentials=pki.server_credentials(mtls=False), interceptors=[guard]) as secure:
        admin = AdminClient(secure.address, security=ClientSecurity(tls_ca=str(pki.ca_file),
                                                                    token_file=str(tmp_path / "root.token")))
        admin.put_tasks(G, ["a"])

        async def scenario() -> None:
            good = config(secure.address, "w", tls_ca=str(pki.ca_file), token_file=str(tmp_path / "worker.token"))
            async with AsyncWorkerClient(good, Events()) as client:
                await settled([client], admin, 1)
            anonymous = config(secure.address, "anon", tls_ca=str(pki.ca_file))
            async with AsyncWorkerClient(anonymous, Events()) as refused:
                assert await refused.wait_until(lambda c: c.state is WorkerState.DOWN, 10)
                assert isinstance(refused.fatal_error, errors.NotAuthenticatedError)

        try:
            run(scenario)
        finally:
            admin.close()


def test_a_listener_may_close_its_own_client(server: ServerThread) -> None:
    """A service that decides to stop from inside on_assigned: close() does not wait on the very call
    it is made from."""
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a"])

    class Closes(Events):
        async def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
            await super().on_assigned(tasks, generation)
            await client.close()

    listener = Closes()
    client = AsyncWorkerClient(config(server.address, "w"), listener)

    async def scenario() -> None:
        await client.start()
        started = time.monotonic()
        assert await client.wait_until(lambda c: c.state is WorkerState.DOWN, 10)
        assert time.monotonic() - started < 5  # not the rebalance timeout (5 s here)
        assert listener.kinds() == ["assigned", "revoked"] and client.fatal_error is None
        group = await asyncio.to_thread(admin.describe_group, G)
        assert list(group.members) == []

    try:
        run(scenario)
    finally:
        admin.close()


def test_misuse_gets_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="'async with'"), \
            AsyncWorkerClient(config("127.0.0.1:1", "w")):  # type: ignore[attr-defined]
        pass
    with pytest.raises(ValueError, match="cannot read --token-file"):
        AsyncWorkerClient(config("127.0.0.1:1", "w", token_file=str(tmp_path / "missing")))

    async def twice() -> None:
        async with AsyncWorkerClient(config("127.0.0.1:1", "w")) as client:
            with pytest.raises(RuntimeError, match="started once"):
                await client.start()

    run(twice)
