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
        capture_output=True, text=True, cwd=ROOT, check=False,
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


def test_every_error_class_is_written_out_under_one_root() -> None:
    """Each code of the .proto has its own class, declared in errors.py (visible to type checkers)."""
    for code in errors.ErrorCode:
        if code is errors.ErrorCode.NONE:
            assert code not in errors.ERRORS_BY_CODE
            continue
        cls = errors.ERRORS_BY_CODE[code]
        assert cls.code is code and issubclass(cls, errors.GroupCoordError)
        assert cls.__module__ == "groupcoord.errors" and getattr(errors, cls.__name__) is cls
        assert cls.__name__ in errors.__all__
    assert len(set(errors.ERRORS_BY_CODE.values())) == len(errors.ErrorCode) - 1


def test_an_unknown_code_falls_back_to_the_root_error() -> None:
    """A newer coordinator's code: the root class with the number and message, not a ValueError."""
    exc = errors.error_for(pb.Error(code=9999, message="from the future", coordinator_hint="h:1"), member_id="m")
    assert type(exc) is errors.GroupCoordError
    assert exc.code == 9999 and exc.message == "from the future"
    assert exc.coordinator_hint == "h:1" and exc.member_id == "m" and not exc.retriable
    assert str(exc) == "ERROR_9999: from the future"
    with pytest.raises(errors.GroupCoordError) as raised:
        errors.raise_for(pb.Error(code=9999))
    assert type(raised.value) is errors.GroupCoordError and raised.value.code == 9999
    assert str(raised.value) == "ERROR_9999: ERROR_9999"


@pytest.mark.parametrize(
    ("code", "cls", "family"),
    [
        (pb.REBALANCE_IN_PROGRESS, errors.RebalanceInProgressError, errors.RebalanceNeeded),
        (pb.ILLEGAL_GENERATION, errors.IllegalGenerationError, errors.ResetNeeded),
        (pb.NOT_COORDINATOR, errors.NotCoordinatorError, errors.CoordinatorMovedError),
        (pb.COORDINATOR_LOAD_IN_PROGRESS, errors.CoordinatorLoadInProgressError, errors.CoordinatorMovedError),
        (pb.GROUP_ID_NOT_FOUND, errors.GroupIdNotFoundError, errors.RequestError),
        (pb.MEMBER_ID_REQUIRED, errors.MemberIdRequiredError, errors.GroupCoordError),
    ],
)
def test_raise_for_raises_the_specific_class(code: int, cls: type[errors.GroupCoordError],
                                             family: type[errors.GroupCoordError]) -> None:
    with pytest.raises(cls) as raised:
        errors.raise_for(pb.Error(code=code, message="why", coordinator_hint="h:2"), member_id="m-1")
    assert type(raised.value) is cls and isinstance(raised.value, family)
    assert raised.value.code == code and raised.value.message == "why"
    assert raised.value.coordinator_hint == "h:2" and raised.value.member_id == "m-1"
    errors.raise_for(pb.Error())  # NONE raises nothing
