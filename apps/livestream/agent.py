"""The livestream app's agent: fact-sheet tools, prompt, model-free fallback, reward and simulated viewer.

A viewer types a question while watching a stream; the request carries ``constraints`` =
``{"stream_id", "ts_offset_s"}`` (seconds into the stream) and optionally ``"item_id"`` (the product
the overlay knows the viewer means). Under the served compact protocol (:data:`ANSWER_PROMPT`, no tool
schemas in the prompt) the model writes one call, ``answer(item, fact, versus)``: which product (as the
viewer referred to it: "this", "before", "#3", "Voltix earbuds") and which fact; the reply is rendered from
the fact sheet, so it states and cites only facts that exist. ``product_facts`` and ``respond(answer,
cited_facts, item_ids)`` stay callable for a model that writes its own answer (every cited fact is a fact id
``"<item_id>.<name>"`` as in :mod:`apps.livestream.world`). The default budget is sub-second
(LiveThinking), so the :func:`fallback` (the reader) answers straight from the fact sheet when the model runs
out of time.

    .venv/bin/python -m pytest tests/apps/livestream/test_agent.py -q
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from apps.livestream.reader import (
    OFF_TOPIC_REPLY,
    READER,
    SORRY,
    WHICH_ONE,
    fallback,
    streams_of,
    sure_answer,
    warm_up,
)
from apps.livestream.world import (
    SPECIAL_FACTS,
    STREAMS_FILE,
    Stream,
    render_fact,
)
from harness.agent import AppSpec, Final, ReplyFrame, TurnContext
from harness.catalog import AttributeValue, Catalog, Item
from harness.protocol import Tool, ToolError, ToolRegistry, render_call
from infra.layout import CATALOG_FILE
from infra.recordio import read_records

DEFAULT_BUDGET_MS = 800.0
"""LiveThinking's sub-second answer budget."""
MAX_ANSWER_WORDS = 30
"""Answers longer than this lose brevity reward (see :func:`reward`)."""

SYSTEM_PROMPT = f"""You are the shopping assistant of a livestream. Viewers type short questions about the \
products on show.
1. Call product_facts to read the fact sheet of the product the viewer means. With no arguments it is the product \
on screen now; pass item_id for another product. The result lists the stream's products in show order, so you can \
resolve "the second item" or "the Voltix earbuds".
2. Answer from the fact sheet only, in one short sentence (at most {MAX_ANSWER_WORDS} words), writing fact values \
as the fact sheet writes them.
3. Call respond(answer, cited_facts, item_ids). Cite every fact you used as "<item_id>.<fact name>", e.g. \
"lv-000012.price".
If the fact sheet does not say, answer that you are not sure. If the question is not about the products, say you \
are not sure and can only help with the products on this stream."""
"""The prompt of the tool protocol (schemas listed; the model calls product_facts, then respond with its answer):
what a model trained to use the tools itself is served with, ``dataclasses.replace(spec,
system_prompt=SYSTEM_PROMPT, prompt_tools=True, reply_frame=None)``. The app serves the compact protocol's prompt
below."""

ANSWER_PROMPT = (
    "You answer livestream viewers from the products' fact sheets. Answer with one call: answer (item: \"this\" "
    "for the product on screen, \"before\" for the one shown before it, \"#N\" for the N-th shown, else its brand "
    "and noun as the viewer named it; fact: the fact asked, \"unknown\" when no fact sheet says, \"chat\" when "
    "not about the products; versus: the other product of a comparison)."
)
"""The served prompt of the compact protocol (``AppSpec.prompt_tools`` False): the model writes which product
and which fact, :func:`answer` renders the reply from the fact sheet (so it states only facts that exist and
cites them) and the tool schemas (~1,000 tokens) stay out of every prompt."""
_CALL = render_call("answer", {"item": "this", "fact": "price"})
ANSWER_FRAME = ReplyFrame(
    start=_CALL[:_CALL.index('item"')], stop="}}", end=_CALL[_CALL.rindex("}}") + 2:],
    probes=('item": "this", "fact": "price"}}', 'fact": "chat"}}', 'item": "#3", "fact": "shipping_days"}}',
            'item": "Voltix earbuds", "fact": "price", "versus": "before"}}', 'fact": "unknown"}}'),
    jumps=((r'^(?:item|fact)', '": "'), (r'item": "[^"]*",', ' "fact": "'), (r'fact": "[^"]*",', ' "versus": "'),
           (r'(?:fact|versus)": "[^"]*"', "}}")))
