"""The MovieLens next-item benchmark: leave-one-out split, SID generative retriever, and an end-to-end run.

    .venv/bin/python -m pytest tests/apps/movielens/test_bench.py -q                 # fast tier
    .venv/bin/python -m pytest tests/apps/movielens/test_bench.py -q -m integration  # + 100 real users end to end
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from apps.movielens.bench import (
    METHODS,
    LeaveOneOut,
    MovieLensBenchConfig,
    MovieLensBenchError,
    SidGenerativeRetriever,
    SidRecRanker,
    SidRetrievalConfig,
    by_target_count,
    ensemble_members,
    format_table,
    load_leave_one_out,
    run_movielens_benchmark,
)
from data_curation.records import Event, Session
from eval.baselines import Popularity, Query
from eval.metrics import hit_at_k
from harness.catalog import Catalog, Item
from harness.tasks import Message, Target, Task
from infra.recordio import write_records
from sid.build import LABELS_FILE, SIDS_FILE
from sid.codebook import SidMap
from sid.quantize import add_collision_suffix


def _world(root: Path, timelines: dict[str, list[str]], n_items: int, tasks: bool = True) -> Catalog:
    catalog = Catalog(Item(item_id=str(i), title=f"Movie {i}", category_path=["Movies"]) for i in range(n_items))
    root.mkdir(parents=True, exist_ok=True)
    catalog.save(root / "catalog.jsonl")
    sessions = [Session(session_id=f"s{u}", user_id=u, started_at=0,
                        events=[Event(type="rate", ts=float(t // 2), item_id=i, value=4) for t, i in enumerate(items)])
                for u, items in timelines.items()]
    write_records(root / "logs.jsonl", sessions, Session)
    if tasks:
        write_records(root / "tasks.jsonl", [
            Task(task_id=f"t{u}", app="shopping", kind="next_item",
                 messages=[Message(role="user", content=f"after {items[-2]}?")],
                 target=Target(kind="single", slots=[[items[-1]]]), meta={"user_id": u})
            for u, items in timelines.items() if len(items) >= 2], Task)
    return catalog


def test_leave_one_out_split(tmp_path: Path) -> None:
    timelines = {"10": ["1", "2", "3", "4"], "2": ["5", "6", "7"], "3": ["1", "2"]}
    catalog = _world(tmp_path, timelines, 8)
    data = load_leave_one_out(tmp_path, catalog)
    assert data.users == ["2", "10"] and data.skipped_users == 1  # numeric id order; "3" has too few ratings
    assert (data.train("10"), data.history("10"), data.target("10")) == (["1", "2"], ["1", "2", "3"], "4")
    assert data.queries["2"] == "after 6?"
    assert load_leave_one_out(tmp_path, catalog, max_users=1).users == ["2"]


def test_leave_one_out_rejects_a_world_that_does_not_match(tmp_path: Path) -> None:
    catalog = _world(tmp_path, {"1": ["1", "2", "3"]}, 4)
    write_records(tmp_path / "tasks.jsonl", [Task(
        task_id="t", app="shopping", kind="next_item", messages=[Message(role="user", content="?")],
        target=Target(kind="single", slots=[["2"]]), meta={"user_id": "1"})], Task)
    with pytest.raises(MovieLensBenchError, match="re-import"):
        load_leave_one_out(tmp_path, catalog)
    (tmp_path / "tasks.jsonl").unlink()
    with pytest.raises(MovieLensBenchError, match="import-movielens"):
        load_leave_one_out(tmp_path, catalog)
    with pytest.raises(MovieLensBenchError, match=r"catalog\.jsonl"):
        run_movielens_benchmark(MovieLensBenchConfig(world=tmp_path / "nowhere", out=tmp_path / "out"))
    # the presets join the release year to the SIDs: a catalog without it is refused before any training
    _world(tmp_path / "noyear", {"1": ["1", "2", "3"]}, 4)
    with pytest.raises(MovieLensBenchError, match=r"sid_codes.attributes \['year'\]: no item of .*catalog\.jsonl"):
        run_movielens_benchmark(MovieLensBenchConfig(world=tmp_path / "noyear", out=tmp_path / "out2"))
    assert not (tmp_path / "out2").exists()


def test_config_presets_fill_only_what_was_not_set(tmp_path: Path) -> None:
    cfg = MovieLensBenchConfig(world=tmp_path, out=tmp_path, quick=True, seed=3)
    sasrec, sid, codes, sid_lm = cfg.effective()
    assert (sasrec.epochs, sasrec.stopping_step, sasrec.seed, sasrec.threads, sasrec.max_seq_len) == (3, 3, 3, 1, 20)
    assert (sid.epochs, sid.patience, sid.context_items, sid.seed, codes.pretrain_epochs) == (5, 5, 20, 3, 5)
    assert (sid_lm.epochs, sid_lm.context_items) == (3.0, 20)
    cfg = MovieLensBenchConfig.model_validate({"world": tmp_path, "out": tmp_path, "quick": True, "context_items": 8,
                                               "sasrec": {"epochs": 7, "max_seq_len": 50}, "sid": {"epochs": 2},
                                               "sid_lm": {"epochs": 0.5}})
    sasrec, sid, codes, sid_lm = cfg.effective()
    assert (sasrec.epochs, sasrec.max_seq_len, sid.epochs, sid.context_items, sid_lm.epochs) == (7, 50, 2, 8, 0.5)
    full = MovieLensBenchConfig(world=tmp_path, out=tmp_path).effective()
    assert (full[0].epochs, full[0].stopping_step, full[1].epochs, full[1].patience, full[2].pretrain_epochs,
            full[3].epochs) == (60, 10, 100, 8, 20, 12.0)
    assert (full[1].hidden, full[1].inner, full[1].ema, full[2].dim) == (128, 512, 0.999, 64)
    assert (full[0].dropout, full[0].batch_size, full[0].lr, full[0].valid_metric) == (0.35, 512, 2e-3,
                                                                                    "history_excluded")
    assert MovieLensBenchConfig(world=tmp_path, out=tmp_path).sid_also == ["learned", "learned"]
    assert (full[0].dropout, full[1].dropout) == (0.35, 0.3)
    # the ensemble: model n runs with seed + n; a sid_also model joins the year unless it reads text codes
    members = ensemble_members(MovieLensBenchConfig(world=tmp_path, out=tmp_path, seed=4,
                                                    sid_also=["learned", "text"]))
    assert [(m.seed, c.source, c.attributes) for m, c in members] == [
        (4, "learned", ["year"]), (5, "learned", ["year"]), (6, "text", [])]
    assert [m.dropout for m, _ in members] == [0.3] * 3
    off = ensemble_members(MovieLensBenchConfig(world=tmp_path, out=tmp_path, sid_also_attributes=False))
    assert [(m.seed, c.attributes) for m, c in off] == [(0, ["year"]), (1, []), (2, [])]
    with pytest.raises(ValueError, match=r"sid_lm\.beam_size"):
        MovieLensBenchConfig.model_validate({"world": tmp_path, "out": tmp_path, "k": 30, "methods": ["sid-lm"]})
    with pytest.raises(ValueError, match=r"sid\.beam_size"):
        MovieLensBenchConfig.model_validate({"world": tmp_path, "out": tmp_path, "sid": {"beam_size": 5}})
    assert MovieLensBenchConfig(world=tmp_path, out=tmp_path, k=30).sid.beam_size == 0  # exact decoding: any k
    with pytest.raises(ValueError, match="methods"):
        MovieLensBenchConfig.model_validate({"world": tmp_path, "out": tmp_path, "methods": ["itemknn"]})


def test_sid_ranker_sums_each_models_log_probs() -> None:
    """Two SID models over different codes: the ensemble ranks items by log p_1 + log p_2, history excluded."""
    from training.genrec import SidRec, SidRecConfig, scores

    cfg = SidRecConfig(context_items=4, hidden=16, inner=16)
    torch.manual_seed(3)  # a seed where the two models and their sum rank the three items three ways
    a = SidRec(np.array([[0, 0], [0, 1], [1, 0], [1, 1], [2, 0]]), cfg)
    b = SidRec(np.array([[0, 0], [1, 0], [1, 1], [2, 0], [2, 1]]), cfg)
    with torch.no_grad():  # visible differences between items
        for p in [*a.parameters(), *b.parameters()]:
            p.mul_(30.0) if p.dim() > 1 else None
    ids = ["m0", "m1", "m2", "m3", "m4"]
    q = Query(history=("m1", "m3"), exclude=frozenset({"m1", "m3"}))
    total = scores(a, [[1, 3]], [[1, 3]])[0] + scores(b, [[1, 3]], [[1, 3]])[0]
    want = [ids[j] for j in np.argsort(-total, kind="stable") if np.isfinite(total[j])]
    assert SidRecRanker([a, b], ids).rank(q, 5) == want and len(want) == 3
    alone = [SidRecRanker(m, ids).rank(q, 5) for m in (a, b)]
    assert want not in alone  # neither model alone ranks this way: the sum is a real mix
    assert SidRecRanker([a, b], ids).rank_each([q], 5) == ([want], [[alone[0]], [alone[1]]])  # one scoring pass
    assert SidRecRanker(a, ids).rank_each([q], 5) == ([alone[0]], [])


def test_by_target_count_buckets_users_by_their_test_movies_training_ratings() -> None:
    # 30 users, each trained on [a, b] (the last two of a timeline are validation and test): a and b have 30
    # training ratings, c none; user 0's test movie is a, user 1's c, the others' b
    timelines = {f"u{i}": ["a", "b", "v", "a" if i == 0 else "c" if i == 1 else "b"] for i in range(30)}
    data = LeaveOneOut(users=list(timelines), timelines=timelines, queries={}, skipped_users=0)
    ndcg = [1.0, 0.25] + [0.5] * 14 + [0.0] * 14
    out = by_target_count(data, {"m": {"ndcg@10": ndcg}}, 10)
    assert out["buckets"] == ["0-19", "20-59", "60-119", "120-199", "200+"]
    assert out["users"] == [1, 29, 0, 0, 0]
    assert out["ndcg"]["m"] == [0.25, round((1.0 + 14 * 0.5) / 29, 4), None, None, None]
    table = format_table({"k": 10, "quick": False, "protocol": "p", "counts": {"users": 30, "items": 4,
                                                                             "interactions": 120},
                          "methods": {}, "by_target_count": out})
    assert "| method | 0-19 (1) | 20-59 (29) | 60-119 (0) | 120-199 (0) | 200+ (0) |" in table
    assert "| m | 0.2500 | 0.2759 |  |  |  |" in table


def test_format_table() -> None:
    report = {"k": 10, "quick": True, "protocol": "leave-one-out",
              "counts": {"users": 3, "items": 5, "interactions": 9},
              "methods": {"popularity": {"hr@10": 0.5, "ndcg@10": 0.25, "train_s": 0.01, "eval_s": 0.2}}}
    table = format_table(report)
    assert table.splitlines()[0] == "| method | HR@10 | NDCG@10 | train s | eval s |"
    assert "| popularity | 0.5000 | 0.2500 | 0.0 | 0.2 |" in table and "quick mode" in table


# ------------------------------------------------------------------------------------------------ SID retriever
def _pattern(n_users: int, n_items: int, seed: int = 0) -> list[list[str]]:
    """Every user walks the items in order (i -> i + 1, cyclic) from a random start."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_users):
        start, length = int(rng.integers(n_items)), int(rng.integers(6, 12))
        out.append([str((start + t) % n_items) for t in range(length)])
    return out


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny models on a shared 2-core box: one torch thread is several times faster than two."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("one_thread")
def test_sid_retriever_trains_and_learns_a_pattern(tmp_path: Path) -> None:
    n_items = 24
    # (i mod 3, i mod 8) is a bijection on 0..23 (3 and 8 are coprime), and i -> i + 1 moves each level by one.
    codes = np.array([[i % 3, i % 8] for i in range(n_items)])
    sid_dir = tmp_path / "sid"
    sid_dir.mkdir()
    SidMap([str(i) for i in range(n_items)], add_collision_suffix(codes)).save(sid_dir / SIDS_FILE)
    (sid_dir / LABELS_FILE).write_text(json.dumps({}))
    cfg = SidRetrievalConfig(context_items=4, layers=2, hidden=64, heads=2, vocab_size=384, epochs=40,
                             batch_size=16, lr=3e-3, warmup_steps=10, beam_size=10)
    gr = SidGenerativeRetriever(cfg, sid_dir, [f"Movie {i}" for i in range(n_items)], seed=0)
    gr.setup()
    sequences = _pattern(40, n_items)
    assert all(len(w) <= 1 + 5 * 4 for w in gr.windows(sequences))  # bos + (context + 1) items x (3 codes + sep)
    before = {n: p.detach().clone() for n, p in gr.model.named_parameters()}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        stats = gr.train([s[:-1] for s in sequences])
    assert stats["last_loss"] < 0.5 * stats["first_loss"]
    assert any(not torch.equal(before[n], p) for n, p in gr.model.named_parameters())

    queries = [Query(history=tuple(s[:-1]), exclude=frozenset(s[:-1])) for s in sequences]
    ranked = [gr.rank(q, 10) for q in queries]
    assert all(len(r) == 10 and not set(r) & q.exclude for r, q in zip(ranked, queries, strict=True))
    hr1 = np.mean([hit_at_k(r, {s[-1]}, 1) for r, s in zip(ranked, sequences, strict=True)])
    pop = Popularity.from_sequences([str(i) for i in range(n_items)], [s[:-1] for s in sequences])
    pop_hr1 = np.mean([hit_at_k(pop.rank(q, 10), {s[-1]}, 1) for q, s in zip(queries, sequences, strict=True)])
    assert hr1 >= 0.8 > 0.3 > pop_hr1
    assert gr.rank(Query(exclude=frozenset(str(i) for i in range(n_items))), 10) == []


