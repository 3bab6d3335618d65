"""Benchmark ``sidekick curate``: sessions/s, peak RSS and per-stage time, beside a naive baseline.

    python bench/curation.py --quick     # 50k sessions (about 2 minutes on 2 cores)
    python bench/curation.py             # 1M sessions (generation ~1 min, curation ~10+ min on 2 cores)

The world is the shopping generator's (20k items, 2000 tasks, PII-laden logs with an answer key).
Sidekick runs with ``apps/shopping/curate.yaml`` (MiniLM selection; ``--embedder hashing`` swaps in
the model-free embedder) and as many workers as CPUs; its selection stage's embedding time and the
number of texts embedded are shown on their own line, since on a CPU they dominate.

The baseline is what one writes first: read every line into a list of ``Session`` models, scrub
user turns with three regexes (email, phone-ish digit runs, 13-19 digit runs), drop exact duplicate
texts with a Python set, write what is left — one process, everything in memory, no names,
addresses, near-duplicates, filters, selection or splits. Its PII "recall" is the share of answer-key
values that no longer appear in the scrubbed text. Each run is a fresh subprocess, so peak RSS is its
own (Sidekick's worker processes are sampled every 0.2 s with psutil). Writes bench/results/curation.json.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

_GENERATE = """
import json, sys, time
from pathlib import Path
from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
n, out = int(sys.argv[1]), Path(sys.argv[2])
t = time.perf_counter()
generate_shopping_world(ShoppingWorldConfig(items=20000, sessions=n, customers=max(1500, n // 20)), out)
print(json.dumps({"seconds": time.perf_counter() - t}))
"""

_SIDEKICK = """
import json, resource, sys, threading, time
from pathlib import Path
import psutil
from data_curation.config import CurateConfig
from data_curation.pipeline import run_curation
from infra.config import load_config
world, out, key, embedder, cache = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5]
cfg = load_config(CurateConfig, Path("apps/shopping/curate.yaml"))
data = cfg.model_dump()
data["anonymise"]["key_file"] = key
data["select"].update(embedder=embedder, cache_dir=cache)
cfg = CurateConfig.model_validate(data)
peak = {"worker": 0, "total": 0}
done = threading.Event()
def sample():  # worker processes' RSS, every 0.2 s (getrusage cannot tell spawned workers apart)
    me = psutil.Process()
    while not done.wait(0.2):
        kids = [p.memory_info().rss for p in me.children(recursive=True) if p.is_running()]
        peak["worker"] = max([peak["worker"], *kids])
        peak["total"] = max(peak["total"], me.memory_info().rss + sum(kids))
threading.Thread(target=sample, daemon=True).start()
t = time.perf_counter()
report = run_curation(cfg, world, out).report
dt = time.perf_counter() - t
done.set()
print(json.dumps({"seconds": dt, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_peak_rss_mb": peak["worker"] / 2**20, "all_processes_peak_rss_mb": peak["total"] / 2**20,
                  "stages": {k: v["seconds"] for k, v in report["stages"].items()},
                  "embed_seconds": report["selection"]["embed_seconds"],
                  "candidates": report["selection"]["candidates"], "kept": report["funnel"]["kept_total"],
                  "texts_embedded": report["selection"]["texts_embedded"],
                  "workers": report["workers"], "pii": report["pii"]["score"]["total"],
                  "pii_types": {t: [v["recall"], v["precision"]] for t, v in report["pii"]["score"]["types"].items()},
                  "funnel": report["funnel"]["dropped"]}))
"""

_BASELINE = """
import json, re, resource, sys, time
from pathlib import Path
from data_curation.records import Session
world, out = Path(sys.argv[1]), Path(sys.argv[2])
EMAIL = re.compile(r"[\\w.+-]+@[\\w-]+\\.[\\w.]+")
PHONE = re.compile(r"\\+?\\d[\\d ().-]{7,}\\d")
CARD = re.compile(r"\\b(?:\\d[ -]?){13,19}\\b")
t = time.perf_counter()
sessions = [Session.model_validate_json(line) for line in (world / "logs.jsonl").open() if line.strip()]
seen, kept = set(), []
for s in sessions:
    for turn in s.turns:
        if turn.role == "user":
            turn.text = CARD.sub("<CARD>", PHONE.sub("<PHONE>", EMAIL.sub("<EMAIL>", turn.text)))
    key = " ".join(" ".join(t.text for t in s.turns if t.role == "user").lower().split())
    if key not in seen:
        seen.add(key)
        kept.append(s)
out.mkdir(parents=True, exist_ok=True)
with (out / "logs.jsonl").open("w") as fh:
    for s in kept:
        fh.write(s.model_dump_json() + "\\n")
dt = time.perf_counter() - t
texts = {s.session_id: [t.text for t in s.turns] for s in sessions}
gone = total = 0
for line in (world / "private" / "pii_key.jsonl").open():
    k = json.loads(line)
    i = int(k["field"][6:k["field"].index("]")])
    total += 1
    gone += k["value"] not in texts[k["session_id"]][i]
print(json.dumps({"seconds": dt, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "kept": len(kept), "pii_values_removed": gone / total}))
"""


def _run(code: str, *args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-4000:])
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _print(n: int, sk: dict[str, Any], base: dict[str, Any]) -> None:
    print(f"\n{n:,} sessions; Sidekick with {sk['workers']} workers, baseline in one process\n")
    print(f"{'':<34}{'sidekick':>14}{'baseline':>14}")
    rows = [
        ("wall seconds", f"{sk['seconds']:.1f}", f"{base['seconds']:.1f}"),
        ("sessions/s (all stages)", f"{n / sk['seconds']:,.0f}", f"{n / base['seconds']:,.0f}"),
        ("sessions/s (without embedding)", f"{n / (sk['seconds'] - sk['embed_seconds']):,.0f}", "-"),
        ("peak RSS MB (main process)", f"{sk['peak_rss_mb']:,.0f}", f"{base['peak_rss_mb']:,.0f}"),
        ("peak RSS MB (largest worker)", f"{sk['worker_peak_rss_mb']:,.0f}", "-"),
        ("peak RSS MB (all processes)", f"{sk['all_processes_peak_rss_mb']:,.0f}", f"{base['peak_rss_mb']:,.0f}"),
        ("sessions kept", f"{sk['kept']:,}", f"{base['kept']:,}"),
        ("PII key values removed", f"{sk['pii']['recall_any_type']:.4f}", f"{base['pii_values_removed']:.4f}"),
    ]
    for name, a, b in rows:
        print(f"{name:<34}{a:>14}{b:>14}")
    print("\nsidekick per stage (seconds):")
    for stage, sec in sk["stages"].items():
        extra = (f"  (of which embedding {sk['texts_embedded']:,} distinct texts of {sk['candidates']:,} "
                 f"candidates: {sk['embed_seconds']:.1f} s)" if stage == "03_select" else "")
        print(f"  {stage:<14}{sec:>10.1f}{extra}")
    other = sk["seconds"] - sum(sk["stages"].values())
    print(f"  {'report':<14}{other:>10.1f}  (PII scoring against the key, report.html, manifest checksums)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="50k sessions instead of 1M")
    parser.add_argument("--sessions", type=int, default=None, help="override the number of sessions")
    parser.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "curation.json")
    args = parser.parse_args()
    n = args.sessions or (50_000 if args.quick else 1_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        world, key = Path(tmp) / "world", Path(tmp) / "key"
        key.write_text(secrets.token_hex(32))
        os.chmod(key, 0o600)
        gen = _run(_GENERATE, str(n), str(world))
        print(f"generated {n:,} sessions in {gen['seconds']:.1f} s "
              f"({(world / 'logs.jsonl').stat().st_size / 1e6:,.0f} MB of logs)")
        sk = _run(_SIDEKICK, str(world), tmp + "/curated", str(key), args.embedder, tmp + "/cache")
        base = _run(_BASELINE, str(world), tmp + "/baseline")
    _print(n, sk, base)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"created": time.strftime("%Y-%m-%dT%H:%M:%S"), "sessions": n,
                                    "embedder": args.embedder, "cpus": os.cpu_count(), "generate": gen,
                                    "sidekick": sk, "baseline": base}, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
