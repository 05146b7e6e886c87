"""The console's pages: the cluster, every group, one group, one member; server-rendered, live.

Each page is rendered whole once; its live part is rendered again by the same template when the
page's script asks for it (``?fragment=1``, every second), and swapped in. The server keeps
nothing per open page, so an open page costs no memory between two polls; each answer is bounded
by paging (groups ``page_size`` at a time, members ``member_page_size``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web

from groupcoord import errors
from groupcoord.console import views
from groupcoord.console.access import access_middleware
from groupcoord.console.source import ClusterSource

__all__ = ["ConsoleSettings", "make_app"]

HERE = Path(__file__).parent
SOURCE: web.AppKey[ClusterSource] = web.AppKey("source", ClusterSource)
SETTINGS: web.AppKey[ConsoleSettings] = web.AppKey("settings", object)  # type: ignore[arg-type]
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)


@dataclass(frozen=True, kw_only=True)
class ConsoleSettings:
    access_token: str | None
    """The token browsers must present; None only when the listener requires client certificates."""
    allow_remove_members: bool = False
    secure_cookie: bool = False
    page_size: int = 50
    member_page_size: int = 1_000
    poll_ms: int = 1_000


def _clock(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(seconds))


def templates() -> jinja2.Environment:
    """Autoescaped HTML; every printed value passes ``views.visible`` first (control bytes as escapes)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             finalize=views.visible, undefined=jinja2.StrictUndefined, auto_reload=False)
    env.filters["q"] = lambda value: quote(str(value), safe="")
    env.filters["clock"] = _clock
    env.filters["pct"] = lambda share: f"{100 * share:.0f}%"
    for name in env.list_templates():  # compiled now (a quarter of a second), not on a user's first page
        env.get_template(name)
    return env


def _render(request: web.Request, template: str, **context: Any) -> web.Response:
    """The page, or only its live part when the page's script polls (``fragment=1``)."""
    settings = request.app[SETTINGS]
    name = f"_{template}.html" if request.query.get("fragment") == "1" else f"{template}.html"
    html = request.app[TEMPLATES].get_template(name).render(settings=settings, query=request.query, **context)
    return web.Response(text=html, content_type="text/html")


def _number(request: web.Request, name: str) -> int:
    try:
        return max(1, int(request.query.get(name, "1")))
    except ValueError:
        return 1


async def cluster_page(request: web.Request) -> web.Response:
    try:
        cluster = views.cluster_view(await request.app[SOURCE].cluster())
        problem = ""
    except errors.GroupCoordError as error:
        cluster, problem = None, str(error)
    return _render(request, "cluster", cluster=cluster, problem=problem)


async def groups_page(request: web.Request) -> web.Response:
    source, settings = request.app[SOURCE], request.app[SETTINGS]
    needle = request.query.get("q", "")
    try:
        listing = await source.listing()
    except errors.GroupCoordError as error:
        return _render(request, "groups", page=None, needle=needle, problem=str(error), failed=[])
    matching = [g for g in listing.groups if needle.casefold() in g.group_id.casefold()]
    page = views.page_of(matching, _number(request, "page"), settings.page_size)
    rows = []
    for listed in page.items:
        try:
            described = await source.describe_listed(listed)
        except errors.GroupCoordError:
            described = None
        rows.append(views.group_row(listed, described, source.history.last(listed.group_id)))
    page = views.Page(rows, page.number, page.pages, page.total, page.first)
    return _render(request, "groups", page=page, needle=needle, problem="", failed=sorted(listing.failed.items()),
                   all_groups=len(listing.groups))


async def group_page(request: web.Request) -> web.Response:
    source, settings = request.app[SOURCE], request.app[SETTINGS]
    group_id = request.query.get("id", "")
    try:
        response = await source.describe(group_id, with_task_stats=True)
    except errors.GroupCoordError as error:
        return _render(request, "group", group=None, group_id=group_id, problem=str(error), notice="")
    plan = None
    if response.load_snapshot.snapshot_id:
        try:
            plan = await source.plan(response)
        except errors.GroupCoordError as error:
            plan = {"error": str(error)}
    group = views.group_view(response, source.history.entries(group_id), plan, time.time() * 1000)
    members = views.page_of(group["members"], _number(request, "page"), settings.member_page_size)
    return _render(request, "group", group=group, group_id=group_id, members=members, problem="",
                   notice=request.query.get("notice", ""))


async def member_page(request: web.Request) -> web.Response:
    group_id, member_id = request.query.get("group", ""), request.query.get("id", "")
    try:
        response = await request.app[SOURCE].describe(group_id, with_task_stats=True)
    except errors.GroupCoordError as error:
        return _render(request, "member", member=None, group_id=group_id, member_id=member_id, problem=str(error))
    member = views.member_view(response, member_id)
    problem = "" if member is not None else "not a member of the group now (it left, expired or was removed)"
    return _render(request, "member", member=member, group_id=group_id, member_id=member_id, problem=problem)


async def remove_member(request: web.Request) -> web.Response:
    """POST from the group page (only with ``--allow-remove-members``): one LeaveGroup, as the console's
    own principal; the answer goes back to the group page as a notice."""
    settings = request.app[SETTINGS]
    if not settings.allow_remove_members:
        raise web.HTTPForbidden(text="this console is read-only (start it with --allow-remove-members)")
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        raise web.HTTPForbidden(text="a form from another site")
    form = await request.post()
    group_id, member_id = str(form.get("group", "")), str(form.get("member_id", ""))
    try:
        answers = await request.app[SOURCE].remove_members(group_id, [member_id])
        refused = [a for a in answers if a.error.code != 0]
        notice = f"removed {member_id}" if not refused else f"not removed: {refused[0].error.message}"
    except errors.GroupCoordError as error:
        notice = f"not removed: {error}"
    location = f"/group?id={quote(group_id, safe='')}&notice={quote(notice, safe='')}"
    return web.Response(status=303, headers={"Location": location})


def make_app(source: ClusterSource, settings: ConsoleSettings) -> web.Application:
    app = web.Application(middlewares=[access_middleware(settings.access_token, secure_cookie=settings.secure_cookie)],
                          client_max_size=64 * 1024)
    app[SOURCE] = source
    app[SETTINGS] = settings
    app[TEMPLATES] = templates()
    app.router.add_get("/", cluster_page)
    app.router.add_get("/groups", groups_page)
    app.router.add_get("/group", group_page)
    app.router.add_get("/member", member_page)
    app.router.add_post("/group/remove-members", remove_member)
    app.router.add_static("/static", HERE / "static")
    return app
