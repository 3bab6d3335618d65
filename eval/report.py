"""Evaluation reports: per-task results summed up into ``report.json``, rendered as ``report.html`` with plots,
and the comparison of two reports (before / after training).

``report.json`` keeps what depends only on the agent, the tasks and the seed (metrics, counts, failure
examples) apart from what depends on the machine (everything under ``"timing"``: latencies, budget
adherence, throughput), so two runs with the same seed give the same file outside ``"timing"``.

Group summaries (``overall``, ``by_app[app]``, ``by_kind["app/kind"]``) hold the mean of every per-task
metric over the group's tasks that have it (:func:`eval.replay.task_metrics`: ``success``, ``reward``,
``recall@k``, ``ndcg@k``, ``mrr``, ``bundle_coverage``, reward parts as ``r.<part>``, turns, tool calls,
tokens, ``degraded``…), plus ``tasks``, ``successes``, ``turns_per_success`` and ``tool_calls_per_success``
(means over successful tasks), totals of grounding rejections (caught by the harness) and of
``ungrounded_served`` (items that reached the answer without passing grounding: must be 0), how episodes
ended and why turns degraded. Plots are PNG files next to the HTML.

    .venv/bin/python -m pytest tests/eval/test_report.py -q
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.metrics import mean_metrics, percentile
from eval.paired import Row, paired_compare, paired_metrics
from eval.replay import TaskResult

SCHEMA = "sidekick.eval/1"
REPORT_JSON, REPORT_HTML, TRACES_FILE = "report.json", "report.html", "traces.jsonl"
COMPARE_JSON, COMPARE_HTML = "compare.json", "compare.html"
PLOTS = ("latency.png", "success.png", "baselines.png")
HEADLINE = ("success", "reward", "recall@10", "ndcg@10", "mrr", "bundle_coverage", "turns", "tool_calls",
            "output_tokens", "degraded", "grounding_rejections_total", "ungrounded_served_total")
APP_EXTRAS = ("bundle_coverage", "hit@1", "recall@5", "ndcg@5", "answer_words")
"""Per-app columns besides the reward's parts (``r.*``), where an app's tasks have them."""


def app_parts(summary: dict[str, Any]) -> tuple[str, ...]:
    """The columns of one app's table: its reward parts, then the extras its tasks have."""
    return (*sorted(k for k in summary if k.startswith("r.")), *(k for k in APP_EXTRAS if k in summary))
RANKING = ("recall@1", "recall@5", "recall@10", "ndcg@10", "mrr")
_MSG_CHARS, _MSGS = 700, 40


# ------------------------------------------------------------------------------------------------ summaries
def _r(v: float | None) -> float | None:
    return None if v is None else round(float(v), 6)


def _mean(values: Sequence[float]) -> float | None:
    return _r(sum(values) / len(values)) if values else None


def group_summary(results: Sequence[TaskResult]) -> dict[str, Any]:
    """Means of every per-task metric over ``results`` plus per-success means, totals and endings."""
    out: dict[str, Any] = {"tasks": len(results)}
    out.update({k: _r(v) for k, v in sorted(mean_metrics(r.metrics for r in results).items())})
    wins = [r for r in results if r.success]
    out["successes"] = len(wins)
    for key in ("turns", "tool_calls", "output_tokens"):
        out[f"{key}_per_success"] = _mean([r.metrics[key] for r in wins])
    out["grounding_rejections_total"] = int(sum(r.metrics.get("grounding_rejections", 0) for r in results))
    out["ungrounded_served_total"] = int(sum(r.metrics.get("ungrounded_served", 0) for r in results))
    out["ends"] = dict(sorted(Counter(r.end for r in results).items()))
    out["degraded_reasons"] = dict(sorted(Counter(t.reason or "?" for r in results for t in r.turns
                                                  if t.degraded).items()))
    return out


def _latency(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": _r(percentile(values, 50)), "p95": _r(percentile(values, 95)),
            "mean": _mean(values), "max": _r(max(values)) if values else None}


