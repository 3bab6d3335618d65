"""Travel rules: the ``Poi`` view of catalog items, travel times, and the itinerary checker + greedy planner.

The checker is the ground truth of the travel app (travel tasks carry no ``target``): an itinerary is
*feasible* when it breaks none of the rules below, and a feasible itinerary gets a score in [0, 1].

Itinerary shape. ``Itinerary.stops`` lists every place in order, **including the anchors**: when the
request names a ``start_poi`` it is ``stops[0]`` (the traveller leaves it at ``stops[0].depart_min``);
when it names an ``end_poi`` it is ``stops[-1]`` (reached at ``stops[-1].arrive_min``). The stops in
between are the *visits*. Times are minutes after midnight of the request's ``day``.

Rules (each broken rule is one violation sentence naming the stop index):

- every stop is a known POI; it is not closed that weekday; it is not entered before ``opens`` nor left
  after ``closes``; ``arrive_min <= depart_min``; all times lie inside ``[start_min, end_min]``;
- consecutive stops leave enough time to travel: ``next.arrive - this.depart >= travel - 0.5``
  (travel by the request's mode; the half minute accepts times rounded to the nearest minute);
- visits: each lasts at least half the POI's ``visit_minutes``; no POI is visited twice (the start and
  end anchor may be the same hotel); price level at most ``max_price_level``; no ``avoid_tags``;
- totals: ``min_stops <= visits <= max_stops``; every ``must_categories`` entry (a leaf category such as
  ``museum`` or a group such as ``food``) is covered by a visit; the visits' summed ``price`` is within
  ``budget``; the itinerary's mode is the requested mode; it starts at ``start_poi`` and ends at
  ``end_poi`` where given.

Score of a feasible itinerary (0 when infeasible), with ``V`` the visits::

    score = 0.4 * rating + 0.2 * want_tags + 0.2 * efficiency + 0.2 * variety
    rating     = mean(poi.rating for V) / 5
    want_tags  = |want_tags covered by some visit| / |want_tags|        (1.0 when none are wanted)
    efficiency = visit_min / (visit_min + travel_min)                  (0.0 when both are 0)
                 visit_min = sum(depart - arrive over V),
                 travel_min = sum(travel_time_minutes between consecutive stops, anchors included)
    variety    = |distinct leaf categories in V| / |V|

With no visits, rating and variety are 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.catalog import Item
from harness.tasks import Task
from infra.recordio import format_validation_error

Mode = Literal["walk", "transit", "taxi"]
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DAY_MINUTES = 1440

EARTH_RADIUS_KM = 6371.0
DETOUR_FACTOR = 1.3
"""Street distance / great-circle distance."""
MODE_SPEED_KMH: dict[str, float] = {"walk": 4.5, "transit": 18.0, "taxi": 25.0}
MODE_OVERHEAD_MIN: dict[str, float] = {"walk": 0.0, "transit": 6.0, "taxi": 3.0}
"""Fixed minutes per leg: waiting and walking to the stop (transit), hailing a cab (taxi)."""

TRAVEL_TOLERANCE_MIN = 0.5
MIN_VISIT_FRACTION = 0.5
SCORE_WEIGHTS: dict[str, float] = {"rating": 0.4, "want_tags": 0.2, "efficiency": 0.2, "variety": 0.2}
POI_ATTRIBUTES: tuple[str, ...] = (
    "lat", "lon", "opens", "closes", "closed_days", "visit_minutes", "price_level", "district", "tags",
)


def format_minutes(minutes: float) -> str:
    """``545 -> '09:05'`` (minutes after midnight; 1440 is ``'24:00'``)."""
    m = round(minutes)
    return f"{m // 60:02d}:{m % 60:02d}"


class Poi(BaseModel):
    """A point of interest: the typed view of a catalog ``Item`` whose ``category_path`` is
    ``['poi', group, category]`` and whose attributes carry the fields below."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    poi_id: str = Field(min_length=1, description="The item id, e.g. 'poi-00042'.")
    name: str = Field(min_length=1, description="Display name (the item title).")
    group: str = Field(min_length=1, description="culture | food | nature | shopping | nightlife | lodging.")
    category: str = Field(min_length=1, description="Leaf category, e.g. 'museum', 'ramen', 'hotel'.")
    lat: float = Field(ge=-90, le=90, description="Latitude, degrees.")
    lon: float = Field(ge=-180, le=180, description="Longitude, degrees.")
    opens: int = Field(ge=0, le=DAY_MINUTES, description="Opening time, minutes after midnight.")
    closes: int = Field(ge=0, le=DAY_MINUTES, description="Closing time, minutes after midnight (<= 1440).")
    closed_days: list[Weekday] = Field(default_factory=list, description="Weekdays it is closed.")
    visit_minutes: int = Field(ge=0, description="Typical dwell time, minutes.")
    price_level: int = Field(ge=1, le=4, description="1 = cheap … 4 = very expensive.")
    district: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list, description="e.g. kid-friendly, indoor, view, adults-only.")
    price: float = Field(ge=0, description="Ticket or typical spend per person, in the item currency.")
    rating: float = Field(ge=0, le=5, description="Mean rating, 0–5.")

    @model_validator(mode="after")
    def _hours(self) -> Poi:
        if self.closes <= self.opens:
            raise ValueError(f"closes ({self.closes}) must be after opens ({self.opens})")
        return self

    @classmethod
    def from_item(cls, item: Item) -> Poi:
        """The POI behind ``item``; ``ValueError`` naming the item and what is missing if it is not one.

        ``price`` None is read as 0 (free); ``rating`` is required (the score averages it).
        """
        path = item.category_path
        if len(path) != 3 or path[0] != "poi":
            raise ValueError(
                f"item {item.item_id!r} is not a POI: category_path {path!r} is not ['poi', group, category]"
            )
        missing = [k for k in POI_ATTRIBUTES if k not in item.attributes]
        if item.rating is None:
            missing.append("rating")
        if missing:
            raise ValueError(f"item {item.item_id!r} is not a POI: missing attribute {', '.join(missing)}")
        fields = {k: item.attributes[k] for k in POI_ATTRIBUTES}
        try:
            return cls(
                poi_id=item.item_id, name=item.title, group=path[1], category=path[2],
                price=item.price or 0.0, rating=item.rating, **fields,
            )
        except ValidationError as err:
            reason = format_validation_error(err)
            raise ValueError(f"item {item.item_id!r} is not a valid POI: {reason}") from err

    def to_item(self, description: str = "", currency: str = "USD") -> Item:
        """The catalog ``Item`` for this POI (inverse of :meth:`from_item`)."""
        attributes = {k: getattr(self, k) for k in POI_ATTRIBUTES}
        return Item(
            item_id=self.poi_id, title=self.name, description=description,
            category_path=["poi", self.group, self.category], attributes=attributes,
            price=self.price, currency=currency, rating=self.rating,
        )

    def is_open_on(self, day: str) -> bool:
        return day not in self.closed_days

    def covers(self, category: str) -> bool:
        """True when ``category`` names this POI's leaf category or its group."""
        return category in (self.category, self.group)


