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

import hashlib
import itertools
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from harness.budget import Budget
from harness.catalog import Catalog, Item
from harness.protocol import (
    TOOL_CALL_END,
    TOOL_CALL_START,
    ParsedReply,
    ToolCall,
    ToolRegistry,
    ToolResult,
    assistant_message,
    parse_reply,
    problem_result,
    salvage_call,
)
from harness.session import SessionState, TokenContext
from infra.engines.base import Completion, Engine, GenerationRequest, SamplingParams, forecast
from sid.codebook import SidMap, parse_sid
from sid.decoding import VllmSidLogitsProcessor
from sid.tokens import SidTokenMap
from sid.trie import ItemFilter, SidTrie

log = logging.getLogger(__name__)

_SID_SPAN = re.compile(r"(?:<s\d+_\d+>)+")
"""A SID written out as text: ``<s1_12><s2_200><s3_3><s4_0>`` (or a prefix of one)."""
_MARKUP = re.compile(re.escape(TOOL_CALL_START) + "|" + re.escape(TOOL_CALL_END))
_BROKEN_CALL = re.compile(r'"(?:name|arguments)"\s*:|[{\[]\s*"|"\s*[}\]]')
"""JSON of a tool call the parser could not read, left in a plain-text reply (``{"name": 10}}``)."""


SURE = "sure"
"""A turn's reason when the app's :attr:`AppSpec.first_answer` answered before any model call (not degraded)."""


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


@dataclass(frozen=True)
class ReplyFrame:
    """The fixed text around every model reply of an app whose protocol is one call of one tool (livestream's
    ``answer``): each reply opens with ``start`` and closes with ``end`` right after ``stop``.

    The loop writes ``start`` into the prompt instead of having the model generate it token by token, stops the
    model once it has written ``stop`` and appends ``end`` itself (to the reply it parses and to the token
    context of the session). Under greedy decoding a model trained on whole replies writes the same call in far
    fewer decode steps (livestream: 12 instead of 35 on SmolLM2's tokenizer), which is most of a CPU answer's
    latency. ``start`` is forced only as far as its tokens are the leading tokens of every full reply
    (``start + probe`` for each of ``probes``: :func:`frame_tokens`); the model writes the rest of it.
    """

    start: str
    stop: str
    end: str = ""
    probes: tuple[str, ...] = ()
    jumps: tuple[tuple[str, str], ...] = ()
    """Fixed runs inside the reply, ``(pattern, text)``: once the text the model has written after ``start`` ends with
    a match of the regex ``pattern``, ``text`` follows without a decode step per token (jump-forward decoding, under
    greedy decoding only: :class:`FrameJumps`), e.g. the next JSON key after a value's closing ``",``."""
    choices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Closed sets of values, ``(pattern, values)``: once the written text ends with a match of ``pattern`` whose
    group 1 starts exactly one of ``values`` (and is shorter), the rest of that value follows the same way."""


@dataclass(frozen=True)
class FrameTokens:
    """A :class:`ReplyFrame` under one tokenizer: the forced ``ids`` and their ``text`` (a prefix of ``start``),
    the ``end`` text and ``end_ids``; ``jump``, the frame's jump-forward oracle (None when it has no runs or they do
    not hold on its probes' tokens), and ``tokens_per_step``, the fewest reply tokens per model-chosen token over the
    probes with it (1.0 without), which turns a budget's decode steps into a token cap."""

    ids: list[int]
    text: str
    stop: str
    end: str
    end_ids: list[int]
    jump: FrameJumps | None = None
    tokens_per_step: float = 1.0


