"""The travel world: a synthetic city of POIs, trip-planning requests and planning-session logs.

``generate_travel_world(TravelWorldConfig(), Path("runs/travel"))`` writes a world directory:

- ``catalog.jsonl``: one ``Item`` per POI, ``item_id`` ``poi-00042``, ``category_path``
  ``['poi', group, category]`` and the attributes of :class:`apps.travel.checker.Poi` (coordinates,
  opening hours, closed days, typical visit, price level, district, tags); ``price`` is the ticket or
  typical spend per person (the nightly rate for lodging), ``rating`` 0–5.
- ``tasks.jsonl``: ``Task(app="travel")`` of kind ``plan`` (a full day), ``half_day``, ``evening`` or
  ``with_kids``: one user message in natural language that states every constraint, and
  ``constraints`` in the shape of :class:`apps.travel.checker.PlanConstraints`. Travel tasks have no
  ``target``: the checker is the ground truth. ``meta['reference_itinerary']`` holds a feasible
  itinerary found by :func:`apps.travel.checker.plan_greedy` and ``meta['reference_score']`` its score,
  so every request is known to be solvable (a request the greedy planner cannot solve is relaxed —
  ``meta['relaxation']`` says how far — or drawn again).
- ``logs.jsonl``: one ``Session(app="travel")`` per request (``task_id`` links them): the request, the
  old assistant's plan, views and clicks on POIs, and sometimes a follow-up question.

Generation is deterministic per ``seed`` (separate seeded numpy Generators for the city, the requests
and the logs; no global random state).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from apps.travel.checker import (
    WEEKDAYS,
    Itinerary,
    Mode,
    PlanConstraints,
    Poi,
    PoiIndex,
    Weekday,
    check_itinerary,
    format_minutes,
    plan_greedy,
    travel_time_minutes,
)
from apps.travel.phrasings import TravelPack, heldout_packs
from apps.worlds import Progress, finish_world, no_progress
from data_curation.records import Event, Session, Turn
from harness.catalog import Item
from harness.tasks import Message, Task
from infra.layout import CATALOG_FILE, LOGS_FILE, TASKS_FILE
from infra.recordio import RecordWriter

__all__ = [
    "Poi", "TravelWorldConfig", "describe_poi", "generate_travel_world", "make_pois", "make_sessions", "make_tasks",
    "travel_time_minutes",
]

HELDOUT_DIR = "heldout"
"""``<world>/heldout/tasks.jsonl``: requests worded by the held-out phrasing packs (never trained on)."""
KM_PER_DEGREE = 2 * math.pi * 6371.0 / 360  # along a meridian, same sphere as the checker


class TravelWorldConfig(BaseModel):
    """How big and which city to generate. Every field has a default; the default world takes seconds."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, description="Seed of every random draw; same seed, same files.")
    city: str = Field(default="Lumen Bay", min_length=1, description="City name used in texts.")
    pois: int = Field(default=400, ge=30, le=100_000, description="Number of POIs (catalog items).")
    requests: int = Field(default=1000, ge=0, description="Number of planning requests (tasks); 0 = none.")
    heldout_requests: int = Field(default=300, ge=0, description="Requests worded by the held-out phrasing packs "
                                  "(apps/travel/phrasings/heldout/), written to heldout/tasks.jsonl. Default 300.")
    travellers: int = Field(default=300, ge=1, description="Distinct travellers (user ids) in the logs.")
    districts: int = Field(default=6, ge=2, le=8, description="Districts (POI clusters), 2–8.")
    area_km: float = Field(default=12.0, gt=2, le=100, description="Side of the square city area, km.")
    center_lat: float = Field(default=38.72, ge=-80, le=80, description="City centre latitude, degrees.")
    center_lon: float = Field(default=-9.14, ge=-180, le=180, description="City centre longitude, degrees.")
    currency: str = Field(default="EUR", pattern=r"^[A-Z]{3}$", description="ISO-4217 code of all prices.")
    logs_start: int = Field(
        default=1_748_736_000, ge=0, description="Unix time (s) of the log window start; default 2025-06-01Z."
    )
    log_days: int = Field(default=90, ge=1, description="Sessions start uniformly within this many days.")


# -- the city ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CategorySpec:
    group: str
    weight: float
    visit: tuple[int, int]  # typical dwell range, minutes
    hours: tuple[tuple[int, int], ...]  # (opens, closes) options, minutes after midnight
    closed: tuple[str, float] | None  # (weekday, probability it is closed that day)
    price: tuple[float, float]  # spend per person (nightly rate for lodging)
    tags: tuple[tuple[str, float], ...]  # (tag, probability)
    nouns: tuple[str, ...]
    label: str  # for descriptions


