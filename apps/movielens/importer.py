"""MovieLens-100k import: RecBole's atomic files → a Sidekick world (catalog, logs, next-item tasks).

    sidekick world import-movielens --out runs/ml100k

The data is the copy shipped in the ``recbole`` wheel (``recbole/dataset_example/ml-100k``), found
without importing recbole. Raw MovieLens ids are kept as item and user ids so results stay
comparable with RecBole's. User demographics (``ml-100k.user``) are not imported: the ``Session``
contract has no place for them.

Known quirks of RecBole's copy, handled here rather than rejected:
- item 267 is a placeholder with title and year ``unkonwn`` (sic): kept, with no ``year`` attribute;
- item 1412's year column holds ``V`` (the title still ends in ``(1995)``): the year is taken from
  the title;
- the genre ``unknown`` (items 267 and 1373) means "no genre": it is left out of ``genres``, and
  such items get the category path ``["Movies"]``;
- several titles appear under two item ids (e.g. "Chasing Amy", 246 and 268): both are kept.
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apps.worlds import Progress, finish_world, no_progress
from data_curation.records import Event, Session
from harness.catalog import AttributeValue, Item
from harness.tasks import Message, Target, Task
from infra.layout import CATALOG_FILE, LOGS_FILE, TASKS_FILE
from infra.recordio import RecordError, RecordWriter, format_validation_error

DATASET = "ml-100k"
ITEM_COLUMNS = ("item_id", "movie_title", "release_year", "class")
INTER_COLUMNS = ("user_id", "item_id", "rating", "timestamp")
UNKNOWN_GENRE = "unknown"
"""MovieLens's "no genre" flag; dropped from ``genres``."""
PROMPT_HISTORY = 5
"""How many of the user's latest titles a next-item task's message names."""

_YEAR = re.compile(r"^\d{4}$")
_YEAR_IN_TITLE = re.compile(r"\((\d{4})\)\s*$")

# (timestamp, line number, item id, rating) — one rating, sortable into the user's timeline.
RatingRow = tuple[float, int, str, float]


class MovieLensImportConfig(BaseModel):
    """Config of ``sidekick world import-movielens``."""

    model_config = ConfigDict(extra="forbid")

    source: Path | None = Field(
        default=None,
        description="A RecBole-format ml-100k folder (holding <name>.item and <name>.inter); "
        "None = the copy shipped in the recbole wheel.",
    )
    next_item_tasks: bool = Field(
        default=True,
        description="Write tasks.jsonl: one leave-one-out next-item task per user (target = the "
        "user's last rating by time); False = no tasks file.",
    )


def find_movielens_dir() -> Path:
    """The ml-100k folder shipped in the ``recbole`` wheel (located without importing recbole)."""
    spec = importlib.util.find_spec("recbole")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "MovieLens-100k ships with the recbole package, which is not installed: "
            "`pip install recbole`, or set `source` to a RecBole-format ml-100k folder"
        )
    for root in spec.submodule_search_locations:
        folder = Path(root) / "dataset_example" / DATASET
        if folder.is_dir():
            return folder
    raise FileNotFoundError(
        f"recbole is installed but has no dataset_example/{DATASET} folder: reinstall it "
        "(`pip install --force-reinstall recbole`), or set `source` to a RecBole-format ml-100k folder"
    )


