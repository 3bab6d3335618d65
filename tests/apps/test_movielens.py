"""MovieLens-100k import: exact counts, contracts, ordering, known rows, bad input, determinism.

    .venv/bin/python -m pytest tests/apps/test_movielens.py -q

The full import reads the copy shipped in the recbole wheel (local files, no network; ~1 s).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

from apps.movielens.importer import MovieLensImportConfig, find_movielens_dir, import_movielens
from data_curation.records import Session
from harness.catalog import Item
from harness.tasks import Task
from infra.layout import CATALOG_FILE, LOGS_FILE, TASKS_FILE
from infra.manifest import read_manifest
from infra.recordio import read_records


def _recbole_dir() -> Path | None:
    try:
        return find_movielens_dir()
    except FileNotFoundError:
        return None


ML_DIR = _recbole_dir()
needs_recbole = pytest.mark.skipif(ML_DIR is None, reason="recbole (which ships ml-100k) is not installed")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ml100k")
    import_movielens(MovieLensImportConfig(), out)
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the real data ---------------------------------------------------------------------------------
@needs_recbole
def test_counts_and_strict_read_back(world: Path) -> None:
    expected = {"users": 943, "items": 1682, "interactions": 100000, "tasks": 943}
    assert read_manifest(world)["counts"] == expected
    items, _ = read_records(world / CATALOG_FILE, Item)
    sessions, _ = read_records(world / LOGS_FILE, Session)
    tasks, _ = read_records(world / TASKS_FILE, Task)
    assert len(items) == 1682 and len({i.item_id for i in items}) == 1682
    assert len(sessions) == 943 and len({s.user_id for s in sessions}) == 943
    assert sum(len(s.events) for s in sessions) == 100000
    assert len(tasks) == 943 and len({t.task_id for t in tasks}) == 943


@needs_recbole
def test_events_are_time_ordered_rates_of_known_items(world: Path) -> None:
    catalog = {i.item_id for i in read_records(world / CATALOG_FILE, Item)[0]}
    in_file: dict[str, list[tuple[float, str]]] = {}  # per user, (timestamp, item) in the source file's order
    with open(find_movielens_dir() / "ml-100k.inter", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            user, item, _, ts = line.rstrip("\n").split("\t")
            in_file.setdefault(user, []).append((float(ts), item))
    for s in read_records(world / LOGS_FILE, Session)[0]:
        assert s.session_id == f"ml-u{s.user_id}" and s.app == "shopping"
        assert s.started_at == s.events[0].ts
        keys = [(e.ts, e.item_id) for e in s.events]
        # time order; ratings of the same second keep the file's order (a stable sort on the time alone)
        assert keys == sorted(in_file[s.user_id], key=lambda k: k[0]), s.session_id
        assert len({item for _, item in keys}) == len(keys)
        assert all(e.type == "rate" and e.item_id in catalog and e.value in {1, 2, 3, 4, 5} for e in s.events)


@needs_recbole
def test_known_items(world: Path) -> None:
    items = {i.item_id: i for i in read_records(world / CATALOG_FILE, Item)[0]}
    toy = items["1"]
    assert toy.title == "Toy Story"
    assert toy.attributes == {"year": 1995, "genres": ["Animation", "Children's", "Comedy"]}
    assert toy.category_path == ["Movies", "Animation"]
    assert toy.price is None and toy.stock is None and toy.rating is None
    # RecBole's placeholder row (267, "unkonwn"): kept, no year, no genre.
    assert items["267"].attributes == {"genres": []} and items["267"].category_path == ["Movies"]
    # Year column "V"; the year is recovered from the title's "(1995)".
    assert items["1412"].attributes["year"] == 1995
    assert items["1633"].title == "Á köldum klaka (Cold Fever)"


@needs_recbole
def test_next_item_tasks_leave_the_last_rating_out(world: Path) -> None:
    sessions = {s.user_id: s for s in read_records(world / LOGS_FILE, Session)[0]}
    titles = {i.item_id: i.title for i in read_records(world / CATALOG_FILE, Item)[0]}
    for t in read_records(world / TASKS_FILE, Task)[0]:
        s = sessions[t.meta["user_id"]]
        assert t.kind == "next_item" and t.app == "shopping" and t.target is not None
        assert t.target.kind == "single" and t.target.slots == [[s.events[-1].item_id]]
        assert t.meta["history_len"] == len(s.events) - 1
        content = t.messages[0].content
        assert content.startswith("I've recently watched ") and content.endswith("What should I watch next?")
        assert titles[s.events[-2].item_id or ""] in content


@needs_recbole
def test_import_is_deterministic(world: Path, tmp_path: Path) -> None:
    import_movielens(MovieLensImportConfig(), tmp_path)
    for name in (CATALOG_FILE, LOGS_FILE, TASKS_FILE):
        assert _sha(tmp_path / name) == _sha(world / name), name


@needs_recbole
def test_progress_counts_every_record_written(tmp_path: Path) -> None:
    seen: list[int] = []
    counts = import_movielens(MovieLensImportConfig(next_item_tasks=False), tmp_path, seen.append)
    assert sum(seen) == counts["items"] + counts["users"] and counts["tasks"] == 0
    assert not (tmp_path / TASKS_FILE).exists()


# -- hand-made sources -----------------------------------------------------------------------------
ITEM_HEADER = "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
INTER_HEADER = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"


def _tiny(tmp_path: Path, inter_rows: list[str], item_rows: list[str] | None = None) -> Path:
    src = tmp_path / "tiny"
    src.mkdir()
    items = item_rows if item_rows is not None else [
        "1\tToy Story\t1995\tAnimation Children's Comedy",
        "2\tGoldenEye\t1995\tAction Adventure Thriller",
        "10\tunkonwn\tunkonwn\tunknown",
    ]
    (src / "tiny.item").write_text(ITEM_HEADER + "\r\n".join(items) + "\r\n", encoding="utf-8")
    (src / "tiny.inter").write_text(INTER_HEADER + "\n".join(inter_rows) + "\n", encoding="utf-8")
    return src


def test_tiny_source_ties_keep_the_file_order(tmp_path: Path) -> None:
    src = _tiny(tmp_path, ["7\t10\t4\t200", "7\t2\t5\t100", "7\t1\t3\t200", "8\t1\t1\t50"])
    out = tmp_path / "out"
    counts = import_movielens(MovieLensImportConfig(source=src), out)
    assert counts == {"users": 2, "items": 3, "interactions": 4, "tasks": 1}  # user 8 has no history
    sessions = read_records(out / LOGS_FILE, Session)[0]
    assert [s.user_id for s in sessions] == ["7", "8"]
    assert [(e.item_id, e.ts, e.value) for e in sessions[0].events] == [
        ("2", 100, 5), ("10", 200, 4), ("1", 200, 3)  # the two ratings of second 200 as the file has them
    ]
    (task,) = read_records(out / TASKS_FILE, Task)[0]
    assert task.target is not None and task.target.slots == [["1"]]
    assert task.messages[0].content == (
        "I've recently watched GoldenEye (1995) and unkonwn. What should I watch next?"  # item 10: no year
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"] == [str(src / "tiny.item"), str(src / "tiny.inter")]


@pytest.mark.parametrize(
    ("row", "where", "what"),
    [
        ("7\t1\tfive\t100", "tiny.inter:3", "column 'rating'"),
        ("7\t1\t5\t-3", "tiny.inter:3", "column 'timestamp'"),
        ("7\t1\t5", "tiny.inter:3", "expected 4 tab-separated columns"),
        ("7\t99\t5\t100", "tiny.inter:3", "column 'item_id'"),
        ("\t1\t5\t100", "tiny.inter:3", "column 'user_id'"),
    ],
)
def test_malformed_interaction_names_file_line_and_column(
    tmp_path: Path, row: str, where: str, what: str
) -> None:
    src = _tiny(tmp_path, ["7\t2\t5\t100", row, "7\t10\t4\t300"])
    with pytest.raises(ValueError) as err:
        import_movielens(MovieLensImportConfig(source=src), tmp_path / "out")
    assert where in str(err.value) and what in str(err.value)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_malformed_item_names_file_line_and_column(tmp_path: Path) -> None:
    items = ["1\tToy Story\t1995\tAnimation", "1\tToy Story again\t1995\tAnimation"]
    src = _tiny(tmp_path, ["7\t1\t5\t100"], items)
    with pytest.raises(ValueError, match=r"tiny\.item:3: column 'item_id': duplicate id '1'"):
        import_movielens(MovieLensImportConfig(source=src), tmp_path / "out")


def test_broken_copy_of_real_files(tmp_path: Path) -> None:
    if ML_DIR is None:
        pytest.skip("recbole (which ships ml-100k) is not installed")
    src = tmp_path / "ml-100k"
    src.mkdir()
    (src / "ml-100k.item").write_bytes((ML_DIR / "ml-100k.item").read_bytes())
    lines = (ML_DIR / "ml-100k.inter").read_bytes().splitlines(keepends=True)[:1000]
    lines[500] = b"196\t242\t3\tyesterday\r\n"
    (src / "ml-100k.inter").write_bytes(b"".join(lines))
    with pytest.raises(ValueError, match=r"ml-100k\.inter:501: column 'timestamp': not a number"):
        import_movielens(MovieLensImportConfig(source=src), tmp_path / "out")


def test_missing_header_column_and_missing_source(tmp_path: Path) -> None:
    src = _tiny(tmp_path, ["7\t1\t5\t100"])
    (src / "tiny.inter").write_text("user_id:token\titem_id:token\trating:float\n7\t1\t5\n")
    with pytest.raises(ValueError, match=r"tiny\.inter:1: header lacks column\(s\) timestamp"):
        import_movielens(MovieLensImportConfig(source=src), tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="not a directory"):
        import_movielens(MovieLensImportConfig(source=tmp_path / "nope"), tmp_path / "out")


def test_missing_recbole_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install recbole"):
        find_movielens_dir()


def test_config_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="extra"):
        MovieLensImportConfig.model_validate({"sourse": "/tmp"})
