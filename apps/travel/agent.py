"""The travel app's agent: POI search, travel times and opening hours as tools, a checked respond, greedy fallback.

A request is a message plus ``constraints`` in the shape of :class:`apps.travel.checker.PlanConstraints`
(day, window, start and end place, stops, mode, …); any subset may be given. Under the served compact protocol
(:data:`PLAN_PROMPT`, no tool schemas in the prompt) the model writes one call, ``plan(day, start, end, hotel,
…)``: what the request asks for; :func:`plan` plans it with the greedy planner and checks it. The other tools
stay callable for a model that plans itself: it searches and checks places and ends with
``respond(text, itinerary)``. Where the request's constraints
are known, ``respond`` runs :func:`apps.travel.checker.check_itinerary` and returns the broken rules as a
tool error so the model can fix the plan; the checker is also the :func:`reward`. When the model runs out
of steps or time, :func:`fallback` answers with :func:`apps.travel.checker.plan_greedy`.

    .venv/bin/python -m pytest tests/apps/travel/test_agent.py -q
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from apps.travel.checker import (
    DAY_MINUTES,
    TRAVEL_TOLERANCE_MIN,
    WEEKDAYS,
    Itinerary,
    Mode,
    PlanConstraints,
    Poi,
    PoiIndex,
    Stop,
    Weekday,
    check_itinerary,
    format_minutes,
    plan_greedy,
    pois_from_items,
    travel_time_minutes,
)
from apps.travel.parse import clock_minutes, text_constraints
from harness.agent import AppSpec, Final, TurnContext
from harness.bm25 import BM25, top_k
from harness.catalog import Catalog
from harness.protocol import Tool, ToolError, ToolRegistry
from harness.tasks import Message, Task
from infra.layout import CATALOG_FILE

DEFAULT_BUDGET_MS = 10_000.0
"""Planning is not a live answer: several tool steps fit in the default budget."""
FALLBACK_WINDOW = (540, 1260)
"""09:00–21:00: the day window the fallback plans in when the request names a day but no window."""
DAY_NAMES: dict[str, str] = {"mon": "Monday", "tue": "Tuesday", "wed": "Wednesday", "thu": "Thursday",
                             "fri": "Friday", "sat": "Saturday", "sun": "Sunday"}

SYSTEM_PROMPT = """You plan day trips in a city. The user states when they are free, where they start and end, \
how many stops they want, how they travel and what they like or avoid.
1. search_pois finds places: a free-text query, a category (museum, ramen, park, …) or group (culture, food, \
nature, shopping, nightlife, lodging), and open_on a weekday.
2. route_time gives the travel minutes between two places by walk, transit or taxi; check_open gives a \
place's opening hours on a day.
3. If the request leaves out something you need (the day, the time window, where to start), call ask_user.
4. Finish with respond(text, itinerary, mode). The itinerary lists every stop in order, the start place first \
and the end place last when the request names them, each with arrive_min and depart_min in minutes after \
midnight (or "HH:MM"). Leave at least the route_time between stops, arrive after opening, leave before \
closing and stay at least half the typical visit. If respond returns violations, fix them and call it again."""
"""The prompt of the tool protocol (schemas listed; the model searches and checks places, then responds):
what a model trained to use the tools itself is served with, ``dataclasses.replace(spec,
system_prompt=SYSTEM_PROMPT, prompt_tools=True)``. The app serves the compact protocol's prompt below."""

PLAN_PROMPT = (
    "You plan day trips in a city. Answer with one call: plan (day: mon to sun; start, end: \"HH:MM\"; hotel: where "
    "the day starts, end_hotel: where it ends if elsewhere; stops: [fewest, most]; must: categories to include; want, "
    "avoid: tags; price_level: the highest, 1 to 4; budget; mode: walk, transit or taxi: only what the traveller said)."
)
"""The served prompt of the compact protocol (``AppSpec.prompt_tools`` False): the model writes what the request
asks for as one ``plan`` call; :func:`plan` plans it with the greedy planner and checks it, so the tool schemas
(~2,000 tokens) and a long itinerary (~400 tokens) stay out of the model's context and output."""
TEXT_OVER_MODEL = True
"""In ``plan``: what the request's words state for sure (:func:`apps.travel.parse.text_constraints`) wins over the
model's reading of the same field (True, default), or only fills the fields the model left out (False). Chosen on
the dev wordings (``bench/travel_text.py``'s first outside author, first 150): a tiny agent's text-only success
0.980 with True, 0.933 with False; the held-out wordings were not looked at."""


