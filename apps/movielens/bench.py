"""Next-item benchmark on MovieLens-100k: SID generative retrieval against popularity, BM25, dense and SASRec.

    python bench/movielens.py --quick        # imports the world if needed, runs this, prints the table
    from apps.movielens.bench import MovieLensBenchConfig, format_table, run_movielens_benchmark
    report = run_movielens_benchmark(MovieLensBenchConfig(world=Path("runs/ml"), out=Path("runs/eval/ml"), quick=True))
    print(format_table(report))              # `sidekick eval movielens` is the CLI front of the same call

Protocol (the standard leave-one-out, full-ranking one). Each user's ratings, in time order (ratings of
the same second in the source file's order, as RecBole orders them and the importer writes them), are a
timeline ``i_1 … i_n``. The test target is ``i_n``, the test input the history ``i_1 … i_{n-1}``; ``i_{n-1}``
is the validation item (SASRec picks its best epoch on it) and every trained method trains on ``i_1 …
i_{n-2}`` only. Every one of the 1,682 movies is a candidate except
the user's history items (ml-100k never has a user rate a movie twice, so the target is never excluded).
Metrics (:mod:`eval.metrics`, one relevant item per user): HR@k (= hit@k) and NDCG@k, averaged over users.

Methods, each ranking the top ``k``:

- **popularity**: rating counts over the training parts;
- **bm25**: Okapi BM25 of the next-item task's message ("I've recently watched A, B, … What should I
  watch next?", naming the last 5 history titles) against each movie's text (title, genres, year);
- **dense**: MiniLM embeddings of the movie texts; the query is the normalised mean of the user's last
  ``text_history`` history movies; faiss exact inner-product search;
- **sasrec**: SASRec with full-softmax cross-entropy, trained through RecBole (:mod:`eval.sasrec`), on the
  last ``context_items`` (20) items, the same context the SID models get; in the full profile it trains until
  validation NDCG@10 (history excluded, the SID models' metric) has not improved for 10 epochs (at most 60);
- **sid**: the SID recommender of :mod:`training.genrec`: every movie gets a semantic ID (by default from
  collaborative embeddings: the item table of an item-id model of the same architecture trained on the same
  training split, joined with a one-hot of the film's release year (``attributes: [year]`` in the presets),
  balanced residual k-means 2 x 64 + a collision suffix; :class:`SidCodesConfig`), then a
  causal Transformer reads the history as sums of code embeddings and writes the next movie's SID code by code;
  every movie's SID log-probability is computed exactly and the history is masked; trained until validation
  NDCG@10 has not improved for 8 epochs (at most 100). By default (``sid_also: [learned, learned]``) two more
  SID models, with seeds + 1 and + 2 (each its own item-id model, k-means, codes and training), are trained the
  same way and the method ranks by the sum of the three models' log-probabilities (each model alone is reported
  too, as ``sid: learned codes only``, ``sid: learned codes, model 2, only`` and ``…, model 3, only``): about
  SASRec's training time in all.
  Both trained methods stop on the same validation item.
- **sid-lm** (on request: ``methods``): the wave-1 TIGER-style retriever (Rajput et al. 2023, "Recommender
  Systems with Generative Retrieval"). The movies get semantic IDs (:mod:`sid.build`: MiniLM -> balanced
  RQ-KMeans, 3 levels x 32 codes, + a collision suffix); a tiny Llama (:mod:`training.tiny`) made SID-aware
  (:func:`training.models.make_sid_aware`) learns, as a causal LM over the user's SID sequence, the
  next movie's SID: ``<bos> <s1_a><s2_b><s3_c><s4_d><|sid_end|> …``, cross-entropy on every SID and
  separator token (each position predicts the next); at test time trie-constrained beam search
  (:func:`sid.decoding.constrained_beam_search`) over the movies not in the history returns the top ``k``.

Each trained method is compared with SASRec user by user: ``report["paired"]["sid - sasrec"]`` holds the
difference of HR@k and NDCG@k with its 95 % paired bootstrap interval over users (:func:`eval.stats.paired_bootstrap`).

Output under ``out``: ``report.json`` (per method: hr@k, ndcg@k, mrr, train and eval seconds, details; the
paired CIs), ``report.md`` (the table), ``per_user.json`` (every method's per-user metrics), ``sid/`` (sid-lm's
SID directory) and ``manifest.json``.

It lives beside the MovieLens app (:mod:`apps.movielens.importer` writes the world it reads); the generic
baselines it compares against stay in ``eval/`` (:mod:`eval.baselines`, :mod:`eval.sasrec`).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_curation.records import ITEM_EVENTS, Session
from eval.baselines import Bm25Ranker, DenseRanker, Popularity, Query
from eval.metrics import mean_metrics, ranking_metrics
from eval.sasrec import SasRecConfig, train_sasrec
from eval.stats import excludes_zero, paired_bootstrap
from harness.catalog import Catalog, Item
from harness.tasks import Task
from infra.layout import CATALOG_FILE, LOGS_FILE, TASKS_FILE
from infra.manifest import write_manifest
from infra.recordio import RecordReader
from infra.threads import torch_threads
from training.genrec import SidCodesConfig, SidRecConfig

Method = Literal["popularity", "bm25", "dense", "sasrec", "sid", "sid-lm"]
METHODS: tuple[Method, ...] = ("popularity", "bm25", "dense", "sasrec", "sid", "sid-lm")
"""Every method of the benchmark, in table order."""
DEFAULT_METHODS: tuple[Method, ...] = ("popularity", "bm25", "dense", "sasrec", "sid")
"""What a run compares unless told otherwise (``sid-lm``, the TIGER-style token LM, costs ~8 min more)."""
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
PER_USER_JSON = "per_user.json"
"""Each method's per-user HR@k / NDCG@k / MRR, in user order (``{"users": [...], "methods": {name: {metric:
[...]}}}``): what later runs (the SID ablations) pair against."""
SID_DIR = "sid"

Progress = Callable[[str], None]
"""Receives one short status line per stage and per training epoch / 50 steps."""


class MovieLensBenchError(ValueError):
    """A world directory or setting the benchmark cannot run on (the message says what to change)."""


# ------------------------------------------------------------------------------------------------ config
class SidRetrievalConfig(BaseModel):
    """The SID generative retriever: its semantic IDs, model, training and decoding."""

    model_config = ConfigDict(extra="forbid")

    levels: int = Field(default=3, ge=1, le=6, description="RQ-KMeans levels (a collision-suffix level is added).")
    codebook_size: int = Field(default=32, ge=2, le=256, description="Codes per level (default 32).")
    balanced: bool = Field(default=True, description="Capacity-constrained RQ-KMeans (default true). On the 1,682 "
                           "movies, 3 x 32 balanced: 20 % of items share their 3 codes with another (suffix <= 8); "
                           "plain 3 x 32: 39 % (suffix <= 18); plain 3 x 16: 81 % (suffix <= 27).")
    context_items: int = Field(default=20, ge=1, description="Most recent history items in the prompt "
                               "(training windows hold context_items + 1 items).")
    layers: int = Field(default=2, ge=1, le=8, description="Llama layers of the tiny model (default 2).")
    hidden: int = Field(default=128, ge=16, description="Hidden width (default 128).")
    heads: int = Field(default=4, ge=1, description="Attention heads (default 4).")
    vocab_size: int = Field(default=512, ge=384, description="Text vocabulary of the tiny tokenizer, trained "
                            "on the titles (text is not used by this task; default 512, the minimum is 384).")
    epochs: float = Field(default=12.0, gt=0, description="Passes over the training windows (default 12; the "
                          "benchmark's quick preset: 3).")
    batch_size: int = Field(default=32, ge=1, description="Windows per optimizer step (default 32).")
    lr: float = Field(default=2e-3, gt=0, description="Peak AdamW learning rate (default 2e-3), cosine to 0.")
    warmup_steps: int = Field(default=50, ge=0, description="Linear warmup steps (default 50).")
    precision: Literal["auto", "bf16", "fp32"] = Field(default="fp32", description="Training compute: fp32 "
                                                       "(default: at this size bf16 autocast was 1.7x slower on an "
                                                       "AMX CPU), bf16 autocast over fp32 weights, or auto (bf16 "
                                                       "where the hardware has native bf16).")
    beam_size: int = Field(default=20, ge=1, description="Beams of the constrained beam search (>= k; default 20).")


PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "quick": {"sasrec": {"epochs": 3, "stopping_step": 3, "valid_metric": "history_excluded"},
              "sid": {"epochs": 5, "patience": 5},
              "sid_codes": {"pretrain_epochs": 5, "attributes": ["year"]}, "sid_lm": {"epochs": 3.0}},
    "full": {"sasrec": {"epochs": 60, "stopping_step": 10, "valid_metric": "history_excluded", "dropout": 0.35,
                        "batch_size": 512, "lr": 2e-3},
             "sid": {"epochs": 100, "patience": 8, "hidden": 128, "inner": 512, "decoder_inner": 512, "ema": 0.999,
                     "dropout": 0.3},
             "sid_codes": {"pretrain_epochs": 20, "attributes": ["year"]}, "sid_lm": {"epochs": 12.0}},
}
"""Training length per mode, for the fields of ``sasrec`` / ``sid`` / ``sid_codes`` / ``sid_lm`` a config leaves
unset. Full: both trained models stop on the same validation item and metric (NDCG@10, history excluded) after
10 (SASRec) / 8 (each SID model, whose epochs are shorter) epochs without a better one. SASRec's settings (dropout
0.35, batch 512, lr 2e-3; best epoch 26 of 37 on seed 0) were the best of 17 SASRec settings tried on this
validation (0.1350; dropout 0.3 0.1345, dropout 0.3 with RecBole's batch 256 and lr 1e-3 0.1292, RecBole's defaults
with dropout 0.2 0.1259; the README lists them). The SID models are 128 wide with a weight average (chosen on
validation: 64 wide without it reached the same NDCG@10 in ~3x the epochs) and dropout 0.3 (0.1290 against 0.1201
for 0.2); SASRec at 128 takes ~150 s an epoch here, too slow for the benchmark's 40 minutes. The SIDs join each
film's release year to its embedding (`attributes: [year]`): the held-out last ratings are of 1997-98 films twice
as often as the training ratings, and with the year a film's first code also says how new it is (chosen on the
importer's old tie order: the learned-codes model's validation NDCG@10 0.1237 vs 0.1189, test 0.1068 vs 0.0971;
README)."""


class MovieLensBenchConfig(BaseModel):
    """``sidekick eval movielens``: the leave-one-out next-item benchmark on a MovieLens world."""

    model_config = ConfigDict(extra="forbid")

    world: Path = Field(description="World directory from `sidekick world import-movielens` (catalog.jsonl, "
                        "logs.jsonl, tasks.jsonl).")
    out: Path = Field(description="Output directory (report.json, report.md, sid/, manifest.json).")
    quick: bool = Field(default=False, description="Short training (PRESETS['quick']: SASRec 3 epochs, SID 5 "
                        "epochs) instead of PRESETS['full'] (SASRec up to 60 epochs, stopping after 10 without a "
                        "better validation score; each SID model up to 100, stopping after 8, 128 wide with a "
                        "weight average); fields set explicitly under sasrec / sid win.")
    seed: int = Field(default=0, ge=0, description="Seeds SIDs, both models and the data order (default 0).")
    k: int = Field(default=10, ge=1, description="Cut-off of HR@k and NDCG@k (default 10).")
    methods: list[Method] = Field(
        default_factory=lambda: list(DEFAULT_METHODS), min_length=1,
        description="Methods to run (default: popularity, bm25, dense, sasrec, sid; sid-lm on request).")
    max_users: int = Field(default=0, ge=0, description="Only the first N users by id (training and test); "
                           "0 = all (default). For smoke runs.")
    context_items: int = Field(default=20, ge=1, description="History items the sequential models see (SASRec "
                               "max_seq_len, the SID models' context), default 20: the same context for all, and "
                               "~3x cheaper SASRec epochs on CPU than RecBole's 50.")
    text_history: int = Field(default=5, ge=1, description="History movies in the dense query (default 5; the "
                              "BM25 query is the task message, which names the last 5).")
    threads: int = Field(default=1, ge=0, description="Torch threads (default 1: on a shared 2-core machine two "
                         "spinning OpenMP threads are several times slower); 0 = leave as is.")
    workers: int = Field(default=2, ge=1, description="Processes that train the trained methods (sasrec, sid, "
                         "sid-lm) side by side, each with `threads` threads (default 2: SASRec and the SID model "
                         "at the same time on a 2-core machine); 1 = one after the other in this process.")
    n_boot: int = Field(default=2000, ge=0, description="Paired bootstrap resamples (over users) of the trained "
                        "methods against SASRec (default 2000; 0 = no CIs).")
    cache_dir: Path | None = Field(default=None, description="Embedding cache; None = settings.cache_dir.")
    sasrec: SasRecConfig = Field(default_factory=SasRecConfig, description="SASRec settings (eval.sasrec).")
    sid: SidRecConfig = Field(default_factory=SidRecConfig, description="The SID recommender (training.genrec).")
    sid_codes: SidCodesConfig = Field(default_factory=SidCodesConfig, description="Its semantic IDs (the presets "
                                      "join the release year: `attributes: [year]`).")
    sid_also: list[Literal["learned", "cooccurrence", "text"]] = Field(
        default=["learned", "learned"], description="Method sid also trains one SID model per source listed "
        "(codes as `sid_codes` but from that source; the same model settings; the n-th model of the ensemble, the "
        "main one 0th, runs with seed `seed + n`, so a source may repeat: its item-id model, k-means and training "
        "differ) and ranks by the sum of every model's item log-probabilities: an ensemble of SID models that see "
        "an item through different codes. Each model alone is reported too. Default [learned, learned]: three "
        "learned-codes models (MovieLens validation, seed 0: 0.1290 for one, 0.1354 for two, 0.1372 for three; "
        "with seed 1's members 0.1326 for two, 0.1384 for three; 0.1229 with a text-codes model as the second); "
        "[] = one model.")
    sid_also_attributes: bool | None = Field(
        default=None, description="Whether the models of `sid_also` join `sid_codes.attributes` to their "
        "embeddings too. Default (None): every one but a `text` model (on MovieLens the release year lifted the "
        "learned codes' model on validation, 0.1237 vs 0.1189, and held the text codes' model back, 0.115 vs "
        "0.122 by epoch 30; the titles' text already names the year).")
    sid_lm: SidRetrievalConfig = Field(default_factory=SidRetrievalConfig,
                                       description="The TIGER-style token LM (method sid-lm).")

    @model_validator(mode="after")
    def _check(self) -> MovieLensBenchConfig:
        if "sid-lm" in self.methods and self.sid_lm.beam_size < self.k:
            raise ValueError(f"sid_lm.beam_size {self.sid_lm.beam_size} < k {self.k}: beam search returns at most "
                             "beam_size items; raise sid_lm.beam_size")
        if "sid" in self.methods and 0 < self.sid.beam_size < self.k:
            raise ValueError(f"sid.beam_size {self.sid.beam_size} < k {self.k}: raise it, or 0 for exact decoding")
        return self

    def effective(self) -> tuple[SasRecConfig, SidRecConfig, SidCodesConfig, SidRetrievalConfig]:
        """The SASRec and SID settings this run uses: the mode's presets (:data:`PRESETS`), ``context_items``,
        ``seed`` and ``threads`` fill every field that was not set explicitly."""
        preset = PRESETS["quick" if self.quick else "full"]
        sasrec_fill = {**preset["sasrec"], "max_seq_len": self.context_items, "seed": self.seed,
                       **({"threads": self.threads} if self.threads else {})}

        def fill(model: Any, values: dict[str, Any]) -> Any:
            return model.model_copy(update={k: v for k, v in values.items() if k not in model.model_fields_set})

        return (fill(self.sasrec, sasrec_fill),
                fill(self.sid, {**preset["sid"], "context_items": self.context_items, "seed": self.seed}),
                # warm_start copies the item-id model's space, which joined attributes are not part of
                fill(self.sid_codes, {k: v for k, v in preset["sid_codes"].items()
                                      if not (k == "attributes" and self.sid_codes.warm_start)}),
                fill(self.sid_lm, {**preset["sid_lm"], "context_items": self.context_items}))


# ------------------------------------------------------------------------------------------------ data
@dataclass
class LeaveOneOut:
    """Per user (in id order): the timeline, its training part (all but the last two), test history and target."""

    users: list[str]
    timelines: dict[str, list[str]]
    queries: dict[str, str]
    """The text query of each user: the next-item task's message."""
    skipped_users: int

    def train(self, user: str) -> list[str]:
        return self.timelines[user][:-2]

    def history(self, user: str) -> list[str]:
        return self.timelines[user][:-1]

    def target(self, user: str) -> str:
        return self.timelines[user][-1]