def pois_from_items(items: Iterable[Item]) -> dict[str, Poi]:
    """POIs by id from catalog items (every item must be a POI)."""
    return {item.item_id: Poi.from_item(item) for item in items}


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in km on a sphere of radius :data:`EARTH_RADIUS_KM`."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dlat, dlon = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dlat / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dlon / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


def travel_time_minutes(a: Poi, b: Poi, mode: Mode) -> float:
    """Door-to-door minutes from ``a`` to ``b``: ``overhead + haversine * DETOUR_FACTOR / speed``.

    0 for the same POI; symmetric (the pair is put in id order first, so floating point agrees too).
    """
    if a.poi_id == b.poi_id:
        return 0.0
    if b.poi_id < a.poi_id:
        a, b = b, a
    km = haversine_km(a.lat, a.lon, b.lat, b.lon) * DETOUR_FACTOR
    return MODE_OVERHEAD_MIN[mode] + km / MODE_SPEED_KMH[mode] * 60.0


class PlanConstraints(BaseModel):
    """The ``constraints`` of a travel ``Task`` (kinds plan, half_day, evening, with_kids)."""

    model_config = ConfigDict(extra="forbid")

    day: Weekday = Field(description="Weekday of the trip.")
    start_min: int = Field(ge=0, le=DAY_MINUTES, description="Day window start, minutes after midnight.")
    end_min: int = Field(ge=0, le=DAY_MINUTES, description="Day window end, minutes after midnight.")
    start_poi: str | None = Field(default=None, description="Where the day starts (stops[0]); None = free.")
    end_poi: str | None = Field(default=None, description="Where the day ends (stops[-1]); None = free.")
    must_categories: list[str] = Field(
        default_factory=list, description="Leaf categories (museum) or groups (food) a visit must cover."
    )
    min_stops: int = Field(default=1, ge=0, description="Fewest visits (anchors excluded).")
    max_stops: int = Field(default=8, ge=0, description="Most visits (anchors excluded).")
    max_price_level: int = Field(default=4, ge=1, le=4, description="Highest price level allowed per visit.")
    budget: float | None = Field(
        default=None, ge=0, description="Cap on the visits' summed price, item currency; None = no cap."
    )
    mode: Mode = Field(default="transit", description="How the traveller moves between stops.")
    avoid_tags: list[str] = Field(default_factory=list, description="No visit may carry these tags (hard).")
    want_tags: list[str] = Field(default_factory=list, description="Tags the traveller likes (scored, soft).")

    @model_validator(mode="after")
    def _consistent(self) -> PlanConstraints:
        if self.end_min <= self.start_min:
            raise ValueError(f"end_min ({self.end_min}) must be after start_min ({self.start_min})")
        if self.max_stops < self.min_stops:
            raise ValueError(f"max_stops ({self.max_stops}) is below min_stops ({self.min_stops})")
        return self

    @classmethod
    def from_task(cls, task: Task) -> PlanConstraints:
        if task.app != "travel":
            raise ValueError(f"task {task.task_id!r} is a {task.app} task, not a travel task")
        try:
            return cls.model_validate(task.constraints)
        except ValidationError as err:
            reason = format_validation_error(err)
            raise ValueError(f"task {task.task_id!r}: bad constraints: {reason}") from err


