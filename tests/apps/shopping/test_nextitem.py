"""Next item on curated shopping logs: timelines, test cases, ranks and metrics, baselines, the SID vs SASRec run.

    .venv/bin/python -m pytest tests/apps/shopping/test_nextitem.py -q                 # fast tier
    .venv/bin/python -m pytest tests/apps/shopping/test_nextitem.py -q -m integration  # + a generated world end to end
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from apps.shopping.nextitem import (
    Case,
    NextItemConfig,
    NextItemError,
    compare_next_item,
    format_table,
    load_next_item,
    rank_metrics,
    repeat_last_scorer,
    target_ranks,
    training_part,
)
from data_curation.records import Event, Session
from eval.metrics import hit_at_k, mrr, ndcg_at_k
from harness.catalog import Catalog, Item
from infra.recordio import RecordError, write_records

ITEMS = [f"i{n}" for n in range(1, 9)]  # catalog rows 0..7


def _session(sid: str, user: str, start: float, events: list[tuple[str, str | None]]) -> Session:
    return Session(session_id=sid, user_id=user, started_at=start, turns=[],
                   events=[Event(type=kind, ts=start + t, item_id=item, query="q" if kind == "search" else None)
                           for t, (kind, item) in enumerate(events)])


def _curated(root: Path) -> Path:
    """A hand-made curated directory: 8 items, three train users (one without click/cart/purchase), three test
    sessions (one with no case)."""
    Catalog(Item(item_id=i, title=f"Item {i}", category_path=["Things"]) for i in ITEMS).save(root / "catalog.jsonl")
    for split in ("train", "val", "test"):
        (root / split).mkdir(parents=True)
    write_records(root / "train/logs.jsonl", [
        # u1's later session comes first in the file: timelines follow started_at, not file order
        _session("s2", "u1", 200, [("search", None), ("view", "i1"), ("click", "i1"), ("view", "i2"),
                                   ("cart", "i1"), ("purchase", "i1")]),
        _session("s1", "u1", 100, [("view", "i3"), ("click", "i3"), ("click", "i4")]),
        _session("s3", "u2", 150, [("view", "i5"), ("click", "i5"), ("cart", "i6")]),
        _session("s4", "u3", 160, [("view", "i7")]),
    ], Session)
    write_records(root / "val/logs.jsonl", [_session("v1", "w1", 10, [("click", "i1"), ("click", "i2")])], Session)
    write_records(root / "test/logs.jsonl", [
        _session("t1", "x1", 300, [("view", "i2"), ("click", "i2"), ("view", "i3"), ("click", "i3"), ("cart", "i2"),
                                   ("purchase", "i2")]),
        _session("t2", "x2", 310, [("view", "i8"), ("click", "i8")]),
        _session("t3", "x3", 320, [("click", "i5"), ("click", "i1")]),
    ], Session)
    return root


def test_timelines_and_cases_without_views(tmp_path: Path) -> None:
    data = load_next_item(_curated(tmp_path))
    assert data.item_ids == ITEMS
    assert data.timelines == {"u1": ["i3", "i4", "i1", "i1", "i1"], "u2": ["i5", "i6"]}  # u3 only viewed
    assert data.test == [Case("t1", ("i2",), "i3", "click"), Case("t1", ("i2", "i3"), "i2", "cart"),
                         Case("t1", ("i2", "i3", "i2"), "i2", "purchase"), Case("t3", ("i5",), "i1", "click")]
    assert data.counts == {"items": 8, "train_users": 2, "train_events": 7, "test_cases": 4, "test_sessions": 2}


def test_timelines_and_cases_with_views(tmp_path: Path) -> None:
    data = load_next_item(_curated(tmp_path), views=True)
    assert data.timelines == {"u1": ["i3", "i3", "i4", "i1", "i1", "i2", "i1", "i1"], "u2": ["i5", "i5", "i6"],
                              "u3": ["i7"]}
    # a view is context, never a target; the first click of t2 now has its view before it
    assert data.test == [Case("t1", ("i2",), "i2", "click"), Case("t1", ("i2", "i2", "i3"), "i3", "click"),
                         Case("t1", ("i2", "i2", "i3", "i3"), "i2", "cart"),
                         Case("t1", ("i2", "i2", "i3", "i3", "i2"), "i2", "purchase"),
                         Case("t2", ("i8",), "i8", "click"), Case("t3", ("i5",), "i1", "click")]


def test_training_part_is_recboles_leave_one_out_train_split() -> None:
    assert training_part(["a", "b", "c", "d"]) == ["a", "b"]
    assert training_part(["a", "b", "c"]) == ["a"]
    assert training_part(["a", "b"]) == ["a"]  # RecBole: train a, test b, no validation
    assert training_part(["a"]) == ["a"]


def test_bad_directories_say_where(tmp_path: Path) -> None:
    with pytest.raises(NextItemError, match=r"no catalog\.jsonl .*sidekick curate"):
        load_next_item(tmp_path / "nowhere")
    root = _curated(tmp_path / "c")
    (root / "test/logs.jsonl").unlink()
    with pytest.raises(NextItemError, match=r"test/logs\.jsonl: not found"):
        load_next_item(root)
    write_records(root / "test/logs.jsonl", [_session("t9", "x", 1, [("click", "i1"), ("click", "zz")])], Session)
    with pytest.raises(NextItemError, match=r"test/logs\.jsonl:1: session 't9', click event 1: item 'zz' is not"):
        load_next_item(root)
    write_records(root / "test/logs.jsonl", [_session("t9", "x", 1, [("click", "i1")])], Session)
    with pytest.raises(NextItemError, match="no test case"):
        load_next_item(root)
    lines = (root / "train/logs.jsonl").read_text().splitlines()
    (root / "train/logs.jsonl").write_text("\n".join([lines[0], lines[1].replace('"started_at":', '"start":')]))
    with pytest.raises(RecordError, match=r"train/logs\.jsonl:2: .*field 'started_at'"):
        load_next_item(root)
    write_records(root / "train/logs.jsonl", [_session("s", "u", 1, [("click", "i1"), ("click", "i2")])], Session)
    with pytest.raises(NextItemError, match="no user has 3 or more"):
        load_next_item(root)


def test_target_ranks_break_ties_by_row_and_miss_unrankable_targets() -> None:
    scores = np.array([[3.0, 1.0, 3.0, -math.inf],
                       [0.0, 2.0, 1.0, 5.0],
                       [3.0, 1.0, 3.0, -math.inf]])
    ranks = target_ranks(scores, np.array([2, 0, 3]))
    assert ranks.tolist() == [1, 3, 4]  # tie with row 0 goes first; -inf target = rank N


def test_rank_metrics_match_eval_metrics_by_hand() -> None:
    ranks = np.array([0, 1, 9, 10, 20])
    m = rank_metrics(ranks, n_items=20, k=10)
    np.testing.assert_allclose(m["hr@10"], [1, 1, 1, 0, 0])
    np.testing.assert_allclose(m["ndcg@10"], [1, 1 / math.log2(3), 1 / math.log2(11), 0, 0])
    np.testing.assert_allclose(m["mrr"], [1, 1 / 2, 1 / 10, 1 / 11, 0])  # rank 20 = not rankable
    ranked = [f"x{j}" for j in range(20)]
    for r in ranks[:4]:
        target = {f"x{r}"}
        assert (hit_at_k(ranked, target, 10), ndcg_at_k(ranked, target, 10), mrr(ranked, target)) == pytest.approx(
            (m["hr@10"][r == ranks][0], m["ndcg@10"][r == ranks][0], m["mrr"][r == ranks][0]))


def test_repeat_last_ranks_the_history_newest_first_then_popularity() -> None:
    row = {i: r for r, i in enumerate(ITEMS)}
    score = repeat_last_scorer(np.array([1.0, 0, 3, 0, 0, 0, 0, 2]), row)
    sc = score([["i2", "i1", "i2", "i4"], []])
    assert list(np.argsort(-sc[0], kind="stable")[:5]) == [3, 1, 0, 2, 7]  # i4, i2, i1, then i3, i8 by counts
    assert list(np.argsort(-sc[1], kind="stable")[:3]) == [2, 7, 0]


def _hand_report(tmp_path: Path) -> dict[str, Any]:
    cfg = NextItemConfig(methods=["popularity", "repeat-last"], k=2, n_boot=0)
    return compare_next_item(load_next_item(_curated(tmp_path)), cfg)


def test_baselines_on_the_hand_made_logs(tmp_path: Path) -> None:
    """Training items: u1 [i3, i4, i1] (i1 i1 validate / RecBole test), u2 [i5]: counts i1 = i3 = i4 = i5 = 1.

    Popularity order: i1 i3 i4 i5 i2 i6 i7 i8 -> target ranks 1 (i3), 4 (i2), 4 (i2), 0 (i1).
    Repeat-last (history newest first, then that order): (i2) -> i2 i1 i3: rank 2; (i2 i3) -> i3 i2: 1;
    (i2 i3 i2) -> i2: 0; (i5) -> i5 i1: 1."""
    report = _hand_report(tmp_path)
    pop, rep = report["methods"]["popularity"], report["methods"]["repeat-last"]
    ndcg1 = 1 / math.log2(3)
    assert (pop["hr@2"], pop["ndcg@2"], pop["mrr"]) == pytest.approx(
        ((1 + 0 + 0 + 1) / 4, (ndcg1 + 1) / 4, (1 / 2 + 1 / 5 + 1 / 5 + 1) / 4), abs=1e-6)
    assert (rep["hr@2"], rep["ndcg@2"], rep["mrr"]) == pytest.approx(
        ((0 + 1 + 1 + 1) / 4, (0 + ndcg1 + 1 + ndcg1) / 4, (1 / 3 + 1 / 2 + 1 + 1 / 2) / 4), abs=1e-6)
    # new-item targets: (i2) -> i3 and (i5) -> i1; repeats: the cart and purchase of i2, never in training
    assert rep["new_item"] == {"hr@2": 0.5, "ndcg@2": pytest.approx(ndcg1 / 2, abs=1e-6), "mrr": pytest.approx(
        (1 / 3 + 1 / 2) / 2, abs=1e-6), "cases": 2}
    assert rep["repeat"]["hr@2"] == 1.0 and rep["unseen"]["cases"] == 2 and pop["unseen"]["hr@2"] == 0.0
    assert pop["purchase"] == {"hr@2": 0.0, "ndcg@2": 0.0, "mrr": 0.2, "cases": 1}
    assert report["data"] == {"target_in_history": 0.5, "target_is_last": 0.25, "target_unseen_in_training": 0.5,
                              "test_events": {"click": 2, "cart": 1, "purchase": 1}, "mean_history": 1.75,
                              "items_in_training": 4}
    assert report["counts"]["valid_users"] == 1 and report["counts"]["train_items_used"] == 4
    assert report["paired"] == {}
    table = format_table(report)
    assert "| repeat-last | 0.7500 |" in table and "50.0% of targets are in their history" in table


def test_per_session_means_pair_sessions_not_cases() -> None:
    from apps.shopping.nextitem import _per_session

    values = np.array([1.0, 0.0, 0.5, 1.0])
    assert _per_session(values, np.array(["s2", "s2", "s1", "s3"])).tolist() == [0.5, 0.5, 1.0]


def test_config_presets_fill_only_what_was_not_set() -> None:
    cfg = NextItemConfig.model_validate({"quick": True, "seed": 3, "context_items": 7, "sid": {"epochs": 2}})
    sasrec, sid, codes = cfg.effective()
    assert (sasrec.epochs, sasrec.max_seq_len, sasrec.seed, sasrec.threads) == (8, 7, 3, 1)
    assert (sid.epochs, sid.patience, sid.context_items, sid.seed) == (2, 3, 7, 3)
    assert codes.pretrain_epochs == 5
    assert NextItemConfig().effective()[0].epochs == 60


@pytest.mark.integration
def test_sid_and_sasrec_on_a_generated_curated_world(tmp_path: Path) -> None:
    """A small world curated with the time split; one epoch of each model. SASRec cannot rank items its
    timelines never hold; the SID model ranks every catalog item."""
    import torch

    from apps.shopping.nextitem import _split, fit_sid, sasrec_scorer, sid_scorer
    from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
    from data_curation.config import CurateConfig
    from data_curation.pipeline import run_curation
    from eval.sasrec import SasRecConfig, train_sasrec

    torch.set_num_threads(1)
    generate_shopping_world(ShoppingWorldConfig(items=300, tasks=20, sessions=800, customers=300), tmp_path / "w")
    (tmp_path / "key").write_text("k" * 32 + "\n")
    run_curation(CurateConfig.model_validate({
        "seed": 0, "workers": 1, "anonymise": {"key_file": str(tmp_path / "key"), "names": "rules", "tagger": False},
        "quality": {"require_outcome": False}, "dedup": {"near": False},
        "select": {"embedder": "hashing"}, "split": {"mode": "time"}}), tmp_path / "w", tmp_path / "c")
    data = load_next_item(tmp_path / "c")
    cfg = NextItemConfig.model_validate({
        "quick": True, "n_boot": 200, "context_items": 8, "valid_max": 50,
        "sasrec": {"epochs": 1, "hidden_size": 16, "inner_size": 32, "n_layers": 1},
        "sid": {"epochs": 1, "hidden": 16, "inner": 32, "decoder_inner": 32, "layers": 1, "stride": 4},
        "sid_codes": {"codebook_size": 8, "pretrain_epochs": 1}})
    report = compare_next_item(data, cfg)
    assert list(report["methods"]) == ["popularity", "repeat-last", "sasrec", "sid"]
    for m in report["methods"].values():
        assert 0 <= m["mrr"] <= m["hr@10"] <= 1 and m["new_item"]["cases"] + m["repeat"]["cases"] == len(data.test)
    pair = report["paired"]["sid - sasrec"]["ndcg@10"]
    assert pair["n"] == data.counts["test_sessions"] and pair["lo"] <= pair["delta"] <= pair["hi"]
    assert "ndcg@10 sid - sasrec" in format_table(report)

    row = {i: r for r, i in enumerate(data.item_ids)}
    never = [i for i in data.item_ids if all(i not in t for t in data.timelines.values())]
    assert never, "the small world leaves some items out of training"
    ranker = train_sasrec(data.timelines, SasRecConfig(epochs=1, hidden_size=16, inner_size=32, n_layers=1,
                                                       max_seq_len=8, threads=1))
    history = [list(data.test[0].history)]
    assert np.isneginf(sasrec_scorer(ranker, data.item_ids)(history)[0, [row[i] for i in never]]).all()
    sid_cfg = NextItemConfig.model_validate({
        "quick": True, "context_items": 8, "valid_max": 50,
        "sid": {"epochs": 1, "hidden": 16, "inner": 32, "decoder_inner": 32, "layers": 1, "stride": 4},
        "sid_codes": {"source": "cooccurrence", "codebook_size": 8, "dim": 8}})
    model, info = fit_sid(sid_cfg, _split(data.timelines, row), len(row), None, None)
    assert info["sids"]["shape"][0] == len(row)
    assert np.isfinite(sid_scorer(model, row)(history)).all()
