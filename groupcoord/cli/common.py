"""What every command of the roof shares: the usage error, argument types, the admin client, the stats extra.

The bottom of ``groupcoord.cli``: the other modules import it, it imports none of them.
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from groupcoord.addresses import parse_addresses
from groupcoord.admin import AdminClient
from groupcoord.channels import ClientSecurity

__all__ = [
    "DEFAULT_LISTEN",
    "STATS_EXTRA_HINT",
    "UsageError",
    "add_client_security",
    "client_security",
    "missing_stats_extra",
    "non_negative_float",
    "open_admin",
    "positive_int",
    "printable",
]

DEFAULT_LISTEN = "127.0.0.1:9400"
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
        return AdminClient(address, security=security)
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
