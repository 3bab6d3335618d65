"""Baseline rankers of offline evaluation: popularity, BM25 and dense (MiniLM + faiss) over catalog items.

    pop = Popularity.from_sequences(item_ids, train_sequences)          # or Popularity.from_logs(item_ids, logs)
    bm25 = Bm25Ranker(items)                                            # Okapi BM25 over sid.build.item_text
    dense = DenseRanker(items, cache_dir=settings.cache_dir)            # MiniLM item vectors, faiss flat IP
    bm25.rank(Query(text="a tent for two"), k=10)                       # item ids, best first
    rankers = build_baselines(["popularity", "bm25", "dense"], world)   # for eval.run's (task, k) -> ids

Every ranker answers a :class:`Query` (free text, the user's history oldest first, and ids never to
return) with up to ``k`` catalog item ids, best first. Ranking is full: every catalog item is a
candidate except ``query.exclude`` (callers put the user's history there, the standard protocol of
leave-one-out next-item benchmarks). Ties are broken by catalog order (the order of ``item_ids`` /
``items`` given at construction), so the same inputs always give the same list.

SASRec, the sequential baseline, lives in :mod:`eval.sasrec` (it trains through RecBole).
:func:`task_ranker` adapts any ranker to the ``(task, k) -> ids`` shape of :data:`eval.run.Ranker`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from data_curation.records import ITEM_EVENTS
from harness.bm25 import BM25, top_k
from harness.catalog import Catalog, Item
from harness.tasks import Task
from sid.build import find_catalog, item_text

BASELINE_NAMES = ("popularity", "bm25", "dense")
"""What :func:`build_baselines` builds from a world directory (SASRec needs sequences: :mod:`eval.sasrec`)."""


class BaselineError(ValueError):
    """A baseline that cannot be built from what it was given (unknown name, no catalog, no logs)."""


@dataclass(frozen=True)
class Query:
    """What a ranker is asked: free ``text`` (the user's words), their ``history`` (item ids, oldest first)
    and ``exclude`` (item ids never to return, e.g. the history)."""

    text: str = ""
    history: tuple[str, ...] = ()
    exclude: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of_task(cls, task: Task, history: Sequence[str] = (), exclude_history: bool = True) -> Query:
        """The task's user turns as text; ``history`` as given, excluded from the answer by default."""
        text = "\n".join(m.content for m in task.messages if m.role == "user")
        return cls(text=text, history=tuple(history), exclude=frozenset(history) if exclude_history else frozenset())


class Ranker(Protocol):
    """A baseline: ``rank(query, k)`` -> up to ``k`` item ids, best first, none of ``query.exclude``."""

    name: str

    def rank(self, query: Query, k: int) -> list[str]: ...


def task_ranker(ranker: Ranker, histories: Mapping[str, Sequence[str]] | None = None
                ) -> Callable[[Task, int], list[str]]:
    """``ranker`` as ``(task, k) -> ids`` (:data:`eval.run.Ranker`). With ``histories`` (user id -> item ids,
    oldest first) a task whose ``meta["user_id"]`` is there gets that history (and never its items back)."""

    def rank(task: Task, k: int) -> list[str]:
        user = task.meta.get("user_id")
        history = histories.get(str(user), ()) if histories is not None and user is not None else ()
        return ranker.rank(Query.of_task(task, history), k)

    return rank


class _Catalogued:
    """Shared by the rankers: the candidate ids in catalog order and a row mask for a query's exclusions."""

    def __init__(self, item_ids: Sequence[str]) -> None:
        self.item_ids = list(item_ids)
        self.row = {item_id: r for r, item_id in enumerate(self.item_ids)}
        if len(self.row) != len(self.item_ids):
            raise BaselineError("duplicate item ids in the candidate list")

    def _mask(self, exclude: Iterable[str]) -> np.ndarray | None:
        """(N,) bool, False on excluded rows; None when nothing is excluded."""
        rows = [self.row[i] for i in exclude if i in self.row]
        if not rows:
            return None
        mask = np.ones(len(self.item_ids), bool)
        mask[rows] = False
        return mask

    def _ranked(self, scores: np.ndarray, k: int, exclude: Iterable[str]) -> list[str]:
        """Top ``k`` ids by ``scores`` (N,), ties by catalog order, skipping ``exclude``."""
        return [self.item_ids[int(r)] for r in top_k(scores, k, self._mask(exclude))]


class Popularity(_Catalogued):
    """Most-interacted items first: counts of item events (view, click, cart, purchase, rate) in training logs."""

    name = "popularity"

    def __init__(self, item_ids: Sequence[str], counts: Mapping[str, float]) -> None:
        super().__init__(item_ids)
        self.scores = np.array([float(counts.get(i, 0.0)) for i in self.item_ids], np.float64)  # (N,)

    @classmethod
    def from_sequences(cls, item_ids: Sequence[str], sequences: Iterable[Sequence[str]]) -> Popularity:
        """Counts over interaction sequences (e.g. each user's training items): one per occurrence."""
        counts: dict[str, float] = {}
        for seq in sequences:
            for item in seq:
                counts[item] = counts.get(item, 0.0) + 1.0
        return cls(item_ids, counts)

    @classmethod
    def from_logs(cls, item_ids: Sequence[str], logs: Path, events: Iterable[str] = ITEM_EVENTS) -> Popularity:
        """Counts of ``events`` (default: every item event) in a ``logs.jsonl`` of sessions.

        Reads only event types and item ids; a line that is not a JSON object is skipped (logs are
        validated upstream, e.g. by ``sidekick validate`` or curation).
        """
        wanted = set(events)
        counts: dict[str, float] = {}
        with Path(logs).open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    session = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if not isinstance(session, dict):
                    continue
                for e in session.get("events", []):
                    item = e.get("item_id")
                    if item is not None and e.get("type") in wanted:
                        counts[item] = counts.get(item, 0.0) + 1.0
        return cls(item_ids, counts)

    def rank(self, query: Query, k: int) -> list[str]:
        return self._ranked(self.scores, k, query.exclude)


class Bm25Ranker(_Catalogued):
    """Okapi BM25 (k1 = 1.2, b = 0.75; :mod:`harness.bm25`) of ``query.text`` against each item's text
    (:func:`sid.build.item_text`: title, category path, attributes). No query word in the catalog: no items."""

    name = "bm25"

    def __init__(self, items: Sequence[Item]) -> None:
        super().__init__([i.item_id for i in items])
        self.index = BM25([item_text(i) for i in items])

    def rank(self, query: Query, k: int) -> list[str]:
        return [self.item_ids[int(r)] for r in self.index.search(query.text, k, self._mask(query.exclude))]


class DenseRanker(_Catalogued):
    """Cosine similarity of MiniLM embeddings (all-MiniLM-L6-v2, :mod:`infra.text_encoder`), exact search
    with a faiss flat inner-product index over the L2-normalised item vectors.

    The query vector is, by ``query_from``: ``"text"`` = the embedding of ``query.text``; ``"history"`` = the
    normalised mean of the item vectors of the last ``history_items`` history items (the text when the
    history is empty or unknown).
    """

    name = "dense"

    def __init__(self, items: Sequence[Item], *, query_from: Literal["text", "history"] = "text",
                 history_items: int = 5, cache_dir: Path | None = None, vectors: np.ndarray | None = None) -> None:
        import faiss

        from infra.text_encoder import TextEncoder, encode_cached

        super().__init__([i.item_id for i in items])
        if history_items < 1:
            raise BaselineError(f"history_items must be >= 1, got {history_items}")
        self.query_from, self.history_items = query_from, history_items
        self._encoder: TextEncoder | None = None
        self._text_vectors: dict[str, np.ndarray] = {}  # query text -> (D,), filled by prepare()
        if vectors is None:
            self._encoder = TextEncoder()
            vectors = encode_cached([item_text(i) for i in items], cache_dir, self._encoder)
        if vectors.shape[0] != len(self.item_ids):
            raise BaselineError(f"vectors {vectors.shape} do not match {len(self.item_ids)} items")
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)  # (N, D)
        self.index = faiss.IndexFlatIP(self.vectors.shape[1])
        self.index.add(self.vectors)

    def query_vector(self, query: Query) -> np.ndarray | None:
        """(D,) float32 unit vector for ``query``; None when it has neither usable history nor text."""
        if self.query_from == "history":
            rows = [self.row[i] for i in query.history[-self.history_items:] if i in self.row]
            if rows:
                v = self.vectors[rows].mean(axis=0)
                norm = float(np.linalg.norm(v))
                return (v / norm if norm > 0 else v).astype(np.float32)
        if not query.text.strip():
            return None
        if query.text in self._text_vectors:
            return self._text_vectors[query.text]
        return self._encode([query.text])[0]

    def prepare(self, queries: Iterable[Query]) -> None:
        """Embed the texts of ``queries`` in batches now (many times faster than one by one as ``rank`` is
        called); ``rank`` then looks them up."""
        texts = sorted({q.text for q in queries if q.text.strip()} - set(self._text_vectors))
        if texts:
            self._text_vectors.update(zip(texts, self._encode(texts), strict=True))

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if self._encoder is None:
            from infra.text_encoder import TextEncoder

            self._encoder = TextEncoder()
        return self._encoder.encode(list(texts))  # (len(texts), D)

    def rank(self, query: Query, k: int) -> list[str]:
        q = self.query_vector(query)
        if q is None or k <= 0:
            return []
        excluded = sum(1 for i in query.exclude if i in self.row)
        want = min(len(self.item_ids), k + excluded)
        scores, rows = self.index.search(q[None, :], want)  # (1, want) each
        pairs = sorted((-float(s), int(r)) for s, r in zip(scores[0], rows[0], strict=True) if r >= 0)
        out = [self.item_ids[r] for _, r in pairs if self.item_ids[r] not in query.exclude]
        return out[:k]


