"""The FastAPI app: shopping sessions, livestream answers, travel plans, OpenAI-compatible chat, health, metrics.

Run it with ``sidekick serve AGENT_DIR --world DIR``; OpenAPI docs at ``/docs``. Every turn runs in a
worker thread under its latency budget; past budget + grace the reply comes from the app's fallback,
marked ``degraded`` with reason ``timeout``, so no request hangs. Bad input is a 4xx naming the field;
a full queue is a 503 with ``Retry-After`` at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from harness.agent import SURE, Final, TurnResult, render_ids
from harness.budget import Budget
from harness.catalog import Item
from harness.protocol import parse_reply
from harness.session import SessionError, SessionState
from infra.engines.base import Completion, EngineError, GenerationRequest, SamplingParams, TokenSink
from serving.lending import Lender, LendingRefused
from serving.schemas import (
    AnswerReply,
    AnswerRequest,
    CartAdd,
    CartReply,
    ChatRequest,
    ErrorReply,
    ItemCard,
    OpenAIErrorReply,
    PlanReply,
    PlanRequest,
    SessionCreate,
    SessionView,
    StreamList,
    TurnReply,
    TurnRequest,
    price_range_problem,
)
from serving.server import AgentServer, Overloaded, UnknownApp
from serving.ui import mount_ui
from training.rl.lending import JoinSpec, job_from_json, job_to_json, trajectory_to_json, weights_from_bytes

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ plumbing
def get_server(request: Request) -> AgentServer:
    server: AgentServer = request.app.state.server
    return server


ServerDep = Annotated[AgentServer, Depends(get_server)]

_ERROR_TEXT = {
    400: "The body could not be read (not UTF-8 JSON), or the prompt is too long.",
    401: "Missing or wrong X-API-Key header.",
    403: "Admin routes are off (the server has no api_key).",
    404: "Unknown session, app or model.",
    409: "The server has no reloadable agent, or cannot lend / lends to another RL run.",
    413: "The request body is larger than max_body_bytes.",
    422: "A field is missing or invalid; the detail names it.",
    503: "Busy (with Retry-After: the queue would eat the budget), no model loaded, or the engine or "
         "session store failed.",
}


def errors(*codes: int, model: type[ErrorReply] = ErrorReply) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the error statuses a route can answer (all with a ``detail``)."""
    return {code: {"model": model, "description": _ERROR_TEXT[code]} for code in codes}


BODY_ERRORS = (400, 404, 413, 422, 503)


class BodyLimit:
    """ASGI middleware: bodies over ``limit`` bytes get 413 (by Content-Length, or counted while streaming)."""

    def __init__(self, app: ASGIApp, limit: int, paths: dict[str, int] | None = None) -> None:
        self.app, self.default, self.paths = app, limit, paths or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.paths.get(scope.get("path", ""), self.default)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _too_large(scope, receive, send, limit)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                raise HTTPException(413, f"request body exceeds {limit} bytes")
            return message

        await self.app(scope, limited, send)


async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    response = _error_response(Request(scope), 413, f"request body exceeds {limit} bytes")  # OpenAI shape there
    await response(scope, receive, send)


def _card(server: AgentServer, item: Item) -> ItemCard:
    sid = None
    if server.model is not None and server.model.sid is not None and item.item_id in server.model.sid.sid_map:
        sid = server.model.sid.sid_map.sid_of(item.item_id)
    return ItemCard(item_id=item.item_id, title=item.title, price=item.price, currency=item.currency,
                    category=item.category_path, rating=item.rating, in_stock=item.in_stock, sid=sid)


def _cards(server: AgentServer, app: str, ids: list[str]) -> list[ItemCard]:
    catalog = server.app(app).spec.catalog
    return [_card(server, item) for item in (catalog.get(i) for i in ids) if item is not None]


async def _run(server: AgentServer, fn: Callable[[], TurnResult], pool: str = "turn") -> TurnResult:
    loop = asyncio.get_running_loop()
    result: TurnResult = await loop.run_in_executor(server_executor(server, pool), fn)
    return result


_EXECUTORS: dict[tuple[int, str], ThreadPoolExecutor] = {}


def server_executor(server: AgentServer, pool: str = "turn") -> ThreadPoolExecutor:
    """The worker pools of a server: ``turn`` (agent turns and raw model calls, ``worker_threads``),
    ``fallback`` (answers of cut or refused turns, ``fallback_threads``: never queued behind turns) and
    ``lending`` (the RL controller's calls to a lending replica, 2 threads: a join or a weight push takes
    seconds and must not hold up a fallback answer)."""
    key = (id(server), pool)
    executor = _EXECUTORS.get(key)
    if executor is None:
        size = {"turn": server.config.worker_threads, "lending": 2}.get(pool, server.config.fallback_threads)
        executor = _EXECUTORS[key] = ThreadPoolExecutor(size, thread_name_prefix=pool)
    return executor


def arrival(request: Request) -> float:
    """When the request reached the server (``time.monotonic()``, set by the timing middleware): every budget
    counts from here."""
    return float(getattr(request.state, "arrival", time.monotonic()))


