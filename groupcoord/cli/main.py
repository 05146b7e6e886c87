"""The ``groupcoord`` command: run the coordinator, a demo worker, admin and stats commands.

Every failure is one readable line on stderr and a non-zero exit status
(1: the coordinator refused or could not be reached; 2: bad command line or
config); tracebacks go to the log only with ``--log-level debug``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from groupcoord import errors
from groupcoord.cli.cluster import run_cluster
from groupcoord.cli.common import (
    UsageError,
)
from groupcoord.cli.groups import run_groups, run_tasks
from groupcoord.cli.logs import EventRateLimit, TextFormatter, use_log_format
from groupcoord.cli.parser import GROUP_STORY, _parser
from groupcoord.cli.stats import run_stats

__all__ = ["main"]

log = logging.getLogger("groupcoord.cli")


def _run_serve(args: argparse.Namespace) -> int:
    # lazy: the coordinator's process layer (its runtime, kazoo, SQLite) is a second of imports on a busy
    # machine that every admin command would pay
    from groupcoord.coordinator.process.options import ServeOptions
    from groupcoord.coordinator.process.print_config import render_options
    from groupcoord.coordinator.process.serve import run_coordinator

    try:
        options = ServeOptions.from_args(args)
        if args.print_config:
            print(render_options(options, args.print_config), end="")
            return 0
        use_log_format(options.log_format)
        return run_coordinator(options)
    except ValueError as error:  # bad config, unusable data dir or store file, port in use
        raise UsageError(str(error)) from None


def _run_worker(args: argparse.Namespace) -> int:
    from groupcoord.cli.console_worker import run_worker  # lazy: the worker client (psutil, asyncio parts)

    return run_worker(args)


def _run_console(args: argparse.Namespace) -> int:
    from groupcoord.cli.console import run_console_command  # lazy: the web stack only for this command

    return run_console_command(args)


def _run_demo(args: argparse.Namespace) -> int:
    # lazy: the demo loads loadstats' sample log and runs the Spark job (pyarrow, pyspark: the stats extra);
    # every other command must work without them
    from groupcoord.cli.demo import run_demo

    return run_demo(workers=args.workers, tasks=args.tasks, data_dir=args.data_dir, with_stats=not args.skip_stats,
                    plot=args.plot, console=args.console)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _run_serve, "worker": _run_worker, "groups": run_groups, "tasks": run_tasks, "stats": run_stats,
    "demo": _run_demo, "cluster": run_cluster, "console": _run_console,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``groupcoord`` command; returns its exit status (0, 1 refused/unreachable, 2 usage)."""
    parser = _parser()
    args = parser.parse_args(argv)
    level = args.log_level or "warning"
    story_by_default = args.command == "serve" and args.log_level is None  # the groups' story, one line per event
    for story in GROUP_STORY:
        logging.getLogger(story).setLevel(logging.INFO if story_by_default else logging.NOTSET)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter())
    handler.addFilter(EventRateLimit())
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler])
    use_log_format(args.log_format or "text")
    if level != "debug":
        for noisy in ("transitions", "kazoo"):  # their retries and state changes: our own lines say what matters
            logging.getLogger(noisy).setLevel(logging.ERROR if noisy == "kazoo" else logging.WARNING)
    name = " ".join(["groupcoord", args.command, *(getattr(args, f"{args.command}_command", None) or "",)]).strip()
    try:
        return _COMMANDS[args.command](args)
    except UsageError as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 2
    except errors.GroupCoordError as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # the last line of defence: one line, details in the debug log
        log.debug("unexpected failure", exc_info=True)
        print(f"{name}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1

