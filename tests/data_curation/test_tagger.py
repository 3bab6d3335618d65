"""The learned PII tagger (data_curation/tagger.py): labels, decoding, its cache, its training on a small set of
our own, and the precision checks its spans pass through in the scrubber.

    pytest tests/data_curation/test_tagger.py

Every sentence here is written for this test (none comes from bench/pii_sets).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from data_curation.config import DEFAULT_PHONE_REGIONS, CurateConfig
from data_curation.pii import Detection, Scrubber, _tagged_value_ok
from data_curation.tagger import (
    LABELS,
    NAME_VETO,
    PiiTagger,
    Reading,
    TaggedSpan,
    TaggerError,
    augmented,
    decode,
    fingerprint,
    tagger_dir,
    token_labels,
    train_tagger,
)


def _row(label: str, p: float) -> list[float]:
    """A probability row with ``p`` on ``label`` and the rest spread evenly."""
    rest = (1 - p) / (len(LABELS) - 1)
    return [p if lab == label else rest for lab in LABELS]


def test_token_labels_take_the_type_of_the_span_holding_the_first_character() -> None:
    # "call Ana on 555 1234": tokens [CLS] call ana on 555 123 ##4 [SEP]
    offsets = [(0, 0), (0, 4), (5, 8), (9, 11), (12, 15), (16, 19), (19, 20), (0, 0)]
    spans = [(5, 8, "NAME"), (12, 20, "PHONE")]
    name, phone = LABELS.index("NAME"), LABELS.index("PHONE")
    assert token_labels(offsets, spans) == [-100, 0, name, 0, phone, phone, phone, -100]


def test_decode_joins_tokens_of_one_type_across_spaces_and_keeps_the_lowest_probability() -> None:
    text = "ask Li Wei, 0612"
    offsets = [(0, 0), (0, 3), (4, 6), (7, 10), (10, 11), (12, 16), (0, 0)]
    probs = [_row("O", 0.9), _row("O", 0.9), _row("NAME", 0.95), _row("NAME", 0.7), _row("O", 0.99),
             _row("PHONE", 0.6), _row("O", 0.9)]
    assert decode(text, offsets, probs) == [TaggedSpan(4, 10, "NAME", 0.7), TaggedSpan(12, 16, "PHONE", 0.6)]


def test_decode_splits_a_type_at_punctuation_and_at_a_change_of_type() -> None:
    text = "Ana,Bo 12"
    offsets = [(0, 3), (3, 4), (4, 6), (7, 9)]
    probs = [_row("NAME", 0.9), _row("NAME", 0.8), _row("NAME", 0.9), _row("ADDRESS", 0.9)]
    # "Ana" "," "Bo": the comma is tagged NAME too and is glued (no space): one span 0-6; then ADDRESS
    assert decode(text, offsets, probs) == [TaggedSpan(0, 6, "NAME", 0.8), TaggedSpan(7, 9, "ADDRESS", 0.9)]
    probs[1] = _row("O", 0.9)
    assert decode(text, offsets, probs) == [TaggedSpan(0, 3, "NAME", 0.9), TaggedSpan(4, 6, "NAME", 0.9),
                                            TaggedSpan(7, 9, "ADDRESS", 0.9)]


def _write_set(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def test_fingerprint_follows_the_training_sets_bytes_and_names_a_missing_set(tmp_path: Path) -> None:
    _write_set(tmp_path / "a.jsonl", [{"id": "a1", "turns": ["hi Ana"], "pii": [{"turn": 0, "type": "NAME",
                                                                               "value": "Ana"}]}])
    first = fingerprint(tmp_path, ("a",))
    assert first == fingerprint(tmp_path, ("a",)) and len(first) == 12
    _write_set(tmp_path / "a.jsonl", [{"id": "a1", "turns": ["hi Bo"], "pii": [{"turn": 0, "type": "NAME",
                                                                              "value": "Bo"}]}])
    assert fingerprint(tmp_path, ("a",)) != first
    assert fingerprint(tmp_path, ("a",), augment=0) != fingerprint(tmp_path, ("a",), augment=1)
    with pytest.raises(TaggerError, match=r"b\.jsonl.*anonymise\.tagger: false"):
        fingerprint(tmp_path, ("a", "b"))
    assert tagger_dir(tmp_path / "cache", tmp_path, ("a",)).name == f"pii-tagger-v1-{fingerprint(tmp_path, ('a',))}"


NAMES = ["Zubair", "Ottilie", "Kwabena", "Marisol", "Teodor", "Haruka", "Ifeoma", "Björn", "Leilani", "Casimir",
         "Anouk", "Dmitri", "Soraya", "Tamati", "Yusuf", "Elodie"]


def _training_rows() -> list[dict]:
    rows = []
    for i, name in enumerate(NAMES):
        for j, (pattern, keep) in enumerate([("{} will collect the parcel", None),
                                              ("the blue kettle is for {}", "blue kettle"),
                                              ("thanks {} for the quick reply", None)]):
            text = pattern.format(name)
            rows.append({"id": f"t{i}-{j}", "turns": [text], "pii": [{"turn": 0, "type": "NAME", "value": name}],
                         "keep": [{"turn": 0, "value": keep}] if keep else []})
        rows.append({"id": f"t{i}-n", "turns": ["do you ship the walnut desk to Lisbon"], "pii": [],
                     "keep": [{"turn": 0, "value": "Lisbon"}]})
    return rows


def test_the_tagger_trains_once_into_its_cache_and_finds_what_it_learnt(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    sets = tmp_path / "sets"
    sets.mkdir()
    _write_set(sets / "mine.jsonl", _training_rows())
    tagger = PiiTagger(cache_dir=tmp_path / "cache", sets_dir=sets, sets=("mine",), epochs=25, augment=0,
                       precision="fp32")
    path = tagger.ensure()
    meta = json.loads((path / "tagger.json").read_text())
    assert meta["sets"] == ["mine"] and meta["messages"] == len(_training_rows())
    found = tagger.spans("Kwabena will collect the parcel")
    assert [(s.start, s.end, s.type) for s in found] == [(0, 7, "NAME")] and found[0].prob > 0.5
    assert not [s for s in tagger.spans("do you ship the walnut desk to Lisbon") if s.prob > 0.5]
    # a second tagger of the same cache loads what the first trained: training again would fail here
    monkeypatch.setattr("data_curation.tagger.train_tagger", lambda *a, **k: pytest.fail("trained twice"))
    again = PiiTagger(cache_dir=tmp_path / "cache", sets_dir=sets, sets=("mine",), epochs=25, augment=0)
    assert again.ensure() == path and again.spans("thanks Ottilie for the quick reply")[0].type == "NAME"
    # texts read ahead in one batch (padded together) give what each read alone gives
    texts = ["Teodor will collect the parcel", "the blue kettle is for Haruka", "do you ship the walnut desk to Lisbon",
             "", "thanks Soraya for the quick reply"]
    alone = [tagger.spans(t) for t in texts]
    tagger.prefetch(texts)
    batched = [tagger.spans(t) for t in texts]
    assert [[(x.start, x.end, x.type) for x in row] for row in batched] == \
        [[(x.start, x.end, x.type) for x in row] for row in alone] and not tagger._memo
    assert [x.prob for row in batched for x in row] == pytest.approx([x.prob for row in alone for x in row], abs=1e-4)
    # a text longer than one window is read in overlapping windows, offsets in the whole text's coordinates
    long = "do you ship the walnut desk to Lisbon. " * 40 + "Yusuf will collect the parcel"  # ~380 tokens
    tail = [s for s in tagger.spans(long) if s.type == "NAME" and s.prob > 0.5]
    assert [long[s.start : s.end] for s in tail] == ["Yusuf"]
    # in bf16 (what precision "auto" picks on a CPU with native bf16) it finds the same spans
    half = PiiTagger(cache_dir=tmp_path / "cache", sets_dir=sets, sets=("mine",), epochs=25, augment=0,
                     precision="bf16")
    assert half.bf16 and not tagger.bf16
    assert [[(x.start, x.end, x.type) for x in half.spans(t)] for t in texts] == \
        [[(x.start, x.end, x.type) for x in row] for row in alone]
    with pytest.raises(ValueError, match="precision"):
        PiiTagger(precision="fp16")
    # its reading gives every token a PII probability, and says which tokens the vocabulary does not know
    text = "Kwabena will collect the parcel"
    reading = tagger.read(text)
    assert reading.pii_prob(0, 7) > 0.5 > reading.pii_prob(text.index("parcel"), len(text))
    assert [text[a:b] for a, b, *_ in reading.tokens][-2:] == ["the", "parcel"]
    thai = "ขอบคุณ Teodor"  # Thai script: [UNK] to the uncased WordPiece vocabulary
    assert tagger.read(thai).pii_prob(0, 6) is None and tagger.read(thai).pii_prob(7, 13) is not None
    tagger.prefetch([text])
    batched_tokens = tagger.read(text).tokens
    assert [(a, b, known) for a, b, _, known in batched_tokens] == [(a, b, known) for a, b, _, known in reading.tokens]
    assert [p for *_, p, _ in batched_tokens] == pytest.approx([p for *_, p, _ in reading.tokens], abs=1e-4)



def test_augmented_copies_swap_each_value_for_another_of_its_type_and_keep_the_words_around() -> None:
    import random

    examples = [("hi Ann, call 555 0101 or ask Ann", [(3, 6, "NAME"), (13, 21, "PHONE"), (29, 32, "NAME")]),
                ("ship to Bo Li", [(8, 13, "NAME")]),
                ("no pii here", []),
                ("overlap Ann Ho", [(8, 14, "NAME"), (12, 14, "ADDRESS")])]
    out = augmented(examples, random.Random(3), copies=2)
    assert len(out) == 4  # two copies of the two messages with PII: none of the message without, nor the overlap
    for text, spans in out:
        pieces = [text[a:b] for a, b, _ in spans]
        if text.startswith("hi "):
            name, phone, again = pieces
            assert [k for _, _, k in spans] == ["NAME", "PHONE", "NAME"]
            assert name == again and name in ("Ann", "Bo Li", "Ann Ho") and phone == "555 0101"
            assert text == f"hi {name}, call {phone} or ask {again}"
        else:
            assert text == f"ship to {pieces[0]}" and spans[0][2] == "NAME"
            assert pieces[0] in ("Ann", "Bo Li", "Ann Ho")
    # with a name list, some names come from it (one or two of its words); offsets still hold the value
    listed = augmented(examples[:2] * 20, random.Random(0), copies=1, names=["zanele", "okoro"])
    drawn = {text[a:b] for text, spans in listed for a, b, k in spans if k == "NAME"}
    assert drawn & {"zanele", "okoro", "zanele okoro", "okoro zanele", "zanele zanele", "okoro okoro"}
    assert drawn <= {"Ann", "Bo Li", "Ann Ho", "zanele", "okoro", "zanele okoro", "okoro zanele", "zanele zanele",
                     "okoro okoro"}


def test_train_tagger_refuses_an_empty_training_set(tmp_path: Path) -> None:
    _write_set(tmp_path / "empty.jsonl", [])
    with pytest.raises(TaggerError, match="no training messages"):
        train_tagger(tmp_path / "out", tmp_path, ("empty",), progress=False)


class _Spans:
    """Stands in for the trained model's output: the spans given, for any text (the filters are what is tested)."""

    def __init__(self, spans: list[TaggedSpan]) -> None:
        self.given = spans

    def spans(self, text: str) -> list[TaggedSpan]:
        return self.given

    def read(self, text: str) -> Reading:
        return Reading(self.spans(text), [])