ArrivalDep = Annotated[float, Depends(arrival)]


async def run_turn(server: AgentServer, app: str, session: SessionState, text: str | None, budget_ms: float,
                   constraints: dict[str, Any] | None = None, *, arrived: float | None = None
                   ) -> tuple[SessionState, TurnResult]:
    """Admit, run the turn on a copy of the session in a worker, and cut it at its deadline.

    The budget counts from ``arrived``. Admission may refuse at once (503) or send the turn straight to the
    fallback (``overload: degrade``). Otherwise the model has until ``budget - answer_reserve_ms``: then the
    turn is cancelled (its rows leave the engine's batch) and the fallback answers, ``degraded: timeout``.
    Returns the session to save (the worked copy, or the original plus the fallback's exchange) and the result;
    the turn is recorded in the metrics with its real wall time.
    """
    budget = server.new_budget(app, budget_ms, start=arrived)
    if not server.admit(app, budget, lambda: server.app(app).loop.answers_first(session, text, constraints)):
        session, result = await _fallback(server, app, session, text, budget, "overload", constraints)
    else:
        session, result = await _model_turn(server, app, session, text, budget, constraints)
    server.record_turn(app, result, budget.elapsed_ms(), budget.budget_ms)
    return session, result


async def _model_turn(server: AgentServer, app: str, session: SessionState, text: str | None, budget: Budget,
                      constraints: dict[str, Any] | None) -> tuple[SessionState, TurnResult]:
    work = session.model_copy(deep=True)
    others = server.admission.start()
    cut = False

    def done(task: asyncio.Future[TurnResult]) -> None:
        failed = task.cancelled() or task.exception() is not None
        if failed and cut:
            log.info("a turn cut at its deadline ended with %r", None if task.cancelled() else task.exception())
        if not failed and not cut and task.result().reason == SURE:
            server.admission.drop()  # the app answered itself: no model time to measure
            return
        delivered = not (cut or failed or task.result().reason in ("budget", "timeout"))
        server.admission.finish(app, budget.elapsed_ms(), others=others, delivered=delivered)

    task = asyncio.ensure_future(_run(server, lambda: server.model_turn(app, work, text, budget, constraints)))
    task.add_done_callback(done)  # also retrieves a cut turn's error, so it is never "never retrieved"
    try:
        return work, await asyncio.wait_for(asyncio.shield(task), max(0.0, _cut_in_s(server, budget)))
    except TimeoutError:
        cut = True
        budget.cancel.set()  # the engine drops the turn's rows at its next step; the loop stops calling it
        return await _fallback(server, app, session, text, budget, "timeout", constraints)


def _cut_in_s(server: AgentServer, budget: Budget) -> float:
    return (budget.remaining_ms() - server.config.answer_reserve_ms) / 1000.0


async def _fallback(server: AgentServer, app: str, session: SessionState, text: str | None, budget: Budget,
                    reason: str, constraints: dict[str, Any] | None) -> tuple[SessionState, TurnResult]:
    """The app's fallback answer on the fallback pool; the user's message and the answer join the session."""
    if text is not None:
        session.messages.append({"role": "user", "content": text})
    result = await _run(server, lambda: server.fallback_turn(app, session, reason, budget, constraints), "fallback")
    session.messages.append({"role": "assistant", "content": result.final.reply})
    session.turns += 1
    return session, result


# ------------------------------------------------------------------------------------------------ sessions
def _load_session(server: AgentServer, app_name: str, session_id: str) -> SessionState:
    state = server.store.get(session_id)
    if state is None or state.app != app_name:
        raise HTTPException(404, f"session {session_id!r} not found (expired or never created)")
    return state


def _reason(result: TurnResult | None) -> str | None:
    """A reply's ``reason``: why the fallback answered (degraded), or ``sure`` when the app's own first answer came
    before any model call (:attr:`harness.agent.AppSpec.first_answer`); None when the model answered."""
    if result is None or not (result.degraded or result.reason == SURE):
        return None
    return result.reason


def _turn_reply(server: AgentServer, state: SessionState, result: TurnResult | None, arrived: float) -> TurnReply:
    final = result.final if result else Final(reply="")
    return TurnReply(session_id=state.session_id, reply=final.reply, items=_cards(server, state.app, final.item_ids),
                     bundles=[_cards(server, state.app, b) for b in final.bundles], actions=final.actions,
                     cart=state.cart, degraded=bool(result and result.degraded),
                     reason=_reason(result),
                     latency_ms=(time.monotonic() - arrived) * 1000.0)


def _cart_reply(server: AgentServer, state: SessionState) -> CartReply:
    items = _cards(server, state.app, list(state.cart))
    total = sum((card.price or 0.0) * state.cart[card.item_id] for card in items)
    return CartReply(session_id=state.session_id, cart=state.cart, items=items, total=round(total, 2))


