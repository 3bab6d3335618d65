"""Score a PII scrubber on a hand-labelled set (``bench/pii_sets/*.jsonl``), not on a generator's answer key.

A set is JSON Lines, one conversation per line::

    {"id": "test-001", "turns": ["user message", ...],
     "pii":  [{"turn": 0, "type": "NAME", "value": "Thandiwe Mokoena"}, ...],
     "keep": [{"turn": 0, "value": "Le Creuset"}, ...]}

Every occurrence of a ``value`` in its turn is a labelled span. Definitions (per PII type):

- **recall** = labelled spans of the type whose every non-space character lies inside some detection
  (of any type: a name scrubbed as ``<ADDRESS>`` is still gone); **typed recall** requires the same
  type;
- **precision** (per detected type) = detections that overlap a labelled PII span / detections;
- **keep** = share of ``keep`` values (brands, products, colours, cities, POIs) that no detection
  touches.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_curation.pii import PII_TYPES, Detection
from infra.recordio import RecordError


@dataclass(frozen=True)
class Labelled:
    conv: str
    turn: int
    start: int
    end: int
    type: str  # a PII type, or "KEEP"
    value: str


@dataclass
class Conversation:
    id: str
    turns: list[str]
    spans: list[Labelled]


def _occurrences(text: str, value: str) -> list[int]:
    out, pos = [], text.find(value)
    while pos >= 0:
        out.append(pos)
        pos = text.find(value, pos + 1)
    return out


def load_set(path: Path) -> list[Conversation]:
    """Parse and check a labelled set; a malformed line is an error naming ``file:line`` and the field."""
    convs: list[Conversation] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                cid, turns = str(row["id"]), row["turns"]
                if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
                    raise ValueError("turns: must be a list of strings")
                if cid in seen:
                    raise ValueError(f"id: {cid!r} appears twice")
                seen.add(cid)
                spans: list[Labelled] = []
                for field in ("pii", "keep"):
                    for k, lab in enumerate(row.get(field, [])):
                        turn, value = int(lab["turn"]), str(lab["value"])
                        kind = "KEEP" if field == "keep" else str(lab["type"])
                        if kind != "KEEP" and kind not in PII_TYPES:
                            raise ValueError(f"{field}[{k}].type: {kind!r} is not one of {', '.join(PII_TYPES)}")
                        if not 0 <= turn < len(turns):
                            raise ValueError(f"{field}[{k}].turn: {turn} out of range")
                        starts = _occurrences(turns[turn], value)
                        if not value or not starts:
                            raise ValueError(f"{field}[{k}].value: {value!r} is not in turns[{turn}]")
                        spans.extend(Labelled(cid, turn, s, s + len(value), kind, value) for s in starts)
            except (ValueError, KeyError, TypeError) as err:
                raise RecordError(path, lineno, f"not a labelled PII conversation: {err}") from err
            convs.append(Conversation(cid, turns, spans))
    return convs


def _covered(span: Labelled, dets: Sequence[Detection], same_type: bool) -> bool:
    return all(
        ch.isspace() or any(d.start <= span.start + i < d.end and (not same_type or d.type == span.type) for d in dets)
        for i, ch in enumerate(span.value)
    )


def paired_recall_ci(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]], n: int = 2000,
                     seed: int = 0) -> tuple[float, float, float]:
    """Recall of ``a`` minus recall of ``b`` (per-conversation ``(removed, labelled)`` pairs of the same
    conversations) and its 95 % paired bootstrap interval, resampling conversations."""
    import numpy as np

    x, y = np.asarray(a, float), np.asarray(b, float)
    if x.shape != y.shape or not len(x) or not x[:, 1].sum():
        raise ValueError("paired_recall_ci: both sides need the same non-empty conversations")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n, len(x)))
    diff = x[idx, 0].sum(1) / x[idx, 1].sum(1) - y[idx, 0].sum(1) / y[idx, 1].sum(1)
    lo, hi = np.percentile(diff, [2.5, 97.5])
    return float(x[:, 0].sum() / x[:, 1].sum() - y[:, 0].sum() / y[:, 1].sum()), float(lo), float(hi)


def score(detect: Callable[[list[str]], list[list[Detection]]], convs: Sequence[Conversation]) -> dict[str, Any]:
    """Recall / precision per type, keep-survival, texts per second, and the misses (for reading).

    ``detect`` takes one conversation's user turns and returns the detections of each (so a scrubber
    can look across turns, as :meth:`Scrubber.scrub_turns` does).
    """
    labelled: Counter[str] = Counter()
    found: Counter[str] = Counter()
    typed: Counter[str] = Counter()
    detected: Counter[str] = Counter()
    true: Counter[str] = Counter()
    keep_total = keep_ok = 0
    misses: list[dict[str, Any]] = []
    false: list[dict[str, Any]] = []
    t = time.perf_counter()
    all_dets = [detect(list(c.turns)) for c in convs]
    seconds = time.perf_counter() - t
    per_conv: list[tuple[int, int]] = []  # (removed, labelled) per conversation, for paired bootstraps
    for c, dets_by_turn in zip(convs, all_dets, strict=True):
        before = (sum(found.values()), sum(labelled.values()))
        for i, dets in enumerate(dets_by_turn):
            spans = [s for s in c.spans if s.turn == i]
            pii = [s for s in spans if s.type != "KEEP"]
            for s in spans:
                if s.type == "KEEP":
                    keep_total += 1
                    touched = [d for d in dets if d.start < s.end and d.end > s.start]
                    keep_ok += not touched
                    if touched:
                        false.append({"id": c.id, "turn": i, "keep": s.value,
                                      "detected": [c.turns[i][d.start:d.end] for d in touched]})
                    continue
                labelled[s.type] += 1
                if _covered(s, dets, same_type=False):
                    found[s.type] += 1
                    typed[s.type] += _covered(s, dets, same_type=True)
                else:
                    misses.append({"id": c.id, "turn": i, "type": s.type, "value": s.value})
            for d in dets:
                detected[d.type] += 1
                if any(d.start < s.end and d.end > s.start for s in pii):
                    true[d.type] += 1
                elif not any(f.get("id") == c.id and f.get("turn") == i for f in false if "keep" in f):
                    false.append({"id": c.id, "turn": i, "type": d.type, "detected": c.turns[i][d.start:d.end]})
        per_conv.append((sum(found.values()) - before[0], sum(labelled.values()) - before[1]))
    types = {}
    for kind in PII_TYPES:
        if labelled[kind] or detected[kind]:
            types[kind] = {
                "labelled": labelled[kind], "recall": found[kind] / labelled[kind] if labelled[kind] else None,
                "typed_recall": typed[kind] / labelled[kind] if labelled[kind] else None,
                "detected": detected[kind], "precision": true[kind] / detected[kind] if detected[kind] else None,
            }
    n_lab, n_det = sum(labelled.values()), sum(detected.values())
    n_texts = sum(len(c.turns) for c in convs)
    return {
        "conversations": len(convs), "texts": n_texts, "seconds": seconds,
        "texts_per_s": n_texts / seconds if seconds else None,
        "total": {"labelled": n_lab, "recall": sum(found.values()) / n_lab if n_lab else None,
                  "detected": n_det, "precision": sum(true.values()) / n_det if n_det else None,
                  "keep": keep_total, "keep_survival": keep_ok / keep_total if keep_total else None},
        "types": types, "misses": misses, "false_positives": false, "per_conversation": per_conv,
    }
