"""The shoppers' vocabulary, learnt from the training split and carried in the agent directory.

The catalog names its leaf categories the way its titles do ("rain jacket", "power bank"); shoppers say
"waterproof jacket", "portable battery", "cabin bag", and ask for "a self-care treat" without naming a kind
of product at all. Both are in the training tasks: each request with the category its answer key holds.
At the end of SFT the shopping kit learns from them (:func:`learn`) and writes ``vocabulary.json`` into the
agent directory (``SftSource.app_files``; RL carries it on); wherever the agent is loaded (serve, eval, RL
workers) the kit hands it to the catalog's index (:meth:`ShoppingIndex.adopt
<apps.shopping.agent.ShoppingIndex.adopt>`), which grounds ``find`` with it:

* ``leaf_names``: leaf -> the 1-3 word n-grams of training requests for that leaf that the catalog's own
  names miss: they end a phrase (before punctuation, a joining word, a price cue, ``size`` or the end:
  where the kind of product stands in "any olive portable battery below $100"), two words or more (a
  learnt single word, "battery", would claim words that are a facet elsewhere: "battery free water gun"),
  >= ``min_support`` requests for the leaf say them so, >= ``min_purity`` of all training requests that
  contain them are for that leaf; no
  brand, colour, material or size word (features may: "waterproof jacket"), no digit, no joining word at
  the start, not a name of a category above the leaves, not holding a name the catalog already has; of
  names holding one another the shortest;
* ``top_examples``: top-level category -> training requests whose answer key is only that department
  (vague requests); when every department has some, they join the department's name in its meaning
  prototype (a prior where only some departments have examples pulls requests towards those) (:class:`TopCategories
  <apps.shopping.grounding.TopCategories>`);
* ``bundles``: ``(request, slot leaves)`` of the training bundle requests ("stuff for our new puppy" ->
  dog bed, leash, collar, toy, food): ``find_bundle`` takes the slots of the closest one by meaning when it
  is close enough (:class:`Precedents <apps.shopping.grounding.Precedents>`), else the model's. A theme no
  training request had keeps the model's slots.

Held-out tasks never feed it: it is learnt from the SFT run's training tasks only.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apps.shopping.grounding import _JOINERS, _WORD, Lexicon
from data_curation.records import Session
from harness.catalog import Catalog
from harness.tasks import Task

VOCABULARY_FILE = "vocabulary.json"
_STOPS = frozenset("under below less than max maximum budget up no more most within cheaper not tops spend afford "
                   "size please thanks".split())
_FORMAT = "sidekick.shopping.vocabulary/1"


class VocabularyError(ValueError):
    """A vocabulary file that cannot be read (names the file and what is wrong)."""


@dataclass(frozen=True)
class Vocabulary:
    leaf_names: Mapping[str, Sequence[str]] = field(default_factory=dict)
    top_examples: Mapping[str, Sequence[str]] = field(default_factory=dict)
    bundles: Sequence[tuple[str, Sequence[str]]] = ()

    def to_json(self) -> str:
        return json.dumps({"format": _FORMAT, "leaf_names": {k: list(v) for k, v in sorted(self.leaf_names.items())},
                           "top_examples": {k: list(v) for k, v in sorted(self.top_examples.items())},
                           "bundles": [[text, list(slots)] for text, slots in self.bundles]}, indent=1)

    @classmethod
    def load(cls, path: Path) -> Vocabulary:
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise VocabularyError(f"{path}: cannot read the vocabulary: {e}") from e
        if not isinstance(raw, dict) or raw.get("format") != _FORMAT:
            raise VocabularyError(f"{path}: format {raw.get('format') if isinstance(raw, dict) else None!r}, "
                                  f"expected {_FORMAT!r}")
        out: dict[str, dict[str, list[str]]] = {}
        for key in ("leaf_names", "top_examples"):
            part = raw.get(key, {})
            if not isinstance(part, dict) or not all(
                    isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v)
                    for k, v in part.items()):
                raise VocabularyError(f"{path}: field {key!r} must map names to lists of strings")
            out[key] = part
        bundles = raw.get("bundles", [])
        if not isinstance(bundles, list) or not all(
                isinstance(b, list) and len(b) == 2 and isinstance(b[0], str) and isinstance(b[1], list)
                and b[1] and all(isinstance(x, str) for x in b[1]) for b in bundles):
            raise VocabularyError(f"{path}: field 'bundles' must list [request, [slot leaf, ...]] pairs")
        return cls(leaf_names=out["leaf_names"], top_examples=out["top_examples"],
                   bundles=[(text, list(slots)) for text, slots in bundles])


def _first_request(task: Task) -> str | None:
    return next((m.content for m in task.messages if m.role == "user" and m.content.strip()), None)


def searches(sessions: Iterable[Session], catalog: Catalog, *, min_share: float = 2 / 3) -> list[tuple[str, list[str]]]:
    """``(query, category path)`` for every logged search whose engaged items (click, cart, purchase before the
    next search) lie >= ``min_share`` in one leaf category of ``catalog``."""
    out: list[tuple[str, list[str]]] = []
    for session in sessions:
        query: str | None = None
        paths: Counter[tuple[str, ...]] = Counter()
        for event in [*session.events, None]:
            if event is None or event.type == "search":
                if query and paths:
                    (path, k), = paths.most_common(1)
                    if k >= min_share * sum(paths.values()):
                        out.append((query, list(path)))
                query, paths = (event.query if event is not None else None), Counter()
            elif event.type in ("click", "cart", "purchase") and event.item_id and query:
                item = catalog.get(event.item_id)
                if item is not None and item.category_path:
                    paths[tuple(item.category_path)] += 1
    return out


def learn(tasks: Iterable[Task], lexicon: Lexicon, paths: Sequence[Sequence[str]],
          queries: Iterable[tuple[str, list[str]]] = (), *, min_support: int = 2, min_purity: float = 0.9,
          max_examples: int = 400) -> Vocabulary:
    """The vocabulary of ``tasks`` (training tasks only) and of logged search ``queries`` (``(text, category
    path)``, see :func:`searches`) over the catalog whose ``lexicon`` and category ``paths`` are given (see
    the module docstring)."""
    leaf_of_path = {tuple(p): p[-1] for p in paths}
    above = {part.lower() for p in paths for part in p[:-1]}
    known = set(lexicon.leaf_of)
    banned = {w for key, vs in lexicon.values.items() if key != "feature" for v in vs for w in _WORD.findall(v)}
    per_leaf: dict[str, Counter[str]] = {}
    everywhere: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    tasks = [t for t in tasks if t.app == "shopping"]
    requests = [(_first_request(t), t.constraints.get("category")) for t in tasks]
    bundles: dict[str, list[str]] = {}
    for task in tasks:
        text, slots = _first_request(task), task.constraints.get("slots")
        if text and isinstance(slots, list) and slots and all(isinstance(s, list) and s for s in slots):
            bundles.setdefault(text, [str(s[-1]) for s in slots])
    for text, category in [*requests, *queries]:
        if text is None:
            continue
        words = _WORD.findall(text.lower())
        everywhere.update({" ".join(words[i:i + n]) for n in (1, 2, 3) for i in range(len(words) - n + 1)})
        if not isinstance(category, list) or not category:
            continue
        leaf = leaf_of_path.get(tuple(category))
        if leaf is not None:
            per_leaf.setdefault(leaf, Counter()).update(_phrase_ends(text))
        elif len(category) == 1:
            bucket = examples.setdefault(str(category[0]), [])
            if text not in bucket and len(bucket) < max_examples:
                bucket.append(text)
    names: dict[str, list[str]] = {}
    for leaf, counts in sorted(per_leaf.items()):
        found = []
        for gram, k in counts.items():
            words = gram.split()
            if len(words) < 2 or k < min_support or k < min_purity * everywhere[gram] or gram in above \
                    or any(w in banned or w.isdigit() for w in words) or words[0] in _JOINERS \
                    or any(_holds(gram, name) for name in known):
                continue
            found.append(gram)
        # the shortest pure names: "portable battery" makes "any portable battery" redundant
        kept = [g for g in sorted(found, key=lambda g: (len(g.split()), g))
                if not any(_holds(g, shorter) for shorter in found if shorter != g and len(shorter) < len(g))]
        if kept:
            names[leaf] = kept
    return Vocabulary(leaf_names=names, top_examples=examples, bundles=list(bundles.items())[:max_examples])


_BREAK = re.compile(r"[^\w\s'&-]|(?<![\w-])(?:" + "|".join(sorted(_JOINERS | _STOPS)) + r")(?![\w-])")


def _phrase_ends(text: str) -> set[str]:
    """The 1-3 word n-grams that end a phrase of ``text`` (phrases split at punctuation, joining words, price
    cues and ``size``)."""
    out: set[str] = set()
    for chunk in _BREAK.split(text.lower()):
        words = _WORD.findall(chunk)
        out.update(" ".join(words[-n:]) for n in (1, 2, 3) if len(words) >= n)
    return out


def _holds(gram: str, name: str) -> bool:
    """Whether the words of ``name`` appear, as whole words, in ``gram``."""
    return f" {name} " in f" {gram} "


def with_vocabulary(categories: Mapping[str, Iterable[str]], vocabulary: Vocabulary | None) -> dict[str, list[str]]:
    """The catalog's category names plus the learnt ones (leaf -> names)."""
    out = {leaf: list(names) for leaf, names in categories.items()}
    for leaf, names in (vocabulary.leaf_names.items() if vocabulary else ()):
        if leaf in out:
            out[leaf] = sorted(set(out[leaf]) | set(names))
    return out


def describe(vocabulary: Vocabulary) -> dict[str, Any]:
    """Counts for logs and manifests."""
    return {"leaf_names": sum(len(v) for v in vocabulary.leaf_names.values()),
            "top_examples": sum(len(v) for v in vocabulary.top_examples.values()), "bundles": len(vocabulary.bundles)}
