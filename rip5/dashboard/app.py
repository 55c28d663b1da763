"""The dashboard's pages: a Starlette app rendering Jinja2 templates on the server.

Reads are GET pages; changes (topic create, update, delete; dead-letter
resend) are HTML form POSTs answered with a redirect (303) to the page that
shows the result, with a note. Bad input gets status 400 and a page naming
the field and the cause; a refusal by the cluster shows the code and message
of the cluster's error (404 for a topic or group that does not exist, 400 for
anything else the request asked, 502 when the cluster could not be reached).
No page needs a script; the overview reloads itself every 5 s for its chart.

With ``acl`` (``rip5 dashboard --acl``) every page but the login page and
``/healthz`` needs a login (rip5/dashboard/login.py); a change is signed as the
logged-in user, and the nameserver's refusal (PERMISSION_DENIED: the user's
policy does not allow it) is shown with status 403.

SHELL.
"""

from __future__ import annotations

import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jinja2 import StrictUndefined
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from angelia_rpc import AngeliaError
from nameserver import names
from nameserver.errors import NameserverError
from protocol import errors
from protocol import nameserver_api as ns
from protocol.message_objects import ObjectCorrupted
from protocol.vocabulary import MessageType, Permission
from rip5.admin import ON_OFF
from rip5.admin_consumers import body_preview
from rip5.dashboard.chart import svg_chart
from rip5.dashboard.cluster import DashboardCluster
from rip5.dashboard.login import SESSION_KEY, Login, Logins
from rip5.units import ago, duration_text, size_text

HERE = Path(__file__).parent
MESSAGE_TYPES = {kind.name.lower(): int(kind) for kind in MessageType}
PERMISSIONS = {"rw": int(Permission.READ_WRITE), "r": int(Permission.READ)}
PERMISSIONS.update({"w": int(Permission.WRITE), "none": int(Permission.NONE)})
UNREACHABLE = (errors.UNAVAILABLE, errors.DEADLINE_EXCEEDED)
MISSING = (errors.NOT_FOUND, errors.TOPIC_NOT_FOUND, errors.CONSUMER_GROUP_NOT_FOUND)
STATUS_OF_REFUSAL = {errors.UNAUTHENTICATED: 401, errors.PERMISSION_DENIED: 403}
STATUS_OF_REFUSAL.update(dict.fromkeys(UNREACHABLE, 502))
STATUS_OF_REFUSAL.update(dict.fromkeys(MISSING, 404))


class BadInput(ValueError):
    """A form or query field the dashboard refuses (the message names it)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def _name_of(mapping: dict[str, int], number: int) -> str:
    return next((name for name, value in mapping.items() if value == number), str(number))


def _whole(text: str, field: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BadInput(f"{field}: {text!r} is not a whole number") from None
    if not low <= value <= high:
        raise BadInput(f"{field}: {value} is not in {low}..{high}")
    return value


RETENTION_FIELDS = (
    "retention_ms",
    "retention_bytes",
    "local_retention_ms",
    "local_retention_bytes",
)
"""A topic's retention limits, as its forms name them (the admin CLI's options)."""
LIMIT_MAX = (1 << 63) - 1


def _retention(form: dict[str, str]) -> dict[str, int | None]:
    """The retention limits a form filled in (None: left empty). 0 is "none" for the
    limits beside ``retention_ms``; ``retention_ms`` must be at least 1 when given."""
    limits: dict[str, int | None] = {}
    for name in RETENTION_FIELDS:
        text = form.get(name, "")
        low = 1 if name == "retention_ms" else 0
        limits[name] = _whole(text, name, low, LIMIT_MAX) if text else None
    return limits


def _on_off(text: str, field: str) -> bool | None:
    """``on``/``off`` (None: left empty)."""
    if not text:
        return None
    if text not in ON_OFF:
        raise BadInput(f"{field}: {text!r} is not one of on, off")
    return ON_OFF[text]


def _choice(text: str, field: str, choices: dict[str, int]) -> int:
    if text not in choices:
        raise BadInput(f"{field}: {text!r} is not one of {', '.join(sorted(choices))}")
    return choices[text]


def _topic_name(text: str) -> str:
    try:
        names.validate_topic(text)
    except NameserverError as error:
        raise BadInput(f"topic: {error}") from None
    return text


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the last value of each)."""
    fields = urllib.parse.parse_qs((await request.body()).decode(), keep_blank_values=True)
    return {name: values[-1].strip() for name, values in fields.items()}


class LoginNeeded(Exception):
    """A page asked for without a login while ACL is on."""


Endpoint = Callable[[Request], Awaitable[Response]]