def _id_order(user: str) -> tuple[int, int, str]:
    return (0, int(user), user) if user.isdigit() else (1, 0, user)


def load_leave_one_out(world: Path, catalog: Catalog, max_users: int = 0) -> LeaveOneOut:
    """Timelines from ``logs.jsonl`` (item events in time order, ties in file order), the queries from
    ``tasks.jsonl`` (checked against the timelines). Users with fewer than 3 items are skipped."""
    events: dict[str, list[tuple[float, int, str]]] = {}
    order = 0
    for session in RecordReader(world / LOGS_FILE, Session):
        for e in session.events:
            if e.type in ITEM_EVENTS and e.item_id is not None:
                if e.item_id not in catalog:
                    raise MovieLensBenchError(f"{world / LOGS_FILE}: item {e.item_id!r} is not in the catalog")
                events.setdefault(session.user_id, []).append((e.ts, order, e.item_id))
                order += 1
    users = sorted(events, key=_id_order)
    kept = [u for u in users if len(events[u]) >= 3]
    if max_users:
        kept = kept[:max_users]
    timelines = {u: [item for _, _, item in sorted(events[u])] for u in kept}
    if not timelines:
        raise MovieLensBenchError(f"{world}: no user has 3 or more rated items")
    queries = _task_queries(world, timelines)
    return LeaveOneOut(kept, timelines, queries, skipped_users=len([u for u in users if len(events[u]) < 3]))


