"""model_join_bench runs at a small size: its rounds really rebalance the group (the generation moves
on, every member synced: the script asserts each answer), and bad arguments get one line and exit 2."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from typing import Any

from tests.paths import ROOT

BENCH = ROOT / "benchmarks" / "model_join_bench.py"


def test_a_small_group_rebalances_once_per_round() -> None:
    spec = importlib.util.spec_from_file_location("model_join_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    runner = bench.Runner()
    members = bench.form(runner, 30)
    group = runner.model.groups[bench.GROUP]
    generation = group.generation
    spent = [runner.one_joins(members) for _ in range(3)]
    assert group.generation == generation + 3 and len(members) == 33 == len(group.members)
    assert group.state.value == "Stable" and all(seconds >= 0 for seconds in spent)


def test_bad_sizes_get_one_line(cli_env: dict[str, str]) -> None:
    for args in (["--sizes", "1000,x"], ["--sizes", "1"], ["--rounds", "0"]):
        done = subprocess.run([sys.executable, str(BENCH), *args], check=False, cwd=ROOT, capture_output=True,
                              text=True, timeout=60, env=cli_env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "model_join_bench.py: error:" in done.stderr.strip().splitlines()[-1], done.stderr