# ------------------------------------------------------------------------------------------------ end to end
@pytest.mark.integration
def test_benchmark_end_to_end_on_100_real_users(tmp_path: Path) -> None:
    from apps.movielens.importer import MovieLensImportConfig, import_movielens

    world = tmp_path / "ml"
    import_movielens(MovieLensImportConfig(), world)
    cfg = MovieLensBenchConfig.model_validate({
        "world": world, "out": tmp_path / "out", "max_users": 100, "cache_dir": tmp_path / "cache",
        "context_items": 10, "sasrec": {"epochs": 1}, "sid": {"epochs": 2}, "sid_codes": {"pretrain_epochs": 2},
        "sid_lm": {"epochs": 0.5, "beam_size": 10}, "methods": list(METHODS), "n_boot": 200})
    lines: list[str] = []
    report = run_movielens_benchmark(cfg, lines.append)
    members = ["sid: learned codes only", "sid: learned codes, model 2, only",  # the ensemble's models, each alone
               "sid: learned codes, model 3, only"]
    assert list(report["methods"]) == ["popularity", "bm25", "dense", "sasrec", *members, "sid", "sid-lm"]
    for pair in ("sid - sasrec", "sid-lm - sasrec", *(f"{m} - sasrec" for m in members)):  # the same 100 users
        ci = report["paired"][pair]["ndcg@10"]
        assert ci["n"] == 100 and ci["lo"] <= ci["delta"] <= ci["hi"]
        name = pair.split(" - ")[0]
        assert abs(ci["delta"] - (report["methods"][name]["ndcg@10"] - report["methods"]["sasrec"]["ndcg@10"])) < 1e-6
    sid = report["methods"]["sid"]["details"]
    assert sid["sids"]["shape"] == [1682, 3]
    assert [m["sids"]["source"] for m in sid["members"]] == ["learned"] * 3
    # every learned model joins the release year (a text model would not); model n runs with seed + n - 1
    assert [m["codes"]["attributes"] for m in sid["members"]] == [["year"]] * 3
    assert [m["config"]["seed"] for m in sid["members"]] == [0, 1, 2]
    assert all(m["pretrain"]["epochs_run"] == 2 and m["training"]["epochs_run"] == 2 for m in sid["members"])
    assert sid["training"]["epochs_run"] == 2 and sid["pretrain"]["epochs_run"] == 2
    assert "NDCG@10 sid - sasrec:" in format_table(report)
    assert report["counts"] == {"users": 100, "items": 1682, "interactions": sum(
        len(t) for t in load_leave_one_out(world, Catalog.load(world / "catalog.jsonl")[0], 100).timelines.values()),
        "skipped_users": 0}
    for name, m in report["methods"].items():
        assert m["users"] == 100 and 0 <= m["ndcg@10"] <= m["hr@10"] <= 1, name
    assert report["methods"]["popularity"]["hr@10"] > 0  # popular movies are a real signal on MovieLens
    assert report["methods"]["sid-lm"]["details"]["sids"]["items"] == 1682
    sasrec = report["methods"]["sasrec"]["details"]  # our scoring of RecBole's model reproduces RecBole's test
    assert abs(sasrec["history_not_excluded"]["hr@10"] - sasrec["recbole_test"]["hit@10"]) <= 0.011
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["methods"].keys() == report["methods"].keys()
    assert (tmp_path / "out" / "report.md").read_text().startswith("| method | HR@10 |")
    assert (tmp_path / "out" / "manifest.json").is_file() and (tmp_path / "out" / "sid" / "sids.jsonl").is_file()
    assert any("training in 2 worker processes" in line for line in lines)  # sasrec, sid, sid-lm: workers 2