# ------------------------------------------------------------------------------------------------ resources
@dataclass(frozen=True)
class TravelResources:
    """The POIs and the indexes the tools and the fallback share (built once per catalog)."""

    pois: dict[str, Poi]
    index: PoiIndex
    bm25: BM25
    texts: list[str]  # lower-case search text per row of ``index.ids``
    category: np.ndarray  # (N,) leaf category per row
    group: np.ndarray  # (N,) group per row
    open_days: np.ndarray  # (N, 7) bool: open on WEEKDAYS[d]
    rating: np.ndarray  # (N,)

    @classmethod
    def build(cls, catalog: Catalog) -> TravelResources:
        """Index ``catalog`` (every item must be a POI: ``ValueError`` names the first one that is not)."""
        pois = pois_from_items(catalog)
        index = PoiIndex(pois)
        rows = index.rows
        texts = [
            " ".join([p.name, p.category.replace("_", " "), p.group, p.district, *p.tags,
                      catalog[p.poi_id].description]).lower()
            for p in rows
        ]
        return cls(
            pois=pois, index=index, bm25=BM25(texts), texts=texts,
            category=np.array([p.category for p in rows]), group=np.array([p.group for p in rows]),
            open_days=np.array([[p.is_open_on(d) for d in WEEKDAYS] for p in rows], dtype=bool).reshape(-1, 7),
            rating=np.array([p.rating for p in rows], dtype=np.float64),
        )


def _res(ctx: TurnContext) -> TravelResources:
    res = ctx.resources
    if not isinstance(res, TravelResources):
        raise ToolError("the travel tools have no POI index (app built without travel_app?)")
    return res


def _poi(res: TravelResources, poi_id: str) -> Poi:
    poi = res.pois.get(poi_id)
    if poi is None:
        raise ToolError(f"unknown poi_id {poi_id!r} (use an id from search_pois, e.g. 'poi-00042')")
    return poi


def parse_clock(value: Any) -> Any:
    """``"09:30"`` -> 570 (minutes after midnight); ints and anything else pass through for validation."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*", value)
        if m is None:
            return int(value) if value.strip().isdigit() else value
        return int(m.group(1)) * 60 + int(m.group(2))
    return value


def plan_constraints(raw: Mapping[str, Any], window: tuple[int, int] = (0, DAY_MINUTES)) -> PlanConstraints | None:
    """The request's :class:`PlanConstraints`, ``window`` standing in for a missing day window; None when the
    request names no day or its constraints do not validate (unknown keys such as ``city`` are ignored)."""
    fields = {k: v for k, v in raw.items() if k in PlanConstraints.model_fields}
    if "day" not in fields:
        return None
    fields.setdefault("start_min", window[0])
    fields.setdefault("end_min", window[1])
    try:
        return PlanConstraints.model_validate(fields)
    except ValidationError:
        return None


def request_task(constraints: PlanConstraints) -> Task:
    """A travel ``Task`` around ``constraints`` (what the checker and the greedy planner read)."""
    return Task(task_id="request", app="travel", kind="plan", messages=[Message(role="user", content="(request)")],
                constraints=constraints.model_dump(mode="json"))


def _card(poi: Poi) -> dict[str, Any]:
    """What the model sees of a POI."""
    return {
        "poi_id": poi.poi_id, "name": poi.name, "category": poi.category, "group": poi.group,
        "district": poi.district, "opens": format_minutes(poi.opens), "closes": format_minutes(poi.closes),
        "closed_days": poi.closed_days, "visit_minutes": poi.visit_minutes, "price": poi.price,
        "price_level": poi.price_level, "rating": poi.rating, "tags": poi.tags,
    }


# ------------------------------------------------------------------------------------------------ tools
class SearchPoisArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str | None = Field(None, description="Free text matched against name, description and tags.")
    category: str | None = Field(None, description="Leaf category (museum, ramen, park, …) or group (food, …).")
    city: str | None = Field(None, description="City or district name the place must be in.")
    open_on: Weekday | None = Field(None, description="Only places open on this weekday (mon … sun).")
    k: int = Field(8, ge=1, le=30, description="How many places to return, best first.")


class RouteTimeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    from_id: str = Field(description="poi_id to leave from.")
    to_id: str = Field(description="poi_id to go to.")
    mode: Mode | None = Field(None, description="walk, transit or taxi; default: the request's mode.")


class CheckOpenArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    poi_id: str
    day: Weekday | None = Field(None, description="Weekday; default: the request's day.")
    time: str | None = Field(None, description="'HH:MM': also say whether it is open then.")


class StopArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    poi_id: str = Field(min_length=1)
    arrive_min: int = Field(ge=0, le=DAY_MINUTES, description="Arrival, minutes after midnight (or 'HH:MM').")
    depart_min: int = Field(ge=0, le=DAY_MINUTES, description="Departure, minutes after midnight (or 'HH:MM').")

    _clock = field_validator("arrive_min", "depart_min", mode="before")(parse_clock)


class PlanArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    day: Weekday | None = Field(None, description="Weekday of the trip: mon, tue, ... sun.")
    start: int | str | None = Field(None, description="When the day starts, \"HH:MM\".")
    end: int | str | None = Field(None, description="When it ends, \"HH:MM\".")
    hotel: str | None = Field(None, max_length=120, description="The lodging the day starts from (its name).")
    end_hotel: str | None = Field(None, max_length=120, description="The lodging it ends at, if not the same.")
    stops: list[int] | None = Field(None, min_length=2, max_length=2, description="[fewest, most] visits.")
    must: list[str] = Field(default_factory=list, description="Categories or groups a visit must cover.")
    want: list[str] = Field(default_factory=list, description="Tags the traveller likes.")
    avoid: list[str] = Field(default_factory=list, description="Tags no visit may carry.")
    price_level: int | None = Field(None, ge=1, le=4, description="Highest price level per visit.")
    budget: float | None = Field(None, ge=0, description="Cap on the visits' summed price.")
    mode: Mode | None = Field(None, description="walk, transit or taxi.")

    _clock = field_validator("start", "end", mode="before")(lambda v: _plan_clock(v))


def _plan_clock(value: Any) -> Any:
    """A plan call's time: "09:30", "9:30am", "6 pm", "18h" or minutes after midnight -> minutes; anything else
    passes through (``plan`` names it)."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d{1,2})(?:[:.h](\d{2}))?\s*(am|pm|a\.m\.|p\.m\.|h)?\s*", value, re.I)
        if m is not None and (m.group(2) is not None or m.group(3) is not None):
            minutes = clock_minutes(m.group(1), m.group(2), None if (m.group(3) or "").lower() == "h" else m.group(3))
            return value if minutes is None else minutes
    return parse_clock(value)


class RespondArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=4000, description="The reply the user reads.")
    itinerary: list[StopArgs] = Field(description="Every stop in order, start and end place included.")
    mode: Mode | None = Field(None, description="How the user travels; default: the request's mode.")


class AskUserArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=1000, description="What you need to know to plan.")


def search_pois(args: SearchPoisArgs, ctx: TurnContext) -> dict[str, Any]:
    """Places matching every filter, ranked by BM25 on ``query`` (by rating without one)."""
    res = _res(ctx)
    mask = np.ones(len(res.index.ids), dtype=bool)  # (N,)
    if args.category:
        cat = args.category.strip().lower().replace(" ", "_")
        if cat not in set(res.category) | set(res.group):
            known = ", ".join(sorted(set(res.group))) + "; " + ", ".join(sorted(set(res.category)))
            raise ToolError(f"unknown category {args.category!r}; groups and categories: {known}")
        mask &= (res.category == cat) | (res.group == cat)
    if args.open_on:
        mask &= res.open_days[:, WEEKDAYS.index(args.open_on)]
    if args.city:
        place = args.city.strip().lower()
        mask &= np.array([place in t for t in res.texts], dtype=bool)
    scores = res.rating
    if args.query and args.query.strip():
        scores = res.bm25.scores(args.query)
        mask &= scores > 0
    rows = top_k(scores, args.k, mask)
    if len(rows) == 0:
        raise ToolError("no place matches these filters; drop a filter or change the query")
    return {"pois": [_card(res.index.rows[r]) for r in rows], "matches": int(mask.sum())}


def _mode(ctx: TurnContext, given: Mode | None) -> Mode:
    if given is not None:
        return given
    mode = ctx.constraints.get("mode")
    return mode if mode in ("walk", "transit", "taxi") else "transit"


