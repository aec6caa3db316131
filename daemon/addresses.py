"""Which addresses only this machine can reach: a client's (daemon.auth: a token is needed from
anywhere else) and a listen address's (daemon.tls: loopback stays plain HTTP under "auto")."""

from __future__ import annotations

import functools
import ipaddress


@functools.lru_cache(maxsize=256)  # parsed on every request; clients are few
def is_loopback(remote: str | None) -> bool:
    """A client address (an IP, a v6 one possibly with its %zone) on loopback."""
    if not remote:
        return False
    try:
        return ipaddress.ip_address(remote.split("%")[0]).is_loopback
    except ValueError:
        return False


def loopback(address: str) -> bool:
    """A listen address only this machine can reach."""
    return address.lower() == "localhost" or is_loopback(address)
