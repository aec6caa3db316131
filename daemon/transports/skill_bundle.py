"""GET /api/tool-skills: a SKILL.md that teaches an external agent the model-facing tools."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from daemon.catalog import Catalog, ToolSpec

INTRO = """\
# Fingertip tools

Fingertip drives a phone, tablet or computer through a USB board: touch, pointer, keyboard,
media keys and screenshots. Call a tool with `POST /api/tools/<name>` and a JSON body
`{{"input": {{...}}}}` (or `{{"raw_input": "..."}}`). Every response is JSON with `output`,
`is_error`, `duration_ms` and `called_at`; when `is_error` is true, `error.code` is stable.

Target platform: **{platform}**. Coordinates are normalized 0..1000 on both axes (0,0 is the
top-left corner). Take a screenshot first, act, then read the screenshot that input tools
return. Write and critical tools need `Authorization: Bearer <token>` off loopback.

Off loopback the board speaks HTTPS with its own certificate: check its key before the token
goes out, as the examples below do over https (`curl --pinnedpubkey "$FINGERTIP_PIN" -k`, with
FINGERTIP_PIN the board's fingerprint `sha256//...` that `make deploy` printed and `fingertip
discover` shows).

Text on the screen: read it with `screen_text` (lines and words with boxes, normalized centers
and a `snapshot_id`) or `find_text`; tap by text with `tap_text` (pass that `snapshot_id`: a
screen that changed since is `stale_snapshot`; several matches are `text_ambiguous` until you
pass `index`); then check the evidence it returns (`screen_changed`, the screenshot) or read
the text again.

Did the action work? Read, act, then read with `since`: `screen_text` with `since` set to the
`snapshot_id` of your earlier read answers `changes`: the text that `appeared`, `disappeared`
and `moved` (line by line, each with its box), so "the field now reads 'hello'" or "'Wi-Fi'
appeared" is one look. `tap_text` and `enter_text` do both reads for you with
`text_changes: true` (their result's `text_changes`); over the WebSocket, ask a call's `after`
visual tree with `visualTreeArguments: {{"since": "before"}}`. A re-read costs about what
changed on the screen (a field typed into: a fifth of a full read), so reading after every
step is cheap.
"""


def _yaml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _args_doc(schema: dict[str, Any]) -> list[str]:
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    lines = []
    for name, sub in props.items():
        kind = sub.get("type") or (
            "one of " + ", ".join(map(str, sub["enum"])) if "enum" in sub else "any"
        )
        desc = sub.get("description", "")
        req = "required" if name in required else "optional"
        lines.append(f"- `{name}` ({kind}, {req}){': ' + desc if desc else ''}")
    return lines or ["- no arguments"]


def skill_bundle(specs: Sequence[ToolSpec], catalog: Catalog, base_url: str) -> str:
    names = [s.name for s in specs]
    pin = ' --pinnedpubkey "$FINGERTIP_PIN" -k' if base_url.startswith("https://") else ""
    out = [
        "---",
        "name: fingertip",
        "description: "
        + _yaml_str(
            f"Operate a {catalog.platform} target through Fingertip: touch, keyboard, "
            "media keys and screenshots over HTTP."
        ),
        "metadata:",
        "  allowed_tools:",
        *[f"    - {n}" for n in names],
        "---",
        "",
        INTRO.format(platform=catalog.platform),
    ]
    for spec in specs:
        body = json.dumps({"input": spec.example_input}, ensure_ascii=False)
        if spec.input_mode == "text":
            body = json.dumps({"raw_input": spec.example_text()}, ensure_ascii=False)
        curl = (
            f"curl{pin} -X POST {base_url}/api/tools/{spec.name} "
            f"-H 'Content-Type: application/json' -d {shlex.quote(body)}"
        )
        out += [
            f"## {spec.name}",
            "",
            spec.description,
            "",
            f"Policy: `{spec.policy}`. Input mode: `{spec.input_mode}`.",
            "",
            "Arguments:",
            *_args_doc(catalog.args_schema(spec)),
            "",
            "Example:",
            "",
            "```sh",
            curl,
            "```",
            "",
            "Returns: " + _returns(spec),
            "",
        ]
    return "\n".join(out)


def _returns(spec: ToolSpec) -> str:
    props = list((spec.result_schema.get("properties") or {}).keys())
    if props:
        return "JSON with " + ", ".join(f"`{p}`" for p in props) + "."
    return "JSON (see the tool description)."
