"""Quantisers (RQ-KMeans, RQ-VAE), codebook health, collision suffix, incremental SIDs.

Run: `.venv/bin/python -m pytest tests/sid/test_quantize.py -q` (fast tier, about 6 s on 2 cores).
"""

from __future__ import annotations

import math
from pathlib import Path

import faiss
import numpy as np
import pytest
import torch
from pydantic import ValidationError

from sid.quantize import (
    NotFittedError,
    Quantiser,
    ResidualKMeans,
    RQKMeansConfig,
    add_collision_suffix,
    assign_incremental,
    balanced_assign,
    collision_rate,
    count_distinct_rows,
    kmeans_pp_init,
    level_stats,
    reseed_dead_codes,
    unique_last_level,
)
from sid.rqvae import RQVAE, RQVAEConfig


def _clustered(n: int, d: int, clusters: int, seed: int = 0, spread: float = 0.3,
               weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points (n, d) float32 around ``clusters`` random centres, and each point's cluster id (n,)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d)).astype(np.float32)  # (C, D)
    labels = rng.choice(clusters, size=n, p=weights)  # (N,)
    x = centres[labels] + spread * rng.standard_normal((n, d)).astype(np.float32)
    return x.astype(np.float32), labels


def _random(n: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def _unique_rows(codes: np.ndarray) -> int:
    return len(np.unique(codes, axis=0))


def _cfg(**kw: object) -> RQKMeansConfig:
    """Small, fast settings for tests."""
    base: dict[str, object] = {"levels": 3, "codebook_size": 64, "iters": 10}
    base.update(kw)
    return RQKMeansConfig.model_validate(base)


@pytest.fixture(scope="module")
def random_fit() -> tuple[ResidualKMeans, np.ndarray, np.ndarray]:
    """RQ-KMeans (K=64, L=3) on 20k seeded random points: (model, x, codes)."""
    x = _random(20_000, 32)
    model = ResidualKMeans(_cfg()).fit(x)
    return model, x, model.encode(x)


@pytest.fixture(scope="module")
def clustered_fit() -> tuple[ResidualKMeans, np.ndarray, np.ndarray]:
    """RQ-KMeans (K=32, L=2) on 8k points in 100 clusters: (model, x, codes)."""
    x, _ = _clustered(8_000, 32, 100, seed=1)
    model = ResidualKMeans(_cfg(levels=2, codebook_size=32)).fit(x)
    return model, x, model.encode(x)


# ---------------------------------------------------------------------------------------------------------------
# hand-computed numerics


def test_level_stats_against_hand_computed_values() -> None:
    codes = np.array([[0, 1], [0, 1], [1, 0]])
    h = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))  # 0.9183 bits: shares 2/3 and 1/3
    s1, s2 = level_stats(codes, [2, 4])
    assert s1 == pytest.approx({"level": 1, "size": 2, "used": 2, "utilisation": 1.0, "entropy": h,
                                "normalised_entropy": h / 1.0, "max_share": 2 / 3})
    assert s2 == pytest.approx({"level": 2, "size": 4, "used": 2, "utilisation": 0.5, "entropy": h,
                                "normalised_entropy": h / 2.0, "max_share": 2 / 3})
    (one,) = level_stats(np.zeros((3, 1), dtype=np.int64), [1])
    assert one["entropy"] == 0.0 and one["normalised_entropy"] == 1.0 and one["max_share"] == 1.0
    with pytest.raises(ValueError, match=r"in \[0, 2\)"):
        level_stats(np.array([[2]]), [2])


def test_collision_rate_against_hand_computed_values() -> None:
    assert collision_rate(np.array([[0, 1], [0, 1], [1, 0]])) == pytest.approx(2 / 3)
    assert collision_rate(np.array([[0, 1], [1, 1], [1, 0]])) == 0.0
    assert collision_rate(np.array([[5, 5]] * 4)) == 1.0
    # codes too wide to pack into one int64 take the np.unique(axis=0) path; same answer
    big = np.array([[2**40, 1, 2**40], [2**40, 1, 2**40], [0, 0, 0], [1, 2, 3]])
    assert collision_rate(big) == pytest.approx(2 / 4)