@pytest.fixture(scope="module")
def scrubber() -> Scrubber:
    return Scrubber.configured(DEFAULT_PHONE_REGIONS, "lexicon")


def _tagged(scrubber: Scrubber, text: str, word: str, kind: str, prob: float = 0.95) -> list[Detection]:
    start = text.index(word)
    scrubber.tagger = _Spans([TaggedSpan(start, start + len(word), kind, prob)])  # type: ignore[assignment]
    try:
        return scrubber._tagged(text, [], scrubber.tagger.read(text))
    finally:
        scrubber.tagger = None


@pytest.mark.parametrize("text, word", [
    ("tamsin will be home after six", "tamsin"),            # a lower-case name no rule explains
    ("leave it with Chidinma Okonkwo next door", "Chidinma Okonkwo"),
    ("parcel for 鈴木一郎 please", "鈴木一郎"),
])
def test_tagged_names_that_pass(scrubber: Scrubber, text: str, word: str) -> None:
    start = text.index(word)
    assert _tagged(scrubber, text, word, "NAME") == [Detection(start, start + len(word), "NAME")]


@pytest.mark.parametrize("text, word", [
    ("two bottles of Jack Daniel's for the party", "Jack Daniel"),   # a brand phrase around the span
    ("das Paket wurde nicht geliefert", "wurde"),                    # lower case, nobody's name
    ("is the 'Clementine' lamp dimmable", "Clementine"),              # quoted: a product's name
    ("any hotels near Lisbon", "Lisbon"),                           # a lone place
])
def test_tagged_names_that_are_dropped(scrubber: Scrubber, text: str, word: str) -> None:
    assert _tagged(scrubber, text, word, "NAME") == []


