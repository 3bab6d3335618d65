"""One shard of the records stage, run in a worker process: read, anonymise, filter, hash, write.

A finished shard is a directory ``shards/NNNNN/`` (written as ``NNNNN.tmp`` and renamed, so it either
exists whole or not at all) holding:

- ``sessions.jsonl`` — anonymised sessions that passed the quality filters, in input order;
- ``index.jsonl`` — per kept session: ``session_id``, ``task_id``, ``text`` (first user text, scrubbed);
- ``summary.npz`` — per kept session: ``line``, ``exact`` (uint64), ``user`` (uint64), ``started``,
  ``minhash`` (uint32, (n, num_perm));
- ``scored.jsonl`` — per valid session: ``{"s": session_id, "d": [[field, start, end, type], …]}``
  (detected PII positions, for scoring against an answer key; never the values);
- ``quarantine.jsonl`` — malformed lines with their reason (only when there were any);
- ``counts.json`` — lines, blank lines, quarantined and dropped by reason, kept, placeholders.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data_curation.config import CurateConfig
from data_curation.processor import SessionProcessor, user_key
from data_curation.pseudonym import Pseudonymiser
from data_curation.records import Session
from data_curation.shards import Shard, shard_reader
from infra.recordio import RecordWriter


@dataclass(frozen=True)
class ShardJob:
    """Everything a worker needs; picklable (the key travels in memory, never through a file)."""

    logs: Path
    shard: Shard
    out: Path
    config: CurateConfig
    seed: int
    pseudonymiser: Pseudonymiser
    leakage_file: Path | None
    protected_file: Path | None = None


def _load_protected(path: Path | None) -> frozenset[str]:
    if path is None or not path.is_file():
        return frozenset()
    return frozenset(json.loads(path.read_text(encoding="utf-8")))


def _load_leakage(path: Path | None) -> dict[str, Sequence[str]]:
    if path is None or not path.is_file():
        return {}
    data: dict[str, Sequence[str]] = json.loads(path.read_text(encoding="utf-8"))
    return data


class _Columns:
    """Per-kept-session arrays, grown as the shard is read."""

    def __init__(self) -> None:
        self.line: list[int] = []
        self.exact: list[int] = []
        self.user: list[int] = []
        self.started: list[float] = []
        self.minhash: list[np.ndarray] = []

    def save(self, path: Path, num_perm: int) -> None:
        sig = np.stack(self.minhash) if self.minhash else np.zeros((0, num_perm), np.uint32)
        with path.open("wb") as fh:
            np.savez(fh, line=np.asarray(self.line, np.int64), exact=np.asarray(self.exact, np.uint64),
                     user=np.asarray(self.user, np.uint64), started=np.asarray(self.started, np.float64),
                     minhash=sig.astype(np.uint32))


PREFETCH_SESSIONS = 64
"""Sessions read ahead so the PII tagger (when on) reads their texts in batches."""


def _prefetched(proc: SessionProcessor, reader: Any) -> Iterator[tuple[Session, int]]:
    """``(session, line)`` pairs of ``reader`` (``line``: the session's line in the logs), read
    ``PREFETCH_SESSIONS`` at a time and handed to ``proc.prefetch`` before they are processed one by one."""
    sessions = iter(reader)  # one pass over the shard: every chunk goes on where the last one stopped
    while True:
        chunk = []
        for session in sessions:
            assert reader.last_line is not None
            chunk.append((session, reader.last_line))
            if len(chunk) == PREFETCH_SESSIONS:
                break
        if not chunk:
            return
        proc.prefetch([s for s, _ in chunk])
        yield from chunk


def run_shard_job(job: ShardJob) -> dict[str, Any]:
    """Process one shard into ``job.out``; returns its counts. Idempotent: a finished shard is kept."""
    if (job.out / "counts.json").is_file():
        counts: dict[str, Any] = json.loads((job.out / "counts.json").read_text())
        return counts
    tmp = job.out.with_name(job.out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    proc = SessionProcessor(job.config, job.pseudonymiser, job.seed, _load_leakage(job.leakage_file),
                            _load_protected(job.protected_file))
    reader = shard_reader(job.logs, job.shard, quarantine=tmp / "quarantine.jsonl")
    cols = _Columns()
    dropped: Counter[str] = Counter()
    placeholders: Counter[str] = Counter()
    with_pii = 0
    with RecordWriter(tmp / "sessions.jsonl") as sessions, (tmp / "index.jsonl").open("w", encoding="utf-8") as index, \
            (tmp / "scored.jsonl").open("w", encoding="utf-8") as scored:
        for session, line in _prefetched(proc, reader):
            p = proc.process(session)
            scored.write(json.dumps({"s": session.session_id, "d": p.detections}, ensure_ascii=False) + "\n")
            placeholders.update(p.placeholders)
            with_pii += bool(p.detections)
            if p.reason is not None:
                dropped[p.reason] += 1
                continue
            sessions.write(p.session)
            index.write(json.dumps({"session_id": session.session_id, "task_id": session.task_id,
                                    "text": p.first_text[: job.config.select.max_text_chars]},
                                   ensure_ascii=False) + "\n")
            assert p.minhash is not None
            cols.line.append(line)
            cols.exact.append(p.exact)
            cols.user.append(user_key(p.session.user_id))
            cols.started.append(p.session.started_at)
            cols.minhash.append(p.minhash)
    cols.save(tmp / "summary.npz", job.config.dedup.num_perm)
    stats = reader.stats
    counts = {
        "shard": job.shard.index, "lines": stats.good + stats.bad + stats.blank_lines, "valid": stats.good,
        "blank_lines": stats.blank_lines, "quarantined": dict(sorted(stats.reasons.items())),
        "dropped": dict(sorted(dropped.items())), "kept": len(cols.line),
        "placeholders": dict(sorted(placeholders.items())), "sessions_with_pii": with_pii,
    }
    (tmp / "counts.json").write_text(json.dumps(counts, indent=1) + "\n")
    shutil.rmtree(job.out, ignore_errors=True)
    os.replace(tmp, job.out)
    return counts
