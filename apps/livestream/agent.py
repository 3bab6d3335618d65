"""The livestream app's agent: fact-sheet tools, prompt, model-free fallback, reward and simulated viewer.

A viewer types a question while watching a stream; the request carries ``constraints`` =
``{"stream_id", "ts_offset_s"}`` (seconds into the stream) and optionally ``"item_id"`` (the product
the overlay knows the viewer means). The model reads the product's fact sheet with
``product_facts`` and answers with ``respond(answer, cited_facts, item_ids)``; every cited fact is a
fact id ``"<item_id>.<name>"`` as in :mod:`apps.livestream.world`. The default budget is sub-second
(LiveThinking), so the :func:`fallback` answers straight from the fact sheet by keyword when the
model runs out of time.

    .venv/bin/python -m pytest tests/apps/livestream/test_agent.py -q
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from apps.livestream.world import (
    ALLERGENS,
    BEAUTY_INGREDIENTS,
    BOOL_A,
    CLOTHING_SIZES,
    COMPARISONS,
    DRINK_INGREDIENTS,
    EU_SHOE_SIZES,
    HAIR_TYPES,
    MEMBER_A,
    ORDINALS,
    PALETTE,
    PRICE_A,
    RING_SIZES,
    SAVOURY_INGREDIENTS,
    SHADES,
    SKIN_TYPES,
    SPECIAL_FACTS,
    STOCK_A,
    STOCK_SOLD_OUT_A,
    STREAMS_FILE,
    SWEET_INGREDIENTS,
    THRESHOLDS,
    VALUE_A,
    Stream,
    render_fact,
)
from harness.agent import AppSpec, Final, TurnContext
from harness.catalog import AttributeValue, Catalog, Item
from harness.protocol import Tool, ToolError, ToolRegistry
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


def _streams(ctx: TurnContext) -> dict[str, Stream]:
    res = ctx.resources
    return res.streams if isinstance(res, LivestreamResources) else {}


def _stream(ctx: TurnContext, stream_id: str | None) -> Stream | None:
    """The stream named by the call or the request; ToolError for an unknown id."""
    sid = stream_id or ctx.constraints.get("stream_id")
    if not sid:
        return None
    stream = _streams(ctx).get(str(sid))
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


TOOLS: tuple[Tool[Any, TurnContext], ...] = (
    Tool("product_facts", "Read a product's fact sheet: the product on screen, or item_id.", ProductFactsArgs,
         product_facts),
    Tool("respond", "Send the answer to the viewer, citing the facts it uses.", RespondArgs, respond),
)


# ------------------------------------------------------------------------------------------------ fallback
_KEY_RULES: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = tuple(
    (re.compile(pattern), keys) for pattern, keys in (
        (r"restock|recycl|gift|what year|came out|in stores|fair trade|free sample|sold today|black friday|"
         r"bundle|design", ()),
        (r"discount|how much off|more off|sale on\b|how big is the sale", ("discount_percent",)),
        (r"heav|weigh|lighter", ("weight_g",)),
        (r"\bmah\b|how big is the battery", ("capacity_mah",)),
        (r"\blit(?:er|re)s?\b|\bhold\b", ("capacity_l",)),
        (r"capacity", ("capacity_mah", "capacity_l")),
        (r"\bml\b|bottle|how much product|more product|how big|bigger", ("volume_ml", "capacity_l")),
        (r"stock|\bleft\b|sold out", ("stock",)),
        (r"price|how much|\bcost|cheap|deal|on sale|\$", ("price",)),
        (r"ship|deliver|arriv|sooner|faster|\d+ days", ("shipping_days",)),
        (r"return", ("returns_days",)),
        (r"brand|who makes", ("brand",)),
        (r"made of|material", ("material",)),
        (r"\bmade\b|country|come from|origin", ("origin_country",)),
        (r"dishwasher", ("dishwasher_safe",)),
        (r"wash", ("machine_washable",)),
        (r"waterproof|shower", ("waterproof",)),
        (r"induction", ("induction_compatible",)),
        (r"gluten|\bgf\b", ("gluten_free",)),
        (r"vegan", ("vegan",)),
        (r"cruelty", ("cruelty_free",)),
        (r"fragrance|unscented", ("fragrance_free",)),
        (r"hypoallergenic|sensitive skin", ("hypoallergenic", "suitable_for")),
        (r"batteries", ("batteries_required",)),
        (r"burn", ("burn_hours",)),
        (r"battery|charge|\bhours?\b", ("battery_hours", "burn_hours")),
        (r"warrant", ("warranty_months",)),
        (r"stone|\bgem", ("gemstone",)),
        (r"allerg|contain", ("allergens", "ingredients")),
        (r"ingredient|what'?s in\b|\bin it\b", ("ingredients",)),
        (r"\bcolou?rs?\b|\bshades?\b", ("colours",)),
        (r"\bfit\b|true to size|oversized", ("fit",)),
        (r"bed size|what size is", ("bed_size", "sizes")),
        (r"\bsizes?\b", ("sizes", "bed_size", "volume_ml")),
        (r"connect|bluetooth|wi-?fi|wireless|wired", ("connectivity",)),
        (r"watt|powerful", ("wattage_w",)),
        (r"works? with|compatible|support", ("works_with",)),
        (r"pieces|\bpcs\b", ("pieces",)),
        (r"flavou?r|taste", ("flavour",)),
        (r"calori|kcal", ("calories_per_serving",)),
        (r"shelf life|\bkeep\b|expir", ("best_before_months",)),
        (r"smell|scent", ("scent",)),
        (r"thick", ("thickness_mm",)),
        (r"\bage\b|year old|\d+ ?yo\b", ("min_age_years",)),
        (r"players?\b|\bplay\b", ("players",)),
        (r"tall|height|how high", ("height_cm",)),
        (r"how long is|length", ("length_cm",)),
        (r"suitable|meant for|good for|for everyone|work for|\bok for\b", ("suitable_for",)),
    )
)
"""Question keyword -> the facts it asks about (first rule that matches decides; () = never on a fact sheet)."""

_PROBE_POOLS: dict[str, tuple[str, ...]] = {
    "colours": (*PALETTE, *SHADES, "silver", "cream", "sage green", "terracotta", "blush pink"),
    "sizes": (*CLOTHING_SIZES, *EU_SHOE_SIZES, *RING_SIZES),
    "ingredients": (*BEAUTY_INGREDIENTS, *SWEET_INGREDIENTS, *SAVOURY_INGREDIENTS, *DRINK_INGREDIENTS),
    "allergens": ALLERGENS,
    "works_with": ("Alexa", "Google Home", "Apple HomeKit", "SmartThings", "iPhone", "Android", "Strava",
                   "Apple Health", "Google Fit"),
    "suitable_for": (*SKIN_TYPES, *HAIR_TYPES, "puppies", "adult dogs", "senior dogs", "kittens", "adult cats",
                     "senior cats", "dogs", "cats", "rabbits"),
}
"""Values a viewer may ask about for a list fact ("does it come in pink?"), longest matched first."""

_ORDINAL_REF = re.compile(
    r"\bthe (" + "|".join(ORDINALS) + r") (?:item|one|product)\b|\bitem (\d{1,2})\b|#(\d{1,2})\b"
)
_THIS_REF = re.compile(r"\b(?:this|these|that|those|it)\b|on screen|you'?re holding")
_COMPARE = re.compile(r"\bor\b|\bvs\.?\b|\bthan\b")
_SORRY = "Sorry, I'm not sure — the fact sheet doesn't say."
_OFF_TOPIC = "Sorry, I'm not sure — I can only help with the products on this stream."


def _leaf(item: Item) -> str:
    return item.category_path[-1].lower()


def find_word(word: str, text: str) -> re.Match[str] | None:
    return re.search(r"(?<![\w])" + re.escape(word.lower()) + r"(?![\w])", text)


def _named_refs(text: str, items: list[Item], here: str | None) -> list[tuple[int, int, str]]:
    """``(start, end, item_id)`` of products named '<brand> <leaf>' or '<leaf> from <brand>', or by a leaf
    alone when it is unique on the stream (or, when it is not, the product ``here`` on screen has it)."""
    leaves = [_leaf(i) for i in items]
    refs = []
    for item, leaf in zip(items, leaves, strict=True):
        brand = item.attributes.get("brand")
        b, lf = (re.escape(brand.lower()) if isinstance(brand, str) else "\\b\\B"), re.escape(leaf)
        named = list(re.finditer(rf"(?<!\w)(?:{b}\s+{lf}|{lf}\s+from\s+{b})(?!\w)", text))
        if named:
            refs += [(m.start(), m.end(), item.item_id) for m in named]
        elif leaves.count(leaf) == 1 or item.item_id == here:
            refs += [(m.start(), m.end(), item.item_id) for m in re.finditer(rf"(?<!\w){lf}(?!\w)", text)]
    return refs


def referenced_items(text: str, stream: Stream | None, catalog: Catalog, here: str | None = None
                     ) -> tuple[list[str], str]:
    """Products a question names, in order (ordinals such as 'the 2nd item' / '#3', brand and leaf names),
    and the question with those names blanked out (so 'Golden Hour' is not read as 'hours')."""
    low = text.lower()
    if stream is None:
        return [], low
    refs: list[tuple[int, int, str]] = []
    for m in _ORDINAL_REF.finditer(low):
        n = ORDINALS.index(m.group(1)) + 1 if m.group(1) else int(m.group(2) or m.group(3))
        if 1 <= n <= len(stream.item_ids):
            refs.append((m.start(), m.end(), stream.item_ids[n - 1]))
    refs += _named_refs(low, [catalog[i] for i in stream.item_ids if i in catalog], here)
    kept: list[tuple[int, int, str]] = []
    for start, end, item_id in sorted(refs, key=lambda r: (r[0], r[0] - r[1])):  # longest first at a start
        if all(end <= s or start >= e for s, e, _ in kept):
            kept.append((start, end, item_id))
    rest = low
    for start, end, _ in kept:
        rest = rest[:start] + " " * (end - start) + rest[end:]
    return list(dict.fromkeys(item_id for _, _, item_id in kept)), rest


def _probe(rest: str, original: str, key: str, values: list[str]) -> str | None:
    """The value asked about in a yes/no list question, or None (letter sizes must be upper case)."""
    pool = sorted({*_PROBE_POOLS.get(key, ()), *values}, key=len, reverse=True)
    for word in pool:
        if word.isalpha() and word.isupper() and len(word) <= 3:
            if re.search(rf"(?<![\w]){word}(?![\w])", original):
                return word
        elif find_word(word, rest):
            return word
    return None


def _with_swaps(rest: str) -> str:
    """``rest`` plus every one-swap variant of its words of 5+ letters: viewers swap two letters ('rpice')."""
    variants = [w[:j] + w[j + 1] + w[j] + w[j + 2:] for w in re.findall(r"[a-z]{5,}", rest) for j in range(len(w) - 1)]
    return " ".join([rest, *variants])


def _rule_keys(text: str) -> tuple[str, ...] | None:
    """The facts of the first keyword rule ``text`` matches (typo variants included), or None."""
    spread = _with_swaps(text)
    return next((keys for pattern, keys in _KEY_RULES if pattern.search(spread)), None)


def question_key(rest: str, original: str, item: Item) -> str | None:
    """The fact a question asks about, or None when it asks for something no fact sheet has."""
    has = set(item.attributes) | {"price", "stock"}
    keys = _rule_keys(rest)
    if keys is not None:
        return next((k for k in keys if k in has), None)
    for key in _PROBE_POOLS:
        value = item.attributes.get(key)
        if isinstance(value, list) and _probe(rest, original, key, value):
            return key
    return None


def _asks_anything(rest: str) -> bool:
    return _rule_keys(rest) is not None


def _value(item: Item, key: str) -> AttributeValue | None:
    if key in SPECIAL_FACTS:
        special: AttributeValue | None = getattr(item, key)
        return special
    return item.attributes.get(key)


def _number(text: str) -> int | None:
    m = re.search(r"\d+", text)
    return int(m.group()) if m else None


def answer_fact(item: Item, key: str, rest: str, original: str) -> tuple[str, list[str]]:
    """The answer about ``item``'s fact ``key`` (yes/no for flags, membership and thresholds) and its citations."""
    fid, value = f"{item.item_id}.{key}", _value(item, key)
    if value is None:
        return _SORRY, []
    if key == "price":
        discount = item.attributes.get("discount_percent")
        if discount is None:
            return f"It's {render_fact('price', value)} right now.", [fid]
        text = PRICE_A[1].format(p=render_fact("price", value), d=render_fact("discount_percent", discount))
        return text, [fid, f"{item.item_id}.discount_percent"]
    if key == "stock":
        return (STOCK_A[0].format(n=value) if value else STOCK_SOLD_OUT_A), [fid]
    v = render_fact(key, value)
    probe = _probe(rest, original, key, value) if isinstance(value, list) and key in MEMBER_A else None
    number = _number(rest) if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, bool):
        text = BOOL_A[key][0 if value else 1] if key in BOOL_A else ("Yes." if value else "No.")
    elif isinstance(value, list) and probe is not None:
        text = MEMBER_A[key][0 if probe in value else 1].format(v=v, probe=probe)
    elif isinstance(value, int) and key in THRESHOLDS and number is not None:
        rule = THRESHOLDS[key]
        yes = value <= number if rule.yes_when == "le" else value >= number
        text = rule.answers[0 if yes else 1].format(v=v, n=value)
    elif key in VALUE_A:
        text = VALUE_A[key][0].format(v=v, n=value)
    else:
        text = f"{key.replace('_', ' ').capitalize()}: {v}."
    return text, [fid]


