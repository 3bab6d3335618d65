"""The SID contract: item id <-> code tuple <-> token string, e.g. ``<s1_12><s2_200><s3_3><s4_0>``.

A SID has ``levels`` quantiser codes followed by one collision-suffix code, so the map between
items and SIDs is a bijection. Level numbers in tokens are 1-based; the suffix is level
``levels + 1``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from infra.recordio import RecordReader, write_records

_TOKEN = re.compile(r"<s(\d+)_(\d+)>")


class SidError(ValueError):
    """A SID string or code tuple that is malformed or names no item."""


def sid_token(level: int, code: int) -> str:
    """The token for ``code`` at 1-based ``level``."""
    return f"<s{level}_{code}>"


def sid_string(codes: Sequence[int]) -> str:
    """``(12, 200, 3, 0)`` -> ``<s1_12><s2_200><s3_3><s4_0>``."""
    return "".join(sid_token(i + 1, int(c)) for i, c in enumerate(codes))


def parse_sid(text: str) -> tuple[int, ...]:
    """``<s1_12><s2_200>`` -> ``(12, 200)``; a prefix is fine. Raises :class:`SidError` naming the problem."""
    s = text.strip()
    codes: list[int] = []
    pos = 0
    for m in _TOKEN.finditer(s):
        if m.start() != pos:
            raise SidError(f"unexpected text {s[pos:m.start()]!r} in SID {text!r}")
        level, code = int(m.group(1)), int(m.group(2))
        if level != len(codes) + 1:
            raise SidError(f"SID {text!r}: token {m.group(0)} is at position {len(codes) + 1}, expected level "
                           f"{len(codes) + 1}")
        codes.append(code)
        pos = m.end()
    if pos != len(s) or not codes:
        raise SidError(f"not a SID: {text!r} (expected tokens like <s1_12><s2_200>)")
    return tuple(codes)


class Sid(BaseModel):
    """One row of ``sids.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    item_id: str = Field(min_length=1)
    codes: list[int] = Field(min_length=2, description="Quantiser codes, then the collision suffix.")
    sid: str = Field(description="Token string, e.g. <s1_12><s2_200><s3_3><s4_0>.")

    @field_validator("codes")
    @classmethod
    def _non_negative(cls, v: list[int]) -> list[int]:
        if any(c < 0 for c in v):
            raise ValueError("codes must be >= 0")
        return v


class SidMap:
    """The bijection item id <-> code tuple. Duplicate items or duplicate SIDs are errors."""

    def __init__(self, item_ids: Sequence[str], codes: np.ndarray) -> None:
        if codes.ndim != 2 or codes.shape[0] != len(item_ids):
            raise ValueError(f"codes must be (N, L) for N={len(item_ids)} items, got {codes.shape}")
        self.codes = codes.astype(np.int64)  # (N, L+1)
        self.item_ids = list(item_ids)
        self._by_item = {iid: i for i, iid in enumerate(self.item_ids)}
        if len(self._by_item) != len(self.item_ids):
            raise ValueError("duplicate item ids in the SID map")
        self._by_codes = {tuple(int(c) for c in row): i for i, row in enumerate(self.codes)}
        if len(self._by_codes) != len(self.item_ids):
            raise ValueError("two items share a SID: the collision suffix is missing or wrong")

    def __len__(self) -> int:
        return len(self.item_ids)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._by_item

    @property
    def depth(self) -> int:
        return int(self.codes.shape[1])

    def codes_of(self, item_id: str) -> tuple[int, ...]:
        if item_id not in self._by_item:
            raise SidError(f"item {item_id!r} has no SID")
        return tuple(int(c) for c in self.codes[self._by_item[item_id]])

    def sid_of(self, item_id: str) -> str:
        return sid_string(self.codes_of(item_id))

    def item_of(self, sid: str | Sequence[int]) -> str:
        codes = parse_sid(sid) if isinstance(sid, str) else tuple(int(c) for c in sid)
        row = self._by_codes.get(codes)
        if row is None:
            raise SidError(f"SID {sid_string(codes)} names no item in this catalog")
        return self.item_ids[row]

    def records(self) -> Iterator[Sid]:
        for iid, row in zip(self.item_ids, self.codes, strict=True):
            codes = [int(c) for c in row]
            yield Sid(item_id=iid, codes=codes, sid=sid_string(codes))

    def save(self, path: Path) -> int:
        return write_records(path, self.records(), Sid)

    @classmethod
    def load(cls, path: Path) -> SidMap:
        rows = list(RecordReader(path, Sid))
        depth = {len(r.codes) for r in rows}
        if len(depth) != 1:
            raise SidError(f"{path}: SIDs of different lengths {sorted(depth)}")
        return cls([r.item_id for r in rows], np.array([r.codes for r in rows], dtype=np.int64))

    @classmethod
    def from_records(cls, rows: Iterable[Sid]) -> SidMap:
        rows = list(rows)
        return cls([r.item_id for r in rows], np.array([r.codes for r in rows], dtype=np.int64))
