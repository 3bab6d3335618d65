"""The shopping world: determinism, contract validity, ground truth, PII key.

    pytest tests/apps/test_shopping_world.py
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import phonenumbers
import pytest

from apps.shopping.constraints import item_matches
from apps.shopping.pii import luhn_check_digit, luhn_valid
from apps.shopping.taxonomy import TAXONOMY
from apps.shopping.world import ShoppingWorldConfig, build_leaves, generate_shopping_world
from data_curation.records import Session
from harness.catalog import Catalog
from harness.tasks import Task
from infra.recordio import read_records

FILES = ("catalog.jsonl", "tasks.jsonl", "logs.jsonl", "private/pii_key.jsonl", "private/duplicates.jsonl")


def _digest(world: Path) -> dict[str, str]:
    return {f: hashlib.sha256((world / f).read_bytes()).hexdigest() for f in FILES}


def _small(seed: int) -> ShoppingWorldConfig:
    return ShoppingWorldConfig(seed=seed, items=1500, tasks=120, sessions=150, customers=50)


def test_taxonomy_size() -> None:
    leaves = build_leaves()
    assert len(TAXONOMY) >= 12 and len(leaves) >= 150
    assert all(len(lf.path) == 3 for lf in leaves)
    assert len({tuple(lf.path) for lf in leaves}) == len(leaves)


def test_same_seed_same_world_other_seed_other_world(tmp_path: Path) -> None:
    generate_shopping_world(_small(7), tmp_path / "a")
    generate_shopping_world(_small(7), tmp_path / "b")
    generate_shopping_world(_small(8), tmp_path / "c")
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a")["catalog.jsonl"] != _digest(tmp_path / "c")["catalog.jsonl"]


def test_catalog_prefix_is_stable_across_sizes(tmp_path: Path) -> None:
    """Chunked generation: the first N items do not depend on how many come after."""
    generate_shopping_world(ShoppingWorldConfig(items=9000, tasks=0, sessions=0), tmp_path / "big")
    generate_shopping_world(ShoppingWorldConfig(items=8192, tasks=0, sessions=0), tmp_path / "small")
    big = (tmp_path / "big" / "catalog.jsonl").read_text().splitlines()
    small = (tmp_path / "small" / "catalog.jsonl").read_text().splitlines()
    assert big[:8192] == small


def test_files_load_through_the_contracts(world_dir: Path) -> None:
    catalog, stats = Catalog.load(world_dir / "catalog.jsonl")
    assert len(catalog) == 3000 and stats.bad == 0
    tasks, _ = read_records(world_dir / "tasks.jsonl", Task)
    sessions, _ = read_records(world_dir / "logs.jsonl", Session)
    assert len(tasks) == 300 and len(sessions) == 400
    manifest = json.loads((world_dir / "manifest.json").read_text())
    assert manifest["counts"]["items"] == 3000 and manifest["app"] == "shopping"
    assert set(FILES) <= set(manifest["files"])


def test_catalog_has_realistic_variety(world_dir: Path) -> None:
    catalog, _ = Catalog.load(world_dir / "catalog.jsonl")
    items = list(catalog)
    tops = Counter(i.category_path[0] for i in items)
    assert len(tops) == len(TAXONOMY)
    assert len({tuple(i.category_path) for i in items}) > 150
    assert len({i.attributes["brand"] for i in items}) >= 40
    assert sum(i.stock == 0 for i in items) > 0 and sum(i.rating is None for i in items) > 0
    prices = sorted(i.price for i in items if i.price is not None)
    assert prices[0] < 10 < prices[len(prices) // 2] < 200 < prices[-1]
    # Synonyms: hiking boots are listed under more than one noun.
    boots = [i.title.lower() for i in items if i.category_path[-1] == "Hiking boots"]
    assert sum("trekking" in t or "trail" in t for t in boots) and sum("hiking" in t for t in boots)
    assert len({i.title for i in items}) > 0.95 * len(items)


def test_near_duplicates_are_the_same_product_under_another_listing(world_dir: Path) -> None:
    catalog, _ = Catalog.load(world_dir / "catalog.jsonl")
    pairs = [json.loads(x) for x in (world_dir / "private/duplicates.jsonl").read_text().splitlines()]
    assert 0.05 * len(catalog) < len(pairs) < 0.2 * len(catalog)
    for p in pairs[:200]:
        a, b = catalog[p["item_id"]], catalog[p["same_product_as"]]
        for key in ("brand", "colour", "material", "features"):
            assert a.attributes[key] == b.attributes[key]
        assert a.category_path == b.category_path
        assert a.price is not None and b.price is not None and abs(a.price - b.price) <= 0.15 * b.price + 1


def test_every_task_kind_and_every_target_meets_its_constraints(world_dir: Path) -> None:
    catalog, _ = Catalog.load(world_dir / "catalog.jsonl")
    tasks, _ = read_records(world_dir / "tasks.jsonl", Task)
    assert set(Counter(t.kind for t in tasks)) == {"explicit", "attribute", "vague", "bundle", "multi_turn"}
    for t in tasks:
        assert t.target is not None
        if t.kind == "bundle":
            assert t.target.kind == "bundle" and len(t.target.slots) == len(t.constraints["slots"])
            for slot, path in zip(t.target.slots, t.constraints["slots"], strict=True):
                assert all(item_matches(catalog[i], {"category": path}) for i in slot)
            continue
        for iid in t.target.item_ids:
            assert item_matches(catalog[iid], t.constraints), (t.task_id, iid)


def test_uncapped_targets_list_every_matching_item(world_dir: Path) -> None:
    """Completeness, by brute force over the whole catalog: a target set misses no correct item."""
    catalog, _ = Catalog.load(world_dir / "catalog.jsonl")
    tasks, _ = read_records(world_dir / "tasks.jsonl", Task)
    checked = 0
    for t in tasks:
        if t.kind in ("explicit", "attribute", "multi_turn") and t.target is not None:
            ids = t.target.item_ids
            if len(ids) < 50:
                assert sorted(ids) == sorted(i.item_id for i in catalog if item_matches(i, t.constraints))
                checked += 1
    assert checked > 50


def test_task_text_states_its_constraints(world_dir: Path) -> None:
    tasks, _ = read_records(world_dir / "tasks.jsonl", Task)
    for t in tasks:
        text = t.messages[0].content.lower()
        if t.kind == "attribute":
            assert f"{t.constraints['price_max']:g}" in text
            for feature in t.constraints.get("features", []):
                assert feature in text
        if t.kind == "explicit":
            assert t.constraints["attributes"]["brand"].lower() in text
        if t.kind == "multi_turn":  # the opening does not give the hidden constraints away
            assert t.hidden and all(str(v).lower() not in text.split() for v in t.hidden["attributes"].values())


def test_pii_key_points_at_exact_spans(world_dir: Path) -> None:
    sessions = {s.session_id: s for s in read_records(world_dir / "logs.jsonl", Session)[0]}
    key = [json.loads(x) for x in (world_dir / "private/pii_key.jsonl").read_text().splitlines()]
    assert {k["type"] for k in key} == {"NAME", "EMAIL", "PHONE", "ADDRESS", "CARD", "ORDER_ID"}
    for k in key:
        idx = int(re.fullmatch(r"turns\[(\d+)\]\.text", k["field"]).group(1))  # type: ignore[union-attr]
        text = sessions[k["session_id"]].turns[idx].text
        assert text[k["start"] : k["end"]] == k["value"]
    leaking = {k["session_id"] for k in key}
    assert 0.2 < len(leaking) / len(sessions) < 0.5


def test_pii_values_are_realistic(world_dir: Path) -> None:
    key = [json.loads(x) for x in (world_dir / "private/pii_key.jsonl").read_text().splitlines()]
    phones = [k["value"] for k in key if k["type"] == "PHONE"]
    cards = [k["value"] for k in key if k["type"] == "CARD"]
    assert cards and all(luhn_valid(c) for c in cards)
    formats = {re.sub(r"\d", "9", p) for p in phones}
    assert len(formats) >= 8
    valid = 0
    for p in phones:
        for region in ("US", "GB", "DE", "FR", "IN"):
            try:
                if phonenumbers.is_valid_number(phonenumbers.parse(p, region)):
                    valid += 1
                    break
            except phonenumbers.NumberParseException:
                continue
    assert valid >= 0.97 * len(phones), f"{valid}/{len(phones)} valid"


def test_luhn_by_hand() -> None:
    # 7992739871 -> check digit 3 (the classic worked example)
    assert luhn_check_digit("7992739871") == "3"
    assert luhn_valid("79927398713") and not luhn_valid("79927398710")
    assert luhn_valid("4111 1111 1111 1111")


def test_logs_are_time_ordered_and_linked_to_tasks(world_dir: Path) -> None:
    sessions, _ = read_records(world_dir / "logs.jsonl", Session)
    tasks = {t.task_id for t in read_records(world_dir / "tasks.jsonl", Task)[0]}
    starts = [s.started_at for s in sessions]
    assert starts == sorted(starts)
    assert all(s.task_id in tasks for s in sessions if s.task_id)
    kinds = Counter(e.type for s in sessions for e in s.events)
    assert set(kinds) == {"search", "view", "click", "cart", "purchase"}
    assert all(e.order_id for s in sessions for e in s.events if e.type == "purchase")


@pytest.mark.parametrize("field", ["items", "sessions"])
def test_config_rejects_bad_values(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ShoppingWorldConfig.model_validate({field: -1})
    with pytest.raises(ValueError, match="itemz"):
        ShoppingWorldConfig.model_validate({"itemz": 5})


def test_every_task_kind_is_acted_out_with_outcomes(world_dir: Path) -> None:
    """Bundle tasks too: a bundle shopper browses every slot and carts items of the task's target slots."""
    sessions, _ = read_records(world_dir / "logs.jsonl", Session)
    tasks = {t.task_id: t for t in read_records(world_dir / "tasks.jsonl", Task)[0]}
    with_outcome = Counter(tasks[s.task_id].kind for s in sessions if s.task_id and s.has_outcome)
    assert set(with_outcome) == {"explicit", "attribute", "vague", "bundle", "multi_turn"}
    slots_carted = []
    for s in sessions:
        if s.task_id and tasks[s.task_id].kind == "bundle":
            target = tasks[s.task_id].target
            assert target is not None
            carted = [e.item_id for e in s.events if e.type == "cart"]
            assert all(any(i in slot for slot in target.slots) for i in carted)
            slots_carted.append(sum(any(i in slot for i in carted) for slot in target.slots))
            bought = [e for e in s.events if e.type == "purchase"]
            assert [e.item_id for e in bought] in ([], carted) and len({e.order_id for e in bought}) <= 1
    assert max(slots_carted) >= 2  # a bundle session fills more than one slot
