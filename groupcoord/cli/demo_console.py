"""The web console beside the demo: its address printed while the demo runs, kept open with ``--console``.

Left out, with one line saying why, when the ``console`` extra (aiohttp, Jinja2) is not installed.
"""

from __future__ import annotations

import importlib.util
import signal
import threading
from contextlib import ExitStack
from types import FrameType

from groupcoord.cli.console import CONSOLE_EXTRA_HINT, plan_for
from groupcoord.cli.narrate import say

__all__ = ["keep_open", "open_console"]


def open_console(stack: ExitStack, coordinator: str) -> str | None:
    """A console on a free loopback port for the demo's coordinator, closed with ``stack``; its address."""
    missing = [name for name in ("aiohttp", "jinja2") if importlib.util.find_spec(name) is None]
    if missing:
        say(f"no web console: {' and '.join(missing)} not installed; {CONSOLE_EXTRA_HINT}")
        return None
    from groupcoord.console.serve import BackgroundConsole, ConsoleOptions

    console = stack.enter_context(BackgroundConsole(ConsoleOptions(
        listen="127.0.0.1:0", coordinators=coordinator, planner=plan_for)))
    say(f"web console on {console.url} : open it to watch the groups live")
    return console.url


def keep_open(url: str | None) -> None:
    """Wait for Ctrl-C or SIGTERM with the console (and the coordinator behind it) still serving."""
    if url is None:
        return
    say(f"the demo is done; the console stays open (Ctrl-C to end): {url}")
    done = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
