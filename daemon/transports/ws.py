"""The WebSocket tool protocol for hosts: /api/ws on the daemon's HTTP port.

A thin codec over the catalog (spec/websocket-tool-protocol.txt): tool.query -> tool.catalog,
tool.call -> tool.result | tool.error, tool.batch -> tool.batch.result, with post-call
evidence, the gzip-base64-json wrapper and ASFT binary transfers. No tool logic lives here.

Sessions: the upgrade is refused (401) unless it carries a pairing or client token
(`Authorization: Bearer TOKEN`; never in the URL, where proxies and logs keep it); the token's
maxToolPolicy lowers the [guard].ws preset for the whole session, which ends (1008) when that
token is rotated. Requests on one socket run concurrently (a host may query while
a call runs), at most [ws].max_inflight calls (a batch counts each of its calls, all taken
before the first runs); calls from every host meet in the catalog, which admits them against
its per-client and total budgets (daemon.invocations) and serializes HID invocations. A batch
result is streamed as its items are produced once it is large (BatchOut).
When a host goes away its running requests are cancelled, except HID invocations, which the
catalog runs to their end.

Close codes: 1003 a binary message from the host, 1007 a text message that is not a JSON
object (or not UTF-8), 1009 a message above [ws].max_message_bytes, 1006 no pong within half
the heartbeat interval, 1001 the daemon is stopping, 1008 the session's token was rotated.
Everything else is answered with tool.error.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import WSCloseCode, WSMsgType, web

from daemon.auth import Auth
from daemon.catalog import (
    EVIDENCE_TOOL,
    TREE_TOOL,
    AfterCall,
    Caller,
    Catalog,
    Guard,
    Outcome,
    schema_errors,
    validation_error,
    with_defaults,
)
from daemon.config import WsConfig
from daemon.errors import ToolError
from daemon.invocations import client_of
from daemon.transports import ws_catalog
from daemon.transports.routes import Route, catalog
from daemon.transports.ws_codec import (
    BATCH,
    BATCH_RESULT,
    CALL,
    CATALOG,
    CHUNK_MAX,
    CHUNK_MIN,
    DELIVERY_BINARY,
    DELIVERY_INLINE,
    ERROR,
    OP_CONTINUATION,
    OP_TEXT,
    QUERY,
    RESULT,
    STREAM_MIN_CHARS,
    WRAPPER_KEY,
    Envelope,
    FrameViolation,
    InvalidEnvelope,
    artifact_size,
    asft_frames,
    batch_close,
    batch_open,
    batch_whole,
    decode_envelope,
    detach_artifact,
    dumps,
    encode_envelope,
    envelope_head,
    frame_header,
    is_artifact,
    may_wrap,
    response_ids,
    unwrap_payload,
    wrap_text,
)
from daemon.wire import error_body, iso_utc

log = structlog.get_logger("daemon.ws")

PATH = "/api/ws"
MAX_BATCH = 32
MAX_DELAY_MS = 2000
SCREENSHOT, VISUAL_TREE = EVIDENCE_TOOL, "visualTree"
# Peers accept these spellings of visualTree; evidence is keyed by the spelling asked for.
EVIDENCE_NAMES = {SCREENSHOT: SCREENSHOT, VISUAL_TREE: VISUAL_TREE}
EVIDENCE_NAMES |= {"tree": VISUAL_TREE, "visual_tree": VISUAL_TREE}
# The visual tree is the screen_text tool's result (on-device OCR of the frame), taken by the
# catalog inside the call with visualTreeArguments as its arguments.
VISUAL_TREE_TOOL = TREE_TOOL


def call_schema(screenshot_args: dict[str, Any]) -> dict[str, Any]:
    """The options of a tool.call payload (arguments are the tool's business, checked by the
    catalog). screenshotArguments follow the screenshot tool's published schema."""
    return {
        "type": "object",
        "properties": {
            "toolId": {"type": "string"},
            "callId": {"type": "string"},
            "after": {
                "type": "object",
                "properties": {
                    "include": {"type": "array", "items": {"enum": sorted(EVIDENCE_NAMES)}},
                    "delayMilliseconds": {"type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS},
                    "screenshotArguments": screenshot_args,
                    "visualTreeArguments": {"type": "object"},
                },
                "additionalProperties": False,
            },
            "deliveryMode": {"enum": [DELIVERY_INLINE, DELIVERY_BINARY]},
            "chunkBytes": {"type": "integer", "minimum": CHUNK_MIN, "maximum": CHUNK_MAX},
        },
    }


@dataclass(frozen=True)
class After:
    include: tuple[str, ...]  # as spelled by the host, duplicates removed
    delay_ms: int
    screenshot_arguments: dict[str, Any]
    tree_arguments: dict[str, Any]


@dataclass(frozen=True)
class CallRequest:
    tool_id: str
    arguments: Any
    after: After | None
    delivery: str | None  # None: by size ([ws].binary_min_bytes)
    chunk_bytes: int


@dataclass(frozen=True)
class Transfer:
    transfer_id: str
    data: bytes
    chunk_bytes: int


@dataclass
class CallReply:
    """One call as the protocol reports it (a tool.result payload or a batch item)."""

    item: dict[str, Any]
    transfers: list[Transfer] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.item["success"])


