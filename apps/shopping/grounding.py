"""Argument grounding: the filters ``find`` applies are the ones the shopper's words state.

Item ids a model writes are grounded against the catalog (:class:`harness.agent.Grounder`); the values it
writes into ``find`` and ``find_bundle`` arguments are grounded here against the conversation, the same
way: a value the shopper never said is not applied, a value they did say is. The model keeps what only
it can decide (which tool, the category a request means, whether to ask first, which words are a
price ceiling); the words decide the exact values:

* a facet (brand, colour, material, size, feature) is one of the catalog's own values, matched as whole
  words in the shopper's messages, longest first (``organic cotton`` before ``cotton``); sizes of two
  characters or digits only count after the word ``size`` (``size M``, ``size 42``), so ``I'm`` is no size M;
* a model's value the words do not contain is replaced by the value of that facet the words do contain,
  or dropped when they contain none; a facet the words contain and the model left out is added;
* the kind of product: the catalog's own names for each leaf category (the leaf's name, and the word
  n-grams of its items' titles that name it: frequent in its titles, >= 90 % of their uses there, no facet
  value or joining word inside, see :func:`category_names`), matched as whole words (a plural ``s`` too);
  a model's category the words contradict is replaced by the leaf they name, one they name and the model
  left out is added; words naming no leaf keep the model's category (a vague request: only it can tell);
  the words a category name claims are not read as facets (``denim jacket`` is no denim filter);
* words that name no leaf (a vague request: "a self-care treat") get the top-level category they are
  closest to by meaning when a ``top_of`` is given (the shopping app's: all-MiniLM-L6-v2 embeddings of the
  request and of each top-level category's name + its leaves' names, :class:`TopCategories`); the model's
  category is kept when it lies under that one (``changes["category"] = "semantic"`` otherwise);
* a price bound must be a number the shopper wrote (not part of a size); a wrong number is replaced by
  the one price the words give, or dropped; a ceiling the model left out is added when the words give one
  number after a ceiling cue ("under", "below", "max", "budget" ...). ``find_bundle``'s budget likewise.

:func:`ground_find` returns the grounded arguments and what changed (the ``find`` reply data carries it,
and eval counts it), so a model that writes its arguments right is visible as one that needs no fixing.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FACET_KEYS = ("brand", "colour", "material", "size", "feature")
_CUE_SIZE = re.compile(r"\bsize\s*$")
_NUMBER = re.compile(r"(?<![\w.-])\$?(\d+(?:[.,]\d+)?)(?![\w-]|[.,]\d)")
_CEILING = re.compile(r"\b(under|below|less than|max|maximum|budget|up to|no more than|at most|within|cheaper than|"
                      r"not over|tops|or less|spend|afford)\b", re.IGNORECASE)


_JOINERS = frozenset("a an and by for from in of on or the to with".split())
_WORD = re.compile(r"[a-z0-9][a-z0-9'&-]*")


def category_names(titles_by_leaf: Mapping[str, Sequence[str]], facet_values: Iterable[str], *,
                   reserved: Iterable[str] = (), min_share: float = 0.1,
                   min_precision: float = 0.9) -> dict[str, list[str]]:
    """Leaf name -> the names its items' titles give it: the leaf's own name (lower-cased), plus every 1-3 word
    n-gram in >= ``min_share`` of its titles and whose uses are >= ``min_precision`` in this leaf, with no facet
    value word and no joining word at either end, and one word only if of 4+ letters (``hiking boots``,
    ``trekking boots``; not ``boots by``). ``reserved``: names of the categories above the leaves, never a
    leaf's name (``office`` in "Vantage Office Chair" names the Office department, not office chairs)."""
    banned = {w for v in facet_values for w in _WORD.findall(v.lower())}
    taken = {r.strip().lower() for r in reserved}
    per_leaf: dict[str, Counter[str]] = {}
    everywhere: Counter[str] = Counter()
    for leaf, titles in titles_by_leaf.items():
        counts: Counter[str] = Counter()
        for title in titles:
            words = _WORD.findall(title.lower())
            counts.update({" ".join(words[i:i + n]) for n in (1, 2, 3) for i in range(len(words) - n + 1)})
        per_leaf[leaf] = counts
        everywhere.update(counts)
    out: dict[str, list[str]] = {}
    for leaf, counts in per_leaf.items():
        n = max(1, len(titles_by_leaf[leaf]))
        names = {leaf.lower()}
        for gram, k in counts.items():
            words = gram.split()
            if k >= min_share * n and k >= min_precision * everywhere[gram] and gram not in taken \
                    and words[0] not in _JOINERS \
                    and words[-1] not in _JOINERS and not any(w in banned or w.isdigit() for w in words) \
                    and (len(words) > 1 or len(gram) >= 4):  # "top" or "tee" alone names too little
                names.add(gram)
        out[leaf] = sorted(names)
    return out