def _json(reply: BaseModel, status: int = 200) -> Response:
    """A reply model as a JSON response, serialised by pydantic-core (the route's ``response_model`` documents it;
    FastAPI's own validation and encoding of a returned model cost the event loop several times more)."""
    return Response(reply.model_dump_json(), status_code=status, media_type="application/json")


def session_router(app_name: str) -> APIRouter:
    """``/v1/{app_name}/sessions...``: multi-turn sessions with item cards, for one served app (the REST shape
    DESIGN.md gives shopping); the handlers know the app only as this argument."""
    router = APIRouter(prefix=f"/v1/{app_name}", tags=[app_name])

    @router.post("/sessions", status_code=201, response_model=TurnReply, responses=errors(*BODY_ERRORS))
    async def create_session(body: SessionCreate, server: ServerDep, arrived: ArrivalDep) -> Response:
        """Open a session (with optional constraints); with ``message`` the first turn runs at once."""
        server.app(app_name)
        state = SessionState(app=app_name, constraints=body.constraints.as_dict() if body.constraints else {})
        result = None
        if body.message is not None:
            state, result = await run_turn(server, app_name, state, body.message,
                                           server.budget_ms(app_name, body.budget_ms), arrived=arrived)
        server.store.put(state)
        return _json(_turn_reply(server, state, result, arrived), 201)

    @router.post("/sessions/{session_id}/turns", response_model=TurnReply, responses=errors(*BODY_ERRORS))
    async def create_turn(session_id: str, body: TurnRequest, server: ServerDep, arrived: ArrivalDep) -> Response:
        """One user message -> the agent's reply with item cards. A session's turns run one at a time: a second
        one sent meanwhile waits for the first (its budget counting from its arrival)."""
        async with server.session_locks.hold(session_id):
            state = _load_session(server, app_name, session_id)
            if body.constraints is not None:
                merged = {**state.constraints, **body.constraints.as_dict()}
                if (problem := price_range_problem(merged)) is not None:
                    raise HTTPException(422, f"constraints: {problem} (merged with the session's constraints)")
                state.constraints = merged
            budget_ms = server.budget_ms(app_name, body.budget_ms)
            state, result = await run_turn(server, app_name, state, body.message, budget_ms, arrived=arrived)
            server.store.put(state)
        return _json(_turn_reply(server, state, result, arrived))

    @router.post("/sessions/{session_id}/cart", response_model=CartReply, responses=errors(*BODY_ERRORS))
    async def add_to_cart(session_id: str, body: CartAdd, server: ServerDep) -> Response:
        """Put units of an item in the session's cart (a frontend's "add to cart" button; no model involved).
        The agent sees the cart on the next turn. 404 for an item not in the catalog, 422 past its stock.
        During a turn of the session it waits for the turn's end, so neither change is lost."""
        item = server.app(app_name).spec.catalog.get(body.item_id)
        if item is None:
            raise HTTPException(404, f"item_id: {body.item_id!r} is not in the catalog")
        async with server.session_locks.hold(session_id):
            state = _load_session(server, app_name, session_id)
            try:
                state.add_to_cart(item, body.quantity)
            except ValueError as e:
                raise HTTPException(422, f"quantity: {e}") from None
            server.store.put(state)
        return _json(_cart_reply(server, state))

    @router.delete("/sessions/{session_id}/cart/{item_id}", response_model=CartReply, responses=errors(404, 422, 503))
    async def remove_from_cart(session_id: str, item_id: str, server: ServerDep) -> Response:
        """Take an item (all its units) out of the session's cart; 404 when it is not there."""
        async with server.session_locks.hold(session_id):
            state = _load_session(server, app_name, session_id)
            if state.cart.pop(item_id, None) is None:
                raise HTTPException(404, f"item_id: {item_id!r} is not in the cart of session {session_id!r}")
            server.store.put(state)
        return _json(_cart_reply(server, state))

    @router.get("/sessions/{session_id}", responses=errors(404, 422, 503))
    async def read_session(session_id: str, server: ServerDep) -> SessionView:
        s = _load_session(server, app_name, session_id)
        return SessionView(session_id=s.session_id, turns=s.turns, messages=len(s.messages),
                           shown_items=s.shown_items, cart=s.cart, constraints=s.constraints)

    @router.delete("/sessions/{session_id}", status_code=204, responses=errors(404, 422, 503))
    async def delete_session(session_id: str, server: ServerDep) -> Response:
        async with server.session_locks.hold(session_id):  # after a running turn, which would save it again
            _load_session(server, app_name, session_id)
            server.store.delete(session_id)
        return Response(status_code=204)

    return router


SESSION_APPS = ("shopping",)
"""Apps whose REST surface is sessions with item cards (DESIGN.md's REST section); others answer below."""


# ------------------------------------------------------------------------------------------------ livestream, travel
apps_router = APIRouter(tags=["livestream", "travel"])