class FrameJumps:
    """A reply frame's jump-forward oracle under one tokenizer (:data:`infra.engines.base.JumpOracle`): the tokens
    that must follow what the model has written after the frame's forced opening.

    The forced text (a :attr:`ReplyFrame.jumps` run or the rest of a :attr:`ReplyFrame.choices` value) becomes tokens
    the way the whole reply tokenizes: the opening, the written text and the forced text are encoded together, and
    nothing is forced unless that encoding starts with exactly the opening's and the model's tokens. Its last token
    is left to the model when some longer token starts with it (``' "'`` may be the start of ``' "#'``), unless the
    run completes the stop string (nothing follows it).
    """

    def __init__(self, tokenizer: Any, head_ids: Sequence[int], head_text: str, stop: str,
                 jumps: Sequence[tuple[str, str]], choices: Sequence[tuple[str, Sequence[str]]]) -> None:
        self.tokenizer, self.head_ids, self.head_text, self.stop = tokenizer, list(head_ids), head_text, stop
        self.jumps = [(re.compile(f"(?:{pattern})\\Z"), text) for pattern, text in jumps]
        self.choices = [(re.compile(f"(?:{pattern})\\Z"), tuple(values)) for pattern, values in choices]
        self.extendable = _extendable_tokens(tokenizer)

    def __call__(self, output_ids: list[int]) -> list[int]:
        text = self.tokenizer.decode(output_ids, skip_special_tokens=False)
        then = self.forced_text(text)
        if not then:
            return []
        head = [*self.head_ids, *output_ids]
        full = [int(i) for i in self.tokenizer(self.head_text + text + then, add_special_tokens=False)["input_ids"]]
        if full[:len(head)] != head:  # the model's tokens are not how its text tokenizes: no jump
            return []
        forced = full[len(head):]
        if forced and (self.extendable is None or forced[-1] in self.extendable) and self.stop not in text + then:
            forced = forced[:-1]
        return forced

    def forced_text(self, text: str) -> str:
        """The text that must follow ``text`` (what the model wrote after the opening), or ``""``."""
        for pattern, then in self.jumps:
            if pattern.search(text):
                return then
        for pattern, values in self.choices:
            match = pattern.search(text)
            if match:
                partial = match.group(1)
                fits = [v for v in values if v.startswith(partial)]
                if len(fits) == 1 and len(fits[0]) > len(partial):
                    return fits[0][len(partial):]
        return ""


def _extendable_tokens(tokenizer: Any) -> frozenset[int] | None:
    """Ids of the tokens whose string is the start of a longer token's (sorted, each one's longer extensions follow
    it directly); None (take every token as one) for a tokenizer that does not list its vocabulary."""
    if not hasattr(tokenizer, "convert_ids_to_tokens") or not hasattr(tokenizer, "__len__"):
        return None
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    strings = sorted({str(t) for t in vocab if t is not None})
    starts = {a for a, b in itertools.pairwise(strings) if b.startswith(a)}
    return frozenset(i for i, t in enumerate(vocab) if t is not None and str(t) in starts)


def frame_tokens(tokenizer: Any, frame: ReplyFrame) -> FrameTokens:
    """The longest prefix of ``frame.start``'s tokens that is also the prefix of the tokens of ``start + probe``
    for every probe (so the prompt ends on a token boundary of the reply the model was trained on); its text is
    ``start`` when all of it is kept, else the decoded kept tokens (none kept when they do not decode to a prefix
    of ``start``)."""
    def encode(text: str) -> list[int]:
        return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]

    ids = encode(frame.start)
    keep = len(ids)
    for probe in frame.probes:
        full = encode(frame.start + probe)
        keep = min(keep, next((k for k, (a, b) in enumerate(zip(ids, full, strict=False)) if a != b),
                              min(len(ids), len(full))))
    kept = ids[:keep]
    text = frame.start if keep == len(ids) else tokenizer.decode(kept, skip_special_tokens=False)
    if not frame.start.startswith(text):
        kept, text = [], ""
    jump, ratio = None, 1.0
    if kept and (frame.jumps or frame.choices) and callable(getattr(tokenizer, "decode", None)):
        jump = FrameJumps(tokenizer, kept, text, frame.stop, frame.jumps, frame.choices)
        ratios = [_jumped(jump, encode(frame.start + probe)[len(kept):], frame.stop, tokenizer)
                  for probe in frame.probes]
        if not ratios or None in ratios:
            log.warning("the reply frame's jumps do not hold on its probes' tokens under this tokenizer: off")
            jump = None
        else:
            ratio = min(r for r in ratios if r is not None)
    return FrameTokens(ids=kept, text=text, stop=frame.stop, end=frame.end, end_ids=encode(frame.end), jump=jump,
                       tokens_per_step=ratio)


