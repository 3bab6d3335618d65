"""Travel agent: POI tools through the registry, the checked respond, the greedy fallback, reward and user.

    .venv/bin/python -m pytest tests/apps/travel/test_agent.py -q
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from apps.travel.agent import fallback, travel_app
from apps.travel.checker import Itinerary, Poi, Stop, plan_greedy, pois_from_items
from apps.travel.env import form_request, request_constraints, reward, simulated_user
from apps.travel.world import TravelWorldConfig, generate_travel_world
from harness.agent import AgentLoop, AppSpec, Final, ModelAccess, TurnContext
from harness.budget import Budget
from harness.catalog import Catalog
from harness.protocol import ToolCall, ToolResult, render_call
from harness.session import SessionState
from harness.tasks import Message, Task
from infra.engines.base import Completion, GenerationRequest
from infra.recordio import read_records

KM_PER_DEG = 2 * math.pi * 6371.0 / 360
WALK_1KM = 1.3 / 4.5 * 60  # detour 1.3 at 4.5 km/h: 17.33 min
TAXI_1KM = 3 + 1.3 / 25 * 60  # 3 min to hail + 1.3 km at 25 km/h: 6.12 min


def _poi(pid: str, category: str, group: str, km_east: float, km_north: float = 0.0, **update: Any) -> Poi:
    """A POI on the equator (1 km east is exactly 1/KM_PER_DEG degrees of longitude), open all day."""
    base = Poi(poi_id=pid, name=f"Test {category}", group=group, category=category, lat=km_north / KM_PER_DEG,
               lon=km_east / KM_PER_DEG, opens=0, closes=1440, closed_days=[], visit_minutes=0, price_level=1,
               district="Centre", tags=[], price=0.0, rating=3.0)
    return base.model_copy(update=update)


@pytest.fixture
def app() -> AppSpec:
    """Hotel at 0 km; museum 1 km east (closed Mondays); café 1 km west; park 2 km north; bar 2 km east."""
    pois = [
        _poi("poi-h", "hotel", "lodging", 0.0),
        _poi("poi-m", "museum", "culture", 1.0, opens=540, closes=1020, closed_days=["mon"], visit_minutes=60,
             price_level=2, price=15.0, rating=4.0, tags=["historic", "indoor"]),
        _poi("poi-c", "cafe", "food", -1.0, opens=480, closes=1080, visit_minutes=40, price=6.0, rating=4.5,
             tags=["kid-friendly"]),
        _poi("poi-p", "park", "nature", 0.0, 2.0, visit_minutes=60, rating=3.5, district="Riverside",
             tags=["outdoor", "free"]),
        _poi("poi-b", "bar", "nightlife", 2.0, opens=1020, visit_minutes=60, price_level=3, price=30.0,
             tags=["adults-only"]),
    ]
    items = [p.to_item(description=f"A {p.category} in {p.district}, Testville.") for p in pois]
    return travel_app(catalog=Catalog(items))


REQUEST = {"day": "sat", "start_min": 540, "end_min": 1020, "start_poi": "poi-h", "end_poi": "poi-h",
           "must_categories": ["museum"], "min_stops": 1, "max_stops": 3, "mode": "walk"}


def _ctx(app: AppSpec, constraints: dict[str, Any]) -> TurnContext:
    return TurnContext(app=app, session=SessionState(app="travel"), constraints=constraints, budget=Budget(1000),
                       model=None)


def _call(app: AppSpec, name: str, args: dict[str, Any], constraints: dict[str, Any] | None = None) -> ToolResult:
    return app.tools.execute(ToolCall(name=name, arguments=args), _ctx(app, constraints or {}))


def _ids(out: ToolResult) -> list[str]:
    assert out.ok, out.error
    return [p["poi_id"] for p in out.content["pois"]]


# hotel 09:00 -> museum 09:18-10:18 -> hotel 10:36 (walk legs of 17.3 min)
GOOD = [{"poi_id": "poi-h", "arrive_min": 540, "depart_min": 540},
        {"poi_id": "poi-m", "arrive_min": 558, "depart_min": 618},
        {"poi_id": "poi-h", "arrive_min": 636, "depart_min": 636}]


# ------------------------------------------------------------------------------------------------ tools
def test_search_pois_filters_and_ranks(app: AppSpec) -> None:
    assert _ids(_call(app, "search_pois", {"category": "museum"})) == ["poi-m"]
    assert _ids(_call(app, "search_pois", {"category": "food"})) == ["poi-c"]
    assert _ids(_call(app, "search_pois", {"k": 3})) == ["poi-c", "poi-m", "poi-p"]  # by rating without a query
    assert _ids(_call(app, "search_pois", {"query": "kid friendly"})) == ["poi-c"]
    assert _ids(_call(app, "search_pois", {"city": "riverside"})) == ["poi-p"]
    out = _call(app, "search_pois", {"category": "culture", "open_on": "sat"})
    assert _ids(out) == ["poi-m"] and out.content["pois"][0]["opens"] == "09:00"


@pytest.mark.parametrize(("args", "needle"), [
    ({"category": "culture", "open_on": "mon"}, "no place matches"),
    ({"category": "zoo"}, "unknown category 'zoo'; groups and categories: culture, food, lodging"),
    ({"open_on": "someday"}, "field 'open_on'"),
    ({"k": 0}, "field 'k'"),
])
def test_search_pois_errors(app: AppSpec, args: dict[str, Any], needle: str) -> None:
    out = _call(app, "search_pois", args)
    assert not out.ok and out.error is not None and needle in out.error


def test_route_time_uses_the_request_mode_by_default(app: AppSpec) -> None:
    walk = _call(app, "route_time", {"from_id": "poi-h", "to_id": "poi-m", "mode": "walk"})
    assert walk.ok and walk.content["minutes"] == round(WALK_1KM, 1) and walk.content["minutes_rounded_up"] == 18
    taxi = _call(app, "route_time", {"from_id": "poi-m", "to_id": "poi-h"}, {"mode": "taxi"})
    assert taxi.ok and taxi.content["mode"] == "taxi" and taxi.content["minutes"] == round(TAXI_1KM, 1)
    out = _call(app, "route_time", {"from_id": "poi-h", "to_id": "poi-x"})
    assert not out.ok and out.error is not None and "unknown poi_id 'poi-x'" in out.error


def test_check_open(app: AppSpec) -> None:
    monday = _call(app, "check_open", {"poi_id": "poi-m", "day": "mon"})
    assert monday.ok and monday.content["open_that_day"] is False
    early = _call(app, "check_open", {"poi_id": "poi-m", "time": "08:00"}, {"day": "sat"})
    assert early.ok and early.content["open_that_day"] is True and early.content["open_at_time"] is False
    assert _call(app, "check_open", {"poi_id": "poi-m", "time": "09:30"}, {"day": "sat"}).content["open_at_time"]
    for args, needle in (({"poi_id": "poi-m"}, "which day?"), ({"poi_id": "poi-m", "day": "sat", "time": "9.30"},
                                                               "is not 'HH:MM'")):
        out = _call(app, "check_open", args)
        assert not out.ok and out.error is not None and needle in out.error


def test_respond_accepts_a_feasible_plan(app: AppSpec) -> None:
    stops = [dict(GOOD[0], arrive_min="09:00", depart_min="09:00"), *GOOD[1:]]  # 'HH:MM' is accepted too
    out = _call(app, "respond", {"text": "Museum morning.", "itinerary": stops}, REQUEST)
    assert out.ok, out.error
    final = out.content
    assert isinstance(final, Final)
    assert final.item_ids == ["poi-h", "poi-m"]
    assert final.data["itinerary"] == {"stops": GOOD, "mode": "walk"}
    assert final.data["check"]["feasible"] is True


def test_respond_returns_the_violations_to_fix(app: AppSpec) -> None:
    rushed = [GOOD[0], {"poi_id": "poi-m", "arrive_min": 545, "depart_min": 560}, GOOD[2]]
    out = _call(app, "respond", {"text": "x", "itinerary": rushed, "mode": "taxi"}, REQUEST)
    assert not out.ok and out.error is not None
    assert out.error.startswith("not sent: the plan breaks 3 rule(s): (1) the itinerary travels by taxi")
    assert "a visit of 15 min is shorter than half the typical 60 min" in out.error
    assert "travel by taxi takes 6.1 min, but only 5 min are planned" in out.error


@pytest.mark.parametrize(("args", "needle"), [
    ({"text": "x", "itinerary": []}, "the itinerary is empty"),
    ({"text": "x", "itinerary": [dict(GOOD[0], poi_id="poi-zz")]}, "unknown poi_id 'poi-zz'"),
    ({"text": "x", "itinerary": [dict(GOOD[0], arrive_min="noon")]}, "field 'itinerary.0.arrive_min'"),
])
def test_respond_rejects_malformed_plans(app: AppSpec, args: dict[str, Any], needle: str) -> None:
    out = _call(app, "respond", args, REQUEST)
    assert not out.ok and out.error is not None and needle in out.error


def test_respond_without_request_constraints_checks_only_time_order_and_travel(app: AppSpec) -> None:
    closed = [{"poi_id": "poi-m", "arrive_min": 480, "depart_min": 500}]  # before opening: unknown rules here
    assert _call(app, "respond", {"text": "ok", "itinerary": closed}).ok
    rushed = [GOOD[0], {"poi_id": "poi-m", "arrive_min": 545, "depart_min": 540}]
    out = _call(app, "respond", {"text": "x", "itinerary": rushed, "mode": "walk"})
    assert not out.ok and out.error is not None
    assert "stop 1 (poi-m): departs before it arrives" in out.error and "takes 17.3 min" in out.error


def test_ask_user_ends_the_turn_with_an_ask_user_action(app: AppSpec) -> None:
    out = _call(app, "ask_user", {"question": "Which day?"})
    assert out.ok and isinstance(out.content, Final)
    assert out.content.reply == "Which day?" and out.content.actions == [{"type": "ask_user"}]


# ------------------------------------------------------------------------------------------------ the compact call
PLAN_ARGS = {"day": "sat", "start": "09:00", "end": "17:00", "hotel": "test HOTEL", "stops": [1, 3],
             "must": ["museum"], "mode": "walk"}


def _text_ctx(app: AppSpec, text: str, constraints: dict[str, Any] | None = None) -> TurnContext:
    session = SessionState(app="travel", messages=[{"role": "user", "content": text}])
    return TurnContext(app=app, session=session, constraints=constraints or {}, budget=Budget(1000), model=None)


def test_plan_plans_and_checks_what_the_call_states(app: AppSpec) -> None:
    out = app.tools.execute(ToolCall(name="plan", arguments=PLAN_ARGS), _text_ctx(app, "a museum day please"))
    assert out.ok and isinstance(out.content, Final), out.error
    task = Task(task_id="t", app="travel", kind="plan", messages=[Message(role="user", content="-")],
                constraints=REQUEST)
    # the call's fields are REQUEST's (lodging by name, times as HH:MM): the same greedy plan, feasible
    assert out.content.data["itinerary"] == plan_greedy(task, app.resources.pois).model_dump(mode="json")
    assert out.content.data["check"]["feasible"] is True and reward(task, out.content, app.resources.pois).success


def test_plan_takes_what_the_words_state_the_call_fills_the_rest_and_a_form_wins(app: AppSpec) -> None:
    text = "Saturday 9:00-17:00, starting and ending at Test hotel, on foot."
    out = app.tools.execute(ToolCall(name="plan", arguments={"must": ["museum"], "stops": [1, 3]}),
                            _text_ctx(app, text))
    assert out.ok and out.content.data["itinerary"]["mode"] == "walk"  # the words' mode, the call's museum
    assert out.content.data["itinerary"]["stops"][1]["poi_id"] == "poi-m"
    out = app.tools.execute(ToolCall(name="plan", arguments={**PLAN_ARGS, "mode": "taxi"}), _text_ctx(app, text))
    assert out.content.data["itinerary"]["mode"] == "walk"  # what the words state wins over the call
    out = app.tools.execute(ToolCall(name="plan", arguments=PLAN_ARGS), _text_ctx(app, text, {"mode": "transit"}))
    assert out.content.data["itinerary"]["mode"] == "transit"  # a form's field wins over both


@pytest.mark.parametrize(("start", "end"), [("9am", "5pm"), ("9:00 a.m.", "17h"), ("09.00", "17:00"), (540, 1020)])
def test_plan_reads_times_as_people_write_them(app: AppSpec, start: Any, end: Any) -> None:
    out = app.tools.execute(ToolCall(name="plan", arguments={**PLAN_ARGS, "start": start, "end": end}),
                            _text_ctx(app, "museum day"))
    assert out.ok, out.error
    stops = out.content.data["itinerary"]["stops"]
    assert stops[0]["depart_min"] >= 540 and stops[-1]["arrive_min"] <= 1020


def test_plan_without_a_day_asks_for_it(app: AppSpec) -> None:
    out = app.tools.execute(ToolCall(name="plan", arguments={"must": ["museum"]}), _text_ctx(app, "museums!"))
    assert out.ok and out.content.actions == [{"type": "ask_user"}] and "Which day" in out.content.reply


@pytest.mark.parametrize(("args", "error"), [
    ({"day": "sat", "hotel": "Grand Palace"}, "no single lodging is called 'Grand Palace' (no lodging has that name)"),
    ({"day": "sat", "must": ["zoo"]}, "must: no place is a 'zoo'; categories and groups: bar, cafe, culture, food"),
    ({"day": "sat", "start": "18:00", "end": "09:00"}, "the plan's fields contradict each other"),
    ({"day": "sat", "stops": [3, 1]}, "the plan's fields contradict each other"),
    ({"day": "sat", "start": "noonish"}, "start 'noonish' is not a time"),
    ({"day": "someday"}, "field 'day': Input should be 'mon'"),
])
def test_plan_names_what_it_cannot_ground(app: AppSpec, args: dict[str, Any], error: str) -> None:
    out = app.tools.execute(ToolCall(name="plan", arguments=args), _text_ctx(app, "-"))
    assert not out.ok and out.error is not None and error in out.error, out.error


def test_plan_call_reads_the_answer_key(app: AppSpec) -> None:
    from apps.travel.plan import plan_call

    task = Task(task_id="t", app="travel", kind="plan", messages=[Message(role="user", content="-")],
                constraints={**REQUEST, "budget": 40.0, "max_price_level": 2, "want_tags": ["historic"]})
    assert plan_call(task, app.resources.pois) == ("plan", {
        "day": "sat", "start": "09:00", "end": "17:00", "hotel": "Test hotel", "stops": [1, 3], "must": ["museum"],
        "want": ["historic"], "price_level": 2, "budget": 40, "mode": "walk"})
    bare = Task(task_id="t", app="travel", kind="plan", messages=[Message(role="user", content="-")],
                constraints={"day": "sun", "start_min": 600, "end_min": 900})
    assert plan_call(bare, app.resources.pois) == ("plan", {"day": "sun", "start": "10:00", "end": "15:00",
                                                            "mode": "transit"})


# ------------------------------------------------------------------------------------------------ fallback
def test_fallback_is_the_greedy_plan(app: AppSpec) -> None:
    final = fallback(_ctx(app, REQUEST), "budget")
    task = Task(task_id="t", app="travel", kind="plan", messages=[Message(role="user", content="-")],
                constraints=REQUEST)
    expected = plan_greedy(task, app.resources.pois)
    assert final.data["itinerary"] == expected.model_dump(mode="json")
    assert final.data["check"]["feasible"] is True
    assert final.reply.startswith("Here's a plan for Saturday (walk): leave Test hotel at 09:00; ")
    assert reward(task, final, app.resources.pois).success


def test_fallback_plans_a_default_window_and_asks_without_a_day(app: AppSpec) -> None:
    final = fallback(_ctx(app, {"day": "sat", "mode": "walk"}), "step_limit")
    stops = final.data["itinerary"]["stops"]
    assert stops and all(s["arrive_min"] >= 540 and s["depart_min"] <= 1260 for s in stops)
    asking = fallback(_ctx(app, {"city": "Testville"}), "budget")
    assert asking.actions == [{"type": "ask_user"}] and "Which day" in asking.reply


def test_fallback_plans_a_request_sent_as_text_only(app: AppSpec) -> None:
    session = SessionState(app="travel", messages=[{"role": "user", "content": (
        "Saturday 9:00-17:00, starting and ending at Test hotel, on foot. I must see a museum. 1 to 3 stops.")}])
    ctx = TurnContext(app=app, session=session, constraints={}, budget=Budget(1000), model=None)
    final = fallback(ctx, "no_model")
    # the words give the structured REQUEST: the same greedy plan
    task = Task(task_id="t", app="travel", kind="plan", messages=[Message(role="user", content="-")],
                constraints=REQUEST)
    assert final.data["itinerary"] == plan_greedy(task, app.resources.pois).model_dump(mode="json")
    assert final.data["check"]["feasible"] is True
    # structured constraints a frontend sends win over the words
    ctx = TurnContext(app=app, session=session, constraints={**REQUEST, "mode": "taxi"}, budget=Budget(1000),
                      model=None)
    assert fallback(ctx, "no_model").data["itinerary"]["mode"] == "taxi"


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


def test_scripted_model_fixes_its_plan_after_the_checker_objects(app: AppSpec) -> None:
    rushed = [GOOD[0], dict(GOOD[1], arrive_min=545), GOOD[2]]
    engine = _Engine([render_call("respond", {"text": "Too fast", "itinerary": rushed}),
                      render_call("respond", {"text": "Museum morning.", "itinerary": GOOD})])
    loop = AgentLoop(app, ModelAccess(engine=engine, tokenizer=_Tokenizer()))  # type: ignore[arg-type]
    session = SessionState(app="travel")
    result = loop.run_turn(session, "Plan my Saturday", constraints=REQUEST)
    assert not result.degraded, result.reason
    assert result.steps == 2 and result.final.reply == "Museum morning."
    first = json.loads(session.messages[2]["content"])
    assert first["ok"] is False and "travel by walk takes 17.3 min" in first["error"]


# ------------------------------------------------------------------------------------------------ reward
def test_reward_hand_computed(app: AppSpec) -> None:
    pois = app.resources.pois
    task = Task(task_id="t", app="travel", kind="plan", messages=[Message(role="user", content="-")],
                constraints=REQUEST, meta={"reference_score": 0.8})
    r = reward(task, Final(reply="", data={"itinerary": {"stops": GOOD, "mode": "walk"}}), pois)
    # one visit: rating 4.0/5, no wanted tags (1.0), efficiency 60 / (60 + 2 * 17.33), one category (1.0)
    efficiency = 60 / (60 + 2 * WALK_1KM)
    score = 0.4 * 0.8 + 0.2 * 1.0 + 0.2 * efficiency + 0.2 * 1.0
    assert r.success and r.value == pytest.approx(0.5 + 0.5 * score)
    assert r.parts["score"] == pytest.approx(score) and r.parts["violations"] == 0.0
    assert r.parts["score_efficiency"] == pytest.approx(efficiency)
    assert r.parts["vs_reference"] == pytest.approx(score - 0.8)
    rushed = {"stops": [GOOD[0], dict(GOOD[1], arrive_min=545), GOOD[2]], "mode": "walk"}
    bad = reward(task, Final(reply="", data={"itinerary": rushed}), pois)
    assert (bad.value, bad.success, bad.parts["feasible"], bad.parts["violations"]) == (0.0, False, 0.0, 1.0)
    none = reward(task, Final(reply="no plan"), pois)
    assert (none.value, none.success) == (0.0, False)


# ------------------------------------------------------------------------------------------------ world, user
def test_app_from_a_generated_world_falls_back_to_feasible_plans(tmp_path: Path) -> None:
    generate_travel_world(TravelWorldConfig(seed=3, pois=40, requests=4, travellers=3), tmp_path)
    app = travel_app(tmp_path)
    assert app.name == "travel" and app.tools.names == ["search_pois", "route_time", "check_open", "plan", "respond",
                                                        "ask_user"]
    pois = pois_from_items(app.catalog)
    for task in read_records(tmp_path / "tasks.jsonl", Task)[0]:
        result = AgentLoop(app, None).run_turn(SessionState(app="travel"), task.messages[0].content,
                                               constraints=form_request(task))
        assert result.degraded and result.reason == "no_model"
        assert reward(task, result.final, pois).success
        assert Itinerary.model_validate(result.final.data["itinerary"]).stops[0] == Stop(
            poi_id=task.constraints["start_poi"], arrive_min=task.constraints["start_min"],
            depart_min=task.constraints["start_min"])


def test_fallback_plans_from_the_request_text_alone(tmp_path: Path) -> None:
    """What offline eval sends by default: the text a chat frontend sends, no structured constraints."""
    generate_travel_world(TravelWorldConfig(seed=3, pois=40, requests=12, travellers=3), tmp_path)
    app = travel_app(tmp_path)
    pois = pois_from_items(app.catalog)
    tasks = read_records(tmp_path / "tasks.jsonl", Task)[0]
    feasible = 0
    for task in tasks:
        assert request_constraints(task) == {}
        result = AgentLoop(app, None).run_turn(SessionState(app="travel"), task.messages[0].content,
                                               constraints=request_constraints(task))
        feasible += reward(task, result.final, pois).success
    assert feasible >= len(tasks) - 1, (feasible, len(tasks))


def test_simulated_user_answers_from_hidden_then_constraints(app: AppSpec) -> None:
    task = Task(task_id="t", app="travel", kind="plan", messages=[Message(role="user", content="Plan a day")],
                constraints=REQUEST, hidden={"day": "fri"})
    assert form_request(task)["start_poi"] == "poi-h" and "day" not in form_request(task)
    assert request_constraints(task) == {}  # a chat frontend sends the text only
    assert simulated_user(task, "Which day are you going?") == "On Friday."
    assert simulated_user(task, "Which hotel are you staying at?", app.resources.pois) == (
        "We start at Test hotel and end the day at Test hotel.")
    assert simulated_user(task, "Anything else?") == "Whatever you think is best — please go ahead and plan it."
    assert simulated_user(task, "Here is your plan.") == "Thanks, that works!"


def test_eval_sends_text_unless_form_is_asked(tmp_path: Path) -> None:
    import apps as app_table
    from apps.evaluate import with_form

    generate_travel_world(TravelWorldConfig(seed=3, pois=40, requests=2, travellers=2), tmp_path)
    task = read_records(tmp_path / "tasks.jsonl", Task)[0][0]
    env = app_table.load_env(tmp_path, "travel")
    assert env.request_fn(task) == {}
    assert with_form(env, "travel").request_fn(task) == form_request(task) != {}


def test_a_plan_that_its_wishes_break_is_made_again_without_them(tmp_path: Path) -> None:
    """Wishes (want_tags) are soft: when the greedy plan that chases them breaks a hard constraint (here a romantic
    first stop leaves no budget for the bar), the fallback plans again without them and keeps that plan."""
    from apps.travel.agent import plan_constraints, planned, request_task
    from apps.travel.checker import check_itinerary

    generate_travel_world(TravelWorldConfig(seed=0, pois=400, requests=2, heldout_requests=0, travellers=2), tmp_path)
    app = travel_app(tmp_path)
    res = app.resources
    hotel = next(p.poi_id for p in res.pois.values() if p.name == "Silver Suites")
    raw = {"day": "wed", "start_min": 1110, "end_min": 1440, "start_poi": hotel, "end_poi": hotel, "min_stops": 2,
           "max_stops": 4, "must_categories": ["bar", "food"], "budget": 75.0, "want_tags": ["romantic"],
           "mode": "taxi"}
    constraints = plan_constraints(raw)
    assert constraints is not None
    task = request_task(constraints)
    assert not check_itinerary(plan_greedy(task, res.pois, res.index), task, res.pois).feasible  # the wish breaks it
    final = planned(raw, res)
    assert final.data["check"]["feasible"] is True
    assert check_itinerary(Itinerary.model_validate(final.data["itinerary"]), task, res.pois).feasible
