"""The operators' web console (``groupcoord console``): the cluster, every group, one group, one member, live.

A separate process speaking the admin API like the command line (``groupcoord.admin.AdminClient``),
so it works against one coordinator, an active/standby pair or a sharded cluster. aiohttp serves
pages rendered with Jinja2; a few lines of plain JavaScript poll each page's live part. Needs the
``console`` extra (``pip install 'groupcoord[console]'``). docs/console.md is the user's page.

Floors: ``views`` and ``history`` are pure (answers in, rows out); ``source`` is the cached way to
the coordinators; ``access`` the token; ``app`` the pages; ``serve`` the process.
"""

from __future__ import annotations

__all__ = ["ConsoleOptions", "run_console", "start_console"]


def __getattr__(name: str) -> object:
    # lazy: importing the package must not need aiohttp (the CLI checks for the extra first)
    if name in __all__:
        from groupcoord.console import serve

        return getattr(serve, name)
    raise AttributeError(name)
