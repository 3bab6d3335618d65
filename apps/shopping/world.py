"""The shopping world: a seeded catalog, fulfilment tasks with ground truth, and raw PII-laden logs.

``sidekick world shopping --out DIR [--items N]`` writes into DIR:

- ``catalog.jsonl`` — ``Item`` records over a 3-level taxonomy (15 top categories, 211 leaves),
  with brands, colours, sizes, materials, features, prices, stock, ratings, and titles and
  descriptions that vary (synonyms, word order, casing, typos). A share of listings are
  near-duplicates: the same product listed again by another seller under another title.
- ``tasks.jsonl`` — ``Task`` records of five kinds: ``explicit``, ``attribute``, ``vague``,
  ``bundle`` and ``multi_turn`` (a clarification is needed: part of the constraints is ``hidden``).
  Constraint keys are documented in :mod:`apps.shopping.constraints`; every target id satisfies them.
- ``logs.jsonl`` — raw ``Session`` records (turns; search/view/click/cart/purchase events) whose
  free text carries customers' names, emails, phones, addresses, card numbers and order ids.
- ``private/pii_key.jsonl`` — where each piece of PII is (session, field, span, type, value);
  ``private/duplicates.jsonl`` — which listings are the same product. Answer keys for scoring
  curation; never training input.

Memory is bounded for any catalog size: items are generated and written in fixed chunks; what the
task generator needs is kept as a few numpy columns (about 30 bytes per item).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from apps.shopping import taxonomy as tx
from apps.shopping.pii import Customer, TextBuilder, add_pii_sentence, make_customers, make_order_id
from apps.worlds import Progress, finish_world, no_progress
from infra.layout import CATALOG_FILE, LOGS_FILE, PRIVATE_DIR, TASKS_FILE

CHUNK = 8192
"""Items are generated in chunks of this size; chunk k always uses the seed (seed, k)."""
START_TS = 1_735_689_600.0  # 2025-01-01T00:00:00Z
TASK_KINDS = ("explicit", "attribute", "vague", "bundle", "multi_turn")


class ShoppingWorldConfig(BaseModel):
    """How big and how noisy the shopping world is."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, ge=0, description="Everything is a function of this seed.")
    items: int = Field(default=20_000, ge=50, le=20_000_000, description="Catalog listings.")
    tasks: int = Field(default=2_000, ge=0, description="Fulfilment tasks (mixed kinds).")
    sessions: int = Field(default=5_000, ge=0, description="Raw log sessions.")
    customers: int = Field(default=1_500, ge=1, description="Distinct customers in the logs.")
    duplicate_rate: float = Field(
        default=0.12, ge=0, le=0.9, description="Share of listings that re-list another product (near-duplicates)."
    )
    typo_rate: float = Field(default=0.04, ge=0, le=1, description="Share of titles with a typo.")
    pii_rate: float = Field(default=0.35, ge=0, le=1, description="Share of sessions whose text leaks PII.")
    set_cap: int = Field(default=50, ge=1, description="Most ids listed per target slot (best rated first).")
    days: int = Field(default=180, ge=1, description="Days the logs span, from 2025-01-01.")


@dataclass(frozen=True)
class Leaf:
    index: int
    top: str
    mid: str
    names: tuple[str, ...]  # canonical noun first, then synonyms
    profile: tx.FacetProfile

    @property
    def path(self) -> list[str]:
        return [self.top, self.mid, self.names[0].capitalize()]


def build_leaves() -> list[Leaf]:
    leaves: list[Leaf] = []
    for top, mids in tx.TAXONOMY.items():
        for mid, nouns in mids.items():
            profile = tx.PROFILES[top]
            profile = replace(
                profile,
                sizes=tx.SIZE_OVERRIDES.get((top, mid), profile.sizes),
                materials=tx.MATERIAL_OVERRIDES.get((top, mid), profile.materials),
            )
            for spec in nouns:
                leaves.append(Leaf(len(leaves), top, mid, tuple(spec.split("|")), profile))
    return leaves