@apps_router.post("/v1/livestream/answer", response_model=AnswerReply, responses=errors(*BODY_ERRORS))
async def answer_question(body: AnswerRequest, server: ServerDep, arrived: ArrivalDep) -> Response:
    """A viewer's question about the stream's products, answered under a sub-second default budget."""
    ctx = {k: v for k, v in {"stream_id": body.stream_id, "ts_offset_s": body.ts_offset_s,
                             "item_id": body.item_id}.items() if v is not None}
    state = SessionState(app="livestream", constraints=ctx)
    _, result = await run_turn(server, "livestream", state, body.question,
                               server.budget_ms("livestream", body.budget_ms), arrived=arrived)
    final = result.final
    return _json(AnswerReply(answer=final.reply, cited_facts=[str(f) for f in final.data.get("cited_facts", [])],
                             items=_cards(server, "livestream", final.item_ids), degraded=result.degraded,
                             reason=_reason(result),
                             latency_ms=(time.monotonic() - arrived) * 1000.0))


@apps_router.get("/v1/livestream/streams", response_model=StreamList, responses=errors(404, 503))
async def list_streams(server: ServerDep) -> Response:
    """The streams the server knows, each with its products and the seconds they are on screen (what a viewer's
    overlay needs to show the product of the moment and to send ``ts_offset_s``)."""
    spec = server.app("livestream").spec
    listing = spec.listing() if spec.listing is not None else []
    return _json(StreamList.model_validate({"streams": listing}))


@apps_router.post("/v1/travel/plan", response_model=PlanReply, responses=errors(*BODY_ERRORS))
async def plan_trip(body: PlanRequest, server: ServerDep, arrived: ArrivalDep) -> Response:
    """A trip request -> an itinerary checked for opening hours and travel times."""
    state = SessionState(app="travel", constraints=dict(body.constraints or {}))
    _, result = await run_turn(server, "travel", state, body.request, server.budget_ms("travel", body.budget_ms),
                               arrived=arrived)
    itinerary = result.final.data.get("itinerary")
    view = {k: result.final.data.get(k) or [] for k in ("stops", "legs")} if itinerary is not None else {}
    return _json(PlanReply(itinerary=_jsonable(itinerary), **view, reply=result.final.reply, degraded=result.degraded,
                           reason=_reason(result),
                           latency_ms=(time.monotonic() - arrived) * 1000.0))


def _jsonable(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        dumped: dict[str, Any] = value.model_dump(mode="json")
        return dumped
    return dict(value) if isinstance(value, dict) else {"value": value}


# ------------------------------------------------------------------------------------------------ OpenAI-compatible
openai_router = APIRouter(prefix="/v1", tags=["openai"])


@openai_router.get("/models")
async def list_models(server: ServerDep) -> dict[str, Any]:
    """The raw model (client-side tools) and one agent per app (``NAME:shopping``: server-side tools)."""
    names = ([server.config.model_name] if server.model else []) + [f"{server.config.model_name}:{a}"
                                                                    for a in server.apps]
    return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "sidekick"}
                                       for n in names]}


def _chat_messages(body: ChatRequest) -> list[dict[str, Any]]:
    out = []
    for m in body.messages:
        msg: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
        if m.tool_calls:
            msg["tool_calls"] = [c.model_dump() for c in m.tool_calls]
        if m.role == "tool":
            msg["tool_call_id"], msg["name"] = m.tool_call_id, m.name
        out.append(msg)
    return out


def _raw_request(server: AgentServer, body: ChatRequest, deadline: float, cancel: threading.Event | None = None,
                 stream: TokenSink | None = None) -> tuple[GenerationRequest, list[dict[str, Any]] | None]:
    """The engine request for a raw chat call (the client's messages and tools), and the tools."""
    assert server.model is not None
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
    ids = render_ids(server.model.tokenizer, _chat_messages(body), tools)
    if len(ids) > server.config.max_prompt_tokens:
        limit = server.config.max_prompt_tokens
        raise HTTPException(400, f"messages render to {len(ids)} tokens; the limit is {limit}")
    ceiling = server.config.max_new_tokens  # the server's ceiling holds whatever the client asks for
    cap = min(body.max_completion_tokens or body.max_tokens or ceiling, ceiling)
    params = SamplingParams(max_new_tokens=cap, temperature=1.0 if body.temperature is None else body.temperature,
                            top_p=body.top_p or 1.0, seed=body.seed)
    return GenerationRequest(prompt=ids, params=params, deadline=deadline, cancel=cancel, stream=stream), tools


_FINISH = {"eos": "stop", "stop": "stop", "length": "length", "abort": "length"}
"""Engine finish reasons as OpenAI's (a call cut at its budget ends like one cut at its token cap)."""


def _raw_message(completion: Completion, tools: list[dict[str, Any]] | None) -> tuple[dict[str, Any], str]:
    """The assistant message of a raw completion (tool calls parsed when the client sent tools), finish reason."""
    parsed = parse_reply(completion.text)
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content or None}
    finish = _FINISH[completion.finish_reason]
    if parsed.calls and tools:
        message["tool_calls"] = [c.to_openai() for c in parsed.calls]
        finish = "tool_calls"
    elif parsed.calls or parsed.problems:
        message["content"] = completion.text
    return message, finish


