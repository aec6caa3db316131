"""What TLS the daemon speaks and where: which listeners get it ([server].tls), and the one
server SSLContext policy (TLS 1.2 at least, forward-secret AEAD suites only)."""

from __future__ import annotations

import ssl
from pathlib import Path

from daemon.addresses import loopback
from daemon.tls.certinfo import TlsError

MODES = ("auto", "on", "off")
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"  # TLS 1.2 only; all of TLS 1.3's suites are fine
READ_BUFFER = 32 << 10  # asyncio's TLS read buffer per connection (smaller_read_buffers)


def secured(address: str, mode: str) -> bool:
    """Whether a listen address gets TLS under [server].tls `mode`."""
    if mode == "on":
        return True
    if mode == "off":
        return False
    return not loopback(address)


def _no_password() -> bytes:
    # Without this, OpenSSL asks for an encrypted key's passphrase on the terminal: a daemon
    # started from one would wait there for ever.
    raise TlsError("the key file is encrypted: give an unencrypted key (0600)")


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context for the pair: TLS 1.2 at least, forward-secret AEAD suites only."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    ctx.set_alpn_protocols(["http/1.1"])  # what aiohttp's server speaks
    try:
        ctx.load_cert_chain(cert, key, password=_no_password)
    except TlsError:
        raise
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise TlsError(f"cannot use {cert} with {key}: {exc}") from None
    return ctx


def smaller_read_buffers() -> None:
    """asyncio's TLS (3.11 to 3.13) gives every connection a 256 KiB read buffer, its class's
    max_size: an idle TLS connection held 344 KiB of the daemon's memory against 33 KiB plain,
    86 MB at [server].max_connections. A TLS record carries at most 16 KiB, so READ_BUFFER
    (two records) reads as well. (A Python without the attribute is left as it is.)"""
    from asyncio import sslproto

    if getattr(sslproto.SSLProtocol, "max_size", 0) > READ_BUFFER:
        sslproto.SSLProtocol.max_size = READ_BUFFER
