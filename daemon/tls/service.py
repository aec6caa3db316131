"""The HTTP port's TLS as a service: load the certificate at start, renew or reload it, say
what it is (status); listeners get only its `context` (an ssl.SSLContext)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from daemon.private_files import note_damaged, report_damaged
from daemon.tls.certinfo import (
    CertInfo,
    TlsError,
    certificate_names,
    host_part,
    interface_addresses,
    pairs,
)
from daemon.tls.child import run_child
from daemon.tls.policy import secured, server_context, smaller_read_buffers
from daemon.tls.store import CERT_FILE, INFO_FILE, KEY_FILE, read_info, remember
from daemon.wire import iso_utc

if TYPE_CHECKING:
    from daemon.config import Config

log = structlog.get_logger("daemon.tls")

VALID_DAYS = 397  # a self-made certificate's life (Apple's clients refuse more than 825)
RENEW_DAYS = 30  # made again this long before its end
CHECK_INTERVAL_S = 6 * 3600.0


@dataclass(frozen=True)
class Loaded:
    info: CertInfo
    context: ssl.SSLContext
    source: str  # "self-made" or "user"
    cert: Path
    key: Path
    # What health_check shows of it, formatted once (health_check is called often).
    shown: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        shown = {
            "source": self.source,
            "fingerprint": self.info.fingerprint,
            "certificate_sha256": pairs(self.info.certificate_sha256),
            "not_after": iso_utc(self.info.not_after),
            "certificate": str(self.cert),
        }
        object.__setattr__(self, "shown", shown)


class Tls:
    """The HTTP port's TLS, built once by daemon.service: `context` is handed to every secured
    listener; load() at start, reload() on SIGHUP and for renewal."""

    def __init__(self, config: Config):
        self.config = config
        self.mode = config.server.tls
        self.listeners = [(a, secured(a, self.mode)) for a in config.server.listen]
        self.enabled = any(tls for _, tls in self.listeners)
        self.user = bool(config.server.tls_cert)
        self.context: ssl.SSLContext | None = None  # the listeners' context; SNI picks _live
        self._live: Loaded | None = None
        self.reloaded_at: float | None = None
        self.last_error = ""  # the last reload's failure, until one succeeds

    @property
    def info(self) -> CertInfo | None:
        return self._live.info if self._live is not None else None

    def load(self) -> None:
        """Make or read the certificate and build the context (blocking). TlsError: the
        daemon cannot serve TLS, and does not start."""
        smaller_read_buffers()
        loaded = self._load()
        self._live = loaded
        self.context = loaded.context
        self.context.sni_callback = self._pick
        log.info(
            "tls_ready",
            source=loaded.source,
            fingerprint=loaded.info.fingerprint,
            certificate_sha256=pairs(loaded.info.certificate_sha256),
            not_after=iso_utc(loaded.info.not_after),
            names=list(loaded.info.names),
            listeners=[a for a, tls in self.listeners if tls],
        )

    def _pick(self, sslobj: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        """Every handshake: the context loaded last (a reload swaps it without touching the
        listening sockets)."""
        live = self._live
        if live is not None and live.context is not ctx:
            sslobj.context = live.context

    async def reload(self, reason: str = "SIGHUP") -> bool:
        """Load again; the old certificate keeps serving when the new one cannot be used."""
        if not self.enabled or self._live is None:
            log.info("tls_reload_skipped", reason="no listener has TLS")
            return False
        old = self._live.info
        try:
            loaded = await asyncio.to_thread(self._load)
        except TlsError as exc:
            self.last_error = str(exc)
            log.error("tls_reload_failed", reason=reason, error=str(exc), serving=old.fingerprint)
            return False
        self._live, self.reloaded_at, self.last_error = loaded, time.time(), ""
        new = loaded.info
        event = log.warning if new.fingerprint != old.fingerprint else log.info
        event(
            "tls_reloaded",
            reason=reason,
            fingerprint=new.fingerprint,
            previous_fingerprint=old.fingerprint,
            certificate_sha256=pairs(new.certificate_sha256),
            not_after=iso_utc(new.not_after),
        )
        return True

    def renewal_due(self, now: float) -> bool:
        info = self.info
        return info is not None and not self.user and info.ends_within(RENEW_DAYS, now)

    async def watch(self, on_change: Callable[[], Any]) -> None:
        """Every CHECK_INTERVAL_S: renew a self-made certificate that is due; warn about a
        user's that ends soon (it is theirs to renew, then SIGHUP)."""
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            now = time.time()
            info = self.info
            if self.renewal_due(now):
                if await self.reload("renewal"):
                    on_change()
            elif info is not None and info.ends_within(RENEW_DAYS, now):
                log.warning("tls_certificate_ending", not_after=iso_utc(info.not_after))

    def _load(self) -> Loaded:
        try:
            return self._load_now()
        except TlsError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:  # a folder we may not read
            raise TlsError(f"the certificate could not be made or read: {exc!r}") from exc

    def _load_now(self) -> Loaded:
        server = self.config.server
        if self.user:
            cert, key = Path(server.tls_cert), Path(server.tls_key)
            info = read_info(cert, self.config.state_dir / INFO_FILE)
            if info.ends_within(0, time.time()):
                log.warning(
                    "tls_certificate_expired", path=str(cert), not_after=iso_utc(info.not_after)
                )
            return Loaded(info, server_context(cert, key), "user", cert, key)
        cert = self.config.state_dir / CERT_FILE
        key = self.config.state_dir / KEY_FILE
        info = self._self_made(cert, key)
        return Loaded(info, server_context(cert, key), "self-made", cert, key)

    def _self_made(self, cert: Path, key: Path) -> CertInfo:
        # Imported here: daemon.discovery brings the config's schema (jsonschema), which the
        # certificate child (`python -m daemon.tls`, which imports this package) does not need.
        from daemon.discovery import board_id

        board = board_id(self.config.state_dir)
        server = self.config.server
        unspecified = any(host_part(a) in ("0.0.0.0", "::") for a in server.listen)
        names = certificate_names(
            server.listen,
            server.allowed_hosts,
            socket.gethostname(),
            board,
            interface_addresses() if unspecified else (),
        )
        cache = self.config.state_dir / INFO_FILE
        info: CertInfo | None = None
        reason = "first start"
        if cert.exists() and key.exists():
            try:
                info = read_info(cert, cache)
            except TlsError as exc:
                reason = f"unreadable ({exc})"
                # A cut or a hand damaged it: kept for reading, a new one made with the key.
                report_damaged(cert, str(exc), "a new certificate is made (same key if usable)")
        if info is not None:
            if info.ends_within(RENEW_DAYS, time.time()):
                reason = "renewal"
            elif list(info.names) != names:
                reason = "its names changed"
            elif mismatch := _unusable(cert, key):
                # A cut between writing a new key and its certificate leaves a pair that does
                # not match: made again (with the key when it is usable) rather than no start.
                reason = f"its key does not fit ({mismatch})"
            else:
                return info
        made = run_child(
            {
                "op": "make",
                "key": str(key),
                "cert": str(cert),
                "names": names,
                "common_name": f"Fingertip {board[:8]}",
                "days": VALID_DAYS,
            }
        )
        new = CertInfo.from_dict(made)
        remember(cache, new)
        damaged = made.get("damaged_key")
        if damaged:
            kept = damaged.get("kept_as")
            note_damaged(
                key,
                str(damaged.get("reason")),
                Path(kept) if kept else None,
                "a NEW key and certificate were made: the fingerprint changed, pin it again",
            )
        (log.warning if made.get("new_key") and info is not None else log.info)(
            "tls_certificate_made",
            reason=reason,
            new_key=bool(made.get("new_key")),
            fingerprint=new.fingerprint,
            not_after=iso_utc(new.not_after),
        )
        return new

    def status(self) -> dict[str, Any]:
        """health_check's and the start-up log's view (daemon.posture)."""
        out: dict[str, Any] = {"mode": self.mode}
        live = self._live
        if live is not None:
            out.update(live.shown, names=list(live.info.names))
        if self.reloaded_at is not None:
            out["reloaded_at"] = iso_utc(self.reloaded_at)
        if self.last_error:
            out["last_reload_error"] = self.last_error
        return out


def _unusable(cert: Path, key: Path) -> str:
    """Why the pair cannot serve (the key is not the certificate's, or unreadable), or ""."""
    try:
        server_context(cert, key)
    except TlsError as exc:
        return str(exc)
    return ""
