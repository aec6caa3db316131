"""Every error code is declared once (daemon.errors.CODES), with one status: the source is read
(AST) for every code handed to an error constructor, so a new code cannot get a status, or a
retryable flag, by accident."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from daemon.errors import CALL_STATUS, CODES, ToolError, http_status
from daemon.screen.capture_dv import SIGNAL_STATES
from daemon.transports.ipc import FAILURES

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted([*REPO.glob("daemon/**/*.py"), *REPO.glob("gadget/**/*.py")])

# Where a constructor takes its code and (when it has one) its retryable flag: the positional
# index of each, also accepted as the keyword `code` / `retryable`.
CONSTRUCTORS = {"ToolError": 0, "validation_error": 2, "Availability": 1}
# Availability's retryable defaults to True, ToolError's to the code's declaration.
DEFAULT_RETRYABLE = {"Availability": True}


@dataclass(frozen=True)
class Use:
    code: str
    where: str  # path:line
    retryable: ast.expr | None  # as written, None when not passed
    constructor: str


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _constants(trees: dict[Path, ast.Module]) -> dict[str, str]:
    """Module-level NAME = "text" of every module (INVALID_REQUEST, imported elsewhere)."""
    out: dict[str, str] = {}
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                        out[target.id] = node.value.value
    return out


def _assigned(scope: ast.AST, name: str) -> list[ast.expr]:
    return [
        node.value
        for node in ast.walk(scope)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]


# An HDMI bridge's source state is its own error code, used only after `state in
# SIGNAL_STATES` (daemon/screen/capture_dv.py): every member is a code to declare.
DRAWN_FROM_A_SET = {
    ("daemon/screen/capture.py", "kind"): SIGNAL_STATES,
    ("daemon/tools/screen.py", "getattr(frames, 'state', None)"): SIGNAL_STATES,
}


class Resolver:
    def __init__(self, constants: dict[str, str]):
        self.constants = constants
        self.unresolved: list[str] = []

    def codes(self, expr: ast.expr, scope: ast.AST, where: str) -> Iterator[str]:
        """The literal codes `expr` can be. `x.code` passes on a code already made (checked
        where it was made); anything else that is not a literal must be taught to this test."""
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            yield expr.value
        elif isinstance(expr, ast.Constant) and expr.value is None:
            return
        elif isinstance(expr, ast.IfExp):
            yield from self.codes(expr.body, scope, where)
            yield from self.codes(expr.orelse, scope, where)
        elif isinstance(expr, ast.BoolOp):
            for value in expr.values:
                yield from self.codes(value, scope, where)
        elif isinstance(expr, ast.Attribute) and expr.attr == "code":
            return
        elif isinstance(expr, ast.Name) and (found := _assigned(scope, expr.id)):
            for value in found:
                yield from self.codes(value, scope, where)
        elif isinstance(expr, ast.Name) and expr.id in self.constants:
            yield self.constants[expr.id]
        elif (where.split(":")[0], ast.unparse(expr)) in DRAWN_FROM_A_SET:
            # Checked to be a member of a set of codes before it is used (`if kind in ...`).
            yield from DRAWN_FROM_A_SET[where.split(":")[0], ast.unparse(expr)]
        else:
            self.unresolved.append(f"{where}: {ast.unparse(expr)}")


def _scopes(tree: ast.Module) -> Iterator[tuple[ast.AST, ast.Call]]:
    """Every call with the innermost function (else the module) it is made in."""

    def walk(node: ast.AST, scope: ast.AST) -> Iterator[tuple[ast.AST, ast.Call]]:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else scope
            if isinstance(child, ast.Call):
                yield scope, child
            yield from walk(child, inner)

    yield from walk(tree, tree)


def _arg(call: ast.Call, keyword: str, index: int | None = None) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[index] if index is not None and len(call.args) > index else None


def scan() -> tuple[list[Use], list[str]]:
    trees = {path: ast.parse(path.read_text(), str(path)) for path in SOURCES}
    resolver = Resolver(_constants(trees))
    uses: list[Use] = []
    for path, tree in trees.items():
        rel = path.relative_to(REPO)
        for scope, call in _scopes(tree):
            name = _name(call.func)
            where = f"{rel}:{call.lineno}"
            if name in CONSTRUCTORS:
                expr = _arg(call, "code", CONSTRUCTORS[name])
            elif name is not None and name.endswith("Error"):
                # Any other error class given a code (GadgetError(..., code="hid_io_failed")).
                expr = _arg(call, "code")
            else:
                continue
            retry = _arg(call, "retryable")
            if expr is None:
                continue
            for code in resolver.codes(expr, scope, where):
                uses.append(Use(code, where, retry, name))
        # Error classes that declare their code and retryability as class attributes.
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            attrs = {
                t.id: stmt.value
                for stmt in cls.body
                if isinstance(stmt, ast.Assign)
                for t in stmt.targets
                if isinstance(t, ast.Name)
            }
            code = attrs.get("code")
            if isinstance(code, ast.Constant) and isinstance(code.value, str):
                uses.append(Use(code.value, f"{rel}:{cls.lineno}", attrs.get("retryable"), "class"))
    return uses, resolver.unresolved


USES, UNRESOLVED = scan()


def test_the_scan_sees_the_codes_it_must() -> None:
    """The walk finds codes in every form they take (so the checks below can fail)."""
    seen = {u.code for u in USES}
    assert {
        "tool_not_found",  # ToolError("...")
        "drag_already_in_progress",  # code = "a" if ... else "b"; ToolError(code, ...)
        "tool_protocol_invalid_request",  # INVALID_REQUEST, imported from ws_codec
        "tool_result_schema_invalid",  # validation_error's own default
        "hid_io_failed",  # GadgetError(..., code="...")
        "target_not_attached",  # class TargetNotAttached: code = "..."
        "ocr_engine_missing",  # Availability(False, "...")
    } <= seen
    assert len(seen) > 60


def test_every_code_passed_to_an_error_constructor_is_declared() -> None:
    assert not UNRESOLVED, f"codes this test cannot read (teach it the form): {UNRESOLVED}"
    undeclared = sorted({f"{u.code} ({u.where})" for u in USES if u.code not in CODES})
    assert not undeclared, f"declare these in daemon.errors.CODES: {undeclared}"


def test_every_declared_code_is_used() -> None:
    """No declaration outlives its code (a typo in CODES would read as a new, unused code)."""
    text = "\n".join(p.read_text() for p in SOURCES if p != REPO / "daemon" / "errors.py")
    unused = [code for code in CODES if f'"{code}"' not in text]
    assert not unused


def _literal(expr: ast.expr | None, default: bool | None) -> bool | str | None:
    if expr is None:
        return default
    if isinstance(expr, ast.Constant) and isinstance(expr.value, bool):
        return expr.value
    return "computed"


def test_every_retryable_flag_agrees_with_the_declaration() -> None:
    """A code declared retryable (or not) is raised so everywhere; a code whose retryability
    depends on the case (None) is raised with the flag computed or stated, never defaulted."""
    wrong = []
    for use in USES:
        if use.code not in CODES:
            continue  # the test above names it
        declared = CODES[use.code].retryable
        given = _literal(use.retryable, DEFAULT_RETRYABLE.get(use.constructor))
        if declared is None:
            if use.retryable is None and use.constructor in ("ToolError", "validation_error"):
                wrong.append(f"{use.where}: {use.code} depends on the case: pass retryable")
        elif given not in (None, declared):
            wrong.append(
                f"{use.where}: {use.code} raised with retryable={given}, declared {declared}"
            )
    assert not wrong


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_declared_code_has_one_status(code: str) -> None:
    entry = CODES[code]
    assert 400 <= entry.status <= 599 and entry.meaning
    assert http_status(code) == entry.status  # every reply outside a tool call
    in_call = http_status(code, tool_call=True)
    assert in_call == (entry.status if entry.scope == "call" else 200)


# The two tables this registry replaced (daemon/wire.py before it), and the two statuses written
# by hand at their one use (the WebSocket upgrade, the HTTPS-only port): every code keeps them.
BEFORE_CALL = {
    "tool_call_payload_invalid": 400,
    "tool_arguments_invalid": 400,
    "auth_required": 401,
    "tool_execution_denied": 403,
    "host_not_allowed": 403,
    "origin_not_allowed": 403,
    "tool_not_found": 404,
    "request_too_large": 413,
    "tool_execution_exception": 500,
    "tool_result_schema_invalid": 500,
    "tool_unavailable": 503,
    "too_many_connections": 503,
}
BEFORE_DATA = {
    **BEFORE_CALL,
    "stream_params_invalid": 400,
    "trace_query_invalid": 400,
    "trace_not_found": 404,
    "capture_unavailable": 503,
    "too_many_viewers": 503,
}
BY_HAND = {"websocket_upgrade_required": 426, "tls_required": 400}
# Codes new since: an HDMI bridge's source states fail the snapshot route as the capture's own
# absence does (issue 51).
HDMI_STATES = dict.fromkeys(SIGNAL_STATES, 503)
# Codes new since: virtual media's upload route (issue 47).
MEDIA_ROUTE = {
    "media_name_invalid": 400,
    "media_upload_incomplete": 400,
    "media_files_invalid": 400,
    "media_not_found": 404,
    "media_attached": 409,
    "media_busy": 409,
    "media_locked": 409,
    "media_quota_exceeded": 413,
    "media_image_unreadable": 422,
    "media_unavailable": 503,
    "media_disk_full": 507,
}


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_status_is_the_one_it_was(code: str) -> None:
    assert http_status(code, tool_call=True) == BEFORE_CALL.get(code, 200)
    data = {**BEFORE_DATA, **BY_HAND, **MEDIA_ROUTE, **HDMI_STATES}
    assert http_status(code) == data.get(code, 500)


def test_an_undeclared_code_keeps_the_old_fallbacks() -> None:
    """A code made at run time (an availability probe's) is never refused for being new."""
    assert http_status("no_such_code", tool_call=True) == 200
    assert http_status("no_such_code") == 500


def test_the_tools_api_refusals_are_the_call_scope() -> None:
    assert {c: e.status for c, e in CODES.items() if e.scope == "call"} == CALL_STATUS
    assert CALL_STATUS == BEFORE_CALL


def test_retryable_defaults_to_the_declaration() -> None:
    assert ToolError("hid_busy", "busy").retryable is True
    assert ToolError("tool_not_found", "no").retryable is False
    assert ToolError("tool_unavailable", "depends").retryable is False  # the raiser says
    assert ToolError("no_such_code", "x").retryable is False
    assert ToolError("hid_busy", "told", retryable=False).retryable is False


def _error_of(expr: ast.expr, scope: ast.AST, module: ast.Module, line: int) -> str | None:
    """The code of the ToolError `expr` names at `line`: built in place, last assigned to a
    name before it in the function or the module, or made by a helper named after its code
    (too_many_connections)."""
    if isinstance(expr, ast.Name):
        found = [
            v for v in _assigned(scope, expr.id) or _assigned(module, expr.id) if v.lineno < line
        ]
        return _error_of(found[-1], scope, module, line) if found else None
    if isinstance(expr, ast.Call):
        name = _name(expr.func)
        code = _arg(expr, "code", 0) if name == "ToolError" else None
        if isinstance(code, ast.Constant) and isinstance(code.value, str):
            return code.value
        return name if name in CODES else None
    return None


def hand_written_statuses() -> list[tuple[str, str, int]]:
    """(where, code, status) of every reply that states its status beside an error's body:
    json_response(error_body(e), status=N) and http_answer("N Reason", ... error_body(e) ...)."""
    out = []
    for path in SOURCES:
        module = ast.parse(path.read_text())
        for scope, call in _scopes(module):
            bodies = [
                c.args[0]
                for c in ast.walk(call)
                if isinstance(c, ast.Call) and _name(c.func) == "error_body" and c.args
            ]
            status = _arg(call, "status")
            text = call.args[0] if _name(call.func) == "http_answer" and call.args else None
            if isinstance(status, ast.Constant) and isinstance(status.value, int):
                stated = status.value
            elif isinstance(text, ast.Constant) and isinstance(text.value, str):
                stated = int(text.value.split()[0])
            else:
                continue
            for body in bodies:
                code = _error_of(body, scope, module, call.lineno)
                assert code is not None, f"{path}:{call.lineno}: whose error is this body?"
                out.append((f"{path.relative_to(REPO)}:{call.lineno}", code, stated))
    return out


def test_a_status_written_by_hand_is_the_declared_one() -> None:
    """The replies that name their status themselves (the WebSocket upgrade's refusals, the
    HTTPS-only port's and the connection cap's raw answers) agree with the declarations."""
    found = hand_written_statuses()
    codes = {code for _, code, _ in found}
    assert {"auth_required", "websocket_upgrade_required", "tls_required"} <= codes
    assert "too_many_connections" in codes
    assert [f for f in found if http_status(f[1]) != f[2]] == []


def test_the_ipc_failures_map_declared_codes() -> None:
    assert set(FAILURES) <= set(CODES)
