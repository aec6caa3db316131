"""TLS on the real daemon (daemon/tls/): HTTPS, wss, MCP, the stream, the flight recorder and
/metrics on one port, reached by real clients that pin the board's key (curl --pinnedpubkey,
the Python and WebSocket examples of docs/security.md, run as they are written); plain HTTP
refused with a 400; old protocols, weak suites, garbage and silence refused; the certificate
kept across restarts, renewed with its key, and a user's one reloaded on SIGHUP (a broken one
leaves the old one serving). Loopback stays plain and never loads `cryptography`."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from daemon import tls
from tests.service.daemonproc import REPO, UNPINNED, DaemonProcess, eventually

Make = Callable[..., DaemonProcess]
TLS_ON: dict[str, dict[str, Any]] = {"server": {"tls": "on", "header_timeout_s": 2.0}}
DOC = REPO / "docs" / "security.md"


def served(port: int, host: str = "127.0.0.1", context: ssl.SSLContext = UNPINNED) -> bytes:
    """The DER certificate a fresh handshake gets."""
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        context.wrap_socket(raw) as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der
    return der


def key_pin(der: bytes) -> str:
    spki = (
        x509.load_der_x509_certificate(der)
        .public_key()
        .public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    )
    return "sha256//" + base64.b64encode(hashlib.sha256(spki).digest()).decode()


def events(d: DaemonProcess, name: str) -> list[dict[str, Any]]:
    return [e for e in d.log_events() if e.get("event") == name]


async def logged(d: DaemonProcess, name: str, count: int = 1) -> list[dict[str, Any]]:
    return list(await eventually(lambda: len(events(d, name)) >= count and events(d, name), name))


def doc_example(name: str) -> str:
    """The Python block of docs/security.md whose first line names it."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    (block,) = [b for b in blocks if b.startswith(f"# {name}")]
    return block