def test_add_collision_suffix_hand_example() -> None:
    codes = np.array([[0, 1], [0, 1], [1, 0], [0, 1]])
    np.testing.assert_array_equal(add_collision_suffix(codes)[:, 2], [0, 1, 0, 2])
    # order is a sort key: inside group (rows 0, 1, 3) keys 5, 3, 4 -> suffixes 2, 0, 1
    np.testing.assert_array_equal(add_collision_suffix(codes, order=np.array([5, 3, 0, 4]))[:, 2], [2, 0, 0, 1])
    with pytest.raises(ValueError, match="order must have shape"):
        add_collision_suffix(codes, order=np.arange(3))


def test_unique_last_level_hand_example() -> None:
    q = ResidualKMeans(RQKMeansConfig(levels=2, codebook_size=2))
    q.centroids = [np.array([[0, 0], [10, 10]], np.float32), np.array([[1, 0], [0, 1]], np.float32)]
    # a, b in prefix 0 with residuals (1, .2) and (.9, 0): both nearest last code 0 (they would collide).
    # a->0, b->1 costs .04 + 1.81 = 1.85; a->1, b->0 costs 1.64 + .01 = 1.65: the minimum. c alone keeps its code.
    x = np.array([[1.0, 0.2], [0.9, 0.0], [10.0, 11.0]], np.float32)
    codes = q.encode(x)
    np.testing.assert_array_equal(codes, [[0, 0], [0, 0], [1, 1]])
    np.testing.assert_array_equal(unique_last_level(q, x, codes), [[0, 1], [0, 0], [1, 1]])
    np.testing.assert_array_equal(codes, [[0, 0], [0, 0], [1, 1]])  # the input is not changed
    # more items than codes: d (.95, .1) joins prefix 0. Two codes for three items: code 0 -> b (.01) and
    # code 1 -> a (1.64) is the cheapest pair (1.65; code 0 -> d would cost .0125); d keeps its code 0 and collides.
    x4 = np.concatenate([x, [[0.95, 0.1]]]).astype(np.float32)
    np.testing.assert_array_equal(unique_last_level(q, x4, q.encode(x4)), [[0, 1], [0, 0], [1, 1], [0, 0]])
    with pytest.raises(ValueError, match="codes must be"):
        unique_last_level(q, x, codes[:, :1])


