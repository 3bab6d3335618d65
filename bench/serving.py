"""Benchmark serving under closed-loop load on loopback: latency, throughput, budget adherence, batching vs none.

    python bench/serving.py --quick                     # tiny agent, 8 s cells (~3 min on 2 cores; the first
                                                        # run also trains it: 100 SFT steps, 2-6 min)
    python bench/serving.py --quick --models tiny smollm2-135m    # the quick cells for both models
    python bench/serving.py                             # tiny + SmolLM2-135M, 30 s cells
    python bench/serving.py --budget-ms smollm2-135m=60000 --threads 0   # per-model budget, torch's threads

Table printed, JSON written to bench/results/serving.json. What is measured:

1. Inputs, built once and cached under ``--work`` (default ``runs/bench/serving``): a seeded shopping
   world (2,000 items), a quick SID directory without embeddings (level 1 = top category, level 2 = leaf
   mod 8, then the collision suffix), a ``tiny`` agent SFT-trained for ``--sft-steps`` steps, and a
   SmolLM2-135M agent that is only made SID-aware (untrained SID rows: fine for throughput), bf16 where
   the CPU has native bf16 (``dtype="auto"``).
2. For each model x {batching, no batching}: a real uvicorn server (``serving.background``) on a free
   127.0.0.1 port over ``apps.serve.build_server`` with ``ServeConfig(batching=...)`` — ``False`` is the
   baseline that runs one request at a time. One unmeasured warm-up request, then at each concurrency
   (1, 8, 32) a closed loop: that many asyncio workers each POST ``/v1/shopping/sessions`` with the next
   task message of the world and a fixed ``budget_ms``, wait for the reply, and send the next, until the
   cell's ``--seconds`` are up or ``--max-requests`` were sent; a 503 is followed by its ``Retry-After``
   wait (cut at the deadline), as a client would. Between cells, and before the server stops, it drains
   for at most ``--drain-s`` (default 4 x (budget + grace)): a turn answered from the fallback at budget
   + grace keeps running server-side. A cell that started on a busy server is starred.
3. Per cell: requests sent; ``rps`` = 2xx replies per second of cell wall time (first send to last reply);
   p50/p95/p99 client latency of the 2xx replies; ``in_budget`` = share of 2xx replies whose client
   latency is within ``budget_ms``; ``degraded`` = share of 2xx replies with ``degraded: true`` (reasons in
   the JSON); ``503`` = share of requests refused by admission control; ``batch`` = requests per call of
   the wrapped engine, counted as calls start (``BatchingEngine.stats()`` totals per server are in the JSON,
   beside ``/metrics``' batch-size histogram); ``fwd`` = requests per model forward group: the
   HF engine runs each set of equal sampling params (``max_new_tokens`` included) as its own
   ``generate``, so ``fwd`` < ``batch`` means a batch was split into several sequential calls.
   After the table, batching vs no batching per model and concurrency (rps ratio, p95 ratio).
The machine's load average is recorded: on a shared 2-core box the figures swing with it. Torch runs
one thread by default (``--threads``): the load generator shares the process, and with more torch threads
than free cores the tiny model's small ops wait on each other (one 32-token tiny call over a 2,048-token
prompt, load 8: 0.7 s with 1 thread, 5-8 s with 2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import ensure_sid_dir, ensure_tiny_agent, ensure_world  # noqa: E402  (bench/common.py)

from infra.engines.base import Completion, Engine, GenerationRequest  # noqa: E402
from serving.background import BackgroundServer  # noqa: E402
from serving.server import AgentServer, ServeConfig  # noqa: E402

MODELS = ("tiny", "smollm2-135m")
BUDGET_MS = {"tiny": 3000.0, "smollm2-135m": 30_000.0}
"""Default per-request budget by model: the tiny turn takes well under a second idle, a SmolLM2 turn over a
1,800-token prompt several seconds (prefill alone ~3 s on 2 idle cores)."""
ROUTE = "/v1/shopping/sessions"
WARMUP_REQUESTS = 1


# ------------------------------------------------------------------------------------------------ inputs
def ensure_smollm2_agent(work: Path, sid: Path) -> Path:
    """SmolLM2-135M-Instruct with the SID tokens added (rows initialised from labels, not trained)."""
    from harness.agent_dir import save_agent
    from training.models import load_base, make_sid_aware

    out = work / "smollm2-135m-sid"
    if not (out / "agent.json").is_file():
        print(f"making SmolLM2-135M SID-aware -> {out}", flush=True)
        model, tok = load_base("smollm2-135m", dtype="auto")
        save_agent(model, tok, make_sid_aware(model, tok, sid), sid, out)
    return out


def task_messages(world: Path) -> list[str]:
    """The first user message of every task of the world, in file order (what the load generator replays)."""
    texts = []
    with (world / "tasks.jsonl").open() as f:
        for line in f:
            messages = json.loads(line).get("messages") or []
            if messages and messages[0].get("content"):
                texts.append(str(messages[0]["content"])[:4000])
    if not texts:
        raise SystemExit(f"{world}/tasks.jsonl has no user messages to replay")
    return texts


# ------------------------------------------------------------------------------------------------ the server
class ForwardCounter:
    """The engine behind the batcher, counting model forward groups and whether a call is running.

    The HF engine runs each set of requests with equal sampling params (``batch_key``) as its own
    ``generate``, at most ``max_batch_size`` rows each; ``groups`` counts those calls.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.calls = self.requests = self.groups = 0
        self.busy = False
        self.max_rows = int(getattr(engine, "max_batch_size", 1 << 30))

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        sizes = Counter(r.params.batch_key() for r in requests)
        self.calls += 1
        self.requests += len(requests)
        self.groups += sum(math.ceil(n / self.max_rows) for n in sizes.values())
        self.busy = True
        try:
            return self.engine.generate(requests)
        finally:
            self.busy = False

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def weights_version(self) -> int:
        return self.engine.weights_version

    @property
    def tokens_per_second(self) -> float | None:
        return self.engine.tokens_per_second

    @property
    def asleep(self) -> bool:
        return self.engine.asleep

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        self.engine.update_weights(state_dict, version)

    def sleep(self, level: int = 1) -> None:
        self.engine.sleep(level)

    def wake(self) -> None:
        self.engine.wake()