def _raw_completion(server: AgentServer, body: ChatRequest, deadline: float) -> tuple[dict[str, Any], str, int, int]:
    """Generate one assistant message with the client's tools: ``(message, finish_reason, prompt, output)``."""
    assert server.model is not None
    request, tools = _raw_request(server, body, deadline)
    completion = server.model.engine.generate([request])[0][0]
    message, finish = _raw_message(completion, tools)
    return message, finish, completion.prompt_tokens, len(completion.token_ids)


async def _agent_completion(server: AgentServer, app: str, body: ChatRequest, arrived: float
                            ) -> tuple[dict[str, Any], str, int, int]:
    messages = [m for m in _chat_messages(body) if m["role"] != "system"]
    if not messages or messages[-1]["role"] != "user":
        raise HTTPException(422, "messages: the last message must be from the user for an agent model")
    state = SessionState(app=app, messages=messages)
    _, result = await run_turn(server, app, state, None, server.budget_ms(app, body.budget_ms), arrived=arrived)
    final = result.final
    message = {"role": "assistant", "content": final.reply,
               "sidekick": {"items": [c.model_dump() for c in _cards(server, app, final.item_ids)],
                            "bundles": final.bundles, "actions": final.actions, "data": _safe(final.data),
                            "degraded": result.degraded, "reason": result.reason}}
    return message, "stop", 0, result.output_tokens


def _safe(data: dict[str, Any]) -> Any:
    return json.loads(json.dumps(data, default=lambda o: o.model_dump(mode="json") if hasattr(o, "model_dump")
                                 else str(o)))


_CHAT_REPLY: dict[int | str, dict[str, Any]] = {200: {
    "description": "A chat.completion object, or with ``stream: true`` server-sent chunks.",
    "content": {"application/json": {}, "text/event-stream": {"schema": {  # one event
        "type": "object", "required": ["data"],
        "properties": {"data": {"type": "string", "description": "A chat.completion.chunk as JSON, or [DONE]."}}}}}}}


@openai_router.post("/chat/completions", response_model=None,
                    responses={**_CHAT_REPLY, **errors(*BODY_ERRORS, model=OpenAIErrorReply)})
async def create_chat_completion(body: ChatRequest, server: ServerDep, arrived: ArrivalDep
                                 ) -> dict[str, Any] | StreamingResponse:
    """OpenAI chat completions; ``stream: true`` answers as server-sent events."""
    name, _, app = body.model.partition(":")
    if name != server.config.model_name or (app and app not in server.apps):
        known = ", ".join(m["id"] for m in (await list_models(server))["data"])
        raise HTTPException(404, f"model {body.model!r} not found; available: {known}")
    if app:
        message, finish, n_prompt, n_out = await _agent_completion(server, app, body, arrived)
    else:
        if server.model is None:
            raise HTTPException(503, "no model is loaded")
        budget_ms = body.budget_ms or RAW_BUDGET_MS
        server.admit_call(budget_ms)
        deadline = arrived + budget_ms / 1000.0
        if body.stream:
            return await _raw_stream(server, body, deadline, arrived)
        loop = asyncio.get_running_loop()
        message, finish, n_prompt, n_out = await loop.run_in_executor(server_executor(server), _raw_completion,
                                                                      server, body, deadline)
    chat_id, created = "chatcmpl-" + uuid.uuid4().hex[:24], int(time.time())
    if body.stream:
        return StreamingResponse(_sse(chat_id, created, body.model, message, finish), media_type="text/event-stream")
    return {"id": chat_id, "object": "chat.completion", "created": created, "model": body.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}}


RAW_BUDGET_MS = 60_000.0
"""A raw chat call's budget when it names none (ms): the engine stops its rows then."""

TOOL_OPEN = "<tool_call>"


def _chunk(chat_id: str, created: int, model: str, delta: dict[str, Any], reason: str | None = None) -> str:
    body = {"id": chat_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}]}
    return f"data: {json.dumps(body)}\n\n"


