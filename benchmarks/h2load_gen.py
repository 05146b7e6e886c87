"""A heartbeat load generator far cheaper per request than the server it loads: ``h2load`` (C, from
Debian's nghttp2-client) speaking gRPC by hand.

Why: a Python gRPC client spends about as much CPU per heartbeat as the Python server answering it,
so on a 2-core machine two server processes could never show twice one (the generators took the
second core). h2load spends a few tens of microseconds per request.

Each request is ``POST /groupcoord.v1.GroupCoordinator/Heartbeat`` with ``content-type:
application/grpc`` and ``te: trailers``, its body the gRPC length-prefixed frame of one serialized
``HeartbeatRequest`` (h2load repeats the same body, so one real member per server). h2load cannot
read ``grpc-status`` (it is in the trailers), so the answers are checked by size instead: every OK
answer is the same frame (``ok_bytes`` long), an error answer carries an error code (longer) and a
failed call is trailers-only (no data). The caller also heartbeats the same member with a real
client during the step.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Step", "Target", "ensure_h2load", "grpc_frame", "run_step"]

PATH = "/groupcoord.v1.GroupCoordinator/Heartbeat"
CLIENTS = 16  # connections per server: the rate is spread over them (h2load's --rps is per client)
# in flight per connection, at most: with 200 the no-op server answered some CANCELLED (trailers-only,
# caught by the size check), with 100 none; 16 x 100 in flight
# hold the rate asked while answers take up to 1,600 / rate seconds (0.2 s at 8,000 a second)
STREAMS = 100


def ensure_h2load() -> str | None:
    """The h2load binary, installed from Debian's nghttp2-client when missing and root; None (with the
    reason printed in one line) when it cannot be had."""
    found = shutil.which("h2load")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("installing h2load (apt-get install -y nghttp2-client) ...", flush=True)
        done = subprocess.run(["apt-get", "install", "-y", "-q", "nghttp2-client"], check=False,
                              capture_output=True, text=True)
        if done.returncode == 0 and shutil.which("h2load"):
            return shutil.which("h2load")
    return None


def grpc_frame(message: bytes) -> bytes:
    """gRPC's length-prefixed message: 1 byte not compressed, 4 bytes big-endian length, the message."""
    return b"\0" + struct.pack(">I", len(message)) + message


@dataclass(frozen=True)
class Target:
    """One server and the serialized HeartbeatRequest of a real member it answers OK."""

    address: str
    request: bytes
    ok_bytes: int  # the OK answer's data on the wire (frame prefix + serialized HeartbeatResponse)


@dataclass
class Step:
    """One step's outcome over every target."""

    rate_asked: float
    rate: float  # answered per second, started in the measured window
    p99_ms: float
    answered: int  # every answer of the run (warm-up included), for CPU per heartbeat
    not_ok: int  # answers with an HTTP status other than 200 (gRPC errors show in the data size: problems)
    generator_cpu_s: float
    problems: list[str]


def _command(h2load: str, target: Target, rate: float, seconds: float, body: Path, log: Path) -> list[str]:
    return [h2load, "-t1", f"-c{CLIENTS}", f"-m{STREAMS}", f"--rps={max(rate / CLIENTS, 0.1):.3f}",
            f"-D{round(seconds * 1000)}ms", f"--log-file={log}", f"-d{body}",
            "-H", "content-type: application/grpc", "-H", "te: trailers",
            f"http://{target.address}{PATH}"]


_DONE = re.compile(r"requests: \d+ total, \d+ started, (\d+) done")
_DATA = re.compile(r"\((\d+)\) data")


def run_step(h2load: str, targets: list[Target], rate: float, seconds: float, warm: float,
             during: float = -1.0, probe: Callable[[], list[str]] | None = None) -> Step:
    """``rate`` heartbeats a second spread evenly over ``targets`` (one h2load process each) for
    ``seconds``; rate and p99 over the requests started after ``warm`` seconds. ``probe`` (a callable
    returning a list of problems) runs once ``during`` seconds in, while the load runs."""
    tmp = Path(tempfile.mkdtemp(prefix="h2load-"))
    procs: list[tuple[subprocess.Popen[str], Path, Target]] = []
    for i, target in enumerate(targets):
        body, log = tmp / f"body{i}", tmp / f"log{i}"
        body.write_bytes(grpc_frame(target.request))
        out = open(tmp / f"out{i}", "w")  # noqa: SIM115 - h2load writes to it until it exits
        procs.append((subprocess.Popen(_command(h2load, target, rate / len(targets), seconds, body, log),
                                       stdout=out, stderr=subprocess.STDOUT, text=True), log, target))
        out.close()
    problems: list[str] = []
    if probe is not None and during >= 0:
        time.sleep(during)
        problems += probe()
    cpu = 0.0
    starts: list[int] = []
    latencies: list[int] = []
    answered = not_ok = 0
    for i, (proc, log, target) in enumerate(procs):
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu += usage.ru_utime + usage.ru_stime
        output = (tmp / f"out{i}").read_text()
        if proc.returncode != 0:
            problems.append(f"h2load to {target.address} exited {proc.returncode}: {output.strip()[-300:]}")
            continue
        done, data = _DONE.search(output), _DATA.search(output)
        if done is None or data is None:
            problems.append(f"h2load to {target.address}: no summary in its output")
            continue
        finished = int(done.group(1))
        answered += finished
        if int(data.group(1)) != finished * target.ok_bytes:
            problems.append(f"{target.address}: {data.group(1)} bytes of data for {finished} answers, "
                            f"not {target.ok_bytes} each: some answers were not OK")
        for line in log.read_text().splitlines():
            start_us, http_status, duration_us = line.split("\t")
            if http_status != "200":
                not_ok += 1
            starts.append(int(start_us))
            latencies.append(int(duration_us))
    shutil.rmtree(tmp, ignore_errors=True)
    if not_ok:
        problems.append(f"{not_ok} answers not OK")
    if not starts:
        return Step(rate, 0.0, float("nan"), answered, not_ok, cpu, problems or ["no answer at all"])
    # the measured window: from ``warm`` after the first request to the end (the last half second left
    # out: what was still in flight when h2load stopped is not in its log)
    first = min(starts)
    window = (first + warm * 1e6, first + (seconds - 0.5) * 1e6)
    kept = sorted(lat for s, lat in zip(starts, latencies, strict=True) if window[0] <= s < window[1])
    span = (window[1] - window[0]) / 1e6
    p99 = kept[max(0, -(-len(kept) * 99 // 100) - 1)] / 1000 if kept else float("nan")
    return Step(rate, len(kept) / span, p99, answered, not_ok, cpu, problems)
