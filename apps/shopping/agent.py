"""The shopping app's agent: its tools, system prompt, fallback and :class:`~harness.agent.AppSpec`.

Tools (each a pydantic argument model + a handler ``(args, ctx) -> JSON-able content | Final``):

- ``search_catalog`` — BM25 over title, category path and attributes, filtered by category, price
  and stock; returns short item cards (the model's context is small);
- ``sid_retrieve`` — model-native retrieval (ShopX): the conversation rendered by the chat template,
  then the SID start token, then a SID-trie-constrained beam search on the serving engine;
- ``get_item``, ``rank`` (listwise, by the model), ``bundle`` (one item per slot within a budget);
- ``cart_add`` / ``cart_remove`` on the session's cart;
- ``ask_user`` and ``respond`` end the turn with a :class:`~harness.agent.Final`; the loop grounds
  every item a Final names before the user sees it, so the tools never do.

Categories may be given as a path from the root (``["Outdoor", "Footwear"]``) or as a part of one
(``["Hiking boots"]``): a root prefix wins when one matches, else any path holding the words as a
contiguous run matches (case-insensitive).
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apps.shopping.constraints import item_matches
from apps.shopping.grounding import (
    Lexicon,
    NearestDepartment,
    Precedents,
    TopCategories,
    category_names,
    ground_budget,
    ground_find,
)
from apps.shopping.vocabulary import Vocabulary, with_vocabulary
from harness.agent import AppSpec, Final, ModelAccess, SidResources, TurnContext, render_ids
from harness.bm25 import BM25, top_k
from harness.catalog import CARD_TITLE_CHARS, Catalog, Item, item_card
from harness.protocol import Tool, ToolError, ToolRegistry
from infra.engines.base import GenerationRequest, SamplingParams
from sid.build import item_text
from sid.codebook import SidError, SidMap, parse_sid
from sid.decoding import VllmSidLogitsProcessor
from sid.tokens import SidTokenMap
from sid.trie import ItemFilter, SidTrie

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a shopping assistant. Find items with the tools (search_catalog or sid_retrieve; bundle for "
    "several items under one budget), then call respond with a short reply and the ids of the items you "
    "recommend, taken only from tool results. If the request is too vague to search, ask one short question "
    "with ask_user."
)
PLAN_PROMPT = (
    "You are a shopping assistant. Answer with one tool call: find (category, brand, colour, material, size, "
    "feature, price_min, price_max: only what the shopper said) shows matching items; find_bundle (slots, "
    "budget) one item per slot; ask_user (question) when no kind of product is named."
)
"""The served prompt of the compact protocol (``AppSpec.prompt_tools`` False): the model was trained on the
tools, so their JSON schemas (~3k tokens) are not in every prompt; the tools stay callable by name."""
SID_FALLBACK_MIN_MS = 100.0
"""The fallback uses SID retrieval only with at least this much of the turn's budget left."""
FALLBACK_ITEMS = 5
GROUND_WORDS = True
"""``find`` / ``find_bundle`` ground their arguments in the shopper's words and ask with the first results
when only a kind of product was named (:mod:`apps.shopping.grounding`); False applies the model's arguments
as written (the ablation of ``bench/agent.py``)."""
SEMANTIC_CATEGORIES = True
"""With ``GROUND_WORDS``: words that name no leaf category get the top-level category closest by meaning
(MiniLM); False turns that off."""
SEMANTIC_SLOTS = True
"""With ``GROUND_WORDS`` and the encoder: a bundle theme no training request had gets the leaves of the department
closest by meaning as its slots (:class:`NearestDepartment`); False keeps the model's (bench/agent.py measures
both)."""


# ------------------------------------------------------------------------------------------------ the index
FACETS = ("brand", "colour", "material", "size")
"""The single-valued item attributes ``find`` filters on (exact, case-insensitive)."""


def _facet(item: Item, key: str) -> str:
    value = item.attributes.get(key)
    return str(value).strip().lower() if value is not None and not isinstance(value, list | dict) else ""


def _feature_list(item: Item) -> list[str]:
    have = item.attributes.get("features", [])
    return [str(f) for f in have] if isinstance(have, list) else []


def _has_run(path: Sequence[str], part: Sequence[str]) -> int:
    """End (exclusive) of the first place ``part`` occurs as a contiguous run in ``path``, else 0."""
    n = len(part)
    for start in range(len(path) - n + 1):
        if list(path[start:start + n]) == list(part):
            return start + n
    return 0


