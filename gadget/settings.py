"""Everything about the gadget a board owner may change: the [gadget] table of fingertip.toml.

Each field carries its JSON Schema and a short "expected ..." phrase in its metadata, so a key is
declared once (name, default, type, range) and jsonschema does the checking; errors name the key
("gadget.product_id_full: expected an integer 0..0xffff").
"""

from __future__ import annotations

import dataclasses
import hashlib
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from gadget.usbstate import WAKE_SETTINGS

# A config file is a few KB; this refuses a device or a huge file given by mistake.
MAX_CONFIG_BYTES = 1 << 20


class ConfigFileMissing(ValueError):
    """There is no file at the config's path (the gadget CLI may go on with defaults)."""


def read_config_file(path: Path) -> dict[str, Any]:
    """The TOML document of the config file at `path`, for the daemon and the gadget CLI alike.
    Every way it cannot be read is a ValueError of one line that names the file."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ValueError(f"{path}: larger than {MAX_CONFIG_BYTES >> 10} KiB: not a config file")
        return tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise ConfigFileMissing(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a directory, not a config file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        where = f"byte {exc.object[exc.start]:#04x} at offset {exc.start}"
        raise ValueError(f"{path}: not UTF-8 text ({where}): save it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None


# The composite's functions by role; `function_order` is a permutation of these.
ROLES = ("keyboard", "consumer", "ecm", "pointer")

_MAC = r"^[0-9a-fA-F][02468aceACE](:[0-9a-fA-F]{2}){5}$"  # unicast: the kernel rejects multicast


def _key(
    default: Any, schema: dict[str, Any], expect: str, convert: Callable[[Any], Any] | None = None
) -> Any:
    meta = {"schema": schema, "expect": expect, "convert": convert}
    return field(default=default, metadata=meta)


def _u16(default: int) -> Any:
    return _key(
        default, {"type": "integer", "minimum": 0, "maximum": 0xFFFF}, "an integer 0..0xffff"
    )


def _usb_string(default: str) -> Any:
    # configfs keeps at most 126 characters per USB string descriptor.
    schema = {"type": "string", "minLength": 1, "maxLength": 126}
    return _key(default, schema, "a non-empty string of at most 126 characters")


def _seconds(default: float, lo: float, hi: float) -> Any:
    schema = {"type": "number", "minimum": lo, "maximum": hi}
    return _key(default, schema, f"a number of seconds {lo:g}..{hi:g}", float)


def _path(default: str) -> Any:
    schema = {"type": "string", "pattern": "^/"}
    return _key(Path(default), schema, "an absolute path", Path)


def _mac() -> Any:
    schema = {"type": "string", "anyOf": [{"const": ""}, {"pattern": _MAC}]}
    return _key(
        "", schema, "a unicast MAC address aa:bb:cc:dd:ee:ff, or empty for derived", str.lower
    )


def _derived_mac(seed: str) -> str:
    """A stable locally administered unicast address, so the target keeps its network settings."""
    octets = bytearray(hashlib.sha256(seed.encode()).digest()[:6])
    octets[0] = (octets[0] & 0xFC) | 0x02
    return ":".join(f"{b:02x}" for b in octets)


@dataclass(frozen=True)
class GadgetSettings:
    """The gadget's identity, roots and timings; `from_table` validates a TOML table into it."""

    name: str = _key(
        "fingertip",
        {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"},
        "a directory name of letters, digits, '_', '.' and '-'",
    )
    udc: str | None = _key(
        None,
        {"type": "string", "pattern": r"^[^/\s]*$"},
        "a UDC name from /sys/class/udc, or empty for the only one",
        lambda s: s or None,
    )
    configfs_root: Path = _path("/sys/kernel/config")  # noqa: RUF009 (Path is immutable)
    sysfs_root: Path = _path("/sys")  # noqa: RUF009 (Path is immutable)
    dev_root: Path = _path("/dev")  # noqa: RUF009 (Path is immutable)

    # Identities. 0x1d6b is the Linux Foundation, 0x0104 its "Multifunction Composite Gadget"; the
    # isolated profile needs its own product id, bcdDevice and serial so that iOS, which caches
    # what it learned per device, sees a new device rather than the old one without its pointer.
    vendor_id: int = _u16(0x1D6B)
    product_id_full: int = _u16(0x0104)
    product_id_isolated: int = _u16(0x0105)
    bcd_device_full: int = _u16(0x0100)
    bcd_device_isolated: int = _u16(0x0101)
    bcd_usb: int = _u16(0x0200)
    serial_full: str = _usb_string("fingertip-0001")
    serial_isolated: str = _usb_string("fingertip-0001-kbd")
    manufacturer: str = _usb_string("Fingertip")
    product_full: str = _usb_string("Fingertip")
    product_isolated: str = _usb_string("Fingertip Keyboard")
    max_power: int = _key(
        250, {"type": "integer", "minimum": 0, "maximum": 500}, "milliamperes 0..500"
    )

    # ECM link: empty means derived from serial_full (stable across profile switches).
    ecm_host_addr: str = _mac()
    ecm_dev_addr: str = _mac()

    # Link order; target-facts.md: iOS liked the pointer last, one report disagrees.
    function_order: tuple[str, ...] = _key(
        ROLES,
        {
            "type": "array",
            "items": {"enum": list(ROLES)},
            "minItems": len(ROLES),
            "maxItems": len(ROLES),
            "uniqueItems": True,
        },
        f"each of {', '.join(ROLES)} exactly once",
        tuple,
    )
    # Saves an endpoint per HID function (dwc2 has few); output reports then arrive by SET_REPORT.
    hid_no_out_endpoint: bool = _key(True, {"type": "boolean"}, "true or false")

    # Virtual media: a removable drive (f_mass_storage, 2 endpoints) last in every profile. Off
    # by default: it changes the device the target sees, and with the ECM link (3 endpoints) the
    # composite needs 9 of the 8 endpoints a Raspberry Pi's dwc2 has; `ecm = false` makes room.
    mass_storage: bool = _key(False, {"type": "boolean"}, "true or false")
    ecm: bool = _key(True, {"type": "boolean"}, "true or false")
    # Endpoints of the UDC, ep0 included; a composite needing more is refused before binding.
    udc_endpoints: int = _key(
        8, {"type": "integer", "minimum": 2, "maximum": 32}, "an integer 2..32 (ep0 included)"
    )
    # SCSI INQUIRY strings of the drive (8 and 16 printable ASCII characters at most).
    media_vendor: str = _key(
        "Fingertp", {"type": "string", "pattern": "^[ -~]{1,8}$"}, "1..8 printable ASCII characters"
    )
    media_product: str = _key(
        "Virtual Drive",
        {"type": "string", "pattern": "^[ -~]{1,16}$"},
        "1..16 printable ASCII characters",
    )

    attach_timeout: float = _seconds(5.0, 0.1, 120)
    # After a re-enumeration, how long to wait for udev to give the new /dev/hidgN nodes the
    # daemon's group before the writers open them anyway. Milliseconds on an idle board; a
    # board VM under load needed more than 5 s. Waiting costs nothing once they are ready.
    node_access_timeout: float = _seconds(10.0, 0.1, 120)
    settle_delay: float = _seconds(0.5, 0, 10)
    write_timeout: float = _seconds(0.75, 0.01, 10)

    # Remote wakeup (bmAttributes 0xA0 and /sys/class/udc/<udc>/srp): "auto" where the UDC's
    # driver implements it (gadget.usbstate.WAKE_DRIVERS), "on" for a patched kernel, "off".
    remote_wakeup: str = _key(
        "auto", {"enum": list(WAKE_SETTINGS)}, "one of auto, on (patched kernels), off"
    )
    # How often the UDC's state, is_selfpowered and the gadget's `suspended` are re-read
    # (gadget.usbstate: most UDCs show a suspend only in the latter two, never notified).
    state_poll_interval: float = _seconds(0.1, 0.01, 60)

    def __post_init__(self) -> None:
        # Invariants across keys; single-key checks live in the schema.
        if self.product_id_isolated == self.product_id_full:
            raise ValueError(
                "gadget.product_id_isolated: must differ from product_id_full"
                " (the target must see a different device)"
            )
        if self.serial_isolated == self.serial_full:
            raise ValueError("gadget.serial_isolated: must differ from serial_full")
        if self.host_mac == self.dev_mac:
            raise ValueError("gadget.ecm_dev_addr: must differ from ecm_host_addr")

    @property
    def host_mac(self) -> str:
        """The MAC the target's side of the ECM link uses."""
        return self.ecm_host_addr or _derived_mac(f"{self.serial_full}/host")

    @property
    def dev_mac(self) -> str:
        """The MAC the board's side of the ECM link uses."""
        return self.ecm_dev_addr or _derived_mac(f"{self.serial_full}/dev")

    @property
    def gadget_dir(self) -> Path:
        return self.configfs_root / "usb_gadget" / self.name

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> GadgetSettings:
        """Validate a [gadget] TOML table; ValueError names the first bad key. Retired keys
        are ignored (see RETIRED)."""
        table = {key: value for key, value in table.items() if key not in RETIRED}
        unknown = sorted(set(table) - set(_FIELDS))
        if unknown:
            raise ValueError(f"gadget.{unknown[0]}: unknown key (known: {', '.join(_FIELDS)})")
        for key, value in table.items():
            # NaN slips through JSON Schema's range checks (every comparison is false).
            if not _VALIDATORS[key].is_valid(value) or value != value:
                raise ValueError(f"gadget.{key}: expected {_FIELDS[key].metadata['expect']}")
        kwargs = {}
        for key, value in table.items():
            convert = _FIELDS[key].metadata["convert"]
            kwargs[key] = convert(value) if convert else value
        return cls(**kwargs)


# Keys an earlier release had, and the key that does their job now. A board config that still
# has one is not refused (an upgrade must never stop a board's daemon): from_table ignores it and
# retired_keys names it, so the daemon can say once what to use instead.
RETIRED = {
    "release_repeat": "input.release_repeats",
    "release_interval": "input.release_interval_ms",
}


def retired_keys(table: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(gadget.<key>, its replacement) for each retired key in a [gadget] table."""
    return [(f"gadget.{key}", RETIRED[key]) for key in sorted(table) if key in RETIRED]


_FIELDS = {f.name: f for f in dataclasses.fields(GadgetSettings)}
_VALIDATORS = {
    name: jsonschema.Draft202012Validator(f.metadata["schema"]) for name, f in _FIELDS.items()
}