def run_example(name: str, env: dict[str, str], tmp: Path) -> subprocess.CompletedProcess[str]:
    script = tmp / name
    script.write_text(doc_example(name))
    return subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def raw_exchange(port: int, data: bytes, timeout: float = 20.0) -> tuple[bytes, float]:
    """Send `data` on a plain TCP connection; what comes back until the daemon closes it, and
    how long that took."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        if data:
            s.sendall(data)
        got = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := s.recv(65536):
                got += chunk
    return got, time.monotonic() - start


def test_loopback_stays_plain_and_never_loads_cryptography(daemon: DaemonProcess) -> None:
    assert daemon.base.startswith("http://")
    security = daemon.health()["security"]
    assert security["listeners"] == [
        {"address": "127.0.0.1", "port": daemon.port, "tls": False, "loopback": True}
    ]
    assert security["tls"] == {"mode": "auto"}
    assert security["warnings"] == []
    assert not list(daemon.state_dir.glob("tls-*"))  # nothing made, no child run
    assert daemon.proc is not None
    maps = Path(f"/proc/{daemon.proc.pid}/maps").read_text()
    assert "cryptography" not in maps and "_rust.abi3" not in maps


async def test_every_route_over_pinned_tls(make_daemon: Make, tmp_path: Path) -> None:
    d = make_daemon(TLS_ON)
    assert d.base.startswith("https://")
    health = d.health()
    cert = health["security"]["tls"]
    der = served(d.port)
    # The fingerprint the daemon reports is its key's, as a client computes it.
    assert cert["fingerprint"] == key_pin(der)
    assert cert["certificate_sha256"].replace(":", "") == hashlib.sha256(der).hexdigest().upper()
    assert cert["source"] == "self-made" and "IP:127.0.0.1" in cert["names"]
    (ready,) = events(d, "tls_ready")
    assert ready["fingerprint"] == cert["fingerprint"]  # in the log at start too
    posture = events(d, "security_posture")[0]
    assert posture["listeners"][0]["tls"] is True

    # curl pins the key: the right pin gets the answer, a wrong one nothing at all.
    url = f"{d.base}/api/tools/health_check"
    curl = ["curl", "-sS", "-k", "-X", "POST", url, "-d", '{"input":{}}']
    curl += ["-H", "Content-Type: application/json"]
    ok = subprocess.run([*curl, "--pinnedpubkey", cert["fingerprint"]], capture_output=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["is_error"] is False
    wrong = "sha256//" + base64.b64encode(b"\0" * 32).decode()
    refused = subprocess.run([*curl, "--pinnedpubkey", wrong], capture_output=True)
    assert refused.returncode == 90 and refused.stdout == b"", refused.stderr

    # docs/security.md's clients, as they are written there.
    env = {
        "BOARD": "127.0.0.1",
        "PORT": str(d.port),
        "PIN": cert["fingerprint"],
        "CERT_SHA256": cert["certificate_sha256"],
        "TOKEN": d.token,
    }
    done = run_example("pinned_https.py", env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip())["ok"] is True
    done = run_example("pinned_https.py", {**env, "PIN": wrong}, tmp_path)
    assert done.returncode != 0 and "not the pinned board" in done.stderr
    done = run_example("pinned_ws.py", env, tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "tool.catalog", done.stderr
    done = run_example("pinned_ws.py", {**env, "CERT_SHA256": "00" * 32}, tmp_path)
    assert done.returncode != 0 and "ServerFingerprintMismatch" in done.stderr

    # The stream, the flight recorder, /metrics and MCP over the same TLS port.
    pin = aiohttp.Fingerprint(hashlib.sha256(der).digest())
    auth = {"Authorization": f"Bearer {d.token}"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=pin)) as s:
        async with s.get(f"{d.base}/api/stream", headers=auth) as r:
            assert r.status == 200 and r.content_type.startswith("multipart/")
            assert await r.content.readuntil(b"\xff\xd9")  # a whole JPEG
        async with s.get(f"{d.base}/api/trace?limit=1", headers=auth) as r:
            assert r.status == 200 and (await r.json())["count"] == 1
        # Large both ways (asyncio's TLS reads through a 32 KiB buffer here: daemon.tls):
        # a screenshot out, and a body of most of [server].max_body_bytes in.
        shot = {"input": {"quality": 95}}
        async with s.post(f"{d.base}/api/tools/screenshot", json=shot, headers=auth) as r:
            data = json.loads((await r.json())["output"])["data"]
            assert len(base64.b64decode(data)) > 100_000
        big = {"input": {"padding": "x" * 900_000}}
        async with s.post(f"{d.base}/api/tools/health_check", json=big) as r:
            assert r.status == 400  # read whole, then refused: health_check takes no arguments
            assert (await r.json())["error"]["code"] == "tool_arguments_invalid"
        async with s.get(f"{d.base}/metrics") as r:
            assert r.status == 200 and "fingertip_tool_invocations" in await r.text()
        mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        headers = {**auth, "Accept": "application/json, text/event-stream"}
        async with s.post(f"{d.base}/mcp", json=mcp, headers=headers) as r:
            assert r.status == 200 and "health_check" in await r.text()
        async with s.get(d.base + "/") as r:  # the Tool Lab's page (a browser: test_toollab)
            assert r.status == 200 and "text/html" in r.content_type
        async with s.get(d.base + "/api/tool-skills") as r:  # its examples pin the key
            skill = await r.text()
    example = f'curl --pinnedpubkey "$FINGERTIP_PIN" -k -X POST {d.base}/api/tools/health_check'
    assert example in skill
    command = example.replace("$FINGERTIP_PIN", cert["fingerprint"]).replace('"', "")
    ran = subprocess.run([*command.split(), "-d", '{"input":{}}'], capture_output=True)
    assert ran.returncode == 0 and json.loads(ran.stdout)["is_error"] is False


def test_plain_http_to_a_tls_port_is_answered_not_hung(make_daemon: Make) -> None:
    d = make_daemon(TLS_ON)
    got, took = raw_exchange(d.port, b"GET /api/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), got
    assert b"Connection: close" in head
    error = json.loads(body)["error"]
    assert error["code"] == "tls_required" and "https://" in error["message"]
    assert took < 5  # answered at once, not after a timeout
    # Any first byte that is not a handshake record is plain text: the same answer.
    got, _ = raw_exchange(d.port, b"\x00\x01garbage")
    assert got.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    # What plain HTTP clients see.
    with pytest.raises(Exception) as info:
        import urllib.request

        urllib.request.urlopen(f"http://127.0.0.1:{d.port}/api/tools", timeout=10)
    assert "400" in str(info.value)


def test_only_modern_tls_and_hostile_handshakes(make_daemon: Make) -> None:
    d = make_daemon(TLS_ON)
    old = ssl.create_default_context()
    old.check_hostname, old.verify_mode = False, ssl.CERT_NONE
    old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    with pytest.warns(DeprecationWarning):  # as it should be
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("ALL:@SECLEVEL=0")  # so the client offers 1.1 at all
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        served(d.port, context=old)
    weak = ssl.create_default_context()
    weak.check_hostname, weak.verify_mode = False, ssl.CERT_NONE
    weak.maximum_version = ssl.TLSVersion.TLSv1_2
    weak.set_ciphers("AES128-SHA:AES256-SHA:ECDHE-ECDSA-AES128-SHA")  # CBC, no AEAD
    with pytest.raises(ssl.SSLError, match=r"(?i)eof|alert"):  # the daemon hangs up on it
        served(d.port, context=weak)
    # Both refused by the daemon, not by this client: it says why.
    reasons = " ".join(e["reason"] for e in events(d, "tls_handshake_failed"))
    reasons += " ".join(str(e.get("suppressed")) for e in events(d, "tls_handshake_failed"))
    assert "UNSUPPORTED_PROTOCOL" in reasons or "unsupported protocol" in reasons, reasons
    good12 = ssl.create_default_context()
    good12.check_hostname, good12.verify_mode = False, ssl.CERT_NONE
    good12.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", d.port)) as raw, good12.wrap_socket(raw) as c:
        assert c.version() == "TLSv1.2"
        assert "ECDHE" in c.cipher()[0] and ("GCM" in c.cipher()[0] or "CHACHA" in c.cipher()[0])
    with socket.create_connection(("127.0.0.1", d.port)) as raw, UNPINNED.wrap_socket(raw) as c:
        assert c.version() == "TLSv1.3"  # preferred by every client that has it

    # A handshake record followed by garbage, a truncated ClientHello, a huge bogus length:
    # closed, and the daemon serves on.
    for hello in (
        b"\x16\x03\x01\x00\x05hello",
        b"\x16\x03\x01\xff\xff" + os.urandom(2000),
        b"\x16" + b"\xff" * 64,
        b"\x16\x03\x03\x00\x2e\x01\x00\x00\x2a\x03\x03" + b"\x00" * 40,
    ):
        got, took = raw_exchange(d.port, hello)
        assert not got.startswith(b"HTTP/"), got  # a TLS alert at most, never an answer
    # Silence, and a handshake begun and never finished: closed after header_timeout_s (2 s).
    for data in (b"", b"\x16\x03\x01"):
        got, took = raw_exchange(d.port, data, timeout=30)
        assert took < 20, took
    assert d.health()["ok"] is True
    assert events(d, "tls_handshake_failed")  # logged (throttled), nothing of the bytes
    assert d.proc is not None and d.proc.poll() is None


async def test_over_the_cap_a_tls_client_reads_the_503(make_daemon: Make) -> None:
    d = make_daemon({"server": {"tls": "on", "max_connections": 1}})
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s:
        async with s.get(f"{d.base}/api/tools") as r:  # kept alive: the one connection
            assert r.status == 200
            await r.read()
        other = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False))
        async with other, other.get(f"{d.base}/api/tools") as r:
            assert r.status == 503
            assert (await r.json())["error"]["code"] == "too_many_connections"


def ending_soon(d: DaemonProcess, names: list[str]) -> dict[str, Any]:
    """The daemon's own certificate made again, with its key, to end in 10 days."""
    return tls.run_child(
        {
            "op": "make",
            "key": str(d.state_dir / "tls-key.pem"),
            "cert": str(d.state_dir / "tls-cert.pem"),
            "names": names,
            "common_name": "ending",
            "days": 10,
        }
    )


