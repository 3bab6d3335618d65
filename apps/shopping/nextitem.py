"""Next item on the shopping world's logs: the SID generative recommender against SASRec, from a curated directory.

    data = load_next_item(Path("runs/c"))                      # `sidekick curate … ` output, split.mode: time
    report = compare_next_item(data, NextItemConfig(quick=True), progress=print)
    print(format_table(report))                                # python bench/genrec_shopping.py runs all of it

The task: in a shopping session, which item does the shopper click, cart or buy next, given what they clicked,
carted and bought earlier in the session?

Data (:func:`load_next_item`; a curated directory has ``catalog.jsonl`` and ``{train,val,test}/logs.jsonl``):

- **context events**: click, cart and purchase (:data:`CASE_EVENTS`). Views are left out by default
  (``views=True`` puts them in): they are the search result impressions, and in these logs a shopper only
  clicks, carts or buys an item after viewing it, so with views every target is already in its history (100 %,
  81 % the very last event) and the task is copying;
- **training timelines**: per user of the train split, the context events' items of their sessions in start
  time order (ties in file order), concatenated;
- **test cases**: per session of the test split, every click / cart / purchase with at least one context
  event before it in that session: history = those earlier items, target = its item. With ``split.mode: time``
  the test sessions are the latest ones and their users' earlier sessions were dropped by curation, so test
  is held out by user and by time, and a test history is the session itself.

Comparison (:func:`compare_next_item`; the data are item ids, nothing here is shopping-specific):

- **split of the training timelines** (RecBole's leave-one-out, which SASRec uses internally): a timeline
  ``i_1 … i_n`` (n >= 3) trains on ``i_1 … i_{n-2}`` and validates on ``i_{n-1}`` (its last item is RecBole's own
  test item, unused here); shorter ones train on ``i_1`` only. Both models train on exactly these items, with the
  same context length, and keep their best epoch by validation NDCG@10 (SASRec: RecBole; SID:
  :func:`training.genrec.fit_sid_rec`, which masks history items in validation, so only targets that are new to
  their history count there);
- **methods**: ``popularity`` (context-event counts in the training items), ``repeat-last`` (the history's
  last item, then its earlier items newest first, then popularity), ``sasrec`` (:mod:`eval.sasrec`) and ``sid``
  (:mod:`training.genrec`: codes from the embeddings of an item-id model trained on the training items, balanced
  residual k-means, then the SID model);
- **ranking**: every catalog item is a candidate, history items included (repeats are real: click, cart, then
  buy one item), ties by catalog order; HR@k, NDCG@k and MRR (full rank) per case, averaged over cases. Reported
  beside them: the share of targets already in their history, the metrics on *new-item* targets (not in the
  history) and on targets the training items never hold. SASRec scores only items in its vocabulary (the items
  of the timelines it was given); the SID model scores every catalog item, since it needs only the item's codes;
- **paired bootstrap** (:func:`eval.stats.paired_bootstrap`) of ``sid - sasrec`` over test sessions: a
  session's cases are averaged first, so a long session does not count as many independent draws.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from data_curation.records import Session
from data_curation.split import SPLITS
from eval.sasrec import SasRecConfig, SasRecRanker, train_sasrec
from eval.stats import excludes_zero, paired_bootstrap
from harness.catalog import Catalog
from infra.layout import CATALOG_FILE, LOGS_FILE
from infra.recordio import RecordReader
from infra.threads import torch_threads
from sid.build import item_text as catalog_item_text
from training.genrec import SidCodesConfig, SidRec, SidRecConfig

CASE_EVENTS: tuple[str, ...] = ("click", "cart", "purchase")
"""The events that are test targets, and (with views, when asked) the context of a history."""
Method = Literal["popularity", "repeat-last", "sasrec", "sid"]
METHODS: tuple[Method, ...] = ("popularity", "repeat-last", "sasrec", "sid")
"""Every method, in table order."""
PAIR = ("sid", "sasrec")
"""The paired comparison: ``sid - sasrec``."""

Progress = Callable[[str], None]


class NextItemError(ValueError):
    """A curated directory or setting the next-item comparison cannot use (the message says where and what)."""


# ------------------------------------------------------------------------------------------------ data
@dataclass(frozen=True)
class Case:
    """One test case: the session's earlier context items (oldest first) and the item of the event after them."""

    session_id: str
    history: tuple[str, ...]
    target: str
    event: str
    """click, cart or purchase."""


