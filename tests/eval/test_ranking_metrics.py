"""Ranking metrics against rankings worked out by hand.

Run: .venv/bin/python -m pytest tests/eval/test_ranking_metrics.py -q
"""

from __future__ import annotations

import math

import pytest

from eval.metrics import (
    MetricError,
    hit_at_k,
    mean_metrics,
    mrr,
    ndcg_at_k,
    percentile,
    ranking_metrics,
    recall_at_k,
)

RANKED = ["a", "b", "c", "d", "e"]


def test_single_relevant_item_by_hand() -> None:
    # relevant "c" at rank 3: DCG = 1/log2(4) = 0.5, IDCG = 1/log2(2) = 1
    assert ndcg_at_k(RANKED, {"c"}, 5) == pytest.approx(0.5)
    assert ndcg_at_k(RANKED, {"c"}, 2) == 0.0
    assert hit_at_k(RANKED, {"c"}, 3) == 1.0 and hit_at_k(RANKED, {"c"}, 2) == 0.0
    assert recall_at_k(RANKED, {"c"}, 3) == 1.0
    assert mrr(RANKED, {"c"}) == pytest.approx(1 / 3)
    assert mrr(RANKED, {"z"}) == 0.0


def test_several_relevant_items_by_hand() -> None:
    relevant = {"b", "d", "x"}  # x never retrieved
    # DCG@5 = 1/log2(3) + 1/log2(5); IDCG@5 = 1 + 1/log2(3) + 1/log2(4) (three relevant)
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    idcg = 1 + 1 / math.log2(3) + 0.5
    assert ndcg_at_k(RANKED, relevant, 5) == pytest.approx(dcg / idcg)
    assert recall_at_k(RANKED, relevant, 5) == pytest.approx(2 / 3)
    # k = 2 < |relevant|: recall is over min(3, 2) = 2 slots; one hit (b)
    assert recall_at_k(RANKED, relevant, 2) == pytest.approx(1 / 2)
    # IDCG@2 = 1 + 1/log2(3); DCG@2 = 1/log2(3)
    assert ndcg_at_k(RANKED, relevant, 2) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert mrr(RANKED, relevant) == 0.5


def test_duplicates_count_once_and_perfect_ranking_is_one() -> None:
    assert recall_at_k(["a", "a", "b"], {"a", "b"}, 2) == 1.0  # the second "a" is dropped: b moves up
    assert ndcg_at_k(["a", "b"], {"a", "b"}, 10) == pytest.approx(1.0)
    assert ndcg_at_k([], {"a"}, 10) == 0.0


def test_ranking_metrics_and_mean() -> None:
    row = ranking_metrics(RANKED, {"a"}, ks=(1, 10))
    assert row == {"recall@1": 1.0, "ndcg@1": 1.0, "hit@1": 1.0, "recall@10": 1.0, "ndcg@10": 1.0, "hit@10": 1.0,
                   "mrr": 1.0}
    assert mean_metrics([{"m": 1.0, "n": 2.0}, {"m": 0.0}]) == {"m": 0.5, "n": 2.0}
    assert mean_metrics([]) == {}


def test_percentile_by_hand() -> None:
    assert percentile([10, 20, 30, 40], 50) == 25.0  # linear interpolation between 20 and 30
    assert percentile([10, 20, 30, 40], 95) == pytest.approx(38.5)  # rank 0.95 * 3 = 2.85 -> 30 + 0.85 * 10
    assert percentile([], 50) is None


def test_unscorable_inputs_are_errors() -> None:
    with pytest.raises(MetricError, match="no relevant ids"):
        recall_at_k(RANKED, set(), 5)
    with pytest.raises(MetricError, match="k must be"):
        ndcg_at_k(RANKED, {"a"}, 0)
    with pytest.raises(MetricError, match="q must be"):
        percentile([1.0], 101)