_CATEGORIES: dict[str, _CategorySpec] = {
    "museum": _CategorySpec("culture", 3, (60, 150), ((540, 1020), (600, 1080), (570, 1050)), ("mon", 0.6),
                            (8, 25), (("indoor", 1), ("historic", .5), ("kid-friendly", .4), ("crowded", .3),
                                      ("wheelchair-accessible", .6)),
                            ("Museum", "History Museum", "Science Museum", "Museum of Art"), "Museum"),
    "gallery": _CategorySpec("culture", 2, (45, 90), ((600, 1080), (660, 1140)), ("mon", .5), (0, 15),
                             (("indoor", 1), ("photogenic", .3), ("romantic", .2)),
                             ("Gallery", "Art Space", "Contemporary"), "Art gallery"),
    "temple": _CategorySpec("culture", 2, (30, 60), ((360, 1020), (420, 1080)), None, (0, 5),
                            (("historic", .9), ("outdoor", .5), ("photogenic", .6), ("crowded", .3)),
                            ("Temple", "Shrine", "Cathedral", "Chapel"), "Temple"),
    "castle": _CategorySpec("culture", 1, (90, 150), ((540, 1020),), ("tue", .2), (10, 30),
                            (("historic", 1), ("view", .6), ("kid-friendly", .5), ("crowded", .5),
                             ("outdoor", .5)), ("Castle", "Fortress", "Palace"), "Castle"),
    "theatre": _CategorySpec("culture", 1, (120, 180), ((1080, 1380), (840, 1380)), ("mon", .7), (25, 90),
                             (("indoor", 1), ("romantic", .4), ("historic", .3)),
                             ("Theatre", "Opera House", "Playhouse"), "Theatre"),
    "ramen": _CategorySpec("food", 3, (30, 60), ((660, 1320), (690, 1380)), ("wed", .3), (8, 18),
                           (("local-favourite", .5), ("indoor", 1), ("crowded", .4), ("late-night", .3)),
                           ("Ramen", "Noodle Bar", "Ramen House"), "Ramen shop"),
    "cafe": _CategorySpec("food", 4, (30, 60), ((420, 1080), (480, 1140)), ("sun", .2), (4, 12),
                          (("indoor", .8), ("kid-friendly", .5), ("vegetarian", .5), ("view", .15)),
                          ("Café", "Coffee House", "Espresso Bar", "Tea Room"), "Café"),
    "bakery": _CategorySpec("food", 2, (20, 40), ((420, 900), (390, 960)), ("mon", .4), (3, 10),
                            (("kid-friendly", .7), ("local-favourite", .5)),
                            ("Bakery", "Patisserie", "Bread Co."), "Bakery"),
    "street_food": _CategorySpec("food", 2, (20, 45), ((660, 1380), (1020, 1440)), None, (5, 12),
                                 (("outdoor", 1), ("local-favourite", .6), ("crowded", .5),
                                  ("kid-friendly", .5), ("late-night", .4)),
                                 ("Food Stalls", "Street Kitchen", "Hawker Lane"), "Street food"),
    "fine_dining": _CategorySpec("food", 1.5, (90, 150), ((720, 1380), (1080, 1380)), ("mon", .5), (60, 160),
                                 (("romantic", .7), ("indoor", 1), ("view", .3), ("vegetarian", .3)),
                                 ("Brasserie", "Bistro", "Dining Room"), "Fine-dining restaurant"),
    "seafood": _CategorySpec("food", 2, (60, 100), ((690, 1320),), ("tue", .3), (20, 60),
                             (("view", .4), ("local-favourite", .5), ("kid-friendly", .3)),
                             ("Fish House", "Oyster Bar", "Seafood Grill"), "Seafood restaurant"),
    "park": _CategorySpec("nature", 3, (45, 120), ((0, 1440), (360, 1320)), None, (0, 0),
                          (("outdoor", 1), ("kid-friendly", .8), ("photogenic", .3)),
                          ("Park", "Commons", "Green"), "Park"),
    "garden": _CategorySpec("nature", 1.5, (45, 90), ((540, 1020), (480, 1080)), ("mon", .3), (0, 12),
                            (("outdoor", 1), ("photogenic", .7), ("romantic", .4), ("kid-friendly", .4)),
                            ("Botanical Garden", "Rose Garden", "Japanese Garden"), "Garden"),
    "viewpoint": _CategorySpec("nature", 1.5, (20, 45), ((0, 1440), (360, 1380)), None, (0, 8),
                               (("view", 1), ("outdoor", 1), ("photogenic", .9), ("romantic", .6)),
                               ("Lookout", "Viewpoint", "Observation Deck"), "Viewpoint"),
    "beach": _CategorySpec("nature", 1, (90, 180), ((360, 1260),), None, (0, 0),
                           (("outdoor", 1), ("kid-friendly", .8), ("view", .6), ("crowded", .4)),
                           ("Beach", "Cove", "Sands"), "Beach"),
    "market": _CategorySpec("shopping", 2, (45, 90), ((420, 840), (480, 1140)), ("sun", .4), (5, 25),
                            (("local-favourite", .7), ("crowded", .6), ("outdoor", .5), ("kid-friendly", .3)),
                            ("Market", "Market Hall", "Flea Market"), "Market"),
    "mall": _CategorySpec("shopping", 1, (60, 120), ((600, 1260),), None, (20, 60),
                          (("indoor", 1), ("kid-friendly", .6), ("wheelchair-accessible", .9), ("crowded", .5)),
                          ("Mall", "Arcade", "Galleria"), "Shopping mall"),
    "boutique": _CategorySpec("shopping", 1.5, (30, 60), ((600, 1140), (660, 1200)), ("sun", .5), (20, 80),
                              (("indoor", 1), ("local-favourite", .3)),
                              ("Boutique", "Design Store", "Concept Store"), "Boutique"),
    "bar": _CategorySpec("nightlife", 2.5, (60, 120), ((1020, 1440), (960, 1440), (1080, 1440)), ("mon", .3),
                         (15, 45), (("adults-only", 1), ("late-night", .9), ("indoor", .7), ("crowded", .4)),
                         ("Bar", "Tavern", "Taproom", "Wine Bar"), "Bar"),
    "jazz_club": _CategorySpec("nightlife", 1, (90, 150), ((1140, 1440), (1200, 1440)), ("mon", .6), (20, 50),
                               (("adults-only", 1), ("late-night", 1), ("romantic", .5), ("indoor", 1)),
                               ("Jazz Club", "Blue Note", "Lounge"), "Jazz club"),
    "rooftop_lounge": _CategorySpec("nightlife", 1, (60, 120), ((1020, 1440),), None, (25, 70),
                                    (("adults-only", .8), ("view", 1), ("romantic", .8), ("late-night", .7)),
                                    ("Rooftop", "Sky Lounge", "Roof Terrace"), "Rooftop lounge"),
    "hotel": _CategorySpec("lodging", 2.5, (0, 0), ((0, 1440),), None, (80, 300),
                           (("indoor", 1), ("wheelchair-accessible", .7)),
                           ("Hotel", "Grand Hotel", "Inn", "Suites"), "Hotel"),
    "hostel": _CategorySpec("lodging", 1, (0, 0), ((0, 1440),), None, (25, 60), (("local-favourite", .3),),
                            ("Hostel", "Backpackers", "Guesthouse"), "Hostel"),
}