@dataclass
class Columns:
    """The facets of every item as numpy columns (what tasks are built from)."""

    leaf: np.ndarray  # (N,) int16
    brand: np.ndarray  # (N,) int16 index into BRANDS
    colour: np.ndarray  # (N,) int8 index into COLOURS
    material: np.ndarray  # (N,) int8 index into the leaf profile's materials
    size: np.ndarray  # (N,) int8 index into the profile's sizes, -1 = no size
    features: np.ndarray  # (N,) uint8 bitmask over the profile's features
    price: np.ndarray  # (N,) float64
    stock: np.ndarray  # (N,) int32
    rating: np.ndarray  # (N,) float32, nan = unrated
    product: np.ndarray  # (N,) int32 product id (near-duplicate listings share it)

    @classmethod
    def empty(cls, n: int) -> Columns:
        return cls(
            np.zeros(n, np.int16), np.zeros(n, np.int16), np.zeros(n, np.int8), np.zeros(n, np.int8),
            np.full(n, -1, np.int8), np.zeros(n, np.uint8), np.zeros(n, np.float64), np.zeros(n, np.int32),
            np.full(n, np.nan, np.float32), np.zeros(n, np.int32),
        )


def item_id(i: int) -> str:
    return f"sku-{i:07d}"


# --------------------------------------------------------------------------------------------
# Catalog
# --------------------------------------------------------------------------------------------
class _Tables:
    """Per-seed fixed tables: leaf popularity, brands carried per leaf, brand price/quality."""

    def __init__(self, seed: int, leaves: list[Leaf]) -> None:
        rng = np.random.default_rng([seed, 5])
        n = len(leaves)
        pop = 1.0 / (np.arange(n) + 5.0) ** 0.8
        self.leaf_cdf = np.cumsum(rng.permutation(pop) / pop.sum())
        self.brand_count = rng.integers(5, 11, size=n)
        self.leaf_brands = np.zeros((n, 10), np.int16)  # (L, 10) brands a leaf carries, padded
        for i in range(n):
            self.leaf_brands[i, : self.brand_count[i]] = rng.choice(len(tx.BRANDS), self.brand_count[i], replace=False)
        self.leaf_factor = np.exp(rng.normal(0, 0.5, size=n))
        self.brand_premium = np.exp(rng.normal(0, 0.25, size=len(tx.BRANDS)))
        self.brand_quality = rng.normal(0, 0.25, size=len(tx.BRANDS))
        self.n_materials = np.array([len(lf.profile.materials) for lf in leaves])
        self.n_sizes = np.array([len(lf.profile.sizes) for lf in leaves])
        self.n_features = np.array([len(lf.profile.features) for lf in leaves])
        self.median = np.array([lf.profile.price_median for lf in leaves]) * self.leaf_factor
        self.sigma = np.array([lf.profile.price_sigma for lf in leaves])


def _chunk_columns(k: int, n: int, seed: int, t: _Tables, dup_rate: float) -> Columns:
    """Facets for items [k*CHUNK, k*CHUNK+n), drawn from the chunk's own seed (vectorised)."""
    rng = np.random.default_rng([seed, 1, k])
    c = Columns.empty(n)
    leaf = np.minimum(np.searchsorted(t.leaf_cdf, rng.random(n)), len(t.leaf_cdf) - 1)
    c.leaf[:] = leaf
    c.brand[:] = t.leaf_brands[leaf, (rng.random(n) * t.brand_count[leaf]).astype(int)]
    c.colour[:] = rng.integers(0, len(tx.COLOURS), size=n)
    c.material[:] = (rng.random(n) * t.n_materials[leaf]).astype(int)
    c.size[:] = np.where(t.n_sizes[leaf] > 0, (rng.random(n) * t.n_sizes[leaf]).astype(int), -1)
    # Features: 0-2 distinct ones per item, a random subset of the leaf profile's features.
    nfeat = np.minimum(rng.choice(3, size=n, p=(0.3, 0.45, 0.25)), t.n_features[leaf])
    keys = rng.random((n, 8))  # (n, 8) random order over at most 8 profile features
    keys[np.arange(8)[None, :] >= t.n_features[leaf][:, None]] = np.inf
    order = np.argsort(keys, axis=1)
    chosen = np.arange(8)[None, :] < nfeat[:, None]  # (n, 8) the first nfeat of the random order
    c.features[:] = np.where(chosen, 1 << order, 0).sum(axis=1).astype(np.uint8)
    median = t.median[leaf] * t.brand_premium[c.brand]
    c.price[:] = _nice_prices(median * np.exp(rng.normal(0, 1, size=n) * t.sigma[leaf]))
    c.product[:] = k * CHUNK + np.arange(n)
    # Near-duplicates: re-list an earlier original of the same chunk, under another seller and title.
    dup = rng.random(n) < dup_rate
    dup[0] = False
    originals = np.flatnonzero(~dup)
    n_before: np.ndarray = np.cumsum(~dup) - (~dup)  # originals strictly before each position
    js = np.flatnonzero(dup)
    src = originals[(rng.random(len(js)) * n_before[js]).astype(int)]
    for col in (c.leaf, c.brand, c.colour, c.material, c.size, c.features, c.product):
        col[js] = col[src]
    c.price[js] = _nice_prices(c.price[src].astype(np.float64) * rng.uniform(0.88, 1.12, size=len(js)))
    c.stock[:] = np.where(rng.random(n) < 0.08, 0, rng.geometric(1 / 40, size=n))
    rating = np.clip(rng.normal(4.0 + t.brand_quality[c.brand], 0.45), 1.0, 5.0)
    c.rating[:] = np.where(rng.random(n) < 0.03, np.nan, np.round(rating, 1))
    return c