def build_baselines(names: Sequence[str], world: Path, logs: Path | None = None, *, cache_dir: Path | None = None,
                    dense_query_from: Literal["text", "history"] = "text") -> dict[str, Ranker]:
    """Rankers by name (:data:`BASELINE_NAMES`) over the catalog of a world or curated directory.

    Popularity counts the item events of ``logs`` (default: the directory's ``train/logs.jsonl``, else its
    ``logs.jsonl``); pass training logs only, or the counts see the answers.
    """
    unknown = [n for n in names if n not in BASELINE_NAMES]
    if unknown:
        hint = " (SASRec trains on sequences: eval.sasrec.train_sasrec)" if "sasrec" in unknown else ""
        raise BaselineError(f"unknown baseline(s) {', '.join(unknown)}: choose from {', '.join(BASELINE_NAMES)}{hint}")
    catalog_path, found_logs = find_catalog(world)
    catalog, _ = Catalog.load(catalog_path)
    items = list(catalog)
    out: dict[str, Ranker] = {}
    for name in names:
        if name == "popularity":
            source = logs or found_logs
            if source is None:
                raise BaselineError(f"popularity needs logs: {world} has no train/logs.jsonl or logs.jsonl")
            out[name] = Popularity.from_logs(catalog.ids(), source)
        elif name == "bm25":
            out[name] = Bm25Ranker(items)
        else:
            out[name] = DenseRanker(items, query_from=dense_query_from, cache_dir=cache_dir)
    return out