def _task_queries(world: Path, timelines: dict[str, list[str]]) -> dict[str, str]:
    path = world / TASKS_FILE
    if not path.is_file():
        raise MovieLensBenchError(f"{world} has no {TASKS_FILE}: import it with next-item tasks "
                                  "(`sidekick world import-movielens --out DIR`)")
    queries: dict[str, str] = {}
    for task in RecordReader(path, Task):
        user = str(task.meta.get("user_id", ""))
        if task.kind != "next_item" or user not in timelines or task.target is None:
            continue
        want = timelines[user][-1]
        if task.target.item_ids != [want]:
            raise MovieLensBenchError(f"{path}: task {task.task_id} targets {task.target.item_ids} but user {user}'s "
                                      f"logs end with {want!r}; re-import the world")
        queries[user] = Query.of_task(task).text
    missing = [u for u in timelines if u not in queries]
    if missing:
        raise MovieLensBenchError(f"{path} has no next_item task for {len(missing)} users (e.g. {missing[0]}); "
                                  "re-import the world")
    return queries


# ------------------------------------------------------------------------------------------------ SID retriever
class SidGenerativeRetriever:
    """A tiny SID-aware Llama that continues a user's SID sequence, decoded with trie-constrained beam search.

    ``setup`` builds the model, ``train`` fits it on training sequences, ``rank`` answers a :class:`Query`.
    """

    name = "sid"

    def __init__(self, cfg: SidRetrievalConfig, sid_dir: Path, corpus: Sequence[str], seed: int) -> None:
        self.cfg, self.sid_dir, self.corpus, self.seed = cfg, sid_dir, list(corpus), seed

    def setup(self) -> None:
        from harness.agent_dir import SID_END
        from sid.build import SIDS_FILE
        from sid.codebook import SidMap
        from training.models import make_sid_aware
        from training.tiny import build_tiny

        cfg = self.cfg
        self.model, self.tokenizer = build_tiny(self.corpus, vocab_size=cfg.vocab_size, layers=cfg.layers,
                                                hidden=cfg.hidden, heads=cfg.heads, seed=self.seed)
        self.token_map = make_sid_aware(self.model, self.tokenizer, self.sid_dir)
        self._break_symmetry()
        self.sid_map = SidMap.load(self.sid_dir / SIDS_FILE)
        self.row = {item: r for r, item in enumerate(self.sid_map.item_ids)}
        self.sep = int(self.tokenizer.get_vocab()[SID_END])
        self.bos = int(self.tokenizer.bos_token_id)
        self.pad = int(self.tokenizer.pad_token_id)
        tokens = [[*self.token_map.ids_from_codes(self.sid_map.codes[r]), self.sep] for r in range(len(self.sid_map))]
        self.item_tokens = np.array(tokens, np.int64)  # (N, D + 1): SID tokens then the separator
        # The constraint ends a SID with the model's eos: here the separator it learns to write after every SID.
        self.model.generation_config.eos_token_id = self.sep
        self.model.generation_config.pad_token_id = self.pad

    def _break_symmetry(self) -> None:
        """Add seeded noise (std = the model's init range) to the SID token embeddings. ``make_sid_aware``
        starts every token from its label words' mean, so tokens without labels (the suffix level, codes
        without words) start identical, and identical inputs stay nearly identical: the model could not
        tell them apart in the history and would learn only how frequent each code is."""
        emb = self.model.get_input_embeddings().weight  # (V, H); the head is tied to it
        assert isinstance(emb, torch.Tensor)
        ids = torch.tensor(sorted(self.token_map.token_ids.values()), dtype=torch.long)
        gen = torch.Generator().manual_seed(self.seed)
        std = float(getattr(self.model.config, "initializer_range", 0.02))
        with torch.no_grad():
            emb[ids] += std * torch.randn((len(ids), emb.shape[1]), generator=gen, dtype=emb.dtype)

    def _ids(self, items: Sequence[str]) -> list[int]:
        rows = [self.row[i] for i in items if i in self.row]
        return [self.bos, *self.item_tokens[rows].ravel().tolist()]

    def windows(self, sequences: Sequence[Sequence[str]]) -> list[list[int]]:
        """Token rows: each sequence cut from its end into windows of ``context_items + 1`` items."""
        span = self.cfg.context_items + 1
        out = []
        for seq in sequences:
            for end in range(len(seq), 0, -span):
                out.append(self._ids(seq[max(0, end - span):end]))
        return out

    def train(self, sequences: Sequence[Sequence[str]], progress: Progress | None = None) -> dict[str, Any]:
        """Next-token cross-entropy on every SID and separator token of the windows (mean over the batch's
        tokens); AdamW, linear warmup then cosine decay (:func:`training.sft.cosine_with_warmup`)."""
        from harness.agent_dir import resolve_dtype
        from training.sft import cosine_with_warmup

        cfg = self.cfg
        rows = self.windows(sequences)
        if not rows:
            raise MovieLensBenchError("the SID retriever has no training sequences")
        steps_per_epoch = math.ceil(len(rows) / cfg.batch_size)
        total = max(1, math.ceil(cfg.epochs * steps_per_epoch))
        warmup = min(cfg.warmup_steps, total // 2)
        opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_with_warmup(s, warmup, total))
        bf16 = resolve_dtype(cfg.precision) == torch.bfloat16
        rng = np.random.default_rng([self.seed, 3])
        order: np.ndarray = np.zeros(0, np.int64)
        self.model.train()
        losses: list[float] = []
        tokens = 0
        t0 = time.perf_counter()
        for step in range(total):
            offset = (step % steps_per_epoch) * cfg.batch_size
            if offset == 0:
                order = rng.permutation(len(rows))
            batch = [rows[int(i)] for i in order[offset:offset + cfg.batch_size]]
            loss, n = self._step(batch, opt, bf16)
            sched.step()
            losses.append(loss)
            tokens += n
            if progress is not None and ((step + 1) % 50 == 0 or step + 1 == total):
                recent = float(np.mean(losses[-50:]))
                progress(f"sid step {step + 1}/{total}: loss {recent:.3f}, "
                         f"{tokens / max(1e-9, time.perf_counter() - t0):,.0f} tok/s")
        self.model.eval()
        return {"windows": len(rows), "steps": total, "epochs": cfg.epochs, "tokens": tokens,
                "first_loss": round(float(np.mean(losses[:20])), 4),
                "last_loss": round(float(np.mean(losses[-50:])), 4),
                "tokens_per_s": round(tokens / max(1e-9, time.perf_counter() - t0), 1)}

    def _step(self, batch: list[list[int]], opt: torch.optim.Optimizer, bf16: bool) -> tuple[float, int]:
        width = max(len(r) for r in batch)
        ids = torch.full((len(batch), width), self.pad, dtype=torch.long)  # (B, T)
        mask = torch.zeros((len(batch), width), dtype=torch.long)  # (B, T)
        for b, r in enumerate(batch):
            ids[b, :len(r)] = torch.tensor(r)
            mask[b, :len(r)] = 1
        targets = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)  # (B, T-1): every next token, pads ignored
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits  # (B, T, V)
        assert logits.shape[:2] == ids.shape, f"logits {tuple(logits.shape)} vs ids {tuple(ids.shape)}"
        loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), targets.flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        opt.step()
        return float(loss.detach()), int((targets != -100).sum())

    def rank(self, query: Query, k: int) -> list[str]:
        """Beam search over the SIDs of the movies not in ``query.exclude``, after the last ``context_items``
        history items; the best ``k`` by the model's log-probability of the SID tokens."""
        from sid.decoding import constrained_beam_search
        from sid.trie import SidTrie

        keep = np.array([i not in query.exclude for i in self.sid_map.item_ids], bool)
        if not keep.any():
            return []
        ids = [self.sid_map.item_ids[int(r)] for r in np.flatnonzero(keep)]
        trie = SidTrie(ids, self.sid_map.codes[keep])
        prompt = self._ids(query.history[-self.cfg.context_items:])
        beams = max(k, self.cfg.beam_size)
        hits = constrained_beam_search(self.model, self.tokenizer, prompt, trie, self.token_map, num_beams=beams)
        return [h.item_id for h in hits[:k]]


