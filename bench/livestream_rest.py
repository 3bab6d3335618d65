"""Livestream answers over REST under concurrent viewers: latency and correctness, as a frontend sees them.

    python bench/livestream_rest.py --world runs/demo/livestream                      # no model: the reader serves
    python bench/livestream_rest.py --world runs/demo/livestream --agent runs/demo/cascade-quick/final
    python bench/livestream_rest.py --world DIR --quick                               # 4 s per concurrency
    python bench/livestream_rest.py --world DIR --agent DIR --config serve.yaml       # a ServeConfig, e.g.
                                                                                      # overload: degrade

A real ``sidekick serve`` process on a free loopback port; this process is the load generator (asyncio + httpx,
one connection per worker). Per concurrency (default 1 and 8, the livestream target's), that many workers in a
closed loop each ``POST /v1/livestream/answer`` a held-out question (``<world>/heldout/tasks.jsonl``, or ``--set``'s;
cycled, each worker from its own offset) with its stream and second, for ``--seconds``. Reported per cell: requests/s,
latency p50 / p95 / p99 on the client's clock, the share within the app's 800 ms budget, success (the app's
correctness = 1 against the task's ground truth), answer words, degraded share, who answered (the model, the
reader sure of its reading, or the fallback and why: ``timeout``, ``overload``, ...), non-2xx and timeouts.
JSON: bench/results/livestream_rest.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from apps.livestream.agent import DEFAULT_BUDGET_MS, livestream_app  # noqa: E402
from apps.livestream.env import correctness  # noqa: E402
from apps.livestream.world import set_tasks  # noqa: E402
from bench.serving import free_port, sidekick_exe, spawn  # noqa: E402
from harness.tasks import Task  # noqa: E402
from infra.layout import TASKS_FILE  # noqa: E402


async def cell(url: str, tasks: list[Task], concurrency: int, seconds: float, catalog: Any) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    deadline = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=DEFAULT_BUDGET_MS / 1000 + 10, trust_env=False) as client:
            k = w * max(1, len(tasks) // concurrency)
            while time.perf_counter() < deadline:
                task = tasks[k % len(tasks)]
                k += 1
                body = {"question": task.messages[-1].content, "stream_id": task.constraints["stream_id"],
                        "ts_offset_s": task.constraints["ts_offset_s"]}
                t0 = time.perf_counter()
                try:
                    r = await client.post("/v1/livestream/answer", json=body)
                except httpx.TimeoutException:
                    rows.append({"ms": (time.perf_counter() - t0) * 1000, "status": 0})
                    continue
                ms = (time.perf_counter() - t0) * 1000
                row: dict[str, Any] = {"ms": ms, "status": r.status_code}
                if r.status_code == 200:
                    out = r.json()
                    row |= {"correct": correctness(task, out.get("answer", ""), catalog) == 1.0,
                            "words": len(out.get("answer", "").split()), "degraded": bool(out.get("degraded")),
                            "by": str(out.get("reason") or ("fallback" if out.get("degraded") else "model"))}
                rows.append(row)

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    ok = [r for r in rows if r["status"] == 200]
    ms = sorted(r["ms"] for r in ok)

    def q(p: float) -> float:
        return round(ms[min(len(ms) - 1, int(p * len(ms)))], 1) if ms else 0.0

    return {"concurrency": concurrency, "requests": len(rows), "per_s": round(len(rows) / seconds, 1),
            "p50_ms": q(0.5), "p95_ms": q(0.95), "p99_ms": q(0.99),
            "within_budget": round(sum(m <= DEFAULT_BUDGET_MS for m in ms) / len(ms), 4) if ms else 0.0,
            "success": round(statistics.fmean(r["correct"] for r in ok), 4) if ok else 0.0,
            "words_mean": round(statistics.fmean(r["words"] for r in ok), 1) if ok else 0.0,
            "degraded": round(statistics.fmean(r["degraded"] for r in ok), 4) if ok else 0.0,
            "by": {k: round(v / len(ok), 4) for k, v in sorted(Counter(r["by"] for r in ok).items())},
            "non_2xx": sum(r["status"] not in (200, 0) for r in rows), "timeouts": sum(r["status"] == 0 for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=Path, required=True, help="a livestream world with heldout/tasks.jsonl")
    ap.add_argument("--agent", type=Path, default=None, help="an agent directory (default: no model, the reader)")
    ap.add_argument("--set", default="heldout", help="question set: heldout (default), heldout2, dev .. dev5, train")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--quick", action="store_true", help="4 s per concurrency")
    ap.add_argument("--config", type=Path, default=None, help="a YAML ServeConfig for the server (sidekick serve -c)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/livestream_rest.json")
    args = ap.parse_args()
    if args.config is not None and not args.config.is_file():
        ap.error(f"--config {args.config}: no such file")
    try:
        path = set_tasks(args.world, args.set)
    except ValueError as e:
        ap.error(f"--set: {e}")
    if not path.is_file() and args.set == "heldout":
        path = args.world / TASKS_FILE
        print(f"{args.world}: no held-out questions; using {path}")
    if not path.is_file():
        sys.exit(f"{path}: no such question set (sidekick world livestream writes it)")
    tasks = [Task.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    catalog = livestream_app(args.world).catalog
    seconds = 4.0 if args.quick else args.seconds
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        cmd = [sidekick_exe(), "serve", *([str(args.agent)] if args.agent else []), "--world", str(args.world),
               "--port", str(port), *(["--config", str(args.config)] if args.config else [])]
        server = spawn("livestream", cmd, port, Path(tmp), "serve")
        try:
            asyncio.run(cell(server.url, tasks[:3], 1, 1.0, catalog))  # warm-up, not measured
            cells = [asyncio.run(cell(server.url, tasks, c, seconds, catalog)) for c in args.concurrency]
        finally:
            server.stop()
    print(f"\n{len(tasks)} questions of {path}; agent: {args.agent or 'none (the reader)'}; {seconds:.0f} s per cell")
    print(f"{'conc':>5}{'req/s':>8}{'p50':>8}{'p95':>8}{'p99':>8}{'<=800ms':>9}{'success':>9}{'words':>7}"
          f"{'degraded':>10}{'non-2xx':>9}{'timeouts':>10}  answered by")
    for c in cells:
        print(f"{c['concurrency']:>5}{c['per_s']:>8}{c['p50_ms']:>8}{c['p95_ms']:>8}{c['p99_ms']:>8}"
              f"{c['within_budget']:>9.3f}{c['success']:>9.3f}{c['words_mean']:>7}{c['degraded']:>10.3f}"
              f"{c['non_2xx']:>9}{c['timeouts']:>10}  " + ", ".join(f"{k} {v:.2f}" for k, v in c["by"].items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"world": str(args.world), "agent": str(args.agent) if args.agent else None,
                                    "config": str(args.config) if args.config else None,
                                    "seconds": seconds, "cells": cells}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