def route_time(args: RouteTimeArgs, ctx: TurnContext) -> dict[str, Any]:
    """Door-to-door minutes between two places (the checker's formula)."""
    res = _res(ctx)
    a, b, mode = _poi(res, args.from_id), _poi(res, args.to_id), _mode(ctx, args.mode)
    minutes = travel_time_minutes(a, b, mode)
    return {"from_id": a.poi_id, "to_id": b.poi_id, "mode": mode, "minutes": round(minutes, 1),
            "minutes_rounded_up": math.ceil(minutes)}


def check_open(args: CheckOpenArgs, ctx: TurnContext) -> dict[str, Any]:
    """Whether a place is open on a day (and at a time), with its hours and typical visit."""
    poi = _poi(_res(ctx), args.poi_id)
    day = args.day or ctx.constraints.get("day")
    if day not in WEEKDAYS:
        raise ToolError("which day? pass day as mon, tue, wed, thu, fri, sat or sun")
    out: dict[str, Any] = {"poi_id": poi.poi_id, "name": poi.name, "day": day, "open_that_day": poi.is_open_on(day),
                           "opens": format_minutes(poi.opens), "closes": format_minutes(poi.closes),
                           "visit_minutes": poi.visit_minutes}
    if args.time is not None:
        t = parse_clock(args.time)
        if not isinstance(t, int) or not 0 <= t <= DAY_MINUTES:
            raise ToolError(f"time {args.time!r} is not 'HH:MM'")
        out["open_at_time"] = poi.is_open_on(day) and poi.opens <= t < poi.closes
    return out


def _order_problems(itinerary: Itinerary, pois: dict[str, Poi]) -> list[str]:
    """The rules that hold whatever the request: time order and travel time between consecutive stops."""
    stops, out = itinerary.stops, []
    for i, s in enumerate(stops):
        if s.depart_min < s.arrive_min:
            out.append(f"stop {i} ({s.poi_id}): departs before it arrives")
    for i, (a, b) in enumerate(itertools.pairwise(stops)):
        need = travel_time_minutes(pois[a.poi_id], pois[b.poi_id], itinerary.mode)
        if b.arrive_min - a.depart_min < need - TRAVEL_TOLERANCE_MIN:
            out.append(f"stop {i} -> stop {i + 1}: travel by {itinerary.mode} takes {need:.1f} min, "
                       f"but only {b.arrive_min - a.depart_min} min are planned")
    return out


def respond(args: RespondArgs, ctx: TurnContext) -> Final:
    """Send the plan, after the checker accepts it; otherwise a ToolError listing what to fix."""
    res = _res(ctx)
    if not args.itinerary:
        raise ToolError("the itinerary is empty: list every stop with poi_id, arrive_min and depart_min")
    unknown = [s.poi_id for s in args.itinerary if s.poi_id not in res.pois]
    if unknown:
        raise ToolError(f"unknown poi_id {', '.join(map(repr, unknown))} (use ids from search_pois)")
    itinerary = Itinerary(stops=[Stop(**s.model_dump()) for s in args.itinerary], mode=_mode(ctx, args.mode))
    data: dict[str, Any] = {"itinerary": itinerary.model_dump(mode="json")}
    constraints = plan_constraints(ctx.constraints)
    if constraints is None:
        problems = _order_problems(itinerary, res.pois)
    else:
        result = check_itinerary(itinerary, request_task(constraints), res.pois)
        problems = result.violations
        data["check"] = {"feasible": result.feasible, "score": round(result.score, 4)}
    if problems:
        listed = "; ".join(f"({k + 1}) {p}" for k, p in enumerate(problems[:8]))
        more = f" and {len(problems) - 8} more" if len(problems) > 8 else ""
        raise ToolError(f"not sent: the plan breaks {len(problems)} rule(s): {listed}{more}. "
                        "Fix them and call respond again.")
    ids = list(dict.fromkeys(s.poi_id for s in itinerary.stops))
    return Final(reply=args.text.strip(), item_ids=ids, data={**data, **itinerary_view(itinerary, res.pois)})


def _lodging_id(res: TravelResources, name: str) -> str:
    """The lodging called ``name`` (case and spacing aside; else the one whose name holds it or it holds)."""
    want = " ".join(name.lower().split())
    lodgings = [p for p in res.pois.values() if p.group == "lodging"]
    exact = [p for p in lodgings if " ".join(p.name.lower().split()) == want]
    near = exact or [p for p in lodgings if want and (want in p.name.lower() or p.name.lower() in want)]
    if len(near) != 1:
        raise ToolError(f"no single lodging is called {name!r}" + ("" if near else " (no lodging has that name)"))
    return near[0].poi_id


