"""What makes the SID recommender work on MovieLens-100k: one change at a time from the default.

    python bench/movielens.py                     # first: the full benchmark (its SASRec and default SID)
    python bench/genrec_ablations.py              # then: each variant, paired against both, per user
    python bench/genrec_ablations.py --only text,item
    python bench/genrec_ablations.py --train-only --only item   # train before the base run exists (reused later)

Every variant retrains the SID model (same seed, same training split, same early stopping on the validation
item) with one setting changed, ranks the same 943 test users, and is compared user by user (paired bootstrap
95 % CI) with the default SID and with SASRec of the base run (``--base``, whose ``per_user.json`` holds both).
Prints a table and writes ``bench/results/genrec-ablations.json``.
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

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "text": ("SIDs from MiniLM text embeddings (TIGER's), not collaborative ones", {"sid_codes": {"source": "text"}}),
    "cooccurrence": ("SIDs from PPMI co-occurrence eigenvectors", {"sid_codes": {"source": "cooccurrence"}}),
    "item": ("no SID: one code per item (item-id model)", {"sid_codes": {"source": "item"}}),
    "3x32": ("SID shape 3 levels x 32 (+ suffix), not 2 x 64", {"sid_codes": {"levels": 3, "codebook_size": 32}}),
    "parallel": ("codes predicted in parallel (RPG), not one by one", {"sid": {"head": "parallel"}}),
    "no-mlp": ("no per-level MLP: the prefix only shifts the code logits", {"sid": {"decoder_inner": 0}}),
    "untied": ("output code embeddings not tied to the input ones", {"sid": {"tie": False}}),
    "batch128": ("128 windows a step, not 32 (4x fewer, larger steps)", {"sid": {"batch_size": 128}}),
    "item-dropout": ("item dropout 0.2 (inputs hidden at random in training)", {"sid": {"item_dropout": 0.2}}),
    "beam20": ("trie-constrained beam search, 20 beams, not exact decoding", {"sid": {"beam_size": 20}}),
    "sid-lm": ("the wave-1 model: tiny Llama over SID tokens, text SIDs 3x32, beam 20", {"methods": ["sid-lm"]}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=Path, default=ROOT / "runs/bench/movielens/world")
    parser.add_argument("--base", type=Path, default=ROOT / "runs/bench/movielens/full",
                        help="The full benchmark's output directory (its per_user.json).")
    parser.add_argument("--out", type=Path, default=ROOT / "runs/bench/movielens/ablations")
    parser.add_argument("--only", default=",".join(VARIANTS), help="Comma-separated variants.")
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
        if not {"sasrec", "sid"} <= set(base["methods"]):
            sys.exit(f"{base_file} has no sasrec and sid results: run the full benchmark with both")
        base_cfg = json.loads((args.base / "report.json").read_text())["config"]
    rows: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    for name in names:
        what, change = VARIANTS[name]
        # the base run's top-level settings; model settings from the presets, as in the base run (its report's
        # config holds every field, so re-reading it whole would turn the presets off)
        cfg_dict = {**{k: base_cfg[k] for k in ("quick", "seed", "k", "context_items", "threads", "max_users")},
                    "world": str(args.world), "out": str(args.out / name), "methods": ["sid"], "n_boot": 0}
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
        for against in ("sid", "sasrec"):
            ci = paired_bootstrap(base["methods"][against]["ndcg@10"], mine, n_boot=args.n_boot)
            row[f"vs_{against}"] = {k: round(float(v), 5) for k, v in ci.items()}
            row[f"vs_{against}"]["excludes_zero"] = excludes_zero(ci["lo"], ci["hi"])
        rows.append(row)
        print(f"[{time.perf_counter() - t_all:7.1f}s] {name}: ndcg@10 {row['ndcg@10']:.4f} "
              f"(vs default {row['vs_sid']['delta']:+.4f})", flush=True)
    if args.train_only:
        print(f"trained {', '.join(names)} into {args.out}; run again without --train-only to pair them")
        return
    base_report = json.loads((args.base / "report.json").read_text())["methods"]
    print()
    print(table(rows, base_report))
    out = ROOT / "bench/results/genrec-ablations.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"base": {k: base_report[k] for k in ("sasrec", "sid")}, "variants": rows}, indent=2))
    print(f"\nwrote {out}")


def table(rows: list[dict[str, Any]], base: dict[str, Any]) -> str:
    lines = ["| variant | change | HR@10 | NDCG@10 | Δ NDCG vs default SID [95 % CI] | Δ vs SASRec [95 % CI] "
             "| train s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for name in ("sasrec", "sid"):
        m = base[name]
        label = "SASRec-CE (base run)" if name == "sasrec" else "default SID (base run)"
        lines.append(f"| {name} | {label} | {m['hr@10']:.4f} | {m['ndcg@10']:.4f} | | | {m['train_s']:.0f} |")
    for r in rows:
        cells = []
        for against in ("sid", "sasrec"):
            c = r[f"vs_{against}"]
            cells.append(f"{c['delta']:+.4f} [{c['lo']:+.4f}, {c['hi']:+.4f}]{' *' if c['excludes_zero'] else ''}")
        lines.append(f"| {r['variant']} | {r['change']} | {r['hr@10']:.4f} | {r['ndcg@10']:.4f} | {cells[0]} | "
                     f"{cells[1]} | {r['train_s']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