@dataclass
class Served:
    """One live server: its URL, the in-process :class:`AgentServer`, the forward counter and the thread."""

    url: str
    server: AgentServer
    counter: ForwardCounter
    background: BackgroundServer

    def counts(self) -> dict[str, float]:
        """Engine calls, their requests and forward groups (counted as calls start), admission rejections."""
        c = self.counter
        rejected = scrape_metrics(self.url).get("sidekick_admission_rejections_total", 0.0)
        return {"calls": c.calls, "requests": c.requests, "groups": c.groups, "rejected": rejected}

    def idle(self) -> bool:
        front = self.server.front
        return front is not None and front.queue_depth == 0 and not self.counter.busy


def start_server(agent: Path, world: Path, config: ServeConfig) -> Served:
    """``build_server`` + ``create_app`` on a free loopback port; the engine wrapped in a :class:`ForwardCounter`."""
    from apps.serve import build_server
    from serving.app import create_app

    server = build_server(agent, [world], config)
    assert server.front is not None, "the agent did not load a model"
    counter = ForwardCounter(server.front.engine)
    server.front.engine = counter
    background = BackgroundServer(create_app(server), host="127.0.0.1", port=0, start_timeout_s=60.0)
    url = background.start()
    with httpx.Client(base_url=url, timeout=10.0, trust_env=False) as client:
        end = time.monotonic() + 60.0
        while client.get("/readyz").status_code != 200:
            if time.monotonic() > end:
                background.stop()
                raise RuntimeError(f"{url}/readyz did not turn ready within 60 s")
            time.sleep(0.1)
    return Served(url=url, server=server, counter=counter, background=background)


def scrape_metrics(url: str) -> dict[str, float]:
    """The engine batch-size histogram's sum and count and the admission rejections, from ``GET /metrics``."""
    wanted = ("sidekick_engine_batch_size_sum", "sidekick_engine_batch_size_count",
              "sidekick_admission_rejections_total")
    text = httpx.get(url + "/metrics", timeout=10.0, trust_env=False).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            out[name] = float(value)
    return out


def drain(served: Served, limit_s: float) -> float:
    """Wait until no engine work is queued or running (at most ``limit_s``); returns the seconds waited."""
    t0 = time.monotonic()
    quiet = 0  # consecutive idle polls: a turn between two model calls is briefly idle
    while quiet < 5 and time.monotonic() - t0 < limit_s:
        quiet = quiet + 1 if served.idle() else 0
        time.sleep(0.05)
    return time.monotonic() - t0


# ------------------------------------------------------------------------------------------------ the load
@dataclass
class Record:
    """One request as the client saw it (``status`` 0 = no HTTP answer: ``error`` says why)."""

    start_s: float  # since the cell started
    status: int
    client_ms: float
    server_ms: float | None = None
    degraded: bool | None = None
    reason: str | None = None
    error: str | None = None


