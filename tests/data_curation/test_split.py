"""Splits: no user in two splits, deterministic per seed, time mode puts the latest sessions in test.

    pytest tests/data_curation/test_split.py
"""

from __future__ import annotations

import numpy as np

from data_curation.config import SplitConfig
from data_curation.split import DROPPED_USER_IN_TEST, assign_splits, unit_hash


def _users_per_split(user: np.ndarray, split: np.ndarray) -> list[set[int]]:
    return [set(user[split == i].tolist()) for i in range(3)]


def test_user_mode_keeps_users_together() -> None:
    rng = np.random.default_rng(0)
    user = rng.integers(0, 500, size=5000).astype(np.uint64)
    started = rng.uniform(0, 1e6, size=5000)
    split = assign_splits(user, started, SplitConfig(val_fraction=0.1, test_fraction=0.2), seed=7)
    tr, va, te = _users_per_split(user, split)
    assert not (tr & va or tr & te or va & te)
    assert abs(len(te) / 500 - 0.2) < 0.06 and abs(len(va) / 500 - 0.1) < 0.05
    assert (split == assign_splits(user, started, SplitConfig(val_fraction=0.1, test_fraction=0.2), seed=7)).all()
    assert not (split == assign_splits(user, started, SplitConfig(val_fraction=0.1, test_fraction=0.2), seed=8)).all()


def test_time_mode_tests_on_the_latest_and_drops_earlier_sessions_of_test_users() -> None:
    user = np.array([1, 2, 1, 3, 4, 2, 5, 6, 7, 8], dtype=np.uint64)
    started = np.arange(10, dtype=np.float64)
    split = assign_splits(user, started, SplitConfig(mode="time", val_fraction=0.0, test_fraction=0.2), seed=0)
    assert split[8:].tolist() == [2, 2]  # the last 20 % by time
    assert (split[:8] != 2).all()
    tr, va, te = _users_per_split(user, split)
    assert te == {7, 8} and not (tr & te or va & te)
    cfg = SplitConfig(mode="time", val_fraction=0.0, test_fraction=0.5)
    split = assign_splits(user, started, cfg, seed=0)
    assert split.tolist() == [0, DROPPED_USER_IN_TEST, 0, 0, 0, 2, 2, 2, 2, 2]  # user 2 is in test later


def test_unit_hash_is_uniform_in_0_1() -> None:
    u = unit_hash(np.arange(100_000, dtype=np.uint64), seed=3)
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
