"""Benchmark the HF engine's shared-prefix KV cache against no cache, on real agent prompts.

    python bench/prefix_cache.py --quick     # 300-item world, 2 repeats (~1 min on 2 cores; the first run
                                             # also trains the tiny agent: 60 SFT steps)
    python bench/prefix_cache.py             # 5 repeats

Table printed, JSON written to bench/results/prefix_cache[-quick].json. Every shopping prompt is the
system prompt + 9 tool schemas (~4k tiny tokens) + one user message. Per batch size (1, 8) and cache
setting (on, off), one engine each: the first call (the cache is cold), then ``--repeats`` calls with new
user messages (the prefix is reused): wall seconds per call, best and median; 7 new tokens, greedy.
The two settings' token ids are compared: they must be equal (the cache is exact).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import ensure_sid_dir, ensure_tiny_agent, ensure_world  # noqa: E402  (bench/common.py)

from apps.shopping.agent import SYSTEM_PROMPT, shopping_tools  # noqa: E402
from harness.agent import render_ids  # noqa: E402
from infra.engines.base import GenerationRequest, SamplingParams  # noqa: E402
from infra.engines.hf import HFEngine  # noqa: E402
from training.models import load_agent  # noqa: E402

WORDS = ("red boots", "a tent for two", "cheap headphones", "wool socks", "a desk lamp", "running shoes",
         "basmati rice", "a phone case", "kids raincoat", "a yoga mat")


def prompts(tok: Any, count: int, offset: int) -> list[list[int]]:
    tools = shopping_tools().schemas()
    return [render_ids(tok, [{"role": "system", "content": SYSTEM_PROMPT},
                             {"role": "user", "content": f"{WORDS[(offset + i) % len(WORDS)]} under {20 + i}"}],
                       tools) for i in range(count)]


def run(engine: HFEngine, tok: Any, batch: int, repeats: int) -> tuple[dict[str, Any], list[list[int]]]:
    params = SamplingParams(max_new_tokens=7, temperature=0.0)
    times, outputs = [], []
    for call in range(repeats + 1):
        reqs = [GenerationRequest(prompt=p, params=params) for p in prompts(tok, batch, call * batch)]
        start = time.perf_counter()
        out = engine.generate(reqs)
        times.append(time.perf_counter() - start)
        outputs += [o[0].token_ids for o in out]
    rest = times[1:]
    return {"first_s": round(times[0], 3), "repeat_best_s": round(min(rest), 3),
            "repeat_median_s": round(statistics.median(rest), 3),
            "prompt_tokens": len(prompts(tok, 1, 0)[0])}, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work", type=Path, default=ROOT / "runs/bench/rl", help="Shared with bench/rl.py.")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    world = ensure_world(args.work, 300)
    agent_dir = ensure_tiny_agent(args.work / "agent-300", world, ensure_sid_dir(world, args.work / "sid-300"), 60,
                                  threads=args.threads)
    repeats = 2 if args.quick else 5
    rows = []
    for batch in (1, 8):
        got = {}
        for cache in (False, True):
            agent = load_agent(agent_dir)
            engine = HFEngine(agent.model, agent.tokenizer, dtype="fp32", prefix_cache=cache)
            row, got[cache] = run(engine, agent.tokenizer, batch, repeats)
            rows.append({"batch": batch, "prefix_cache": cache, **row, "stats": dict(engine.prefix_stats)})
        assert got[True] == got[False], "the prefix cache changed the generated tokens"
    print(f"{'batch':>6} {'cache':>6} {'first s':>9} {'repeat best s':>14} {'repeat median s':>16}")
    for r in rows:
        print(f"{r['batch']:>6} {('on' if r['prefix_cache'] else 'off'):>6} {r['first_s']:>9} "
              f"{r['repeat_best_s']:>14} {r['repeat_median_s']:>16}")
    out = ROOT / "bench/results" / ("prefix_cache-quick.json" if args.quick else "prefix_cache.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": {"load_avg": os.getloadavg(), "threads": args.threads,
                                        "identical_tokens": True}, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
