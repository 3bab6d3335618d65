"""Paired bootstrap intervals against hand-computed values: degenerate cases, a case enumerated exactly, the
normal approximation on a large sample, the ratio variant, determinism and bad inputs; then the paired
sections built on them (:mod:`eval.paired`) by hand.

Run: .venv/bin/python -m pytest tests/eval/test_stats.py -q
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from eval.paired import paired_compare, paired_summary
from eval.stats import StatsError, _resampled_means, bootstrap_ratio, excludes_zero, paired_bootstrap


def exact_bootstrap_quantile(diffs: list[float], q: float) -> float:
    """The ``q`` quantile (inverted CDF) of the mean over all ``n**n`` equally likely resamples of ``diffs``."""
    n = len(diffs)
    means = sorted(sum(diffs[i] for i in idx) / n for idx in itertools.product(range(n), repeat=n))
    return means[math.ceil(q * len(means)) - 1]


def test_identical_vectors_give_zero() -> None:
    s = paired_bootstrap([0.1, 0.7, 0.3, 1.0], [0.1, 0.7, 0.3, 1.0])
    assert s == {"mean_a": pytest.approx(0.525), "mean_b": pytest.approx(0.525), "delta": 0.0, "lo": 0.0, "hi": 0.0,
                 "n": 4}


def test_a_constant_shift_is_the_whole_interval() -> None:
    a = [0.0, 0.5, 1.0, 2.0, 3.5]
    s = paired_bootstrap(a, [x + 0.25 for x in a], n_boot=500)  # exact in binary: every difference is 0.25
    assert (s["delta"], s["lo"], s["hi"]) == (0.25, 0.25, 0.25)
    assert s["mean_a"] == pytest.approx(1.4) and s["mean_b"] == pytest.approx(1.65)


def test_a_tiny_case_matches_exact_enumeration() -> None:
    # differences [0, 0, 0, 1]: the resampled mean is Binomial(4, 1/4) / 4, so
    # P(0) = 81/256, P(.25) = 108/256, P(.5) = 54/256, P(.75) = 12/256, P(1) = 1/256;
    # the 2.5 % quantile is 0 and the 97.5 % one 0.75 (P(<= .5) = .949, P(<= .75) = .996)
    diffs = [0.0, 0.0, 0.0, 1.0]
    assert exact_bootstrap_quantile(diffs, 0.025) == 0.0 and exact_bootstrap_quantile(diffs, 0.975) == 0.75
    s = paired_bootstrap([0.0] * 4, diffs, n_boot=4000, seed=3)
    assert (s["delta"], s["lo"], s["hi"], s["n"]) == (0.25, 0.0, 0.75, 4)
    # the pairing: the same differences on top of very different task levels give the same interval
    levels = [10.0, -3.0, 0.5, 7.0]
    t = paired_bootstrap(levels, [x + d for x, d in zip(levels, diffs, strict=True)], n_boot=4000, seed=3)
    assert t["delta"] == pytest.approx(0.25) and (t["lo"], t["hi"]) == pytest.approx((0.0, 0.75))


def test_large_sample_matches_the_normal_interval() -> None:
    rng = np.random.default_rng(11)
    a = rng.normal(0.0, 1.0, 400)
    b = a + rng.normal(0.3, 1.0, 400)
    d = b - a
    half = 1.96 * d.std(ddof=1) / math.sqrt(len(d))  # ≈ 0.098
    s = paired_bootstrap(a.tolist(), b.tolist(), n_boot=4000)
    assert s["delta"] == pytest.approx(d.mean())
    assert s["lo"] == pytest.approx(d.mean() - half, abs=0.012) and s["hi"] == pytest.approx(d.mean() + half, abs=0.012)
    assert excludes_zero(s["lo"], s["hi"])


def test_deterministic_for_a_seed_and_alpha_narrows() -> None:
    a, b = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert paired_bootstrap(a, b, seed=5) == paired_bootstrap(a, b, seed=5)
    assert paired_bootstrap(a, b, seed=5) != paired_bootstrap(a, b, seed=6)
    wide, narrow = paired_bootstrap(a, b), paired_bootstrap(a, b, alpha=0.5)
    assert wide["lo"] <= narrow["lo"] <= narrow["hi"] <= wide["hi"]
    # drawing in blocks does not change the draws: 300 resamples are the first 300 of 2000 (one stream)
    d = np.asarray(b)[:, None] - np.asarray(a)[:, None]
    short, long = (np.concatenate(list(_resampled_means(d, k, seed=5))) for k in (300, 2000))
    assert np.array_equal(short, long[:300])


def test_bad_inputs() -> None:
    for a, b, kw, match in (([1.0], [1.0, 2.0], {}, "one length"), ([], [], {}, "at least one"),
                            ([1.0], [1.0], {"alpha": 1.0}, "alpha"), ([1.0], [1.0], {"n_boot": 0}, "n_boot"),
                            ([float("nan")], [1.0], {}, "finite")):
        with pytest.raises(StatsError, match=match):
            paired_bootstrap(a, b, **kw)


def test_ratio() -> None:
    r = bootstrap_ratio([1.0, 2.0, 4.0], [2.0, 4.0, 8.0])  # b = 2a on every task
    assert (r["ratio"], r["lo"], r["hi"]) == (2.0, 2.0, 2.0)
    # pairs (1,1) (1,1) (0,1) (0,0): every resample's ratio is >= 1, and P(no (0,1) drawn) = (3/4)^4 = .32 -> lo 1;
    # P(only the two zero-denominator pairs drawn) = (1/2)^4 = 6.25 % > 2.5 %: the upper end is unbounded
    r = bootstrap_ratio([1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0])
    assert (r["ratio"], r["lo"], r["hi"]) == (1.5, 1.0, None)
    assert bootstrap_ratio([0.0, 0.0], [1.0, 0.0])["ratio"] is None


def test_excludes_zero() -> None:
    assert excludes_zero(0.1, 0.3) and excludes_zero(-0.3, -0.01)
    assert not excludes_zero(0.0, 0.3) and not excludes_zero(-0.1, 0.1) and not excludes_zero(None, 0.2)


# ------------------------------------------------------------------------------------------------ paired sections
def _row(task_id: str, kind: str, **values: dict[str, float]) -> dict[str, Any]:
    return {"task_id": task_id, "app": "shopping", "kind": kind, "values": values}


ROWS = [
    _row("t1", "explicit", agent={"success": 1.0, "ndcg@10": 1.0}, fallback={"success": 0.0, "ndcg@10": 0.5},
         bm25={"ndcg@10": 0.5}),
    _row("t2", "explicit", agent={"success": 1.0, "ndcg@10": 1.0}, fallback={"success": 0.0, "ndcg@10": 0.5},
         bm25={"ndcg@10": 0.5}),
    _row("t3", "vague", agent={"success": 0.0}, fallback={"success": 1.0}),  # no target: no ranking metrics
]


def test_paired_summary_by_hand() -> None:
    p = paired_summary(ROWS, ["fallback", "bm25"], ["success", "ndcg@10"], n_boot=200)
    explicit = p["groups"]["shopping/explicit"]
    # two tasks, each agent − fallback = +1 on success and +0.5 on NDCG: constant shifts, so the CI is the point
    assert explicit["vs"]["fallback"]["success"] == {"n": 2, "agent": 1.0, "baseline": 0.0, "delta": 1.0, "lo": 1.0,
                                                     "hi": 1.0, "excludes_zero": True}
    assert explicit["vs"]["bm25"]["ndcg@10"]["delta"] == 0.5 and "success" not in explicit["vs"]["bm25"]
    assert explicit["means"] == {"success": {"agent": 1.0, "fallback": 0.0},
                                 "ndcg@10": {"agent": 1.0, "fallback": 0.5, "bm25": 0.5}}
    assert explicit["best"] == {"success": "fallback", "ndcg@10": "fallback"}  # a tie goes to the first named
    overall = p["groups"]["all"]
    assert overall["tasks"] == 3 and overall["vs"]["fallback"]["success"]["n"] == 3
    assert overall["vs"]["fallback"]["success"]["delta"] == pytest.approx(1 / 3)  # (+1 +1 −1) / 3
    assert overall["vs"]["bm25"]["ndcg@10"]["n"] == 2  # t3 has no NDCG: not paired
    assert p["groups"]["shopping/vague"]["vs"] == {"fallback": {"success": {
        "n": 1, "agent": 0.0, "baseline": 1.0, "delta": -1.0, "lo": -1.0, "hi": -1.0, "excludes_zero": True}}}
    assert list(p["groups"]) == ["all", "shopping/explicit", "shopping/vague"]


def test_paired_compare_pairs_by_task_id() -> None:
    a = [_row("t1", "explicit", agent={"success": 0.0}), _row("t2", "explicit", agent={"success": 1.0}),
         _row("t9", "vague", agent={"success": 1.0})]
    b = [_row("t2", "explicit", agent={"success": 1.0}), _row("t1", "explicit", agent={"success": 1.0}),
         _row("t7", "vague", agent={"success": 0.0}), _row("t8", "vague", agent={"success": 0.0})]
    c = paired_compare(a, b, ["success", "ndcg@10"], n_boot=500)
    assert (c["paired_tasks"], c["only_a"], c["only_b"]) == (2, 1, 2)
    cell = c["groups"]["all"]["success"]
    # differences (t1: +1, t2: 0): resampled means 0, .5, 1 with P 1/4, 1/2, 1/4 -> 95 % interval [0, 1]
    assert (cell["n"], cell["a"], cell["b"], cell["delta"], cell["lo"], cell["hi"]) == (2, 0.5, 1.0, 0.5, 0.0, 1.0)
    assert not cell["excludes_zero"] and "ndcg@10" not in c["groups"]["all"]
    assert list(c["groups"]) == ["all", "shopping/explicit"]
    no_ci = paired_compare(a, b, ["success"], n_boot=0)["groups"]["all"]["success"]
    assert no_ci["delta"] == 0.5 and no_ci["lo"] is None and not no_ci["excludes_zero"]
