"""Livestream world: contracts, determinism, grounded answers, references, kinds and logs.

    .venv/bin/python -m pytest tests/apps/test_livestream_world.py -q
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import ValidationError

from apps.livestream.phrasings import dev_packs, heldout_packs, train_packs
from apps.livestream.vocab import (
    BOOL_A,
    BOOL_Q,
    COMPARISONS,
    LEAF_ATTRS,
    MEMBER_A,
    MEMBER_Q,
    MID_ATTRS,
    PRICE_Q,
    STOCK_Q,
    THRESHOLDS,
    TOP_ATTRS,
    UNANSWERABLE_Q,
    VALUE_A,
    VALUE_Q,
)
from apps.livestream.world import (
    STREAMS_FILE,
    LivestreamWorldConfig,
    Stream,
    answer_facts,
    generate_livestream_world,
    set_tasks,
)
from data_curation.records import Session
from harness.catalog import AttributeValue, Catalog, Item
from harness.tasks import Message, Task
from infra.layout import CATALOG_FILE, LOGS_FILE, TASKS_FILE
from infra.manifest import read_manifest
from infra.recordio import read_records

WORLD_FILES = (CATALOG_FILE, STREAMS_FILE, TASKS_FILE, LOGS_FILE)
TINY = LivestreamWorldConfig(
    seed=7, streams=6, products_per_stream_min=3, products_per_stream_max=7, questions=400, viewers=40
)


@dataclass
class World:
    out: Path
    counts: dict[str, object]
    catalog: Catalog
    streams: dict[str, Stream]
    tasks: list[Task]
    sessions: list[Session]


def _load(out: Path, counts: dict[str, object]) -> World:
    items, _ = read_records(out / CATALOG_FILE, Item)
    streams, _ = read_records(out / STREAMS_FILE, Stream)
    tasks, _ = read_records(out / TASKS_FILE, Task)
    sessions, _ = read_records(out / LOGS_FILE, Session)
    return World(out, counts, Catalog(items), {s.stream_id: s for s in streams}, tasks, sessions)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    out = tmp_path_factory.mktemp("livestream")
    counts = generate_livestream_world(TINY, out)
    return _load(out, counts)


def _digests(out: Path) -> dict[str, str]:
    return {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in WORLD_FILES}


def _shown_in(value: AttributeValue, answer: str) -> bool:
    """Whether ``answer`` states ``value`` (checked independently of the generator's own rendering)."""
    if isinstance(value, bool):
        return answer.startswith("Yes" if value else "No")
    if isinstance(value, list):
        return all(v.lower() in answer.lower() for v in value)
    if isinstance(value, float):
        return f"{value:.2f}" in answer
    if isinstance(value, int):
        return re.search(rf"(?<![\d.]){value}(?!\.?\d)", answer) is not None
    return value.lower() in answer.lower()


def _item_of(task: Task) -> str:
    item_id = task.constraints["item_id"]
    assert isinstance(item_id, str), task
    return item_id


# -- contracts and files ----------------------------------------------------------------------------


def test_files_validate_and_match_the_manifest(world: World) -> None:
    manifest = read_manifest(world.out)
    assert manifest["stage"] == "world.livestream"
    assert manifest["counts"] == world.counts
    assert set(WORLD_FILES) <= set(manifest["files"])
    assert world.counts["items"] == len(world.catalog)
    assert world.counts["streams"] == len(world.streams) == TINY.streams
    assert world.counts["tasks"] == len(world.tasks) == TINY.questions
    assert world.counts["sessions"] == len(world.sessions)
    kinds = ("question", "comparison", "unanswerable", "off_topic")
    assert world.counts["tasks_by_kind"] == {k: sum(t.kind == k for t in world.tasks) for k in kinds}
    catalog, stats = Catalog.load(world.out / CATALOG_FILE)
    assert len(catalog) == len(world.catalog) and stats.bad == 0


def test_every_product_is_on_exactly_one_stream(world: World) -> None:
    shown = [i for s in world.streams.values() for i in s.item_ids]
    assert sorted(shown) == sorted(world.catalog.ids())
    for stream in world.streams.values():
        assert TINY.products_per_stream_min <= len(stream.item_ids) <= TINY.products_per_stream_max
        names = [(world.catalog[i].attributes["brand"], world.catalog[i].category_path[-1]) for i in stream.item_ids]
        assert len(set(names)) == len(names), f"{stream.stream_id}: two products share brand and kind"


def test_items_have_fact_sheets(world: World) -> None:
    for item in world.catalog:
        assert len(item.category_path) == 3
        assert item.price is not None and item.price > 0
        assert item.stock is not None and item.rating is not None
        for name in ("brand", "origin_country", "shipping_days", "returns_days", "discount_percent"):
            assert name in item.attributes, (item.item_id, name)
        discount = item.attributes["discount_percent"]
        assert isinstance(discount, int) and 0 < discount < 100


def test_same_seed_same_bytes_other_seed_other_bytes(world: World, tmp_path: Path) -> None:
    again = tmp_path / "again"
    generate_livestream_world(TINY, again)
    assert _digests(again) == _digests(world.out)
    other = tmp_path / "other"
    generate_livestream_world(TINY.model_copy(update={"seed": 8}), other)
    theirs, ours = _digests(other), _digests(world.out)
    assert all(theirs[name] != ours[name] for name in WORLD_FILES)


def test_stream_rejects_overlapping_windows() -> None:
    with pytest.raises(ValidationError, match="overlaps"):
        Stream(stream_id="s", host="h", title="t", start_ts=0, duration_s=100, item_ids=["a", "b"],
               windows=[(0, 50), (40, 90)])
    with pytest.raises(ValidationError, match="windows"):
        Stream(stream_id="s", host="h", title="t", start_ts=0, duration_s=100, item_ids=["a"], windows=[])


# -- ground truth -------------------------------------------------------------------------------------


def test_answerable_facts_resolve_and_are_stated_in_the_answer(world: World) -> None:
    answerable = [t for t in world.tasks if t.kind in ("question", "comparison")]
    assert answerable
    for task in answerable:
        assert task.answer and task.facts, task.task_id
        values = answer_facts(task, world.catalog)
        assert list(values) == task.facts
        for fact, value in values.items():
            assert fact.rpartition(".")[0] in task.constraints["item_ids"], (task.task_id, fact)
            assert _shown_in(value, task.answer or ""), (task.task_id, fact, value, task.answer)


def test_yes_no_answers_follow_the_fact(world: World) -> None:
    checked = 0
    for task in world.tasks:
        qtype, _, key = task.meta["template"].rpartition("/")[2].partition(":")
        key = key.partition(":")[0]
        if qtype not in ("bool", "member", "threshold"):
            continue
        value = answer_facts(task, world.catalog)[task.facts[0]]
        probe = task.meta.get("probe")
        if qtype == "bool":
            expected = value
        elif qtype == "member":
            assert isinstance(value, list) and isinstance(probe, str)
            expected = probe in value
            assert probe.lower() in task.messages[0].content.lower()
        else:
            assert isinstance(value, int) and isinstance(probe, int)
            expected = value <= probe if key in ("shipping_days", "min_age_years") else value >= probe
            assert str(probe) in task.messages[0].content
        assert (task.answer or "").startswith("Yes" if expected else "No"), (task.task_id, value, probe, task.answer)
        checked += 1
    assert checked > 20


def test_comparisons_name_the_right_winner(world: World) -> None:
    lower_wins = {"price", "shipping_days", "weight_g"}
    comparisons = [t for t in world.tasks if t.kind == "comparison"]
    assert comparisons
    for task in comparisons:
        a, b = task.constraints["item_ids"]
        assert a != b and task.constraints["item_id"] == a
        stream = world.streams[task.constraints["stream_id"]]
        assert a in stream.item_ids and b in stream.item_ids
        key = task.meta["template"].rpartition("/")[2].split(":")[1]
        va, vb = answer_facts(task, world.catalog).values()
        assert isinstance(va, int | float) and isinstance(vb, int | float)
        answer = task.answer or ""
        if va == vb:
            assert answer.startswith(("Same", "Both")), answer
            continue
        a_wins = (va < vb) == (key in lower_wins)
        winner = world.catalog[a if a_wins else b]
        name = f"The {winner.attributes['brand']} {winner.category_path[-1].lower()} "
        assert answer.startswith(name), (task.task_id, answer, name)


def test_unanswerable_and_off_topic_have_no_answer_and_the_right_share(world: World) -> None:
    n = len(world.tasks)
    for kind, share in (("unanswerable", TINY.unanswerable_fraction), ("off_topic", TINY.off_topic_fraction),
                        ("comparison", TINY.comparison_fraction)):
        got = sum(t.kind == kind for t in world.tasks) / n
        assert abs(got - share) <= 0.01, (kind, got)
    for task in world.tasks:
        if task.kind not in ("unanswerable", "off_topic"):
            continue
        assert task.answer == "" and task.facts == []
        if task.kind == "off_topic":
            assert task.constraints["item_id"] is None and task.constraints["item_ids"] == []
            continue
        key = task.meta["template"].rpartition("/")[2].split(":")[1]
        if key != "generic":  # asks about a fact this product's sheet does not have
            assert key not in world.catalog[_item_of(task)].attributes, task.task_id


def test_answer_facts_names_the_missing_fact(world: World) -> None:
    item = next(iter(world.catalog))
    task = Task(task_id="t", app="livestream", kind="question", messages=[Message(role="user", content="?")],
                answer="x", facts=[f"{item.item_id}.price", f"{item.item_id}.no_such_fact"])
    with pytest.raises(KeyError, match="no_such_fact"):
        answer_facts(task, world.catalog)
    task.facts = ["lv-999999.price"]
    with pytest.raises(KeyError, match="lv-999999"):
        answer_facts(task, world.catalog)
    task.facts = [f"{item.item_id}.stock", f"{item.item_id}.brand"]
    assert answer_facts(task, world.catalog) == {
        f"{item.item_id}.stock": item.stock, f"{item.item_id}.brand": item.attributes["brand"]
    }


# -- references and timing ------------------------------------------------------------------------------


def test_every_task_is_about_products_on_its_stream(world: World) -> None:
    for task in world.tasks:
        stream = world.streams[task.constraints["stream_id"]]
        ts = task.constraints["ts_offset_s"]
        assert 0 <= ts < stream.duration_s
        for item_id in task.constraints["item_ids"]:
            assert item_id in stream.item_ids, task.task_id
        if task.kind in ("question", "unanswerable"):
            assert task.constraints["item_ids"] == [_item_of(task)]
            assert _item_of(task) in stream.shown_by(ts) or task.meta["reference"] == "ordinal"


def test_references_resolve_to_the_ground_truth_item(world: World) -> None:
    packs = {p.family: p for p in (*train_packs(), *dev_packs(), *heldout_packs())}
    seen: set[str] = set()
    for task in world.tasks:
        if task.kind == "off_topic":
            continue
        stream = world.streams[task.constraints["stream_id"]]
        item = world.catalog[_item_of(task)]
        text = task.messages[0].content.lower()
        reference = task.meta["reference"]
        pack = packs[task.meta["family"]]
        seen.add(reference)
        on_screen = stream.on_screen(task.constraints["ts_offset_s"])
        if reference == "this_one":
            assert on_screen == item.item_id, task.task_id
        elif reference == "previous":  # the product shown just before the one on screen
            assert on_screen is not None
            assert stream.item_ids.index(on_screen) - 1 == stream.item_ids.index(item.item_id), task.task_id
        elif reference == "ordinal":
            position = stream.item_ids.index(item.item_id)
            assert pack.ordinal(position + 1).lower() in text or str(position + 1) in text, (task.task_id, text)
        elif reference == "brand":  # the brand alone names one product of the stream
            brand = str(item.attributes["brand"])
            assert brand.lower() in text, (task.task_id, text)
            assert sum(world.catalog[i].attributes.get("brand") == brand for i in stream.item_ids) == 1
        else:
            assert reference in ("named", "leaf"), reference
            assert item.category_path[-1].lower() in text, (task.task_id, text)
    assert {"this_one", "ordinal", "named"} <= seen


def test_questions_are_varied(world: World) -> None:
    texts = [t.messages[0].content for t in world.tasks]
    assert len(set(texts)) > 0.6 * len(texts)
    assert len({t.meta["template"] for t in world.tasks}) > 60
    assert any(t == t.lower() for t in texts) and any(t[:1].isupper() for t in texts)


# -- logs -------------------------------------------------------------------------------------------------


def test_sessions_carry_the_questions_in_time(world: World) -> None:
    tasks = {t.task_id: t for t in world.tasks}
    sessions = {s.session_id: s for s in world.sessions}
    for task in world.tasks:
        session = sessions[task.meta["session_id"]]
        stream = world.streams[task.constraints["stream_id"]]
        ts = float(stream.start_ts + task.constraints["ts_offset_s"])
        assert any(turn.text == task.messages[0].content and turn.ts == ts for turn in session.turns), task.task_id
    for session in world.sessions:
        assert session.app == "livestream" and re.fullmatch(r"viewer-\d{5}", session.user_id)
        assert all(turn.role == "user" for turn in session.turns)
        if session.task_id is not None:
            first = tasks[session.task_id]
            assert first.meta["session_id"] == session.session_id
            asked = [t for t in world.tasks if t.meta["session_id"] == session.session_id]
            assert first.task_id == min(t.task_id for t in asked)


def test_session_events_are_products_on_screen_during_the_stream(world: World) -> None:
    streams = list(world.streams.values())
    kinds: set[str] = set()
    for session in world.sessions:
        stream = next(s for s in streams if s.start_ts <= session.started_at < s.start_ts + s.duration_s)
        end = stream.start_ts + stream.duration_s
        for event in session.events:
            kinds.add(event.type)
            assert event.item_id in stream.item_ids
            assert session.started_at <= event.ts <= end
        for turn in session.turns:
            assert stream.start_ts <= turn.ts <= end
    assert {"view", "click", "cart", "purchase"} <= kinds
    assert len({s.user_id for s in world.sessions}) <= TINY.viewers


# -- config, tables, progress ----------------------------------------------------------------------------


def test_progress_counts_every_record(tmp_path: Path) -> None:
    calls: list[int] = []
    config = TINY.model_copy(update={"questions": 50, "streams": 2})
    counts = generate_livestream_world(config, tmp_path, calls.append)
    sets = ("heldout", "dev", "dev2", "dev3", "dev4", "dev5", "heldout2")
    assert sum(calls) == counts["items"] + counts["streams"] + counts["tasks"] + counts["sessions"] + \
        sum(counts[f"{s}_tasks"] for s in sets) and all(counts[f"{s}_tasks"] == 600 for s in sets)


def test_config_rejects_inconsistent_options() -> None:
    with pytest.raises(ValidationError, match="products_per_stream_min"):
        LivestreamWorldConfig(products_per_stream_min=8, products_per_stream_max=4)
    with pytest.raises(ValidationError, match="> 1"):
        LivestreamWorldConfig(unanswerable_fraction=0.5, off_topic_fraction=0.4, comparison_fraction=0.2)
    with pytest.raises(ValidationError):
        LivestreamWorldConfig(question=10)  # type: ignore[call-arg]


def test_template_tables_are_complete() -> None:
    fact_names = {name for table in (*TOP_ATTRS.values(), *MID_ATTRS.values(), *LEAF_ATTRS.values()) for name in table}
    assert fact_names <= set(VALUE_Q) | set(BOOL_Q)
    assert set(VALUE_Q) == set(VALUE_A) and set(BOOL_Q) == set(BOOL_A) and set(MEMBER_Q) == set(MEMBER_A)
    tables = [*VALUE_Q.values(), *BOOL_Q.values(), *MEMBER_Q.values(), PRICE_Q, STOCK_Q, UNANSWERABLE_Q]
    tables += [rule.questions for rule in THRESHOLDS.values()]
    for templates in tables:  # a product named by the viewer needs a template with a {ref} slot
        assert any("{ref}" in t for t in templates), templates
    for rule in COMPARISONS.values():
        assert all("{a}" in t and "{b}" in t for t in rule.questions)


def test_default_config_counts(tmp_path: Path) -> None:
    counts = generate_livestream_world(LivestreamWorldConfig(), tmp_path)
    assert counts["streams"] == 50 and counts["tasks"] == 2000
    assert counts["tasks_by_kind"] == {"question": 1300, "comparison": 300, "unanswerable": 200, "off_topic": 200}
    assert 50 * 6 <= counts["items"] <= 50 * 10


def test_set_tasks_names_every_set_file_and_rejects_unknown_sets() -> None:
    assert set_tasks("w", "train") == Path("w/tasks.jsonl")
    assert set_tasks("w", "dev5") == Path("w/dev5/tasks.jsonl")
    assert set_tasks(Path("w"), "heldout2") == Path("w/heldout2/tasks.jsonl")
    with pytest.raises(ValueError, match=r"unknown question set 'dev9'.*heldout2"):
        set_tasks("w", "dev9")
