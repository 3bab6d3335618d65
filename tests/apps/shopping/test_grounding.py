"""Argument grounding and the compact protocol's tools (find, find_bundle) and plan, on the hand-made catalog.

Run: .venv/bin/python -m pytest tests/apps/shopping/test_grounding.py -q
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from apps.shopping.agent import PLAN_PROMPT, shopping_app
from apps.shopping.grounding import Lexicon, category_names, ceiling, ground_budget, ground_find, prices
from apps.shopping.plan import find_arguments, plan_call, plan_teacher
from apps.shopping.sft import plan_examples
from harness.agent import Final, TurnContext
from harness.budget import Budget
from harness.catalog import Catalog
from harness.protocol import ToolCall, parse_reply
from harness.session import SessionState
from harness.tasks import Task
from training.sft_data import TrajectorySpec

LEX = Lexicon.of({"brand": ["Nova", "Aurora Home"], "colour": ["navy", "red"], "material": ["cotton", "organic cotton"],
                  "size": ["M", "42", "65L", "large"], "feature": ["waterproof"]})


# ------------------------------------------------------------------------------------------------ grounding
@pytest.mark.parametrize(("text", "want"), [
    ("a navy crib mattress from Nova, the organic cotton one",
     {"colour": ["navy"], "brand": ["nova"], "material": ["organic cotton"]}),   # longest value wins its words
    ("Aurora Home mugs in red or navy", {"brand": ["aurora home"], "colour": ["red", "navy"]}),  # first said first
    ("I'm after a large 65L pack, size M", {"size": ["large", "65l", "m"]}),
    ("I'm 42 and like Redfern cottons", {}),  # no "size" cue before 42 or M; no whole-word red or cotton
])
def test_mentions_are_whole_catalog_values(text: str, want: dict[str, list[str]]) -> None:
    assert LEX.mentions(text) == want


@pytest.mark.parametrize(("text", "want"), [
    ("white pine sofa under 180", [180.0]),
    ("any gas grill below $155?", [155.0]),
    ("boots in size 42 for no more than $89.50.", [89.5]),
    ("between 50 and 100 dollars", [50.0, 100.0]),
    ("a 65L pack", []),
    ("a present for a 7 year old for less than $35", [35.0]),  # an age, a count, a measure: no price
    ("a tent for 4 people, 2 kg at most, under 300", [300.0]),
    ("a 10000 mAh power bank for 40", [40.0]),
])
def test_prices_are_numbers_that_are_not_sizes(text: str, want: list[float]) -> None:
    assert prices(text, LEX.mentions(text).get("size", [])) == want


@pytest.mark.parametrize(("text", "want"), [
    ("office supplies (max 205 bucks)", 205.0),
    ("2 mugs under 30", 30.0),             # the number after the cue, not the count
    ("budget of $700 for 3 things", 700.0),
    ("I can spend about 450", 450.0),
    ("50 tops", 50.0),                     # the one number, a cue elsewhere
    ("between 50 and 100", None),          # no cue
    ("2 mugs and 3 plates", None),
])
def test_ceiling_is_the_number_after_a_cue(text: str, want: float | None) -> None:
    assert ceiling(text) == want


def test_ground_find_keeps_what_was_said_and_fixes_the_rest() -> None:
    text = "a navy crib mattress from Nova, the organic cotton one, under 300"
    args = {"category": "Crib mattress", "brand": "Granite", "colour": "navy", "material": "cotton", "size": "XL",
            "price_max": 30}
    got, changes = ground_find(args, text, LEX)
    assert got == {"category": "Crib mattress", "brand": "nova", "colour": "navy", "material": "organic cotton",
                   "size": None, "price_max": 300.0}
    assert changes == {"brand": "replaced", "material": "replaced", "size": "dropped", "price_max": "replaced"}
    # a right call is left alone; a ceiling the model left out is added only after a ceiling cue
    right = {"category": "Crib mattress", "colour": "navy", "brand": "Nova", "material": "organic cotton",
             "price_max": 300}
    assert ground_find(right, text, LEX) == (right, {})
    assert ground_find({}, "a red one, 2 of them", LEX) == ({"colour": "red"}, {"colour": "added"})
    assert ground_find({}, "a red one, max 40", LEX)[0] == {"colour": "red", "price_max": 40.0}
    # two numbers and a wrong bound: nothing to choose by, so the bound goes
    assert ground_find({"price_min": 5}, "between 50 and 100", LEX) == ({"price_min": None}, {"price_min": "dropped"})
    # an age is no price: the ceiling is the number after the cue, added or put in place of the model's 7
    present = "a present for a 7 year old for less than $35"
    assert ground_find({}, present, LEX) == ({"price_max": 35.0}, {"price_max": "added"})
    assert ground_find({"price_max": 7}, present, LEX) == ({"price_max": 35.0}, {"price_max": "replaced"})
    assert ground_find({"price_max": 3}, "2 mugs under 30 or 40", LEX)[0] == {"price_max": 30.0}


def test_ground_budget() -> None:
    assert ground_budget(300.0, "stuff for our new puppy, about 300", LEX) == (300.0, None)
    assert ground_budget(30.0, "stuff for our new puppy, about 300", LEX) == (300.0, "replaced")
    assert ground_budget(30.0, "stuff for our new puppy", LEX) == (None, "dropped")
    assert ground_budget(30.0, "things for 2 kids, I can spend about 250", LEX) == (250.0, "replaced")
    # the model wrote no budget: the words' is added, and words without one leave none
    assert ground_budget(None, "stuff for our new puppy, about 300", LEX) == (300.0, "added")
    assert ground_budget(None, "stuff for our new puppy", LEX) == (None, "dropped")


# ------------------------------------------------------------------------------------------------ the tools
def _run(catalog: Catalog, user: str, name: str, **arguments: Any) -> Final:
    app = shopping_app(catalog)
    session = SessionState(app="shopping", messages=[{"role": "user", "content": user}])
    ctx = TurnContext(app=app, session=session, constraints={}, budget=Budget(5000), model=None)
    result = app.tools.execute(ToolCall(name=name, arguments=arguments), ctx)
    assert result.ok, result.error
    assert isinstance(result.content, Final)
    return result.content


def test_find_orders_a_named_category_by_rating_and_skips_sold_out(catalog: Catalog) -> None:
    final = _run(catalog, "I need hiking boots", "find", category="Hiking boots")
    assert final.item_ids == ["b1", "b2"] and not final.data  # b3 (4.9) is sold out; 4.6 before 4.1
    # a first message naming only a kind of product: the results come with a question about what matters
    assert final.actions[-1]["type"] == "ask_user" and final.reply.endswith("what is your budget?")
    said_more = _run(catalog, "I need hiking boots under 100", "find", category="Hiking boots", price_max=100)
    assert said_more.item_ids == ["b1", "b2"] and [a["type"] for a in said_more.actions] == ["show_items"]


def test_category_names_come_from_the_titles() -> None:
    titles = {"Hiking boots": ["Nova hiking boots red", "Trekking boots by Nova", "Nova trekking boots",
                               "Hiking boots, blue"],
              "Ankle boots": ["Nova ankle boots", "Ankle boots in red", "Top ankle boots", "Ankle boots by Nova"],
              "Tent": ["Camping tent blue", "Nova tent", "Tent red", "Top tent"]}
    names = category_names(titles, ["Nova", "red", "blue"], min_share=0.5)
    # "boots" is in both boot leaves (precision 0.5); "by", "nova", colours and "top" (3 letters) name nothing
    assert names == {"Hiking boots": ["hiking", "hiking boots", "trekking", "trekking boots"],
                     "Ankle boots": ["ankle", "ankle boots"],
                     "Tent": ["tent"]}
    lex = Lexicon.of({"colour": ["red"]}, names)
    assert lex.mentions("red trekking boots or tents") == {"category": ["Hiking boots", "Tent"], "colour": ["red"]}
    # a department's name is never a leaf's: "office" in office-chair titles names the Office department
    chairs = {"Office chair": ["Vantage office chair", "Office chair red", "Kestrel office chair"],
              "Stapler": ["Nova stapler", "Stapler red"]}
    assert category_names(chairs, ["Nova", "Vantage", "Kestrel", "red"], min_share=0.5, reserved=["Office"]) \
        == {"Office chair": ["chair", "office chair"], "Stapler": ["stapler"]}


def test_find_grounds_the_category_in_the_words(catalog: Catalog) -> None:
    final = _run(catalog, "a green tent please", "find", category="Hiking boots")
    assert final.item_ids == ["t1"] and final.data["grounded"] == {"category": "replaced", "colour": "added"}
    narrowed = _run(catalog, "a green tent please", "find", category="Outdoor", colour="green")
    assert narrowed.item_ids == ["t1"] and narrowed.data["grounded"] == {"category": "narrowed"}
    vague = _run(catalog, "something for camping", "find", category="Camping")  # no leaf named: the model's
    assert vague.item_ids == ["s1", "t1", "s2", "t2"] and not vague.data


def test_find_grounds_its_filters_in_the_words(catalog: Catalog) -> None:
    # the model's colour was never said; "waterproof" and the ceiling were: b1 is the one in-stock match
    final = _run(catalog, "waterproof hiking boots under 100", "find", category="Hiking boots", colour="red")
    assert final.item_ids == ["b1"]
    assert final.data["grounded"] == {"colour": "dropped", "feature": "added", "price_max": "added"}


def test_find_relaxes_the_least_stated_filter_first(catalog: Catalog) -> None:
    # black + suede matches nothing (b1 black leather, b2 brown suede): the material goes first
    final = _run(catalog, "black suede hiking boots", "find", category="Hiking boots", colour="black",
                 material="suede")
    assert final.item_ids == ["b1"] and final.data["relaxed"] == ["material"]


def test_a_question_needs_a_named_kind_of_product(catalog: Catalog) -> None:
    asked = _run(catalog, "I need hiking boots", "ask_user", question="Which colour?")
    assert asked.reply == "Which colour?" and asked.actions == [{"type": "ask_user"}] and not asked.item_ids
    # nothing named: a question about colour helps nobody, the best matches by meaning do
    shown = _run(catalog, "something for a night in the woods", "ask_user", question="Which colour?")
    assert shown.item_ids and shown.data["grounded"]["ask_user"] == "replaced"
    assert all(catalog[i].category_path[0] == "Outdoor" for i in shown.item_ids)


def test_find_bundle_uses_the_stated_budget(catalog: Catalog) -> None:
    # within 200: t2 (60, 3.9) + s1 (120, 4.8) = 8.7 beats t1 (150, 4.5) + s2 (40, 4.0) = 8.5
    final = _run(catalog, "a tent and a sleeping bag for 200", "find_bundle", slots=["Tents", "Sleeping bags"],
                 budget=999)
    assert final.bundles == [["t2", "s1"]] and final.data == {"grounded": {"budget": "replaced"}}
    assert "200" in final.reply


# ------------------------------------------------------------------------------------------------ the plan
def _task(kind: str, text: str, constraints: dict[str, Any], hidden: dict[str, Any] | None = None,
          meta: dict[str, Any] | None = None) -> Task:
    return Task.model_validate({"task_id": f"t-{kind}", "app": "shopping", "kind": kind,
                                "messages": [{"role": "user", "content": text}], "constraints": constraints,
                                "hidden": hidden or {}, "target": {"kind": "set", "slots": [["b1"]]},
                                "meta": meta or {}})


def test_plan_call_reads_the_answer_key() -> None:
    c = {"category": ["Outdoor", "Footwear", "Hiking boots"], "attributes": {"colour": "black", "brand": "Nova"},
         "features": ["waterproof"], "price_max": 100.0, "in_stock": True}
    assert find_arguments(c) == {"category": "Hiking boots", "brand": "Nova", "colour": "black",
                                 "feature": "waterproof", "price_max": 100}
    explicit = _task("explicit", "black Nova waterproof hiking boots under 100", c)
    assert plan_call(explicit, asked=False) == ("find", find_arguments(c))
    multi = _task("multi_turn", "I need hiking boots", c, hidden={"attributes": {"colour": "black"}},
                  meta={"clarify": ["colour"]})
    assert plan_call(multi, asked=False) == ("ask_user", {"question": "Happy to help! Which colour would you like?"})
    assert plan_call(multi, asked=True)[0] == "find"
    bundle = _task("bundle", "a tent and a bag for 200", {"slots": [["Outdoor", "Camping", "Tents"],
                                                                    ["Outdoor", "Camping", "Sleeping bags"]],
                                                          "budget": 200.0})
    assert plan_call(bundle, asked=False) == ("find_bundle", {"slots": ["Tents", "Sleeping bags"], "budget": 200})


def test_plan_examples_are_the_served_conversation_and_the_teacher_agrees() -> None:
    c = {"category": ["Outdoor", "Footwear", "Hiking boots"], "attributes": {"colour": "black"}, "in_stock": True}
    multi = _task("multi_turn", "I need hiking boots", c, hidden={"attributes": {"colour": "black"}},
                  meta={"clarify": ["colour"]})
    [ex] = plan_examples([multi], TrajectorySpec.of(PLAN_PROMPT, []))
    roles = [m["role"] for m in ex.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert ex.messages[0]["content"] == PLAN_PROMPT and ex.messages[4]["weight"] == 0  # the question text
    assert ex.messages[5]["content"] == "I'd like it in black."  # the simulated shopper's answer
    [first] = ex.messages[2]["tool_calls"]
    assert first["function"]["name"] == "ask_user"
    [last] = ex.messages[6]["tool_calls"]
    assert last["function"]["name"] == "find"
    assert json.loads(last["function"]["arguments"]) == {"category": "Hiking boots", "colour": "black"}
    # the cascade's teacher writes the same call as the model would, parsed back by the protocol
    episode = type("E", (), {"task": multi, "session": SessionState(app="shopping", messages=[])})()
    reply = parse_reply(plan_teacher(episode, None))  # type: ignore[arg-type]
    assert [(c.name, c.arguments) for c in reply.calls] == [("ask_user", {
        "question": "Happy to help! Which colour would you like?"})]
