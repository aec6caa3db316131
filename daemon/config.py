"""The daemon's configuration: one TOML file, validated at start.

Each section is a dataclass whose fields carry their JSON Schema in metadata; the schema for the
whole file is generated from them, so a key is declared once (name, default, type, range) and
jsonschema does the checking. The [gadget] table belongs to the gadget package and is validated
by gadget.settings. Errors name the key, e.g.
``server.port: 70000 is greater than the maximum of 65535``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from daemon.screen.options import STABLE
from daemon.wire import WireError, check
from gadget import layouts
from gadget.settings import GadgetSettings, read_config_file, retired_keys

DEVICE_TYPES = ("iOS", "Android", "macOS", "windows", "linux")
GUARD_PRESETS = ("disabled", "read-only", "read-write", "full-access")
BOARD_CONFIG = Path("/etc/fingertip/fingertip.toml")


class ConfigError(Exception):
    """One clear line naming the key."""


def _key(default: Any, schema: dict[str, Any], doc: str = "") -> Any:
    """A config key: its default, its JSON Schema, and a short description."""
    meta = {"schema": schema, "doc": doc}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
_GUARD = {"enum": list(GUARD_PRESETS)}
_POLICY = {"enum": ["read", "write", "critical"]}
# An absolute file path, or empty: no NUL (no file has one) nor other control character.
_PATH = {"type": "string", "pattern": "^(/[^\\x00-\\x1f\\x7f]*)?$"}


def _num(lo: float, hi: float) -> dict[str, Any]:
    return {"type": "number", "minimum": lo, "maximum": hi}


def _int(lo: int, hi: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": lo, "maximum": hi}


def _strings() -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}}


@dataclass(frozen=True)
class DeviceConfig:
    device_type: str = _key("iOS", {"enum": list(DEVICE_TYPES)}, "the target's kind")
    keyboard_layout: str = _key(
        "us",
        {"enum": list(layouts.NAMES)},
        "the keyboard layout set on the target (typing plans for it; Apple's variant on iOS "
        "and macOS, the PC one elsewhere)",
    )

    @property
    def platform(self) -> str:
        """The lowercase platform id the catalog filters on (ios, android, macos, ...)."""
        return self.device_type.lower()

    @property
    def layout(self) -> layouts.Layout:
        """The target's layout in its platform's family."""
        return layouts.for_target(self.keyboard_layout, self.platform)


def is_ip_address(text: str) -> bool:
    """Whether `text` is an IP address literal (an IPv6 one may name its zone: fe80::1%usb0).
    Checked here, without DNS, so that --check refuses what the listener could not bind."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class ServerConfig:
    listen: list[str] = _key(
        ["127.0.0.1"], _strings(), "addresses to bind; never 0.0.0.0 unless you mean it"
    )
    port: int = _key(
        8080, _PORT, "the one port: tools API, WebSocket, MCP, Tool Lab, stream, metrics"
    )
    allowed_hosts: list[str] = _key(
        [], _strings(), "extra Host header names accepted (besides the listen addresses)"
    )
    max_body_bytes: int = _key(
        1 << 20, _int(1024, 64 << 20), "the largest request body; more is 413 request_too_large"
    )
    tool_timeout_s: float = _key(60.0, _num(0.1, 3600), "limit for non-HID tools")
    hid_timeout_s: float = _key(300.0, _num(1, 3600), "server-side limit of a HID invocation")
    max_pending_hid: int = _key(
        32,
        _int(1, 4096),
        "HID invocations accepted and not yet ended, from all clients together (those of "
        "clients that left included); one more is refused, hid_busy (retryable)",
    )
    max_calls: int = _key(
        64,
        _int(1, 4096),
        "tool calls admitted and not yet ended, from all clients and transports together (a "
        "WebSocket batch counts each of its calls); one more is refused, too_many_calls "
        "(retryable)",
    )
    max_client_calls: int = _key(
        32,
        _int(1, 4096),
        "the same for one client (one peer address; on the IPC socket one uid)",
    )
    shutdown_grace_s: float = _key(10.0, _num(0, 300), "wait for HID invocations at SIGTERM")
    header_timeout_s: float = _key(
        15.0,
        _num(0.1, 3600),
        "a connection must send a whole request header this soon after connecting or after "
        "its last response, else it is closed (also the keep-alive idle limit)",
    )
    body_timeout_s: float = _key(
        30.0, _num(0.1, 3600), "a request body must have arrived this soon after its header"
    )
    send_timeout_s: float = _key(
        30.0,
        _num(0.1, 3600),
        "a client that takes nothing of a reply this long is disconnected (its slot freed)",
    )
    max_connections: int = _key(
        256,
        _int(1, 65536),
        "open HTTP and WebSocket connections; more get 503 too_many_connections",
    )
    tls: str = _key(
        "auto",
        {"enum": ["auto", "on", "off"]},
        "auto: HTTPS on every listen address but loopback; on: on all; off: none (a warning)",
    )
    tls_cert: str = _key(
        "", _PATH, "your certificate chain (PEM, absolute path); empty = the board's own"
    )
    tls_key: str = _key("", _PATH, "its private key (PEM, unencrypted, absolute path)")

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        for address in self.listen:
            if not is_ip_address(address):
                raise ValueError(
                    f"listen: {address!r} is not an IP address (IPv4, or IPv6 without brackets "
                    "and port; names are not resolved)"
                )


