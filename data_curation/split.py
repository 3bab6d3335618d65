"""train / val / test assignment by user (no user in two splits), optionally time-based for test.

- ``user`` mode: each pseudonymous user gets a uniform number u in [0, 1) from a seeded hash;
  u < test_fraction -> test, u < test_fraction + val_fraction -> val, else train.
- ``time`` mode: test = the sessions that started in the last ``test_fraction`` of sessions by time
  (a quantile cut of ``started_at``); earlier sessions of users who appear in test are dropped
  (``user_in_test``) so no user crosses splits; the remaining users go to val / train by u.
"""

from __future__ import annotations

import numpy as np

from data_curation.config import SplitConfig

SPLITS = ("train", "val", "test")
DROPPED_USER_IN_TEST = 3
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """A good 64-bit mixer (Steele et al., SplitMix64), vectorised over uint64."""
    with np.errstate(over="ignore"):
        z = (x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return z ^ (z >> np.uint64(31))


def unit_hash(keys: np.ndarray, seed: int) -> np.ndarray:
    """keys (uint64) -> floats in [0, 1), fixed for a (key, seed) pair."""
    with np.errstate(over="ignore"):
        mixed = splitmix64(keys.astype(np.uint64) ^ splitmix64(np.array([seed], dtype=np.uint64))[0])
    return (mixed >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def assign_splits(user: np.ndarray, started: np.ndarray, cfg: SplitConfig, seed: int) -> np.ndarray:
    """Per session: 0 train, 1 val, 2 test, 3 dropped (time mode: a test user's earlier session)."""
    u = unit_hash(user, seed)
    out = np.zeros(len(user), dtype=np.int8)
    if cfg.mode == "user" or cfg.test_fraction == 0 or len(user) == 0:
        out[u < cfg.test_fraction + cfg.val_fraction] = 1
        out[u < cfg.test_fraction] = 2
        return out
    cutoff = np.quantile(started, 1 - cfg.test_fraction, method="higher")
    test = started >= cutoff
    test_users = np.unique(user[test])
    out[u < cfg.val_fraction] = 1
    out[np.isin(user, test_users)] = DROPPED_USER_IN_TEST
    out[test] = 2
    return out
