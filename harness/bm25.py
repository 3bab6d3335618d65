"""Okapi BM25 over a fixed corpus (numpy + scipy sparse), with an optional row mask for filtered search.

Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and Beyond". For a query
``q`` (its words, repeats counted) and a document ``d``::

    score(d, q) = sum_{t in q} idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))          (Lucene's non-negative idf)

Words are lower-cased ``[a-z0-9]+`` runs. The per-(document, term) weights are computed once at
build time into an (N, V) sparse matrix, so a query costs one column slice and a row sum.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    """The BM25 terms of ``text``: lower-cased runs of ASCII letters and digits."""
    return _WORD.findall(text.lower())


def top_k(scores: np.ndarray, k: int, mask: np.ndarray | None = None) -> np.ndarray:
    """Row indices of the ``k`` highest ``scores`` among rows where ``mask`` is True, best first (ties: lower row)."""
    rows = np.arange(len(scores)) if mask is None else np.flatnonzero(mask)  # (M,) candidate rows
    if k <= 0 or len(rows) == 0:
        return np.zeros(0, np.int64)
    s = scores[rows]  # (M,)
    if k < len(rows):
        part = np.argpartition(-s, k - 1)[:k]
        rows, s = rows[part], s[part]
    order = np.lexsort((rows, -s))  # score descending, then row ascending
    return rows[order].astype(np.int64)


class BM25:
    """Okapi BM25 over ``texts``: :meth:`scores` for every row, :meth:`search` for the best ``k`` rows."""

    def __init__(self, texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.vocab: dict[str, int] = {}
        rows, cols = [], []
        for r, text in enumerate(texts):
            for word in words(text):
                rows.append(r)
                cols.append(self.vocab.setdefault(word, len(self.vocab)))
        n = len(texts)
        tf = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(n, len(self.vocab)))
        tf.sum_duplicates()  # (N, V) term counts
        doc_len = np.asarray(tf.sum(axis=1)).ravel()  # (N,)
        df = np.bincount(tf.indices, minlength=len(self.vocab))  # (V,)
        idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)  # (V,)
        avgdl = doc_len.mean() if n and doc_len.mean() > 0 else 1.0
        norm = k1 * (1 - b + b * doc_len / avgdl)  # (N,)
        coo = tf.tocoo()
        weights = coo.data * (k1 + 1) / (coo.data + norm[coo.row]) * idf[coo.col]
        self.matrix = sp.csc_matrix((weights, (coo.row, coo.col)), shape=coo.shape)  # (N, V) BM25 term weights

    def __len__(self) -> int:
        return int(self.matrix.shape[0])

    def scores(self, query: str) -> np.ndarray:
        """(N,) float32 BM25 score of every row for ``query`` (0 where no query word occurs)."""
        terms = [self.vocab[w] for w in words(query) if w in self.vocab]
        if not terms:
            return np.zeros(len(self), np.float32)
        return np.asarray(self.matrix[:, terms].sum(axis=1), np.float32).ravel()

    def search(self, query: str, k: int, mask: np.ndarray | None = None) -> np.ndarray:
        """The best ``k`` rows for ``query``, best first; none when no query word is in the corpus.

        ``mask`` (N,) bool keeps only rows where it is True (e.g. in stock, under a price cap). Rows
        with score 0 may fill the tail when fewer than ``k`` rows match a query word.
        """
        if mask is not None and mask.shape != (len(self),):
            raise ValueError(f"mask must be ({len(self)},) bool, got {mask.shape}")
        if not any(w in self.vocab for w in words(query)):
            return np.zeros(0, np.int64)
        return top_k(self.scores(query), k, mask)