def _jumped(jump: FrameJumps, reply: list[int], stop: str, tokenizer: Any) -> float | None:
    """Decode ``reply`` (a probe's tokens after the opening) with ``jump``, the model choosing each token the oracle
    does not force: its tokens per chosen token up to the stop string, or None where a forced run differs from the
    reply's own tokens."""
    end = next((k for k in range(1, len(reply) + 1) if stop in tokenizer.decode(reply[:k])), len(reply))
    i = chosen = 0
    while i < end:
        i, chosen = i + 1, chosen + 1
        forced = jump(reply[:i])
        if reply[i:i + len(forced)] != forced:
            return None
        i += len(forced)
    return end / max(chosen, 1)


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
    listing: Callable[[], list[dict[str, Any]]] | None = None
    """What a frontend can browse of the app besides its catalog (livestream: the streams with what is on screen
    when); served read-only by the REST API. None = nothing."""
    prompt_tools: bool = True
    """Render the tools' JSON schemas in every prompt (OpenAI tools format). False = the compact protocol: the
    model was trained to call the tools, the prompt carries the system prompt alone (the tools stay callable)."""
    first_answer: Callable[[TurnContext], Final | None] | None = None
    """An answer the app is sure of without the model (livestream: the reader when it reads both a product and a fact
    of its sheet in the words), served at once before any model call (the turn's ``reason`` is ``"sure"``, not
    degraded); the model answers the turns it leaves (None). None = the model answers every turn. Without a model
    the fallback answers every turn, so this changes nothing there."""
    turn_note: Callable[[TurnContext], str | None] | None = None
    """What the request tells the model beside the user's words (livestream: the product on screen and the facts its
    sheet has), kept as the user message's ``"note"`` and shown to the model after the words (:func:`for_model`);
    the fallback, the session's text and the reward read the words alone. None = no note."""
    reply_frame: ReplyFrame | None = None
    """The text every model reply opens and closes with, when the protocol is one call of one tool (livestream's
    ``answer``): forced into the prompt and appended instead of generated (:class:`ReplyFrame`). None = the model
    writes its whole reply. An app served under another protocol must clear it."""

    def prompt_schemas(self) -> list[dict[str, Any]]:
        """The tool schemas every prompt lists ([] under the compact protocol)."""
        return self.tools.schemas() if self.prompt_tools else []


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
    salvage_calls: bool = True
    """Run what a broken tool call still says (:func:`harness.protocol.salvage_call`; still counted as a parse
    error). RL rollouts turn it off: a policy must not be rewarded for broken calls."""


