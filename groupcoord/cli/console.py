"""``groupcoord console``: its flags, and the process started with them (``groupcoord.console``).

The console's own listener has its own TLS flags (``--console-tls-*``); the coordinator-side flags
are the ones every command takes (``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--token-file``): the
console acts as the operator who started it.
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from groupcoord.cli.common import UsageError, add_client_security, add_coordinator, client_security
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["CONSOLE_EXTRA_HINT", "add_console_flags", "plan_for", "run_console_command"]

CONSOLE_EXTRA_HINT = "pip install 'groupcoord[console]'"
DEFAULT_CONSOLE_LISTEN = "127.0.0.1:9480"


def add_console_flags(console: argparse.ArgumentParser) -> None:
    """The ``console`` subcommand's flags (the command itself, with the global flags, is made by the CLI's parser)."""
    console.add_argument("--listen", default=DEFAULT_CONSOLE_LISTEN,
                         help="HOST:PORT the console serves on (default %(default)s; port 0: any free port)")
    add_coordinator(console)
    add_client_security(console)
    console.add_argument("--access-token-file", metavar="FILE",
                         help="the token browsers must present (one line); default: a random token, printed in "
                              "the console's address")
    console.add_argument("--console-tls-cert", metavar="PEM", help="serve the console over HTTPS with this certificate")
    console.add_argument("--console-tls-key", metavar="PEM", help="the console certificate's private key")
    console.add_argument("--console-client-ca", metavar="PEM",
                         help="require browser client certificates signed by this CA (mTLS; then no token is asked "
                              "unless --access-token-file is given)")
    console.add_argument("--allow-remove-members", action="store_true",
                         help="offer 'remove member' on group pages (a LeaveGroup as this console's principal; "
                              "default: read-only)")


def plan_for(response: pb.DescribeGroupResponse) -> dict[str, Any] | None:
    """What ``groups plan`` proposes for the group as described (None: no assignor known here)."""
    from groupcoord.assignors.base import AssignorError
    from groupcoord.assignors.registry import get_assignor
    from groupcoord.cli.plan import build_plan
    from groupcoord.wire import context_from_describe

    if not response.protocol:
        return None
    try:
        assignor = get_assignor(response.protocol)
    except LookupError:
        return None
    context = context_from_describe(response)
    try:
        assignment = assignor.assign(context)
    except AssignorError as error:
        return {"error": f"assignor {response.protocol} cannot assign the group: {error}"}
    return build_plan(context, assignment, assignor=response.protocol, state=response.state,
                      snapshot_source="coordinator")


def _access_token(path: str | None) -> str | None:
    if not path:
        return None
    from groupcoord.channels import ClientSecurity

    try:
        return ClientSecurity(token_file=path).token()
    except ValueError as error:
        raise UsageError(str(error).replace("--token-file", "--access-token-file")) from None


def run_console_command(args: argparse.Namespace) -> int:
    missing = [name for name in ("aiohttp", "jinja2") if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"the console needs {' and '.join(missing)}: {CONSOLE_EXTRA_HINT}")
    from groupcoord.console.serve import ConsoleOptions, run_console

    if bool(args.console_tls_cert) != bool(args.console_tls_key):
        raise UsageError("--console-tls-cert and --console-tls-key go together")
    if args.console_client_ca and not args.console_tls_cert:
        raise UsageError("--console-client-ca needs --console-tls-cert and --console-tls-key")
    options = ConsoleOptions(
        listen=args.listen, coordinators=args.coordinator, security=client_security(args, args.coordinator),
        access_token=_access_token(args.access_token_file), tls_cert=args.console_tls_cert or "",
        tls_key=args.console_tls_key or "", tls_client_ca=args.console_client_ca or "",
        allow_remove_members=args.allow_remove_members, planner=plan_for)
    try:
        return run_console(options)
    except ValueError as error:
        raise UsageError(str(error)) from None
