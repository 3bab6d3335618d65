"""The stages of ``sidekick curate``: small objects whose ``run()`` fills one ``OUT/stages/<nn_name>/``.

=============  ======================================================  ===============================
stage          does                                                    writes (in its folder)
=============  ======================================================  ===============================
00_prepare     plan byte-range shards; scrub and check tasks; the      shards.json, tasks.jsonl,
               label-leakage table (target ids and titles per task)    leakage.json, quarantine.jsonl
01_records     per shard, in a process pool: parse/validate,           shards/NNNNN/… (see shard_job)
               anonymise, quality filters, dedup keys
02_dedup       exact and near-duplicate clusters over the summaries    status.npy, dup_of.npy
03_select      diversity (embed, k-means, cap) and difficulty          selected.npy, cluster.npy,
                                                                       difficulty.npy, certainty.npy
04_split       train / val / test by user, by task (one wording       split.npy
               family in one split) or by time
05_write       stream kept sessions into OUT/<split>/logs.jsonl,       (outputs go to OUT/)
               tasks per split, catalog, quarantine
=============  ======================================================  ===============================

Global stages read only compact per-session arrays, indexed by *position*: the place of a session
among all sessions that passed the records stage, in input order.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data_curation import shard_job
from data_curation.config import CurateConfig
from data_curation.dedup import NearDupIndex
from data_curation.lexicon import load_lexicon
from data_curation.pii import PII_RULES_VERSION, Scrubber
from data_curation.pseudonym import Pseudonymiser
from data_curation.quality import normalise_title
from data_curation.select import (
    DIFFICULTY_SETS,
    auto_clusters,
    difficulty,
    hashing_embed,
    kmeans_assign,
    load_certainty,
    pick,
    water_fill,
)
from data_curation.shards import Shard, plan_shards
from data_curation.split import SPLITS, assign_splits, assign_task_splits, splitmix64, task_groups
from data_curation.stagedir import StageDir, fingerprint
from harness.tasks import Message, Task
from infra.layout import CATALOG_FILE, LOGS_FILE, TASKS_FILE
from infra.recordio import RecordReader, RecordWriter

Progress = Callable[[int], None]
_EMPTY_SIG = np.iinfo(np.uint32).max
_WORD = re.compile(r"[^\W\d_]+")


def _chunks(items: Any, n: int) -> Iterator[list[Any]]:
    """Lists of ``n`` consecutive items of the iterable ``items`` (the last one shorter), read lazily."""
    it = iter(items)
    while chunk := [x for _, x in zip(range(n), it, strict=False)]:
        yield chunk


def _scrub_config(cfg: CurateConfig) -> dict[str, Any]:
    """What the scrubber's output depends on (a change re-runs the stages that scrub)."""
    a = cfg.anonymise
    from data_curation.lexicon import LEXICON_VERSION, MAX_RANK

    tagger: list[Any] | None = None
    if a.tagger:  # the trained model's own fingerprint: new training sets or recipe, a new model, a new scrub
        from data_curation.tagger import TAGGER_VERSION, fingerprint
        from infra.text_encoder import bf16_supported

        if a.tagger_dir is None:
            tagger = [TAGGER_VERSION, fingerprint()]
        else:  # a model trained elsewhere: what it says of itself, and its weights' size and time
            weights = sorted(Path(a.tagger_dir).glob("*.safetensors"))
            tagger = [TAGGER_VERSION, str(a.tagger_dir), (Path(a.tagger_dir) / "tagger.json").read_text(),
                      [(w.name, w.stat().st_size, w.stat().st_mtime_ns) for w in weights]]
        tagger.append("bf16" if bf16_supported() else "fp32")  # PiiTagger's precision "auto": the spans may differ
    return {"phone_regions": a.phone_regions, "names": a.names, "ner_model": a.ner_model if a.names == "ner" else None,
            "protect_catalog": a.protect_catalog, "lexicon": [LEXICON_VERSION, MAX_RANK], "rules": PII_RULES_VERSION,
            "tagger": tagger}