def timing_summary(results: Sequence[TaskResult], wall_s: float, workers: int, enforce_budget: bool
                   ) -> dict[str, Any]:
    """Latency p50/p95 per turn and per task, budget adherence (share of turns within the app's budget),
    throughput; overall and per app. Machine-dependent: kept apart from the metrics."""
    def block(rs: Sequence[TaskResult]) -> dict[str, Any]:
        turns = [(t.latency_ms, r.budget_ms) for r in rs for t in r.turns]
        return {"turn_latency_ms": _latency([t for t, _ in turns]),
                "task_latency_ms": _latency([r.latency_ms for r in rs]),
                "budget_adherence": _mean([float(t <= b) for t, b in turns]),
                "budget_ms": sorted({r.budget_ms for r in rs})}

    apps = sorted({r.app for r in results})
    return {"wall_s": round(wall_s, 3), "tasks_per_s": round(len(results) / wall_s, 3) if wall_s > 0 else None,
            "workers": workers, "enforce_budget": enforce_budget, **block(results),
            "by_app": {a: block([r for r in results if r.app == a]) for a in apps}}


def _trace_excerpt(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages[:_MSGS]:
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        row: dict[str, Any] = {"role": m.get("role"), "content": text[:_MSG_CHARS] + ("…" if len(text) > _MSG_CHARS
                                                                                      else "")}
        if m.get("tool_calls"):
            row["tool_calls"] = json.dumps(m["tool_calls"], ensure_ascii=False)[:_MSG_CHARS]
        out.append(row)
    return out


def failure_examples(results: Sequence[TaskResult], n: int) -> list[dict[str, Any]]:
    """Up to ``n`` unsuccessful tasks with their traces, taken round-robin over app/kind in task order."""
    by_kind: dict[str, list[TaskResult]] = {}
    for r in results:
        if not r.success:
            by_kind.setdefault(f"{r.app}/{r.kind}", []).append(r)
    picked: list[TaskResult] = []
    queues = [list(v) for _, v in sorted(by_kind.items())]
    while len(picked) < n and any(queues):
        for q in queues:
            if q and len(picked) < n:
                picked.append(q.pop(0))
    return [{"task_id": r.task_id, "app": r.app, "kind": r.kind, "end": r.end, "error": r.error,
             "turns": [{"degraded": t.degraded, "reason": t.reason, "steps": t.steps,
                        "model_outputs": [o[:_MSG_CHARS] for o in t.outputs]} for t in r.turns],
             "reward": r.reward, "reply": r.final.get("reply", ""), "item_ids": r.final.get("item_ids", [])[:10],
             "bundles": r.final.get("bundles", [])[:2], "user_replies": r.user_replies,
             "trace": _trace_excerpt(r.messages)} for r in picked]


def build_report(results: Sequence[TaskResult], *, meta: Mapping[str, Any], timing: Mapping[str, Any],
                 baselines: Mapping[str, Any] | None = None, baselines_note: str | None = None,
                 paired: Mapping[str, Any] | None = None, failures: int = 10) -> dict[str, Any]:
    """The ``report.json`` object of one evaluation run (``paired``: :func:`eval.paired.paired_summary`)."""
    apps = sorted({r.app for r in results})
    kinds = sorted({f"{r.app}/{r.kind}" for r in results})
    overall = group_summary(results)
    return {
        "schema": SCHEMA, "meta": dict(meta),
        "counts": {"tasks": len(results), "errors": sum(r.end == "error" for r in results),
                   "by_app": {a: sum(r.app == a for r in results) for a in apps},
                   "by_kind": {k: sum(f"{r.app}/{r.kind}" == k for r in results) for k in kinds}},
        "checks": {"ungrounded_served": overall["ungrounded_served_total"],
                   "served_output_grounded": overall["ungrounded_served_total"] == 0},
        "overall": overall,
        "by_app": {a: group_summary([r for r in results if r.app == a]) for a in apps},
        "by_kind": {k: group_summary([r for r in results if f"{r.app}/{r.kind}" == k]) for k in kinds},
        "baselines": dict(baselines or {}), "baselines_note": baselines_note,
        "paired": dict(paired) if paired else None,
        "failures": failure_examples(results, failures),
        "timing": dict(timing),
    }


def deterministic_part(report: Mapping[str, Any]) -> dict[str, Any]:
    """``report`` without its machine-dependent ``timing`` (what must match between runs with one seed)."""
    return {k: v for k, v in report.items() if k != "timing"}


# ------------------------------------------------------------------------------------------------ plots
def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> str:
    plt = _plt()
    try:
        fig.savefig(path, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    finally:
        plt.close(fig)
    return path.name


def latency_plot(results: Sequence[TaskResult], path: Path) -> str:
    """Histogram of turn latency per app (log-spaced bins) with each app's budget as a dashed line."""
    import numpy as np

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    apps = sorted({r.app for r in results})
    lat = {a: [max(t.latency_ms, 1e-3) for r in results if r.app == a for t in r.turns] for a in apps}
    every = [v for vs in lat.values() for v in vs] or [1.0]
    bins = np.geomspace(min(every), max(max(every), min(every) * 1.01), 40)
    for k, a in enumerate(apps):
        color = f"C{k}"
        ax.hist(lat[a], bins=bins, alpha=0.6, label=a, color=color)
        for b in sorted({r.budget_ms for r in results if r.app == a}):
            ax.axvline(b, color=color, linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("turn latency (ms, log scale); dashed: budget")
    ax.set_ylabel("turns")
    ax.legend()
    return _save(fig, path)


def success_plot(report: Mapping[str, Any], path: Path) -> str:
    """Bars: success rate and mean reward per app/kind."""
    plt = _plt()
    kinds = list(report["by_kind"])
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(kinds) + 2), 3.5))
    x = range(len(kinds))
    ax.bar([i - 0.2 for i in x], [report["by_kind"][k]["success"] or 0 for k in kinds], 0.4, label="success")
    ax.bar([i + 0.2 for i in x], [report["by_kind"][k]["reward"] or 0 for k in kinds], 0.4, label="reward")
    ax.set_xticks(list(x), kinds, rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.legend()
    return _save(fig, path)


def baselines_plot(report: Mapping[str, Any], path: Path, metric: str = "recall@10") -> str | None:
    """Grouped bars of ``metric`` per kind: the agent and each baseline (None without baselines)."""
    base = report["baselines"]
    if not base:
        return None
    plt = _plt()
    kinds = sorted({k for b in base.values() for k in b["by_kind"]})
    names = ["agent", *base]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(kinds) + 2), 3.5))
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        vals = [(report["by_kind"].get(k, {}) if name == "agent" else base[name]["by_kind"].get(k, {})).get(metric)
                or 0.0 for k in kinds]
        ax.bar([i + (j - (len(names) - 1) / 2) * width for i in range(len(kinds))], vals, width, label=name)
    ax.set_xticks(list(range(len(kinds))), kinds, rotation=30, ha="right")
    ax.set_ylabel(metric)
    ax.set_ylim(0, 1)
    ax.legend()
    return _save(fig, path)