@dataclass
class NextItemData:
    """Training timelines (train split) and test cases (test split) of a curated directory."""

    item_ids: list[str]
    """The catalog's item ids in file order: the candidates, and the row of each item in score matrices."""
    timelines: dict[str, list[str]]
    """Train-split user -> context items of their sessions, oldest first (users without any are left out)."""
    test: list[Case]
    views: bool
    counts: dict[str, int] = field(default_factory=dict)
    item_texts: list[str] = field(default_factory=list)
    """Each item's text (:func:`sid.build.item_text`: title, brand, category, attributes), in ``item_ids``
    order: what ``sid_codes.source: text`` embeds."""


def context_events(session: Session, views: bool) -> list[tuple[str, str]]:
    """(event type, item id) of the session's context events in order: click / cart / purchase, and views when
    ``views``."""
    kinds = {*CASE_EVENTS, "view"} if views else set(CASE_EVENTS)
    return [(e.type, e.item_id) for e in session.events if e.type in kinds and e.item_id is not None]


def _sessions(path: Path, catalog: Catalog, views: bool) -> Iterator[tuple[Session, list[tuple[str, str]]]]:
    """Each session of ``path`` with its context events; an item that is not in the catalog is an error that
    names the file and line."""
    if not path.is_file():
        raise NextItemError(f"{path}: not found (a curated directory from `sidekick curate` has "
                            f"{'/'.join(SPLITS)}/{LOGS_FILE})")
    reader = RecordReader(path, Session, allow_empty=True)
    for session in reader:
        events = context_events(session, views)
        for j, (kind, item) in enumerate(events):
            if item not in catalog:
                raise NextItemError(f"{path}:{reader.last_line}: session {session.session_id!r}, {kind} event "
                                    f"{j}: item {item!r} is not in the catalog")
        yield session, events


def load_timelines(path: Path, catalog: Catalog, views: bool = False) -> dict[str, list[str]]:
    """User -> the context items of their sessions in ``path``, sessions by start time (ties in file order),
    users in order of first appearance; users with no context event are left out."""
    by_user: dict[str, list[tuple[float, int, list[str]]]] = {}
    for n, (session, events) in enumerate(_sessions(path, catalog, views)):
        if events:
            by_user.setdefault(session.user_id, []).append((session.started_at, n, [i for _, i in events]))
    return {user: [i for _, _, items in sorted(rows) for i in items] for user, rows in by_user.items()}


def load_cases(path: Path, catalog: Catalog, views: bool = False) -> list[Case]:
    """Every click / cart / purchase of the sessions in ``path`` with at least one context event before it in
    its session, in file and event order."""
    cases: list[Case] = []
    for session, events in _sessions(path, catalog, views):
        for j, (kind, item) in enumerate(events):
            if j > 0 and kind in CASE_EVENTS:
                cases.append(Case(session.session_id, tuple(i for _, i in events[:j]), item, kind))
    return cases