async def test_certificate_kept_across_restarts_renewed_with_its_key(
    make_daemon: Make,
) -> None:
    d = make_daemon(TLS_ON)
    first = d.health()["security"]["tls"]
    assert len(events(d, "tls_certificate_made")) == 1
    assert d.stop() == 0
    d.start()  # the same state folder: the same certificate, read from the cache, no child
    again = d.health()["security"]["tls"]
    assert again == first
    assert len(events(d, "tls_certificate_made")) == 1
    for name in ("tls-cert.pem", "tls-key.pem", "tls-cert.json"):
        assert (d.state_dir / name).stat().st_mode & 0o777 == 0o600

    # Within 30 days of its end: made again at start, with the same key.
    assert d.stop() == 0
    made = ending_soon(d, first["names"])
    assert made["fingerprint"] == first["fingerprint"]
    d.start()
    renewed = d.health()["security"]["tls"]
    assert renewed["fingerprint"] == first["fingerprint"]
    assert renewed["certificate_sha256"] != first["certificate_sha256"]
    assert renewed["not_after"] >= first["not_after"]  # 397 days from now, not 10
    assert events(d, "tls_certificate_made")[-1]["reason"] == "renewal"
    assert key_pin(served(d.port)) == first["fingerprint"]

    # A name added (an allowed host): made again, same key.
    assert d.stop() == 0
    d.tables["server"]["allowed_hosts"] = ["fingertip.example"]
    from tests.service.daemonproc import write_config

    write_config(d.config_path, d.tables)
    d.start()
    named = d.health()["security"]["tls"]
    assert "DNS:fingertip.example" in named["names"]
    assert named["fingerprint"] == first["fingerprint"]
    assert events(d, "tls_certificate_made")[-1]["reason"] == "its names changed"


