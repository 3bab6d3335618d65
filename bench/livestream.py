"""Livestream answers on wordings the rules were written for and on wordings they never saw.

    python bench/livestream.py                       # a fresh default world in bench/results/livestream-world
    python bench/livestream.py --world runs/demo/livestream --quick     # 300 questions of each set

Three task sets of one world (``sidekick world livestream``): ``train wordings`` (``tasks.jsonl``: the base
templates of apps/livestream/vocab.py and the training phrasing families), ``dev wordings`` (``dev/tasks.jsonl``:
a first outside author's families, which the reader was then improved against), ``dev2 wordings``
(``dev2/tasks.jsonl``: a third author's families, the second development set), ``dev3 wordings``
(``dev3/tasks.jsonl``: a fourth author's, the third) and ``held-out wordings``
(``heldout/tasks.jsonl``: a second outside author's families, which nobody tuned on). Methods,
each answering from the fact sheet without a model, as served under budget:

- ``keyword``: the reader with English keywords only, no relative references, reading the text as typed
  (``Reader(languages=("en",), relative=False, plain=True)``: the scope of the app's keyword fallback before);
- ``reader``: the app's fallback (apps/livestream/reader.py: multilingual cues, relative references, brand
  or noun names, typo-tolerant matching).

Per set and method: success (correctness 1, Wilson 95 % CI), mean correctness, mean words and p95, the
share of answers whose cited facts all exist and are stated in the answer (``grounded``), latency p50 /
p95 per answer (one process, no concurrency), and the paired difference reader - keyword on the same
questions with a bootstrap 95 % CI. Breakdowns by kind, language, family and reference.
JSON: bench/results/livestream.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from apps.livestream.agent import fact_value, livestream_app  # noqa: E402
from apps.livestream.env import fact_mentioned, request_constraints, reward  # noqa: E402
from apps.livestream.phrasings import PACK_SETS  # noqa: E402
from apps.livestream.reader import Reader  # noqa: E402
from apps.livestream.world import LivestreamWorldConfig, generate_livestream_world, set_tasks  # noqa: E402
from bench.common import wilson  # noqa: E402
from harness.agent import AppSpec, TurnContext  # noqa: E402
from harness.budget import Budget  # noqa: E402
from harness.session import SessionState  # noqa: E402
from harness.tasks import Task  # noqa: E402
from infra.layout import TASKS_FILE  # noqa: E402

METHODS = {"keyword": Reader(languages=("en",), relative=False, plain=True), "reader": Reader()}


def paired_ci(a: list[float], b: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of b - a and its bootstrap 95 % CI over the paired items."""
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    if n == 0:
        return 0.0, 0.0, 0.0
    rng = random.Random(seed)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(draws))
    return sum(diffs) / n, means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def grounded(final_data: dict[str, Any], reply: str, spec: AppSpec) -> bool:
    """Every cited fact exists and its value is stated in the answer (no invented or unsupported facts)."""
    for fact in final_data.get("cited_facts") or []:
        value = fact_value(str(fact), spec.catalog)
        if value is None or fact_mentioned(str(fact).rpartition(".")[2], value, reply) == 0.0:
            return False
    return True


def answer_all(spec: AppSpec, tasks: list[Task], reader: Reader) -> list[dict[str, Any]]:
    rows = []
    for task in tasks:
        session = SessionState(app="livestream", constraints=request_constraints(task),
                               messages=[{"role": m.role, "content": m.content} for m in task.messages])
        ctx = TurnContext(app=spec, session=session, constraints=session.constraints, budget=Budget(800.0),
                          model=None)
        t0 = time.perf_counter()
        final = reader.answer(ctx)
        ms = (time.perf_counter() - t0) * 1000
        r = reward(task, final, spec.catalog)
        rows.append({"task_id": task.task_id, "kind": task.kind, "family": task.meta.get("family", "base"),
                     "reference": task.meta.get("reference", "none"), "success": float(r.success),
                     "correctness": r.parts["correctness"], "words": r.parts["words"], "ms": ms,
                     "grounded": float(grounded(final.data, final.reply, spec))})
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    k = int(sum(r["success"] for r in rows))
    lo, hi = wilson(k, n)
    words = sorted(r["words"] for r in rows)
    ms = sorted(r["ms"] for r in rows)
    pick = (lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))]) if rows else (lambda xs, q: 0.0)
    return {"n": n, "success": round(k / n, 4) if n else 0.0, "ci": [round(lo, 4), round(hi, 4)],
            "correctness": round(statistics.fmean(r["correctness"] for r in rows), 4) if n else 0.0,
            "words_mean": round(statistics.fmean(words), 1) if n else 0.0, "words_p95": pick(words, 0.95),
            "grounded": round(statistics.fmean(r["grounded"] for r in rows), 4) if n else 0.0,
            "ms_p50": round(pick(ms, 0.5), 3), "ms_p95": round(pick(ms, 0.95), 3)}


