"""Service declarations: methods with a name, request and response types and a kind.

A service is a class deriving from :class:`Service` whose attributes are
method declarations::

    class Echo(Service, name="echo"):
        say = Unary(SayRequest, SayResponse)
        watch = ServerStream(WatchRequest, Event)
        chat = Bidi(ChatMessage, ChatMessage)

The same class is both halves:

- the client stub: ``Echo(channel)`` has typed callables ``say(request,
  timeout_ms=...) -> Awaitable[SayResponse]``, ``watch(request)`` (an async
  iterator of ``Event``) and ``chat()`` (a :class:`BidiStub` call with
  ``send``/``done_sending``/``async for``);
- the server dispatch: ``Echo.bind(impl)`` checks that ``impl`` has an async
  method per declaration (``say(request, context)``, ``watch(request,
  context)`` and ``chat(requests, context)``, the last two async generators)
  and returns the table a server serves.

The wire name of a method is ``"<service>.<attribute>"``.

PURE.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar, overload

from angelia_rpc.codec.base import message_shape
from angelia_rpc.errors import LocalUsageError
from angelia_rpc.framing import BIDI, SERVER_STREAM, UNARY
from protocol import errors

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Req_contra = TypeVar("Req_contra", contravariant=True)
Resp_co = TypeVar("Resp_co", covariant=True)
KIND_LABELS = {UNARY: "unary", SERVER_STREAM: "server-streaming", BIDI: "bidirectional"}


class Method(Generic[Req, Resp]):
    """One declared method. ``name`` and ``full_name`` are set when its service class is made."""

    kind: ClassVar[int]

    def __init__(self, request: type[Req], response: type[Resp]) -> None:
        message_shape(request)  # refuses types that cannot cross the wire, at declaration
        message_shape(response)
        self.request = request
        self.response = response
        self.name = ""
        self.full_name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return (
            f"<{KIND_LABELS[self.kind]} {self.full_name or self.name}"
            f"({self.request.__qualname__}) -> {self.response.__qualname__}>"
        )


class UnaryStub(Protocol[Req_contra, Resp_co]):
    """The client side of a unary method."""

    def __call__(self, request: Req_contra, *, timeout_ms: int | None = None) -> Awaitable[Resp_co]:
        """Send ``request``; the response, or AngeliaError (deadline: ``timeout_ms``)."""
        ...


class StreamCall(Protocol[Resp_co]):
    """An open server-streaming call: iterate it for the responses; ``cancel()`` stops it."""

    def __aiter__(self) -> AsyncIterator[Resp_co]:
        """The responses, in order; ends when the server ends the stream."""
        ...

    def cancel(self) -> None:
        """Abandon the call (the server's handler is cancelled)."""
        ...

    async def __aenter__(self) -> StreamCall[Resp_co]:
        """``async with``: the call is cancelled on exit unless it ended."""
        ...

    async def __aexit__(self, *exc: object) -> None:
        """Cancel the call unless the server ended it."""
        ...


class ServerStreamStub(Protocol[Req_contra, Resp_co]):
    """The client side of a server-streaming method."""

    def __call__(
        self, request: Req_contra, *, timeout_ms: int | None = None
    ) -> StreamCall[Resp_co]:
        """Open the stream (``timeout_ms`` None: no deadline)."""
        ...


class BidiCall(Protocol[Req_contra, Resp_co]):
    """An open bidirectional call."""

    async def send(self, message: Req_contra) -> None:
        """Send one message; waits while the peer's flow-control window is full."""
        ...

    def try_send_nowait(self, message: Req_contra) -> bool:
        """Send one message if that needs no waiting (the stream open, credit left, the
        link writable); False, with nothing sent, otherwise."""
        ...

    def done_sending(self) -> None:
        """End this side of the stream; the peer's iterator of requests ends."""
        ...

    def __aiter__(self) -> AsyncIterator[Resp_co]:
        """The peer's messages, in order; ends when the peer ends its side."""
        ...

    def cancel(self) -> None:
        """Abandon the call in both directions."""
        ...

    async def __aenter__(self) -> BidiCall[Req_contra, Resp_co]:
        """``async with``: the call is cancelled on exit unless it ended."""
        ...

    async def __aexit__(self, *exc: object) -> None:
        """Cancel the call unless the server ended it."""
        ...


class BidiStub(Protocol[Req_contra, Resp_co]):
    """The client side of a bidirectional method."""

    def __call__(self, *, timeout_ms: int | None = None) -> BidiCall[Req_contra, Resp_co]:
        """Open the stream (``timeout_ms`` None: no deadline)."""
        ...


class Binder(Protocol):
    """What a client stub needs from a channel: a callable per method."""

    def bind(self, method: Method[Any, Any]) -> Callable[..., Any]:
        """The client callable for ``method`` (codec work compiled once)."""
        ...


class Unary(Method[Req, Resp]):
    """A unary method: one request, one response."""

    kind = UNARY

    @overload
    def __get__(self, obj: None, owner: type) -> Unary[Req, Resp]: ...
    @overload
    def __get__(self, obj: Service, owner: type) -> UnaryStub[Req, Resp]: ...
    def __get__(self, obj: Service | None, owner: type) -> Any:
        if obj is None:
            return self
        return obj._stub(self)


class ServerStream(Method[Req, Resp]):
    """A server-streaming method: one request, a stream of responses (long polls, watches)."""

    kind = SERVER_STREAM

    @overload
    def __get__(self, obj: None, owner: type) -> ServerStream[Req, Resp]: ...
    @overload
    def __get__(self, obj: Service, owner: type) -> ServerStreamStub[Req, Resp]: ...
    def __get__(self, obj: Service | None, owner: type) -> Any:
        if obj is None:
            return self
        return obj._stub(self)


class Bidi(Method[Req, Resp]):
    """A bidirectional method: streams both ways on one call (raft traffic)."""

    kind = BIDI

    @overload
    def __get__(self, obj: None, owner: type) -> Bidi[Req, Resp]: ...
    @overload
    def __get__(self, obj: Service, owner: type) -> BidiStub[Req, Resp]: ...
    def __get__(self, obj: Service | None, owner: type) -> Any:
        if obj is None:
            return self
        return obj._stub(self)


@dataclass(frozen=True, slots=True)
class Handler:
    """A server-side method: its declaration and the implementation's bound method."""

    method: Method[Any, Any]
    call: Callable[..., Any]


class Service:
    """Base of service declarations; an instance is a client stub on a channel."""

    service_name: ClassVar[str] = ""
    methods: ClassVar[Mapping[str, Method[Any, Any]]] = {}

    def __init_subclass__(cls, *, name: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.service_name = name or cls.__name__.lower()
        methods: dict[str, Method[Any, Any]] = {}
        for attribute, value in vars(cls).items():
            if isinstance(value, Method):
                value.full_name = f"{cls.service_name}.{attribute}"
                methods[attribute] = value
        cls.methods = methods

    def __init__(self, channel: Binder) -> None:
        self._channel = channel
        self._stubs: dict[str, Any] = {}

    def _stub(self, method: Method[Any, Any]) -> Any:
        stub = self._stubs.get(method.name)
        if stub is None:
            stub = self._stubs[method.name] = self._channel.bind(method)
        return stub

    @classmethod
    def bind(cls, impl: object) -> dict[str, Handler]:
        """The dispatch table for ``impl``: wire name -> handler. Refuses a missing method."""
        table: dict[str, Handler] = {}
        problems: list[str] = []
        for attribute, method in cls.methods.items():
            call = getattr(impl, attribute, None)
            if call is None:
                problems.append(f"{attribute} is missing")
            elif method.kind == UNARY and not inspect.iscoroutinefunction(call):
                problems.append(f"{attribute} must be an async def (unary)")
            elif method.kind != UNARY and not inspect.isasyncgenfunction(call):
                problems.append(
                    f"{attribute} must be an async generator ({KIND_LABELS[method.kind]})"
                )
            else:
                table[method.full_name] = Handler(method, call)
        if problems:
            raise LocalUsageError(
                errors.BAD_REQUEST,
                f"{type(impl).__name__} does not implement service {cls.service_name}: "
                + "; ".join(problems),
            )
        return table
