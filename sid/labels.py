"""Readable labels for SID codes and prefixes: the most distinctive words of the items under them.

Scores are TF-IDF-like: ``share of the group's items containing the word * log(N / df)``, so a
label names what sets a group apart, not words every item shares. Groups are computed with one
sparse product (one-hot group matrix @ item-term matrix), never a loop over items.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer

STOP = frozenset((
    "a", "an", "and", "the", "of", "for", "in", "on", "with", "by", "from", "to", "at", "is", "it", "this",
    "that", "size", "sold", "store", "listing", "features", "key", "points", "great", "everyday", "use",
    "customers", "love", "build", "quality", "backed", "warranty", "easy", "returns", "days", "made",
    "crafted", "comes",
))
_DENSE_LIMIT = 50_000_000  # groups x vocabulary cells above which labels are computed row by row


class TermIndex:
    """Item x word presence matrix over item texts (binary; English stop words and shop boilerplate removed)."""

    def __init__(self, texts: Sequence[str], max_features: int = 50_000) -> None:
        self.vectorizer = CountVectorizer(
            binary=True, lowercase=True, token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z\-]{2,}\b",
            stop_words=sorted(STOP), max_features=max_features, dtype=np.float32,
        )
        self.matrix: sp.csr_matrix = self.vectorizer.fit_transform(texts).tocsr()  # (N, V)
        self.vocab = np.array(self.vectorizer.get_feature_names_out())
        n = self.matrix.shape[0]
        df = np.asarray(self.matrix.sum(axis=0)).ravel()  # (V,)
        self.idf = np.log((n + 1) / (df + 1)).astype(np.float32)

    def group_labels(self, groups: np.ndarray, n_groups: int, top: int = 3) -> list[list[str]]:
        """Top words per group; ``groups`` (N,) holds each item's group id in [0, n_groups)."""
        n = self.matrix.shape[0]
        assert groups.shape == (n,), f"groups must be ({n},), got {groups.shape}"
        onehot = sp.csr_matrix((np.ones(n, np.float32), (groups, np.arange(n))), shape=(n_groups, n))
        sums = (onehot @ self.matrix).tocsr()  # (G, V) items per group containing each word
        sizes = np.asarray(onehot.sum(axis=1)).ravel()  # (G,)
        if n_groups * len(self.vocab) <= _DENSE_LIMIT:
            scores = sums.toarray() / np.maximum(sizes, 1)[:, None] * self.idf[None, :]  # (G, V)
            best = np.argsort(-scores, axis=1)[:, :top]
            return [[str(self.vocab[j]) for j in best[g] if scores[g, j] > 0] for g in range(n_groups)]
        labels: list[list[str]] = []
        for g in range(n_groups):
            row = sums.getrow(g)
            s = row.data / max(sizes[g], 1) * self.idf[row.indices]
            labels.append([str(self.vocab[row.indices[j]]) for j in np.argsort(-s)[:top]])
        return labels

    def rows_labels(self, rows: np.ndarray, top: int = 5) -> list[str]:
        """Top words of one group given by its item rows."""
        if len(rows) == 0:
            return []
        counts = np.asarray(self.matrix[rows].sum(axis=0)).ravel()  # (V,)
        scores = counts / len(rows) * self.idf
        return [str(self.vocab[j]) for j in np.argsort(-scores)[:top] if scores[j] > 0]
