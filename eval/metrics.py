"""Ranking and latency metrics of offline evaluation, each on one ranked list, averaged by the caller.

All ranking metrics take ``ranked`` (item ids, best first, duplicates ignored after their first
place) and ``relevant`` (the ids that count as correct, all of equal gain):

- ``hit_at_k``   = 1 if any relevant id is in the top k, else 0 (HR@k of leave-one-out benchmarks);
- ``recall_at_k`` = |top-k ∩ relevant| / min(|relevant|, k)  (so a set of 50 correct ids can reach 1.0
  with 10 slots; with one relevant id it equals ``hit_at_k``);
- ``ndcg_at_k``  = DCG@k / IDCG@k, DCG = Σ_{i<k, ranked[i] ∈ relevant} 1 / log2(i + 2), IDCG the DCG of
  min(|relevant|, k) hits in the first places (Järvelin & Kekäläinen 2002, binary gains);
- ``mrr``        = 1 / (rank of the first relevant id), 0 if none (ranks from 1; no cut-off).

An empty ``relevant`` set is an error: a task with no answer cannot be scored, and silently giving it
0 or 1 would bias the mean. :func:`percentile` is the linear-interpolation percentile (numpy's default).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np


class MetricError(ValueError):
    """Inputs a metric cannot score (no relevant ids, k < 1)."""


def _dedup(ranked: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranked))


def _check(relevant: Collection[str], k: int | None = None) -> None:
    if not relevant:
        raise MetricError("no relevant ids: the task has no answer to score against")
    if k is not None and k < 1:
        raise MetricError(f"k must be >= 1, got {k}")


def hit_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    _check(relevant, k)
    return float(any(i in relevant for i in _dedup(ranked)[:k]))


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    _check(relevant, k)
    hits = sum(1 for i in _dedup(ranked)[:k] if i in relevant)
    return hits / min(len(set(relevant)), k)


def ndcg_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    _check(relevant, k)
    dcg = sum(1.0 / math.log2(i + 2) for i, item in enumerate(_dedup(ranked)[:k]) if item in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(set(relevant)), k)))
    return dcg / ideal


def mrr(ranked: Sequence[str], relevant: Collection[str]) -> float:
    _check(relevant)
    for i, item in enumerate(_dedup(ranked)):
        if item in relevant:
            return 1.0 / (i + 1)
    return 0.0


def ranking_metrics(ranked: Sequence[str], relevant: Collection[str], ks: Iterable[int] = (1, 5, 10)
                    ) -> dict[str, float]:
    """``recall@k``, ``ndcg@k``, ``hit@k`` for each k, and ``mrr`` of one ranked list."""
    relevant = set(relevant)
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall@{k}"] = recall_at_k(ranked, relevant, k)
        out[f"ndcg@{k}"] = ndcg_at_k(ranked, relevant, k)
        out[f"hit@{k}"] = hit_at_k(ranked, relevant, k)
    out["mrr"] = mrr(ranked, relevant)
    return out


def mean_metrics(rows: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Key-wise mean over rows (a key missing from a row is not counted for that row); {} for no rows."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for row in rows:
        for key, value in row.items():
            sums[key] = sums.get(key, 0.0) + float(value)
            counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100, linear interpolation), None for no values."""
    if not 0 <= q <= 100:
        raise MetricError(f"percentile q must be in [0, 100], got {q}")
    if not len(values):
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))
