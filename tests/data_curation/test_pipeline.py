"""The whole curation run: exact funnel on a hand-made world, splits, determinism, resume, privacy.

    pytest tests/data_curation/test_pipeline.py
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from data_curation import shard_job, stages
from data_curation.config import CurateConfig
from data_curation.errors import CurationError
from data_curation.pipeline import run_curation

KEY = "f3a9c1d27b6e4c0a9e8d7f6a5b4c3d2e1f0a9b8c7d6e5f4a"
DATA_FILES = ("train/logs.jsonl", "val/logs.jsonl", "test/logs.jsonl", "train/tasks.jsonl", "val/tasks.jsonl",
              "test/tasks.jsonl", "quarantine.jsonl", "catalog.jsonl")


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "anonymise.key"
    path.write_text(KEY + "\n")
    return path


def make_config(key_file: Path, cache: Path, **over: Any) -> CurateConfig:
    data: dict[str, Any] = {
        "seed": 0, "workers": 1, "anonymise": {"key_file": str(key_file), "tagger": False},  # tagger: test_tagger
        "select": {"keep_fraction": 1.0, "embedder": "hashing", "cache_dir": str(cache)},
    }
    for k, v in over.items():
        if isinstance(v, dict):
            data.setdefault(k, {}).update(v)
        else:
            data[k] = v
    return CurateConfig.model_validate(data)


def _session(sid: str, user: str, text: str | None, items: tuple[str, ...] = ("sku-1",), buy: bool = True,
             task: str | None = None) -> str:
    turns = [{"role": "user", "text": text, "ts": 10.0}, {"role": "assistant", "text": "Here you go.", "ts": 11.0}]
    events: list[dict[str, Any]] = [{"type": "view", "ts": 12.0 + i, "item_id": it} for i, it in enumerate(items)]
    if buy:
        events.append({"type": "purchase", "ts": 30.0, "item_id": items[0], "order_id": "ORD-2025-000001"})
    return json.dumps({"session_id": sid, "user_id": user, "started_at": 10.0, "task_id": task,
                       "turns": turns if text is not None else [], "events": events})


@pytest.fixture
def tiny_world(tmp_path: Path) -> Path:
    """Every path through the funnel once or twice, with exactly known outcomes."""
    w = tmp_path / "tiny"
    w.mkdir()
    lines = [
        _session("s01", "cust-1", "I need a two person tent, call me at +1 (415) 555 0132", ("sku-1", "sku-2")),
        _session("s02", "cust-2", "I need a two-person tent; call me at +44 7700 900123", ("sku-1", "sku-2")),
        _session("s03", "cust-3", "I need a two person tent!! call me at +1 (415) 555 0132.", ("sku-3",)),
        _session("s04", "cust-4", "ok"),
        _session("s05", "cust-5", "sdfkjh qwrtz xcvbnm plkjhg"),
        _session("s06", "cust-6", "Ich suche ein Zelt für zwei Personen, bitte mit Lieferung"),
        _session("s07", "cust-7", "a sleeping bag for winter camping", buy=False),
        _session("s08", "cust-8", "is the Northpeak Trail Tent in stock?", task="t1"),
        _session("s09", "cust-9", None),
        '{"session_id": "s10", "user_id": ',
        "",
        json.dumps({"session_id": "s11", "user_id": "cust-11", "started_at": -5}),
        _session("s12", "cust-1", "Hi, this is Maria Garcia, a kettle please, ship to 12 Oak Street, Austin, TX 78701",
                 ("sku-2",), task="t1"),
        _session("s13", "cust-12", "espresso machine for a small kitchen", ("sku-3",), task="t2"),
    ]
    (w / "logs.jsonl").write_text("\n".join(lines) + "\n")
    items = [{"item_id": f"sku-{i}", "title": t, "category_path": ["Outdoor"], "price": 10.0}
             for i, t in ((1, "Northpeak Trail Tent"), (2, "Kettle"), (3, "Espresso machine"))]
    (w / "catalog.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    tasks = [{"task_id": f"t{i}", "app": "shopping", "kind": "explicit",
              "messages": [{"role": "user", "content": f"find sku {i}, I'm Lena Chen"}],
              "target": {"kind": "single", "slots": [[f"sku-{i}"]]}} for i in (1, 2, 3)]
    (w / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks) + '{"task_id": "bad"}\n')
    return w


def test_exact_funnel_on_hand_made_world(tiny_world: Path, tmp_path: Path, key_file: Path) -> None:
    cfg = make_config(key_file, tmp_path / "cache", quality={"require_outcome": True},
                      split={"val_fraction": 0.0, "test_fraction": 0.0})
    out = tmp_path / "out"
    f = run_curation(cfg, tiny_world, out).funnel
    assert f["input_lines"] == 14 and f["balanced"]
    assert f["dropped"] == {
        "parse:blank_line": 1, "quarantine:bad_json": 1, "quarantine:invalid": 1, "quality:gibberish": 1,
        "quality:label_leakage": 1, "quality:no_outcome": 1, "quality:no_text": 1, "quality:not_english": 1,
        "quality:too_short": 1, "dedup:exact": 1, "dedup:near": 1, "select:diversity_cap": 0,
        "split:user_in_test": 0}
    assert f["kept"] == {"train": 3, "val": 0, "test": 0}
    kept = [json.loads(line) for line in (out / "train/logs.jsonl").read_text().splitlines()]
    assert [s["session_id"] for s in kept] == ["s01", "s12", "s13"]
    assert kept[0]["turns"][0]["text"] == "I need a two person tent, call me at <PHONE>"
    assert kept[1]["turns"][0]["text"] == "Hi, this is <NAME>, a kettle please, ship to <ADDRESS>"
    assert kept[0]["user_id"] == kept[1]["user_id"] != kept[2]["user_id"]  # same customer, same pseudonym
    assert kept[0]["user_id"].startswith("u_") and kept[0]["events"][-1]["order_id"].startswith("o_")
    tasks = [json.loads(line) for line in (out / "train/tasks.jsonl").read_text().splitlines()]
    assert [t["task_id"] for t in tasks] == ["t1", "t2"]
    assert tasks[0]["messages"][0]["content"] == "find sku 1, I'm <NAME>"
    quarantine = [json.loads(line) for line in (out / "quarantine.jsonl").read_text().splitlines()]
    assert [(q["record_type"], q["line"], q["kind"]) for q in quarantine] == [
        ("Task", 4, "invalid"), ("Session", 10, "bad_json"), ("Session", 12, "invalid")]
    assert (out / "catalog.jsonl").read_bytes() == (tiny_world / "catalog.jsonl").read_bytes()


def _checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated shopping world (1000 sessions, PII answer key) with a few malformed lines appended."""
    from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world

    w = tmp_path_factory.mktemp("world") / "w"
    generate_shopping_world(ShoppingWorldConfig(items=3000, tasks=300, sessions=1000, customers=300), w)
    with (w / "logs.jsonl").open("a") as fh:
        fh.write('{"broken\n\n{"session_id": "x", "user_id": "y", "started_at": 1, "turns": 3}\n')
    return w


