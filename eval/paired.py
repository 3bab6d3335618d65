"""Per-task values of every system in a run (``per_task.jsonl``) and the paired comparisons built on them.

One line per task: its id, app and kind, and for each system (``agent``: the run's subject; ``fallback``: the
apps' no-model fallback replayed in the same run; rankers such as ``bm25``, ``dense``) the task's values::

    {"task_id": "t1", "app": "shopping", "kind": "explicit",
     "values": {"agent": {"success": 1.0, "reward": 1.0, "ndcg@10": 0.63, ...}, "bm25": {"ndcg@10": 1.0, ...}}}

Replayed systems have ``success`` and ``reward``; every system has the ranking metrics (``recall@k``,
``ndcg@k``, ``hit@k``, ``mrr``) on tasks with target items. A system lacks a task, or a metric on a task, when
it does not apply; paired statistics use the tasks where both sides have the metric and say how many.

:func:`paired_summary` is ``report.json``'s ``paired`` section (the agent against each baseline, per kind and
overall); :func:`paired_compare` is ``compare.json``'s (run B against run A, paired by task id).

    .venv/bin/python -m pytest tests/eval/test_report.py -q
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.replay import TaskResult
from eval.stats import excludes_zero, paired_bootstrap

PER_TASK_FILE = "per_task.jsonl"
AGENT = "agent"
"""The system a run evaluates (the agent, or the fallback itself in a run without one)."""
REPLAYED = ("success", "reward")
"""Per-task values only replayed systems (agent, fallback) have; rankers have the ranking metrics only."""

Row = dict[str, Any]
"""One line of ``per_task.jsonl``."""


def paired_metrics(ks: Sequence[int]) -> tuple[str, ...]:
    """The metrics with paired CIs: success, reward and NDCG/Hit/Recall at 10 (the largest cut-off without 10)."""
    k = 10 if 10 in ks else max(ks)
    return (*REPLAYED, f"ndcg@{k}", f"hit@{k}", f"recall@{k}")


def task_values(metrics: Mapping[str, float], ks: Sequence[int]) -> dict[str, float]:
    """The stored values of one task's metrics: success, reward, MRR and Recall/NDCG/Hit at each cut-off."""
    keys = (*REPLAYED, "mrr", *(f"{m}@{k}" for k in ks for m in ("recall", "ndcg", "hit")))
    return {k: round(float(metrics[k]), 6) for k in keys if k in metrics}


def per_task_rows(results: Sequence[TaskResult], others: Mapping[str, Mapping[str, Mapping[str, float]]],
                  ks: Sequence[int]) -> list[Row]:
    """One row per replayed task (in task order): the agent's values from ``results`` and, for each baseline
    in ``others`` (name -> task id -> metrics), its values on that task where it has them."""
    rows = []
    for r in results:
        values = {AGENT: task_values(r.metrics, ks)}
        values.update({name: task_values(by_task[r.task_id], ks) for name, by_task in others.items()
                       if r.task_id in by_task})
        rows.append({"task_id": r.task_id, "app": r.app, "kind": r.kind, "values": values})
    return rows


