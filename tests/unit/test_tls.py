"""daemon/tls/'s pure parts and its certificate child (`python -m daemon.tls`, run for real),
daemon/known_boards.py, and the [server].tls keys. The daemon serving TLS: tests/service/
test_tls.py."""

from __future__ import annotations

import base64
import hashlib
import os
import ssl
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from daemon import known_boards, tls
from daemon.config import ConfigError, from_mapping
from daemon.tls import service as tls_service
from daemon.tls import store as tls_store

NAMES = ["DNS:localhost", "IP:127.0.0.1"]


def spki_pin(cert_pem: bytes) -> str:
    """The fingerprint computed here, independently of daemon.tls."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256//" + base64.b64encode(hashlib.sha256(spki).digest()).decode()


def make(folder: Path, names: list[str] = NAMES, days: float = 397) -> dict[str, Any]:
    return tls.run_child(
        {
            "op": "make",
            "key": str(folder / "key.pem"),
            "cert": str(folder / "cert.pem"),
            "names": names,
            "common_name": "Fingertip test",
            "days": days,
        }
    )


@pytest.fixture
def umask_zero() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


# -- which listeners ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "auto"),
    [
        ("127.0.0.1", False),
        ("127.8.9.10", False),
        ("::1", False),
        ("localhost", False),
        ("LOCALHOST", False),
        ("192.168.42.1", True),
        ("0.0.0.0", True),  # every interface: the LAN's too
        ("::", True),
        ("fe80::1%usb0", True),
        ("board.example", True),  # a name: whatever it resolves to is not known to be local
    ],
)
def test_which_listeners_get_tls(address: str, auto: bool) -> None:
    assert tls.secured(address, "auto") is auto
    assert tls.secured(address, "on") is True
    assert tls.secured(address, "off") is False


def test_config_keys_refuse_hostile_values() -> None:
    assert from_mapping({}).server.tls == "auto"
    for bad in (
        {"tls": "yes"},
        {"tls": True},
        {"tls": ""},
        {"tls_cert": "/c.pem"},  # without its key
        {"tls_key": "/k.pem"},
        {"tls_cert": "relative.pem", "tls_key": "/k.pem"},
        {"tls_cert": "/a\x00b", "tls_key": "/k.pem"},
        {"tls_cert": "/a\nb", "tls_key": "/k.pem"},
        {"tls_cert": "/c.pem", "tls_key": "/k\ud800.pem"},  # a lone surrogate (TOML has none)
        {"tls_cert": ["/c.pem"], "tls_key": "/k.pem"},
    ):
        with pytest.raises(ConfigError, match=r"server"):
            from_mapping({"server": bad})
    ok = from_mapping({"server": {"tls": "on", "tls_cert": "/c.pem", "tls_key": "/k.pem"}})
    assert (ok.server.tls_cert, ok.server.tls_key) == ("/c.pem", "/k.pem")


# -- the names of the board's certificate -----------------------------------------------------


def test_certificate_names() -> None:
    names = tls.certificate_names(
        ["127.0.0.1", "192.168.42.1", "fe80::1%usb0"],
        ["fingertip.local:8080", "[fd00::7]:8080", "10.0.0.9", "rack-7.example"],
        "board",
        "0123456789abcdef" * 2,
    )
    assert names == sorted(names)
    assert set(names) == {
        "DNS:localhost",
        "DNS:board",
        "DNS:board.local",
        "DNS:fingertip-0123456789ab.local",
        "DNS:fingertip.local",
        "DNS:rack-7.example",
        "IP:127.0.0.1",
        "IP:::1",
        "IP:192.168.42.1",
        "IP:fe80::1",
        "IP:fd00::7",
        "IP:10.0.0.9",
    }


def test_certificate_names_for_every_interface_and_hostile_names() -> None:
    names = tls.certificate_names(
        ["0.0.0.0"],
        [
            "",
            " ",
            "évil.example",  # not an A-label
            "-bad.example",
            "a" * 64 + ".example",  # a label over 63
            ("a" * 60 + ".") * 5 + "x",  # a name over 253
            "x\x00y",
            "under_score.example",
            "[::1",
            "host:port:more",
            "\ud800",
        ],
        "",  # no hostname
        "",
        ["192.168.1.5", "fe80::2%eth0", "not-an-ip"],
    )
    assert names == [
        "DNS:localhost",
        "IP:127.0.0.1",
        "IP:192.168.1.5",
        "IP:::1",
        "IP:fe80::2",
    ]
    # The child takes every name this function gives (a name it refused would stop the start).


# -- the child ------------------------------------------------------------------------------


def test_make_inspect_and_files_0600(tmp_path: Path, umask_zero: None) -> None:
    made = make(tmp_path, ["DNS:localhost", "DNS:fingertip-0123.local", "IP:127.0.0.1", "IP:::1"])
    assert made["new_key"] is True
    pem = (tmp_path / "cert.pem").read_bytes()
    assert made["fingerprint"] == spki_pin(pem)
    der = ssl.PEM_cert_to_DER_cert(pem.decode())
    assert made["certificate_sha256"] == hashlib.sha256(der).hexdigest().upper()
    assert made["names"] == sorted(
        ["DNS:localhost", "DNS:fingertip-0123.local", "IP:127.0.0.1", "IP:::1"]
    )
    assert made["not_after"] - made["not_before"] == pytest.approx(397 * 86400 + 3600, abs=2)
    for name in ("cert.pem", "key.pem"):  # whatever the umask
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate(pem)
    key = serialization.load_pem_private_key((tmp_path / "key.pem").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    inspected = tls.run_child({"op": "inspect", "cert": str(tmp_path / "cert.pem")})
    assert inspected == {k: v for k, v in made.items() if k not in ("new_key", "damaged_key")}
    # A server context takes the pair and speaks TLS 1.2 at least.
    ctx = tls.server_context(tmp_path / "cert.pem", tmp_path / "key.pem")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    suites = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert suites and all("ECDHE" in s and ("GCM" in s or "CHACHA20" in s) for s in suites)


def test_renewal_keeps_the_key_and_so_the_fingerprint(tmp_path: Path) -> None:
    first = make(tmp_path, days=10)
    again = make(tmp_path, ["DNS:localhost", "IP:127.0.0.1", "IP:10.1.2.3"])
    assert again["new_key"] is False
    assert again["fingerprint"] == first["fingerprint"]
    assert again["certificate_sha256"] != first["certificate_sha256"]
    assert again["not_after"] > first["not_after"] + 300 * 86400
    # A key that is damaged, or not ECDSA, is replaced: the fingerprint changes (and the
    # daemon says so in its log: daemon.tls.service.Tls._self_made).
    (tmp_path / "key.pem").write_bytes(b"-----BEGIN PRIVATE KEY-----\ngarbage\n")
    damaged = make(tmp_path)
    assert damaged["new_key"] is True and damaged["fingerprint"] != first["fingerprint"]
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "key.pem").write_bytes(
        rsa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    assert make(tmp_path)["new_key"] is True


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "no usable certificate"),
        (b"garbage", "no usable certificate"),
        (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "no usable"),
        (b"\x00" * 5000, "no usable certificate"),
        (b"x" * (tls.MAX_PEM_BYTES + 10), "over 1048576 bytes"),
        (b"-----BEGIN CERTIFICATE-----\n" + b"A" * 100000, "no usable certificate"),
    ],
)
def test_hostile_certificate_files(tmp_path: Path, content: bytes, reason: str) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_bytes(content)
    with pytest.raises(tls.TlsError, match=reason):
        tls.read_info(cert, tmp_path / "info.json")


def test_unreadable_certificate_paths(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.pem", tmp_path):  # missing, a folder
        with pytest.raises(tls.TlsError, match="cannot read the certificate"):
            tls.read_info(path, tmp_path / "info.json")
    with pytest.raises(tls.TlsError, match="over 1048576 bytes"):
        tls.read_info(Path("/dev/zero"), tmp_path / "info.json")  # endless: read this far


def test_info_is_cached_by_the_file_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = make(tmp_path)
    cache = tmp_path / "info.json"
    first = tls.read_info(tmp_path / "cert.pem", cache)
    assert first.fingerprint == made["fingerprint"]
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600

    def no_child(request: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"the child ran for {request}")

    monkeypatch.setattr(tls_store, "run_child", no_child)  # read_info's
    assert tls.read_info(tmp_path / "cert.pem", cache) == first  # no child: the cache
    monkeypatch.undo()
    for damaged in (b'{"fingerprint": 1', b"[]", b"\xff" * 10, b"[" * 100000, b" " * (2 << 20)):
        cache.write_bytes(damaged)  # a damaged cache is a miss, not a failure
        assert tls.read_info(tmp_path / "cert.pem", cache) == first
    make(tmp_path)  # a new file: the cache no longer describes it
    assert tls.read_info(tmp_path / "cert.pem", cache).file_sha256 != first.file_sha256


def test_child_refuses_bad_requests() -> None:
    for request in ('{"op": "nope"}', "not json", '{"op": "make"}', "[]"):
        assert tls.child_main([request]) == 1


def test_server_context_refuses_bad_pairs(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    make(tmp_path / "a")
    make(tmp_path / "b")
    with pytest.raises(tls.TlsError, match="cannot use"):  # a key that is not the cert's
        tls.server_context(tmp_path / "a" / "cert.pem", tmp_path / "b" / "key.pem")
    with pytest.raises(tls.TlsError, match="cannot use"):
        tls.server_context(tmp_path / "a" / "cert.pem", tmp_path / "missing.pem")
    # An encrypted key is refused at once: OpenSSL would otherwise ask for its passphrase on
    # the terminal, and a daemon started from one would wait there.
    key = serialization.load_pem_private_key((tmp_path / "a" / "key.pem").read_bytes(), None)
    (tmp_path / "enc.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(tls.TlsError, match="encrypted"):
        tls.server_context(tmp_path / "a" / "cert.pem", tmp_path / "enc.pem")


# -- known boards ---------------------------------------------------------------------------


def test_known_boards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    path = known_boards.default_path()
    assert path == tmp_path / "cfg" / "fingertip" / "known_boards"
    assert known_boards.load() == {}
    fp, other = "sha256//" + "A" * 43 + "=", "sha256//" + "B" * 43 + "="
    known_boards.remember({"192.168.42.1:8080": (fp, "")})
    path.write_text(
        path.read_text() + "# a comment\n\ngarbage line\n10.0.0.1:80 not-a-pin\n"
        "[fe80::1%usb0]:8080 " + other + " board7 # kept\n"
    )
    known_boards.remember({"192.168.42.1:8080": (other, ""), "10.0.0.2:8080": (fp, "b")})
    known = known_boards.load()
    assert known == {
        "192.168.42.1:8080": (other, ""),
        "10.0.0.2:8080": (fp, "b"),
        "[fe80::1%usb0]:8080": (other, "board7"),
    }
    assert "garbage line" in path.read_text()  # other lines are the user's: kept
    assert known_boards.verdict(known, ["192.168.42.1"], 8080, other) == "match"
    assert known_boards.verdict(known, ["fe80::1%usb0"], 8080, other) == "match"
    assert known_boards.verdict(known, ["192.168.42.1"], 8080, fp) == "CHANGED"
    assert known_boards.verdict(known, ["192.168.42.1"], 8080, "") == "CHANGED"  # TLS gone
    assert known_boards.verdict(known, ["192.168.42.9"], 8080, fp) == "new"
    assert known_boards.verdict(known, ["192.168.42.1"], 8081, fp) == "new"
    path.write_bytes(b"\xff\xfe\x00garbage" * 200000)  # hostile: binary, over MAX_BYTES
    assert known_boards.load() == {}


def test_a_child_that_answers_nonsense_is_a_tls_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever goes wrong making or reading the certificate is one TlsError: one line at
    start, a logged failure (the old certificate serving) on a reload."""
    config = from_mapping(
        {"server": {"tls": "on"}, "state": {"dir": str(tmp_path)}, "discovery": {"name": "t"}}
    )
    for answer in ({}, {"fingerprint": "x"}, {"names": None}):
        monkeypatch.setattr(tls_service, "run_child", lambda request, answer=answer: answer)
        with pytest.raises(tls.TlsError, match="could not be made or read"):
            tls.Tls(config).load()
