"""ConfigFS: make a profile live as a desired-state diff, tear it down, bind and watch the UDC.

Blocking by design (small synchronous file operations); the daemon calls it through
asyncio.to_thread. Every mutation goes through `ConfigfsOps`, the one seam where tests put a
fake with configfs's semantics; all the logic below runs unchanged on a board, in the kernel
test VM and in the unit tests.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from gadget import usbstate
from gadget.errors import ConfigfsError, EndpointBudgetExceeded, GadgetError
from gadget.profiles import (
    INSTANCES,
    LUN,
    MASS_STORAGE,
    ROLE_OF_INSTANCE,
    Profile,
    over_budget,
    parse_label,
)
from gadget.settings import GadgetSettings

log = structlog.get_logger("gadget.configfs")

LANG = "0x409"  # US English, the only string table hosts reliably read
CONFIG = "c.1"

# Attributes the kernel reads back in its own number format ("0x1d6b", "250"): compare values.
_NUMERIC = frozenset(
    {
        *("idVendor", "idProduct", "bcdDevice", "bcdUSB", "MaxPower", "bmAttributes"),
        *("protocol", "subclass", "report_length", "no_out_endpoint", "qmult"),
        *("stall", "removable", "ro", "cdrom"),
    }
)
_MACS = frozenset({"host_addr", "dev_addr"})


class ConfigfsOps:
    """The filesystem calls configfs work needs, and nothing more."""

    def read(self, path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def write(self, path: Path, data: bytes) -> None:
        # No O_CREAT: an attribute exists or this kernel lacks it. One write() is one store.
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.EIO, "short write", str(path))
        finally:
            os.close(fd)  # binary attributes (report_desc) are committed here

    def exists(self, path: Path) -> bool:
        return os.path.lexists(path)

    def is_link(self, path: Path) -> bool:
        return path.is_symlink()

    def listdir(self, path: Path) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def mkdir(self, path: Path) -> None:
        os.mkdir(path)

    def rmdir(self, path: Path) -> None:
        os.rmdir(path)

    def symlink(self, target: Path, link: Path) -> None:
        os.symlink(target, link)

    def unlink(self, path: Path) -> None:
        os.unlink(path)


def _text(raw: bytes) -> str:
    # Up to a NUL: 6.1's u_ether shows host_addr as "aa:..:ff\0\n".
    return raw.split(b"\0", 1)[0].decode(errors="replace").removesuffix("\n")


def _same(path: Path, live: bytes | None, want: bytes) -> bool:
    """Whether a live attribute already holds `want`, in the kernel's read-back format."""
    if live is None:
        return False
    name = path.name
    if name == "report_desc":
        return live == want
    a, b = _text(live), _text(want)
    if name in _NUMERIC:
        try:
            return int(a, 0) == int(b, 0)
        except ValueError:
            return False
    if name in _MACS:
        return a.lower() == b.lower()
    return a == b


_Undo = tuple[str, Callable[[], None]]


@dataclass(frozen=True)
class Medium:
    """What the drive holds: an image file, shown as a CD-ROM or a flash drive, maybe ro."""

    path: Path
    cdrom: bool = False
    read_only: bool = False


