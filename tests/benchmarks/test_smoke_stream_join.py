"""stream_join_bench runs at a small size: over its three in-process streams, each round really rebalances the
group (the generation moves on, every member told and synced: the script checks each answer), and bad arguments
get one line and exit 2."""

from __future__ import annotations

import asyncio

from tests.paths import ROOT
from tests.scripts import load_script, refused

BENCH = ROOT / "benchmarks" / "stream_join_bench.py"


def test_a_small_group_rebalances_over_the_streams_once_per_round() -> None:
    bench = load_script(BENCH)

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
        stderr = refused(BENCH, args, cli_env)
        assert "stream_join_bench.py: error:" in stderr.strip().splitlines()[-1], stderr
