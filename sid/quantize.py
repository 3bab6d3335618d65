"""Residual k-means (RQ-KMeans), the default quantiser: item embeddings (N, D) -> codes (N, L).

Level 1 clusters the embeddings, level l clusters what levels 1..l-1 left over (the residual), so
an item's code tuple is a coarse-to-fine address and ``decode`` sums one centroid per level. The
collision suffix (:func:`add_collision_suffix`) then makes the map item <-> code tuple a bijection,
which is what :mod:`sid.codebook` turns into SID tokens.

Training runs faiss k-means on a subsample (``max_train_points``) with numpy k-means++ seeding;
encoding runs over all points in batches with exact faiss L2 search, so 1M x 384 fits in memory
(one float32 copy of a batch, never of the whole array).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

import faiss
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

_PP_SAMPLE_PER_CODE = 20  # k-means++ seeds from a sample of about this many points per code
_PP_MIN_SAMPLE = 2_000

# (rows, candidate code ids, k) -> (distances (n, k), code ids (n, k)), nearest first
SearchFn = Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray]]


class NotFittedError(RuntimeError):
    """A quantiser was used before ``fit`` (or ``load``)."""


@runtime_checkable
class Quantiser(Protocol):
    """What the SID builder needs from a quantiser: RQ-KMeans and RQ-VAE both satisfy it."""

    @property
    def sizes(self) -> list[int]:
        """Effective codebook size per level (codes at level l are in ``[0, sizes[l])``)."""
        ...

    def fit(self, x: np.ndarray) -> Self:
        """Learn the codebooks from embeddings ``x`` (N, D) float32."""
        ...

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Codes (N, L) int64 for embeddings ``x`` (N, D)."""
        ...

    def save(self, path: Path | str) -> None:
        """Write the fitted quantiser to one file."""
        ...


class RQKMeansConfig(BaseModel):
    """Residual k-means settings; validated on construction."""

    model_config = ConfigDict(extra="forbid")

    levels: int = Field(3, ge=1, description="Number of quantiser levels L (code columns before the suffix). "
                                             "Default 3.")
    codebook_size: int = Field(256, ge=2, description="Codes per level K. A level gets fewer when the training "
                                                      "points have fewer distinct rows; see `sizes`. Default 256.")
    iters: int = Field(25, ge=1, description="faiss Lloyd iterations per level. Default 25.")
    kmeans_pp: bool = Field(True, description="Seed each level with k-means++ (numpy, on a sample of about "
                                              f"{_PP_SAMPLE_PER_CODE}*K points); false = faiss's random "
                                              "seeding. Default true.")
    balanced: bool = Field(False, description="Capacity-constrained assignment: no code holds more than "
                                              "ceil(balance_slack * N / K) of the N encoded items (greedy by "
                                              "distance margin, see `balanced_assign`). Applies to every "
                                              "k-means level in fit and encode, not to fixed level-1 codes. "
                                              "Default false.")
    balance_slack: float = Field(1.5, ge=1.0, description="Capacity factor for `balanced`: cap = ceil(slack * N / "
                                                          "K) items per code; 1.0 = perfectly even. Default 1.5.")
    reseed_dead: bool = Field(True, description="After k-means, re-seed codes holding no training point from the "
                                                "points with the largest quantisation error, then run "
                                                "`refine_iters` Lloyd iterations; repeat up to `reseed_rounds` "
                                                "times. Default true.")
    reseed_rounds: int = Field(5, ge=1, description="Upper bound on re-seed rounds per level. Default 5.")
    refine_iters: int = Field(5, ge=1, description="Lloyd iterations after each re-seed round, and balanced Lloyd "
                                                   "iterations after k-means when `balanced`. Default 5.")
    max_train_points: int = Field(200_000, ge=2, description="Train on a uniform subsample of at most this many "
                                                             "rows (encoding always uses all rows). Default "
                                                             "200000.")
    batch_size: int = Field(65_536, ge=1, description="Rows per faiss search batch; memory is about batch_size * "
                                                      "(D + K) float32. Default 65536.")
    seed: int = Field(0, ge=0, description="Seed for subsampling, k-means++ and faiss. Same seed, same data -> same "
                                     "codes. Default 0.")

    @model_validator(mode="after")
    def _enough_training_points(self) -> RQKMeansConfig:
        if self.max_train_points < self.codebook_size:
            raise ValueError(f"max_train_points={self.max_train_points} < codebook_size={self.codebook_size}: "
                             "raise max_train_points or lower codebook_size")
        return self


