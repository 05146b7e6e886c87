"""Real processes for the chaos runs: coordinators (SQLite, or elected on ZooKeeper) and workers.

Workers are ``groupcoord worker`` processes whose stdout is the shared ownership log (opened
``O_APPEND``: each JSON line is one ``write``). Coordinators log to a pipe the runner copies into
a file (a coordinator whose file writes are refused can still log), so the runner can count the
store writes the coordinator refused.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.deadlines import Deadline
from tests.listening import announced
from tests.paths import ROOT
from tests.processes import stop_processes

__all__ = ["GROUP_PROTOCOLS", "Coordinator", "Timing", "WorkerPool", "answers_as_active", "env_with_tree",
           "speaks_consumer"]

GROUP_PROTOCOLS = ("classic", "consumer", "mixed")  # what the workers of a run speak (run.py --protocol)



def env_with_tree() -> dict[str, str]:
    """The environment of child processes: this tree first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@dataclass(frozen=True)
class Timing:
    """The workers' settings (the checker's bounds come from them)."""

    session_ms: int = 3000
    heartbeat_ms: int = 300
    rebalance_timeout_ms: int = 3000

    @property
    def session_s(self) -> float:
        return self.session_ms / 1000

    @property
    def rebalance_timeout_s(self) -> float:
        return self.rebalance_timeout_ms / 1000

    @property
    def heartbeat_s(self) -> float:
        return self.heartbeat_ms / 1000


def speaks_consumer(group_protocol: str, slot: str) -> bool:
    """Whether the worker in ``slot`` ("gN/wM") speaks the consumer protocol. Mixed: every other worker,
    shifted by the group (g0: w1; g1: w0 and w2; ...), so each group holds both kinds and converts."""
    if group_protocol != "mixed":
        return group_protocol == "consumer"
    group, _, worker = slot.partition("/")
    return (int(group.lstrip("g")) + int(worker.lstrip("w"))) % 2 == 1


def answers_as_active(address: str, timeout: float = 1.0) -> bool:
    """True when ``address`` answers ListGroups itself (not a standby, not loading)."""
    try:
        with grpc.insecure_channel(address) as channel:
            response = pb_grpc.GroupAdminStub(channel).ListGroups(pb.ListGroupsRequest(), timeout=timeout)
    except grpc.RpcError:
        return False
    return bool(response.error.code == pb.NONE)


class Coordinator:
    """One ``groupcoord serve`` process; ``kill()`` then ``start()`` is a crash and restart on the same port.

    The first start binds port 0 (no port picked here and raced for until the child binds it); ``port`` and
    ``address`` read the port it bound from its startup line (tests/listening.py) when first asked, so the
    coordinators of an environment start together and their imports overlap."""

    def __init__(self, name: str, workdir: Path, config: str, *, data_dir: Path | None = None) -> None:
        self.name = name
        self._port = 0
        self.data_dir = data_dir or workdir / name
        self.config_path = workdir / f"{name}.toml"
        self.config_path.write_text(config)
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_lock = threading.Lock()

    @property
    def port(self) -> int:
        """The port the first start bound (waits for its startup line: a process start, stretched by the load)."""
        if not self._port:
            assert self.proc is not None, f"{self.name} was never started"
            self._port = int(announced(self.log_path, self.proc).rpartition(":")[2])
        return self._port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        port = self.port if self.proc is not None else 0  # a restart keeps the address the workers know
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "groupcoord.cli", "--log-level", "info", "--log-format", "json", "serve", "--config", str(self.config_path),
             "--listen", f"127.0.0.1:{port}", "--data-dir", str(self.data_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env_with_tree(),
        )
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with self.log_path.open("ab") as out:
            for line in proc.stdout:
                with self._log_lock:
                    out.write(line)
                    out.flush()

    def log_text(self) -> str:
        with self._log_lock:
            return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def refuse_file_writes(self, refuse: bool) -> None:
        """Full disk: RLIMIT_FSIZE of 1 byte makes every file write past offset 0 fail with EFBIG
        (Python ignores SIGXFSZ), overwrites included; reads still work. ``False`` lifts it."""
        assert self.proc is not None
        limit = (1, psutil.RLIM_INFINITY) if refuse else (psutil.RLIM_INFINITY, psutil.RLIM_INFINITY)
        psutil.Process(self.proc.pid).rlimit(psutil.RLIMIT_FSIZE, limit)

    def rss(self) -> int:
        assert self.proc is not None
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def stop(self) -> None:
        if self.proc is not None:
            stop_processes([self.proc])