@dataclass
class ShoppingIndex:
    """What the tools search, built once per catalog: BM25 over item texts plus per-row numpy columns.

    Columns are a snapshot taken at build time; handlers re-check every result against the live
    catalog (an item removed or sold out since is skipped).
    """

    item_ids: list[str]
    bm25: BM25
    price: np.ndarray  # (N,) float64, NaN = not sold
    stock: np.ndarray  # (N,) float64, NaN = untracked (in stock)
    rating: np.ndarray  # (N,) float64, unrated = 0
    path_of_row: np.ndarray  # (N,) int64 index into ``paths``
    paths: list[tuple[str, ...]]
    facets: dict[str, np.ndarray]  # facet name -> (N,) object array of lower-cased values ("" = none)
    features: list[frozenset[str]]  # per row, the lower-cased ``features`` attribute
    titles: list[str]  # per row, the item's title
    vocabulary: Vocabulary | None = None  # learnt in training (see adopt)

    @classmethod
    def build(cls, catalog: Catalog) -> ShoppingIndex:
        items = list(catalog)
        paths: dict[tuple[str, ...], int] = {}
        path_of_row = np.array([paths.setdefault(tuple(i.category_path), len(paths)) for i in items], np.int64)
        nan = float("nan")
        return cls(
            item_ids=[i.item_id for i in items], bm25=BM25([item_text(i) for i in items]),
            price=np.array([nan if i.price is None else i.price for i in items], np.float64),
            stock=np.array([nan if i.stock is None else i.stock for i in items], np.float64),
            rating=np.array([i.rating or 0.0 for i in items], np.float64),
            path_of_row=path_of_row, paths=list(paths),
            facets={k: np.array([_facet(i, k) for i in items], dtype=object) for k in FACETS},
            features=[frozenset(f.lower() for f in _feature_list(i)) for i in items],
            titles=[i.title for i in items],
        )

    def _path_matches(self, category: Sequence[str]) -> list[tuple[int, int]]:
        """``(path index, end of the matched part)`` for every path ``category`` names (see module docstring)."""
        want = [c.strip().lower() for c in category]
        root = [(j, len(want)) for j, p in enumerate(self._lower_paths) if p[:len(want)] == want]
        if root:
            return root
        runs = [(j, _has_run(p, want)) for j, p in enumerate(self._lower_paths)]
        return [(j, end) for j, end in runs if end]

    def knows_category(self, category: Sequence[str]) -> bool:
        """Whether ``category`` names at least one of the catalog's paths (see the module docstring)."""
        return bool(self._path_matches(category))

    @cached_property
    def lexicon(self) -> Lexicon:
        """The catalog's facet values, for grounding ``find``'s arguments in the shopper's words."""
        values: dict[str, set[str]] = {k: set(self.facets[k].tolist()) - {""} for k in FACETS}
        values["feature"] = set().union(*self.features) if self.features else set()
        titles: dict[str, list[str]] = {}
        for row, title in enumerate(self.titles):
            titles.setdefault(self.paths[int(self.path_of_row[row])][-1], []).append(title)
        above = {part for path in self.paths for part in path[:-1]}
        names = category_names(titles, [v for vs in values.values() for v in vs], reserved=above)
        return Lexicon.of(values, with_vocabulary(names, self.vocabulary))

    @cached_property
    def top_categories(self) -> TopCategories:
        """The top-level category of a request by meaning (MiniLM; loaded on first use, see grounding)."""
        leaves: dict[str, set[str]] = {}
        for path in self.paths:
            leaves.setdefault(path[0], set()).add(path[-1])
        examples = self.vocabulary.top_examples if self.vocabulary else {}
        every = all(examples.get(top) for top in leaves)  # else the departments with examples pull requests over
        return TopCategories(leaves, _text_encoder, examples if every else None)

    @cached_property
    def bundle_precedents(self) -> Precedents:
        """The training bundle requests and their slots (learnt; none without a vocabulary), by meaning."""
        known = {p[-1] for p in self.paths}
        pairs = [(text, list(slots)) for text, slots in (self.vocabulary.bundles if self.vocabulary else ())
                 if all(s in known for s in slots)]  # a slot this catalog lacks: not a plan for it
        return Precedents(pairs, _text_encoder)

    @cached_property
    def nearest_department(self) -> NearestDepartment:
        """Departments (the level above the leaves) and their leaves by meaning (MiniLM; a new bundle theme's
        slots)."""
        departments: dict[str, list[str]] = {}
        for path in self.paths:
            if len(path) >= 2:
                departments.setdefault(" > ".join(path[:-1]), []).append(path[-1])
        return NearestDepartment(departments, _text_encoder)

    def adopt(self, vocabulary: Vocabulary | None) -> None:
        """Ground ``find`` with the shoppers' vocabulary an agent learnt in training (None: the catalog's
        names only). Call before serving (the kit does, where the agent is loaded); rebuilt on next use."""
        self.vocabulary = vocabulary
        self.__dict__.pop("lexicon", None)
        self.__dict__.pop("top_categories", None)
        self.__dict__.pop("bundle_precedents", None)

    def warm(self) -> None:
        """Build what ``find`` builds on first use (the lexicon; the sentence encoder when installed), so that
        no request pays for it (the server calls this at start)."""
        _ = self.lexicon
        top_of = _top_of(self)
        if top_of is not None:
            top_of("warm up")
            self.bundle_precedents("warm up")
            self.nearest_department("warm up")

    def within(self, category: Any, top: str) -> bool:
        """Whether every path a ``find`` category names lies under the top-level category ``top``."""
        parts = _category_list(category)
        matches = self._path_matches(parts) if parts else []
        return bool(matches) and all(self.paths[j][0].lower() == top.lower() for j, _ in matches)

    def covers(self, category: Any, leaf: str) -> bool:
        """Whether a ``find`` category (a name or a path) holds the leaf category named ``leaf``."""
        parts = _category_list(category)
        matches = self._path_matches(parts) if parts else []
        return any(self.paths[j][-1].lower() == leaf.lower() for j, _ in matches)

    @cached_property
    def _lower_paths(self) -> list[list[str]]:
        return [[p.lower() for p in path] for path in self.paths]

    def category_mask(self, category: Sequence[str]) -> np.ndarray:
        """(N,) bool: rows under ``category``. Raises ToolError naming real categories when none matches."""
        matches = self._path_matches(category)
        if not matches:
            tops = sorted({p[0] for p in self.paths})[:12]
            raise ToolError(f"no category matches {list(category)}; top-level categories: {', '.join(tops)}")
        ok = np.zeros(len(self.paths), bool)
        ok[[j for j, _ in matches]] = True
        return ok[self.path_of_row]

    def category_prefix(self, category: Sequence[str]) -> list[str]:
        """The one root path prefix ``category`` names (canonical case), for the SID trie's filter."""
        prefixes = {self.paths[j][:end] for j, end in self._path_matches(category)}
        if not prefixes:
            self.category_mask(category)  # raises with the list of real categories
        if len(prefixes) > 1:
            some = "; ".join(" > ".join(p) for p in sorted(prefixes)[:3])
            raise ToolError(f"category {list(category)} is ambiguous ({some}); give the path from the root")
        return list(prefixes.pop())

    def mask(self, *, category: Sequence[str] | None = None, price_min: float | None = None,
             price_max: float | None = None, in_stock: bool = True) -> np.ndarray:
        """(N,) bool: rows passing every given filter (an unknown price fails any price bound)."""
        ok = np.ones(len(self.item_ids), bool)
        if category:
            ok &= self.category_mask(category)
        if price_min is not None:
            ok &= self.price >= price_min
        if price_max is not None:
            ok &= self.price <= price_max
        if in_stock:
            ok &= ~(self.stock <= 0)
        return ok

    def facet_mask(self, key: str, value: str) -> np.ndarray:
        """(N,) bool: rows whose facet ``key`` is ``value`` (case-insensitive)."""
        return self.facets[key] == value.strip().lower()

    def feature_mask(self, feature: str) -> np.ndarray:
        """(N,) bool: rows listing ``feature`` (case-insensitive)."""
        want = feature.strip().lower()
        return np.fromiter((want in f for f in self.features), bool, len(self.features))


