"""MovieLens-100k next-item benchmark: SID generative retrieval vs popularity, BM25, dense and SASRec-CE.

    python bench/movielens.py --quick          # SASRec 3 epochs, SID 5 epochs (a few minutes)
    python bench/movielens.py                  # both trained until validation stops improving (~27 min on 2 cores)

Imports the world from the recbole wheel into ``--world`` if it is not there (what
``sidekick world import-movielens`` does), runs :func:`apps.movielens.bench.run_movielens_benchmark`
(the protocol is in that module's docstring), prints the table and copies ``report.json`` to
``bench/results/movielens[-quick].json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from apps.movielens.bench import (  # noqa: E402
    DEFAULT_METHODS,
    REPORT_JSON,
    MovieLensBenchConfig,
    format_table,
    run_movielens_benchmark,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="Short training (see apps.movielens.bench.PRESETS).")
    parser.add_argument("--world", type=Path, default=ROOT / "runs/bench/movielens/world")
    parser.add_argument("--out", type=Path, default=None, help="Default runs/bench/movielens/{quick,full}.")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help="Comma-separated methods (default: all but sid-lm, the TIGER-style token LM).")
    parser.add_argument("--max-users", type=int, default=0, help="First N users only (0 = all 943).")
    parser.add_argument("--threads", type=int, default=1, help="Torch threads (default 1).")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not (args.world / "tasks.jsonl").is_file():
        from apps.movielens.importer import MovieLensImportConfig, import_movielens

        print(f"importing MovieLens-100k into {args.world}", flush=True)
        import_movielens(MovieLensImportConfig(), args.world)
    mode = "quick" if args.quick else "full"
    out = args.out or ROOT / "runs/bench/movielens" / mode
    cfg = MovieLensBenchConfig.model_validate({
        "world": args.world, "out": out, "quick": args.quick, "methods": args.methods.split(","),
        "max_users": args.max_users, "threads": args.threads, "seed": args.seed})
    t0 = time.perf_counter()
    report = run_movielens_benchmark(cfg, lambda line: print(f"[{time.perf_counter() - t0:7.1f}s] {line}", flush=True))
    print()
    print(format_table(report))
    print(f"\nwall {time.perf_counter() - t0:.0f} s; load average {report['machine']['load_avg']}")
    results = ROOT / "bench/results" / f"movielens{'-quick' if args.quick else ''}.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / REPORT_JSON, results)
    print(f"wrote {out / REPORT_JSON} and {results}")
    json.loads(results.read_text())  # a truncated copy fails here, not in whoever reads it next


if __name__ == "__main__":
    main()