_DISTRICTS: tuple[tuple[str, dict[str, float]], ...] = (
    ("Old Town", {"culture": 2.0, "food": 1.5}),
    ("Harbourfront", {"food": 1.5, "nightlife": 1.5}),
    ("Museum Quarter", {"culture": 3.0}),
    ("Riverside", {"nature": 2.0}),
    ("Market Square", {"shopping": 3.0, "food": 1.5}),
    ("Little Tokyo", {"food": 2.0, "nightlife": 1.5}),
    ("Hillcrest", {"nature": 2.5}),
    ("University Park", {"nature": 1.5, "nightlife": 1.2}),
)

_DAY_NAMES = {"mon": "Monday", "tue": "Tuesday", "wed": "Wednesday", "thu": "Thursday", "fri": "Friday",
              "sat": "Saturday", "sun": "Sunday"}
_PROPER = (
    "Aurelia", "Juniper", "Crescent", "Lantern", "Saffron", "Marlowe", "Cobalt", "Willow", "Amber", "Falcon",
    "Orchid", "Granite", "Meridian", "Silver", "Cedar", "Tidewater", "Beacon", "Copper", "Maple", "Ivory",
    "Hawthorn", "Rosemary", "Starling", "Kestrel", "Old Mill", "North Gate", "Canal", "Sunset", "Fig Tree",
    "Blue Door", "Red Lantern", "Stone Bridge", "Pearl", "Garnet", "Chestnut", "Sparrow", "Wren", "Harbour",
)


def _pick(rng: np.random.Generator, seq: tuple[str, ...] | list[str]) -> str:
    return seq[int(rng.integers(len(seq)))]


def _price_level(price: float, group: str) -> int:
    scale = 4.0 if group == "lodging" else 1.0  # nightly rates are ~4x a day's spend
    return 1 + sum(price >= t * scale for t in (12, 35, 80))


def _district_centres(config: TravelWorldConfig, rng: np.random.Generator) -> list[tuple[float, float, float]]:
    """(x_km, y_km, spread_km) per district, inside the middle two thirds of the area."""
    half = config.area_km / 3
    return [
        (float(rng.uniform(-half, half)), float(rng.uniform(-half, half)), float(rng.uniform(0.6, 1.4)))
        for _ in range(config.districts)
    ]


def _category_weights(flavour: dict[str, float], lodging: bool) -> tuple[list[str], np.ndarray]:
    names = [n for n, s in _CATEGORIES.items() if (s.group == "lodging") == lodging]
    w = np.array([_CATEGORIES[n].weight * flavour.get(_CATEGORIES[n].group, 1.0) for n in names])
    return names, w / w.sum()