# ------------------------------------------------------------------------------------------------ HTML
_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f3f3f3}td{text-align:right}td:first-child{text-align:left}pre{background:#f7f7f7;padding:8px;
overflow-x:auto;font-size:12px;white-space:pre-wrap}.ok{color:#187a18;font-weight:bold}.bad{color:#b00;font-weight:bold}
details{margin:.4em 0 1em}summary{cursor:pointer}.pos{color:#187a18}.neg{color:#b00}"""


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items()) or "—"
    return "—" if v is None else str(v)


def _table(rows: Sequence[Sequence[Any]], head: Sequence[str]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _metric_table(groups: Mapping[str, Mapping[str, Any]], metrics: Sequence[str], first: str) -> str:
    cols = [m for m in metrics if any(m in g for g in groups.values())]
    rows = [[name, g["tasks"], *[g.get(m) for m in cols]] for name, g in groups.items()]
    return _table(rows, [first, "tasks", *cols])


def _baseline_section(report: Mapping[str, Any], plot: str | None) -> str:
    base = report["baselines"]
    note = report.get("baselines_note")
    if not base:
        return f"<p>No baselines in this run{': ' + html.escape(note) if note else ''}.</p>"
    rows = []
    for k in sorted({k for b in base.values() for k in b["by_kind"]}):
        agent = report["by_kind"].get(k, {})
        rows.append([k, "agent", *[agent.get(m) for m in RANKING]])
        rows += [[k, name, *[b["by_kind"][k].get(m) for m in RANKING]] for name, b in base.items() if k in b["by_kind"]]
    rows += [["all", name, *[b["all"].get(m) for m in RANKING]] for name, b in base.items()]
    img = f"<img alt='baselines' src='{html.escape(plot)}'>" if plot else ""
    extra = f"<p>{html.escape(note)}</p>" if note else ""
    return (f"<p>Ranking metrics of the items each system names, over the same tasks (tasks with ground-truth "
            f"items only).</p>{extra}{_table(rows, ['app/kind', 'system', *RANKING])}{img}")


def ci_text(delta: float | None, lo: float | None, hi: float | None, digits: int = 3) -> str:
    """``+0.120 [+0.050, +0.190]`` (the difference and its interval), ``+0.120`` without one, ``—`` without both."""
    if delta is None:
        return "—"
    if lo is None or hi is None:
        return f"{delta:+.{digits}f}"
    return f"{delta:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _ci_td(cell: Mapping[str, Any] | None) -> str:
    if not cell:
        return "<td>—</td>"
    sig = cell["excludes_zero"]
    cls = "" if not sig else (" class='pos'" if cell["delta"] > 0 else " class='neg'")
    return f"<td{cls}>{html.escape(ci_text(cell['delta'], cell['lo'], cell['hi']))}{' *' if sig else ''}</td>"


def paired_table(paired: Mapping[str, Any], metric: str, digits: int = 3, ci_digits: int = 2
                 ) -> tuple[list[str], list[list[str]]]:
    """A compact text table of one metric from ``report["paired"]``: per group the agent's mean, each baseline's,
    the best baseline and the agent's difference from it with its interval (``*``: excludes 0). The app prefix
    of the kinds is dropped when the run holds one app. Header and rows; no rows when no baseline has ``metric``."""
    groups = paired["groups"]
    bases = [b for b in paired["baselines"] if any(b in g["means"].get(metric, {}) for g in groups.values())]
    if not bases:
        return [], []
    apps = {k.split("/")[0] for k in groups if k != "all"}
    level = round(100 * (1 - paired["alpha"]))

    def num(v: float | None) -> str:
        return "—" if v is None else f"{v:.{digits}f}"

    rows = []
    for name, g in groups.items():
        means, best = g["means"].get(metric, {}), g["best"].get(metric)
        cell = g["vs"].get(best, {}).get(metric) if best else None
        ci = "—" if cell is None else ci_text(cell["delta"], cell["lo"], cell["hi"], ci_digits) + \
            (" *" if cell["excludes_zero"] else "")
        label = name.split("/", 1)[1] if len(apps) == 1 and "/" in name else name
        rows.append([label, f"{cell['n'] if cell else g['tasks']:,}", num(means.get("agent")),
                     *[num(means.get(b)) for b in bases], best or "—", ci])
    return ["kind", "n", "agent", *bases, "best", f"Δ vs best [{level}% CI]"], rows


def _paired_section(paired: Mapping[str, Any] | None) -> str:
    """One table per metric: per group the agent's mean, each baseline's and the paired difference with its CI."""
    if not paired:
        return "<p>No baselines in this run: no paired comparisons.</p>"
    level = round(100 * (1 - paired["alpha"]))
    parts = [f"<p>delta = agent − baseline over the tasks both have the metric; {level} % paired bootstrap interval "
             f"({paired['n_boot']:,} resamples of the tasks, seed {paired['seed']}); * the interval excludes 0. "
             f"n: tasks paired.</p>"]
    groups = paired["groups"]
    for m in paired["metrics"]:
        bases = [b for b in paired["baselines"] if any(m in g["vs"].get(b, {}) for g in groups.values())]
        if not bases:
            continue
        head = "".join(f"<th>{html.escape(b)}</th><th>Δ vs {html.escape(b)}</th>" for b in bases)
        rows = []
        for name, g in groups.items():
            cells = "".join(f"<td>{html.escape(_fmt(g['means'].get(m, {}).get(b)))}</td>"
                            f"{_ci_td(g['vs'].get(b, {}).get(m))}" for b in bases)
            n = max((g["vs"][b][m]["n"] for b in bases if m in g["vs"].get(b, {})), default=0)
            rows.append(f"<tr><td>{html.escape(name)}</td><td>{n:,}</td>"
                        f"<td>{html.escape(_fmt(g['means'].get(m, {}).get('agent')))}</td>{cells}"
                        f"<td>{html.escape(g['best'].get(m, '—'))}</td></tr>")
        parts.append(f"<h3>{html.escape(m)}</h3><table><tr><th>app/kind</th><th>n</th><th>agent</th>{head}"
                     f"<th>best baseline</th></tr>{''.join(rows)}</table>")
    return "".join(parts)


def _failure_html(f: Mapping[str, Any]) -> str:
    trace = "\n".join(f"[{m['role']}] {m['content']}" + (f"\n  tool_calls: {m['tool_calls']}" if m.get("tool_calls")
                                                         else "") for m in f["trace"])
    head = (f"{f['task_id']} — {f['app']}/{f['kind']} — ended {f['end']}, reward "
            f"{_fmt(float(f['reward'].get('value', 0.0)))}")
    parts = json.dumps(f["reward"].get("parts", {}))
    err = f"<p class='bad'>{html.escape(f['error'])}</p>" if f.get("error") else ""
    turns = "\n".join(
        f"turn {k + 1}: {t['steps']} model step(s)" + (f", degraded ({t['reason']})" if t["degraded"] else "")
        + "".join(f"\n  model wrote: {o!r}" for o in t["model_outputs"]) for k, t in enumerate(f.get("turns", [])))
    return (f"<details><summary>{html.escape(head)}</summary>{err}<p>reply: {html.escape(f['reply'])}<br>items: "
            f"{html.escape(', '.join(f['item_ids']) or '—')}<br>reward parts: {html.escape(parts)}</p>"
            f"<pre>{html.escape(turns)}</pre><pre>{html.escape(trace)}</pre></details>")


def _timing_section(t: Mapping[str, Any], plot: str) -> str:
    rows = [["all", t["turn_latency_ms"]["p50"], t["turn_latency_ms"]["p95"], t["task_latency_ms"]["p50"],
             t["task_latency_ms"]["p95"], t["budget_adherence"], _fmt(t["budget_ms"])]]
    rows += [[a, b["turn_latency_ms"]["p50"], b["turn_latency_ms"]["p95"], b["task_latency_ms"]["p50"],
              b["task_latency_ms"]["p95"], b["budget_adherence"], _fmt(b["budget_ms"])] for a, b in t["by_app"].items()]
    mode = "enforced (served behaviour)" if t["enforce_budget"] else "measured, not enforced"
    return (f"<p>{_fmt(t['wall_s'])} s wall, {_fmt(t['tasks_per_s'])} tasks/s with {t['workers']} workers; "
            f"budgets {mode}.</p>"
            + _table(rows, ["app", "turn p50 ms", "turn p95 ms", "task p50 ms", "task p95 ms", "within budget",
                            "budget ms"]) + f"<img alt='latency histogram' src='{html.escape(plot)}'>")


def render_html(report: Mapping[str, Any], plots: Mapping[str, str | None]) -> str:
    """The report page (``plots``: file names of the PNGs next to it)."""
    meta, counts, checks = report["meta"], report["counts"], report["checks"]
    ok = checks["served_output_grounded"]
    badge = ("<span class='ok'>served output grounded: 0 ungrounded items</span>" if ok else
             f"<span class='bad'>{checks['ungrounded_served']} ungrounded items reached answers</span>")
    app_sections = "".join(
        f"<h3>{html.escape(a)}</h3>" + _metric_table(
            {k: g for k, g in report["by_kind"].items() if k.startswith(a + "/")}, app_parts(s), "app/kind")
        for a, s in report["by_app"].items())
    mode = (" <b>Model only</b>: no app's first answer (e.g. the livestream reader) answered before the model."
            if meta.get("model_only") else "")
    body = f"""<h1>Evaluation: {html.escape(str(meta.get('agent') or 'fallback only (no model)'))}</h1>
<p>{counts['tasks']:,} tasks from {html.escape(str(meta.get('logs')))} ({html.escape(_fmt(counts['by_app']))});
{counts['errors']:,} failed to run. {badge}{mode}</p>
<h2>Per app</h2>{_metric_table({'all': report['overall'], **report['by_app']}, HEADLINE, 'app')}
<h2>Per task kind</h2>{_metric_table(report['by_kind'], HEADLINE, 'app/kind')}
<img alt='success per kind' src='{html.escape(plots['success.png'] or '')}'>
<h3>Efficiency</h3>{_metric_table(report['by_kind'], ('turns_per_success', 'tool_calls_per_success',
                                                      'output_tokens_per_success', 'thinking_tokens', 'parse_errors',
                                                      'asked_user', 'ends', 'degraded_reasons'), 'app/kind')}
<h2>App metrics</h2>{app_sections}
<h2>Baselines</h2>{_baseline_section(report, plots.get('baselines.png'))}
<h2>Agent vs baselines, paired</h2>{_paired_section(report.get('paired'))}
<h2>Latency and budgets</h2>{_timing_section(report['timing'], plots['latency.png'] or '')}
<h2>Failure examples</h2>{''.join(_failure_html(f) for f in report['failures']) or '<p>None.</p>'}
<h2>Run</h2><pre>{html.escape(json.dumps(meta, indent=1, default=str))}</pre>"""
    return _page("Evaluation report", body)


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>{body}</body></html>\n")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_report(report: Mapping[str, Any], results: Sequence[TaskResult], out: Path) -> dict[str, Path]:
    """``report.json``, ``report.html`` and its PNGs in ``out``; returns the paths written by name."""
    out.mkdir(parents=True, exist_ok=True)
    for name in PLOTS:  # a plot of an earlier run (e.g. baselines) must not linger next to this report
        (out / name).unlink(missing_ok=True)
    plots: dict[str, str | None] = {
        "latency.png": latency_plot(results, out / "latency.png"),
        "success.png": success_plot(report, out / "success.png"),
        "baselines.png": baselines_plot(report, out / "baselines.png"),
    }
    _write(out / REPORT_JSON, json.dumps(report, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    _write(out / REPORT_HTML, render_html(report, plots))
    paths = {name: out / name for name in (REPORT_JSON, REPORT_HTML)}
    paths.update({name: out / name for name, made in plots.items() if made})
    return paths


# ------------------------------------------------------------------------------------------------ compare
COMPARE_METRICS = ("success", "reward", "recall@10", "ndcg@10", "mrr", "bundle_coverage", "turns", "tool_calls",
                   "output_tokens", "degraded", "turns_per_success", "r.correctness", "r.feasible", "r.score",
                   "ungrounded_served_total")
COMPARE_TIMING = (("turn_latency_ms", "p50"), ("turn_latency_ms", "p95"), ("task_latency_ms", "p95"))


def _delta(a: Any, b: Any) -> dict[str, Any]:
    num = isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool)
    return {"a": a, "b": b, "delta": _r(float(b) - float(a)) if num else None}


def compare_reports(a: Mapping[str, Any], b: Mapping[str, Any], *, labels: tuple[str, str] = ("A", "B"),
                    successes: tuple[Mapping[str, bool], Mapping[str, bool]] | None = None,
                    per_task: tuple[Sequence[Row], Sequence[Row]] | None = None, n_boot: int = 2000, seed: int = 0,
                    alpha: float = 0.05) -> dict[str, Any]:
    """Metric by metric, group by group: A's value, B's and ``delta = B - A``; timing likewise; given each
    run's per-task success (from its traces), the tasks B newly solves (``gained``) and newly fails (``lost``);
    and given each run's per-task values (:func:`eval.paired.read_per_task`), ``paired``: B − A over the tasks
    both runs have, with paired bootstrap intervals, per metric and per kind (:func:`eval.paired.paired_compare`).
    """
    for r in (a, b):
        if r.get("schema") != SCHEMA:
            raise ValueError(f"not an evaluation report (schema {r.get('schema')!r}, expected {SCHEMA!r})")
    groups: dict[str, dict[str, Any]] = {}
    pairs = [("all", a["overall"], b["overall"])]
    pairs += [(k, a["by_app"][k], b["by_app"][k]) for k in a["by_app"] if k in b["by_app"]]
    pairs += [(k, a["by_kind"][k], b["by_kind"][k]) for k in a["by_kind"] if k in b["by_kind"]]
    for name, ga, gb in pairs:
        groups[name] = {"tasks": _delta(ga["tasks"], gb["tasks"])}
        groups[name].update({m: _delta(ga.get(m), gb.get(m)) for m in COMPARE_METRICS if m in ga or m in gb})
    timing = {f"{blk}.{q}": _delta(a["timing"][blk][q], b["timing"][blk][q]) for blk, q in COMPARE_TIMING}
    timing["budget_adherence"] = _delta(a["timing"]["budget_adherence"], b["timing"]["budget_adherence"])
    timing["tasks_per_s"] = _delta(a["timing"]["tasks_per_s"], b["timing"]["tasks_per_s"])
    out: dict[str, Any] = {"schema": SCHEMA + "/compare", "labels": list(labels),
                           "runs": [a["meta"], b["meta"]], "groups": groups, "timing": timing, "warnings": []}
    if a["counts"]["by_kind"] != b["counts"]["by_kind"]:
        out["warnings"].append("the two runs evaluated different task sets: compare the per-kind rows with care")
    if successes is not None:
        sa, sb = successes
        common = sorted(set(sa) & set(sb))
        out["flips"] = {"common_tasks": len(common), "gained": [t for t in common if sb[t] and not sa[t]],
                        "lost": [t for t in common if sa[t] and not sb[t]]}
    out["paired"] = None
    if per_task is not None:
        ks = a["meta"].get("config", {}).get("ks") or (1, 5, 10)
        out["paired"] = paired_compare(per_task[0], per_task[1], paired_metrics(ks), n_boot=n_boot, seed=seed,
                                       alpha=alpha)
        if out["paired"]["only_a"] or out["paired"]["only_b"]:
            out["warnings"].append(f"paired over the {out['paired']['paired_tasks']:,} tasks both runs have; "
                                   f"{out['paired']['only_a']:,} only in {labels[0]}, {out['paired']['only_b']:,} "
                                   f"only in {labels[1]} left out")
    return out


def compare_plot(cmp: Mapping[str, Any], path: Path, metric: str = "success") -> str:
    """Bars of ``metric`` for A and B per group."""
    plt = _plt()
    names = [g for g, v in cmp["groups"].items() if metric in v]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(names) + 2), 3.5))
    for j, side in enumerate(("a", "b")):
        ax.bar([i + (j - 0.5) * 0.4 for i in range(len(names))],
               [cmp["groups"][g][metric][side] or 0.0 for g in names], 0.4, label=cmp["labels"][j])
    ax.set_xticks(list(range(len(names))), names, rotation=30, ha="right")
    ax.set_ylabel(metric)
    ax.set_ylim(0, 1)
    ax.legend()
    return _save(fig, path)


