"""Handlers that screen each request before the method runs: the one wrapper for both
screens of the gRPC endpoint (undecodable requests, ``bad_requests.py``; ACL 2.0,
``acl_guard.py``).

SHELL: wraps grpc method handlers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import Message

Screen = Callable[[Any, Any], Message | None]
"""``screen(request, context)``: the whole answer of a call refused before the method
runs (None: run the method)."""


def screened(
    handler: grpc.RpcMethodHandler,
    screen: Screen,
    decode: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler | None:
    """``handler`` (unary or server-streaming) run only for requests ``screen`` lets
    through; a refused call's answer is the screen's one response. None for a
    client-streaming handler (each screen treats streams itself). ``decode``
    replaces the handler's request decoder."""
    decode = decode or handler.request_deserializer
    serialize = handler.response_serializer
    if handler.unary_unary is not None:
        unary = handler.unary_unary

        async def unary_call(request: Any, context: Any) -> Any:
            refusal = screen(request, context)
            if refusal is not None:
                return refusal
            return await unary(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_call, decode, serialize)
    if handler.unary_stream is not None:
        streamed = handler.unary_stream

        async def unary_stream_call(request: Any, context: Any) -> AsyncIterator[Any]:
            refusal = screen(request, context)
            if refusal is not None:
                yield refusal
                return
            async for response in streamed(request, context):
                yield response

        return grpc.unary_stream_rpc_method_handler(unary_stream_call, decode, serialize)
    return None
