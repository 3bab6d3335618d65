"""The reply frame (:class:`harness.agent.ReplyFrame`): a livestream agent whose call's fixed opening is written
into the prompt and whose generation stops at the call's close, with and without jump-forward decoding of the fixed
runs inside the call (its keys, the rest of a fact's name), and with the system prompt's KV kept across calls, against
the same model writing the whole call, in the same run, on the same questions.

    python bench/reply_frame.py --agent DIR --world runs/demo/livestream              # heldout, 200 questions
    python bench/reply_frame.py --agent DIR --world DIR --set heldout2 --n 600 --quick   # --quick: 40 questions

The model answers every question (no reader first: the reader's sure answers never reach a model). For each
mode: the share of replies identical to the unframed model's, output tokens per call, model forward passes per
question (the prefill and one per decode step), ms per question one at a time (p50 / p95) and ms per batch of 8
questions (one engine call each step), and success against the answer key with a Wilson 95 % CI.
JSON: bench/results/reply_frame.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from apps.livestream.agent import livestream_app  # noqa: E402
from apps.livestream.env import correctness, request_constraints  # noqa: E402
from apps.livestream.world import set_tasks  # noqa: E402
from bench.common import wilson  # noqa: E402
from harness.agent import AgentLoop, AppSpec, ModelAccess, TurnResult  # noqa: E402
from harness.agent_dir import agent_engine, load_agent  # noqa: E402
from harness.budget import Budget  # noqa: E402
from harness.session import SessionState  # noqa: E402
from harness.tasks import Task  # noqa: E402
from infra.engines import EngineSettings  # noqa: E402
from infra.recordio import read_records  # noqa: E402

BUDGET_MS = 600_000.0
"""No budget: every call runs to its end (the latency of the call itself is what is measured)."""


def _turns(loop: AgentLoop, tasks: list[Task]) -> list[TurnResult]:
    """The tasks' turns driven together: each step's requests go to the engine as one batch."""
    assert loop.model is not None
    runs = [loop.begin(SessionState(app="livestream"), t.messages[0].content, budget=Budget(BUDGET_MS),
                       constraints=request_constraints(t)) for t in tasks]
    pending = [(r, q) for r in runs if (q := r.request()) is not None]
    while pending:
        outs = loop.model.engine.generate([q for _, q in pending])
        nxt = []
        for (run, _), out in zip(pending, outs, strict=True):
            if not run.apply(out[0]) and (q := run.request()) is not None:
                nxt.append((run, q))
        pending = nxt
    return [r.finish() for r in runs]


def measure(app: AppSpec, model: ModelAccess, tasks: list[Task], batch: int) -> dict[str, Any]:
    loop = AgentLoop(app, model)
    _turns(loop, tasks[:2])  # warm-up
    singles: list[float] = []
    results: list[TurnResult] = []
    forwards = [0]
    torch_model = model.engine.model  # type: ignore[attr-defined]  # an HFEngine's
    hook = torch_model.register_forward_pre_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
    try:
        for t in tasks:
            start = time.perf_counter()
            results += _turns(loop, [t])
            singles.append((time.perf_counter() - start) * 1000)
    finally:
        hook.remove()
    batches: list[float] = []
    for s in range(0, len(tasks) - batch + 1, batch):
        start = time.perf_counter()
        _turns(loop, tasks[s:s + batch])
        batches.append((time.perf_counter() - start) * 1000)
    ok = [correctness(t, r.final.reply, app.catalog) == 1.0 for t, r in zip(tasks, results, strict=True)]
    lo, hi = wilson(sum(ok), len(ok))
    return {"replies": [r.final.reply for r in results], "success": sum(ok) / len(ok), "ci": [lo, hi],
            "tokens": statistics.mean(r.output_tokens for r in results),
            "model_calls": statistics.mean(len(r.model_calls) for r in results),
            "forwards": forwards[0] / len(tasks),
            "p50_ms": statistics.median(singles), "p95_ms": sorted(singles)[int(0.95 * (len(singles) - 1))],
            f"batch{batch}_ms": statistics.mean(batches) if batches else None,
            "degraded": sum(r.degraded for r in results) / len(results)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agent", type=Path, required=True, help="an agent directory that answers livestream questions")
    ap.add_argument("--world", type=Path, required=True, help="the livestream world its questions come from")
    ap.add_argument("--set", default="heldout", help="question set: train, dev .. dev5, heldout, heldout2")
    ap.add_argument("--n", type=int, default=200, help="first N questions of the set (default 200)")
    ap.add_argument("--batch", type=int, default=8, help="questions per batch in the batched timing (default 8)")
    ap.add_argument("--quick", action="store_true", help="40 questions")
    ap.add_argument("--prefix-min-tokens", type=int, default=64,
                    help="the last mode's engine reuses prompt prefixes of at least this many tokens (default 64)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/reply_frame.json")
    args = ap.parse_args()
    if args.n < 1 or args.batch < 1:
        ap.error("--n and --batch must be at least 1")
    try:
        path = set_tasks(args.world, args.set)
    except ValueError as e:
        ap.error(f"--set: {e}")
    if not path.is_file():
        sys.exit(f"{path}: no such question set (sidekick world livestream writes it)")
    tasks = read_records(path, Task)[0][:40 if args.quick else args.n]
    agent = load_agent(args.agent)
    model = ModelAccess(engine=agent_engine(agent), tokenizer=agent.tokenizer)
    framed = livestream_app(args.world, reader_first=False)
    if framed.reply_frame is None:
        sys.exit("the livestream app has no reply frame")
    plain = dataclasses.replace(framed.reply_frame, jumps=(), choices=())
    # the same weights behind an engine that also keeps the KV of the system prompt across calls (it is ~100 tokens,
    # under the default's 256-token floor)
    cached = ModelAccess(engine=agent_engine(agent, EngineSettings(prefix_min_tokens=args.prefix_min_tokens)),
                         tokenizer=agent.tokenizer)
    modes = {"whole call (no frame)": (dataclasses.replace(framed, reply_frame=None), model),
             "reply frame": (dataclasses.replace(framed, reply_frame=plain), model),
             "reply frame + jumps": (framed, model),
             f"reply frame + jumps + prompt cache from {args.prefix_min_tokens} tokens": (framed, cached)}
    rows = {}
    for name, (app, access) in modes.items():
        print(f"{name}: {len(tasks)} questions ...", flush=True)
        rows[name] = measure(app, access, tasks, args.batch)
    base = rows["whole call (no frame)"]["replies"]
    for row in rows.values():
        row["identical"] = sum(a == b for a, b in zip(row.pop("replies"), base, strict=True)) / len(base)
    print(f"\n{len(tasks)} questions of {path} (model only), agent {args.agent}")
    print(f"| mode | identical replies | success [95 % CI] | output tokens | forwards | ms p50 / p95 (one at a time) | "
          f"ms per batch of {args.batch} |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        batch_ms = r[f"batch{args.batch}_ms"]
        print(f"| {name} | {r['identical']:.3f} | {r['success']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | "
              f"{r['tokens']:.1f} | {r['forwards']:.1f} | {r['p50_ms']:.0f} / {r['p95_ms']:.0f} | "
              f"{'-' if batch_ms is None else f'{batch_ms:.0f}'} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"agent": str(args.agent), "tasks": str(path), "n": len(tasks), "modes": rows},
                                   indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