def test_tagged_spans_below_the_threshold_or_inside_a_detection_are_dropped(scrubber: Scrubber) -> None:
    text = "tamsin will be home after six"
    assert _tagged(scrubber, text, "tamsin", "NAME", prob=0.5) == []
    scrubber.tagger = _Spans([TaggedSpan(0, 6, "NAME", 0.99)])  # type: ignore[assignment]
    try:
        assert scrubber._tagged(text, [Detection(0, 6, "NAME")], scrubber.tagger.read(text)) == []
        # a span is grown to whole words: "tams" -> "tamsin"
        scrubber.tagger = _Spans([TaggedSpan(0, 4, "NAME", 0.99)])  # type: ignore[assignment]
        assert scrubber._tagged(text, [], scrubber.tagger.read(text)) == [Detection(0, 6, "NAME")]
    finally:
        scrubber.tagger = None


@pytest.mark.parametrize("text, value, kind, ok", [
    ("ref INV/2031/KLM/5519 please", "INV/2031/KLM/5519", "ORDER_ID", True),
    ("the barcode 4006381333931 is on the box", "4006381333931", "ORDER_ID", False),   # a valid EAN-13
    ("it costs 12499 rupees", "12499", "ORDER_ID", False),                             # money
    ("size 38 please", "38", "NATIONAL_ID", False),                                   # under 4 digits
    ("write to rafa dot m at proton dot me", "rafa dot m at proton dot me", "EMAIL", True),
    ("write to Rafa", "Rafa", "EMAIL", False),
    ("Chen at lena", "Chen at lena", "EMAIL", False),                                 # an "at" without a dot
    ("Calle Olmo 14, 2B, Getafe", "Calle Olmo 14, 2B, Getafe", "ADDRESS", True),     # three pieces
    ("Rua Augusta 12, 1100-053 Lisboa", "Rua Augusta 12, 1100-053 Lisboa", "ADDRESS", True),  # two, a post code
    ("we land in Palawan sa Nov 8-11", "Palawan sa Nov 8-11", "ADDRESS", False),      # a trip's dates
    ("a slice of Sacher, 12. please", "Sacher, 12.", "ADDRESS", False),
    ("meet at Kariakoo", "Kariakoo", "ADDRESS", False),                              # no number: a place
    ("flying TK 2412 tonight", "TK 2412", "ORDER_ID", False),                        # a flight number
    ("locker 1351 is jammed", "1351", "ORDER_ID", False),                            # four digits alone
    ("ticket KPD-2207 is still open", "KPD-2207", "ORDER_ID", True),
])
def test_tagged_values(text: str, value: str, kind: str, ok: bool) -> None:
    start = text.index(value)
    assert _tagged_value_ok(text, start, start + len(value), kind) is ok