def write_per_task(rows: Iterable[Row], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


def read_per_task(run_dir: Path, traces_file: str = "traces.jsonl") -> list[Row] | None:
    """The rows of a run directory: its ``per_task.jsonl``, else the agent's values from its traces (runs written
    before per-task files existed), else None."""
    path = run_dir / PER_TASK_FILE
    if path.is_file():
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    traces = run_dir / traces_file
    if not traces.is_file():
        return None
    rows = []
    with traces.open(encoding="utf-8") as fh:
        for line in fh:
            t = json.loads(line)
            metrics = t.get("metrics") or {}
            ks = sorted({int(k.split("@")[1]) for k in metrics if k.split("@")[0] in ("recall", "ndcg", "hit")})
            rows.append({"task_id": t["task_id"], "app": t["app"], "kind": t["kind"],
                         "values": {AGENT: task_values(metrics, ks)}})
    return rows


# ------------------------------------------------------------------------------------------------ statistics
def _groups(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """``all`` and each ``app/kind`` (sorted): the rows of each group."""
    out: dict[str, list[Row]] = {"all": list(rows)}
    for r in sorted(rows, key=lambda r: (r["app"], r["kind"])):
        out.setdefault(f"{r['app']}/{r['kind']}", []).append(r)
    return out


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


def ci_cell(pairs: Sequence[tuple[float, float]], *, n_boot: int, seed: int, alpha: float) -> dict[str, Any]:
    """``a``, ``b``: the means of each side; ``delta = mean(b − a)``, its CI ``[lo, hi]`` (None without pairs or
    with ``n_boot = 0``), ``excludes_zero`` and ``n``, the pairs."""
    if not pairs:
        return {"n": 0, "a": None, "b": None, "delta": None, "lo": None, "hi": None, "excludes_zero": False}
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    s = paired_bootstrap(a, b, n_boot=max(n_boot, 1), seed=seed, alpha=alpha)
    lo, hi = (_r(float(s["lo"])), _r(float(s["hi"]))) if n_boot > 0 else (None, None)
    return {"n": len(pairs), "a": _r(float(s["mean_a"])), "b": _r(float(s["mean_b"])), "delta": _r(float(s["delta"])),
            "lo": lo, "hi": hi, "excludes_zero": excludes_zero(lo, hi)}


def _pairs(rows: Sequence[Row], side_a: str, side_b: str, metric: str) -> list[tuple[float, float]]:
    out = []
    for r in rows:
        a, b = r["values"].get(side_a, {}), r["values"].get(side_b, {})
        if metric in a and metric in b:
            out.append((float(a[metric]), float(b[metric])))
    return out


def _mean(rows: Sequence[Row], system: str, metric: str) -> float | None:
    vals = [float(r["values"][system][metric]) for r in rows if metric in r["values"].get(system, {})]
    return _r(sum(vals) / len(vals)) if vals else None


def paired_summary(rows: Sequence[Row], baselines: Sequence[str], metrics: Sequence[str], *, n_boot: int = 2000,
                   seed: int = 0, alpha: float = 0.05) -> dict[str, Any]:
    """The agent against each baseline, overall (``all``) and per ``app/kind``, metric by metric.

    Per group: ``tasks``; ``means[metric][system]`` (each system's mean over the group's tasks that have it);
    ``vs[baseline][metric]``: ``agent`` and ``baseline`` (means over the tasks both have), ``delta`` = agent −
    baseline, its ``1 − alpha`` paired bootstrap interval ``lo``/``hi``, ``excludes_zero`` and ``n``; and
    ``best[metric]``: the baseline with the highest mean there (the one to beat).
    """
    groups: dict[str, Any] = {}
    for name, rs in _groups(rows).items():
        means = {m: {s: v for s in (AGENT, *baselines) if (v := _mean(rs, s, m)) is not None} for m in metrics}
        vs: dict[str, dict[str, Any]] = {}
        for base in baselines:
            cells = {}
            for m in metrics:
                pairs = _pairs(rs, base, AGENT, m)
                if pairs:
                    c = ci_cell(pairs, n_boot=n_boot, seed=seed, alpha=alpha)
                    cells[m] = {"n": c["n"], AGENT: c["b"], "baseline": c["a"], "delta": c["delta"], "lo": c["lo"],
                                "hi": c["hi"], "excludes_zero": c["excludes_zero"]}
            if cells:
                vs[base] = cells
        best = {m: max((b for b in vs if m in vs[b]), key=lambda b: (means[m].get(b) or 0.0, -baselines.index(b)))
                for m in metrics if any(m in v for v in vs.values())}
        groups[name] = {"tasks": len(rs), "means": {m: v for m, v in means.items() if v}, "vs": vs, "best": best}
    return {"reference": AGENT, "baselines": list(baselines), "metrics": list(metrics), "n_boot": n_boot,
            "alpha": alpha, "seed": seed,
            "method": "delta = agent - baseline over the tasks both have the metric; percentile interval of the "
                      "mean difference over bootstrap resamples of those tasks (paired by task id)",
            "groups": groups}


def paired_compare(rows_a: Sequence[Row], rows_b: Sequence[Row], metrics: Sequence[str], *, n_boot: int = 2000,
                   seed: int = 0, alpha: float = 0.05, system: str = AGENT) -> dict[str, Any]:
    """Run B against run A for ``system``: pairs by task id over the tasks both runs have, per group (``all``
    and each ``app/kind`` of A) and metric: ``a``, ``b``, ``delta`` = B − A, ``lo``/``hi``, ``excludes_zero``,
    ``n``. Also how many tasks were paired and how many only one run has."""
    by_id_b = {r["task_id"]: r for r in rows_b}
    ids_a = {r["task_id"] for r in rows_a}
    merged = [{**ra, "values": {"a": ra["values"].get(system, {}),
                                "b": by_id_b[ra["task_id"]]["values"].get(system, {})}}
              for ra in rows_a if ra["task_id"] in by_id_b]
    groups: dict[str, Any] = {}
    for name, rs in _groups(merged).items():
        cells = {m: ci_cell(p, n_boot=n_boot, seed=seed, alpha=alpha)
                 for m in metrics if (p := _pairs(rs, "a", "b", m))}
        groups[name] = {"tasks": len(rs), **cells}
    return {"system": system, "paired_tasks": len(merged), "only_a": len(ids_a - set(by_id_b)),
            "only_b": len(set(by_id_b) - ids_a), "metrics": list(metrics), "n_boot": n_boot, "alpha": alpha,
            "seed": seed, "method": "delta = B - A per task id both runs have; percentile interval of the mean "
                                    "difference over bootstrap resamples of those tasks", "groups": groups}
