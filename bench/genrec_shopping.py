"""Next item on the shopping world's logs: the SID generative recommender vs SASRec, popularity and repeat-last.

    python bench/genrec_shopping.py --quick    # short training (~3 min on one core)
    python bench/genrec_shopping.py            # both trained until validation stops improving (39 min, busy 2 cores)

Generates the world (5,000 items, 20,000 sessions, 200 tasks, 5,000 customers) and curates it with a time split
into ``--work`` if they are not there (what ``sidekick world shopping`` and ``sidekick curate`` do, with the
configs below), runs :func:`apps.shopping.nextitem.compare_next_item` (the protocol is in that module's
docstring), prints the table and writes the report to ``bench/results/genrec-shopping[-views][-quick].json`` and the
same name under ``--work``.

Why 5,000 customers, not the generator's 1,500: the time split drops every earlier session of a test user, and
with 1,500 customers the last 10 % of sessions come from most of the frequent ones, so 68 % of all sessions go
(3,992 train sessions, 12 k training events for 5,000 items); with 5,000 customers 8,748 train sessions stay.
The test sessions are the same either way (the world's sessions do not depend on who the customer is).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from apps.shopping.nextitem import NextItemConfig, compare_next_item, format_table, load_next_item  # noqa: E402

WORLD: dict[str, Any] = {"items": 5_000, "sessions": 20_000, "tasks": 200, "customers": 5_000}
"""``ShoppingWorldConfig`` of the benchmark's world (seed from --seed)."""
CURATE: dict[str, Any] = {
    "workers": 1,
    "anonymise": {"names": "rules"},          # the generator's names are in its lists; no spaCy model needed
    "quality": {"require_outcome": False},    # browsing sessions have clicks to predict too
    "dedup": {"exact": True, "near": False},  # 200 tasks: many sessions share a request text, not behaviour
    "select": {"keep_fraction": 1.0, "embedder": "hashing"},
    "split": {"mode": "time", "val_fraction": 0.1, "test_fraction": 0.1},
}
"""``CurateConfig`` of the benchmark: test = the last 10 % of sessions by start time (their users' earlier sessions
dropped), the other users split 90 / 10 into train / val by a hash of their pseudonym."""
VALID_MAX = 1000
"""Validation users the SID models score after each epoch (exact scoring of 5,000 items is ~5 ms a user)."""


def ensure_curated(work: Path, seed: int) -> Path:
    """``work/world`` and ``work/curated`` (and the pseudonym key ``work/anonymise.key``), made if missing."""
    from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
    from data_curation.config import CurateConfig
    from data_curation.pipeline import run_curation

    world, curated, key = work / "world", work / "curated", work / "anonymise.key"
    if not (world / "manifest.json").is_file():
        print(f"generating the shopping world in {world}", flush=True)
        generate_shopping_world(ShoppingWorldConfig.model_validate({**WORLD, "seed": seed}), world)
    if not (curated / "manifest.json").is_file():
        print(f"curating it into {curated} (time split)", flush=True)
        cfg = {**CURATE, "seed": seed, "anonymise": {**CURATE["anonymise"], "key_file": str(key),
                                                     "create_key": not key.is_file()}}
        run_curation(CurateConfig.model_validate(cfg), world, curated)
    return curated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="Short training (apps.shopping.nextitem.PRESETS).")
    parser.add_argument("--work", type=Path, default=ROOT / "runs/bench/genrec-shopping",
                        help="World, curated directory and reports (default runs/bench/genrec-shopping).")
    parser.add_argument("--views", action="store_true", help="Put views (search impressions) in the context.")
    parser.add_argument("--threads", type=int, default=1, help="Torch threads (default 1).")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    curated = ensure_curated(args.work, args.seed)
    data = load_next_item(curated, views=args.views)
    cfg = NextItemConfig(quick=args.quick, seed=args.seed, threads=args.threads, valid_max=VALID_MAX)
    t0 = time.perf_counter()
    report = compare_next_item(data, cfg, lambda line: print(f"[{time.perf_counter() - t0:7.1f}s] {line}", flush=True))
    report["world"], report["curate"] = {**WORLD, "seed": args.seed}, CURATE
    print()
    print(format_table(report))
    print(f"\nwall {time.perf_counter() - t0:.0f} s; load average {report['machine']['load_avg']}")
    name = f"genrec-shopping{'-views' if args.views else ''}{'-quick' if args.quick else ''}.json"
    text = json.dumps(report, indent=2)
    for path in (args.work / name, ROOT / "bench/results" / name):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        json.loads(path.read_text())  # a truncated copy fails here, not in whoever reads it next
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
