"""Who may talk to the daemon over the network: pairing tokens, Host and Origin checks.

Shared by the HTTP API and the WebSocket endpoint (same port, same rules).
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp.web import BaseRequest

from daemon.catalog import CALLER_KINDS, Caller, Guard
from daemon.config import Config
from daemon.invocations import CALLER_HEADER, caller_label

TOKEN_FILE = "pairing-token"


def load_or_create_token(config: Config) -> str:
    """The pairing token: from the config, else the state folder, else generated there (0600)."""
    if config.auth.token:
        return config.auth.token
    path = config.state_dir / TOKEN_FILE
    try:
        token = path.read_text().strip()
        if token:
            return token
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an empty file that was already there keeps its own mode otherwise
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
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


@functools.lru_cache(maxsize=256)  # parsed on every request; clients are few
def is_loopback(remote: str | None) -> bool:
    if not remote:
        return False
    try:
        return ipaddress.ip_address(remote.split("%")[0]).is_loopback
    except ValueError:
        return False


def ensure_state_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
