"""SSL contexts for the socket transports, from a :class:`TlsConfig`."""

from __future__ import annotations

import ssl

from angelia_rpc.config import TlsConfig


def server_context(tls: TlsConfig, alpn: list[str] | None = None) -> ssl.SSLContext:
    """The context a server presents its certificate with (with ``tls.mutual``, it
    also requires a client certificate signed by ``ca_file``)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.mutual:
        context.load_verify_locations(tls.ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    if alpn:
        context.set_alpn_protocols(alpn)
    return context


def client_context(tls: TlsConfig, alpn: list[str] | None = None) -> ssl.SSLContext:
    """The context a client verifies the server with (against ``ca_file``; with
    ``tls.mutual`` it presents its own certificate too)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca_file)
    if tls.mutual:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    if alpn:
        context.set_alpn_protocols(alpn)
    return context
