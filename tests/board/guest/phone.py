"""The phone's HTTP client, run by the board test inside the board VM, in network namespace
"phone" (the host end of the USB ECM link): `ip netns exec phone python3 phone.py ...`.

It speaks HTTPS and pins the board's key, as docs/security.md shows a client doing: the
fingerprint is --pin, else the one in /root/board-pin (which the test writes from what `make
deploy` kept); the token is sent only once the key is the pinned one. --plain speaks plain HTTP
instead. Prints one JSON line: {"status": 200, "body": {...}, "tls": "TLSv1.3"} for an answer,
{"error": "..."} when the connection failed or was lost, or the board's key was not the pinned
one ("PinMismatch: ..."). With --retry-until S, connection failures (not a pin mismatch) are
retried for S seconds: for reads after a re-enumeration, while the phone's link comes back.

The key's hash needs `cryptography`: the guest's python3 has none, so this script runs again
under the deployed release's Python, which has it.

  phone.py get /api/tools [--retry-until 60] [--pin sha256//...] [--plain]
  phone.py call TOOL '{"input": {...}}' [--token T] [--retry-until 60]
  phone.py put /api/media/images/NAME --file IMAGE [--token T]   (the file as the body)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import json
import os
import ssl
import sys
import time
from pathlib import Path

try:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
except ImportError:  # the guest's own python3: again under the release's, which has it
    # (argv[0] the venv's path: Python finds its venv from it, and a bare name would be
    # looked up on PATH, find the guest's python3 again, and loop)
    RELEASE_PYTHON = "/opt/fingertip/current/bin/python"
    if sys.executable == RELEASE_PYTHON:
        raise
    os.execv(RELEASE_PYTHON, [RELEASE_PYTHON, *sys.argv])

BOARD = "192.168.42.1"
PORT = 8080
PIN_FILE = "/root/board-pin"


class PinMismatch(Exception):
    """The board's key is not the pinned one: not retried, and no token was sent."""


def key_pin(der: bytes) -> str:
    key = x509.load_der_x509_certificate(der).public_key()
    spki = key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return "sha256//" + base64.b64encode(hashlib.sha256(spki).digest()).decode()


def connect(pin: str | None, timeout: float) -> http.client.HTTPConnection:
    if pin is None:
        return http.client.HTTPConnection(BOARD, PORT, timeout=timeout)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False  # the pin says which board this is
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection(BOARD, PORT, timeout=timeout, context=ctx)
    conn.connect()
    assert isinstance(conn.sock, ssl.SSLSocket)
    got = key_pin(conn.sock.getpeercert(binary_form=True) or b"")
    if got != pin:
        conn.close()
        raise PinMismatch(f"the board's key is {got}, not the pinned {pin}")
    return conn


def request(
    method: str, path: str, body: bytes | None, token: str | None, timeout: float,
    pin: str | None, content_type: str = "application/json",
) -> dict[str, object]:  # fmt: skip
    conn = connect(pin, timeout)
    headers = {"Content-Type": content_type}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body, headers)
        resp = conn.getresponse()
        out: dict[str, object] = {"status": resp.status, "body": json.loads(resp.read())}
        if isinstance(conn.sock, ssl.SSLSocket):
            out["tls"] = conn.sock.version()
        return out
    finally:
        conn.close()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("verb", choices=("get", "call", "put"))
    p.add_argument("target", help="a path (get) or a tool name (call)")
    p.add_argument("body", nargs="?", default='{"input": {}}')
    p.add_argument("--token")
    p.add_argument("--retry-until", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for a reply")
    p.add_argument("--pin", help="the board's fingerprint (default: /root/board-pin)")
    p.add_argument("--plain", action="store_true", help="plain HTTP, no TLS")
    p.add_argument("--file", help="put: the file sent as the body")
    args = p.parse_args()
    pin = None if args.plain else (args.pin or Path(PIN_FILE).read_text().strip())
    kind = "application/json"
    if args.verb == "get":
        method, path, body = "GET", args.target, None
    elif args.verb == "put":
        method, path, body = "PUT", args.target, Path(args.file).read_bytes()
        kind = "application/octet-stream"
    else:
        method, path, body = "POST", f"/api/tools/{args.target}", args.body.encode()
    deadline = time.monotonic() + args.retry_until
    while True:
        started = time.monotonic()
        try:
            out = request(method, path, body, args.token, args.timeout, pin, kind)
        except PinMismatch as exc:
            out = {"error": f"PinMismatch: {exc}"}
        except (OSError, http.client.HTTPException) as exc:
            if time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            out = {"error": f"{type(exc).__name__}: {exc}"}
        out["elapsed_s"] = round(time.monotonic() - started, 2)
        print(json.dumps(out), flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
