"""The shopping agent's tools, fallback and a full AgentLoop turn, on a hand-made catalog.

Run: .venv/bin/python -m pytest tests/apps/shopping -q
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from apps.shopping.agent import ShoppingIndex, fallback, fill_bundle, ids_in_text, shopping_app, sid_resources
from harness.agent import AgentLoop, AppSpec, Final, ModelAccess, TurnContext
from harness.budget import Budget
from harness.catalog import Catalog
from harness.protocol import ToolCall, ToolResult, render_call
from harness.session import SessionState
from sid.codebook import SidMap
from sid.decoding import VllmSidLogitsProcessor
from sid.tokens import SidTokenMap

BOOTS = ["Outdoor", "Footwear", "Hiking boots"]


def _ctx(app: AppSpec, *, model: ModelAccess | None = None, constraints: dict[str, Any] | None = None,
         user: str = "I need hiking boots") -> TurnContext:
    session = SessionState(app="shopping", messages=[{"role": "user", "content": user}])
    return TurnContext(app=app, session=session, constraints=constraints or {}, budget=Budget(5000), model=model)


def _call(ctx: TurnContext, name: str, **arguments: Any) -> ToolResult:
    return ctx.app.tools.execute(ToolCall(name=name, arguments=arguments), ctx)


def _ids(result: ToolResult) -> list[str]:
    assert result.ok, result.error
    return [card["item_id"] for card in result.content["items"]]


# ------------------------------------------------------------------------------------------------ search
def test_search_filters_by_stock_price_and_category(catalog: Catalog) -> None:
    ctx = _ctx(shopping_app(catalog))
    assert set(_ids(_call(ctx, "search_catalog", query="hiking boots"))) == {"b1", "b2"}  # b3 is sold out
    assert set(_ids(_call(ctx, "search_catalog", query="hiking boots", in_stock=False))) == {"b1", "b2", "b3"}
    assert _ids(_call(ctx, "search_catalog", query="hiking boots", price_max=70)) == ["b2"]
    assert set(_ids(_call(ctx, "search_catalog", query="boots", price_min=70, in_stock=False))) == {"b1", "b3"}
    assert _ids(_call(ctx, "search_catalog", query="green tent", category=["outdoor", "camping"], k=1)) == ["t1"]
    assert _ids(_call(ctx, "search_catalog", query="red", category=["Sleeping bags"])) == ["s2"]  # a part of a path
    card = _call(ctx, "search_catalog", query="black waterproof").content["items"][0]
    assert card["item_id"] == "b1" and card["price"] == 89.99 and card["category"] == " > ".join(BOOTS)
    assert "waterproof" in card["attrs"] and "description" not in card


def test_search_with_no_word_match_gives_the_top_rated_under_a_category(catalog: Catalog) -> None:
    ctx = _ctx(shopping_app(catalog))
    result = _call(ctx, "search_catalog", query="something nice", category=["Outdoor", "Camping"])
    assert _ids(result) == ["s1", "t1", "s2", "t2"] and "top rated" in result.content["note"]


@pytest.mark.parametrize(("arguments", "error"), [
    ({"query": "sandals"}, "no items match"),
    ({"query": "boots", "category": ["Garden"]}, "top-level categories: Home, Outdoor"),
    ({"query": "boots", "colour": "red"}, "field 'colour'"),
    ({"query": "boots", "k": 50}, "field 'k'"),
])
def test_search_errors_are_results(catalog: Catalog, arguments: dict[str, Any], error: str) -> None:
    result = _call(_ctx(shopping_app(catalog)), "search_catalog", **arguments)
    assert not result.ok and error in (result.error or "")


# ------------------------------------------------------------------------------------------------ items, ranking
def test_get_item_and_unknown_ids(catalog: Catalog) -> None:
    ctx = _ctx(shopping_app(catalog))
    got = _call(ctx, "get_item", item_id="b3")
    assert got.ok and got.content["stock"] == 0 and got.content["in_stock"] is False
    assert got.content["attributes"]["material"] == "leather"
    missing = _call(ctx, "get_item", item_id="nope")
    assert not missing.ok and "unknown item id 'nope'" in (missing.error or "")


def test_rank_without_a_model_orders_by_rating(catalog: Catalog) -> None:
    ctx = _ctx(shopping_app(catalog))
    result = _call(ctx, "rank", item_ids=["t2", "k1", "ghost", "s1", "b1"])
    assert _ids(result) == ["s1", "b1", "t2", "k1"]  # unrated k1 last
    assert result.content["ranked_by"] == "rating" and result.content["unknown"] == ["ghost"]
    assert not _call(ctx, "rank", item_ids=["ghost"]).ok


def test_rank_by_the_model_drops_unknown_ids_and_appends_missing_ones(catalog: Catalog, scripted: Any) -> None:
    engine = scripted(["The best is s2, then b1; also zz9 and b"])
    ctx = _ctx(shopping_app(catalog), model=ModelAccess(engine, engine.tokenizer))
    result = _call(ctx, "rank", item_ids=["b1", "b2", "s2", "t1"], query="warm and dry")
    assert _ids(result) == ["s2", "b1", "b2", "t1"] and result.content["ranked_by"] == "model"
    assert len(engine.calls) == 1 and engine.calls[0].params.temperature == 0


def test_ids_in_text_needs_whole_ids() -> None:
    assert ids_in_text("sku-10 first, then sku-1.", ["sku-1", "sku-10", "sku-2"]) == ["sku-10", "sku-1"]


# ------------------------------------------------------------------------------------------------ bundles
def test_bundle_maximises_rating_within_the_budget(catalog: Catalog) -> None:
    ctx = _ctx(shopping_app(catalog))
    # within 200: t1+s2 = 190 (rating 8.5), t2+s1 = 180 (8.7), t2+s2 = 100 (7.9); t1+s1 = 270 is over
    result = _call(ctx, "bundle", slots=[["Tents"], ["Sleeping bags"]], budget=200)
    assert _ids(result) == ["t2", "s1"] and result.content["total"] == 180.0
    assert _ids(_call(ctx, "bundle", slots=[["Tents"], ["Sleeping bags"]], budget=1000)) == ["t1", "s1"]
    too_small = _call(ctx, "bundle", slots=[["Tents"], ["Sleeping bags"]], budget=90)
    assert not too_small.ok and "cheapest items alone cost 100.00" in (too_small.error or "")
    no_slot = _call(ctx, "bundle", slots=[["Tents"], ["Hiking boots", "Summit"]], budget=500)
    assert not no_slot.ok and "no category matches" in (no_slot.error or "")


def test_bundle_never_repeats_an_item_and_skips_sold_out_ones(catalog: Catalog) -> None:
    ids, total = fill_bundle(ShoppingIndex.build(catalog), catalog, [["Camping"], ["Camping"], BOOTS], 400)
    assert len(set(ids)) == 3 and "b3" not in ids and total <= 400
    assert ids == ["s1", "t1", "b1"]  # 120 + 150 + 89.99: the best rated three that fit


# ------------------------------------------------------------------------------------------------ cart, finals
def test_cart_add_and_remove(catalog: Catalog) -> None:
    ctx = _ctx(shopping_app(catalog))
    added = _call(ctx, "cart_add", item_id="b1", quantity=2)
    assert added.ok and ctx.session.cart == {"b1": 2} and added.content["total"] == pytest.approx(179.98)
    assert "out of stock" in (_call(ctx, "cart_add", item_id="b3").error or "")
    assert "only 2" in (_call(ctx, "cart_add", item_id="b2", quantity=3).error or "")
    assert "unknown item id" in (_call(ctx, "cart_add", item_id="zz").error or "")
    assert _call(ctx, "cart_add", item_id="k1", quantity=7).ok  # untracked stock has no cap
    assert _call(ctx, "cart_remove", item_id="b1").ok and ctx.session.cart == {"k1": 7}
    assert "not in the cart" in (_call(ctx, "cart_remove", item_id="b1").error or "")


def test_ask_user_and_respond_return_finals(catalog: Catalog) -> None:
    ctx = _ctx(shopping_app(catalog))
    asked = _call(ctx, "ask_user", question="Which size?").content
    assert isinstance(asked, Final) and asked.reply == "Which size?" and asked.actions == [{"type": "ask_user"}]
    final = _call(ctx, "respond", text="Try these", item_ids=["b1"], bundles=[["t1", "s1"]]).content
    assert isinstance(final, Final) and final.item_ids == ["b1"] and final.bundles == [["t1", "s1"]]
    assert [a["type"] for a in final.actions] == ["show_items", "show_bundles"]


# ------------------------------------------------------------------------------------------------ SID retrieval
TOKENS = {"<s1_0>": 40, "<s1_1>": 41, "<s2_0>": 42, "<s2_1>": 43}
START, END = 44, 45


def _sid_model(catalog: Catalog, engine: Any) -> ModelAccess:
    # b1 (0,0), b2 (0,1), b3 (1,0) sold out, t1 (1,1)
    sid_map = SidMap(["b1", "b2", "b3", "t1"], np.array([[0, 0], [0, 1], [1, 0], [1, 1]]))
    return ModelAccess(engine, engine.tokenizer, sid_resources(catalog, sid_map, SidTokenMap(TOKENS), START, END))


def test_sid_retrieve_without_a_model_is_an_error_result(catalog: Catalog, scripted: Any) -> None:
    app = shopping_app(catalog)
    for model in (None, ModelAccess(scripted([]), scripted([]).tokenizer)):
        result = _call(_ctx(app, model=model), "sid_retrieve", k=5)
        assert not result.ok and result.error == "SID retrieval is not available; use search_catalog"


def test_sid_retrieve_beam_searches_under_the_trie_constraint(catalog: Catalog, scripted: Any) -> None:
    beams = [[40, 42, END], [40, END], [41, 42, END], [40, 43, END], [40, 42, END]]
    engine = scripted([beams])
    ctx = _ctx(shopping_app(catalog), model=_sid_model(catalog, engine))
    result = _call(ctx, "sid_retrieve", category=["hiking boots"], k=5)
    assert _ids(result) == ["b1", "b2"]  # an early end, the sold-out b3 and a repeat are dropped
    req = engine.calls[0]
    assert req.prompt[-1] == START and req.params.num_beams == 5 and req.params.n == 5
    assert req.params.max_new_tokens == 3 and req.params.temperature == 0
    proc = req.constraint()
    assert isinstance(proc, VllmSidLogitsProcessor)
    allowed = lambda out: torch.isfinite(proc(req.prompt, out, torch.zeros(64))).nonzero().ravel().tolist()  # noqa: E731
    assert allowed([]) == [40]  # level 1: only the boots' code with stock
    assert allowed([40]) == [42, 43] and allowed([40, 42]) == [END]


def test_fallback_uses_sid_retrieval_when_there_is_time(catalog: Catalog, scripted: Any) -> None:
    engine = scripted([[[41, 43, END], [40, 43, END]]])
    ctx = _ctx(shopping_app(catalog), model=_sid_model(catalog, engine), constraints={"in_stock": True})
    final = fallback(ctx, "step_limit")
    assert final.item_ids == ["t1", "b2"] and final.data == {"fallback": "step_limit"}


# ------------------------------------------------------------------------------------------------ fallback
def test_fallback_without_a_model_searches_under_the_constraints(catalog: Catalog) -> None:
    ctx = _ctx(shopping_app(catalog), constraints={"category": BOOTS, "price_max": 70, "in_stock": True},
               user="cheap hiking boots please")
    final = fallback(ctx, "no_model")
    assert final.item_ids == ["b2"] and final.reply.startswith("Here are some options for")
    nothing = fallback(_ctx(shopping_app(catalog), constraints={"category": BOOTS, "price_max": 10}), "budget")
    assert nothing.item_ids == [] and "couldn't find" in nothing.reply


def test_find_orders_by_price_when_the_words_ask_for_cheap(catalog: Catalog) -> None:
    app = shopping_app(catalog)
    best = _call(_ctx(app, user="hiking boots please"), "find").content
    assert best.item_ids == ["b1", "b2"] and "best first" in best.reply  # by rating: 4.6, 4.1 (b3 is sold out)
    for words in ("cheap hiking boots please", "the most AFFORDABLE hiking boots", "hiking boots, low-cost"):
        cheap = app.tools.execute(ToolCall(name="find", arguments={}), _ctx(app, user=words)).content
        # by price: b2 59.99, then b1 89.99
        assert cheap.item_ids == ["b2", "b1"] and "cheapest first" in cheap.reply, words


def test_an_unreadable_reply_with_time_left_gets_find_grounded_in_the_words(catalog: Catalog, scripted: Any) -> None:
    engine = scripted([[[41, 43, END]]])  # SID retrieval would answer t1, a tent
    ctx = _ctx(shopping_app(catalog), model=_sid_model(catalog, engine), constraints={"in_stock": True},
               user="hiking boots under 100")
    final = fallback(ctx, "empty_reply")
    # the words name the leaf and a ceiling: b1 (4.6, 89.99) and b2 (4.1, 59.99) by rating; b3 (120.00) is sold out
    assert final.item_ids == ["b1", "b2"] and not engine.calls
    assert final.data == {"grounded": {"category": "added", "price_max": "added"}, "fallback": "empty_reply"}
    late = fallback(ctx, "budget")  # out of time: retrieval as before (SID beams here)
    assert late.item_ids == ["t1"] and late.data == {"fallback": "budget"}


def test_fallback_fills_a_bundle_request(catalog: Catalog) -> None:
    constraints = {"slots": [["Outdoor", "Camping", "Tents"], ["Outdoor", "Camping", "Sleeping bags"]],
                   "budget": 200.0, "in_stock": True}
    final = fallback(_ctx(shopping_app(catalog), constraints=constraints, user="tent and bag"), "budget")
    assert final.bundles == [["t2", "s1"]] and final.item_ids == []


# ------------------------------------------------------------------------------------------------ the loop
def test_loop_search_then_respond(catalog: Catalog, scripted: Any) -> None:
    engine = scripted([render_call("search_catalog", {"query": "waterproof boots", "price_max": 100}),
                       "Here you go.\n" + render_call("respond", {"text": "The Northpeak boots.", "item_ids": ["b1"]})])
    loop = AgentLoop(shopping_app(catalog), ModelAccess(engine, engine.tokenizer))
    result = loop.run_turn(SessionState(app="shopping"), "waterproof boots under 100")
    assert not result.degraded and result.steps == 2 and result.tool_calls == 2
    assert result.final.item_ids == ["b1"] and result.final.reply == "The Northpeak boots."
    tool_msgs = [m for m in result.trace if m["role"] == "tool"]
    assert '"item_id": "b1"' in tool_msgs[0]["content"] and '"sent": true' in tool_msgs[1]["content"]


def test_loop_rejects_unknown_and_sold_out_items(catalog: Catalog, scripted: Any) -> None:
    engine = scripted([render_call("respond", {"text": "Buy these", "item_ids": ["b3", "ghost"]}),
                       render_call("respond", {"text": "Buy this", "item_ids": ["b2"]})])
    loop = AgentLoop(shopping_app(catalog), ModelAccess(engine, engine.tokenizer))
    result = loop.run_turn(SessionState(app="shopping"), "boots")
    assert result.final.item_ids == ["b2"] and result.grounding_failures == 2 and not result.degraded
    rejection = next(m for m in result.trace if m["role"] == "tool")
    assert "out of stock" in rejection["content"] and "ghost" in rejection["content"]


def test_loop_out_of_steps_falls_back_to_grounded_items_only(catalog: Catalog, scripted: Any) -> None:
    bad = render_call("respond", {"text": "Buy it", "item_ids": ["b3"]})
    engine = scripted([bad, bad])
    loop = AgentLoop(shopping_app(catalog, max_steps=2), ModelAccess(engine, engine.tokenizer))
    result = loop.run_turn(SessionState(app="shopping"), "red hiking boots", constraints={"category": BOOTS})
    assert result.degraded and result.reason == "step_limit" and len(engine.calls) == 2
    assert result.final.item_ids and "b3" not in result.final.item_ids
    assert set(result.final.item_ids) <= {"b1", "b2"}


def test_app_tools_have_strict_described_schemas(catalog: Catalog) -> None:
    app = shopping_app(catalog)
    assert app.tools.names == ["find", "find_bundle", "search_catalog", "sid_retrieve", "get_item", "rank", "bundle",
                               "cart_add", "cart_remove", "ask_user", "respond"]
    for schema in app.tools.schemas():
        params = schema["function"]["parameters"]
        assert params.get("additionalProperties") is False, schema["function"]["name"]
        assert all("description" in p for p in params["properties"].values()), schema["function"]["name"]


def test_sid_strings_name_items_in_get_item_and_respond(catalog: Catalog, scripted: Any) -> None:
    ctx = _ctx(shopping_app(catalog), model=_sid_model(catalog, scripted([])))
    assert _call(ctx, "get_item", item_id="<s1_0><s2_1>").content["item_id"] == "b2"
    final = _call(ctx, "respond", text="This one", item_ids=["<s1_0><s2_0>", "<s1_3><s2_0>"]).content
    assert final.item_ids == ["b1", "<s1_3><s2_0>"]  # an unknown SID is left for the loop's grounder to reject


def test_sid_retrieve_with_a_real_tiny_engine(catalog: Catalog) -> None:
    """The HF engine's beam search under the SID constraint: every beam is a live, in-stock, filtered item."""
    from harness.agent_dir import SID_END, SID_START
    from infra.engines.hf import HFEngine
    from sid.tokens import add_sid_tokens, sid_vocabulary
    from training.tiny import build_tiny

    model, tok = build_tiny([i.title for i in catalog] + ["I need hiking boots"], vocab_size=400)
    vocab = sid_vocabulary([2, 2])
    ids = add_sid_tokens(tok, model, {t: "" for t in vocab}, special_tokens=[SID_START, SID_END])
    sid_map = SidMap(["b1", "b2", "b3", "t1"], np.array([[0, 0], [0, 1], [1, 0], [1, 1]]))
    sid = sid_resources(catalog, sid_map, SidTokenMap.from_tokenizer(tok, vocab), ids[SID_START], ids[SID_END])
    ctx = _ctx(shopping_app(catalog), model=ModelAccess(HFEngine(model, tok, dtype="fp32"), tok, sid))
    assert sorted(_ids(_call(ctx, "sid_retrieve", k=4))) == ["b1", "b2", "t1"]  # b3 is sold out
    assert sorted(_ids(_call(ctx, "sid_retrieve", k=2, category=["Hiking boots"]))) == ["b1", "b2"]
    assert _ids(_call(ctx, "sid_retrieve", k=2, price_max=60)) == ["b2"]
