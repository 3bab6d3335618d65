"""Duplicate sessions: exact (normalised text + item sequence) and near-duplicate (MinHash LSH).

- **exact**: a 64-bit BLAKE2b hash of the session's normalised user text (case-folded, punctuation
  dropped, whitespace collapsed) and its sequence of item ids. Two sessions with the same request
  and the same clicks are one example, whoever made them.
- **near**: a ``datasketch`` MinHash signature of the normalised user text's character shingles;
  an LSH index (``datasketch.MinHashLSH``) proposes candidates and the signature estimate of the
  Jaccard similarity confirms them (>= threshold). Sessions without text take no part.

Both keep the *first* session of a cluster in input order (logs are written in time order, so that
is the earliest) and drop the rest; only cluster representatives enter the LSH index, so memory
grows with distinct texts, not with sessions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
from datasketch import MinHash, MinHashLSH

_PUNCT = re.compile(r"[^\w<>\s]+")


def normalise_text(text: str) -> str:
    """Case-folded, punctuation removed (placeholders kept), whitespace collapsed."""
    return " ".join(_PUNCT.sub(" ", text.casefold()).split())


def exact_key(norm_text: str, item_ids: Sequence[str]) -> int:
    """A 64-bit hash of normalised text and item sequence."""
    h = hashlib.blake2b(digest_size=8)
    h.update(norm_text.encode())
    h.update(b"\x1f")
    h.update("\x1e".join(item_ids).encode())
    return int.from_bytes(h.digest(), "little")


class MinHasher:
    """``signature(norm_text) -> (num_perm,) uint32``; the same seed gives the same permutations."""

    def __init__(self, num_perm: int, shingle_chars: int, seed: int) -> None:
        self.num_perm = num_perm
        self.k = shingle_chars
        self.seed = seed
        self._template = MinHash(num_perm=num_perm, seed=seed)

    def signature(self, norm_text: str) -> np.ndarray:
        m = MinHash(num_perm=self.num_perm, permutations=self._template.permutations, scheme=self._template.scheme)
        if norm_text:
            k = min(self.k, len(norm_text))
            m.update_batch({norm_text[i : i + k].encode() for i in range(len(norm_text) - k + 1)})
        return np.asarray(m.hashvalues, dtype=np.uint32)


class NearDupIndex:
    """Greedy clustering in arrival order: ``match_or_add(pos, sig)`` -> the earlier representative, or None."""

    def __init__(self, threshold: float, num_perm: int, seed: int) -> None:
        self.threshold = threshold
        self.lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
        self._probe = MinHash(num_perm=num_perm, seed=seed)
        self._sigs: dict[int, np.ndarray] = {}

    def match_or_add(self, pos: int, sig: np.ndarray) -> int | None:
        self._probe.hashvalues = sig
        best = None
        for cand in self.lsh.query(self._probe):
            rep = int(cand)
            if float(np.mean(self._sigs[rep] == sig)) >= self.threshold and (best is None or rep < best):
                best = rep
        if best is None:
            self._sigs[pos] = sig.copy()
            self.lsh.insert(pos, self._probe, check_duplication=False)
        return best

    def __len__(self) -> int:
        return len(self._sigs)
