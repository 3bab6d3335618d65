"""Concurrent one-query encodes of MiniLM: each thread calling the encoder alone vs through GatheringEncoder.

    python bench/encoder_gather.py            # 8 and 32 threads x 8 queries each
    python bench/encoder_gather.py --quick    # 8 threads x 4 queries

What a server's turns do when they ground a request by meaning: one short query each, from many threads at
once. ``alone``: every thread calls the shared :class:`infra.text_encoder.TextEncoder` under a lock (what
serving did before; the tokenizer is not safe to share unlocked); ``gathered``: the same calls through
:class:`infra.text_encoder.GatheringEncoder`, which encodes what queued while it ran as one batch. Same queries,
same process, one after the other. Prints queries/s and per-call latency p50/p95, and the largest embedding
difference between the two (the batch pads, the rows must agree). JSON: bench/results/encoder_gather.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.text_encoder import GatheringEncoder, TextEncoder  # noqa: E402

QUERIES = ["waterproof hiking boots under 80", "a gift for a coffee lover", "stuff for our new kitten, 150 max",
           "cheap wireless earbuds", "something cosy for the living room", "a small home gym, about 300 in total",
           "Nike trainers size 42 in black", "a present for my 7 year old nephew"]


class _Locked:
    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder, self.lock = encoder, threading.Lock()

    def encode(self, texts: list[str]) -> np.ndarray:
        with self.lock:
            return self.encoder.encode(texts)


def _run(encoder: Any, threads: int, per_thread: int) -> tuple[dict[str, float], np.ndarray]:
    latencies: list[float] = []
    rows: dict[int, np.ndarray] = {}

    def work(t: int) -> None:
        for k in range(per_thread):
            i = (t * per_thread + k) % len(QUERIES)
            start = time.perf_counter()
            rows[t * per_thread + k] = encoder.encode([QUERIES[i]])[0]
            latencies.append((time.perf_counter() - start) * 1000)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    wall = time.perf_counter() - start
    lat = np.array(latencies)
    stats = {"queries_per_s": len(lat) / wall, "p50_ms": float(np.percentile(lat, 50)),
             "p95_ms": float(np.percentile(lat, 95))}
    return stats, np.stack([rows[j] for j in sorted(rows)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="8 threads x 4 queries")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/encoder_gather.json")
    args = ap.parse_args()
    encoder = TextEncoder(batch_size=32)
    encoder.encode(QUERIES)  # warm up
    cells = [(8, 4)] if args.quick else [(8, 8), (32, 8)]
    results = []
    print(f"{'threads':>8}{'mode':>10}{'queries/s':>11}{'p50 ms':>9}{'p95 ms':>9}")
    for threads, per_thread in cells:
        alone, a = _run(_Locked(encoder), threads, per_thread)
        gathered, g = _run(GatheringEncoder(encoder), threads, per_thread)
        diff = float(np.abs(a - g).max())
        for mode, s in (("alone", alone), ("gathered", gathered)):
            print(f"{threads:>8}{mode:>10}{s['queries_per_s']:>11.1f}{s['p50_ms']:>9.1f}{s['p95_ms']:>9.1f}")
        print(f"{'':>8}{'speed-up':>10}{gathered['queries_per_s'] / alone['queries_per_s']:>10.2f}x"
              f"   max |embedding diff| {diff:.2e}")
        results.append({"threads": threads, "per_thread": per_thread, "alone": alone, "gathered": gathered,
                        "max_abs_diff": diff})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"quick": args.quick, "precision": encoder.name, "cells": results}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