def build_app(cluster: DashboardCluster, *, acl: bool = False) -> Starlette:
    """The dashboard over ``cluster``; with ``acl``, behind a login."""
    logins = Logins()
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.undefined = StrictUndefined  # a misspelt field fails, never renders empty
    templates.env.globals.update(
        ago=ago,
        duration=duration_text,
        size=size_text,
        type_name=lambda n: _name_of(MESSAGE_TYPES, n),
        perm_name=lambda n: _name_of(PERMISSIONS, n),
        preview=body_preview,
        cluster_name=cluster.cluster,
    )

    def login_of(request: Request) -> Login | None:
        return logins.get(request.session.get(SESSION_KEY)) if acl else None

    def signed(request: Request) -> ns.SignedBy:
        """The signature of a change asked for by ``request`` (unsigned with ACL off)."""
        login = login_of(request)
        return login.signed() if login is not None else ns.SignedBy()

    def guarded(endpoint: Endpoint) -> Endpoint:
        """``endpoint``, answered only for a logged-in user while ACL is on."""

        async def answer(request: Request) -> Response:
            if acl and login_of(request) is None:
                raise LoginNeeded()
            return await endpoint(request)

        return answer

    def page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("note", request.query_params.get("note", ""))
        login = login_of(request)
        context["user"] = login.user if login is not None else ""
        context["acl"] = acl
        context["now_ms"] = _now_ms()
        return templates.TemplateResponse(request, template, context, status_code=status)

    def back(url: str, note: str, **params: str) -> RedirectResponse:
        query = urllib.parse.urlencode({**params, "note": note})
        return RedirectResponse(f"{url}?{query}", 303)

    async def overview(request: Request) -> Response:
        status = await cluster.status()
        chart = Markup(svg_chart(cluster.throughput.rates()))
        return page(request, "overview.html", cluster=status, chart=chart)

    async def topics(request: Request) -> Response:
        return page(
            request,
            "topics.html",
            topics=await cluster.topics(),
            types=sorted(MESSAGE_TYPES),
            perms=list(PERMISSIONS),
        )

    async def topic_create(request: Request) -> Response:
        form = await _form(request)
        limits = _retention(form)
        created = ns.CreateTopicRequest(
            _topic_name(form.get("name", "")),
            cluster.cluster,
            _whole(form.get("queues", ""), "queues", 1, 1024),
            _choice(form.get("type", "normal"), "type", MESSAGE_TYPES),
            limits["retention_ms"] or 0,
            _choice(form.get("perm", "rw"), "perm", PERMISSIONS),
            limits["retention_bytes"] or 0,
            limits["local_retention_ms"] or 0,
            limits["local_retention_bytes"] or 0,
            signed=signed(request),
            read_replicas=bool(_on_off(form.get("read_replicas", ""), "read_replicas")),
        )
        response = await cluster.create_topic(created)
        return back("/topics", f"created topic {response.topic.name}")

    async def topic_update(request: Request) -> Response:
        name = _topic_name(request.path_params["name"])
        form = await _form(request)
        queues = form.get("queues", "")
        perm = form.get("perm", "")
        limits = _retention(form)
        update = ns.UpdateTopicRequest(
            name,
            _whole(queues, "queues", 1, 1024) if queues else None,
            None,
            limits["retention_ms"],
            _choice(perm, "perm", PERMISSIONS) if perm else None,
            limits["retention_bytes"],
            limits["local_retention_ms"],
            limits["local_retention_bytes"],
            signed=signed(request),
            read_replicas=_on_off(form.get("read_replicas", ""), "read_replicas"),
        )
        await cluster.update_topic(update)
        return back("/topics", f"updated topic {name}")

    async def topic_delete(request: Request) -> Response:
        name = _topic_name(request.path_params["name"])
        await cluster.delete_topic(name, signed(request))
        return back("/topics", f"deleted topic {name}")

    async def groups(request: Request) -> Response:
        return page(request, "groups.html", groups=await cluster.groups())

    async def group(request: Request) -> Response:
        name = request.path_params["name"]
        rows = await cluster.group_lag(name)
        clients, failed = await cluster.clients(name)
        return page(
            request,
            "group.html",
            name=name,
            rows=rows,
            total_lag=sum(row.queue.lag for row in rows),
            clients=clients,
            failed=failed,
        )

    async def clients(request: Request) -> Response:
        found, failed = await cluster.clients()
        return page(request, "clients.html", clients=found, failed=failed)

    async def messages(request: Request) -> Response:
        topic = request.query_params.get("topic", "").strip()
        key = request.query_params.get("key", "").strip()
        message_id = request.query_params.get("id", "").strip()
        outcome = None
        if key and message_id:
            raise BadInput("give a message id or a key, not both")
        if key and not topic:
            raise BadInput("topic: a query by key needs the topic")
        if key or message_id:
            if topic:
                _topic_name(topic)
            outcome = await cluster.query(topic=topic, message_id=message_id, key=key)
        return page(
            request, "messages.html", topic=topic, key=key, message_id=message_id, outcome=outcome
        )

    async def dead_letters(request: Request) -> Response:
        name = request.query_params.get("group", "").strip()
        letters = await cluster.dead_letters(name) if name else None
        return page(request, "dlq.html", name=name, letters=letters, groups=await cluster.groups())

    async def dead_letters_resend(request: Request) -> Response:
        name = request.path_params["name"]
        resent = await cluster.resend_dead_letters(name)
        note = f"resent {resent.count} dead letters of {name}"
        if resent.duplicates:
            note += f" ({resent.duplicates} were there already)"
        return back("/dlq", note, group=name)

    async def tier(request: Request) -> Response:
        if not cluster.tier_url:
            return page(request, "tier.html", rows=[], problem="", tier_url="")
        try:
            rows = await cluster.tier_status()
        except (ObjectCorrupted, ValueError, OSError, ImportError) as error:
            # A damaged manifest or an unreachable tier is shown, with the cause.
            problem = f"{type(error).__name__}: {error}"
            return page(request, "tier.html", 502, rows=[], problem=problem, tier_url="")
        return page(request, "tier.html", rows=rows, problem="", tier_url=cluster.tier_url)

    async def connectors(request: Request) -> Response:
        rules, silent = await cluster.connector_rules()
        watched = bool(cluster.connector_metrics)
        return page(request, "connectors.html", rules=rules, silent=silent, watched=watched)

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def login_page(request: Request) -> Response:
        if not acl:
            return RedirectResponse("/", 303)
        return page(request, "login.html", name="", message="")

    async def login(request: Request) -> Response:
        if not acl:
            return RedirectResponse("/", 303)
        form = await _form(request)
        name, secret = form.get("user", ""), form.get("secret", "")
        if not name or not secret:
            message = "user and secret: give both"
            return page(request, "login.html", 400, name=name, message=message)
        candidate = Login(name, secret)
        try:
            who = await cluster.authenticate(candidate.signed())
        except AngeliaError as error:
            if error.code is not errors.UNAUTHENTICATED:
                raise
            message = f"{error.code.name}: {error.message}"
            return page(request, "login.html", 401, name=name, message=message)
        if not who.name:
            message = "the cluster has no ACL user (ACL is off): run the dashboard without --acl"
            return page(request, "login.html", 400, name=name, message=message)
        request.session[SESSION_KEY] = logins.add(candidate)
        return back("/", f"logged in as {who.name}")

    async def logout(request: Request) -> Response:
        logins.remove(request.session.pop(SESSION_KEY, None))
        return RedirectResponse("/login", 303)

    async def login_needed(request: Request, error: Exception) -> Response:
        return RedirectResponse("/login", 303)

    async def refused(request: Request, error: Exception) -> Response:
        if isinstance(error, BadInput):
            return page(request, "error.html", 400, title="bad input", message=str(error))
        assert isinstance(error, AngeliaError)
        status = STATUS_OF_REFUSAL.get(error.code, 400)
        what = "cannot reach the cluster" if status == 502 else "the cluster refused"
        message = f"{error.code.name}: {error.message}"
        return page(request, "error.html", status, title=what, message=message)

    return Starlette(
        routes=[
            Route("/", guarded(overview)),
            Route("/topics", guarded(topics)),
            Route("/topics", guarded(topic_create), methods=["POST"]),
            Route("/topics/{name}/update", guarded(topic_update), methods=["POST"]),
            Route("/topics/{name}/delete", guarded(topic_delete), methods=["POST"]),
            Route("/groups", guarded(groups)),
            Route("/groups/{name}", guarded(group)),
            Route("/clients", guarded(clients)),
            Route("/messages", guarded(messages)),
            Route("/dlq", guarded(dead_letters)),
            Route("/dlq/{name}/resend", guarded(dead_letters_resend), methods=["POST"]),
            Route("/tier", guarded(tier)),
            Route("/connectors", guarded(connectors)),
            Route("/login", login_page),
            Route("/login", login, methods=["POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/healthz", health),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ],
        # The cookie carries only a login id, signed with a key of this process.
        middleware=[
            Middleware(
                SessionMiddleware,
                secret_key=secrets.token_urlsafe(32),
                session_cookie="rip5_dashboard",
                same_site="strict",
            )
        ],
        exception_handlers={BadInput: refused, AngeliaError: refused, LoginNeeded: login_needed},
    )