"""The compact protocol's reply frame: every reply is ``<tool_call>\\n{"name": "answer", "arguments": {"`` + the
arguments + ``}}`` + ``\\n</tool_call>``; the model writes only the arguments (:class:`harness.agent.ReplyFrame`),
and under greedy decoding not even their keys: after ``item`` or ``fact`` comes ``": "``, after the item's value
``, "fact": "``, after the fact's ``, "versus": "`` or ``}}`` (:attr:`~harness.agent.ReplyFrame.jumps`); the
served app also completes a fact's name once its start names one fact (:func:`livestream_app`)."""
UNKNOWN, CHAT = "unknown", "chat"
"""``answer``'s facts for a question no fact sheet answers and for a message not about the products."""

DONT_KNOW = re.compile(
    r"not sure|don'?t know|do not know|doesn'?t say|does not say|no info|not listed|isn'?t listed|can'?t say|"
    r"cannot say|unsure|not mentioned|can only (?:help|answer)",
    re.IGNORECASE,
)
"""Phrases that say the assistant does not know (the right answer to unanswerable and off-topic questions)."""


# ------------------------------------------------------------------------------------------------ resources
@dataclass(frozen=True)
class LivestreamResources:
    """What the tools need beyond the catalog: the streams by id."""

    streams: dict[str, Stream]
    facts: frozenset[str] = frozenset()
    """Every fact name some product's sheet has (``price``, ``stock`` and the attributes)."""


def _stream(ctx: TurnContext, stream_id: str | None) -> Stream | None:
    """The stream named by the call or the request; ToolError for an unknown id."""
    sid = stream_id or ctx.constraints.get("stream_id")
    if not sid:
        return None
    stream = streams_of(ctx).get(str(sid))
    if stream is None:
        raise ToolError(f"unknown stream_id {sid!r}")
    return stream


def _lineup(stream: Stream, catalog: Catalog) -> list[dict[str, object]]:
    return [{"position": k + 1, "item_id": i, "title": catalog[i].title if i in catalog else i}
            for k, i in enumerate(stream.item_ids)]


def _on_screen(ctx: TurnContext, stream: Stream | None) -> str | None:
    ts = ctx.constraints.get("ts_offset_s")
    if stream is None or not isinstance(ts, int | float):
        return None
    return stream.on_screen(float(ts))


def fact_sheet(item: Item) -> dict[str, str]:
    """Every fact of ``item`` rendered as answers write it (price and stock first)."""
    facts: dict[str, str] = {}
    if item.price is not None:
        facts["price"] = render_fact("price", item.price)
    if item.stock is not None:
        facts["stock"] = render_fact("stock", item.stock)
    facts.update((name, render_fact(name, value)) for name, value in item.attributes.items())
    return facts


def turn_note(ctx: TurnContext) -> str | None:
    """The compact protocol's note to the model (:attr:`harness.agent.AppSpec.turn_note`): the product the request
    points at (its ``item_id``, else the one on screen) as its place in the stream with its brand and noun, and the
    fact names its sheet has, e.g. ``on screen: #1 Northline sneakers; facts: price, stock, brand, colours``. With
    nothing on screen, the facts of the stream's products. A viewer's words only hint at a fact ("how long till it
    gets here"); the note names the facts to choose from, and a fact it does not list is ``unknown``."""
    stream = streams_of(ctx).get(str(ctx.constraints.get("stream_id")))
    if stream is None:
        return None
    catalog = ctx.catalog
    meant = ctx.constraints.get("item_id")
    item_id = meant if isinstance(meant, str) and meant in catalog else _on_screen(ctx, stream)
    if item_id is None or item_id not in catalog:
        names = dict.fromkeys(k for i in stream.item_ids if i in catalog for k in fact_sheet(catalog[i]))
        return f"nothing on screen; facts: {', '.join(names)}" if names else None
    item = catalog[item_id]
    where = f"#{stream.item_ids.index(item_id) + 1} " if item_id in stream.item_ids else ""
    brand = str(item.attributes.get("brand", "")).strip()
    noun = item.category_path[-1].lower() if item.category_path else ""
    name = " ".join(p for p in (brand, noun) if p) or item.title
    return f"on screen: {where}{name}; facts: {', '.join(fact_sheet(item))}"


