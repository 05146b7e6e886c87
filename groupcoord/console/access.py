"""Who may open the console: a bearer token (header, cookie or a one-time ``?token=`` link), or mTLS.

Every answer also carries headers that keep a page from running anything the console did not
ship: a Content-Security-Policy allowing only the console's own script and stylesheet (so even
markup that slipped through escaping would not run), no framing, no sniffing, no referrer.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

__all__ = ["COOKIE", "SECURITY_HEADERS", "access_middleware"]

COOKIE = "groupcoord_console"

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

_UNAUTHORIZED = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>groupcoord console: token needed</title>
<link rel="stylesheet" href="/static/console.css"></head>
<body><main><h1>Token needed</h1>
<p>This console asks for its access token: open the address <code>groupcoord console</code> printed
(it ends in <code>?token=&hellip;</code>), or paste the token here.</p>
<form method="get" action="/"><input type="password" name="token" autocomplete="off" aria-label="token">
<button type="submit">Open</button></form></main></body></html>
"""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _presented(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.cookies.get(COOKIE, "")


def _same(given: str, expected: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def access_middleware(token: str | None, *, secure_cookie: bool) -> Middleware:
    """``token`` None: no token asked (the listener requires client certificates instead)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        response: web.StreamResponse
        if token is None or _same(_presented(request), token):
            response = await handler(request)
        elif _same(request.query.get("token", ""), token):
            # a one-time link: keep the token in an HttpOnly cookie, and take it out of the address bar
            query = {k: v for k, v in request.query.items() if k != "token"}
            response = web.Response(status=302, headers={"Location": str(request.rel_url.with_query(query))})
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", secure=secure_cookie)
        else:
            response = web.Response(status=401, text=_UNAUTHORIZED, content_type="text/html",
                                    headers={"WWW-Authenticate": 'Bearer realm="groupcoord console"'})
            if request.path == "/static/console.css":  # the 401 page's own stylesheet
                response = await handler(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    return check