@dataclass
class Context:
    """What every stage of one run shares."""

    cfg: CurateConfig
    in_dir: Path
    out_dir: Path
    seed: int
    workers: int
    cache_dir: Path
    pseudonymiser: Pseudonymiser
    progress: Progress
    root_fp: str

    @property
    def logs(self) -> Path:
        return self.in_dir / LOGS_FILE

    def optional(self, name: str) -> Path | None:
        path = self.in_dir / name
        return path if path.is_file() else None


class _Stage:
    """A stage folder plus the fingerprint chain; subclasses set ``name`` and implement ``_run``."""

    name = ""

    def __init__(self, ctx: Context, upstream: str, config: Any) -> None:
        self.ctx = ctx
        self.config = config
        self.dir = StageDir(ctx.out_dir, self.name, fingerprint(self.name, config, upstream))

    @property
    def fp(self) -> str:
        return self.dir.fingerprint

    @property
    def path(self) -> Path:
        return self.dir.path

    def run(self) -> bool:
        """Run unless already done; returns True when it ran (False = resumed from a finished folder)."""
        if self.dir.done:
            return False
        self.dir.begin()
        counts = self._run()
        self.dir.finish(self.config, counts, inputs=[self.ctx.logs])
        return True

    def _run(self) -> dict[str, Any]:
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------
class PrepareStage(_Stage):
    name = "00_prepare"

    def __init__(self, ctx: Context) -> None:
        cfg = ctx.cfg
        config = {"shard_bytes": cfg.shard_bytes, "anonymise": _scrub_config(cfg),
                  "label_leakage": cfg.quality.label_leakage}
        super().__init__(ctx, ctx.root_fp, config)

    def shards(self) -> list[Shard]:
        return [Shard(**s) for s in json.loads((self.path / "shards.json").read_text())]

    def _run(self) -> dict[str, Any]:
        shards = plan_shards(self.ctx.logs, self.ctx.cfg.shard_bytes)
        (self.path / "shards.json").write_text(json.dumps([s.__dict__ for s in shards]) + "\n")
        protected = self._protected() if self.ctx.cfg.anonymise.protect_catalog else []
        (self.path / "protected.json").write_text(json.dumps(protected, ensure_ascii=False) + "\n")
        targets, counts = self._tasks(frozenset(protected))
        needles = self._leakage(targets) if self.ctx.cfg.quality.label_leakage else {}
        (self.path / "leakage.json").write_text(json.dumps(needles, ensure_ascii=False, sort_keys=True) + "\n")
        return {"shards": len(shards), **counts, "leakage_tasks": len(needles), "protected_words": len(protected)}

    def _protected(self) -> list[str]:
        """Case-folded words of the catalog's titles, categories and string attributes (brands, POI names)."""
        words: set[str] = set()
        for obj in self._catalog_rows():
            attrs: dict[str, Any] = obj["attributes"] if isinstance(obj.get("attributes"), dict) else {}
            values = [obj.get("title"), *(obj.get("category_path") or []), *attrs.values()]
            for v in values:
                for s in (v if isinstance(v, list) else [v]):
                    if isinstance(s, str):
                        words.update(w.casefold() for w in _WORD.findall(s))
        return sorted(words)

    def _catalog_rows(self) -> Iterator[dict[str, Any]]:
        """The catalog's JSON objects, if there is a catalog (malformed lines skipped: the catalog is not
        curated here; `sidekick validate` reports them)."""
        catalog = self.ctx.optional(CATALOG_FILE)
        if catalog is None:
            return
        with catalog.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    yield obj

    def _tasks(self, protected: frozenset[str]) -> tuple[dict[str, list[str]], dict[str, Any]]:
        """Scrub task messages into tasks.jsonl; returns target ids per task and counts."""
        path = self.ctx.optional(TASKS_FILE)
        targets: dict[str, list[str]] = {}
        placeholders: Counter[str] = Counter()
        with RecordWriter(self.path / TASKS_FILE) as out:
            if path is None:
                return targets, {"tasks": 0, "tasks_quarantined": 0}
            a = self.ctx.cfg.anonymise
            scrubber = Scrubber.configured(a.phone_regions, a.names, a.ner_model, protected, a.tagger, a.tagger_dir)
            reader = RecordReader(path, Task, skip_bad=True, quarantine=self.path / "quarantine.jsonl",
                                  allow_empty=True, quarantine_content=False)
            for chunk in _chunks(reader, 256):
                scrubber.prefetch([m.content for task in chunk for m in task.messages])  # the tagger, in batches
                for task in chunk:
                    messages = []
                    for m in task.messages:
                        text, found = scrubber.scrub(m.content)
                        placeholders.update(d.type for d in found)
                        messages.append(Message(role=m.role, content=text))
                    out.write(task.model_copy(update={"messages": messages}))
                    if task.target is not None:
                        targets[task.task_id] = task.target.item_ids
        counts = {"tasks": reader.stats.good, "tasks_quarantined": reader.stats.bad,
                  "task_placeholders": dict(sorted(placeholders.items()))}
        return targets, counts

    def _leakage(self, targets: dict[str, list[str]]) -> dict[str, list[str]]:
        """task_id -> strings that must not appear in its user text: target ids and titles (10+ chars)."""
        wanted = {i for ids in targets.values() for i in ids}
        titles: dict[str, str] = {}
        if wanted:
            for obj in self._catalog_rows():
                if obj.get("item_id") in wanted and isinstance(obj.get("title"), str):
                    titles[obj["item_id"]] = normalise_title(obj["title"])
        needles: dict[str, list[str]] = {}
        for tid, ids in targets.items():
            found = [i.casefold() for i in ids] + [titles[i] for i in ids if len(titles.get(i, "")) >= 10]
            needles[tid] = sorted(set(found))
        return needles


