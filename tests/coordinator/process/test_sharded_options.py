"""``groupcoord serve`` options of sharded mode: what turns it on, and bad input as one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupcoord.cli import main


def test_shards_implies_sharded_and_print_config_shows_both(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--store", "zookeeper", "--zk", "127.0.0.1:1", "--shards", "16", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "sharded = true" in out and "shards = 16" in out
    assert main(["serve", "--store", "zookeeper", "--zk", "127.0.0.1:1", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "sharded = false" in out  # active/standby stays the default with ZooKeeper


@pytest.mark.parametrize(("args", "config", "text"), [
    (["--sharded"], "", "a sharded cluster keeps its groups in ZooKeeper: add --store zookeeper"),
    (["--store", "memory", "--shards", "8"], "", "a sharded cluster keeps its groups in ZooKeeper"),
    (["--store", "zookeeper", "--zk", "x:1"], "shards = 5000\n", "shards must be a whole number from 1 to 1024"),
    (["--store", "zookeeper", "--zk", "x:1"], 'shards = "many"\n', "shards must be a whole number"),
    (["--store", "zookeeper", "--zk", "x:1"], 'sharded = "yes"\n', "sharded must be true or false"),
    (["--store", "zookeeper", "--zk", "x:1", "--zk-session-timeout-s", "0"], "", "zk_session_timeout_s must be > 0"),
])
def test_bad_sharding_options_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                           config: str, text: str) -> None:
    extra = []
    if config:
        path = tmp_path / "groupcoord.toml"
        path.write_text("[server]\n" + config)
        extra = ["--config", str(path)]
    assert main(["serve", *args, *extra, "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert text in err and err.count("\n") == 1, err