def _pattern(value: str, plural: bool = False) -> re.Pattern[str]:
    return re.compile(r"(?<![\w-])" + re.escape(value) + (r"(?:e?s)?" if plural else "") + r"(?![\w-])")


@dataclass(frozen=True)
class Lexicon:
    """Every value of every facet the catalog has and every name of its leaf categories, lower-cased: what a
    shopper's words are matched against (key ``category`` maps a name to its leaf's name)."""

    values: Mapping[str, frozenset[str]]
    leaf_of: Mapping[str, str] = field(default_factory=dict)
    _patterns: dict[str, list[tuple[str, re.Pattern[str]]]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, values: Mapping[str, Iterable[str]], categories: Mapping[str, Iterable[str]] | None = None) -> Lexicon:
        clean = {k: frozenset(v.strip().lower() for v in vs if v and v.strip()) for k, vs in values.items()}
        leaf_of: dict[str, str] = {}
        for leaf, names in sorted((categories or {}).items()):
            for name in names:
                leaf_of.setdefault(name.strip().lower(), leaf)
        lex = cls(values=clean, leaf_of=leaf_of)
        # category names first (their words are not facets), each group longest first
        if leaf_of:
            names = sorted(leaf_of, key=lambda s: (-len(s), s))
            lex._patterns["category"] = [(v, _pattern(v, plural=True)) for v in names]
        for key, vs in clean.items():  # longest first, so "organic cotton" claims its words before "cotton"
            lex._patterns[key] = [(v, _pattern(v)) for v in sorted(vs, key=lambda s: (-len(s), s))]
        return lex

    def mentions(self, text: str) -> dict[str, list[str]]:
        """Key -> the values ``text`` states (first stated first; ``category``: leaf names); a span of words
        counts for one value only: a category name's first, then the longest that covers it."""
        low = text.lower()
        found: list[tuple[int, int, int, str, str]] = []  # (category first, -length, start, key, value)
        for key, patterns in self._patterns.items():
            for value, pattern in patterns:
                for m in pattern.finditer(low):
                    if key == "size" and (len(value) <= 2 or value.isdigit()) \
                            and not _CUE_SIZE.search(low[:m.start()]):
                        continue
                    found.append((key != "category", -(m.end() - m.start()), m.start(), key, value))
        taken: list[tuple[int, int]] = []
        out: dict[str, list[tuple[int, int, str]]] = {}
        for _, neg, start, key, value in sorted(found):
            end = start - neg
            if any(start < e and s < end for s, e in taken):
                continue
            taken.append((start, end))
            # categories: the longest name first ("top rated hiking boots" means boots), facets: first said first
            rank = neg if key == "category" else 0
            out.setdefault(key, []).append((rank, start, self.leaf_of[value] if key == "category" else value))
        return {k: list(dict.fromkeys(v for *_, v in sorted(vs))) for k, vs in out.items()}


_UNIT = re.compile(r"\s*(?:years?|yrs?|yo|months?|weeks?|days?|hours?|hrs?|kg|lbs?|cm|mm|inch(?:es)?|litres?|liters?|"
                   r"ml|l|pcs|pieces?|pack|people|persons?|kids|seats?|players?|watts?|w|mah|gb|tb|x)\b")
_CUE_NUMBER = re.compile(_CEILING.pattern + r"\s*(?:of\s+|about\s+|around\s+|roughly\s+)?\$?(\d+(?:[.,]\d+)?)"
                         r"(?![\w-]|[.,]\d)", re.IGNORECASE)


def prices(text: str, sizes: Sequence[str] = ()) -> list[float]:
    """Numbers ``text`` states that can be prices: not part of a size the text states (``size 42``, ``65L``)
    and not a count or measure (``a 7 year old``, ``2 people``, ``10000 mAh``)."""
    low = text.lower()
    out = []
    for m in _NUMBER.finditer(low):
        if _CUE_SIZE.search(low[:m.start()]) or m.group(1) in sizes or _UNIT.match(low, m.end()):
            continue
        out.append(float(m.group(1).replace(",", ".")))
    return out


def ceiling(text: str, sizes: Sequence[str] = ()) -> float | None:
    """The price ceiling ``text`` states: the number right after a ceiling cue ("under $50", "max 100 bucks",
    "budget of 700"), else its one price number when a cue is anywhere ("50 tops"); None otherwise."""
    numbers = prices(text, sizes)
    for m in _CUE_NUMBER.finditer(text):
        value = float(m.group(m.lastindex or 0).replace(",", "."))
        if any(_same(value, n) for n in numbers):
            return value
    return numbers[0] if len(numbers) == 1 and has_ceiling_cue(text) else None


