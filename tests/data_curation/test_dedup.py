"""Exact and near-duplicate detection: the first of a cluster is kept, the rest point to it.

    pytest tests/data_curation/test_dedup.py
"""

from __future__ import annotations

from data_curation.dedup import MinHasher, NearDupIndex, exact_key, normalise_text


def test_normalise_keeps_placeholders_and_drops_punctuation() -> None:
    assert normalise_text("  Hi, I'm <NAME>!  Tent?? ") == "hi i m <name> tent"


def test_exact_key_depends_on_text_and_items() -> None:
    a = exact_key(normalise_text("Tent, please!"), ["sku-1", "sku-2"])
    assert a == exact_key(normalise_text("tent please"), ["sku-1", "sku-2"])
    assert a != exact_key(normalise_text("tent please"), ["sku-2", "sku-1"])
    assert a != exact_key(normalise_text("tents please"), ["sku-1", "sku-2"])


def test_near_duplicates_cluster_on_the_earliest() -> None:
    texts = [
        "i need new hiking boots in size 42 for the alps",   # 0: new cluster
        "a camp stove for two people",                       # 1: new cluster
        "i need new hiking boots in size 42 for the alps!",  # 2: near 0
        "I need NEW hiking boots, in size 42, for the Alps",  # 3: near 0
        "a camp stove for two peoples",                       # 4: near 1
        "a kettle",                                           # 5: new cluster
    ]
    hasher = MinHasher(num_perm=64, shingle_chars=5, seed=0)
    index = NearDupIndex(threshold=0.8, num_perm=64, seed=0)
    reps = [index.match_or_add(i, hasher.signature(normalise_text(t))) for i, t in enumerate(texts)]
    assert reps == [None, None, 0, 0, 1, None]
    assert len(index) == 3


def test_signatures_are_seeded() -> None:
    sig = MinHasher(64, 5, seed=0).signature("hiking boots")
    assert (sig == MinHasher(64, 5, seed=0).signature("hiking boots")).all()
    assert not (sig == MinHasher(64, 5, seed=1).signature("hiking boots")).all()