async def _raw_stream(server: AgentServer, body: ChatRequest, deadline: float, arrived: float) -> StreamingResponse:
    """A raw chat call streamed token by token: the engine's stream sink feeds an asyncio queue, each new token's
    text goes out as a content chunk (text that may open a ``<tool_call>`` is held back when the client sent
    tools; the parsed calls follow at the end). A client that disconnects cancels the generation."""
    assert server.model is not None
    loop = asyncio.get_running_loop()
    tokens: asyncio.Queue[int] = asyncio.Queue()
    cancel = threading.Event()

    def sink(index: int, token_id: int) -> None:
        loop.call_soon_threadsafe(tokens.put_nowait, token_id)

    request, tools = await loop.run_in_executor(server_executor(server), _raw_request, server, body, deadline,
                                                cancel, sink)
    engine = server.model.engine
    call = loop.run_in_executor(server_executor(server), lambda: engine.generate([request])[0][0])
    stream = _TokenText(server.model.tokenizer, hold=TOOL_OPEN if tools else None)
    chat_id, created = "chatcmpl-" + uuid.uuid4().hex[:24], int(time.time())

    async def events() -> AsyncIterator[str]:
        try:
            yield _chunk(chat_id, created, body.model, {"role": "assistant", "content": ""})
            while not (call.done() and tokens.empty()):
                getter: asyncio.Future[Any] = asyncio.ensure_future(tokens.get())
                waiting: set[asyncio.Future[Any]] = {getter, call}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                delta = stream.add(getter.result())
                if delta:
                    if stream.first:
                        server.metrics.observe_first_token(time.monotonic() - arrived)
                    yield _chunk(chat_id, created, body.model, {"content": delta})
            try:
                completion = await call
            except (EngineError, HTTPException) as e:
                error = {"message": str(getattr(e, "detail", e)), "type": "server_error", "param": None, "code": None}
                yield f"data: {json.dumps({'error': error})}\n\n"
                return
            message, finish = _raw_message(completion, tools)
            rest = stream.rest(message.get("content") or "")
            if rest:
                yield _chunk(chat_id, created, body.model, {"content": rest})
            for i, tool_call in enumerate(message.get("tool_calls") or []):
                yield _chunk(chat_id, created, body.model, {"tool_calls": [{"index": i, **tool_call}]})
            yield _chunk(chat_id, created, body.model, {}, finish)
            yield "data: [DONE]\n\n"
        finally:
            cancel.set()  # a client gone mid-stream stops the generation; after the end this changes nothing

    return StreamingResponse(events(), media_type="text/event-stream")


class _TokenText:
    """Streamed token ids -> the new text since the last call. Text from ``hold`` on (a tool call opening) is
    never sent as content; text that could still become ``hold`` waits for the next token, and so do leading
    and trailing spaces (the final content is stripped)."""

    def __init__(self, tokenizer: Any, hold: str | None) -> None:
        self.tokenizer, self.hold = tokenizer, hold
        self.ids: list[int] = []
        self.sent = ""
        self.first = False  # the last add() sent the first content
        self.held = False  # ``hold`` appeared: nothing more goes out as content

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        self.first = False
        if self.held:
            return ""
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # a character split across tokens: wait for its end
            return ""
        text = text.strip()  # as the parsed final content: spaces go out only once text follows them
        if self.hold is not None:
            at = text.find(self.hold)
            if at >= 0:
                text, self.held = text[:at], True
            else:
                text = text[:len(text) - _open_suffix(text, self.hold)]
        if not text.startswith(self.sent) or len(text) == len(self.sent):
            return ""
        delta, self.sent = text[len(self.sent):], text
        self.first = not self.sent[:-len(delta)]
        return delta

    def rest(self, final: str) -> str:
        """What the final content adds to what was sent (nothing when it does not extend it)."""
        return final[len(self.sent):] if final.startswith(self.sent) else ""


def _open_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``marker``."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


async def _sse(chat_id: str, created: int, model: str, message: dict[str, Any], finish: str) -> AsyncIterator[str]:
    """A finished message as OpenAI stream chunks (role, content pieces, tool calls, finish, [DONE]): what an agent
    model streams, since its reply exists only once the turn's tools ran and its items were grounded."""
    yield _chunk(chat_id, created, model, {"role": "assistant", "content": ""})
    content = message.get("content") or ""
    for i in range(0, len(content), 24):
        yield _chunk(chat_id, created, model, {"content": content[i:i + 24]})
    for i, call in enumerate(message.get("tool_calls") or []):
        yield _chunk(chat_id, created, model, {"tool_calls": [{"index": i, **call}]})
    yield _chunk(chat_id, created, model, {}, finish)
    yield "data: [DONE]\n\n"


# ------------------------------------------------------------------------------------------------ ops
ops = APIRouter(tags=["ops"])


@ops.get("/healthz")
async def read_health() -> dict[str, str]:
    return {"status": "ok"}


@ops.get("/readyz", responses={503: {"description": "The engine front is down."}})
async def read_ready(server: ServerDep) -> JSONResponse:
    ok = server.ready()
    return JSONResponse({"ready": ok, "apps": list(server.apps)}, status_code=200 if ok else 503)


@ops.get("/metrics", response_class=PlainTextResponse)
async def read_metrics(server: ServerDep) -> Response:
    body, content_type = server.metrics.render()
    return Response(body, media_type=content_type)


def require_admin(server: ServerDep, x_api_key: Annotated[str | None, Header()] = None) -> None:
    if server.config.api_key is None:
        raise HTTPException(403, "admin routes are off: start the server with an api_key (SIDEKICK_API_KEY)")
    if x_api_key != server.config.api_key:
        raise HTTPException(401, "missing or wrong X-API-Key header")


AdminDep = Annotated[None, Depends(require_admin)]


@ops.get("/admin/stats", responses=errors(401, 403, 422))
async def read_stats(server: ServerDep, _: AdminDep) -> dict[str, Any]:
    """Batcher, grounding and session figures (needs X-API-Key)."""
    return {"engine": server.front.stats() if server.front else None,
            "grounding_failures": {a: dict(s.loop.grounder.failures) for a, s in server.apps.items()},
            "sessions": len(server.store)}