def _make_poi(
    k: int, category: str, district: str, xy: tuple[float, float], config: TravelWorldConfig,
    rng: np.random.Generator,
) -> Poi:
    spec = _CATEGORIES[category]
    opens, closes = spec.hours[int(rng.integers(len(spec.hours)))]
    closed = [spec.closed[0]] if spec.closed and rng.random() < spec.closed[1] else []
    if spec.group != "lodging" and rng.random() < 0.05:
        closed = sorted(set(closed) | {_pick(rng, list(WEEKDAYS))}, key=WEEKDAYS.index)
    price = float(round(rng.uniform(*spec.price)))
    tags = [t for t, p in spec.tags if rng.random() < p] + (["free"] if price == 0 else [])
    visit = 5 * round(rng.uniform(*spec.visit) / 5)
    lat = config.center_lat + xy[1] / KM_PER_DEGREE
    lon = config.center_lon + xy[0] / (KM_PER_DEGREE * math.cos(math.radians(config.center_lat)))
    return Poi(
        poi_id=f"poi-{k:05d}", name=f"{_pick(rng, _PROPER)} {_pick(rng, spec.nouns)}", group=spec.group,
        category=category, lat=round(lat, 6), lon=round(lon, 6), opens=opens, closes=closes,
        closed_days=closed, visit_minutes=visit, price_level=_price_level(price, spec.group),
        district=district, tags=sorted(tags), price=price,
        rating=round(float(np.clip(rng.normal(4.1, 0.45), 2.0, 5.0)), 1),
    )


def make_pois(config: TravelWorldConfig, rng: np.random.Generator) -> list[Poi]:
    """The city's POIs, clustered around district centres; the first POI of every district is lodging."""
    centres = _district_centres(config, rng)
    sizes = rng.dirichlet(np.full(config.districts, 4.0))
    half = config.area_km / 2
    pois: list[Poi] = []
    names: set[str] = set()
    for k in range(config.pois):
        d = k if k < config.districts else int(rng.choice(config.districts, p=sizes))
        district, flavour = _DISTRICTS[d]
        lodging = k < config.districts or rng.random() < 0.08
        cats, weights = _category_weights(flavour, lodging)
        category = cats[int(rng.choice(len(cats), p=weights))]
        cx, cy, spread = centres[d]
        xy = (float(np.clip(rng.normal(cx, spread), -half, half)), float(np.clip(rng.normal(cy, spread), -half, half)))
        poi = _make_poi(k, category, district, xy, config, rng)
        name = next(n for n in _name_variants(poi) if n not in names)
        names.add(name)
        pois.append(poi.model_copy(update={"name": name}))
    return pois


def _name_variants(poi: Poi) -> Iterator[str]:
    yield poi.name
    yield f"{poi.name} {poi.district}"
    for n in itertools.count(2):
        yield f"{poi.name} {poi.district} {n}"


def describe_poi(poi: Poi, city: str, currency: str) -> str:
    """A one-paragraph description for the catalog item (what a search index sees)."""
    spec = _CATEGORIES.get(poi.category)
    label = spec.label if spec else poi.category.replace("_", " ").capitalize()
    hours = "open 24 hours" if (poi.opens, poi.closes) == (0, 1440) else (
        f"open {format_minutes(poi.opens)}–{format_minutes(poi.closes)}"
    )
    closed = f", closed on {', '.join(_DAY_NAMES[d] + 's' for d in poi.closed_days)}" if poi.closed_days else ""
    cost = "free entry" if poi.price == 0 else f"about {poi.price:.0f} {currency}"
    if poi.group == "lodging":
        return f"{label} in {poi.district}, {city}; {cost} a night. Tags: {', '.join(poi.tags) or 'none'}."
    return (
        f"{label} in {poi.district}, {city}; {hours}{closed}. Typical visit {poi.visit_minutes} min, {cost}. "
        f"Tags: {', '.join(poi.tags) or 'none'}."
    )


# -- requests ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _KindSpec:
    weight: float
    windows: tuple[tuple[int, int], ...]  # (start_min, end_min) options
    min_stops: tuple[int, int]  # inclusive range
    extra_stops: tuple[int, int]  # max_stops - min_stops, inclusive range
    must_pool: tuple[str, ...]
    must_count: tuple[int, int]
    want_pool: tuple[str, ...]
    want_count: tuple[int, int]
    avoid: tuple[str, ...]
    avoid_prob: float
    modes: tuple[Mode, ...]  # drawn uniformly: repeat a mode to weight it
    budget: tuple[float, float]
    levels: tuple[int, ...]