# ------------------------------------------------------------------------------------------------ the run
class SidRecRanker:
    """:class:`training.genrec.SidRec` models as a ranker over the catalog's items (history items masked): an item
    scores the sum of its log-probabilities under every model (one model: its own)."""

    name = "sid"

    def __init__(self, models: Any, item_ids: Sequence[str]) -> None:
        self.models = list(models) if isinstance(models, (list, tuple)) else [models]
        self.item_ids = list(item_ids)
        self.row = {item: r for r, item in enumerate(self.item_ids)}

    def rank_many(self, queries: Sequence[Query], k: int, batch_size: int = 256) -> list[list[str]]:
        return self.rank_each(queries, k, batch_size)[0]

    def rank_each(self, queries: Sequence[Query], k: int,
                  batch_size: int = 256) -> tuple[list[list[str]], list[list[list[str]]]]:
        """The ensemble's top ``k`` per query, and each model's own (from the same scores; [] for one model)."""
        from training.genrec import scores

        hist = [[self.row[i] for i in q.history if i in self.row] for q in queries]
        excl = [[self.row[i] for i in q.exclude if i in self.row] for q in queries]
        out: list[list[str]] = []
        each: list[list[list[str]]] = [[] for _ in self.models] if len(self.models) > 1 else []
        for s in range(0, len(queries), batch_size):
            per_model = [scores(m, hist[s:s + batch_size], excl[s:s + batch_size]) for m in self.models]  # (B, N)
            out += self._top(sum(per_model[1:], per_model[0]), k)
            for ranked, sc in zip(each, per_model, strict=False):  # each is [] for one model
                ranked += self._top(sc, k)
        return out, each

    def _top(self, sc: np.ndarray, k: int) -> list[list[str]]:
        top = np.argsort(-sc, axis=1, kind="stable")[:, :k]
        return [[self.item_ids[int(j)] for j in row if np.isfinite(sc[b, j])] for b, row in enumerate(top)]

    def rank(self, query: Query, k: int) -> list[str]:
        return self.rank_many([query], k)[0]