def has_ceiling_cue(text: str) -> bool:
    return bool(_CEILING.search(text))


def _same(a: Any, b: float) -> bool:
    try:
        return abs(float(a) - b) < 1e-6
    except (TypeError, ValueError):
        return False


class TopCategories:
    """The top-level category a request is closest to by meaning: cosine similarity of sentence embeddings
    (``encode(texts) -> (N, D)`` L2-normalised rows) between the request and, per top-level category, a
    prototype: the embedding of its name and its leaves' names ("Beauty: cleanser, mascara, serum, ..."),
    plus the mean of those of the training requests that asked for it without naming a product kind
    (``examples``, learnt: :mod:`apps.shopping.vocabulary`). Thread-safe; the encoder runs on first use."""

    def __init__(self, leaves_by_top: Mapping[str, Iterable[str]], encoder: Callable[[], Any],
                 examples: Mapping[str, Sequence[str]] | None = None, example_weight: float = 1.0) -> None:
        self.names = sorted(leaves_by_top)
        self.example_weight = example_weight
        self._texts = [f"{top}: " + ", ".join(sorted(leaves_by_top[top])) for top in self.names]
        self._examples = {top: list((examples or {}).get(top, ())) for top in self.names}
        self._make = encoder
        self._encoder: Any = None
        self._vectors: Any = None
        self._lock = threading.Lock()

    def _prototypes(self) -> Any:
        """Per department: its names' embedding plus ``example_weight`` x the mean of its examples' (each part
        unit length; ``example_weight`` 1.0 chosen on the demo world's val split, where it beat names alone,
        0.82 -> 0.91, and the sum of every example's, which lets a department with many examples outvote)."""
        import numpy as np

        vectors = np.asarray(self._encoder.encode(self._texts), dtype=np.float32)
        for j, top in enumerate(self.names):
            if self._examples[top]:
                mean = np.asarray(self._encoder.encode(self._examples[top])).mean(axis=0)
                vectors[j] = vectors[j] + self.example_weight * mean / max(float(np.linalg.norm(mean)), 1e-12)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    def __call__(self, text: str) -> str | None:
        if not self.names or not text.strip():
            return None
        with self._lock:  # the prototypes once; queries run concurrently (the encoder gathers them)
            if self._encoder is None:
                self._encoder = self._make()
            if self._vectors is None:
                self._vectors = self._prototypes()
        query = self._encoder.encode([text])
        return self.names[int((query @ self._vectors.T).argmax())]


_NUMBERS = re.compile(r"\$?\d+(?:[.,]\d+)?")


class _ByMeaning:
    """Texts embedded on first use (thread-safe) and a request's cosine similarity to each (numbers left out:
    a budget is no part of what is asked). Queries are encoded concurrently: the encoder must be thread-safe
    (the agent's shared one is, :class:`infra.text_encoder.GatheringEncoder`)."""

    def __init__(self, texts: Sequence[str], encoder: Callable[[], Any]) -> None:
        self._texts = [_NUMBERS.sub(" ", t) for t in texts]
        self._make = encoder
        self._encoder: Any = None
        self._vectors: Any = None
        self._lock = threading.Lock()

    def _similarities(self, text: str) -> Any:
        with self._lock:
            if self._encoder is None:
                self._vectors = (encoder := self._make()).encode(self._texts)
                self._encoder = encoder
        query = self._encoder.encode([_NUMBERS.sub(" ", text)])
        return (query @ self._vectors.T)[0]


class Precedents(_ByMeaning):
    """The closest training request by meaning, and what it asked for: ``(text, answer)`` pairs. Used for
    bundle themes ("stuff for our new puppy" -> its slots)."""

    def __init__(self, pairs: Sequence[tuple[str, Any]], encoder: Callable[[], Any], min_similarity: float = 0.6):
        super().__init__([t for t, _ in pairs], encoder)
        self._answers = [a for _, a in pairs]
        self.min_similarity = min_similarity

    def __call__(self, text: str) -> tuple[Any, float] | None:
        """The answer of the closest request and its similarity, or None when none is >= ``min_similarity``."""
        if not self._texts or not text.strip():
            return None
        sims = self._similarities(text)
        best = int(sims.argmax())
        return (self._answers[best], float(sims[best])) if sims[best] >= self.min_similarity else None


