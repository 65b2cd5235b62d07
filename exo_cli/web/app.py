"""The Starlette application of ``exo ui``: routes that call the registry, behind ``auth``'s checks.

Every read and every action is ``registry.invoke`` with the caller's ``Env`` (the human who ran
``exo ui``), so the page has the same refusals as the commands; an ``ExoError`` becomes its error
object (``to_dict``) with an HTTP status of its class. No route holds logic an operation could:
the arguments of an action are checked for their JSON types here and by the operation itself.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from exo_cli.errors import ExoError, InvalidInput
from exo_cli.registry import invoke
from exo_cli.web import auth as rules
from exo_cli.web.live import Hub
from exo_cli.web.views import patch_lines, pygments_css, to_json

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = [(b"content-security-policy", CSP.encode()), (b"referrer-policy", b"no-referrer"),
           (b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
           (b"cross-origin-opener-policy", b"same-origin"), (b"cross-origin-resource-policy", b"same-origin"),
           (b"cache-control", b"no-store")]
HTTP = {2: 400, 3: 404, 4: 400, 5: 409, 6: 502, 7: 503}  # an ExoError's exit code -> the HTTP status
ASSETS = {"app.js": "text/javascript", "app.css": "text/css", "highlight.css": "text/css"}

# The actions: the page's name -> (the operation, its arguments and their JSON types). The
# operation checks the values; this table only keeps a request from passing anything else.
ACTIONS: dict[str, tuple[str, dict[str, type]]] = {  # a list is a list of strings
    "answer": ("answer", {"agent": str, "message": str}),
    "send": ("send", {"to": list, "message": str}),
    "merge": ("pr_merge", {"number": int}),
    "kill": ("kill", {"agent": str}),
    "complete": ("complete", {"target": str}),
}


class Guard:
    """Refuse a foreign Host header; add the security headers to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def headed(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        if not rules.local_host(Headers(scope=scope).get("host")):
            await PlainTextResponse("Refused: this server answers only to 127.0.0.1 or localhost.\n",
                                    status_code=421)(scope, receive, headed)
            return
        await self.app(scope, receive, headed)


def asset(name: str) -> str:
    return resources.files("exo_cli.web").joinpath("static", name).read_text(encoding="utf-8")


def failure(exc: ExoError) -> JSONResponse:
    return JSONResponse(exc.to_dict(), status_code=HTTP.get(exc.exit_code, 500))


def build(env: Any, auth: rules.Auth, hub: Hub, *, on_exchange: Any = None) -> ASGIApp:
    """The application: the page, its assets, the reads, the actions and the event stream."""
    cookie_name = auth.cookie
    page = asset("index.html")
    assets: dict[str, str] = {}  # read (or made by Pygments) once, on first use

    def cached(name: str) -> str:
        if name not in assets:
            assets[name] = pygments_css() if name == "highlight.css" else asset(name)
        return assets[name]

    def signed_in(request: Request) -> bool:
        return auth.signed_in(request.cookies.get(cookie_name))

    def refused(why: str) -> PlainTextResponse:
        return PlainTextResponse(f"Refused: {why}\n", status_code=403)

    async def home(request: Request) -> Response:
        token = request.query_params.get("token")
        if token is not None:
            if not auth.exchange(token):
                return refused("this link was already used or is wrong; run `exo ui` again for a new one.")
            if on_exchange is not None:
                on_exchange()
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(cookie_name, auth.session, httponly=True, samesite="strict", path="/")
            return response
        if not signed_in(request):
            return refused("open the link `exo ui` printed (it signs this browser in once).")
        return Response(page.replace("{{csrf}}", html.escape(auth.csrf, quote=True)), media_type="text/html")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            return PlainTextResponse("Not found\n", status_code=404)
        return Response(cached(name), media_type=ASSETS[name])

    async def run(request: Request, name: str, **kwargs: Any) -> Any:
        """The operation's result, or the Response that refuses it (not signed in, or its error)."""
        if not signed_in(request):
            return refused("not signed in.")
        try:
            return await run_in_threadpool(invoke, name, env, **kwargs)
        except ExoError as exc:
            return failure(exc)

    async def call(request: Request, name: str, **kwargs: Any) -> Response:
        result = await run(request, name, **kwargs)
        return result if isinstance(result, Response) else Response(to_json(result), media_type="application/json")

    async def board(request: Request) -> Response:
        return await call(request, "board")

    async def prs(request: Request) -> Response:
        return await call(request, "pr_list")

    async def queue(request: Request) -> Response:
        return await call(request, "pr_queue")

    async def conflicts(request: Request) -> Response:
        return await call(request, "conflicts")

    async def checkpoints(request: Request) -> Response:
        return await call(request, "checkpoints", agent=request.path_params["agent"])

    async def read(request: Request) -> Response:
        return await call(request, "read", agent=request.path_params["agent"], lines=300, clean=True)

    async def highlighted(request: Request, name: str, **kwargs: Any) -> Response:
        """A diff or a pull request, its patch as highlighted lines (``views.patch_lines``)."""
        result = await run(request, name, **kwargs)
        if isinstance(result, Response):
            return result
        out = json.loads(to_json(result))
        shown = out if name == "diff" else out["diff"]  # a PR holds its diff (``PrDiffView``)
        shown["lines"] = await run_in_threadpool(patch_lines, shown.pop("patch", None))
        return JSONResponse(out)

    async def diff(request: Request) -> Response:
        return await highlighted(request, "diff", agent=request.path_params["agent"])

    async def pr(request: Request) -> Response:
        return await highlighted(request, "pr_show", number=request.path_params["number"], diff=True)

    async def act(request: Request) -> Response:
        if not auth.may_change(cookie=request.cookies.get(cookie_name), origin=request.headers.get("origin"),
                               host=request.headers.get("host"), header=request.headers.get(rules.HEADER)):
            return refused("a change needs this page's origin and token.")
        what = request.path_params["action"]
        try:
            if what not in ACTIONS:
                raise InvalidInput(f"Unknown action {what!r}", hint=f"One of: {', '.join(ACTIONS)}.")
            name, params = ACTIONS[what]
            try:
                body = json.loads(await request.body() or b"{}")
            except ValueError:
                body = None
            if not isinstance(body, dict) or set(body) - set(params):
                raise InvalidInput(f"{what} takes a JSON object with {', '.join(params)}")
            for key, kind in params.items():
                value = body.get(key)
                if (not isinstance(value, kind) or isinstance(value, bool)
                        or (isinstance(value, list) and not all(isinstance(v, str) for v in value))):
                    raise InvalidInput(f"{what} needs {key!r} ({'a list of strings' if kind is list else kind.__name__})")
        except ExoError as exc:
            return failure(exc)
        response = await call(request, name, **body)
        hub.changed.set()
        return response

    async def events(request: Request) -> Response:
        if not signed_in(request):
            return refused("not signed in.")
        one = hub.open(request.query_params.get("agent", "")[:200])
        return StreamingResponse(hub.stream(one), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    routes = [
        Route("/", home), Route("/static/{name}", static),
        Route("/api/board", board), Route("/api/prs", prs), Route("/api/queue", queue), Route("/api/conflicts", conflicts),
        Route("/api/read/{agent}", read), Route("/api/diff/{agent}", diff),
        Route("/api/checkpoints/{agent}", checkpoints), Route("/api/pr/{number:int}", pr),
        Route("/api/act/{action}", act, methods=["POST"]), Route("/api/events", events),
    ]
    return Guard(Starlette(routes=routes))
