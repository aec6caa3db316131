"""/api/sim/* follows the tools API's token rule (issue 15): observing is a read, a fault is a
write, so with [auth].require_on_loopback a fault needs the pairing token even on loopback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp

from tests.service.daemonproc import DaemonProcess


async def post(d: DaemonProcess, path: str, token: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as s, s.post(d.base + path, headers=headers) as r:
        return r.status, await r.json()


# Replaces: curl -X POST http://127.0.0.1:8080/api/sim/unplug  (200 with require_on_loopback)
async def test_sim_faults_need_the_token_like_write_tools(
    make_daemon: Callable[..., DaemonProcess],
) -> None:
    d = make_daemon({"auth": {"require_on_loopback": True}})
    # The same caller, the same rule: a write tool and a sim fault are both refused...
    status, body = await post(d, "/api/tools/keyboard_text")
    assert status == 401 and body["error"]["code"] == "auth_required"
    status, body = await post(d, "/api/sim/unplug")
    assert status == 401 and body["error"]["code"] == "auth_required" and body["is_error"]
    status, body = await post(d, "/api/sim/unplug", token="wrong")
    assert status == 401
    assert d.sim_state()["attached"] is True  # refused means not done
    # ...and both pass with the pairing token.
    status, body = await post(d, "/api/sim/unplug", token=d.token)
    assert status == 200 and body["attached"] is False
    # Observing is a read: like read tools, no token needed.
    assert d.sim_state()["attached"] is False
