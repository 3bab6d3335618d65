"""The livestream reader (the fallback): questions in four languages, chat spellings and typos, relative references,
phrasing packs and the held-out split of the world's questions.

    .venv/bin/python -m pytest tests/apps/livestream/test_reader.py -q
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from apps.livestream.phrasings import (
    PhrasingError,
    dev2_packs,
    dev3_packs,
    dev4_packs,
    dev5_packs,
    dev_packs,
    heldout2_packs,
    heldout_packs,
    load_pack,
    template_key,
    train_packs,
)
from apps.livestream.reader import Reader, fold, unslang
from apps.livestream.world import (
    DEV2_DIR,
    DEV3_DIR,
    DEV4_DIR,
    DEV_DIR,
    HELDOUT2_DIR,
    HELDOUT_DIR,
    LivestreamWorldConfig,
    generate_livestream_world,
)
from harness.agent import AppSpec, TurnContext
from harness.budget import Budget
from harness.session import SessionState
from harness.tasks import Task
from infra.layout import TASKS_FILE

EARBUDS, HEADPHONES, SERUM = "lv-a", "lv-b", "lv-c"  # the items of conftest.py's app


def _answer(app: AppSpec, question: str, ts: int, reader: Reader | None = None) -> tuple[str, list[str]]:
    session = SessionState(app="livestream", messages=[{"role": "user", "content": question}])
    ctx = TurnContext(app=app, session=session, constraints={"stream_id": "stream-t", "ts_offset_s": ts},
                      budget=Budget(800), model=None)
    final = (reader or Reader()).answer(ctx)
    return final.reply, list(final.data["cited_facts"])


@pytest.mark.parametrize("question, ts, cited, says", [
    # English chat, slang and typos (the serum is on screen at 700 s, the headphones at 400 s)
    ("what would this set me back", 400, [f"{HEADPHONES}.price", f"{HEADPHONES}.discount_percent"], "$89.99"),
    ("hw much is dis 😭", 400, [f"{HEADPHONES}.price", f"{HEADPHONES}.discount_percent"], "$89.99"),
    ("ths one rn still in stok?", 700, [f"{SERUM}.stock"], "Sold out"),
    ("did it sell out yet", 400, [f"{HEADPHONES}.stock"], "3 left"),
    ("can i send it back if i h8 it? how long", 150, [f"{EARBUDS}.returns_days"], "14 days"),
    ("will it get here in 4 days?", 150, [f"{EARBUDS}.shipping_days"], "Yes"),
    # Spanish, German, French
    ("cuánto cuesta esto?", 400, [f"{HEADPHONES}.price", f"{HEADPHONES}.discount_percent"], "$89.99"),
    ("es vegano el serum de GlowLab?", 150, [f"{SERUM}.vegan"], "Yes"),
    ("lo tienes en silver?", 400, [f"{HEADPHONES}.colours"], "Yes, silver"),
    ("wie lange hält der Akku?", 400, [f"{HEADPHONES}.battery_hours"], "40 hours"),
    ("ist das wasserdicht?", 150, [f"{EARBUDS}.waterproof"], "No"),
    ("c'est livré en combien de jours ?", 400, [f"{HEADPHONES}.shipping_days"], "5 days"),
    ("il y a une garantie sur les earbuds de Voltix ?", 700, [f"{EARBUDS}.warranty_months"], "12 months"),
    ("dis-moi celui-ci c cb", 400, [f"{HEADPHONES}.price", f"{HEADPHONES}.discount_percent"], "$89.99"),
    ("wie hoch ist der rabtat auf das hier?", 400, [f"{HEADPHONES}.discount_percent"], "10%"),  # typo, "hoch" no height
    ("could you tell me the return window for the earbuds made by Voltix?", 700, [f"{EARBUDS}.returns_days"],
     "14 days"),
    ("en qué país fabrican esto?", 400, [], "not sure"),  # "fabrican" is not "fabric": origin, not on this sheet
    # references: ordinal in three languages, brand alone, the one shown before this one
    ("the 2nd one, how much?", 700, [f"{HEADPHONES}.price", f"{HEADPHONES}.discount_percent"], "$89.99"),
    ("el primero es impermeable?", 700, [f"{EARBUDS}.waterproof"], "No"),
    ("Gibt es das dritte noch?", 150, [f"{SERUM}.stock"], "Sold out"),
    ("how much is the Sonaro?", 150, [f"{HEADPHONES}.price", f"{HEADPHONES}.discount_percent"], "$89.99"),
    ("the one before this, is it waterproof?", 400, [f"{EARBUDS}.waterproof"], "No"),
    ("el anterior cuánto cuesta?", 700, [f"{HEADPHONES}.price", f"{HEADPHONES}.discount_percent"], "$89.99"),
    # comparisons: this one against a named one
    ("which is cheaper, this or the Voltix earbuds?", 400, [f"{HEADPHONES}.price", f"{EARBUDS}.price"],
     "Voltix earbuds are cheaper"),
    ("cuál dura más la batería, esto o los earbuds de Voltix?", 400,
     [f"{HEADPHONES}.battery_hours", f"{EARBUDS}.battery_hours"], "Sonaro headphones last longer"),
])
def test_reader_answers_in_many_wordings(app: AppSpec, question: str, ts: int, cited: list[str], says: str) -> None:
    reply, facts = _answer(app, question, ts)
    assert facts == cited, (question, reply)
    assert says in reply, (question, reply)


# Wordings of the second development set's kinds, written for this test: British money words, the brand as a
# company, German umlauts typed as ae/oe/ue, typos of "how much" itself, an article and a bare number, a lower-case
# letter size, a preamble that says what the question is about, "hace un momento".
@pytest.mark.parametrize("question, ts, cited, says", [
    ("which is less quid, this or the Voltix earbuds?", 400, [f"{HEADPHONES}.price", f"{EARBUDS}.price"],
     "Voltix earbuds are cheaper"),
    ("how much is knocked off the Sonaro headphones?", 150, [f"{HEADPHONES}.discount_percent"], "10%"),
    ("are the headphones from the Sonaro company waterproof?", 700, [f"{HEADPHONES}.waterproof"], "Yes"),
    ("sind die headphones von der marke Sonaro wasserdicht?", 700, [f"{HEADPHONES}.waterproof"], "Yes"),
    ("was ist guenstiger, das hier oder das erste?", 400, [f"{HEADPHONES}.price", f"{EARBUDS}.price"],
     "Voltix earbuds are cheaper"),
    ("ça fait cmobien ?", 400, [f"{HEADPHONES}.price", f"{HEADPHONES}.discount_percent"], "$89.99"),
    ("y el 2, cuánto tarda el envío?", 150, [f"{HEADPHONES}.shipping_days"], "5 days"),
    ("do the voltix earbuds come in size m", 150, [], "not sure"),  # no sizes on the sheet: not "M" for a colour
    ("ma fille a 3 ans, le serum de GlowLab c'est vegan ?", 150, [f"{SERUM}.vegan"], "Yes"),
    ("el que tenías hace un momento, es impermeable?", 400, [f"{EARBUDS}.waterproof"], "No"),
    ("what time does the stream finish tonight?", 400, [], "only help with the products"),
    ("will the serum be any cheaper in the summer sales?", 400, [], "not sure"),
    ("is the one before this still in stock or is it gone?", 400, [f"{EARBUDS}.stock"], "12 left"),  # no comparison
])
def test_reader_reads_second_dev_set_kinds(app: AppSpec, question: str, ts: int, cited: list[str], says: str) -> None:
    reply, facts = _answer(app, question, ts)
    assert facts == cited, (question, reply)
    assert says in reply, (question, reply)


@pytest.mark.parametrize("question, ts", [
    ("when will this be restocked?", 400),
    ("is the packaging recyclable?", 400),
    ("wann ist der nächste sale?", 400),       # "sale" is not the price here
    ("Mia what's your favourite colour?", 400),  # chit-chat, though "colour" is a fact
    ("is the fair traed labor thing true for this?", 400),  # a misspelt never-on-the-sheet cue
    ("how many pieces in it", 700),             # not on the serum's sheet
])
def test_reader_says_not_sure_instead_of_a_wrong_fact(app: AppSpec, question: str, ts: int) -> None:
    reply, facts = _answer(app, question, ts)
    assert facts == [] and "not sure" in reply, (question, reply)


def test_english_only_reader_is_the_baseline(app: AppSpec) -> None:
    keyword = Reader(languages=("en",), relative=False, plain=True)
    assert _answer(app, "cuánto cuesta esto?", 400, keyword)[1] == []
    assert _answer(app, "the one before this, is it waterproof?", 400, keyword)[1] == [f"{HEADPHONES}.waterproof"]
    with pytest.raises(ValueError, match="choose from"):
        Reader(languages=("it",))


def test_fold_and_chat_spellings() -> None:
    assert fold("Größe ÉTANCHE cuánto Soooo") == "grosse etanche cuanto soo"
    assert unslang("wat u had b4 this or no5, which 1 is cheaper") == \
        "what you had before this or no 5, which one is cheaper"
    assert unslang("is it ok 4 a 5 yr old") == "is it ok for a 5 year old"


# ------------------------------------------------------------------------------------------------ phrasing packs
def _write_pack(tmp_path: Path, pack: dict[str, Any]) -> Path:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(pack), encoding="utf-8")
    return path


@pytest.mark.parametrize("pack, error", [
    ({"family": "x", "lang": "en", "price": ["how much is {item}?"]}, r"price\[0\].*\['item'\]"),
    ({"family": "x", "lang": "en", "member": {"colours": ["in pink?"]}}, r"lacks \{probe\}"),
    ({"family": "x", "lang": "en", "value": {"colour": ["colours of {ref}?"]}}, "value.colour: unknown fact"),
    ({"family": "x", "lang": "en", "refs": {"ordinal": ["the {ord} one"]}}, "no ordinals"),
    ({"family": "x", "lang": "it"}, "lang"),
    ({"family": "x", "lang": "en", "ordinals": ["uno", "dos"]}, "12"),
])
def test_bad_packs_name_the_field(tmp_path: Path, pack: dict[str, Any], error: str) -> None:
    with pytest.raises(PhrasingError, match=error):
        load_pack(_write_pack(tmp_path, pack))


def test_pack_json_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"family": "x",\n "lang": "en",\n "price": [\n}', encoding="utf-8")
    with pytest.raises(PhrasingError, match=r"p\.json:4"):
        load_pack(path)


def test_shipped_packs_load_and_held_out_wordings_are_not_trained_on() -> None:
    train, held, dev = train_packs(), heldout_packs(), (*dev_packs(), *dev2_packs(), *dev3_packs())
    langs = {"en", "es", "de", "fr"}
    assert {p.lang for p in train} >= langs and {p.lang for p in dev_packs()} >= langs
    assert {p.lang for p in dev2_packs()} >= langs and {p.lang for p in dev3_packs()} >= langs
    trained = {template_key(t) for p in train for _, _, t in p.templates()}
    assert not [t for p in (*held, *dev) for _, _, t in p.templates() if template_key(t) in trained]
    assert len({p.family for p in (*train, *held, *dev)}) == len(train) + len(held) + len(dev)
    # the fifth author's families are training wordings for a student (some of their short wordings are also in
    # the training families); the student's questions leave out any worded like dev3 or held-out ones (test_sft)
    student = dev4_packs()
    assert {p.lang for p in student} >= langs and all(len(p.off_topic) >= 40 for p in student)
    assert not {p.family for p in student} & {p.family for p in (*train, *held, *dev)}
    # the seventh author's families: more training wordings, heavy on chit-chat and on what no sheet says
    more = dev5_packs()
    assert {p.lang for p in more} >= langs and all(len(p.off_topic) >= 60 and len(p.unanswerable) >= 40 for p in more)
    assert not {p.family for p in more} & {p.family for p in (*train, *held, *dev, *student)}
    # the second held-out set: a sixth author's, worded like no training family and like no other set
    held2 = heldout2_packs()
    assert {p.lang for p in held2} >= langs
    every_trained = {template_key(t) for p in (*train, *dev_packs(), *dev2_packs(), *student)
                     for _, _, t in p.templates()}
    assert not [t for p in held2 for _, _, t in p.templates() if template_key(t) in every_trained]
    assert not {p.family for p in held2} & {p.family for p in (*train, *held, *dev, *student)}


def test_world_writes_held_out_questions_worded_only_by_held_out_families(tmp_path: Path) -> None:
    config = LivestreamWorldConfig(streams=6, questions=300, heldout_questions=120, viewers=40)
    counts = generate_livestream_world(config, tmp_path)
    read = lambda path: [Task.model_validate_json(line) for line in path.read_text().splitlines()]  # noqa: E731
    train, dev = read(tmp_path / TASKS_FILE), read(tmp_path / DEV_DIR / TASKS_FILE)
    held_families, dev_families = {p.family for p in heldout_packs()}, {p.family for p in dev_packs()}
    assert counts["dev_tasks"] == 120 and {t.meta["family"] for t in dev} <= dev_families
    assert not {t.meta["family"] for t in train} & (held_families | dev_families)
    assert len({t.meta["family"] for t in train}) >= 5
    logged = (tmp_path / "logs.jsonl").read_text()
    assert not any(t.messages[0].content in logged for t in dev)  # dev questions are not in the logs
    for name, where, prefix, packs in (("dev2", DEV2_DIR, "ls-e-", dev2_packs), ("dev3", DEV3_DIR, "ls-f-", dev3_packs),
                                       ("dev4", DEV4_DIR, "ls-g-", dev4_packs),
                                       ("heldout2", HELDOUT2_DIR, "ls-i-", heldout2_packs)):
        tasks = read(tmp_path / where / TASKS_FILE)
        assert counts[f"{name}_tasks"] == 120 and {t.meta["family"] for t in tasks} <= {p.family for p in packs()}
        assert all(t.task_id.startswith(prefix) for t in tasks), name
        assert not any(t.messages[0].content in logged for t in tasks), name  # nor are theirs
    held = read(tmp_path / HELDOUT_DIR / TASKS_FILE)
    assert counts["heldout_tasks"] == 120 and {t.meta["family"] for t in held} <= held_families
    assert {t.task_id for t in train}.isdisjoint({t.task_id for t in held})
    assert not any(t.messages[0].content in logged for t in held)