@dataclass(frozen=True)
class GuardConfig:
    http: str = _key("read-write", _GUARD)
    ws: str = _key("read-write", _GUARD, "the WebSocket tool protocol at /api/ws")
    ipc: str = _key("read-write", _GUARD, "the IPC socket (the fingertip CLI)")
    mcp: str = _key("read-write", _GUARD, "the MCP endpoint at /mcp")


@dataclass(frozen=True)
class WsConfig:
    """The WebSocket tool protocol for hosts (/api/ws on the server port)."""

    heartbeat_s: float = _key(
        20.0, _num(0.1, 600), "ping interval; no pong within half of it closes"
    )
    max_message_bytes: int = _key(4 << 20, _int(1024, 64 << 20), "largest message a host may send")
    max_decoded_bytes: int = _key(
        8 << 20, _int(1024, 256 << 20), "largest gzip-base64-json payload once decoded"
    )
    binary_min_bytes: int = _key(
        1 << 20, _int(0, 1 << 30), "screenshots this large go as ASFT binary frames by default"
    )
    chunk_bytes: int = _key(65536, _int(1024, 524288), "default ASFT chunk size")
    max_inflight: int = _key(
        32, _int(1, 1024), "calls one connection may have running (a batch counts each call)"
    )


@dataclass(frozen=True)
class IpcConfig:
    """The local msgpack socket of the `fingertip` CLI. Root and the daemon's own uid are always
    allowed (they could read the daemon's memory anyway); everyone else must be listed."""

    socket: str = _key("/run/fingertip/ipc.sock", {"type": "string", "minLength": 1})
    mode: str = _key("0660", {"type": "string", "pattern": "^0?[0-7]{3}$"}, "octal, like chmod")
    owner: str = _key("", _STR, "user name or uid of the socket file; empty = the daemon's")
    group: str = _key("", _STR, "group name or gid of the socket file; empty = the daemon's")
    allowed_uids: list[int] = _key([], {"type": "array", "items": {"type": "integer"}})
    allowed_gids: list[int] = _key(
        [], {"type": "array", "items": {"type": "integer"}}, "primary or supplementary groups"
    )
    max_frame_bytes: int = _key(4 << 20, _int(64 << 10, 64 << 20), "largest request frame")
    idle_timeout_s: float = _key(
        30.0,
        _num(0.1, 3600),
        "a connection with no request running that sends nothing this long, or a frame not "
        "whole this long after its first byte, is closed",
    )
    send_timeout_s: float = _key(
        30.0,
        _num(0.1, 3600),
        "a client that takes nothing of a reply this long is disconnected (its slot freed)",
    )
    max_connections: int = _key(
        64, _int(1, 65536), "open connections; more get one too_many_connections frame"
    )


@dataclass(frozen=True)
class AuthConfig:
    token: str = _key("", _STR, "pairing token; empty = generated into state_dir/pairing-token")
    require_on_loopback: bool = _key(False, _BOOL, "also require the token on 127.0.0.1")
    client_tokens: list[dict[str, str]] = _key(
        [],
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"token": {"type": "string", "minLength": 16}, "max_policy": _POLICY},
                "required": ["token", "max_policy"],
                "additionalProperties": False,
            },
        },
        "extra tokens, each with the client's maxToolPolicy",
    )


@dataclass(frozen=True)
class StateConfig:
    dir: str = _key("/var/lib/fingertip", _STR, "state folder (pairing token, ...)")