_KINDS: dict[str, _KindSpec] = {
    "plan": _KindSpec(0.45, ((480, 1200), (540, 1260), (600, 1320), (540, 1080)), (2, 4), (1, 3),
                      ("museum", "gallery", "temple", "castle", "park", "garden", "viewpoint", "market", "ramen",
                       "seafood", "cafe", "culture", "nature", "food", "shopping"), (0, 2),
                      ("view", "historic", "local-favourite", "photogenic"), (0, 2), ("crowded",), 0.2,
                      ("transit", "transit", "taxi", "walk"), (40, 200), (2, 3, 4, 4)),
    "half_day": _KindSpec(0.2, ((540, 780), (600, 840), (780, 1080), (840, 1110)), (1, 2), (1, 2),
                          ("museum", "gallery", "temple", "park", "market", "cafe", "bakery", "boutique",
                           "culture", "food"), (0, 1),
                          ("historic", "photogenic", "local-favourite", "indoor"), (0, 1), ("crowded",), 0.2,
                          ("walk", "walk", "transit", "taxi"), (15, 80), (2, 3, 4)),
    "evening": _KindSpec(0.15, ((1020, 1380), (1080, 1440), (1110, 1440)), (2, 2), (0, 2),
                         ("bar", "jazz_club", "rooftop_lounge", "fine_dining", "seafood", "ramen", "food",
                          "nightlife"), (1, 2),
                         ("romantic", "view", "late-night"), (0, 2), ("crowded",), 0.3,
                         ("walk", "taxi", "taxi", "transit"), (50, 220), (3, 4, 4)),
    "with_kids": _KindSpec(0.2, ((570, 1080), (540, 1020), (600, 1110)), (2, 3), (1, 2),
                           ("park", "museum", "beach", "garden", "bakery", "castle", "nature", "food"), (0, 2),
                           ("kid-friendly", "outdoor"), (1, 2), ("adults-only",), 1.0,
                           ("transit", "taxi", "walk"), (30, 120), (2, 3)),
}


def _sample_constraints(
    rng: np.random.Generator, kind: str, start: str, end: str, day: Weekday,
) -> PlanConstraints:
    spec = _KINDS[kind]
    window = spec.windows[int(rng.integers(len(spec.windows)))]
    lo = int(rng.integers(spec.min_stops[0], spec.min_stops[1] + 1))
    musts = rng.permutation(len(spec.must_pool))[: int(rng.integers(spec.must_count[0], spec.must_count[1] + 1))]
    wants = rng.permutation(len(spec.want_pool))[: int(rng.integers(spec.want_count[0], spec.want_count[1] + 1))]
    return PlanConstraints(
        day=day, start_min=window[0], end_min=window[1], start_poi=start, end_poi=end,
        must_categories=[spec.must_pool[int(i)] for i in sorted(musts)],
        min_stops=lo, max_stops=lo + int(rng.integers(spec.extra_stops[0], spec.extra_stops[1] + 1)),
        max_price_level=spec.levels[int(rng.integers(len(spec.levels)))],
        budget=float(5 * round(rng.uniform(*spec.budget) / 5)) if rng.random() < 0.7 else None,
        mode=spec.modes[int(rng.integers(len(spec.modes)))],
        avoid_tags=list(spec.avoid) if rng.random() < spec.avoid_prob else [],
        want_tags=[spec.want_pool[int(i)] for i in sorted(wants)],
    )


def _relax(c: PlanConstraints, level: int) -> PlanConstraints:
    """Level 0 = as drawn; 1 = one stop fewer, one must-category, 1.5x budget; 2 = no must-categories,
    budget or price cap, one stop; 3 = also no avoided tags."""
    if level == 0:
        return c
    update: dict[str, Any] = {
        "min_stops": max(1, c.min_stops - 1), "must_categories": c.must_categories[:1],
        "budget": None if c.budget is None else float(5 * math.ceil(c.budget * 1.5 / 5)),
    }
    if level >= 2:
        update.update(min_stops=1, must_categories=[], budget=None, max_price_level=4)
    if level >= 3:
        update["avoid_tags"] = []
    return c.model_copy(update=update)


@dataclass
class _Planner:
    """Draws solvable requests against one city."""

    pois: dict[str, Poi]
    index: PoiIndex
    hotels: list[str]
    config: TravelWorldConfig
    kinds: list[str] = field(default_factory=lambda: list(_KINDS))
    packs: tuple[TravelPack, ...] = ()
    """Held-out phrasing packs (:mod:`apps.travel.phrasings`): when given, each request is worded by one of them."""

    def task(self, i: int, rng: np.random.Generator) -> Task:
        weights = np.array([_KINDS[k].weight for k in self.kinds])
        kind = self.kinds[int(rng.choice(len(self.kinds), p=weights / weights.sum()))]
        for _ in range(10):
            start = _pick(rng, self.hotels)
            end = start if rng.random() < 0.8 else _pick(rng, self.hotels)
            base = _sample_constraints(rng, kind, start, end, WEEKDAYS[int(rng.integers(len(WEEKDAYS)))])
            for level in range(4):
                c = _relax(base, level)
                # The message is written once the constraints are final (it must state all of them).
                task = Task(task_id=f"travel-{i:06d}", app="travel", kind=kind,
                            messages=[Message(role="user", content="-")], constraints=c.model_dump(mode="json"))
                itinerary = plan_greedy(task, self.pois, self.index)
                result = check_itinerary(itinerary, task, self.pois)
                if result.feasible:
                    meta = {"reference_itinerary": itinerary.model_dump(mode="json"),
                            "reference_score": round(result.score, 6), "relaxation": level,
                            "city": self.config.city}
                    if self.packs:
                        pack = self.packs[int(rng.integers(len(self.packs)))]
                        text = _pack_text(rng, kind, c, self.pois, self.config, pack)
                        meta["family"] = pack.family
                        task = task.model_copy(update={"task_id": f"travel-h-{i:06d}"})
                    else:
                        text = _request_text(rng, kind, c, self.pois, self.config)
                    return task.model_copy(update={"messages": [Message(role="user", content=text)], "meta": meta})
        raise RuntimeError(f"could not draw a solvable {kind!r} request in 10 tries (is the city too small?)")


