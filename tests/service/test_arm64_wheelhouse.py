"""`make deploy`'s wheelhouse for a 64-bit ARM board, built here without one: deploy's own
build for the facts an aarch64 Debian bookworm board reports (CPython 3.11, glibc 2.36), from
the package index the first time and from ~/.cache/fingertip/arm64/wheelhouse after (deploy's
own cache key). It must hold a wheel for every dependency, each one the board's pip installs,
each at the version tested here. The arm64 tier (make arm64-test) then installs it on an
emulated aarch64 and runs the daemon from it."""

from __future__ import annotations

import importlib.metadata as md
import time
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import NormalizedName, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from deploy import build as deploy_build
from deploy.pure import platform_tags
from tests.arm64 import wheelhouse

BOARD = wheelhouse.BOARD

# PEP 508's marker environment of the board's Python (Debian bookworm's CPython on aarch64).
BOARD_MARKERS = {
    "implementation_name": "cpython",
    "implementation_version": "3.11.2",
    "os_name": "posix",
    "platform_machine": "aarch64",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_system": "Linux",
    "platform_version": "",
    "python_full_version": "3.11.2",
    "python_version": "3.11",
    "sys_platform": "linux",
    "extra": "",
}


@pytest.fixture(scope="module")
def house(tmp_path_factory: pytest.TempPathFactory) -> wheelhouse.Wheelhouse:
    start = time.monotonic()
    built = wheelhouse.build(tmp_path_factory.mktemp("dist"))
    print(f"aarch64 wheelhouse: {len(built.wheels)} wheels in {time.monotonic() - start:.1f} s")
    return built


def _requires(wheel: Path, extras: tuple[str, ...] = ("",)) -> list[Requirement]:
    """A wheel's Requires-Dist that apply on the board with these extras asked for."""
    lines = deploy_build.wheel_requirements(wheel).splitlines()
    reqs = [Requirement(line.split(":", 1)[1].strip()) for line in lines]
    return [
        r
        for r in reqs
        if r.marker is None or any(r.marker.evaluate({**BOARD_MARKERS, "extra": e}) for e in extras)
    ]


def _by_name(wheels: list[Path]) -> dict[NormalizedName, tuple[Version, Path]]:
    out = {}
    for wheel in wheels:
        name, version, _build, _tags = parse_wheel_filename(wheel.name)
        assert name not in out, f"two wheels of {name} in the wheelhouse"
        out[name] = (version, wheel)
    return out


def test_every_wheel_is_one_the_boards_pip_installs(house: wheelhouse.Wheelhouse) -> None:
    platforms = platform_tags(BOARD.arch, BOARD.libc[1])
    board = {
        *cpython_tags((3, 11), ["cp311"], platforms),
        *compatible_tags((3, 11), "cp311", platforms),
    }
    foreign = {}
    for wheel in house.wheels:
        tags = parse_wheel_filename(wheel.name)[3]
        if not tags & board:
            foreign[wheel.name] = sorted(str(t) for t in tags)
    assert foreign == {}, "wheels a CPython 3.11 on aarch64 with glibc 2.36 cannot install"
    with zipfile.ZipFile(house.wheel) as zf:  # the fingertip wheel itself: pure Python
        wheel_meta = next(n for n in zf.namelist() if n.endswith(".dist-info/WHEEL"))
        assert "Tag: py3-none-any" in zf.read(wheel_meta).decode()


def _closure(
    house: wheelhouse.Wheelhouse, extras: tuple[str, ...]
) -> tuple[set[NormalizedName], list[str]]:
    """fingertip's requirements with `extras`, walked through the wheels' own metadata with
    the board's markers: the distributions needed, and each requirement no wheel meets."""
    available = _by_name(house.wheels)
    needed: set[NormalizedName] = set()
    unmet: list[str] = []
    todo = [("fingertip", r) for r in _requires(house.wheel, ("", *extras))]
    while todo:
        wanted_by, req = todo.pop()
        name = canonicalize_name(req.name)
        found = available.get(name)
        if found is None or not req.specifier.contains(found[0], prereleases=True):
            have = f"has {found[0]}" if found else "has none"
            unmet.append(f"{wanted_by} needs {req} (the wheelhouse {have})")
            continue
        if name not in needed:
            needed.add(name)
            todo += [(str(name), r) for r in _requires(found[1])]
    return needed, unmet


def test_every_dependency_resolves_from_the_wheelhouse(house: wheelhouse.Wheelhouse) -> None:
    """With OCR (the wheelhouse's extras): each requirement is met by a wheel there, and
    every wheel there is needed (pip aside). Without OCR, as a 256 MB board's deploy installs
    it: a part of the same wheels, the OCR engine's left out."""
    assert wheelhouse.EXTRAS == ("ocr",)
    with_ocr, unmet = _closure(house, wheelhouse.EXTRAS)
    assert unmet == []
    assert set(_by_name(house.wheels)) - with_ocr == {"pip"}  # pip installs fingertip there
    assert {"numpy", "opencv-python-headless", "onnxruntime", "msgpack", "orjson"} <= with_ocr
    without, unmet = _closure(house, ())
    assert unmet == []
    assert without < with_ocr and not {"onnxruntime", "rapidocr"} & without


def test_the_board_gets_the_versions_tested_here(house: wheelhouse.Wheelhouse) -> None:
    differ = {}
    for name, (version, _) in _by_name(house.wheels).items():
        here = Version(md.version(name))
        if here != version:
            differ[str(name)] = f"{version} in the wheelhouse, {here} here"
    assert differ == {}


def test_a_second_build_asks_the_index_for_nothing(
    house: wheelhouse.Wheelhouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_index(*args: str, what: str) -> None:
        raise AssertionError(f"pip {args[0]} ran again ({what})")

    monkeypatch.setattr(deploy_build, "_pip", no_index)
    monkeypatch.setattr(deploy_build, "build_wheel", lambda out: house.wheel)
    again = wheelhouse.build(tmp_path)
    assert [p.name for p in again.wheels] == [p.name for p in house.wheels]