class Stop(BaseModel):
    model_config = ConfigDict(extra="forbid")

    poi_id: str = Field(min_length=1)
    arrive_min: int = Field(ge=0, description="Arrival, minutes after midnight.")
    depart_min: int = Field(ge=0, description="Departure, minutes after midnight.")


class Itinerary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stops: list[Stop] = Field(description="Places in order, anchors (start_poi, end_poi) included.")
    mode: Mode = "transit"


class CheckResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    feasible: bool
    violations: list[str] = Field(default_factory=list, description="One sentence per broken rule.")
    score: float = Field(ge=0, le=1, description="Weighted score (module docstring); 0 when infeasible.")
    breakdown: dict[str, float] = Field(default_factory=dict, description="Score components, unweighted.")


@dataclass
class _Ctx:
    """What the rule checks share: the itinerary, constraints, POIs and where the visits are."""

    it: Itinerary
    c: PlanConstraints
    pois: dict[str, Poi]
    first_visit: int
    end_visit: int  # exclusive

    def is_visit(self, i: int) -> bool:
        return self.first_visit <= i < self.end_visit

    def visits(self) -> list[tuple[int, Stop]]:
        return [(i, s) for i, s in enumerate(self.it.stops) if self.is_visit(i)]

    def label(self, i: int) -> str:
        stop = self.it.stops[i]
        poi = self.pois.get(stop.poi_id)
        return f"stop {i} ({poi.name}, {poi.poi_id})" if poi else f"stop {i} ({stop.poi_id})"


def check_itinerary(itinerary: Itinerary, task: Task, pois: dict[str, Poi]) -> CheckResult:
    """Feasibility and score of ``itinerary`` for travel ``task`` (rules and formula: module docstring)."""
    c = PlanConstraints.from_task(task)
    n = len(itinerary.stops)
    first = 1 if c.start_poi is not None else 0
    end = n - 1 if c.end_poi is not None else n
    ctx = _Ctx(itinerary, c, pois, first, max(first, end))
    violations = [
        *_check_shape(ctx), *_check_stops(ctx), *_check_duplicates(ctx), *_check_travel(ctx),
        *_check_totals(ctx),
    ]
    if violations:
        return CheckResult(feasible=False, violations=violations, score=0.0, breakdown={})
    breakdown = _score_parts(ctx)
    score = sum(SCORE_WEIGHTS[k] * v for k, v in breakdown.items())
    return CheckResult(feasible=True, score=min(1.0, max(0.0, score)), breakdown=breakdown)


