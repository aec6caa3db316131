"""The pins a host keeps for the boards it knows, as SSH keeps known_hosts.

One line per board address: `HOST:PORT FINGERPRINT [BOARD_ID]` (an IPv6 host in brackets), in
$XDG_CONFIG_HOME/fingertip/known_boards, else ~/.config/fingertip/known_boards. `make deploy`
writes it with the fingerprint it read from the board's health_check through ssh, a channel
the host already trusts; `fingertip discover` reads it and says whether the fingerprint each
board announces (DNS-SD TXT fp=, which anyone on the link can forge) is the one kept.

Standard library only: deploy/deploy.py and the one-shot CLI import it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from daemon.private_files import write_atomic

MAX_BYTES = 1 << 20  # a known_boards file larger than this is read this far
HEADER = "# fingertip known boards: HOST:PORT FINGERPRINT [BOARD_ID] (kept by make deploy)"


def default_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "fingertip" / "known_boards"


def endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def load(path: Path | None = None) -> dict[str, tuple[str, str]]:
    """endpoint -> (fingerprint, board id or ""); a missing or unreadable file is empty, and a
    line that is not `ENDPOINT FINGERPRINT [BOARD_ID]` is passed over."""
    path = path or default_path()
    try:
        with path.open("rb") as fh:
            text = fh.read(MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return {}
    known: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) in (2, 3) and fields[1].startswith("sha256//"):
            known[fields[0]] = (fields[1], fields[2] if len(fields) == 3 else "")
    return known


def remember(pins: Mapping[str, tuple[str, str]], path: Path | None = None) -> Path:
    """Keep `pins` (endpoint -> (fingerprint, board id)), replacing those endpoints' lines and
    keeping every other line; written atomically (a cut leaves the old file or the new)."""
    path = path or default_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        old = path.read_text(errors="replace").splitlines()
    except OSError:
        old = [HEADER]
    kept = [line for line in old if (line.split() or [""])[0] not in pins]
    lines = kept + [f"{ep} {fp} {board}".rstrip() for ep, (fp, board) in sorted(pins.items())]
    write_atomic(path, "".join(f"{line}\n" for line in lines).encode())
    return path


def verdict(
    known: Mapping[str, tuple[str, str]], addresses: Iterable[str], port: int, fingerprint: str
) -> str:
    """ "match" (a kept pin for one of the addresses is this fingerprint), "CHANGED" (a kept pin
    differs: an impostor, or the board was given a new key) or "new" (nothing kept)."""
    pins = {known[e][0] for a in addresses if (e := endpoint(a, port)) in known}
    if not pins:
        return "new"
    return "match" if pins == {fingerprint} else "CHANGED"
