"""Who may talk to the daemon over the network: pairing tokens, Host and Origin checks.

Shared by the HTTP API and the WebSocket endpoint (same port, same rules).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import structlog
from aiohttp.web import BaseRequest

from daemon.addresses import is_loopback
from daemon.catalog.access import CALLER_KINDS, Caller, Guard
from daemon.config import Config
from daemon.errors import ToolError
from daemon.invocations import CALLER_HEADER, caller_label
from daemon.private_files import read_state, write_private

log = structlog.get_logger("daemon.auth")

TOKEN_FILE = "pairing-token"


def load_or_create_token(config: Config) -> str:
    """The pairing token: from the config, else the state folder, else generated there (0600)."""
    if config.auth.token:
        return config.auth.token
    path = config.state_dir / TOKEN_FILE
    token = read_state(path, parse_token, NEW_PAIRING)
    if token:
        return token
    path.parent.mkdir(parents=True, exist_ok=True)
    return new_token(path)


NEW_PAIRING = "a NEW pairing token was made: every client must pair again with the new token"


def parse_token(data: bytes) -> str:
    """The token file's one line; ValueError for a file a cut or a hand damaged (new_token
    ends it with a newline: a file without one was cut short)."""
    text = data.decode("ascii", "strict") if data.isascii() else ""
    token = text.strip()
    if not text.endswith("\n") or not token or len(token) < 16 or not token.isprintable():
        raise ValueError(f"not a whole pairing token ({len(data)} bytes)")
    if any(c.isspace() for c in token):
        raise ValueError("more than one word")
    return token


def new_token(path: Path) -> str:
    """A new pairing token, written whole into `path` (0600 whatever the umask)."""
    token = secrets.token_urlsafe(32)
    write_private(path, (token + "\n").encode())
    return token


@dataclass(frozen=True)
class Client:
    """An authenticated caller and the highest policy its token allows (None = no limit)."""

    authenticated: bool
    max_policy: str | None = None
    token_id: str = ""  # "pairing" or "client-N" (N = its place in [auth].client_tokens)


class Auth:
    def __init__(self, config: Config, pairing_token: str):
        self._tokens: list[tuple[str, str | None]] = [(pairing_token, None)]
        self._tokens += [(t["token"], t["max_policy"]) for t in config.auth.client_tokens]
        # How a token is named in the flight recorder: never the secret, never a hash of it.
        self._token_ids = ["pairing"] + [
            f"client-{n}" for n in range(1, len(config.auth.client_tokens) + 1)
        ]
        self.require_on_loopback = config.auth.require_on_loopback
        # Where the pairing token lives: None when the config sets it (not ours to change).
        self.token_file = None if config.auth.token else config.state_dir / TOKEN_FILE
        self.rotated_at: float | None = None
        # Connections that outlive a request (a WebSocket, a stream), by the token that let them
        # in: a rotation closes those of the old token.
        self._bound: dict[str, set[Callable[[], object]]] = {}
        # Told the id of a token that is no longer valid (the catalog cuts its queued calls).
        self._on_revoke: list[Callable[[str], object]] = []
        self._rotating = asyncio.Lock()
        port = config.server.port
        names = {"localhost", "127.0.0.1", "[::1]", "::1"}
        names |= {_host_name(h) for h in (*config.server.listen, *config.server.allowed_hosts)}
        self.hosts = {n.lower() for n in names} | {f"{n.lower()}:{port}" for n in names}

    def client(self, authorization: str | None, query_token: str | None) -> Client:
        presented = query_token
        if authorization and authorization.lower().startswith("bearer "):
            presented = authorization[7:].strip()
        # A header aiohttp could not decode arrives surrogate-escaped: no token is like that.
        if presented and presented.isascii():
            for (token, max_policy), token_id in zip(self._tokens, self._token_ids, strict=True):
                if hmac.compare_digest(presented.encode(), token.encode()):
                    return Client(True, max_policy, token_id)
        return Client(False)

    def caller(
        self,
        transport: str,
        guard: Guard,
        request: BaseRequest,
        *,
        query_token: bool = False,
        kind: str | None = None,
    ) -> Caller:
        """The Caller of one request on the HTTP port: its token (header, or ?token= where the
        transport takes it), its max policy, and whether this connection needs a token for
        write tools. `kind` names its row of catalog.CALLER_KINDS (default: the transport)."""
        token = request.query.get("token") if query_token else None
        client = self.client(request.headers.get("Authorization"), token)
        remote = request.remote
        return Caller(
            transport,
            guard,
            peer=caller_label(remote, request.headers.get(CALLER_HEADER)),
            authenticated=client.authenticated,
            token_id=client.token_id,
            token_required=self.require_on_loopback or not is_loopback(remote),
            max_policy=client.max_policy,
            **CALLER_KINDS[kind or transport],
        )

    def client_policies(self) -> list[dict[str, str]]:
        """The client tokens by id and policy (never the secret)."""
        return [
            {"id": token_id, "max_policy": policy or "critical"}
            for (_, policy), token_id in zip(self._tokens[1:], self._token_ids[1:], strict=True)
        ]

    def bind(self, token_id: str, close: Callable[[], object]) -> Callable[[], None]:
        """Have `close` called when `token_id` is rotated; returns the undo (at the end)."""
        if not token_id:
            return lambda: None
        bound = self._bound.setdefault(token_id, set())
        bound.add(close)
        return lambda: bound.discard(close)

    def on_revoke(self, revoked: Callable[[str], object]) -> None:
        """Have `revoked(token_id)` called, before `rotate` returns, whenever a token stops
        being valid."""
        self._on_revoke.append(revoked)

    async def rotate(self) -> tuple[str, int]:
        """A new pairing token, in effect at once: the old one is refused from the next
        request on, its calls that have not started driving the target never will, and the
        connections it let in are closed. (new token, connections closed)."""
        path = self.token_file
        if path is None:
            raise ToolError(
                "token_in_config",
                "the pairing token is set in the config ([auth].token): change it there and "
                "restart the daemon",
            )
        async with self._rotating:  # the file and the one in use stay the same token
            try:
                token = await asyncio.to_thread(new_token, path)
            except OSError as exc:
                raise ToolError(
                    "token_not_written", f"cannot write {path}: {exc.strerror or exc}"
                ) from None
            self._tokens[0] = (token, None)
            self.rotated_at = time.time()
        for revoked in self._on_revoke:  # its queued calls first: none may start from here on
            revoked("pairing")
        closing = self._bound.pop("pairing", set())
        for close in closing:
            close()
        log.warning("token_rotated", token_id="pairing", connections_closed=len(closing))
        return token, len(closing)

    def host_allowed(self, host: str | None) -> bool:
        """Refuse foreign Host headers (DNS rebinding from a page on the target)."""
        return host is not None and host.lower() in self.hosts

    def origin_allowed(self, origin: str | None) -> bool:
        """A browser request from another site carries its Origin; ours match a known host."""
        if origin is None:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.netloc.lower() in self.hosts


def _host_name(addr: str) -> str:
    try:
        return f"[{addr}]" if ipaddress.ip_address(addr).version == 6 else addr
    except ValueError:
        return addr


def ensure_state_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
