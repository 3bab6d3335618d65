"""Baselines on a tiny world: popularity by hand, BM25 / dense find the obvious item, SASRec-CE learns a pattern.

    .venv/bin/python -m pytest tests/eval/test_baselines.py -q
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from data_curation.records import Event, Session
from eval.baselines import (
    BaselineError,
    Bm25Ranker,
    DenseRanker,
    Popularity,
    Query,
    build_baselines,
    task_ranker,
)
from eval.metrics import hit_at_k
from eval.sasrec import SasRecConfig, SasRecError, SasRecRanker, train_sasrec, validation_ndcg, write_atomic_files
from harness.catalog import Catalog, Item
from harness.tasks import Message, Target, Task
from infra.recordio import write_records
from sid.cooccurrence import cooccurrence_embeddings


def _item(item_id: str, title: str, category: str = "Outdoor") -> Item:
    return Item(item_id=item_id, title=title, category_path=[category])


@pytest.fixture
def shop() -> list[Item]:
    return [
        _item("a", "Waterproof trail boots", "Footwear"),
        _item("b", "Camp stove with gas canister", "Cooking"),
        _item("c", "Two person dome tent", "Tents"),
        _item("d", "Insulated water bottle", "Cooking"),
    ]


# ------------------------------------------------------------------------------------------------ popularity
def test_popularity_by_hand() -> None:
    pop = Popularity.from_sequences(["a", "b", "c", "d"], [["a", "b"], ["b", "c"], ["b"]])
    assert pop.rank(Query(), 10) == ["b", "a", "c", "d"]  # b: 3, then a and c (1 each) in catalog order, d: 0
    assert pop.rank(Query(exclude=frozenset({"b", "zzz"})), 2) == ["a", "c"]
    assert pop.rank(Query(), 0) == []


def test_popularity_from_logs_counts_item_events(tmp_path: Path) -> None:
    sessions = [
        Session(session_id="s1", user_id="u1", started_at=0, events=[
            Event(type="search", ts=0, query="tent"), Event(type="view", ts=1, item_id="c"),
            Event(type="purchase", ts=2, item_id="c")]),
        Session(session_id="s2", user_id="u2", started_at=0, events=[Event(type="click", ts=1, item_id="d")]),
    ]
    logs = tmp_path / "logs.jsonl"
    write_records(logs, sessions, Session)
    pop = Popularity.from_logs(["a", "b", "c", "d"], logs)
    assert pop.rank(Query(), 4) == ["c", "d", "a", "b"]
    assert Popularity.from_logs(["a", "b", "c", "d"], logs, events=["purchase"]).rank(Query(), 1) == ["c"]


# ------------------------------------------------------------------------------------------------ text
def test_bm25_ranks_the_obvious_item_first(shop: list[Item]) -> None:
    bm25 = Bm25Ranker(shop)
    assert bm25.rank(Query(text="a tent for two"), 3)[0] == "c"
    assert bm25.rank(Query(text="water bottle"), 1) == ["d"]
    assert "c" not in bm25.rank(Query(text="a tent for two", exclude=frozenset({"c"})), 4)
    assert bm25.rank(Query(text="zzzz"), 3) == []  # no query word in the catalog: nothing


def test_dense_ranks_the_obvious_item_first(shop: list[Item], tmp_path: Path) -> None:
    dense = DenseRanker(shop, cache_dir=tmp_path)
    assert dense.rank(Query(text="a tent to sleep in for two people"), 4)[0] == "c"
    assert dense.rank(Query(text="hiking shoes that keep my feet dry"), 1) == ["a"]
    got = dense.rank(Query(text="a tent to sleep in", exclude=frozenset({"c"})), 4)
    assert "c" not in got and len(got) == 3


def test_dense_history_query_is_the_mean_of_recent_items(shop: list[Item]) -> None:
    vectors = np.eye(4, dtype=np.float32)  # item r points along axis r
    vectors[3] = [0.6, 0.8, 0, 0]  # d sits between a and b
    dense = DenseRanker(shop, query_from="history", history_items=2, vectors=vectors)
    q = Query(history=("c", "a", "b"), exclude=frozenset({"c", "a", "b"}))  # the last two: a and b
    assert dense.rank(q, 4) == ["d"]
    got = dense.rank(Query(history=("c", "a", "b")), 3)  # cos: d .99, then a and b .71, then c 0
    assert got[0] == "d" and set(got[1:]) == {"a", "b"}
    assert dense.rank(Query(), 3) == []  # no history, no text


def test_task_ranker_uses_the_users_history(shop: list[Item]) -> None:
    task = Task(task_id="t1", app="shopping", kind="next_item", messages=[Message(role="user", content="stove")],
                target=Target(kind="single", slots=[["b"]]), meta={"user_id": "u1"})
    rank = task_ranker(Popularity.from_sequences([i.item_id for i in shop], [["b", "b", "a"]]), {"u1": ["b"]})
    assert rank(task, 2) == ["a", "c"]
    assert task_ranker(Bm25Ranker(shop))(task, 1) == ["b"]


def test_build_baselines_from_a_world(shop: list[Item], tmp_path: Path) -> None:
    Catalog(shop).save(tmp_path / "catalog.jsonl")
    write_records(tmp_path / "logs.jsonl", [Session(session_id="s", user_id="u", started_at=0, events=[
        Event(type="cart", ts=0, item_id="d")])], Session)
    rankers = build_baselines(["popularity", "bm25"], tmp_path)
    assert rankers["popularity"].rank(Query(), 1) == ["d"]
    assert rankers["bm25"].rank(Query(text="tent"), 1) == ["c"]
    with pytest.raises(BaselineError, match=r"eval\.sasrec"):
        build_baselines(["sasrec"], tmp_path)
    (tmp_path / "logs.jsonl").unlink()
    with pytest.raises(BaselineError, match="needs logs"):
        build_baselines(["popularity"], tmp_path)


# ------------------------------------------------------------------------------------------------ SASRec
def test_atomic_files_keep_our_order(tmp_path: Path) -> None:
    path = write_atomic_files({"u1": ["3", "1", "2"], "u2": ["1"]}, tmp_path)
    assert path == tmp_path / "sidekick" / "sidekick.inter"
    lines = path.read_text().splitlines()
    assert lines[0] == "user_id:token\titem_id:token\ttimestamp:float"
    assert lines[1:] == ["u1\t3\t0", "u1\t1\t1", "u1\t2\t2", "u2\t1\t0"]
    with pytest.raises(SasRecError, match="tabs"):
        write_atomic_files({"u\t1": ["1"]}, tmp_path)
    with pytest.raises(SasRecError, match="3 or more"):
        train_sasrec({"u": ["1", "2"]}, SasRecConfig())


def _pattern_timelines(n_users: int = 60, n_items: int = 30, seed: int = 0) -> dict[str, list[str]]:
    """Every user walks the items in order (i -> i + 1, cyclic) from a random start."""
    rng = np.random.default_rng(seed)
    out = {}
    for u in range(n_users):
        start, length = int(rng.integers(n_items)), int(rng.integers(8, 16))
        out[f"u{u}"] = [f"i{(start + t) % n_items}" for t in range(length)]
    return out


def test_sasrec_learns_a_pattern_popularity_cannot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # RecBole would drop log_tensorboard/ here if the sandbox let it
    timelines = _pattern_timelines()
    monkeypatch.setattr(sys, "argv", ["sidekick", "--epochs=1", "--quick"])  # RecBole must not read these
    cuda_env = os.environ.get("CUDA_VISIBLE_DEVICES")
    py_state = random.getstate()
    cfg = SasRecConfig(epochs=25, stopping_step=25, max_seq_len=10, hidden_size=32, inner_size=64, batch_size=64,
                       dropout=0.1, threads=1)
    lines: list[str] = []
    ranker = train_sasrec(timelines, cfg, workdir=tmp_path / "rb", progress=lines.append)

    queries = [Query(history=tuple(t[:-1]), exclude=frozenset(t[:-1])) for t in timelines.values()]
    targets = [t[-1] for t in timelines.values()]
    sasrec_hr1 = np.mean([hit_at_k(r, {t}, 1) for r, t in zip(ranker.rank_many(queries, 10), targets, strict=True)])
    pop = Popularity.from_sequences([f"i{i}" for i in range(30)], [t[:-2] for t in timelines.values()])
    pop_hr1 = np.mean([hit_at_k(pop.rank(q, 10), {t}, 1) for q, t in zip(queries, targets, strict=True)])
    assert sasrec_hr1 >= 0.9 > 0.3 > pop_hr1
    assert ranker.rank(queries[0], 5) == ranker.rank_many(queries[:1], 5)[0]
    assert ranker.info["recbole_test"]["hit@10"] >= 0.9 and ranker.info["best_epoch"] >= 1
    assert len(lines) == ranker.info["epochs_run"] and lines[0].startswith("sasrec epoch 1/25")
    # RecBole's process-wide side effects did not leak out
    assert not torch.is_anomaly_enabled()
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == cuda_env
    assert random.getstate() == py_state
    assert sys.argv == ["sidekick", "--epochs=1", "--quick"]
    assert not (tmp_path / "log_tensorboard").exists() and not (tmp_path / "log").exists()
    json.dumps(ranker.info)  # the details go into report.json


def test_validation_ndcg_hand_values() -> None:
    """Scores over internal ids 0 (padding) .. 4 (items a-d). User 1: history [a], target c; c (0.5) is beaten by
    b (0.9) only, a (1.0) is masked: rank 1 -> 1 / log2(3). User 2: history [b, d], target a (0.2), beaten by c
    (0.3): rank 1 -> 1 / log2(3). User 3: target z is unknown: 0. Mean = 2 / (3 log2 3)."""
    scores = np.array([[-np.inf, 1.0, 0.9, 0.5, 0.1], [-np.inf, 0.2, 0.8, 0.3, 0.9], [-np.inf, 1, 1, 1, 1]])

    class Fixed(SasRecRanker):
        def scores(self, histories: Sequence[Sequence[str]]) -> np.ndarray:
            return scores[:len(histories)].copy()

    ranker = Fixed(model=None, item_ids=["[PAD]", "a", "b", "c", "d"], max_seq_len=5)
    got = validation_ndcg(ranker, [["a"], ["b", "d"], ["a"]], ["c", "a", "z"])
    assert got == pytest.approx(2 / (3 * np.log2(3)))
    assert validation_ndcg(ranker, [["a"]], ["a"]) == 0.0  # a target in its own history is masked: 0
    # k = 1, no history: b is second for user 1 (0), d first for user 2 (1)
    assert validation_ndcg(ranker, [[], []], ["b", "d"], k=1) == pytest.approx(0.5)


def test_sasrec_can_stop_on_the_history_excluded_validation(tmp_path: Path) -> None:
    timelines = _pattern_timelines()
    cfg = SasRecConfig(epochs=3, stopping_step=3, max_seq_len=10, hidden_size=16, inner_size=32, batch_size=64,
                       threads=1, valid_metric="history_excluded")
    lines: list[str] = []
    ranker = train_sasrec(timelines, cfg, workdir=tmp_path / "rb", progress=lines.append)
    users = [t for t in timelines.values() if len(t) >= 3]
    want = validation_ndcg(ranker, [t[:-2] for t in users], [t[-2] for t in users])
    assert ranker.info["valid_ndcg@10"] == pytest.approx(want, abs=1e-6)  # the kept epoch's own score
    best = max(float(line.split("valid ndcg@10 ")[1].split(",")[0]) for line in lines)
    assert best == pytest.approx(want, abs=1e-4)  # and the best of the epochs it reported


def test_sasrec_item_embeddings_can_start_at_the_cooccurrence_eigenvectors(tmp_path: Path) -> None:
    """item_init cooccurrence: every item row starts at the PPMI eigenvectors of the training parts (all but the
    last two items) in RecBole's internal ids, scaled to 0.02 * sqrt(hidden); a learning rate too small to move
    them keeps them there; neighbours on the walk start closer than items half the cycle apart."""
    timelines = _pattern_timelines()
    cfg = SasRecConfig(epochs=1, stopping_step=1, max_seq_len=10, hidden_size=16, inner_size=32, batch_size=64,
                       lr=1e-12, threads=1, item_init="cooccurrence", cooc_window=2)
    ranker = train_sasrec(timelines, cfg, workdir=tmp_path / "rb")
    weight = ranker.model.item_embedding.weight.detach().numpy()
    index = ranker.index
    rows = [[index[i] for i in t[:-2]] for t in timelines.values()]
    want = cooccurrence_embeddings(rows, len(ranker.item_ids), 16, 2, 0) * (0.02 * 4.0)
    np.testing.assert_allclose(weight[1:], want[1:], atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(weight[1:], axis=1), 0.08, rtol=1e-4)
    unit = weight / np.linalg.norm(weight, axis=1, keepdims=True).clip(1e-12)
    near = unit[index["i3"]] @ unit[index["i4"]]
    far = unit[index["i3"]] @ unit[index["i18"]]
    assert near > far + 0.5, (near, far)


def test_dense_prepare_embeds_queries_in_one_batch(shop: list[Item], tmp_path: Path) -> None:
    dense = DenseRanker(shop, cache_dir=tmp_path)
    queries = [Query(text="a tent to sleep in for two people"), Query(text="hiking shoes that keep my feet dry"),
               Query(text="  ")]
    alone = [dense.rank(q, 4) for q in queries]
    dense.prepare(queries)
    assert sorted(dense._text_vectors) == sorted(q.text for q in queries[:2])  # blank text: nothing to embed
    assert [dense.rank(q, 4) for q in queries] == alone and alone[0][0] == "c"