@ops.post("/admin/reload", responses=errors(401, 403, 409, 422, 503))
async def reload_agent(server: ServerDep, _: AdminDep) -> dict[str, Any]:
    """Reload the agent's weights from its directory (needs X-API-Key)."""
    reload = server.reload
    if reload is None:
        raise HTTPException(409, "this server was started without a reloadable agent")
    loop = asyncio.get_running_loop()
    version = await loop.run_in_executor(server_executor(server), reload)
    return {"reloaded": True, "weights_version": version}


# ------------------------------------------------------------------------------------------------ lending
class LendingSwitch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool


class LendJobs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run: str
    jobs: list[dict[str, Any]]


def _lender(server: AgentServer) -> Lender:
    if server.lender is None:
        raise HTTPException(409, "this server cannot lend (it was not started by the launcher with an api_key)")
    return server.lender


async def _lend_call(server: AgentServer, fn: Callable[[], Any]) -> Any:
    """Run a lender call (and the decoding of what was sent) off the event loop, in the lending pool; a call that
    does not fit the lender's state is 409, a bad input 422."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(server_executor(server, "lending"), fn)
    except LendingRefused as e:
        raise HTTPException(409, str(e)) from e
    except (ValueError, KeyError, TypeError) as e:
        raise HTTPException(422, f"{type(e).__name__}: {e}") from e


@ops.get("/admin/lending", responses=errors(401, 403, 409, 422))
async def read_lending(server: ServerDep, _: AdminDep) -> dict[str, Any]:
    """Whether this replica lends idle capacity to RL rollout, to which run, and what it has done (X-API-Key)."""
    return _lender(server).status()


@ops.post("/admin/lending", responses=errors(400, 401, 403, 409, 413, 422))
async def switch_lending(body: LendingSwitch, server: ServerDep, _: AdminDep) -> dict[str, Any]:
    """Turn lending on or off; off hands every unfinished RL episode back to its controller (X-API-Key)."""
    lender = _lender(server)
    result: dict[str, Any] = await _lend_call(server, lambda: lender.set_enabled(body.enabled))
    return result


@ops.post("/admin/lending/join", responses=errors(400, 401, 403, 409, 413, 422))
async def join_lending(body: JoinSpec, server: ServerDep, _: AdminDep) -> dict[str, Any]:
    """An RL run's controller joins: the replica builds the run's environment and policy slot (X-API-Key)."""
    lender = _lender(server)
    result: dict[str, Any] = await _lend_call(server, lambda: lender.join(body))
    return result


@ops.put("/admin/lending/weights", responses=errors(400, 401, 403, 409, 413, 422))
async def push_lending_weights(request: Request, server: ServerDep, _: AdminDep, run: str, version: int
                               ) -> dict[str, Any]:
    """The run's policy weights, version ``version``, as a safetensors body (X-API-Key)."""
    lender = _lender(server)
    body = await request.body()

    def update() -> int:
        try:
            state = weights_from_bytes(body)
        except Exception as e:  # safetensors raises its own error types on a malformed header
            raise ValueError(f"body: not a safetensors state dict ({type(e).__name__}: {e})") from e
        return lender.update_weights(run, state, version)

    return {"version": await _lend_call(server, update)}


@ops.post("/admin/lending/episodes", responses=errors(400, 401, 403, 409, 413, 422))
async def submit_lending(body: LendJobs, server: ServerDep, _: AdminDep) -> dict[str, Any]:
    """RL episodes to run on lent capacity (X-API-Key)."""
    lender = _lender(server)

    def submit() -> int:
        jobs = []
        for i, job in enumerate(body.jobs):
            try:
                jobs.append(job_from_json(job))
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"jobs[{i}]: {type(e).__name__}: {e}") from e
        return lender.submit(body.run, jobs)

    accepted = await _lend_call(server, submit)
    return {"accepted": accepted, "handed_back": len(body.jobs) - accepted}


class LendRun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run: str


@ops.post("/admin/lending/reclaim", responses=errors(400, 401, 403, 409, 413, 422))
async def reclaim_lending(body: LendRun, server: ServerDep, _: AdminDep) -> dict[str, Any]:
    """Hand back the run's unfinished episodes now, to run on the controller's idle workers (X-API-Key)."""
    lender = _lender(server)
    n = await _lend_call(server, lambda: lender.reclaim(body.run))
    return {"handed_back": n}


@ops.get("/admin/lending/episodes", responses=errors(401, 403, 409, 422))
async def collect_lending(server: ServerDep, _: AdminDep, run: str,
                          wait_s: Annotated[float, Query(ge=0, le=30)] = 0.0) -> Response:
    """Finished RL trajectories and handed-back jobs since the last call; ``wait_s``: wait up to that long for
    the first of them (a long poll: the controller does not poll the replica while its rollout runs)
    (X-API-Key)."""
    lender = _lender(server)
    end = time.monotonic() + wait_s
    while time.monotonic() < end and not lender.has_news():
        await asyncio.sleep(0.01)

    def collect() -> bytes:  # encoded off the event loop (FastAPI's encoder walks every token in Python)
        done, back, status = lender.collect(run)
        return json.dumps({"finished": [trajectory_to_json(t) for t in done],
                           "returned": [job_to_json(j) for j in back], "status": status}).encode()

    body: bytes = await _lend_call(server, collect)
    return Response(body, media_type="application/json")


