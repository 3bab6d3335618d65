"""SidTrie: hand-checked children, filters, removal and insertion; a brute-force cross-check; 1M-item speed.

Run: .venv/bin/python -m pytest tests/sid/test_trie.py -q
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from sid.codebook import SidError, SidMap
from sid.trie import ItemFilter, SidTrie

NAN = float("nan")
IDS = ["a", "b", "c", "d", "e", "f"]
CODES = np.array([[0, 1, 0], [0, 1, 1], [0, 2, 0], [1, 0, 0], [1, 0, 1], [2, 3, 0]])
STOCK = np.array([3, 0, 5, NAN, 0, 1])
PRICE = np.array([10.0, 20.0, 30.0, 40.0, NAN, 15.0])
CATEGORY: list[list[str] | None] = [["Outdoor", "Footwear"], ["Outdoor", "Footwear"], ["Outdoor", "Tents"],
                                    ["Home", "Kitchen"], ["Home"], None]


def hand_trie(**kwargs: int) -> SidTrie:
    # rows deliberately shuffled: the trie must sort them itself
    perm = [4, 0, 5, 2, 1, 3]
    return SidTrie([IDS[i] for i in perm], CODES[perm], stock=STOCK[perm], price=PRICE[perm],
                   category=[CATEGORY[i] for i in perm], **kwargs)


def kids(trie: SidTrie, prefix: tuple[int, ...], flt: ItemFilter | None = None) -> list[int]:
    return trie.children(prefix, flt).tolist()


def test_children_are_the_hand_listed_continuations() -> None:
    trie = hand_trie()
    expected = {(): [0, 1, 2], (0,): [1, 2], (0, 1): [0, 1], (0, 2): [0], (1,): [0], (1, 0): [0, 1], (2,): [3],
                (2, 3): [0], (3,): [], (0, 5): [], (0, 1, 0): [], (7, 7): []}
    for prefix, want in expected.items():
        assert kids(trie, prefix) == want, prefix
    assert len(trie) == 6 and trie.depth == 3 and "a" in trie and "z" not in trie
    assert trie.code_sizes() == [3, 4, 2]
    with pytest.raises(SidError):
        trie.children((0, 1, 0, 0))


def test_item_at_and_codes_of() -> None:
    trie = hand_trie()
    for iid, codes in zip(IDS, CODES.tolist(), strict=True):
        assert trie.item_at(codes) == iid
        assert trie.codes_of(iid) == tuple(codes)
    assert trie.item_at((0, 1)) is None and trie.item_at((0, 1, 5)) is None
    assert trie.item_at((0, 1, 1), ItemFilter(in_stock=True)) is None  # b has no stock
    assert trie.item_at((0, 1, 0), ItemFilter(in_stock=True)) == "a"


@pytest.mark.parametrize(("flt", "expected"), [
    # in stock: a, c, d (untracked), f
    (ItemFilter(in_stock=True), {(): [0, 1, 2], (0,): [1, 2], (0, 1): [0], (1, 0): [0], (2, 3): [0]}),
    (ItemFilter(category_prefix=["Outdoor"]), {(): [0], (0,): [1, 2], (0, 1): [0, 1]}),
    (ItemFilter(category_prefix=["Outdoor", "Tents"]), {(): [0], (0,): [2], (0, 1): []}),
    (ItemFilter(category_prefix=["Home"]), {(): [1], (1, 0): [0, 1]}),
    (ItemFilter(category_prefix=["Home", "Kitchen"]), {(): [1], (1, 0): [0]}),
    # price in [15, 30]: b 20, c 30, f 15 (e's unknown price fails)
    (ItemFilter(price_min=15, price_max=30), {(): [0, 2], (0,): [1, 2], (0, 1): [1], (1,): []}),
    (ItemFilter(price_min=35), {(): [1], (1, 0): [0]}),
    # combined: in stock, <= 25, outdoor -> only a
    (ItemFilter(in_stock=True, price_max=25, category_prefix=["Outdoor"]), {(): [0], (0,): [1], (0, 1): [0]}),
    (ItemFilter(category_prefix=["Garden"]), {(): [], (0,): []}),
])
def test_filters_are_hand_checked(flt: ItemFilter, expected: dict[tuple[int, ...], list[int]]) -> None:
    trie = hand_trie()
    for prefix, want in expected.items():
        assert kids(trie, prefix, flt) == want, prefix
        assert kids(trie, prefix, flt) == want, prefix  # second call comes from the cached filter state


def test_filter_key_and_validation() -> None:
    assert ItemFilter(category_prefix=[]).key() == ItemFilter().key()
    assert ItemFilter(in_stock=True).key() != ItemFilter().key()
    assert ItemFilter().is_trivial() and not ItemFilter(price_min=1).is_trivial()
    with pytest.raises(ValueError, match="price_min"):
        ItemFilter(price_min=5, price_max=1)


def test_removed_items_disappear_with_their_nodes() -> None:
    trie = hand_trie()
    instock = ItemFilter(in_stock=True)
    assert kids(trie, (0,), instock) == [1, 2]  # warm the cached filter state before removing
    trie.remove("c")  # the only item under (0, 2)
    assert kids(trie, (0,)) == [1] and kids(trie, (0,), instock) == [1]
    assert trie.item_at((0, 2, 0)) is None and "c" not in trie and len(trie) == 5
    trie.remove("f")
    assert kids(trie, ()) == [0, 1]
    trie.remove("a")
    assert kids(trie, (0, 1)) == [1] and kids(trie, (0, 1), instock) == [] and kids(trie, (), instock) == [1]
    with pytest.raises(SidError):
        trie.remove("a")
    with pytest.raises(SidError):
        trie.codes_of("a")


def test_add_then_remove_and_compact() -> None:
    trie = hand_trie()
    trie.add("g", (2, 3, 1), stock=2, price=12.0, category=["Outdoor"])
    trie.add("h", (3, 0, 0), category=["Garden", "Hoses"])
    assert kids(trie, ()) == [0, 1, 2, 3] and kids(trie, (2, 3)) == [0, 1] and len(trie) == 8
    assert kids(trie, (), ItemFilter(category_prefix=["Garden"])) == [3]
    assert kids(trie, (2, 3), ItemFilter(category_prefix=["Outdoor"])) == [1]
    assert kids(trie, (), ItemFilter(price_max=12.5, in_stock=True)) == [0, 2]  # a (10) and g (12)
    assert trie.item_at((3, 0, 0)) == "h" and trie.codes_of("g") == (2, 3, 1)
    with pytest.raises(SidError, match="already names"):
        trie.add("z", (0, 1, 0))
    with pytest.raises(SidError, match="already in the trie"):
        trie.add("a", (9, 9, 9))
    trie.remove("h")
    assert kids(trie, ()) == [0, 1, 2] and trie.item_at((3, 0, 0)) is None
    trie.remove("a")
    trie.add("a", (4, 0, 0), stock=1)  # re-added under a new SID
    assert trie.codes_of("a") == (4, 0, 0) and kids(trie, (0, 1)) == [1]
    before = {p: kids(trie, p) for p in [(), (0,), (0, 1), (2, 3), (4,), (4, 0)]}
    trie.compact()
    assert {p: kids(trie, p) for p in before} == before and len(trie) == 7


def test_from_sid_map_and_bad_inputs() -> None:
    trie = SidTrie.from_sid_map(SidMap(IDS, CODES), stock=STOCK)
    assert kids(trie, (), ItemFilter(in_stock=True)) == [0, 1, 2]
    with pytest.raises(SidError, match="share the SID"):
        SidTrie(["x", "y"], np.array([[1, 2], [1, 2]]))
    with pytest.raises(SidError, match="duplicate item"):
        SidTrie(["x", "x"], np.array([[1, 2], [1, 3]]))
    with pytest.raises(ValueError, match="stock"):
        SidTrie(["x"], np.array([[1, 2]]), stock=np.array([1.0, 2.0]))
    empty = SidTrie([], np.zeros((0, 3), np.int64))
    assert len(empty) == 0 and kids(empty, ()) == [] and empty.item_at((0, 0, 0)) is None


def _brute_children(codes: np.ndarray, ok: np.ndarray, prefix: tuple[int, ...]) -> list[int]:
    level = len(prefix)
    rows = ok & np.all(codes[:, :level] == np.array(prefix, np.int64), axis=1)
    return sorted({int(c) for c in codes[rows, level]})


def _brute_ok(stock: np.ndarray, price: np.ndarray, cat: list[list[str]], alive: np.ndarray,
              flt: ItemFilter) -> np.ndarray:
    ok = alive.copy()
    for i in range(len(ok)):
        if flt.in_stock and stock[i] <= 0:
            ok[i] = False
        if flt.price_min is not None and not price[i] >= flt.price_min:
            ok[i] = False
        if flt.price_max is not None and not price[i] <= flt.price_max:
            ok[i] = False
        if flt.category_prefix and cat[i][:len(flt.category_prefix)] != flt.category_prefix:
            ok[i] = False
    return ok


def test_matches_brute_force_under_random_updates() -> None:
    rng = np.random.default_rng(0)
    n, sizes = 400, (8, 6, 10)
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij"), -1).reshape(-1, 3)  # all SIDs
    codes = grid[rng.permutation(len(grid))[: n + 60]]
    stock = rng.integers(-1, 3, n + 60).astype(float)
    stock[rng.random(n + 60) < 0.2] = NAN
    price = rng.uniform(0, 100, n + 60)
    price[rng.random(n + 60) < 0.1] = NAN
    cats = [[["A", "B", "C"][rng.integers(3)], ["x", "y"][rng.integers(2)]] for _ in range(n + 60)]
    ids = [f"i{k}" for k in range(n + 60)]
    trie = SidTrie(ids[:n], codes[:n], stock=stock[:n], price=price[:n], category=cats[:n], overflow_limit=25)
    alive = np.zeros(n + 60, bool)
    alive[:n] = True
    filters = [None, ItemFilter(in_stock=True), ItemFilter(category_prefix=["B"]), ItemFilter(price_max=30),
               ItemFilter(in_stock=True, category_prefix=["A", "y"], price_min=20)]
    for step in range(8):
        for flt in filters:
            ok = _brute_ok(stock, price, cats, alive, flt or ItemFilter())
            for prefix in [(), *{tuple(int(c) for c in codes[i, :lv]) for i in range(0, n + 60, 7) for lv in (1, 2)}]:
                assert kids(trie, prefix, flt) == _brute_children(codes, ok, prefix), (step, flt, prefix)
        for i in rng.choice(np.flatnonzero(alive), 15, replace=False):
            trie.remove(ids[i])
            alive[i] = False
        for i in range(n + step * 7, n + step * 7 + 7):  # 56 adds in all: crosses overflow_limit twice
            trie.add(ids[i], codes[i], stock=stock[i], price=price[i], category=cats[i])
            alive[i] = True
        assert len(trie) == alive.sum()


def _random_sids(n: int, sizes: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """(n, len(sizes) + 1) random codes plus a collision suffix that makes each row unique."""
    codes = np.stack([rng.integers(0, s, n) for s in sizes], axis=1)
    order = np.lexsort(codes.T[::-1])
    srt = codes[order]
    new = np.r_[True, np.any(srt[1:] != srt[:-1], axis=1)]
    group_start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    suffix = np.empty(n, np.int64)
    suffix[order] = np.arange(n) - group_start
    return np.concatenate([codes, suffix[:, None]], axis=1)


def test_million_items_build_fast_and_children_cost_microseconds() -> None:
    rng = np.random.default_rng(1)
    n = 1_000_000
    codes = _random_sids(n, (256, 256, 64), rng)
    ids = [f"item{k}" for k in range(n)]
    stock = rng.integers(0, 5, n).astype(float)
    price = rng.uniform(1, 500, n)
    t0 = time.perf_counter()
    trie = SidTrie(ids, codes, stock=stock, price=price)
    build_s = time.perf_counter() - t0
    assert build_s < 20, f"1M-item build took {build_s:.1f} s"
    flt = ItemFilter(in_stock=True, price_max=250)
    rows = rng.integers(0, n, 2000)
    prefixes = [tuple(int(c) for c in codes[r, : r % 4]) for r in rows]
    trie.children((), flt)  # first use of a filter pays its O(N) prefix sum once
    for use in (None, flt):
        t0 = time.perf_counter()
        for p in prefixes:
            trie.children(p, use)
        per_call = (time.perf_counter() - t0) / len(prefixes)
        assert per_call < 1e-3, f"children() took {per_call * 1e6:.0f} µs on average"
    print(f"build {build_s:.2f} s, children {per_call * 1e6:.1f} µs")
