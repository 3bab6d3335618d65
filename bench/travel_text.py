"""The travel fallback on trip requests sent as text only, against the same fallback given the structured constraints.

    python bench/travel_text.py --world runs/demo/travel            # every task of the world
    python bench/travel_text.py --world runs/demo/travel --quick    # the first 100 of each set

A chat frontend sends the request text; a form frontend sends structured constraints. Per task, one process, the
app's no-model answer (`apps/travel/agent.py:fallback`, the greedy planner) three ways: ``structured`` (the task's
own constraints: the reference), ``text`` (the words only, read by `apps/travel/parse.py`), and ``day asked`` (how
many text-only requests get a question instead of a plan). Each plan is checked against the task's true
constraints (`apps/travel/checker.py`): feasible share, mean score, and the text/structured score ratio, per kind.
The sets: ``world templates`` (``tasks.jsonl``: the generator's own wordings, which the reading was written
against), ``dev wordings`` (300 requests worded by ``apps/travel/phrasings/dev/``, a first outside author's packs,
which the reading was then improved against), ``dev2`` ... ``dev5 wordings`` (300 each by
``apps/travel/phrasings/dev2/`` ... ``dev5/``, a third to a sixth outside author's, improved against the same
way) and ``held-out wordings`` (``heldout/tasks.jsonl``: worded by a
second outside author's packs, ``apps/travel/phrasings/heldout/``, that nobody tuned on) and ``held-out2
wordings`` (300 by ``apps/travel/phrasings/heldout2/``, a seventh author's, written after the first held-out set had
been scored nine times; scored once), with a Wilson 95 % CI
on the text-only feasible share and a row per family. JSON: bench/results/travel_text.json.
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
from apps.travel.phrasings import DEV_SETS, dev_packs, heldout2_packs  # noqa: E402
from apps.travel.world import HELDOUT_DIR, TravelWorldConfig, make_pois, make_tasks  # noqa: E402
from bench.common import wilson  # noqa: E402
from harness.agent import TurnContext  # noqa: E402
from harness.budget import Budget  # noqa: E402
from harness.session import SessionState  # noqa: E402
from harness.tasks import Task  # noqa: E402
from infra.layout import TASKS_FILE  # noqa: E402


def dev_tasks(world: Path, n: int, which: str = "dev") -> list[Task]:
    """``n`` requests of the world's city worded by a set of development packs (``which``: a key of ``DEV_SETS``;
    seeded by the world's seed, each set its own stream)."""
    import numpy as np

    config = TravelWorldConfig.model_validate(json.loads((world / "manifest.json").read_text())["config"])
    pois = make_pois(config, np.random.default_rng([config.seed, 1]))
    if which == "held-out2":  # the second held-out set: its own stream, never tuned on
        packs, stream = heldout2_packs(), 31
    else:
        packs, stream = dev_packs(which), 5 + 2 * list(DEV_SETS).index(which)  # dev 5, dev2 7, dev3 9, dev4 11, dev5 13
    if not packs:
        return []
    return list(make_tasks(config, pois, np.random.default_rng([config.seed, stream]), packs, n))