# ------------------------------------------------------------------------------------------------ the app
OPENAI_PATHS = ("/v1/chat/", "/v1/models")


def exc_headers(exc: Exception) -> dict[str, str]:
    headers = getattr(exc, "headers", None)
    return dict(headers) if headers else {}


def _printable(value: Any, depth: int = 0) -> Any:
    """``value`` made safe to send as JSON: 422 details echo the raw input, which may hold NaN / Infinity
    (Python's JSON reader accepts them), lone surrogates (``"\\ud800"``) or nesting deep enough to overflow
    the encoder's recursion (cut at 16 levels)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return value if value.isascii() else value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict | list | tuple) and depth >= 16:
        return "..."
    if isinstance(value, dict):
        return {_printable(k, depth + 1): _printable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable(v, depth + 1) for v in value]
    return value


def _error_response(request: Request, status: int, detail: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    """``{"detail": ...}``, plus OpenAI's ``error`` object on the OpenAI routes (its clients read that)."""
    body: dict[str, Any] = {"detail": detail}
    if request.url.path.startswith(OPENAI_PATHS):
        message = detail if isinstance(detail, str) else "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'body'}: {e.get('msg')}" for e in detail)
        kind = "invalid_request_error" if status < 500 else "server_error"
        body = {"error": {"message": message, "type": kind, "param": None, "code": None}, "detail": detail}
    return JSONResponse(body, status_code=status, headers=headers or None)


def _errors(app: FastAPI) -> None:
    def handler(status: int, headers: Callable[[Exception], dict[str, str]] | None = None
                ) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
        async def respond(request: Request, exc: Exception) -> JSONResponse:
            return _error_response(request, status, str(exc), headers(exc) if headers else None)
        return respond

    async def openai_aware(request: Request, exc: Exception) -> Response:
        """422 for invalid fields (the detail's raw input made printable) and HTTP errors, as JSON error bodies."""
        if isinstance(exc, RequestValidationError):
            return _error_response(request, 422, jsonable_encoder(_printable(exc.errors())))
        assert isinstance(exc, StarletteHTTPException)
        response = await http_exception_handler(request, exc)
        if not isinstance(response, JSONResponse):  # a status without a body (204, 304)
            return response
        return _error_response(request, exc.status_code, exc.detail, exc_headers(exc))

    app.add_exception_handler(RequestValidationError, openai_aware)
    app.add_exception_handler(StarletteHTTPException, openai_aware)
    app.add_exception_handler(Overloaded, handler(503, lambda e: {"Retry-After": str(e.retry_after_s)}))  # type: ignore[attr-defined]
    app.add_exception_handler(UnknownApp, handler(404))
    app.add_exception_handler(SessionError, handler(503))
    app.add_exception_handler(EngineError, handler(503))


async def _watch_loop_lag(server: AgentServer, every_s: float = 0.05) -> None:
    """Measure, forever, how late the event loop wakes from a short sleep (``sidekick_event_loop_lag_seconds``)."""
    while True:
        t0 = time.monotonic()
        await asyncio.sleep(every_s)
        server.metrics.loop_lag.observe(max(0.0, time.monotonic() - t0 - every_s))


def create_app(server: AgentServer) -> FastAPI:
    """The ASGI app over one :class:`AgentServer` (closed when the app shuts down)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        monitor = asyncio.ensure_future(_watch_loop_lag(server))
        yield
        monitor.cancel()
        server.close()
        for pool in ("turn", "fallback", "lending"):
            executor = _EXECUTORS.pop((id(server), pool), None)
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="Sidekick", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Domain agents over a catalog: shopping, livestream Q&A, trip planning. "
                              "A page that tries them is at `/`.")
    app.state.server = server
    _errors(app)
    for router in (*(session_router(name) for name in SESSION_APPS), apps_router, openai_router, ops):
        app.include_router(router)
    mount_ui(app)
    app.add_middleware(BodyLimit, limit=server.config.max_body_bytes,
                       paths={"/admin/lending/weights": server.config.lending.max_weights_mb * 2**20})
    app.add_middleware(Timing, metrics=server.metrics)
    return app


class Timing:
    """ASGI middleware (the outermost): stamps the request's arrival, which every budget counts from, and records
    its wall time by route template and status (plain ASGI: no extra task per request, unlike
    ``@app.middleware``)."""

    def __init__(self, app: ASGIApp, metrics: Any) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.monotonic()
        scope.setdefault("state", {})["arrival"] = t0
        status = 500

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            route = scope.get("route")
            self.metrics.observe_request(getattr(route, "path", "unmatched"), status, time.monotonic() - t0)