def failure(tool_id: str | None, error: ToolError) -> CallReply:
    item: dict[str, Any] = {} if tool_id is None else {"toolId": tool_id}
    item.update(success=False, message=error.message, error=error.to_dict())
    return CallReply(item)


class WsTransport:
    """The /api/ws endpoint and every live host session."""

    def __init__(self, catalog: Catalog, auth: Auth, guard: Guard, config: WsConfig):
        self.catalog = catalog
        self.auth = auth
        self.guard = guard
        self.config = config
        try:
            shot_schema = catalog.args_schema(catalog.get(SCREENSHOT))
        except ToolError:
            shot_schema = {"type": "object"}
        self.call_schema = call_schema(shot_schema)
        self.revisions = ws_catalog.DefinitionRevisions(catalog)
        self.sessions: set[WsSession] = set()
        self._closing: set[asyncio.Task[None]] = set()

    def routes(self) -> list[Route]:
        """The upgrade, under the WS guard: the wrapper reads the Caller once, the catalog
        decides per tool, and the protocol refuses an upgrade without a token (handle)."""
        return [Route("GET", PATH, self.handle, catalog("ws"))]

    def _token_rotated(self, session: WsSession) -> None:
        """The token that let this host in was rotated: its session takes nothing more and
        ends (1008); the catalog has cut its calls that were not yet driving the target."""
        session.revoked = True
        task = asyncio.create_task(
            session.close(WSCloseCode.POLICY_VIOLATION, "the token was rotated")
        )
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close_all(self) -> None:
        """At shutdown (after HID invocations drained): tell every host we are going away."""
        await asyncio.gather(
            *(s.close(WSCloseCode.GOING_AWAY, "daemon stopping") for s in list(self.sessions))
        )

    async def handle(self, request: web.Request, caller: Caller) -> web.StreamResponse:
        """The upgrade, with the Caller the route wrapper read (daemon.transports.routes). A
        host's tools: the model-facing ones, other targets' listed as unavailable, text tools
        in the flattened-string form; the protocol needs the token (in the header)."""
        if not caller.authenticated:
            log.info("ws_refused", remote=request.remote, reason="no valid token")
            error = ToolError(
                "auth_required",
                "the WebSocket tool protocol needs a pairing token: 'Authorization: Bearer "
                "<token>' on the upgrade request",
            )
            return web.json_response(
                error_body(error), status=401, headers={"WWW-Authenticate": "Bearer"}
            )
        ws = web.WebSocketResponse(
            heartbeat=self.config.heartbeat_s,
            max_msg_size=self.config.max_message_bytes,
            timeout=2.0,  # how long close() waits for the host's close frame
        )
        if not ws.can_prepare(request).ok:
            error = ToolError("websocket_upgrade_required", f"{PATH} speaks WebSocket only")
            return web.json_response(
                error_body(error), status=426, headers={"Upgrade": "websocket"}
            )
        await ws.prepare(request)
        session = WsSession(self, ws, caller, request)
        self.sessions.add(session)
        unbind = self.auth.bind(caller.token_id, lambda: self._token_rotated(session))
        log.info("ws_connected", remote=session.remote, max_policy=session.guard.max_policy)
        try:
            await session.run()
        finally:
            # No await before the log line: aiohttp cancels this handler when the host's
            # connection drops, which would cut a cleanup that waits.
            unbind()
            self.sessions.discard(session)
            session.cancel_requests()
            code = session.closed_with or ws.close_code
            log.info("ws_closed", remote=session.remote, close_code=code, requests=session.count)
            if not ws.closed:
                await session.close(WSCloseCode.OK, "")
        return ws

    # -- requests -------------------------------------------------------------------------

    async def dispatch(
        self, env: Envelope, session: WsSession, counted: int = 1
    ) -> tuple[str, dict[str, Any] | str | None, list[Transfer]]:
        """(response type, payload, transfers) for one request; ToolError becomes tool.error.
        A payload is a dict, its JSON text, or None when it has been sent already (a batch
        result streamed as it was produced). `counted`: the calls the session counted for it
        as it came."""
        if env.type not in (QUERY, CALL, BATCH):
            raise ToolError(
                "tool_protocol_unknown_type", f"unsupported tool protocol message type {env.type!r}"
            )
        payload = env.payload
        if isinstance(payload, dict) and WRAPPER_KEY in payload:
            payload = await asyncio.to_thread(
                unwrap_payload, payload, self.config.max_decoded_bytes
            )
        if env.type == QUERY:
            query = ws_catalog.parse_query(payload)
            return (
                CATALOG,
                ws_catalog.catalog_reply(
                    self.catalog, session.caller, query, time.time(), self.revisions
                ),
                [],
            )
        if env.type == CALL:
            if not isinstance(payload, dict):
                raise ToolError(
                    "tool_call_payload_invalid", "tool.call payload must be a JSON object"
                )
            reply = await self.call(payload, session, env.size)
            if not reply.ok:
                return ERROR, reply.item["error"], []
            return RESULT, reply.item, reply.transfers
        return await self.batch(payload, session, env, counted)

    def parse_call(self, payload: dict[str, Any]) -> CallRequest:
        p = {k: v for k, v in payload.items() if v is not None}  # null members count as absent
        tool_id = p.get("toolId")
        if not isinstance(tool_id, str) or not tool_id.strip():
            raise ToolError("tool_call_missing_id", "the call needs a non-empty string 'toolId'")
        if p.keys() - {"toolId", "arguments"}:
            errors = schema_errors(self.call_schema, p)
            if errors:
                raise validation_error(errors, "tool.call payload", "tool_call_payload_invalid")
            p = with_defaults(self.call_schema, p)  # chunkBytes 65536.0 is the int 65536
        after = None
        if "after" in p:
            a = p["after"]
            after = After(
                include=tuple(dict.fromkeys(a.get("include", [VISUAL_TREE]))),
                delay_ms=a.get("delayMilliseconds", 0),
                screenshot_arguments=a.get("screenshotArguments", {}),
                tree_arguments=a.get("visualTreeArguments", {}),
            )
        arguments = p.get("arguments", {})
        if not isinstance(arguments, dict):  # the contract: arguments must be a JSON object
            kind = "array" if isinstance(arguments, list) else type(arguments).__name__
            message = f"arguments must be a JSON object, not {kind}"
            raise validation_error([{"path": "$", "code": "type_mismatch", "message": message}])
        return CallRequest(
            tool_id=tool_id,
            arguments=arguments,
            after=after,
            delivery=p.get("deliveryMode"),
            chunk_bytes=p.get("chunkBytes", self.config.chunk_bytes),
        )

    async def call(
        self, payload: dict[str, Any], session: WsSession, size: int | None = None
    ) -> CallReply:
        try:
            req = self.parse_call(payload)
        except ToolError as exc:
            tool_id = payload.get("toolId")
            return failure(tool_id if isinstance(tool_id, str) and tool_id else None, exc)
        done = await self.catalog.call(
            req.tool_id,
            req.arguments,
            session.caller,
            after=self.after_call(req),
            request_bytes=size,
        )
        if done.error is not None:
            return failure(req.tool_id, done.error)
        reply = CallReply({"toolId": req.tool_id, "success": True})
        note = done.tool.qualification(done.result)
        if note:
            reply.item["message"] = note
        result = done.result
        if done.tool.evidence:
            result = self.deliver(result, req, reply.transfers)
        reply.item["result"] = result
        if req.after is not None:
            evidence = self.evidence(req, done, reply.transfers)
            if evidence:
                reply.item["evidence"] = evidence
        return reply

    @staticmethod
    def after_call(req: CallRequest) -> AfterCall | None:
        """The evidence the catalog takes inside the call, if the host asked for any (a
        screenshot call's result is its own screenshot evidence)."""
        after = req.after
        if after is None:
            return None
        asked = {EVIDENCE_NAMES[name] for name in after.include}
        shot = SCREENSHOT in asked and req.tool_id != SCREENSHOT
        tree = VISUAL_TREE in asked
        if not (shot or tree):
            return None
        return AfterCall(
            after.screenshot_arguments if shot else None,
            after.delay_ms,
            after.tree_arguments if tree else None,
        )

    def deliver(self, result: Any, req: CallRequest, transfers: list[Transfer]) -> Any:
        """A screen-bearing result, inline or announced as an ASFT transfer (on request, or
        by default when the image is at least [ws].binary_min_bytes)."""
        if not is_artifact(result) or req.delivery == DELIVERY_INLINE:
            return result
        if req.delivery is None and artifact_size(result) < self.config.binary_min_bytes:
            return result
        transfer_id = uuid.uuid4().hex
        announced, data = detach_artifact(result, transfer_id, req.chunk_bytes)
        transfers.append(Transfer(transfer_id, data, req.chunk_bytes))
        return announced

    def evidence(
        self, req: CallRequest, done: Outcome, transfers: list[Transfer]
    ) -> dict[str, Any]:
        """Post-call evidence by the names the host asked. A failed capture is reported inside
        the evidence; the call itself has succeeded and stays a success."""
        assert req.after is not None
        out: dict[str, Any] = {}
        for name in req.after.include:
            if EVIDENCE_NAMES[name] == VISUAL_TREE:
                tree = done.tree
                if tree is not None and tree.error is not None:
                    out[name] = failure(VISUAL_TREE_TOOL, tree.error).item
                elif tree is not None:
                    out[name] = {"toolId": VISUAL_TREE_TOOL, "success": True, "result": tree.result}
            elif done.evidence is not None:
                shot = done.evidence
                if shot.error is not None:
                    out[name] = failure(SCREENSHOT, shot.error).item
                else:
                    result = self.deliver(shot.result, req, transfers)
                    out[name] = {"toolId": SCREENSHOT, "success": True, "result": result}
        return out

    async def batch(
        self, payload: Any, session: WsSession, env: Envelope, counted: int = 1
    ) -> tuple[str, str | None, list[Transfer]]:
        """Run a batch's calls in order. It counts as its number of calls, on this connection
        ([ws].max_inflight) and in the catalog's budget, all taken before the first runs; its
        result is built whole while small, and sent as produced once large (BatchOut)."""
        if not isinstance(payload, dict) or not isinstance(payload.get("calls"), list):
            raise ToolError(
                "tool_batch_payload_invalid", "tool.batch payload needs a 'calls' array"
            )
        go_on = payload.get("continueOnError")
        if go_on is not None and not isinstance(go_on, bool):
            raise ToolError("tool_batch_payload_invalid", "continueOnError must be a boolean")
        calls: list[Any] = payload["calls"]
        if not 1 <= len(calls) <= MAX_BATCH:
            raise ToolError(
                "tool_batch_size_invalid",
                f"a batch has 1 to {MAX_BATCH} calls, not {len(calls)}",
                details={"requested": len(calls), "max": MAX_BATCH},
            )
        budget = self.catalog.running.budget
        with (
            session.calls(len(calls) - counted),
            budget.reserve(client_of(session.remote), len(calls)),
        ):
            out = BatchOut(session, env, len(calls))
            try:
                for index, call in enumerate(calls):
                    head: dict[str, Any] = {"index": index}
                    if not isinstance(call, dict):
                        error = ToolError(
                            "tool_batch_call_invalid", "each batch call must be a JSON object"
                        )
                        reply = failure(None, error)
                    else:
                        if isinstance(call.get("callId"), str):
                            head["callId"] = call["callId"]
                        reply = await self.call(call, session, env.size)
                        out.completed += 1
                    await out.add(head | reply.item, reply.ok, reply.transfers)
                    if not reply.ok and not go_on:
                        break
                return BATCH_RESULT, await out.end(), out.transfers
            finally:
                out.let_go()


