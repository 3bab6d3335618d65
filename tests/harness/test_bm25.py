"""Okapi BM25 against hand-computed scores on a 3-document corpus. Run: pytest tests/harness/test_bm25.py -q"""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.bm25 import BM25, top_k

DOCS = ["red boots", "Blue boots, boots!", "red tent"]  # lengths 2, 3, 2 words; avgdl = 7/3


def _term(tf: int, doc_len: int, df: int, k1: float = 1.2, b: float = 0.75) -> float:
    """One (term, document) BM25 weight, written out from the formula."""
    idf = math.log(1 + (3 - df + 0.5) / (df + 0.5))
    return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * doc_len / (7 / 3)))


def test_scores_match_the_formula() -> None:
    bm = BM25(DOCS)
    got = bm.scores("RED boots")
    # red: df 2; boots: df 2 (d1 holds it twice)
    want = [_term(1, 2, 2) + _term(1, 2, 2), _term(2, 3, 2), _term(1, 2, 2)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(want, [0.998347, 0.598187, 0.499174], atol=1e-5)  # the numbers by hand
    assert bm.search("red boots", 3).tolist() == [0, 1, 2]
    assert bm.search("red boots", 1).tolist() == [0]


def test_mask_filters_rows_and_unknown_words_find_nothing() -> None:
    bm = BM25(DOCS)
    assert bm.search("red boots", 3, mask=np.array([False, True, True])).tolist() == [1, 2]
    assert bm.search("red boots", 3, mask=np.zeros(3, bool)).tolist() == []
    assert bm.search("sandals", 3).tolist() == []
    assert bm.scores("sandals").tolist() == [0, 0, 0]
    assert bm.search("tent", 3).tolist() == [2, 0, 1]  # zero-score rows fill the tail in row order
    with pytest.raises(ValueError, match="mask"):
        bm.search("red", 2, mask=np.ones(2, bool))


def test_top_k_orders_ties_by_row() -> None:
    scores = np.array([1.0, 3.0, 3.0, 0.5], np.float32)
    assert top_k(scores, 3).tolist() == [1, 2, 0]
    assert top_k(scores, 10, np.array([True, False, True, True])).tolist() == [2, 0, 3]
    assert top_k(scores, 0).tolist() == []
