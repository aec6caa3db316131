"""The daemon in this process: built by daemon.service.build from the same config a
DaemonProcess gets, its parts started (daemon.lifecycle) but for the HTTP server and its
listeners, and its aiohttp application served by aiohttp's test client on loopback.

For the HTTP rules (codec, statuses, guards, tokens, Host and Origin, body limits), which the
application decides and which need no process of their own: no interpreter start and no import
of the whole daemon per test. What belongs to the process (its listeners and their caps, TLS,
signals, sd_notify, its log, its exit) stays with tests/service/daemonproc.py. The daemon's
orjson switch (daemon.wire.use_orjson, process-wide) is left off here: replies go through the
stdlib path, the same bytes by daemon.wire's contract (tests/unit/test_wire_orjson.py)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from daemon import config as cfg
from daemon.auth import ensure_state_dir
from daemon.lifecycle import Lifecycle
from daemon.service import Daemon, build
from tests.service.daemonproc import daemon_tables, free_port

# The parts the test client stands in for.
SERVED_BY_THE_TEST_CLIENT = ("http server", "listeners")


@dataclass
class InProcess:
    daemon: Daemon
    client: TestClient[Any, Any]
    tables: dict[str, dict[str, Any]]
    lifecycle: Lifecycle

    @property
    def base(self) -> str:
        """The origin a browser on the daemon's own page would send."""
        return f"http://127.0.0.1:{self.client.port}"

    @property
    def state_dir(self) -> Path:
        return self.daemon.config.state_dir

    @property
    def token(self) -> str:
        configured: str = self.tables.get("auth", {}).get("token", "")
        return configured or (self.state_dir / "pairing-token").read_text().strip()

    async def sim_state(self) -> Any:
        """The simulated target's state (private like the screen: with the pairing token)."""
        auth = {"Authorization": f"Bearer {self.token}"}
        async with self.client.get("/api/sim/state", headers=auth) as r:
            assert r.status == 200, await r.text()
            return await r.json()

    async def health(self) -> dict[str, Any]:
        """health_check's result."""
        async with self.client.post("/api/tools/health_check", json={"input": {}}) as r:
            return dict(json.loads((await r.json())["output"]))


MakeApp = Callable[..., Awaitable[InProcess]]  # the make_app fixture (tests/service/conftest.py)


async def start(
    tmp: Path, make_client: Any, overrides: dict[str, dict[str, Any]] | None = None
) -> InProcess:
    """Build and start one daemon in `tmp`; `make_client` is pytest-aiohttp's aiohttp_client."""
    port = free_port()  # the configured port is the test server's: Host checks pass as on a board
    tables = daemon_tables(tmp, port, overrides)
    config = cfg.from_mapping(tables)
    ensure_state_dir(config.state_dir)
    daemon = build(config)
    life = Lifecycle([p for p in daemon.lifecycle.parts if p.name not in SERVED_BY_THE_TEST_CLIENT])
    await life.start()
    try:
        client = await make_client(daemon.app, server_kwargs={"port": port})
    except BaseException:
        await life.stop()
        raise
    return InProcess(daemon, client, tables, life)


async def stop(served: InProcess) -> None:
    await served.client.close()  # the connections first, as the daemon's own shutdown does
    assert await served.lifecycle.stop() == []