class BatchOut:
    """A tool.batch.result as its items are produced. Each item is serialized as it comes (its
    dict, base64 images and all, is dropped at once); while the items are under
    STREAM_MIN_CHARS they are kept as text and the result is sent whole as usual (the wrapper
    rule included). Past that, the message is begun and every later item is sent as a fragment
    of it when it is produced: the session's sends wait for its end (fragments of two messages
    cannot mix), and a streamed result is not wrapped (the wrapper is a "may")."""

    def __init__(self, session: WsSession, env: Envelope, requested: int):
        self.session = session
        self.env = env
        self.requested = requested
        self.completed = 0
        self.success = True
        self.count = 0
        self.transfers: list[Transfer] = []
        self._items: list[str] = []
        self._chars = 0
        self._streaming = False
        self._ended = False

    async def add(self, item: dict[str, Any], ok: bool, transfers: list[Transfer]) -> None:
        try:
            text = dumps(item)
        except (ValueError, TypeError) as exc:  # e.g. a NaN in a tool result: a bug, say so
            log.error("ws_reply_not_json", type=BATCH_RESULT, error=repr(exc))
            bad = ToolError("tool_execution_exception", f"the result is not JSON: {exc}")
            head = {k: item[k] for k in ("index", "callId") if k in item}
            text, ok = dumps(head | failure(item.get("toolId"), bad).item), False
        self.success = self.success and ok
        self.transfers += transfers
        self.count += 1
        if self._streaming:
            await self.session.fragment("," + text)
            return
        self._items.append(text)
        self._chars += len(text)
        if self._chars >= STREAM_MIN_CHARS:
            await self._begin()

    async def _begin(self) -> None:
        """Hold the session's sends and send the message so far: its head and the items."""
        await self.session.send_lock.acquire()
        self._streaming = True
        message_id, reply_to = response_ids(self.env.id)
        sent_at = iso_utc(time.time())
        head = envelope_head(BATCH_RESULT, message_id, reply_to, self.env.session_id, sent_at)
        text = head + batch_open(self.requested) + ",".join(self._items)
        self._items = []
        await self.session.fragment(text, first=True)

    async def end(self) -> str | None:
        """The whole payload's text; None when it was streamed (its last fragment sent here)."""
        stopped = self.count < self.requested
        if self._streaming:
            await self.session.fragment(
                batch_close(self.success, self.completed, stopped), fin=True
            )
            self._ended = True
            return None
        return batch_whole(self.success, self.completed, self.requested, self._items)

    def let_go(self) -> None:
        """The session's sends go on. A message cut mid-way (the host gone, the request
        cancelled) cannot be finished, and nothing else may follow its fragments: the
        connection is dropped."""
        if self._streaming:
            self._streaming = False
            if not self._ended:
                self.session.drop()
            self.session.send_lock.release()


