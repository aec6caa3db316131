"""GET /metrics: the daemon's counters (daemon.metrics counts them) in the Prometheus text
format. Who may scrape is declared with the route: open like a read tool (no token off
loopback, nothing while the HTTP guard is disabled); Host and Origin are the security
middleware's."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from daemon.catalog import Caller
from daemon.metrics import Metrics
from daemon.transports.routes import Route, data

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def routes(metrics: Metrics) -> list[Route]:
    # Scrapes run one at a time in a thread of their own (they read /proc): a flood of them
    # queues here, never in the loop's default executor, where profile switches and
    # screenshots run.
    scraper = ThreadPoolExecutor(1, thread_name_prefix="metrics-scrape")

    async def scrape(request: web.Request, caller: Caller) -> web.Response:
        body = await asyncio.get_running_loop().run_in_executor(scraper, metrics.scrape)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    return [Route("GET", "/metrics", scrape, data("/metrics"))]
