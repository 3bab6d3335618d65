"""The livestream SFT source's counterfactual twins: the note, not the wording alone, decides fact or unknown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from apps.livestream.sft import DROP_SHARE, asked_fact, note_twins
from harness.tasks import Message, Task
from training.sft_data import unit_hash

NOTE = "on screen: #1 Voltix earbuds; facts: price, stock, brand, shipping_days"


def _task(task_id: str, kind: str, template: str) -> Task:
    return Task(task_id=task_id, app="livestream", kind=kind, messages=[Message(role="user", content="?")],
                constraints={"stream_id": "stream-t", "ts_offset_s": 100}, meta={"template": template})


def _user(note: str | None = NOTE) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "how long till it gets here", **({"note": note} if note else {})}]


def _ids(below: bool) -> str:
    """A task id whose twin hash is below (or not below) the drop share."""
    return next(f"q{k}" for k in range(10_000) if (unit_hash(f"twin:q{k}") < DROP_SHARE) == below)


@pytest.mark.parametrize(("template", "fact"), [
    ("unanswerable:warranty_months:2", "warranty_months"),
    ("de/unanswerable:waterproof:0", "waterproof"),
    ("unanswerable:generic:1", None),
    ("question:price:0", None),
    ("", None),
])
def test_asked_fact_reads_the_template(template: str, fact: str | None) -> None:
    assert asked_fact(_task("u", "unanswerable", template)) == fact


def test_an_unanswerable_question_gets_a_twin_whose_note_lists_what_it_asks() -> None:
    task = _task("u1", "unanswerable", "unanswerable:warranty_months:2")
    twins = note_twins(task, _user(), {"item": "this", "fact": "unknown"})
    assert len(twins) == 1
    user, args = twins[0]
    assert args == {"item": "this", "fact": "warranty_months"}
    head, _, listed = user[-1]["note"].rpartition("facts: ")
    assert head == "on screen: #1 Voltix earbuds; "
    assert sorted(listed.split(", ")) == ["brand", "price", "shipping_days", "stock", "warranty_months"]
    assert user[-1]["content"] == "how long till it gets here"
    assert _user()[-1]["note"] == NOTE  # the original example's note is not touched


def test_a_question_in_the_drop_share_gets_a_twin_without_its_fact_that_answers_unknown() -> None:
    user = _user()
    twins = note_twins(_task(_ids(below=True), "question", "question:shipping_days:3"), user,
                       {"item": "this", "fact": "shipping_days"})
    assert twins == [([{**user[0], "note": "on screen: #1 Voltix earbuds; facts: price, stock, brand"}],
                      {"item": "this", "fact": "unknown"})]
    assert user[0]["note"] == NOTE
    assert note_twins(_task(_ids(below=False), "question", "question:shipping_days:3"), user,
                      {"item": "this", "fact": "shipping_days"}) == []


def test_no_twin_without_a_fact_list_or_for_other_kinds() -> None:
    below = _ids(below=True)
    assert note_twins(_task(below, "question", ""), _user(None), {"item": "this", "fact": "price"}) == []
    assert note_twins(_task(below, "question", ""), [], {"item": "this", "fact": "price"}) == []
    # a fact the note does not list, a generic unanswerable question, chat, a comparison: nothing to flip
    assert note_twins(_task(below, "question", ""), _user(), {"item": "this", "fact": "colours"}) == []
    assert note_twins(_task("u", "unanswerable", "unanswerable:generic:0"), _user(), {"fact": "unknown"}) == []
    assert note_twins(_task("u", "unanswerable", "unanswerable:price:0"), _user(), {"fact": "unknown"}) == []
    assert note_twins(_task(below, "off_topic", ""), _user(), {"fact": "chat"}) == []
    assert note_twins(_task(below, "comparison", ""), _user(), {"item": "this", "fact": "price", "versus": "#2"}) == []


def test_pack_template_finds_each_kind_of_template_id() -> None:
    from apps.livestream.phrasings import PhrasingPack, pack_template, template_id

    pack = PhrasingPack(family="x-en", lang="en", price=["px {ref}", "how much"], off_topic=["hi {host}"],
                        value={"brand": ["who makes {ref}", "brand?"]}, bool={"vegan": ["vegan {ref}?"]},
                        unanswerable=["reviews {ref}?"])
    packs = [pack]
    assert pack_template(packs, "x-en/price:price:1") == "how much"
    assert pack_template(packs, "x-en/value:brand:1") == "brand?"
    assert pack_template(packs, "x-en/unanswerable:vegan:0") == "vegan {ref}?"  # asked of a product without it
    assert pack_template(packs, "x-en/unanswerable:generic:0") == "reviews {ref}?"
    assert pack_template(packs, "x-en/off_topic:generic:0") == "hi {host}"
    assert pack_template(packs, template_id(pack, "value", "brand", 0)) == "who makes {ref}"  # the world's ids
    for missing in ("x-en/value:brand:2", "y-en/price:price:0", "x-en/price:price", "price:price:0", ""):
        assert pack_template(packs, missing) is None, missing


def test_student_tasks_leave_out_wordings_of_the_measured_sets(tmp_path: Path) -> None:
    """A dev wording that an author of the held-out set also wrote ("qui a designé {ref} ?" / "qui a designé
    {ref}?") is dropped; its neighbour is kept; bad arguments and stale worlds are errors that say so."""
    from apps.livestream.sft import main, student_tasks

    shared = _task("ls-d-000029", "unanswerable", "dev-fr/unanswerable:generic:4")
    own = _task("ls-d-000001", "question", "dev-de/value:shipping_days:0")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "tasks.jsonl").write_text(f"{shared.model_dump_json()}\n{own.model_dump_json()}\n")
    kept, dropped = student_tasks(tmp_path, ["dev"], ["heldout"])
    assert [t.task_id for t in kept] == ["ls-d-000001"] and dropped == {"dev": 1}
    kept, dropped = student_tasks(tmp_path, ["dev"], ["dev3"])  # no dev3 author wrote it
    assert len(kept) == 2 and not dropped
    with pytest.raises(ValueError, match="both trained on and measured"):
        student_tasks(tmp_path, ["dev", "heldout"])
    with pytest.raises(ValueError, match="unknown question set"):
        student_tasks(tmp_path, ["dev9"])
    with pytest.raises(FileNotFoundError, match="no dev2 questions"):
        student_tasks(tmp_path, ["dev", "dev2"])
    (tmp_path / "dev" / "tasks.jsonl").write_text(_task("t", "question", "dev-de/value:shipping_days:999")
                                                  .model_dump_json() + "\n")
    with pytest.raises(ValueError, match=r"task t: template .* is in no pack"):
        student_tasks(tmp_path, ["dev"])
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path), str(tmp_path / "out"), "--sets", "dev"])
    assert exit_.value.code == 2
