"""The phone's HTTP client, run by the board test inside the board VM, in network namespace
"phone" (the host end of the USB ECM link): `ip netns exec phone python3 phone.py ...`.

Standard library only (it runs on the guest's own python3). Prints one JSON line:
{"status": 200, "body": {...}} for an answer, {"error": "..."} when the connection failed or
was lost. With --retry-until S, connection failures are retried for S seconds: for reads after
a re-enumeration, while the phone's link comes back.

  phone.py get /api/tools [--retry-until 60]
  phone.py call TOOL '{"input": {...}}' [--token T] [--retry-until 60]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time

BOARD = "192.168.42.1"
PORT = 8080


def request(
    method: str, path: str, body: bytes | None, token: str | None, timeout: float
) -> dict[str, object]:
    conn = http.client.HTTPConnection(BOARD, PORT, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body, headers)
        resp = conn.getresponse()
        return {"status": resp.status, "body": json.loads(resp.read())}
    finally:
        conn.close()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("verb", choices=("get", "call"))
    p.add_argument("target", help="a path (get) or a tool name (call)")
    p.add_argument("body", nargs="?", default='{"input": {}}')
    p.add_argument("--token")
    p.add_argument("--retry-until", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for a reply")
    args = p.parse_args()
    if args.verb == "get":
        method, path, body = "GET", args.target, None
    else:
        method, path, body = "POST", f"/api/tools/{args.target}", args.body.encode()
    deadline = time.monotonic() + args.retry_until
    while True:
        started = time.monotonic()
        try:
            out = request(method, path, body, args.token, args.timeout)
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