def run_set(app: Any, tasks: list[Task]) -> dict[str, dict[str, list[float]]]:
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for task in tasks:
        for mode in ("structured", "text"):
            session = SessionState(app="travel", messages=[{"role": m.role, "content": m.content}
                                                           for m in task.messages])
            ctx = TurnContext(app=app, session=session, constraints=task.constraints if mode == "structured" else {},
                              budget=Budget(5000), model=None)
            plan = fallback(ctx, "no_model").data.get("itinerary")
            for kind in ("all", task.kind, *([f"family:{task.meta['family']}"] if "family" in task.meta else [])):
                if plan is None:
                    rows[kind][mode + "_asked"].append(1.0)
                    rows[kind][mode + "_feasible"].append(0.0)
                    rows[kind][mode + "_score"].append(0.0)
                    continue
                result = check_itinerary(Itinerary.model_validate(plan), task, app.resources.pois)
                rows[kind][mode + "_asked"].append(0.0)
                rows[kind][mode + "_feasible"].append(float(result.feasible))
                rows[kind][mode + "_score"].append(result.score)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=Path, default=ROOT / "runs/demo/travel")
    ap.add_argument("--quick", action="store_true", help="the first 100 tasks of each set")
    ap.add_argument("--sets", default=None, help=f"comma-separated subset of: templates, {', '.join(DEV_SETS)}, "
                    "held-out, held-out2")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/travel_text.json")
    args = ap.parse_args()
    if not (args.world / TASKS_FILE).is_file():
        sys.exit(f"{args.world}: no {TASKS_FILE} (run `make demo`, or `sidekick world travel --out DIR`)")
    app = travel_app(args.world)
    sets: dict[str, Path | None] = {"world templates": args.world / TASKS_FILE,
                                    **{f"{name} wordings": None for name in DEV_SETS},
                                    "held-out wordings": args.world / HELDOUT_DIR / TASKS_FILE,
                                    "held-out2 wordings": None}
    if args.sets:
        wanted = {w.strip() for w in args.sets.split(",")}
        names = {name: name.split()[0].replace("world", "templates") for name in sets}
        if unknown := wanted - set(names.values()):
            sys.exit(f"--sets: unknown {', '.join(sorted(unknown))} (templates, {', '.join(DEV_SETS)}, held-out, "
                     "held-out2)")
        sets = {name: path for name, path in sets.items() if names[name] in wanted}
    result: dict[str, Any] = {"world": str(args.world), "quick": args.quick, "sets": {}}
    for name, path in sets.items():
        if path is None:  # the development packs' requests, drawn here over the world's city
            tasks = dev_tasks(args.world, 100 if args.quick else 300, which=name.split()[0])
            if not tasks:
                print(f"{name}: no packs in apps/travel/phrasings/{name.split()[0].replace('held-out', 'heldout')}/")
                continue
        elif not path.is_file():
            print(f"{name}: no {path} (a world generated before held-out wordings existed: regenerate it)")
            continue
        else:
            with open(path, encoding="utf-8") as f:
                tasks = [Task.model_validate_json(line) for line in f if line.strip()][: 100 if args.quick else None]
        t0 = time.perf_counter()
        rows = run_set(app, tasks)
        seconds = time.perf_counter() - t0
        table: dict[str, dict[str, Any]] = {}
        print(f"\n{name}: {len(tasks)} tasks of {path}, {seconds:.1f} s")
        print(f"{'kind':<26}{'n':>5}{'text: feasible':>16}{'95% CI':>16}{'score':>8}{'day asked':>11}"
              f"{'structured: feasible':>22}{'score':>8}{'score ratio':>13}")
        for kind, r in rows.items():
            mean = {k: sum(v) / len(v) for k, v in r.items()}
            n = len(r["text_score"])
            lo, hi = wilson(sum(r["text_feasible"]), n)
            ratio = mean["text_score"] / mean["structured_score"] if mean["structured_score"] else None
            table[kind] = {"n": n, **{k: round(v, 4) for k, v in mean.items()}, "text_feasible_ci": [round(lo, 4),
                           round(hi, 4)], "score_ratio": None if ratio is None else round(ratio, 4)}
            print(f"{kind:<26}{n:>5}{mean['text_feasible']:>16.3f}{f'[{lo:.3f}, {hi:.3f}]':>16}"
                  f"{mean['text_score']:>8.3f}{mean['text_asked']:>11.3f}{mean['structured_feasible']:>22.3f}"
                  f"{mean['structured_score']:>8.3f}{'-' if ratio is None else f'{ratio:.2f}x':>13}")
        result["sets"][name] = {"tasks": len(tasks), "seconds": round(seconds, 2), "by_kind": table}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