# ---------------------------------------------------------------------------------------------------------------
# numeric building blocks


def _as_matrix(x: np.ndarray, name: str = "x") -> np.ndarray:
    """``x`` as a C-contiguous float32 (N, D) array (no copy when it already is one)."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty (N, D) array, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"{name} must be floating point, got {x.dtype}")
    return np.ascontiguousarray(x, dtype=np.float32)


def _knn(q: np.ndarray, base: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact squared-L2 k nearest rows of ``base`` for each row of ``q``: (n, k) distances and indices."""
    assert q.shape[1] == base.shape[1], f"dims differ: queries {q.shape}, base {base.shape}"
    dist, idx = faiss.knn(np.ascontiguousarray(q, dtype=np.float32),
                          np.ascontiguousarray(base, dtype=np.float32), k)
    return dist, idx.astype(np.int64)


def _batched_search(get_rows: Callable[[np.ndarray], np.ndarray], centroids: np.ndarray,
                    batch_size: int) -> SearchFn:
    """A :data:`SearchFn` over the vectors ``get_rows(rows)``, materialised ``batch_size`` rows at a time."""

    def search(rows: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(cand))
        dist = np.empty((len(rows), k), dtype=np.float32)  # (n, k)
        idx = np.empty((len(rows), k), dtype=np.int64)  # (n, k)
        base = centroids[cand]  # (C, D)
        for s in range(0, len(rows), batch_size):
            d, i = _knn(get_rows(rows[s:s + batch_size]), base, k)
            dist[s:s + batch_size], idx[s:s + batch_size] = d, cand[i]
        return dist, idx

    return search