def wait_for(predicate: Callable[[], object], timeout: float, what: str, poll_s: float = 0.05) -> float:
    """Poll until ``predicate()`` holds; returns the seconds it took (AssertionError past ``timeout``, a quiet
    machine's figure stretched by the load: every wait here is on processes starting or electing, a hang guard)."""
    deadline = Deadline(timeout)
    while not predicate():
        if deadline.passed():
            raise AssertionError(f"timed out after {deadline.elapsed():.0f}s ({timeout}s quiet, load factor "
                                 f"{deadline.allowed / timeout:.1f}) waiting for {what}")
        time.sleep(poll_s)
    return deadline.elapsed()


@dataclass
class WorkerPool:
    """The worker processes of one run: ``slots`` per group, restarted under a new name after a kill."""

    log_path: Path
    address_of: Callable[[str], str]  # slot -> the coordinator address(es) its workers dial
    timing: Timing
    protocol_of: dict[str, str]  # group -> eager | cooperative
    slots: int = 3
    group_protocol: str = "classic"  # classic | consumer | mixed (speaks_consumer)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # "group/wN" -> process
    names: dict[str, str] = field(default_factory=dict)  # slot -> current process name
    incarnations: dict[str, int] = field(default_factory=dict)

    def all_slots(self) -> list[str]:
        return [f"{group}/w{slot}" for group in self.protocol_of for slot in range(self.slots)]

    def start_all(self) -> None:
        for slot in self.all_slots():
            self.start(slot)

    def start(self, slot: str) -> str:
        n = self.incarnations.get(slot, 0) + 1
        self.incarnations[slot] = n
        name = f"{slot}#{n}"
        group = slot.partition("/")[0]
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        # each process's warnings (retries and their backoff, give-ups) beside the log, for diagnosis
        err = os.open(self.log_path.with_name(f"worker-{name.replace('/', '-')}.err"),
                      os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        argv = [sys.executable, "-m", "groupcoord.cli", "worker", "--group", group, "--coordinator", self.address_of(slot),
                "--name", name, "--session-timeout-ms", str(self.timing.session_ms),
                "--heartbeat-interval-ms", str(self.timing.heartbeat_ms),
                "--rebalance-timeout-ms", str(self.timing.rebalance_timeout_ms)]
        if speaks_consumer(self.group_protocol, slot):  # the coordinator assigns (sticky) and sets the interval
            argv += ["--protocol", "consumer"]
        else:
            argv += ["--rebalance-protocol", self.protocol_of[group], "--assignor", "sticky,round-robin"]
        try:
            self.procs[slot] = subprocess.Popen(argv, stdout=fd, stderr=err, env=env_with_tree())
        finally:
            os.close(fd)
            os.close(err)
        self.names[slot] = name
        return name

    def slots_of(self, group: str) -> list[str]:
        return [s for s in self.procs if s.startswith(group + "/")]

    def signal(self, slot: str, sig: signal.Signals) -> None:
        self.procs[slot].send_signal(sig)

    def kill(self, slot: str) -> None:
        proc = self.procs[slot]
        proc.kill()
        proc.wait(10)

    def dead(self) -> list[str]:
        return [self.names[s] for s, p in self.procs.items() if p.poll() is not None]

    def stop(self, only: Callable[[str], bool] | None = None) -> None:
        """Stop (SIGTERM, then wait) every worker, or those whose slot ``only`` selects."""
        stop_processes([p for slot, p in self.procs.items() if only is None or only(slot)])