def test_balanced_assign_hand_example() -> None:
    # 1-D points 0, .1, .2, .9; codes at 0 and 1; cap 2. Nearest would put three on code 0.
    # Margins for code 0 (d to code 1 minus d to code 0): 1, .8, .6 -> the point at .2 moves to code 1.
    pts = np.array([[0.0], [0.1], [0.2], [0.9]], dtype=np.float32)
    cents = np.array([[0.0], [1.0]], dtype=np.float32)

    def search(rows: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        dist, idx = faiss.knn(pts[rows], cents[cand], min(k, len(cand)))
        return dist, cand[idx]

    np.testing.assert_array_equal(balanced_assign(search, 4, 2, cap=2), [0, 0, 1, 1])
    np.testing.assert_array_equal(balanced_assign(search, 4, 2, cap=4), [0, 0, 0, 1])
    with pytest.raises(ValueError, match="balance_slack"):
        balanced_assign(search, 4, 2, cap=1)


def test_count_distinct_rows_and_kmeans_pp_on_duplicates() -> None:
    base = np.array([[0, 0], [1, 0], [0, 5]], dtype=np.float32)
    x = np.repeat(base, 50, axis=0)  # (150, 2): three distinct rows
    assert count_distinct_rows(x) == 3
    assert count_distinct_rows(np.zeros((4, 3), dtype=np.float32)) == 1
    seeds = kmeans_pp_init(x, 3, np.random.default_rng(0))  # (3, 2)
    # with k = #distinct rows, k-means++ can only pick each distinct row once (distance 0 = probability 0)
    assert {tuple(r) for r in seeds.tolist()} == {tuple(r) for r in base.tolist()}


# ---------------------------------------------------------------------------------------------------------------
# RQ-KMeans behaviour


def test_random_points_utilisation_floor_and_bijection(random_fit: tuple[ResidualKMeans, np.ndarray,
                                                                         np.ndarray]) -> None:
    """Floor: >= 0.9 of the 64 codes used at every level, normalised entropy >= 0.9, on 20k random points."""
    model, x, codes = random_fit
    assert codes.shape == (len(x), 3) and codes.dtype == np.int64
    assert model.sizes == [64, 64, 64] and model.dead_codes == [0, 0, 0]
    for s in level_stats(codes, model.sizes):
        assert s["utilisation"] >= 0.9, s
        assert s["normalised_entropy"] >= 0.9, s
    sids = add_collision_suffix(codes)
    assert _unique_rows(sids) == len(x)  # a bijection item <-> SID
    np.testing.assert_array_equal(sids[:, :3], codes)  # the prefix is untouched
    assert collision_rate(sids) == 0.0


def test_clustered_points_bijection_and_neighbours_share_level1(
        clustered_fit: tuple[ResidualKMeans, np.ndarray, np.ndarray]) -> None:
    model, x, codes = clustered_fit
    assert all(s["utilisation"] >= 0.9 for s in level_stats(codes, model.sizes))
    assert _unique_rows(add_collision_suffix(codes)) == len(x)
    _d, nn = faiss.knn(x[:2000], x, 2)  # (2000, 2): column 0 is the point itself
    nn_same = float((codes[:2000, 0] == codes[nn[:, 1], 0]).mean())
    rng = np.random.default_rng(0)
    a, b = rng.integers(len(x), size=(2, 20_000))
    random_same = float((codes[a, 0] == codes[b, 0]).mean())
    assert nn_same >= 5 * random_same, (nn_same, random_same)
    # more levels reconstruct better
    err1 = float(((x - model.centroids[0][codes[:, 0]]) ** 2).sum(1).mean())
    err2 = float(((x - model.decode(codes)) ** 2).sum(1).mean())
    assert err2 < err1 < float(((x - x.mean(0)) ** 2).sum(1).mean())


def test_decode_is_the_sum_of_centroids(clustered_fit: tuple[ResidualKMeans, np.ndarray, np.ndarray]) -> None:
    model, _x, codes = clustered_fit
    c0, c1 = model.centroids
    np.testing.assert_allclose(model.decode(codes[:5]), c0[codes[:5, 0]] + c1[codes[:5, 1]], rtol=1e-6)
    with pytest.raises(ValueError, match="drop the collision suffix"):
        model.decode(add_collision_suffix(codes))


def test_reseed_revives_dead_codes_from_a_bad_init() -> None:
    """Four tight clusters, eight centroids of which four sit far away: 4 used before, 8 after re-seeding."""
    x, _ = _clustered(800, 4, 4, seed=2, spread=0.5)
    rng = np.random.default_rng(0)
    good = x[rng.choice(len(x), 4, replace=False)]
    bad = np.full((4, 4), 1e3, dtype=np.float32)
    init = np.concatenate([good, bad])  # (8, 4)
    _d, before = faiss.knn(x, init, 1)
    assert len(np.unique(before)) <= 4
    revived, dead = reseed_dead_codes(x, init, rounds=5, iters=3)
    _d, after = faiss.knn(x, revived, 1)
    assert dead == 0 and len(np.unique(after)) == 8


def test_reseed_revives_codes_in_fit_when_k_exceeds_natural_clusters() -> None:
    """5 heavily duplicated points + 30 singletons, K=16, faiss random init: faiss alone leaves dead codes."""
    rng = np.random.default_rng(0)
    heavy = 10 * rng.standard_normal((5, 8)).astype(np.float32)
    x = np.concatenate([np.repeat(heavy, 400, axis=0), rng.standard_normal((30, 8)).astype(np.float32)])
    cfg = {"levels": 1, "codebook_size": 16, "kmeans_pp": False}
    plain = ResidualKMeans(_cfg(**cfg, reseed_dead=False)).fit(x)
    fixed = ResidualKMeans(_cfg(**cfg, reseed_dead=True)).fit(x)
    assert plain.dead_codes[0] > 0  # the case really has dead codes
    assert fixed.dead_codes == [0]
    assert level_stats(fixed.encode(x), fixed.sizes)[0]["used"] == 16


def test_balanced_assignment_caps_every_code() -> None:
    """Half the points in one cluster; cap = ceil(1.5 * N / K) items per code, at every level."""
    weights = np.r_[0.5, np.full(49, 0.5 / 49)]
    x, _ = _clustered(4_000, 16, 50, seed=3, weights=weights)
    k, cap = 16, math.ceil(1.5 * 4_000 / 16)
    plain = ResidualKMeans(_cfg(levels=2, codebook_size=k)).fit(x)
    assert max(np.bincount(plain.encode(x)[:, 0]).max(), np.bincount(plain.encode(x)[:, 1]).max()) > cap
    model = ResidualKMeans(_cfg(levels=2, codebook_size=k, balanced=True)).fit(x)
    codes = model.encode(x)
    for level in range(2):
        assert np.bincount(codes[:, level], minlength=k).max() <= cap
    half = model.encode(x[:1000])  # the cap is computed on the rows of each encode call
    assert np.bincount(half[:, 0]).max() <= math.ceil(1.5 * 1000 / k)


def test_fixed_level1_is_respected() -> None:
    x, labels = _clustered(3_000, 16, 6, seed=4)
    level1 = np.where(labels == 5, 7, labels)  # codes 0..4 and 7: codes 5, 6 unused
    model = ResidualKMeans(_cfg(levels=2, codebook_size=16)).fit(x, level1=level1)
    assert model.sizes == [8, 16] and model.fixed_level1
    codes = model.encode(x, level1=level1)
    np.testing.assert_array_equal(codes[:, 0], level1)
    np.testing.assert_allclose(model.centroids[0][7], x[level1 == 7].mean(0), rtol=1e-5, atol=1e-5)
    fallback = model.encode(x)  # nearest non-empty level-1 centroid: never the unused codes 5, 6
    assert not np.isin(fallback[:, 0], [5, 6]).any()
    assert (fallback[:, 0] == level1).mean() >= 0.95  # labels are real clusters here
    with pytest.raises(ValueError, match="outside the fitted level-1 codebook"):
        model.encode(x[:2], level1=np.array([0, 8]))
    plain = ResidualKMeans(_cfg(levels=1, codebook_size=4)).fit(x)
    with pytest.raises(ValueError, match="without fixed level-1"):
        plain.encode(x, level1=level1)


def test_fewer_points_than_codes_shrinks_the_codebook() -> None:
    x = _random(10, 4)
    model = ResidualKMeans(_cfg(codebook_size=256)).fit(x)
    assert model.sizes == [10, 1, 1]  # each point its own level-1 code; nothing left to quantise
    codes = model.encode(x)
    assert _unique_rows(codes) == 10
    np.testing.assert_allclose(model.decode(codes), x, atol=1e-5)


def test_subsampled_training_encodes_every_point() -> None:
    x, _ = _clustered(3_000, 8, 20, seed=5)
    model = ResidualKMeans(_cfg(levels=2, codebook_size=16, max_train_points=500)).fit(x)
    codes = model.encode(x)
    assert codes.shape == (3_000, 2)
    assert all(s["used"] == 16 for s in level_stats(codes, model.sizes))


def test_deterministic_per_seed() -> None:
    x, _ = _clustered(3_000, 8, 30, seed=6)
    a = ResidualKMeans(_cfg(codebook_size=16, seed=3)).fit(x)
    b = ResidualKMeans(_cfg(codebook_size=16, seed=3)).fit(x)
    c = ResidualKMeans(_cfg(codebook_size=16, seed=4)).fit(x)
    np.testing.assert_array_equal(a.encode(x), b.encode(x))
    for ca, cb in zip(a.centroids, b.centroids, strict=True):
        np.testing.assert_array_equal(ca, cb)
    assert not np.array_equal(a.centroids[0], c.centroids[0])


def test_save_load_round_trip(tmp_path: Path) -> None:
    x, labels = _clustered(2_000, 8, 10, seed=7)
    for name, level1 in (("plain", None), ("fixed", labels)):
        model = ResidualKMeans(_cfg(codebook_size=16, balanced=True)).fit(x, level1=level1)
        path = tmp_path / f"{name}.quantiser"  # saved at exactly this path, no ".npz" appended
        model.save(path)
        loaded = ResidualKMeans.load(path)
        assert loaded.config == model.config and loaded.sizes == model.sizes
        np.testing.assert_array_equal(loaded.encode(x, level1=level1), model.encode(x, level1=level1))
        np.testing.assert_array_equal(loaded.encode(x), model.encode(x))


def test_incremental_assignment_gives_new_unique_sids(
        clustered_fit: tuple[ResidualKMeans, np.ndarray, np.ndarray]) -> None:
    model, x, codes = clustered_fit
    existing = add_collision_suffix(codes[:6_000])  # (6000, 3)
    snapshot = existing.copy()
    x_new = np.concatenate([x[6_000:], x[:5], x[:5]])  # includes exact duplicates of existing items
    new = assign_incremental(model, x_new, existing)
    np.testing.assert_array_equal(existing, snapshot)  # existing SIDs untouched
    np.testing.assert_array_equal(new[:, :2], model.encode(x_new, balanced=False))
    assert _unique_rows(np.concatenate([existing, new])) == len(existing) + len(new)


def test_incremental_suffix_hand_example() -> None:
    model = ResidualKMeans(_cfg(levels=1, codebook_size=2)).fit(np.array([[0.0], [10.0]], dtype=np.float32))
    code0 = int(model.encode(np.array([[0.0]], dtype=np.float32))[0, 0])
    existing = np.array([[code0, 0], [code0, 1], [code0, 3], [1 - code0, 0]])
    new = assign_incremental(model, np.array([[0.1], [-0.1], [9.0]], dtype=np.float32), existing)
    np.testing.assert_array_equal(new, [[code0, 4], [code0, 5], [1 - code0, 1]])  # max suffix + 1, counting up
    with pytest.raises(ValueError, match=r"existing must be \(M, 2\)"):
        assign_incremental(model, np.zeros((1, 1), dtype=np.float32), existing[:, :1])


def test_config_validation_and_errors() -> None:
    with pytest.raises(ValidationError):
        RQKMeansConfig(codebook_size=1)
    with pytest.raises(ValidationError):
        RQKMeansConfig(levels=0)
    with pytest.raises(ValidationError):
        RQKMeansConfig.model_validate({"levles": 3})  # typo: extra="forbid"
    with pytest.raises(ValidationError, match="raise max_train_points"):
        RQKMeansConfig(codebook_size=256, max_train_points=100)
    with pytest.raises(NotFittedError):
        ResidualKMeans().encode(_random(4, 4))
    with pytest.raises(ValueError, match="non-empty"):
        ResidualKMeans().fit(np.zeros((0, 4), dtype=np.float32))


def test_both_quantisers_satisfy_the_protocol() -> None:
    quantisers: list[Quantiser] = [ResidualKMeans(), RQVAE(RQVAEConfig())]  # checked statically by mypy too
    assert all(isinstance(q, Quantiser) for q in quantisers)


# ---------------------------------------------------------------------------------------------------------------
# RQ-VAE


def _vae_cfg(**kw: object) -> RQVAEConfig:
    base: dict[str, object] = {"levels": 2, "codebook_size": 16, "latent_dim": 8, "hidden": (64, 32),
                               "epochs": 40, "batch_size": 256, "lr": 3e-3}
    base.update(kw)
    return RQVAEConfig.model_validate(base)


@pytest.fixture(scope="module")
def vae_fit() -> tuple[RQVAE, RQVAE, np.ndarray]:
    """(trained RQ-VAE, its untrained twin, data): 2.5k points in 32 clusters, K=16, L=2."""
    x, _ = _clustered(2_500, 32, 32, seed=8)
    untrained = RQVAE(_vae_cfg(), input_dim=32)
    return RQVAE(_vae_cfg()).fit(x), untrained, x


def test_rqvae_trains_and_encodes_valid_codes(vae_fit: tuple[RQVAE, RQVAE, np.ndarray]) -> None:
    model, untrained, x = vae_fit
    assert model.loss_history[-1] < 0.5 * model.loss_history[0], model.loss_history
    before, after = untrained.state_dict(), model.state_dict()
    assert set(before) == set(after)
    for name in ("encoder.0.weight", "decoder.0.weight", "codebooks"):
        assert not torch.equal(before[name], after[name]), f"{name} did not move"
    codes = model.encode(x)
    assert codes.shape == (len(x), 2) and codes.dtype == np.int64
    assert codes.min() >= 0 and codes.max() < 16
    stats = level_stats(codes, model.sizes)
    assert stats[0]["utilisation"] >= 0.75, stats  # floor on clustered data (32 clusters, 16 codes)
    assert _unique_rows(add_collision_suffix(codes)) == len(x)


def test_rqvae_deterministic_and_save_load(vae_fit: tuple[RQVAE, RQVAE, np.ndarray], tmp_path: Path) -> None:
    model, _untrained, x = vae_fit
    again = RQVAE(_vae_cfg()).fit(x)
    np.testing.assert_array_equal(again.encode(x), model.encode(x))
    model.save(tmp_path / "q.pt")
    loaded = RQVAE.load(tmp_path / "q.pt")
    np.testing.assert_array_equal(loaded.encode(x), model.encode(x))
    assert loaded.loss_history == model.loss_history
    with pytest.raises(NotFittedError):
        RQVAE(_vae_cfg()).encode(x)
    with pytest.raises(ValueError, match="dim 5"):
        model.encode(x[:, :5])