def _short(item: Item) -> str:
    brand = item.attributes.get("brand")
    return f"{brand} {_leaf(item)}" if isinstance(brand, str) else item.title


def answer_comparison(a: Item, b: Item, key: str) -> tuple[str, list[str]] | None:
    """Which of two products wins on a numeric fact (the world's comparison rules), or None if not comparable."""
    rule = COMPARISONS.get(key)
    va, vb = _value(a, key), _value(b, key)
    if rule is None or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (va, vb)):
        return None
    assert isinstance(va, int | float) and isinstance(vb, int | float)
    cited = [f"{a.item_id}.{key}", f"{b.item_id}.{key}"]
    if va == vb:
        return rule.tie.format(v=render_fact(key, va)), cited
    a_wins = (va < vb) == (rule.wins == "lower")
    winner, (vw, vl) = (a, (va, vb)) if a_wins else (b, (vb, va))
    plural = _leaf(winner).endswith("s") and not _leaf(winner).endswith("ss")
    return f"The {_short(winner)} {rule.verb[1 if plural else 0]}: {render_fact(key, vw)} vs {render_fact(key, vl)}.", \
        cited


def _last_user_text(ctx: TurnContext) -> str:
    for message in reversed(ctx.session.messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def _here(ctx: TurnContext, stream: Stream | None) -> str | None:
    """The product the request points at: its ``item_id``, else the one on screen at ``ts_offset_s``."""
    return next((i for i in (ctx.constraints.get("item_id"), _on_screen(ctx, stream))
                 if isinstance(i, str) and i in ctx.catalog), None)


def _products(ctx: TurnContext, here: str | None, refs: list[str], rest: str) -> list[Item]:
    """The products a question is about: named ones, else ``here``; for a comparison that names one product
    and says 'this one', ``here`` comes first."""
    ids = list(refs)
    if not ids and here is not None:
        ids = [here]
    elif len(ids) == 1 and here is not None and here != ids[0] and _COMPARE.search(rest) and _THIS_REF.search(rest):
        ids = [here, *ids]
    return [ctx.catalog[i] for i in ids if i in ctx.catalog]


def fallback(ctx: TurnContext, reason: str) -> Final:
    """Answer without the model: find the product (named, ordinal, request or on screen) and the fact the
    question asks about by keyword; say 'not sure' when the fact sheet does not say or the question is off
    topic. ``reason`` (budget, step_limit, no_model) does not change the answer."""
    question = _last_user_text(ctx)
    try:
        stream = _stream(ctx, None)
    except ToolError:
        stream = None
    here = _here(ctx, stream)
    refs, rest = referenced_items(question, stream, ctx.catalog, here)
    products = _products(ctx, here, refs, rest)
    if not products:
        reply = "Sorry, I'm not sure which product you mean — could you name it?" if _asks_anything(rest) \
            else _OFF_TOPIC
        return Final(reply=reply, data={"cited_facts": []})
    key = question_key(rest, question, products[0])
    if key is None:
        return Final(reply=_SORRY if _asks_anything(rest) else _OFF_TOPIC, data={"cited_facts": []})
    compared = answer_comparison(products[0], products[1], key) if len(products) > 1 else None
    text, cited = compared or answer_fact(products[0], key, rest, question)
    return Final(reply=text, item_ids=list(dict.fromkeys(f.rpartition(".")[0] for f in cited)),
                 data={"cited_facts": cited})


# ------------------------------------------------------------------------------------------------ app
def livestream_app(world: Path | str | None = None, *, catalog: Catalog | None = None,
                   streams: Iterable[Stream] | None = None, budget_ms: float = DEFAULT_BUDGET_MS,
                   max_steps: int = 3) -> AppSpec:
    """The livestream agent over a world directory (``catalog.jsonl`` + ``streams.jsonl``) or a catalog and
    streams given directly (these win over the directory's files)."""
    if world is not None:
        root = Path(world)
        catalog = catalog if catalog is not None else Catalog.load(root / CATALOG_FILE)[0]
        if streams is None and (root / STREAMS_FILE).exists():
            streams = read_records(root / STREAMS_FILE, Stream)[0]
    if catalog is None:
        raise ValueError("livestream_app needs a world directory or a catalog")
    by_id = {s.stream_id: s for s in streams or ()}
    return AppSpec(
        name="livestream", system_prompt=SYSTEM_PROMPT, tools=ToolRegistry(TOOLS), catalog=catalog,
        fallback=fallback, resources=LivestreamResources(by_id),
        listing=functools.cache(lambda: stream_listing(by_id, catalog)),  # streams never change while served
        default_budget_ms=budget_ms, max_steps=max_steps, require_stock=False,
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
