"""Benchmark serving capacity lent to RL rollout: one RL run with a lending server, one without, same bursty
serving trace against the same server in both.

    python bench/lending.py --quick     # 300-item world, 6 updates of 128 episodes per run (~5 min on 2 cores;
                                        # the first run also trains two tiny agents)
    python bench/lending.py             # 16 updates per run
    (both: two pairs of runs, in the order alone, lending, lending, alone)

What runs, on this 2-core machine, each side with its share of threads:

* a ``sidekick serve`` process (``--lend``, API key, ``torch_threads: 1``): the tiny agent over the world,
  serving the shopping app; the bench's load generator replays a seeded **bursty trace** against it while
  RL trains: idle stretches of 2-4 s, then bursts of 1-2.5 s with ``--concurrency`` clients in a closed loop,
  each turn with a ``--budget-ms`` budget (the trace loops until the RL run ends);
* an RL run (``sync``, one dedicated environment worker with one torch thread, the trainer with one):
  ``alone`` with no lenders, ``lending`` with the server in ``lenders`` (its idle core runs rollout).

Per run: rollout throughput (trajectories per second of the RL loop, setup and Ray start excluded), the
share of trajectories generated on lent capacity, episodes handed back and cut rollout calls, and what the
serving clients saw: replies, SLO violations (a reply later than its budget, a 5xx or a hang), p50 / p99.
The last line printed is JSON with ``rollout_speedup`` (lending / alone), ``slo_violations_lending``,
``slo_violations_alone`` and the p99s; the whole result goes to bench/results/lending[-quick].json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import ensure_sid_dir, ensure_tiny_agent, ensure_world  # noqa: E402  (bench/common.py)

API_KEY = "bench-lending"
ROUTE = "/v1/shopping/sessions"


# ------------------------------------------------------------------------------------------------ the server
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``sidekick serve --lend`` in a process of its own, one torch thread."""

    def __init__(self, agent: Path, world: Path, work: Path) -> None:
        config = work / "serve-lending.yaml"
        config.write_text("torch_threads: 1\n")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        exe = Path(sys.executable).with_name("sidekick")
        cmd = [str(exe), "serve", str(agent), "--world", str(world), "--port", str(self.port), "--config",
               str(config), "--api-key", API_KEY, "--lend"]
        self.err = work / "server.err"
        print(f"[server] {' '.join(cmd)}", flush=True)
        with self.err.open("wb") as fe:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fe, stdin=subprocess.DEVNULL, cwd=ROOT)
        end = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited ({self.proc.returncode}); see {self.err}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > end:
                self.stop()
                raise SystemExit(f"the server was not ready within 180 s; see {self.err}")
            time.sleep(0.25)

    def lending(self) -> dict[str, Any]:
        out: dict[str, Any] = httpx.get(self.url + "/admin/lending", headers={"X-API-Key": API_KEY}, timeout=10).json()
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# ------------------------------------------------------------------------------------------------ the trace
@dataclass
class Reply:
    at_s: float
    status: int
    ms: float
    hang: bool = False


