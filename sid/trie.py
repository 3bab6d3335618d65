"""A prefix trie over SID code tuples, with per-request item filters, for constrained decoding.

Layout (built once, numpy only). Items are sorted by code tuple, so every trie node covers a
contiguous row range ``[start, end)`` of the sorted catalog. Depth ``l`` holds ``n_l`` nodes
(depth 0 = the root, depth ``D`` = the items themselves, one row each):

- ``starts[l]``  (n_l + 1,) first sorted row of each depth-``l`` node, plus the sentinel ``N``;
- ``ptr[l]``     (n_l + 1,) CSR: the children of node ``p`` are depth-``l+1`` nodes ``ptr[l][p]:ptr[l][p+1]``;
- ``code[l+1]``  (n_{l+1},) the code of each depth-``l+1`` node, ascending within each parent.

A filter becomes one boolean mask over the sorted rows, stored as a prefix sum ``cs`` (N + 1,),
so "does node ``[s, e)`` hold any passing item" is ``cs[e] - cs[s] > 0``: O(1) per node. The
masks of recently used filters are cached (LRU, keyed by :meth:`ItemFilter.key`).

Costs (N items, depth D, branching b at the queried node):

- build: O(N log N) (one lexsort) and O(N * D) memory; ~1.1 s for 1M items of depth 4;
- ``children``: O(D log b) to find the node + O(b) to test its children; ~8-12 µs at 1M items;
- first query with a new filter, or the first after a batch of removals: O(N) to recompute that
  filter's prefix sum (~8 ms at 1M items); later queries reuse it;
- ``remove``: O(1), ~2 µs (a tombstone bit; the structure is not rebuilt);
- ``add``: O(K) (~40 µs) into an unsorted overflow of K items that every query also scans
  (~80 µs per ``children`` at K = 4096); when K exceeds ``overflow_limit`` that ``add`` compacts
  everything, O(N log N) (~1 s at 1M), dropping tombstones. Call :meth:`compact` yourself to
  choose when that cost is paid.

Metadata semantics: stock NaN (or no stock array) = untracked = in stock; price NaN = unknown
and fails any price bound; a missing category fails any category prefix. Reads are safe from
several threads; mutations (``add``/``remove``/``compact``) must not race with reads.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sid.codebook import SidError, SidMap

_FILTER_CACHE_SIZE = 8


class ItemFilter(BaseModel):
    """Which items a request may return. The default filter lets every live item through."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    in_stock: bool = Field(False, description="True = only items with stock > 0 (untracked stock counts as in stock).")
    category_prefix: list[str] | None = Field(
        None, description="Only items whose category path starts with this list; None or [] = any category.")
    price_min: float | None = Field(None, description="Inclusive lower price bound; None = no bound.")
    price_max: float | None = Field(None, description="Inclusive upper price bound; None = no bound.")

    @field_validator("category_prefix")
    @classmethod
    def _empty_is_none(cls, v: list[str] | None) -> list[str] | None:
        return v or None

    @model_validator(mode="after")
    def _bounds_ordered(self) -> ItemFilter:
        if self.price_min is not None and self.price_max is not None and self.price_min > self.price_max:
            raise ValueError(f"price_min {self.price_min} > price_max {self.price_max}: no item can pass")
        return self

    def key(self) -> str:
        """A stable string that is equal for filters that select the same items (computed once)."""
        return self._key

    @cached_property
    def _key(self) -> str:
        return json.dumps(self.model_dump(), sort_keys=True)

    def is_trivial(self) -> bool:
        return not self.in_stock and self.category_prefix is None and self.price_min is None and self.price_max is None


@dataclass
class _Segment:
    """Items plus metadata as parallel arrays; the trie's main part is one (sorted), its overflow another."""

    item_ids: list[str]
    codes: np.ndarray  # (n, D) int64
    stock: np.ndarray  # (n,) float64, NaN = untracked
    price: np.ndarray  # (n,) float64, NaN = unknown
    category: np.ndarray  # (n,) int64 index into the trie's category paths, -1 = none
    alive: np.ndarray  # (n,) bool, False = removed (tombstone)

    @classmethod
    def empty(cls, depth: int) -> _Segment:
        return cls([], np.zeros((0, depth), np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int64),
                   np.zeros(0, bool))

    def take(self, rows: np.ndarray) -> _Segment:
        return _Segment([self.item_ids[i] for i in rows.tolist()], self.codes[rows], self.stock[rows],
                        self.price[rows], self.category[rows], self.alive[rows])

    def append(self, other: _Segment) -> _Segment:
        return _Segment(self.item_ids + other.item_ids, np.concatenate([self.codes, other.codes]),
                        np.concatenate([self.stock, other.stock]), np.concatenate([self.price, other.price]),
                        np.concatenate([self.category, other.category]), np.concatenate([self.alive, other.alive]))


