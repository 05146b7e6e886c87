"""model_join_bench runs at a small size: its rounds really rebalance the group (the generation moves
on, every member synced: the script asserts each answer), and bad arguments get one line and exit 2."""

from __future__ import annotations

from tests.paths import ROOT
from tests.scripts import load_script, refused

BENCH = ROOT / "benchmarks" / "model_join_bench.py"


def test_a_small_group_rebalances_once_per_round() -> None:
    bench = load_script(BENCH)
    runner = bench.Runner()
    members = bench.form(runner, 30)
    group = runner.model.groups[bench.GROUP]
    generation = group.generation
    spent = [runner.one_joins(members) for _ in range(3)]
    assert group.generation == generation + 3 and len(members) == 33 == len(group.members)
    assert group.state.value == "Stable" and all(seconds >= 0 for seconds in spent)


def test_bad_sizes_get_one_line(cli_env: dict[str, str]) -> None:
    for args in (["--sizes", "1000,x"], ["--sizes", "1"], ["--rounds", "0"]):
        stderr = refused(BENCH, args, cli_env)
        assert "model_join_bench.py: error:" in stderr.strip().splitlines()[-1], stderr