def plan_fields(args: PlanArgs, res: TravelResources) -> dict[str, Any]:
    """``PlanConstraints`` fields of a ``plan`` call (only what it states); lodging names become their POI ids."""
    out: dict[str, Any] = {}
    if args.day is not None:
        out["day"] = args.day
    for key, value in (("start_min", args.start), ("end_min", args.end)):
        if value is not None:
            if not isinstance(value, int):
                raise ToolError(f"{key[:-4]} {value!r} is not a time \"HH:MM\"")
            out[key] = value
    if args.hotel:
        out["start_poi"] = _lodging_id(res, args.hotel)
        out["end_poi"] = _lodging_id(res, args.end_hotel) if args.end_hotel else out["start_poi"]
    if args.stops is not None:
        out["min_stops"], out["max_stops"] = args.stops
    names = {n for p in res.pois.values() if p.group != "lodging" for n in (p.category, p.group)}
    unknown = [m for m in args.must if m not in names]
    if unknown:
        raise ToolError(f"must: no place is a {unknown[0]!r}; categories and groups: {', '.join(sorted(names))}")
    for key, values in (("must_categories", args.must), ("want_tags", args.want), ("avoid_tags", args.avoid)):
        if values:
            out[key] = [str(v) for v in values]
    if args.price_level is not None:
        out["max_price_level"] = args.price_level
    if args.budget is not None:
        out["budget"] = args.budget
    if args.mode is not None:
        out["mode"] = args.mode
    return out


def plan(args: PlanArgs, ctx: TurnContext) -> Final:
    """The compact protocol's one call: the day the model read from the request, planned by the greedy planner
    and checked (:func:`planned`). What the words state for sure wins over the call where both say (see
    :data:`TEXT_OVER_MODEL`), the call fills what the words leave unread, and the constraints a form sent win over
    both; a lodging, category or time that does not exist is a ToolError naming it."""
    res = _res(ctx)
    model = plan_fields(args, res)
    text = text_constraints(_user_words(ctx), res.pois)
    raw = {**model, **text, **ctx.constraints} if TEXT_OVER_MODEL else {**text, **model, **ctx.constraints}
    if "day" in raw and plan_constraints(raw, FALLBACK_WINDOW) is None:
        raise ToolError("the plan's fields contradict each other or the request (an end before the start, fewer "
                        "most stops than fewest)")
    return planned(raw, res)


def ask_user(args: AskUserArgs, ctx: TurnContext) -> Final:
    """Ask the user for what the plan needs; the turn ends and the user's answer starts the next one."""
    return Final(reply=args.question.strip(), actions=[{"type": "ask_user"}])


TOOLS: tuple[Tool[Any, TurnContext], ...] = (
    Tool("search_pois", "Find places by query, category or group, city or district, and weekday open.",
         SearchPoisArgs, search_pois),
    Tool("route_time", "Travel minutes between two places by walk, transit or taxi.", RouteTimeArgs, route_time),
    Tool("check_open", "Opening hours of a place on a weekday (and whether it is open at a time).",
         CheckOpenArgs, check_open),
    Tool("plan", "Plan the day the request asks for (the planner picks and orders the visits and checks them).",
         PlanArgs, plan),
    Tool("respond", "Send the itinerary and a short reply; it is checked against the request first.",
         RespondArgs, respond),
    Tool("ask_user", "Ask the user for something the plan needs (day, time window, start).", AskUserArgs, ask_user),
)


# ------------------------------------------------------------------------------------------------ fallback
def describe_itinerary(itinerary: Itinerary, pois: dict[str, Poi], constraints: PlanConstraints) -> str:
    """A short reply that walks through a plan (anchors as 'leave' / 'arrive', visits with times)."""
    stops = list(itinerary.stops)
    head = stops.pop(0) if constraints.start_poi is not None and stops else None
    tail = stops.pop() if constraints.end_poi is not None and stops else None
    parts = [f"leave {pois[head.poi_id].name} at {format_minutes(head.depart_min)}"] if head else []
    parts += [f"{format_minutes(s.arrive_min)}–{format_minutes(s.depart_min)} {pois[s.poi_id].name}" for s in stops]
    if tail is not None:
        parts.append(f"arrive at {pois[tail.poi_id].name} by {format_minutes(tail.arrive_min)}")
    if not stops:
        return "I couldn't fit any visit into that window; " + ", ".join(parts) + "."
    return f"Here's a plan for {DAY_NAMES[constraints.day]} ({itinerary.mode}): " + "; ".join(parts) + "."