def _check_shape(ctx: _Ctx) -> list[str]:
    """Anchors, mode and known POIs."""
    stops, c, out = ctx.it.stops, ctx.c, []
    if not stops:
        return ["the itinerary has no stops"]
    if ctx.it.mode != c.mode:
        out.append(f"the itinerary travels by {ctx.it.mode}, but the request asks for {c.mode}")
    if c.start_poi is not None and stops[0].poi_id != c.start_poi:
        out.append(f"stop 0 is {stops[0].poi_id}, but the day must start at {c.start_poi}")
    if c.end_poi is not None and stops[-1].poi_id != c.end_poi:
        out.append(f"stop {len(stops) - 1} is {stops[-1].poi_id}, but the day must end at {c.end_poi}")
    for i, stop in enumerate(stops):
        if stop.poi_id not in ctx.pois:
            out.append(f"stop {i}: unknown POI {stop.poi_id!r}")
    return out


def _check_stops(ctx: _Ctx) -> list[str]:
    """Per-stop rules: time order, day window, opening days and hours, and the visit-only rules."""
    c, out = ctx.c, []
    for i, stop in enumerate(ctx.it.stops):
        poi = ctx.pois.get(stop.poi_id)
        if poi is None:
            continue
        at, lab = (format_minutes(stop.arrive_min), format_minutes(stop.depart_min)), ctx.label(i)
        if stop.depart_min < stop.arrive_min:
            out.append(f"{lab}: departs at {at[1]}, before it arrives at {at[0]}")
        if stop.arrive_min < c.start_min:
            out.append(f"{lab}: arrives at {at[0]}, before the day starts at {format_minutes(c.start_min)}")
        if stop.depart_min > c.end_min:
            out.append(f"{lab}: departs at {at[1]}, after the day ends at {format_minutes(c.end_min)}")
        if not poi.is_open_on(c.day):
            out.append(f"{lab}: closed on {c.day}")
        elif stop.arrive_min < poi.opens:
            out.append(f"{lab}: arrives at {at[0]}, before it opens at {format_minutes(poi.opens)}")
        if poi.is_open_on(c.day) and stop.depart_min > poi.closes:
            out.append(f"{lab}: departs at {at[1]}, after it closes at {format_minutes(poi.closes)}")
        if ctx.is_visit(i):
            out.extend(_check_visit(ctx, i, poi))
    return out


def _check_visit(ctx: _Ctx, i: int, poi: Poi) -> list[str]:
    stop, c, lab, out = ctx.it.stops[i], ctx.c, ctx.label(i), []
    dwell = stop.depart_min - stop.arrive_min
    if 0 <= dwell < MIN_VISIT_FRACTION * poi.visit_minutes:
        out.append(f"{lab}: a visit of {dwell} min is shorter than half the typical {poi.visit_minutes} min")
    if poi.price_level > c.max_price_level:
        out.append(f"{lab}: price level {poi.price_level} is above the maximum {c.max_price_level}")
    for tag in c.avoid_tags:
        if tag in poi.tags:
            out.append(f"{lab}: has tag {tag!r}, which the request avoids")
    return out


def _check_travel(ctx: _Ctx) -> list[str]:
    stops, mode, out = ctx.it.stops, ctx.it.mode, []
    for i in range(len(stops) - 1):
        a, b = ctx.pois.get(stops[i].poi_id), ctx.pois.get(stops[i + 1].poi_id)
        if a is None or b is None:
            continue
        need = travel_time_minutes(a, b, mode)
        leave, arrive = stops[i].depart_min, stops[i + 1].arrive_min
        if arrive - leave < need - TRAVEL_TOLERANCE_MIN:
            out.append(
                f"stop {i} -> stop {i + 1}: travel by {mode} takes {need:.1f} min, but only {arrive - leave} "
                f"min are planned ({format_minutes(leave)} to {format_minutes(arrive)})"
            )
    return out