def test_the_config_switches_the_tagger_on() -> None:
    assert CurateConfig().anonymise.tagger is True
    off = CurateConfig.model_validate({"anonymise": {"tagger": False}})
    assert off.anonymise.tagger is False and off.with_overrides(tagger=True).anonymise.tagger is True
    assert Scrubber.configured(DEFAULT_PHONE_REGIONS, "rules", tagger=True).tagger is not None
    with pytest.raises(ValueError, match="tagger"):
        CurateConfig.model_validate({"anonymise": {"tagger": "maybe"}})


def test_a_reading_gives_the_highest_pii_probability_inside_a_span_or_none_where_it_cannot_read() -> None:
    #        "ask Sipho about ขอบ"
    reading = Reading([], [(0, 3, 0.02, True), (4, 6, 0.9, True), (6, 9, 0.4, True), (10, 15, 0.001, True),
                           (16, 19, 0.3, False)])
    assert reading.pii_prob(4, 9) == 0.9        # "Sipho": its two pieces, the higher
    assert reading.pii_prob(0, 3) == 0.02
    assert reading.pii_prob(5, 12) == 0.9       # any token overlapping the span counts
    assert reading.pii_prob(10, 19) is None     # a token the vocabulary does not know: no opinion
    assert reading.pii_prob(20, 25) is None     # no token there
    assert Reading([], []).pii_prob(0, 3) is None


@pytest.mark.parametrize("text, graded", [
    ("is Sipho coming to the launch", [("Sipho", True)]),           # a rare name, nothing around it: weak
    ("Marhaba! is the mall open", [("Marhaba", True)]),             # a greeting the lexicon takes for a name
    ("my daughter Sipho wants one", [("Sipho", False)]),            # a relative before it: cued
    ("name: Sipho Dlamini", [("Sipho Dlamini", False)]),
    ("Pak Joko left his bag", [("Pak Joko", False)]),               # a title is a cue
    ("thanks Sipho for the quick reply", [("Sipho", False)]),
    ("Телефонуйте: 067-123-45-67, Василь", [("Василь", True)]),     # a first name that is also a common word,
    ("Мій банк не приймає. Юлія", [("Юлія", True)]),               # closing a message: weak
    ("do you ship to Spain, Madrid", []),                            # a place closing it: nothing
    ("is it in stock, Nike", []),                                    # a brand
])
def test_name_spans_say_whether_only_their_words_are_evidence(scrubber: Scrubber, text: str,
                                                             graded: list[tuple[str, bool]]) -> None:
    assert [(text[a:b], weak) for a, b, weak in scrubber.names.find_graded(text)] == graded
    assert scrubber.names.find(text) == [(a, b) for a, b, _ in scrubber.names.find_graded(text)]