def render_compare_html(cmp: Mapping[str, Any], plot: str) -> str:
    la, lb = cmp["labels"]

    def cell(d: Mapping[str, Any]) -> str:
        delta = d.get("delta")
        cls = "" if not delta else (" class='pos'" if delta > 0 else " class='neg'")
        sign = f"{delta:+.4f}" if isinstance(delta, float) else "—"
        return f"<td>{html.escape(_fmt(d['a']))}</td><td>{html.escape(_fmt(d['b']))}</td><td{cls}>{sign}</td>"

    metrics = [m for m in ("tasks", *COMPARE_METRICS) if any(m in g for g in cmp["groups"].values())]
    parts = []
    for m in metrics:
        head = f"<tr><th>group</th><th>{html.escape(la)}</th><th>{html.escape(lb)}</th><th>delta</th></tr>"
        rows = "".join(f"<tr><td>{html.escape(g)}</td>{cell(v[m])}</tr>" for g, v in cmp["groups"].items() if m in v)
        parts.append(f"<h3>{html.escape(m)}</h3><table>{head}{rows}</table>")
    trow = "".join(f"<tr><td>{html.escape(k)}</td>{cell(v)}</tr>" for k, v in cmp["timing"].items())
    flips = cmp.get("flips")
    flip_html = (f"<p>Of {flips['common_tasks']:,} common tasks, {html.escape(lb)} newly solves "
                 f"{len(flips['gained']):,} and newly fails {len(flips['lost']):,}.</p>"
                 f"<p>gained: {html.escape(', '.join(flips['gained'][:50]) or '—')}</p>"
                 f"<p>lost: {html.escape(', '.join(flips['lost'][:50]) or '—')}</p>") if flips else \
        "<p>No traces beside the reports: per-task flips not computed.</p>"
    warn = "".join(f"<p class='bad'>{html.escape(w)}</p>" for w in cmp["warnings"])
    body = (f"<h1>Compare: {html.escape(la)} → {html.escape(lb)}</h1>{warn}<img alt='success' src='{plot}'>"
            f"<h2>Tasks that changed</h2>{flip_html}"
            f"<h2>Paired by task (delta = {html.escape(lb)} − {html.escape(la)})</h2>"
            f"{_paired_compare_html(cmp.get('paired'), la, lb)}"
            f"<h2>Metrics (delta = {html.escape(lb)} − {html.escape(la)})</h2>"
            f"{''.join(parts)}<h2>Timing</h2><table><tr><th>what</th><th>{html.escape(la)}</th>"
            f"<th>{html.escape(lb)}</th><th>delta</th></tr>{trow}</table>")
    return _page("Evaluation comparison", body)