class Gadget:
    """One configfs USB gadget (settings.name) and the UDC it binds to."""

    # After a rebind, dummy_udc keeps showing the old "configured" until the host resets the
    # port (~0.4 s, seen in the kernel VM). Within this many seconds of our bind, "configured"
    # counts only once another state was seen in between.
    reenumeration_grace = 2.0

    def __init__(self, settings: GadgetSettings, ops: ConfigfsOps | None = None) -> None:
        self.settings = settings
        self.ops = ops or ConfigfsOps()
        self.path = settings.gadget_dir
        self._config = self.path / "configs" / CONFIG
        self._lock = threading.RLock()
        self._bound_at: float | None = None  # monotonic time of our last bind, until confirmed

    # --- the UDC ---------------------------------------------------------------------------

    @property
    def _udc_class(self) -> Path:
        return self.settings.sysfs_root / "class" / "udc"

    def find_udc(self) -> str:
        """settings.udc if it exists, else the only UDC of the board."""
        present = self.ops.listdir(self._udc_class)
        wanted = self.settings.udc
        if wanted is not None:
            if wanted not in present:
                raise ConfigfsError(
                    f"UDC {wanted!r} not found under {self._udc_class}"
                    f" (present: {', '.join(present) or 'none'})"
                )
            return wanted
        if not present:
            raise ConfigfsError(
                f"no USB device controller under {self._udc_class}"
                " (is the OTG port in device mode and its driver loaded?)"
            )
        if len(present) > 1:
            raise ConfigfsError(
                f"several UDCs under {self._udc_class} ({', '.join(present)}); set gadget.udc"
            )
        return present[0]

    def bound_udc(self) -> str | None:
        raw = self.ops.read(self.path / "UDC")
        if raw is None:
            return None
        return _text(raw).strip() or None

    def udc_state(self) -> str:
        """The UDC's sysfs state ("configured", "not attached", ...)."""
        udc_dir = self.udc_dir()
        raw = self.ops.read(udc_dir / "state")
        if raw is None:
            raise ConfigfsError(f"no state for UDC {udc_dir.name!r} under {self._udc_class}")
        return _text(raw).strip()

    def udc_dir(self) -> Path:
        """The sysfs folder of the UDC the gadget binds to (or would)."""
        return self._udc_class / (self.bound_udc() or self.find_udc())

    def bind(self) -> None:
        """Bind to the UDC, recreating the config's links first (kvmd saw functions stop
        working after unbind+bind otherwise)."""
        with self._lock:
            if self.bound_udc() is not None:
                return
            udc = self.find_udc()
            try:
                links = self.linked()
                for instance in reversed(links):
                    self.ops.unlink(self._config / instance)
                for instance in links:
                    self.ops.symlink(self.path / "functions" / instance, self._config / instance)
                self.ops.write(self.path / "UDC", udc.encode())
            except OSError as exc:
                raise ConfigfsError(f"binding {self.path.name} to {udc}: {exc}") from exc
            self._bound_at = time.monotonic()
            log.info("gadget.bound", udc=udc)

    def unbind(self) -> None:
        with self._lock:
            udc = self.bound_udc()
            if udc is None:
                return
            try:
                self.ops.write(self.path / "UDC", b"\n")
            except OSError as exc:
                raise ConfigfsError(f"unbinding {self.path.name} from {udc}: {exc}") from exc
            log.info("gadget.unbound", udc=udc)

    def wait_configured(self, timeout: float) -> float:
        """Seconds until the host configured the device, not trusting a stale "configured"
        right after our own bind (see reenumeration_grace)."""
        start = time.monotonic()
        bound_at, seen_other = self._bound_at, False
        while True:
            state = self.udc_state()
            now = time.monotonic()
            elapsed = now - start
            seen_other = seen_other or state != "configured"
            fresh = bound_at is not None and now - bound_at < self.reenumeration_grace
            if state == "configured" and (seen_other or not fresh):
                self._bound_at = None
                log.info("gadget.configured", seconds=round(elapsed, 3))
                return elapsed
            if elapsed >= timeout:
                raise ConfigfsError(
                    f"the target did not configure the device within {timeout:g} s"
                    f" (UDC state: {state!r}; is the cable in?)"
                )
            time.sleep(min(0.01, timeout - elapsed))

    # --- reading the live tree ---------------------------------------------------------------

    def exists(self) -> bool:
        return self.ops.exists(self.path)

    def _label(self) -> tuple[str, tuple[str, ...]] | None:
        raw = self.ops.read(self._config / "strings" / LANG / "configuration")
        return parse_label(_text(raw)) if raw is not None else None

    def linked(self) -> list[str]:
        """Function instances linked into the configuration, in link order as recorded in the
        configuration label (configfs lists links in no defined order)."""
        links = {n for n in self.ops.listdir(self._config) if self.ops.is_link(self._config / n)}
        label = self._label()
        if label is not None and set(label[1]) == links:
            return list(label[1])
        return sorted(links)

    def live_profile(self) -> str | None:
        """The profile the target can see: recorded by apply, None when unbound or absent."""
        label = self._label()
        if label is None or self.bound_udc() is None:
            return None
        return label[0]

    def device_nodes(self) -> dict[str, Path]:
        """role -> /dev/hidgN of each linked HID function whose node exists."""
        nodes: dict[str, Path] = {}
        for instance in self.linked():
            if not instance.startswith("hid."):
                continue
            raw = self.ops.read(self.path / "functions" / instance / "dev")
            if raw is None:
                continue
            node = self._node_for(_text(raw).strip())
            if node is not None:
                nodes[ROLE_OF_INSTANCE.get(instance, instance)] = node
        return nodes

    def _node_for(self, major_minor: str) -> Path | None:
        uevent = self.ops.read(self.settings.sysfs_root / "dev" / "char" / major_minor / "uevent")
        for line in _text(uevent or b"").splitlines():
            if line.startswith("DEVNAME="):
                return self.settings.dev_root / line.removeprefix("DEVNAME=")
        # No sysfs entry (or no DEVNAME): find the character device by number.
        try:
            major, minor = (int(x) for x in major_minor.split(":"))
            entries = list(os.scandir(self.settings.dev_root))
        except (ValueError, OSError):
            return None
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:  # gone while we looked
                continue
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor):
                return Path(entry.path)
        return None

    def status(self) -> dict[str, Any]:
        """What a person debugging a board wants to see, JSON-ready."""
        exists = self.exists()
        strings = self.path / "strings" / LANG
        identity = None
        if exists:
            fields = {
                "id_vendor": self.path / "idVendor",
                "id_product": self.path / "idProduct",
                "bcd_device": self.path / "bcdDevice",
                "bcd_usb": self.path / "bcdUSB",
                "serial": strings / "serialnumber",
                "manufacturer": strings / "manufacturer",
                "product": strings / "product",
            }
            identity = {k: _text(self.ops.read(p) or b"").strip() for k, p in fields.items()}
        try:
            state: str | None = self.udc_state()
            link: str | None = usbstate.normalize(usbstate.read_state(self.udc_dir()))
        except ConfigfsError:
            state = link = None
        return {
            "gadget": str(self.path),
            "exists": exists,
            "profile": self.live_profile(),
            "identity": identity,
            "functions": [
                {"instance": i, "role": ROLE_OF_INSTANCE.get(i, i)} for i in self.linked()
            ],
            "udc": self.bound_udc(),
            "state": state,
            "link": link,  # not_attached, attached, configured or suspended (gadget.usbstate)
            "device_nodes": {role: str(p) for role, p in self.device_nodes().items()},
        }

    # --- applying a profile ------------------------------------------------------------------

    def _dirs(self, profile: Profile) -> list[Path]:
        functions = self.path / "functions"
        return [
            self.path,
            self.path / "strings" / LANG,
            self._config,
            self._config / "strings" / LANG,
            *(functions / f.instance for f in profile.functions),
        ]

    def _files(self, profile: Profile) -> list[tuple[Path, bytes, bool]]:
        """(attribute file, content, optional) for the whole profile."""
        g, ident = self.path, profile.identity
        strings = g / "strings" / LANG
        files = [
            (g / "idVendor", f"0x{ident.id_vendor:04x}".encode(), False),
            (g / "idProduct", f"0x{ident.id_product:04x}".encode(), False),
            (g / "bcdDevice", f"0x{ident.bcd_device:04x}".encode(), False),
            (g / "bcdUSB", f"0x{ident.bcd_usb:04x}".encode(), False),
            (strings / "manufacturer", ident.manufacturer.encode(), False),
            (strings / "product", ident.product.encode(), False),
            (strings / "serialnumber", ident.serial.encode(), False),
            (self._config / "MaxPower", str(profile.max_power).encode(), False),
            (self._config / "bmAttributes", f"0x{profile.bm_attributes:02x}".encode(), False),
            (
                self._config / "strings" / LANG / "configuration",
                profile.config_label.encode(),
                False,
            ),
        ]
        for fn in profile.functions:
            d = g / "functions" / fn.instance
            files += [(d / name, value, False) for name, value in fn.attributes().items()]
            files += [(d / n, v.encode(), True) for n, v in fn.optional_attrs.items()]
        return files

    def differences(self, profile: Profile, udc: str) -> list[str]:
        """What differs between the live tree and `profile` bound to `udc`; empty = live."""
        if not self.exists():
            return [f"{self.path} absent"]
        diffs = [f"{d} missing" for d in self._dirs(profile) if not self.ops.exists(d)]
        for path, want, optional in self._files(profile):
            live = self.ops.read(path)
            if not (live is None and optional) and not _same(path, live, want):
                diffs.append(f"{path.relative_to(self.path)} differs")
        linked = set(self.linked())
        wanted = {f.instance for f in profile.functions}
        if linked != wanted:
            diffs.append(f"links {sorted(linked)} != {sorted(wanted)}")
        bound = self.bound_udc()
        if bound != udc:
            diffs.append(f"UDC {bound!r} != {udc!r}")
        return diffs

    def apply(self, profile: Profile) -> bool:
        """Make `profile` live, touching nothing when it already is. True when something
        changed (the target re-enumerates). On failure the previous state comes back and
        ConfigfsError is raised: never a half-built gadget."""
        refusal = over_budget(profile, self.settings.udc_endpoints)
        if refusal is not None:
            raise EndpointBudgetExceeded(refusal)
        with self._lock:
            root = self.path.parent
            if not self.ops.exists(root):
                raise ConfigfsError(f"{root} missing: is configfs mounted and libcomposite loaded?")
            udc = self.find_udc()
            diffs = self.differences(profile, udc)
            if not diffs:
                log.debug("gadget.apply.unchanged", profile=profile.name)
                return False
            log.info(
                "gadget.apply", profile=profile.name, platform=profile.platform, udc=udc,
                changes=len(diffs), first=diffs[:5],
            )  # fmt: skip
            journal: list[_Undo] = []
            try:
                self._build(profile, udc, journal)
            except BaseException as exc:
                failures = self._rollback(journal)
                if journal:  # the rollback rebound: the host re-enumerates too
                    self._bound_at = time.monotonic()
                if not isinstance(exc, OSError):
                    raise
                outcome = (
                    f"rollback failed too: {failures[0]}" if failures else "previous state restored"
                )
                raise ConfigfsError(
                    f"applying profile {profile.name!r} failed: {exc}; {outcome}"
                ) from exc
            self._bound_at = time.monotonic()
            log.info("gadget.applied", profile=profile.name, udc=udc)
            return True

    def _build(self, profile: Profile, udc: str, journal: list[_Undo]) -> None:
        """Unbind, unlink, write what differs, relink in order, bind; each step journaled."""
        ops = self.ops

        def do(what: str, action: Callable[[], None], undo: Callable[[], None]) -> None:
            log.debug("configfs.op", op=what)
            action()
            journal.append((what, undo))

        def write(path: Path, data: bytes, old: bytes) -> None:
            do(f"write {path}", lambda: ops.write(path, data), lambda: ops.write(path, old))

        def mkdir(path: Path) -> None:
            do(f"mkdir {path}", lambda: ops.mkdir(path), lambda: ops.rmdir(path))

        def link(target: Path, path: Path) -> None:
            do(f"link {path}", lambda: ops.symlink(target, path), lambda: ops.unlink(path))

        def unlink(target: Path, path: Path) -> None:
            do(f"unlink {path}", lambda: ops.unlink(path), lambda: ops.symlink(target, path))

        functions = self.path / "functions"
        if self.exists():
            bound = self.bound_udc()
            if bound is not None:
                write(self.path / "UDC", b"\n", bound.encode())
            # Unlink last-linked first, so that undoing relinks in the original order.
            for instance in reversed(self.linked()):
                unlink(functions / instance, self._config / instance)
        for d in self._dirs(profile):
            if not ops.exists(d):
                mkdir(d)
        for path, want, optional in self._files(profile):
            live = ops.read(path)
            if live is None and optional:
                continue
            if not _same(path, live, want):
                write(path, want, live if live is not None else b"")
        for fn in profile.functions:
            link(functions / fn.instance, self._config / fn.instance)
        write(self.path / "UDC", udc.encode(), b"\n")

    def _rollback(self, journal: list[_Undo]) -> list[str]:
        """Undo in reverse order (which is also an order configfs accepts); keep going past
        failures so as much as possible comes back."""
        failures = []
        for what, undo in reversed(journal):
            try:
                undo()
            except OSError as exc:
                failures.append(f"undoing {what}: {exc}")
        log.info("gadget.rolled_back", steps=len(journal), failures=failures)
        return failures

    # --- the drive (mass storage's one LUN) ------------------------------------------------------

    @property
    def _lun(self) -> Path:
        return self.path / "functions" / INSTANCES[MASS_STORAGE] / LUN

    def medium(self) -> Medium | None:
        """What the drive holds now, as the kernel says; None when empty or no drive."""
        raw = self.ops.read(self._lun / "file")
        path = _text(raw or b"").strip()
        if not path:
            return None
        flags = {
            n: _text(self.ops.read(self._lun / n) or b"0").strip() == "1" for n in ("ro", "cdrom")
        }
        return Medium(Path(path), cdrom=flags["cdrom"], read_only=flags["ro"])

    def drive_is_cdrom(self) -> bool:
        """The LUN's type as the target read it at its last enumeration (CD-ROM or disk)."""
        return _text(self.ops.read(self._lun / "cdrom") or b"0").strip() == "1"

    def attach_medium(self, medium: Medium) -> None:
        """Put `medium` into the empty drive: mode first (the kernel refuses a change of ro or
        cdrom while a file is open), the file last; a failure puts the mode back."""
        with self._lock:
            if not self.ops.exists(self._lun):
                raise GadgetError(
                    "the composite has no drive (set gadget.mass_storage = true)",
                    code="media_unavailable",
                )
            if self.medium() is not None:
                raise GadgetError("the drive holds a medium: detach it first", code="media_busy")
            journal: list[_Undo] = []
            try:
                for name, value in (("ro", medium.read_only), ("cdrom", medium.cdrom)):
                    path, old = self._lun / name, self.ops.read(self._lun / name) or b"0"
                    self.ops.write(path, b"1" if value else b"0")
                    journal.append((f"write {path}", functools.partial(self.ops.write, path, old)))
                self.ops.write(self._lun / "file", str(medium.path).encode())
            except OSError as exc:
                self._rollback(journal)
                raise ConfigfsError(f"attaching {medium.path.name}: {exc}") from exc
            log.info("gadget.medium_attached", image=str(medium.path), cdrom=medium.cdrom,
                     read_only=medium.read_only)  # fmt: skip

    def eject_medium(self, *, forced: bool) -> bool:
        """Empty the drive; False when it was empty. Unforced, a target that locked the medium
        (PREVENT MEDIUM REMOVAL, as a mounted drive often is) makes it fail with media_locked;
        forced_eject takes it away regardless, as pulling a stick out would."""
        with self._lock:
            if self.medium() is None:
                return False
            try:
                if forced and self.ops.exists(self._lun / "forced_eject"):
                    self.ops.write(self._lun / "forced_eject", b"1")
                else:
                    self.ops.write(self._lun / "file", b"\n")
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    raise GadgetError(
                        "the target has locked the drive's medium: eject it there, or force",
                        code="media_locked",
                        retryable=True,
                    ) from exc
                raise ConfigfsError(f"ejecting the medium: {exc}") from exc
            log.info("gadget.medium_ejected", forced=forced)
            return True

    # --- tearing down ------------------------------------------------------------------------

    def teardown(self) -> bool:
        """Remove the gadget in the order configfs requires; False when there was none."""
        with self._lock:
            if not self.exists():
                return False
            ops, g = self.ops, self.path
            try:
                if self.bound_udc() is not None:
                    ops.write(g / "UDC", b"\n")
                for name in ops.listdir(g / "configs"):
                    config = g / "configs" / name
                    for entry in ops.listdir(config):
                        if ops.is_link(config / entry):
                            ops.unlink(config / entry)
                    for lang in ops.listdir(config / "strings"):
                        ops.rmdir(config / "strings" / lang)
                    ops.rmdir(config)
                for name in ops.listdir(g / "functions"):
                    ops.rmdir(g / "functions" / name)
                for lang in ops.listdir(g / "strings"):
                    ops.rmdir(g / "strings" / lang)
                for entry in ops.listdir(g / "os_desc"):
                    if ops.is_link(g / "os_desc" / entry):
                        ops.unlink(g / "os_desc" / entry)
                ops.rmdir(g)
            except OSError as exc:
                raise ConfigfsError(f"tearing down {g}: {exc}") from exc
            log.info("gadget.torn_down", gadget=str(g))
            return True