def make_tasks(config: TravelWorldConfig, pois: list[Poi], rng: np.random.Generator, packs: tuple[TravelPack, ...] = (),
               n: int | None = None) -> Iterator[Task]:
    """``n`` (default ``config.requests``) solvable planning requests, one at a time; worded by ``packs`` (the
    held-out phrasing packs) when given, else by the world's templates."""
    by_id = {p.poi_id: p for p in pois}
    hotels = [p.poi_id for p in pois if p.group == "lodging"]
    planner = _Planner(by_id, PoiIndex(by_id), hotels, config, packs=packs)
    for i in range(config.requests if n is None else n):
        yield planner.task(i, rng)


# -- request texts -----------------------------------------------------------------------------------

_PHRASES = {
    "museum": "a museum", "gallery": "an art gallery", "temple": "a temple or shrine", "castle": "a castle",
    "theatre": "a theatre show", "ramen": "a bowl of ramen", "cafe": "a coffee break in a café",
    "bakery": "a bakery", "street_food": "street food", "fine_dining": "a fine-dining dinner",
    "seafood": "seafood", "park": "a park", "garden": "a garden", "viewpoint": "a viewpoint",
    "beach": "the beach", "market": "a market", "mall": "a shopping mall", "boutique": "some boutiques",
    "bar": "a bar", "jazz_club": "a jazz club", "rooftop_lounge": "a rooftop lounge",
    "culture": "something cultural", "food": "somewhere to eat", "nature": "some nature",
    "shopping": "some shopping", "nightlife": "a night spot",
    "view": "a good view", "historic": "some history", "local-favourite": "places locals love",
    "photogenic": "photogenic spots", "romantic": "a romantic atmosphere", "late-night": "places open late",
    "kid-friendly": "kid-friendly places", "outdoor": "time outdoors", "indoor": "indoor places",
    "crowded": "crowded places", "adults-only": "adults-only venues",
}
PHRASE_KEYS = tuple(_PHRASES)
"""Categories, groups and tags a request can name (the keys a phrasing pack's ``phrases`` may reword)."""
_INTROS = {
    "plan": ("Can you plan a day out for me?", "Help me plan a full day in {city}.",
             "I'd like an itinerary for one day in {city}."),
    "half_day": ("I only have a few hours.", "Plan a short half-day outing for me.",
                 "Got a free half day in {city}, ideas?"),
    "evening": ("Looking for a nice evening out.", "Plan our night out in {city}.",
                "What should we do tonight?"),
    "with_kids": ("I'm travelling with two kids (6 and 9).", "Family day out with small children, please.",
                  "We have the kids with us — plan something fun."),
}
_MODE_TEXT: dict[str, tuple[str, ...]] = {
    "walk": ("We'll walk everywhere.", "On foot only.", "No transport, we walk."),
    "transit": ("We'll use public transport.", "Getting around by metro and bus.", "Transit only."),
    "taxi": ("We'll take taxis between places.", "We'll go by cab.", "Taxi is fine for getting around."),
}


def _say_time(rng: np.random.Generator, m: int) -> str:
    if m >= 1440:
        return _pick(rng, ("midnight", "24:00"))
    h, mm = divmod(m, 60)
    if h == 12 and mm == 0 and rng.random() < 0.5:
        return "noon"
    clock = f"{h}:{mm:02d}"
    ampm = f"{(h - 1) % 12 + 1}{'' if mm == 0 else f':{mm:02d}'}{'am' if h < 12 else 'pm'}"
    return clock if rng.random() < 0.5 else ampm


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _request_text(
    rng: np.random.Generator, kind: str, c: PlanConstraints, pois: dict[str, Poi], config: TravelWorldConfig,
) -> str:
    """One user message stating every constraint in ``c`` (order and wording vary)."""
    assert c.start_poi is not None and c.end_poi is not None
    city, currency = config.city, config.currency
    day, s, e = _DAY_NAMES[c.day], _say_time(rng, c.start_min), _say_time(rng, c.end_min)
    hotel, end_hotel = pois[c.start_poi].name, pois[c.end_poi].name
    intro = _pick(rng, _INTROS[kind]).format(city=city)
    parts = [
        _pick(rng, (f"I'm staying at {hotel}.", f"Our hotel is {hotel}.", f"We start from {hotel}.")),
        _pick(rng, (f"I'm free on {day} from {s} to {e}.", f"{day}, {s}–{e}.", f"We have {day} between {s} and {e}.")),
        f"We need to be back at the hotel by {e}." if c.end_poi == c.start_poi else
        f"We move to {end_hotel} that night, so end the day there by {e}.",
        f"Exactly {c.min_stops} stop{'s' if c.min_stops > 1 else ''} please." if c.min_stops == c.max_stops else
        _pick(rng, (f"{c.min_stops} to {c.max_stops} stops.", f"Between {c.min_stops} and {c.max_stops} places.",
                    f"At least {c.min_stops} and at most {c.max_stops} stops.")),
        _pick(rng, _MODE_TEXT[c.mode]),
    ]
    if c.must_categories:
        musts = _join([_PHRASES.get(m, m) for m in c.must_categories])
        parts.append(_pick(rng, (f"It must include {musts}.", f"I definitely want {musts}.")))
    if c.want_tags:
        wants = _join([_PHRASES[t] for t in c.want_tags])
        parts.append(_pick(rng, (f"Ideally {wants}.", f"Bonus points for {wants}.")))
    if c.avoid_tags:
        parts.append(f"Please avoid {_join([_PHRASES[t] for t in c.avoid_tags])}.")
    if c.budget is not None:
        parts.append(_pick(rng, (f"Total budget {c.budget:.0f} {currency} per person.",
                                 f"Keep total spending under {c.budget:.0f} {currency}.")))
    if c.max_price_level < 4:
        parts.append(_pick(rng, (f"Nothing pricier than {'$' * c.max_price_level}.",
                                 f"Price level {c.max_price_level} of 4 at most.")))
    order = rng.permutation(len(parts))
    return " ".join([intro, *(parts[int(k)] for k in order)])


