"""One evaluation run: replay the tasks, score baselines over the same tasks, write traces, report and manifest.

The apps layer builds what this needs (``apps/evaluate.py``: the apps' specs, rewards and simulated users,
the agent's model behind a batching front, the baseline rankers) and calls :func:`run_evaluation`;
this module knows no app and no serving code.

    out/traces.jsonl    one line per task: ending, final answer, reward parts, metrics, timing, conversation
    out/report.json     metrics overall / per app / per kind, baselines, failure examples; timing apart
    out/report.html     tables, plots (PNGs beside it), failure examples with traces
    out/manifest.json   inputs, config, code version, counts, checksums
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from eval.metrics import mean_metrics, ranking_metrics
from eval.replay import ReplayConfig, TaskResult, replay
from eval.report import REPORT_HTML, REPORT_JSON, TRACES_FILE, build_report, timing_summary, write_report
from harness.agent import ModelAccess
from harness.env import AppEnv
from harness.tasks import Task
from infra.manifest import write_manifest

Ranker = Callable[[Task, int], list[str]]
"""A baseline: ``(task, k) -> up to k item ids, best first`` (popularity, BM25, dense, SASRec, …)."""


class EvalConfig(ReplayConfig):
    """Replay settings plus what the run around it needs. YAML file and CLI options load into this one model."""

    limit: int = Field(-1, ge=-1, description="Evaluate the first N tasks of the file only; -1 = all (default).")
    failure_examples: int = Field(12, ge=0, description="Failed tasks shown with their traces in the report.")
    max_batch: int = Field(16, ge=1, description="Most sequences per engine call when tasks run in parallel.")
    gather_ms: float = Field(3.0, ge=0, description="How long the engine front waits to fill a batch, in ms.")
    threads: int = Field(0, ge=0, description="torch CPU threads for the engine; 0 = torch's default (all cores). "
                                              "On a machine shared with other jobs 1 is often several times faster.")


def score_rankers(tasks: Sequence[Task], rankers: Mapping[str, Ranker], ks: Sequence[int]) -> dict[str, Any]:
    """Ranking metrics of each baseline over the tasks that have target items: overall and per ``app/kind``."""
    scored = [t for t in tasks if t.target is not None]
    k_max = max(ks)
    out: dict[str, Any] = {}
    for name, rank in rankers.items():
        rows: dict[str, list[dict[str, float]]] = {}
        for task in scored:
            assert task.target is not None
            ranked = list(rank(task, k_max))[:k_max]
            rows.setdefault(f"{task.app}/{task.kind}", []).append(ranking_metrics(ranked, task.target.item_ids, ks))
        every = [r for rs in rows.values() for r in rs]
        out[name] = {"tasks": len(every), "all": _rounded(mean_metrics(every)),
                     "by_kind": {k: {"tasks": len(v), **_rounded(mean_metrics(v))} for k, v in sorted(rows.items())}}
    return out


def _rounded(m: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in sorted(m.items())}


def run_evaluation(tasks: Sequence[Task], apps: Mapping[str, AppEnv], model: ModelAccess | None, cfg: EvalConfig,
                   out: Path, *, meta: Mapping[str, Any] | None = None, rankers: Mapping[str, Ranker] | None = None,
                   baselines_note: str | None = None, progress: Callable[[int], None] | None = None,
                   inputs: Sequence[Path] = ()) -> dict[str, Any]:
    """Replay ``tasks`` (the first ``cfg.limit``), score ``rankers`` on the same tasks, write everything to ``out``.

    Returns the report (``report.json``'s content). ``meta`` (agent, logs, worlds…) is stored in the report.
    """
    tasks = list(tasks)[: cfg.limit] if cfg.limit >= 0 else list(tasks)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    results: list[TaskResult] = replay(tasks, apps, model, cfg, progress=progress, traces=out / TRACES_FILE)
    wall_s = time.perf_counter() - start
    baselines = score_rankers(tasks, rankers, cfg.ks) if rankers else {}
    report = build_report(
        results, meta={**(meta or {}), "config": cfg.model_dump(mode="json")},
        timing=timing_summary(results, wall_s, cfg.workers, cfg.enforce_budget),
        baselines=baselines, baselines_note=baselines_note, failures=cfg.failure_examples)
    written = write_report(report, results, out)
    write_manifest(out, stage="eval", config=cfg.model_dump(mode="json"), inputs=list(inputs),
                   counts={"tasks": len(results), "errors": report["counts"]["errors"],
                           "successes": report["overall"]["successes"]},
                   extra={"outputs": sorted([TRACES_FILE, *written])})
    assert REPORT_JSON in written and REPORT_HTML in written
    return report