def _shown(which: str) -> str:
    """A question set as the tables and ``--sets`` name it (``heldout2`` -> ``held-out2``)."""
    return which.replace("heldout", "held-out")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=Path, default=None, help="a livestream world (default: generate one)")
    ap.add_argument("--quick", action="store_true", help="the first 300 questions of each set")
    ap.add_argument("--sets", default=None, help=f"comma-separated subset of: {', '.join(map(_shown, PACK_SETS))} "
                    "(default all)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/livestream.json")
    args = ap.parse_args()
    world = args.world
    if world is None:
        world = ROOT / "bench/results/livestream-world"
        print(f"generating the default livestream world in {world}", flush=True)
        generate_livestream_world(LivestreamWorldConfig(), world)
    sets = {f"{_shown(which)} wordings": set_tasks(world, which) for which in PACK_SETS}
    if args.sets:
        wanted = {w.strip() for w in args.sets.split(",")}
        unknown = wanted - {name.removesuffix(" wordings") for name in sets}
        if unknown:
            sys.exit(f"--sets: unknown {', '.join(sorted(unknown))} ({', '.join(map(_shown, PACK_SETS))})")
        sets = {name: path for name, path in sets.items() if name.removesuffix(" wordings") in wanted}
    if not (world / TASKS_FILE).is_file():
        sys.exit(f"{world}: no {TASKS_FILE}; generate it with `sidekick world livestream --out {world}`")
    for name in [name for name, path in sets.items() if not path.is_file()]:
        print(f"{name}: no {sets.pop(name)} (no such packs shipped, or a world generated before them: regenerate it)")
    spec = livestream_app(world)
    names = {_shown(k): ", ".join(p.family for p in packs()) for k, packs in PACK_SETS.items()}
    print("families: " + "; ".join(f"{k} {v}" for k, v in names.items()))
    result: dict[str, Any] = {"world": str(world), "quick": args.quick, "sets": {}}
    for set_name, path in sets.items():
        with open(path, encoding="utf-8") as f:
            tasks = [Task.model_validate_json(line) for line in f if line.strip()][: 300 if args.quick else None]
        lang = {p.family: p.lang for packs in PACK_SETS.values() for p in packs()}
        per_method = {m: answer_all(spec, tasks, reader) for m, reader in METHODS.items()}
        out: dict[str, Any] = {"tasks": len(tasks), "methods": {}, "breakdown": {}}
        print(f"\n{set_name}: {len(tasks)} questions of {path}")
        print(f"{'method':<9}{'success':>9}{'95% CI':>17}{'correct':>9}{'words':>7}{'p95':>5}{'grounded':>10}"
              f"{'ms p50':>8}{'ms p95':>8}")
        for m, rows in per_method.items():
            s = summarise(rows)
            out["methods"][m] = s
            ci = f"[{s['ci'][0]:.3f}, {s['ci'][1]:.3f}]"
            print(f"{m:<9}{s['success']:>9.3f}{ci:>17}{s['correctness']:>9.3f}"
                  f"{s['words_mean']:>7.1f}{s['words_p95']:>5.0f}{s['grounded']:>10.3f}{s['ms_p50']:>8.2f}"
                  f"{s['ms_p95']:>8.2f}")
        d, lo, hi = paired_ci([r["success"] for r in per_method["keyword"]],
                              [r["success"] for r in per_method["reader"]])
        out["reader_minus_keyword"] = {"success": round(d, 4), "ci": [round(lo, 4), round(hi, 4)]}
        print(f"reader - keyword success: {d:+.3f} [{lo:+.3f}, {hi:+.3f}] (paired bootstrap)")
        for by in ("kind", "lang", "family", "reference"):
            groups: dict[str, list[int]] = defaultdict(list)
            for i, r in enumerate(per_method["reader"]):
                groups[lang.get(r["family"], "?") if by == "lang" else r[by]].append(i)
            table = {}
            print(f"  by {by:<10}{'n':>6}" + "".join(f"{m:>10}" for m in per_method))
            for g, idx in sorted(groups.items()):
                table[g] = {"n": len(idx), **{m: round(statistics.fmean(per_method[m][i]["success"] for i in idx), 4)
                                              for m in per_method}}
                print(f"  {g:<13}{len(idx):>6}" + "".join(f"{table[g][m]:>10.3f}" for m in per_method))
            out["breakdown"][by] = table
        result["sets"][set_name] = out
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