def _pack_text(
    rng: np.random.Generator, kind: str, c: PlanConstraints, pois: dict[str, Poi], config: TravelWorldConfig,
    pack: TravelPack,
) -> str:
    """One user message stating every constraint in ``c``, worded by a held-out phrasing pack."""
    assert c.start_poi is not None and c.end_poi is not None

    def pick(seq: list[str]) -> str:
        return str(seq[int(rng.integers(len(seq)))])

    def phrase(key: str) -> str:
        return pick(pack.phrases[key]) if pack.phrases.get(key) else _PHRASES.get(key, key)

    e = _say_time(rng, c.end_min)
    parts = [
        pick(pack.lodging).format(hotel=pois[c.start_poi].name),
        pick(pack.window).format(day=_DAY_NAMES[c.day], start=_say_time(rng, c.start_min), end=e),
        pick(pack.end_same).format(end=e) if c.end_poi == c.start_poi else
        pick(pack.end_move).format(end_hotel=pois[c.end_poi].name, end=e),
        pick(pack.stops_exact).format(n=c.min_stops, s="" if c.min_stops == 1 else "s")
        if c.min_stops == c.max_stops else pick(pack.stops_range).format(min=c.min_stops, max=c.max_stops),
        pick(pack.mode[c.mode]),
    ]
    if c.must_categories:
        parts.append(pick(pack.must).format(musts=_join([phrase(m) for m in c.must_categories])))
    if c.want_tags:
        parts.append(pick(pack.want).format(wants=_join([phrase(t) for t in c.want_tags])))
    if c.avoid_tags:
        parts.append(pick(pack.avoid).format(avoid=_join([phrase(t) for t in c.avoid_tags])))
    if c.budget is not None:
        parts.append(pick(pack.budget).format(budget=f"{c.budget:.0f}", currency=config.currency))
    if c.max_price_level < 4:
        parts.append(pick(pack.price_level).format(level=c.max_price_level, dollars="$" * c.max_price_level))
    order = rng.permutation(len(parts))
    return " ".join([pick(pack.intro[kind]).format(city=config.city), *(parts[int(k)] for k in order)])


# -- logs --------------------------------------------------------------------------------------------


@dataclass
class _Clock:
    now: float

    def tick(self, rng: np.random.Generator, lo: float, hi: float) -> float:
        self.now = round(self.now + float(rng.uniform(lo, hi)), 3)
        return self.now


def _plan_reply(itinerary: Itinerary, pois: dict[str, Poi]) -> str:
    visits = itinerary.stops[1:-1]
    steps = ", ".join(f"{format_minutes(s.arrive_min)} {pois[s.poi_id].name}" for s in visits)
    last = itinerary.stops[-1]
    return f"Here's a plan: {steps}; you reach {pois[last.poi_id].name} at {format_minutes(last.arrive_min)}."


def _follow_up(
    rng: np.random.Generator, task: Task, itinerary: Itinerary, pois: dict[str, Poi],
) -> tuple[str, str]:
    """A follow-up question and the assistant's answer."""
    visits = [pois[s.poi_id] for s in itinerary.stops[1:-1]]
    a, b = visits[0], visits[-1]
    day = task.constraints["day"]
    choice = int(rng.integers(4))
    if choice == 0:
        minutes = travel_time_minutes(a, b, itinerary.mode)
        return (f"How long from {a.name} to {b.name} by {itinerary.mode}?", f"About {minutes:.0f} minutes.")
    if choice == 1:
        open_ = "open" if a.is_open_on(day) else "closed"
        return (f"Is {a.name} open on {_DAY_NAMES[day]}?",
                f"It is {open_} that day, {format_minutes(a.opens)}–{format_minutes(a.closes)}.")
    if choice == 2 and len(visits) > 1:
        return (f"Can we skip {b.name}?", "Sure, I've dropped it; you'll have more time at the other stops.")
    return ("Thanks, that works!", "Enjoy your day!")


