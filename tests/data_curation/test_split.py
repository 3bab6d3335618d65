"""Splits: no user in two splits (user, time), no task or task wording in two splits (task), deterministic
per seed, time mode puts the latest sessions in test.

    pytest tests/data_curation/test_split.py
"""

from __future__ import annotations

import numpy as np
import pytest

from data_curation.config import SplitConfig
from data_curation.split import (
    DROPPED_USER_IN_TEST,
    assign_groups,
    assign_splits,
    assign_task_splits,
    task_groups,
    text_family,
    unit_hash,
)


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


def test_text_family_folds_case_punctuation_spacing_and_numbers() -> None:
    a = text_family("I need a kitchen upgrade, total budget $240")
    assert a == text_family("i need  a Kitchen upgrade - total budget 1,180.50") == "kitchen upgrade"
    # the price clause and the opening request words are how, not what: one family
    for same in ("a kitchen upgrade", "help me get a kitchen upgrade for under 180 dollars",
                 "Can you put together a kitchen upgrade? I can spend about 700.", "a kitchen upgrade (max 90 bucks)",
                 "Hey, any kitchen upgrade for no more than $50?", "a kitchen upgrade, 300 tops"):
        assert text_family(same) == a, same
    assert text_family("size 10, under 45") == text_family("size 12 under 30") == "size 0"
    # what is asked stays: another product, colour or size is another family
    assert text_family("a red kitchen upgrade") != a
    assert text_family("boots in size 42 under 80") == "boots in size 0" != text_family("boots under 80")


def test_task_groups_join_one_wording_family_and_optionally_near_duplicates() -> None:
    texts = {"t1": "a kitchen upgrade, under 240", "t2": "I need a kitchen upgrade", "t3": "a kitchen upgrades",
             "t4": "something for hiking", "t5": "something for hiking!!", "t6": "", "t7": ""}
    g = task_groups(texts)
    assert g["t1"] == g["t2"] and g["t4"] == g["t5"]
    assert len({g["t1"], g["t3"], g["t4"], g["t6"], g["t7"]}) == 5  # a task without text is its own group
    assert all(k != 0 for k in g.values())
    assert task_groups(texts) == g  # deterministic
    near = task_groups(texts, near_threshold=0.6)
    assert near["t1"] == near["t2"] == near["t3"] and near["t3"] != near["t4"]


KINDS = ("explicit", "attribute", "vague", "bundle", "multi_turn")


def _task_sessions(n_tasks: int, per_task: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[str], dict[str, str]]:
    """Sessions of n_tasks tasks (per_task each, random users): group keys, task ids, kinds; texts in
    wording families of 3 tasks ("wording bc, under 22" / "… under 23" / …)."""
    def word(n: int) -> str:  # a number-free name per family: 0 -> "a", 27 -> "ch"
        return "".join(chr(ord("a") + int(d)) for d in str(n))

    rng = np.random.default_rng(seed)
    texts = {f"t{i}": f"wording {word(i // 3)}, under {10 + i}" for i in range(n_tasks)}
    kind = {f"t{i}": KINDS[(i // 3) % len(KINDS)] for i in range(n_tasks)}
    keys = task_groups(texts)
    tasks = [f"t{i}" for i in range(n_tasks) for _ in range(per_task)]
    user = rng.integers(0, 50, size=len(tasks)).astype(np.uint64)
    group = np.array([keys[t] for t in tasks], dtype=np.uint64)
    return user, group, tasks, kind


def test_task_mode_keeps_tasks_and_families_together_with_the_fractions_of_tasks_per_kind() -> None:
    user, group, tasks, kind = _task_sessions(3000, 3, seed=0)
    cfg = SplitConfig(mode="task", val_fraction=0.05, test_fraction=0.25)
    split = assign_task_splits(user, group, tasks, kind, cfg, seed=7)
    per_task: dict[str, set[int]] = {}
    per_family: dict[int, set[int]] = {}
    for t, k, s in zip(tasks, group.tolist(), split.tolist(), strict=True):
        per_task.setdefault(t, set()).add(s)
        per_family.setdefault(k, set()).add(s)
    assert all(len(s) == 1 for s in per_task.values()) and all(len(s) == 1 for s in per_family.values())
    for k in KINDS:  # 600 tasks of each kind in families of 3: the quota is met to within one family
        got = np.bincount([next(iter(s)) for t, s in per_task.items() if kind[t] == k], minlength=3)
        assert abs(got[2] - 150) <= 3 and abs(got[1] - 30) <= 3, (k, got)
    tr, _, te = _users_per_split(user, split)
    assert tr & te  # users cross splits in task mode, by design
    assert (split == assign_task_splits(user, group, tasks, kind, cfg, seed=7)).all()
    assert not (split == assign_task_splits(user, group, tasks, kind, cfg, seed=8)).all()


def test_assign_groups_deals_out_quotas_in_hash_order_per_stratum() -> None:
    key = np.arange(1, 9, dtype=np.uint64)
    size = np.array([1, 1, 1, 1, 2, 2, 2, 2])
    stratum = ["a"] * 4 + ["b"] * 3 + ["c"]
    cfg = SplitConfig(mode="task", val_fraction=0.25, test_fraction=0.25)
    out = assign_groups(key, size, stratum, cfg, seed=3)
    # a: 4 groups of 1 task, centred at 1/8, 3/8, 5/8, 7/8 in hash order -> one test, one val, two train
    assert sorted(out[:4].tolist()) == [0, 0, 1, 2]
    assert unit_hash(key[:4], 3)[out[:4] == 2] < unit_hash(key[:4], 3)[out[:4] == 1]
    # b: 3 groups of 2, centred at 1/6, 1/2, 5/6 -> test, train, train; c: one group, centred at 1/2 -> train
    assert sorted(out[4:7].tolist()) == [0, 0, 2] and out[7] == 0


def test_task_mode_splits_sessions_without_a_task_by_user() -> None:
    user = np.repeat(np.arange(150, dtype=np.uint64), 2)
    none: list[str | None] = [None] * len(user)
    task_mode = SplitConfig(mode="task", val_fraction=0.1, test_fraction=0.3)
    by_user = assign_splits(user, np.zeros(len(user)), SplitConfig(val_fraction=0.1, test_fraction=0.3), seed=1)
    got = assign_task_splits(user, np.zeros(len(user), dtype=np.uint64), none, {}, task_mode, seed=1)
    assert (got == by_user).all()
    with pytest.raises(ValueError, match="assign_task_splits"):
        assign_splits(user, np.zeros(len(user)), task_mode, seed=1)


def test_split_config_rejects_near_threshold_outside_task_mode() -> None:
    with pytest.raises(ValueError, match="task"):
        SplitConfig(mode="user", near_threshold=0.9)
    assert SplitConfig(mode="task", near_threshold=0.9).near_threshold == 0.9