# ------------------------------------------------------------------------------------------------
class RecordsStage(_Stage):
    name = "01_records"

    def __init__(self, ctx: Context, prepare: PrepareStage) -> None:
        cfg = ctx.cfg
        config = {"anonymise": _scrub_config(cfg), "quality": cfg.quality.model_dump(),
                  "num_perm": cfg.dedup.num_perm, "shingle_chars": cfg.dedup.shingle_chars,
                  "max_text_chars": cfg.select.max_text_chars}
        super().__init__(ctx, prepare.fp, config)
        self.prepare = prepare

    def shard_dirs(self) -> list[Path]:
        return [self.path / "shards" / s.name for s in self.prepare.shards()]

    def _run(self) -> dict[str, Any]:
        if self.ctx.cfg.anonymise.names != "rules":
            load_lexicon()  # built here once (about 30 s, 2 GB), not by every worker at the same time
        jobs = [
            shard_job.ShardJob(self.ctx.logs, shard, d, self.ctx.cfg, self.ctx.seed, self.ctx.pseudonymiser,
                               self.prepare.path / "leakage.json", self.prepare.path / "protected.json")
            for shard, d in zip(self.prepare.shards(), self.shard_dirs(), strict=True)
        ]
        todo = [j for j in jobs if not (j.out / "counts.json").is_file()]
        workers = min(self.ctx.workers, len(todo))
        if workers <= 1:
            for job in todo:
                self.ctx.progress(shard_job.run_shard_job(job)["lines"])
        else:
            spawn = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=workers, mp_context=spawn) as pool:
                for fut in as_completed([pool.submit(shard_job.run_shard_job, j) for j in todo]):
                    self.ctx.progress(fut.result()["lines"])
        return self._totals([json.loads((d / "counts.json").read_text()) for d in self.shard_dirs()])

    @staticmethod
    def _totals(per_shard: list[dict[str, Any]]) -> dict[str, Any]:
        totals: dict[str, Any] = {"shards": len(per_shard), "kept_per_shard": [c["kept"] for c in per_shard]}
        for key in ("lines", "valid", "blank_lines", "kept", "sessions_with_pii"):
            totals[key] = sum(c[key] for c in per_shard)
        for key in ("quarantined", "dropped", "placeholders"):
            merged: Counter[str] = Counter()
            for c in per_shard:
                merged.update(c[key])
            totals[key] = dict(sorted(merged.items()))
        return totals

    def summaries(self, *fields: str) -> Iterator[dict[str, np.ndarray]]:
        for d in self.shard_dirs():
            with np.load(d / "summary.npz") as z:
                yield {f: z[f] for f in fields}

    def column(self, field: str) -> np.ndarray:
        parts = [s[field] for s in self.summaries(field)]
        return np.concatenate(parts) if parts else np.zeros(0)

    def index_rows(self) -> Iterator[dict[str, Any]]:
        for d in self.shard_dirs():
            with (d / "index.jsonl").open(encoding="utf-8") as fh:
                for line in fh:
                    yield json.loads(line)