def fallback(ctx: TurnContext, reason: str) -> Final:
    """The greedy plan for the request's constraints (a default 09:00–21:00 window when only the day is
    known); without a day, ask for it. ``reason`` (budget, step_limit, no_model) does not change it.

    The constraints are the structured ones a frontend sent, over what the traveller's words state (day, hours,
    the hotel they start from, transport: :mod:`apps.travel.parse`), so a request sent as text is planned too."""
    res = _res(ctx)
    return planned({**text_constraints(_user_words(ctx), res.pois), **ctx.constraints}, res)


def _user_words(ctx: TurnContext) -> str:
    return " ".join(str(m.get("content") or "") for m in ctx.session.messages if m.get("role") == "user")


def planned(raw: Mapping[str, Any], res: TravelResources) -> Final:
    """The greedy plan for constraint fields ``raw`` (a default 09:00–21:00 window when only the day is known),
    checked, with its description; without a day, the question for it."""
    constraints = plan_constraints(raw, FALLBACK_WINDOW)
    if constraints is None:
        return Final(reply="Which day would you like to go, and from what time until when? "
                           "Tell me where you start, too.", actions=[{"type": "ask_user"}])
    task = request_task(constraints)
    try:
        itinerary = plan_greedy(task, res.pois, res.index)
    except ValueError as e:
        return Final(reply=f"Sorry, I could not plan that: {e}.")
    result = check_itinerary(itinerary, task, res.pois)
    if not result.feasible and constraints.want_tags:  # wishes are soft: a plan without them beats a broken one
        plain = request_task(constraints.model_copy(update={"want_tags": []}))
        try:
            other = plan_greedy(plain, res.pois, res.index)
        except ValueError:
            other = None
        if other is not None and check_itinerary(other, plain, res.pois).feasible:
            itinerary, result = other, check_itinerary(other, task, res.pois)
    reply = describe_itinerary(itinerary, res.pois, constraints)
    if not result.feasible:
        reply += " It does not meet everything you asked: " + "; ".join(result.violations[:2]) + "."
    return Final(reply=reply, item_ids=list(dict.fromkeys(s.poi_id for s in itinerary.stops)),
                 data={"itinerary": itinerary.model_dump(mode="json"),
                       "check": {"feasible": result.feasible, "score": round(result.score, 4)},
                       **itinerary_view(itinerary, res.pois)})


def itinerary_view(itinerary: Itinerary, pois: dict[str, Poi]) -> dict[str, Any]:
    """What a frontend draws of a plan: ``stops`` (each place's name, category and opening hours beside its
    arrival and departure) and ``legs`` (the travel between consecutive stops: minutes it takes, minutes planned).
    Times are minutes after midnight."""
    stops = []
    for s in itinerary.stops:
        poi = pois[s.poi_id]
        stops.append({"poi_id": s.poi_id, "name": poi.name, "category": poi.category, "group": poi.group,
                      "arrive_min": s.arrive_min, "depart_min": s.depart_min, "opens": poi.opens,
                      "closes": poi.closes})
    legs = [{"from_poi": a.poi_id, "to_poi": b.poi_id, "mode": itinerary.mode, "depart_min": a.depart_min,
             "arrive_min": b.arrive_min,
             "travel_min": round(travel_time_minutes(pois[a.poi_id], pois[b.poi_id], itinerary.mode), 1)}
            for a, b in zip(itinerary.stops, itinerary.stops[1:], strict=False)]
    return {"stops": stops, "legs": legs}


# ------------------------------------------------------------------------------------------------ app
def travel_app(world: Path | str | None = None, *, catalog: Catalog | None = None,
               budget_ms: float = DEFAULT_BUDGET_MS, max_steps: int = 2) -> AppSpec:
    """The travel agent over a world directory (its ``catalog.jsonl``) or a POI catalog (which wins)."""
    if catalog is None and world is not None:
        catalog = Catalog.load(Path(world) / CATALOG_FILE)[0]
    if catalog is None:
        raise ValueError("travel_app needs a world directory or a catalog")
    return AppSpec(name="travel", system_prompt=PLAN_PROMPT, tools=ToolRegistry(TOOLS), catalog=catalog,
                   fallback=fallback, resources=TravelResources.build(catalog), default_budget_ms=budget_ms,
                   max_steps=max_steps, prompt_tools=False)