def ensemble_members(cfg: MovieLensBenchConfig) -> list[tuple[SidRecConfig, SidCodesConfig]]:
    """The model settings and codes of each SID model of method ``sid``: the main one (``sid_codes``), then one per
    ``sid_also`` source. Model n runs with seed ``seed + n`` (its item-id model, k-means and training), so a source
    may repeat; a ``sid_also`` model joins ``sid_codes.attributes`` unless it is a ``text`` one (or as
    ``sid_also_attributes`` says) and never warm-starts."""
    _, model_cfg, codes_cfg, _ = cfg.effective()
    out = [(model_cfg, codes_cfg)]
    for n, source in enumerate(cfg.sid_also, 1):
        joined = source != "text" if cfg.sid_also_attributes is None else cfg.sid_also_attributes
        out.append((model_cfg.model_copy(update={"seed": cfg.seed + n}), codes_cfg.model_copy(update={
            "source": source, "warm_start": False, **({} if joined else {"attributes": []})})))
    return out


def _fit_sid_rec(cfg: MovieLensBenchConfig, data: LeaveOneOut, items: list[Item],
                 progress: Progress | None) -> tuple[SidRecRanker, dict[str, Any]]:
    """Codes (:class:`SidCodesConfig`) from the training split, then the SID model, both stopped on the validation
    item (history excluded)."""
    from sid.build import item_text
    from training.genrec import SidRec, build_codes, fit_sid_rec

    ids = [i.item_id for i in items]
    row = {item: r for r, item in enumerate(ids)}
    train = [[row[i] for i in data.train(u)] for u in data.users]
    valid = (train, [row[data.timelines[u][-2]] for u in data.users])
    models, members = [], []
    for n, (model_cfg, view) in enumerate(ensemble_members(cfg)):
        seed = model_cfg.seed
        tag = "sid" if n == 0 else f"sid ({view.source} codes, model {n + 1})"
        codes, info, init = build_codes(train, len(ids), valid, model_cfg, view, seed,
                                        lambda: [item_text(i) for i in items], _cache_dir(cfg),
                                        _prefixed(progress, f"{tag} codes: item-id model"),
                                        lambda: [i.attributes for i in items])
        info = {"codes": view.model_dump(), "config": model_cfg.model_dump(), **info}
        if progress is not None:
            progress(f"{tag}: {len(ids)} SIDs from {view.source} embeddings, levels {info['sids']['levels']}, "
                     f"{info['sids']['collision_rate']:.1%} need a suffix")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = SidRec(codes, model_cfg)
            if init is not None:
                model.warm_start(init)
            info["training"] = fit_sid_rec(model, train, valid, _prefixed(progress, tag))
        info["parameters"] = sum(p.numel() for p in model.parameters())
        models.append(model)
        members.append(info)
    if len(models) == 1:
        return SidRecRanker(models, ids), members[0]
    return SidRecRanker(models, ids), {**members[0], "members": members}


