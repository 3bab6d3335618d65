"""Cut a JSONL file into line-aligned byte ranges, and read one range with ``RecordReader``.

Shards depend only on the file and the shard size, never on the number of workers, which is what
makes the output identical for any ``--workers``. :func:`shard_reader` is a ``RecordReader`` over one
byte range: validation, quarantine entries (global line numbers, byte offsets, reasons) and
:class:`infra.recordio.ReadStats` are the reader's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_curation.records import Session
from infra.recordio import RecordReader

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


def shard_reader(path: Path, shard: Shard, quarantine: Path) -> RecordReader[Session]:
    """Validated ``Session`` records of one shard; bad lines go to ``quarantine`` (without their content,
    which may hold unscrubbed PII) and reading goes on."""
    return RecordReader(path, Session, skip_bad=True, quarantine=quarantine, allow_empty=True,
                        byte_range=(shard.start, shard.end), first_line=shard.first_line,
                        quarantine_content=False)