def calls_in(env: Envelope) -> int:
    """The calls a request carries, as far as its envelope shows: a batch's (1..MAX_BATCH, its
    size checked later), else one (a query counts as one; a wrapped batch's are known and
    counted once unwrapped)."""
    payload = env.payload
    if env.type == BATCH and isinstance(payload, dict) and isinstance(payload.get("calls"), list):
        return min(max(len(payload["calls"]), 1), MAX_BATCH)
    return 1


class WsSession:
    """One host's socket: reads envelopes, runs requests as tasks, writes responses."""

    def __init__(
        self,
        transport: WsTransport,
        ws: web.WebSocketResponse,
        caller: Caller,
        request: web.BaseRequest | None = None,
    ):
        self.transport = transport
        self.ws = ws
        self.caller = caller
        self.guard = caller.effective
        self.remote = caller.peer
        self.tasks: set[asyncio.Task[None]] = set()
        self.send_lock = asyncio.Lock()
        self.count = 0
        self.running_calls = 0  # what [ws].max_inflight bounds: a batch counts its calls
        self.revoked = False  # its token was rotated: it takes no more requests
        self.closed_with: int | None = None  # the close code we sent, if we closed
        # The connection under the WebSocket, for a message sent in fragments (BatchOut).
        self._wire = request.transport if request is not None else None
        self._protocol = request.protocol if request is not None else None

    @contextlib.contextmanager
    def calls(self, more: int) -> Iterator[None]:
        """`more` calls for a request than were counted as it came (a wrapped batch's, known
        once unwrapped), for its length; refused (tool_protocol_busy) past [ws].max_inflight."""
        more = max(more, 0)
        cap = self.transport.config.max_inflight
        if self.running_calls + more > cap:
            raise self.busy()
        self.running_calls += more
        try:
            yield
        finally:
            self.running_calls -= more

    def busy(self) -> ToolError:
        cap = self.transport.config.max_inflight
        return ToolError(
            "tool_protocol_busy",
            f"{self.running_calls} calls are already running on this connection, its limit "
            f"([ws].max_inflight {cap}) counting each call of a batch",
            retryable=True,
            details={"max_inflight": cap},
        )

    async def run(self) -> None:
        while True:
            msg = await self.ws.receive()
            if msg.type is WSMsgType.TEXT:
                if not await self.on_text(msg.data):
                    return
            elif msg.type is WSMsgType.BINARY:
                await self.violation(
                    WSCloseCode.UNSUPPORTED_DATA, "binary messages are not accepted from hosts"
                )
                return
            else:  # CLOSE, CLOSING, CLOSED, ERROR (e.g. too big, bad UTF-8: aiohttp closed it)
                if msg.type is WSMsgType.ERROR:
                    log.info("ws_protocol_violation", remote=self.remote, reason=str(msg.data))
                return

    async def on_text(self, text: str) -> bool:
        """Handle one text message; False when the socket must close."""
        try:
            env = decode_envelope(text)
        except FrameViolation as exc:
            await self.violation(exc.code, exc.reason)
            return False
        except InvalidEnvelope as exc:
            log.info("ws_invalid_envelope", remote=self.remote, reason=exc.error.message)
            await self.reply(exc.request_id, exc.session_id, ERROR, exc.error.to_dict())
            return True
        if env is None:
            return True  # another capability's message: not for us
        self.count += 1
        if self.revoked:  # closing (1008): nothing more runs for its token
            refused = ToolError("token_revoked", "the token of this session was rotated")
            await self.reply(env.id, env.session_id, ERROR, refused.to_dict())
            return True
        calls = calls_in(env)
        if self.running_calls + calls > self.transport.config.max_inflight:
            await self.reply(env.id, env.session_id, ERROR, self.busy().to_dict())
            return True
        self.running_calls += calls  # counted as it comes; handle() gives them back
        self.tasks.add(asyncio.create_task(self.handle(env, calls)))  # it takes itself out
        return True

    async def handle(self, env: Envelope, calls: int = 1) -> None:
        """One request in its task of its own. The task leaves `tasks` as handle() ends, not
        in a done callback, whose scheduling costs every request one more loop iteration."""
        try:
            transfers: list[Transfer] = []
            payload: dict[str, Any] | str | None
            try:
                kind, payload, transfers = await self.transport.dispatch(env, self, calls)
            except ConnectionError:
                return  # the host went while its reply was being streamed
            except ToolError as exc:
                kind, payload = ERROR, exc.to_dict()
            except Exception as exc:
                log.exception("ws_request_failed", type=env.type)
                kind = ERROR
                error = ToolError("tool_execution_exception", f"{env.type} failed: {exc!r}")
                payload = error.to_dict()
            sent = payload is None or await self.reply(env.id, env.session_id, kind, payload)
            if sent:
                for transfer in transfers:  # announced by the reply: they follow it
                    await self.send_transfer(transfer)
        finally:
            self.running_calls -= calls
            task = asyncio.current_task()
            if task is not None:
                self.tasks.discard(task)

    async def reply(
        self,
        request_id: str | None,
        session_id: str | None,
        kind: str,
        payload: dict[str, Any] | str,
    ) -> bool:
        """Send one response (its payload as a dict or as JSON text); False when it could not
        be (not JSON-encodable, host gone)."""
        try:
            text = payload if isinstance(payload, str) else dumps(payload)
        except (ValueError, TypeError) as exc:  # e.g. a NaN in a tool result: a bug, say so
            log.error("ws_reply_not_json", type=kind, error=repr(exc))
            error = ToolError("tool_execution_exception", f"the {kind} payload is not JSON: {exc}")
            await self.reply(request_id, session_id, ERROR, error.to_dict())
            return False
        if may_wrap(text):  # compressing a large payload is CPU work: not on the loop
            text = await asyncio.to_thread(wrap_text, text)
        message_id, reply_to = response_ids(request_id)
        return await self.send(
            encode_envelope(kind, message_id, reply_to, session_id, iso_utc(time.time()), text)
        )

    async def send_transfer(self, transfer: Transfer) -> None:
        frames = 0
        for frame in asft_frames(transfer.transfer_id, transfer.data, transfer.chunk_bytes):
            if not await self.send(frame):
                break
            frames += 1
        log.debug(
            "ws_transfer", transfer_id=transfer.transfer_id, bytes=len(transfer.data), frames=frames
        )

    async def send(self, message: str | bytes) -> bool:
        """One message; False when the host is gone (its answer is dropped, nothing else)."""
        try:
            async with self.send_lock:
                if isinstance(message, str):
                    await self.ws.send_str(message)
                else:
                    await self.ws.send_bytes(message)
            return True
        except (ConnectionError, RuntimeError) as exc:
            log.debug("ws_send_dropped", remote=self.remote, error=repr(exc))
            return False

    async def fragment(self, text: str, *, first: bool = False, fin: bool = False) -> None:
        """Part of one text message (BatchOut holds send_lock from its first part to its
        last). aiohttp sends whole messages only, so the frame is written here; it waits while
        the host's socket is full, as aiohttp's own sends do (a host that stops reading stops
        answering pings too, and the heartbeat closes it). ConnectionResetError: host gone."""
        wire, protocol = self._wire, self._protocol
        if wire is None or protocol is None or wire.is_closing() or self.ws.closed:
            raise ConnectionResetError("the host is gone")
        data = text.encode()
        wire.write(frame_header(OP_TEXT if first else OP_CONTINUATION, fin, len(data)))
        wire.write(data)
        if protocol.writing_paused:
            await protocol._drain_helper()

    def drop(self) -> None:
        if self._wire is not None:
            self._wire.abort()

    async def violation(self, code: int, reason: str) -> None:
        log.info("ws_protocol_violation", remote=self.remote, close_code=code, reason=reason)
        await self.close(code, reason)

    async def close(self, code: int, reason: str) -> None:
        if not self.ws.closed:
            self.closed_with = code
        # A close reason is at most 123 bytes of UTF-8: cut, then drop a split character.
        await self.ws.close(
            code=code, message=reason.encode()[:120].decode(errors="ignore").encode()
        )

    def cancel_requests(self) -> None:
        """The host is gone: cancel what it still had running. HID invocations go on inside
        the catalog; the others end (and are logged) as cancelled."""
        for task in self.tasks:
            task.cancel()