def _prefixed(progress: Progress | None, prefix: str) -> Progress | None:
    if progress is None:
        return None
    return lambda line: progress(f"{prefix}: {line.removeprefix('sid-rec ')}")


def _per_user(ranked: Sequence[Sequence[str]], targets: Sequence[str], k: int) -> dict[str, list[float]]:
    rows = [ranking_metrics(r, {t}, ks=(k,)) for r, t in zip(ranked, targets, strict=True)]
    return {f"hr@{k}": [r[f"hit@{k}"] for r in rows], f"ndcg@{k}": [r[f"ndcg@{k}"] for r in rows],
            "mrr": [r["mrr"] for r in rows]}


def _score(ranked: Sequence[Sequence[str]], targets: Sequence[str], k: int) -> dict[str, float]:
    rows = [ranking_metrics(r, {t}, ks=(k,)) for r, t in zip(ranked, targets, strict=True)]
    m = mean_metrics(rows)
    return {f"hr@{k}": m[f"hit@{k}"], f"ndcg@{k}": m[f"ndcg@{k}"], "mrr": m["mrr"]}


def _rank_all(rank: Callable[[Query, int], list[str]], queries: Sequence[Query], k: int,
              progress: Progress | None, name: str) -> list[list[str]]:
    out = []
    for n, q in enumerate(queries, 1):
        out.append(rank(q, k))
        if progress is not None and (n % 200 == 0 or n == len(queries)):
            progress(f"{name}: ranked {n}/{len(queries)} users")
    return out


def _method(name: str, cfg: MovieLensBenchConfig, data: LeaveOneOut, items: list[Item], queries: list[Query],
            progress: Progress | None) -> tuple[list[list[str]], float, float, dict[str, Any]]:
    """Fit and rank one method: (rankings, train seconds, eval seconds, details)."""
    targets = [data.target(u) for u in data.users]
    sasrec_cfg, _, _, sid_lm_cfg = cfg.effective()
    ids = [i.item_id for i in items]
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    if name == "popularity":
        ranker: Any = Popularity.from_sequences(ids, (data.train(u) for u in data.users))
    elif name == "bm25":
        ranker = Bm25Ranker(items)
    elif name == "dense":
        ranker = DenseRanker(items, query_from="history", history_items=cfg.text_history,
                             cache_dir=_cache_dir(cfg))
    elif name == "sasrec":
        ranker = train_sasrec(data.timelines, sasrec_cfg, progress=progress)
        info = ranker.info
    elif name == "sid":
        ranker, info = _fit_sid_rec(cfg, data, items, progress)
    else:
        ranker, info = _fit_sid(cfg, sid_lm_cfg, data, items, progress)
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    if name == "sid":  # the ensemble's ranking, and each of its models' alone from the same scores
        ranked, info["member_rankings"] = ranker.rank_each(queries, cfg.k)
    elif name == "sasrec":
        ranked = ranker.rank_many(queries, cfg.k)
    else:
        ranked = _rank_all(ranker.rank, queries, cfg.k, progress if name == "sid-lm" else None, name)
    eval_s = time.perf_counter() - t0
    if name == "sasrec":  # cross-check with RecBole's own test metrics, which do not exclude history items
        unfiltered = ranker.rank_many([Query(history=q.history) for q in queries], cfg.k)
        info["history_not_excluded"] = {k: round(v, 6) for k, v in _score(unfiltered, targets, cfg.k).items()}
    return ranked, train_s, eval_s, info


TRAINED: tuple[Method, ...] = ("sasrec", "sid", "sid-lm")
"""The methods that train a model (minutes each): the ones ``workers > 1`` trains in parallel processes."""


@contextlib.contextmanager
def _pool(parallel: bool, workers: int) -> Iterator[Any]:
    """A spawn process pool of ``workers`` (a fork would copy this process's torch threads and locks), or None."""
    if not parallel:
        yield None
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_exit_with_parent, initargs=(os.getpid(),)) as pool:
        yield pool


