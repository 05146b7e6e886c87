"""What every command of the roof shares: the usage error, argument types, the admin client, the stats extra.

The bottom of ``groupcoord.cli``: the other modules import it, it imports none of them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Any

from groupcoord.addresses import parse_addresses, unresolved_hosts
from groupcoord.admin import AdminClient
from groupcoord.channels import ClientSecurity

__all__ = [
    "COORDINATOR_ENV",
    "DEFAULT_LISTEN",
    "STATS_EXTRA_HINT",
    "UsageError",
    "add_client_security",
    "add_coordinator",
    "add_group",
    "coordinator_addresses",
    "client_security",
    "missing_stats_extra",
    "non_negative_float",
    "open_admin",
    "positive_int",
    "printable",
    "resolve_group",
]

DEFAULT_LISTEN = "127.0.0.1:9400"
COORDINATOR_ENV = "GROUPCOORD_COORDINATOR"
"""Where ``--coordinator`` is read from when the flag is not given (as Kafka's tools read bootstrap servers)."""
STATS_EXTRA_HINT = "pip install 'groupcoord[stats]'"


def printable(value: Any) -> Any:
    """``value`` (a string, or dicts and lists of them) safe for the operator's terminal: control
    characters (ESC, OSC, newlines) written as escapes. A group's ids, racks and reasons come from
    its members and admins, possibly another tenant: never write their bytes to a terminal raw.
    (Tables are printed with markup off, so ``[/x]`` in an id is shown, not interpreted.)"""
    if isinstance(value, str):
        return value if value.isprintable() else value.encode("unicode_escape").decode("ascii")
    if isinstance(value, dict):
        return {key: printable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable(item) for item in value]
    return value


class UsageError(Exception):
    """Bad flags or config: exit status 2."""


def positive_int(text: str) -> int:
    """argparse type: an integer > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (NaN and inf refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def coordinator_addresses(text: str) -> str:
    """argparse type: ``HOST:PORT[,HOST:PORT...]``, each port 1-65535, at least one host that resolves
    (as a Kafka client refuses a bootstrap list with no resolvable address)."""
    try:
        addresses = parse_addresses(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    unresolved = unresolved_hosts(addresses)
    if len(unresolved) == len(addresses):
        raise argparse.ArgumentTypeError("; ".join(f"{address}: {why}" for address, why in unresolved.items()))
    return text


def add_coordinator(parser: argparse.ArgumentParser) -> None:
    """``--coordinator``: one spelling, one help text and one default on every command that talks to one."""
    parser.add_argument("--coordinator", default=os.environ.get(COORDINATOR_ENV) or DEFAULT_LISTEN,
                        type=coordinator_addresses, metavar="HOST:PORT[,...]",
                        help=f"any coordinators of the cluster, a starting point: the others are learnt from them "
                             f"(default: ${COORDINATOR_ENV}, else {DEFAULT_LISTEN})")


def add_group(parser: argparse.ArgumentParser, *, positional: bool) -> None:
    """``--group GROUP`` (Kafka's spelling); ``positional``: the older ``COMMAND GROUP`` still works."""
    parser.add_argument("--group", metavar="GROUP", help="the group (required)")
    if positional:
        parser.add_argument("group_positional", nargs="?", metavar="GROUP_",
                            help="deprecated: the group as a positional; use --group")


def resolve_group(args: argparse.Namespace, rest: list[str] | None = None) -> str:
    """The group of ``--group``, else of the deprecated positional (one line on stderr says so).
    ``rest``: a command whose only positionals are a list (``tasks put``) gives the list: its first
    item is the group when ``--group`` is absent."""
    if args.group:
        return str(args.group)
    positional = getattr(args, "group_positional", None)
    if positional is None and rest:
        positional = rest.pop(0)
    if not positional:
        raise UsageError("name the group: --group GROUP")
    print(f"groupcoord: deprecated: the group as a positional ({positional}); write --group {positional}",
          file=sys.stderr)
    return str(positional)


def add_client_security(parser: argparse.ArgumentParser) -> None:
    """The flags every command that talks to a coordinator takes (``ClientSecurity``)."""
    parser.add_argument("--tls-ca", default="", metavar="PEM",
                        help="CA certificate that signed the coordinator's certificate (turns TLS on)")
    parser.add_argument("--tls-cert", default="", metavar="PEM", help="client certificate, for mTLS (with --tls-key)")
    parser.add_argument("--tls-key", default="", metavar="PEM", help="the client certificate's private key")
    parser.add_argument("--token-file", default="", metavar="FILE",
                        help="file holding a bearer token (one line), for a coordinator started with --token-file")


def client_security(args: argparse.Namespace, addresses: str = "") -> ClientSecurity:
    """The security flags as a ``ClientSecurity``, every file read once now (usage errors: exit 2)."""
    try:
        security = ClientSecurity(tls_ca=getattr(args, "tls_ca", ""), tls_cert=getattr(args, "tls_cert", ""),
                                  tls_key=getattr(args, "tls_key", ""), token_file=getattr(args, "token_file", ""))
        security.check(parse_addresses(addresses) if addresses else ())
    except ValueError as error:
        raise UsageError(str(error)) from None
    return security


def open_admin(address: str, args: argparse.Namespace | None = None) -> AdminClient:
    """An admin client for ``--coordinator`` (with the security flags of ``args``); a malformed address
    or an unreadable certificate or token file is a usage error."""
    try:
        security = client_security(args, address) if args is not None else None
        return AdminClient(address, security=security, retry_unreachable=False)
    except ValueError as error:
        raise UsageError(str(error)) from None


def missing_stats_extra() -> str | None:
    """The first of PySpark and pyarrow (the ``stats`` extra) that is not installed, or None.

    Looks the packages up without importing them, so asking costs nothing.
    """
    for name in ("pyspark", "pyarrow"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # blocked (None in sys.modules) or a broken install
            found = False
        if not found:
            return name
    return None
