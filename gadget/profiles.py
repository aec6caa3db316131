"""Profiles: declarative specs of the composite the target sees (identity + ordered functions)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gadget import descriptors
from gadget.descriptors import HidFunction
from gadget.settings import GadgetSettings

FULL, ISOLATED = "full", "keyboard-isolated"  # every function; the pointer-free one (iOS)
PROFILES = (FULL, ISOLATED)
PLATFORMS = ("ios", "android", "macos", "windows", "linux")

# configfs function instance per role. Stable names keep a role's /dev/hidgN minor and let
# status and device_nodes() map a live function back to its role.
INSTANCES = {
    "keyboard": "hid.keyboard",
    "consumer": "hid.consumer",
    "ecm": "ecm.usb0",
    "pointer": "hid.pointer",
    "mass_storage": "mass_storage.usb0",
}
MASS_STORAGE = "mass_storage"
LUN = "lun.0"  # the one LUN: the kernel makes it with the function

# Endpoints besides ep0 per function kind: a HID function has an interrupt IN and, unless
# no_out_endpoint is set, an interrupt OUT; ECM a notification IN and a bulk pair; mass storage
# a bulk pair.
ECM_ENDPOINTS, MASS_STORAGE_ENDPOINTS = 3, 2
ROLE_OF_INSTANCE = {instance: role for role, instance in INSTANCES.items()}


@dataclass(frozen=True)
class Identity:
    """The device descriptor fields and strings the target keys its driver cache on."""

    id_vendor: int
    id_product: int
    bcd_device: int
    bcd_usb: int
    serial: str
    manufacturer: str
    product: str


@dataclass(frozen=True)
class FunctionSpec:
    """One configfs function: instance name, role, and the attribute files it needs."""

    instance: str
    role: str
    hid: HidFunction | None = None
    attrs: Mapping[str, str] = field(default_factory=dict)
    # Written only where the kernel has the file (no_out_endpoint is new in 5.x).
    optional_attrs: Mapping[str, str] = field(default_factory=dict)
    endpoints: int = 1  # besides ep0, counted against the UDC before binding

    def attributes(self) -> dict[str, bytes]:
        """Every required attribute file with its content, HID ones first."""
        out: dict[str, bytes] = {}
        if self.hid is not None:
            out["protocol"] = str(self.hid.protocol).encode()
            out["subclass"] = str(self.hid.subclass).encode()
            out["report_length"] = str(self.hid.report_length).encode()
            out["report_desc"] = self.hid.report_desc
        out.update((name, value.encode()) for name, value in self.attrs.items())
        return out


@dataclass(frozen=True)
class Profile:
    """A whole composite; `functions` are in link order (which is the interface order)."""

    name: str
    platform: str
    identity: Identity
    functions: tuple[FunctionSpec, ...]
    config_label: str
    max_power: int
    # Remote wakeup advertised in the configuration (bmAttributes 0xA0 rather than 0x80): only
    # where the UDC can really signal it (gadget.usbstate.wake_capability).
    remote_wakeup: bool = False

    @property
    def bm_attributes(self) -> int:
        return 0xA0 if self.remote_wakeup else 0x80

    def roles(self) -> tuple[str, ...]:
        return tuple(f.role for f in self.functions)

    def endpoints(self) -> int:
        """Endpoints the composite needs, ep0 included."""
        return 1 + sum(f.endpoints for f in self.functions)


def over_budget(profile: Profile, available: int) -> str | None:
    """Why `profile` does not fit a UDC of `available` endpoints (ep0 included), naming what to
    drop; None when it fits. Checked before anything is written: never a half-bound gadget."""
    need = profile.endpoints()
    if need <= available:
        return None
    parts = ", ".join(f"{f.role} {f.endpoints}" for f in profile.functions)
    excess = need - available
    droppable = [
        f"{f.role} ({f.endpoints}, gadget.{f.role} = false)"
        for f in profile.functions
        if f.role in ("ecm", MASS_STORAGE) and f.endpoints >= excess
    ]
    hint = f"drop {' or '.join(droppable)}" if droppable else "drop functions"
    return (
        f"profile {profile.name!r} needs {need} endpoints (ep0 1, {parts}) but the UDC has"
        f" {available} (gadget.udc_endpoints): {hint}"
    )


def _identity(name: str, s: GadgetSettings) -> Identity:
    full = name == "full"
    return Identity(
        id_vendor=s.vendor_id,
        id_product=s.product_id_full if full else s.product_id_isolated,
        bcd_device=s.bcd_device_full if full else s.bcd_device_isolated,
        bcd_usb=s.bcd_usb,
        serial=s.serial_full if full else s.serial_isolated,
        manufacturer=s.manufacturer,
        product=s.product_full if full else s.product_isolated,
    )


def inquiry_string(s: GadgetSettings) -> str:
    """The SCSI INQUIRY vendor (8), product (16) and revision (4) fields as the kernel keeps
    them: padded with spaces to 28 characters, so the live file reads back the same."""
    return f"{s.media_vendor:<8.8}{s.media_product:<16.16}{'1.00':<4}"


def _function(role: str, platform: str, s: GadgetSettings) -> FunctionSpec:
    if role == "ecm":
        attrs = {"host_addr": s.host_mac, "dev_addr": s.dev_mac}
        return FunctionSpec(INSTANCES[role], role, attrs=attrs, endpoints=ECM_ENDPOINTS)
    if role == MASS_STORAGE:
        # What is attached (file, ro, cdrom) is no part of the profile: it changes while bound
        # (gadget.configfs.Gadget.attach_medium) and a profile switch keeps it.
        attrs = {
            "stall": "0",  # some hosts (older macOS) mishandle a stalled bulk endpoint
            f"{LUN}/removable": "1",
            f"{LUN}/inquiry_string": inquiry_string(s),
        }
        return FunctionSpec(INSTANCES[role], role, attrs=attrs, endpoints=MASS_STORAGE_ENDPOINTS)
    hid = {
        "keyboard": descriptors.KEYBOARD,
        "consumer": descriptors.CONSUMER,
        "pointer": descriptors.pointer_for(platform),
    }[role]
    optional = {"no_out_endpoint": "1"} if s.hid_no_out_endpoint else {}
    endpoints = 1 if s.hid_no_out_endpoint else 2
    return FunctionSpec(
        INSTANCES[role], role, hid=hid, optional_attrs=optional, endpoints=endpoints
    )


def config_label(name: str, instances: tuple[str, ...]) -> str:
    """The configuration string: records which profile is live and the link order, which
    configfs itself does not show (links list in no defined order)."""
    return f"{name}: {' '.join(instances)}"


def parse_label(label: str) -> tuple[str, tuple[str, ...]] | None:
    """Inverse of config_label; None for a label we did not write."""
    name, sep, rest = label.partition(": ")
    if not sep or not name:
        return None
    return name, tuple(rest.split())


def has_role(name: str, role: str) -> bool:
    """Whether profile `name` has the function `role`: `full` has all, `keyboard-isolated` all
    but the pointer (it is the pointer that makes iOS take modifiers as shortcuts)."""
    return name == FULL or role != "pointer"


def build_profile(
    name: str, platform: str, settings: GadgetSettings, *, remote_wakeup: bool = False
) -> Profile:
    """The profile `name` for a `platform` target, in the settings' function order."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; valid: {', '.join(PROFILES)}")
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}; valid: {', '.join(PLATFORMS)}")
    roles = [r for r in settings.function_order if has_role(name, r)]
    if not settings.ecm:
        roles.remove("ecm")
    if settings.mass_storage:
        # In every profile, not a profile of its own: the engine switches between full and
        # keyboard-isolated by itself, and a drive only in one of them would vanish mid-copy.
        roles.append(MASS_STORAGE)
    functions = tuple(_function(role, platform, settings) for role in roles)
    return Profile(
        name=name,
        platform=platform,
        identity=_identity(name, settings),
        functions=functions,
        config_label=config_label(name, tuple(f.instance for f in functions)),
        max_power=settings.max_power,
        remote_wakeup=remote_wakeup,
    )
