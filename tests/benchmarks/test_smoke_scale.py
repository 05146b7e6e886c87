"""The scale-out benchmark runs end to end at smoke size: ZooKeeper, no-op servers and sharded
coordinators (1 and 2 of each) loaded by h2load on real members formed over the wire, a shard move
and a SIGKILL failover."""

from __future__ import annotations

import os
import shutil
import sys
from types import ModuleType

import grpc
import pytest

from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.deadlines import run_within
from tests.paths import ROOT
from tests.scripts import load_script, refused
from tests.zookeeper_server import require_zookeeper

BENCH = ROOT / "benchmarks" / "scale_bench.py"


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.zookeeper
def test_scale_bench_quick_prints_every_row(cli_env: dict[str, str]) -> None:
    require_zookeeper()
    # h2load is the bench's generator; it installs it when root, else the Python generators stand in
    generator = "h2load" if shutil.which("h2load") or os.geteuid() == 0 else "python"
    done = run_within([sys.executable, str(BENCH), "--quick", "--steps", "100", "--generator", generator], 240,
                      cwd=ROOT, env=cli_env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    rows = [[cell.strip() for cell in line.split("|")[1:3]] for line in lines if line.startswith("| ") and "---" not in line]
    # --quick measures with one budget: half a core per server (a cgroup quota), unbounded where cgroups are not writable
    budget = rows[1][0] if len(rows) > 1 else ""
    assert budget in ("0.5 core", "unbounded"), done.stdout
    assert rows == [["CPU per server", "servers"], [budget, "1 no-op server"], [budget, "2 no-op servers"],
                    [budget, "1 coordinator"], [budget, "2 coordinators"]], done.stdout
    assert "2 coordinator processes >= 1.8x one:" in done.stdout
    if generator == "h2load":
        steps = [line for line in lines if " hb/s asked " in line]
        # a step that misses the p99 on a loaded machine is run twice: one line each
        assert list(dict.fromkeys(tuple(line.split()[0:2]) for line in steps)) == [
            ("noop", "x1"), ("noop", "x2"), ("coordinator", "x1"), ("coordinator", "x2")], done.stdout
        # every answer OK by size, and the real client's heartbeat of each member NONE mid-step
        assert not [line for line in steps if "not OK" in line or "real client" in line], done.stdout
        assert all(float(line.split(" hb/s asked ")[1].split()[0]) > 0 for line in steps), done.stdout
    moves = next(line for line in lines if line.startswith("shard move"))
    assert " 0 moves" not in moves and "p50 nan" not in moves, moves
    failover = next(line for line in lines if line.startswith("failover per shard"))
    assert " 0 shards" not in failover, failover


@pytest.mark.parametrize(("args", "message"), [
    (["--steps", "100,x"], "--steps: '100,x' is not a comma-separated list of positive whole numbers"),
    (["--cap", "0.5,9"], "--cap: each budget must be between 0 and"),
    (["--cap", "half"], "--cap: not a list of core counts: 'half'"),
])
def test_scale_bench_refuses_bad_input_in_one_line(cli_env: dict[str, str], args: list[str], message: str) -> None:
    assert message in refused(BENCH, args, cli_env)


def _h2load_gen(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module: ModuleType = load_script(ROOT / "benchmarks" / "h2load_gen.py", monkeypatch=monkeypatch)
    return module


def test_h2load_step_tells_ok_answers_from_errors(server: ServerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    """h2load cannot read grpc-status: the generator tells OK answers by their size. A real member's
    heartbeats pass; a member the coordinator does not know is answered UNKNOWN_MEMBER_ID and flagged."""
    gen = _h2load_gen(monkeypatch)
    h2load = shutil.which("h2load")  # a unit test installs nothing; the benchmark does, as root
    if h2load is None:
        pytest.skip("h2load not installed (apt-get install nghttp2-client)")
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.GroupCoordinatorStub(channel)
        join = pb.JoinGroupRequest(group_id="g", client_id="c", session_timeout_ms=60_000,
                                   rebalance_timeout_ms=10_000, protocols=["round-robin"])
        member_id = stub.JoinGroup(join, timeout=10).member_id
        join.member_id = member_id
        joined = stub.JoinGroup(join, timeout=10)
        assert joined.error.code == pb.NONE
        synced = stub.SyncGroup(pb.SyncGroupRequest(group_id="g", member_id=member_id, generation=joined.generation,
                                                    protocol_name="round-robin"), timeout=10)
        assert synced.error.code == pb.NONE
        member = pb.HeartbeatRequest(group_id="g", member_id=member_id, generation=joined.generation)
        ok = stub.Heartbeat(member, timeout=10)
        assert ok.error.code == pb.NONE
    ok_bytes = 5 + ok.ByteSize()
    good = gen.run_step(h2load, [gen.Target(server.address, member.SerializeToString(), ok_bytes)],
                        100, 1.5, 0.3)
    assert good.problems == [] and good.answered > 0 and good.not_ok == 0, good
    stranger = pb.HeartbeatRequest(group_id="g", member_id="nobody", generation=joined.generation)
    bad = gen.run_step(h2load, [gen.Target(server.address, stranger.SerializeToString(), ok_bytes)], 100, 1.5, 0.3)
    assert bad.answered > 0 and any("some answers were not OK" in p for p in bad.problems), bad