def _check_totals(ctx: _Ctx) -> list[str]:
    """Stop counts, must-categories and budget."""
    c, out = ctx.c, []
    visits = [(i, ctx.pois[s.poi_id]) for i, s in ctx.visits() if s.poi_id in ctx.pois]
    n = len(ctx.visits())
    if n < c.min_stops:
        out.append(f"{n} visits, fewer than the minimum of {c.min_stops}")
    if n > c.max_stops:
        out.append(f"{n} visits, more than the maximum of {c.max_stops}")
    for cat in c.must_categories:
        if not any(p.covers(cat) for _, p in visits):
            out.append(f"no visit covers the required category {cat!r}")
    spend = sum(p.price for _, p in visits)
    if c.budget is not None and spend > c.budget + 1e-9:
        out.append(f"total spend {spend:.2f} is over the budget of {c.budget:.2f}")
    return out


def _check_duplicates(ctx: _Ctx) -> list[str]:
    """No POI twice, except a round trip: the end anchor may repeat the start anchor."""
    stops, out = ctx.it.stops, []
    first_seen: dict[str, int] = {}
    round_trip = ctx.c.start_poi is not None and ctx.c.end_poi is not None
    for i, stop in enumerate(stops):
        j = first_seen.setdefault(stop.poi_id, i)
        if j != i and not (round_trip and j == 0 and i == len(stops) - 1):
            out.append(f"{ctx.label(i)}: the same POI as stop {j}")
    return out


def _score_parts(ctx: _Ctx) -> dict[str, float]:
    c, stops = ctx.c, ctx.it.stops
    visits = [(s, ctx.pois[s.poi_id]) for _, s in ctx.visits()]
    rating = sum(p.rating for _, p in visits) / (5.0 * len(visits)) if visits else 0.0
    if c.want_tags:
        covered = {t for t in c.want_tags if any(t in p.tags for _, p in visits)}
        want = len(covered) / len(set(c.want_tags))
    else:
        want = 1.0
    visit_min = float(sum(s.depart_min - s.arrive_min for s, _ in visits))
    travel_min = sum(
        travel_time_minutes(ctx.pois[a.poi_id], ctx.pois[b.poi_id], ctx.it.mode)
        for a, b in itertools.pairwise(stops)
    )
    total = visit_min + travel_min
    efficiency = visit_min / total if total > 0 else 0.0
    variety = len({p.category for _, p in visits}) / len(visits) if visits else 0.0
    return {"rating": rating, "want_tags": want, "efficiency": efficiency, "variety": variety}


# -- greedy planner ----------------------------------------------------------------------------------


class PoiIndex:
    """POIs as numpy columns (sorted by id) so the greedy planner scores all candidates at once.

    Build it once per catalog and pass it to :func:`plan_greedy` when planning many requests.
    """

    def __init__(self, pois: dict[str, Poi]) -> None:
        self.pois = pois
        self.ids = sorted(pois)
        self.position = {pid: k for k, pid in enumerate(self.ids)}
        rows = [pois[pid] for pid in self.ids]
        self.lat = np.radians(np.array([p.lat for p in rows], dtype=np.float64))  # (N,)
        self.lon = np.radians(np.array([p.lon for p in rows], dtype=np.float64))  # (N,)
        self.opens = np.array([p.opens for p in rows], dtype=np.int64)
        self.closes = np.array([p.closes for p in rows], dtype=np.int64)
        self.visit = np.array([p.visit_minutes for p in rows], dtype=np.int64)
        self.price = np.array([p.price for p in rows], dtype=np.float64)
        self.level = np.array([p.price_level for p in rows], dtype=np.int64)
        self.rating = np.array([p.rating for p in rows], dtype=np.float64)
        self.lodging = np.array([p.group == "lodging" for p in rows])
        self.rows = rows

    def travel_from(self, poi_id: str | None, mode: Mode) -> np.ndarray:
        """(N,) minutes from ``poi_id`` to every POI (same formula as :func:`travel_time_minutes`)."""
        if poi_id is None:
            return np.zeros(len(self.ids))
        k = self.position[poi_id]
        p1, p2 = self.lat[k], self.lat
        h = np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin((self.lon - self.lon[k]) / 2) ** 2
        km = 2 * EARTH_RADIUS_KM * np.arcsin(np.minimum(1.0, np.sqrt(h))) * DETOUR_FACTOR
        minutes = MODE_OVERHEAD_MIN[mode] + km / MODE_SPEED_KMH[mode] * 60.0
        minutes[k] = 0.0
        return minutes


