"""Held-out trip-request wordings: the pack format's errors and the world's held-out requests.

    .venv/bin/python -m pytest tests/apps/travel/test_phrasings.py -q
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from apps.travel.checker import PlanConstraints
from apps.travel.phrasings import TravelPack, TravelPhrasingError, load_pack
from apps.travel.world import HELDOUT_DIR, TravelWorldConfig, generate_travel_world, make_pois, make_tasks
from harness.tasks import Task
from infra.layout import TASKS_FILE

PACK: dict[str, Any] = {
    "family": "heldout-test", "intro": {k: ["Trip please."] for k in ("plan", "half_day", "evening", "with_kids")},
    "lodging": ["Base: {hotel}."], "window": ["{day} {start} to {end}."], "end_same": ["Home by {end}."],
    "end_move": ["End at {end_hotel} by {end}."], "stops_exact": ["{n} stop{s}."],
    "stops_range": ["{min}-{max} stops."],
    "mode": {"walk": ["Walking."], "transit": ["Metro."], "taxi": ["Cabs."]}, "must": ["Must: {musts}."],
    "want": ["Nice: {wants}."], "avoid": ["Never: {avoid}."], "budget": ["Cap {budget} {currency}."],
    "price_level": ["Max {dollars}."], "phrases": {"ramen": ["noodle soup"]},
}


def _write(tmp_path: Path, pack: dict[str, Any]) -> Path:
    path = tmp_path / "pack.json"
    path.write_text(json.dumps(pack), encoding="utf-8")
    return path


@pytest.mark.parametrize("change, error", [
    ({"lodging": ["We stay at {hotl}."]}, r"lodging: .*\['hotl'\]"),
    ({"window": ["{day} from {start}."]}, r"window: .*lacks \['end'\]"),
    ({"mode": {"walk": ["Walking."]}}, "no templates for 'transit'"),
    ({"phrases": {"noodles": ["ramen"]}}, "phrases.noodles: unknown"),
    ({"family": "Bad Id"}, "family"),
])
def test_bad_packs_name_the_field(tmp_path: Path, change: dict[str, Any], error: str) -> None:
    with pytest.raises(TravelPhrasingError, match=error):
        load_pack(_write(tmp_path, PACK | change))


def test_a_pack_words_every_constraint_of_a_request() -> None:
    config = TravelWorldConfig(seed=1, pois=60, requests=0)
    pois = make_pois(config, np.random.default_rng([1, 1]))
    pack = TravelPack.model_validate(PACK)
    tasks = list(make_tasks(config, pois, np.random.default_rng(5), (pack,), n=20))
    names = {p.poi_id: p.name for p in pois}
    for task in tasks:
        c = PlanConstraints.model_validate(task.constraints)
        text = task.messages[0].content
        assert task.task_id.startswith("travel-h-") and task.meta["family"] == "heldout-test"
        assert names[str(c.start_poi)] in text and "Trip please." in text
        assert (f"{c.min_stops} stop" in text) if c.min_stops == c.max_stops else f"{c.min_stops}-{c.max_stops}" in text
        assert ("Must: " in text) == bool(c.must_categories)
        assert ("Never: " in text) == bool(c.avoid_tags)
        assert ("Cap " in text) == (c.budget is not None)
        if "ramen" in c.must_categories:
            assert "noodle soup" in text


def test_world_writes_held_out_requests(tmp_path: Path) -> None:
    counts = generate_travel_world(TravelWorldConfig(seed=2, pois=60, requests=5, heldout_requests=7,
                                                     travellers=3), tmp_path)
    path = tmp_path / HELDOUT_DIR / TASKS_FILE
    held = [Task.model_validate_json(line) for line in path.read_text().splitlines()]
    assert len(held) == counts["heldout_tasks"] == 7
    assert all(t.meta["family"].startswith("heldout-") and t.meta["reference_itinerary"] for t in held)
    train = (tmp_path / TASKS_FILE).read_text()
    assert not any(t.messages[0].content in train for t in held)


def test_every_shipped_pack_loads_and_families_are_unique_across_sets() -> None:
    from apps.travel.phrasings import DEV_SETS, dev_packs, heldout2_packs, heldout_packs

    sets = {**{name: dev_packs(name) for name in DEV_SETS}, "heldout": heldout_packs(), "heldout2": heldout2_packs()}
    assert all(len(packs) == 5 for packs in sets.values())
    with pytest.raises(TravelPhrasingError, match="unknown development set 'dev9'"):
        dev_packs("dev9")
    families = [p.family for packs in sets.values() for p in packs]
    assert len(set(families)) == len(families)
    assert all(p.family.startswith(f"{name}-") for name, packs in sets.items() for p in packs)
