"""SID strings, the item <-> SID bijection, and code labels. `pytest tests/sid/test_codebook.py`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sid.codebook import SidError, SidMap, parse_sid, sid_string
from sid.labels import TermIndex


def test_sid_strings_round_trip() -> None:
    assert sid_string((12, 200, 3, 0)) == "<s1_12><s2_200><s3_3><s4_0>"
    assert parse_sid("<s1_12><s2_200><s3_3><s4_0>") == (12, 200, 3, 0)
    assert parse_sid("  <s1_7><s2_0>\n") == (7, 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "not a SID"), ("<s2_1>", "expected level 1"), ("<s1_1><s3_2>", "expected level 2"),
     ("<s1_1> <s2_2>", "unexpected text"), ("<s1_1>x", "not a SID"), ("hello", "not a SID"),
     ("<s1_-1>", "not a SID")],
)
def test_parse_sid_errors(text: str, message: str) -> None:
    with pytest.raises(SidError, match=message):
        parse_sid(text)


def test_sid_map_is_a_bijection(tmp_path: Path) -> None:
    codes = np.array([[0, 1, 0], [0, 1, 1], [2, 0, 0]])
    m = SidMap(["a", "b", "c"], codes)
    assert m.sid_of("b") == "<s1_0><s2_1><s3_1>" and m.item_of("<s1_2><s2_0><s3_0>") == "c"
    assert m.item_of((0, 1, 0)) == "a" and m.depth == 3 and "a" in m
    with pytest.raises(SidError, match="names no item"):
        m.item_of("<s1_9><s2_9><s3_9>")
    with pytest.raises(SidError, match="has no SID"):
        m.codes_of("zz")
    m.save(tmp_path / "sids.jsonl")
    back = SidMap.load(tmp_path / "sids.jsonl")
    assert back.item_ids == m.item_ids and np.array_equal(back.codes, m.codes)
    with pytest.raises(ValueError, match="share a SID"):
        SidMap(["a", "b"], np.array([[0, 1], [0, 1]]))
    with pytest.raises(ValueError, match="duplicate item ids"):
        SidMap(["a", "a"], np.array([[0, 1], [0, 2]]))


def test_group_labels_pick_distinctive_words() -> None:
    texts = ["waterproof hiking boots", "hiking boots leather", "dark chocolate bar", "milk chocolate bar"]
    terms = TermIndex(texts)
    labels = terms.group_labels(np.array([0, 0, 1, 1]), 2, top=2)
    assert set(labels[0]) == {"hiking", "boots"} and set(labels[1]) == {"chocolate", "bar"}
    assert terms.rows_labels(np.array([2]), top=1)[0] in {"dark", "chocolate", "bar"}
    # idf by hand: 'hiking' is in 2 of 4 texts -> log(5/3)
    j = list(terms.vocab).index("hiking")
    assert terms.idf[j] == pytest.approx(np.log(5 / 3))
