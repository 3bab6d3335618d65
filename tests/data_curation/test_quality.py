"""Quality filters on hand-made sessions: each reason, in order, with exact expectations.

    pytest tests/data_curation/test_quality.py
"""

from __future__ import annotations

from typing import Any

import pytest

from data_curation.config import QualityConfig
from data_curation.quality import QualityFilter, is_gibberish, looks_english
from data_curation.records import Session


def session(text: str | None = "a tent for two people", *, purchase: bool = True, task: str | None = None) -> Session:
    turns = [{"role": "user", "text": text, "ts": 1.0}] if text is not None else []
    events: list[dict[str, Any]] = [{"type": "view", "ts": 2.0, "item_id": "sku-1"}]
    if purchase:
        events.append({"type": "purchase", "ts": 3.0, "item_id": "sku-1"})
    return Session.model_validate({"session_id": "s", "user_id": "u", "started_at": 1.0, "turns": turns,
                                   "events": events, "task_id": task})


LEAK = {"t1": ["sku-0000042", "northpeak tent navy canvas"]}


@pytest.mark.parametrize(("s", "reason"), [
    (session("a tent for two people"), None),
    (session(None), "no_text"),
    (session("<NAME> <PHONE>"), "no_text"),
    (session("ok"), "too_short"),
    (session("tent " * 1000), "too_long"),
    (session("asdfghjkl qwrtzxcv bnmsdf"), "gibberish"),
    (session("I need this!!!!!!!!!!"), "gibberish"),
    (session("Ich suche ein Zelt für zwei Personen, bitte mit Lieferung"), "not_english"),
    (session("Bonjour, je cherche une tente pour deux personnes"), "not_english"),
    (session("a tent for two people", purchase=False), "no_outcome"),
    (session("is sku-0000042 in stock?", task="t1"), "label_leakage"),
    (session("I want the Northpeak Tent  Navy canvas please", task="t1"), "label_leakage"),
    (session("I want a navy tent", task="t1"), None),
    (session("is sku-0000042 in stock?", task="t2"), None),
])
def test_reasons(s: Session, reason: str | None) -> None:
    cfg = QualityConfig(require_outcome=True)
    text = "\n".join(t.text for t in s.turns if t.role == "user")
    assert QualityFilter(cfg, LEAK).reason(s, text) == reason


def test_filters_can_be_switched_off() -> None:
    cfg = QualityConfig(require_text=False, min_chars=0, gibberish=False, english_only=False, label_leakage=False)
    f = QualityFilter(cfg, LEAK)
    for text in (None, "ok", "asdfghjkl qwrtzxcv bnmsdf", "Ich suche ein Zelt für zwei Personen, bitte"):
        s = session(text, task="t1", purchase=False)
        assert f.reason(s, s.turns[0].text if s.turns else "") is None


@pytest.mark.parametrize("text", [
    "northpeak tent navy canvas", "peat-free planter below", "USB-C charger 65W for my laptop",
    "I'm looking for the Jasper tent in navy, canvas, size 42.", "rhythm and blues vinyl",
    "a self-care treat", "the essentials for a newborn, total budget $400",
])
def test_real_queries_are_not_gibberish_and_read_as_english(text: str) -> None:
    assert not is_gibberish(text, QualityConfig())
    assert looks_english(text)


def test_other_scripts_are_not_english() -> None:
    assert not looks_english("我想买一个帐篷给两个人用")
    assert not looks_english("Хочу купить палатку на двоих человек")