def _paired_compare_html(p: Mapping[str, Any] | None, la: str, lb: str) -> str:
    if not p:
        return "<p>No per-task values beside the reports (per_task.jsonl or traces.jsonl): no paired intervals.</p>"
    level = round(100 * (1 - p["alpha"]))
    rows = "".join(
        f"<tr><td>{html.escape(g)}</td><td>{html.escape(m)}</td><td>{c['n']:,}</td><td>{html.escape(_fmt(c['a']))}</td>"
        f"<td>{html.escape(_fmt(c['b']))}</td>{_ci_td(c)}</tr>"
        for g, cells in p["groups"].items() for m in p["metrics"] if (c := cells.get(m)))
    return (f"<p>{p['paired_tasks']:,} tasks paired by task id; {p['only_a']:,} only in {html.escape(la)} and "
            f"{p['only_b']:,} only in {html.escape(lb)} (left out). {level} % percentile bootstrap interval of the "
            f"mean difference ({p['n_boot']:,} resamples of the paired tasks, seed {p['seed']}); * the interval "
            f"excludes 0.</p><table><tr><th>app/kind</th><th>metric</th><th>n</th><th>{html.escape(la)}</th>"
            f"<th>{html.escape(lb)}</th><th>delta [{level} % CI]</th></tr>{rows}</table>")