@dataclass
class Trace:
    """Seeded bursts, looped until ``stop`` is set; every reply recorded."""

    url: str
    messages: list[str]
    budget_ms: float
    concurrency: int
    seed: int
    replies: list[Reply] = field(default_factory=list)
    bursts: list[tuple[float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def schedule(self) -> list[tuple[float, float]]:
        """(idle seconds, burst seconds) pairs, the same for every run of a seed."""
        rng = random.Random(self.seed)
        return [(rng.uniform(2.0, 4.0), rng.uniform(1.0, 2.5)) for _ in range(64)]

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        start = time.perf_counter()
        rng = random.Random(self.seed + 1)
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(base_url=self.url, limits=limits, trust_env=False) as client:
            while not self.stop.is_set():
                for idle, burst in self.schedule():
                    if await self._sleep(idle):
                        return
                    b0 = time.perf_counter() - start
                    end = time.perf_counter() + burst
                    await asyncio.gather(*(self._client(client, end, start, rng) for _ in range(self.concurrency)))
                    self.bursts.append((b0, time.perf_counter() - start))
                    if self.stop.is_set():
                        return

    async def _sleep(self, seconds: float) -> bool:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            if self.stop.is_set():
                return True
            await asyncio.sleep(0.05)
        return False

    async def _client(self, client: httpx.AsyncClient, end: float, start: float, rng: random.Random) -> None:
        while time.perf_counter() < end and not self.stop.is_set():
            text = rng.choice(self.messages)
            t0 = time.perf_counter()
            try:
                async with asyncio.timeout(self.budget_ms / 1000.0 + 10.0):
                    r = await client.post(ROUTE, json={"message": text, "budget_ms": self.budget_ms})
                self.replies.append(Reply(t0 - start, r.status_code, (time.perf_counter() - t0) * 1000))
            except (TimeoutError, httpx.HTTPError):
                self.replies.append(Reply(t0 - start, 0, (time.perf_counter() - t0) * 1000, hang=True))


def serving_summary(trace: Trace) -> dict[str, Any]:
    ms = [r.ms for r in trace.replies if 200 <= r.status < 300]
    late = sum(200 <= r.status < 300 and r.ms > trace.budget_ms for r in trace.replies)
    failed = sum(not 200 <= r.status < 300 for r in trace.replies)
    n = len(trace.replies)
    return {"replies": n, "ok": len(ms), "late": late, "failed": failed, "slo_violations": late + failed,
            "violation_rate": (late + failed) / n if n else None,
            "p50_ms": statistics.median(ms) if ms else None,
            "p99_ms": sorted(ms)[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else None,
            "bursts": len(trace.bursts)}


# ------------------------------------------------------------------------------------------------ one RL run
def rl_run(name: str, agent: Path, world: Path, server: Server, work: Path, args: argparse.Namespace,
           messages: list[str], lend: bool) -> dict[str, Any]:
    from apps import kit
    from apps.evaluate import load_tasks
    from apps.rl import env_factory
    from training.rl.controller import RLConfig, train_rl
    from training.rl.rollout import RolloutSettings

    shop = kit("shopping")
    tasks = [t for t in load_tasks(world) if t.kind != "bundle"][:200]
    out = work / f"rl-{name}"
    cfg = RLConfig(agent=agent, out=out, world=world, app="shopping", steps=args.steps, groups_per_step=args.groups,
                   group_size=4, groups_per_call=args.groups_per_call, env_workers=args.env_workers,
                   worker_threads=1, trainer_threads=1, mode="sync",
                   dynamic_sampling=False, save_every=10_000, seed=args.seed, lenders=[server.url] if lend else [],
                   rollout=RolloutSettings(max_new_tokens=args.max_new_tokens, max_turns=2))
    os.environ[cfg.lender_api_key_env] = API_KEY
    before = server.lending()
    trace = Trace(server.url, messages, args.budget_ms, args.concurrency, args.seed)
    thread = threading.Thread(target=trace.run, name="trace", daemon=True)
    print(f"[{name}] RL: {args.steps} updates x {4 * args.groups} episodes, lenders={cfg.lenders}", flush=True)
    started = threading.Event()

    def progress(s: Any) -> None:
        if not started.is_set():
            started.set()
        print(f"[{name}] step {s.step}: {s.step_s:.1f} s, lent {s.lent}, handed back {s.handed_back}", flush=True)

    thread.start()
    t0 = time.perf_counter()
    try:
        result = train_rl(cfg, tasks, env_factory(shop, world), shop.sid, progress=progress)
    finally:
        trace.stop.set()
        thread.join(30)
    wall = time.perf_counter() - t0
    after = server.lending()
    first, last = result.history[0], result.history[-1]
    counted = result.history[1:]  # the first update also warms the engines: not counted
    loop_s = sum(h.step_s for h in counted)
    rollout_s = sum(h.step_s - h.train_s for h in counted)  # sync: an update's wall time less the trainer's
    trajectories = last.generated - first.generated
    return {"run": name, "lending": lend, "steps": result.steps, "trajectories": trajectories,
            "loop_s": round(loop_s, 2), "rollout_s": round(rollout_s, 2), "wall_s": round(wall, 1),
            "first_step_s": round(first.step_s, 2), "rollout_traj_per_s": trajectories / rollout_s,
            "loop_traj_per_s": trajectories / loop_s, "lent": last.lent - first.lent,
            "handed_back": last.handed_back,
            "cut_calls": after["preemptions"]["cut"] - before["preemptions"]["cut"],
            "pauses": after["preemptions"]["pause"] - before["preemptions"]["pause"],
            "serving": serving_summary(trace)}


# ------------------------------------------------------------------------------------------------ report
def fmt(v: Any, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def print_table(runs: list[dict[str, Any]]) -> None:
    print()
    print("| run | rollout traj/s | rollout s | RL loop traj/s | lent | handed back | cut calls | replies | "
          "SLO violations | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        s = r["serving"]
        print(f"| {r['run']} | {r['rollout_traj_per_s']:.2f} | {r['rollout_s']:.1f} | {r['loop_traj_per_s']:.2f} | "
              f"{r['lent']} / "
              f"{r['trajectories']} | {r['handed_back']} | {r['cut_calls']} | {s['replies']} | "
              f"{s['slo_violations']} ({fmt(100 * (s['violation_rate'] or 0), '.1f')} %) | {fmt(s['p50_ms'])} | "
              f"{fmt(s['p99_ms'])} |")


def headline(runs: list[dict[str, Any]]) -> dict[str, Any]:
    alone = [r for r in runs if not r["lending"]]
    lent = [r for r in runs if r["lending"]]

    def mean(rs: list[dict[str, Any]], key: str) -> float:
        return statistics.mean(r[key] for r in rs)

    def total(rs: list[dict[str, Any]], key: str) -> int:
        return sum(r["serving"][key] for r in rs)

    def p99(rs: list[dict[str, Any]]) -> float | None:
        vals = [r["serving"]["p99_ms"] for r in rs if r["serving"]["p99_ms"] is not None]
        return round(max(vals), 1) if vals else None

    return {"rollout_speedup": round(mean(lent, "rollout_traj_per_s") / mean(alone, "rollout_traj_per_s"), 3),
            "rl_loop_speedup": round(mean(lent, "loop_traj_per_s") / mean(alone, "loop_traj_per_s"), 3),
            "slo_violations_lending": total(lent, "slo_violations"), "slo_violations_alone": total(alone,
                                                                                                "slo_violations"),
            "replies_lending": total(lent, "replies"), "replies_alone": total(alone, "replies"),
            "serving_p99_ms_lending": p99(lent), "serving_p99_ms_alone": p99(alone),
            "lent_share": round(sum(r["lent"] for r in lent) / max(1, sum(r["trajectories"] for r in lent)), 3)}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="6 updates per run (same two pairs of runs)")
    p.add_argument("--steps", type=int, default=None, help="updates per RL run (default 6 quick, 16 full); the "
                   "first is the engines' warm-up, not counted")
    p.add_argument("--groups", type=int, default=32, help="groups of 4 episodes per update (128 episodes: four "
                   "engine batches of 32 for one worker)")
    p.add_argument("--groups-per-call", type=int, default=8, help="groups a worker (or lender) runs in one call "
                   "(8 x 4 = the environment worker's engine batch of 32)")
    p.add_argument("--env-workers", type=int, default=1, help="dedicated environment workers")
    p.add_argument("--pairs", type=int, default=2, help="pairs of runs, in the order alone, lending, lending, "
                   "alone, ...")
    p.add_argument("--items", type=int, default=300)
    p.add_argument("--sft-steps", type=int, default=40, help="SFT steps of the served tiny agent")
    p.add_argument("--rl-sft-steps", type=int, default=5, help="SFT steps of the tiny agent RL starts from (few: "
                   "it rarely stops, so its episodes are long, as an RL policy's early rollouts are)")
    p.add_argument("--max-new-tokens", type=int, default=96, help="token cap of one rollout action")
    p.add_argument("--budget-ms", type=float, default=800.0)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", type=Path, default=ROOT / "runs/bench/lending")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    args.steps = args.steps or (6 if args.quick else 16)
    return args


def main() -> None:
    args = parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    world = ensure_world(args.work, args.items)
    sid = ensure_sid_dir(world, args.work / "sid")
    agent = ensure_tiny_agent(args.work, world, sid, args.sft_steps, threads=2)
    policy = ensure_tiny_agent(args.work, world, sid, args.rl_sft_steps, threads=2)
    messages = [json.loads(line)["messages"][0]["content"] for line in (world / "tasks.jsonl").open()]
    server = Server(agent, world, args.work)
    runs: list[dict[str, Any]] = []
    try:
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            for lend in order:
                name = f"{'lending' if lend else 'alone'}-{pair + 1}"
                runs.append(rl_run(name, policy, world, server, args.work, args, messages, lend))
    finally:
        server.stop()
    print_table(runs)
    head = headline(runs)
    out = args.out or ROOT / "bench/results" / f"lending{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                               "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                               "runs": runs, "headline": head}, indent=1))
    print(f"\nwrote {out}")
    print(json.dumps(head))


if __name__ == "__main__":
    main()
