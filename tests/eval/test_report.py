"""Report aggregation by hand, the HTML page (parses, its images exist), the paired section against baselines
and the comparison of two runs with paired intervals.

Run: .venv/bin/python -m pytest tests/eval/test_report.py -q
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from eval.paired import PER_TASK_FILE, paired_summary, per_task_rows, read_per_task, write_per_task
from eval.replay import TaskResult, TurnStat
from eval.report import (
    COMPARE_HTML,
    COMPARE_JSON,
    REPORT_HTML,
    REPORT_JSON,
    TRACES_FILE,
    build_report,
    compare_reports,
    deterministic_part,
    group_summary,
    load_run,
    paired_table,
    timing_summary,
    write_compare,
    write_report,
)


def _turn(ms: float, *, degraded: bool = False, tool_calls: int = 1, tokens: int = 10) -> TurnStat:
    return TurnStat(latency_ms=ms, degraded=degraded, reason="budget" if degraded else None, steps=1,
                    tool_calls=tool_calls, parse_errors=0, grounding_failures=0, output_tokens=tokens,
                    thinking_tokens=0)


def _result(task_id: str, app: str, kind: str, success: bool, turns: list[TurnStat], budget_ms: float = 1000.0,
            **metrics: float) -> TaskResult:
    base = {"success": float(success), "reward": 1.0 if success else 0.25, "turns": float(len(turns)),
            "tool_calls": float(sum(t.tool_calls for t in turns)),
            "output_tokens": float(sum(t.output_tokens for t in turns)),
            "grounding_rejections": 0.0, "ungrounded_served": 0.0}
    return TaskResult(task_id=task_id, app=app, kind=kind, end="answered", budget_ms=budget_ms, turns=turns,
                      final={"reply": f"reply to {task_id} <b>", "item_ids": ["x1"], "bundles": []},
                      reward={"value": base["reward"], "success": success, "parts": {}},
                      metrics={**base, **metrics},
                      messages=[{"role": "user", "content": f"question {task_id} <script>"},
                                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1"}]},
                                {"role": "assistant", "content": "an answer"}])


def results(flip: bool = False) -> list[TaskResult]:
    return [
        _result("s1", "shopping", "explicit", True, [_turn(100)], **{"recall@10": 1.0, "mrr": 1.0}),
        _result("s2", "shopping", "explicit", flip, [_turn(300), _turn(500, tool_calls=3)],
                **{"recall@10": 0.0, "mrr": 0.25}),
        _result("s3", "shopping", "bundle", False, [_turn(2000, degraded=True)], bundle_coverage=0.5),
        _result("l1", "livestream", "question", True, [_turn(400, tool_calls=2)], budget_ms=800.0,
                **{"r.correctness": 1.0, "answer_words": 9.0}),
    ]


def test_group_summary_by_hand() -> None:
    g = group_summary(results())
    assert g["tasks"] == 4 and g["successes"] == 2 and g["success"] == 0.5
    assert g["recall@10"] == 0.5 and g["mrr"] == 0.625  # mean over the two tasks that have it
    assert g["bundle_coverage"] == 0.5 and g["r.correctness"] == 1.0
    assert g["turns_per_success"] == 1.0 and g["tool_calls_per_success"] == 1.5  # s1 (1 call), l1 (2 calls)
    assert g["ends"] == {"answered": 4} and g["degraded_reasons"] == {"budget": 1}
    assert g["ungrounded_served_total"] == 0


def test_timing_by_hand() -> None:
    t = timing_summary(results(), wall_s=2.0, workers=3, enforce_budget=False)
    assert t["tasks_per_s"] == 2.0 and t["workers"] == 3
    # turns: 100 300 500 2000 400 -> p50 400; within budget: all but the 2000 ms turn
    assert t["turn_latency_ms"]["p50"] == 400.0 and t["budget_adherence"] == 0.8
    assert t["task_latency_ms"]["max"] == 2000.0 and t["by_app"]["livestream"]["budget_ms"] == [800.0]
    assert t["turn_latency_ms"]["p95"] == pytest.approx(2000 - 0.2 * 1500)  # numpy linear interpolation


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "img":
            self.images.append(dict(attrs)["src"] or "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _report(flip: bool = False, baselines: dict[str, Any] | None = None, paired: dict[str, Any] | None = None
            ) -> tuple[dict[str, Any], list[TaskResult]]:
    rs = results(flip)
    t = timing_summary(rs, wall_s=2.0, workers=1, enforce_budget=False)
    return build_report(rs, meta={"agent": "runs/a", "logs": "runs/c/test", "config": {"ks": [1, 5, 10]}}, timing=t,
                        baselines=baselines, paired=paired, failures=5), rs


# the fallback solves s2 and l1 only; bm25 ranks s1's item second (recall 1, NDCG 1/log2 3) and misses s2's
OTHERS = {"fallback": {"s1": {"success": 0.0, "reward": 0.25}, "s2": {"success": 1.0, "reward": 1.0},
                       "s3": {"success": 0.0, "reward": 0.25}, "l1": {"success": 1.0, "reward": 1.0}},
          "bm25": {"s1": {"recall@10": 1.0, "ndcg@10": 0.63093}, "s2": {"recall@10": 0.0, "ndcg@10": 0.0}}}


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def test_report_renders_with_plots(tmp_path: Path) -> None:
    base = {"bm25": {"tasks": 3, "all": {"recall@10": 0.2, "mrr": 0.1},
                     "by_kind": {"shopping/explicit": {"tasks": 2, "recall@10": 0.5, "mrr": 0.2}}}}
    report, rs = _report(baselines=base)
    paths = write_report(report, rs, tmp_path)
    assert set(paths) == {REPORT_JSON, REPORT_HTML, "latency.png", "success.png", "baselines.png"}
    page = _parse(tmp_path / REPORT_HTML)
    assert "table" in page.tags and "script" not in page.tags  # task text is escaped, never markup
    assert sorted(page.images) == ["baselines.png", "latency.png", "success.png"]
    for src in page.images:
        assert (tmp_path / src).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = "".join(page.text)
    assert "question s2 <script>" in text and "served output grounded" in text and "bm25" in text
    assert [f["task_id"] for f in report["failures"]] == ["s3", "s2"]  # round-robin over kinds, sorted
    assert json.loads((tmp_path / REPORT_JSON).read_text()) == json.loads(json.dumps(report))


def test_paired_section_by_hand_in_json_html_and_text(tmp_path: Path) -> None:
    rows = per_task_rows(results(), OTHERS, (1, 5, 10))
    assert rows[0] == {"task_id": "s1", "app": "shopping", "kind": "explicit", "values": {
        "agent": {"success": 1.0, "reward": 1.0, "mrr": 1.0, "recall@10": 1.0},
        "fallback": {"success": 0.0, "reward": 0.25}, "bm25": {"recall@10": 1.0, "ndcg@10": 0.63093}}}
    paired = paired_summary(rows, ["fallback", "bm25"], ["success", "recall@10"], n_boot=4000)
    report, rs = _report(paired=paired)
    overall = report["paired"]["groups"]["all"]
    # success, agent − fallback per task: s1 +1, s2 −1, s3 0, l1 0. Enumerating the 4^4 resamples: P(mean <= −.75)
    # = 9/256 = 3.5 % and P(mean >= .75) likewise, so the 95 % interval is [−.75, +.75]
    cell = overall["vs"]["fallback"]["success"]
    assert (cell["n"], cell["agent"], cell["baseline"], cell["delta"]) == (4, 0.5, 0.5, 0.0)
    assert (cell["lo"], cell["hi"], cell["excludes_zero"]) == (-0.75, 0.75, False)
    # recall@10 vs bm25 on the two tasks both rank: s1 1 vs 1, s2 0 vs 0
    assert overall["vs"]["bm25"]["recall@10"] == {"n": 2, "agent": 0.5, "baseline": 0.5, "delta": 0.0, "lo": 0.0,
                                                  "hi": 0.0, "excludes_zero": False}
    assert report["paired"]["groups"]["shopping/explicit"]["vs"]["fallback"]["success"]["delta"] == 0.0
    head, table = paired_table(report["paired"], "success")
    assert head == ["kind", "n", "agent", "fallback", "best", "Δ vs best [95% CI]"]
    assert table[0] == ["all", "4", "0.500", "0.500", "fallback", "+0.00 [-0.75, +0.75]"]
    assert [r[0] for r in table] == ["all", "livestream/question", "shopping/bundle", "shopping/explicit"]
    assert paired_table(report["paired"], "ndcg@10") == ([], [])  # not among the paired metrics
    write_report(report, rs, tmp_path)
    text = "".join(_parse(tmp_path / REPORT_HTML).text)
    assert "Agent vs baselines, paired" in text and "Δ vs fallback" in text and "Δ vs bm25" in text


def test_report_without_baselines_drops_a_stale_plot(tmp_path: Path) -> None:
    (tmp_path / "baselines.png").write_bytes(b"old")
    report, rs = _report()
    write_report(report, rs, tmp_path)
    assert not (tmp_path / "baselines.png").exists()
    assert "No baselines in this run" in "".join(_parse(tmp_path / REPORT_HTML).text)
    assert report["paired"] is None


def test_deterministic_part_drops_timing_only() -> None:
    report, _ = _report()
    assert set(report) - set(deterministic_part(report)) == {"timing"}


def _write_run(out: Path, flip: bool, per_task: bool = True) -> None:
    report, rs = _report(flip)
    write_report(report, rs, out)
    (out / TRACES_FILE).write_text("".join(json.dumps(r.to_json()) + "\n" for r in rs))
    if per_task:
        write_per_task(per_task_rows(rs, {}, (1, 5, 10)), out / PER_TASK_FILE)


def test_compare_two_runs(tmp_path: Path) -> None:
    _write_run(tmp_path / "before", flip=False)
    _write_run(tmp_path / "after", flip=True)
    (a, sa), (b, sb) = load_run(tmp_path / "before"), load_run(tmp_path / "after" / REPORT_JSON)
    assert sa is not None and sb is not None and sb["s2"] and not sa["s2"]
    cmp = compare_reports(a, b, labels=("before", "after"), successes=(sa, sb))
    assert cmp["groups"]["all"]["success"] == {"a": 0.5, "b": 0.75, "delta": 0.25}
    assert cmp["groups"]["shopping/explicit"]["success"]["delta"] == 0.5
    assert cmp["flips"] == {"common_tasks": 4, "gained": ["s2"], "lost": []} and cmp["warnings"] == []
    assert cmp["paired"] is None  # no per-task values given
    paths = write_compare(cmp, tmp_path / "cmp")
    page = _parse(paths[COMPARE_HTML])
    assert page.images == ["compare.png"] and (tmp_path / "cmp" / "compare.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads(paths[COMPARE_JSON].read_text())["labels"] == ["before", "after"]
    assert "newly solves 1" in "".join(page.text) and "no paired intervals" in "".join(page.text)


def test_compare_with_paired_intervals(tmp_path: Path) -> None:
    _write_run(tmp_path / "before", flip=False, per_task=False)  # an older run: per-task values from its traces
    _write_run(tmp_path / "after", flip=True)
    rows_a, rows_b = read_per_task(tmp_path / "before"), read_per_task(tmp_path / "after")
    assert rows_a is not None and rows_b is not None and rows_a == rows_b[:1] + rows_a[1:]
    assert rows_a[1]["values"]["agent"]["success"] == 0.0 and rows_b[1]["values"]["agent"]["success"] == 1.0
    rows_b = [r for r in rows_b if r["task_id"] != "l1"] + [{**rows_b[0], "task_id": "new"}]
    (a, _), (b, _) = load_run(tmp_path / "before"), load_run(tmp_path / "after")
    cmp = compare_reports(a, b, labels=("before", "after"), per_task=(rows_a, rows_b), n_boot=500)
    p = cmp["paired"]
    assert (p["paired_tasks"], p["only_a"], p["only_b"]) == (3, 1, 1)
    assert any("1 only in before, 1 only in after" in w for w in cmp["warnings"])
    # success over s1 s2 s3: before 1 0 0, after 1 1 0 -> differences 0 +1 0; P(no s2 drawn) = (2/3)^3 = .30 -> lo 0
    cell = p["groups"]["all"]["success"]
    assert (cell["n"], cell["a"], cell["b"], cell["delta"], cell["lo"]) == (3, pytest.approx(1 / 3),
                                                                            pytest.approx(2 / 3), pytest.approx(1 / 3),
                                                                            0.0)
    assert p["groups"]["shopping/explicit"]["success"]["delta"] == 0.5 and "livestream/question" not in p["groups"]
    assert p["groups"]["all"]["recall@10"]["n"] == 2  # only s1 and s2 have it
    paths = write_compare(cmp, tmp_path / "cmp")
    text = "".join(_parse(paths[COMPARE_HTML]).text)
    assert "3 tasks paired by task id; 1 only in before and 1 only in after" in text
    assert json.loads(paths[COMPARE_JSON].read_text())["paired"]["paired_tasks"] == 3


def test_compare_refuses_what_is_not_a_report(tmp_path: Path) -> None:
    (tmp_path / REPORT_JSON).write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(ValueError, match="not an evaluation report"):
        load_run(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no report\.json"):
        load_run(tmp_path / "missing")
