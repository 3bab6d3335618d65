"""The livestream world: streams with products on show, fact sheets, viewer questions with grounded answers.

``sidekick world livestream --out DIR`` writes into DIR:

- ``catalog.jsonl`` — one ``Item`` per product shown on a stream. ``attributes`` is the product's
  **fact sheet** (brand, origin_country, shipping_days, returns_days, discount_percent and
  category-specific facts such as ingredients, colours, sizes, battery_hours, warranty_months…).
  ``price`` is the price during the stream (``discount_percent`` is off the usual price).
- ``streams.jsonl`` — one :class:`Stream` per livestream: host, title, start time, the products in
  show order and the window (seconds from the start) in which each one is on screen.
- ``tasks.jsonl`` — one ``Task(app="livestream")`` per viewer question, of four kinds:
  ``question`` (answerable from one product's fact sheet), ``comparison`` (two products on the same
  stream), ``unanswerable`` (about a product, but not in its fact sheet: ``answer=""``) and
  ``off_topic`` (not about the products: ``answer=""``). ``facts`` lists the fact ids the answer
  rests on, ``"<item_id>.<attribute>"`` (or ``.price`` / ``.stock``); every fact value is rendered in
  the answer text. ``constraints`` = ``{"stream_id", "item_id" (primary product or None),
  "item_ids" (all products asked about), "ts_offset_s" (seconds from stream start)}``.
  ``meta`` = ``{"template", "reference" (this_one | previous | ordinal | named | brand | leaf | none),
  "session_id"}`` plus ``"probe"`` (the colour, size or number asked about) for yes/no questions and
  ``"other_reference"`` (how a comparison names its second product). A ``this_one``
  question ("does it come in pink??") means the product on screen at ``ts_offset_s``.
- ``logs.jsonl`` — one ``Session(app="livestream")`` per viewer per stream watched: the viewer's
  chat (their questions and some chatter) and view/click/cart/purchase events on products on show.

This world serves LiveThinking-style livestream Q&A (sub-second answers from product fact sheets,
rewarded for correctness, helpfulness and brevity). Everything is a function of the seed.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from apps.livestream.phrasings import PACK_SETS, PhrasingPack, template_id

# The vocabulary lives in apps.livestream.vocab; the `noqa: F401` names are re-exported for
# apps.livestream.agent, which imports them from here.
from apps.livestream.vocab import (
    ADJECTIVES,
    ALLERGEN_OF,
    ALLERGENS,
    ANIMAL_INGREDIENTS,
    BEAUTY_INGREDIENTS,  # noqa: F401
    BOOL_A,
    BOOL_Q,
    BRANDS,
    CHATTER,
    CITIES,
    CLOTHING_SIZES,  # noqa: F401
    COMMON_ATTRS,
    COMPARISONS,
    COUNT_UNITS,
    DRINK_INGREDIENTS,  # noqa: F401
    EMOJI,
    EU_SHOE_SIZES,  # noqa: F401
    GLUTEN_INGREDIENTS,
    HAIR_TYPES,  # noqa: F401
    HOOKS,
    HOSTS,
    KEY_WEIGHT,
    LEAF_ATTRS,
    MEMBER_A,
    MID_ATTRS,
    ORDINALS,  # noqa: F401
    PALETTE,  # noqa: F401
    PRICE_A,
    PRICE_RANGE,
    RING_SIZES,  # noqa: F401
    SAVOURY_INGREDIENTS,  # noqa: F401
    SHADES,  # noqa: F401
    SKIN_TYPES,  # noqa: F401
    STOCK_A,
    STOCK_SOLD_OUT_A,
    SUFFIX_UNITS,
    SWEET_INGREDIENTS,  # noqa: F401
    TAXONOMY,
    THIS_ONE_CMP_REFS,
    THRESHOLDS,
    TOP_ATTRS,
    TOP_KEYS,
    VALUE_A,
    VALUE_Q,
    AttrSpec,
)
from apps.worlds import Progress, finish_world
from data_curation.records import Event, Session, Turn
from harness.catalog import AttributeValue, Catalog, Item
from harness.tasks import Message, Task
from infra.layout import CATALOG_FILE, LOGS_FILE, TASKS_FILE
from infra.recordio import RecordWriter

STREAMS_FILE = "streams.jsonl"
HELDOUT_DIR = "heldout"
"""``<world>/heldout/tasks.jsonl``: questions in wordings no training family uses (never trained on)."""
DEV_DIR = "dev"
"""``<world>/dev/tasks.jsonl``: questions worded by the development families (never trained on; the reader was
improved against them)."""
DEV2_DIR = "dev2"
"""``<world>/dev2/tasks.jsonl``: questions worded by the second development families (a third outside author)."""
DEV3_DIR = "dev3"
"""``<world>/dev3/tasks.jsonl``: questions worded by the third development families (a fourth outside author)."""
DEV4_DIR = "dev4"
"""``<world>/dev4/tasks.jsonl``: questions worded by a fifth outside author's families, written as more training
wordings for a student model (the reader was never tuned on them)."""
DEV5_DIR = "dev5"
"""``<world>/dev5/tasks.jsonl``: questions worded by a seventh outside author's families (2026-12-06), more training
wordings for a student model, heavy on chit-chat and on questions no fact sheet answers (the reader was never tuned
on them)."""
HELDOUT2_DIR = "heldout2"
"""``<world>/heldout2/tasks.jsonl``: questions worded by a sixth outside author's families (2026-12-06), a second
held-out set: never tuned or trained on, scored once per agent."""
_SETS = {"train": ("questions", "q"), "dev": ("dev", "d"), "dev2": ("dev2", "e"), "dev3": ("dev3", "f"),
         "dev4": ("dev4", "g"), "dev5": ("dev5", "j"), "heldout": ("heldout", "h"), "heldout2": ("heldout2", "i")}
_SET_DIRS = {"heldout": HELDOUT_DIR, "dev": DEV_DIR, "dev2": DEV2_DIR, "dev3": DEV3_DIR, "dev4": DEV4_DIR,
             "dev5": DEV5_DIR, "heldout2": HELDOUT2_DIR}
"""Every set but the training questions -> its directory in the world (``<dir>/tasks.jsonl``)."""
assert set(_SETS) == set(PACK_SETS) == {"train", *_SET_DIRS}, "a question set needs packs, a task-id prefix and a dir"


def set_tasks(world: Path | str, which: str) -> Path:
    """The tasks file of question set ``which`` (a key of :data:`apps.livestream.phrasings.PACK_SETS`) in a world:
    ``tasks.jsonl`` for ``train``, ``<dir>/tasks.jsonl`` for the others; ValueError naming the sets otherwise."""
    if which not in _SETS:
        raise ValueError(f"unknown question set {which!r}; expected one of {', '.join(_SETS)}")
    return Path(world) / (TASKS_FILE if which == "train" else f"{_SET_DIRS[which]}/{TASKS_FILE}")
TASK_KINDS = ("question", "comparison", "unanswerable", "off_topic")
SPECIAL_FACTS = ("price", "stock")
"""Fact names that refer to ``Item`` fields rather than to ``Item.attributes``."""
START_TS = 1_735_689_600  # 2025-01-01T00:00:00Z
_WRITE_CHUNK = 256  # records per progress() call


class LivestreamWorldConfig(BaseModel):
    """How many streams, products, viewers and questions the livestream world has."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, ge=0, description="Everything is a function of this seed. Default 0.")
    streams: int = Field(default=50, ge=1, description="Livestreams (one host each). Default 50.")
    products_per_stream_min: int = Field(
        default=6, ge=2, le=12, description="Fewest products shown on one stream (2–12). Default 6."
    )
    products_per_stream_max: int = Field(
        default=10, ge=2, le=12, description="Most products shown on one stream (2–12). Default 10."
    )
    questions: int = Field(default=2000, ge=0, description="Viewer questions = tasks. Default 2000.")
    viewers: int = Field(default=500, ge=1, description="Distinct viewers in the logs. Default 500.")
    unanswerable_fraction: float = Field(
        default=0.1, ge=0, le=1, description="Share of questions about a product but not in its fact sheet."
    )
    heldout_questions: int = Field(
        default=600, ge=0, description="Questions worded only by the held-out phrasing families "
        "(apps/livestream/phrasings/heldout/), written to heldout/tasks.jsonl for evaluation, and as many worded "
        "by each set of development families to dev/, dev2/, dev3/, dev4/ and dev5/tasks.jsonl and by the second "
        "held-out families to heldout2/tasks.jsonl. Default 600.",
    )
    off_topic_fraction: float = Field(
        default=0.1, ge=0, le=1, description="Share of questions not about the products (chit-chat)."
    )
    comparison_fraction: float = Field(
        default=0.15, ge=0, le=1, description="Share of questions comparing two products of the same stream."
    )
    this_one_fraction: float = Field(
        default=0.4, ge=0, le=1,
        description="Share of product questions asked while the product is on screen that say 'this one'/'it'.",
    )
    start_ts: int = Field(default=START_TS, ge=0, description="Unix time (s) of day 0 of the stream schedule.")

    @model_validator(mode="after")
    def _consistent(self) -> LivestreamWorldConfig:
        if self.products_per_stream_min > self.products_per_stream_max:
            raise ValueError("products_per_stream_min must be <= products_per_stream_max")
        total = self.unanswerable_fraction + self.off_topic_fraction + self.comparison_fraction
        if total > 1:
            raise ValueError(
                f"unanswerable_fraction + off_topic_fraction + comparison_fraction = {total:.3f} > 1; lower one"
            )
        return self


