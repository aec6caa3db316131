"""FakeConfigfs: a FAKE of the kernel's usb_gadget configfs over a plain temporary directory.

A plain directory has none of configfs's behaviour (mkdir of a function creates no attribute
files, rmdir of a populated directory fails, attributes of a linked function are busy), so the
unit tests put this fake behind gadget.configfs's ConfigfsOps seam. It emulates only what
the gadget code relies on, after drivers/usb/gadget/configfs.c, f_hid.c and u_ether_configfs.h.
The real proof is the kernel tier. Every successful mutation is logged in `ops`, and `fail`
injects an EIO before a chosen operation.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Collection
from pathlib import Path

from gadget.configfs import ConfigfsOps

Failure = Callable[[str, Path, bytes | None], bool]

_U16 = ("idVendor", "idProduct", "bcdDevice", "bcdUSB")
_DECIMAL = ("protocol", "subclass", "report_length", "no_out_endpoint", "qmult", "MaxPower")
_FLAGS = ("stall", "removable", "ro", "cdrom", "nofua")  # f_mass_storage's booleans
_READ_ONLY = ("dev", "ifname")


def _oserror(code: int, path: Path) -> OSError:
    return OSError(code, os.strerror(code), str(path))


class FakeConfigfs(ConfigfsOps):
    def __init__(
        self,
        root: Path,
        *,
        udcs: Collection[str] = ("dummy_udc.0",),
        no_out_endpoint: bool = True,
        hidg_major: int = 240,
    ) -> None:
        self.top = root / "usb_gadget"
        self.top.mkdir(parents=True, exist_ok=True)
        self.udcs = set(udcs)
        self.no_out_endpoint = no_out_endpoint
        self.hidg_major = hidg_major
        self._next_minor = 0
        self.ops: list[tuple[str, str, bytes | None]] = []
        self.fail: Failure | None = None
        self.locked = False  # a host's PREVENT MEDIUM REMOVAL on the drive

    # --- helpers -----------------------------------------------------------------------------

    def _parts(self, path: Path) -> tuple[str, ...]:
        return path.relative_to(self.top).parts

    def _record(self, op: str, path: Path, data: bytes | None = None) -> None:
        self.ops.append((op, "/".join(self._parts(path)), data))

    def _check(self, op: str, path: Path, data: bytes | None = None) -> None:
        if self.fail is not None and self.fail(op, path, data):
            raise _oserror(errno.EIO, path)

    def _kind(self, path: Path) -> str:
        parts = self._parts(path)
        groups = {"strings": "strings", "configs": "config", "functions": "function"}
        if len(parts) == 1:
            return "gadget"
        if len(parts) == 3 and parts[1] in groups:
            return groups[parts[1]]
        if len(parts) == 5 and parts[1] == "configs" and parts[3] == "strings":
            return "config_strings"
        return "other"

    def _gadget_of(self, path: Path) -> Path:
        return self.top / self._parts(path)[0]

    def _links_to(self, function: Path) -> list[Path]:
        gadget = self._gadget_of(function)
        return [
            link
            for config in (gadget / "configs").iterdir()
            for link in config.iterdir()
            if link.is_symlink() and link.resolve() == function.resolve()
        ]

    def _bound(self, gadget: Path) -> bool:
        return (gadget / "UDC").read_bytes().strip() != b""

    @staticmethod
    def _files(path: Path, files: dict[str, bytes], dirs: tuple[str, ...] = ()) -> None:
        for name, content in files.items():
            (path / name).write_bytes(content)
        for name in dirs:
            (path / name).mkdir()

    # --- the seam ----------------------------------------------------------------------------

    def mkdir(self, path: Path) -> None:
        self._check("mkdir", path)
        kind = self._kind(path)
        if kind == "other":
            raise _oserror(errno.EPERM, path)
        if kind == "function" and path.name.split(".")[0] not in ("hid", "ecm", "mass_storage"):
            raise _oserror(errno.ENOENT, path)  # no such function driver
        os.mkdir(path)
        if kind == "gadget":
            u16 = {"idVendor": b"0x0000\n", "idProduct": b"0x0000\n", "bcdDevice": b"0x0601\n"}
            self._files(
                path,
                {**u16, "bcdUSB": b"0x0200\n", "UDC": b"\n"},
                ("functions", "configs", "strings", "os_desc"),
            )
        elif kind == "strings":
            self._files(path, {n: b"\n" for n in ("manufacturer", "product", "serialnumber")})
        elif kind == "config":
            self._files(path, {"MaxPower": b"2\n", "bmAttributes": b"0x80\n"}, ("strings",))
        elif kind == "config_strings":
            self._files(path, {"configuration": b"\n"})
        elif path.name.startswith("hid."):
            attrs = {n: b"0\n" for n in ("protocol", "subclass", "report_length")}
            attrs["report_desc"] = b""
            attrs["dev"] = f"{self.hidg_major}:{self._next_minor}\n".encode()
            self._next_minor += 1
            if self.no_out_endpoint:
                attrs["no_out_endpoint"] = b"0\n"
            self._files(path, attrs)
        elif path.name.startswith("mass_storage."):
            self._files(path, {"stall": b"1\n"}, ("lun.0",))
            lun = {n: b"0\n" for n in ("ro", "cdrom", "nofua")}
            lun |= {"removable": b"1\n", "file": b"\n", "inquiry_string": b"\n"}
            self._files(path / "lun.0", {**lun, "forced_eject": b""})
        else:
            self._files(
                path,
                {
                    "host_addr": b"42:0a:11:22:33:44\0\n",
                    "dev_addr": b"42:0a:11:22:33:55\0\n",
                    "ifname": b"usb%d\n",
                    "qmult": b"5\n",
                },
            )
        self._record("mkdir", path)

    def rmdir(self, path: Path) -> None:
        self._check("rmdir", path)
        kind = self._kind(path)
        if kind == "other":
            raise _oserror(errno.EPERM, path)  # default groups go with their parent only
        if kind == "gadget":
            busy = [
                *(path / "functions").iterdir(),
                *(path / "configs").iterdir(),
                *(path / "strings").iterdir(),
                *(p for p in (path / "os_desc").iterdir() if p.is_symlink()),
            ]
        elif kind == "config":
            busy = [p for p in path.iterdir() if p.is_symlink()]
            busy += list((path / "strings").iterdir())
        elif kind == "function" and self._links_to(path):
            raise _oserror(errno.EBUSY, path)
        else:
            busy = []
        if kind != "function" and busy:
            raise _oserror(errno.ENOTEMPTY, path)
        shutil.rmtree(path)  # the attribute files and default groups go with it
        self._record("rmdir", path)

    def write(self, path: Path, data: bytes) -> None:
        self._check("write", path, data)
        if not path.exists():
            raise _oserror(errno.ENOENT, path)
        name, kind = path.name, self._kind(path.parent)
        text = data.decode(errors="replace").removesuffix("\n")
        if name in _READ_ONLY:
            raise _oserror(errno.EACCES, path)
        if kind == "function" and self._links_to(path.parent):
            raise _oserror(errno.EBUSY, path)  # opts->refcnt: attributes of a used function
        if path.parent.name == "lun.0":
            self._write_lun(path, text)
            return
        if name == "UDC":
            self._write_udc(path, text)
        elif name == "report_desc":
            path.write_bytes(data)
        elif name in _U16 or name in _DECIMAL or name == "bmAttributes":
            try:
                value = int(text.strip(), 0)
            except ValueError:
                raise _oserror(errno.EINVAL, path) from None
            if name in _U16:
                stored = f"0x{value:04x}"
            elif name == "bmAttributes":
                stored = f"0x{value:02x}"
            else:
                stored = str(value)
            path.write_bytes(stored.encode() + b"\n")
        elif name in ("host_addr", "dev_addr"):
            octets = text.strip().split(":")
            if len(octets) != 6 or int(octets[0], 16) & 1:
                raise _oserror(errno.EINVAL, path)
            # 6.1's u_ether shows a NUL before the newline; keep that quirk.
            path.write_bytes(text.strip().lower().encode() + b"\0\n")
        else:  # USB strings: one trailing newline is dropped, shown with one
            path.write_bytes(text.encode() + b"\n")
        self._record("write", path, data)

    def _write_lun(self, path: Path, text: str) -> None:
        """After f_mass_storage's storage_common.c: ro and cdrom are refused while a file is
        open, file opens the image (which must exist), forced_eject closes it regardless."""
        name, lun = path.name, path.parent
        attached = (lun / "file").read_text().strip() != ""
        if name in ("ro", "cdrom") and attached:
            raise _oserror(errno.EBUSY, path)
        if name in _FLAGS:
            if text.strip() not in ("0", "1"):
                raise _oserror(errno.EINVAL, path)
            path.write_bytes(text.strip().encode() + b"\n")
        elif name == "file":
            image = text.strip()
            if image and not Path(image).is_file():
                raise _oserror(errno.ENOENT, path)
            if not image and self.locked:
                raise _oserror(errno.EBUSY, path)  # the host prevented medium removal
            path.write_bytes(image.encode() + b"\n")
        elif name == "forced_eject":
            (lun / "file").write_bytes(b"\n")
        elif name == "inquiry_string":
            path.write_bytes(f"{text:<28.28}".encode() + b"\n")
        self._record("write", path, text.encode() if name != "file" else text.strip().encode())

    def _write_udc(self, path: Path, name: str) -> None:
        gadget = path.parent
        if not name:
            if not self._bound(gadget):
                raise _oserror(errno.ENODEV, path)
        else:
            if self._bound(gadget):
                raise _oserror(errno.EBUSY, path)
            if name not in self.udcs:
                raise _oserror(errno.ENODEV, path)
            configs = list((gadget / "configs").iterdir())
            if not configs or any(
                not any(p.is_symlink() for p in config.iterdir()) for config in configs
            ):
                raise _oserror(errno.EINVAL, path)  # every config needs a function
        path.write_bytes(name.encode() + b"\n")

    def symlink(self, target: Path, link: Path) -> None:
        self._check("symlink", link)
        if self._kind(link.parent) != "config" or self._kind(target) != "function":
            raise _oserror(errno.EPERM, link)
        if not target.is_dir():
            raise _oserror(errno.ENOENT, target)
        os.symlink(target, link)
        self._record("symlink", link)

    def unlink(self, path: Path) -> None:
        self._check("unlink", path)
        if not path.is_symlink():
            raise _oserror(errno.EPERM, path)
        gadget = self._gadget_of(path)
        os.unlink(path)
        if self._kind(path.parent) == "config" and self._bound(gadget):
            (gadget / "UDC").write_bytes(b"\n")  # configfs unbinds when a function leaves
        self._record("unlink", path)