@pytest.mark.integration
def test_parallel_workers_give_the_same_results_as_one_process(tmp_path: Path) -> None:
    """workers 2 trains SASRec and the SID model in two spawned processes; every user's result equals the
    in-process run's (both seeded, one thread each)."""
    from apps.movielens.importer import MovieLensImportConfig, import_movielens

    world = tmp_path / "ml"
    import_movielens(MovieLensImportConfig(), world)
    base = {"world": world, "max_users": 40, "cache_dir": tmp_path / "cache", "context_items": 8, "n_boot": 0,
            "methods": ["popularity", "sasrec", "sid"], "sasrec": {"epochs": 1}, "sid": {"epochs": 1, "stride": 4},
            "sid_codes": {"pretrain_epochs": 1, "warm_start": True}}
    runs = {}
    for workers in (1, 2):
        lines: list[str] = []
        cfg = MovieLensBenchConfig.model_validate({**base, "out": tmp_path / f"out{workers}", "workers": workers})
        report = run_movielens_benchmark(cfg, lines.append)
        assert any("worker processes" in line for line in lines) == (workers == 2)
        runs[workers] = json.loads((tmp_path / f"out{workers}" / "per_user.json").read_text())
        assert report["methods"]["sid"]["users"] == 40
    assert runs[1] == runs[2]


@pytest.mark.integration
def test_workers_exit_when_the_benchmark_process_is_killed(tmp_path: Path) -> None:
    """A killed benchmark cannot shut its pool down; its workers watch for that and exit within a few seconds
    instead of training on for half an hour."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})\n"
        "from apps.movielens.bench import _pool\n"
        "if __name__ == '__main__':\n"
        "    with _pool(True, 1) as pool:\n"
        "        print(pool.submit(os.getpid).result(), flush=True)\n"
        "        pool.submit(time.sleep, 600)\n"
        "        time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        os.kill(worker, 0)  # alive while the benchmark is
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(worker, signal.SIGKILL)
    pytest.fail(f"worker {worker} outlived its killed parent by 15 s")