def _session(
    i: int, task: Task, user: int, started_at: float, pois: dict[str, Poi], rng: np.random.Generator,
) -> Session:
    itinerary = Itinerary.model_validate(task.meta["reference_itinerary"])
    clock = _Clock(started_at)
    turns = [Turn(role="user", text=task.messages[0].content, ts=clock.now)]
    events: list[Event] = []
    if task.constraints["must_categories"] and rng.random() < 0.5:
        district = pois[task.constraints["start_poi"]].district
        query = f"{task.constraints['must_categories'][0].replace('_', ' ')} {district}"
        events.append(Event(type="search", query=query, ts=clock.tick(rng, 2, 10)))
    turns.append(Turn(role="assistant", text=_plan_reply(itinerary, pois), ts=clock.tick(rng, 3, 15)))
    visits = [s.poi_id for s in itinerary.stops[1:-1]]
    browsed = visits + [str(x) for x in rng.choice(sorted(pois), size=int(rng.integers(0, 5)), replace=False)]
    for pid in browsed:
        events.append(Event(type="view", item_id=pid, ts=clock.tick(rng, 3, 40)))
        if pid in visits and rng.random() < 0.5:
            events.append(Event(type="click", item_id=pid, ts=clock.tick(rng, 2, 15)))
    if rng.random() < 0.6:
        question, answer = _follow_up(rng, task, itinerary, pois)
        turns.append(Turn(role="user", text=question, ts=clock.tick(rng, 20, 120)))
        turns.append(Turn(role="assistant", text=answer, ts=clock.tick(rng, 3, 10)))
    return Session(session_id=f"tsess-{i:06d}", user_id=f"traveller-{user:05d}", app="travel",
                   started_at=started_at, turns=turns, events=events, task_id=task.task_id)


def make_sessions(
    config: TravelWorldConfig, tasks: list[Task], pois: list[Poi], rng: np.random.Generator,
) -> list[Session]:
    """One planning session per task, by a random traveller, sorted by start time."""
    by_id = {p.poi_id: p for p in pois}
    sessions = []
    for i, task in enumerate(tasks):
        user = int(rng.integers(config.travellers))
        started = round(config.logs_start + float(rng.uniform(0, config.log_days * 86_400)), 3)
        sessions.append(_session(i, task, user, started, by_id, rng))
    return sorted(sessions, key=lambda s: (s.started_at, s.session_id))


# -- the world ---------------------------------------------------------------------------------------


def _write(path: Path, records: Iterable[BaseModel], model: type[BaseModel], progress: Progress) -> int:
    """Write ``records``, calling ``progress`` every 100 records and once at the end."""
    pending = 0
    with RecordWriter(path, model) as writer:
        for record in records:
            writer.write(record)
            pending += 1
            if pending == 100:
                progress(pending)
                pending = 0
    if pending:
        progress(pending)
    return writer.count


def generate_travel_world(
    config: TravelWorldConfig, out: Path, progress: Progress | None = None,
) -> dict[str, int]:
    """Write catalog.jsonl, tasks.jsonl, logs.jsonl and manifest.json into ``out``; return the counts."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tick: Callable[[int], None] = progress or no_progress
    pois = make_pois(config, np.random.default_rng([config.seed, 1]))
    items: list[Item] = [p.to_item(describe_poi(p, config.city, config.currency), config.currency) for p in pois]
    n_items = _write(out / CATALOG_FILE, items, Item, tick)
    tasks: list[Task] = []

    def keep(stream: Iterator[Task]) -> Iterator[Task]:
        for task in stream:
            tasks.append(task)
            yield task

    n_tasks = _write(out / TASKS_FILE, keep(make_tasks(config, pois, np.random.default_rng([config.seed, 2]))),
                     Task, tick)
    sessions = make_sessions(config, tasks, pois, np.random.default_rng([config.seed, 3]))
    n_sessions = _write(out / LOGS_FILE, sessions, Session, tick)
    packs = heldout_packs()
    (out / HELDOUT_DIR / TASKS_FILE).unlink(missing_ok=True)  # a rerun without held-out packs leaves no old file
    n_heldout = _write(out / HELDOUT_DIR / TASKS_FILE, make_tasks(config, pois, np.random.default_rng([config.seed, 4]),
                                                                   packs, config.heldout_requests), Task, tick) \
        if packs and config.heldout_requests else 0
    counts = {
        "items": n_items, "tasks": n_tasks, "sessions": n_sessions,
        "turns": sum(len(s.turns) for s in sessions), "events": sum(len(s.events) for s in sessions),
        "relaxed_tasks": sum(t.meta["relaxation"] > 0 for t in tasks),
        "travellers": len({s.user_id for s in sessions}), "heldout_tasks": n_heldout,
    }
    finish_world(out, "travel", config, counts)
    return counts
