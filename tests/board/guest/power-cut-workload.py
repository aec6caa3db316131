#!/usr/bin/env python3
"""The power-cut test's workload, run in the board VM (stdlib only): it types and taps through
the daemon's tools API on loopback (each call recorded in the flight recorder), rotates the
pairing token every ROTATE_EVERY calls, and once (at call --cert-at) has a new key and
certificate made (both removed, then SIGHUP: the daemon's certificate child writes them).
One JSON line per acknowledged step, flushed at once: the host timestamps each as it arrives,
so what it saw acknowledged before the cut is known outside the board.

  power-cut-workload.py --boot N --cert-at K
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

BASE = "http://127.0.0.1:8080/api/tools/"
STATE = "/var/lib/fingertip"
ROTATE_EVERY = 5  # tests/board/power_cut.py: MAX_STEPS


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def call(tool: str, args: dict[str, object]) -> dict[str, object]:
    body = json.dumps({"input": args}).encode()
    request = urllib.request.Request(
        BASE + tool, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        answer: dict[str, object] = json.loads(reply.read())
        return answer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--boot", type=int, required=True)
    parser.add_argument("--cert-at", type=int, required=True)
    args = parser.parse_args()
    say(ready=True)
    seq = 0
    while True:
        seq += 1
        marker = f"b{args.boot}s{seq}"
        if seq % 2:
            tool, tool_args = "keyboard_text", {"text": marker}
        else:  # a unique point per step: the record is found by its arguments
            tool = "touch_gesture"
            tool_args = {"type": "tap", "point": {"x": 1 + seq % 97, "y": 1 + args.boot % 97}}
        try:
            answer = call(tool, tool_args)
        except (urllib.error.URLError, OSError) as exc:
            say(seq=seq, failed=str(exc))
            time.sleep(0.5)
            continue
        say(seq=seq, tool=tool, args=tool_args, is_error=answer.get("is_error"))
        if seq % ROTATE_EVERY == 0:
            say(rotating=seq)
            done = subprocess.run(["fingertip", "token", "rotate"], capture_output=True)
            if done.returncode:
                say(rotate_failed=seq, error=done.stderr.decode(errors="replace")[-300:])
            else:
                with open(f"{STATE}/pairing-token") as fh:
                    say(rotated=seq, token=fh.read().strip())
        if seq == args.cert_at:
            say(certificate=seq)
            subprocess.run(
                ["rm", "-f", f"{STATE}/tls-key.pem", f"{STATE}/tls-cert.pem"], check=True
            )
            subprocess.run(["systemctl", "kill", "-s", "HUP", "fingertip"], check=True)


if __name__ == "__main__":
    sys.exit(main())
