"""Typed record files: stream-read and write pydantic records as JSONL or Parquet.

Every data contract in Sidekick (items, sessions, tasks, …) is a pydantic model; this module is the
one place that turns files into validated records and back.

Reading is streaming (one line / one Parquet row group at a time) and strict by default: the first
bad record raises :class:`RecordError` naming the file, the line (or Parquet row) and the field.
With ``skip_bad=True`` bad records are instead written to a quarantine JSONL file with the reason
and their exact location in the source (byte offset and length), counted in :class:`ReadStats`,
and reading goes on — nothing is dropped silently.

Parquet layout: scalar fields are native columns; nested fields (dicts, lists, sub-models) are
stored as JSON text columns listed in the schema metadata key ``sidekick.json_columns``. This keeps
heterogeneous ``attributes`` dicts loss-free, which Arrow's struct inference cannot.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
"""A JSONL line longer than this (16 MiB) is a bad record, not a reason to exhaust memory."""

_QUARANTINE_RAW_LIMIT = 64 * 1024
_JSON_COLUMNS_KEY = b"sidekick.json_columns"
_PARQUET_BATCH_ROWS = 8192


class RecordError(ValueError):
    """A record file could not be read. ``str()`` says what, where (``file:line``) and which field."""

    def __init__(self, path: Path | str, line: int | None, reason: str) -> None:
        self.path = Path(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {reason}")


def read_json_model(path: Path | str, model: type[M]) -> M:
    """One JSON document validated as ``model``; :class:`RecordError` naming the file (and line of a JSON error)
    and the fields that do not validate."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise RecordError(path, e.lineno, f"not JSON ({e.msg})") from None
    except OSError as e:
        raise RecordError(path, None, e.strerror or str(e)) from None
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise RecordError(path, None, format_validation_error(e)) from None


@dataclass
class ReadStats:
    """What a read saw: good records, bad (quarantined) records by reason, blank lines skipped."""

    path: Path
    good: int = 0
    bad: int = 0
    blank_lines: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    quarantine: Path | None = None

    def add_bad(self, kind: str) -> None:
        self.bad += 1
        self.reasons[kind] = self.reasons.get(kind, 0) + 1


@dataclass
class _Bad:
    line: int | None
    kind: str  # short category, used for counting: bad_json | invalid | too_long | not_object
    reason: str  # full message naming the field
    offset: int | None = None
    length: int | None = None
    raw: str | None = None


def _raw_json(obj: Any) -> str:
    raw = json.dumps(obj, ensure_ascii=False, default=str)
    return raw if len(raw) <= _QUARANTINE_RAW_LIMIT else raw[:_QUARANTINE_RAW_LIMIT] + "…"