def _group_means(get_rows: Callable[[np.ndarray], np.ndarray], labels: np.ndarray, k: int, d: int,
                 batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-label means (k, d) float32 and counts (k,) of the vectors ``get_rows``; empty labels get 0."""
    sums = np.zeros((k, d), dtype=np.float64)  # (K, D)
    for s in range(0, len(labels), batch_size):
        lab = labels[s:s + batch_size]  # (b,)
        order = np.argsort(lab, kind="stable")
        uniq, starts = np.unique(lab[order], return_index=True)
        rows = get_rows(np.arange(s, s + len(lab))[order])  # (b, D)
        sums[uniq] += np.add.reduceat(rows, starts, axis=0, dtype=np.float64)
    counts = np.bincount(labels, minlength=k)  # (K,)
    means = sums / np.maximum(counts, 1)[:, None]
    return means.astype(np.float32), counts


def count_distinct_rows(x: np.ndarray, batch_size: int = 8_192) -> int:
    """Number of distinct rows of ``x`` (N, D), by an exact-input hash: a random linear form mod 2**64 of
    each row's raw float32 bits.

    Bit-equal rows always hash equal; distinct rows collide with probability about 2**-64 (and a
    collision only makes a codebook one code smaller). O(N*D), unlike ``np.unique(axis=0)``.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    mult = np.random.default_rng(12345).integers(1, 2**63, size=x.shape[1], dtype=np.uint64) | np.uint64(1)  # (D,)
    keys = [(x[s:s + batch_size].view(np.uint32).astype(np.uint64) * mult).sum(1, dtype=np.uint64)
            for s in range(0, len(x), batch_size)]  # wraps mod 2**64 by design
    return len(np.unique(np.concatenate(keys)))


def kmeans_pp_init(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeds (k, D) float32 (Arthur & Vassilvitskii 2007) from a sample of ``x``.

    Each next seed is drawn with probability proportional to its squared distance to the nearest
    seed so far. The sample has about 20*k points; if it holds fewer than k distinct rows, the
    missing seeds are random rows of the whole ``x`` (k-means or re-seeding separates them).
    """
    n = len(x)
    m = min(n, max(_PP_SAMPLE_PER_CODE * k, _PP_MIN_SAMPLE))
    s = x[np.sort(rng.choice(n, size=m, replace=False))].astype(np.float64)  # (m, D)
    sq = (s * s).sum(1)  # (m,)

    def dist2(j: int) -> np.ndarray:  # (m,) squared distance to s[j]; cancellation noise (duplicates) -> 0
        d = sq + sq[j] - 2.0 * s @ s[j]
        return np.where(d > 1e-10 * (sq + sq[j]), d, 0.0)

    chosen = [int(rng.integers(m))]
    d2 = dist2(chosen[0])  # (m,) distance to the nearest seed so far
    while len(chosen) < k:
        cum = np.cumsum(d2)
        if cum[-1] <= 0.0:  # every sample point coincides with a seed
            break
        j = int(min(np.searchsorted(cum, rng.random() * cum[-1], side="right"), m - 1))
        chosen.append(j)
        d2 = np.minimum(d2, dist2(j))
    seeds = s[chosen].astype(np.float32)  # (k', D)
    if len(chosen) < k:
        seeds = np.concatenate([seeds, x[rng.choice(n, size=k - len(chosen), replace=True)]])
    assert seeds.shape == (k, x.shape[1]), f"seeds {seeds.shape} != {(k, x.shape[1])}"
    return np.ascontiguousarray(seeds, dtype=np.float32)


def balanced_assign(search: SearchFn, n: int, k: int, cap: int) -> np.ndarray:
    """Capacity-constrained assignment of n points to k codes, at most ``cap`` points per code: labels (n,).

    Greedy by distance margin, in proposal rounds: every unplaced point proposes to its nearest code
    that still has room; a code accepts proposers in order of margin (distance to their second-best
    open code minus distance to this one; the point that loses most by moving wins), up to its
    remaining room; the rest try again next round, among the codes still open. A round either places
    every proposer or fills at least one code, so there are at most k rounds; round 1 costs one
    exact search O(N*K*D) and later rounds search only the displaced points, so with slack >= 1.5 the
    whole is a small multiple of one plain assignment. Deterministic: ties keep input order.
    """
    if cap * k < n:
        raise ValueError(f"capacity {cap} x {k} codes < {n} points: raise balance_slack to at least 1.0")
    labels = np.full(n, -1, dtype=np.int64)  # (N,)
    load = np.zeros(k, dtype=np.int64)  # (K,)
    pending = np.arange(n)
    while pending.size:
        dist, idx = search(pending, np.flatnonzero(load < cap), 2)  # (P, <=2) each
        choice = idx[:, 0]  # (P,)
        margin = dist[:, 1] - dist[:, 0] if dist.shape[1] > 1 else np.zeros(len(pending), dtype=np.float32)
        order = np.lexsort((dist[:, 0], -margin, choice))  # by code, then margin desc, then distance asc
        ch = choice[order]
        take = _rank_within_sorted(ch) < (cap - load)[ch]  # (P,)
        labels[pending[order[take]]] = ch[take]
        load += np.bincount(ch[take], minlength=k)
        pending = np.sort(pending[order[~take]])
    assert load.max() <= cap, f"balanced_assign broke its cap: {load.max()} > {cap}"
    return labels


def _rank_within_sorted(group: np.ndarray) -> np.ndarray:
    """For a sorted label array, each element's 0-based position inside its run of equal labels."""
    if len(group) == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])  # (G,)
    run_start = np.repeat(starts, np.diff(np.r_[starts, len(group)]))  # (N,)
    return np.arange(len(group), dtype=np.int64) - run_start