def _nice_prices(p: np.ndarray) -> np.ndarray:
    """Shop-style prices: x.99 from 10 up, x.49 below; at least 1.49."""
    p = np.maximum(p, 1.0)
    return np.round(np.floor(p) + np.where(p >= 10, 0.99, 0.49), 2)


def _typo(word: str, r: random.Random) -> str:
    if len(word) < 4:
        return word
    i = r.randrange(1, len(word) - 1)
    op = r.randrange(3)
    if op == 0:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]  # swap neighbours
    if op == 1:
        return word[:i] + word[i + 1 :]  # drop one
    return word[:i] + word[i] + word[i:]  # double one


def _colour_name(colour: str, r: random.Random) -> str:
    return tx.COLOUR_SYNONYMS[colour] if colour in tx.COLOUR_SYNONYMS and r.random() < 0.3 else colour


@dataclass
class Facets:
    """One item's facets as text."""

    leaf: Leaf
    brand: str
    colour: str
    material: str
    size: str | None
    features: list[str]


def facets_of(c: Columns, j: int, leaves: list[Leaf]) -> Facets:
    lf = leaves[int(c.leaf[j])]
    prof = lf.profile
    bits = int(c.features[j])
    return Facets(
        leaf=lf, brand=tx.BRANDS[int(c.brand[j])], colour=tx.COLOURS[int(c.colour[j])],
        material=prof.materials[int(c.material[j])],
        size=prof.sizes[int(c.size[j])] if c.size[j] >= 0 else None,
        features=[f for b, f in enumerate(prof.features) if bits >> b & 1],
    )


def make_title(f: Facets, r: random.Random, typo_rate: float) -> str:
    noun = r.choice(f.leaf.names)
    colour = _colour_name(f.colour, r)
    feat = f.features[0] if f.features else r.choice(tx.ADJECTIVES)
    size = f" size {f.size}" if f.size and r.random() < 0.5 else ""
    templates = (
        f"{f.brand} {r.choice(tx.ADJECTIVES)} {noun} - {colour.title()}{size}",
        f"{noun.capitalize()} by {f.brand} ({colour}, {f.material})",
        f"{f.brand} {feat} {noun}, {colour}{size}",
        f"{f.material.capitalize()} {noun.title()} | {f.brand} | {colour.title()}",
        f"{f.brand.upper()} {noun.upper()} {colour.upper()}{size.upper()}",
        f"{colour.capitalize()} {f.material} {noun} from {f.brand}",
        f"{f.brand} {noun.title()}{size} {colour}",
    )
    title = r.choice(templates)
    if r.random() < typo_rate:
        words = title.split(" ")
        k = r.randrange(len(words))
        words[k] = _typo(words[k], r)
        title = " ".join(words)
    return title


