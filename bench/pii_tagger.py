"""Choose the PII tagger's recipe on development sets it did not learn from.

    python bench/pii_tagger.py                     # leave dev8, dev9, dev10 out; recipes: plain, swapped copies
    python bench/pii_tagger.py --quick             # one epoch, leave dev10 out (a smoke run: ~2 min on 2 cores)
    python bench/pii_tagger.py --leave-out dev9 --augment 0,1,2

For each recipe (``--augment``: how many copies of each message with PII, every value swapped for another of its
type, :func:`data_curation.tagger.augmented`; 0 is the plain recipe) a tagger is trained on the training sets
(:data:`data_curation.tagger.TRAIN_SETS`) minus the left-out ones, and the scrubber (rules + spaCy, ``names: ner``,
what a user has without the tagger) is scored on the left-out sets with and without it: recall / precision per
type, keep words untouched, texts/s, training seconds, and each recipe's recall against the first recipe's and
against the rules, with a 95 % paired bootstrap interval over conversations. The held-out sets (``test2``,
``test3``) are never used here. Writes ``bench/results/pii_tagger.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from data_curation.config import DEFAULT_PHONE_REGIONS
from data_curation.pii import Scrubber
from data_curation.pii_eval import load_set, paired_recall_ci, score
from data_curation.tagger import EPOCHS, SETS_DIR, TRAIN_SETS, train_tagger

ROOT = Path(__file__).resolve().parent.parent

HELD_OUT = ("test2", "test3")


def _score(scrubber: Scrubber, convs: list[Any]) -> dict[str, Any]:
    if scrubber.tagger is not None:
        scrubber.tagger.spans("warm up")  # loads it outside the timing
    if scrubber.names.ner is not None:
        scrubber.names.ner.persons("warm up")
    r = score(lambda turns: [d for _, d in scrubber.scrub_turns(turns)], convs)
    return {k: v for k, v in r.items() if k not in ("misses", "false_positives")}


def _row(label: str, r: dict[str, Any]) -> str:
    t = r["total"]
    names = r["types"].get("NAME", {})
    addr = r["types"].get("ADDRESS", {})

    def f(v: float | None) -> str:
        return "    -" if v is None else f"{v:.3f}"

    return (f"{label:<30}{f(t['recall'])} / {f(t['precision'])}   {f(names.get('recall'))} / "
            f"{f(names.get('precision'))}   {f(addr.get('recall'))} / {f(addr.get('precision'))}   "
            f"{f(t['keep_survival'])}   {r['texts_per_s']:>6,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leave-out", default=None, help="comma-separated sets to score (default dev8,dev9,dev10)")
    parser.add_argument("--augment", default="0,1", help="recipes: comma-separated numbers of swapped copies")
    parser.add_argument("--epochs", type=int, default=None, help=f"training epochs (default {EPOCHS}; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="one epoch, dev10 left out: a smoke run")
    parser.add_argument("--keep", type=Path, default=None, help="keep the trained taggers in this directory")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "pii_tagger.json")
    args = parser.parse_args()
    left = tuple((args.leave_out or ("dev10" if args.quick else "dev8,dev9,dev10")).split(","))
    epochs = args.epochs or (1 if args.quick else EPOCHS)
    try:
        recipes = [int(a) for a in args.augment.split(",")]
    except ValueError:
        parser.error(f"--augment: {args.augment!r} is not a comma-separated list of whole numbers (e.g. 0,1)")
    if any(k < 0 for k in recipes) or epochs < 1:
        parser.error("--augment and --epochs take numbers of at least 0 and 1")
    bad = [s for s in left if s in HELD_OUT or not (SETS_DIR / f"{s}.jsonl").is_file()]
    if bad:
        parser.error(f"--leave-out: {', '.join(bad)} is a held-out set or not in {SETS_DIR}")
    train = [s for s in TRAIN_SETS if s not in left]
    if not train:
        parser.error("--leave-out leaves no set to train on")
    convs = [c for s in left for c in load_set(SETS_DIR / f"{s}.jsonl")]
    print(f"training on {len(train)} sets ({', '.join(train)}), {epochs} epochs; scoring {', '.join(left)} "
          f"({len(convs)} conversations)", flush=True)
    results: dict[str, Any] = {"left_out": left, "train": train, "epochs": epochs, "recipes": {}}
    results["rules"] = _score(Scrubber.configured(DEFAULT_PHONE_REGIONS, "ner"), convs)
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        for aug in recipes:
            k = f"augment {aug}"
            out = base / f"augment{aug}"
            t = time.perf_counter()
            train_tagger(out, SETS_DIR, train, epochs=epochs, augment=aug)
            seconds = time.perf_counter() - t
            r = _score(Scrubber.configured(DEFAULT_PHONE_REGIONS, "ner", tagger=True, tagger_dir=out), convs)
            r["train_seconds"] = seconds
            r["messages"] = json.loads((out / "tagger.json").read_text())["messages"]
            results["recipes"][k] = r
    print(f"\n{'':<30}{'all recall / prec':<20}{'NAME':<18}{'ADDRESS':<18}{'keep':<8}texts/s")
    print(_row("rules + spaCy", results["rules"]))
    for k, r in results["recipes"].items():
        print(_row(f"+ tagger, {k}", r) + f"   ({r['messages']:,} messages, {r['train_seconds']:.0f} s)")
    first = next(iter(results["recipes"]))
    for k, r in results["recipes"].items():
        pairs = [("rules", results["rules"])] + ([(first, results["recipes"][first])] if k != first else [])
        for name, other in pairs:
            d, lo, hi = paired_recall_ci(r["per_conversation"], other["per_conversation"])
            print(f"recall {k} - {name}: {d:+.3f} [{lo:+.3f}, {hi:+.3f}]")
            r.setdefault("vs", {})[name] = [d, lo, hi]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