@dataclass(frozen=True)
class TraceConfig:
    """The flight recorder (daemon/trace): <state.dir>/trace.db, bounded for an SD card."""

    enabled: bool = _key(True, _BOOL, "record every invocation")
    max_size_mb: float = _key(
        256.0, _num(0.25, 65536), "live data kept; the oldest invocations go first past it"
    )
    max_age_s: float = _key(
        7 * 86400.0, _num(1, 10 * 365 * 86400), "invocations older than this are dropped"
    )
    prune_interval_s: float = _key(60.0, _num(0.1, 86400), "age pruning when idle")
    image_max_width: int = _key(
        360, _int(64, 8192), "before/after screenshots are kept reduced to this width"
    )
    image_quality: int = _key(60, _int(1, 100), "their JPEG quality")


@dataclass(frozen=True)
class BackendConfig:
    kind: str = _key("board", {"enum": ["board", "simulated"]})
    sim_width: int = _key(0, _int(0, 8192), "simulated screen width; 0 = by platform")
    sim_height: int = _key(0, _int(0, 8192), "simulated screen height; 0 = by platform")
    sim_reenumerate_s: float = _key(
        0.05, _num(0, 10), "how long the simulated target takes to re-enumerate (writes fail)"
    )
    sim_hdmi: bool = _key(
        False,
        _BOOL,
        "the simulated target's picture inside a 1920x1080 frame with black bars, as a "
        "phone's HDMI adapter sends it (sim_width/sim_height: its portrait or landscape "
        "screen)",
    )
    sim_overscan: float = _key(
        0.0, _num(0, 0.2), "the HDMI view's black border on every side, a fraction of each axis"
    )


@dataclass(frozen=True)
class InputConfig:
    """Timings of the input engine (daemon/engine). Defaults follow what real phones showed other
    projects; the kernel tier and real boards may tune them."""

    tap_hold_ms: float = _key(60.0, _num(1, 5000), "contact held for a tap")
    ios_cursor_settle_ms: float = _key(
        80.0, _num(0, 2000), "iOS: wait after moving the mouse before pressing (cursor animates)"
    )
    swipe_hold_before_ms: float = _key(
        80.0, _num(0, 2000), "least dwell after touching down before a swipe moves"
    )
    long_press_ms: float = _key(1500.0, _num(100, 60000), "contact held for a long_press")
    double_tap_gap_ms: float = _key(100.0, _num(10, 2000), "between the taps of a double_tap")
    key_hold_ms: float = _key(60.0, _num(1, 5000), "a single key or media key held")
    chord_hold_ms: float = _key(120.0, _num(1, 5000), "a chord held once all its keys are down")
    key_step_ms: float = _key(10.0, _num(0, 1000), "between presses (releases) within a chord")
    release_repeats: int = _key(3, _int(1, 10), "how often the final release report is sent")
    release_interval_ms: float = _key(15.0, _num(0, 1000), "between repeated release reports")
    typing_rate_cps: float = _key(100.0, _num(1, 1000), "characters per second when typing")
    move_interval_ms: float = _key(
        16.0, _num(1, 1000), "report interval of timed moves (atomic move_to, drag)"
    )
    wheel_interval_ms: float = _key(30.0, _num(0, 1000), "between wheel ticks")
    scroll_speed: float = _key(
        1000.0, _num(1, 100000), "touch_gesture scroll: swipe speed, normalized units/s"
    )
    scroll_hold_after_ms: float = _key(
        120.0, _num(0, 5000), "touch_gesture scroll: dwell before lifting (stops momentum)"
    )
    write_timeout_ms: float = _key(
        750.0, _num(10, 60000), "a report not accepted this long after its deadline fails"
    )
    isolation_settle_ms: float = _key(
        0.0,
        _num(0, 30000),
        "extra wait after a profile switch, beyond the backend's own settle (on a board the "
        "gadget's settle_delay already waits for the target's drivers)",
    )
    profile_switch_timeout_s: float = _key(15.0, _num(0.1, 300), "limit of one profile switch")
    drag_limit_s: float = _key(
        60.0, _num(1, 3600), "a drag_start not completed by drag_release within this is undone"
    )
    evidence_timeout_ms: int = _key(
        STABLE.timeout_ms, _int(0, 60000), "post-action stability wait limit"
    )
    evidence_stable_ms: int = _key(
        STABLE.stable_ms, _int(0, 60000), "post-action: unchanged this long"
    )
    focus_settle_ms: int = _key(
        300, _int(0, 10000), "enter_text: after the focusing tap, before typing"
    )
    enter_text_delay_ms: int = _key(300, _int(0, 10000), "enter_text: delay before its screenshot")
    caps_lock_hold_ms: float = _key(
        200.0,
        _num(1, 5000),
        "Caps Lock held when typing turns it off and back on (macOS ignores short presses)",
    )
    caps_lock_wait_ms: float = _key(
        500.0, _num(10, 10000), "typing: wait for the target's LED report after Caps Lock"
    )
    search_open_ms: int = _key(
        600, _int(0, 10000), "open_app/open_url: wait for the search field before typing"
    )
    wake_first: bool = _key(
        False,
        _BOOL,
        "input tools wake a sleeping target (remote wakeup) and then deliver, instead of "
        "answering target_suspended",
    )
    wake_timeout_s: float = _key(
        1.0, _num(0.05, 30), "wake_target: how long the target may take to configure again"
    )


