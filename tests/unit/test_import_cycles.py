"""The import check of `make lint` (tests/import_cycles.py) over small packages written here:
it finds a circle closed by an import inside a function or under TYPE_CHECKING, names the
modules and the lines, and passes a package whose imports only go one way."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import import_cycles

ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count()


def package(root: Path, modules: dict[str, str]) -> str:
    """A package of `modules` (name -> source, with PKG for the package's name) under root."""
    name = f"cycles_probe_{next(_names)}"
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    for module, source in modules.items():
        text = textwrap.dedent(source).replace("PKG", name)
        (root / name / f"{module}.py").write_text(text)
    return name


def check(root: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The check as `make lint` runs it, with root on the import path."""
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "import_cycles.py"), *args, name],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


ONE_WAY = {
    "base": "X = 1\n",
    "middle": "from PKG.base import X\n",
    "top": """
        from PKG import middle

        def late():
            from PKG.base import X
            return X, middle
    """,
}


def test_a_package_whose_imports_go_one_way_passes(tmp_path: Path) -> None:
    done = check(tmp_path, package(tmp_path, ONE_WAY))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "import circles: none among the 4 modules" in done.stdout


@pytest.mark.parametrize(
    "hidden",
    [
        "def late():\n    from PKG.top import late\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from PKG.top import late\n",
    ],
    ids=["inside a function", "under TYPE_CHECKING"],
)
def test_a_circle_hidden_from_python_fails_with_its_modules_and_lines(
    tmp_path: Path, hidden: str
) -> None:
    name = package(tmp_path, {**ONE_WAY, "base": "X = 1\n" + hidden})
    done = check(tmp_path, name)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "1 import circle(s)" in out
    assert f"{name}.base -> {name}.top -> {name}.base" in out
    assert f"{name}.base:" in out and f"from {name}.top import late" in out
    assert f"{name}.top:5: from {name}.base import X" in out

    reported = check(tmp_path, name, "--report-only")
    assert reported.returncode == 0 and reported.stdout == out


def test_every_circle_is_reported_separately() -> None:
    imports = {
        "p.a": {"p.b"},
        "p.b": {"p.c"},
        "p.c": {"p.a", "p.d"},
        "p.d": set(),
        "p.x": {"p.y"},
        "p.y": {"p.x", "p.a"},
    }
    groups = import_cycles.circles(imports)
    assert groups == [["p.a", "p.b", "p.c"], ["p.x", "p.y"]]
    assert import_cycles.shortest_loop(imports, groups[0]) == ["p.a", "p.b", "p.c", "p.a"]
    assert import_cycles.circles(
        {k: v for k, v in imports.items() if k != "p.c"} | {"p.c": set()}
    ) == [["p.x", "p.y"]]


def test_daemon_and_gadget_are_in_no_circle() -> None:
    """Issue 43 removed the last circles (auth, tls and limits; runtime and the shell tool; the
    OCR service, engine and worker): the unit tier holds that as make lint does."""
    graph = import_cycles.grimp.build_graph("daemon", "gadget", cache_dir=None)
    found = import_cycles.circles(import_cycles.import_map(graph))
    assert found == [], import_cycles.report(graph, found, ["daemon", "gadget"])