async def test_renewal_while_running(make_daemon: Make) -> None:
    """The periodic check (Tls.watch) renews a certificate that is due, in place."""
    d = make_daemon(TLS_ON)
    first = d.health()["security"]["tls"]
    from daemon.config import load

    t = tls.Tls(load(d.config_path))
    await asyncio.to_thread(t.load)
    assert not t.renewal_due(time.time())
    assert t.renewal_due(time.time() + 380 * 86400)  # 30 days before its end
    ending_soon(d, first["names"])  # in the daemon's folder: what the check then finds due
    assert await t.reload("renewal") is True
    assert t.info is not None and t.info.fingerprint == first["fingerprint"]
    assert not t.renewal_due(time.time())


def make_pair(folder: Path, name: str) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    return tls.run_child(
        {
            "op": "make",
            "key": str(folder / f"{name}.key"),
            "cert": str(folder / f"{name}.crt"),
            "names": ["DNS:localhost", "IP:127.0.0.1"],
            "common_name": f"user {name}",
            "days": 90,
        }
    )


def install(folder: Path, name: str) -> None:
    for ext in ("crt", "key"):
        (folder / f"board.{ext}").write_bytes((folder / f"{name}.{ext}").read_bytes())


async def test_user_certificate_reloaded_on_sighup_broken_one_keeps_the_old(
    make_daemon: Make, tmp_path: Path
) -> None:
    user = tmp_path / "user"
    a, b = make_pair(user, "a"), make_pair(user, "b")
    install(user, "a")
    d = make_daemon(
        {
            "server": {
                "tls": "on",
                "tls_cert": str(user / "board.crt"),
                "tls_key": str(user / "board.key"),
            }
        }
    )
    assert d.proc is not None
    assert key_pin(served(d.port)) == a["fingerprint"]
    status = d.health()["security"]["tls"]
    assert status["source"] == "user" and status["fingerprint"] == a["fingerprint"]
    assert not (d.state_dir / "tls-key.pem").exists()  # the board made none of its own

    # A keep-alive connection opened on the old certificate survives the reload.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s:
        async with s.get(f"{d.base}/api/tools") as r:
            assert r.status == 200
        install(user, "b")
        d.proc.send_signal(signal.SIGHUP)
        await logged(d, "tls_reloaded")
        assert key_pin(served(d.port)) == b["fingerprint"]
        async with s.get(f"{d.base}/api/tools") as r:
            assert r.status == 200

    # Broken files: each reload fails, is logged, and B keeps serving.
    broken: list[Callable[[], None]] = [
        lambda: (user / "board.crt").write_bytes(b"garbage"),
        lambda: (user / "board.crt").write_bytes(b""),
        lambda: (user / "board.crt").unlink(),
        lambda: (
            install(user, "a") or (user / "board.key").write_bytes((user / "b.key").read_bytes())
        ),  # a's certificate with b's key
        lambda: install(user, "b") or (user / "board.key").write_bytes(os.urandom(300)),
    ]
    for n, breaks in enumerate(broken, start=1):
        breaks()
        d.proc.send_signal(signal.SIGHUP)
        failed = await logged(d, "tls_reload_failed", n)
        assert failed[-1]["serving"] == b["fingerprint"]
        assert key_pin(served(d.port)) == b["fingerprint"]
        security = d.health()["security"]
        assert security["tls"]["fingerprint"] == b["fingerprint"]
        assert security["tls"]["last_reload_error"]
        assert any("reload failed" in w for w in security["warnings"])
    # Fixed: the next SIGHUP takes it.
    install(user, "a")
    d.proc.send_signal(signal.SIGHUP)
    await logged(d, "tls_reloaded", 2)
    assert key_pin(served(d.port)) == a["fingerprint"]
    assert "last_reload_error" not in d.health()["security"]["tls"]
    assert d.proc.poll() is None