def plan_greedy(task: Task, pois: dict[str, Poi], index: PoiIndex | None = None) -> Itinerary:
    """A simple feasible-by-construction plan: from the start, repeatedly add the best reachable visit.

    A candidate is reachable when it is open that day, within the price level, budget and tag limits,
    and a full typical visit (waiting for opening if early) still leaves time to reach ``end_poi`` by
    ``end_min``. Candidates covering an unmet must-category go first; among them the pick maximises
    ``rating/5 + 0.3 * new wanted tags + 0.2 * new category - (travel + wait) / 60``. It stops at
    ``max_stops`` or when nothing is reachable, so the result can still miss ``min_stops`` or a
    must-category: run :func:`check_itinerary` on it.
    """
    c = PlanConstraints.from_task(task)
    for anchor in (c.start_poi, c.end_poi):
        if anchor is not None and anchor not in pois:
            raise ValueError(f"task {task.task_id!r}: unknown anchor POI {anchor!r}")
    idx = index if index is not None else PoiIndex(pois)
    allowed = _allowed(idx, c)
    state = _GreedyState(unmet=set(c.must_categories), wanted=set(c.want_tags))
    t, cur = c.start_min, c.start_poi
    stops = [Stop(poi_id=cur, arrive_min=t, depart_min=t)] if cur is not None else []
    back = np.ceil(idx.travel_from(c.end_poi, c.mode))  # (N,) minutes from each POI to the end
    for _ in range(c.max_stops):
        travel = np.ceil(idx.travel_from(cur, c.mode))  # (N,)
        affordable = state.spent + idx.price <= (math.inf if c.budget is None else c.budget + 1e-9)
        k = _pick(idx, c, allowed & affordable, state, t, travel, back)
        if k is None:
            break
        poi = idx.rows[k]
        arrive = max(t + int(travel[k]), poi.opens)
        stops.append(Stop(poi_id=poi.poi_id, arrive_min=arrive, depart_min=arrive + poi.visit_minutes))
        allowed[k] = False
        state.visit(poi)
        cur, t = poi.poi_id, arrive + poi.visit_minutes
    if c.end_poi is not None:
        arrive = t + int(np.ceil(idx.travel_from(cur, c.mode))[idx.position[c.end_poi]])
        stops.append(Stop(poi_id=c.end_poi, arrive_min=arrive, depart_min=arrive))
    return Itinerary(stops=stops, mode=c.mode)


@dataclass
class _GreedyState:
    unmet: set[str]
    wanted: set[str]
    spent: float = 0.0
    categories: set[str] = field(default_factory=set)

    def visit(self, poi: Poi) -> None:
        self.unmet -= {poi.category, poi.group}
        self.wanted -= set(poi.tags)
        self.spent += poi.price
        self.categories.add(poi.category)


def _allowed(idx: PoiIndex, c: PlanConstraints) -> np.ndarray:
    """(N,) bool: POIs that may be visited at all under ``c`` (not lodging, open that day, limits)."""
    avoid = set(c.avoid_tags)
    anchors = {c.start_poi, c.end_poi}
    ok = [
        p.is_open_on(c.day) and not avoid.intersection(p.tags) and p.poi_id not in anchors
        for p in idx.rows
    ]
    return np.array(ok, dtype=bool) & ~idx.lodging & (idx.level <= c.max_price_level)


def _pick(
    idx: PoiIndex, c: PlanConstraints, allowed: np.ndarray, state: _GreedyState,
    t: int, travel: np.ndarray, back: np.ndarray,
) -> int | None:
    """Index of the best next visit at time ``t``, or None. ``travel``/``back``: (N,) minutes from the
    current place to each POI / from each POI to the end."""
    arrive = np.maximum(t + travel, idx.opens)  # (N,) wait for opening when early
    depart = arrive + idx.visit
    ok = allowed & (depart <= idx.closes) & (depart + back <= c.end_min)
    if not ok.any():
        return None
    if state.unmet:
        must = np.array([p.category in state.unmet or p.group in state.unmet for p in idx.rows])
        if (ok & must).any():
            ok &= must
    new_tags = np.array([len(state.wanted.intersection(p.tags)) for p in idx.rows], dtype=np.float64)
    new_cat = np.array([p.category not in state.categories for p in idx.rows], dtype=np.float64)
    gain = idx.rating / 5 + 0.3 * new_tags + 0.2 * new_cat - (arrive - t) / 60.0
    return int(np.argmax(np.where(ok, gain, -np.inf)))
