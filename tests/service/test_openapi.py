"""GET /api/openapi.json against the real daemon: the description follows the catalog, and
schemathesis fuzzing the running daemon from it finds no 5xx and no response that differs from
what it describes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from typing import Any

import jsonschema

from daemon.errors import CALL_STATUS as STATUS
from tests.service.daemonproc import REPO, DaemonProcess, free_port

ARTIFACTS = REPO / "test-artifacts"
SEED = 20261130
MAX_EXAMPLES = 12  # per operation in the fuzzing phase; the explicit examples run as well


def fuzz_overrides() -> dict[str, dict[str, Any]]:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: weather fails fast, offline
    return {
        # read-write: the critical shell is neither described nor callable (403 if tried).
        "guard": {"http": "read-write"},
        # Fuzzed gestures may ask for minutes of holding; the server-side limit cuts them.
        "server": {"hid_timeout_s": 2.0},
        # The simulator needs none of a phone's settling time; fuzzing needs many calls.
        "input": {
            "typing_rate_cps": 1000.0,
            "evidence_timeout_ms": 200,
            "evidence_stable_ms": 0,
            "wheel_interval_ms": 0.0,
            "enter_text_delay_ms": 0,
            "search_open_ms": 0,
            "isolation_settle_ms": 0.0,
            "drag_limit_s": 1.0,
        },
        "weather": {"geocoding_url": closed + "/geo", "forecast_url": closed + "/forecast"},
    }


# Read tools that need the token off loopback all the same: a phone's screen is private.
SHOWS_THE_SCREEN = {"screenshot", "wait_for_stable_screen", "screen_text", "find_text"}
# Private reads besides the screen: what the target saved on a drive (daemon/tools/media.py).
PRIVATE_READS = SHOWS_THE_SCREEN | {"media_files", "media_file_read"}


async def test_document_follows_the_catalog(make_daemon: Callable[..., DaemonProcess]) -> None:
    reader = "r" * 24
    d = make_daemon(
        {
            "guard": {"http": "read-write"},
            "auth": {"client_tokens": [{"token": reader, "max_policy": "read"}]},
        }
    )
    doc = d.get_json("/api/openapi.json")
    assert doc["openapi"] == "3.1.0"
    listed = {t["name"]: t for t in d.get_json("/api/tools")["tools"]}
    tool_paths = {p.removeprefix("/api/tools/") for p in doc["paths"] if p.count("/") == 3}
    assert tool_paths == set(listed) and "shell" not in tool_paths  # one path per listed tool
    for name, entry in listed.items():
        op = doc["paths"][f"/api/tools/{name}"]["post"]
        assert op["operationId"] == name and op["tags"] == [entry["category"]]
        body = op["requestBody"]["content"]["application/json"]
        assert body["schema"]["properties"]["input"] in (
            entry["args_schema"],
            {"anyOf": [{"type": "string"}, entry["args_schema"]]},
        )
        jsonschema.validate(body["example"], body["schema"])  # the catalog's example fits
        # Every error status of the HTTP codec is described with its codes.
        for status in {s for s in STATUS.values() if s != 404}:
            if status == 401 and entry["policy"] == "read" and name not in PRIVATE_READS:
                assert "401" not in op["responses"]
                continue
            codes = op["responses"][str(status)]["content"]["application/json"]["schema"]
            expected = sorted(c for c, s in STATUS.items() if s == status)
            assert codes["properties"]["error"]["properties"]["code"]["enum"] == expected
    shot = doc["paths"]["/api/tools/screenshot"]["post"]["responses"]["200"]
    content = shot["content"]["application/json"]["schema"]["then"]["properties"]["output"]
    assert content["contentSchema"]["properties"]["data"]["contentEncoding"] == "base64"

    # The description is per caller, like the listing: a read-only client token sees reads.
    req = urllib.request.Request(
        d.base + "/api/openapi.json", headers={"Authorization": f"Bearer {reader}"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        ro = json.loads(resp.read())
    ops = [v["post"] for p, v in ro["paths"].items() if "post" in v]
    assert ops and all(op["x-policy"] == "read" for op in ops)


# -- fuzzing ---------------------------------------------------------------------------------

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "output_matches_description",  # tests/service/schemathesis_hooks.py
)


def test_fuzz_matches_description(make_daemon: Callable[..., DaemonProcess]) -> None:
    """Schemathesis's CLI (its pytest plugin does not run under pytest 9) over every described
    operation: the catalog's examples, then generated valid and invalid bodies."""
    d = make_daemon(fuzz_overrides())
    ARTIFACTS.mkdir(exist_ok=True)
    report = ARTIFACTS / "schemathesis.json"
    report.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{d.base}/api/openapi.json",
        "--checks",
        ",".join(CHECKS),
        "--phases",
        "examples,fuzzing",
        "--mode",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        "20",
        "--suppress-health-check",
        "too_slow,filter_too_much",
        "--report",
        "json",
        "--report-json-path",
        str(report),
        "--no-color",
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.service.schemathesis_hooks"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    (ARTIFACTS / "schemathesis.txt").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    summary = json.loads(report.read_text())
    described = d.get_json("/api/openapi.json")["paths"]
    operations = {f"{m.upper()} {p}" for p, ops in described.items() for m in ops}
    assert "POST /api/tools/shell" not in operations
    # Every operation was exercised, by a bounded, failure-free run.
    assert set(summary["valid_rates"]) >= operations - {"GET /api/openapi.json"}
    assert summary["test_cases"]["with_failures"] == 0 and not summary["errors"]
    assert 100 <= summary["test_cases"]["generated"] <= 1000
