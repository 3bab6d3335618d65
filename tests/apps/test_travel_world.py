"""Travel world: generator files, travel times, the itinerary checker and the greedy planner.

Run: ``.venv/bin/python -m pytest tests/apps/test_travel_world.py -q``
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path

import pytest

from apps.travel.checker import (
    CheckResult,
    Itinerary,
    Poi,
    Stop,
    check_itinerary,
    haversine_km,
    plan_greedy,
    pois_from_items,
    travel_time_minutes,
)
from apps.travel.world import TravelWorldConfig, generate_travel_world
from data_curation.records import Session
from harness.catalog import Item
from harness.tasks import Message, Task
from infra.layout import CATALOG_FILE, LOGS_FILE, TASKS_FILE
from infra.recordio import read_records

KM_PER_DEG = 2 * math.pi * 6371.0 / 360  # one degree of latitude (or of longitude on the equator), km
WALK_1KM = 1.3 / 4.5 * 60  # detour 1.3, 4.5 km/h -> 17.33 min


def _poi(pid: str, category: str, group: str, km_east: float, km_north: float = 0.0) -> Poi:
    """A POI on the equator (so 1 km east is exactly 1/KM_PER_DEG degrees of longitude)."""
    return Poi(
        poi_id=pid, name=f"Test {category}", group=group, category=category, lat=km_north / KM_PER_DEG,
        lon=km_east / KM_PER_DEG, opens=0, closes=1440, closed_days=[], visit_minutes=0, price_level=1,
        district="Centre", tags=[], price=0.0, rating=3.0,
    )


@pytest.fixture
def pois() -> dict[str, Poi]:
    """Hotel at 0 km, museum 1 km east, café 1 km west, a second hotel 1 km north, a bar 2 km east."""
    hotel = _poi("poi-h", "hotel", "lodging", 0.0)
    museum = _poi("poi-m", "museum", "culture", 1.0).model_copy(update={
        "opens": 540, "closes": 1020, "closed_days": ["mon"], "visit_minutes": 60, "price_level": 2,
        "price": 15.0, "rating": 4.5, "tags": ["historic", "indoor"]})
    cafe = _poi("poi-c", "cafe", "food", -1.0).model_copy(update={
        "opens": 480, "closes": 1080, "visit_minutes": 40, "price": 6.0, "rating": 4.0, "tags": ["kid-friendly"]})
    hotel2 = _poi("poi-h2", "hotel", "lodging", 0.0, 1.0)
    bar = _poi("poi-b", "bar", "nightlife", 2.0).model_copy(update={
        "opens": 1020, "visit_minutes": 60, "price_level": 3, "price": 30.0, "tags": ["adults-only"]})
    return {p.poi_id: p for p in (hotel, museum, cafe, hotel2, bar)}


def _task(**constraints: object) -> Task:
    base: dict[str, object] = {
        "day": "sat", "start_min": 540, "end_min": 1020, "start_poi": "poi-h", "end_poi": "poi-h",
        "must_categories": ["museum"], "min_stops": 2, "max_stops": 3, "max_price_level": 3, "budget": 30.0,
        "mode": "walk", "avoid_tags": ["adults-only"], "want_tags": ["historic", "view"],
    }
    unknown = set(constraints) - set(base)
    assert not unknown, f"typo in test constraints: {unknown}"
    base.update(constraints)
    return Task(task_id="t-1", app="travel", kind="plan", messages=[Message(role="user", content="plan")],
                constraints=base)


def _plan(*stops: tuple[str, int, int], mode: str = "walk") -> Itinerary:
    return Itinerary.model_validate({"stops": [Stop(poi_id=p, arrive_min=a, depart_min=d) for p, a, d in stops],
                                     "mode": mode})


# hotel 09:00 -> museum 09:20-10:20 -> café 11:00-11:40 -> hotel 12:00 (walk legs 17.3, 34.7, 17.3 min)
GOOD = (("poi-h", 540, 540), ("poi-m", 560, 620), ("poi-c", 660, 700), ("poi-h", 720, 720))


def _only_violation(result: CheckResult) -> str:
    assert not result.feasible and result.score == 0.0
    assert len(result.violations) == 1, result.violations
    return result.violations[0]


# -- travel time -------------------------------------------------------------------------------------


def test_haversine_matches_hand_values() -> None:
    assert haversine_km(0.0, 0.0, 0.0, 1.0) == pytest.approx(111.19492664455873, rel=1e-12)
    assert haversine_km(10.0, 20.0, 10.0 + 1 / KM_PER_DEG, 20.0) == pytest.approx(1.0, rel=1e-12)
    assert haversine_km(0.0, 0.0, 0.0, 180.0) == pytest.approx(math.pi * 6371.0)


def test_travel_time_one_km_apart() -> None:
    a = _poi("poi-a", "park", "nature", 0.0).model_copy(update={"lat": 10.0, "lon": 20.0})
    b = a.model_copy(update={"poi_id": "poi-b", "lat": 10.0 + 1 / KM_PER_DEG})
    assert travel_time_minutes(a, b, "walk") == pytest.approx(1.3 / 4.5 * 60)  # 17.333
    assert travel_time_minutes(a, b, "transit") == pytest.approx(6 + 1.3 / 18 * 60)  # 10.333
    assert travel_time_minutes(a, b, "taxi") == pytest.approx(3 + 1.3 / 25 * 60)  # 6.12
    for mode in ("walk", "transit", "taxi"):
        assert travel_time_minutes(a, b, mode) == travel_time_minutes(b, a, mode)  # exactly symmetric
        assert travel_time_minutes(a, a, mode) == 0.0
    twin = a.model_copy(update={"poi_id": "poi-twin"})  # same spot, other POI: only the overhead
    assert travel_time_minutes(a, twin, "transit") == pytest.approx(6.0)


def test_travel_time_symmetric_on_generated_pairs(tmp_path: Path) -> None:
    generate_travel_world(TravelWorldConfig(pois=40, requests=0, travellers=1), tmp_path)
    items, _ = read_records(tmp_path / CATALOG_FILE, Item)
    pois = list(pois_from_items(items).values())
    for a, b in itertools.pairwise(pois):
        assert travel_time_minutes(a, b, "taxi") == travel_time_minutes(b, a, "taxi") > 3.0


# -- Poi view ----------------------------------------------------------------------------------------


def test_poi_item_round_trip(pois: dict[str, Poi]) -> None:
    for poi in pois.values():
        assert Poi.from_item(poi.to_item("desc", "EUR")) == poi


def test_poi_from_non_poi_item_names_the_item() -> None:
    shoe = Item(item_id="sku-1", title="Boot", category_path=["Outdoor", "Footwear"], price=90.0)
    with pytest.raises(ValueError, match=r"item 'sku-1' is not a POI: category_path"):
        Poi.from_item(shoe)


def test_poi_from_item_missing_attribute(pois: dict[str, Poi]) -> None:
    item = pois["poi-m"].to_item()
    del item.attributes["opens"]
    with pytest.raises(ValueError, match=r"item 'poi-m' is not a POI: missing attribute opens"):
        Poi.from_item(item)


def test_poi_from_item_bad_value(pois: dict[str, Poi]) -> None:
    item = pois["poi-m"].to_item()
    item.attributes["closes"] = 100
    with pytest.raises(ValueError, match=r"item 'poi-m' is not a valid POI: .*closes"):
        Poi.from_item(item)


# -- checker -----------------------------------------------------------------------------------------


def test_feasible_itinerary_exact_score(pois: dict[str, Poi]) -> None:
    result = check_itinerary(_plan(*GOOD), _task(), pois)
    assert result.feasible, result.violations
    assert result.violations == []
    # rating (4.5 + 4.0) / 2 / 5 = 0.85; want_tags: 'historic' yes, 'view' no = 0.5; variety 2/2 = 1;
    # efficiency: 100 visit min / (100 + 4 km * 17.33 min/km travel) = 100 / 169.33 = 75/127.
    assert result.breakdown == pytest.approx(
        {"rating": 0.85, "want_tags": 0.5, "efficiency": 75 / 127, "variety": 1.0})
    assert result.score == pytest.approx(0.4 * 0.85 + 0.2 * 0.5 + 0.2 * 75 / 127 + 0.2 * 1.0)
    assert result.score == pytest.approx(0.7581102362)


def test_no_want_tags_scores_full_coverage(pois: dict[str, Poi]) -> None:
    result = check_itinerary(_plan(*GOOD), _task(want_tags=[]), pois)
    assert result.breakdown["want_tags"] == 1.0


def test_unknown_poi(pois: dict[str, Poi]) -> None:
    plan = _plan(GOOD[0], GOOD[1], ("poi-nope", 660, 700), GOOD[3])
    assert _only_violation(check_itinerary(plan, _task(), pois)) == "stop 2: unknown POI 'poi-nope'"


def test_closed_that_day(pois: dict[str, Poi]) -> None:
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(day="mon"), pois))
    assert got == "stop 1 (Test museum, poi-m): closed on mon"


def test_arrives_before_opening(pois: dict[str, Poi]) -> None:
    pois["poi-m"] = pois["poi-m"].model_copy(update={"opens": 570})
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(), pois))
    assert got == "stop 1 (Test museum, poi-m): arrives at 09:20, before it opens at 09:30"


def test_departs_after_closing(pois: dict[str, Poi]) -> None:
    pois["poi-c"] = pois["poi-c"].model_copy(update={"closes": 690})
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(), pois))
    assert got == "stop 2 (Test cafe, poi-c): departs at 11:40, after it closes at 11:30"


def test_departs_before_arriving(pois: dict[str, Poi]) -> None:
    plan = _plan(GOOD[0], ("poi-m", 620, 560), GOOD[2], GOOD[3])
    got = _only_violation(check_itinerary(plan, _task(), pois))
    assert got == "stop 1 (Test museum, poi-m): departs at 09:20, before it arrives at 10:20"


def test_travel_longer_than_gap(pois: dict[str, Poi]) -> None:
    plan = _plan(GOOD[0], ("poi-m", 550, 620), GOOD[2], GOOD[3])
    got = _only_violation(check_itinerary(plan, _task(), pois))
    assert got == "stop 0 -> stop 1: travel by walk takes 17.3 min, but only 10 min are planned (09:00 to 09:10)"


def test_travel_rounded_to_the_minute_is_accepted(pois: dict[str, Poi]) -> None:
    plan = _plan(GOOD[0], ("poi-m", 557, 620), GOOD[2], GOOD[3])  # 17 min for a 17.33-min walk
    assert check_itinerary(plan, _task(), pois).feasible


def test_visit_too_short(pois: dict[str, Poi]) -> None:
    plan = _plan(GOOD[0], ("poi-m", 560, 580), GOOD[2], GOOD[3])
    got = _only_violation(check_itinerary(plan, _task(), pois))
    assert got == "stop 1 (Test museum, poi-m): a visit of 20 min is shorter than half the typical 60 min"


def test_before_the_day_starts(pois: dict[str, Poi]) -> None:
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(start_min=550), pois))
    assert got == "stop 0 (Test hotel, poi-h): arrives at 09:00, before the day starts at 09:10"


def test_after_the_day_ends(pois: dict[str, Poi]) -> None:
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(end_min=700), pois))
    assert got == "stop 3 (Test hotel, poi-h): departs at 12:00, after the day ends at 11:40"


def test_over_budget(pois: dict[str, Poi]) -> None:
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(budget=20.0), pois))
    assert got == "total spend 21.00 is over the budget of 20.00"


def test_over_max_price_level(pois: dict[str, Poi]) -> None:
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(max_price_level=1), pois))
    assert got == "stop 1 (Test museum, poi-m): price level 2 is above the maximum 1"


def test_avoided_tag(pois: dict[str, Poi]) -> None:
    pois["poi-c"] = pois["poi-c"].model_copy(update={"tags": ["adults-only"]})
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(), pois))
    assert got == "stop 2 (Test cafe, poi-c): has tag 'adults-only', which the request avoids"


def test_missing_must_category(pois: dict[str, Poi]) -> None:
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(must_categories=["museum", "nature"]), pois))
    assert got == "no visit covers the required category 'nature'"
    assert check_itinerary(_plan(*GOOD), _task(must_categories=["food"]), pois).feasible  # a group counts


def test_too_few_and_too_many_stops(pois: dict[str, Poi]) -> None:
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(min_stops=3), pois))
    assert got == "2 visits, fewer than the minimum of 3"
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(min_stops=1, max_stops=1), pois))
    assert got == "2 visits, more than the maximum of 1"


def test_duplicate_poi(pois: dict[str, Poi]) -> None:
    plan = _plan(GOOD[0], GOOD[1], GOOD[2], ("poi-m", 740, 800), ("poi-h", 820, 820))
    got = _only_violation(check_itinerary(plan, _task(budget=None), pois))
    assert got == "stop 3 (Test museum, poi-m): the same POI as stop 1"


def test_wrong_end_and_start(pois: dict[str, Poi]) -> None:
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(end_poi="poi-h2"), pois))
    assert got == "stop 3 is poi-h, but the day must end at poi-h2"
    got = _only_violation(check_itinerary(_plan(*GOOD), _task(start_poi="poi-h2"), pois))
    assert got == "stop 0 is poi-h, but the day must start at poi-h2"


def test_wrong_mode(pois: dict[str, Poi]) -> None:
    got = _only_violation(check_itinerary(_plan(*GOOD, mode="taxi"), _task(), pois))
    assert got == "the itinerary travels by taxi, but the request asks for walk"


def test_empty_itinerary(pois: dict[str, Poi]) -> None:
    result = check_itinerary(_plan(), _task(), pois)
    assert not result.feasible
    assert result.violations[0] == "the itinerary has no stops"


def test_checker_rejects_non_travel_task(pois: dict[str, Poi]) -> None:
    task = _task().model_copy(update={"app": "livestream"})
    with pytest.raises(ValueError, match="not a travel task"):
        check_itinerary(_plan(*GOOD), task, pois)


def test_greedy_plan_is_feasible(pois: dict[str, Poi]) -> None:
    task = _task()
    plan = plan_greedy(task, pois)
    assert [s.poi_id for s in plan.stops] == ["poi-h", "poi-m", "poi-c", "poi-h"]  # bar avoided
    assert check_itinerary(plan, task, pois).feasible


def test_greedy_rejects_unknown_anchor(pois: dict[str, Poi]) -> None:
    with pytest.raises(ValueError, match="unknown anchor POI 'poi-x'"):
        plan_greedy(_task(end_poi="poi-x"), pois)


# -- generated world ---------------------------------------------------------------------------------

SMALL = TravelWorldConfig(seed=3, pois=80, requests=40, travellers=10)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int], list[int]]:
    out = tmp_path_factory.mktemp("travel")
    ticks: list[int] = []
    counts = generate_travel_world(SMALL, out, progress=ticks.append)
    return out, counts, ticks


def test_files_load_strictly(world: tuple[Path, dict[str, int], list[int]]) -> None:
    out, counts, ticks = world
    items, _ = read_records(out / CATALOG_FILE, Item)
    tasks, _ = read_records(out / TASKS_FILE, Task)
    sessions, _ = read_records(out / LOGS_FILE, Session)
    assert (len(items), len(tasks), len(sessions)) == (80, 40, 40)
    assert counts["items"] == 80 and counts["tasks"] == 40 and counts["sessions"] == 40
    assert sum(ticks) == 80 + 40 + 40 + counts["heldout_tasks"]  # held-out requests are written too
    assert counts["events"] == sum(len(s.events) for s in sessions)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stage"] == "world.travel" and manifest["counts"] == counts


def test_catalog_is_a_city_of_pois(world: tuple[Path, dict[str, int], list[int]]) -> None:
    items, _ = read_records(world[0] / CATALOG_FILE, Item)
    pois = pois_from_items(items)
    assert {p.group for p in pois.values()} >= {"culture", "food", "nature", "lodging"}
    assert len({p.district for p in pois.values()}) == SMALL.districts
    lats = [p.lat for p in pois.values()]
    assert (max(lats) - min(lats)) * KM_PER_DEG <= SMALL.area_km
    assert len({i.title for i in items}) == len(items)  # names are unique


def test_every_request_is_solvable(world: tuple[Path, dict[str, int], list[int]]) -> None:
    out = world[0]
    items, _ = read_records(out / CATALOG_FILE, Item)
    tasks, _ = read_records(out / TASKS_FILE, Task)
    pois = pois_from_items(items)
    for task in tasks:
        assert task.app == "travel" and task.target is None
        assert task.kind in {"plan", "half_day", "evening", "with_kids"}
        reference = Itinerary.model_validate(task.meta["reference_itinerary"])
        result = check_itinerary(reference, task, pois)
        assert result.feasible, (task.task_id, result.violations)
        assert result.score == pytest.approx(task.meta["reference_score"], abs=1e-6)
        text = task.messages[0].content
        assert pois[task.constraints["start_poi"]].name in text


def test_sessions_link_tasks_and_pois(world: tuple[Path, dict[str, int], list[int]]) -> None:
    out = world[0]
    items, _ = read_records(out / CATALOG_FILE, Item)
    tasks, _ = read_records(out / TASKS_FILE, Task)
    sessions, _ = read_records(out / LOGS_FILE, Session)
    ids = {i.item_id for i in items}
    by_task = {t.task_id: t for t in tasks}
    for s in sessions:
        assert s.app == "travel" and s.task_id in by_task
        assert s.turns[0].role == "user" and s.turns[0].text == by_task[s.task_id].messages[0].content
        assert all(e.item_id in ids for e in s.events if e.type in ("view", "click"))
    assert [s.started_at for s in sessions] == sorted(s.started_at for s in sessions)


def test_same_seed_same_files_other_seed_other_files(
    world: tuple[Path, dict[str, int], list[int]], tmp_path: Path
) -> None:
    generate_travel_world(SMALL, tmp_path / "same")
    generate_travel_world(SMALL.model_copy(update={"seed": 4}), tmp_path / "other")
    for name in (CATALOG_FILE, TASKS_FILE, LOGS_FILE):
        assert _sha(world[0] / name) == _sha(tmp_path / "same" / name)
        assert _sha(world[0] / name) != _sha(tmp_path / "other" / name)


def test_default_world_is_solvable(tmp_path: Path) -> None:
    counts = generate_travel_world(TravelWorldConfig(), tmp_path)
    assert counts["items"] == 400 and counts["tasks"] == 1000 and counts["sessions"] == 1000


def test_config_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="poi_count"):
        TravelWorldConfig.model_validate({"poi_count": 5})