class NearestDepartment(_ByMeaning):
    """The department (the level above the leaves) closest to a request by meaning, and its leaves: the slots of
    a bundle theme no training request had ("a small home gym" -> Fitness: yoga mat, dumbbells, kettlebell ...).

    A department reads as its name and its leaves ("Fitness: yoga mat, dumbbells, resistance bands, ..."): the
    leaves say what a bare name ("Gear", "Tools") does not. A theme asks for a kit of one kind of activity more
    often than for one kind of product, so the department is a better unit than the nearest leaves, which mix
    departments ("kit" -> seed kit, science kit). Departments with fewer than two leaves are no bundle. The
    department's leaves come back most similar first, at most ``max_slots`` of them."""

    def __init__(self, departments: Mapping[str, Sequence[str]], encoder: Callable[[], Any],
                 max_slots: int = 6) -> None:
        self.departments = {name: list(dict.fromkeys(leaves)) for name, leaves in departments.items()
                            if len(set(leaves)) >= 2}
        self.names = list(self.departments)
        self.leaves = [leaf for name in self.names for leaf in self.departments[name]]
        self.max_slots = max_slots
        described = [f"{name.split(' > ')[-1]}: {', '.join(self.departments[name])}" for name in self.names]
        super().__init__(described + self.leaves, encoder)

    def __call__(self, text: str) -> tuple[str, list[str]] | None:
        """``(department, its leaves)`` closest to ``text``, or None (no departments, or nothing asked)."""
        if not self.names or not text.strip():
            return None
        sims = self._similarities(text)
        best = int(sims[:len(self.names)].argmax())
        name = self.names[best]
        start = len(self.names) + sum(len(self.departments[n]) for n in self.names[:best])
        leaves = self.departments[name]
        order = sorted(range(len(leaves)), key=lambda j: -float(sims[start + j]))  # stable: ties keep catalog order
        return name, [leaves[j] for j in order[:self.max_slots]]


def ground_find(args: Mapping[str, Any], text: str, lexicon: Lexicon,
                covers: Callable[[Any, str], bool] | None = None,
                top_of: Callable[[str], str | None] | None = None,
                within: Callable[[Any, str], bool] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """``find`` arguments grounded in ``text`` (the shopper's messages), and ``{field: what changed}``.

    ``args`` maps FindArgs fields to values (None = not given). Changes are ``"added"``, ``"dropped"``
    or ``"replaced"`` (``"narrowed"``: the model's category holds the leaf the words name, e.g. Kitchen for
    mugs). ``covers(category, leaf)`` says whether a model's category holds a leaf (default: never);
    ``top_of(text)`` the top-level category of words that name no leaf, ``within(category, top)`` whether a
    model's category lies under that top-level one (default: never; see the module docstring).
    """
    out = dict(args)
    changes: dict[str, str] = {}
    said = lexicon.mentions(text)
    leaves = said.get("category", [])
    if leaves:
        given = out.get("category")
        if not (isinstance(given, str) and given.strip().lower() in {leaf.lower() for leaf in leaves}):
            held = [leaf for leaf in leaves if given is not None and covers is not None and covers(given, leaf)]
            out["category"] = (held or leaves)[0]
            changes["category"] = "added" if given is None else "narrowed" if held else "replaced"
    elif top_of is not None and (top := top_of(text)) is not None:
        given = out.get("category")
        if given is None or within is None or not within(given, top):
            out["category"] = top
            changes["category"] = "semantic"
    for key in FACET_KEYS:
        given = out.get(key)
        stated = said.get(key, [])
        if given is not None and str(given).strip().lower() in stated:
            continue
        if stated:
            out[key] = stated[0]
            changes[key] = "replaced" if given is not None else "added"
        elif given is not None:
            out[key] = None
            changes[key] = "dropped"
    numbers = prices(text, said.get("size", []))
    cap = ceiling(text, said.get("size", []))
    for key in ("price_min", "price_max"):
        given = out.get(key)
        if given is None or any(_same(given, n) for n in numbers):
            continue
        others = [n for n in numbers if not any(_same(out.get(k), n) for k in ("price_min", "price_max"))]
        if key == "price_max" and cap is not None and any(_same(cap, n) for n in others):
            out[key] = cap
            changes[key] = "replaced"
        elif len(others) == 1:
            out[key] = others[0]
            changes[key] = "replaced"
        else:
            out[key] = None
            changes[key] = "dropped"
    if out.get("price_max") is None and out.get("price_min") is None and cap is not None:
        out["price_max"] = cap
        changes["price_max"] = "added"
    return out, changes


def ground_budget(budget: float | None, text: str, lexicon: Lexicon) -> tuple[float | None, str | None]:
    """A bundle's budget grounded in ``text``: kept when stated, else the ceiling the words give (or their one
    price number; ``"added"`` when the model wrote none), else None."""
    sizes = lexicon.mentions(text).get("size", [])
    numbers = prices(text, sizes)
    if budget is not None and any(_same(budget, n) for n in numbers):
        return budget, None
    cap = ceiling(text, sizes)
    if cap is None and len(numbers) == 1:
        cap = numbers[0]
    if cap is not None:
        return cap, "added" if budget is None else "replaced"
    return None, "dropped"
