"""Selection: water-filling caps, coverage down to < 1 %, k-means, difficulty sets, certainty files.

    pytest tests/data_curation/test_select.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from data_curation.errors import CurationError
from data_curation.select import (
    auto_clusters,
    difficulty,
    hashing_embed,
    kmeans_assign,
    load_certainty,
    pick,
    water_fill,
)
from infra.recordio import RecordError


def test_water_fill_exact() -> None:
    sizes = np.array([10, 1, 4, 0, 7])
    assert water_fill(sizes, 22).tolist() == [10, 1, 4, 0, 7]  # everything
    assert water_fill(sizes, 10).tolist() == [3, 1, 3, 0, 3]
    assert water_fill(sizes, 11).tolist() == [4, 1, 3, 0, 3]  # the extra goes to the biggest cluster
    assert water_fill(sizes, 3).tolist() == [1, 0, 1, 0, 1]  # fewer than clusters: biggest first
    assert water_fill(sizes, 4).tolist() == [1, 1, 1, 0, 1]


def test_pick_takes_smallest_keys_per_cluster() -> None:
    assign = np.array([0, 1, 0, 0, 1, 2])
    keys = np.array([5, 1, 3, 9, 0, 7], dtype=np.uint64)
    assert pick(assign, np.array([2, 1, 0]), keys).tolist() == [True, False, True, False, True, False]


def test_below_one_percent_keeps_full_coverage() -> None:
    rng = np.random.default_rng(0)
    n = 20_000
    assign = rng.integers(0, 150, size=n)
    target = round(0.009 * n)  # 180 of 20 000 (0.9 %)
    take = water_fill(np.bincount(assign, minlength=150), target)
    keep = pick(assign, take, rng.integers(0, 2**63, size=n).astype(np.uint64))
    assert keep.sum() == target
    assert len(np.unique(assign[keep])) == 150  # every cluster covered
    assert auto_clusters(n, target, 0) == 141 and auto_clusters(n, 50, 0) == 50 and auto_clusters(n, 50, 10) == 10


def test_hashing_embed_and_kmeans_group_similar_texts() -> None:
    texts = ["hiking boots size 42", "hiking boots size 43", "waterproof hiking boots",
             "espresso machine", "espresso coffee machine", "an espresso maker", ""]
    x = hashing_embed(texts)
    assert x.shape == (7, 384) and np.allclose(np.linalg.norm(x[:6], axis=1), 1) and not x[6].any()
    assign = kmeans_assign(x[:6], 2, 20, seed=0)
    assert len(set(assign[:3].tolist())) == 1 and len(set(assign[3:].tolist())) == 1 and assign[0] != assign[3]
    assert (assign == kmeans_assign(x[:6], 2, 20, seed=0)).all()


def test_difficulty_sets() -> None:
    sets, cert = difficulty(["a", "b", None, "zz"], {"a": 0.9, "b": 0.2}, threshold=0.5)
    assert sets.tolist() == [1, 2, 0, 0]
    assert cert[:2].tolist() == pytest.approx([0.9, 0.2]) and np.isnan(cert[2:]).all()


def test_certainty_file_errors(tmp_path: Path) -> None:
    good = tmp_path / "c.jsonl"
    good.write_text('{"task_id": "a", "certainty": 0.25}\n{"task_id": "b", "certainty": 1}\n')
    assert load_certainty(good) == {"a": 0.25, "b": 1.0}
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"task_id": "a", "certainty": 0.25}\n{"task_id": "a", "certainty": 0.3}\n')
    with pytest.raises(CurationError, match=r"dup\.jsonl:2"):
        load_certainty(dup)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "a", "certainty": 1.5}\n')
    with pytest.raises(RecordError, match=r"bad\.jsonl:1.*certainty"):
        load_certainty(bad)