@dataclass
class Cell:
    """What one closed loop needs: its bounds, the texts to send and the per-request budget."""

    concurrency: int
    seconds: float
    max_requests: int
    budget_ms: float
    timeout_s: float
    messages: list[str]
    sent: int = 0
    offset: int = 0
    records: list[Record] = field(default_factory=list)


async def one_request(client: httpx.AsyncClient, cell: Cell, t0: float, deadline: float) -> None:
    """POST one session creation with the next task message and record what came back.

    A 503 is honoured as a client would: wait its ``Retry-After`` (at most until the cell's deadline).
    """
    text = cell.messages[(cell.offset + cell.sent) % len(cell.messages)]
    cell.sent += 1
    start = time.perf_counter()
    try:
        r = await client.post(ROUTE, json={"message": text, "budget_ms": cell.budget_ms})
    except httpx.HTTPError as e:
        ms = (time.perf_counter() - start) * 1000
        cell.records.append(Record(start - t0, 0, ms, error=type(e).__name__))
        return
    ms = (time.perf_counter() - start) * 1000
    rec = Record(start - t0, r.status_code, ms)
    if r.is_success:
        body = r.json()
        rec.server_ms, rec.degraded, rec.reason = body.get("latency_ms"), body.get("degraded"), body.get("reason")
    elif r.status_code != 503:
        rec.error = r.text[:200]
    cell.records.append(rec)
    if r.status_code == 503:
        retry = r.headers.get("retry-after", "1")
        wait = float(retry) if retry.replace(".", "", 1).isdigit() else 1.0
        await asyncio.sleep(max(0.0, min(wait, deadline - time.perf_counter())))


async def run_cell(url: str, cell: Cell) -> float:
    """``cell.concurrency`` workers in a closed loop until the time or request bound; returns the wall seconds."""
    limits = httpx.Limits(max_connections=cell.concurrency + 2, max_keepalive_connections=cell.concurrency + 2)
    async with httpx.AsyncClient(base_url=url, timeout=cell.timeout_s, limits=limits, trust_env=False) as client:
        t0 = time.perf_counter()
        deadline = t0 + cell.seconds

        async def worker() -> None:
            while time.perf_counter() < deadline and cell.sent < cell.max_requests:
                await one_request(client, cell, t0, deadline)

        await asyncio.gather(*(worker() for _ in range(cell.concurrency)))
        return time.perf_counter() - t0


def warm_up(url: str, messages: Sequence[str], budget_ms: float, timeout_s: float) -> list[int]:
    """A few sequential requests so the first measured one does not pay for lazy init (statuses returned)."""
    with httpx.Client(base_url=url, timeout=timeout_s, trust_env=False) as client:
        return [client.post(ROUTE, json={"message": m, "budget_ms": budget_ms}).status_code
                for m in messages[:WARMUP_REQUESTS]]


# ------------------------------------------------------------------------------------------------ summaries
def summarize(cell: Cell, wall_s: float, before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, Any]:
    """Throughput, latency percentiles, budget adherence, degraded / 503 / error shares and batch sizes."""
    recs = cell.records
    ok = [r for r in recs if 200 <= r.status < 300]
    lat = np.array([r.client_ms for r in ok]) if ok else np.array([np.nan])
    server = [r.server_ms for r in ok if r.server_ms is not None]
    calls, reqs, groups = (after[k] - before[k] for k in ("calls", "requests", "groups"))

    def share(n: int, of: int) -> float:
        return round(100.0 * n / of, 1) if of else float("nan")

    return {
        "concurrency": cell.concurrency, "budget_ms": cell.budget_ms, "requests": len(recs), "ok": len(ok),
        "wall_s": round(wall_s, 2), "rps": round(len(ok) / wall_s, 3) if wall_s > 0 else 0.0,
        "p50_ms": round(float(np.percentile(lat, 50)), 1), "p95_ms": round(float(np.percentile(lat, 95)), 1),
        "p99_ms": round(float(np.percentile(lat, 99)), 1), "max_ms": round(float(np.max(lat)), 1),
        "server_p50_ms": round(float(np.percentile(server, 50)), 1) if server else None,
        "in_budget_pct": share(sum(r.client_ms <= cell.budget_ms for r in ok), len(ok)),
        "degraded_pct": share(sum(bool(r.degraded) for r in ok), len(ok)),
        "degraded_reasons": dict(Counter(r.reason or "?" for r in ok if r.degraded)),
        "rejected_pct": share(sum(r.status == 503 for r in recs), len(recs)),
        "errors": dict(Counter(r.error or str(r.status) for r in recs if r.status == 0 or
                               (r.status >= 400 and r.status != 503))),
        "engine_calls": int(calls), "mean_batch": round(reqs / calls, 2) if calls else 0.0,
        "mean_forward_batch": round(reqs / groups, 2) if groups else 0.0,
        "server_rejections": int(after["rejected"] - before["rejected"]), "load": round(os.getloadavg()[0], 2),
    }