def _capacity(n: int, k: int, slack: float) -> int:
    return math.ceil(slack * n / k)


def _nearest(r: np.ndarray, centroids: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid (N,) and its squared distance (N,) for each row of ``r`` (N, D)."""
    search = _batched_search(lambda rows: r[rows], centroids, batch_size)
    dist, idx = search(np.arange(len(r)), np.arange(len(centroids)), 1)  # (N, 1) each
    return idx[:, 0], dist[:, 0]


def _assign(r: np.ndarray, centroids: np.ndarray, batch_size: int, cap: int | None) -> np.ndarray:
    """Labels (N,) of ``r`` (N, D): nearest centroid, or capacity-constrained when ``cap`` is set."""
    if cap is None:
        return _nearest(r, centroids, batch_size)[0]
    search = _batched_search(lambda rows: r[rows], centroids, batch_size)
    return balanced_assign(search, len(r), len(centroids), cap)


def _refine(r: np.ndarray, centroids: np.ndarray, iters: int, batch_size: int, cap: int | None) -> np.ndarray:
    """``iters`` Lloyd iterations (nearest or balanced assignment); codes holding no point keep their centroid."""
    c = centroids.copy()  # (K, D)
    for _ in range(iters):
        labels = _assign(r, c, batch_size, cap)
        means, counts = _group_means(lambda rows: r[rows], labels, len(c), r.shape[1], batch_size)
        c = np.where(counts[:, None] > 0, means, c)
    return c


def reseed_dead_codes(x: np.ndarray, centroids: np.ndarray, rounds: int = 5, iters: int = 5,
                      batch_size: int = 65_536) -> tuple[np.ndarray, int]:
    """Revive codes that hold no point of ``x`` (N, D): new centroids (K, D) and the number still dead.

    Each round moves every dead centroid onto one of the points worst served by the current codebook
    (largest squared quantisation error, distinct rows, error > 0), then runs ``iters`` Lloyd
    iterations; it stops when no code is dead or after ``rounds`` rounds.
    """
    x = _as_matrix(x)
    c = np.array(centroids, dtype=np.float32)  # (K, D)
    assert c.ndim == 2 and c.shape[1] == x.shape[1], f"centroids {c.shape} do not match x {x.shape}"
    for round_ in range(rounds + 1):
        labels, err = _nearest(x, c, batch_size)
        dead = np.flatnonzero(np.bincount(labels, minlength=len(c)) == 0)
        if dead.size == 0 or round_ == rounds:
            return c, int(dead.size)
        worst = np.argsort(-err, kind="stable")[: 4 * dead.size + 16]
        worst = worst[err[worst] > 0]
        _rows, first = np.unique(x[worst], axis=0, return_index=True)
        picks = worst[np.sort(first)][: dead.size]  # distinct rows, worst first
        c[dead[: len(picks)]] = x[picks]
        c = _refine(x, c, iters, batch_size, None)
    raise AssertionError("unreachable")


def _train_level(r: np.ndarray, cfg: RQKMeansConfig, seed: int) -> tuple[np.ndarray, int]:
    """Centroids (K', D) for one level from residuals ``r`` (n, D), and the count of dead codes left."""
    n, d = r.shape
    k = min(cfg.codebook_size, count_distinct_rows(r))
    if k == 1:
        return r.mean(0, keepdims=True, dtype=np.float64).astype(np.float32), 0
    init = kmeans_pp_init(r, k, np.random.default_rng(seed)) if cfg.kmeans_pp else None
    km = faiss.Kmeans(d, k, niter=cfg.iters, seed=seed, max_points_per_centroid=n, min_points_per_centroid=1,
                      verbose=False)
    km.train(r, init_centroids=init)
    c = np.ascontiguousarray(km.centroids, dtype=np.float32)  # (K, D)
    if cfg.reseed_dead:
        c, dead = reseed_dead_codes(r, c, cfg.reseed_rounds, cfg.refine_iters, cfg.batch_size)
    else:
        labels = _assign(r, c, cfg.batch_size, None)
        dead = int((np.bincount(labels, minlength=k) == 0).sum())
    if cfg.balanced:
        c = _refine(r, c, cfg.refine_iters, cfg.batch_size, _capacity(n, k, cfg.balance_slack))
    assert c.shape == (k, d), f"level centroids {c.shape} != {(k, d)}"
    return c, dead


# ---------------------------------------------------------------------------------------------------------------
# the quantiser


def _check_level1(level1: np.ndarray, n: int, size: int | None = None) -> np.ndarray:
    """Validated fixed level-1 codes (N,) int64: non-negative and, when ``size`` is given, below it."""
    lv = np.asarray(level1)
    if lv.shape != (n,) or not np.issubdtype(lv.dtype, np.integer):
        raise ValueError(f"level1 must be an integer array of shape ({n},), got {lv.dtype} {lv.shape}")
    if n and lv.min() < 0:
        raise ValueError("level1 codes must be >= 0")
    if size is not None and n and lv.max() >= size:
        raise ValueError(f"level1 code {int(lv.max())} is outside the fitted level-1 codebook (size {size}): "
                         "refit with the new taxonomy")
    return lv.astype(np.int64)


class ResidualKMeans:
    """Residual k-means quantiser: ``fit`` on embeddings, then ``encode`` to (N, L) codes, ``decode`` to vectors.

    ``centroids[l]`` is (K_l, D); ``sizes[l] = K_l`` is ``codebook_size`` unless the training
    residuals had fewer distinct rows, or level 1 was fixed (then K_1 = max(level1) + 1).
    """

    def __init__(self, config: RQKMeansConfig | None = None) -> None:
        self.config = config if config is not None else RQKMeansConfig()
        self.centroids: list[np.ndarray] = []
        self.level1_counts: np.ndarray | None = None  # (K_1,) items per fixed level-1 code; None = k-means level 1
        self.dead_codes: list[int] = []  # codes holding no training point after fit, per level

    @property
    def sizes(self) -> list[int]:
        return [len(c) for c in self.centroids]

    @property
    def levels(self) -> int:
        return self.config.levels

    @property
    def fixed_level1(self) -> bool:
        return self.level1_counts is not None

    def fit(self, x: np.ndarray, level1: np.ndarray | None = None) -> Self:
        """Learn L codebooks from ``x`` (N, D); ``level1`` (N,) int fixes level 1 to given codes (e.g. taxonomy)."""
        cfg = self.config
        x = _as_matrix(x)
        n, d = x.shape
        lv1 = _check_level1(level1, n) if level1 is not None else None
        rng = np.random.default_rng(cfg.seed)
        sub = np.sort(rng.choice(n, size=cfg.max_train_points, replace=False)) if n > cfg.max_train_points else None
        r = x[sub] if sub is not None else x.copy()  # (n_train, D) running residual
        self.centroids, self.dead_codes, self.level1_counts = [], [], None
        for level in range(cfg.levels):
            if level == 0 and lv1 is not None:
                c, self.level1_counts = _group_means(lambda rows: x[rows], lv1, int(lv1.max()) + 1, d,
                                                     cfg.batch_size)
                labels, dead = (lv1[sub] if sub is not None else lv1), 0
            else:
                c, dead = _train_level(r, cfg, seed=cfg.seed + level)
                cap = _capacity(len(r), len(c), cfg.balance_slack) if cfg.balanced else None
                labels = _assign(r, c, cfg.batch_size, cap)
            for start in range(0, len(r), cfg.batch_size):  # in place, by batch: no (n_train, D) temporary
                r[start:start + cfg.batch_size] -= c[labels[start:start + cfg.batch_size]]
            self.centroids.append(c)
            self.dead_codes.append(dead)
        return self

    def encode(self, x: np.ndarray, level1: np.ndarray | None = None, balanced: bool | None = None) -> np.ndarray:
        """Codes (N, L) int64 for ``x`` (N, D): per level, the nearest centroid to the running residual.

        ``level1``: the fixed level-1 codes, for a model fit with them (without them, level 1 falls
        back to the nearest non-empty level-1 centroid). ``balanced``: override the config (None =
        ``config.balanced``); the cap is computed on the N rows encoded in this call.
        """
        self._check_fitted()
        x = self._check_x(x)
        n = len(x)
        if level1 is not None and not self.fixed_level1:
            raise ValueError("this model was fit without fixed level-1 codes; do not pass level1")
        use_balanced = self.config.balanced if balanced is None else balanced
        codes = np.zeros((n, self.levels), dtype=np.int64)  # (N, L)
        for level, c in enumerate(self.centroids):
            if level == 0 and level1 is not None:
                codes[:, 0] = _check_level1(level1, n, self.sizes[0])
                continue
            fixed_counts = self.level1_counts if level == 0 else None  # (K_1,) when level 1 is fixed
            cand = np.flatnonzero(fixed_counts) if fixed_counts is not None else np.arange(len(c))
            search = _batched_search(partial(self._residual, x, codes, level), c, self.config.batch_size)
            if use_balanced and fixed_counts is None:
                codes[:, level] = balanced_assign(search, n, len(c), _capacity(n, len(c), self.config.balance_slack))
            else:
                codes[:, level] = search(np.arange(n), cand, 1)[1][:, 0]
        return codes

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Reconstruction (N, D) float32 of ``codes`` (N, L): the sum of one centroid per level."""
        self._check_fitted()
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != self.levels:
            raise ValueError(f"codes must be (N, {self.levels}), got {codes.shape} (drop the collision suffix: "
                             f"codes[:, :{self.levels}])")
        for level, size in enumerate(self.sizes):
            if len(codes) and (codes[:, level].min() < 0 or codes[:, level].max() >= size):
                raise ValueError(f"level {level + 1} codes must be in [0, {size})")
        out = np.zeros((len(codes), self.centroids[0].shape[1]), dtype=np.float32)  # (N, D)
        for level, c in enumerate(self.centroids):
            out += c[codes[:, level]]
        return out

    def _residual(self, x: np.ndarray, codes: np.ndarray, level: int, rows: np.ndarray) -> np.ndarray:
        """Residual (b, D) of ``x[rows]`` after levels < ``level``; same float ops, in the same order, as fit."""
        r = np.array(x[rows], dtype=np.float32)  # (b, D)
        for j in range(level):
            r -= self.centroids[j][codes[rows, j]]
        return r

    def _check_fitted(self) -> None:
        if not self.centroids:
            raise NotFittedError("ResidualKMeans is not fitted: call fit() or ResidualKMeans.load() first")

    def _check_x(self, x: np.ndarray) -> np.ndarray:
        x = _as_matrix(x)
        if x.shape[1] != self.centroids[0].shape[1]:
            raise ValueError(f"x has dim {x.shape[1]}, the model was fit on dim {self.centroids[0].shape[1]}")
        return x

    def save(self, path: Path | str) -> None:
        """One ``.npz`` at exactly ``path``: the config as JSON, centroids per level, fixed level-1 counts."""
        self._check_fitted()
        arrays: dict[str, Any] = {f"centroids_{i}": c for i, c in enumerate(self.centroids)}
        if self.level1_counts is not None:
            arrays["level1_counts"] = self.level1_counts
        arrays["dead_codes"] = np.asarray(self.dead_codes, dtype=np.int64)
        with open(path, "wb") as f:
            np.savez(f, config=np.array(self.config.model_dump_json()), **arrays)

    @classmethod
    def load(cls, path: Path | str) -> ResidualKMeans:
        """The model :meth:`save` wrote; it encodes exactly as the saved one did."""
        with np.load(path, allow_pickle=False) as z:
            model = cls(RQKMeansConfig.model_validate(json.loads(str(z["config"]))))
            model.centroids = [np.ascontiguousarray(z[f"centroids_{i}"]) for i in range(model.levels)]
            model.level1_counts = np.asarray(z["level1_counts"]) if "level1_counts" in z else None
            model.dead_codes = [int(v) for v in z["dead_codes"]]
        return model


# ---------------------------------------------------------------------------------------------------------------
# codebook health, collisions, incremental assignment


def _as_codes(codes: np.ndarray, name: str = "codes") -> np.ndarray:
    c = np.asarray(codes)
    if c.ndim != 2 or not (np.issubdtype(c.dtype, np.integer) or c.size == 0):
        raise ValueError(f"{name} must be an integer (N, L) array, got {c.dtype} {c.shape}")
    return c.astype(np.int64, copy=False)


def _row_groups(codes: np.ndarray) -> np.ndarray:
    """Group id (N,) per row of ``codes`` (N, L): equal rows get equal ids, ids are 0..G-1."""
    if len(codes) == 0:
        return np.zeros(0, dtype=np.int64)
    lo = codes.min(0)
    span = codes.max(0) - lo + 1  # (L,)
    if math.prod(int(s) for s in span) < 2**62:  # pack each row into one int64 (mixed radix): a 1-D unique
        strides = np.cumprod(np.r_[1, span[:0:-1]])[::-1]  # (L,) last column varies fastest
        _keys, inverse = np.unique((codes - lo) @ strides, return_inverse=True)
    else:
        _rows, inverse = np.unique(codes, axis=0, return_inverse=True)
    return np.asarray(inverse, dtype=np.int64).reshape(-1)


def _rank_within_groups(group: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Each row's 0-based rank (N,) inside its group, ordered by ``key`` then by input position."""
    order = np.lexsort((np.arange(len(group)), key, group))
    rank = np.empty(len(group), dtype=np.int64)
    rank[order] = _rank_within_sorted(group[order])
    return rank


def level_stats(codes: np.ndarray, sizes: list[int]) -> list[dict[str, float]]:
    """Per-level codebook health of ``codes`` (N, L) against codebook ``sizes`` (L,), to catch collapse.

    Each dict: ``level`` (1-based), ``size``, ``used`` (distinct codes), ``utilisation`` = used / size,
    ``entropy`` = -sum p log2 p over code shares p (bits), ``normalised_entropy`` = entropy / log2(size)
    (1.0 = uniform; 1.0 by convention when size == 1), ``max_share`` = the largest code's share of items.
    """
    c = _as_codes(codes)
    if c.shape[1] != len(sizes) or len(c) == 0:
        raise ValueError(f"codes {c.shape} need N > 0 rows and one column per size ({len(sizes)})")
    out: list[dict[str, float]] = []
    for level, size in enumerate(sizes):
        col = c[:, level]  # (N,)
        if col.min() < 0 or col.max() >= size:
            raise ValueError(f"level {level + 1} codes must be in [0, {size})")
        counts = np.bincount(col, minlength=size)  # (K,)
        p = counts[counts > 0] / len(col)
        entropy = float(-(p * np.log2(p)).sum())
        out.append({"level": level + 1, "size": size, "used": int((counts > 0).sum()),
                    "utilisation": float((counts > 0).sum() / size), "entropy": entropy,
                    "normalised_entropy": entropy / math.log2(size) if size > 1 else 1.0,
                    "max_share": float(counts.max() / len(col))})
    return out


def collision_rate(codes: np.ndarray) -> float:
    """Fraction of rows of ``codes`` (N, L) whose whole tuple is shared with at least one other row."""
    c = _as_codes(codes)
    if len(c) == 0:
        return 0.0
    group = _row_groups(c)
    return float((np.bincount(group)[group] > 1).mean())


def add_collision_suffix(codes: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """Codes (N, L) -> (N, L+1): within each group of equal rows, a suffix 0..n-1 makes every row unique.

    ``order`` (N,): a per-row sort key; inside a group, smaller keys get smaller suffixes (e.g. pass
    ``-popularity`` so the most popular item gets suffix 0). Ties, and ``order=None``, follow input order.
    """
    c = _as_codes(codes)
    key = np.arange(len(c)) if order is None else np.asarray(order)
    if key.shape != (len(c),):
        raise ValueError(f"order must have shape ({len(c)},), got {key.shape}")
    suffix = _rank_within_groups(_row_groups(c), key)  # (N,)
    return np.concatenate([c, suffix[:, None]], axis=1)


def unique_last_level(model: ResidualKMeans, x: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Codes (N, L) -> (N, L) whose last level is one code per item within each prefix (the first L - 1 codes).

    Residual k-means puts items whose residuals are alike on the same last code, so rows collide and a
    collision suffix, which means nothing, has to tell them apart. Here each prefix group's items get distinct
    last-level codes by a minimum-cost assignment (squared distance of each item's last residual to each
    last-level centroid); a group with more items than codes assigns as many as there are codes and leaves the
    rest on their own codes (they collide, and need the suffix). Earlier levels are unchanged.
    """
    from scipy.optimize import linear_sum_assignment

    model._check_fitted()
    x = model._check_x(x)
    c = _as_codes(codes).copy()
    if c.shape != (len(x), model.levels):
        raise ValueError(f"codes must be ({len(x)}, {model.levels}), got {c.shape}")
    last = model.levels - 1
    cent = model.centroids[last]  # (K, D)
    cent_sq = (cent * cent).sum(1)  # (K,)
    group = _row_groups(c[:, :last]) if last else np.zeros(len(c), np.int64)
    order = np.argsort(group, kind="stable")
    bounds = np.flatnonzero(np.diff(group[order])) + 1
    for rows in np.split(order, bounds):
        if len(rows) < 2:
            continue
        r = model._residual(x, c, last, rows)  # (n, D)
        cost = (r * r).sum(1)[:, None] - 2.0 * (r @ cent.T) + cent_sq[None, :]  # (n, K) squared distances
        if len(rows) <= len(cent):
            items, codes = linear_sum_assignment(cost)
        else:  # more items than codes: the K cheapest pairs are made distinct, the rest keep their codes
            codes, items = linear_sum_assignment(cost.T)
        c[rows[items], last] = codes
    return c


def assign_incremental(model: Quantiser, x_new: np.ndarray, existing: np.ndarray,
                       level1_new: np.ndarray | None = None) -> np.ndarray:
    """SIDs (N_new, L+1) for new items, without retraining and without touching ``existing`` (M, L+1).

    New items are encoded with the fitted centroids (nearest centroid; a capacity cap is a property
    of a whole-catalog encode, so ``balanced`` is not applied), then each gets the next free suffix of
    its prefix: one more than the largest suffix any existing SID with that prefix uses, then counting
    up over new items in input order. So the result clashes neither with ``existing`` nor with itself.
    """
    levels = len(model.sizes)
    old = _as_codes(existing, "existing")
    if old.shape[1] != levels + 1:
        raise ValueError(f"existing must be (M, {levels + 1}) SID codes (levels + suffix), got {old.shape}")
    if isinstance(model, ResidualKMeans):
        new = model.encode(x_new, level1=level1_new, balanced=False)  # (N_new, L)
    elif level1_new is not None:
        raise ValueError(f"{type(model).__name__} has no fixed level-1 codes; do not pass level1_new")
    else:
        new = model.encode(x_new)
    group = _row_groups(np.concatenate([old[:, :levels], new]))  # (M + N_new,)
    g_old, g_new = group[: len(old)], group[len(old):]
    next_free = np.zeros(int(group.max()) + 1 if len(group) else 0, dtype=np.int64)  # (G,)
    np.maximum.at(next_free, g_old, old[:, levels] + 1)
    suffix = next_free[g_new] + _rank_within_groups(g_new, np.arange(len(g_new)))  # (N_new,)
    return np.concatenate([new, suffix[:, None]], axis=1)
