"""Benchmark the RL runtime's rollout scheduling on CPU: sync vs async (ratio 1, 2) vs async + tail handling.

    python bench/rl.py --quick        # 300-item world, 6 updates per mode (~10 min on 2 cores; first run also
                                      # trains the tiny agent)
    python bench/rl.py                # 2,000-item world, 15 updates per mode

Table printed, JSON (with the reward curves) written to bench/results/rl[-quick].json. What is measured:

1. Inputs, cached under ``--work`` (default ``runs/bench/rl``): a seeded shopping world, quick SIDs (level 1 =
   top category), and a ``tiny`` agent after ``--sft-steps`` SFT steps — few on purpose: it has learned the
   format but often does not stop, so at temperature 1 with a ``--max-new-tokens`` cap of 128 its response
   lengths are **long-tailed** (the table shows the median and the longest per mode). ``--warmup-steps N``
   adds the cascade's warm-up (RFT on the BM25 teacher's passing episodes): the agent then earns some
   reward, but it also stops after ~6 tokens, and the tail is gone (measured: longest 15 tokens).
2. Every mode runs the same task list, seeds, ``--workers`` environment workers (each with its own engine
   replica), groups per update and group size, from the same starting agent, one after the other in this
   process (a fresh local Ray each):
   ``sync`` (generate with v, train, push v+1, generate…), ``async-1`` and ``async-2`` (workers keep
   generating while the trainer updates; trajectories may lag 1 or 2 versions), ``async-1+tail`` (also
   ``tail_fraction`` 0.25: a worker call returns once 75 % of its episodes are done and carries the long
   tail into its next call). Dynamic sampling is off, so every mode trains on exactly the same number of
   trajectories per update (this barely trained agent earns reward 0 on most groups, which dynamic
   sampling would drop and replace, making the modes do different amounts of work).
3. Per mode: ``steps/min`` (updates per minute of wall time, Ray start excluded), ``traj/s`` (trajectories
   generated per second, dropped ones included), ``trained/s``, drops (zero-variance groups, stale groups),
   the mean reward of the first and last updates' rollouts (the curves are in the JSON: parity, not a race
   to a better policy, is what they should show), and the speed-up over ``sync``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import ensure_sid_dir, ensure_tiny_agent, ensure_world  # noqa: E402  (bench/common.py)

import apps  # noqa: E402
from apps.rl import env_factory  # noqa: E402
from harness.tasks import Task  # noqa: E402
from training.rl.controller import RLConfig, RLResult, train_rl  # noqa: E402
from training.rl.rollout import RolloutSettings  # noqa: E402
from training.rl.trainer import TrainerSettings  # noqa: E402

MODES: dict[str, dict[str, Any]] = {
    "sync": {"mode": "sync"},
    "async-1": {"mode": "async", "async_ratio": 1},
    "async-2": {"mode": "async", "async_ratio": 2},
    "async-1+tail": {"mode": "async", "async_ratio": 1, "tail_fraction": 0.25},
}


def ensure_warm_agent(work: Path, agent: Path, world: Path, steps: int) -> Path:
    """``agent`` after ``steps`` RFT steps on the BM25 teacher's passing episodes (the cascade's warm-up, made
    short: the policy starts earning reward, so the curves say something, but still rambles at times)."""
    from training.cascade import RFTSettings, rft
    from training.rl.rollout import EpisodeJob
    from training.rl.workers import EnvWorker

    out = work / f"warm{steps}"
    if steps == 0 or (out / "agent.json").is_file():
        return agent if steps == 0 else out
    tasks = load_tasks(world, 1000)
    kit = apps.kit("shopping")
    worker = EnvWorker(agent, env_factory(kit, world), kit.sid, RolloutSettings(max_steps=1))
    taught = [t for t in worker.run_teacher([EpisodeJob(t, g, 0, g) for g, t in enumerate(tasks)]) if t.success]
    print(f"warm-up: {steps} RFT steps on {len(taught)} passing teacher episodes -> {out}", flush=True)
    rft(agent, taught, RFTSettings(steps=steps, batch_size=16, lr=1e-3), out, seed=0)
    return out


def load_tasks(world: Path, n: int) -> list[Task]:
    """The first ``n`` single-item tasks of the world (no bundles, nothing hidden: one or two actions each)."""
    tasks = [Task.model_validate_json(line) for line in (world / "tasks.jsonl").read_text().splitlines()]
    return [t for t in tasks if t.kind != "bundle" and not t.hidden][:n]


def run_mode(name: str, agent: Path, world: Path, tasks: list[Task], args: argparse.Namespace) -> dict[str, Any]:
    out = args.work / "runs" / name
    shutil.rmtree(out, ignore_errors=True)
    cfg = RLConfig(agent=agent, out=out, steps=args.steps, groups_per_step=args.groups, group_size=args.group_size,
                   env_workers=args.workers, groups_per_call=1, save_every=10_000, seed=0, dynamic_sampling=False,
                   rollout=RolloutSettings(max_new_tokens=args.max_new_tokens, max_steps=2, temperature=1.0),
                   trainer=TrainerSettings(lr=args.lr), **MODES[name])
    print(f"{name}: {args.steps} updates x {args.groups} groups x {args.group_size}", flush=True)
    start = time.perf_counter()
    result: RLResult = train_rl(cfg, tasks, env_factory(apps.kit("shopping"), world), apps.kit("shopping").sid)
    wall = time.perf_counter() - start
    h = result.history
    elapsed = h[-1].elapsed_s  # from the controller's start (after Ray and the actors are up)
    return {
        "mode": name, "config": MODES[name], "wall_s": round(wall, 1), "run_s": round(elapsed, 1),
        "steps_per_min": round(60 * len(h) / elapsed, 3),
        "traj_per_s": round(h[-1].generated / elapsed, 3),
        "trained_per_s": round(h[-1].trajectories / elapsed, 3),
        "dropped_zero_var": h[-1].dropped_zero_var, "dropped_stale": h[-1].dropped_stale,
        "response_p50": round(sum(s.response_p50 for s in h) / len(h), 1),
        "response_max": max(s.response_max for s in h),
        "reward_first": h[0].collected_reward, "reward_last": h[-1].collected_reward,
        "reward_curve": [s.collected_reward for s in h], "trained_reward_curve": [s.reward for s in h],
        "step_s": [round(s.step_s, 2) for s in h],
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    base = next((r for r in rows if r["mode"] == "sync"), rows[0])
    head = ("mode", "steps/min", "traj/s", "trained/s", "x sync", "zero-var", "stale", "len p50", "len max",
            "reward first", "reward last")
    print("  ".join(f"{h:>12}" for h in head))
    for r in rows:
        cells = (r["mode"], f"{r['steps_per_min']:.2f}", f"{r['traj_per_s']:.2f}", f"{r['trained_per_s']:.2f}",
                 f"{r['steps_per_min'] / base['steps_per_min']:.2f}", r["dropped_zero_var"], r["dropped_stale"],
                 r["response_p50"], r["response_max"], f"{r['reward_first']:.3f}", f"{r['reward_last']:.3f}")
        print("  ".join(f"{c!s:>12}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 items, 6 updates per mode.")
    parser.add_argument("--work", type=Path, default=ROOT / "runs/bench/rl")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--workers", type=int, default=2, help="Environment workers (the same for every mode).")
    parser.add_argument("--steps", type=int, default=None, help="Updates per mode (default 6 quick, 15 full).")
    parser.add_argument("--groups", type=int, default=4, help="Groups per update.")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128, help="Token cap per action (the tail's end).")
    parser.add_argument("--sft-steps", type=int, default=60, help="SFT steps of the tiny agent (few: long tail).")
    parser.add_argument("--warmup-steps", type=int, default=0,
                        help="RFT steps on the teacher's episodes (default 0: a warm agent stops early: no long tail).")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/rl[-quick].json).")
    args = parser.parse_args()
    args.steps = args.steps or (6 if args.quick else 15)
    items = 300 if args.quick else 2000
    world = ensure_world(args.work, items)
    sid = ensure_sid_dir(world, args.work / f"sid-{items}")
    agent = ensure_tiny_agent(args.work / f"agent-{items}", world, sid, args.sft_steps, threads=1)
    agent = ensure_warm_agent(args.work / f"agent-{items}", agent, world, args.warmup_steps)
    tasks = load_tasks(world, 64)
    rows = [run_mode(name, agent, world, tasks, args) for name in args.modes]
    print_table(rows)
    out = args.out or ROOT / "bench/results" / ("rl-quick.json" if args.quick else "rl.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"items": items, "tasks": len(tasks), "workers": args.workers, "steps": args.steps,
            "groups": args.groups, "group_size": args.group_size, "max_new_tokens": args.max_new_tokens,
            "sft_steps": args.sft_steps, "warmup_steps": args.warmup_steps, "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(), "python": platform.python_version()}
    out.write_text(json.dumps({"meta": meta, "modes": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