def bench_mode(model: str, agent: Path, world: Path, batching: bool, args: argparse.Namespace,
               messages: list[str]) -> list[dict[str, Any]]:
    """One server (model x batching), every concurrency in turn; the server is stopped at the end."""
    config = ServeConfig(batching=batching, max_batch=args.max_batch, gather_ms=args.gather_ms,
                         **({"max_new_tokens": args.max_new_tokens} if args.max_new_tokens else {}))
    budget = args.budgets[model]
    timeout_s = (budget + config.timeout_grace_ms) / 1000 + 30.0
    drain_s = args.drain_s or 4 * (budget + config.timeout_grace_ms) / 1000
    t0 = time.perf_counter()
    served = start_server(agent, world, config)
    rows: list[dict[str, Any]] = []
    try:
        warm = warm_up(served.url, messages, budget, timeout_s)
        print(f"{model} batching={batching}: up in {time.perf_counter() - t0:.1f} s at {served.url}, "
              f"warm-up statuses {warm}", flush=True)
        for i, conc in enumerate(args.concurrency):
            drained = drain(served, drain_s)
            idle = served.idle()
            cell = Cell(conc, args.seconds, args.max_requests, budget, timeout_s, messages, offset=i * 997)
            before = served.counts()
            wall = asyncio.run(run_cell(served.url, cell))
            row = {"model": model, "batching": batching, **summarize(cell, wall, before, served.counts()),
                   "drained_before_s": round(drained, 1), "idle_at_start": idle}
            rows.append(row)
            print(fmt_row(row), flush=True)
        drained = drain(served, drain_s)
        rows.append({"model": model, "batching": batching, "metrics": scrape_metrics(served.url),
                     "stats": asdict(served.server.front.stats()) if served.server.front else None,
                     "tokens_per_second": served.counter.tokens_per_second, "drained_after_s": round(drained, 1),
                     "elapsed_s": round(time.perf_counter() - t0, 1)})
    finally:
        t1 = time.perf_counter()
        served.background.stop()
        print(f"{model} batching={batching}: stopped in {time.perf_counter() - t1:.1f} s", flush=True)
    return rows


# ------------------------------------------------------------------------------------------------ printing
HEADER = (f"{'model':13} {'batching':>8} {'conc':>4} {'reqs':>5} {'rps':>7} {'p50 ms':>8} {'p95 ms':>8} "
          f"{'p99 ms':>8} {'in_budget':>9} {'degraded':>8} {'503':>6} {'batch':>6} {'fwd':>5} {'load':>5}")


def fmt_row(r: dict[str, Any]) -> str:
    conc = f"{r['concurrency']}{'' if r.get('idle_at_start', True) else '*'}"
    return (f"{r['model']:13} {('yes' if r['batching'] else 'no'):>8} {conc:>4} {r['requests']:>5} "
            f"{r['rps']:>7.2f} {r['p50_ms']:>8.0f} {r['p95_ms']:>8.0f} {r['p99_ms']:>8.0f} "
            f"{r['in_budget_pct']:>8.1f}% {r['degraded_pct']:>7.1f}% {r['rejected_pct']:>5.1f}% "
            f"{r['mean_batch']:>6.2f} {r['mean_forward_batch']:>5.2f} {r['load']:>5.1f}")


def print_tables(rows: list[dict[str, Any]]) -> None:
    """The cells, then batching vs no batching (rps and p95 ratios) per model and concurrency."""
    cells = [r for r in rows if "rps" in r]
    print("\n" + HEADER)
    for r in cells:
        print(fmt_row(r))
    if not all(r.get("idle_at_start", True) for r in cells):
        print("* the server was still busy with earlier turns when the cell started (raise --drain-s)")
    print(f"\n{'model':13} {'conc':>4} {'rps batch/none':>15} {'p95 batch/none':>15} {'in_budget batch/none':>21}")
    for model in dict.fromkeys(r["model"] for r in cells):
        for conc in dict.fromkeys(r["concurrency"] for r in cells if r["model"] == model):
            pair = {r["batching"]: r for r in cells if r["model"] == model and r["concurrency"] == conc}
            if len(pair) < 2:
                continue
            b, n = pair[True], pair[False]
            rps = f"{b['rps'] / n['rps']:.2f}x" if n["rps"] else "n/a"
            p95 = f"{b['p95_ms'] / n['p95_ms']:.2f}x" if n["p95_ms"] and not math.isnan(n["p95_ms"]) else "n/a"
            print(f"{model:13} {conc:>4} {rps:>15} {p95:>15} "
                  f"{b['in_budget_pct']:>9.1f}% / {n['in_budget_pct']:.1f}%")