def format_validation_error(err: ValidationError) -> str:
    """One line per problem: ``field 'a.b': message (got: value)``."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "<record>"
        got = e.get("input")
        shown = ""
        if e["type"] != "missing" and not isinstance(got, dict | list):
            text = repr(got)
            shown = f" (got {text[:60]}{'…' if len(text) > 60 else ''})"
        parts.append(f"field '{loc}': {e['msg']}{shown}")
    return "; ".join(parts)


def file_format(path: Path | str) -> str:
    """``jsonl`` or ``parquet`` from the file name; anything else is a :class:`RecordError`."""
    name = str(path).lower()
    if name.endswith((".jsonl", ".jsonl.part", ".ndjson")):
        return "jsonl"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    raise RecordError(path, None, "unknown record file type (expected .jsonl, .ndjson or .parquet)")


class RecordReader(Generic[M]):
    """Iterate validated records of ``model`` from a JSONL or Parquet file.

    >>> reader = RecordReader(path, Item, skip_bad=True, quarantine=out / "quarantine.jsonl")
    >>> for item in reader: ...
    >>> reader.stats.bad
    """

    def __init__(
        self,
        path: Path | str,
        model: type[M],
        *,
        skip_bad: bool = False,
        quarantine: Path | str | None = None,
        allow_empty: bool = False,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        byte_range: tuple[int, int] | None = None,
        first_line: int = 1,
        quarantine_content: bool = True,
    ) -> None:
        """``byte_range=(start, end)`` reads only the JSONL lines starting in ``[start, end)`` (a shard;
        ``start`` must be a line start) and numbers them from ``first_line``. ``quarantine_content=False``
        keeps raw text and quoted values out of quarantine entries (for input that may hold unscrubbed
        PII); the byte offset and length still point at the record."""
        self.path = Path(path)
        self.model = model
        self.skip_bad = skip_bad
        self.allow_empty = allow_empty
        self.max_line_bytes = max_line_bytes
        self.format = file_format(self.path)
        if byte_range is not None and self.format != "jsonl":
            raise RecordError(self.path, None, "byte ranges (shards) need a JSONL file")
        self.byte_range = byte_range
        self.first_line = first_line
        self.quarantine_content = quarantine_content
        if skip_bad and quarantine is None:
            quarantine = self.path.with_name(self.path.name + ".quarantine.jsonl")
        self.quarantine_path = Path(quarantine) if quarantine is not None else None
        self.stats = ReadStats(path=self.path, quarantine=self.quarantine_path if skip_bad else None)
        self.last_line: int | None = None  # line (JSONL) or row (Parquet) of the last record seen
        self._qfile: IO[str] | None = None
        self._span: tuple[int | None, int | None] = (None, None)  # JSONL byte offset and length

    def __iter__(self) -> Iterator[M]:
        if not self.path.exists():
            raise RecordError(self.path, None, "file not found")
        if self.path.is_dir():
            raise RecordError(self.path, None, "is a directory, expected a record file")
        try:
            rows = self._jsonl_rows() if self.format == "jsonl" else self._parquet_rows()
            for line, obj, bad in rows:
                self.last_line = line
                if bad is None:
                    try:
                        record = self.model.model_validate(obj)
                    except ValidationError as err:
                        bad = _Bad(line, "invalid", format_validation_error(err), raw=_raw_json(obj))
                        bad.offset, bad.length = self._span
                    else:
                        self.stats.good += 1
                        yield record
                        continue
                if not self.skip_bad:
                    raise RecordError(self.path, bad.line, bad.reason)
                self._quarantine(bad)
        finally:
            if self._qfile is not None:
                self._qfile.close()
                self._qfile = None
        if self.stats.good == 0 and self.stats.bad == 0 and not self.allow_empty:
            raise RecordError(self.path, None, f"empty file: no {self.model.__name__} records")

    def reject(self, line: int | None, kind: str, reason: str, record: BaseModel | None = None) -> None:
        """Turn a record already yielded into a bad one (e.g. a duplicate id found by the caller).

        Raises :class:`RecordError` unless ``skip_bad``; otherwise quarantines it and fixes the counts.
        """
        if not self.skip_bad:
            raise RecordError(self.path, line, reason)
        self.stats.good -= 1
        raw = _raw_json(record.model_dump(mode="json")) if record is not None else None
        self._quarantine(_Bad(line, kind, reason, raw=raw))

    def _quarantine(self, bad: _Bad) -> None:
        assert self.quarantine_path is not None
        if self._qfile is None:
            self.quarantine_path.parent.mkdir(parents=True, exist_ok=True)
            self._qfile = self.quarantine_path.open("a", encoding="utf-8")
        self.stats.add_bad(bad.kind)
        self._qfile.write(json.dumps(self._quarantine_entry(bad), ensure_ascii=False) + "\n")
        self._qfile.flush()

    def _quarantine_entry(self, bad: _Bad) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "file": str(self.path),
            "line": bad.line,
            "reason": bad.reason,
            "kind": bad.kind,
            "record_type": self.model.__name__,
        }
        if bad.offset is not None:
            entry["offset"] = bad.offset
            entry["length"] = bad.length
        if bad.raw is not None and self.quarantine_content:
            entry["raw"] = bad.raw
        if not self.quarantine_content:  # messages quote the offending value ("… (got '…')"): drop it
            parts = str(entry["reason"]).split("; field '")
            entry["reason"] = "; field '".join(p.split(" (got ", 1)[0] for p in parts)
        return entry

    # -- JSONL -----------------------------------------------------------------------------------
    def _jsonl_rows(self) -> Iterator[tuple[int, Any, _Bad | None]]:
        limit = self.max_line_bytes
        start_at, end_at = self.byte_range or (0, None)
        with self.path.open("rb") as f:
            f.seek(start_at)
            offset = start_at
            lineno = self.first_line - 1
            while end_at is None or offset < end_at:
                chunk = f.readline(limit + 1)
                if not chunk:
                    return
                lineno += 1
                start = offset
                offset += len(chunk)
                if len(chunk) > limit and not chunk.endswith(b"\n"):
                    # Too long: skip to the end of this line without holding it in memory.
                    total = len(chunk)
                    head = chunk[:200]
                    while not chunk.endswith(b"\n"):
                        chunk = f.readline(1 << 20)
                        if not chunk:
                            break
                        total += len(chunk)
                        offset += len(chunk)
                    yield lineno, None, _Bad(
                        lineno, "too_long", f"line is {total} bytes, over the {limit}-byte limit",
                        offset=start, length=total,
                        raw=head.decode("utf-8", "replace") + "…",
                    )
                    continue
                parsed = self._parse_jsonl_line(lineno, chunk, start)
                if parsed is None:
                    self.stats.blank_lines += 1
                    continue
                self._span = (start, len(chunk))
                yield lineno, *parsed

    def _parse_jsonl_line(self, lineno: int, chunk: bytes, start: int) -> tuple[Any, _Bad | None] | None:
        """``(object, None)`` for a JSON object, ``(None, bad)`` for a bad line, None for a blank one."""
        text_b = chunk.rstrip(b"\r\n")
        if not text_b.strip():
            return None

        def bad(kind: str, reason: str) -> _Bad:
            raw = text_b.decode("utf-8", "replace")
            if len(raw) > _QUARANTINE_RAW_LIMIT:
                raw = raw[:_QUARANTINE_RAW_LIMIT] + "…"
            return _Bad(lineno, kind, reason, offset=start, length=len(chunk), raw=raw)

        try:
            text = text_b.decode("utf-8")
        except UnicodeDecodeError as err:
            return None, bad("bad_encoding", f"not UTF-8 at byte {err.start}")
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            return None, bad("bad_json", f"bad JSON: {err.msg} at column {err.colno}")
        if not isinstance(obj, dict):
            return None, bad("not_object", f"expected a JSON object, got {type(obj).__name__}")
        return obj, None

    # -- Parquet ---------------------------------------------------------------------------------
    def _parquet_rows(self) -> Iterator[tuple[int, Any, _Bad | None]]:
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(self.path)
        except Exception as err:  # pyarrow raises several types for a corrupt file
            raise RecordError(self.path, None, f"not a readable Parquet file: {err}") from err
        meta = pf.schema_arrow.metadata or {}
        json_cols = set(json.loads(meta.get(_JSON_COLUMNS_KEY, b"[]")))
        row = 0
        for batch in pf.iter_batches(batch_size=_PARQUET_BATCH_ROWS):
            for obj in batch.to_pylist():
                row += 1
                bad = None
                for col in json_cols:
                    value = obj.get(col)
                    if isinstance(value, str):
                        try:
                            obj[col] = json.loads(value)
                        except json.JSONDecodeError as err:
                            bad = _Bad(row, "bad_json", f"field '{col}': bad JSON: {err.msg}")
                            break
                obj = {k: v for k, v in obj.items() if v is not None}
                if bad is not None:
                    bad.raw = _raw_json(obj)
                yield row, obj, bad


def read_records(
    path: Path | str,
    model: type[M],
    *,
    skip_bad: bool = False,
    quarantine: Path | str | None = None,
    allow_empty: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> tuple[list[M], ReadStats]:
    """Read a whole file into a list (use :class:`RecordReader` to stream)."""
    reader = RecordReader(
        path, model, skip_bad=skip_bad, quarantine=quarantine, allow_empty=allow_empty,
        max_line_bytes=max_line_bytes,
    )
    return list(reader), reader.stats


def arrow_schema(model: type[BaseModel]) -> tuple[Any, list[str]]:
    """The Arrow schema for ``model`` and the names of its nested (JSON text) columns.

    Scalars map to native types; objects, arrays and unions that include them map to JSON strings.
    """
    import pyarrow as pa

    schema = model.model_json_schema()
    scalar = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}
    fields = []
    nested = []
    for name, prop in schema.get("properties", {}).items():
        options = prop.get("anyOf", [prop])
        types = {o.get("type", "object") for o in options} - {"null"}
        if "$ref" in prop or "allOf" in prop:
            types = {"object"}
        if len(types) == 1 and next(iter(types)) in scalar:
            fields.append(pa.field(name, scalar[next(iter(types))]))
        elif types == {"integer", "number"}:
            fields.append(pa.field(name, pa.float64()))
        else:
            fields.append(pa.field(name, pa.string()))
            nested.append(name)
    meta = {_JSON_COLUMNS_KEY: json.dumps(nested).encode()}
    return pa.schema(fields, metadata=meta), nested


class RecordWriter:
    """Write records (pydantic models, or plain dicts already in contract shape) to JSONL or Parquet.

    Writes go to ``<path>.tmp`` and are renamed into place on :meth:`close`, so a killed run never
    leaves a truncated file that looks complete. Parquet needs ``model`` (it fixes the schema).
    """

    def __init__(self, path: Path | str, model: type[BaseModel] | None = None) -> None:
        self.path = Path(path)
        self.format = file_format(self.path)
        self.count = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(self.path.name + ".tmp")
        self._fh: IO[str] | None = None
        self._rows: list[dict[str, Any]] = []
        self._pq_writer: Any = None
        if self.format == "jsonl":
            self._fh = self._tmp.open("w", encoding="utf-8")
        else:
            if model is None:
                raise ValueError(f"{self.path}: writing Parquet needs the record model")
            self._schema, self._json_cols = arrow_schema(model)

    def write(self, record: BaseModel | dict[str, Any]) -> None:
        obj = record.model_dump(mode="json") if isinstance(record, BaseModel) else record
        self.count += 1
        if self._fh is not None:
            self._fh.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
            return
        self._rows.append(obj)
        if len(self._rows) >= _PARQUET_BATCH_ROWS:
            self._flush_parquet()

    def write_many(self, records: Iterable[BaseModel | dict[str, Any]]) -> None:
        for r in records:
            self.write(r)

    def _flush_parquet(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._pq_writer is None:
            self._pq_writer = pq.ParquetWriter(self._tmp, self._schema)
        if not self._rows:
            return
        cols = self._json_cols
        rows = [
            {k: (json.dumps(v, ensure_ascii=False) if k in cols and v is not None else v) for k, v in r.items()}
            for r in self._rows
        ]
        self._rows = []
        self._pq_writer.write_table(pa.Table.from_pylist(rows, schema=self._schema))

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        else:
            self._flush_parquet()
            self._pq_writer.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drop what was written (the target path is left untouched)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._pq_writer is not None:
            self._pq_writer.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_records(
    path: Path | str, records: Iterable[BaseModel | dict[str, Any]], model: type[BaseModel] | None = None
) -> int:
    """Write all records; returns how many."""
    with RecordWriter(path, model) as w:
        w.write_many(records)
    return w.count
