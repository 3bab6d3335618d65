"""One evaluation run: replay the tasks, score baselines over the same tasks, write traces, report and manifest.

Baselines are the rankers given (popularity, BM25, dense…: ranking metrics only) and, with ``fallback=True``,
the apps' no-model fallback replayed on the same tasks through the same path as the agent (so it has success
and reward too). ``report.json``'s ``paired`` section (:func:`eval.paired.paired_summary`) gives, per kind and
overall, the agent's value, each baseline's, the paired difference and its bootstrap confidence interval.

The apps layer builds what this needs (``apps/evaluate.py``: the apps' specs, rewards and simulated users,
the agent's model behind a batching front, the baseline rankers) and calls :func:`run_evaluation`;
this module knows no app and no serving code.

    out/traces.jsonl    one line per task: ending, final answer, reward parts, metrics, timing, conversation
    out/per_task.jsonl  one line per task: its kind and each system's values (agent, fallback, rankers)
    out/report.json     metrics overall / per app / per kind, baselines, paired CIs of the agent against each
                        baseline, failure examples; timing apart
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
from eval.paired import PER_TASK_FILE, paired_metrics, paired_summary, per_task_rows, task_values, write_per_task
from eval.replay import ReplayConfig, ReplayError, TaskResult, replay
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
    form: bool = Field(False, description="Send each task's constraints as form fields where the app has a form "
                       "frontend (travel), as well as the text; default: the text only, as a chat frontend sends it.")
    model_only: bool = Field(False, description="The model answers every turn: each app's first answer (what its "
                             "rules are sure of before any model call, e.g. the livestream reader) is skipped, to "
                             "measure the model alone; default: as served.")
    failure_examples: int = Field(12, ge=0, description="Failed tasks shown with their traces in the report.")
    max_batch: int = Field(16, ge=1, description="Most sequences per engine call when tasks run in parallel.")
    gather_ms: float = Field(3.0, ge=0, description="How long the engine front waits to fill a batch, in ms.")
    threads: int = Field(0, ge=0, description="torch CPU threads for the engine; 0 = torch's default (all cores). "
                                              "On a machine shared with other jobs 1 is often several times faster.")
    n_boot: int = Field(2000, ge=0, description="Bootstrap resamples of the paired confidence intervals (agent vs "
                                                "each baseline, per kind); 0 = differences without intervals.")
    alpha: float = Field(0.05, gt=0, lt=1, description="1 - confidence level of the intervals (0.05: 95 %).")


def rank_tasks(tasks: Sequence[Task], rankers: Mapping[str, Ranker], ks: Sequence[int]
               ) -> dict[str, dict[str, dict[str, float]]]:
    """Each ranker's ranking metrics on each task that has target items: ``name -> task id -> metrics``."""
    k_max = max(ks)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, rank in rankers.items():
        out[name] = {}
        for task in tasks:
            if task.target is not None:
                out[name][task.task_id] = ranking_metrics(list(rank(task, k_max))[:k_max], task.target.item_ids, ks)
    return out


def summarise(tasks: Sequence[Task], by_task: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """One baseline's means over the tasks it has (``tasks`` gives their order and kinds): overall and per
    ``app/kind``."""
    rows: dict[str, list[Mapping[str, float]]] = {}
    for task in tasks:
        if task.task_id in by_task:
            rows.setdefault(f"{task.app}/{task.kind}", []).append(by_task[task.task_id])
    every = [r for rs in rows.values() for r in rs]
    return {"tasks": len(every), "all": _rounded(mean_metrics(every)),
            "by_kind": {k: {"tasks": len(v), **_rounded(mean_metrics(v))} for k, v in sorted(rows.items())}}


def score_rankers(tasks: Sequence[Task], rankers: Mapping[str, Ranker], ks: Sequence[int]) -> dict[str, Any]:
    """Ranking metrics of each baseline over the tasks that have target items: overall and per ``app/kind``."""
    return {name: summarise(tasks, by_task) for name, by_task in rank_tasks(tasks, rankers, ks).items()}


def _rounded(m: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in sorted(m.items())}


def run_evaluation(tasks: Sequence[Task], apps: Mapping[str, AppEnv], model: ModelAccess | None, cfg: EvalConfig,
                   out: Path, *, meta: Mapping[str, Any] | None = None, rankers: Mapping[str, Ranker] | None = None,
                   fallback: bool = False, baselines_note: str | None = None,
                   progress: Callable[[int], None] | None = None, inputs: Sequence[Path] = ()) -> dict[str, Any]:
    """Replay ``tasks`` (the first ``cfg.limit``), score the baselines on the same tasks (``rankers``, and with
    ``fallback`` the apps' no-model fallback replayed like the agent), write everything to ``out``.

    Returns the report (``report.json``'s content). ``meta`` (agent, logs, worlds…) is stored in the report.
    ``progress`` ticks once per replayed task, the fallback's included.
    """
    tasks = list(tasks)[: cfg.limit] if cfg.limit >= 0 else list(tasks)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    results: list[TaskResult] = replay(tasks, apps, model, cfg, progress=progress, traces=out / TRACES_FILE)
    wall_s = time.perf_counter() - start
    others, notes = _baseline_values(tasks, apps, cfg, rankers or {}, fallback, progress)
    baselines = {name: summarise(tasks, by_task) for name, by_task in others.items()}
    rows = per_task_rows(results, others, cfg.ks)
    paired = paired_summary(rows, list(others), paired_metrics(cfg.ks), n_boot=cfg.n_boot, seed=cfg.seed,
                            alpha=cfg.alpha) if others else None
    note = "; ".join(n for n in (baselines_note, *notes) if n) or None
    report = build_report(
        results, meta={**(meta or {}), "config": cfg.model_dump(mode="json")},
        timing=timing_summary(results, wall_s, cfg.workers, cfg.enforce_budget),
        baselines=baselines, baselines_note=note, paired=paired, failures=cfg.failure_examples)
    written = write_report(report, results, out)
    write_per_task(rows, out / PER_TASK_FILE)
    write_manifest(out, stage="eval", config=cfg.model_dump(mode="json"), inputs=list(inputs),
                   counts={"tasks": len(results), "errors": report["counts"]["errors"],
                           "successes": report["overall"]["successes"]},
                   extra={"outputs": sorted([TRACES_FILE, PER_TASK_FILE, *written])})
    assert REPORT_JSON in written and REPORT_HTML in written
    return report


def _baseline_values(tasks: Sequence[Task], apps: Mapping[str, AppEnv], cfg: EvalConfig,
                     rankers: Mapping[str, Ranker], fallback: bool, progress: Callable[[int], None] | None
                     ) -> tuple[dict[str, dict[str, dict[str, float]]], list[str]]:
    """Each baseline's values per task (``name -> task id -> values``; the fallback first) and notes on any
    left out."""
    values: dict[str, dict[str, dict[str, float]]] = {}
    notes: list[str] = []
    if fallback:
        try:
            replayed = replay(tasks, apps, None, cfg, progress=progress)
        except ReplayError as e:
            notes.append(f"fallback left out: {e}")
        else:
            values["fallback"] = {r.task_id: task_values(r.metrics, cfg.ks) for r in replayed}
    values.update(rank_tasks(tasks, rankers, cfg.ks))
    return values, notes