def test_funnel_splits_privacy_and_inputs(world: Path, tmp_path: Path, key_file: Path) -> None:
    before = _checksums(world)
    cfg = make_config(key_file, tmp_path / "cache", select={"keep_fraction": 0.3})
    out = tmp_path / "out"
    result = run_curation(cfg, world, out)
    f = result.funnel
    lines = len((world / "logs.jsonl").read_text().splitlines())
    assert f["input_lines"] == lines == 1003 and f["accounted"] == lines and f["balanced"]
    assert f["dropped"]["quarantine:bad_json"] == 1 and f["dropped"]["quarantine:invalid"] == 1
    users = {s: {json.loads(x)["user_id"] for x in (out / s / "logs.jsonl").read_text().splitlines()}
             for s in ("train", "val", "test")}
    assert all(users.values()) and not (users["train"] & users["val"] or users["train"] & users["test"]
                                        or users["val"] & users["test"])
    sel = result.report["selection"]
    assert sel["coverage"] == 1.0 and sel["kept"] == sel["target"] == round(0.3 * sel["candidates"])
    assert _checksums(world) == before  # inputs never modified
    pii_values = [json.loads(x)["value"] for x in (world / "private/pii_key.jsonl").read_text().splitlines()]
    for path in out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert KEY.encode() not in data, path
            if path.suffix in (".jsonl", ".json", ".html"):
                text = data.decode()
                leaked = [v for v in pii_values if v in text]
                assert not leaked, (path, leaked[:3])
    assert "data:image/png;base64," in (out / "report.html").read_text()