def _exit_with_parent(parent: int) -> None:
    """In a worker: exit as soon as the benchmark process is gone (killed, it cannot shut its pool down, and a
    training worker would run on for half an hour)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _method_in_worker(name: str, cfg_json: dict[str, Any]) -> tuple[list[list[str]], float, float, dict[str, Any]]:
    """:func:`_method` in a worker process: reloads the world (a second or two) and prints its own progress."""
    cfg = MovieLensBenchConfig.model_validate(cfg_json)
    catalog, _ = Catalog.load(cfg.world / CATALOG_FILE)
    items = list(catalog)
    data = load_leave_one_out(cfg.world, catalog, cfg.max_users)
    queries = [Query(text=data.queries[u], history=tuple(data.history(u)), exclude=frozenset(data.history(u)))
               for u in data.users]
    t0 = time.perf_counter()

    def progress(line: str) -> None:
        print(f"[{name} worker {time.perf_counter() - t0:7.1f}s] {line}", flush=True)

    with torch_threads(cfg.threads):
        return _method(name, cfg, data, items, queries, progress)


def _cache_dir(cfg: MovieLensBenchConfig) -> Path:
    from infra.settings import get_settings

    return cfg.cache_dir if cfg.cache_dir is not None else get_settings().cache_dir


def _fit_sid(cfg: MovieLensBenchConfig, sid_cfg: SidRetrievalConfig, data: LeaveOneOut, items: list[Item],
             progress: Progress | None) -> tuple[SidGenerativeRetriever, dict[str, Any]]:
    from sid.build import SidBuildConfig, build_sids

    sid_dir = cfg.out / SID_DIR
    build = SidBuildConfig(levels=sid_cfg.levels, codebook_size=sid_cfg.codebook_size, balanced=sid_cfg.balanced,
                           seed=cfg.seed)
    report = build_sids(build, cfg.world, sid_dir, _cache_dir(cfg))
    if progress is not None:
        progress(f"sid-lm: built {report['items']} SIDs, {report['levels']} levels x {sid_cfg.codebook_size}, "
                 f"collisions before suffix {report['collision_rate']:.1%}")
    retriever = SidGenerativeRetriever(sid_cfg, sid_dir, [i.title for i in items], cfg.seed)
    retriever.setup()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        training = retriever.train([data.train(u) for u in data.users], progress)
    info = {"sids": {k: report[k] for k in ("items", "levels", "sizes", "collision_rate", "max_suffix")},
            "training": training, "config": sid_cfg.model_dump()}
    return retriever, info


PAIRED_AGAINST = "sasrec"
"""The trained methods are compared with SASRec user by user."""


def _paired(cfg: MovieLensBenchConfig, per_user: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """Each trained method against SASRec: paired per-user bootstrap of the difference of HR@k and NDCG@k."""
    out: dict[str, Any] = {}
    if PAIRED_AGAINST not in per_user or not cfg.n_boot:
        return out
    for name in per_user:
        if not name.startswith("sid"):
            continue
        out[f"{name} - {PAIRED_AGAINST}"] = {
            metric: {**{k: round(float(v), 6) for k, v in paired_bootstrap(
                per_user[PAIRED_AGAINST][metric], per_user[name][metric], n_boot=cfg.n_boot, seed=cfg.seed).items()},
                "excludes_zero": None}
            for metric in (f"hr@{cfg.k}", f"ndcg@{cfg.k}")}
        for v in out[f"{name} - {PAIRED_AGAINST}"].values():
            v["n"] = int(v["n"])
            v["excludes_zero"] = excludes_zero(v["lo"], v["hi"])
    return out


def run_movielens_benchmark(cfg: MovieLensBenchConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Run the benchmark of ``cfg`` and write ``report.json``, ``report.md`` and ``manifest.json`` under
    ``cfg.out``; returns the report (``format_table`` prints it). Raises :class:`MovieLensBenchError` for
    a world it cannot use."""
    catalog_path = cfg.world / CATALOG_FILE
    if not catalog_path.is_file():
        raise MovieLensBenchError(f"{cfg.world} has no {CATALOG_FILE}: create it with "
                                  f"`sidekick world import-movielens --out {cfg.world}`")
    catalog, _ = Catalog.load(catalog_path)
    items = list(catalog)
    if "sid" in cfg.methods:  # before any training: the worker would only fail once SASRec had finished
        missing = [a for a in cfg.effective()[2].attributes if not any(i.attributes.get(a) for i in items)]
        if missing:
            raise MovieLensBenchError(f"sid_codes.attributes {missing}: no item of {catalog_path} has them; "
                                      "set sid_codes.attributes to attributes the catalog has, or [] for none")
    data = load_leave_one_out(cfg.world, catalog, cfg.max_users)
    queries = [Query(text=data.queries[u], history=tuple(data.history(u)), exclude=frozenset(data.history(u)))
               for u in data.users]
    targets = [data.target(u) for u in data.users]
    cfg.out.mkdir(parents=True, exist_ok=True)
    methods: dict[str, Any] = {}
    per_user: dict[str, dict[str, list[float]]] = {}
    names = [m for m in METHODS if m in cfg.methods]
    trained = [m for m in names if m in TRAINED] if cfg.workers > 1 else []
    with torch_threads(cfg.threads), _pool(len(trained) > 1, cfg.workers) as pool:
        # only the fields set: a config re-read whole would have every field set and the presets turned off
        futures = {name: pool.submit(_method_in_worker, name, cfg.model_dump(mode="json", exclude_unset=True))
                   for name in trained} if len(trained) > 1 else {}
        if futures and progress is not None:
            progress(f"{', '.join(futures)}: training in {min(cfg.workers, len(futures))} worker processes "
                     f"({cfg.threads} thread{'s' if cfg.threads != 1 else ''} each; their progress is printed "
                     "by the workers)")
        for name in names:
            if progress is not None and name not in futures:
                progress(f"{name}: start")
            if name in futures:
                ranked, train_s, eval_s, info = futures[name].result()
            else:
                ranked, train_s, eval_s, info = _method(name, cfg, data, items, queries, progress)
            members = info.get("members", [])
            for n, (member, member_ranked) in enumerate(zip(members, info.pop("member_rankings", []), strict=True)):
                label = f"sid: {member['codes']['source']} codes{f', model {n + 1},' if n else ''} only"
                per_user[label] = _per_user(member_ranked, targets, cfg.k)
                methods[label] = {**_score(member_ranked, targets, cfg.k),
                                  "train_s": round(member["training"]["train_s"] + member.get("pretrain", {}).get(
                                      "train_s", 0.0), 2), "eval_s": 0.0, "users": len(member_ranked)}
            per_user[name] = _per_user(ranked, targets, cfg.k)
            methods[name] = {**_score(ranked, targets, cfg.k), "train_s": round(train_s, 2),
                             "eval_s": round(eval_s, 2), "users": len(ranked), **({"details": info} if info else {})}
            if progress is not None:
                progress(f"{name}: hr@{cfg.k} {methods[name][f'hr@{cfg.k}']:.4f}  "
                         f"ndcg@{cfg.k} {methods[name][f'ndcg@{cfg.k}']:.4f}  ({train_s:.1f} s + {eval_s:.1f} s)")
    report = _report(cfg, data, items, methods)
    report["paired"] = _paired(cfg, per_user)
    report["by_target_count"] = by_target_count(data, per_user, cfg.k)
    _write(cfg, report)
    import json

    (cfg.out / PER_USER_JSON).write_text(json.dumps({"users": data.users, "methods": per_user}))
    return report


