"""A Spark standalone cluster on loopback, started from the pip-installed PySpark (no download).

pip's PySpark has no ``sbin/start-master.sh``, but its ``bin/spark-class`` runs any Spark main
class: the master (``org.apache.spark.deploy.master.Master``) and the workers
(``org.apache.spark.deploy.worker.Worker``) are each a JVM of their own, as on a real cluster.
Each worker gets its own work directory (where its executors' logs land: proof they ran there).
:meth:`StandaloneCluster.stop` ends every JVM it started (the process group of each).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from tests.deadlines import Deadline
from tests.zookeeper_server import free_port

__all__ = ["StandaloneCluster", "spark_env", "spark_home"]

#: Small daemons that start fast: the master and the workers only schedule, they hold no data.
_DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_home() -> Path:
    """The installed PySpark's directory: its ``jars/`` and ``bin/spark-class``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_env() -> dict[str, str]:
    """The environment for spark-class and spark-submit: this interpreter for Python, loopback only."""
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": _DAEMON_JAVA_OPTS,
    }
    env.pop("PYSPARK_GATEWAY_PORT", None)  # a child must start its own JVM, not reuse the test process's
    env.pop("PYSPARK_GATEWAY_SECRET", None)
    return env


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` and ``memory`` each), logs under ``root``."""

    root: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    master_port: int = field(default_factory=free_port)
    webui_port: int = field(default_factory=free_port)
    _procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def worker_dir(self, i: int) -> Path:
        return self.root / f"worker-{i}"

    def start(self, timeout_s: float = 60.0) -> Self:
        """Start the master, then the workers; return once the master lists them all ALIVE."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.master_port), "--webui-port", str(self.webui_port))
        for i in range(self.workers):
            self.worker_dir(i).mkdir(parents=True, exist_ok=True)
            self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                        "--host", "127.0.0.1", "--webui-port", str(free_port()), "--cores", str(self.cores),
                        "--memory", self.memory, "--work-dir", str(self.worker_dir(i)))
        deadline = Deadline(timeout_s)  # three JVMs starting: slower the more the machine is shared
        while True:
            self._check_alive()
            try:
                alive = [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]
            except OSError:
                alive = []
            if len(alive) == self.workers:
                return self
            if deadline.passed():
                raise TimeoutError(f"{len(alive)} of {self.workers} workers registered in {deadline.elapsed():.0f} s:\n"
                                   + self.logs_tail())
            time.sleep(0.3)

    def state(self) -> dict[str, Any]:
        """The master's JSON status page: workers, active and completed applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=5) as response:
            data: dict[str, Any] = json.load(response)
        return data

    def executor_dirs(self, app_id: str) -> list[Path]:
        """Per worker, the directories of ``app_id``'s executors it ran (``WORK/<app>/<executor id>``)."""
        return sorted(p for i in range(self.workers) for p in (self.worker_dir(i) / app_id).glob("*") if p.is_dir())

    def _spawn(self, name: str, main_class: str, *args: str) -> None:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - kept open for the process's life
        proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), main_class, *args], env=spark_env(),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root)
        log.close()
        self._procs.append((name, proc))

    def _check_alive(self) -> None:
        for name, proc in self._procs:
            if proc.poll() is not None:
                raise RuntimeError(f"spark {name} exited with {proc.returncode}:\n{self.logs_tail()}")

    def logs_tail(self, chars: int = 2000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in sorted(self.root.glob("*.log")))

    def stop(self) -> None:
        """SIGTERM every JVM's process group (workers first), then SIGKILL what is left after 10 s."""
        for _name, proc in reversed(self._procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for _name, proc in reversed(self._procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._procs.clear()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
