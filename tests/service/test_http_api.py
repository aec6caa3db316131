"""The HTTP tools API (simulated target): its rules (codec, statuses, guards, Host and Origin,
body limits, the tools behind it) against the daemon in this process, served by aiohttp's test
client (the `app` fixtures, tests/service/inprocess.py); what belongs to the process (listeners
off loopback, its token file across restarts, its log, sd_notify, its exit, the config's
checks) against the real fingertipd on loopback."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import cv2
import numpy as np
import pytest
from aiohttp import web

from tests.service.daemonproc import REPO, DaemonProcess, eventually, free_port, write_config
from tests.service.inprocess import InProcess, MakeApp

Daemon = DaemonProcess | InProcess


@contextlib.asynccontextmanager
async def request(
    d: Daemon, method: str, path: str, base: str | None = None, **kw: Any
) -> AsyncIterator[aiohttp.ClientResponse]:
    """One request to either daemon: the process over its base URL, the one in this process
    through its test client."""
    if isinstance(d, InProcess):
        assert base is None  # the test client serves loopback only
        async with d.client.request(method, path, **kw) as r:
            yield r
        return
    async with aiohttp.ClientSession() as s, s.request(method, (base or d.base) + path, **kw) as r:
        yield r


async def call(
    d: Daemon,
    tool: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    base: str | None = None,
) -> tuple[int, dict[str, Any]]:
    data = raw if raw is not None else json.dumps({"input": {}} if body is None else body).encode()
    async with request(
        d,
        "POST",
        f"/api/tools/{tool}",
        base,
        data=data,
        headers={"Content-Type": "application/json", **(headers or {})},
        ssl=False,  # off loopback: the daemon's own certificate (tests/service/test_tls.py)
    ) as r:
        return r.status, await r.json()


async def get(d: Daemon, path: str, **kw: Any) -> tuple[int, Any]:
    async with request(d, "GET", path, **kw) as r:
        ctype = r.headers.get("Content-Type", "")
        return r.status, (await r.json() if "json" in ctype else await r.text())


RESPONSE_KEYS = {"tool", "raw_input", "output", "is_error", "duration_ms", "called_at"}


def assert_shape(body: dict[str, Any]) -> None:
    assert set(body) >= RESPONSE_KEYS
    assert isinstance(body["output"], str)
    assert body["called_at"].endswith("Z")


async def test_list_tools_shape(app: InProcess) -> None:
    status, body = await get(app, "/api/tools")
    assert status == 200
    names = [t["name"] for t in body["tools"]]
    assert names == sorted(names)
    assert {"health_check", "screenshot", "shell", "weather", "wait_for_wakeup"} <= set(names)
    # Internal maintenance tools are never listed; unregistered ones never appear.
    assert not {"skill_manage", "skill_mark_used", "current_time", "calculator"} & set(names)
    shell = next(t for t in body["tools"] if t["name"] == "shell")
    assert shell["http"] == {"method": "POST", "path": "/api/tools/shell"}
    assert shell["input_mode"] == "json"
    assert json.loads(shell["example_input"]) == {"command": "pwd"}
    assert shell["args_schema"]["additionalProperties"] is False
    assert shell["category"] == "system"


async def test_health_check(app: InProcess) -> None:
    status, body = await call(app, "health_check", {"input": {}})
    assert status == 200, body
    assert_shape(body)
    out = json.loads(body["output"])
    assert out["ok"] is True and out["platform"] == "ios" and out["backend"] == "simulated"
    assert body["tool"]["name"] == "health_check"
    assert body["raw_input"] == "{}"


async def test_screenshot_is_a_real_jpeg(app: InProcess) -> None:
    status, body = await call(app, "screenshot", {"input": {"quality": 70}})
    assert status == 200, body
    out = json.loads(body["output"])
    assert out["format"] == "jpeg"
    data = base64.b64decode(out["data"])
    assert len(data) == out["size"]
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert img.shape[1] == out["width"] and img.shape[0] == out["height"]
    status, body = await call(app, "screenshot", {"input": {"max_width": 270, "format": "png"}})
    out = json.loads(body["output"])
    assert out["format"] == "png" and out["width"] == 270


async def test_raw_input(app: InProcess) -> None:
    status, body = await call(app, "shell", {"raw_input": '{"command":"echo raw"}'})
    assert status == 200, body
    assert json.loads(body["output"])["stdout"] == "raw\n"
    assert body["raw_input"] == '{"command":"echo raw"}'


async def test_shell_run_and_timeout(app: InProcess) -> None:
    _, body = await call(app, "shell", {"input": {"command": "pwd; echo err >&2; exit 3"}})
    out = json.loads(body["output"])
    assert out["exit_code"] == 3 and out["stderr"] == "err\n" and not out["timed_out"]
    assert Path(out["stdout"].strip()).resolve() == app.state_dir.resolve()
    _, body = await call(app, "shell", {"input": {"command": "sleep 30", "timeout_s": 0.3}})
    out = json.loads(body["output"])
    assert out["timed_out"] is True and out["exit_code"] != 0


async def test_shell_output_is_capped(make_app: MakeApp) -> None:
    d = await make_app({"shell": {"max_output_bytes": 2048}})
    _, body = await call(
        d, "shell", {"input": {"command": "head -c 100000 /dev/zero | tr '\\0' x"}}
    )
    out = json.loads(body["output"])
    assert len(out["stdout"]) == 2048 and out["truncated"] is True


async def test_shell_background_session(app: InProcess) -> None:
    _, body = await call(app, "shell", {"input": {"action": "start", "command": "cat"}})
    sid = json.loads(body["output"])["session"]
    _, body = await call(
        app, "shell", {"input": {"action": "write", "session": sid, "input": "hello\n"}}
    )
    assert body["is_error"] is False, body
    text = ""

    async def echoed() -> bool:
        nonlocal text
        _, body = await call(app, "shell", {"input": {"action": "read", "session": sid}})
        text += json.loads(body["output"])["output"]
        return "hello" in text

    await eventually(echoed, "cat echoes what was written")
    assert text == "hello\n"
    _, body = await call(app, "shell", {"input": {"action": "list"}})
    assert [s["session"] for s in json.loads(body["output"])["sessions"]] == [sid]
    _, body = await call(app, "shell", {"input": {"action": "stop", "session": sid}})
    assert json.loads(body["output"])["running"] is False
    status, body = await call(app, "shell", {"input": {"action": "read", "session": sid}})
    assert status == 200 and body["is_error"] and body["error"]["code"] == "shell_session_not_found"


async def test_shell_sessions_end_with_the_daemon(daemon: DaemonProcess) -> None:
    _, body = await call(daemon, "shell", {"input": {"action": "start", "command": "sleep 300"}})
    pid = json.loads(body["output"])["pid"]
    assert Path(f"/proc/{pid}").exists()
    assert daemon.stop() == 0
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


@pytest.fixture
def weather_server() -> Iterator[str]:
    """A small local stand-in for Open-Meteo on loopback (the real one is off this network)."""
    import asyncio
    import threading

    port = free_port()
    seen: list[str] = []

    async def geocode(request: web.Request) -> web.Response:
        seen.append(str(request.rel_url))
        if request.query["name"] == "Nowhere":
            return web.json_response({})
        return web.json_response(
            {
                "results": [
                    {"name": "Shanghai", "country": "China", "latitude": 31.2, "longitude": 121.5}
                ]
            }
        )

    async def forecast(request: web.Request) -> web.Response:
        seen.append(str(request.rel_url))
        return web.json_response(
            {
                "current": {"temperature_2m": 21.5, "weather_code": 3},
                "current_units": {"temperature_2m": "°C"},
                "daily": {"time": ["2026-11-30", "2026-12-01"], "temperature_2m_max": [23, 24]},
            }
        )

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.add_routes([web.get("/geo", geocode), web.get("/forecast", forecast)])
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


async def test_weather(make_daemon: Callable[..., DaemonProcess], weather_server: str) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    d = make_daemon(
        {
            "weather": {
                "geocoding_url": weather_server + "/geo",
                "forecast_url": weather_server + "/forecast",
            }
        }
    )
    _, body = await call(d, "weather", {"input": {"location": "Shanghai"}})
    out = json.loads(body["output"])
    assert out["location"]["name"] == "Shanghai" and out["current"]["temperature_2m"] == 21.5
    assert out["forecast"][1] == {"time": "2026-12-01", "temperature_2m_max": 24}
    _, body = await call(d, "weather", {"input": {"location": "Nowhere"}})
    assert body["error"]["code"] == "weather_location_not_found"
    status, body = await call(d, "weather", {"input": {}})
    assert status == 400 and body["error"]["code"] == "tool_arguments_invalid"
    offline = make_daemon({"weather": {"geocoding_url": closed, "forecast_url": closed}})
    status, body = await call(offline, "weather", {"input": {"latitude": 1.0, "longitude": 2.0}})
    assert status == 200 and body["is_error"] is True
    assert body["error"] == {**body["error"], "code": "weather_unavailable", "retryable": True}


async def test_wait_for_wakeup(app: InProcess) -> None:
    _, body = await call(app, "wait_for_wakeup", {"input": {"reason": "user said goodnight"}})
    out = json.loads(body["output"])
    assert out["wait_for_wakeup_requested"] is True and out["sleep_requested"] is True
    assert out["wait_for_wakeup_reason"] == out["sleep_reason"] == "user said goodnight"
    _, body = await call(app, "health_check")
    assert json.loads(body["output"])["run_state"] == "waiting_for_wakeup"


async def test_tool_skills_bundle(make_app: MakeApp, tmp_path: Path) -> None:
    skill = tmp_path / "skills" / "planner"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: planner\ndescription: Plans trips.\n---\n# Plan\nStep 1.\n"
    )
    d = await make_app({"skills": {"dir": str(tmp_path / "skills")}})
    status, text = await get(d, "/api/tool-skills")
    assert status == 200
    front, _, body = text.partition("\n---\n")
    assert front.startswith("---\nname: fingertip\ndescription:")
    allowed = [ln.strip()[2:] for ln in front.splitlines() if ln.startswith("    - ")]
    assert "screenshot" in allowed and "skill_planner" in allowed and "shell" in allowed
    assert "## screenshot" in body and "curl -X POST" in body
    # The skill is a text-mode tool returning its content.
    _, listing = await get(d, "/api/tools")
    entry = next(t for t in listing["tools"] if t["name"] == "skill_planner")
    assert entry["input_mode"] == "text"
    _, body2 = await call(d, "skill_planner", {"raw_input": "planner"})
    assert json.loads(body2["output"])["content"].endswith("Step 1.\n")


# Replaces: a skills folder with manage/SKILL.md (skill_manage is an internal tool's name), or
# with "web search" and "web_search": the daemon exited, "tool ... registered twice".
async def test_a_skill_whose_name_is_taken_is_left_out_and_the_daemon_starts(
    make_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    folder = tmp_path / "skills"
    for dirname, name in (("a", "web search"), ("b", "web_search"), ("manage", "manage")):
        (folder / dirname).mkdir(parents=True)
        (folder / dirname / "SKILL.md").write_text(f"---\nname: {name}\n---\nFrom {dirname}.\n")
    d = make_daemon({"skills": {"dir": str(folder)}})
    _, listing = await get(d, "/api/tools")
    assert [t["name"] for t in listing["tools"] if t["name"].startswith("skill_")] == [
        "skill_web_search"
    ]
    _, body = await call(d, "skill_web_search", {"raw_input": ""})
    assert json.loads(body["output"])["content"] == "---\nname: web search\n---\nFrom a.\n"
    left_out = [e for e in d.log_events() if e.get("event") == "skill_left_out"]
    assert sorted(e["path"].split("/")[-2] for e in left_out) == ["b", "manage"], left_out


@pytest.mark.parametrize(
    ("tool", "raw", "status", "code"),
    [
        ("health_check", b"{not json", 400, "tool_call_payload_invalid"),
        ("health_check", b"[1, 2]", 400, "tool_call_payload_invalid"),
        ("health_check", b'{"input": {}, "raw_input": "{}"}', 400, "tool_call_payload_invalid"),
        ("health_check", b'{"inptu": {}}', 400, "tool_call_payload_invalid"),
        ("shell", b'{"raw_input": "pwd"}', 400, "tool_call_payload_invalid"),
        ("no_such_tool", b'{"input": {}}', 404, "tool_not_found"),
        ("skill_manage", b'{"input": {}}', 404, "tool_not_found"),
        ("calculator", b'{"input": {}}', 404, "tool_not_found"),
        ("shell", b'{"input": {"command": 5}}', 400, "tool_arguments_invalid"),
        ("health_check", b'{"input": {"extra": 1}}', 400, "tool_arguments_invalid"),
        ("screenshot", b'{"input": {"quality": null}}', 400, "tool_arguments_invalid"),
    ],
)
async def test_bad_input(app: InProcess, tool: str, raw: bytes, status: int, code: str) -> None:
    got, body = await call(app, tool, raw=raw)
    assert (got, body["error"]["code"]) == (status, code), body
    assert_shape(body)
    assert body["is_error"] is True
    assert json.loads(body["output"])["code"] == code


async def test_schema_errors_name_path_and_code(app: InProcess) -> None:
    _, body = await call(
        app, "screenshot", {"input": {"quality": None, "zoom": 2, "format": "gif"}}
    )
    errors = body["error"]["details"]["errors"]
    got = {(e["path"], e["code"]) for e in errors}
    assert ("$.quality", "null_not_allowed") in got
    assert ("$.format", "enum_value_invalid") in got
    assert any(e["code"] == "additional_property_not_allowed" for e in errors)
    assert body["error"]["details"]["valid"] is False


async def test_oversized_body(make_app: MakeApp) -> None:
    d = await make_app({"server": {"max_body_bytes": 4096}})
    status, body = await call(
        d, "shell", raw=json.dumps({"input": {"command": "x" * 10000}}).encode()
    )
    assert status == 413 and body["error"]["code"] == "request_too_large"
    status, _ = await call(d, "health_check")
    assert status == 200  # the daemon is unharmed


async def test_foreign_host_and_origin(app: InProcess) -> None:
    status, body = await call(app, "health_check", headers={"Host": "evil.example:8080"})
    assert status == 403 and body["error"]["code"] == "host_not_allowed"
    status, body = await call(
        app, "shell", {"input": {"command": "id"}}, headers={"Origin": "http://evil.example"}
    )
    assert status == 403 and body["error"]["code"] == "origin_not_allowed"
    status, body = await call(app, "health_check", headers={"Origin": app.base})
    assert status == 200


async def test_guard_denies_critical(make_app: MakeApp) -> None:
    d = await make_app({"guard": {"http": "read-write"}})
    status, body = await call(d, "shell", {"input": {"command": "id"}})
    assert status == 403 and body["error"]["code"] == "tool_execution_denied"
    _, listing = await get(d, "/api/tools")
    assert "shell" not in {t["name"] for t in listing["tools"]}
    ro = await make_app({"guard": {"http": "read-only"}})
    _, listing = await get(ro, "/api/tools")
    assert {t["name"] for t in listing["tools"]} >= {"screenshot", "health_check"}
    assert all(t["policy"] == "read" for t in listing["tools"])


@pytest.fixture
def offloop_addr() -> Iterator[str]:
    """A non-loopback address on this machine: a link-local /32 added to `lo`, so a request
    reaches the daemon from an address outside 127.0.0.0/8 while nothing leaves the machine."""
    addr = "169.254.231.1"
    made = subprocess.run(["ip", "addr", "add", f"{addr}/32", "dev", "lo"], capture_output=True)
    if made.returncode != 0:
        pytest.skip(
            f"cannot add a test address (needs root and iproute2): {made.stderr.decode().strip()}"
        )
    try:
        yield addr
    finally:
        subprocess.run(["ip", "addr", "del", f"{addr}/32", "dev", "lo"], capture_output=True)


async def test_token_required_off_loopback(
    make_daemon: Callable[..., DaemonProcess], offloop_addr: str
) -> None:
    d = make_daemon({"server": {"listen": ["127.0.0.1", offloop_addr]}})
    base = d.url(offloop_addr)  # https: TLS off loopback
    assert base.startswith("https://")
    status, body = await call(d, "shell", {"input": {"command": "true"}}, base=base)
    assert status == 401 and body["error"]["code"] == "auth_required"
    status, body = await call(
        d,
        "shell",
        {"input": {"command": "true"}},
        base=base,
        headers={"Authorization": "Bearer wrong"},
    )
    assert status == 401
    status, body = await call(
        d,
        "shell",
        {"input": {"command": "true"}},
        base=base,
        headers={"Authorization": f"Bearer {d.token}"},
    )
    assert status == 200 and not body["is_error"]
    status, body = await call(d, "health_check", base=base)  # read tools need no token
    assert status == 200
    # ... but those that show the phone's screen do, as the live stream does: a native app or
    # another host on the USB link could take a screenshot or read its text with no token
    for tool in ("screenshot", "screen_text"):
        status, body = await call(d, tool, base=base)
        assert status == 401 and body["error"]["code"] == "auth_required", body
        assert "screen" in body["error"]["message"]
        auth = {"Authorization": f"Bearer {d.token}"}
        status, body = await call(d, tool, base=base, headers=auth)
        assert status == 200 and not body["is_error"], body
    # On loopback the token is not needed.
    status, _ = await call(d, "shell", {"input": {"command": "true"}})
    assert status == 200


async def test_pairing_token_is_generated_once(make_daemon: Callable[..., DaemonProcess]) -> None:
    d = make_daemon()
    token = d.token
    assert len(token) >= 32 and (d.state_dir / "pairing-token").stat().st_mode & 0o777 == 0o600
    d.stop()
    d.start()
    assert d.token == token


async def test_invocations_are_logged_once(daemon: DaemonProcess) -> None:
    await call(daemon, "health_check")
    await call(daemon, "shell", raw=b'{"input": {"command": 1}}')
    daemon.stop()
    events = [e for e in daemon.log_events() if e.get("event") == "tool_invocation"]
    assert [(e["tool"], e["outcome"], e["error_code"]) for e in events] == [
        ("health_check", "ok", None),
        ("shell", "error", "tool_arguments_invalid"),
    ]
    assert all(isinstance(e["duration_ms"], int | float) for e in events)


async def test_sd_notify_ready_stopping_and_watchdog(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path, env={"WATCHDOG_USEC": "400000"}).start()

    await asyncio.sleep(0.6)
    assert d.stop() == 0
    notes = d.drain_notifications()
    assert notes[0] == "READY=1"
    assert "WATCHDOG=1" in notes
    assert notes[-1] == "STOPPING=1" or "STOPPING=1" in notes


@pytest.mark.parametrize(
    ("tables", "needle"),
    [
        ({"server": {"prot": 1}}, "server.prot: unknown key"),
        ({"server": {"port": 70000}}, "server.port:"),
        ({"device": {"device_type": "ios"}}, "device.device_type:"),
        ({"bogus": {}}, "bogus: unknown key"),
    ],
)
def test_bad_config_is_one_clear_line(tmp_path: Path, tables: dict[str, Any], needle: str) -> None:
    path = tmp_path / "bad.toml"
    write_config(path, tables)
    proc = subprocess.run(
        [sys.executable, "-m", "daemon", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_shipped_configs_validate() -> None:
    for name in ("fingertip.toml", "fingertip.dev.toml"):
        proc = subprocess.run(
            [sys.executable, "-m", "daemon", "--check", "--config", str(REPO / "etc" / name)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