@dataclass(frozen=True)
class CaptureConfig:
    device: str = _key("/dev/video0", _STR, "a path, /dev/v4l/by-id/..., or a udev ID_SERIAL")
    width: int = _key(1920, _int(16, 8192), "the frame width asked of the capture device")
    height: int = _key(1080, _int(16, 8192), "the frame height asked of it")
    fps: float = _key(30.0, _num(1, 240), "the frame rate asked of it")
    fourcc: str = _key(
        "MJPG", {"type": "string", "minLength": 4, "maxLength": 4}, "the pixel format asked of it"
    )
    buffers: int = _key(2, _int(1, 16), "V4L2 buffers the driver fills (each holds a frame)")
    idle_stop_s: float = _key(10.0, _num(0.1, 3600))
    no_frame_timeout_s: float = _key(3.0, _num(0.1, 60))
    edid: str = _key(
        "",
        _STR,
        "the EDID an HDMI bridge (DV timings) presents to the target, loaded when it is opened: "
        "'' = the shipped default (etc/edid-1080p.hex: 1080p60/30, underscan), a file (binary or "
        "hex text), or 'keep' to leave the bridge's own",
    )
    subdevice: str = _key(
        "",
        _STR,
        "the bridge's /dev/v4l-subdevN when its DV timings live there and not on the video node; "
        "'' = the one sub-device that answers for DV timings, if any",
    )


_RECT = {"type": "array", "items": _int(0, 8192), "minItems": 4, "maxItems": 4}


@dataclass(frozen=True)
class ScreenConfig:
    """Where the target's own screen is inside the captured frame (daemon/screen/geometry.py)."""

    geometry: str | list[int] = _key(
        "auto",
        {"anyOf": [{"enum": ["auto", "full"]}, _RECT]},
        'the target\'s screen in the frame: "auto" (found from the dark bars), "full" (the '
        "whole frame), or [x, y, w, h] in frame pixels",
    )
    model_size: list[int] = _key(
        [],
        {"type": "array", "items": _int(1, 16384), "maxItems": 2},
        "the target's own screen in its pixels, [width, height] (an iPhone 13: [1170, 2532]), "
        "or empty: a detected rectangle is snapped to its aspect ratio, in either orientation",
    )

    hid_span: str = _key(
        "platform",
        {"enum": ["platform", "screen", "frame"]},
        "what the HID pointer's 0..32767 spans: \"platform\" (by device_type: an iPhone's "
        'screen, an Android touchscreen the whole frame), or "screen" / "frame" for a '
        "target that binds it otherwise (a touchscreen on a Linux desktop spans its screen)",
    )

    def __post_init__(self) -> None:
        from daemon.screen.geometry import parse_setting

        parse_setting(self.geometry)  # w and h of at least 1
        if len(self.model_size) not in (0, 2):
            raise ValueError("model_size is [width, height], or empty")


@dataclass(frozen=True)
class OcrConfig:
    """On-device OCR for screen_text, find_text and tap_text (daemon/screen/ocr.py)."""

    enabled: bool | str = _key(
        "auto",
        {"enum": ["auto", True, False]},
        "auto = on where the board has >= 512 MB of RAM (MemTotal >= 400 MB)",
    )
    idle_exit_s: float = _key(
        20.0, _num(1, 86400), "the OCR worker process (and its memory) goes this long after a read"
    )
    read_timeout_s: float = _key(
        120.0, _num(1, 3600), "a read (engine start included) taking longer is killed"
    )
    threads: int = _key(1, _int(1, 64), "onnxruntime threads per read")


