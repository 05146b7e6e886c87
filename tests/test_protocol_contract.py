"""The wire contract: committed stubs match proto/, and the error registry matches the enum."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from groupcoord import errors
from groupcoord.v1 import groupcoord_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ["groupcoord_pb2.py", "groupcoord_pb2.pyi", "groupcoord_pb2_grpc.py"]


def test_committed_stubs_are_fresh(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the 'dev' extra) regenerates the stubs")
    result = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'proto'}", f"--python_out={tmp_path}",
         f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", "groupcoord/v1/groupcoord.proto"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    for name in GENERATED:
        fresh = (tmp_path / "groupcoord" / "v1" / name).read_text()
        committed = (ROOT / "groupcoord" / "v1" / name).read_text()
        assert fresh == committed, f"groupcoord/v1/{name} is stale: run `make proto` and commit"


def test_error_registry_mirrors_the_enum() -> None:
    wire = {v.name: v.number for v in pb.ErrorCode.DESCRIPTOR.values}
    assert {c.name: int(c) for c in errors.ErrorCode} == wire
    for code in errors.ErrorCode:
        if code is errors.ErrorCode.NONE:
            continue
        exc = errors.error_for(pb.Error(code=int(code), message="why"))
        assert exc is not None and exc.code is code and "why" in str(exc)
    assert errors.error_for(pb.Error()) is None


def test_retriable_errors_are_the_ones_a_worker_acts_on() -> None:
    for code in ("REBALANCE_IN_PROGRESS", "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "NOT_COORDINATOR",
                 "COORDINATOR_NOT_AVAILABLE"):
        assert errors.error_for(pb.Error(code=pb.ErrorCode.Value(code))).retriable  # type: ignore[union-attr]
    for code in ("INVALID_SESSION_TIMEOUT", "INCONSISTENT_GROUP_PROTOCOL", "GROUP_MAX_SIZE_REACHED"):
        assert not errors.error_for(pb.Error(code=pb.ErrorCode.Value(code))).retriable  # type: ignore[union-attr]