class Stream(BaseModel):
    """One livestream: the products in show order and when each one is on screen.

    ``windows[i]`` is ``[start_s, end_s)`` of ``item_ids[i]`` in seconds from ``start_ts``; windows are
    in order, do not overlap, and may leave gaps (intro, host chat) where no product is on screen.
    """

    model_config = ConfigDict(extra="forbid")

    stream_id: str = Field(min_length=1, description="Unique stream id, e.g. 'stream-0003'.")
    host: str = Field(min_length=1, description="Host's display name.")
    title: str = Field(min_length=1, description="Stream title as shown to viewers.")
    start_ts: int = Field(ge=0, description="Unix time (s) the stream starts.")
    duration_s: int = Field(gt=0, description="Length of the stream in seconds.")
    item_ids: list[str] = Field(min_length=1, description="Products in show order.")
    windows: list[tuple[int, int]] = Field(description="[start_s, end_s) on screen, one per item_ids entry.")

    @model_validator(mode="after")
    def _windows_fit(self) -> Stream:
        if len(self.windows) != len(self.item_ids):
            raise ValueError(f"{len(self.item_ids)} item_ids but {len(self.windows)} windows")
        if len(set(self.item_ids)) != len(self.item_ids):
            raise ValueError("item_ids repeat")
        previous_end = 0
        for item_id, (start, end) in zip(self.item_ids, self.windows, strict=True):
            if not previous_end <= start < end <= self.duration_s:
                raise ValueError(f"window of {item_id!r} [{start}, {end}) overlaps or leaves the stream")
            previous_end = end
        return self

    def on_screen(self, ts_offset_s: float) -> str | None:
        """The item on screen ``ts_offset_s`` seconds into the stream, or None between products."""
        for item_id, (start, end) in zip(self.item_ids, self.windows, strict=True):
            if start <= ts_offset_s < end:
                return item_id
        return None

    def shown_by(self, ts_offset_s: float) -> list[str]:
        """Items whose window has started by ``ts_offset_s`` (what a viewer can have seen)."""
        return [i for i, (start, _) in zip(self.item_ids, self.windows, strict=True) if start <= ts_offset_s]