def write_compare(cmp: Mapping[str, Any], out: Path) -> dict[str, Path]:
    """``compare.json``, ``compare.html`` and ``compare.png`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    plot = compare_plot(cmp, out / "compare.png")
    _write(out / COMPARE_JSON, json.dumps(cmp, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    _write(out / COMPARE_HTML, render_compare_html(cmp, plot))
    return {COMPARE_JSON: out / COMPARE_JSON, COMPARE_HTML: out / COMPARE_HTML, "compare.png": out / plot}


def load_run(path: Path) -> tuple[dict[str, Any], dict[str, bool] | None]:
    """A run's report (``path`` = its directory or its ``report.json``) and per-task success from its traces."""
    path = Path(path)
    report_path = path / REPORT_JSON if path.is_dir() else path
    if not report_path.is_file():
        raise FileNotFoundError(f"{path}: no {REPORT_JSON} (is this an evaluation output directory?)")
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{report_path}: not JSON ({e})") from e
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        raise ValueError(f"{report_path}: not an evaluation report (no schema {SCHEMA!r})")
    traces = report_path.parent / TRACES_FILE
    if not traces.is_file():
        return report, None
    success: dict[str, bool] = {}
    with traces.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            success[row["task_id"]] = bool(row["reward"].get("success"))
    return report, success
