"""stream_join_bench runs at a small size: over its three in-process streams, each round really rebalances the
group (the generation moves on, every member told and synced: the script checks each answer), and bad arguments
get one line and exit 2."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from typing import Any

from tests.paths import ROOT

BENCH = ROOT / "benchmarks" / "stream_join_bench.py"


def load_bench() -> Any:
    spec = importlib.util.spec_from_file_location("stream_join_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_a_small_group_rebalances_over_the_streams_once_per_round() -> None:
    bench = load_bench()

    async def rounds() -> tuple[int, list[tuple[float, int]], str, int]:
        coordinator = bench.Coordinator()
        try:
            await coordinator.form(30)
            generation = coordinator.group.generation
            done = [await coordinator.one_joins() for _ in range(3)]
            return coordinator.group.generation - generation, done, coordinator.group.state.value, sum(
                stream.in_flight for stream in coordinator.streams)
        finally:
            coordinator.close()

    moved, done, state, in_flight = asyncio.run(rounds())
    assert moved == 3 and [members for _, members in done] == [31, 32, 33]
    assert state == "Stable" and in_flight == 0 and all(seconds > 0 for seconds, _ in done)


def test_bad_sizes_get_one_line(cli_env: dict[str, str]) -> None:
    for args in (["--sizes", "1000,x"], ["--sizes", "1"], ["--rounds", "0"]):
        done = subprocess.run([sys.executable, str(BENCH), *args], check=False, cwd=ROOT, capture_output=True,
                              text=True, timeout=60, env=cli_env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "stream_join_bench.py: error:" in done.stderr.strip().splitlines()[-1], done.stderr