# ------------------------------------------------------------------------------------------------
class DedupStage(_Stage):
    name = "02_dedup"

    def __init__(self, ctx: Context, records: RecordsStage) -> None:
        super().__init__(ctx, records.fp, ctx.cfg.dedup.model_dump())
        self.records = records

    def _run(self) -> dict[str, Any]:
        cfg = self.ctx.cfg.dedup
        total = int(self.records.dir.counts()["kept"])
        status = np.zeros(total, dtype=np.int8)  # 0 keep, 1 exact duplicate, 2 near duplicate
        dup_of = np.full(total, -1, dtype=np.int64)
        seen: dict[int, int] = {}
        near = NearDupIndex(cfg.threshold, cfg.num_perm, self.ctx.seed) if cfg.near else None
        pos = 0
        for part in self.records.summaries("exact", "minhash"):
            for h, sig in zip(part["exact"].tolist(), part["minhash"], strict=True):
                rep = seen.setdefault(h, pos) if cfg.exact else pos
                if rep != pos:
                    status[pos], dup_of[pos] = 1, rep
                elif near is not None and not (sig == _EMPTY_SIG).all():
                    match = near.match_or_add(pos, sig)
                    if match is not None:
                        status[pos], dup_of[pos] = 2, match
                pos += 1
        np.save(self.path / "status.npy", status)
        np.save(self.path / "dup_of.npy", dup_of)
        return {
            "sessions": total, "kept": int((status == 0).sum()),
            "exact_removed": int((status == 1).sum()), "exact_clusters": len(np.unique(dup_of[status == 1])),
            "near_removed": int((status == 2).sum()), "near_clusters": len(np.unique(dup_of[status == 2])),
        }

    def status(self) -> np.ndarray:
        return np.load(self.path / "status.npy")


