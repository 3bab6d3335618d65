"""Score PII scrubbing against an answer key (a world's ``private/pii_key.jsonl``): recall and precision per type.

The key lists every PII span a generator planted: ``{session_id, field: "turns[i].text", start, end,
type, value}``. Curation records, for every session it scrubbed, the spans it detected in the
original text (``[field, start, end, type]``; positions only, never values). Definitions:

- a key span is **found** when every non-whitespace character of it lies inside detected spans of
  the **same type** in the same field (full coverage; a name scrubbed as ``<NAME>`` but an address
  only half-covered does not count); **found_any_type** relaxes "same type" to any type (what
  matters for privacy);
- **recall** (per key type) = found / key spans in scrubbed sessions; key spans of sessions that were
  quarantined (never scrubbed, never output) are counted apart as ``unscored``;
- a detected span is **true** when it overlaps at least one character of a key span of any type in
  the same field; **precision** (per detected type) = true / detected, over every ``turns[i].text``
  field of every scrubbed session (with or without PII).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from infra.recordio import RecordError

Span = tuple[int, int, str]  # start, end, type


class KeySpan(NamedTuple):
    """One row of a PII answer key (``value`` is held in memory while scoring only, never written)."""

    start: int
    end: int
    type: str
    value: str


def load_key(path: Path) -> dict[str, dict[str, list[KeySpan]]]:
    """session_id -> field -> key spans. Plain JSON (no model per row): a key can have millions of rows."""
    key: dict[str, dict[str, list[KeySpan]]] = defaultdict(lambda: defaultdict(list))
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                span = KeySpan(int(row["start"]), int(row["end"]), str(row["type"]), str(row.get("value", "")))
                key[str(row["session_id"])][str(row["field"])].append(span)
            except (ValueError, KeyError, TypeError) as err:
                raise RecordError(path, lineno, f"not a PII key row: {err}") from err
    return key


def _covered(span: KeySpan, detections: list[Span], same_type: bool) -> bool:
    """Every non-whitespace character of ``span`` lies inside a detection (of its type, if ``same_type``)."""
    hit = [False] * (span.end - span.start)
    for s, e, t in detections:
        if (t == span.type or not same_type) and e > span.start and s < span.end:
            for p in range(max(s, span.start), min(e, span.end)):
                hit[p - span.start] = True
    value = span.value if len(span.value) == len(hit) else "x" * len(hit)  # no value: every char counts
    return all(h or ch.isspace() for h, ch in zip(hit, value, strict=True))


class PiiScorer:
    """Feed it scored sessions, then read :meth:`result`."""

    def __init__(self, key: dict[str, dict[str, list[KeySpan]]]) -> None:
        self.key = key
        self.seen: set[str] = set()  # key sessions that were scrubbed
        self.sessions_scored = 0
        self.key_spans: dict[str, int] = defaultdict(int)
        self.found: dict[str, int] = defaultdict(int)
        self.found_any: dict[str, int] = defaultdict(int)
        self.detected: dict[str, int] = defaultdict(int)
        self.true: dict[str, int] = defaultdict(int)

    def add(self, session_id: str, detections: Iterable[tuple[str, int, int, str]]) -> None:
        by_field: dict[str, list[Span]] = defaultdict(list)
        for field, s, e, t in detections:
            by_field[field].append((s, e, t))
        fields = self.key.get(session_id, {})
        self.sessions_scored += 1
        if fields:
            self.seen.add(session_id)
        for field, spans in by_field.items():
            if not field.startswith("turns["):
                continue
            truth = fields.get(field, [])
            for s, e, t in spans:
                self.detected[t] += 1
                self.true[t] += any(s < k.end and e > k.start for k in truth)
        for field, truth in fields.items():
            found = by_field.get(field, [])
            for span in truth:
                self.key_spans[span.type] += 1
                self.found[span.type] += _covered(span, found, same_type=True)
                self.found_any[span.type] += _covered(span, found, same_type=False)

    def result(self) -> dict[str, Any]:
        unscored: dict[str, int] = defaultdict(int)
        for sid, fields in self.key.items():
            if sid not in self.seen:
                for spans in fields.values():
                    for span in spans:
                        unscored[span.type] += 1
        types = sorted(set(self.key_spans) | set(self.detected))
        per_type = {}
        for t in types:
            n, d = self.key_spans.get(t, 0), self.detected.get(t, 0)
            per_type[t] = {
                "key_spans": n, "found": self.found.get(t, 0), "found_any_type": self.found_any.get(t, 0),
                "recall": self.found.get(t, 0) / n if n else None,
                "recall_any_type": self.found_any.get(t, 0) / n if n else None,
                "detected": d, "detected_true": self.true.get(t, 0),
                "precision": self.true.get(t, 0) / d if d else None,
            }
        total_n, total_d = sum(self.key_spans.values()), sum(self.detected.values())
        return {
            "types": per_type,
            "total": {
                "key_spans": total_n,
                "recall": sum(self.found.values()) / total_n if total_n else None,
                "recall_any_type": sum(self.found_any.values()) / total_n if total_n else None,
                "detected": total_d,
                "precision": sum(self.true.values()) / total_d if total_d else None,
            },
            "unscored_key_spans": dict(unscored),
            "sessions_scored": self.sessions_scored,
        }


def iter_scored(paths: Iterable[Path]) -> Iterator[tuple[str, list[tuple[str, int, int, str]]]]:
    """``(session_id, detections)`` from the records stage's ``scored.jsonl`` files (``{"s": …, "d": […]}``)."""
    for path in paths:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                yield row["s"], [tuple(d) for d in row["d"]]


def score_files(key_path: Path, scored_paths: Iterable[Path]) -> dict[str, Any]:
    """Score the records stage's ``scored.jsonl`` files against ``key_path``."""
    scorer = PiiScorer(load_key(key_path))
    for session_id, detections in iter_scored(scored_paths):
        scorer.add(session_id, detections)
    return scorer.result()
