"""The daemon's configuration: one TOML file, validated at start.

Each section is a dataclass whose fields carry their JSON Schema in metadata; the schema for the
whole file is generated from them, so a key is declared once (name, default, type, range) and
jsonschema does the checking. The [gadget] table belongs to the gadget package and is validated
by gadget.settings. Errors name the key, e.g.
``server.port: 70000 is greater than the maximum of 65535``.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import jsonschema
from gadget.settings import GadgetSettings

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


def _num(lo: float, hi: float) -> dict[str, Any]:
    return {"type": "number", "minimum": lo, "maximum": hi}


def _int(lo: int, hi: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": lo, "maximum": hi}


def _strings() -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}}


@dataclass(frozen=True)
class DeviceConfig:
    device_type: str = _key("iOS", {"enum": list(DEVICE_TYPES)}, "the target's kind")

    @property
    def platform(self) -> str:
        """The lowercase platform id the catalog filters on (ios, android, macos, ...)."""
        return self.device_type.lower()


@dataclass(frozen=True)
class ServerConfig:
    listen: list[str] = _key(
        ["127.0.0.1"], _strings(), "addresses to bind; never 0.0.0.0 unless you mean it"
    )
    port: int = _key(8080, _PORT)
    allowed_hosts: list[str] = _key(
        [], _strings(), "extra Host header names accepted (besides the listen addresses)"
    )
    max_body_bytes: int = _key(1 << 20, _int(1024, 64 << 20))
    tool_timeout_s: float = _key(60.0, _num(0.1, 3600), "limit for non-HID tools")
    hid_timeout_s: float = _key(300.0, _num(1, 3600), "server-side limit of a HID invocation")
    shutdown_grace_s: float = _key(10.0, _num(0, 300), "wait for HID invocations at SIGTERM")


@dataclass(frozen=True)
class GuardConfig:
    http: str = _key("read-write", _GUARD)
    ws: str = _key("read-write", _GUARD)
    ipc: str = _key("read-write", _GUARD)


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
class BackendConfig:
    kind: str = _key("board", {"enum": ["board", "simulated"]})
    sim_width: int = _key(0, _int(0, 8192), "simulated screen width; 0 = by platform")
    sim_height: int = _key(0, _int(0, 8192))
    sim_reenumerate_s: float = _key(0.05, _num(0, 10))


@dataclass(frozen=True)
class CaptureConfig:
    device: str = _key("/dev/video0", _STR, "a path, /dev/v4l/by-id/..., or a udev ID_SERIAL")
    width: int = _key(1920, _int(16, 8192))
    height: int = _key(1080, _int(16, 8192))
    fps: float = _key(30.0, _num(1, 240))
    fourcc: str = _key("MJPG", {"type": "string", "minLength": 4, "maxLength": 4})
    idle_stop_s: float = _key(10.0, _num(0.1, 3600))
    no_frame_timeout_s: float = _key(3.0, _num(0.1, 60))


@dataclass(frozen=True)
class ShellConfig:
    cwd: str = _key("", _STR, "working directory; empty = the state folder")
    default_timeout_s: float = _key(30.0, _num(0.1, 3600))
    max_output_bytes: int = _key(64 << 10, _int(1024, 16 << 20))
    max_sessions: int = _key(8, _int(0, 256))


@dataclass(frozen=True)
class WeatherConfig:
    geocoding_url: str = _key("https://geocoding-api.open-meteo.com/v1/search", _STR)
    forecast_url: str = _key("https://api.open-meteo.com/v1/forecast", _STR)
    timeout_s: float = _key(10.0, _num(0.1, 120))


@dataclass(frozen=True)
class SkillsConfig:
    dir: str = _key("", _STR, "folder searched for */SKILL.md; empty = none")


@dataclass(frozen=True)
class LogConfig:
    level: str = _key("info", {"enum": ["debug", "info", "warning", "error"]})
    format: str = _key("auto", {"enum": ["auto", "json", "console"]})


@dataclass(frozen=True)
class Config:
    device: DeviceConfig = field(default_factory=DeviceConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    state: StateConfig = field(default_factory=StateConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    shell: ShellConfig = field(default_factory=ShellConfig)
    weather: WeatherConfig = field(default_factory=WeatherConfig)
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    gadget: GadgetSettings = field(default_factory=GadgetSettings)
    source: str = "<defaults>"

    @property
    def platform(self) -> str:
        return self.device.platform

    @property
    def state_dir(self) -> Path:
        return Path(self.state.dir)


# The sections validated here (gadget is validated by its own package).
_SECTIONS: dict[str, type[Any]] = {
    f.name: f.type if isinstance(f.type, type) else globals()[str(f.type)]
    for f in dataclasses.fields(Config)
    if f.name not in ("gadget", "source")
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

T = TypeVar("T")


def _describe(err: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in err.absolute_path)
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        where = f"{path}." if path else ""
        return "; ".join(f"{where}{k}: unknown key" for k in extra)
    return f"{path or '<top>'}: {err.message}"


def from_mapping(data: Mapping[str, Any], source: str = "<mapping>") -> Config:
    """Validate a parsed TOML document and build the Config (ConfigError names the key)."""
    errors = sorted(_VALIDATOR.iter_errors(dict(data)), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError(f"{source}: {_describe(errors[0])}")
    sections: dict[str, Any] = {name: cls(**data.get(name, {})) for name, cls in _SECTIONS.items()}
    try:
        gadget = GadgetSettings.from_table(data.get("gadget", {}))
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return Config(**sections, gadget=gadget, source=source)


def load(path: Path | None = None) -> Config:
    """Load the config file: --config, else $FINGERTIP_CONFIG, else the board default."""
    path = path or Path(os.environ.get("FINGERTIP_CONFIG", BOARD_CONFIG))
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return from_mapping(data, str(path))
