"""The one agent loop shared by serving and RL: model -> tool calls -> grounded observations -> final answer.

A turn: the session's messages (system prompt and tool schemas first) are rendered by the model's
chat template; the engine generates under the turn's :class:`~harness.budget.Budget` (output tokens
capped from the engine's measured speed); :func:`~harness.protocol.parse_reply` reads the tool calls;
the app's :class:`~harness.protocol.ToolRegistry` executes them. A tool returning a :class:`Final`
(``respond``, ``ask_user``) ends the turn — after every item it names passes the :class:`Grounder`;
named items that do not exist, are out of stock or break the request's constraints go back to the
model as a tool error and never reach the user. Plain text with no tool call is a final reply.
When the step cap or the deadline is hit, the app's fallback answers and the reply is ``degraded``
with the reason.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from harness.budget import Budget
from harness.catalog import Catalog, Item
from harness.protocol import (
    ParsedReply,
    ToolCall,
    ToolRegistry,
    ToolResult,
    assistant_message,
    parse_reply,
    problem_result,
)
from harness.session import SessionState
from infra.engines.base import Completion, Engine, GenerationRequest, SamplingParams
from sid.codebook import SidMap, parse_sid
from sid.decoding import VllmSidLogitsProcessor
from sid.tokens import SidTokenMap
from sid.trie import ItemFilter, SidTrie

_SID_SPAN = re.compile(r"(?:<s\d+_\d+>)+")
"""A SID written out as text: ``<s1_12><s2_200><s3_3><s4_0>`` (or a prefix of one)."""


# ------------------------------------------------------------------------------------------------ shapes
@dataclass
class Final:
    """What a turn gives the user: text, the items it recommends (ids), bundles, actions, app data."""

    reply: str
    item_ids: list[str] = field(default_factory=list)
    bundles: list[list[str]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def named_items(self) -> list[str]:
        seen = dict.fromkeys(self.item_ids)
        for b in self.bundles:
            seen.update(dict.fromkeys(b))
        return list(seen)


@dataclass
class SidResources:
    """What model-native SID retrieval needs: the trie over live items, token map, SID map, span tokens."""

    trie: SidTrie
    token_map: SidTokenMap
    sid_map: SidMap
    start_id: int
    end_id: int


@dataclass
class ModelAccess:
    """The engine (possibly a batching front) and the tokenizer that renders prompts for it."""

    engine: Engine
    tokenizer: Any
    sid: SidResources | None = None


@dataclass
class TurnContext:
    """What a tool handler sees during one turn."""

    app: AppSpec
    session: SessionState
    constraints: dict[str, Any]
    budget: Budget
    model: ModelAccess | None
    shown: list[str] = field(default_factory=list)

    @property
    def catalog(self) -> Catalog:
        return self.app.catalog

    @property
    def resources(self) -> Any:
        return self.app.resources


@dataclass
class AppSpec:
    """One app's agent: prompt, tools, catalog, grounding rule, fallback and defaults.

    ``item_check(item, constraints)`` says whether an item meets the request's constraints (None =
    existence and stock only). ``fallback(ctx, reason)`` answers without the model when the loop runs
    out of steps or time; it must be fast and never name an ungrounded item.
    """

    name: str
    system_prompt: str
    tools: ToolRegistry[TurnContext]
    catalog: Catalog
    fallback: Callable[[TurnContext, str], Final]
    resources: Any = None
    item_check: Callable[[Item, dict[str, Any]], bool] | None = None
    default_budget_ms: float = 3000.0
    max_steps: int = 4
    require_stock: bool = True


# ------------------------------------------------------------------------------------------------ grounding
class Grounder:
    """Checks every item a reply names against the live catalog; counts failures by reason. Thread-safe."""

    def __init__(self, catalog: Catalog, sid_map: SidMap | None = None,
                 item_check: Callable[[Item, dict[str, Any]], bool] | None = None, *,
                 require_stock: bool = True) -> None:
        self.catalog, self.sid_map, self.item_check = catalog, sid_map, item_check
        self.require_stock = require_stock
        self.failures: Counter[str] = Counter()
        self._lock = threading.Lock()

    def resolve(self, ref: str) -> str | None:
        """An item id for ``ref`` (an item id, or a SID token string such as ``<s1_3><s2_0>…``)."""
        ref = ref.strip()
        if ref in self.catalog:
            return ref
        if self.sid_map is not None and ref.startswith("<"):
            try:
                return self.sid_map.item_of(parse_sid(ref))
            except (ValueError, KeyError):
                return None
        return None

    def check(self, refs: Sequence[str], constraints: dict[str, Any]) -> tuple[list[str], list[str]]:
        """``(item ids that pass, one problem per ref that does not)``."""
        ok: list[str] = []
        problems: list[str] = []
        reasons: list[str] = []
        for ref in refs:
            item_id = self.resolve(ref)
            item = self.catalog.get(item_id) if item_id is not None else None
            if item is None:
                problems.append(f"{ref!r} is not in the catalog")
                reasons.append("unknown")
            elif self.require_stock and not item.in_stock:
                problems.append(f"{item.item_id} is out of stock")
                reasons.append("out_of_stock")
            elif constraints and self.item_check is not None and not self.item_check(item, constraints):
                problems.append(f"{item.item_id} does not meet the request's constraints")
                reasons.append("constraint")
            else:
                ok.append(item.item_id)
        if reasons:
            with self._lock:
                self.failures.update(reasons)
        return ok, problems

    @property
    def total_failures(self) -> int:
        with self._lock:
            return sum(self.failures.values())


# ------------------------------------------------------------------------------------------------ the loop
@dataclass
class ModelCall:
    """One generation in a turn: the prompt ids and the completion (RL trains on these)."""

    prompt_ids: list[int]
    completion: Completion


@dataclass
class TurnResult:
    final: Final
    degraded: bool = False
    reason: str | None = None
    steps: int = 0
    tool_calls: int = 0
    grounding_failures: int = 0
    parse_errors: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    trace: list[dict[str, Any]] = field(default_factory=list)
    model_calls: list[ModelCall] = field(default_factory=list)


@dataclass
class LoopConfig:
    """Decoding and budget knobs of the loop."""

    max_new_tokens: int = 256
    min_new_tokens: int = 8
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    max_prompt_tokens: int = 4096


def render_ids(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    """Prompt token ids: the chat template with tools and the assistant generation prompt."""
    text = tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=False)
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def fit_prompt(tokenizer: Any, system_prompt: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
               max_tokens: int) -> list[int] | None:
    """The prompt ids with the system turn, the tools and the first user message always kept; when too long,
    the oldest later messages go first (a tool message never without the call it answers). None if even
    system + tools + first user + latest message do not fit (the caller falls back)."""
    system = {"role": "system", "content": system_prompt}
    ids = render_ids(tokenizer, [system, *messages], tools)
    if len(ids) <= max_tokens:
        return ids
    first = next((i for i, m in enumerate(messages) if m.get("role") == "user"), 0)
    head, rest = messages[:first + 1], messages[first + 1:]
    while len(rest) > 1:
        rest = rest[1:]
        while rest and rest[0].get("role") == "tool":  # orphaned tool results go with their call
            rest = rest[1:]
        ids = render_ids(tokenizer, [system, *head, *rest], tools)
        if len(ids) <= max_tokens:
            return ids
    return None


class AgentLoop:
    """Runs turns of one app's agent. Safe to share between threads if the engine front is."""

    def __init__(self, app: AppSpec, model: ModelAccess | None, grounder: Grounder | None = None,
                 config: LoopConfig | None = None) -> None:
        self.app, self.model = app, model
        self.grounder = grounder or Grounder(app.catalog, model.sid.sid_map if model and model.sid else None,
                                             app.item_check, require_stock=app.require_stock)
        self.config = config or LoopConfig()

    def run_turn(self, session: SessionState, user_text: str | None, *, budget: Budget | None = None,
                 constraints: dict[str, Any] | None = None) -> TurnResult:
        """Add ``user_text`` (None = the user's message is already last) and run until a final answer."""
        budget = budget or Budget(self.app.default_budget_ms, max_steps=self.app.max_steps)
        if user_text is not None:
            session.messages.append({"role": "user", "content": user_text})
        merged = {**session.constraints, **(constraints or {})}
        ctx = TurnContext(app=self.app, session=session, constraints=merged, budget=budget, model=self.model)
        result = TurnResult(final=Final(reply=""))
        start = len(session.messages)
        final = self._steps(ctx, result)
        if final is None:
            reason = result.reason or "step_limit"
            final = self.fallback(ctx, reason)
            result.degraded, result.reason = True, reason
        result.final = final
        session.turns += 1
        session.shown_items.extend(i for i in final.named_items() if i not in session.shown_items)
        if not session.messages or session.messages[-1].get("role") != "assistant" or result.degraded:
            session.messages.append({"role": "assistant", "content": final.reply})
        result.trace = session.messages[start:]
        result.latency_ms = budget.elapsed_ms()
        return result

    def fallback(self, ctx: TurnContext, reason: str) -> Final:
        """The app's degraded answer, with every named item grounded (failing ones are dropped)."""
        final = self.app.fallback(ctx, reason)
        ok, _ = self.grounder.check(final.named_items(), ctx.constraints)
        keep = set(ok)
        final.item_ids = [i for i in final.item_ids if i in keep]
        final.bundles = [[i for i in b if i in keep] for b in final.bundles]
        return final

    def _steps(self, ctx: TurnContext, result: TurnResult) -> Final | None:
        if self.model is None:
            result.reason = "no_model"
            return None
        for _ in range(ctx.budget.max_steps):
            parsed = self._generate(ctx, result)
            if parsed is None:
                return None
            result.steps += 1
            if not parsed.calls and not parsed.problems:
                final = self.text_final(ctx, parsed.content, result)
                if final is None:  # nothing a user can read: answer from the fallback instead
                    result.reason = "empty_reply"
                    return None
                ctx.session.messages.append({"role": "assistant", "content": parsed.content})
                return final
            ctx.session.messages.append(assistant_message(parsed.content, parsed.calls))
            final = self.execute(ctx, parsed, result)
            if final is not None:
                return final
        result.reason = "step_limit"
        return None

    def _generate(self, ctx: TurnContext, result: TurnResult) -> ParsedReply | None:
        assert self.model is not None
        cfg, engine = self.config, self.model.engine
        ids = fit_prompt(self.model.tokenizer, self.app.system_prompt, ctx.session.messages, self.app.tools.schemas(),
                         cfg.max_prompt_tokens)
        if ids is None:
            result.reason = "prompt_too_long"
            return None
        if ctx.budget.expired():
            result.reason = "budget"
            return None
        cap = ctx.budget.token_cap(engine.tokens_per_second, cfg.max_new_tokens)
        if cap < cfg.min_new_tokens:
            result.reason = "budget"
            return None
        params = SamplingParams(max_new_tokens=cap, temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed)
        request = GenerationRequest(prompt=ids, params=params, constraint=self.sid_constraint(ctx))
        completion = engine.generate([request])[0][0]
        result.model_calls.append(ModelCall(ids, completion))
        result.output_tokens += len(completion.token_ids)
        return parse_reply(completion.text)

    def sid_constraint(self, ctx: TurnContext) -> Callable[[], VllmSidLogitsProcessor] | None:
        """Inside a SID span the model may only write SIDs of live items (in stock, under the request's price
        range): decode-time grounding, so a SID the model writes names a real item instead of a near miss."""
        sid = self.model.sid if self.model is not None else None
        if sid is None:
            return None
        c = ctx.constraints
        try:
            flt = ItemFilter(in_stock=self.app.require_stock, price_min=c.get("price_min"),
                             price_max=c.get("price_max"))
        except ValueError:  # constraints of another shape (another app): stock only
            flt = ItemFilter(in_stock=self.app.require_stock)
        return partial(VllmSidLogitsProcessor, sid.trie, sid.token_map, flt=flt, start_token_id=sid.start_id,
                       end_token_ids=[sid.end_id])

    def text_final(self, ctx: TurnContext, text: str, result: TurnResult) -> Final | None:
        """A plain-text reply as a final answer. SIDs written in the text (a model answering natively in item
        space) are items it names: grounded like any other, shown as items, and cut from the text the user
        reads. None when nothing readable and grounded is left."""
        refs = [m.group(0) for m in _SID_SPAN.finditer(text)]
        ok, problems = self.grounder.check(refs, ctx.constraints) if refs else ([], [])
        result.grounding_failures += len(problems)
        ok = list(dict.fromkeys(ok))
        reply = " ".join(_SID_SPAN.sub(" ", text).split())
        if not reply and ok:
            reply = "Here is what I found." if len(ok) == 1 else "Here are some options."
        if not reply:
            return None
        return Final(reply=reply, item_ids=ok, actions=[{"type": "show_items", "item_ids": ok}] if ok else [])

    def execute(self, ctx: TurnContext, parsed: ParsedReply, result: TurnResult) -> Final | None:
        """Run a parsed reply's calls; append their results (and a grounded final's text) to the session."""
        final: Final | None = None
        results: list[ToolResult] = [problem_result(p) for p in parsed.problems]
        result.parse_errors += len(parsed.problems)
        for call in parsed.calls:
            result.tool_calls += 1
            out = self.app.tools.execute(call, ctx)
            if out.ok and isinstance(out.content, Final):
                out, final = self._ground(ctx, call, out.content, result, final)
            elif out.ok:
                ctx.shown.extend(_item_ids_in(out.content))
            results.append(out)
        ctx.session.messages.extend(r.to_message() for r in results)
        if final is not None:
            ctx.session.messages.append({"role": "assistant", "content": final.reply})
        return final

    def _ground(self, ctx: TurnContext, call: ToolCall, candidate: Final, result: TurnResult,
                final: Final | None) -> tuple[ToolResult, Final | None]:
        _, problems = self.grounder.check(candidate.named_items(), ctx.constraints)
        if problems:
            result.grounding_failures += len(problems)
            return ToolResult(name=call.name, call_id=call.id, ok=False,
                              error="not sent to the user: " + "; ".join(problems[:5])), final
        return ToolResult(name=call.name, call_id=call.id, ok=True, content={"sent": True}), final or candidate


def _item_ids_in(content: Any) -> list[str]:
    """Item ids a tool result showed the model (``item_id`` keys anywhere in a JSON-like value)."""
    out: list[str] = []
    stack = [content]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("item_id"), str):
                out.append(node["item_id"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


def run_loop_turns(loop: AgentLoop, session: SessionState, texts: Sequence[str], budget_ms: float) -> list[TurnResult]:
    """Convenience for scripts and tests: several user turns in one session, each under its own budget."""
    return [loop.run_turn(session, t, budget=Budget(budget_ms, max_steps=loop.app.max_steps)) for t in texts]


def now_ms() -> float:
    return time.monotonic() * 1000.0
