"""Reading the token and ACL files into a ``Policy`` (the I/O edge of ``coordinator.auth``).

Called at start-up (a bad file stops the coordinator with one line) and on SIGHUP (a bad file is
logged and the policy in force stays: a typo must not lock every worker out).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from groupcoord.channels import unsafe_file
from groupcoord.coordinator.auth.acl import AclError, Acls, parse_acls
from groupcoord.coordinator.auth.guard import Policy
from groupcoord.coordinator.auth.tokens import TokenFileError, TokenTable, parse_tokens

__all__ = ["PolicyFileError", "load_policy"]


class PolicyFileError(ValueError):
    """A token or ACL file that cannot be read or does not parse (one line, never file contents)."""


def load_policy(*, mtls: bool, token_file: Path | None, acl_file: Path | None) -> Policy:
    return Policy(mtls=mtls, tokens=_tokens(token_file), acls=_acls(acl_file))


def _tokens(path: Path | None) -> TokenTable | None:
    return None if path is None else load_tokens(path)


def load_tokens(path: Path, *, what: str = "token file") -> TokenTable:
    """A token file (``NAME sha256:HEX`` lines), refused if others may read or change it."""
    _refuse_unsafe(path, what, secret=True)
    try:
        return parse_tokens(path.read_text(encoding="utf-8"), source=f"{what} {path}")
    except OSError as error:
        raise PolicyFileError(f"cannot read {what} {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise PolicyFileError(f"{what} {path} is not UTF-8 text") from None
    except TokenFileError as error:
        raise PolicyFileError(str(error)) from None


def _refuse_unsafe(path: Path, what: str, *, secret: bool) -> None:
    problem = unsafe_file(path, what, secret=secret)
    if problem is not None:
        raise PolicyFileError(problem)


def _acls(path: Path | None) -> Acls | None:
    if path is None:
        return None
    _refuse_unsafe(path, "ACL file", secret=False)  # not secret, but whoever can change it grants access
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except OSError as error:
        raise PolicyFileError(f"cannot read ACL file {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise PolicyFileError(f"ACL file {path} is not valid TOML: {error}") from None
    try:
        return parse_acls(document, source=f"ACL file {path}")
    except AclError as error:
        raise PolicyFileError(str(error)) from None
