"""The ownership checker catches what it must (planted overlaps and gaps) and allows only the
SIGSTOP window; the schedule is a function of its seed; the proxy delays and drops."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.chaos.ownership import OwnershipLog, check, event
from tests.chaos.proxy import FaultProxy
from tests.chaos.schedule import make_schedule

SESSION, REBALANCE, HEARTBEAT = 2.0, 3.0, 0.25


def judge(*lines: str, since: float = 0.0) -> list[str]:
    log = OwnershipLog.parse(lines)
    return check(log, session_s=SESSION, rebalance_timeout_s=REBALANCE, heartbeat_s=HEARTBEAT, since=since).violations


def start(ts: float, worker: str, *tasks: str, generation: int = 1) -> str:
    return event("assigned", ts, worker=worker, member_id=worker + "-m", generation=generation, tasks=list(tasks))


def stop(ts: float, worker: str, *tasks: str) -> str:
    return event("revoked", ts, worker=worker, tasks=list(tasks))


def fault(ts: float, fid: int, kind: str, phase: str, target: str, group: str = "g0") -> str:
    return event("fault", ts, id=fid, kind=kind, phase=phase, target=target, group=group)


def test_a_clean_handover_passes() -> None:
    assert judge(start(1, "g0/w0#1", "g0-t0"), stop(2, "g0/w0#1", "g0-t0"), start(2.5, "g0/w1#1", "g0-t0", generation=2),
                 event("end", 3)) == []


def test_a_task_started_while_its_owner_still_runs_it_is_a_violation() -> None:
    problems = judge(start(1, "g0/w0#1", "g0-t0"), start(2, "g0/w1#1", "g0-t0", generation=2),
                     stop(2.4, "g0/w0#1", "g0-t0"), event("end", 3))
    assert len(problems) == 1 and "overlap g0-t0: g0/w1#1" in problems[0] and "no SIGSTOP" in problems[0]


def test_an_owner_that_never_stops_overlaps_till_the_end() -> None:
    assert len(judge(start(1, "g0/w0#1", "g0-t0"), start(2, "g0/w1#1", "g0-t0"), event("end", 3))) == 1


def test_a_killed_owner_stops_at_its_kill() -> None:
    assert judge(start(1, "g0/w0#1", "g0-t0"), fault(2, 1, "worker_kill", "inject", "g0/w0#1"),
                 fault(2, 1, "worker_kill", "heal", "g0/w0#2"), start(3.5, "g0/w1#1", "g0-t0"), event("end", 4)) == []


def test_a_sigstopped_owner_is_allowed_until_it_notices_after_sigcont() -> None:
    notice = HEARTBEAT + SESSION / 2 + 0.5
    lines = [start(1, "g0/w0#1", "g0-t0"), fault(2, 1, "worker_stop", "inject", "g0/w0#1"),
             start(4.5, "g0/w1#1", "g0-t0", generation=2), fault(5, 1, "worker_stop", "heal", "g0/w0#1")]
    assert judge(*lines, stop(5 + notice - 0.01, "g0/w0#1", "g0-t0"), event("end", 9)) == []
    late = judge(*lines, stop(5 + notice + 0.01, "g0/w0#1", "g0-t0"), event("end", 9))
    assert len(late) == 1 and "after SIGCONT" in late[0]


def test_the_sigstop_allowance_covers_only_starts_after_the_sigstop() -> None:
    problems = judge(start(1, "g0/w0#1", "g0-t0"), start(1.5, "g0/w1#1", "g0-t0"),
                     fault(2, 1, "worker_stop", "inject", "g0/w0#1"), fault(5, 1, "worker_stop", "heal", "g0/w0#1"),
                     stop(5.1, "g0/w0#1", "g0-t0"), event("end", 9))
    assert len(problems) == 1


def test_the_allowance_is_for_the_stopped_process_only() -> None:
    problems = judge(start(1, "g0/w0#1", "g0-t0"), fault(2, 1, "worker_stop", "inject", "g0/w2#1"),
                     start(4.5, "g0/w1#1", "g0-t0"), fault(5, 1, "worker_stop", "heal", "g0/w2#1"),
                     stop(5.1, "g0/w0#1", "g0-t0"), event("end", 9))
    assert len(problems) == 1


def test_an_unowned_gap_past_session_plus_rebalance_timeout_after_the_heal_is_a_violation() -> None:
    bound = SESSION + REBALANCE
    base = [start(1, "g0/w0#1", "g0-t0"), fault(2, 1, "worker_kill", "inject", "g0/w0#1"),
            fault(2.2, 1, "worker_kill", "heal", "g0/w0#2")]
    assert judge(*base, start(2.2 + bound - 0.1, "g0/w1#1", "g0-t0"), event("end", 20), since=1.5) == []
    problems = judge(*base, start(2.2 + bound + 0.1, "g0/w1#1", "g0-t0"), event("end", 20), since=1.5)
    assert len(problems) == 1 and "after worker_kill" in problems[0]


def test_a_gap_is_blamed_on_a_fault_of_its_own_group_or_a_global_one() -> None:
    log = OwnershipLog.parse([
        start(1, "g0/w0#1", "g0-t0"), fault(1.5, 1, "disk_full", "inject", "coordinator", group=""),
        fault(1.8, 2, "worker_kill", "inject", "g1/w0#1", group="g1"), stop(2, "g0/w0#1", "g0-t0"),
        fault(3, 1, "disk_full", "heal", "coordinator", group=""), start(4, "g0/w1#1", "g0-t0"), event("end", 5)])
    report = check(log, session_s=SESSION, rebalance_timeout_s=REBALANCE, heartbeat_s=HEARTBEAT)
    (gap,) = report.gaps
    assert gap.fault is not None and gap.fault.kind == "disk_full" and gap.seconds == pytest.approx(2.0)


def test_a_task_unowned_at_the_end_is_a_gap_until_the_end() -> None:
    problems = judge(start(1, "g0/w0#1", "g0-t0"), stop(2, "g0/w0#1", "g0-t0"), event("end", 20))
    assert len(problems) == 1 and "unowned 18.00s" in problems[0]


def test_the_schedule_is_a_function_of_its_seed() -> None:
    one = make_schedule(200, 5, groups=4, slots=3, session_s=2.0)
    assert one == make_schedule(200, 5, groups=4, slots=3, session_s=2.0)
    assert one != make_schedule(200, 6, groups=4, slots=3, session_s=2.0)
    assert sum(len(r.faults) for rounds in one.values() for r in rounds) == 200
    kinds = {f.kind for rounds in one.values() for r in rounds for f in r.faults}
    assert kinds == {"worker_kill", "worker_stop", "coordinator_kill", "proxy_delay", "proxy_drop", "disk_full",
                     "active_kill", "zk_restart"}


class Echo:
    """A TCP echo server on loopback (the proxy's upstream)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)


def roundtrip(port: int, timeout: float = 10.0) -> float:
    """Seconds for one echo through ``port``. The timeout is generous: at load average 28 a 0.4 s delayed
    round trip took over 2 s (the suite runs on several xdist workers beside other processes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        began = time.monotonic()
        s.sendall(b"ping")
        assert s.recv(16) == b"ping"
        return time.monotonic() - began


def test_the_proxy_delays_blackholes_and_drops() -> None:
    echo = Echo()
    with FaultProxy(echo.port) as proxy:
        assert roundtrip(proxy.port) < 0.4  # below the delayed minimum: only the delay tells them apart
        proxy.delay(0.2)
        assert roundtrip(proxy.port) >= 0.4  # both ways
        proxy.blackhole()
        with pytest.raises(TimeoutError):
            roundtrip(proxy.port, timeout=0.3)
        proxy.drop()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=1) as s:
            assert s.recv(16) == b""  # closed at once
        proxy.heal()
        assert roundtrip(proxy.port) < 0.4
    echo.sock.close()


def test_rss_growth_is_the_trend_not_the_swing() -> None:
    from tests.chaos.soak import rss_growth

    swing = [(float(t), 70_000_000 + (3_000_000 if t % 10 < 5 else -3_000_000)) for t in range(60)]
    assert abs(rss_growth(swing)) < 0.03  # a swing of 8.6% peak to peak
    leak = [(float(t), 70_000_000 + 100_000 * t) for t in range(60)]
    assert rss_growth(leak) == pytest.approx(5_900_000 / 70_000_000)