def test_a_broken_user_certificate_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "bad.crt").write_text("not a certificate")
    (tmp_path / "bad.key").write_text("not a key")
    d = DaemonProcess(
        tmp_path,
        {
            "server": {
                "tls": "on",
                "tls_cert": str(tmp_path / "bad.crt"),
                "tls_key": str(tmp_path / "bad.key"),
            }
        },
    )
    with pytest.raises(RuntimeError, match="exited 1"):
        d.start()
    lines = [ln for ln in d.logs().splitlines() if ln.startswith("fingertipd:")]
    assert len(lines) == 1 and "bad.crt" in lines[0] and "no usable certificate" in lines[0]


async def test_tls_off_is_said_at_start_and_in_health(make_daemon: Make, offloop_addr: str) -> None:
    d = make_daemon({"server": {"listen": ["127.0.0.1", offloop_addr], "tls": "off"}})
    warned = events(d, "security_warning")
    assert warned and "tls is off" in warned[0]["message"] and offloop_addr in warned[0]["message"]
    security = d.health()["security"]
    assert any("tls is off" in w for w in security["warnings"])
    assert [x["tls"] for x in security["listeners"]] == [False, False]
    async with aiohttp.ClientSession() as s, s.get(f"{d.url(offloop_addr)}/api/tools") as r:
        assert d.url(offloop_addr).startswith("http://") and r.status == 200


async def test_auto_gives_the_network_address_tls_and_loopback_plain(
    make_daemon: Make, offloop_addr: str
) -> None:
    d = make_daemon({"server": {"listen": ["127.0.0.1", offloop_addr]}})
    security = d.health()["security"]  # over loopback: plain
    assert [(x["address"], x["tls"]) for x in security["listeners"]] == [
        ("127.0.0.1", False),
        (offloop_addr, True),
    ]
    assert f"IP:{offloop_addr}" in security["tls"]["names"]
    assert key_pin(served(d.port, offloop_addr)) == security["tls"]["fingerprint"]
    got = subprocess.run(
        ["curl", "-sS", f"http://{offloop_addr}:{d.port}/api/tools"], capture_output=True
    )
    assert b"tls_required" in got.stdout


def forward(unix: Path, port: int) -> threading.Thread:
    """What `ssh -L unix:addr:port` gives deploy.py: a Unix socket reaching the daemon."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(unix))
    listener.listen(8)

    def pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def serve() -> None:
        with listener:
            while True:
                try:
                    client, _ = listener.accept()
                except OSError:
                    return
                upstream = socket.create_connection(("127.0.0.1", port))
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_make_deploy_health_check_speaks_tls_when_told(make_daemon: Make, tmp_path: Path) -> None:
    """deploy.py's health check reaches a TLS address through its ssh forward: plain first,
    the daemon's 400 tls_required, then TLS, with the certificate checked against health."""
    from deploy import health, pure

    d = make_daemon(TLS_ON)
    unix = tmp_path / "fwd.sock"
    forward(unix, d.port)
    answer = health.health_check(unix, "127.0.0.1", d.port, 60)
    assert answer["ok"] is True
    fingerprint, pins = pure.pins(answer, d.port)
    assert fingerprint == key_pin(served(d.port))
    assert pins == {}  # loopback only: nothing a host would pin


def test_stop_ends_connections_still_at_the_gate(make_daemon: Make) -> None:
    """A connection that sent nothing yet, or half a handshake, does not hold the daemon's stop
    for its header timeout (60 s here)."""
    d = make_daemon({"server": {"tls": "on", "header_timeout_s": 60.0}})
    silent = socket.create_connection(("127.0.0.1", d.port))
    half = socket.create_connection(("127.0.0.1", d.port))
    half.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    try:
        assert d.health()["ok"] is True
        start = time.monotonic()
        assert d.stop() == 0
        assert time.monotonic() - start < 30
        for s in (silent, half):
            s.settimeout(10)
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(100) == b""  # closed by the daemon
    finally:
        silent.close()
        half.close()