@dataclass
class _FilterState:
    """A filter evaluated on the current items: prefix sums over the main rows, a mask over the overflow."""

    main_cs: np.ndarray | None  # (N + 1,) int64 prefix sum of passing main rows; None = every row passes
    main_epoch: int
    overflow_ok: np.ndarray  # (K,) bool
    overflow_epoch: int


class SidTrie:
    """Prefix trie over SID code tuples with tombstone removal, overflow insertion and cached filters.

    See the module docstring for the layout and the cost of every operation.
    """

    def __init__(self, item_ids: Sequence[str], codes: np.ndarray, *, stock: np.ndarray | None = None,
                 price: np.ndarray | None = None, category: Sequence[Sequence[str] | None] | None = None,
                 overflow_limit: int = 4096) -> None:
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[0] != len(item_ids) or codes.shape[1] < 1:
            raise ValueError(f"codes must be (N, D) with N={len(item_ids)} items and D >= 1, got {codes.shape}")
        self._depth = int(codes.shape[1])
        self.overflow_limit = overflow_limit
        self._paths: list[tuple[str, ...]] = []
        self._path_ids: dict[tuple[str, ...], int] = {}
        self._lock = threading.Lock()
        self.version = 0
        """Bumped on every mutation, so callers can drop what they cached from an older trie."""
        seg = _Segment(list(item_ids), codes.astype(np.int64), self._stock_array(stock, len(item_ids)),
                       self._price_array(price, len(item_ids)), self._category_array(category, len(item_ids)),
                       np.ones(len(item_ids), bool))
        self._build(seg)

    @classmethod
    def from_sid_map(cls, sid_map: SidMap, *, stock: np.ndarray | None = None, price: np.ndarray | None = None,
                     category: Sequence[Sequence[str] | None] | None = None, overflow_limit: int = 4096) -> SidTrie:
        """A trie over every item of ``sid_map``; metadata arrays follow ``sid_map.item_ids`` order."""
        return cls(sid_map.item_ids, sid_map.codes, stock=stock, price=price, category=category,
                   overflow_limit=overflow_limit)

    # ---- construction -------------------------------------------------------------------------

    @staticmethod
    def _stock_array(stock: np.ndarray | None, n: int) -> np.ndarray:
        out = np.full(n, np.nan) if stock is None else np.asarray(stock, dtype=np.float64)
        if out.shape != (n,):
            raise ValueError(f"stock must be ({n},), got {out.shape}")
        return out

    @staticmethod
    def _price_array(price: np.ndarray | None, n: int) -> np.ndarray:
        out = np.full(n, np.nan) if price is None else np.asarray(price, dtype=np.float64)
        if out.shape != (n,):
            raise ValueError(f"price must be ({n},), got {out.shape}")
        return out

    def _category_array(self, category: Sequence[Sequence[str] | None] | None, n: int) -> np.ndarray:
        if category is None:
            return np.full(n, -1, np.int64)
        if len(category) != n:
            raise ValueError(f"category must hold {n} paths, got {len(category)}")
        return np.fromiter((self._path_id(p) for p in category), np.int64, count=n)

    def _path_id(self, path: Sequence[str] | None) -> int:
        if path is None:
            return -1
        key = tuple(path)
        pid = self._path_ids.get(key)
        if pid is None:
            pid = self._path_ids[key] = len(self._paths)
            self._paths.append(key)
        return pid

    def _build(self, seg: _Segment) -> None:
        """Sort ``seg`` by code tuple and lay out the per-depth CSR arrays."""
        if len(seg.item_ids) and seg.codes.min() < 0:
            raise SidError("codes must be >= 0")
        order = np.lexsort(seg.codes.T[::-1])  # first code is the primary key
        main = seg.take(order)
        n = len(main.item_ids)
        starts = [np.array([0, n], np.int64)]
        ptrs: list[np.ndarray] = []
        node_codes = [np.zeros(0, np.int64)]
        new = np.zeros(n, bool)  # new[i]: row i starts a new prefix at the current depth
        new[:1] = True
        for level in range(self._depth):
            new[1:] |= main.codes[1:, level] != main.codes[:-1, level]
            first = np.flatnonzero(new)  # (n_{l+1},)
            ptrs.append(np.searchsorted(first, starts[level]))  # (n_l + 1,)
            node_codes.append(main.codes[first, level])
            starts.append(np.append(first, n))
        if not new.all():
            dup = int(np.flatnonzero(~new)[0])
            raise SidError(f"items {main.item_ids[dup - 1]!r} and {main.item_ids[dup]!r} share the SID "
                           f"{tuple(int(c) for c in main.codes[dup])}")
        self._main, self._starts, self._ptr, self._code = main, starts, ptrs, node_codes
        self._main_row = {iid: i for i, iid in enumerate(main.item_ids)}
        if len(self._main_row) != n:
            raise SidError("duplicate item ids in the trie")
        self._main_dead = int(n - main.alive.sum())
        self._main_sizes = main.codes.max(axis=0) + 1 if n else np.zeros(self._depth, np.int64)  # (D,)
        self._overflow = _Segment.empty(self._depth)
        self._overflow_row: dict[str, int] = {}
        self._overflow_by_codes: dict[tuple[int, ...], int] = {}
        self._main_epoch = self._overflow_epoch = 0
        self._filters: OrderedDict[str, _FilterState] = OrderedDict()
        for arr in (*starts, *ptrs, *node_codes):
            arr.flags.writeable = False  # children() returns views of node_codes

    # ---- queries ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._main.item_ids) - self._main_dead + int(self._overflow.alive.sum())

    def __contains__(self, item_id: object) -> bool:
        return self._locate(item_id) is not None

    @property
    def depth(self) -> int:
        """Codes per SID (quantiser levels + the collision suffix)."""
        return self._depth

    def code_sizes(self) -> list[int]:
        """Per level, 1 + the largest code any item (live or not) uses: the token vocabulary must cover this."""
        sizes = self._main_sizes
        if len(self._overflow.item_ids):
            sizes = np.maximum(sizes, self._overflow.codes.max(axis=0) + 1)
        return [int(s) for s in sizes]

    def children(self, prefix: Sequence[int], flt: ItemFilter | None = None) -> np.ndarray:
        """Ascending codes that may follow ``prefix``: those with at least one live item passing ``flt`` below.

        An empty array means nothing may follow (a complete SID, an unknown prefix, or a filter that
        excludes every item below). Do not modify the returned array (it may be a read-only view).
        """
        level = len(prefix)
        if level > self._depth:
            raise SidError(f"prefix {tuple(prefix)} is longer than the SID depth {self._depth}")
        if level == self._depth:
            return np.zeros(0, np.int64)
        state = self._state(flt)
        out = self._main_children(prefix, state)
        if len(self._overflow.item_ids):
            ok = state.overflow_ok & np.all(self._overflow.codes[:, :level] == np.asarray(prefix, np.int64), axis=1)
            if ok.any():
                out = np.union1d(out, self._overflow.codes[ok, level])
        return out

    def _main_children(self, prefix: Sequence[int], state: _FilterState) -> np.ndarray:
        node = self._find(prefix)
        if node is None:
            return np.zeros(0, np.int64)
        level = len(prefix)
        a, b = int(self._ptr[level][node]), int(self._ptr[level][node + 1])
        codes = self._code[level + 1][a:b]  # (b - a,)
        if state.main_cs is None:
            return codes
        passing = np.diff(state.main_cs[self._starts[level + 1][a:b + 1]])  # (b - a,) passing items per child
        return codes[passing > 0]

    def _find(self, prefix: Sequence[int]) -> int | None:
        """Index of the node at depth ``len(prefix)`` spelling ``prefix`` in the main part, or None."""
        node = 0
        for level, c in enumerate(prefix):
            a, b = int(self._ptr[level][node]), int(self._ptr[level][node + 1])
            j = a + int(np.searchsorted(self._code[level + 1][a:b], c))
            if j >= b or self._code[level + 1][j] != c:
                return None
            node = j
        return node

    def item_at(self, codes: Sequence[int], flt: ItemFilter | None = None) -> str | None:
        """The live item with exactly this SID (and passing ``flt``, if given), else None."""
        if len(codes) != self._depth:
            return None
        state = self._state(flt)
        row = self._find(codes)  # a depth-D node index is its sorted row
        if row is not None and self._main.alive[row]:
            if state.main_cs is None or state.main_cs[row + 1] > state.main_cs[row]:
                return self._main.item_ids[row]
            return None
        k = self._overflow_by_codes.get(tuple(int(c) for c in codes))
        if k is not None and state.overflow_ok[k]:
            return self._overflow.item_ids[k]
        return None

    def codes_of(self, item_id: str) -> tuple[int, ...]:
        """The SID code tuple of a live item. Raises :class:`SidError` if it is not in the trie."""
        where = self._locate(item_id)
        if where is None:
            raise SidError(f"item {item_id!r} is not in the trie")
        seg, row = where
        return tuple(int(c) for c in seg.codes[row])

    def _locate(self, item_id: object) -> tuple[_Segment, int] | None:
        if not isinstance(item_id, str):
            return None
        row = self._main_row.get(item_id)
        if row is not None and self._main.alive[row]:
            return self._main, row
        k = self._overflow_row.get(item_id)
        if k is not None and self._overflow.alive[k]:
            return self._overflow, k
        return None

    # ---- filters ------------------------------------------------------------------------------

    def _state(self, flt: ItemFilter | None) -> _FilterState:
        """The cached evaluation of ``flt`` on the current items, recomputing only the stale part."""
        flt = flt or ItemFilter()
        key = flt.key()
        with self._lock:
            state = self._filters.get(key)
            if state is None:
                state = _FilterState(None, -1, np.zeros(0, bool), -1)
                self._filters[key] = state
                if len(self._filters) > _FILTER_CACHE_SIZE:
                    self._filters.popitem(last=False)
            self._filters.move_to_end(key)
            if state.main_epoch != self._main_epoch:
                if flt.is_trivial() and not self._main_dead:
                    state.main_cs = None
                else:
                    ok = self._passes(self._main, flt)  # (N,)
                    state.main_cs = np.concatenate([[0], np.cumsum(ok, dtype=np.int64)])
                state.main_epoch = self._main_epoch
            if state.overflow_epoch != self._overflow_epoch:
                state.overflow_ok = self._passes(self._overflow, flt)
                state.overflow_epoch = self._overflow_epoch
            return state

    def _passes(self, seg: _Segment, flt: ItemFilter) -> np.ndarray:
        """(n,) bool: live items of ``seg`` that pass ``flt``. NaN comparisons are False, by design."""
        ok = seg.alive.copy()
        if flt.in_stock:
            ok &= ~(seg.stock <= 0)  # NaN (untracked) stays in stock
        if flt.price_min is not None:
            ok &= seg.price >= flt.price_min
        if flt.price_max is not None:
            ok &= seg.price <= flt.price_max
        if flt.category_prefix is not None:
            want = tuple(flt.category_prefix)
            path_ok = np.array([p[:len(want)] == want for p in self._paths] + [False], bool)  # [-1] = no category
            ok &= path_ok[seg.category]
        return ok

    # ---- updates ------------------------------------------------------------------------------

    def remove(self, item_id: str) -> None:
        """Tombstone a live item: it is never allowed again (until re-added). O(1)."""
        where = self._locate(item_id)
        if where is None:
            raise SidError(f"cannot remove {item_id!r}: it is not in the trie")
        seg, row = where
        seg.alive[row] = False
        if seg is self._main:
            self._main_dead += 1
            self._main_epoch += 1
        else:
            self._overflow_epoch += 1
        self.version += 1

    def add(self, item_id: str, codes: Sequence[int], *, stock: float | None = None, price: float | None = None,
            category: Sequence[str] | None = None) -> None:
        """Insert an item into the overflow (O(K)); compacts when the overflow outgrows ``overflow_limit``."""
        key = tuple(int(c) for c in codes)
        if len(key) != self._depth or min(key) < 0:
            raise SidError(f"codes {key} must be {self._depth} non-negative ints")
        if item_id in self:
            raise SidError(f"item {item_id!r} is already in the trie; remove it first")
        if self.item_at(key) is not None:
            raise SidError(f"SID {key} already names item {self.item_at(key)!r}")
        row = _Segment([item_id], np.array([key], np.int64), np.array([np.nan if stock is None else stock], float),
                       np.array([np.nan if price is None else price], float),
                       np.array([self._path_id(category)], np.int64), np.ones(1, bool))
        self._overflow_row[item_id] = len(self._overflow.item_ids)
        self._overflow_by_codes[key] = len(self._overflow.item_ids)
        self._overflow = self._overflow.append(row)
        self._overflow_epoch += 1
        self.version += 1
        if len(self._overflow.item_ids) > self.overflow_limit:
            self.compact()

    def compact(self) -> None:
        """Merge the overflow into the sorted part and drop tombstones. O(N log N)."""
        both = self._main.append(self._overflow)
        self._build(both.take(np.flatnonzero(both.alive)))
        self.version += 1
