"""Selection: keep a diverse ``keep_fraction`` of the candidates, and sort them by difficulty.

**Diversity** (STAgent-style hierarchical curation keeps < 1 % of raw queries): embed each candidate's
first user text (all-MiniLM-L6-v2 through :func:`infra.text_encoder.encode_cached`, or the model-free
hashing embedder), cluster with faiss k-means into C clusters (C = sqrt(candidates) unless set, never
more than the number kept), then *water-fill*: the largest per-cluster cap t with
sum_c min(n_c, t) <= K (K = round(keep_fraction x candidates), at least 1), plus one more for the
largest clusters until exactly K are kept. Every cluster gets a session before any gets a second, so
coverage (clusters with >= 1 kept / C) is as high as K allows. Within a cluster the kept sessions are
a seeded pseudo-random sample.

**Difficulty**: the training cascade's probe writes ``{task_id, certainty}`` per task; a kept session
whose task has certainty >= threshold is ``high_certainty``, below is ``low_certainty``, and sessions
without a scored task are ``unscored``.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from data_curation.errors import CurationError
from infra.recordio import RecordReader

DIFFICULTY_SETS = ("unscored", "high_certainty", "low_certainty")
HASH_DIM = 384


class CertaintyScore(BaseModel):
    """One line of a certainty file (written by the training cascade's probe)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(min_length=1, max_length=256)
    certainty: float = Field(ge=0, le=1, description="Probe's confidence it solves the task, 0-1.")


def load_certainty(path: Path) -> dict[str, float]:
    """task_id -> certainty. A bad line or a repeated task id is an error naming ``file:line``."""
    reader = RecordReader(path, CertaintyScore, allow_empty=True)
    scores: dict[str, float] = {}
    for row in reader:
        if row.task_id in scores:
            raise CurationError(f"{path}:{reader.last_line}: task_id {row.task_id!r} is scored twice")
        scores[row.task_id] = row.certainty
    return scores


def hashing_embed(texts: Sequence[str], dim: int = HASH_DIM) -> np.ndarray:
    """Signed feature hashing of words and character trigrams, L2-normalised: (N, dim) float32."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.casefold().split():
            padded = f"#{word}#"
            for feat in (word, *(padded[j : j + 3] for j in range(len(padded) - 2))):
                h = zlib.crc32(feat.encode())
                out[i, h % dim] += 1.0 if (h >> 16) & 1 else -1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def kmeans_assign(x: np.ndarray, k: int, iters: int, seed: int) -> np.ndarray:
    """faiss k-means on ``x`` (N, D) float32; returns each row's cluster (N,) int64."""
    n = len(x)
    if k <= 1 or n <= 1:
        return np.zeros(n, dtype=np.int64)
    import faiss

    k = min(k, n)
    km = faiss.Kmeans(x.shape[1], k, niter=iters, seed=seed, verbose=False, min_points_per_centroid=1)
    km.train(np.ascontiguousarray(x, dtype=np.float32))
    _, assign = km.index.search(np.ascontiguousarray(x, dtype=np.float32), 1)
    return np.asarray(assign[:, 0], dtype=np.int64)


def auto_clusters(candidates: int, target: int, clusters: int) -> int:
    k = clusters or round(math.sqrt(candidates))
    return max(1, min(k, target, candidates))


def water_fill(sizes: np.ndarray, target: int) -> np.ndarray:
    """How many to keep per cluster: sum == min(target, sizes.sum()), as even as the sizes allow."""
    if target >= int(sizes.sum()):
        return sizes.copy()
    lo, hi = 0, int(sizes.max())
    while lo < hi:  # the largest t with sum(min(sizes, t)) <= target
        mid = (lo + hi + 1) // 2
        if int(np.minimum(sizes, mid).sum()) <= target:
            lo = mid
        else:
            hi = mid - 1
    take = np.minimum(sizes, lo)
    left = target - int(take.sum())
    room = np.flatnonzero(sizes > lo)
    order = room[np.lexsort((room, -sizes[room]))]  # biggest clusters first, ties by id
    take[order[:left]] += 1
    return take


def pick(assign: np.ndarray, take: np.ndarray, order_key: np.ndarray) -> np.ndarray:
    """Boolean mask: in each cluster c, the ``take[c]`` rows with the smallest ``order_key``."""
    keep = np.zeros(len(assign), dtype=bool)
    rows = np.lexsort((order_key, assign))  # by cluster, then by key
    starts = np.searchsorted(assign[rows], np.arange(len(take)))
    for c, n in enumerate(take):
        keep[rows[starts[c] : starts[c] + n]] = True
    return keep


def difficulty(
    task_ids: Sequence[str | None], scores: dict[str, float], threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per session: set index into :data:`DIFFICULTY_SETS` (int8) and certainty (float32, NaN = none)."""
    sets = np.zeros(len(task_ids), dtype=np.int8)
    cert = np.full(len(task_ids), np.nan, dtype=np.float32)
    for i, tid in enumerate(task_ids):
        if tid is not None and tid in scores:
            cert[i] = scores[tid]
            sets[i] = 1 if scores[tid] >= threshold else 2
    return sets, cert