# ------------------------------------------------------------------------------------------------
class SelectStage(_Stage):
    name = "03_select"

    def __init__(self, ctx: Context, records: RecordsStage, dedup: DedupStage) -> None:
        config = ctx.cfg.select.model_dump(exclude={"cache_dir"})
        super().__init__(ctx, dedup.fp, config)
        self.records = records
        self.dedup = dedup

    def _run(self) -> dict[str, Any]:
        cfg = self.ctx.cfg.select
        candidate = self.dedup.status() == 0
        positions = np.flatnonzero(candidate)
        texts: list[str] = []
        task_ids: list[str | None] = []
        for pos, row in enumerate(self.records.index_rows()):
            if candidate[pos]:
                texts.append(row["text"])
                task_ids.append(row["task_id"])
        target = max(1, round(cfg.keep_fraction * len(positions))) if len(positions) else 0
        cluster = np.full(len(candidate), -1, dtype=np.int32)
        selected = np.zeros(len(candidate), dtype=bool)
        counts: dict[str, Any] = {"candidates": len(positions), "target": target}
        if target >= len(positions):
            selected[positions] = True
            counts.update(clusters=None, clusters_covered=None, coverage=None, embed_seconds=0.0, texts_embedded=0)
        else:
            keep, assign, k, seconds = self._diverse(texts, positions, target)
            selected[positions[keep]] = True
            cluster[positions] = assign
            covered = len(np.unique(assign[keep]))
            counts.update(clusters=k, clusters_covered=covered, coverage=covered / k, embed_seconds=seconds,
                          texts_embedded=len(set(texts)))
        counts["kept"] = int(selected.sum())
        counts.update(self._difficulty(selected, candidate, task_ids))
        np.save(self.path / "selected.npy", selected)
        np.save(self.path / "cluster.npy", cluster)
        return counts

    def _diverse(
        self, texts: list[str], positions: np.ndarray, target: int
    ) -> tuple[np.ndarray, np.ndarray, int, float]:
        """Embed unique texts, cluster them, water-fill the caps; returns mask, clusters, k, embed seconds."""
        cfg = self.ctx.cfg.select
        unique = sorted(set(texts))
        where = {t: i for i, t in enumerate(unique)}
        t0 = time.perf_counter()
        if cfg.embedder == "minilm":
            from infra.text_encoder import encode_cached

            vectors = encode_cached(unique, self.ctx.cache_dir)
        else:
            vectors = hashing_embed(unique)
        seconds = round(time.perf_counter() - t0, 3)
        k = auto_clusters(len(unique), target, cfg.clusters)
        assign = kmeans_assign(vectors, k, cfg.kmeans_iters, self.ctx.seed)[[where[t] for t in texts]]
        take = water_fill(np.bincount(assign, minlength=k), target)  # an empty cluster counts as uncovered
        order = splitmix64(positions.astype(np.uint64) ^ np.uint64(self.ctx.seed))
        return pick(assign, take, order), assign.astype(np.int32), k, seconds

    def _difficulty(self, selected: np.ndarray, candidate: np.ndarray, task_ids: list[str | None]) -> dict[str, Any]:
        cfg = self.ctx.cfg.select
        scores = load_certainty(cfg.certainty_file) if cfg.certainty_file else {}
        sets, cert = difficulty(task_ids, scores, cfg.certainty_threshold)
        full_sets = np.zeros(len(candidate), dtype=np.int8)
        full_cert = np.full(len(candidate), np.nan, dtype=np.float32)
        full_sets[candidate], full_cert[candidate] = sets, cert
        np.save(self.path / "difficulty.npy", full_sets)
        np.save(self.path / "certainty.npy", full_cert)
        kept_sets = full_sets[selected]
        return {"certainty_file": cfg.certainty_file is not None, "scored_tasks": len(scores),
                "difficulty": {name: int((kept_sets == i).sum()) for i, name in enumerate(DIFFICULTY_SETS)}}

    def load(self, name: str) -> np.ndarray:
        return np.load(self.path / f"{name}.npy")


