"""Livestream agent: fact-sheet tools through the registry, the keyword fallback, the reward and the viewer.

    .venv/bin/python -m pytest tests/apps/livestream/test_agent.py -q
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from apps.livestream.agent import DEFAULT_BUDGET_MS, fallback, livestream_app, turn_note
from apps.livestream.env import request_constraints, reward, simulated_user
from apps.livestream.world import LivestreamWorldConfig, generate_livestream_world
from harness.agent import AgentLoop, AppSpec, Final, ModelAccess, TurnContext
from harness.budget import Budget
from harness.protocol import ToolCall, ToolResult, render_call
from harness.session import SessionState
from harness.tasks import Message, Task
from infra.engines.base import Completion, GenerationRequest
from infra.recordio import read_records

EARBUDS, HEADPHONES, SERUM = "lv-a", "lv-b", "lv-c"  # the items of conftest.py's app


def _ctx(app: AppSpec, question: str = "", **constraints: Any) -> TurnContext:
    session = SessionState(app="livestream", messages=[{"role": "user", "content": question}])
    return TurnContext(app=app, session=session, constraints=constraints, budget=Budget(800), model=None)


def _call(app: AppSpec, name: str, args: dict[str, Any], **constraints: Any) -> ToolResult:
    return app.tools.execute(ToolCall(name=name, arguments=args), _ctx(app, **constraints))


def _task(answer: str, facts: Sequence[str], kind: str = "question") -> Task:
    return Task(task_id="t", app="livestream", kind=kind, messages=[Message(role="user", content="?")],
                constraints={"stream_id": "stream-t", "ts_offset_s": 100}, answer=answer, facts=list(facts))


# ------------------------------------------------------------------------------------------------ tools
def test_product_facts_defaults_to_the_product_on_screen(app: AppSpec) -> None:
    out = _call(app, "product_facts", {}, stream_id="stream-t", ts_offset_s=320)
    assert out.ok, out.error
    assert out.content["item_id"] == HEADPHONES
    assert out.content["facts"]["price"] == "$89.99"
    assert out.content["facts"]["battery_hours"] == "40 hours"
    assert out.content["facts"]["waterproof"] == "yes"
    assert [p["item_id"] for p in out.content["stream_products"]] == [EARBUDS, HEADPHONES, SERUM]
    assert out.content["stream_products"][1]["position"] == 2


def test_product_facts_by_id_and_keys_reports_what_the_sheet_lacks(app: AppSpec) -> None:
    out = _call(app, "product_facts", {"item_id": SERUM, "keys": ["stock", "vegan", "warranty_months"]})
    assert out.ok, out.error
    assert out.content["facts"] == {"stock": "0", "vegan": "yes"}
    assert out.content["not_on_fact_sheet"] == ["warranty_months"]
    assert "stream_products" not in out.content  # no stream in this request


@pytest.mark.parametrize(("args", "constraints", "needle"), [
    ({"item_id": "lv-zzz"}, {"stream_id": "stream-t"}, "unknown item_id 'lv-zzz'; products on stream-t: lv-a"),
    ({"stream_id": "stream-x"}, {}, "unknown stream_id 'stream-x'"),
    ({}, {"stream_id": "stream-t", "ts_offset_s": 305}, "no product is on screen at 305s of stream-t"),
    ({}, {}, "pass item_id"),
    ({"item": EARBUDS}, {}, "field 'item'"),
])
def test_product_facts_errors_are_results_naming_the_problem(
        app: AppSpec, args: dict[str, Any], constraints: dict[str, Any], needle: str) -> None:
    out = _call(app, "product_facts", args, **constraints)
    assert not out.ok
    assert out.error is not None and needle in out.error


def test_respond_returns_the_final_with_cited_facts(app: AppSpec) -> None:
    out = _call(app, "respond", {"answer": " It's $49.99 (20% off). ", "cited_facts": [f"{EARBUDS}.price"]})
    assert out.ok, out.error
    final = out.content
    assert isinstance(final, Final)
    assert final.reply == "It's $49.99 (20% off)."
    assert final.item_ids == [EARBUDS]  # defaults to the cited products
    assert final.data["cited_facts"] == [f"{EARBUDS}.price"]


def test_sold_out_products_may_be_named(app: AppSpec) -> None:
    out = _call(app, "respond", {"answer": "Sold out, sorry!", "cited_facts": [f"{SERUM}.stock"]})
    assert out.ok and isinstance(out.content, Final) and out.content.item_ids == [SERUM]
    assert not app.require_stock  # so the loop's grounder lets the answer through


def test_respond_rejects_facts_and_items_that_do_not_exist(app: AppSpec) -> None:
    out = _call(app, "respond", {"answer": "x", "cited_facts": [f"{EARBUDS}.warranty", "price"],
                                 "item_ids": ["lv-nope"]})
    assert not out.ok and out.error is not None
    assert f"unknown fact '{EARBUDS}.warranty'" in out.error and "unknown fact 'price'" in out.error
    assert "unknown item_id 'lv-nope'" in out.error


# ------------------------------------------------------------------------------------------------ the compact call
@pytest.mark.parametrize(("question", "ts", "args", "reply", "cited"), [
    ("how much is this one?", 100, {"item": "this", "fact": "price"},
     "It's $49.99 during the stream (20% off).", [f"{EARBUDS}.price", f"{EARBUDS}.discount_percent"]),
    ("and the one before?", 400, {"item": "before", "fact": "price"},
     "It's $49.99 during the stream (20% off).", [f"{EARBUDS}.price", f"{EARBUDS}.discount_percent"]),
    ("between products: the last one shown", 305, {"item": "before", "fact": "shipping_days"},
     "Ships in 3 days.", [f"{EARBUDS}.shipping_days"]),
    ("does the second come in pink?", 100, {"item": "#2", "fact": "colours"},
     "No pink, sorry — colours: black, silver.", [f"{HEADPHONES}.colours"]),
    ("will it last a 35 hour flight", 100, {"item": "Voltix earbuds", "fact": "battery_hours"},
     "No, it lasts about 30 hours per charge.", [f"{EARBUDS}.battery_hours"]),
    ("is the glowlab one vegan", 100, {"item": "GlowLab", "fact": "vegan"}, "Yes, it's vegan.", [f"{SERUM}.vegan"]),
    ("who lasts longer", 100, {"item": "this", "fact": "battery_hours", "versus": "headphones"},
     "The Sonaro headphones last longer: 40 hours vs 30 hours.",
     [f"{EARBUDS}.battery_hours", f"{HEADPHONES}.battery_hours"]),
    ("does the serum have a warranty?", 100, {"item": "serum", "fact": "warranty_months"},
     "Sorry, I'm not sure — the fact sheet doesn't say.", []),  # a fact, but not on this product's sheet
    ("which is vegan, this or the serum", 100, {"item": "this", "fact": "vegan", "versus": "serum"},
     "Sorry, I'm not sure — the fact sheet doesn't say.", []),  # no comparison rule for a yes/no fact
    ("when is the restock", 100, {"item": "some gadget", "fact": "unknown"},
     "Sorry, I'm not sure — the fact sheet doesn't say.", []),
    ("your cat is cute", 100, {"fact": "chat"},
     "Sorry, I'm not sure — I can only help with the products on this stream.", []),
])
def test_answer_renders_the_named_products_fact_from_the_sheet(
        app: AppSpec, question: str, ts: int, args: dict[str, Any], reply: str, cited: list[str]) -> None:
    ctx = _ctx(app, question, stream_id="stream-t", ts_offset_s=ts)
    out = app.tools.execute(ToolCall(name="answer", arguments=args), ctx)
    assert out.ok and isinstance(out.content, Final), out.error
    assert out.content.reply == reply and out.content.data["cited_facts"] == cited


@pytest.mark.parametrize(("args", "ts", "error"), [
    ({"item": "#4", "fact": "price"}, 100,
     "no product of this stream is '#4'; the stream's products: lv-a, lv-b, lv-c"),
    ({"item": "Zentro speaker", "fact": "price"}, 100, "no product of this stream is 'Zentro speaker'"),
    ({"item": "this", "fact": "price"}, 950, "no product of this stream is 'this'"),  # nothing on screen, no item
    ({"item": "before", "fact": "price"}, 100, "no product of this stream is 'before'"),  # the first one is on
    ({"item": "this", "fact": "colour"}, 100, "no fact sheet has 'colour'; facts: battery_hours, brand, colours"),
])
def test_answer_names_what_it_cannot_ground(app: AppSpec, args: dict[str, Any], ts: int, error: str) -> None:
    out = _call(app, "answer", args, stream_id="stream-t", ts_offset_s=ts)
    assert not out.ok and out.error is not None and out.error.startswith(error), out.error


def test_the_served_prompt_is_compact_and_lists_no_tools(app: AppSpec) -> None:
    assert app.prompt_schemas() == [] and app.system_prompt.startswith("You answer livestream viewers")
    assert len(app.system_prompt.split()) < 80


def test_plan_call_reads_the_answer_key_as_the_viewer_referred(app: AppSpec) -> None:
    from apps.livestream.plan import plan_call, reference

    streams = app.resources.streams
    stream = streams["stream-t"]

    def task(kind: str, ids: list[str], facts: list[str], **meta: str) -> Task:
        return Task(task_id="t", app="livestream", kind=kind, messages=[Message(role="user", content="?")],
                    constraints={"stream_id": "stream-t", "item_ids": ids, "ts_offset_s": 100}, answer="x",
                    facts=facts, meta=meta)

    assert [reference(k, HEADPHONES, stream, app.catalog) for k in
            ("this_one", "previous", "ordinal", "named", "brand", "leaf")] == \
        ["this", "before", "#2", "Sonaro headphones", "Sonaro", "headphones"]
    assert plan_call(task("question", [SERUM], [f"{SERUM}.vegan"], reference="ordinal"), app.catalog, streams) == \
        ("answer", {"item": "#3", "fact": "vegan"})
    assert plan_call(task("comparison", [EARBUDS, HEADPHONES], [f"{EARBUDS}.price", f"{HEADPHONES}.price"],
                          reference="this_one", other_reference="brand"), app.catalog, streams) == \
        ("answer", {"item": "this", "fact": "price", "versus": "Sonaro"})
    assert plan_call(task("unanswerable", [EARBUDS], [], reference="named"), app.catalog, streams) == \
        ("answer", {"item": "Voltix earbuds", "fact": "unknown"})
    assert plan_call(task("off_topic", [], [], reference="none"), app.catalog, streams) == ("answer", {"fact": "chat"})


# ------------------------------------------------------------------------------------------------ fallback
@pytest.mark.parametrize(("question", "constraints", "reply", "cited"), [
    ("how much is this one?", {"ts_offset_s": 100},
     "It's $49.99 during the stream (20% off).", [f"{EARBUDS}.price", f"{EARBUDS}.discount_percent"]),
    ("does the second item come in pink??", {"ts_offset_s": 100},
     "No pink, sorry — colours: black, silver.", [f"{HEADPHONES}.colours"]),
    ("which battery lasts longer, this one or the Sonaro headphones?", {"ts_offset_s": 100},
     "The Sonaro headphones last longer: 40 hours vs 30 hours.",
     [f"{EARBUDS}.battery_hours", f"{HEADPHONES}.battery_hours"]),
    ("will the Voltix earbuds last a 35 hour flight?", {"ts_offset_s": 700},
     "No, it lasts about 30 hours per charge.", [f"{EARBUDS}.battery_hours"]),
    ("is the GlowLab serum vegan?", {"ts_offset_s": 100}, "Yes, it's vegan.", [f"{SERUM}.vegan"]),
    ("is it watreproof?", {"ts_offset_s": 100}, "No, it's not waterproof.", [f"{EARBUDS}.waterproof"]),
    ("when will it be restocked?", {"ts_offset_s": 100}, "Sorry, I'm not sure — the fact sheet doesn't say.", []),
    ("what's your zodiac sign lol", {"ts_offset_s": 100},
     "Sorry, I'm not sure — I can only help with the products on this stream.", []),
    ("how much is it?", {"ts_offset_s": 305},
     "Sorry, I'm not sure which product you mean — could you name it?", []),
])
def test_fallback_answers_from_the_fact_sheet(
        app: AppSpec, question: str, constraints: dict[str, Any], reply: str, cited: list[str]) -> None:
    final = fallback(_ctx(app, question, stream_id="stream-t", **constraints), "budget")
    assert final.reply == reply
    assert final.data["cited_facts"] == cited


def test_fallback_uses_the_request_item_without_a_stream(app: AppSpec) -> None:
    final = fallback(_ctx(app, "what's in it?", item_id=SERUM), "no_model")
    assert final.reply == "Ingredients: water, glycerin, niacinamide."
    assert final.item_ids == [SERUM]


def test_loop_without_a_model_degrades_to_the_fallback_and_grounds_it(app: AppSpec) -> None:
    loop = AgentLoop(app, None)
    result = loop.run_turn(SessionState(app="livestream"), "is the GlowLab serum vegan?",
                           constraints={"stream_id": "stream-t", "ts_offset_s": 100})
    assert result.degraded and result.reason == "no_model"
    assert result.final.reply == "Yes, it's vegan."
    assert result.final.item_ids == [SERUM]  # sold out, but a livestream answer may still name it


class _Tokenizer:
    """Just enough of a tokenizer for render_ids: one token per character of the JSON-rendered chat."""

    def apply_chat_template(self, messages: list[dict[str, Any]], tools: Any = None, add_generation_prompt: bool = True,
                            tokenize: bool = False) -> str:
        return json.dumps(messages)

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [0] * len(text)}


class _Engine:
    """Replies from a script (the loop needs only generate and tokens_per_second)."""

    tokens_per_second = None

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        text = self.replies.pop(0)
        return [[Completion(request_id=r.request_id, index=0, token_ids=[1], text=text, logprobs=[0.0],
                            finish_reason="eos", prompt_tokens=1, latency_ms=1.0, weights_version=0)]
                for r in requests]


def test_scripted_model_reads_facts_then_responds_through_the_loop(app: AppSpec) -> None:
    engine = _Engine([render_call("product_facts", {"keys": ["price"]}),
                      render_call("respond", {"answer": "$89.99 right now.", "cited_facts": [f"{HEADPHONES}.price"]})])
    app = dataclasses.replace(livestream_app(catalog=app.catalog, streams=app.resources.streams.values(),
                                             reader_first=False), reply_frame=None)  # the tool protocol's calls
    loop = AgentLoop(app, ModelAccess(engine=engine, tokenizer=_Tokenizer()))  # type: ignore[arg-type]
    session = SessionState(app="livestream")
    result = loop.run_turn(session, "price??", constraints={"stream_id": "stream-t", "ts_offset_s": 400})
    assert not result.degraded, result.reason
    assert result.final.reply == "$89.99 right now." and result.final.item_ids == [HEADPHONES]
    observation = json.loads(session.messages[2]["content"])
    assert observation["result"]["facts"] == {"price": "$89.99"}


class _RecordingTokenizer(_Tokenizer):
    """The JSON-rendering tokenizer that also keeps the last text it rendered."""

    rendered = ""

    def apply_chat_template(self, messages: list[dict[str, Any]], tools: Any = None, add_generation_prompt: bool = True,
                            tokenize: bool = False) -> str:
        self.rendered = super().apply_chat_template(messages, tools, add_generation_prompt, tokenize)
        return self.rendered


HEADPHONE_FACTS = "price, stock, brand, shipping_days, discount_percent, colours, battery_hours, waterproof"


@pytest.mark.parametrize(("constraints", "note"), [
    ({"stream_id": "stream-t", "ts_offset_s": 400}, f"on screen: #2 Sonaro headphones; facts: {HEADPHONE_FACTS}"),
    # the overlay's item_id wins over what is on screen
    ({"stream_id": "stream-t", "ts_offset_s": 100, "item_id": SERUM},
     "on screen: #3 GlowLab serum; facts: price, stock, brand, vegan, ingredients, discount_percent"),
    # between two windows: every fact of the stream's products, in show order, once
    ({"stream_id": "stream-t", "ts_offset_s": 305},
     "nothing on screen; facts: price, stock, brand, shipping_days, returns_days, discount_percent, colours, "
     "waterproof, battery_hours, warranty_months, vegan, ingredients"),
    ({"ts_offset_s": 100}, None),  # no stream: no note
    ({"stream_id": "stream-x", "ts_offset_s": 100}, None),
])
def test_turn_note_names_the_product_on_screen_and_the_facts_of_its_sheet(
        app: AppSpec, constraints: dict[str, Any], note: str | None) -> None:
    assert turn_note(_ctx(app, "price?", **constraints)) == note


def test_the_model_reads_the_note_after_the_words_and_the_fallback_the_words_alone(app: AppSpec) -> None:
    tokenizer = _RecordingTokenizer()
    engine = _Engine([""])
    loop = AgentLoop(app, ModelAccess(engine=engine, tokenizer=tokenizer))  # type: ignore[arg-type]
    session = SessionState(app="livestream")
    result = loop.run_turn(session, "how long does it last?", constraints={"stream_id": "stream-t", "ts_offset_s": 400})
    sent = json.loads(tokenizer.rendered)
    assert sent[1] == {"role": "user", "content": "how long does it last?\n"
                       f"[on screen: #2 Sonaro headphones; facts: {HEADPHONE_FACTS}]"}
    assert session.messages[0]["content"] == "how long does it last?"  # the note is kept beside the words
    assert session.messages[0]["note"].startswith("on screen: #2")
    # the model wrote nothing: the reader answers from the words (and the screen), not from the note
    assert result.degraded and result.final.reply == fallback(_ctx(
        app, "how long does it last?", stream_id="stream-t", ts_offset_s=400), "no_model").reply
    # the user's message already last (an OpenAI-style chat): it gets the note too, once
    chat = SessionState(app="livestream", messages=[{"role": "user", "content": "ngl how long till they die"}])
    AgentLoop(app, ModelAccess(engine=_Engine([""]), tokenizer=tokenizer)).run_turn(  # type: ignore[arg-type]
        chat, None, constraints={"stream_id": "stream-t", "ts_offset_s": 400})
    sent = json.loads(tokenizer.rendered)[1]["content"]
    assert sent.startswith("ngl how long till they die\n[on screen: #2 Sonaro headphones;") and sent.count("[") == 1


def test_the_reader_answers_what_it_is_sure_of_and_the_model_the_rest(app: AppSpec) -> None:
    constraints = {"stream_id": "stream-t", "ts_offset_s": 400}  # the headphones on screen
    engine = _Engine([render_call("answer", {"item": "this", "fact": "battery_hours"})])
    loop = AgentLoop(app, ModelAccess(engine=engine, tokenizer=_Tokenizer()))  # type: ignore[arg-type]
    # asked beforehand (serving does, before refusing a turn for load): on a copy of the session, nothing changes
    asked = SessionState(app="livestream")
    assert loop.answers_first(asked, "how much are the headphones?", constraints)
    assert not loop.answers_first(asked, "ngl how long till they die", constraints)
    assert asked.messages == [] and asked.turns == 0
    # a product and a fact of its sheet in the words: the reader answers, the model is never called
    sure = loop.run_turn(SessionState(app="livestream"), "how much are the headphones?", constraints=constraints)
    assert (sure.reason, sure.degraded, sure.steps) == ("sure", False, 0)
    assert "$89.99" in sure.final.reply and engine.replies  # the scripted reply is still unused
    # a question about what no fact of the sheet says (the headphones have no warranty): the reader's "not sure"
    none = loop.run_turn(SessionState(app="livestream"), "does it come with a warranty?", constraints=constraints)
    assert (none.reason, none.degraded, none.steps) == ("sure", False, 0) and engine.replies
    assert "not sure" in none.final.reply and none.final.data["cited_facts"] == []
    # no fact the reader reads in the words: the model's call answers
    session = SessionState(app="livestream")
    result = loop.run_turn(session, "ngl how long till they die", constraints=constraints)
    assert not result.degraded and result.reason is None and result.steps == 1 and not engine.replies
    assert "40" in result.final.reply and result.final.data["cited_facts"] == [f"{HEADPHONES}.battery_hours"]
    # reader_first=False: the model answers every question
    plain = livestream_app(catalog=app.catalog, streams=app.resources.streams.values(), reader_first=False)
    engine = _Engine([render_call("answer", {"item": "this", "fact": "price"})])
    loop = AgentLoop(plain, ModelAccess(engine=engine, tokenizer=_Tokenizer()))  # type: ignore[arg-type]
    result = loop.run_turn(SessionState(app="livestream"), "how much are the headphones?", constraints=constraints)
    assert result.reason is None and result.steps == 1 and "$89.99" in result.final.reply


# ------------------------------------------------------------------------------------------------ reward
PRICE_ANSWER = "It's $49.99 during the stream (20% off)."
PRICE_FACTS = [f"{EARBUDS}.price", f"{EARBUDS}.discount_percent"]


@pytest.mark.parametrize(("task", "reply", "cited", "value", "parts"), [
    # C = 2/2 facts, H = 1/2 cited, B = 1 (4 words): 1 * (0.6 + 0.2 * 0.5 + 0.2) = 0.9
    (_task(PRICE_ANSWER, PRICE_FACTS), "It's $49.99 (20% off).", [f"{EARBUDS}.price"], 0.9,
     {"correctness": 1.0, "helpfulness": 0.5, "brevity": 1.0, "words": 4.0}),
    # C = 1/2 (no discount), H = 1, B = 1: 0.5 * (0.6 + 0.2 + 0.2) = 0.5
    (_task(PRICE_ANSWER, PRICE_FACTS), "$49.99", PRICE_FACTS, 0.5,
     {"correctness": 0.5, "helpfulness": 1.0, "brevity": 1.0, "words": 1.0}),
    # 45 words: B = 1 - (45 - 30) / 30 = 0.5; C = H = 1: 0.6 + 0.2 + 0.2 * 0.5 = 0.9
    (_task(PRICE_ANSWER, PRICE_FACTS), "It's $49.99 (20% off)." + " really" * 41, PRICE_FACTS, 0.9,
     {"correctness": 1.0, "helpfulness": 1.0, "brevity": 0.5, "words": 45.0}),
    # colours 2/2 but the yes/no is wrong: C = (1 + 0) / 2, H = 0, B = 1: 0.5 * (0.6 + 0 + 0.2) = 0.4
    (_task("No pink, sorry — colours: black, silver.", [f"{HEADPHONES}.colours"]),
     "Yes! It comes in black and silver.", [], 0.4,
     {"correctness": 0.5, "helpfulness": 0.0, "brevity": 1.0, "words": 7.0}),
    # a flag answered the wrong way round: C = 0 gates everything
    (_task("Yes, it's vegan.", [f"{SERUM}.vegan"]), "No, it's not vegan.", [f"{SERUM}.vegan"], 0.0,
     {"correctness": 0.0, "helpfulness": 1.0, "brevity": 1.0, "words": 4.0}),
    (_task("Yes, it's vegan.", [f"{SERUM}.vegan"]), "Yes, it's vegan.", [f"{SERUM}.vegan"], 1.0,
     {"correctness": 1.0, "helpfulness": 1.0, "brevity": 1.0, "words": 3.0}),
    # sold out (stock 0) said in words
    (_task("Sold out right now (0 left), sorry!", [f"{SERUM}.stock"]), "Sorry, it's sold out.", [], 0.8,
     {"correctness": 1.0, "helpfulness": 0.0, "brevity": 1.0, "words": 4.0}),
    # unanswerable: saying so is correct; citing a fact for it is not helpful
    (_task("", [], "unanswerable"), "Not sure, sorry — the fact sheet doesn't say.", [], 1.0,
     {"correctness": 1.0, "helpfulness": 1.0, "brevity": 1.0, "words": 9.0}),
    (_task("", [], "unanswerable"), "I'm not sure.", [f"{EARBUDS}.price"], 0.8,
     {"correctness": 1.0, "helpfulness": 0.0, "brevity": 1.0, "words": 3.0}),
    (_task("", [], "off_topic"), "It ships in 3 days.", [], 0.0,
     {"correctness": 0.0, "helpfulness": 1.0, "brevity": 1.0, "words": 5.0}),
])
def test_reward_hand_computed(app: AppSpec, task: Task, reply: str, cited: list[str], value: float,
                              parts: dict[str, float]) -> None:
    r = reward(task, Final(reply=reply, data={"cited_facts": cited}), app.catalog)
    assert r.value == pytest.approx(value)
    assert r.parts == pytest.approx(parts)
    assert r.success == (parts["correctness"] == 1.0)


# ------------------------------------------------------------------------------------------------ world
def test_app_from_a_generated_world_and_fallback_answers_most_questions(tmp_path: Path) -> None:
    config = LivestreamWorldConfig(seed=5, streams=4, products_per_stream_min=3, products_per_stream_max=6,
                                   questions=150, viewers=20)
    generate_livestream_world(config, tmp_path)
    app = livestream_app(tmp_path)
    assert app.name == "livestream" and app.default_budget_ms == DEFAULT_BUDGET_MS
    assert app.tools.names == ["answer", "product_facts", "respond"] and not app.prompt_schemas()
    tasks, _ = read_records(tmp_path / "tasks.jsonl", Task)
    from apps.livestream.kit import env
    from apps.livestream.sft import SOURCE

    # the compact protocol's labels: every answer-key call, run through the tools, is a success
    comparisons = [t for t in tasks if t.kind == "comparison"]
    assert comparisons and all(t.meta["other_reference"] in ("ordinal", "named", "brand", "leaf") for t in comparisons)
    examples = SOURCE.examples(env(tmp_path), tasks)
    assert [e.source for e in examples if e.kind.startswith("teacher_")] == [t.task_id for t in tasks]
    twins = [e for e in examples if e.kind.startswith("twin_")]  # counterfactual notes (tests/.../test_sft.py)
    assert twins and {e.source.partition("~")[0] for e in twins} <= {t.task_id for t in tasks}
    scores = []
    for task in tasks:
        constraints = request_constraints(task)
        assert set(constraints) == {"stream_id", "ts_offset_s"}  # never the ground-truth product
        final = fallback(_ctx(app, task.messages[0].content, **constraints), "budget")
        scores.append(reward(task, final, app.catalog).parts["correctness"])
    assert sum(scores) / len(scores) > 0.9


@pytest.mark.parametrize("base", ["tiny", pytest.param("smollm2-135m", marks=pytest.mark.slow)])
def test_the_answer_frames_fixed_runs_hold_on_every_answer_key_call(tmp_path: Path, base: str) -> None:
    """Decoding each answer-key call of a generated world with the frame's jumps (the model choosing every token they
    do not force) gives exactly the call's own tokens, in fewer model-chosen tokens: under a tokenizer trained on the
    world's texts as the tiny model's is, and under SmolLM2's BPE (slow: loads the model)."""
    from apps.livestream.plan import plan_call
    from harness.agent import _jumped, frame_tokens
    from training.models import load_base
    from training.tiny import tokenizer_from_sentencepiece, train_sentencepiece

    generate_livestream_world(LivestreamWorldConfig(seed=7, streams=4, questions=120, viewers=10), tmp_path)
    app = livestream_app(tmp_path)
    tasks, _ = read_records(tmp_path / "tasks.jsonl", Task)
    calls = [render_call(*plan_call(t, app.catalog, app.resources.streams)) for t in tasks]
    tok = (tokenizer_from_sentencepiece(train_sentencepiece([t.messages[0].content for t in tasks] + calls, 1024))
           if base == "tiny" else load_base(base)[1])
    assert app.reply_frame is not None
    ft = frame_tokens(tok, app.reply_frame)
    assert ft.jump is not None and ft.tokens_per_step > 1.0
    ratios = []
    for call in calls:
        ids = tok(call, add_special_tokens=False)["input_ids"]
        assert ids[:len(ft.ids)] == ft.ids, call
        ratio = _jumped(ft.jump, ids[len(ft.ids):], "}}", tok)
        assert ratio is not None, f"a forced run differs from the tokens of {call}"
        ratios.append(ratio)
    assert min(ratios) > 1.0 and sum(ratios) / len(ratios) > 1.3


# ------------------------------------------------------------------------------------------------ viewer
def test_simulated_viewer_nudges_only_when_not_answered() -> None:
    task = Task(task_id="t", app="livestream", kind="question", messages=[Message(role="user", content="price??")],
                answer="$5.", meta={"reference": "this_one"})
    assert simulated_user(task, "It's $5.") == "ok thanks!"
    assert simulated_user(task, "Which product do you mean?") == "the one on screen right now — price??"
    named = task.model_copy(update={"meta": {"reference": "named"}})
    assert simulated_user(named, "") == "pls just answer: price??"
