"""Scoring a scrubber on a hand-labelled PII set: hand-computed recall, precision and keep-survival; bad files.

    pytest tests/data_curation/test_pii_eval.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_curation.pii import Detection
from data_curation.pii_eval import load_set, paired_recall_ci, score
from infra.recordio import RecordError

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_score_matches_hand_computed_values(tmp_path: Path) -> None:
    text0 = "I'm Ada Obi, mail ada@x.io"  # NAME "Ada Obi" at 4..11, EMAIL at 18..26
    text1 = "ship to Rua Nova 5 and the Nimbus boots"  # ADDRESS 8..18, keep "Nimbus" at 27..33
    convs = load_set(_write(tmp_path / "s.jsonl", [{
        "id": "c1", "turns": [text0, text1],
        "pii": [{"turn": 0, "type": "NAME", "value": "Ada Obi"}, {"turn": 0, "type": "EMAIL", "value": "ada@x.io"},
                {"turn": 1, "type": "ADDRESS", "value": "Rua Nova 5"}],
        "keep": [{"turn": 1, "value": "Nimbus"}],
    }]))
    dets = {
        # the name only half covered (miss), the email found as a PHONE (found, not typed)
        text0: [Detection(4, 7, "NAME"), Detection(18, 26, "PHONE")],
        # the address found; a false NAME on the keep word "Nimbus"
        text1: [Detection(8, 18, "ADDRESS"), Detection(27, 33, "NAME")],
    }
    r = score(lambda turns: [dets[t] for t in turns], convs)
    assert r["types"]["NAME"]["recall"] == 0.0
    assert r["types"]["EMAIL"]["recall"] == 1.0 and r["types"]["EMAIL"]["typed_recall"] == 0.0
    assert r["types"]["ADDRESS"]["recall"] == 1.0 and r["types"]["ADDRESS"]["typed_recall"] == 1.0
    assert r["types"]["NAME"]["detected"] == 2 and r["types"]["NAME"]["precision"] == 0.5  # 1 of 2 NAME hits true
    assert r["types"]["PHONE"]["precision"] == 1.0  # overlaps the labelled email
    assert r["total"]["recall"] == pytest.approx(2 / 3)
    assert r["total"]["precision"] == pytest.approx(3 / 4)
    assert r["total"]["keep_survival"] == 0.0
    assert [m["value"] for m in r["misses"]] == ["Ada Obi"]


def test_every_occurrence_of_a_value_is_labelled(tmp_path: Path) -> None:
    convs = load_set(_write(tmp_path / "s.jsonl", [
        {"id": "a", "turns": ["Kofi said Kofi"], "pii": [{"turn": 0, "type": "NAME", "value": "Kofi"}]}]))
    assert [(s.start, s.end) for s in convs[0].spans] == [(0, 4), (10, 14)]
    r = score(lambda turns: [[Detection(0, 4, "NAME")] for _ in turns], convs)
    assert r["types"]["NAME"]["recall"] == 0.5


@pytest.mark.parametrize(("row", "message"), [
    ({"id": "a", "turns": ["hi"], "pii": [{"turn": 0, "type": "NAME", "value": "Zed"}]}, "pii[0].value"),
    ({"id": "a", "turns": ["hi Zed"], "pii": [{"turn": 3, "type": "NAME", "value": "Zed"}]}, "pii[0].turn"),
    ({"id": "a", "turns": ["hi Zed"], "pii": [{"turn": 0, "type": "PERSON", "value": "Zed"}]}, "pii[0].type"),
    ({"id": "a", "turns": "hi"}, "turns"),
    ({"turns": ["hi"]}, "id"),
])
def test_bad_rows_name_file_line_and_field(tmp_path: Path, row: dict, message: str) -> None:
    path = _write(tmp_path / "bad.jsonl", [{"id": "ok", "turns": ["fine"]}, row])
    with pytest.raises(RecordError) as err:
        load_set(path)
    assert "bad.jsonl:2" in str(err.value) and message in str(err.value)


@pytest.mark.parametrize("name", ["dev.jsonl", "dev2.jsonl", "dev5.jsonl"])
def test_shipped_sets_parse_and_are_varied(name: str) -> None:
    convs = load_set(ROOT / "bench" / "pii_sets" / name)
    kinds = {s.type for c in convs for s in c.spans}
    assert {"NAME", "ADDRESS", "EMAIL", "PHONE", "CARD", "KEEP"} <= kinds
    assert len(convs) >= 100


def test_paired_recall_ci_hand_computed() -> None:
    a = [(2, 2), (1, 2), (0, 1)]  # 3 of 5
    b = [(1, 2), (1, 2), (0, 1)]  # 2 of 5
    d, lo, hi = paired_recall_ci(a, b)
    assert d == pytest.approx(0.2)
    assert 0.0 <= lo <= d <= hi <= 0.5  # a never does worse on any conversation
    same = paired_recall_ci(a, a)
    assert same == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="same non-empty"):
        paired_recall_ci(a, b[:2])