def atomic_file(folder: Path, suffix: str) -> Path:
    """``folder/<folder name>.<suffix>`` (RecBole's naming), else the folder's only ``*.<suffix>`` file."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a directory (expected a RecBole-format ml-100k folder)")
    named = folder / f"{folder.name}.{suffix}"
    if named.is_file():
        return named
    found = sorted(folder.glob(f"*.{suffix}"))
    if len(found) == 1:
        return found[0]
    what = "no" if not found else f"{len(found)} ambiguous"
    raise FileNotFoundError(f"{folder}: {what} *.{suffix} files (expected {named.name})")


def import_movielens(
    config: MovieLensImportConfig, out: Path, progress: Progress | None = None
) -> dict[str, int]:
    """Write ``catalog.jsonl``, ``logs.jsonl``, ``tasks.jsonl`` and ``manifest.json`` under ``out``.

    Returns the counts (``users``, ``items``, ``interactions``, ``tasks``); for ml-100k they are
    943, 1,682, 100,000 and 943. ``progress`` is called with the number of records just written.
    A malformed source line raises :class:`~infra.recordio.RecordError` (a ``ValueError``) naming
    ``file:line`` and the column.
    """
    report = progress or no_progress
    source = config.source if config.source is not None else find_movielens_dir()
    item_path, inter_path = atomic_file(source, "item"), atomic_file(source, "inter")
    items = read_items(item_path)
    timelines, interactions = read_timelines(inter_path, items)
    users = sorted(timelines, key=_id_key)

    out.mkdir(parents=True, exist_ok=True)
    _write(out / CATALOG_FILE, items.values(), Item, report)
    _write(out / LOGS_FILE, (_session(u, timelines[u]) for u in users), Session, report)
    n_tasks = 0
    if config.next_item_tasks:
        titles = {item_id: _label(item) for item_id, item in items.items()}
        tasks = (_next_item_task(u, timelines[u], titles) for u in users)
        n_tasks = _write(out / TASKS_FILE, (t for t in tasks if t is not None), Task, report)
    else:
        (out / TASKS_FILE).unlink(missing_ok=True)  # a stale one from an earlier import would lie

    counts = {"users": len(users), "items": len(items), "interactions": interactions, "tasks": n_tasks}
    finish_world(out, "movielens", config, counts, inputs=[item_path, inter_path])
    return counts


# -- parsing ---------------------------------------------------------------------------------------
def atomic_rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """Stream ``(line number, values of columns)`` from a RecBole atomic file.

    The file is UTF-8 TSV whose first line names the columns as ``name:type``; columns are found
    by name, so their order does not matter. Blank lines are skipped; a line with the wrong number
    of fields, or that is not UTF-8, is a :class:`RecordError`.
    """
    with path.open("rb") as f:
        first = f.readline()
        if not first.strip():
            raise RecordError(path, 1, "empty file: expected a header line of name:type columns")
        names = [h.split(":", 1)[0].strip() for h in _decode(path, 1, first).split("\t")]
        missing = [c for c in columns if c not in names]
        if missing:
            has = ", ".join(names)
            raise RecordError(path, 1, f"header lacks column(s) {', '.join(missing)} (has {has})")
        index = [names.index(c) for c in columns]
        width = len(names)
        for lineno, raw in enumerate(f, start=2):
            text = _decode(path, lineno, raw)
            if not text.strip():
                continue
            fields = text.split("\t")
            if len(fields) != width:
                expected = f"expected {width} tab-separated columns ({', '.join(names)})"
                raise RecordError(path, lineno, f"{expected}, got {len(fields)}")
            yield lineno, [fields[i] for i in index]


def read_items(path: Path) -> dict[str, Item]:
    """Movies by raw item id, in file order. A duplicate or empty id is a :class:`RecordError`."""
    items: dict[str, Item] = {}
    for lineno, (item_id, title, year, classes) in atomic_rows(path, ITEM_COLUMNS):
        item_id = item_id.strip()
        if not item_id:
            raise RecordError(path, lineno, "column 'item_id': empty")
        if item_id in items:
            raise RecordError(path, lineno, f"column 'item_id': duplicate id {item_id!r}")
        items[item_id] = _movie(path, lineno, item_id, " ".join(title.split()), year.strip(), classes)
    if not items:
        raise RecordError(path, None, "no items")
    return items


def _movie(path: Path, lineno: int, item_id: str, title: str, year_text: str, classes: str) -> Item:
    genres = [g for g in classes.split() if g != UNKNOWN_GENRE]
    attributes: dict[str, AttributeValue] = {"genres": genres}
    year = _year(year_text, title)
    if year is not None:
        attributes["year"] = year
    try:
        return Item(
            item_id=item_id, title=title or f"Movie {item_id}", category_path=["Movies", *genres[:1]],
            attributes=attributes, price=None, stock=None, rating=None,
        )
    except ValidationError as err:
        raise RecordError(path, lineno, format_validation_error(err)) from err


def read_timelines(path: Path, items: dict[str, Item]) -> tuple[dict[str, list[RatingRow]], int]:
    """Each user's ratings sorted by timestamp, ratings of the same second in the file's order (RecBole's stable
    sort does the same), and the number of ratings read. Not by item id: ml-100k users rate several films in one
    second (44 % of last ratings share the second before), and an id order would make the held-out last rating
    the highest-id film of its second (ids follow the catalog's growth, so newer and rarer films), a pattern of
    the catalog, not of the viewer.

    A non-numeric or negative rating or timestamp, an empty user id or an item id missing from
    the catalog is a :class:`RecordError` naming the line and column.
    """
    timelines: dict[str, list[RatingRow]] = {}
    n = 0
    for lineno, (user_id, item_id, rating, timestamp) in atomic_rows(path, INTER_COLUMNS):
        user_id, item_id = user_id.strip(), item_id.strip()
        if not user_id:
            raise RecordError(path, lineno, "column 'user_id': empty")
        if item_id not in items:
            raise RecordError(path, lineno, f"column 'item_id': {item_id!r} is not in the item file")
        ts = _number(path, lineno, "timestamp", timestamp)
        value = _number(path, lineno, "rating", rating)
        timelines.setdefault(user_id, []).append((ts, lineno, item_id, value))
        n += 1
    if n == 0:
        raise RecordError(path, None, "no interactions")
    for timeline in timelines.values():
        timeline.sort()
    return timelines, n


def _decode(path: Path, lineno: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise RecordError(path, lineno, f"not UTF-8 at byte {err.start}") from err


def _number(path: Path, lineno: int, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RecordError(path, lineno, f"column '{column}': not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise RecordError(path, lineno, f"column '{column}': must be a finite number >= 0, got {text!r}")
    return value


def _year(text: str, title: str) -> int | None:
    """The release year, else one in a trailing ``(YYYY)`` of the title, else None."""
    if _YEAR.match(text):
        return int(text)
    found = _YEAR_IN_TITLE.search(title)
    return int(found.group(1)) if found else None


def _id_key(raw_id: str) -> tuple[int, int, str]:
    """Numeric ids in numeric order, then any others in string order (deterministic for all ids)."""
    if raw_id.isdigit():
        return (0, int(raw_id), raw_id)
    return (1, 0, raw_id)


# -- records ---------------------------------------------------------------------------------------
def _session(user_id: str, timeline: list[RatingRow]) -> Session:
    events = [Event(type="rate", item_id=item_id, ts=ts, value=value) for ts, _, item_id, value in timeline]
    return Session(
        session_id=f"ml-u{user_id}", user_id=user_id, app="shopping", started_at=timeline[0][0], events=events
    )


def _next_item_task(user_id: str, timeline: list[RatingRow], titles: dict[str, str]) -> Task | None:
    """Leave-one-out: the last rating is the target, the ones before are the history (None if none)."""
    if len(timeline) < 2:
        return None
    history, target = timeline[:-1], timeline[-1][2]
    recent = [titles[item_id] for _, _, item_id, _ in history[-PROMPT_HISTORY:]]
    text = f"I've recently watched {_and_join(recent)}. What should I watch next?"
    return Task(
        task_id=f"ml-next-u{user_id}", app="shopping", kind="next_item",
        messages=[Message(role="user", content=text)],
        target=Target(kind="single", slots=[[target]]),
        meta={"user_id": user_id, "history_len": len(history)},
    )


def _label(item: Item) -> str:
    """How a task message names a movie: ``Toy Story (1995)`` (the year tells remakes apart)."""
    year = item.attributes.get("year")
    if year is None or item.title.endswith(f"({year})"):
        return item.title
    return f"{item.title} ({year})"


def _and_join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _write(path: Path, records: Iterable[BaseModel], model: type[BaseModel], report: Progress) -> int:
    with RecordWriter(path, model) as writer:
        for record in records:
            writer.write(record)
            report(1)
    return writer.count