# ------------------------------------------------------------------------------------------------
class SplitStage(_Stage):
    name = "04_split"

    def __init__(self, ctx: Context, prepare: PrepareStage, records: RecordsStage, select: SelectStage) -> None:
        super().__init__(ctx, select.fp, ctx.cfg.split.model_dump())
        self.prepare = prepare
        self.records = records
        self.select = select

    def _run(self) -> dict[str, Any]:
        cfg = self.ctx.cfg.split
        selected = self.select.load("selected")
        user = self.records.column("user").astype(np.uint64)
        started = self.records.column("started").astype(np.float64)
        task_ids: list[str | None] = [row["task_id"] for row in self.records.index_rows()]
        counts: dict[str, Any] = {}
        split = np.full(len(selected), -1, dtype=np.int8)
        group = None
        if cfg.mode == "task":
            group, kind, counts["task_groups"] = self._groups(task_ids)
            chosen = [t for t, keep in zip(task_ids, selected.tolist(), strict=True) if keep]
            split[selected] = assign_task_splits(user[selected], group[selected], chosen, kind, cfg, self.ctx.seed)
        else:
            split[selected] = assign_splits(user[selected], started[selected], cfg, self.ctx.seed)
        np.save(self.path / "split.npy", split)
        counts["user_in_test_dropped"] = int((split == 3).sum())
        tasks = np.array([t or "" for t in task_ids], dtype=object)
        for i, name in enumerate(SPLITS):
            inside = split == i
            counts[name] = {"sessions": int(inside.sum()), "users": len(np.unique(user[inside])),
                            "task_ids": len(set(tasks[inside].tolist()) - {""})}
        self._check(split, user, tasks, group)
        return counts

    def _groups(self, task_ids: list[str | None]) -> tuple[np.ndarray, dict[str, str], dict[str, int]]:
        """Per position the group key of its task (0 = no task); task id -> kind; counts of the grouping."""
        texts: dict[str, str] = {}
        kind: dict[str, str] = {}
        with (self.prepare.path / TASKS_FILE).open(encoding="utf-8") as fh:
            for line in fh:
                obj = json.loads(line)
                texts[obj["task_id"]] = "\n".join(m["content"] for m in obj["messages"] if m["role"] == "user")
                kind[obj["task_id"]] = obj["kind"]
        for tid in {t for t in task_ids if t} - set(texts):
            texts[tid] = ""  # a task id without a task record: its sessions still stay together
        d = self.ctx.cfg.dedup
        keys = task_groups(texts, near_threshold=self.ctx.cfg.split.near_threshold, num_perm=d.num_perm,
                           shingle_chars=d.shingle_chars, seed=self.ctx.seed)
        group = np.array([keys[t] if t else 0 for t in task_ids], dtype=np.uint64)
        sizes = Counter(keys.values())
        return group, kind, {"tasks": len(keys), "groups": len(sizes), "largest": max(sizes.values(), default=0)}

    def _check(self, split: np.ndarray, user: np.ndarray, tasks: np.ndarray, group: np.ndarray | None) -> None:
        """Nothing that must stay in one split is in two: users (user, time), tasks and wordings (task)."""
        def shared(values: np.ndarray, what: str, where: np.ndarray | None = None) -> None:
            per = [set(values[(split == i) if where is None else (split == i) & where].tolist())
                   for i in range(len(SPLITS))]
            both = (per[0] & per[1]) | (per[0] & per[2]) | (per[1] & per[2])
            if both:
                raise AssertionError(f"{len(both)} {what} fall in two splits; the split is broken")

        if group is None:
            shared(user, "users")
        else:
            shared(tasks, "tasks", tasks != "")
            shared(group, "task wordings", group != 0)

    def split(self) -> np.ndarray:
        return np.load(self.path / "split.npy")