_ENCODER_LOCK = threading.Lock()
_ENCODER: Any = None


def _text_encoder() -> Any:
    """The process's one MiniLM for grounding by meaning, shared by every index and turn: concurrent turns' queries
    are encoded in one batch (:class:`infra.text_encoder.GatheringEncoder`)."""
    global _ENCODER
    with _ENCODER_LOCK:
        if _ENCODER is None:
            from infra.text_encoder import GatheringEncoder, TextEncoder

            _ENCODER = GatheringEncoder(TextEncoder(batch_size=32))
        return _ENCODER


def _index(ctx: TurnContext) -> ShoppingIndex:
    index = ctx.resources
    if not isinstance(index, ShoppingIndex):
        raise TypeError("the shopping tools need AppSpec.resources to be a ShoppingIndex (see shopping_app)")
    return index


def _live(catalog: Catalog, ids: Sequence[str], in_stock: bool) -> list[Item]:
    """The items of ``ids`` still in the catalog (and in stock, if asked), in order."""
    out = []
    for item_id in ids:
        item = catalog.get(item_id)
        if item is not None and (item.in_stock or not in_stock):
            out.append(item)
    return out


def _item_ref(ctx: TurnContext, ref: str) -> str:
    """``ref`` as an item id when it is a SID string that names one, else unchanged (the loop grounds it)."""
    ref = ref.strip()
    sid = ctx.model.sid if ctx.model is not None else None
    if ref.startswith("<") and sid is not None:
        try:
            return sid.sid_map.item_of(parse_sid(ref))
        except (ValueError, KeyError):
            return ref
    return ref


def _resolve(ctx: TurnContext, ref: str) -> Item:
    """The item an id (or a SID string) names; ToolError if none."""
    item = ctx.catalog.get(_item_ref(ctx, ref))
    if item is None:
        raise ToolError(f"unknown item id {ref.strip()!r}; use ids from search results")
    return item


# ------------------------------------------------------------------------------------------------ SID retrieval
@dataclass(frozen=True, eq=False)
class SidConstraint:
    """The per-request constraint factory the engine calls (``infra.engines.base.LogitsConstraint``).

    The SID start token ends the prompt, so the generation is one SID then an end token: no
    ``start_token_id`` for the processor, which sees only generated ids.
    """

    sid: SidResources
    flt: ItemFilter

    def __call__(self) -> VllmSidLogitsProcessor:
        return VllmSidLogitsProcessor(self.sid.trie, self.sid.token_map, flt=self.flt, start_token_id=None,
                                      end_token_ids=[self.sid.end_id])


def sid_resources(catalog: Catalog, sid_map: SidMap, token_map: SidTokenMap, start_id: int,
                  end_id: int) -> SidResources:
    """SID resources whose trie carries stock, price and category (what ``sid_retrieve``'s filters need).

    Items with a SID but no longer in the catalog are removed from the trie.
    """
    nan = float("nan")
    items = [catalog.get(i) for i in sid_map.item_ids]
    stock = np.array([nan if i is None or i.stock is None else i.stock for i in items], np.float64)
    price = np.array([nan if i is None or i.price is None else i.price for i in items], np.float64)
    trie = SidTrie.from_sid_map(sid_map, stock=stock, price=price,
                                category=[None if i is None else i.category_path for i in items])
    for item_id, item in zip(sid_map.item_ids, items, strict=True):
        if item is None:
            trie.remove(item_id)
    return SidResources(trie=trie, token_map=token_map, sid_map=sid_map, start_id=start_id, end_id=end_id)