def load_next_item(curated: Path, views: bool = False) -> NextItemData:
    """Training timelines from ``curated/train``, test cases from ``curated/test`` (see the module docstring).
    Raises :class:`NextItemError` for a directory it cannot use, :class:`infra.recordio.RecordError` (file:line,
    field) for a malformed record."""
    if not (curated / CATALOG_FILE).is_file():
        raise NextItemError(f"{curated}: no {CATALOG_FILE} (expected a curated directory: "
                            f"`sidekick curate WORLD --out {curated}`)")
    catalog, _ = Catalog.load(curated / CATALOG_FILE)
    timelines = load_timelines(curated / "train" / LOGS_FILE, catalog, views)
    if not any(len(t) >= 3 for t in timelines.values()):
        raise NextItemError(f"{curated / 'train' / LOGS_FILE}: no user has 3 or more context events (click, cart, "
                            "purchase): nothing to train and validate on")
    test = load_cases(curated / "test" / LOGS_FILE, catalog, views)
    if not test:
        raise NextItemError(f"{curated / 'test' / LOGS_FILE}: no test case (a click, cart or purchase after an "
                            "earlier context event of its session)")
    counts = {"items": len(catalog), "train_users": len(timelines),
              "train_events": sum(len(t) for t in timelines.values()), "test_cases": len(test),
              "test_sessions": len({c.session_id for c in test})}
    return NextItemData(catalog.ids(), timelines, test, views, counts, [catalog_item_text(i) for i in catalog])


def training_part(timeline: Sequence[str]) -> list[str]:
    """What both models train on from a timeline: all but the last two items (validation and RecBole's test
    item); a timeline of 1 or 2 items keeps its first (RecBole's leave-one-out split)."""
    return list(timeline[:max(1, len(timeline) - 2)])


# ------------------------------------------------------------------------------------------------ config
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "quick": {"sasrec": {"epochs": 8, "stopping_step": 3}, "sid": {"epochs": 8, "patience": 3},
              "sid_codes": {"pretrain_epochs": 5}},
    "full": {"sasrec": {"epochs": 60, "stopping_step": 10}, "sid": {"epochs": 60, "patience": 10},
             "sid_codes": {"pretrain_epochs": 20}},
}
"""Training length per mode, for the fields of ``sasrec`` / ``sid`` / ``sid_codes`` a config leaves unset."""


class NextItemConfig(BaseModel):
    """The next-item comparison: methods, cut-off, shared context length, both models' settings."""

    model_config = ConfigDict(extra="forbid")

    quick: bool = Field(default=False, description="Short training (PRESETS['quick']) instead of "
                        "PRESETS['full']; fields set explicitly under sasrec / sid / sid_codes win.")
    methods: list[Method] = Field(default_factory=lambda: list(METHODS), min_length=1,
                                  description="Methods to run (default: all, see METHODS).")
    k: int = Field(default=10, ge=1, description="Cut-off of HR@k and NDCG@k (default 10).")
    context_items: int = Field(default=20, ge=1, description="History items both sequence models read (SASRec "
                               "max_seq_len, the SID model's context_items); default 20.")
    seed: int = Field(default=0, ge=0, description="Seeds both models, the codes and the bootstrap (default 0).")
    threads: int = Field(default=1, ge=0, description="Torch threads while running (default 1); 0 = leave as is.")
    n_boot: int = Field(default=2000, ge=0, description="Paired bootstrap resamples over test sessions "
                        "(default 2000; 0 = no CI).")
    valid_max: int = Field(default=0, ge=0, description="Most validation users the SID models score after each "
                           "epoch (a seeded sample; exact scoring over every item costs ~10 ms a user); 0 = all "
                           "(default). SASRec always validates on all.")
    sasrec: SasRecConfig = Field(default_factory=SasRecConfig, description="SASRec (eval.sasrec).")
    sid: SidRecConfig = Field(default_factory=SidRecConfig, description="The SID model (training.genrec).")
    sid_codes: SidCodesConfig = Field(
        default_factory=lambda: SidCodesConfig(source="text", levels=3),
        description="Its semantic IDs. Default: from the items' texts (MiniLM), 3 levels x 64 + a suffix. Chosen on "
        "validation NDCG@10 (new items): learned codes 2 x 64 0.117, text 2 x 64 0.136, text 3 x 64 0.151 — "
        "1,445 of the 5,000 items are in no training session, and only their text places them.")

    def effective(self) -> tuple[SasRecConfig, SidRecConfig, SidCodesConfig]:
        """The settings this run uses: the mode's presets, ``context_items``, ``seed`` and ``threads`` fill every
        field that was not set explicitly."""
        preset = PRESETS["quick" if self.quick else "full"]

        def fill(model: Any, values: dict[str, Any]) -> Any:
            return model.model_copy(update={k: v for k, v in values.items() if k not in model.model_fields_set})

        return (fill(self.sasrec, {**preset["sasrec"], "max_seq_len": self.context_items, "seed": self.seed,
                                   **({"threads": self.threads} if self.threads else {})}),
                fill(self.sid, {**preset["sid"], "context_items": self.context_items, "seed": self.seed}),
                fill(self.sid_codes, preset["sid_codes"]))


