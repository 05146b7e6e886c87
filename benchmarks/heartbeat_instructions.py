"""Instructions per heartbeat: the coordinator against the no-op server, counted by callgrind.

    python benchmarks/heartbeat_instructions.py [--quick] [--kinds noop,coordinator] [--counts 1000,5000]

CPU time on a shared VM moves by a tenth or more from one run to the next; instruction counts do
not. Each server kind of ``coordinator_bench`` (no-op, the servicer alone, the whole coordinator;
1,000 members) runs under ``valgrind --tool=callgrind``; a client process sends a warm-up of 1,000
heartbeats (256 in flight over 4 channels) and then ``count`` more; the server is stopped and its
instructions are read. The difference between two counts, divided by the difference in
heartbeats, is what one heartbeat costs, with start-up and shut-down cancelled out. It is split
by where the instructions ran: the Python interpreter (our code, grpc's Cython and asyncio
included), gRPC's C core, protobuf (upb), and the rest (libc, the kernel's vDSO).

Needs valgrind (Debian package ``valgrind``); without it, one line says so and the exit code is 0.
Caches and branch predictors are not modelled (the counts are instructions, not time).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KINDS = ("noop", "servicer", "coordinator")
MEMBERS = 1000
WARM_UP = 1000
IN_FLIGHT = 256
PLACES = (("Python", ("libpython", "Python-3.", "bin/python")), ("gRPC core", ("cygrpc",)), ("protobuf", ("_upb",)))
"""Where an instruction ran, by what its line in ``callgrind_annotate``'s listing names: the object file,
or with debug information the source file (CPython's inlined header functions name only that)."""


def serve(kind: str, port_file: Path) -> None:
    """Run one ``coordinator_bench`` server kind in this process until SIGINT; write its port, the
    group's generation and the member ids to ``port_file``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import coordinator_bench

    class PortFile:
        def put(self, item: tuple[int, list[str], int]) -> None:
            port, ids, generation = item
            partial = port_file.with_suffix(".partial")
            partial.write_text(f"{port} {generation} {','.join(ids)}")
            partial.rename(port_file)

    run = asyncio.run

    def run_until_interrupted(main: Any) -> None:
        async def until_interrupted() -> None:
            task = asyncio.ensure_future(main)
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, task.cancel)
            try:
                await task
            except asyncio.CancelledError:
                pass  # a clean exit, so callgrind writes its counts

        run(until_interrupted())

    # _serve runs its server with asyncio.run, whose own SIGINT handling leaves the no-op server's
    # wait_for_termination running (tried: the process never exits)
    asyncio.run = run_until_interrupted  # type: ignore[assignment]
    coordinator_bench._serve(kind, MEMBERS, PortFile(), "memory")


async def send(port: int, generation: int, ids: list[str], warm_up: int, count: int) -> None:
    """``warm_up`` heartbeats, then ``count``; every answer must be NONE."""
    import grpc

    from groupcoord.v1 import groupcoord_pb2 as pb
    from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(4)]
    stubs = [pb_grpc.GroupCoordinatorStub(c) for c in channels]
    requests = [pb.HeartbeatRequest(group_id="bench", member_id=m, generation=generation) for m in ids]

    async def batch(total: int) -> None:
        left = total

        async def caller(index: int) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                response = await stubs[index % len(stubs)].Heartbeat(requests[(index + left) % len(requests)])
                if response.error.code != pb.NONE:
                    raise RuntimeError(f"heartbeat answered {response.error}")

        await asyncio.gather(*(caller(i) for i in range(IN_FLIGHT)))

    await batch(warm_up)
    await batch(count)
    for channel in channels:
        await channel.close()


def count_instructions(kind: str, count: int, folder: Path, warm_up: int = WARM_UP) -> dict[str, int]:
    """Instructions of one server run with ``count`` counted heartbeats, by place (and "total")."""
    port_file = folder / f"{kind}-{count}.port"
    out = folder / f"{kind}-{count}.callgrind"
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
         "--serve", kind, str(port_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONHASHSEED": "0"})
    try:
        deadline = time.monotonic() + 600
        while not port_file.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {kind} server under valgrind did not start")
            time.sleep(0.2)
        port, generation, ids = port_file.read_text().split(" ")
        asyncio.run(send(int(port), int(generation), ids.split(","), warm_up, count))
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(120)
    return by_place(out)


def by_place(callgrind_out: Path) -> dict[str, int]:
    """Self instructions summed by the object file they ran in (``callgrind_annotate``'s listing)."""
    listing = subprocess.run(["callgrind_annotate", "--threshold=100", str(callgrind_out)], check=True,
                             capture_output=True, text=True).stdout
    totals = {name: 0 for name, _ in PLACES} | {"other": 0, "total": 0}
    for line in listing.splitlines():
        match = re.match(r"\s*([\d,]+)\s+\(.*?\)\s+(.*)", line)
        if match is None:
            continue
        instructions, where = int(match.group(1).replace(",", "")), match.group(2)
        if where.startswith("PROGRAM TOTALS"):
            totals["total"] = instructions
            continue
        place = next((name for name, markers in PLACES if any(m in where for m in markers)), "other")
        totals[place] += instructions
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 and 300 heartbeats after 200 (a smoke run)")
    parser.add_argument("--kinds", default="noop,coordinator", help=f"comma-separated subset of: {', '.join(KINDS)}")
    parser.add_argument("--counts", default="1000,5000", help="two heartbeat counts to take the difference of")
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "PORT_FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve[0], Path(args.serve[1]))
        return 0
    chosen = {k for k in args.kinds.split(",") if k}
    if not chosen or chosen - set(KINDS):
        parser.error(f"--kinds: choose from {', '.join(KINDS)}")
    kinds = [k for k in KINDS if k in chosen]  # the no-op first: the others' ratio is to it
    try:
        low, high = (100, 300) if args.quick else tuple(int(c) for c in args.counts.split(","))
    except ValueError:
        parser.error("--counts: two whole numbers, the smaller first, e.g. 1000,5000")
    if not 0 < low < high:
        parser.error("--counts: two whole numbers, the smaller first, e.g. 1000,5000")
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        print("heartbeat_instructions: valgrind is not installed (apt-get install valgrind): skipped")
        return 0
    print(f"Instructions per heartbeat (callgrind): {MEMBERS} members, {IN_FLIGHT} calls in flight, the difference "
          f"between {high:,} and {low:,} heartbeats; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    columns = [name for name, _ in PLACES] + ["other"]
    print(f"{'server':<14}{'per heartbeat':>15}" + "".join(f"{c:>12}" for c in columns) + f"{'vs no-op':>10}")
    base = None
    with tempfile.TemporaryDirectory(prefix="hb-instructions-") as folder:
        for kind in kinds:
            warm_up = 200 if args.quick else WARM_UP
            first, second = (count_instructions(kind, n, Path(folder), warm_up) for n in (low, high))
            per = {k: (second[k] - first[k]) / (high - low) for k in first}
            base = per["total"] if kind == "noop" else base
            ratio = f"{base / per['total']:>10.2f}" if base else f"{'':>10}"
            print(f"{kind:<14}{per['total']:>15,.0f}" + "".join(f"{per[c]:>12,.0f}" for c in columns) + ratio)
    print("vs no-op: the no-op server's instructions per heartbeat over this server's (1.00: as cheap). "
          "gRPC core's share moves between runs with how often its poller wakes; compare the Python column")
    return 0


if __name__ == "__main__":
    sys.exit(main())