# --------------------------------------------------------------------------------------------------
# Public helpers
# --------------------------------------------------------------------------------------------------


def render_fact(name: str, value: AttributeValue) -> str:
    """A fact as it appears in answers: ``$24.99``, ``3 days``, ``50 ml``, ``black, pink``, ``yes``."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(value) if value else "none"
    if name == "price":
        return f"${value:.2f}"
    if isinstance(value, int) and name in COUNT_UNITS:
        return f"{value} {COUNT_UNITS[name]}{'' if value == 1 else 's'}"
    if name in SUFFIX_UNITS:
        return f"{value}{SUFFIX_UNITS[name]}"
    return str(value)


def answer_facts(task: Task, catalog: Catalog) -> dict[str, AttributeValue]:
    """Resolve ``task.facts`` (``"<item_id>.<name>"``) to their values in ``catalog``.

    ``name`` is an attribute of the item, or ``price`` / ``stock``. Raises ``KeyError`` naming the
    first fact that does not resolve.
    """
    values: dict[str, AttributeValue] = {}
    for fact in task.facts:
        item_id, sep, name = fact.rpartition(".")
        item = catalog.get(item_id) if sep else None
        if item is None:
            raise KeyError(f"fact {fact!r}: no item {item_id!r} in the catalog")
        if name in item.attributes:
            values[fact] = item.attributes[name]
            continue
        special = getattr(item, name) if name in SPECIAL_FACTS else None
        if special is None:
            raise KeyError(f"fact {fact!r}: item {item_id!r} has no {name!r}")
        values[fact] = special
    return values


# --------------------------------------------------------------------------------------------------
# Products and streams
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Product:
    """An item with what the generator needs to talk about it."""

    item: Item
    top: str
    brand: str
    leaf: str  # lower-case leaf noun, e.g. "bluetooth speaker"
    specs: dict[str, AttrSpec]

    @property
    def short(self) -> str:
        return f"{self.brand} {self.leaf}"

    @property
    def plural(self) -> bool:
        """Leaves like "sneakers" or "coffee beans" are plural ("these sneakers are …"); "dress" is not."""
        return self.leaf.endswith("s") and not self.leaf.endswith("ss")

    @property
    def this(self) -> str:
        return "these" if self.plural else "this"

    @property
    def that(self) -> str:
        return "those" if self.plural else "that"


def _draw(rng: random.Random, spec: AttrSpec) -> AttributeValue:
    if spec.kind == "choice":
        return rng.choice(spec.values)
    if spec.kind == "ints":
        return rng.choice(spec.ints)
    if spec.kind == "int":
        return rng.randrange(spec.low, spec.high + 1, spec.step)
    if spec.kind == "bool":
        return rng.random() < spec.p_true
    k = min(rng.randint(spec.k_min, spec.k_max), len(spec.values))
    if spec.kind == "run":
        start = rng.randrange(len(spec.values) - k + 1)
        return list(spec.values[start : start + k])
    chosen = set(rng.sample(range(len(spec.values)), k))
    return [v for i, v in enumerate(spec.values) if i in chosen]  # pool order


def _derive(attrs: dict[str, AttributeValue]) -> None:
    """Make facts that follow from the ingredients agree with them (vegan, gluten, allergens, fragrance)."""
    ingredients = attrs.get("ingredients")
    if not isinstance(ingredients, list):
        return
    if "vegan" in attrs:
        attrs["vegan"] = not any(i in ANIMAL_INGREDIENTS for i in ingredients)
    if "gluten_free" in attrs:
        attrs["gluten_free"] = not any(i in GLUTEN_INGREDIENTS for i in ingredients)
    if "fragrance_free" in attrs:
        attrs["fragrance_free"] = "fragrance" not in ingredients
    if "allergens" in attrs:
        found = {ALLERGEN_OF[i] for i in ingredients if i in ALLERGEN_OF}
        attrs["allergens"] = [a for a in ALLERGENS if a in found]


def _make_product(rng: random.Random, item_id: str, top: str, taken: set[tuple[str, str]]) -> _Product:
    """A product of ``top`` whose (brand, leaf) is not in ``taken`` (so names are unambiguous on a stream)."""
    mid, leaf_name, brand = "", "", ""
    for _ in range(100):
        mid = rng.choice(list(TAXONOMY[top]))
        leaf_name = rng.choice(TAXONOMY[top][mid])
        brand = rng.choice(BRANDS[top])
        if (brand, leaf_name) not in taken:
            break
    taken.add((brand, leaf_name))
    specs = {**COMMON_ATTRS, **TOP_ATTRS[top], **MID_ATTRS.get(mid, {}), **LEAF_ATTRS.get(leaf_name, {})}
    attrs: dict[str, AttributeValue] = {"brand": brand}
    attrs.update((name, _draw(rng, spec)) for name, spec in specs.items())
    _derive(attrs)
    low, high = PRICE_RANGE[mid]
    title = f"{brand} {rng.choice(ADJECTIVES)} {leaf_name}"
    if "volume_ml" in attrs:
        title += f" {attrs['volume_ml']}ml"
    stock = 0 if rng.random() < 0.05 else int(rng.triangular(1, 500, 40))
    item = Item(
        item_id=item_id, title=title, description=f"{title}: {mid.lower()} by {brand}, shown live.",
        category_path=[top, mid, leaf_name], attributes=attrs, price=round(rng.randint(low, high) - 0.01, 2),
        currency="USD", stock=stock, rating=round(rng.uniform(3.2, 5.0), 1),
    )
    return _Product(item=item, top=top, brand=brand, leaf=leaf_name.lower(), specs=specs)


def _make_stream(
    rng: random.Random, index: int, start_ts: int, config: LivestreamWorldConfig, first_item: int
) -> tuple[Stream, list[_Product]]:
    tops = list(TAXONOMY)
    primary = rng.choice(tops)
    secondary = rng.choice(tops) if rng.random() < 0.3 else primary
    n = rng.randint(config.products_per_stream_min, config.products_per_stream_max)
    taken: set[tuple[str, str]] = set()
    products = [
        _make_product(rng, f"lv-{first_item + k:06d}", primary if rng.random() < 0.75 else secondary, taken)
        for k in range(n)
    ]
    t = rng.randint(60, 240)  # intro before the first product
    windows: list[tuple[int, int]] = []
    for _ in products:
        length = rng.randint(180, 600)
        windows.append((t, t + length))
        t += length + rng.randint(10, 60)  # host chat between products
    host = rng.choice(HOSTS)
    stream = Stream(
        stream_id=f"stream-{index:04d}", host=host, title=f"{host}'s {primary} live — {rng.choice(HOOKS)}",
        start_ts=start_ts, duration_s=t + rng.randint(60, 180), item_ids=[p.item.item_id for p in products],
        windows=windows,
    )
    return stream, products


def _build_streams(config: LivestreamWorldConfig) -> tuple[list[Stream], dict[str, _Product]]:
    """Every stream and its products (catalog order = stream order, then show order)."""
    rng = random.Random(f"livestream:{config.seed}:streams")
    streams: list[Stream] = []
    products: dict[str, _Product] = {}
    start = config.start_ts + rng.randint(17, 21) * 3600
    for index in range(config.streams):
        stream, shown = _make_stream(rng, index, start, config, len(products))
        streams.append(stream)
        products.update((p.item.item_id, p) for p in shown)
        start += stream.duration_s + rng.randint(4, 30) * 3600
    return streams, products


# --------------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------------


@dataclass
class _Draft:
    """A question before it gets its task id: text, ground truth and how it was made."""

    kind: str
    text: str
    answer: str
    facts: list[str] = field(default_factory=list)
    item_ids: list[str] = field(default_factory=list)
    template: str = ""
    reference: str = "none"
    other_reference: str | None = None  # a comparison's second product: how the viewer names it
    probe: str | int | None = None
    family: str = "base"


@dataclass(frozen=True)
class _Ref:
    """How the viewer names the product: its text and kind (this_one, previous, ordinal, named, brand, leaf)."""

    product: _Product
    text: str
    kind: str


class _NoWording(Exception):
    """The family has no wording for this question: the caller draws another question."""


def _typo(rng: random.Random, template: str) -> str:
    """Swap two letters in one plain word of a template (never in a ``{slot}``: names stay resolvable)."""
    words = template.split(" ")
    plain = [i for i, w in enumerate(words) if len(w) >= 5 and w.isalpha()]
    if not plain:
        return template
    i = rng.choice(plain)
    w = words[i]
    j = rng.randrange(len(w) - 1)
    words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    return " ".join(words)


def _say(rng: random.Random, template: str, **slots: Any) -> str:
    """Fill a question template the way viewers type: typos, lower case, ??, emoji."""
    if rng.random() < 0.12:
        template = _typo(rng, template)
    text = template.format(**slots)
    if rng.random() < 0.3:
        text = text.lower()
    elif rng.random() < 0.4:
        text = text[:1].upper() + text[1:]
    roll = rng.random()
    if text.endswith("?") and roll < 0.15:
        text += "?" * rng.randint(1, 2)
    elif text.endswith("?") and roll < 0.3:
        text = text[:-1]
    if rng.random() < 0.12:
        text += " " + rng.choice(EMOJI)
    return text


def _pick(rng: random.Random, templates: Sequence[str], ref: _Ref) -> tuple[int, str]:
    """A template and its index; one without ``{ref}`` only for the product on screen."""
    allowed = [(i, t) for i, t in enumerate(templates) if "{ref}" in t or ref.kind == "this_one"]
    if not allowed:
        raise _NoWording
    return rng.choice(allowed)


def _ref_text(rng: random.Random, pack: PhrasingPack, kind: str, product: _Product, stream: Stream) -> str:
    position = stream.item_ids.index(product.item.item_id) + 1
    template = rng.choice(pack.refs[kind])
    return template.format(leaf=product.leaf, this=product.this, that=product.that, brand=product.brand,
                           ord=pack.ordinal(position), n=position)


def _unique_kinds(pack: PhrasingPack, product: _Product, stream: Stream, products: dict[str, _Product]) -> list[str]:
    """Name-based reference kinds the pack has that pick out ``product`` alone on ``stream``."""
    shown = [products[i] for i in stream.item_ids]
    kinds = ["named"]
    if sum(p.brand == product.brand for p in shown) == 1:
        kinds.append("brand")
    if sum(p.leaf == product.leaf for p in shown) == 1:
        kinds.append("leaf")
    return [k for k in kinds if pack.refs.get(k)]


def _named(rng: random.Random, pack: PhrasingPack, product: _Product, stream: Stream,
           products: dict[str, _Product]) -> _Ref:
    """The product by name: brand + noun, or brand or noun alone when that is unique on the stream."""
    kinds = _unique_kinds(pack, product, stream, products)
    if not kinds:
        raise _NoWording
    weights = [3.0 if k == "named" else 1.0 for k in kinds]
    kind = rng.choices(kinds, weights=weights)[0]
    return _Ref(product, _ref_text(rng, pack, kind, product, stream), kind)


def _ordinal(rng: random.Random, pack: PhrasingPack, stream: Stream, product: _Product) -> _Ref:
    if not pack.refs.get("ordinal"):
        raise _NoWording
    return _Ref(product, _ref_text(rng, pack, "ordinal", product, stream), "ordinal")


def _reference(
    rng: random.Random, stream: Stream, ts: int, products: dict[str, _Product], this_one_share: float,
    pack: PhrasingPack,
) -> _Ref:
    """The product a viewer asks about at ``ts`` and how they name it (on-screen products are favoured)."""
    on_screen = stream.on_screen(ts)
    if on_screen is not None and rng.random() < this_one_share and pack.refs.get("this_one"):
        product = products[on_screen]
        return _Ref(product, _ref_text(rng, pack, "this_one", product, stream), "this_one")
    position = stream.item_ids.index(on_screen) if on_screen is not None else -1
    if position >= 1 and rng.random() < 0.15 and pack.refs.get("previous"):
        product = products[stream.item_ids[position - 1]]
        return _Ref(product, _ref_text(rng, pack, "previous", product, stream), "previous")
    if on_screen is not None and rng.random() < 0.4:
        product = products[on_screen]
    else:
        product = products[rng.choice(stream.shown_by(ts))]
    if rng.random() < 0.25 and pack.refs.get("ordinal"):
        return _ordinal(rng, pack, stream, product)
    return _named(rng, pack, product, stream, products)


def _slots(pack: PhrasingPack, key: str) -> list[str]:
    """The question types the pack can ask about fact ``key``."""
    if key in SPECIAL_FACTS:
        return [key] if pack.slot(key) else []
    return [group for group in ("bool", "member", "threshold", "value") if pack.slot(f"{group}.{key}")]


def _pick_key(rng: random.Random, ref: _Ref, pack: PhrasingPack) -> str:
    """A fact to ask about, weighted by how often viewers ask it (never the brand they just named)."""
    names = [k for k in ref.product.item.attributes if k in VALUE_Q or k in BOOL_Q]
    keys = ["price", "stock"] + [k for k in names if not (k == "brand" and ref.kind in ("named", "brand"))]
    keys = [k for k in keys if _slots(pack, k)]
    if not keys:
        raise _NoWording
    return rng.choices(keys, weights=[KEY_WEIGHT.get(k, 2.0) for k in keys])[0]


def _fact(product: _Product, name: str) -> str:
    return f"{product.item.item_id}.{name}"


def _price_or_stock_draft(rng: random.Random, ref: _Ref, key: str, pack: PhrasingPack) -> _Draft:
    item = ref.product.item
    assert item.price is not None and item.stock is not None, "generated items always have price and stock"
    index, template = _pick(rng, pack.slot(key), ref)
    if key == "price":
        discount = render_fact("discount_percent", item.attributes["discount_percent"])
        answer = rng.choice(PRICE_A).format(p=render_fact("price", item.price), d=discount)
        facts = [_fact(ref.product, "price"), _fact(ref.product, "discount_percent")]
    else:
        answer = rng.choice(STOCK_A).format(n=item.stock) if item.stock > 0 else STOCK_SOLD_OUT_A
        facts = [_fact(ref.product, "stock")]
    return _Draft("question", _say(rng, template, ref=ref.text), answer, facts,
                  template=template_id(pack, key, key, index))


def _probe(rng: random.Random, values: list[str], pool: tuple[str, ...]) -> str:
    """Something to ask about: one of ``values`` (55 %) or one from ``pool`` that is not."""
    missing = [p for p in pool if p not in values]
    if values and (rng.random() < 0.55 or not missing):
        return rng.choice(values)
    return rng.choice(missing)


def _attribute_draft(rng: random.Random, ref: _Ref, key: str, pack: PhrasingPack) -> _Draft:
    """A question on one fact: its value, yes/no on a flag, membership in a list, or a threshold."""
    product = ref.product
    value = product.item.attributes[key]
    v = render_fact(key, value)
    probe: str | int | None = None
    slots = _slots(pack, key)
    if isinstance(value, bool):
        if "bool" not in slots:
            raise _NoWording
        index, template = _pick(rng, pack.slot(f"bool.{key}"), ref)
        qtype, answer = "bool", BOOL_A[key][0 if value else 1]
    elif isinstance(value, list) and "member" in slots and (rng.random() < 0.5 or "value" not in slots):
        index, template = _pick(rng, pack.slot(f"member.{key}"), ref)
        probe = _probe(rng, value, product.specs[key].values)
        qtype, answer = "member", MEMBER_A[key][0 if probe in value else 1].format(v=v, probe=probe)
    elif isinstance(value, int) and "threshold" in slots and (rng.random() < 0.4 or "value" not in slots):
        rule = THRESHOLDS[key]
        index, template = _pick(rng, pack.slot(f"threshold.{key}"), ref)
        spread = max(2, value // 3)
        probe = max(1, value + rng.randint(-spread, spread))
        yes = value <= probe if rule.yes_when == "le" else value >= probe
        qtype, answer = "threshold", rule.answers[0 if yes else 1].format(v=v, n=value)
    elif "value" in slots:
        index, template = _pick(rng, pack.slot(f"value.{key}"), ref)
        qtype, answer = "value", rng.choice(VALUE_A[key]).format(v=v, n=value)
    else:
        raise _NoWording
    text = _say(rng, template, ref=ref.text, probe=probe, x=probe)
    return _Draft("question", text, answer, [_fact(product, key)], template=template_id(pack, qtype, key, index),
                  probe=probe)


def _question_draft(rng: random.Random, ref: _Ref, pack: PhrasingPack) -> _Draft:
    key = _pick_key(rng, ref, pack)
    if key in SPECIAL_FACTS:
        draft = _price_or_stock_draft(rng, ref, key, pack)
    else:
        draft = _attribute_draft(rng, ref, key, pack)
    draft.item_ids = [ref.product.item.item_id]
    draft.reference = ref.kind
    return draft


def _compare_value(product: _Product, key: str) -> int | float:
    value = product.item.price if key == "price" else product.item.attributes[key]
    assert isinstance(value, int | float) and not isinstance(value, bool), f"{key} is not a number"
    return value


def _comparison_draft(
    rng: random.Random, stream: Stream, ts: int, products: dict[str, _Product], first: _Ref, pack: PhrasingPack
) -> _Draft:
    """Which of two products on the stream wins on price, shipping, discount, warranty, battery, …"""
    a = first.product
    others = [i for i in stream.shown_by(ts) if i != a.item.item_id]
    others = others or [i for i in stream.item_ids if i != a.item.item_id]
    b = products[rng.choice(others)]
    b_ref = _ordinal(rng, pack, stream, b) if rng.random() < 0.3 and pack.refs.get("ordinal") else \
        _named(rng, pack, b, stream, products)
    a_text = first.text
    if first.kind == "this_one" and pack.family == "base":
        a_text = rng.choice(THIS_ONE_CMP_REFS).format(leaf=a.leaf, this=a.this)
    elif first.kind == "this_one" and a_text.strip().lower() in ("it", "es", "es ist", "ça"):
        raise _NoWording  # "it or the Voltix earbuds" does not read as a comparison
    keys = [k for k in COMPARISONS if (k == "price" or (k in a.item.attributes and k in b.item.attributes))
            and pack.slot(f"comparison.{k}")]
    if not keys:
        raise _NoWording
    key = rng.choices(keys, weights=[4.0 if k == "price" else 1.0 for k in keys])[0]
    rule = COMPARISONS[key]
    questions = pack.slot(f"comparison.{key}")
    index = rng.randrange(len(questions))
    va, vb = _compare_value(a, key), _compare_value(b, key)
    if va == vb:
        answer = rule.tie.format(v=render_fact(key, va))
    else:
        a_wins = (va < vb) == (rule.wins == "lower")
        winner = a if a_wins else b
        vw, vl = (va, vb) if a_wins else (vb, va)
        verb = rule.verb[1 if winner.plural else 0]
        answer = f"The {winner.short} {verb}: {render_fact(key, vw)} vs {render_fact(key, vl)}."
    text = _say(rng, questions[index], a=a_text, b=b_ref.text)
    return _Draft(
        "comparison", text, answer, [_fact(a, key), _fact(b, key)], [a.item.item_id, b.item.item_id],
        template=template_id(pack, "comparison", key, index), reference=first.kind, other_reference=b_ref.kind,
    )


def _unanswerable_draft(rng: random.Random, ref: _Ref, pack: PhrasingPack) -> _Draft:
    """About the product, but its fact sheet does not say: a fact its category has elsewhere, or beyond any."""
    attrs = ref.product.item.attributes
    absent = [k for k in TOP_KEYS[ref.product.top] + ["warranty_months"] if k not in attrs]
    absent = [k for k in dict.fromkeys(absent) if pack.slot(f"value.{k}") or pack.slot(f"bool.{k}")]
    generic = [t for t in pack.unanswerable if "{ref}" in t or ref.kind == "this_one"]
    if absent and (rng.random() < 0.6 or not generic):
        key = rng.choice(absent)
        group = "value" if pack.slot(f"value.{key}") else "bool"
        index, template = _pick(rng, pack.slot(f"{group}.{key}"), ref)
        name = template_id(pack, "unanswerable", key, index)
    else:
        index, template = _pick(rng, pack.unanswerable, ref)
        name = template_id(pack, "unanswerable", "generic", index)
    text = _say(rng, template, ref=ref.text)
    return _Draft("unanswerable", text, "", [], [ref.product.item.item_id], template=name, reference=ref.kind)


def _off_topic_draft(rng: random.Random, stream: Stream, pack: PhrasingPack) -> _Draft:
    if not pack.off_topic:
        raise _NoWording
    index = rng.randrange(len(pack.off_topic))
    text = _say(rng, pack.off_topic[index], host=stream.host)
    return _Draft("off_topic", text, "", template=template_id(pack, "off_topic", "generic", index))


def _make_draft(
    rng: random.Random, kind: str, stream: Stream, ts: int, products: dict[str, _Product], this_one_share: float,
    packs: Sequence[PhrasingPack],
) -> _Draft:
    """One viewer question of ``kind`` asked ``ts`` seconds into ``stream``, worded by one of ``packs``
    (drawn uniformly; another draw when that family cannot word the question)."""
    for _ in range(50):
        pack = rng.choice(packs)
        try:
            draft = _draft_in(rng, kind, stream, ts, products, this_one_share, pack)
        except _NoWording:
            continue
        draft.family = pack.family
        return draft
    raise ValueError(f"no phrasing family can word a {kind!r} question on {stream.stream_id} at {ts}s")


def _draft_in(
    rng: random.Random, kind: str, stream: Stream, ts: int, products: dict[str, _Product], this_one_share: float,
    pack: PhrasingPack,
) -> _Draft:
    if kind == "off_topic":
        return _off_topic_draft(rng, stream, pack)
    ref = _reference(rng, stream, ts, products, this_one_share, pack)
    if kind == "question":
        return _question_draft(rng, ref, pack)
    if kind == "comparison":
        return _comparison_draft(rng, stream, ts, products, ref, pack)
    if kind == "unanswerable":
        return _unanswerable_draft(rng, ref, pack)
    raise ValueError(f"unknown task kind {kind!r} (expected one of {TASK_KINDS})")


# --------------------------------------------------------------------------------------------------
# Viewers, questions and sessions
# --------------------------------------------------------------------------------------------------


@dataclass
class _Asked:
    """A question in context: who asked it (attendance index), on which stream, when."""

    attendance: int
    stream: Stream
    ts: int
    draft: _Draft
    task_id: str = ""


def _attendance(rng: random.Random, viewers: int, n_streams: int) -> tuple[list[tuple[int, int]], list[float]]:
    """(viewer, stream) pairs, each a session, and a weight per pair for how much chat it carries."""
    popularity = [rng.lognormvariate(0, 0.8) for _ in range(n_streams)]
    cumulative = list(itertools.accumulate(popularity))
    chattiness = [rng.lognormvariate(0, 1.0) for _ in range(viewers)]
    pairs: list[tuple[int, int]] = []
    for viewer in range(viewers):
        wanted = 1
        while wanted < min(n_streams, 6) and rng.random() < 0.55:
            wanted += 1
        watched: list[int] = []
        while len(watched) < wanted:
            s = bisect.bisect_right(cumulative, rng.random() * cumulative[-1])
            s = min(s, n_streams - 1)
            if s not in watched:
                watched.append(s)
        pairs.extend((viewer, s) for s in sorted(watched))
    covered = {s for _, s in pairs}
    pairs.extend((rng.randrange(viewers), s) for s in range(n_streams) if s not in covered)
    weights = [chattiness[v] * popularity[s] for v, s in pairs]
    return pairs, weights


def _kinds(rng: random.Random, config: LivestreamWorldConfig, n: int) -> list[str]:
    """Exactly round(fraction * n) of each kind, shuffled."""
    counts = {
        "unanswerable": round(n * config.unanswerable_fraction),
        "off_topic": round(n * config.off_topic_fraction),
        "comparison": round(n * config.comparison_fraction),
    }
    counts["question"] = n - sum(counts.values())
    kinds = [k for k in TASK_KINDS for _ in range(max(0, counts[k]))][:n]
    rng.shuffle(kinds)
    return kinds


def _ask_questions(
    config: LivestreamWorldConfig, streams: list[Stream], products: dict[str, _Product],
    pairs: list[tuple[int, int]], weights: list[float], which: str = "train",
) -> list[_Asked]:
    """All viewer questions in time order, with task ids ``ls-q-000001``… worded by the training families,
    or the development (``which="dev"``, ``ls-d-…``; ``"dev2"``, ``ls-e-…``; ``"dev3"``, ``ls-f-…``; ``"dev4"``,
    ``ls-g-…``; ``"dev5"``, ``ls-j-…``) or
    held-out (``"heldout"``, ``ls-h-…``; ``"heldout2"``, ``ls-i-…``) questions worded by those families only."""
    name, prefix = _SETS[which]
    rng = random.Random(f"livestream:{config.seed}:{name}")
    packs = PACK_SETS[which]()
    if not packs:
        return []
    kinds = _kinds(rng, config, config.questions if which == "train" else config.heldout_questions)
    chosen = rng.choices(range(len(pairs)), cum_weights=list(itertools.accumulate(weights)), k=len(kinds))
    asked: list[_Asked] = []
    for kind, pair in zip(kinds, chosen, strict=True):
        stream = streams[pairs[pair][1]]
        if kind == "off_topic":
            ts = rng.randrange(stream.duration_s)
        else:
            ts = rng.randrange(stream.windows[0][0], stream.windows[-1][1])
        draft = _make_draft(rng, kind, stream, ts, products, config.this_one_fraction, packs)
        asked.append(_Asked(pair, stream, ts, draft))
    asked.sort(key=lambda a: a.stream.start_ts + a.ts)  # stable: ties keep generation order
    for number, a in enumerate(asked, start=1):
        a.task_id = f"ls-{prefix}-{number:06d}"
    return asked


def _session_id(attendance: int) -> str:
    return f"ls-sess-{attendance:06d}"


def _to_task(a: _Asked) -> Task:
    """The task record for one asked question (constraints and meta as documented at the top)."""
    d = a.draft
    meta: dict[str, Any] = {"template": d.template, "reference": d.reference, "family": d.family,
                            "session_id": _session_id(a.attendance)}
    if d.probe is not None:
        meta["probe"] = d.probe
    if d.other_reference is not None:
        meta["other_reference"] = d.other_reference
    return Task(
        task_id=a.task_id, app="livestream", kind=d.kind, messages=[Message(role="user", content=d.text)],
        constraints={
            "stream_id": a.stream.stream_id, "item_id": d.item_ids[0] if d.item_ids else None,
            "item_ids": d.item_ids, "ts_offset_s": a.ts,
        },
        answer=d.answer, facts=d.facts, meta=meta,
    )


def _session_events(
    rng: random.Random, stream: Stream, join: int, leave: int, interested: set[str], order_prefix: str
) -> list[Event]:
    """Views of what was on screen while watching; clicks, carts and purchases, likelier if asked about."""
    events: list[Event] = []
    orders = 0
    for item_id, (start, end) in zip(stream.item_ids, stream.windows, strict=True):
        if end <= join or start >= leave:
            continue
        t = max(start, join)
        asked = item_id in interested
        events.append(Event(type="view", ts=float(stream.start_ts + t), item_id=item_id))
        for event_type, p_asked, p_other in (("click", 0.7, 0.2), ("cart", 0.5, 0.25), ("purchase", 0.5, 0.5)):
            if rng.random() >= (p_asked if asked else p_other):
                break
            t = min(leave, t + rng.randint(2, 60))
            order_id = None
            if event_type == "purchase":
                orders += 1
                order_id = f"{order_prefix}-{orders}"
            events.append(Event(type=event_type, ts=float(stream.start_ts + t), item_id=item_id, order_id=order_id))
    events.sort(key=lambda e: e.ts)
    return events


def _session(rng: random.Random, index: int, viewer: int, stream: Stream, asked: list[_Asked]) -> Session:
    """One viewer watching one stream: when they joined and left, what they typed, what they did."""
    if asked:
        join = max(0, min(a.ts for a in asked) - rng.randint(0, 900))
        leave = min(stream.duration_s, max(a.ts for a in asked) + rng.randint(5, 900))
    else:
        join = rng.randrange(max(1, stream.duration_s - 60))
        leave = min(stream.duration_s, join + rng.randint(60, stream.duration_s))
    turns = [Turn(role="user", text=a.draft.text, ts=float(stream.start_ts + a.ts)) for a in asked]
    for _ in range(rng.choices((0, 1, 2), weights=(6, 3, 1))[0]):
        text = rng.choice(CHATTER).format(city=rng.choice(CITIES), host=stream.host)
        turns.append(Turn(role="user", text=text, ts=float(stream.start_ts + rng.randint(join, leave))))
    turns.sort(key=lambda t: t.ts)
    interested = {i for a in asked for i in a.draft.item_ids}
    events = _session_events(rng, stream, join, leave, interested, f"order-{index:06d}")
    return Session(
        session_id=_session_id(index), user_id=f"viewer-{viewer:05d}", app="livestream",
        started_at=float(stream.start_ts + join), turns=turns, events=events,
        task_id=asked[0].task_id if asked else None,
    )


def _build_sessions(
    config: LivestreamWorldConfig, streams: list[Stream], pairs: list[tuple[int, int]], asked: list[_Asked]
) -> list[Session]:
    """One session per (viewer, stream) pair, in order of when it started."""
    rng = random.Random(f"livestream:{config.seed}:sessions")
    by_pair: dict[int, list[_Asked]] = {}
    for a in asked:  # already in time order
        by_pair.setdefault(a.attendance, []).append(a)
    sessions = [
        _session(rng, index, viewer, streams[s], by_pair.get(index, [])) for index, (viewer, s) in enumerate(pairs)
    ]
    sessions.sort(key=lambda x: (x.started_at, x.session_id))
    return sessions


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------


def _write(path: Path, model: type[BaseModel], records: Sequence[BaseModel], progress: Progress | None) -> int:
    with RecordWriter(path, model) as writer:
        for start in range(0, len(records), _WRITE_CHUNK):
            chunk = records[start : start + _WRITE_CHUNK]
            writer.write_many(chunk)
            if progress is not None:
                progress(len(chunk))
    return writer.count


def generate_livestream_world(
    config: LivestreamWorldConfig, out: Path, progress: Progress | None = None
) -> dict[str, Any]:
    """Write catalog, streams, tasks and logs into ``out`` and its manifest; return the counts."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    streams, products = _build_streams(config)
    pairs, weights = _attendance(random.Random(f"livestream:{config.seed}:viewers"), config.viewers, len(streams))
    asked = _ask_questions(config, streams, products, pairs, weights)
    tasks = [_to_task(a) for a in asked]
    apart = {which: [_to_task(a) for a in _ask_questions(config, streams, products, pairs, weights, which)]
             for which in _SET_DIRS}
    for task in itertools.chain.from_iterable(apart.values()):
        task.meta.pop("session_id", None)  # held-out and dev viewers' chats are not in the logs
    sessions = _build_sessions(config, streams, pairs, asked)
    for which, records in apart.items():  # a rerun without those packs leaves no old file
        if not records:
            (out / _SET_DIRS[which] / TASKS_FILE).unlink(missing_ok=True)
    counts: dict[str, Any] = {
        "items": _write(out / CATALOG_FILE, Item, [p.item for p in products.values()], progress),
        "streams": _write(out / STREAMS_FILE, Stream, streams, progress),
        "tasks": _write(out / TASKS_FILE, Task, tasks, progress),
        **{f"{which}_tasks": _write(out / _SET_DIRS[which] / TASKS_FILE, Task, records, progress) if records else 0
           for which, records in apart.items()},
        "sessions": _write(out / LOGS_FILE, Session, sessions, progress),
        "tasks_by_kind": {kind: sum(t.kind == kind for t in tasks) for kind in TASK_KINDS},
    }
    finish_world(out, "livestream", config, counts)
    return counts
