"""PII scoring definitions on a hand-made key: full same-type coverage for recall, any overlap for precision.

    pytest tests/data_curation/test_pii_score.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_curation.pii_score import PiiScorer, load_key, score_files

KEY = [
    {"session_id": "s1", "field": "turns[0].text", "start": 0, "end": 9, "type": "NAME", "value": "Lena Chen"},
    {"session_id": "s1", "field": "turns[0].text", "start": 20, "end": 31, "type": "PHONE", "value": "030 3236132"},
    {"session_id": "s2", "field": "turns[2].text", "start": 5, "end": 15, "type": "ADDRESS", "value": "1 Elm St X"},
    {"session_id": "s9", "field": "turns[0].text", "start": 0, "end": 4, "type": "EMAIL", "value": "a@bc"},
]


def test_definitions(tmp_path: Path) -> None:
    path = tmp_path / "key.jsonl"
    path.write_text("".join(json.dumps(k) + "\n" for k in KEY))
    scorer = PiiScorer(load_key(path))
    # NAME covered in two parts that meet at the space: found. PHONE detected as ORDER_ID: found only any-type.
    scorer.add("s1", [("turns[0].text", 0, 4, "NAME"), ("turns[0].text", 5, 9, "NAME"),
                      ("turns[0].text", 20, 31, "ORDER_ID"), ("turns[1].text", 0, 3, "NAME")])
    # ADDRESS only half covered: not found; a detection in an event query does not count for precision.
    scorer.add("s2", [("turns[2].text", 5, 10, "ADDRESS"), ("events[0].query", 0, 3, "NAME")])
    scorer.add("s3", [])
    r = scorer.result()
    assert r["types"]["NAME"] == {"key_spans": 1, "found": 1, "found_any_type": 1, "recall": 1.0,
                                  "recall_any_type": 1.0, "detected": 3, "detected_true": 2,
                                  "precision": pytest.approx(2 / 3)}
    assert r["types"]["PHONE"]["recall"] == 0 and r["types"]["PHONE"]["recall_any_type"] == 1
    assert r["types"]["ORDER_ID"]["precision"] == 1 and r["types"]["ORDER_ID"]["recall"] is None
    assert r["types"]["ADDRESS"]["recall"] == 0 and r["types"]["ADDRESS"]["precision"] == 1
    assert r["unscored_key_spans"] == {"EMAIL": 1} and r["sessions_scored"] == 3
    assert "EMAIL" not in r["types"]  # its only span was in a session that was never scrubbed


def test_score_files(tmp_path: Path) -> None:
    key = tmp_path / "key.jsonl"
    key.write_text(json.dumps(KEY[0]) + "\n")
    scored = tmp_path / "scored.jsonl"
    scored.write_text(json.dumps({"s": "s1", "d": [["turns[0].text", 0, 9, "NAME"]]}) + "\n")
    assert score_files(key, [scored])["total"]["recall"] == 1.0
