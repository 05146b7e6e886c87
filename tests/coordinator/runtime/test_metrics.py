"""Prometheus metrics: the coordinator's (runtime layer, on its own registry) and the worker's.

The model-level test drives a runtime on a fake clock; the end-to-end one scrapes a real
coordinator over HTTP while real workers form, rebalance and lose a member.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from groupcoord.admin import AdminClient
from groupcoord.coordinator.auth.tokens import hash_token
from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.process.serve import ServeOptions, start_metrics
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.metrics import MetricsTls, serve_metrics
from groupcoord.coordinator.runtime.metrics_http import MetricsServerLimits
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.runtime.shared import ProcessParts
from groupcoord.coordinator.storage.store import MemoryStore
from groupcoord.coordinator.testing import FailingStore, FakeOffice, Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import WorkerClient, WorkerConfig, WorkerState
from tests.paths import ROOT
from tests.security_pki import Pki

G = "orders"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample as {(name, sorted labels): value}."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape_registry(registry: CollectorRegistry) -> Samples:
    return parse(generate_latest(registry).decode())


# ---------------------------------------------------------------------- the runtime, on a fake clock


def test_rebalances_expirations_and_moves_are_counted_by_the_runtime() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200))

    def metrics() -> Samples:
        return scrape_registry(h.runtime.metrics.registry)

    h.put_tasks(G, "a", "b", "c", "d")
    m1, join1 = h.join_new(G, session_timeout_ms=10_000)
    h.sync(G, m1, join1.response.generation, {m1: ["a", "b", "c", "d"]})
    first = metrics()
    assert value(first, "groupcoord_rebalances_total", outcome="stable") == 1
    assert value(first, "groupcoord_rebalance_tasks_moved_count") == 1
    assert value(first, "groupcoord_rebalance_tasks_moved_sum") == 0  # placed, not moved
    assert value(first, "groupcoord_group_imbalance", group=G, by="count") == 1.0

    m2, _ = h.join_new(G, session_timeout_ms=1_000)  # m1 must re-join: the rebalance starts now
    h.advance(0.5)
    rejoin = h.join(G, m1, session_timeout_ms=10_000)
    generation = rejoin.response.generation
    h.sync(G, m2, generation)
    h.sync(G, m1, generation, {m1: ["a", "b", "c"], m2: ["d"]})
    second = metrics()
    assert value(second, "groupcoord_rebalances_total", outcome="stable") == 2
    assert value(second, "groupcoord_rebalance_duration_seconds_sum") == pytest.approx(0.5)
    assert value(second, "groupcoord_rebalance_tasks_moved_sum") == 1  # d: m1 -> m2
    assert value(second, "groupcoord_group_imbalance", group=G, by="count") == 1.5  # 3 and 1: max/mean
    assert value(second, "groupcoord_group_members", group=G) == 2
    assert value(second, "groupcoord_group_generation", group=G) == generation
    assert value(second, "groupcoord_groups", state="Stable") == 1

    assert h.heartbeat(G, m1, generation) == pb.NONE
    h.advance(1.2)  # m2's session (1 s) ends; m1 (10 s) lives on
    third = metrics()
    assert value(third, "groupcoord_session_expirations_total") == 1
    assert value(third, "groupcoord_groups", state="PreparingRebalance") == 1
    assert value(third, "groupcoord_group_imbalance", group=G, by="count") == 0  # not shown while rebalancing
    assert value(third, "groupcoord_request_duration_seconds_count", rpc="Heartbeat", code="NONE") == 1
    assert value(third, "groupcoord_request_duration_seconds_count", rpc="JoinGroup", code="MEMBER_ID_REQUIRED") == 2


def test_store_writes_elections_role_and_snapshot_age() -> None:
    store = FailingStore(MemoryStore())
    office = FakeOffice(in_office=True, term=7)
    h = Harness(store=store, office=office)
    h.runtime.load()
    registry = h.runtime.metrics.registry
    assert h.put_tasks(G, "a") == pb.NONE
    store.fail_next_save()
    assert h.put_tasks(G, "b") == pb.COORDINATOR_NOT_AVAILABLE
    h.admin("publish_load_snapshot", pb.PublishLoadSnapshotRequest(snapshot=pb.LoadSnapshot(
        group_id=G, snapshot_id="s1", created_ms=h.clock.wall_ms() - 5_000)))
    samples = scrape_registry(registry)
    assert value(samples, "groupcoord_store_write_failures_total", op="save") == 1
    assert value(samples, "groupcoord_store_write_duration_seconds_count", op="save") == 3  # failure included
    assert value(samples, "groupcoord_ha_elections_total") == 1
    assert value(samples, "groupcoord_ha_term") == 7
    assert value(samples, "groupcoord_ha_role", role="active") == 1
    assert value(samples, "groupcoord_group_load_snapshot_age_seconds", group=G) == 5.0
    h.clock.advance(2)
    office.change(in_office=False)
    later = scrape_registry(registry)
    assert value(later, "groupcoord_ha_role", role="standby") == 1
    assert value(later, "groupcoord_ha_role", role="active") == 0
    assert value(later, "groupcoord_group_load_snapshot_age_seconds", group=G) == 7.0


def test_each_runtime_has_its_own_registry_and_the_global_one_stays_clean() -> None:
    one, two = CoordinatorRuntime(), CoordinatorRuntime()
    assert one.metrics.registry is not two.metrics.registry
    WorkerClient(WorkerConfig(group_id=G, coordinators="127.0.0.1:1"), _Listener(),
                 metrics_registry=CollectorRegistry())
    assert b"groupcoord" not in generate_latest(prometheus_client.REGISTRY)


# ---------------------------------------------------------------------- real server, real workers, HTTP


class _Listener:
    def on_assigned(self, tasks: object, generation: int) -> None:
        pass

    def on_revoked(self, tasks: object) -> None:
        pass


def _worker(address: str, name: str, registry: CollectorRegistry | None = None, **overrides: object) -> WorkerClient:
    settings: dict[str, object] = {
        "group_id": G, "coordinators": address, "client_id": name, "session_timeout_ms": 30_000,
        "heartbeat_interval_ms": 50, "rebalance_timeout_ms": 5_000, "retry_backoff_ms": 20,
        "retry_backoff_max_ms": 200,
    }
    settings.update(overrides)
    return WorkerClient(WorkerConfig(**settings), _Listener(), metrics_registry=registry)  # type: ignore[arg-type]


@pytest.fixture
def coordinator() -> Iterator[tuple[ServerThread, FakeClock, str]]:
    """A real server whose clock only moves when the test says so (sessions end on demand)."""
    clock = FakeClock()
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    with ServerThread(CoordinatorRuntime(config, clock=clock)) as server:
        endpoint = serve_metrics(server.runtime.metrics.registry, "127.0.0.1:0")
        try:
            yield server, clock, f"http://127.0.0.1:{endpoint.port}/metrics"
        finally:
            endpoint.close()


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        return parse(response.read().decode())


def scrape_until(url: str, check: object, timeout_s: float = 10) -> Samples:
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(url)
        if check(samples) or time.monotonic() > deadline:  # type: ignore[operator]
            return samples
        time.sleep(0.05)


def test_the_endpoint_follows_groups_forming_rebalancing_and_expiring(
    coordinator: tuple[ServerThread, FakeClock, str],
) -> None:
    server, clock, url = coordinator
    empty = scrape(url)
    assert value(empty, "groupcoord_groups", state="Stable") == 0
    assert value(empty, "groupcoord_ha_role", role="active") == 1

    admin = AdminClient(server.address)
    admin.put_tasks(G, [f"t{i}" for i in range(6)])
    worker_registry = CollectorRegistry()
    stays = _worker(server.address, "stays", worker_registry).start()
    goes = _worker(server.address, "goes", session_timeout_ms=1_000).start()
    try:
        formed = admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 2
                                and all(len(m.assigned) == 3 for m in d.members), 20)
        assert stays.wait_until(lambda w: w.state is WorkerState.STABLE and w.generation == formed.generation, 10)
        samples = scrape_until(url, lambda s: value(
            s, "groupcoord_request_duration_seconds_count", rpc="Heartbeat", code="NONE") > 0)
        assert value(samples, "groupcoord_groups", state="Stable") == 1
        assert value(samples, "groupcoord_group_members", group=G) == 2
        assert value(samples, "groupcoord_group_generation", group=G) == formed.generation
        assert value(samples, "groupcoord_group_imbalance", group=G, by="count") == 1.0
        assert value(samples, "groupcoord_rebalances_total", outcome="stable") >= 1
        assert value(samples, "groupcoord_request_duration_seconds_count", rpc="SyncGroup", code="NONE") >= 2
        assert value(samples, "groupcoord_store_write_duration_seconds_count", op="save") >= 3
        assert value(samples, "groupcoord_session_expirations_total") == 0
        rebalances = value(samples, "groupcoord_rebalances_total", outcome="stable")
        moved_before = value(samples, "groupcoord_rebalance_tasks_moved_sum")

        worker_samples = scrape_registry(worker_registry)
        ids = {"group": G, "client": "stays"}
        assert value(worker_samples, "groupcoord_worker_state", state="Stable", **ids) == 1
        assert value(worker_samples, "groupcoord_worker_state", state="Joining", **ids) == 0
        assert value(worker_samples, "groupcoord_worker_owned_tasks", **ids) == 3
        assert value(worker_samples, "groupcoord_worker_generation", **ids) == formed.generation
        assert value(worker_samples, "groupcoord_worker_rebalances_total", **ids) >= 1
        assert value(worker_samples, "groupcoord_worker_rebalance_seconds_total", **ids) > 0

        goes.close(leave_group=False)  # gone without a word: only its session can tell
        server.call(lambda: clock.advance(1.5))
        server.call(server.runtime.poll_timers)
        after = admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 1
                               and len(d.members[0].assigned) == 6, 20)
        samples = scrape(url)
        assert value(samples, "groupcoord_session_expirations_total") == 1
        assert value(samples, "groupcoord_group_members", group=G) == 1
        assert value(samples, "groupcoord_group_generation", group=G) == after.generation > formed.generation
        assert value(samples, "groupcoord_rebalances_total", outcome="stable") == rebalances + 1
        assert value(samples, "groupcoord_rebalance_tasks_moved_sum") == moved_before + 3  # the lost member's
        assert stays.wait_until(lambda w: w.generation == after.generation and w.state is WorkerState.STABLE, 10)
        assert value(scrape_registry(worker_registry), "groupcoord_worker_owned_tasks", **ids) == 6
    finally:
        goes.close()
        stays.close()
    assert value(scrape_registry(worker_registry), "groupcoord_worker_state", state="Down", **ids) == 1


# ---------------------------------------------------------------------- the docs name every metric



def _base(name: str) -> str:
    for suffix in ("_bucket", "_count", "_sum", "_created"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def test_docs_and_dashboard_name_every_metric_there_is() -> None:
    registry = CollectorRegistry()
    runtime = CoordinatorRuntime()
    WorkerClient(WorkerConfig(group_id=G, coordinators="127.0.0.1:1"), _Listener(), metrics_registry=registry)
    runtime.metrics.requests.labels(rpc="Heartbeat", code="NONE").observe(0.001)
    runtime.metrics.store_writes.labels(op="save").observe(0.001)
    runtime.metrics.store_write_failures.labels(op="save").inc()
    runtime.metrics.rebalances.labels(outcome="stable").inc()
    exported = {_base(name) for samples in (scrape_registry(runtime.metrics.registry), scrape_registry(registry))
                for name, _ in samples}
    exported |= {_base(f.name) for f in text_string_to_metric_families(generate_latest(runtime.metrics.registry).decode())}
    documented = set(re.findall(r"`(groupcoord_[a-z_]+)`", (ROOT / "docs" / "metrics.md").read_text()))
    missing = {n for n in exported if n not in documented and f"{n}_total" not in documented}
    assert not missing, f"not in docs/metrics.md: {sorted(missing)}"
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {_base(n) for e in exprs for n in re.findall(r"groupcoord_[a-z_]+", e)}
    assert used and not {n for n in used if n not in documented}, sorted(used - documented)


def test_group_labels_off_leaves_every_group_name_out() -> None:
    h = Harness()
    h.join_new("tenant-a-secret-group")
    text = generate_latest(h.runtime.metrics.registry).decode()
    assert "tenant-a-secret-group" in text
    h.runtime.metrics.group_labels = False
    text = generate_latest(h.runtime.metrics.registry).decode()
    assert "tenant-a-secret-group" not in text and "groupcoord_groups{" in text  # counts by state stay


def test_serve_warns_of_metrics_beyond_loopback_and_serves_https_when_asked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pki = Pki(tmp_path / "pki")

    async def start(options: ServeOptions) -> None:
        endpoint = start_metrics(CoordinatorRuntime(), options)
        assert endpoint is not None
        endpoint.close()

    asyncio.run(start(ServeOptions(metrics_listen="0.0.0.0:0")))
    assert "WARNING: metrics on 0.0.0.0:0 over plain HTTP" in capsys.readouterr().err
    asyncio.run(start(ServeOptions(metrics_listen="127.0.0.1:0")))
    assert "WARNING" not in capsys.readouterr().err
    asyncio.run(start(ServeOptions(metrics_listen="0.0.0.0:0", metrics_tls=True, tls_cert=pki.server_cert,
                                   tls_key=pki.server_key)))
    err = capsys.readouterr().err
    assert "WARNING" not in err and "https://0.0.0.0:" in err


def _scrape(url: str, *, token: str = "", context: ssl.SSLContext | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_a_metrics_token_file_turns_away_scrapers_without_a_listed_token(tmp_path: Path) -> None:
    tokens = tmp_path / "metrics.tokens"
    tokens.write_text(f"prometheus sha256:{hash_token('scrape-secret')}\n")
    tokens.chmod(0o600)

    async def scrapes() -> list[tuple[int, str]]:
        endpoint = start_metrics(CoordinatorRuntime(), ServeOptions(metrics_listen="127.0.0.1:0",
                                                                    metrics_token_file=tokens))
        assert endpoint is not None
        url = f"http://127.0.0.1:{endpoint.port}/metrics"
        try:
            return await asyncio.to_thread(lambda: [_scrape(url), _scrape(url, token="guess"),
                                                    _scrape(url, token="scrape-secret")])
        finally:
            endpoint.close()

    (none, wrong, right) = asyncio.run(scrapes())
    assert none[0] == 401 and wrong[0] == 401 and "groupcoord_" not in none[1] + wrong[1]
    assert right[0] == 200 and "groupcoord_groups" in right[1]
    tokens.chmod(0o644)  # others may read it: refused at start, in one line naming the file
    with pytest.raises(ValueError, match="metrics token file .*metrics.tokens"):
        asyncio.run(scrapes())


def test_metrics_over_mtls_answer_only_a_scraper_with_a_certificate(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    cert, key = pki.client("prometheus")
    endpoint = serve_metrics(CollectorRegistry(), "127.0.0.1:0", tls=MetricsTls(
        cert=str(pki.server_cert), key=str(pki.server_key), client_ca=str(pki.ca_file)))
    url = f"https://localhost:{endpoint.port}/metrics"
    try:
        anonymous = ssl.create_default_context(cafile=str(pki.ca_file))
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _scrape(url, context=anonymous)
        scraper = ssl.create_default_context(cafile=str(pki.ca_file))
        scraper.load_cert_chain(str(cert), str(key))
        assert _scrape(url, context=scraper)[0] == 200
    finally:
        endpoint.close()


def test_idle_connections_hold_no_thread_make_way_for_scrapes_and_are_closed_when_idle_too_long() -> None:
    """Issue 38: 1,000 idle connections to the metrics port held 1,000 threads (a thread per connection)."""
    limits = MetricsServerLimits(max_connections=64, idle_timeout_s=1.0, workers=2)
    endpoint = serve_metrics(CollectorRegistry(), "127.0.0.1:0", limits=limits)
    url = f"http://127.0.0.1:{endpoint.port}/metrics"
    threads = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", endpoint.port)) for _ in range(300)]
    try:
        assert _scrape(url)[0] == 200  # the cap is full of idle connections: the oldest makes way
        assert threading.active_count() <= threads + limits.workers
        assert endpoint.open_connections <= limits.max_connections + 1
        last = idle[-1]
        last.settimeout(30)
        assert last.recv(1) == b""  # closed by the server once idle for idle_timeout_s
        with socket.create_connection(("127.0.0.1", endpoint.port)) as slow:  # a head never finished
            slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            slow.settimeout(30)
            assert slow.recv(1) == b""
        with socket.create_connection(("127.0.0.1", endpoint.port)) as huge:
            huge.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"y" * 20_000 + b"\r\n\r\n")
            huge.settimeout(30)
            assert huge.recv(64).startswith(b"HTTP/1.1 431")
        assert _scrape(url)[0] == 200
    finally:
        for sock in idle:
            sock.close()
        endpoint.close()


def test_with_tls_a_connection_that_never_says_hello_blocks_no_scrape(tmp_path: Path) -> None:
    """Issue 38: the handshake ran on the one accepting thread, so one silent connection blocked every scrape."""
    pki = Pki(tmp_path / "pki")
    endpoint = serve_metrics(CollectorRegistry(), "127.0.0.1:0", tls=MetricsTls(
        cert=str(pki.server_cert), key=str(pki.server_key)), limits=MetricsServerLimits(idle_timeout_s=60))
    url = f"https://localhost:{endpoint.port}/metrics"
    try:
        with socket.create_connection(("127.0.0.1", endpoint.port)) as silent:
            context = ssl.create_default_context(cafile=str(pki.ca_file))
            for _ in range(3):  # each within _scrape's 10 s, with the silent one still waiting (60 s)
                assert _scrape(url, context=context)[0] == 200
            silent.sendall(b"not a ClientHello\r\n\r\n")  # a failed handshake: closed, no scrape affected
            silent.settimeout(30)
            with contextlib.suppress(ConnectionResetError):
                while silent.recv(1024):  # an alert, then the close
                    pass
            assert _scrape(url, context=context)[0] == 200
    finally:
        endpoint.close()


def test_the_event_loop_lost_time_is_served_as_the_sessions_extension() -> None:
    """The time the loop ran late beyond its slack is what sessions were extended by: a scrape reads it."""
    parts = ProcessParts.for_process()
    assert parts.metrics.registry.get_sample_value("groupcoord_event_loop_lost_seconds") == 0.0
    parts.lag.note(0.52)  # one tick half a second late: 0.5 s past the 20 ms slack
    parts.lag.note(0.01)  # within the slack: nothing lost
    assert parts.metrics.registry.get_sample_value("groupcoord_event_loop_lost_seconds") == pytest.approx(0.5)
    assert parts.lag.lost() == pytest.approx(0.5)