def _a(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def make_description(f: Facets, seller: str, r: random.Random) -> str:
    noun = r.choice(f.leaf.names)
    adj = r.choice(tx.ADJECTIVES)
    first = r.choice((
        f"The {f.brand} {noun} in {f.colour} is made from {f.material}.",
        f"{f.brand}'s {adj} {noun}, crafted in {f.material}.",
        f"{_a(adj).capitalize()} {adj} {noun} in {f.colour} {f.material} from {f.brand}.",
    ))
    parts = [first]
    if f.features:
        feats = " and ".join(f.features)
        parts.append(r.choice((f"It is {feats}.", f"Features: {', '.join(f.features)}.", f"Key points: {feats}.")))
    if f.size:
        parts.append(f"This listing is for size {f.size}.")
    parts.append(r.choice(("Great for everyday use.", "Customers love the build quality.",
                           "Backed by a 2-year warranty.", "Easy returns within 30 days.", "")))
    parts.append(f"Sold by {seller}.")
    return " ".join(p for p in parts if p)


def write_catalog(cfg: ShoppingWorldConfig, out: Path, leaves: list[Leaf], progress: Progress) -> Columns:
    """Stream the catalog to ``out/catalog.jsonl``; return the facet columns for task generation."""
    tables = _Tables(cfg.seed, leaves)
    cols = Columns.empty(cfg.items)
    dup_path = out / PRIVATE_DIR / "duplicates.jsonl"
    with (out / CATALOG_FILE).open("w", encoding="utf-8") as fh, dup_path.open("w", encoding="utf-8") as dh:
        for k, start in enumerate(range(0, cfg.items, CHUNK)):
            n = min(CHUNK, cfg.items - start)
            c = _chunk_columns(k, n, cfg.seed, tables, cfg.duplicate_rate)
            for name in Columns.__dataclass_fields__:
                getattr(cols, name)[start : start + n] = getattr(c, name)
            _write_chunk(fh, dh, c, start, cfg, leaves)
            progress(n)
    return cols


def _write_chunk(
    fh: TextIO, dh: TextIO, c: Columns, start: int, cfg: ShoppingWorldConfig, leaves: list[Leaf]
) -> None:
    r = random.Random(f"{cfg.seed}:titles:{start}")
    first_listing: dict[int, int] = {}
    lines = []
    for j in range(len(c.leaf)):
        f = facets_of(c, j, leaves)
        product = int(c.product[j])
        original = first_listing.setdefault(product, start + j)
        seller = tx.SELLERS[0] if original == start + j and r.random() < 0.5 else r.choice(tx.SELLERS[1:])
        attrs: dict[str, Any] = {"brand": f.brand, "colour": f.colour, "material": f.material}
        if f.size:
            attrs["size"] = f.size
        attrs["features"] = f.features
        attrs["seller"] = seller
        rating = float(c.rating[j])
        rec = {
            "item_id": item_id(start + j), "title": make_title(f, r, cfg.typo_rate),
            "description": make_description(f, seller, r), "category_path": f.leaf.path, "attributes": attrs,
            "price": float(c.price[j]), "currency": "USD", "stock": int(c.stock[j]),
            "rating": None if np.isnan(rating) else round(rating, 1),
        }
        lines.append(json.dumps(rec, ensure_ascii=False, separators=(",", ":")))
        if original != start + j:
            dh.write(json.dumps({"item_id": item_id(start + j), "same_product_as": item_id(original)}) + "\n")
    fh.write("\n".join(lines) + "\n")


# --------------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------------
class CatalogIndex:
    """Facet columns plus item positions per leaf and per top category, for fast constraint search."""

    def __init__(self, cols: Columns, leaves: list[Leaf]) -> None:
        self.cols = cols
        self.leaves = leaves
        order = np.argsort(cols.leaf, kind="stable")
        bounds = np.searchsorted(cols.leaf[order], np.arange(len(leaves) + 1))
        self.by_leaf = [order[bounds[i] : bounds[i + 1]] for i in range(len(leaves))]
        self.leaf_of = {(lf.top, lf.mid, lf.names[0]): lf.index for lf in leaves}
        tops: dict[str, list[int]] = {}
        for lf in leaves:
            tops.setdefault(lf.top, []).append(lf.index)
        self.top_leaves = tops

    def in_top(self, top: str) -> np.ndarray:
        return np.concatenate([self.by_leaf[i] for i in self.top_leaves[top]])

    def select(self, cand: np.ndarray, want: dict[str, int], feature_bits: int = 0,
               price_max: float | None = None) -> np.ndarray:
        """Items of ``cand`` in stock matching ``want`` (column -> index) and the price cap, best rated first."""
        c = self.cols
        mask = c.stock[cand] > 0
        for name, value in want.items():
            mask &= getattr(c, name)[cand] == value
        if feature_bits:
            mask &= (c.features[cand] & feature_bits) == feature_bits
        if price_max is not None:
            mask &= c.price[cand] <= price_max + 1e-6
        hits = cand[mask]
        rating = np.nan_to_num(c.rating[hits], nan=-1.0)
        return hits[np.lexsort((hits, -rating))]

    def random_in_stock(self, r: random.Random) -> int:
        n = len(self.cols.leaf)
        for _ in range(1000):
            j = r.randrange(n)
            if self.cols.stock[j] > 0:
                return j
        raise RuntimeError("catalog has almost no stock")


def _ids(hits: np.ndarray, cap: int) -> list[str]:
    return [item_id(int(j)) for j in hits[:cap]]


def _target(hits: np.ndarray, cap: int) -> dict[str, Any]:
    if len(hits) == 1:
        return {"kind": "single", "slots": [_ids(hits, 1)]}
    return {"kind": "set", "slots": [_ids(hits, cap)]}


def _want(cols: Columns, j: int, keys: list[str]) -> dict[str, int]:
    return {k: int(getattr(cols, k)[j]) for k in keys}


def _attr_constraints(f: Facets, keys: list[str]) -> dict[str, str]:
    values = {"brand": f.brand, "colour": f.colour, "material": f.material, "size": f.size}
    return {k: str(values[k]) for k in keys}


def _task_explicit(r: random.Random, ix: CatalogIndex, cap: int) -> dict[str, Any]:
    j = ix.random_in_stock(r)
    f = facets_of(ix.cols, j, ix.leaves)
    keys = ["brand", "colour", "material"] + (["size"] if f.size else [])
    noun = r.choice(f.leaf.names)
    size = f", size {f.size}" if f.size else ""
    text = r.choice((
        f"I'm looking for the {f.brand} {noun} in {f.colour}, {f.material}{size}.",
        f"Do you have {f.brand}'s {f.colour} {f.material} {noun}{size}?",
        f"{f.brand} {noun} {f.colour} {f.material}{size.replace(',', '')}",
        f"I want to buy {_a(f.colour)} {f.colour} {noun} from {f.brand}, the {f.material} one{size}.",
    ))
    hits = ix.select(ix.by_leaf[f.leaf.index], _want(ix.cols, j, keys))
    constraints = {"category": f.leaf.path, "attributes": _attr_constraints(f, keys), "in_stock": True}
    return {"messages": [text], "constraints": constraints, "target": _target(hits, cap)}


def _price_cap(price: float, r: random.Random) -> float:
    return float(np.ceil(price * r.uniform(1.0, 1.4) / 5.0) * 5.0)


def _task_attribute(r: random.Random, ix: CatalogIndex, cap: int) -> dict[str, Any]:
    j = ix.random_in_stock(r)
    f = facets_of(ix.cols, j, ix.leaves)
    options = ["colour", "material"] + (["size"] if f.size else []) + (["feature"] if f.features else [])
    chosen = r.sample(options, k=min(len(options), r.choice((1, 2))))
    feature = r.choice(f.features) if "feature" in chosen else None
    keys = [k for k in chosen if k != "feature"]
    pmax = _price_cap(float(ix.cols.price[j]), r)
    noun = r.choice(f.leaf.names)
    desc = " ".join(x for x in (feature, f.colour if "colour" in keys else None,
                                f.material if "material" in keys else None, noun) if x)
    size = f" in size {f.size}" if "size" in keys else ""
    text = r.choice((
        f"{desc}{size} under {pmax:g}",
        f"I need {desc}{size}, budget {pmax:g} dollars max",
        f"any {desc}{size} below ${pmax:g}?",
        f"Looking for {desc}{size} for no more than ${pmax:g}.",
    ))
    bits = 0
    if feature is not None:
        bits = 1 << f.leaf.profile.features.index(feature)
    hits = ix.select(ix.by_leaf[f.leaf.index], _want(ix.cols, j, keys), bits, pmax)
    constraints: dict[str, Any] = {"category": f.leaf.path, "attributes": _attr_constraints(f, keys),
                                   "price_max": pmax, "in_stock": True}
    if feature is not None:
        constraints["features"] = [feature]
    return {"messages": [text], "constraints": constraints, "target": _target(hits, cap)}


def _task_vague(r: random.Random, ix: CatalogIndex, cap: int) -> dict[str, Any]:
    j = ix.random_in_stock(r)
    top = ix.leaves[int(ix.cols.leaf[j])].top
    text = r.choice(tx.VAGUE_PHRASES[top])
    constraints: dict[str, Any] = {"category": [top], "in_stock": True}
    pmax = None
    if r.random() < 0.5:
        pmax = _price_cap(float(ix.cols.price[j]) * 1.5, r)
        text += r.choice((f", under {pmax:g}", f" for less than ${pmax:g}", f" (max {pmax:g} bucks)"))
        constraints["price_max"] = pmax
    hits = ix.select(ix.in_top(top), {}, 0, pmax)
    return {"messages": [text], "constraints": constraints, "target": _target(hits, cap)}


def _task_bundle(r: random.Random, ix: CatalogIndex, cap: int) -> dict[str, Any] | None:
    name = r.choice(sorted(tx.BUNDLES))
    phrase, slots = tx.BUNDLES[name]
    leaf_ids = [ix.leaf_of[s] for s in slots]
    in_stock = [ix.select(ix.by_leaf[i], {}) for i in leaf_ids]
    if any(len(h) == 0 for h in in_stock):
        return None
    medians = np.array([float(np.median(ix.cols.price[h])) for h in in_stock])
    budget = float(np.ceil(medians.sum() * r.uniform(1.1, 1.5) / 50.0) * 50.0)
    shares = budget * medians / medians.sum() * 1.5
    target_slots = []
    for hits, share in zip(in_stock, shares, strict=True):
        ok = hits[ix.cols.price[hits] <= share]
        target_slots.append(_ids(ok if len(ok) else hits[np.argsort(ix.cols.price[hits])][:5], cap))
    text = r.choice((f"I need {phrase}, total budget ${budget:g}",
                     f"Can you put together {phrase}? I can spend about {budget:g}.",
                     f"help me get {phrase} for under {budget:g} dollars"))
    constraints = {"budget": budget, "slots": [ix.leaves[i].path for i in leaf_ids], "in_stock": True}
    target = {"kind": "bundle", "slots": target_slots, "slot_names": [s[2] for s in slots]}
    return {"messages": [text], "constraints": constraints, "target": target, "meta": {"bundle": name}}


def _task_multi_turn(r: random.Random, ix: CatalogIndex, cap: int) -> dict[str, Any]:
    j = ix.random_in_stock(r)
    f = facets_of(ix.cols, j, ix.leaves)
    options = ["colour", "material", "brand"] + (["size"] if f.size else [])
    keys = r.sample(options, k=2)
    pmax = _price_cap(float(ix.cols.price[j]), r)
    hidden_attrs = _attr_constraints(f, keys)
    hidden: dict[str, Any] = {"attributes": hidden_attrs, "price_max": pmax}
    # The opening must not give a hidden value away (e.g. "cabin bag" when the size is "cabin").
    secret = {v.lower() for v in hidden_attrs.values()}
    nouns = [n for n in f.leaf.names if not secret & set(n.lower().split())] or list(f.leaf.names)
    noun = r.choice(nouns)
    text = r.choice((f"I need new {noun}", f"can you help me find {_a(noun)} {noun}?", f"looking for {noun}",
                     f"Hi! I want to buy {_a(noun)} {noun}."))
    constraints = {"category": f.leaf.path, **hidden, "in_stock": True}
    hits = ix.select(ix.by_leaf[f.leaf.index], _want(ix.cols, j, keys), 0, pmax)
    return {"messages": [text], "constraints": constraints, "hidden": hidden, "target": _target(hits, cap),
            "meta": {"clarify": [*keys, "price_max"]}}


_TASK_MAKERS = {"explicit": _task_explicit, "attribute": _task_attribute, "vague": _task_vague,
                "bundle": _task_bundle, "multi_turn": _task_multi_turn}
_TASK_WEIGHTS = (0.25, 0.25, 0.15, 0.15, 0.20)


def iter_tasks(cfg: ShoppingWorldConfig, ix: CatalogIndex) -> Iterator[dict[str, Any]]:
    """Task records (contract shape), deterministic for the seed."""
    r = random.Random(f"{cfg.seed}:tasks")
    for t in range(cfg.tasks):
        kind = r.choices(TASK_KINDS, weights=_TASK_WEIGHTS)[0]
        spec = _TASK_MAKERS[kind](r, ix, cfg.set_cap)
        while spec is None:  # a bundle whose leaves have no stock in a small catalog
            kind = r.choice(("explicit", "attribute"))
            spec = _TASK_MAKERS[kind](r, ix, cfg.set_cap)
        yield {
            "task_id": f"shop-t{t:06d}", "app": "shopping", "kind": kind,
            "messages": [{"role": "user", "content": m} for m in spec["messages"]],
            "constraints": spec["constraints"], "hidden": spec.get("hidden", {}),
            "target": spec["target"], "meta": spec.get("meta", {}),
        }


# --------------------------------------------------------------------------------------------
# Logs
# --------------------------------------------------------------------------------------------
@dataclass
class TaskBrief:
    """What a session needs of the task it acts out."""

    task_id: str
    text: str
    slots: list[tuple[int, list[str]]]  # per target slot: a leaf the shopper browses, item ids that fill it

    @property
    def leaf(self) -> int:
        return self.slots[0][0]

    @property
    def wanted(self) -> list[str]:
        return self.slots[0][1]


_ASSISTANT = ("Here are a few options for you.", "Sure! Take a look at these.", "I found some matches.",
              "These are popular right now.", "Do you have a size or colour in mind?")


def _session_turns(r: random.Random, rng: np.random.Generator, c: Customer, request: str,
                   ts: float, leak: bool) -> tuple[list[dict[str, Any]], list[tuple[int, TextBuilder]], float]:
    """User/assistant turns; PII sentences are mixed in when ``leak``. Returns turns, builders, end ts."""
    tb = TextBuilder()
    if leak and r.random() < 0.5:
        add_pii_sentence(tb, rng, c)
    tb.add(request)
    if leak and (not tb.spans or r.random() < 0.4):
        tb.add(" ")
        add_pii_sentence(tb, rng, c)
    turns = [{"role": "user", "text": tb.text().strip(), "ts": ts}]
    builders = [(0, tb)]
    ts += r.uniform(1, 4)
    turns.append({"role": "assistant", "text": r.choice(_ASSISTANT), "ts": round(ts, 3)})
    if leak and r.random() < 0.3:
        ts += r.uniform(10, 90)
        tb2 = TextBuilder().add(r.choice(("Thanks. ", "ok. ", "Great, ")))
        add_pii_sentence(tb2, rng, c)
        turns.append({"role": "user", "text": tb2.text().strip(), "ts": round(ts, 3)})
        builders.append((2, tb2))
    return turns, builders, ts


def _session_events(r: random.Random, ix: CatalogIndex, brief: TaskBrief | None, leaf: Leaf, query: str,
                    ts: float, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Search, then per target slot browse its leaf and maybe cart a wanted item; maybe buy what was carted.

    A bundle shopper browses every slot (fewer random items each) and may cart one item per slot."""
    events: list[dict[str, Any]] = [{"type": "search", "ts": round(ts, 3), "query": query}]
    slots = brief.slots if brief else [(leaf.index, [])]
    most = 6 if len(slots) == 1 else 3
    carted: list[str] = []
    for slot_leaf, slot_wanted in slots:
        pool = ix.by_leaf[slot_leaf]
        browse = [item_id(int(pool[r.randrange(len(pool))])) for _ in range(r.randint(1, most))] if len(pool) else []
        wanted = slot_wanted[:3]
        viewed = browse + [w for w in wanted if r.random() < 0.7]
        r.shuffle(viewed)
        for iid in viewed:
            ts += r.uniform(3, 120)
            events.append({"type": "view", "ts": round(ts, 3), "item_id": iid})
            if r.random() < 0.35:
                ts += r.uniform(1, 20)
                events.append({"type": "click", "ts": round(ts, 3), "item_id": iid})
        goal = [w for w in wanted if w in viewed]
        if goal and r.random() < 0.55:
            ts += r.uniform(5, 60)
            events.append({"type": "cart", "ts": round(ts, 3), "item_id": goal[0]})
            carted.append(goal[0])
    if carted and r.random() < 0.65:
        order = make_order_id(rng)
        for iid in carted:
            ts += r.uniform(20, 300)
            events.append({"type": "purchase", "ts": round(ts, 3), "item_id": iid, "order_id": order})
    return events


def _brief(task: dict[str, Any], ix: CatalogIndex) -> TaskBrief:
    """Every target slot with the leaf of its first item (a bundle has one slot per product it needs)."""
    slots = [(int(ix.cols.leaf[int(ids[0].split("-")[1])]), ids) for ids in task["target"]["slots"] if ids]
    return TaskBrief(task["task_id"], task["messages"][0]["content"], slots)


def _search_query(r: random.Random, leaf: Leaf, brief: TaskBrief | None) -> str:
    if brief is None or r.random() < 0.5:
        return r.choice(leaf.names)
    words = brief.text.rstrip("?.!").split()
    return " ".join(words[-min(len(words), r.randint(2, 5)) :])


def write_logs(cfg: ShoppingWorldConfig, out: Path, ix: CatalogIndex, briefs: list[TaskBrief],
               progress: Progress) -> dict[str, int]:
    """Write ``logs.jsonl`` and the PII answer key; return counts."""
    r = random.Random(f"{cfg.seed}:logs")
    rng = np.random.default_rng([cfg.seed, 3])
    customers = make_customers(cfg.customers, cfg.seed)
    weights = 1.0 / np.arange(1, len(customers) + 1) ** 0.6  # some customers come back often
    who = rng.choice(len(customers), size=cfg.sessions, p=weights / weights.sum())
    starts = np.sort(rng.uniform(START_TS, START_TS + cfg.days * 86400, size=cfg.sessions))
    counts = {"sessions": 0, "pii_spans": 0, "purchases": 0, "linked_to_task": 0}
    with (out / LOGS_FILE).open("w", encoding="utf-8") as fh, \
            (out / PRIVATE_DIR / "pii_key.jsonl").open("w", encoding="utf-8") as kh:
        for s in range(cfg.sessions):
            c = customers[int(who[s])]
            brief = r.choice(briefs) if briefs and r.random() < 0.7 else None
            leaf = ix.leaves[brief.leaf] if brief else ix.leaves[r.randrange(len(ix.leaves))]
            request = brief.text if brief else f"just browsing {r.choice(leaf.names)}"
            ts = round(float(starts[s]), 3)
            turns, builders, ts = _session_turns(r, rng, c, request, ts, r.random() < cfg.pii_rate)
            query = _search_query(r, leaf, brief)
            events = _session_events(r, ix, brief, leaf, query, ts + r.uniform(1, 5), rng)
            sid = f"shop-s{s:07d}"
            rec = {"session_id": sid, "user_id": c.customer_id, "app": "shopping",
                   "started_at": turns[0]["ts"], "turns": turns, "events": events,
                   "task_id": brief.task_id if brief else None}
            fh.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
            for turn_index, tb in builders:
                lead = len(tb.text()) - len(tb.text().lstrip())
                for sp in tb.spans:
                    kh.write(json.dumps({"session_id": sid, "field": f"turns[{turn_index}].text",
                                         "start": sp.start - lead, "end": sp.end - lead,
                                         "type": sp.type, "value": sp.value}, ensure_ascii=False) + "\n")
                    counts["pii_spans"] += 1
            counts["sessions"] += 1
            counts["purchases"] += sum(e["type"] == "purchase" for e in events)
            counts["linked_to_task"] += brief is not None
            progress(1)
    return counts


# --------------------------------------------------------------------------------------------
# The whole world
# --------------------------------------------------------------------------------------------
def generate_shopping_world(cfg: ShoppingWorldConfig, out: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Write a complete shopping world into ``out`` (created; existing world files are replaced)."""
    progress = progress or no_progress
    out.mkdir(parents=True, exist_ok=True)
    (out / PRIVATE_DIR).mkdir(exist_ok=True)
    leaves = build_leaves()
    cols = write_catalog(cfg, out, leaves, progress)
    ix = CatalogIndex(cols, leaves)
    briefs = []
    by_kind: dict[str, int] = {}
    with (out / TASKS_FILE).open("w", encoding="utf-8") as fh:
        for task in iter_tasks(cfg, ix):
            fh.write(json.dumps(task, ensure_ascii=False, separators=(",", ":")) + "\n")
            by_kind[task["kind"]] = by_kind.get(task["kind"], 0) + 1
            briefs.append(_brief(task, ix))
            progress(1)
    log_counts = write_logs(cfg, out, ix, briefs, progress)
    counts: dict[str, Any] = {
        "items": cfg.items, "products": len(np.unique(cols.product)),
        "leaves_used": len(np.unique(cols.leaf)), "tasks": cfg.tasks, "tasks_by_kind": by_kind,
        **log_counts,
    }
    finish_world(out, "shopping", cfg, counts)
    return counts