def for_model(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the model reads them: a user message's ``"note"`` (:attr:`AppSpec.turn_note`) on a line
    after its words, in brackets. Every renderer of prompts and SFT examples goes through this, so what a model
    is trained on and what it is served are the same text."""
    return [{**{k: v for k, v in m.items() if k != "note"}, "content": f"{m.get('content') or ''}\n[{m['note']}]"}
            if m.get("note") else m for m in messages]


def render_ids(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    """Prompt token ids: the chat template with tools and the assistant generation prompt."""
    text = tokenizer.apply_chat_template(for_model(messages), tools=tools or None, add_generation_prompt=True,
                                         tokenize=False)
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
    """Runs turns of one app's agent. Safe to share between threads if the engine front is.

    :meth:`run_turn` drives a whole turn against the engine; :meth:`begin` hands out the same turn as a
    step machine (:class:`TurnRun`) for callers that batch many turns' generations themselves (RL rollout).
    """

    def __init__(self, app: AppSpec, model: ModelAccess | None, grounder: Grounder | None = None,
                 config: LoopConfig | None = None) -> None:
        self.app, self.model = app, model
        self.grounder = grounder or Grounder(app.catalog, model.sid.sid_map if model and model.sid else None,
                                             app.item_check, require_stock=app.require_stock)
        self.config = config or LoopConfig()
        self._frame: FrameTokens | None = None

    def frame(self) -> FrameTokens | None:
        """The app's reply frame under the model's tokenizer (None without a frame or a model, or when no token of it
        can be forced)."""
        if self.app.reply_frame is None or self.model is None:
            return None
        if self._frame is None:  # computed once; a race computes the same value twice
            self._frame = frame_tokens(self.model.tokenizer, self.app.reply_frame)
        return self._frame if self._frame.ids else None

    def begin(self, session: SessionState, user_text: str | None, *, budget: Budget | None = None,
              constraints: dict[str, Any] | None = None) -> TurnRun:
        """Start a turn: add ``user_text`` (None = the user's message is already last)."""
        return TurnRun(self, session, user_text, budget or Budget(self.app.default_budget_ms,
                                                                 max_steps=self.app.max_steps), constraints)

    def answers_first(self, session: SessionState, user_text: str | None,
                      constraints: dict[str, Any] | None = None) -> bool:
        """Whether the app's own first answer (:attr:`AppSpec.first_answer`) answers this turn without the model
        (tried on a copy of the session: nothing is changed). Serving asks it before refusing a turn for load."""
        if self.model is None or self.app.first_answer is None:
            return False
        probe = self.begin(session.model_copy(deep=True), user_text, budget=Budget(self.app.default_budget_ms),
                           constraints=constraints)
        return probe.first_answer() is not None

    def run_turn(self, session: SessionState, user_text: str | None, *, budget: Budget | None = None,
                 constraints: dict[str, Any] | None = None) -> TurnResult:
        """Add ``user_text`` and run until a final answer (or the fallback's), one engine call per step."""
        turn = self.begin(session, user_text, budget=budget, constraints=constraints)
        while (request := turn.request()) is not None:
            assert self.model is not None
            if turn.apply(self.model.engine.generate([request])[0][0]):
                break
        return turn.finish()

    def fallback(self, ctx: TurnContext, reason: str) -> Final:
        """The app's degraded answer, with every named item grounded (failing ones are dropped)."""
        final = self.app.fallback(ctx, reason)
        ok, _ = self.grounder.check(final.named_items(), ctx.constraints)
        keep = set(ok)
        final.item_ids = [i for i in final.item_ids if i in keep]
        final.bundles = [[i for i in b if i in keep] for b in final.bundles]
        return final

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
        reply = " ".join(_MARKUP.sub(" ", _SID_SPAN.sub(" ", text)).split())
        if _BROKEN_CALL.search(reply):  # a broken call is no answer: the fallback answers instead
            return None
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
        salvaged = [salvage_call(p, self.app.tools) for p in parsed.problems] if self.config.salvage_calls else []
        for call in [*parsed.calls, *(c for c in salvaged if c is not None)]:
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


class TurnRun:
    """One turn as a step machine — the one agent step that serving, eval and RL rollout all run.

    ``request()`` gives the next generation (None when the turn must stop: no model, the step cap, the
    deadline, a prompt that cannot fit); ``apply(completion)`` parses it, runs its tool calls, grounds
    what it names and says whether the turn is over; ``finish()`` closes the turn — with the app's
    fallback, ``degraded`` and its reason, when no grounded final answer came (an empty reply, the step
    cap, the budget, an over-long prompt) — and updates the session.

    Prompts are **token in, token out**: the next prompt is the previous one plus the tokens the model
    sampled plus the chat template's rendering of what came back (:func:`context_delta`), carried across
    turns in the session (:class:`~harness.session.SessionState` ``context``), so the model always sees
    exactly what it wrote and an RL trajectory is exactly what serving would have fed the model. When
    that context outgrows ``max_prompt_tokens`` (or the session was trimmed), the prompt is rendered
    afresh by :func:`fit_prompt`, dropping the oldest messages after the first user message.
    """

    def __init__(self, loop: AgentLoop, session: SessionState, user_text: str | None, budget: Budget,
                 constraints: dict[str, Any] | None) -> None:
        self.loop, self.session, self.budget = loop, session, budget
        if user_text is not None:
            session.messages.append({"role": "user", "content": user_text})
        merged = {**session.constraints, **(constraints or {})}
        self.ctx = TurnContext(app=loop.app, session=session, constraints=merged, budget=budget, model=loop.model)
        add_note(self.ctx)  # the user's message of this turn: given here, or already last (an OpenAI-style chat)
        self.result = TurnResult(final=Final(reply=""))
        self.final: Final | None = None
        self.over = False
        self._start = len(session.messages)
        self._prompt: list[int] | None = None
        self._framed: FrameTokens | None = None  # the reply frame of the pending request, if it has one

    def request(self) -> GenerationRequest | None:
        """The next model call of this turn, or None when the turn must stop (``result.reason`` says why)."""
        if self.over:
            return None
        loop, result = self.loop, self.result
        if loop.model is None:
            return self._stop("no_model")
        final = self.first_answer()
        if final is not None:
            self.session.messages.append({"role": "assistant", "content": final.reply})
            self.final, self.over, result.reason = final, True, SURE
            return None
        if result.steps >= self.budget.max_steps:
            return self._stop("step_limit")
        ids = self._prompt_ids()
        if ids is None:
            return self._stop("prompt_too_long")
        if self.budget.expired():
            return self._stop("budget")
        cfg, budget = loop.config, self.budget
        frame = loop.frame()
        # greedy decoding with a frame that has fixed runs inside the reply: they are not decoded step by step, so
        # the steps that fit in the budget carry more tokens
        jump = frame.jump if frame is not None and cfg.temperature == 0 else None
        cap = self._token_cap()
        if jump is not None and frame is not None:
            cap = min(cfg.max_new_tokens, int(cap * frame.tokens_per_step))
        if cap < cfg.min_new_tokens:
            return self._stop("budget")
        seed = None if cfg.seed is None else call_seed(cfg.seed, self.session.turns, result.steps)
        stop: tuple[str, ...] = ()
        if frame is not None:  # the reply's fixed opening goes into the prompt; the model stops at its close
            ids, stop = [*ids, *frame.ids], (frame.stop,)
        params = SamplingParams(max_new_tokens=cap, temperature=cfg.temperature, top_p=cfg.top_p, seed=seed,
                                stop=stop)
        self._prompt = ids
        self._framed = frame
        return GenerationRequest(prompt=ids, params=params, constraint=loop.sid_constraint(self.ctx),
                                 deadline=budget.deadline if budget.hard else None,
                                 cancel=budget.cancel if budget.hard else None, jump=jump)

    def first_answer(self) -> Final | None:
        """The app's own answer before any model call (:attr:`AppSpec.first_answer`, grounded), or None."""
        app = self.loop.app
        if self.result.steps or app.first_answer is None:
            return None
        final = app.first_answer(self.ctx)
        if final is None or self.loop.grounder.check(final.named_items(), self.ctx.constraints)[1]:
            return None
        return final

    def _token_cap(self) -> int:
        """Output tokens that fit before the deadline: from the engine's forecast (queue wait, measured prefill
        and decode cost at the batch size it expects) when it makes one, else from its decode speed."""
        assert self.loop.model is not None
        engine, ceiling = self.loop.model.engine, self.loop.config.max_new_tokens
        wait_ms, cost = forecast(engine)
        if cost is not None:
            return self.budget.tokens_for(cost, wait_ms, ceiling)
        return self.budget.token_cap(engine.tokens_per_second, ceiling)

    def apply(self, completion: Completion) -> bool:
        """Apply the model's completion to the request :meth:`request` gave; True when the turn is over."""
        if self._prompt is None:
            raise RuntimeError("apply() without a pending request()")
        loop, ctx, result = self.loop, self.ctx, self.result
        prompt, self._prompt = self._prompt, None
        result.model_calls.append(ModelCall(prompt, completion))
        result.output_tokens += len(completion.token_ids)
        result.steps += 1
        if completion.finish_reason == "abort":  # the engine stopped it: out of time, or the server cancelled
            self._stop("budget")
            return True
        frame, self._framed = self._framed, None
        text, closing = completion.text, []
        if frame is not None and text.strip() and not text.startswith(frame.text):  # the reply as the model would
            # have written it whole (nothing written stays an empty reply; an engine that wrote the whole reply
            # anyway, e.g. a scripted one, is read as it is)
            closed = completion.finish_reason == "stop"
            text = frame.text + text + (frame.stop + frame.end if closed else "")
            closing = frame.end_ids if closed else []
        parsed = parse_reply(text)
        if not parsed.calls and not parsed.problems:
            final = loop.text_final(ctx, parsed.content, result)
            if final is None:  # nothing a user can read: the fallback answers instead
                self._stop("empty_reply")
                return True
            self._remember(prompt, completion, {"role": "assistant", "content": parsed.content}, closing)
            self.final, self.over = final, True
            return True
        self._remember(prompt, completion, assistant_message(parsed.content, parsed.calls), closing)
        final = loop.execute(ctx, parsed, result)
        if final is not None:
            self.final, self.over = final, True
        return self.over

    def finish(self) -> TurnResult:
        """Close the turn: the final answer (or the fallback's, degraded), session bookkeeping, the trace."""
        session, result = self.session, self.result
        self.over = True
        final = self.final
        if final is None and self.budget.cancel.is_set():  # the caller cut the turn and answered it already
            result.degraded, result.reason = True, "timeout"
            final = Final(reply="")
        elif final is None:
            reason = result.reason or "step_limit"
            final = self.loop.fallback(self.ctx, reason)
            result.degraded, result.reason = True, reason
            session.messages.append({"role": "assistant", "content": final.reply})
        result.final = final
        session.turns += 1
        session.shown_items.extend(i for i in final.named_items() if i not in session.shown_items)
        result.trace = session.messages[self._start:]
        result.latency_ms = self.budget.elapsed_ms()
        return result

    def _stop(self, reason: str) -> GenerationRequest | None:
        """End the turn without another model call (``finish`` then answers from the fallback): always None."""
        self.result.reason, self.over = reason, True
        return None

    def _remember(self, prompt: list[int], completion: Completion, message: dict[str, Any],
                  closing: Sequence[int] = ()) -> None:
        """Append the model's message and keep the exact token context (prompt + sampled tokens + the reply frame's
        ``closing`` tokens, closed by eos when the model did not write one) for the next prompt."""
        messages = self.session.messages
        messages.append(message)
        ids = [*prompt, *completion.token_ids, *closing]
        eos = getattr(self.loop.model.tokenizer, "eos_token_id", None) if self.loop.model else None
        if completion.finish_reason != "eos" and eos is not None:
            ids.append(int(eos))
        self.session.context = TokenContext(ids=ids, upto=len(messages) - 1,
                                            digest=messages_digest(messages))

    def _prompt_ids(self) -> list[int] | None:
        """This step's prompt: the session's token context extended by what came back since, when it is
        still the session's own and fits; else the chat rendered afresh (trimmed to fit, or None)."""
        assert self.loop.model is not None
        app, tok, cfg = self.loop.app, self.loop.model.tokenizer, self.loop.config
        tools = app.prompt_schemas()
        messages = self.session.messages
        cached = self.session.context
        if cached is not None and cached.upto < len(messages) - 1 \
                and cached.digest == messages_digest(messages[:cached.upto + 1]):
            chat = [{"role": "system", "content": app.system_prompt}, *messages]
            try:
                delta = context_delta(tok, chat, cached.upto + 1, tools)
            except ValueError:  # a template that does not render append-only: render afresh
                delta = None
            if delta is not None:
                ids = [*cached.ids, *(int(i) for i in tok(delta, add_special_tokens=False)["input_ids"])]
                if len(ids) <= cfg.max_prompt_tokens:
                    return ids
        return fit_prompt(tok, app.system_prompt, messages, tools, cfg.max_prompt_tokens)


def add_note(ctx: TurnContext) -> None:
    """Give the session's last message, when it is the user's and has no note yet, the app's note for this turn."""
    messages = ctx.session.messages
    if ctx.app.turn_note is None or not messages or messages[-1].get("role") != "user" or messages[-1].get("note"):
        return
    note = ctx.app.turn_note(ctx)
    if note:
        messages[-1]["note"] = note


def call_seed(seed: int, *parts: Any) -> int:
    """A stable 31-bit seed from a base seed and any labels: one model call's (turn, step), an RL episode's
    (task, round, sample)."""
    key = ":".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "little") & 0x7FFFFFFF


def messages_digest(messages: Sequence[dict[str, Any]]) -> str:
    """A digest of a message list (to tell whether a token context still belongs to the session's chat)."""
    return hashlib.blake2b(json.dumps(messages, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()


def context_delta(tokenizer: Any, messages: list[dict[str, Any]], n_before: int, tools: list[dict[str, Any]]) -> str:
    """The template text after the assistant message ``messages[n_before]``'s closing eos, up to and including
    the next generation prompt: what the next prompt adds beyond the model's own tokens.

    ``messages[:n_before]`` is what the model was prompted with, ``messages[n_before]`` its message as the
    harness recorded it, the rest what came back (tool results, the user's next message). The completion
    ends in its own eos; the template's text from there on is appended as context.
    """
    eos = getattr(tokenizer, "eos_token", None) or "<|im_end|>"
    messages = for_model(messages)
    head = tokenizer.apply_chat_template(messages[:n_before + 1], tools=tools or None, add_generation_prompt=False,
                                         tokenize=False)
    full = tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=False)
    cut = head.rfind(eos)
    if cut < 0 or not full.startswith(head[:cut + len(eos)]):
        raise ValueError("the chat template does not render the conversation append-only: cannot extend the "
                         "prompt token for token")
    return str(full[cut + len(eos):])


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
