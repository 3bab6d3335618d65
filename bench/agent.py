"""The shopping agent on held-out tasks against what a user would otherwise use, and what each part adds.

    python bench/agent.py --agent runs/demo/cascade-quick/final --logs runs/demo/curated/test
    python bench/agent.py --agent runs/demo/cascade-quick/final --logs runs/demo/curated/test --quick  # 120 tasks

One process, the same tasks for every row (``sidekick eval``'s replay in the harness, greedy):

* ``fallback`` (the app's no-model answer: BM25 under the request), ``bm25`` and ``dense`` (MiniLM) rankers;
* the agent four ways, one change at a time (``apps.shopping.agent`` and ``apps.shopping.kit`` switches):
  ``model only`` (its ``find`` / ``find_bundle`` arguments applied as written), ``+ words`` (arguments
  grounded in the shopper's words against the catalog's own names: facet values, prices, leaf category
  names; the first results of a bare product name come with a question), ``+ meaning`` (words naming no
  leaf get the top-level category closest by MiniLM similarity; a bundle theme gets the leaves closest by
  meaning as slots), ``+ learnt`` (the vocabulary the agent
  learnt from its training tasks and logged searches, ``vocabulary.json``: shoppers' names for leaves,
  department examples, bundle themes; the served default).

Per row and kind: success and NDCG@10; the agent rows with the paired bootstrap 95 % CI of the difference
to the best baseline of that kind. Also turn latency p50/p95 per row. JSON: bench/results/agent.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import apps.shopping.agent as shopping_agent  # noqa: E402
import apps.shopping.kit as shopping_kit  # noqa: E402
from apps.evaluate import evaluate  # noqa: E402
from eval.run import EvalConfig  # noqa: E402

VARIANTS = {"model only": (False, False, False), "+ words": (True, False, False), "+ meaning": (True, True, False),
            "+ learnt": (True, True, True)}
METRICS = ("success", "ndcg@10")


def _run(agent: Path, logs: Path, out: Path, cfg: EvalConfig, baselines: list[str], words: bool,
         meaning: bool, learnt: bool) -> dict[str, Any]:
    shopping_agent.GROUND_WORDS, shopping_agent.SEMANTIC_CATEGORIES = words, meaning
    shopping_agent.SEMANTIC_SLOTS, shopping_kit.LEARNT_VOCABULARY = meaning, learnt
    try:
        return evaluate(agent, logs, out, cfg, baselines=baselines)
    finally:
        shopping_agent.GROUND_WORDS, shopping_agent.SEMANTIC_CATEGORIES = True, True
        shopping_agent.SEMANTIC_SLOTS, shopping_kit.LEARNT_VOCABULARY = True, True


def _cell(group: dict[str, Any], metric: str) -> dict[str, Any]:
    """The agent's mean on ``metric``, the best baseline's, and the paired CI of the difference."""
    best = group["best"].get(metric)
    means = group["means"].get(metric, {})
    vs = group["vs"].get(best, {}).get(metric, {}) if best else {}
    return {"agent": means.get("agent"), "best": best, "baseline": means.get(best), "delta": vs.get("delta"),
            "lo": vs.get("lo"), "hi": vs.get("hi"), "excludes_zero": vs.get("excludes_zero")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agent", type=Path, default=ROOT / "runs/demo/cascade-quick/final")
    ap.add_argument("--logs", type=Path, default=ROOT / "runs/demo/curated/test")
    ap.add_argument("--quick", action="store_true", help="the first 120 tasks only")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/agent.json")
    args = ap.parse_args()
    if not (args.agent / "agent.json").is_file():
        sys.exit(f"{args.agent}: no agent directory (run `make demo` first, or pass --agent)")
    cfg = EvalConfig(limit=120 if args.quick else -1, n_boot=args.n_boot)
    rows: dict[str, Any] = {}
    baselines: dict[str, dict[str, dict[str, float | None]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, switches) in enumerate(VARIANTS.items()):
            t0 = time.perf_counter()
            report = _run(args.agent, args.logs, Path(tmp) / str(i), cfg, ["fallback", "bm25", "dense"], *switches)
            groups = report["paired"]["groups"]
            turn = report["timing"]["turn_latency_ms"]
            rows[name] = {"groups": {g: {m: _cell(v, m) for m in METRICS} for g, v in groups.items()},
                          "degraded": report["overall"].get("degraded"),
                          "turn_ms": {"p50": turn.get("p50"), "p95": turn.get("p95")},
                          "seconds": round(time.perf_counter() - t0, 1)}
            for g, v in groups.items():
                for base in report["paired"]["baselines"]:
                    baselines.setdefault(base, {})[g] = {m: v["means"].get(m, {}).get(base) for m in METRICS}
    kinds = list(rows["model only"]["groups"])
    short = [k.split("/")[-1] for k in kinds]
    for metric in METRICS:
        print(f"\n{metric}: baselines, then the agent (Δ vs the best baseline of the kind [95% CI], * excludes 0)")
        print(f"{'':<11}" + "".join(f"{k:>26}" for k in short))
        for base, by in baselines.items():
            print(f"{base:<11}" + "".join(f"{_f(by[k].get(metric)):>26}" for k in kinds))
        for name, row in rows.items():
            cells = []
            for k in kinds:
                c = row["groups"][k][metric]
                star = "*" if c["excludes_zero"] else " "
                cells.append(f"{_f(c['agent'])} {_f(c['delta'], True)} [{_f(c['lo'], True)},{_f(c['hi'], True)}]{star}")
            print(f"{name:<11}" + "".join(f"{c:>26}" for c in cells))
    print("\nturn latency ms p50/p95, degraded share: " + "; ".join(
        f"{n} {r['turn_ms']['p50']:.0f}/{r['turn_ms']['p95']:.0f}, {r['degraded']:.3f}" for n, r in rows.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"agent": str(args.agent), "logs": str(args.logs), "quick": args.quick,
                                    "baselines": baselines, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


def _f(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.2f}" if signed else f"{v:.3f}"


if __name__ == "__main__":
    main()
