"""Cut a JSONL file into line-aligned byte ranges, and read one range with ``RecordReader``'s checks.

Shards depend only on the file and the shard size, never on the number of workers, which is what
makes the output identical for any ``--workers``. :class:`ShardReader` is a ``RecordReader`` whose
rows come from one byte range: validation, quarantine entries (global line numbers, byte offsets,
reasons) and :class:`infra.recordio.ReadStats` are the reader's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from data_curation.records import Session
from infra.recordio import RecordReader, _Bad

M = TypeVar("M", bound=BaseModel)

_COUNT_BLOCK = 16 * 1024 * 1024


@dataclass(frozen=True)
class Shard:
    """Bytes ``[start, end)`` of the file; ``first_line`` is the 1-based number of its first line."""

    index: int
    start: int
    end: int
    first_line: int

    @property
    def name(self) -> str:
        return f"{self.index:05d}"


def _count_newlines(fh: Any, start: int, end: int) -> int:
    fh.seek(start)
    n = 0
    left = end - start
    while left > 0:
        block = fh.read(min(_COUNT_BLOCK, left))
        if not block:
            break
        n += block.count(b"\n")
        left -= len(block)
    return n


def plan_shards(path: Path, shard_bytes: int) -> list[Shard]:
    """Shards of about ``shard_bytes``, each ending at a line end (one pass over the file to count lines)."""
    size = path.stat().st_size
    shards: list[Shard] = []
    with path.open("rb") as fh:
        start, line = 0, 1
        while start < size:
            end = start + shard_bytes
            if end >= size:
                end = size
            else:
                fh.seek(end - 1)
                fh.readline()  # finish the line that byte end-1 is on
                end = fh.tell()
            shards.append(Shard(len(shards), start, end, line))
            line += _count_newlines(fh, start, end)
            start = end
    return shards


class ContentFreeReader(RecordReader[M]):
    """A ``RecordReader`` whose quarantine entries point into the input (line, byte offset, length)
    without copying the raw record or quoting its values: a malformed line may hold unscrubbed PII."""

    def _quarantine_entry(self, bad: _Bad) -> dict[str, Any]:
        entry = super()._quarantine_entry(bad)
        entry.pop("raw", None)
        # Validation messages quote the offending value ("… (got '…')"): keep the field and the rule only.
        parts = str(entry["reason"]).split("; field '")
        entry["reason"] = "; field '".join(p.split(" (got ", 1)[0] for p in parts)
        return entry


class ShardReader(ContentFreeReader[Session]):
    """Validated ``Session`` records of one shard; bad lines go to ``quarantine`` and reading goes on."""

    def __init__(self, path: Path, shard: Shard, quarantine: Path) -> None:
        super().__init__(path, Session, skip_bad=True, quarantine=quarantine, allow_empty=True)
        if self.format != "jsonl":
            raise ValueError(f"{path}: sharded reading needs JSONL")
        self.shard = shard

    def _jsonl_rows(self) -> Iterator[tuple[int, Any, _Bad | None]]:
        limit = self.max_line_bytes
        with self.path.open("rb") as f:
            f.seek(self.shard.start)
            offset, lineno = self.shard.start, self.shard.first_line - 1
            while offset < self.shard.end:
                chunk = f.readline(limit + 1)
                if not chunk:
                    return
                lineno += 1
                start = offset
                offset += len(chunk)
                if len(chunk) > limit and not chunk.endswith(b"\n"):
                    total = len(chunk)
                    while not chunk.endswith(b"\n"):
                        chunk = f.readline(1 << 20)
                        if not chunk:
                            break
                        total += len(chunk)
                        offset += len(chunk)
                    yield lineno, None, _Bad(lineno, "too_long", f"line is {total} bytes, over the {limit}-byte limit",
                                             offset=start, length=total)
                    continue
                parsed = self._parse_jsonl_line(lineno, chunk, start)
                if parsed is None:
                    self.stats.blank_lines += 1
                    continue
                self._span = (start, len(chunk))
                yield lineno, *parsed