COUNT_BUCKETS = (0, 20, 60, 120, 200)
"""Lower edges of the buckets of :func:`by_target_count` (training ratings of the test movie)."""


def by_target_count(data: LeaveOneOut, per_user: dict[str, dict[str, list[float]]], k: int) -> dict[str, Any]:
    """NDCG@k of each method per bucket of how often the user's test movie was rated in training (all users'
    training parts): the held-out last ratings lean to new, rarely rated films far more than the training ones."""
    counts = Counter(item for u in data.users for item in data.train(u))
    edges = [*COUNT_BUCKETS, math.inf]
    bucket = [bisect.bisect_right(COUNT_BUCKETS, counts[data.target(u)]) - 1 for u in data.users]
    labels = [f"{lo}-{hi - 1}" if hi != math.inf else f"{lo}+" for lo, hi in itertools.pairwise(edges)]
    out: dict[str, Any] = {"buckets": labels, "users": [bucket.count(b) for b in range(len(labels))], "ndcg": {}}
    for name, rows in per_user.items():
        vals = rows[f"ndcg@{k}"]
        out["ndcg"][name] = [round(sum(v for v, b in zip(vals, bucket, strict=True) if b == i) / n, 4) if n else None
                             for i, n in enumerate(out["users"])]
    return out


def _report(cfg: MovieLensBenchConfig, data: LeaveOneOut, items: list[Item], methods: dict[str, Any]) -> dict[str, Any]:
    interactions = sum(len(t) for t in data.timelines.values())
    return {
        "benchmark": "movielens-next-item", "k": cfg.k, "quick": cfg.quick,
        "protocol": "leave-one-out (last rating = test, second last = validation, the rest = training); full "
                    f"ranking over all {len(items):,} items except the user's history; HR@{cfg.k}, NDCG@{cfg.k}",
        "counts": {"users": len(data.users), "items": len(items), "interactions": interactions,
                   "skipped_users": data.skipped_users},
        "methods": methods, "config": cfg.model_dump(mode="json"),
        "machine": {"cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()],
                    "torch_threads": cfg.threads or torch.get_num_threads()},
    }


def format_table(report: dict[str, Any]) -> str:
    """The report's one table, in markdown: method x HR@k, NDCG@k, train s, eval s."""
    k = report["k"]
    lines = [f"| method | HR@{k} | NDCG@{k} | train s | eval s |", "|---|---:|---:|---:|---:|"]
    for name, m in report["methods"].items():
        lines.append(f"| {name} | {m[f'hr@{k}']:.4f} | {m[f'ndcg@{k}']:.4f} | {m['train_s']:.1f} | {m['eval_s']:.1f} |")
    for pair, metrics in report.get("paired", {}).items():
        m = metrics[f"ndcg@{k}"]
        lines.append("")
        lines.append(f"NDCG@{k} {pair}: {m['delta']:+.4f}, 95 % CI [{m['lo']:+.4f}, {m['hi']:+.4f}] (paired bootstrap "
                     f"over {m['n']} users{', excludes 0' if m['excludes_zero'] else ''})")
    buckets = report.get("by_target_count")
    if buckets:
        lines += ["", f"NDCG@{k} by how often the test movie was rated in training (users per bucket in brackets):", "",
                  "| method | " + " | ".join(f"{b} ({n})" for b, n in zip(buckets["buckets"], buckets["users"],
                                                                          strict=True)) + " |",
                  "|---|" + "---:|" * len(buckets["buckets"])]
        for name, vals in buckets["ndcg"].items():
            lines.append(f"| {name} | " + " | ".join("" if v is None else f"{v:.4f}" for v in vals) + " |")
    c = report["counts"]
    lines.append("")
    lines.append(f"{c['users']:,} users, {c['items']:,} items, {c['interactions']:,} ratings; "
                 f"{'quick' if report['quick'] else 'full'} mode; {report['protocol']}.")
    return "\n".join(lines)


def _write(cfg: MovieLensBenchConfig, report: dict[str, Any]) -> None:
    import json

    (cfg.out / REPORT_JSON).write_text(json.dumps(report, indent=2))
    (cfg.out / REPORT_MD).write_text(format_table(report) + "\n")
    write_manifest(cfg.out, stage="eval.movielens", config=cfg.model_dump(mode="json"), counts=report["counts"],
                   inputs=[cfg.world / CATALOG_FILE, cfg.world / LOGS_FILE, cfg.world / TASKS_FILE])