# ------------------------------------------------------------------------------------------------
class WriteStage(_Stage):
    """Streams the kept sessions into ``OUT/<split>/logs.jsonl`` and writes everything beside them."""

    name = "05_write"

    def __init__(self, ctx: Context, prepare: PrepareStage, records: RecordsStage, select: SelectStage,
                 split: SplitStage) -> None:
        super().__init__(ctx, split.fp, {})
        self.prepare, self.records, self.select, self.splits = prepare, records, select, split

    def outputs(self) -> list[Path]:
        out = self.ctx.out_dir
        return [out / s / LOGS_FILE for s in SPLITS] + [out / s / TASKS_FILE for s in SPLITS] + [
            out / "quarantine.jsonl"]

    def run(self) -> bool:
        if self.dir.done and all(p.is_file() for p in self.outputs()):
            return False
        self.dir.begin()
        self.dir.finish(self.config, self._run(), inputs=[self.ctx.logs])
        return True

    def _run(self) -> dict[str, Any]:
        task_sets = self._sessions()
        counts: dict[str, Any] = self._tasks(task_sets)
        for s in SPLITS:  # an earlier run's difficulty sets must not outlive a run without scores
            (self.ctx.out_dir / s / "difficulty.jsonl").unlink(missing_ok=True)
        if self.ctx.cfg.select.certainty_file is not None:
            self._difficulty(task_sets)
        catalog = self.ctx.optional(CATALOG_FILE)
        (self.ctx.out_dir / CATALOG_FILE).unlink(missing_ok=True)
        if catalog is not None:
            tmp = self.ctx.out_dir / (CATALOG_FILE + ".tmp")
            shutil.copyfile(catalog, tmp)
            os.replace(tmp, self.ctx.out_dir / CATALOG_FILE)
        counts["quarantine_entries"] = self._quarantine()
        seen: Counter[str] = Counter(t for ids in task_sets.values() for t in ids)
        counts["tasks_in_several_splits"] = sum(1 for n in seen.values() if n > 1)
        return counts

    def _sessions(self) -> dict[str, set[str]]:
        split = self.splits.split()
        writers = {s: RecordWriter(self.ctx.out_dir / s / LOGS_FILE) for s in SPLITS}
        tasks: dict[str, set[str]] = {s: set() for s in SPLITS}
        pos = 0
        try:
            for d in self.records.shard_dirs():
                with (d / "sessions.jsonl").open(encoding="utf-8") as fh:
                    for line in fh:
                        s = int(split[pos])
                        pos += 1
                        if 0 <= s < len(SPLITS):
                            obj = json.loads(line)
                            writers[SPLITS[s]].write(obj)
                            if obj.get("task_id"):
                                tasks[SPLITS[s]].add(obj["task_id"])
        except BaseException:
            for w in writers.values():
                w.abort()
            raise
        for w in writers.values():
            w.close()
        return tasks

    def _tasks(self, task_sets: dict[str, set[str]]) -> dict[str, dict[str, Any]]:
        """Write each split's tasks; per split the number written and how many of each kind."""
        writers = {s: RecordWriter(self.ctx.out_dir / s / TASKS_FILE) for s in SPLITS}
        kinds: dict[str, Counter[str]] = {s: Counter() for s in SPLITS}
        with (self.prepare.path / TASKS_FILE).open(encoding="utf-8") as fh:
            for line in fh:
                obj = json.loads(line)
                for s in SPLITS:
                    if obj["task_id"] in task_sets[s]:
                        writers[s].write(obj)
                        kinds[s][str(obj.get("kind"))] += 1
        for w in writers.values():
            w.close()
        return {s: {"tasks": w.count, "kinds": dict(sorted(kinds[s].items()))} for s, w in writers.items()}

    def _difficulty(self, task_sets: dict[str, set[str]]) -> None:
        cfg = self.ctx.cfg.select
        assert cfg.certainty_file is not None
        scores = load_certainty(cfg.certainty_file)
        for s in SPLITS:
            with RecordWriter(self.ctx.out_dir / s / "difficulty.jsonl") as w:
                for tid in sorted(task_sets[s]):
                    c = scores.get(tid)
                    name = "unscored" if c is None else ("high_certainty" if c >= cfg.certainty_threshold
                                                         else "low_certainty")
                    w.write({"task_id": tid, "certainty": c, "set": name})

    def _quarantine(self) -> int:
        parts = [self.prepare.path / "quarantine.jsonl"] + [d / "quarantine.jsonl" for d in self.records.shard_dirs()]
        target = self.ctx.out_dir / "quarantine.jsonl"
        tmp = target.with_name(target.name + ".tmp")
        n = 0
        with tmp.open("w", encoding="utf-8") as out:
            for part in parts:
                if part.is_file():
                    with part.open(encoding="utf-8") as fh:
                        for line in fh:
                            out.write(line)
                            n += 1
        os.replace(tmp, target)
        return n
