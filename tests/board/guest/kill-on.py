"""kill-on.py FILE LINE TEXT UNIT: from line LINE of FILE on (as it grows), wait for a line
containing TEXT, then SIGKILL systemd unit UNIT at once. Prints {"armed": ...} once it follows
the file and {"killed": ...} after the kill, one JSON line each. Run inside the
board VM (standard library only) by the board test, so that a kill meant to land mid-isolation
is not late by a round trip through ssh on a busy machine: it follows the recorder's own output
file, in the guest, and acts on the line the moment it is written.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


def main(path: str, line: str, text: str, unit: str) -> int:
    tail = subprocess.Popen(
        ["tail", "-n", f"+{line}", "-F", path], stdout=subprocess.PIPE, text=True
    )
    assert tail.stdout is not None
    print(json.dumps({"armed": path, "from_line": int(line)}), flush=True)
    try:
        for row in tail.stdout:
            if text in row:
                subprocess.run(["systemctl", "kill", "--signal=SIGKILL", unit], check=True)
                print(json.dumps({"killed": unit, "t": round(time.monotonic(), 3)}), flush=True)
                return 0
    finally:
        tail.kill()
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