# ------------------------------------------------------------------------------------------------ ranking
Scorer = Callable[[Sequence[Sequence[str]]], np.ndarray]
"""Histories (item ids, oldest first) -> (B, N) scores of every catalog item (-inf: cannot be ranked)."""


def target_ranks(scores: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """scores (B, N), targets (B,) rows -> (B,) 0-based ranks of the targets, ties broken by row (a stable sort's
    order); a target scored -inf (or nan) gets rank N, a miss at every cut-off."""
    assert scores.ndim == 2 and targets.shape == (scores.shape[0],), "one target row per score row"
    n = scores.shape[1]
    own = scores[np.arange(len(targets)), targets][:, None]  # (B, 1)
    before = (scores > own) | ((scores == own) & (np.arange(n)[None] < targets[:, None]))  # (B, N)
    return np.where(np.isfinite(own[:, 0]), before.sum(1), n)


def rank_metrics(ranks: np.ndarray, n_items: int, k: int) -> dict[str, np.ndarray]:
    """Per case from its 0-based rank: hr@k, ndcg@k = 1 / log2(rank + 2) inside the top k, mrr = 1 / (rank + 1)
    (0 for rank >= n_items, an item the method cannot rank)."""
    r = ranks.astype(np.float64)
    return {f"hr@{k}": (r < k).astype(np.float64), f"ndcg@{k}": np.where(r < k, 1.0 / np.log2(r + 2.0), 0.0),
            "mrr": np.where(r < n_items, 1.0 / (r + 1.0), 0.0)}


def evaluate(score: Scorer, cases: Sequence[Case], row: Mapping[str, int], batch_size: int = 256) -> np.ndarray:
    """(len(cases),) ranks of each case's target under ``score``, ``batch_size`` histories at a time."""
    out = np.empty(len(cases), np.int64)
    for s in range(0, len(cases), batch_size):
        batch = cases[s:s + batch_size]
        sc = score([c.history for c in batch])
        assert sc.shape == (len(batch), len(row)), f"scores {sc.shape}, expected {(len(batch), len(row))}"
        out[s:s + len(batch)] = target_ranks(sc, np.array([row[c.target] for c in batch], np.int64))
    return out


def popularity_scorer(counts: np.ndarray) -> Scorer:
    """The same (N,) counts for every history."""
    return lambda histories: np.broadcast_to(counts.astype(np.float64), (len(histories), len(counts))).copy()


def repeat_last_scorer(counts: np.ndarray, row: Mapping[str, int]) -> Scorer:
    """The history's last item first, then its earlier items newest first, then the rest by popularity:
    popularity is scaled into [0, 1) and the item at history position p (from 0) adds 1 + p (its latest)."""
    base = counts.astype(np.float64) / (float(counts.max(initial=0.0)) + 1.0)

    def score(histories: Sequence[Sequence[str]]) -> np.ndarray:
        out = np.broadcast_to(base, (len(histories), len(base))).copy()
        for b, hist in enumerate(histories):
            for p, item in enumerate(hist):
                out[b, row[item]] = base[row[item]] + 1.0 + p
        return out

    return score


def sasrec_scorer(ranker: SasRecRanker, item_ids: Sequence[str]) -> Scorer:
    """SASRec's scores in catalog order; catalog items outside its vocabulary (never in its timelines) get -inf."""
    cols = np.array([ranker.index.get(i, -1) for i in item_ids], np.int64)
    missing = cols < 0

    def score(histories: Sequence[Sequence[str]]) -> np.ndarray:
        sc = ranker.scores(histories)[:, np.maximum(cols, 0)].astype(np.float64)  # (B, N)
        sc[:, missing] = -math.inf
        return sc

    return score


def sid_scorer(model: SidRec, row: Mapping[str, int]) -> Scorer:
    """Exact log p(SID of item | history) of every catalog item; no item is masked."""
    from training.genrec import scores

    return lambda histories: scores(model, [[row[i] for i in h] for h in histories], None).astype(np.float64)


# ------------------------------------------------------------------------------------------------ training
@dataclass
class _Split:
    """Training items and validation cases of the timelines, as catalog rows."""

    train: list[list[int]]
    valid: tuple[list[list[int]], list[int]]
    counts: np.ndarray
    """(N,) occurrences of each item in ``train``."""


def _split(timelines: Mapping[str, Sequence[str]], row: Mapping[str, int]) -> _Split:
    train = [[row[i] for i in training_part(t)] for t in timelines.values()]
    valid = ([[row[i] for i in training_part(t)] for t in timelines.values() if len(t) >= 3],
             [row[t[-2]] for t in timelines.values() if len(t) >= 3])
    counts = np.bincount(np.concatenate([np.asarray(t, np.int64) for t in train]), minlength=len(row))
    return _Split(train, valid, counts.astype(np.float64))


def _sample(valid: tuple[list[list[int]], list[int]], most: int, seed: int) -> tuple[list[list[int]], list[int]]:
    if not most or len(valid[1]) <= most:
        return valid
    keep = np.sort(np.random.default_rng(seed).choice(len(valid[1]), most, replace=False))
    return [valid[0][j] for j in keep], [valid[1][j] for j in keep]


def fit_sid(cfg: NextItemConfig, split: _Split, n_items: int, item_text: Callable[[], list[str]] | None,
            progress: Progress | None) -> tuple[SidRec, dict[str, Any]]:
    """Codes (``cfg.sid_codes``) from the training items, then the SID model on the same items, both stopped on
    the validation cases (a ``valid_max`` sample of them). ``item_text`` gives the catalog's texts (source
    ``text`` only)."""
    from infra.settings import get_settings
    from training.genrec import build_codes, fit_sid_rec

    _, model_cfg, codes_cfg = cfg.effective()
    valid = _sample(split.valid, cfg.valid_max, cfg.seed)
    with torch.random.fork_rng(devices=[]):
        if codes_cfg.source == "text" and item_text is None:
            raise NextItemError("sid_codes.source 'text' needs the item texts: pass item_text")
        codes, built, init = build_codes(split.train, n_items, valid, model_cfg, codes_cfg, cfg.seed, item_text,
                                   get_settings().cache_dir, _prefixed(progress, "sid codes: item-id model"))
        info: dict[str, Any] = {"codes": codes_cfg.model_dump(), "config": model_cfg.model_dump(),
                                "valid_users": len(valid[1]), **built}
        if progress is not None:
            progress(f"sid: {n_items} SIDs from {codes_cfg.source} embeddings, levels {info['sids']['levels']}, "
                     f"{info['sids']['collision_rate']:.1%} need a suffix")
        torch.manual_seed(cfg.seed)
        model = SidRec(codes, model_cfg)
        if init is not None:
            model.warm_start(init)
        info["training"] = fit_sid_rec(model, split.train, valid, _prefixed(progress, "sid"))
    info["parameters"] = sum(p.numel() for p in model.parameters())
    return model, info


def _prefixed(progress: Progress | None, prefix: str) -> Progress | None:
    if progress is None:
        return None
    return lambda line: progress(f"{prefix}: {line.removeprefix('sid-rec ')}")


# ------------------------------------------------------------------------------------------------ the run
def _method(name: Method, cfg: NextItemConfig, data: NextItemData, split: _Split, row: Mapping[str, int],
            item_text: Callable[[], list[str]] | None, progress: Progress | None
            ) -> tuple[Scorer, dict[str, Any]]:
    """Fit one method: its scorer and what training reported."""
    if name == "popularity":
        return popularity_scorer(split.counts), {}
    if name == "repeat-last":
        return repeat_last_scorer(split.counts, row), {}
    if name == "sasrec":
        ranker = train_sasrec(data.timelines, cfg.effective()[0], progress=progress)
        return sasrec_scorer(ranker, data.item_ids), ranker.info
    model, info = fit_sid(cfg, split, len(data.item_ids), item_text, progress)
    return sid_scorer(model, row), info


def _summary(values: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, float | int | None]:
    out: dict[str, float | int | None] = {m: round(float(v[keep].mean()), 6) if keep.any() else None
                                          for m, v in values.items()}
    out["cases"] = int(keep.sum())
    return out


def _per_session(values: np.ndarray, sessions: np.ndarray) -> np.ndarray:
    """Mean of each session's cases, sessions in order of first case: (S,)."""
    _, first, inverse = np.unique(sessions, return_index=True, return_inverse=True)
    means = np.bincount(inverse, weights=values) / np.bincount(inverse)
    return means[np.argsort(first)]


def _paired(cfg: NextItemConfig, per_case: dict[str, dict[str, np.ndarray]], sessions: np.ndarray
            ) -> dict[str, Any]:
    """``sid - sasrec`` per metric: paired bootstrap over test sessions of the session means."""
    b, a = PAIR
    if not cfg.n_boot or a not in per_case or b not in per_case:
        return {}
    out: dict[str, Any] = {}
    for metric in per_case[a]:
        res = paired_bootstrap(_per_session(per_case[a][metric], sessions).tolist(),
                               _per_session(per_case[b][metric], sessions).tolist(), n_boot=cfg.n_boot, seed=cfg.seed)
        row: dict[str, Any] = {k: (int(v) if k == "n" else round(float(v), 6)) for k, v in res.items()}
        row["excludes_zero"] = excludes_zero(row["lo"], row["hi"])
        out[metric] = row
    return {f"{b} - {a}": out}


def data_profile(data: NextItemData, split_counts: np.ndarray, row: Mapping[str, int]) -> dict[str, Any]:
    """How predictable the targets are from their histories, and how many the training items never hold."""
    in_hist = np.array([c.target in c.history for c in data.test])
    last = np.array([c.target == c.history[-1] for c in data.test])
    unseen = np.array([split_counts[row[c.target]] == 0 for c in data.test])
    events = {e: int(sum(c.event == e for c in data.test)) for e in CASE_EVENTS}
    return {"target_in_history": round(float(in_hist.mean()), 4), "target_is_last": round(float(last.mean()), 4),
            "target_unseen_in_training": round(float(unseen.mean()), 4), "test_events": events,
            "mean_history": round(float(np.mean([len(c.history) for c in data.test])), 2),
            "items_in_training": int((split_counts > 0).sum())}


def compare_next_item(data: NextItemData, cfg: NextItemConfig, progress: Progress | None = None,
                      item_text: Callable[[], list[str]] | None = None) -> dict[str, Any]:
    """Train every method of ``cfg`` on ``data.timelines`` and rank ``data.test``; the report (see
    :func:`format_table`): per method the metrics overall, per event, on new-item / repeat / unseen targets,
    train and eval seconds; ``paired``: ``sid - sasrec`` with its bootstrap CI over test sessions. ``item_text``
    defaults to ``data.item_texts``."""
    if item_text is None and data.item_texts:
        texts = data.item_texts
        item_text = lambda: texts  # noqa: E731
    row = {item: r for r, item in enumerate(data.item_ids)}
    split = _split(data.timelines, row)
    groups = {"new_item": np.array([c.target not in c.history for c in data.test]),
              "repeat": np.array([c.target in c.history for c in data.test]),
              "unseen": np.array([split.counts[row[c.target]] == 0 for c in data.test]),
              **{e: np.array([c.event == e for c in data.test]) for e in CASE_EVENTS}}
    methods: dict[str, Any] = {}
    per_case: dict[str, dict[str, np.ndarray]] = {}
    with torch_threads(cfg.threads):
        for name in [m for m in METHODS if m in cfg.methods]:
            if progress is not None:
                progress(f"{name}: start")
            t0 = time.perf_counter()
            scorer, info = _method(name, cfg, data, split, row, item_text, progress)
            train_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            ranks = evaluate(scorer, data.test, row)
            eval_s = time.perf_counter() - t0
            per_case[name] = rank_metrics(ranks, len(row), cfg.k)
            everything = np.ones(len(ranks), bool)
            methods[name] = {**_summary(per_case[name], everything), "train_s": round(train_s, 1),
                             "eval_s": round(eval_s, 1),
                             **{g: _summary(per_case[name], keep) for g, keep in groups.items()},
                             **({"details": info} if info else {})}
            if progress is not None:
                m = methods[name]
                progress(f"{name}: hr@{cfg.k} {m[f'hr@{cfg.k}']:.4f}  ndcg@{cfg.k} {m[f'ndcg@{cfg.k}']:.4f}  "
                         f"mrr {m['mrr']:.4f}  ({train_s:.1f} s + {eval_s:.1f} s)")
    sessions = np.array([c.session_id for c in data.test])
    return {"benchmark": "shopping-next-item", "k": cfg.k, "quick": cfg.quick, "views": data.views,
            "counts": {**data.counts, "valid_users": len(split.valid[1]),
                       "train_items_used": int(split.counts.sum())},
            "data": data_profile(data, split.counts, row), "methods": methods,
            "paired": _paired(cfg, per_case, sessions), "config": cfg.model_dump(mode="json"),
            "machine": {"cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()],
                        "torch_threads": cfg.threads or torch.get_num_threads()}}


def format_table(report: dict[str, Any]) -> str:
    """The report as markdown: a row per method (HR@k, NDCG@k, MRR overall and on new-item targets, seconds),
    then the ``sid - sasrec`` intervals and what the data look like."""
    k = report["k"]
    lines = [f"| method | HR@{k} | NDCG@{k} | MRR | HR@{k} new | NDCG@{k} new | HR@{k} unseen | train s | eval s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in report["methods"].items():
        new, unseen = m["new_item"], m["unseen"]
        lines.append(f"| {name} | {m[f'hr@{k}']:.4f} | {m[f'ndcg@{k}']:.4f} | {m['mrr']:.4f} | "
                     f"{new[f'hr@{k}']:.4f} | {new[f'ndcg@{k}']:.4f} | {unseen[f'hr@{k}']:.4f} | "
                     f"{m['train_s']:.1f} | {m['eval_s']:.1f} |")
    for pair, metrics in report.get("paired", {}).items():
        lines.append("")
        for metric, v in metrics.items():
            lines.append(f"{metric} {pair}: {v['delta']:+.4f}, 95 % CI [{v['lo']:+.4f}, {v['hi']:+.4f}] (paired "
                         f"bootstrap over {v['n']} test sessions{', excludes 0' if v['excludes_zero'] else ''})")
    c, d = report["counts"], report["data"]
    lines.append("")
    lines.append(f"{c['test_cases']:,} test cases in {c['test_sessions']:,} sessions (mean history "
                 f"{d['mean_history']} items; {d['test_events']}); {d['target_in_history']:.1%} of targets are in "
                 f"their history ({d['target_is_last']:.1%} the last item), {d['target_unseen_in_training']:.1%} "
                 f"never in training. Training: {c['train_users']:,} users, {c['train_items_used']:,} of "
                 f"{c['train_events']:,} context events (the last two per user validate), {d['items_in_training']:,} "
                 f"of {c['items']:,} items; context {'with' if report['views'] else 'without'} views; "
                 f"{'quick' if report['quick'] else 'full'} mode.")
    return "\n".join(lines)
