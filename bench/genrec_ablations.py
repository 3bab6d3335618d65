"""What makes the SID recommender work on MovieLens-100k: one change at a time from the default.

    python bench/movielens.py                     # first: the full benchmark (its SASRec and default SID)
    python bench/genrec_ablations.py              # then: each variant, paired against both, per user
    python bench/genrec_ablations.py --only no-year,item
    python bench/genrec_ablations.py --train-only --only item   # train before the base run exists (reused later)

The default method ``sid`` is an ensemble of two SID models (learned codes + release year, and text codes); each
variant retrains **its main model alone** (learned codes + year: same seed, training split, presets and early
stopping on the validation item) with one setting changed, ranks the same 943 test users, and is compared user
by user (paired bootstrap 95 % CI) with that model of the base run (``sid: learned codes only`` in the base
run's ``per_user.json``) and with its SASRec. The base run's own rows say what the ensemble and the text model
add. Two processes can share the work: ``--only a,b`` in one and ``--only c,d`` in the other, then one run
without ``--only`` pairs everything (finished variants are reused). Prints a table and writes
``bench/results/genrec-ablations.json``.
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

from apps.movielens.bench import PER_USER_JSON, MovieLensBenchConfig, run_movielens_benchmark  # noqa: E402
from eval.stats import excludes_zero, paired_bootstrap  # noqa: E402

BASE_MODEL = "sid: learned codes only"
"""The ensemble member every variant changes (learned codes + year), as the base run's per_user.json names it."""

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "no-year": ("codes without the release year joined", {"sid_codes": {"attributes": []}}),
    "item": ("no SID: one code per item (item-id model)", {"sid_codes": {"source": "item"}}),
    "cooccurrence": ("SIDs from PPMI co-occurrence eigenvectors (+ year), not an item-id model's table",
                     {"sid_codes": {"source": "cooccurrence"}}),
    "3x32": ("SID shape 3 levels x 32 (+ suffix), not 2 x 64", {"sid_codes": {"levels": 3, "codebook_size": 32}}),
    "parallel": ("codes predicted in parallel (RPG), not one by one", {"sid": {"head": "parallel"}}),
    "no-mlp": ("no per-level MLP: the prefix only shifts the code logits", {"sid": {"decoder_inner": 0}}),
    "untied": ("output code embeddings not tied to the input ones", {"sid": {"tie": False}}),
    "64-wide": ("64 wide (feed-forward and decoder 256), no weight average: the 2026-12-04 default",
                {"sid": {"hidden": 64, "inner": 256, "decoder_inner": 256, "ema": 0.0}}),
    "batch128": ("128 windows a step, not 32 (4x fewer, larger steps)", {"sid": {"batch_size": 128}}),
    "item-dropout": ("item dropout 0.2 (inputs hidden at random in training)", {"sid": {"item_dropout": 0.2}}),
    "beam20": ("trie-constrained beam search, 20 beams, not exact decoding", {"sid": {"beam_size": 20}}),
    "sid-lm": ("the wave-1 model: tiny Llama over SID tokens, text SIDs 3x32, beam 20", {"methods": ["sid-lm"]}),
}
DEFAULT_VARIANTS = ("no-year", "item", "cooccurrence", "parallel", "no-mlp", "untied", "64-wide", "item-dropout")
"""Run when ``--only`` is not given (3-13 min each on one core, about an hour in all; the others on request)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=Path, default=ROOT / "runs/bench/movielens/world")
    parser.add_argument("--base", type=Path, default=ROOT / "runs/bench/movielens/full",
                        help="The full benchmark's output directory (its per_user.json).")
    parser.add_argument("--out", type=Path, default=ROOT / "runs/bench/movielens/ablations")
    parser.add_argument("--only", default=",".join(DEFAULT_VARIANTS),
                        help=f"Comma-separated variants (default {','.join(DEFAULT_VARIANTS)}; "
                        f"all: {','.join(VARIANTS)}).")
    parser.add_argument("--n-boot", type=int, default=2000)
    parser.add_argument("--train-only", action="store_true",
                        help="Train the variants without a base run (a later run without it reuses them).")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    base_file = args.base / PER_USER_JSON
    if args.train_only:  # the base run's top-level settings are the defaults'
        base_cfg = MovieLensBenchConfig(world=args.world, out=args.base).model_dump(mode="json")
    else:
        if not base_file.is_file():
            sys.exit(f"{base_file} is missing: run `python bench/movielens.py --out {args.base}` first "
                     "(or --train-only)")
        base = json.loads(base_file.read_text())
        if not {"sasrec", "sid", BASE_MODEL} <= set(base["methods"]):
            sys.exit(f"{base_file} has no sasrec, sid and {BASE_MODEL!r} results: run the full benchmark with "
                     "both methods and the default sid_also")
        base_cfg = json.loads((args.base / "report.json").read_text())["config"]
    rows: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    for name in names:
        what, change = VARIANTS[name]
        # the base run's top-level settings; model settings from the presets, as in the base run (its report's
        # config holds every field, so re-reading it whole would turn the presets off)
        cfg_dict = {**{k: base_cfg[k] for k in ("quick", "seed", "k", "context_items", "threads", "max_users")},
                    "world": str(args.world), "out": str(args.out / name), "methods": ["sid"], "sid_also": [],
                    "n_boot": 0}
        for key, value in change.items():
            cfg_dict[key] = {**cfg_dict.get(key, {}), **value} if isinstance(value, dict) else value
        cfg = MovieLensBenchConfig.model_validate(cfg_dict)
        t0 = time.perf_counter()
        previous = args.out / name / "report.json"
        if (previous.is_file() and (args.out / name / PER_USER_JSON).is_file()
                and json.loads(previous.read_text()).get("config") == cfg.model_dump(mode="json")):
            print(f"[{time.perf_counter() - t_all:7.1f}s] {name}: reusing {previous} (same settings)", flush=True)
            report = json.loads(previous.read_text())
        else:
            print(f"[{time.perf_counter() - t_all:7.1f}s] {name}: {what}", flush=True)
            report = run_movielens_benchmark(cfg)
        if args.train_only:
            continue
        per_user = json.loads((args.out / name / PER_USER_JSON).read_text())
        if per_user["users"] != base["users"]:
            sys.exit(f"{name}: users differ from the base run's; use the same world and max_users")
        method = cfg.methods[0]
        mine = per_user["methods"][method]["ndcg@10"]
        m = report["methods"][method]
        row = {"variant": name, "change": what, "hr@10": m["hr@10"], "ndcg@10": m["ndcg@10"],
               "valid_ndcg@10": (m.get("details", {}).get("training") or {}).get("valid_ndcg@10"),
               "train_s": m["train_s"], "eval_s": m["eval_s"], "wall_s": round(time.perf_counter() - t0, 1)}
        for against, key in (("sid", BASE_MODEL), ("sasrec", "sasrec")):
            row[f"vs_{against}"] = _paired(base["methods"][key]["ndcg@10"], mine, args.n_boot)
        rows.append(row)
        print(f"[{time.perf_counter() - t_all:7.1f}s] {name}: ndcg@10 {row['ndcg@10']:.4f} "
              f"(vs default {row['vs_sid']['delta']:+.4f})", flush=True)
    if args.train_only:
        print(f"trained {', '.join(names)} into {args.out}; run again without --train-only to pair them")
        return
    base_report = json.loads((args.base / "report.json").read_text())["methods"]
    base_rows = {}
    for name in BASE_ROWS:
        if name in base_report:
            base_rows[name] = {k: base_report[name].get(k) for k in ("hr@10", "ndcg@10", "train_s")}
            for against, key in (("sid", BASE_MODEL), ("sasrec", "sasrec")):
                if name not in (key, "sasrec"):
                    base_rows[name][f"vs_{against}"] = _paired(base["methods"][key]["ndcg@10"],
                                                               base["methods"][name]["ndcg@10"], args.n_boot)
    print()
    print(table(rows, base_rows))
    out = ROOT / "bench/results/genrec-ablations.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"base": base_rows, "variants": rows}, indent=2))
    print(f"\nwrote {out}")


BASE_ROWS = {"sasrec": "SASRec-CE (base run)", "sid": "the default: ensemble of the three SID models (base run)",
             BASE_MODEL: "its main model alone: learned codes + year (base run; what every variant changes)",
             "sid: learned codes, model 2, only": "its second model alone: learned codes, seed + 1 (base run)",
             "sid: learned codes, model 3, only": "its third model alone: learned codes, seed + 2 (base run)"}


def _paired(a: list[float], b: list[float], n_boot: int) -> dict[str, Any]:
    """b − a per user: mean and paired bootstrap 95 % CI, rounded, with whether it excludes 0."""
    ci = paired_bootstrap(a, b, n_boot=n_boot)
    return {**{k: round(float(v), 5) for k, v in ci.items()}, "excludes_zero": excludes_zero(ci["lo"], ci["hi"])}


def _ci_cell(c: dict[str, Any] | None) -> str:
    if not c:
        return ""
    return f"{c['delta']:+.4f} [{c['lo']:+.4f}, {c['hi']:+.4f}]{' *' if c['excludes_zero'] else ''}"


def table(rows: list[dict[str, Any]], base: dict[str, dict[str, Any]]) -> str:
    """Markdown table: the base run's rows, then each variant, with paired CIs against the main model and SASRec."""
    lines = ["| variant | change | HR@10 | NDCG@10 | Δ NDCG vs learned-codes model [95 % CI] | Δ vs SASRec [95 % CI] "
             "| train s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for name, m in base.items():
        lines.append(f"| {name} | {BASE_ROWS[name]} | {m['hr@10']:.4f} | {m['ndcg@10']:.4f} | "
                     f"{_ci_cell(m.get('vs_sid'))} | {_ci_cell(m.get('vs_sasrec'))} | {m['train_s'] or 0:.0f} |")
    for r in rows:
        lines.append(f"| {r['variant']} | {r['change']} | {r['hr@10']:.4f} | {r['ndcg@10']:.4f} | "
                     f"{_ci_cell(r['vs_sid'])} | {_ci_cell(r['vs_sasrec'])} | {r['train_s']:.0f} |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
