"""docs/scaling.md runs as written: its shell blocks, in order, against a real ZooKeeper, and the
example script it names.

Only the addresses change: ZooKeeper's 127.0.0.1:2181 and each 127.0.0.1:94xx become free ports,
and relative data directories land in the test's own directory. The ``sudo`` lines (installing
and starting Debian's ZooKeeper) are what ``tests/zookeeper_server.py`` does; any other line that
is not a ``groupcoord`` command, ``kill -9 %N`` or the example fails the test, so the page cannot
gain a step nobody runs. A foreground command is run until it exits 0 (a reader runs it again
after a start-up error, once the coordinators are up); ``cluster describe`` until every live
coordinator leads shards and no shard is leaderless, as the page shows it.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deadlines import Deadline, run_within
from tests.paths import ROOT
from tests.processes import stop_processes
from tests.zookeeper_server import ZooKeeperServer, free_port

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

PAGE = ROOT / "docs" / "scaling.md"
README = ROOT / "README.md"


def shell_lines(text: str) -> list[str]:
    """The commands of every ```sh block, continuation lines joined, comments dropped."""
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line and not line.startswith("#"):
                lines.append(" ".join(line.split()))
    return lines


def test_the_page_has_the_steps_the_issue_asks_for() -> None:
    lines = shell_lines(PAGE.read_text())
    serves = [line for line in lines if line.startswith("groupcoord serve") and "--sharded" in line]
    assert len(serves) == 4 and all(line.endswith("&") for line in serves)  # three, then a fourth
    assert any(line.startswith("groupcoord worker") and "," in line for line in lines)  # a bootstrap list
    assert sum(line.startswith("groupcoord cluster describe") for line in lines) >= 2
    assert any(line.startswith("kill -9 %") for line in lines)
    assert any("apt-get install -y zookeeper" in line for line in lines)
    readme = README.read_text()
    assert "## Scaling out" in readme and "(docs/scaling.md)" in readme
    for line in shell_lines(readme.split("## Scaling out", 1)[1].split("\n## ", 1)[0]):
        assert line in lines or line.replace(" &", "") in " ".join(lines) or line.startswith("groupcoord serve"), line


class Session:
    """A reader's shell: background jobs (``&``), foreground commands, ``kill -9 %N``."""

    def __init__(self, tmp: Path, zk: ZooKeeperServer) -> None:
        self.tmp = tmp
        self.zk = zk
        self.ports: dict[str, str] = {}
        self.jobs: list[subprocess.Popen[str]] = []
        self.outputs: list[Path] = []
        self.serves: dict[int, str] = {}  # job index -> its address

    def translate(self, line: str) -> list[str]:
        line = line.replace("127.0.0.1:2181", self.zk.hosts)
        line = re.sub(r"127\.0\.0\.1:(94\d\d)",
                      lambda m: self.ports.setdefault(m.group(1), f"127.0.0.1:{free_port()}"), line)
        return shlex.split(line)

    def command(self, argv: list[str]) -> list[str]:
        assert argv[0] == "groupcoord", argv
        return [sys.executable, "-m", "groupcoord.cli", *argv[1:]]

    def background(self, argv: list[str]) -> None:
        out = self.tmp / f"job{len(self.jobs) + 1}.log"
        self.outputs.append(out)
        with out.open("w") as log:
            self.jobs.append(subprocess.Popen(self.command(argv), cwd=self.tmp, stdout=log, stderr=subprocess.STDOUT,
                                              text=True))
        if argv[1] == "serve":  # a reader waits for the listening line before going on
            self.serves[len(self.jobs) - 1] = argv[argv.index("--advertise") + 1]
            started = Deadline(30)  # a process start: its imports, slower the more the machine is shared
            while not ("listening on" in out.read_text() or self.jobs[-1].poll() is not None):
                assert not started.passed(), f"{argv} not listening after {started.elapsed():.0f}s"
                time.sleep(0.05)
            assert self.jobs[-1].poll() is None, out.read_text()

    def live(self) -> list[str]:
        return sorted(a for i, a in self.serves.items() if self.jobs[i].poll() is None)

    def foreground(self, argv: list[str], timeout: float = 60) -> str:
        command = self.command(argv)
        check = None
        if argv[1:3] == ["cluster", "describe"]:
            command.append("--json")
            check = self.balanced
        if argv[1:3] == ["groups", "list"]:
            # the worker started in the background a moment before: its group is Stable once its first rebalance
            # (the initial delay, then a join and a sync) is through, later on a loaded machine; asked again until then
            check = self.stable
        # each try is a CLI process (its imports take most of a try on a loaded machine): stretched with the load
        deadline = Deadline(timeout)
        while True:
            result = run_within(command, 60, cwd=self.tmp)
            assert "Traceback" not in result.stderr, result.stderr
            if result.returncode == 0 and (check is None or check(result.stdout)):
                return result.stdout
            assert not deadline.passed(), (argv, result.returncode, result.stdout[-2000:], result.stderr)
            time.sleep(0.5)

    @staticmethod
    def stable(out: str) -> bool:
        return out.startswith("shop\tStable")

    def balanced(self, out: str) -> bool:
        view = json.loads(out)
        coordinators = sorted(c["address"] for c in view["coordinators"] if c["shards_led"] > 0)
        return (coordinators == self.live() and view["shards"] == 64 and len(view["shard_infos"]) == 64
                and all(s["leader"] in coordinators for s in view["shard_infos"]) and not view["failed"])

    def kill(self, job: int) -> None:
        self.jobs[job - 1].send_signal(signal.SIGKILL)
        self.jobs[job - 1].wait(10)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    with ZooKeeperServer() as zk:
        made = Session(tmp_path, zk)
        try:
            yield made
        finally:
            stop_processes(made.jobs)


def test_the_scaling_page_runs_as_written(session: Session) -> None:
    worker_job = 0
    for line in shell_lines(PAGE.read_text()):
        if line.startswith("sudo "):
            continue  # ZooKeeper: the fixture's
        if line.startswith("python examples/sharded_cluster.py"):
            continue  # its own test, below: the two run side by side
        kill = re.fullmatch(r"kill -9 %(\d+)", line)
        if kill:
            session.kill(int(kill.group(1)))
            continue
        argv = session.translate(line.removesuffix("&").strip())
        assert argv[0] == "groupcoord", f"a step this test does not know how to run: {line}"
        if line.endswith("&"):
            session.background(argv)
            worker_job = len(session.jobs) if argv[1] == "worker" else worker_job
        else:
            out = session.foreground(argv)
            if argv[1:3] == ["groups", "list"]:
                assert out.startswith("shop\tStable"), out
    assert len(session.live()) == 3  # four started, one killed
    # the worker kept its member id and generation through the fourth's arrival and the kill: one assignment
    assert worker_job, "the page starts no worker"
    events = [json.loads(line) for line in session.outputs[worker_job - 1].read_text().splitlines()
              if line.startswith("{")]
    assert [e["event"] for e in events] == ["joined", "assigned"], events
    assert session.jobs[worker_job - 1].poll() is None


def test_the_example_script_keeps_every_member_through_a_kill_and_a_fourth_coordinator(session: Session) -> None:
    line = next(line for line in shell_lines(PAGE.read_text()) if line.startswith("python examples/sharded_cluster.py"))
    example = run_within([sys.executable, *session.translate(line)[1:]], 240, cwd=ROOT)
    assert example.returncode == 0, example.stdout[-3000:] + example.stderr[-3000:]
    assert example.stdout.count("12 of 12 member(s) kept member id, generation and tasks") == 3, example.stdout
    assert "REBALANCED" not in example.stdout
