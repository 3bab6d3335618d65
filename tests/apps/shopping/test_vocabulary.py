"""The shoppers' vocabulary learnt from training tasks and logged searches, and the index grounding with it.

Run: .venv/bin/python -m pytest tests/apps/shopping/test_vocabulary.py -q
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from apps.shopping.agent import ShoppingIndex, shopping_app
from apps.shopping.grounding import NearestDepartment, Precedents, TopCategories
from apps.shopping.vocabulary import Vocabulary, VocabularyError, learn, searches
from data_curation.records import Event, Session
from harness.agent import Final, TurnContext
from harness.budget import Budget
from harness.catalog import Catalog
from harness.protocol import ToolCall
from harness.session import SessionState
from harness.tasks import Task
from tests.apps.shopping.conftest import BAGS, BOOTS, TENTS


def _task(n: int, text: str, category: list[str], kind: str = "attribute") -> Task:
    return Task.model_validate({"task_id": f"t{n}", "app": "shopping", "kind": kind,
                                "messages": [{"role": "user", "content": text}],
                                "constraints": {"category": category, "in_stock": True},
                                "target": {"kind": "set", "slots": [["b1"]]}})


TASKS = [
    _task(1, "any trail shoes below $90?", BOOTS),
    _task(2, "Looking for black trail shoes, size 42.", BOOTS),
    _task(3, "cheap gear under 50", BOOTS),            # "cheap gear" is said for boots and tents: no name
    _task(4, "cheap gear for camping", TENTS),
    _task(5, "a shelter", TENTS),                      # once only: too little support
    _task(6, "something for a night under the stars", ["Outdoor"], "vague"),
    _task(7, "a tent for the weekend", ["Outdoor"], "vague"),
    Task.model_validate({"task_id": "t8", "app": "shopping", "kind": "bundle",
                         "messages": [{"role": "user", "content": "all for a night out, about 300"}],
                         "constraints": {"slots": [TENTS, BAGS], "budget": 300.0, "in_stock": True},
                         "target": {"kind": "bundle", "slots": [["t1"], ["s1"]]}}),
]


def _session(n: int, *events: tuple[str, str]) -> Session:
    return Session(session_id=f"s{n}", user_id="u", started_at=0.0, events=[
        Event(type="search", ts=float(i), query=v) if kind == "search" else Event(type=kind, ts=float(i), item_id=v)
        for i, (kind, v) in enumerate(events)])


def test_searches_pair_a_query_with_the_leaf_of_what_followed(catalog: Catalog) -> None:
    sessions = [
        _session(1, ("search", "trail runners"), ("view", "t1"), ("click", "b1"), ("cart", "b2"),
                 ("search", "tent"), ("click", "t1")),
        _session(2, ("search", "outdoor stuff"), ("click", "b1"), ("click", "t1")),  # split: no leaf
        _session(3, ("search", "nothing clicked"), ("view", "b1")),
    ]
    assert searches(sessions, catalog) == [("trail runners", BOOTS), ("tent", TENTS)]


def test_learn_keeps_pure_phrase_end_names_and_meaning_examples(catalog: Catalog) -> None:
    index = ShoppingIndex.build(catalog)
    vocab = learn(TASKS, index.lexicon, index.paths)
    # "trail shoes" ends a phrase in two boots requests and nowhere else ("shoes" alone: one word)
    assert vocab.leaf_names == {"Hiking boots": ["trail shoes"]}
    assert vocab.top_examples == {"Outdoor": ["something for a night under the stars", "a tent for the weekend"]}
    assert vocab.bundles == [("all for a night out, about 300", ["Tents", "Sleeping bags"])]
    # a logged search adds support: "walking shoes" ends two boots phrases; of names holding one another
    # the shortest ("trail shoes", not "any trail shoes")
    more = learn(TASKS, index.lexicon, index.paths, [("walking shoes", BOOTS), ("walking shoes, size 42", BOOTS)])
    assert more.leaf_names == {"Hiking boots": ["trail shoes", "walking shoes"]}
    assert learn(TASKS, index.lexicon, index.paths, min_support=3).leaf_names == {}


def test_vocabulary_round_trip_and_bad_files(tmp_path: Path) -> None:
    vocab = Vocabulary(leaf_names={"Hiking boots": ["trail shoes"]}, top_examples={"Outdoor": ["a night out"]},
                       bundles=[("camping kit", ["Tents", "Sleeping bags"])])
    path = tmp_path / "vocabulary.json"
    path.write_text(vocab.to_json())
    assert Vocabulary.load(path) == vocab
    path.write_text('{"format": "sidekick.shopping.vocabulary/1", "bundles": [["camping kit", []]]}')
    with pytest.raises(VocabularyError, match="field 'bundles'"):
        Vocabulary.load(path)
    path.write_text('{"format": "sidekick.shopping.vocabulary/1", "leaf_names": {"Hiking boots": "trail"}}')
    with pytest.raises(VocabularyError, match=r"vocabulary.json: field 'leaf_names'"):
        Vocabulary.load(path)
    path.write_text("{not json")
    with pytest.raises(VocabularyError, match="cannot read"):
        Vocabulary.load(path)
    path.write_text('{"format": "other"}')
    with pytest.raises(VocabularyError, match="format 'other'"):
        Vocabulary.load(path)


def _find(app: Any, text: str, **arguments: Any) -> Final:
    session = SessionState(app="shopping", messages=[{"role": "user", "content": text}])
    ctx = TurnContext(app=app, session=session, constraints={}, budget=Budget(5000), model=None)
    result = app.tools.execute(ToolCall(name="find", arguments=arguments), ctx)
    assert result.ok, result.error
    assert isinstance(result.content, Final)
    return result.content


def test_an_adopted_vocabulary_grounds_find(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    import apps.shopping.agent as agent

    monkeypatch.setattr(agent, "SEMANTIC_CATEGORIES", False)  # the words alone
    app = shopping_app(catalog)
    before = _find(app, "any trail shoes under 100", category="Tents")
    assert before.item_ids == ["t2"] and "category" not in before.data["grounded"]  # the model's tent stands
    app.resources.adopt(Vocabulary(leaf_names={"Hiking boots": ["trail shoes"]}))
    after = _find(app, "any trail shoes under 100", category="Tents")
    assert after.item_ids == ["b1", "b2"] and after.data["grounded"]["category"] == "replaced"
    app.resources.adopt(None)
    assert _find(app, "any trail shoes under 100", category="Tents").item_ids == ["t2"]


class WordCounts:
    """A sentence encoder over five words (counts, L2-normalised): prototypes computable by hand."""

    WORDS = ("stars", "night", "boots", "knife", "kitchen")

    def encode(self, texts: list[str]) -> np.ndarray:
        rows = np.array([[re.findall(r"[a-z]+", t.lower()).count(w) for w in self.WORDS] for t in texts], np.float32)
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def test_meaning_examples_join_the_department_prototype() -> None:
    leaves = {"Outdoor": ["boots"], "Home": ["knife"]}
    plain = TopCategories(leaves, WordCounts)
    # "night stars" shares no word with either department's names: both cosines are 0, the first name wins
    assert plain("night stars") == "Home"
    taught = TopCategories(leaves, WordCounts, {"Outdoor": ["stars at night"], "Home": ["kitchen"]})
    # Outdoor's prototype = (boots) + (stars + night)/sqrt(2), normalised: cosine with the query 1/sqrt(2)
    assert taught("night stars") == "Outdoor"
    assert taught("a kitchen knife") == "Home"


def test_precedents_answer_with_the_closest_request_above_the_bar() -> None:
    pairs = [("stars at night, 200", ["Tents", "Sleeping bags"]), ("a kitchen knife", ["Knives"])]
    near = Precedents(pairs, WordCounts, min_similarity=0.45)
    assert near("night under the stars for 300") == (["Tents", "Sleeping bags"], pytest.approx(1.0))
    # "boots night": cosine 1/2 with the first (one shared word of two, each side): above the bar
    assert near("boots night") == (["Tents", "Sleeping bags"], pytest.approx(0.5))
    assert near("boots") is None and near("  ") is None


def test_find_bundle_takes_the_slots_of_a_close_training_bundle(catalog: Catalog,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import apps.shopping.agent as agent

    monkeypatch.setattr(agent, "_text_encoder", WordCounts)
    monkeypatch.setattr(agent, "SEMANTIC_SLOTS", False)  # a new theme keeps the model's slots
    app = shopping_app(catalog)
    session = SessionState(app="shopping", messages=[{"role": "user", "content": "stars at night stuff, 300"}])
    ctx = TurnContext(app=app, session=session, constraints={}, budget=Budget(5000), model=None)
    call = ToolCall(name="find_bundle", arguments={"slots": ["Hiking boots"], "budget": 300})
    plain = app.tools.execute(call, ctx).content
    assert isinstance(plain, Final) and [len(b) for b in plain.bundles] == [1] and not plain.data
    app.resources.adopt(Vocabulary(bundles=[("a night under the stars", ["Tents", "Sleeping bags"])]))
    taught = app.tools.execute(call, ctx).content
    assert isinstance(taught, Final) and taught.data == {"grounded": {"slots": "learnt"}}
    assert [catalog[i].category_path for i in taught.bundles[0]] == [TENTS, BAGS]
    # slots the words name win over both ("boots and a knife": two leaves named)
    ctx.session.messages[0]["content"] = "boots and a knife, 300"
    named = app.tools.execute(call, ctx).content
    assert isinstance(named, Final) and named.data == {"grounded": {"slots": "words"}}
    assert {catalog[i].category_path[-1] for i in named.bundles[0]} == {"Hiking boots", "Knives"}


def test_nearest_department_is_chosen_by_its_name_and_leaves_and_ranks_its_leaves() -> None:
    near = NearestDepartment({"Outdoor > Camping": ["Stars lamp", "Night bag"],
                              "Home > Kitchen": ["Knife", "Kitchen board"],
                              "Shoes": ["Boots"]}, WordCounts)  # one leaf: no bundle
    assert near.names == ["Outdoor > Camping", "Home > Kitchen"]
    # "Kitchen: Knife, Kitchen board" = (knife + 2 kitchen)/sqrt(5); the query (knife + 2 kitchen)/sqrt(5): cosine 1,
    # Camping's (stars + night)/sqrt(2) 0. Leaves: Kitchen board 2/sqrt(5) = 0.894 > Knife 1/sqrt(5) = 0.447
    assert near("kitchen kitchen knife for 40") == ("Home > Kitchen", ["Kitchen board", "Knife"])
    # "night": Camping's cosine 1/sqrt(2); Night bag 1 > Stars lamp 0
    assert near("a night out, 300") == ("Outdoor > Camping", ["Night bag", "Stars lamp"])
    # "knife": Knife 1 and Kitchen board 0 (the bare name "Kitchen" alone is not what ranks the leaves)
    assert NearestDepartment(near.departments, WordCounts, max_slots=1)("a knife") == ("Home > Kitchen", ["Knife"])
    assert near("  ") is None and NearestDepartment({"Shoes": ["Boots"]}, WordCounts)("boots") is None


def test_find_bundle_takes_a_new_themes_department_as_slots(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    import apps.shopping.agent as agent

    monkeypatch.setattr(agent, "_text_encoder", WordCounts)
    app = shopping_app(catalog)
    session = SessionState(app="shopping", messages=[{"role": "user", "content": "all for a night out, 300"}])
    ctx = TurnContext(app=app, session=session, constraints={}, budget=Budget(5000), model=None)
    call = ToolCall(name="find_bundle", arguments={"slots": ["Hiking boots", "Knives"], "budget": 300})
    out = app.tools.execute(call, ctx).content
    # no training theme is close (no vocabulary): the one department with two leaves, Outdoor > Camping
    assert isinstance(out, Final) and out.data == {"grounded": {"slots": "semantic"}}
    assert sorted(catalog[i].category_path[-1] for i in out.bundles[0]) == ["Sleeping bags", "Tents"]
    # a broken call that still names find_bundle (RL-drifted tiny models write these): salvaged, then grounded
    from harness.protocol import parse_reply, salvage_call

    broken = ('<tool_call>{"name": "find_bundle", "arguments": {"slots": ["Hiking boots", "feature": "x", '
              '"price_max": 20}}</tool_call>')
    problem = parse_reply(broken).problems[0]
    salvaged = salvage_call(problem, app.tools)
    assert salvaged is not None and (salvaged.name, salvaged.arguments) == ("find_bundle", {"slots": ["Hiking boots"]})
    ctx.session.messages[0]["content"] = "all for a night out"  # and no budget anywhere: the best rated set
    free = app.tools.execute(salvaged, ctx).content
    assert isinstance(free, Final) and free.data == {"grounded": {"slots": "semantic"}}
    # best rated: tent t1 (4.5, 150.00) and sleeping bag s1 (4.8, 120.00)
    assert sorted(free.bundles[0]) == ["s1", "t1"] and "total 270.00" in free.reply
    ctx.session.messages[0]["content"] = "all for a night out, 200 max"
    capped = app.tools.execute(salvaged, ctx).content
    assert isinstance(capped, Final) and capped.data == {"grounded": {"slots": "semantic", "budget": "added"}}
    # within 200 (t1 + s1 = 270 is not): t2 + s1 (3.9 + 4.8 = 8.7, 180.00) beats t1 + s2 (4.5 + 4.0 = 8.5, 190.00)
    assert sorted(capped.bundles[0]) == ["s1", "t2"] and "budget of 200 (total 180.00)" in capped.reply
    ctx.session.messages[0]["content"] = "all for a night out, 300"
    monkeypatch.setattr(agent, "SEMANTIC_SLOTS", False)
    kept = app.tools.execute(call, ctx).content
    assert isinstance(kept, Final) and not kept.data
    assert sorted(catalog[i].category_path[-1] for i in kept.bundles[0]) == ["Hiking boots", "Knives"]


def test_a_broken_vocabulary_is_a_broken_agent_directory(catalog: Catalog, tmp_path: Path) -> None:
    from types import SimpleNamespace

    from apps.shopping import kit
    from apps.shopping.env import reward_fn, simulated_user
    from harness.agent_dir import ModelError
    from harness.env import AppEnv

    (tmp_path / "vocabulary.json").write_text('{"format": "x"')
    app = AppEnv(shopping_app(catalog), reward_fn(catalog), simulated_user, kit.request)
    with pytest.raises(ModelError, match=r"vocabulary.json: cannot read the vocabulary"):
        kit.sid(app, SimpleNamespace(path=tmp_path))