def fact_value(fact: str, catalog: Catalog) -> AttributeValue | None:
    """The value of fact id ``"<item_id>.<name>"`` (an attribute, ``price`` or ``stock``), or None."""
    item_id, sep, name = fact.rpartition(".")
    item = catalog.get(item_id) if sep else None
    if item is None:
        return None
    if name in item.attributes:
        return item.attributes[name]
    value: AttributeValue | None = getattr(item, name) if name in SPECIAL_FACTS else None
    return value


# ------------------------------------------------------------------------------------------------ tools
class ProductFactsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item_id: str | None = Field(None, description="Product id such as 'lv-000012'; omit for the product on screen.")
    stream_id: str | None = Field(None, description="Stream id; omit for the viewer's stream.")
    keys: list[str] | None = Field(None, description="Only these facts, e.g. ['price', 'colours']; omit for all.")


class RespondArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answer: str = Field(min_length=1, max_length=2000, description="The reply the viewer sees.")
    cited_facts: list[str] = Field(default_factory=list, description="Fact ids used, '<item_id>.<fact name>'.")
    item_ids: list[str] = Field(default_factory=list, description="Products the answer is about (default: cited).")


def _product_for(ctx: TurnContext, item_id: str | None, stream: Stream | None) -> Item:
    """The named product, else the request's product, else the one on screen; ToolError naming the problem."""
    catalog = ctx.catalog
    lineup = f"; products on {stream.stream_id}: {', '.join(stream.item_ids)}" if stream else ""
    if item_id:
        item = catalog.get(item_id)
        if item is None:
            raise ToolError(f"unknown item_id {item_id!r}{lineup}")
        return item
    for candidate in (ctx.constraints.get("item_id"), _on_screen(ctx, stream)):
        if isinstance(candidate, str) and candidate in catalog:
            return catalog[candidate]
    if stream is None:
        raise ToolError("no stream and no product given: pass item_id")
    ts = ctx.constraints.get("ts_offset_s")
    raise ToolError(f"no product is on screen at {ts}s of {stream.stream_id}: pass item_id{lineup}")


def product_facts(args: ProductFactsArgs, ctx: TurnContext) -> dict[str, object]:
    """The fact sheet of one product (all facts or ``keys``), plus the stream's line-up when known."""
    stream = _stream(ctx, args.stream_id)
    item = _product_for(ctx, args.item_id, stream)
    facts = fact_sheet(item)
    out: dict[str, object] = {"item_id": item.item_id, "title": item.title}
    if args.keys:
        out["facts"] = {k: facts[k] for k in args.keys if k in facts}
        missing = [k for k in args.keys if k not in facts]
        if missing:
            out["not_on_fact_sheet"] = missing
    else:
        out["facts"] = facts
    if stream is not None:
        out["stream_products"] = _lineup(stream, ctx.catalog)
    return out


def respond(args: RespondArgs, ctx: TurnContext) -> Final:
    """The answer, after checking that every cited fact and item exists. ``item_ids`` defaults to the
    products of the cited facts; sold-out ones stay (the app grounds without a stock rule: "sold out" is
    a valid livestream answer)."""
    catalog = ctx.catalog
    bad_facts = [f for f in args.cited_facts if fact_value(f, catalog) is None]
    bad_items = [i for i in args.item_ids if i not in catalog]
    if bad_facts or bad_items:
        parts = [f"unknown fact {f!r}" for f in bad_facts] + [f"unknown item_id {i!r}" for i in bad_items]
        raise ToolError("; ".join(parts) + " (cite facts as '<item_id>.<fact name>' from product_facts)")
    cited = list(dict.fromkeys(args.cited_facts))
    about = list(dict.fromkeys(args.item_ids or [f.rpartition(".")[0] for f in cited]))
    return Final(reply=args.answer.strip(), item_ids=about, data={"cited_facts": cited})


class AnswerArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item: str = Field("this", max_length=200, description="'this' (on screen), 'before' (shown before it), '#N' "
                      "(the N-th shown), an item id, or the brand and noun the viewer wrote ('Voltix earbuds').")
    fact: str = Field(min_length=1, max_length=60, description="The fact asked ('price', 'colours', ...), "
                      f"'{UNKNOWN}' (no fact sheet says) or '{CHAT}' (not about the products).")
    versus: str | None = Field(None, max_length=200, description="The other product of a comparison, as item.")