class _Reads(_Spans):
    """Stands in for the model: one reading with the given PII probability on every word of the text."""

    def __init__(self, text: str, prob: float, known: bool = True) -> None:
        super().__init__([])
        self.reading = Reading([], [(m.start(), m.end(), prob, known) for m in re.finditer(r"\w+", text)])

    def read(self, text: str) -> Reading:
        return self.reading


@pytest.mark.parametrize("text, prob, known, kept", [
    ("is Sipho coming to the launch", 0.004, True, False),           # weak and read as no PII: dropped
    ("is Sipho coming to the launch", NAME_VETO, True, True),        # at the veto: kept
    ("is Sipho coming to the launch", 0.004, False, True),           # words the tagger cannot read: kept
    ("Marhaba! is the mall open", 0.004, True, False),
    ("my daughter Sipho wants one", 0.0001, True, True),             # cued: the rules stand
    ("Pak Joko left his bag", 0.0001, True, True),
])
def test_the_tagger_overrules_only_weak_names_in_words_it_can_read(scrubber: Scrubber, text: str, prob: float,
                                                                   known: bool, kept: bool) -> None:
    assert [d.type for d in scrubber.detect(text)] == ["NAME"]  # without a tagger the rules find it
    scrubber.tagger = _Reads(text, prob, known)  # type: ignore[assignment]
    try:
        assert ([d.type for d in scrubber.detect(text)] == ["NAME"]) is kept
        assert [d.type for d in scrubber.detect(text, tagged=False)] == ["NAME"]  # re-reads of joints: no veto
    finally:
        scrubber.tagger = None


def test_uncovered_pieces_are_trimmed_and_skip_every_detection() -> None:
    from data_curation.pii import _uncovered

    text = "to: Ana Lima, Rua X 12, Porto"
    #        0123456789012345678901234567
    found = [Detection(4, 7, "NAME"), Detection(14, 22, "ADDRESS")]  # "Ana", "Rua X 12"
    assert _uncovered(text, 0, len(text), found) == [(0, 3), (8, 13), (22, 29)]  # "to:", "Lima,", ", Porto"
    assert [text[a:b] for a, b in _uncovered(text, 4, 29, found)] == ["Lima,", ", Porto"]
    assert _uncovered(text, 4, 7, found) == [] and _uncovered(text, 12, 14, found) == []  # ", " alone: nothing


def test_tagged_parts_never_displace_a_detection_and_join_their_own_type(scrubber: Scrubber) -> None:
    text = "this is Lena Chen at lena.chen@example.org"
    name, mail = Detection(8, 12, "NAME"), Detection(21, 42, "EMAIL")
    scrubber.tagger = _Spans([TaggedSpan(8, 17, "NAME", 0.99),       # "Lena Chen": "Chen" joins the found "Lena"
                              TaggedSpan(13, 42, "EMAIL", 0.99)])    # over the name and the e-mail: nothing left
    try:
        assert scrubber._with_tagged(text, [name, mail], scrubber.tagger.read(text)) == [Detection(8, 17, "NAME"), mail]
    finally:
        scrubber.tagger = None


class _Recording(_Spans):
    def __init__(self) -> None:
        super().__init__([])
        self.asked: list[str] = []

    def spans(self, text: str) -> list[TaggedSpan]:
        self.asked.append(text)
        return []

    def prefetch(self, texts: list[str]) -> None:
        pass


def test_the_tagger_reads_each_message_as_sent_not_the_joined_rereads(scrubber: Scrubber) -> None:
    """A number cut over two messages is found by reading their tails joined; the tagger reads only the messages
    (and a closing cue with the next message whole)."""
    texts = ["call me on +44 7700", "900123 thanks"]
    recording = _Recording()
    scrubber.tagger = recording  # type: ignore[assignment]
    scrubber._cache.clear()
    try:
        out = scrubber.scrub_turns(texts)
    finally:
        scrubber.tagger = None
        scrubber._cache.clear()
    assert sorted(recording.asked) == sorted(texts)
    assert [o for o, _ in out] == ["call me on <PHONE>", "<PHONE> thanks"]
