"""The roof: the ``groupcoord`` command, the demo and the stats command. Nothing imports it but tests.

When this interpreter is ``groupcoord serve`` (the console script, or ``python -m groupcoord.cli``,
during whose package import ``sys.argv[0]`` is ``"-m"``), the stderr relay starts here, before
anything imports gRPC: gRPC reads ``GRPC_TRACE`` once, on import, and the handshaker trace is where
a failed TLS handshake names its client (``coordinator.process.stderr_relay``).
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def _command(args: Sequence[str]) -> str | None:
    """The command word: the first argument that is not a top-level option (``--log-level X``)."""
    rest = iter(args)
    for arg in rest:
        if arg in ("--log-level", "--log-format"):
            next(rest, None)
        elif not arg.startswith("-"):
            return arg
    return None


def _launched_command() -> str | None:
    """The command word when this interpreter was started as the ``groupcoord`` command."""
    if sys.argv and (sys.argv[0] == "-m" or Path(sys.argv[0]).name == "groupcoord"):
        return _command(sys.argv[1:])
    return None


if _launched_command() == "serve" and "grpc" not in sys.modules:  # once gRPC is loaded, its trace is fixed
    from groupcoord.coordinator.process.stderr_relay import start_relay

    atexit.register(start_relay(os.environ).stop)
elif _launched_command() is not None:
    # a client command: gRPC's own INFO lines (a failed TLS handshake, twice) would come before our one line
    # that says the same; GRPC_VERBOSITY=info in the environment still shows them
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from groupcoord.cli.main import main  # after the relay, which must come before gRPC

__all__ = ["main"]