def answer(args: AnswerArgs, ctx: TurnContext) -> Final:
    """The compact protocol's one call: the reply about ``item`` (and ``versus``) on ``fact``, rendered from the
    fact sheet by the reader (:meth:`apps.livestream.reader.Reader.reply`). A product the stream does not have
    or a fact no sheet has is a ToolError naming it (the loop's fallback answers if the model cannot mend it)."""
    fact = args.fact.strip().lower().replace(" ", "_")
    if fact == CHAT:
        return Final(reply=OFF_TOPIC_REPLY, data={"cited_facts": []})
    known: frozenset[str] = getattr(ctx.resources, "facts", frozenset())
    if fact != UNKNOWN and known and fact not in known:
        raise ToolError(f"no fact sheet has {args.fact!r}; facts: {', '.join(sorted(known))}, "
                        f"or '{UNKNOWN}' / '{CHAT}'")
    if fact == UNKNOWN:
        return Final(reply=SORRY, data={"cited_facts": []})
    products = []
    for ref in (args.item, args.versus):
        if ref is None:
            continue
        item_id = READER.resolve(ref, ctx)
        if item_id is None:
            stream = streams_of(ctx).get(str(ctx.constraints.get("stream_id")))
            names = f"; the stream's products: {', '.join(stream.item_ids)}" if stream else ""
            raise ToolError(f"no product of this stream is {ref!r}{names}")
        products.append(ctx.catalog[item_id])
    if not products:
        return Final(reply=WHICH_ONE, data={"cited_facts": []})
    return READER.reply(ctx, products, fact)


TOOLS: tuple[Tool[Any, TurnContext], ...] = (
    Tool("answer", "Answer the viewer about a product's fact (the reply is rendered from its fact sheet).",
         AnswerArgs, answer),
    Tool("product_facts", "Read a product's fact sheet: the product on screen, or item_id.", ProductFactsArgs,
         product_facts),
    Tool("respond", "Send the answer to the viewer, citing the facts it uses.", RespondArgs, respond),
)


# ------------------------------------------------------------------------------------------------ app
def livestream_app(world: Path | str | None = None, *, catalog: Catalog | None = None,
                   streams: Iterable[Stream] | None = None, budget_ms: float = DEFAULT_BUDGET_MS,
                   max_steps: int = 2, reader_first: bool = True) -> AppSpec:
    """The livestream agent over a world directory (``catalog.jsonl`` + ``streams.jsonl``) or a catalog and
    streams given directly (these win over the directory's files). ``reader_first``: the reader answers what it
    is sure of (a product and a fact of its sheet read in the words) before any model call, and the model the
    rest (:func:`apps.livestream.reader.sure_answer`); False: the model answers every question."""
    if world is not None:
        root = Path(world)
        catalog = catalog if catalog is not None else Catalog.load(root / CATALOG_FILE)[0]
        if streams is None and (root / STREAMS_FILE).exists():
            streams = read_records(root / STREAMS_FILE, Stream)[0]
    if catalog is None:
        raise ValueError("livestream_app needs a world directory or a catalog")
    by_id = {s.stream_id: s for s in streams or ()}
    facts = frozenset({"price", "stock", *(k for item in catalog for k in item.attributes)})
    warm_up()
    return AppSpec(
        name="livestream", system_prompt=ANSWER_PROMPT, tools=ToolRegistry(TOOLS), catalog=catalog,
        fallback=fallback, resources=LivestreamResources(by_id, facts), prompt_tools=False,
        listing=functools.cache(lambda: stream_listing(by_id, catalog)),  # streams never change while served
        default_budget_ms=budget_ms, max_steps=max_steps, require_stock=False, turn_note=turn_note,
        first_answer=sure_answer if reader_first else None,
        reply_frame=dataclasses.replace(ANSWER_FRAME, choices=((r'fact": "([^"]+)', (*sorted(facts), UNKNOWN, CHAT)),)),
    )


def stream_listing(streams: dict[str, Stream], catalog: Catalog) -> list[dict[str, Any]]:
    """The streams as a frontend shows them: title, host, length and each product's on-screen window."""
    out = []
    for stream in streams.values():
        products = []
        for item_id, (start, end) in zip(stream.item_ids, stream.windows, strict=True):
            item = catalog.get(item_id)
            products.append({"item_id": item_id, "title": item.title if item else item_id,
                             "price": item.price if item else None, "currency": item.currency if item else "",
                             "start_s": start, "end_s": end})
        out.append({"stream_id": stream.stream_id, "title": stream.title, "host": stream.host,
                    "duration_s": stream.duration_s, "products": products})
    return out