def conversation(messages: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The user turns and the assistant's plain-text turns (e.g. a clarifying question), ending on a user turn:
    the shape :func:`training.sft_data.intent_prompt` trains SID retrieval on."""
    out: list[dict[str, str]] = []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if not isinstance(content, str) or not content.strip():
            continue
        if role == "user" or (role == "assistant" and not m.get("tool_calls") and out):
            out.append({"role": str(role), "content": content})
    while out and out[-1]["role"] == "assistant":
        out.pop()
    return out


def sid_search(model: ModelAccess, messages: list[dict[str, str]], flt: ItemFilter, k: int) -> list[str]:
    """Item ids of the ``k`` best SID beams after the chat prompt + SID start token, best first, distinct."""
    sid = model.sid
    if sid is None:
        raise ToolError("SID retrieval is not available; use search_catalog")
    if not len(sid.trie.children((), flt)):
        return []
    depth = sid.trie.depth
    prompt = [*render_ids(model.tokenizer, messages, None), sid.start_id]
    params = SamplingParams(num_beams=k, n=k, temperature=0.0, max_new_tokens=depth + 1)
    completions = model.engine.generate([GenerationRequest(prompt=prompt, params=params,
                                                           constraint=SidConstraint(sid, flt))])[0]
    found: dict[str, None] = {}
    for c in completions:
        try:
            codes = sid.token_map.codes_from_ids(c.token_ids[:depth])
        except SidError:
            continue  # a beam that ended early (the filter left it nowhere to go)
        item_id = sid.trie.item_at(codes, flt)
        if item_id is not None:
            found.setdefault(item_id)
    return list(found)


# ------------------------------------------------------------------------------------------------ tool arguments
_CATEGORY = ("Category path from the root, e.g. ['Outdoor', 'Footwear'], or part of one, e.g. ['Hiking boots']. "
             "Omit for any category.")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchArgs(_Args):
    query: str = Field(min_length=1, max_length=500, description="What the shopper wants, in words.")
    category: list[str] | None = Field(None, description=_CATEGORY)
    price_max: float | None = Field(None, ge=0, description="Highest price, inclusive; omit for no cap.")
    price_min: float | None = Field(None, ge=0, description="Lowest price, inclusive; omit for no floor.")
    in_stock: bool = Field(True, description="Only items in stock.")
    k: int = Field(10, ge=1, le=20, description="How many items to return.")


class SidRetrieveArgs(_Args):
    query: str | None = Field(None, max_length=500, description="The need in words; omit to use the conversation.")
    category: list[str] | None = Field(None, description=_CATEGORY)
    price_max: float | None = Field(None, ge=0, description="Highest price, inclusive; omit for no cap.")
    k: int = Field(10, ge=1, le=20, description="How many items to return.")


class FindArgs(_Args):
    category: str | list[str] | None = Field(None, description="The kind of product: a category name, e.g. "
                                             "'Hiking boots', or a path from the root. Omit for any.")
    brand: str | None = Field(None, max_length=100, description="Brand the shopper asked for.")
    colour: str | None = Field(None, max_length=100, description="Colour the shopper asked for.")
    material: str | None = Field(None, max_length=100, description="Material the shopper asked for.")
    size: str | None = Field(None, max_length=100, description="Size the shopper asked for.")
    feature: str | None = Field(None, max_length=100, description="A feature the item must have, e.g. 'waterproof'.")
    price_min: float | None = Field(None, ge=0, description="Lowest price, inclusive.")
    price_max: float | None = Field(None, ge=0, description="Highest price, inclusive.")
    query: str | None = Field(None, max_length=500, description="Words to match; omit to use the shopper's words.")
    k: int = Field(10, ge=1, le=20, description="How many items to show.")


class FindBundleArgs(_Args):
    slots: list[str | list[str]] = Field(min_length=1, max_length=6, description="One category per item wanted, "
                                         "e.g. ['Tents', 'Sleeping bags'].")
    budget: float | None = Field(None, gt=0, description="Most the whole bundle may cost; omit when the shopper "
                                 "named no budget.")


class GetItemArgs(_Args):
    item_id: str = Field(min_length=1, max_length=256, description="An item id from a tool result.")


class RankArgs(_Args):
    item_ids: list[str] = Field(min_length=1, max_length=20, description="Candidate item ids to order.")
    query: str | None = Field(None, max_length=500, description="What to rank for; omit to use the conversation.")


class BundleArgs(_Args):
    slots: list[list[str]] = Field(min_length=1, max_length=6,
                                   description="One category (path or part of one) per item wanted, e.g. "
                                               "[['Tents'], ['Sleeping bags']].")
    budget: float = Field(gt=0, description="Most the whole bundle may cost.")


class CartAddArgs(_Args):
    item_id: str = Field(min_length=1, max_length=256, description="The item to add.")
    quantity: int = Field(1, ge=1, le=99, description="How many units to add.")


class CartRemoveArgs(_Args):
    item_id: str = Field(min_length=1, max_length=256, description="The item to take out of the cart.")


class AskUserArgs(_Args):
    question: str = Field(min_length=1, max_length=500, description="One short question for the shopper.")


class RespondArgs(_Args):
    text: str = Field(min_length=1, max_length=2000, description="The reply the shopper reads.")
    item_ids: list[str] = Field(default_factory=list, max_length=20,
                                description="Ids of the recommended items, best first (from tool results).")
    bundles: list[list[str]] = Field(default_factory=list, max_length=5,
                                     description="Bundles of item ids, one item per slot.")


# ------------------------------------------------------------------------------------------------ tool handlers
def search_catalog(args: SearchArgs, ctx: TurnContext) -> dict[str, Any]:
    """BM25 over the catalog under the filters; when no word matches but a category is given, its top rated."""
    index = _index(ctx)
    mask = index.mask(category=args.category, price_min=args.price_min, price_max=args.price_max,
                      in_stock=args.in_stock)
    scores = index.bm25.scores(args.query)
    rows = top_k(scores, 2 * args.k, mask & (scores > 0))
    result: dict[str, Any] = {}
    if not len(rows) and args.category:
        rows = top_k(index.rating, 2 * args.k, mask)
        result["note"] = "no item matched the words; these are the top rated under the filters"
    items = _live(ctx.catalog, [index.item_ids[int(r)] for r in rows], args.in_stock)[:args.k]
    if not items:
        raise ToolError("no items match; try other words or looser filters")
    return {"items": [item_card(i) for i in items], **result}


_RELAX_ORDER = ("feature", "material", "colour", "size", "brand", "price_min", "category", "price_max")
"""When nothing meets every filter ``find`` drops filters in this order (least stated first) until items match."""


def _category_list(category: str | list[str] | None) -> list[str] | None:
    if category is None:
        return None
    parts = [p.strip() for p in (category.split(">") if isinstance(category, str) else category)]
    return [p for p in parts if p] or None


def _find_mask(index: ShoppingIndex, filters: dict[str, Any]) -> np.ndarray:
    """(N,) bool: in-stock rows meeting every filter of ``filters`` (FindArgs field -> value)."""
    ok = index.mask(category=filters.get("category"), price_min=filters.get("price_min"),
                    price_max=filters.get("price_max"))
    for key in FACETS:
        if filters.get(key):
            ok &= index.facet_mask(key, filters[key])
    if filters.get("feature"):
        ok &= index.feature_mask(filters["feature"])
    return ok


def find_items(index: ShoppingIndex, catalog: Catalog, args: FindArgs, query: str,
               cheapest_first: bool = False) -> tuple[list[Item], list[str]]:
    """Items for ``args`` best first, and the filters dropped to find any (``_RELAX_ORDER``).

    A named category orders its matches by rating (the shopper named the kind of product: the best of that
    kind first), then by the words, or with ``cheapest_first`` by price, then rating; without one, by BM25 over
    the words, then rating. A category that names none of the catalog's is dropped, like a filter nothing meets.
    """
    filters: dict[str, Any] = {k: v for k, v in args.model_dump(exclude={"query", "k"}).items() if v is not None}
    dropped: list[str] = []
    if "category" in filters:
        filters["category"] = _category_list(filters["category"])
        if not filters["category"] or not index.knows_category(filters["category"]):
            filters.pop("category")
            dropped.append("category")
    scores = index.bm25.scores(query) if query.strip() else np.zeros(len(index.item_ids))
    mask = _find_mask(index, filters)
    for key in _RELAX_ORDER:
        if mask.any():
            break
        if key in filters:
            filters.pop(key)
            dropped.append(key)
            mask = _find_mask(index, filters)
    rows = np.flatnonzero(mask)
    if "category" in filters and cheapest_first:
        order = np.lexsort((-index.rating[rows], np.nan_to_num(index.price[rows], nan=np.inf)))
    elif "category" in filters:
        order = np.lexsort((-scores[rows], -index.rating[rows]))
    else:
        order = np.lexsort((-index.rating[rows], -scores[rows]))
    ids = [index.item_ids[int(r)] for r in rows[order[:2 * args.k]]]
    return _live(catalog, ids, True)[:args.k], dropped


def _filters_text(args: FindArgs) -> str:
    words = [str(v) for v in (args.feature, args.colour, args.material, args.brand) if v]
    if args.category:
        words.append(" > ".join(_category_list(args.category) or []))
    if args.size:
        words.append(f"size {args.size}")
    if args.price_max is not None:
        words.append(f"up to {args.price_max:g}")
    if args.price_min is not None:
        words.append(f"from {args.price_min:g}")
    return " ".join(words)


_CHEAP = re.compile(r"\b(?:cheap|cheaper|cheapest|inexpensive|affordable|low[- ]cost|budget[- ]friendly)\b", re.I)
"""Words that ask for the lowest prices: ``find`` then orders a named category by price (then rating)."""


def find(args: FindArgs, ctx: TurnContext) -> Final:
    """Search under the shopper's stated filters and show the best matches (ends the turn).

    The filter values are grounded in the shopper's words first (:mod:`apps.shopping.grounding`)."""
    said = _user_text(ctx)
    index = _index(ctx)
    changes: dict[str, str] = {}
    if GROUND_WORDS:
        grounded, changes = ground_find(args.model_dump(), said, index.lexicon, index.covers, _top_of(index),
                                        index.within)
        try:
            args = FindArgs.model_validate(grounded)
        except ValidationError:  # a value from the words FindArgs refuses (e.g. too long): the model's call stands
            log.warning("grounded find arguments rejected: %s", grounded)
            changes = {}
    query = args.query or said
    cheap = GROUND_WORDS and _CHEAP.search(said) is not None
    items, dropped = find_items(index, ctx.catalog, args, query, cheapest_first=cheap)
    ids = [i.item_id for i in items]
    if not ids:
        return Final(reply="Sorry, nothing in stock matches that. Could you tell me more about what you need?",
                     actions=[{"type": "ask_user"}])
    what = _filters_text(args) or "your request"
    order = "cheapest first" if cheap and args.category else "best first"
    reply = (f"Here are {len(ids)} options for {what}, {order}." if not dropped else
             f"Nothing matches every detail ({', '.join(dropped)} relaxed); here are the closest options.")
    data: dict[str, Any] = {"relaxed": dropped} if dropped else {}
    if changes:
        data["grounded"] = changes
    actions: list[dict[str, Any]] = [{"type": "show_items", "item_ids": ids}]
    question = _clarify(ctx, args, said, index) if GROUND_WORDS else None
    if question:
        reply += " " + question
        actions.append({"type": "ask_user", "question": question})
    return Final(reply=reply, item_ids=ids, actions=actions, data=data)


def _top_of(index: ShoppingIndex) -> Callable[[str], str | None] | None:
    """The semantic top-category prior, or None where the sentence encoder is not installed."""
    return index.top_categories if SEMANTIC_CATEGORIES and _encoder_installed() else None


@lru_cache(maxsize=1)
def _encoder_installed() -> bool:
    """Whether the sentence encoder's package is installed (looked up once, not on every tool call)."""
    from infra.text_encoder import EncoderUnavailable, model_dir

    try:
        model_dir()
    except EncoderUnavailable:
        return False
    return True


def _clarify(ctx: TurnContext, args: FindArgs, said: str, index: ShoppingIndex) -> str | None:
    """The question to ask with the first results when the shopper's first message names a kind of product
    and nothing else about it (no brand, colour, material, size, feature or price): which of those matter."""
    users = [m for m in conversation(ctx.session.messages) if m["role"] == "user"]
    stated = [k for k in (*FACETS, "feature", "price_min", "price_max") if getattr(args, k) is not None]
    if len(users) != 1 or stated or not index.lexicon.mentions(said).get("category"):
        return None
    return "Any brand, colour or material you prefer, and what is your budget?"


def find_bundle(args: FindBundleArgs, ctx: TurnContext) -> Final:
    """One in-stock item per slot, the best rated set within the budget, shown as a bundle (ends the turn).

    Grounded like ``find``: the budget in the words; the slots: the leaf categories the words name when they
    name two or more ("a tent and a sleeping bag"), else those of the closest training bundle request by
    meaning when one is close enough (the agent's learnt vocabulary, :mod:`apps.shopping.vocabulary`), else
    (a theme no training request had) the leaves of the department closest to the request by meaning: a small
    model copies the slot list of a theme it knows."""
    said = _user_text(ctx)
    index = _index(ctx)
    grounded: dict[str, str] = {}
    names: list[Any] = list(args.slots)
    mine = [(_category_list(s) or [""])[-1].lower() for s in names]
    named = index.lexicon.mentions(said).get("category", []) if GROUND_WORDS else []
    if len(named) >= 2:
        if {s.lower() for s in named} != set(mine):
            names, grounded["slots"] = list(named), "words"
    elif GROUND_WORDS and _top_of(index) is not None:
        precedent = index.bundle_precedents(said)
        if precedent is not None and [s.lower() for s in precedent[0]] != mine:
            names, grounded["slots"] = list(precedent[0]), "learnt"
        elif (precedent is None and SEMANTIC_SLOTS and (near := index.nearest_department(said)) is not None
              and [s.lower() for s in near[1]] != mine):
            names, grounded["slots"] = near[1], "semantic"
    slots = [_category_list(s) or [] for s in names]
    if any(not s for s in slots):
        raise ToolError("every slot needs a category name")
    budget, change = ground_budget(args.budget, said, index.lexicon) if GROUND_WORDS else (None, None)
    budget = args.budget if budget is None else budget  # no number in the words: the model's is all there is
    if change and (change != "dropped" or args.budget is not None):
        grounded["budget"] = change
    ids, total = fill_bundle(index, ctx.catalog, slots, math.inf if budget is None else budget)
    reply = (f"Here is a bundle within your budget of {budget:g} (total {total:.2f})." if budget is not None
             else f"Here is a bundle of the best rated items (total {total:.2f}).")
    return Final(reply=reply, bundles=[ids], actions=[{"type": "show_bundles", "bundles": [ids]}],
                 data={"grounded": grounded} if grounded else {})


def sid_retrieve(args: SidRetrieveArgs, ctx: TurnContext) -> dict[str, Any]:
    """Model-native retrieval: constrained beam search over SIDs of in-stock items passing the filters."""
    if ctx.model is None or ctx.model.sid is None:
        raise ToolError("SID retrieval is not available; use search_catalog")
    prefix = _index(ctx).category_prefix(args.category) if args.category else None
    flt = ItemFilter(in_stock=True, category_prefix=prefix, price_max=args.price_max)
    messages = [{"role": "user", "content": args.query}] if args.query else conversation(ctx.session.messages)
    if not messages:
        raise ToolError("nothing to retrieve for: pass a query")
    items = _live(ctx.catalog, sid_search(ctx.model, messages, flt, args.k), in_stock=True)
    if not items:
        raise ToolError("no items match; try search_catalog or looser filters")
    return {"items": [item_card(i) for i in items]}


def get_item(args: GetItemArgs, ctx: TurnContext) -> dict[str, Any]:
    """One item in full: description (shortened), every attribute, stock."""
    item = _resolve(ctx, args.item_id)
    attrs = {k: v for k, v in item.attributes.items() if k != "seller"}
    return {**item_card(item), "description": item.description[:400], "attributes": attrs,
            "currency": item.currency, "stock": item.stock, "in_stock": item.in_stock}


_RANK_INSTRUCTION = ("Rank these items for the shopper's request, best match first. "
                     "Answer with the item ids only, one per line.")


def rank(args: RankArgs, ctx: TurnContext) -> dict[str, Any]:
    """Listwise ranking by the model (one generation); by rating when there is no model or no time."""
    known: list[Item] = []
    unknown: list[str] = []
    for ref in dict.fromkeys(args.item_ids):
        item = ctx.catalog.get(ref.strip())
        if item is None:
            unknown.append(ref)
        elif all(k.item_id != item.item_id for k in known):
            known.append(item)
    if not known:
        raise ToolError(f"none of these ids is in the catalog: {unknown[:5]}")
    by_rating = sorted(known, key=lambda i: -(i.rating or 0.0))
    order, ranked_by = by_rating, "rating"
    text = _rank_generate(ctx, known, args.query) if len(known) > 1 else None
    if text is not None:
        named = ids_in_text(text, [i.item_id for i in known])
        lookup = {i.item_id: i for i in known}
        order = [lookup[i] for i in named] + [i for i in known if i.item_id not in set(named)]
        ranked_by = "model"
    out: dict[str, Any] = {"items": [item_card(i) for i in order], "ranked_by": ranked_by}
    if unknown:
        out["unknown"] = unknown
    return out


def _rank_generate(ctx: TurnContext, items: Sequence[Item], query: str | None) -> str | None:
    """The model's ranking text, or None without a model or when the budget cannot fit the answer."""
    if ctx.model is None or ctx.budget.expired():
        return None
    engine = ctx.model.engine
    cap = ctx.budget.token_cap(engine.tokens_per_second, min(512, 16 * len(items) + 16))
    if cap < 8:
        return None
    request = query or " ".join(m["content"] for m in conversation(ctx.session.messages)
                                if m["role"] == "user")[-500:]
    lines = [f"{i.item_id} | {i.title[:CARD_TITLE_CHARS]} | {i.price} | rating {i.rating}" for i in items]
    messages = [{"role": "system", "content": _RANK_INSTRUCTION},
                {"role": "user", "content": f"Request: {request}\nItems:\n" + "\n".join(lines)}]
    prompt = render_ids(ctx.model.tokenizer, messages, None)
    params = SamplingParams(max_new_tokens=cap, temperature=0.0)
    return engine.generate([GenerationRequest(prompt=prompt, params=params)])[0][0].text


def ids_in_text(text: str, candidates: Sequence[str]) -> list[str]:
    """The candidates ``text`` names, in the order it first names them (an id inside a longer id does not count)."""
    first: dict[str, int] = {}
    for cid in candidates:
        m = re.search(rf"(?<![\w\-]){re.escape(cid)}(?![\w\-])", text)
        if m is not None:
            first[cid] = m.start()
    return sorted(first, key=first.__getitem__)


def bundle(args: BundleArgs, ctx: TurnContext) -> dict[str, Any]:
    """One in-stock item per slot, the highest total rating whose total price fits the budget."""
    ids, total = fill_bundle(_index(ctx), ctx.catalog, args.slots, args.budget)
    cards = [{**item_card(ctx.catalog[i]), "slot": " > ".join(s)} for i, s in zip(ids, args.slots, strict=True)]
    return {"items": cards, "total": round(total, 2), "budget": args.budget}


def _cart_view(ctx: TurnContext) -> dict[str, Any]:
    """The cart as the model sees it: lines with unit prices, and the total."""
    lines: list[dict[str, Any]] = []
    total = 0.0
    for item_id, quantity in ctx.session.cart.items():
        item = ctx.catalog.get(item_id)
        price = item.price if item is not None else None
        lines.append({"item_id": item_id, "quantity": quantity, "price": price})
        total += (price or 0.0) * quantity
    return {"cart": lines, "total": round(total, 2)}


def cart_add(args: CartAddArgs, ctx: TurnContext) -> dict[str, Any]:
    """Add units of an in-stock item to the session's cart (never more than the stock)."""
    item = _resolve(ctx, args.item_id)
    try:
        ctx.session.add_to_cart(item, args.quantity)
    except ValueError as e:
        raise ToolError(str(e)) from None
    return _cart_view(ctx)


def cart_remove(args: CartRemoveArgs, ctx: TurnContext) -> dict[str, Any]:
    """Take an item out of the session's cart."""
    if ctx.session.cart.pop(args.item_id.strip(), None) is None:
        raise ToolError(f"{args.item_id!r} is not in the cart")
    return _cart_view(ctx)


def ask_user(args: AskUserArgs, ctx: TurnContext) -> Final:
    """End the turn with a clarifying question.

    Grounded like ``find`` (with ``GROUND_WORDS`` and the meaning prior): a question about brand, colour or
    budget helps only once a kind of product is named, and only once. When the shopper's words name none ("a
    new outfit piece") or they have answered a question already, the turn shows the best matches instead
    (``find`` with no filters of the model's, grounded in the words and their meaning)."""
    index = _index(ctx)
    if GROUND_WORDS and _top_of(index) is not None:
        said = _user_text(ctx)
        users = [m for m in conversation(ctx.session.messages) if m["role"] == "user"]
        if len(users) > 1 or not index.lexicon.mentions(said).get("category"):
            final = find(FindArgs(), ctx)
            final.data.setdefault("grounded", {})["ask_user"] = "replaced"
            return final
    return Final(reply=args.question, actions=[{"type": "ask_user"}])


def respond(args: RespondArgs, ctx: TurnContext) -> Final:
    """End the turn with a reply and the items / bundles it recommends (the loop grounds them).

    SID strings the model wrote instead of ids are turned into ids, so the user gets item ids.
    """
    item_ids = [_item_ref(ctx, r) for r in args.item_ids]
    bundles = [[_item_ref(ctx, r) for r in b] for b in args.bundles]
    actions: list[dict[str, Any]] = []
    if item_ids:
        actions.append({"type": "show_items", "item_ids": item_ids})
    if bundles:
        actions.append({"type": "show_bundles", "bundles": bundles})
    return Final(reply=args.text, item_ids=item_ids, bundles=bundles, actions=actions)


def shopping_tools() -> ToolRegistry[TurnContext]:
    """The shopping tools, in the order the model sees them."""
    return ToolRegistry[TurnContext]([
        Tool("find", "Show the best items for the request under the filters the shopper stated (ends your turn).",
             FindArgs, find),
        Tool("find_bundle", "Show one item per slot, best rated within a total budget (ends your turn).",
             FindBundleArgs, find_bundle),
        Tool("search_catalog", "Keyword search of the catalog with category, price and stock filters.",
             SearchArgs, search_catalog),
        Tool("sid_retrieve", "Retrieve items for the conversation by their semantic IDs (the model's own "
             "retrieval), with category and price filters.", SidRetrieveArgs, sid_retrieve),
        Tool("get_item", "Full details of one item.", GetItemArgs, get_item),
        Tool("rank", "Order candidate items for the request, best first.", RankArgs, rank),
        Tool("bundle", "Pick one in-stock item per slot, best rated within a total budget.", BundleArgs, bundle),
        Tool("cart_add", "Add an item to the shopper's cart.", CartAddArgs, cart_add),
        Tool("cart_remove", "Remove an item from the shopper's cart.", CartRemoveArgs, cart_remove),
        Tool("ask_user", "Ask the shopper one clarifying question (ends your turn).", AskUserArgs, ask_user),
        Tool("respond", "Reply to the shopper with recommended items (ends your turn).", RespondArgs, respond),
    ])


# ------------------------------------------------------------------------------------------------ bundles
_PER_SLOT = 8
_MAX_STATES = 256


def _slot_candidates(index: ShoppingIndex, catalog: Catalog, slot: Sequence[str]) -> list[tuple[str, float, float]]:
    """``(item_id, price, rating)`` of the best rated and the cheapest in-stock items under ``slot``."""
    rows = np.flatnonzero(index.mask(category=slot) & ~np.isnan(index.price))
    by_rating = rows[np.lexsort((index.price[rows], -index.rating[rows]))][:4 * _PER_SLOT]
    cheapest = rows[np.argsort(index.price[rows], kind="stable")][:4 * _PER_SLOT]
    picked: list[tuple[str, float, float]] = []
    for group in (by_rating, cheapest):
        live = [i for i in _live(catalog, [index.item_ids[int(r)] for r in group], True) if i.price is not None]
        picked += [(i.item_id, float(i.price or 0.0), i.rating or 0.0) for i in live[:_PER_SLOT]]
    return list({c[0]: c for c in picked}.values())


def fill_bundle(index: ShoppingIndex, catalog: Catalog, slots: Sequence[Sequence[str]],
                budget: float) -> tuple[list[str], float]:
    """One distinct item per slot maximising the total rating with total price <= ``budget``.

    Exact over the candidates of each slot (its best rated and its cheapest items): a Pareto front
    of partial bundles (price up, rating up) is extended slot by slot, pruning any partial bundle
    that cannot be finished within the budget. Returns ``(item ids in slot order, total price)``.
    """
    cands = [_slot_candidates(index, catalog, s) for s in slots]
    for slot, c in zip(slots, cands, strict=True):
        if not c:
            raise ToolError(f"no in-stock item with a price under {' > '.join(slot)}")
    cheapest = [min(p for _, p, _ in c) for c in cands]
    rest = [sum(cheapest[j + 1:]) for j in range(len(cands))]
    states: list[tuple[float, float, tuple[str, ...]]] = [(0.0, 0.0, ())]
    for j, slot_cands in enumerate(cands):
        grown = [(p + cp, r + cr, (*ids, cid)) for p, r, ids in states for cid, cp, cr in slot_cands
                 if cid not in ids and p + cp + rest[j] <= budget + 1e-9]
        states = _pareto(grown)
    if not states:
        raise ToolError(f"no bundle fits the budget {budget:g}: the cheapest items alone cost {sum(cheapest):.2f}")
    price, _, ids = max(states, key=lambda s: (s[1], -s[0]))
    return list(ids), price


def _pareto(states: list[tuple[float, float, tuple[str, ...]]]) -> list[tuple[float, float, tuple[str, ...]]]:
    """The partial bundles no cheaper one beats on rating, at most ``_MAX_STATES`` (evenly spread by price)."""
    front: list[tuple[float, float, tuple[str, ...]]] = []
    for s in sorted(states, key=lambda s: (s[0], -s[1])):
        if not front or s[1] > front[-1][1]:
            front.append(s)
    if len(front) > _MAX_STATES:
        front = [front[int(i)] for i in np.linspace(0, len(front) - 1, _MAX_STATES)]
    return front


# ------------------------------------------------------------------------------------------------ fallback
def _user_text(ctx: TurnContext) -> str:
    users = [m["content"] for m in conversation(ctx.session.messages) if m["role"] == "user"]
    return " ".join(users[-3:])


def _fallback_bundle(ctx: TurnContext) -> Final | None:
    slots, budget = ctx.constraints.get("slots"), ctx.constraints.get("budget")
    if not slots or not budget:
        return None
    try:
        ids, total = fill_bundle(_index(ctx), ctx.catalog, slots, float(budget))
    except ToolError as e:
        log.info("fallback bundle failed: %s", e)
        return None
    reply = f"Here is a bundle within your budget of {float(budget):g} (total {total:.2f})."
    return Final(reply=reply, bundles=[ids], actions=[{"type": "show_bundles", "bundles": [ids]}])


def _time_left(ctx: TurnContext) -> bool:
    """At least ``SID_FALLBACK_MIN_MS`` of the turn's budget left before its answer reserve: time for a fallback
    that does more than BM25."""
    budget = ctx.budget
    return not budget.expired() and budget.remaining_ms() - budget.reserve_ms > SID_FALLBACK_MIN_MS


def _fallback_ids(ctx: TurnContext, query: str) -> list[str]:
    """Candidates for the fallback: SID retrieval when the model has SIDs and time is left, else BM25."""
    cons = ctx.constraints
    model = ctx.model
    if model is not None and model.sid is not None and _time_left(ctx):
        try:
            flt = ItemFilter(in_stock=True, category_prefix=cons.get("category"), price_min=cons.get("price_min"),
                             price_max=cons.get("price_max"))
            messages = conversation(ctx.session.messages)
            ids = sid_search(model, messages, flt, 10) if messages else []
            if ids:
                return ids
        except Exception:  # the fallback must answer: any failure here falls through to BM25
            log.exception("SID retrieval failed in the fallback")
    index = _index(ctx)
    try:
        mask = index.mask(category=cons.get("category"), price_min=cons.get("price_min"),
                          price_max=cons.get("price_max"), in_stock=cons.get("in_stock", True))
    except ToolError:
        mask = index.mask(in_stock=True)
    scores = index.bm25.scores(query)
    # the words' best matches first, then the top rated under the filters (the caller checks every constraint)
    rows = np.concatenate([top_k(scores, 50, mask & (scores > 0)), top_k(index.rating, 500, mask)])
    return list(dict.fromkeys(index.item_ids[int(r)] for r in rows))


def _recover(ctx: TurnContext) -> Final | None:
    """The model wrote nothing usable but time is left: ``find`` with no arguments, grounded in the shopper's words
    (the leaf or department they name or mean, their price ceiling), as the model's own call would have been."""
    if not GROUND_WORDS or ctx.model is None or not _time_left(ctx):
        return None
    try:
        return find(FindArgs(), ctx)
    except Exception:  # the fallback must answer: any failure here falls through to retrieval
        log.exception("grounded find failed in the fallback")
        return None


def fallback(ctx: TurnContext, reason: str) -> Final:
    """Answer without free generation (step cap, deadline, no model): a bundle if the request is one; after an
    unreadable reply with time left, ``find`` grounded in the words; else the top items for the user's words
    under the request's constraints."""
    final = _fallback_bundle(ctx)
    if final is None and reason == "empty_reply":
        final = _recover(ctx)
    if final is None:
        query = _user_text(ctx)
        check = ctx.app.item_check or item_matches
        items = [i for i in _live(ctx.catalog, _fallback_ids(ctx, query), True) if check(i, ctx.constraints)]
        ids = [i.item_id for i in items[:FALLBACK_ITEMS]]
        short = query if len(query) <= 80 else query[:77] + "..."
        reply = (f"Here are some options for \"{short}\"." if ids
                 else "Sorry, I couldn't find a match. Could you tell me more about what you need?")
        final = Final(reply=reply, item_ids=ids, actions=[{"type": "show_items", "item_ids": ids}] if ids else [])
    final.data["fallback"] = reason
    return final


# ------------------------------------------------------------------------------------------------ the app
def shopping_app(catalog: Catalog, *, default_budget_ms: float = 3000.0, max_steps: int = 4) -> AppSpec:
    """The shopping agent over ``catalog``; builds the search index once (BM25 over every item's text)."""
    if not math.isfinite(default_budget_ms) or default_budget_ms <= 0 or max_steps < 1:
        raise ValueError("default_budget_ms must be > 0 and max_steps >= 1")
    return AppSpec(name="shopping", system_prompt=PLAN_PROMPT, tools=shopping_tools(), catalog=catalog,
                   fallback=fallback, resources=ShoppingIndex.build(catalog), item_check=item_matches,
                   default_budget_ms=default_budget_ms, max_steps=max_steps, prompt_tools=False)