# ------------------------------------------------------------------------------------------------ main
def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="8 s cells, at most 300 requests each; tiny only "
                        "unless --models is given")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=None,
                        help="models to serve (default: both; --quick: tiny)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32], help="closed-loop clients")
    parser.add_argument("--seconds", type=float, default=0, help="seconds per cell (default 30; --quick 8)")
    parser.add_argument("--max-requests", type=int, default=0, help="requests per cell at most (default 3000; "
                        "--quick 300)")
    parser.add_argument("--budget-ms", nargs="*", default=[], metavar="MODEL=MS",
                        help=f"per-request budget by model, ms (default {BUDGET_MS})")
    parser.add_argument("--max-batch", type=int, default=ServeConfig().max_batch, help="ServeConfig.max_batch")
    parser.add_argument("--gather-ms", type=float, default=ServeConfig().gather_ms, help="ServeConfig.gather_ms")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="ServeConfig.max_new_tokens (0 = its default)")
    parser.add_argument("--drain-s", type=float, default=0, help="longest wait for the server to go idle "
                        "between cells, s (0 = 4 x (budget + grace))")
    parser.add_argument("--items", type=int, default=2000, help="listings in the benchmark world")
    parser.add_argument("--sft-steps", type=int, default=100, help="SFT steps of the tiny agent (0 = SID-aware only)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1; 0 = torch's default)")
    parser.add_argument("--work", type=Path, default=ROOT / "runs/bench/serving", help="cached inputs")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/serving.json", help="results file")
    args = parser.parse_args()
    args.models = args.models or (["tiny"] if args.quick else list(MODELS))
    args.seconds = args.seconds or (8.0 if args.quick else 30.0)
    args.max_requests = args.max_requests or (300 if args.quick else 3000)
    args.budgets = dict(BUDGET_MS)
    for spec in args.budget_ms:
        name, _, ms = spec.partition("=")
        if name not in MODELS or not ms.replace(".", "", 1).isdigit() or float(ms) <= 0:
            parser.error(f"--budget-ms {spec!r}: expected MODEL=MS with MODEL in {MODELS} and MS > 0")
        args.budgets[name] = float(ms)
    return args


def main() -> None:
    args = parse_args()
    t0 = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    world = ensure_world(args.work, args.items)
    sid = ensure_sid_dir(world, args.work / f"sid-{args.items}")
    agents = {"tiny": lambda: ensure_tiny_agent(args.work, world, sid, args.sft_steps, args.threads),
              "smollm2-135m": lambda: ensure_smollm2_agent(args.work, sid)}
    messages = task_messages(world)
    print(f"models {args.models}, concurrency {args.concurrency}, {args.seconds:g} s / {args.max_requests} requests "
          f"per cell, budgets {({m: args.budgets[m] for m in args.models})} ms, max_batch {args.max_batch}, "
          f"gather {args.gather_ms} ms, torch threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.1f}",
          flush=True)
    rows: list[dict[str, Any]] = []
    for model in args.models:
        agent = agents[model]()
        for batching in (True, False):
            rows += bench_mode(model, agent, world, batching, args, messages)
    print_tables(rows)
    meta = {"args": {k: str(v) for k, v in vars(args).items()}, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "load_end": os.getloadavg(), "world": str(world), "messages": len(messages),
            "elapsed_s": round(time.perf_counter() - t0, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2, default=str))
    print(f"\nwrote {args.out} ({meta['elapsed_s']:.0f} s in all)", flush=True)
    leave_orphans(10.0)


def leave_orphans(wait_s: float) -> None:
    """Exit even if turn threads are still finishing orphaned turns (the servers are already stopped).

    A turn answered from the fallback at budget + grace keeps computing in a (non-daemon) worker thread;
    Python would wait for every such thread at exit, for as long as their last engine call takes.
    """
    end = time.monotonic() + wait_s
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join(max(0.0, end - time.monotonic()))
    left = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon
            and t.is_alive()]
    if left:
        print(f"{len(left)} server threads still finishing orphaned turns ({', '.join(left[:4])}); "
              "exiting without waiting for them", flush=True)
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