@dataclass(frozen=True)
class StreamConfig:
    """GET /api/stream and /api/snapshot (daemon/screen/stream.py): the query's bounds."""

    default_fps: float = _key(15.0, _num(0.5, 60), "frame rate when the query names none")
    max_fps: float = _key(30.0, _num(0.5, 60), "the highest fps a viewer may ask for")
    default_quality: int = _key(70, _int(1, 100), "JPEG quality when the query names none")
    min_quality: int = _key(10, _int(1, 100), "the lowest JPEG quality a viewer may ask for")
    max_quality: int = _key(95, _int(1, 100), "the highest JPEG quality a viewer may ask for")
    max_viewers: int = _key(20, _int(1, 256), "streams open at once; more get 503")
    stall_timeout_s: float = _key(
        10.0, _num(0.5, 600), "a viewer whose socket takes no frame for this long is dropped"
    )

    def __post_init__(self) -> None:  # bounds the schema cannot relate to each other
        if not self.min_quality <= self.default_quality <= self.max_quality:
            raise ValueError(
                f"min_quality <= default_quality <= max_quality, got {self.min_quality}, "
                f"{self.default_quality}, {self.max_quality}"
            )
        if self.default_fps > self.max_fps:
            raise ValueError(f"default_fps {self.default_fps:g} is above max_fps {self.max_fps:g}")


@dataclass(frozen=True)
class ShellConfig:
    cwd: str = _key("", _STR, "working directory; empty = the state folder")
    default_timeout_s: float = _key(
        30.0, _num(0.1, 3600), "a command's limit when the call names no timeout_s"
    )
    max_output_bytes: int = _key(64 << 10, _int(1024, 16 << 20))
    max_sessions: int = _key(8, _int(0, 256), "sessions running at once")
    keep_ended_s: float = _key(
        300.0, _num(0, 86400), "an ended session (and its output) is removed this long after"
    )
    max_ended: int = _key(16, _int(0, 1024), "ended sessions kept; the oldest go first")


@dataclass(frozen=True)
class WeatherConfig:
    geocoding_url: str = _key(
        "https://geocoding-api.open-meteo.com/v1/search", _STR, "place names to coordinates"
    )
    forecast_url: str = _key("https://api.open-meteo.com/v1/forecast", _STR, "the forecast")
    timeout_s: float = _key(10.0, _num(0.1, 120), "limit of one request to the weather service")
    max_reply_bytes: int = _key(
        1 << 20, _int(1024, 64 << 20), "a bigger upstream reply is refused, not read whole"
    )


@dataclass(frozen=True)
class MediaConfig:
    """Virtual media (daemon/media): disk images the target sees as a USB drive, kept in a
    folder of their own; the drive itself is [gadget].mass_storage."""

    dir: str = _key("", _STR, "the images' folder; empty = <state.dir>/media")
    quota_mb: float = _key(
        2048.0, _num(1, 1 << 20), "all images together; an upload past it is refused"
    )
    reserve_mb: float = _key(
        64.0, _num(0, 65536), "free space an upload always leaves on the images' file system"
    )
    max_uploads: int = _key(2, _int(1, 16), "uploads running at once (each holds one buffer)")
    drop_max_mb: float = _key(
        64.0, _num(1, 2048), "largest FAT image a file drop builds (the files it holds)"
    )


@dataclass(frozen=True)
class SkillsConfig:
    dir: str = _key("", _STR, "folder searched for */SKILL.md; empty = none")


@dataclass(frozen=True)
class DiscoveryConfig:
    """DNS-SD over mDNS (daemon/discovery.py): announced only on the non-loopback addresses of
    [server].listen, never on another interface."""

    enabled: bool = _key(True, _BOOL, "announce _fingertip._tcp and _http._tcp")
    name: str = _key(
        "",
        # DNS-SD refuses control characters; a name over 63 bytes of UTF-8 is shortened.
        {"type": "string", "maxLength": 63, "pattern": "^[^\\x00-\\x1f\\x7f]*$"},
        "the DNS-SD instance name; empty = 'Fingertip <device_type> <board id prefix>'",
    )


@dataclass(frozen=True)
class LogConfig:
    level: str = _key(
        "info", {"enum": ["debug", "info", "warning", "error"]}, "the least severe level logged"
    )
    format: str = _key("auto", {"enum": ["auto", "json", "console"]})