def test_pii_score_on_generated_world_meets_targets(world: Path, tmp_path: Path, key_file: Path) -> None:
    report = run_curation(make_config(key_file, tmp_path / "cache"), world, tmp_path / "out").report
    types = report["pii"]["score"]["types"]
    for t in ("EMAIL", "PHONE", "CARD", "ORDER_ID"):
        assert types[t]["recall"] >= 0.995, (t, types[t])
    for t in ("NAME", "ADDRESS"):
        assert types[t]["recall"] >= 0.97, (t, types[t])
    for t, v in types.items():
        assert v["precision"] is None or v["precision"] >= 0.98, (t, v)


def test_workers_do_not_change_the_output(world: Path, tmp_path: Path, key_file: Path) -> None:
    outs = []
    for workers in (1, 2):
        cfg = make_config(key_file, tmp_path / "cache", workers=workers, shard_mb=0.1, select={"keep_fraction": 0.5})
        out = tmp_path / f"w{workers}"
        report = run_curation(cfg, world, out).report
        assert report["workers"] == workers
        outs.append(out)
    assert json.loads((outs[0] / "stages/00_prepare/manifest.json").read_text())["counts"]["shards"] > 2
    for name in DATA_FILES:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


def test_killed_run_resumes_to_the_same_output(world: Path, tmp_path: Path, key_file: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_config(key_file, tmp_path / "cache", shard_mb=0.1, select={"keep_fraction": 0.5})
    reference = tmp_path / "reference"
    run_curation(cfg, world, reference)

    out = tmp_path / "out"
    real_job = shard_job.run_shard_job

    def dies_on_third_shard(job: shard_job.ShardJob) -> dict[str, Any]:
        if job.shard.index == 2:
            raise KeyboardInterrupt("killed")
        return real_job(job)

    monkeypatch.setattr(shard_job, "run_shard_job", dies_on_third_shard)
    with pytest.raises(KeyboardInterrupt):
        run_curation(cfg, world, out)
    assert sorted(p.name for p in (out / "stages/01_records/shards").iterdir()) == ["00000", "00001"]
    monkeypatch.setattr(shard_job, "run_shard_job", real_job)

    def dies_in_selection(self: stages.SelectStage, *args: Any) -> Any:
        raise RuntimeError("killed in selection")

    monkeypatch.setattr(stages.SelectStage, "_diverse", dies_in_selection)
    with pytest.raises(RuntimeError, match="selection"):
        run_curation(cfg, world, out)
    monkeypatch.undo()
    result = run_curation(cfg, world, out)
    assert result.resumed == ["00_prepare", "01_records", "02_dedup"]
    for name in DATA_FILES:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    again = run_curation(cfg, world, out)
    assert len(again.resumed) == 6
    changed = make_config(key_file, tmp_path / "cache", shard_mb=0.1, select={"keep_fraction": 0.5},
                          split={"test_fraction": 0.3})
    assert run_curation(changed, world, out).resumed == ["00_prepare", "01_records", "02_dedup", "03_select"]


def test_certainty_file_gives_difficulty_sets(world: Path, tmp_path: Path, key_file: Path) -> None:
    certainty = tmp_path / "certainty.jsonl"
    tasks = [json.loads(x)["task_id"] for x in (world / "tasks.jsonl").read_text().splitlines()]
    certainty.write_text("".join(json.dumps({"task_id": t, "certainty": (i % 10) / 10}) + "\n"
                                 for i, t in enumerate(tasks[:200])))
    cfg = make_config(key_file, tmp_path / "cache", select={"certainty_file": str(certainty)})
    out = tmp_path / "out"
    sets = run_curation(cfg, world, out).report["selection"]["difficulty"]
    assert sets["high_certainty"] > 0 and sets["low_certainty"] > 0 and sets["unscored"] > 0
    rows = [json.loads(x) for x in (out / "train/difficulty.jsonl").read_text().splitlines()]
    assert {r["set"] for r in rows} == {"high_certainty", "low_certainty", "unscored"}
    assert all((r["certainty"] >= 0.5) == (r["set"] == "high_certainty") for r in rows if r["certainty"] is not None)


def test_clear_errors(tiny_world: Path, tmp_path: Path, key_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_config(key_file, tmp_path / "cache")
    with pytest.raises(CurationError, match=r"no logs\.jsonl"):
        run_curation(cfg, tmp_path, tmp_path / "o1")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "precious.txt").write_text("keep")
    with pytest.raises(CurationError, match="not a curation output"):
        run_curation(cfg, tiny_world, busy)
    with pytest.raises(CurationError, match="outside the input"):
        run_curation(cfg, tiny_world, tiny_world / "out")
    monkeypatch.delenv("SIDEKICK_ANONYMISE_KEY", raising=False)
    no_key = make_config(key_file, tmp_path / "cache", anonymise={"key_file": None})
    from infra.settings import get_settings

    if get_settings().anonymise_key_file is None:
        with pytest.raises(CurationError, match="no anonymisation key"):
            run_curation(no_key, tiny_world, tmp_path / "o2")
    new_key = make_config(key_file, tmp_path / "cache",
                          anonymise={"key_file": str(tmp_path / "keys/new.key"), "create_key": True})
    run_curation(new_key, tiny_world, tmp_path / "o3")
    key = (tmp_path / "keys/new.key").read_text().strip()
    assert all(key not in p.read_text(errors="ignore") for p in (tmp_path / "o3").rglob("*") if p.is_file())


@pytest.mark.integration
def test_minilm_selection(world: Path, tmp_path: Path, key_file: Path) -> None:
    """Real all-MiniLM-L6-v2 embeddings (a few seconds on CPU) and a cached rerun."""
    cfg = make_config(key_file, tmp_path / "cache", select={"keep_fraction": 0.1, "embedder": "minilm"})
    first = run_curation(cfg, world, tmp_path / "a").report["selection"]
    assert first["coverage"] == 1.0 and first["kept"] == first["target"]
    assert list((tmp_path / "cache" / "embeddings").glob("minilm-*.npy"))
    shutil.rmtree(tmp_path / "a")
    again = run_curation(cfg, world, tmp_path / "a").report["selection"]
    assert again["kept"] == first["kept"] and again["embed_seconds"] < first["embed_seconds"]


def _split_outputs(out: Path) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Per split: the sessions and the tasks written."""
    def rows(path: Path) -> list[dict[str, Any]]:
        return [json.loads(x) for x in path.read_text().splitlines()]

    splits = ("train", "val", "test")
    return ({s: rows(out / s / "logs.jsonl") for s in splits}, {s: rows(out / s / "tasks.jsonl") for s in splits})


def _assert_task_split(out: Path, report: dict[str, Any]) -> None:
    """No task id and no task wording in two splits; the counts match the files."""
    from data_curation.split import text_family

    sessions, tasks = _split_outputs(out)
    task_ids = {s: {x["task_id"] for x in rows if x["task_id"]} for s, rows in sessions.items()}
    families = {s: {text_family(t["messages"][0]["content"]) for t in rows} for s, rows in tasks.items()}
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        assert not task_ids[a] & task_ids[b] and not families[a] & families[b], (a, b)
    for s in sessions:
        assert {t["task_id"] for t in tasks[s]} == task_ids[s]
        assert report["splits"][s]["sessions"] == len(sessions[s]) == report["funnel"]["kept"][s]
        assert report["splits"][s]["tasks"] == len(tasks[s]) == sum(report["splits"][s]["task_kinds"].values())
    assert report["tasks_in_several_splits"] == 0 and report["funnel"]["balanced"]


@pytest.fixture
def family_world(tmp_path: Path) -> Path:
    """60 tasks in 20 wording families ("... under 240" / "... under 180"), 3 sessions each, 40 users."""
    w = tmp_path / "families"
    w.mkdir()
    nouns = ["tent", "kettle", "lamp", "desk", "chair", "rug", "pan", "knife", "mug", "sofa", "bike", "drill",
             "scarf", "boots", "watch", "radio", "pillow", "mirror", "stool", "vase"]
    tasks, lines = [], []
    for i in range(60):
        text = f"{'Looking for' if i % 2 else 'looking for'} a {nouns[i // 3]}, under ${100 + 7 * i}"
        tasks.append({"task_id": f"t{i:02d}", "app": "shopping", "kind": ("explicit", "vague", "bundle")[i // 3 % 3],
                      "messages": [{"role": "user", "content": text}],
                      "target": {"kind": "single", "slots": [[f"sku-{i}"]]}})
        for _ in range(3):
            n = len(lines)
            lines.append(_session(f"s{n:03d}", f"cust-{(7 * n) % 40}", text, (f"sku-{i}",), task=f"t{i:02d}"))
    lines += [_session(f"n{k}", f"cust-{k}", f"just browsing {nouns[k]}") for k in range(10)]  # no task
    (w / "logs.jsonl").write_text("\n".join(lines) + "\n")
    (w / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return w


def test_task_split_keeps_tasks_and_wording_families_in_one_split(family_world: Path, tmp_path: Path,
                                                                  key_file: Path) -> None:
    cfg = make_config(key_file, tmp_path / "cache", anonymise={"names": "rules"},
                      dedup={"exact": False, "near": False},
                      split={"mode": "task", "val_fraction": 0.25, "test_fraction": 0.35})
    report = run_curation(cfg, family_world, tmp_path / "out").report
    _assert_task_split(tmp_path / "out", report)
    sessions, tasks = _split_outputs(tmp_path / "out")
    assert report["task_groups"] == {"tasks": 60, "groups": 20, "largest": 3}
    assert all(len(tasks[s]) % 3 == 0 and tasks[s] for s in tasks)  # whole families, every split used
    assert sum(len(v) for v in sessions.values()) == 190
    by_task = {t["task_id"]: s for s, rows in tasks.items() for t in rows}
    assert by_task["t00"] == by_task["t01"] == by_task["t02"]  # "looking for a tent, under $100" / "$107" / …
    users = {s: {x["user_id"] for x in rows} for s, rows in sessions.items()}
    assert users["train"] & (users["val"] | users["test"])  # a user may cross splits in task mode


def test_task_split_on_generated_world_has_every_kind_in_every_split(world: Path, tmp_path: Path,
                                                                    key_file: Path) -> None:
    """Bundle sessions are logged with outcomes, so all five kinds survive require_outcome into every split."""
    cfg = make_config(key_file, tmp_path / "cache", quality={"require_outcome": True},
                      split={"mode": "task", "val_fraction": 0.2, "test_fraction": 0.3})
    report = run_curation(cfg, world, tmp_path / "out").report
    _assert_task_split(tmp_path / "out", report)
    for s in ("train", "val", "test"):
        assert set(report["splits"][s]["task_kinds"]) == {"explicit", "attribute", "vague", "bundle", "multi_turn"}


def test_broken_task_split_is_caught(family_world: Path, tmp_path: Path, key_file: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    def round_robin(user: np.ndarray, *args: Any) -> np.ndarray:
        return (np.arange(len(user)) % 3).astype(np.int8)

    monkeypatch.setattr(stages, "assign_task_splits", round_robin)
    cfg = make_config(key_file, tmp_path / "cache", anonymise={"names": "rules"},
                      dedup={"exact": False, "near": False}, split={"mode": "task"})
    with pytest.raises(AssertionError, match="tasks fall in two splits"):
        run_curation(cfg, family_world, tmp_path / "out")
