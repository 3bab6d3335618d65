"""Record files: round trips, and every kind of malformed input. `pytest tests/infra/test_recordio.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from data_curation.records import Event, Session, Turn
from harness.catalog import Catalog, Item
from harness.tasks import Message, Target, Task
from infra.recordio import RecordError, RecordReader, read_json_model, read_records, write_records


def _session() -> Session:
    return Session(
        session_id="s1", user_id="u1", started_at=10.0,
        turns=[Turn(role="user", text="boots under 80", ts=10.0), Turn(role="assistant", text="Here.", ts=11.0)],
        events=[Event(type="search", ts=10.5, query="boots"), Event(type="view", ts=12.0, item_id="a1"),
                Event(type="purchase", ts=13.0, item_id="a1", order_id="ORD-1")],
        task_id="t1",
    )


def _task() -> Task:
    return Task(task_id="t1", app="shopping", kind="bundle",
                messages=[Message(role="user", content="camping kit")],
                constraints={"budget": 300.0, "slots": [["Outdoor"], ["Outdoor", "Camping"]]},
                target=Target(kind="bundle", slots=[["a1"], ["a2", "a3"]], slot_names=["boots", "stove"]))


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_round_trip_every_contract(tmp_path: Path, items: list[Item], suffix: str) -> None:
    for name, records, model in (("catalog", items, Item), ("logs", [_session()], Session),
                                 ("tasks", [_task()], Task)):
        path = tmp_path / f"{name}{suffix}"
        assert write_records(path, records, model) == len(records)
        back, stats = read_records(path, model)
        assert back == records
        assert (stats.good, stats.bad) == (len(records), 0)


def test_parquet_keeps_mixed_attribute_types(tmp_path: Path, items: list[Item]) -> None:
    path = tmp_path / "catalog.parquet"
    write_records(path, items, Item)
    back, _ = read_records(path, Item)
    attrs = back[0].attributes
    assert attrs["weight_g"] == 950 and isinstance(attrs["weight_g"], int)
    assert attrs["vegan"] is False and attrs["features"] == ["waterproof"] and attrs["rating_count"] == 12.5


def test_parquet_many_batches(tmp_path: Path) -> None:
    rows = [Item(item_id=f"i{i}", title=f"t{i}", category_path=["c"], price=None if i % 2 else float(i))
            for i in range(20_000)]
    path = tmp_path / "catalog.parquet"
    write_records(path, rows, Item)
    back, stats = read_records(path, Item)
    assert stats.good == 20_000 and back[-1] == rows[-1] and back[0].price == 0.0 and back[1].price is None


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


GOOD = json.dumps({"item_id": "x1", "title": "A", "category_path": ["c"], "price": 5})


@pytest.mark.parametrize(
    ("bad_line", "expected"),
    [
        ('{"item_id": "x2", "title": "B", ', "bad JSON"),
        (json.dumps({"item_id": "x2", "category_path": ["c"]}), "field 'title': Field required"),
        (json.dumps({"item_id": "x2", "title": "B", "category_path": ["c"], "price": "cheap"}), "field 'price'"),
        (json.dumps({"item_id": "x2", "title": "B", "category_path": ["c"], "price": -1}), "greater than or equal"),
        (json.dumps({"item_id": "x2", "title": "B", "category_path": []}), "field 'category_path'"),
        (json.dumps({"item_id": "x2", "title": "B", "category_path": ["c"], "colour": "red"}), "field 'colour'"),
        ("[1, 2, 3]", "expected a JSON object, got list"),
        ('"just a string"', "expected a JSON object, got str"),
    ],
)
def test_strict_read_names_file_line_and_field(tmp_path: Path, bad_line: str, expected: str) -> None:
    path = _write_lines(tmp_path / "catalog.jsonl", [GOOD, bad_line, GOOD.replace("x1", "x3")])
    with pytest.raises(RecordError) as err:
        read_records(path, Item)
    assert f"{path}:2: " in str(err.value)
    assert expected in str(err.value)
    assert err.value.line == 2


def test_skip_bad_quarantines_with_reason_and_loses_nothing(tmp_path: Path) -> None:
    bad = [
        '{"item_id": "x2", "title": ',
        json.dumps({"item_id": "x4", "title": "B", "category_path": ["c"], "price": "cheap"}),
        "[]",
    ]
    lines = [GOOD, bad[0], "", bad[1], "   ", bad[2], GOOD.replace("x1", "x5")]
    path = _write_lines(tmp_path / "catalog.jsonl", lines)
    q = tmp_path / "q.jsonl"
    good, stats = read_records(path, Item, skip_bad=True, quarantine=q)
    assert [i.item_id for i in good] == ["x1", "x5"]
    assert (stats.good, stats.bad, stats.blank_lines) == (2, 3, 2)
    assert stats.reasons == {"bad_json": 1, "invalid": 1, "not_object": 1}
    entries = [json.loads(x) for x in q.read_text().splitlines()]
    assert [e["line"] for e in entries] == [2, 4, 6]
    assert all(e["file"] == str(path) and e["reason"] for e in entries)
    raw = path.read_bytes()
    for entry, original in zip(entries, bad, strict=True):  # offset/length point at the exact source line
        assert raw[entry["offset"] : entry["offset"] + entry["length"]].decode().rstrip("\n") == original
    assert entries[0]["raw"] == bad[0]
    assert "field 'price'" in entries[1]["reason"]


def test_default_quarantine_path_is_beside_the_file(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "catalog.jsonl", [GOOD, "{oops"])
    reader = RecordReader(path, Item, skip_bad=True)
    assert len(list(reader)) == 1
    assert reader.stats.quarantine == tmp_path / "catalog.jsonl.quarantine.jsonl"
    assert reader.stats.quarantine.is_file()


def test_empty_file_is_an_error_unless_allowed(tmp_path: Path) -> None:
    path = tmp_path / "catalog.jsonl"
    path.write_text("")
    with pytest.raises(RecordError, match="empty file: no Item records"):
        read_records(path, Item)
    path.write_text("\n  \n")
    with pytest.raises(RecordError, match="empty file"):
        read_records(path, Item)
    records, stats = read_records(path, Item, allow_empty=True)
    assert records == [] and stats.blank_lines == 2


def test_huge_line_is_bad_without_reading_it_into_memory(tmp_path: Path) -> None:
    huge = json.dumps({"item_id": "h", "title": "x" * 5000, "category_path": ["c"]})
    path = _write_lines(tmp_path / "catalog.jsonl", [GOOD, huge, GOOD.replace("x1", "x9")])
    with pytest.raises(RecordError, match=r"catalog.jsonl:2: line is \d+ bytes, over the 1000-byte limit"):
        read_records(path, Item, max_line_bytes=1000)
    good, _ = read_records(path, Item, skip_bad=True, quarantine=tmp_path / "q.jsonl", max_line_bytes=1000)
    assert [i.item_id for i in good] == ["x1", "x9"]
    entry = json.loads((tmp_path / "q.jsonl").read_text())
    assert entry["kind"] == "too_long" and entry["length"] == len(huge) + 1 and len(entry["raw"]) < 300


def test_huge_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "catalog.jsonl"
    path.write_text(GOOD + "\n" + "y" * 5000)
    good, stats = read_records(path, Item, skip_bad=True, max_line_bytes=1000)
    assert len(good) == 1 and stats.reasons == {"too_long": 1}


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "catalog.jsonl"
    path.write_bytes(GOOD.encode() + b"\n" + b'{"item_id": "\xff\xfe"}\n')
    with pytest.raises(RecordError, match=r":2: not UTF-8"):
        read_records(path, Item)


def test_missing_file_unknown_suffix_and_directory(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="file not found"):
        read_records(tmp_path / "nope.jsonl", Item)
    with pytest.raises(RecordError, match="unknown record file type"):
        read_records(tmp_path / "catalog.csv", Item)
    (tmp_path / "d.jsonl").mkdir()
    with pytest.raises(RecordError, match="is a directory"):
        read_records(tmp_path / "d.jsonl", Item)


def test_corrupt_parquet(tmp_path: Path) -> None:
    path = tmp_path / "catalog.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(RecordError, match="not a readable Parquet file"):
        read_records(path, Item)


def test_parquet_bad_row_names_the_row(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"item_id": ["a", "b"], "title": ["A", ""], "category_path": ['["c"]', '["c"]']})
    table = table.replace_schema_metadata({b"sidekick.json_columns": b'["category_path"]'})
    path = tmp_path / "catalog.parquet"
    pq.write_table(table, path)
    with pytest.raises(RecordError, match=r"catalog.parquet:2: field 'title'"):
        read_records(path, Item)


def test_catalog_rejects_duplicate_ids(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "catalog.jsonl", [GOOD, GOOD])
    with pytest.raises(RecordError, match=r"catalog.jsonl:2: field 'item_id': duplicate id 'x1'"):
        Catalog.load(path)
    catalog, stats = Catalog.load(path, skip_bad=True, quarantine=tmp_path / "q.jsonl")
    assert len(catalog) == 1 and (stats.good, stats.bad) == (1, 1)
    entry = json.loads((tmp_path / "q.jsonl").read_text())
    assert entry["kind"] == "duplicate_id" and entry["line"] == 2


def test_writer_is_atomic(tmp_path: Path, items: list[Item]) -> None:
    path = tmp_path / "catalog.jsonl"
    write_records(path, items, Item)
    before = path.read_bytes()

    def boom() -> object:
        yield items[0]
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        write_records(path, boom(), Item)  # type: ignore[arg-type]
    assert path.read_bytes() == before
    assert not (tmp_path / "catalog.jsonl.tmp").exists()


def test_byte_range_reads_one_shard_with_global_line_numbers(tmp_path: Path) -> None:
    lines = [GOOD.replace("x1", f"x{i}") for i in range(6)]
    lines[4] = "{bad"
    path = _write_lines(tmp_path / "catalog.jsonl", lines)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    q = tmp_path / "q.jsonl"
    reader = RecordReader(path, Item, skip_bad=True, quarantine=q, byte_range=(starts[3], starts[6]), first_line=4,
                          quarantine_content=False)
    assert [i.item_id for i in reader] == ["x3", "x5"]
    entry = json.loads(q.read_text())
    assert entry["line"] == 5 and entry["offset"] == starts[4] and "raw" not in entry


def test_content_free_quarantine_drops_quoted_values(tmp_path: Path) -> None:
    secret = json.dumps({"item_id": "x2", "title": "B", "category_path": ["c"], "price": "call 555-0100"})
    path = _write_lines(tmp_path / "catalog.jsonl", [GOOD, secret])
    q = tmp_path / "q.jsonl"
    assert len(list(RecordReader(path, Item, skip_bad=True, quarantine=q, quarantine_content=False))) == 1
    text = q.read_text()
    assert "555-0100" not in text and "field 'price'" in text


def test_read_json_model_names_file_line_and_field(tmp_path: Path) -> None:
    class Pack(BaseModel):
        family: str
        size: int

    good = tmp_path / "good.json"
    good.write_text('{"family": "a", "size": 3}', encoding="utf-8")
    assert read_json_model(good, Pack) == Pack(family="a", size=3)
    broken = tmp_path / "broken.json"
    broken.write_text('{"family": "a",\n "size": }', encoding="utf-8")
    with pytest.raises(RecordError, match=r"broken\.json:2: not JSON"):
        read_json_model(broken, Pack)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"family": "a", "size": "three"}', encoding="utf-8")
    with pytest.raises(RecordError, match=r"wrong\.json: field 'size'"):
        read_json_model(wrong, Pack)
    with pytest.raises(RecordError, match=r"missing\.json"):
        read_json_model(tmp_path / "missing.json", Pack)
