"""/api/sim/* follows the catalog's rule (issues 15 and 35), Caller.authorize: observing is a
read that shows what was typed, so it is private like the screen; a fault is a write, so it
needs the token wherever a write tool does, and a client token's max policy applies to it.
The rule is the application's: tested on the daemon in this process (tests/service/inprocess.py)."""

from __future__ import annotations

from typing import Any

from tests.service.inprocess import InProcess, MakeApp
from tests.service.test_input_tools import FAST, FIELD, tile

READER = "a-read-only-client-token-for-sim-control"
WRITER = "a-read-write-client-token-for-sim-control"
TOKENS = [{"token": READER, "max_policy": "read"}, {"token": WRITER, "max_policy": "write"}]


async def call(d: InProcess, method: str, path: str, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with d.client.request(method, path, headers=headers) as r:
        return r.status, await r.json()


# Replaces: curl -X POST http://127.0.0.1:8080/api/sim/unplug  (200 with require_on_loopback)
async def test_sim_faults_need_the_token_like_write_tools(
    make_app: MakeApp,
) -> None:
    d = await make_app({"auth": {"require_on_loopback": True}})
    # The same caller, the same rule: a write tool and a sim fault are both refused...
    status, body = await call(d, "POST", "/api/tools/keyboard_text")
    assert status == 401 and body["error"]["code"] == "auth_required"
    status, body = await call(d, "POST", "/api/sim/unplug")
    assert status == 401 and body["error"]["code"] == "auth_required" and body["is_error"]
    status, body = await call(d, "POST", "/api/sim/unplug", token="wrong")
    assert status == 401
    assert (await d.sim_state())["attached"] is True  # refused means not done
    # ...and both pass with the pairing token.
    status, body = await call(d, "POST", "/api/sim/unplug", token=d.token)
    assert status == 200 and body["attached"] is False
    assert (await d.sim_state())["attached"] is False


# Replaces: a read-only client token, curl -X POST -H 'Authorization: Bearer R' .../api/sim/unplug
# (200: the target unplugged), and curl .../api/sim/state without a token ("hunter2" shown
# keystroke by keystroke while screenshot was refused 401).
async def test_sim_control_follows_client_policy_and_keeps_the_typed_text_private(
    make_app: MakeApp,
) -> None:
    d = await make_app(
        {"auth": {"require_on_loopback": True, "client_tokens": TOKENS}, "input": dict(FAST)}
    )
    for tool, args in (
        ("touch_gesture", {"type": "tap", "point": tile("ios", "Notes")}),
        ("enter_text", {"point": FIELD, "text": "hunter2"}),
    ):
        async with d.client.post(
            f"/api/tools/{tool}",
            json={"input": args},
            headers={"Authorization": f"Bearer {d.token}"},
        ) as r:
            assert r.status == 200 and (await r.json())["is_error"] is False
    # A read-only client: no write tool, and no fault either; the target stays plugged in.
    status, body = await call(d, "POST", "/api/tools/keyboard_tap", token=READER)
    assert status == 403 and body["error"]["code"] == "tool_execution_denied"
    for action in ("unplug", "capture_off", "animate_on", "profile"):
        status, body = await call(d, "POST", f"/api/sim/{action}", token=READER)
        assert status == 403 and body["error"]["code"] == "tool_execution_denied", (action, body)
    state = await d.sim_state()
    assert state["attached"] is True and state["capture"] is True and state["profile"] == "full"
    # The state shows what was typed: like a screenshot, not without the token...
    for method, path in (("GET", "/api/sim/state"), ("POST", "/api/sim/state")):
        status, body = await call(d, method, path)
        assert status == 401 and body["error"]["code"] == "auth_required", (path, body)
        assert "hunter2" not in str(body) and "hunter" not in str(body)
    status, body = await call(d, "POST", "/api/tools/screenshot")
    assert status == 401  # the rule it now shares
    # ...and with any valid token (a read is within a read-only client's policy).
    status, body = await call(d, "GET", "/api/sim/state", token=READER)
    assert status == 200 and body["texts"]["Notes"] == "hunter2", body
    # A read-write client may inject a fault, as it may call a write tool.
    status, body = await call(d, "POST", "/api/sim/unplug", token=WRITER)
    assert status == 200 and body["attached"] is False
