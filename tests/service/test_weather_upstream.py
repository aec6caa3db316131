"""weather against a misbehaving upstream (issue 15): a FAKE Open-Meteo on loopback answers HTML,
replies with fields missing, daily series shorter than their days, and an endless body. Each is
one stable tool error, never a 500, and the endless body costs the daemon a bounded amount of
memory."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import web

from tests.service.daemonproc import DaemonProcess, free_port
from tests.service.test_http_api import call

CHUNK = b" " * 65536  # JSON whitespace: whatever reads it all finds no value at the end
# The endless body ends after this much anyway, so a daemon that reads it all (today's main
# did) cannot take the machine's memory down with it.
SAFETY_STOP = 256 << 20


@pytest.fixture
def fake_open_meteo() -> Iterator[str]:
    """A FAKE upstream on loopback, one misbehaviour per path."""
    port = free_port()

    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html><body>Sign in to the Wi-Fi</body></html>", status=200)

    async def geo_missing(request: web.Request) -> web.Response:
        return web.json_response({"results": [{"name": "Shanghai"}]})  # no latitude/longitude

    async def forecast_missing(request: web.Request) -> web.Response:
        return web.json_response({"current_units": {}})  # no current, no daily

    async def forecast_short(request: web.Request) -> web.Response:
        daily = {"time": ["2026-12-01", "2026-12-02", "2026-12-03"], "temperature_2m_max": [3, 4]}
        return web.json_response({"current": {"temperature_2m": 2.0}, "daily": daily})

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        sent = 0
        try:
            while sent < SAFETY_STOP:
                await resp.write(CHUNK)
                sent += len(CHUNK)
        except (ConnectionError, RuntimeError):
            pass  # the client stopped reading: what we want
        return resp

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.add_routes(
        [
            web.get("/html", html),
            web.get("/geo-missing", geo_missing),
            web.get("/forecast-missing", forecast_missing),
            web.get("/forecast-short", forecast_short),
            web.get("/endless", endless),
        ]
    )
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def weather_daemon(
    make_daemon: Callable[..., DaemonProcess], base: str, geo: str, forecast: str
) -> DaemonProcess:
    return make_daemon(
        {"weather": {"geocoding_url": base + geo, "forecast_url": base + forecast, "timeout_s": 20}}
    )


async def assert_upstream_error(d: DaemonProcess, args: dict[str, Any]) -> None:
    status, body = await call(d, "weather", {"input": args})
    assert status == 200 and body["is_error"] is True, body
    assert body["error"]["code"] == "weather_upstream_error", body["error"]


LAT_LON = {"latitude": 31.2, "longitude": 121.5}


# Replaces: a captive portal answering HTML -> HTTP 500 (JSONDecodeError).
async def test_html_reply(make_daemon: Callable[..., DaemonProcess], fake_open_meteo: str) -> None:
    d = weather_daemon(make_daemon, fake_open_meteo, "/html", "/html")
    await assert_upstream_error(d, {"location": "Shanghai"})
    await assert_upstream_error(d, LAT_LON)


# Replaces: {"results":[{"name":"Shanghai"}]} -> 500 (KeyError 'latitude');
# {"current_units":{}} from the forecast -> a result with nothing in it.
async def test_missing_fields(
    make_daemon: Callable[..., DaemonProcess], fake_open_meteo: str
) -> None:
    d = weather_daemon(make_daemon, fake_open_meteo, "/geo-missing", "/forecast-missing")
    await assert_upstream_error(d, {"location": "Shanghai"})
    await assert_upstream_error(d, LAT_LON)


# Replaces: daily with 3 days and 2 temperatures -> 500 (IndexError).
async def test_short_daily_series(
    make_daemon: Callable[..., DaemonProcess], fake_open_meteo: str
) -> None:
    d = weather_daemon(make_daemon, fake_open_meteo, "/html", "/forecast-short")
    await assert_upstream_error(d, LAT_LON)


# Replaces: a 200 MB upstream body -> read whole (daemon RSS 893 MB), then a 500.
async def test_endless_body_is_cut_at_the_cap(
    make_daemon: Callable[..., DaemonProcess], fake_open_meteo: str
) -> None:
    d = weather_daemon(make_daemon, fake_open_meteo, "/endless", "/endless")
    before = d.memory_kib("VmRSS")
    replies = [await call(d, "weather", {"input": a}) for a in (LAT_LON, {"location": "X"})]
    grown = d.memory_kib("VmHWM") - before
    assert grown < 32 << 10, f"peak RSS grew {grown} KiB reading a capped reply"
    for status, body in replies:
        assert status == 200 and body["error"]["code"] == "weather_upstream_error", body