@dataclass(frozen=True)
class Config:
    device: DeviceConfig = field(default_factory=DeviceConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    ws: WsConfig = field(default_factory=WsConfig)
    ipc: IpcConfig = field(default_factory=IpcConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    state: StateConfig = field(default_factory=StateConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    screen: ScreenConfig = field(default_factory=ScreenConfig)
    ocr: OcrConfig = field(default_factory=OcrConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)
    input: InputConfig = field(default_factory=InputConfig)
    shell: ShellConfig = field(default_factory=ShellConfig)
    weather: WeatherConfig = field(default_factory=WeatherConfig)
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    media: MediaConfig = field(default_factory=MediaConfig)
    log: LogConfig = field(default_factory=LogConfig)
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)
    gadget: GadgetSettings = field(default_factory=GadgetSettings)
    source: str = "<defaults>"
    # (key, what replaces it) for each retired key the file still has: accepted, ignored, and
    # warned about once when the daemon starts.
    retired: tuple[tuple[str, str], ...] = ()

    @property
    def platform(self) -> str:
        return self.device.platform

    @property
    def state_dir(self) -> Path:
        return Path(self.state.dir)

    @property
    def media_dir(self) -> Path:
        return Path(self.media.dir) if self.media.dir else self.state_dir / "media"


# The sections validated here (gadget is validated by its own package).
_SECTIONS: dict[str, type[Any]] = {
    f.name: f.type if isinstance(f.type, type) else globals()[str(f.type)]
    for f in dataclasses.fields(Config)
    if f.name not in ("gadget", "source", "retired")
}


def section_schema(cls: type[Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {f.name: f.metadata["schema"] for f in dataclasses.fields(cls)},
        "additionalProperties": False,
    }


def config_schema() -> dict[str, Any]:
    """The JSON Schema of the whole file ([gadget] is checked by gadget.settings)."""
    props: dict[str, Any] = {name: section_schema(cls) for name, cls in _SECTIONS.items()}
    props["gadget"] = {"type": "object"}
    return {"type": "object", "properties": props, "additionalProperties": False}


_VALIDATOR = jsonschema.Draft202012Validator(config_schema())


def _describe(err: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in err.absolute_path)
    if err.validator == "additionalProperties":
        schema = err.schema if isinstance(err.schema, dict) else {}
        instance = err.instance if isinstance(err.instance, dict) else {}
        extra = sorted(set(instance) - set(schema.get("properties", {})))
        where = f"{path}." if path else ""
        return "; ".join(f"{where}{k}: unknown key" for k in extra)
    return f"{path or '<top>'}: {err.message}"


def from_mapping(data: Mapping[str, Any], source: str = "<mapping>") -> Config:
    """Validate a parsed TOML document and build the Config (ConfigError names the key)."""
    try:  # TOML has nan and inf, which pass every schema bound: the edge rule refuses them
        check(dict(data))
    except WireError as exc:
        raise ConfigError(f"{source}: {exc.path.removeprefix('$.')}: {exc.reason}") from None
    errors = sorted(_VALIDATOR.iter_errors(dict(data)), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError(f"{source}: {_describe(errors[0])}")
    sections: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        try:
            sections[name] = cls(**data.get(name, {}))
        except ValueError as exc:  # a section's own cross-checks (__post_init__)
            raise ConfigError(f"{source}: {name}: {exc}") from None
    try:
        gadget = GadgetSettings.from_table(data.get("gadget", {}))
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    retired = tuple(retired_keys(data.get("gadget", {})))
    return Config(**sections, gadget=gadget, source=source, retired=retired)


def load(
    path: Path | None = None, overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> Config:
    """Load the config file: --config, else $FINGERTIP_CONFIG, else the board default.
    `overrides` replace keys of its tables (fingertipd --port, --listen, --require-token)
    before the file is checked, so a bad value is refused by the same schema, naming the key."""
    path = path or Path(os.environ.get("FINGERTIP_CONFIG", BOARD_CONFIG))
    try:
        data = read_config_file(path)
    except ValueError as exc:  # one line naming the file: missing, unreadable, not TOML
        raise ConfigError(str(exc)) from None
    for table, values in (overrides or {}).items():
        data = {**data, table: {**data.get(table, {}), **values}}
    return from_mapping(data, str(path))
