"""The docs cannot drift from the code: the generated pages are current, every config key is
documented with the default the code uses, every HTTP route the daemon serves is in the API
pages, the tools API's statuses are the declared ones, every tool is in the tools reference,
and every relative link resolves."""

from __future__ import annotations

import dataclasses
import re
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon import config as cfg
from daemon import docgen
from daemon.errors import CALL_STATUS, CODES

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", sorted(docgen.PAGES), ids=lambda p: p.name)
def test_the_generated_pages_are_current(page: Path) -> None:
    assert page.read_text() == docgen.PAGES[page](), (
        f"{page.relative_to(REPO)} is out of date: run .venv/bin/python -m daemon.docgen"
    )


def config_rows() -> dict[tuple[str, str], tuple[str, str]]:
    """(section, key) -> (default, meaning) cells of docs/configuration.md's tables."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    section = ""
    for line in docgen.CONFIG_PAGE.read_text().splitlines():
        if m := re.fullmatch(r"## \[(\w+)\]", line):
            section = m[1]
        elif m := re.match(r"\| `(\w+)` \| `(.*?)` \| .*? \| (.*) \|$", line):
            out[(section, m[1])] = (m[2], m[3].strip())
    return out


def documented_keys() -> dict[tuple[str, str], str]:
    """(section, key) -> the default cell of docs/configuration.md's tables."""
    return {key: default for key, (default, _) in config_rows().items()}


def plain(value: Any) -> Any:
    """A code default as TOML would read it back (paths as text, tuples as lists, None as "")."""
    if value is None:
        return ""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return value


def code_defaults() -> Iterator[tuple[str, str, Any]]:
    for section, cls in docgen.sections().items():
        for f in dataclasses.fields(cls):
            yield section, f.name, plain(getattr(cls(), f.name))


def test_every_config_key_is_documented_with_the_default_the_code_uses() -> None:
    documented = documented_keys()
    for section, key, default in code_defaults():
        assert (section, key) in documented, f"[{section}].{key} is not in docs/configuration.md"
        cell = documented[(section, key)].replace("\\|", "|")
        assert tomllib.loads(f"v = {cell}")["v"] == default, (
            f"[{section}].{key}: docs/configuration.md says {cell}, the code uses {default!r}"
        )


def test_every_config_key_says_what_it_means() -> None:
    rows = config_rows()
    assert len(rows) > 100
    blank = sorted(f"[{s}].{k}" for (s, k), (_, meaning) in rows.items() if not meaning)
    assert not blank, f"keys without a meaning (a comment in etc/fingertip.toml or a doc): {blank}"


def test_every_key_of_the_config_file_is_documented() -> None:
    documented = documented_keys()
    data = tomllib.loads((REPO / "etc" / "fingertip.toml").read_text())
    for section, table in data.items():
        for key in table:
            assert (section, key) in documented, f"etc/fingertip.toml's [{section}].{key}"


@pytest.fixture(scope="module")
def daemon_app() -> Any:
    """The daemon as `make run` builds it (the simulated target mounts /api/sim too)."""
    from daemon.service import build

    with tempfile.TemporaryDirectory() as state:
        config = cfg.from_mapping(
            {
                "backend": {"kind": "simulated"},
                "state": {"dir": state},
                "ipc": {"socket": f"{state}/ipc.sock"},
            }
        )
        yield build(config)


def test_every_http_route_is_in_the_api_pages(daemon_app: Any) -> None:
    text = "\n".join(p.read_text() for p in DOCS.glob("*.md"))
    routes = {
        (r.method, r.resource.canonical)
        for r in daemon_app.app.router.routes()
        if r.method != "HEAD" and r.resource is not None
    }
    assert len(routes) > 10  # the router was read, not an empty app
    missing = sorted(f"{m} {path}" for m, path in routes if f"`{m} {path}`" not in text)
    assert not missing, f"routes the daemon serves that no page in docs/ names: {missing}"


def test_the_tools_api_status_table_names_each_refusal_under_its_status() -> None:
    """docs/http-api.md's table of statuses, against the declared codes (daemon/errors.py)."""
    rows: dict[int, set[str]] = {}
    for line in (DOCS / "http-api.md").read_text().splitlines():
        if m := re.match(r"\| (\d{3}) \| (.*) \|$", line):
            rows[int(m[1])] = set(re.findall(r"`(\w+)`", m[2])) & set(CODES)
    documented = {code: status for status, codes in rows.items() for code in codes}
    assert documented == CALL_STATUS
    assert rows[200] == set()


def test_every_status_a_page_gives_a_code_is_its_declared_one() -> None:
    """A status a page gives a code (400 `stream_params_invalid`) is the one it is declared."""
    said = re.compile(r"\b([1-5]\d\d)[ `]{1,3}([a-z]+(?:_[a-z]+)+)\b")
    pairs = [
        (page.name, int(m[1]), m[2])
        for page in PAGES
        for m in said.finditer(page.read_text())
        if m[2] in CODES
    ]
    assert len(pairs) >= 5  # the pages were read
    assert [p for p in pairs if CODES[p[2]].status != p[1]] == []


def test_every_tool_is_in_the_tools_reference(daemon_app: Any) -> None:
    text = docgen.TOOLS_PAGE.read_text()
    names = list(daemon_app.catalog._specs)
    assert "tap_text" in names
    missing = [n for n in names if f"\n## {n}\n" not in text]
    assert not missing, f"tools not in docs/tools.md: {missing}"


FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> Iterator[str]:
    yield from LINK.findall(FENCE.sub("", page.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_the_link_checker_sees_links_and_anchors() -> None:
    readme = REPO / "README.md"
    assert "docs/board.md" in list(links(readme))
    assert "the-fingerprint-and-pinning-it" in anchors(DOCS / "security.md")
    assert slug("[device]") == "device" and slug("How long a call runs, and what") == (
        "how-long-a-call-runs-and-what"
    )


def test_every_tool_argument_has_a_description_and_its_bounds() -> None:
    """docs/tools.md's argument tables are made from the schemas: an argument without a
    description, or a number without its bounds, would leave a blank cell a caller must guess.
    Every platform's schema counts (quick_action's actions differ by platform)."""
    missing = []
    for spec in docgen.catalog_specs():
        for platform in ("ios", "android", "macos", "windows", "linux"):
            for name, _kind, _need, _default, bounds, text in docgen.arg_rows(
                spec.schema_for(platform)
            ):
                where = f"{spec.name}.{name} ({platform})"
                if not text:
                    missing.append(f"{where}: no description")
                sub = spec.schema_for(platform)["properties"][name]
                if sub.get("type") in ("integer", "number") and not bounds:
                    missing.append(f"{where}: no range")
    assert missing == [], "add them to the tool's schema (daemon/tools/): " + "; ".join(
        sorted(set(missing))
    )


def test_the_argument_table_shows_default_and_range() -> None:
    rows = {r[0]: r for r in docgen.arg_rows(
        {
            "properties": {
                "q": {"type": "integer", "minimum": 1, "maximum": 100, "default": 80,
                      "description": "quality"},
                "t": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
                "s": {"type": "string", "minLength": 1, "maxLength": 5},
                "d": {"type": "integer", "minimum": -5, "maximum": 5, "not": {"const": 0}},
            },
            "required": ["q"],
        }
    )}  # fmt: skip
    assert rows["q"] == ("q", "integer", "yes", "`80`", "1..100", "quality")
    assert rows["t"][4] == "> 0 .. 3600" and rows["t"][5] == ""
    assert rows["s"][4] == "1..5 characters" and rows["d"][4] == "-5..5, not 0"
