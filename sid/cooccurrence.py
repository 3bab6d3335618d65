"""Item embeddings from how items co-occur in sequences: no model, no text, only the training sequences.

    x = cooccurrence_embeddings(rows, n_items, dim=64, window=10, seed=0)   # rows: item indices, oldest first

Used for semantic IDs over collaborative signal (``training.genrec``'s ``cooccurrence`` code source) and as the
starting item table of sequence models (the SID model's item-id model, SASRec in ``eval.sasrec``): an item seen
in few sequences starts where its co-occurrences put it, not at a random point.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def cooccurrence_embeddings(rows: Sequence[Sequence[int]], n_items: int, dim: int, window: int,
                            seed: int) -> np.ndarray:
    """(n_items, dim) unit rows: the top eigenvectors (largest eigenvalues, each scaled by its square root) of the
    positive PMI of item pairs at most ``window`` positions apart in ``rows`` (symmetric counts). Not an SVD: the
    PPMI matrix has a zero diagonal, so for two items seen only together the SVD puts them on two orthogonal
    axes, while the top eigenvector gives them equal weight. Items never seen get zeros."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import eigsh

    r: list[np.ndarray] = []
    c: list[np.ndarray] = []
    for seq in rows:
        s = np.asarray(seq, np.int64)
        for gap in range(1, min(window, len(s) - 1) + 1):
            r += [s[:-gap], s[gap:]]
            c += [s[gap:], s[:-gap]]
    out = np.zeros((n_items, dim), np.float32)
    if not r:
        return out
    m = sp.coo_matrix((np.ones(sum(len(a) for a in r), np.float64), (np.concatenate(r), np.concatenate(c))),
                      shape=(n_items, n_items)).tocsr()
    m.sum_duplicates()
    total = m.sum()
    deg = np.asarray(m.sum(1)).ravel()
    coo = m.tocoo()
    pmi = np.log(coo.data * total / (deg[coo.row] * deg[coo.col]))
    keep = pmi > 0
    ppmi = sp.csr_matrix((pmi[keep], (coo.row[keep], coo.col[keep])), shape=(n_items, n_items))
    k = min(dim, n_items - 1)
    if n_items <= 3000:
        vals, vecs = np.linalg.eigh(ppmi.toarray())
        vals, vecs = vals[-k:], vecs[:, -k:]
    else:
        v0 = np.random.default_rng(seed).standard_normal(n_items)
        vals, vecs = eigsh(ppmi, k=k, which="LA", v0=v0)
    vecs = (vecs * np.sqrt(np.clip(vals, 0, None))[None]).astype(np.float32)  # (N, k)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    np.divide(vecs, norms, out=out[:, :k], where=norms > 0)
    return out
