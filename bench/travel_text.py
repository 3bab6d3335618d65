"""The travel fallback on trip requests sent as text only, against the same fallback given the structured constraints.

    python bench/travel_text.py --world runs/demo/travel            # every task of the world
    python bench/travel_text.py --world runs/demo/travel --quick    # the first 100

A chat frontend sends the request text; a form frontend sends structured constraints. Per task, one process, the
app's no-model answer (`apps/travel/agent.py:fallback`, the greedy planner) three ways: ``structured`` (the task's
own constraints: the reference), ``text`` (the words only, read by `apps/travel/parse.py`), and ``day asked`` (how
many text-only requests get a question instead of a plan). Each plan is checked against the task's true
constraints (`apps/travel/checker.py`): feasible share, mean score, and the text/structured score ratio, per kind.
The world's request texts come from its generator's templates: this measures the reading on those wordings, not
on wordings it was never written for. JSON: bench/results/travel_text.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from apps.travel.agent import fallback, travel_app  # noqa: E402
from apps.travel.checker import Itinerary, check_itinerary  # noqa: E402
from harness.agent import TurnContext  # noqa: E402
from harness.budget import Budget  # noqa: E402
from harness.session import SessionState  # noqa: E402
from harness.tasks import Task  # noqa: E402
from infra.layout import TASKS_FILE  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=Path, default=ROOT / "runs/demo/travel")
    ap.add_argument("--quick", action="store_true", help="the first 100 tasks")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/travel_text.json")
    args = ap.parse_args()
    if not (args.world / TASKS_FILE).is_file():
        sys.exit(f"{args.world}: no {TASKS_FILE} (run `make demo`, or `sidekick world travel --out DIR`)")
    app = travel_app(args.world)
    with open(args.world / TASKS_FILE, encoding="utf-8") as f:
        tasks = [Task.model_validate_json(line) for line in f if line.strip()][: 100 if args.quick else None]
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    t0 = time.perf_counter()
    for task in tasks:
        for mode in ("structured", "text"):
            session = SessionState(app="travel", messages=[{"role": m.role, "content": m.content}
                                                           for m in task.messages])
            ctx = TurnContext(app=app, session=session, constraints=task.constraints if mode == "structured" else {},
                              budget=Budget(5000), model=None)
            plan = fallback(ctx, "no_model").data.get("itinerary")
            for kind in ("all", task.kind):
                if plan is None:
                    rows[kind][mode + "_asked"].append(1.0)
                    rows[kind][mode + "_feasible"].append(0.0)
                    rows[kind][mode + "_score"].append(0.0)
                    continue
                result = check_itinerary(Itinerary.model_validate(plan), task, app.resources.pois)
                rows[kind][mode + "_asked"].append(0.0)
                rows[kind][mode + "_feasible"].append(float(result.feasible))
                rows[kind][mode + "_score"].append(result.score)
    seconds = time.perf_counter() - t0
    table: dict[str, dict[str, Any]] = {}
    print(f"{len(tasks)} tasks of {args.world}, {seconds:.1f} s")
    print(f"{'kind':<10}{'n':>5}{'text: feasible':>16}{'score':>8}{'day asked':>11}{'structured: feasible':>22}"
          f"{'score':>8}{'score ratio':>13}")
    for kind, r in rows.items():
        mean = {k: sum(v) / len(v) for k, v in r.items()}
        n = len(r["text_score"])
        ratio = mean["text_score"] / mean["structured_score"] if mean["structured_score"] else None
        table[kind] = {"n": n, **{k: round(v, 4) for k, v in mean.items()},
                       "score_ratio": None if ratio is None else round(ratio, 4)}
        print(f"{kind:<10}{n:>5}{mean['text_feasible']:>16.3f}{mean['text_score']:>8.3f}{mean['text_asked']:>11.3f}"
              f"{mean['structured_feasible']:>22.3f}{mean['structured_score']:>8.3f}"
              f"{'-' if ratio is None else f'{ratio:.2f}x':>13}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"world": str(args.world), "quick": args.quick, "tasks": len(tasks),
                                    "seconds": round(seconds, 2), "by_kind": table}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
