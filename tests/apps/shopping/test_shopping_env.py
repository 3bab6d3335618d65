"""The shopping reward (WebShop-style) on hand-computed cases, the simulated shopper, and one Episode.

Run: .venv/bin/python -m pytest tests/apps/shopping -q
"""

from __future__ import annotations

from typing import Any

import pytest

from apps.shopping.agent import shopping_app
from apps.shopping.env import NUDGE, reward, reward_fn, simulated_user, type_score
from apps.shopping.kit import request
from harness.agent import AgentLoop, Final, ModelAccess
from harness.catalog import Catalog
from harness.env import AppEnv, Episode
from harness.protocol import render_call
from harness.tasks import Task

BOOTS = ["Outdoor", "Footwear", "Hiking boots"]
TENTS = ["Outdoor", "Camping", "Tents"]
BAGS = ["Outdoor", "Camping", "Sleeping bags"]


def _task(kind: str, constraints: dict[str, Any], slots: list[list[str]], target: str = "set", text: str = "hi",
          **extra: Any) -> Task:
    return Task(task_id=f"t-{kind}", app="shopping", kind=kind, messages=[{"role": "user", "content": text}],
                constraints=constraints, target={"kind": target, "slots": slots}, **extra)


EXPLICIT = _task("explicit", {"category": BOOTS, "in_stock": True, "attributes": {
    "brand": "Northpeak", "colour": "black", "material": "leather", "size": "42"}}, [["b1"]], "single")
ATTRIBUTE = _task("attribute", {"category": BOOTS, "attributes": {"colour": "black"}, "features": ["waterproof"],
                                "price_max": 100, "in_stock": True}, [["b1"]])
VAGUE = _task("vague", {"category": ["Outdoor"], "price_max": 50, "in_stock": True}, [["s2"]])
BUNDLE = _task("bundle", {"budget": 200, "slots": [TENTS, BAGS], "in_stock": True}, [["t2", "t1"], ["s1", "s2"]],
               "bundle")


def test_type_score_tiers() -> None:
    assert type_score(BOOTS, BOOTS) == 1.0 and type_score(BOOTS, ["Outdoor"]) == 1.0 and type_score(BOOTS, None) == 1.0
    assert type_score(BAGS, BOOTS) == 0.5 and type_score(["Home", "Kitchen"], BOOTS) == 0.0


@pytest.mark.parametrize(("task", "ids", "want", "success", "hit"), [
    (EXPLICIT, ["b1"], 1.0, True, True),  # 3/3 attributes, size 1/1
    (EXPLICIT, ["b2"], 0.0, False, False),  # another brand, colour, material and size
    (EXPLICIT, ["b3"], 0.0, False, False),  # 2/4 matched, but sold out: it cannot be bought
    (ATTRIBUTE, ["b1"], 1.0, True, True),
    (ATTRIBUTE, ["b2", "b1"], 1 / 3, False, False),  # the first item counts: only the price term of 3 matches
    (ATTRIBUTE, ["s2"], 0.5 * 1 / 3, False, False),  # same top-level category: type 0.5; price ok
    (ATTRIBUTE, ["k1"], 0.0, False, False),  # another kind of product: type 0
    (VAGUE, ["s2"], 1.0, True, True),  # type 1, price 40 <= 50: 1/1
    (VAGUE, ["t2"], 0.0, False, False),  # 60 > 50
])
def test_item_reward_hand_computed(catalog: Catalog, task: Task, ids: list[str], want: float, success: bool,
                                   hit: bool) -> None:
    got = reward(task, Final(reply="", item_ids=ids), catalog)
    assert got.reward == pytest.approx(want)
    assert (got.constraint_success, got.target_hit) == (success, hit)


def test_item_reward_parts_and_misses(catalog: Catalog) -> None:
    got = reward(EXPLICIT, Final(reply="", item_ids=["b3"]), catalog)
    assert (got.r_attributes, got.r_options, got.r_price) == (pytest.approx(1 / 3), 1.0, None)
    assert got.note == "out of stock"
    got = reward(ATTRIBUTE, Final(reply="", item_ids=["b2"]), catalog)
    assert got.parts() == {"r_type": 1.0, "r_attributes": 0.0, "r_options": 0.0, "r_price": 1.0, "target_hit": 0.0}
    assert reward(VAGUE, Final(reply=""), catalog).reward == 0.0
    assert reward(VAGUE, Final(reply="", item_ids=["ghost"]), catalog).note == "unknown item"


@pytest.mark.parametrize(("bundle", "want", "success", "hit"), [
    (["t2", "s1"], 1.0, True, True),  # (1 + 1 + budget 180 <= 200) / 3
    (["s1", "t2"], 1.0, True, True),  # order does not matter: each slot takes the item that fits it
    (["t1", "s1"], 2 / 3, False, True),  # 270 > 200
    (["t2", "b1"], 2.5 / 3, False, False),  # boots in the bag slot: type 0.5; 149.99 fits
    (["t2"], 1 / 3, False, False),  # a slot left empty: no budget credit
    (["t2", "b3"], 1 / 3, False, False),  # a sold-out item fills nothing
])
def test_bundle_reward_hand_computed(catalog: Catalog, bundle: list[str], want: float, success: bool,
                                     hit: bool) -> None:
    got = reward(BUNDLE, Final(reply="", bundles=[bundle]), catalog)
    assert got.reward == pytest.approx(want)
    assert (got.constraint_success, got.target_hit) == (success, hit)


def test_bundle_reward_reads_item_ids_without_bundles(catalog: Catalog) -> None:
    assert reward(BUNDLE, Final(reply="", item_ids=["t2", "s1"]), catalog).reward == 1.0
    assert reward(BUNDLE, Final(reply=""), catalog).reward == 0.0


MULTI = _task("multi_turn", {"category": BOOTS, "attributes": {"colour": "black", "brand": "Northpeak"},
                             "price_max": 95, "in_stock": True}, [["b1"]],
              hidden={"attributes": {"colour": "black", "brand": "Northpeak"}, "price_max": 95},
              meta={"clarify": ["colour", "brand", "price_max"]}, text="I need hiking boots")


def test_simulated_user_answers_questions_from_the_hidden_constraints() -> None:
    assert simulated_user(MULTI, "Which colour and brand would you like?") == \
        "I'd like it in black, from Northpeak, under $95."
    assert simulated_user(MULTI, "Here are some boots.") == NUDGE
    assert simulated_user(VAGUE, "Any colour?") == "No preference. " + NUDGE


def test_env_episode_clarify_search_respond(catalog: Catalog, scripted: Any) -> None:
    engine = scripted([render_call("ask_user", {"question": "Which colour and brand, and your budget?"}),
                       render_call("search_catalog", {"query": "black Northpeak boots", "price_max": 95}),
                       render_call("respond", {"text": "These fit.", "item_ids": ["b1"]})])
    env = AppEnv(shopping_app(catalog, max_steps=4), reward_fn(catalog), simulated_user, request)
    loop = AgentLoop(env.spec, ModelAccess(engine=engine, tokenizer=engine.tokenizer))
    result = Episode(env, loop, MULTI).run()
    assert result.user_replies == ["I'd like it in black, from Northpeak, under $95."]
    assert {"role": "user", "content": "I'd like it in black, from Northpeak, under $95."} in result.session.messages
    assert len(engine.calls) == 3 and len(result.turns) == 2 and not result.degraded
    assert result.end == "answered" and result.reward.value == 1.0 and result.reward.success
