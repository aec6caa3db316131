"""The daemon's health check after an install, over the ssh connection's forward to its
loopback port: HTTP, or HTTPS once the daemon says the address has TLS."""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import ssl
import time
from collections.abc import Mapping
from pathlib import Path

from deploy import DeployError
from deploy.pure import host_port


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP, or HTTPS with `tls`, over the ssh forward's Unix socket. The certificate is not
    verified here: ssh authenticated the board, and the health check that comes back over this
    connection says which fingerprint to pin (checked against this connection's certificate)."""

    def __init__(self, path: Path, host: str, timeout: float, tls: bool = False) -> None:
        super().__init__(host, timeout=timeout)  # `host` is only the Host header
        self._path = path
        self._tls = tls
        self.peer_certificate = b""

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self._path))
        if self._tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            tls = ctx.wrap_socket(sock)
            self.peer_certificate = tls.getpeercert(binary_form=True) or b""
            self.sock = tls
            return
        self.sock = sock


def _tls_required(status: int, data: object) -> bool:
    """The daemon's answer to plain HTTP on a TLS listener (daemon.transports.tls_gate.Gate)."""
    error = data.get("error") if isinstance(data, dict) else None
    return status == 400 and isinstance(error, dict) and error.get("code") == "tls_required"


def health_check(sock: Path, addr: str, port: int, timeout: float) -> dict[str, object]:
    """POST /api/tools/health_check until it answers ok or `timeout` passes; over TLS once the
    daemon says the address has it."""
    host = host_port(addr, port)  # a Host the daemon accepts
    deadline = time.monotonic() + timeout
    last = "no answer"
    tls = False
    while time.monotonic() < deadline:
        conn = _UnixHTTPConnection(sock, host, timeout=15, tls=tls)
        try:
            body = json.dumps({"input": {}})
            conn.request(
                "POST", "/api/tools/health_check", body, {"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            data = json.loads(resp.read())
            if _tls_required(resp.status, data) and not tls:
                tls = True
                continue
            if resp.status == 200 and not data.get("is_error"):
                output = json.loads(data["output"])
                if isinstance(output, dict) and output.get("ok") is True:
                    _check_certificate(output, conn.peer_certificate)
                    return output
            last = f"HTTP {resp.status}: {data.get('error') or data.get('output')}"
        except (OSError, http.client.HTTPException, ValueError, KeyError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
        time.sleep(1)
    raise DeployError(f"no healthy answer from the daemon within {timeout:.0f} s ({last})")


def _check_certificate(health: Mapping[str, object], der: bytes) -> None:
    """Over TLS: the certificate this connection got is the one health_check describes (what
    a browser shows; the key's fingerprint needs a parser this script does without)."""
    if not der:
        return
    security = health.get("security")
    tls = security.get("tls") if isinstance(security, dict) else None
    said = str(tls.get("certificate_sha256", "")) if isinstance(tls, dict) else ""
    got = hashlib.sha256(der).hexdigest().upper()
    if said.replace(":", "") != got:
        raise DeployError(
            f"the board's TLS certificate ({got}) is not the one its health check names "
            f"({said or 'none'}): something between ssh and the daemon answers"
        )
