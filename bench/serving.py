"""Benchmark serving latency budgets under closed-loop load: budget adherence, goodput, 503s, TTFT, batching vs none.

    python bench/serving.py --quick      # tiny agent on a seeded 2,000-item world, 4 s cells (~4 min on 2 cores;
                                         # the first run also trains the tiny agent: 100 SFT steps, 1-6 min)
    python bench/serving.py --quick --agent runs/demo/cascade-quick/final --world runs/demo/world
                                         # the demo agent (the realistic choice; what the README reports)
    python bench/serving.py              # 12 s cells
    python bench/serving.py --quick --concurrency 1 32 --budgets 800 --modes batching none

Tables printed, JSON written to bench/results/serving.json; the last line printed is one JSON object: goodput
ratio at concurrency 32 per budget, the worst within-budget share, late / 5xx / hang totals, TTFT p50, and the
connection errors plus cut streams. The acceptance it checks: at every concurrency and budget >= 99 % of 2xx
replies arrive within budget and none later than budget + 50 ms; what cannot be served in time is a 503 with
Retry-After at once or a degraded reply with its reason; never another 5xx, never a hang; goodput at concurrency
32 with batching >= 3x without. What is measured:

1. The server runs in its own process exactly as a user runs it: ``sidekick serve AGENT --world WORLD --port P
   --config CFG.yaml`` on a free loopback port, with a YAML holding only ``batching: true|false`` (plus
   ``max_batch`` when ``--max-batch`` is given): everything else is ``ServeConfig``'s default, torch's threads
   included. Two servers in turn: ``batching`` (on), then ``none`` (the baseline, one request at a time). Each is
   ready when ``GET /readyz`` is 200 (at most 120 s), warmed by 3 unmeasured requests, and stopped with SIGINT
   (SIGKILL 10 s later). Without ``--agent`` / ``--world`` the inputs are built once and cached under ``--work``:
   a seeded 2,000-item shopping world, quick SIDs and a tiny agent SFT-trained for ``--sft-steps``.
2. This process is the load generator (asyncio + httpx, one connection per worker). A cell is one concurrency x
   budget: that many workers in a closed loop each ``POST /v1/shopping/sessions`` with ``{"message": next task
   text, "budget_ms": B}`` (the first user message of each task of the world, cycled; each worker starts at its
   own offset), wait for the reply and send the next, until the cell's seconds are up. A 503 is followed by its
   ``Retry-After`` wait (cut at the cell's end), as a well-behaved client does. The client times out at
   B/1000 + 10 s: a timeout is a hang. 1 s pause between cells.
3. Per cell, on the client's clock: ``within`` = share of 2xx replies whose latency <= B; ``late>50`` = 2xx
   replies later than B + 50 ms (and ``late_max_ms``); p50/p95/p99 of 2xx latency (and the server's own
   ``latency_ms`` p99); ``goodput`` = 2xx replies within B that are *not* degraded, per second of cell wall time
   (the model really answered, in time); ``answered/s`` = all 2xx within B per second (fallback answers
   included); ``503`` = share of requests refused (503s without Retry-After counted, their latency p99 shows
   whether they came at once); ``degraded`` = share of 2xx with ``degraded: true`` and the count of each
   ``reason``; other 4xx / 5xx, hangs and connection errors (the first one's repr). The load average and the
   engine queue depth at each cell's start are recorded: a timed-out turn keeps running server-side after its
   fallback reply, so a cell can start on a busy server. The load generator shares the machine's cores with the
   server: on a small box, compare the client's p99 with the server's ``latency_ms`` p99 (time before the
   handler starts, e.g. a blocked event loop, shows only on the client's clock).
4. TTFT, per server: ``POST /v1/chat/completions`` streaming (``max_tokens`` 48, temperature 0) at concurrency 1
   and 8. TTFT = send to the first SSE chunk with non-empty ``delta.content``; also the total time, content
   chunks per reply, characters per chunk, the first-to-last content chunk spread and the mean gap between a
   reply's content chunks. A server that streams as it decodes sends a chunk per token or two (a few characters)
   one decode step apart (>= 0.5 ms on any hardware); one that sends the finished message cut into pieces sends
   them back to back (gap ~0, TTFT ~= total): ``streaming`` says which, from the median gap.
5. Batching / none goodput ratio per budget and concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import ensure_sid_dir, ensure_tiny_agent, ensure_world  # noqa: E402  (bench/common.py)

ROUTE = "/v1/shopping/sessions"
CHAT_ROUTE = "/v1/chat/completions"
MODEL_NAME = "sidekick"  # ServeConfig.model_name's default
MODES = {"batching": True, "none": False}
"""Server name -> ``batching`` in its YAML."""
LATE_SLACK_MS = 50.0
HANG_SLACK_S = 10.0
WARMUP_REQUESTS = 3
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
CELL_PAUSE_S = 1.0
TTFT_MAX_TOKENS = 48
TTFT_TIMEOUT_S = 70.0
"""The chat route admits against a 60 s default budget and has no fallback: 60 s + the hang slack."""
DECODE_GAP_MS = 0.5
"""Median gap between a reply's content chunks at or above which they count as sent as decoded (a decode step
takes longer than this; pieces of a finished message are written back to back)."""


# ------------------------------------------------------------------------------------------------ inputs
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


def free_port() -> int:
    """A loopback port free right now (bound to port 0 and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sidekick_exe() -> str:
    """The ``sidekick`` console script beside this interpreter (the venv's), else the one on PATH."""
    for candidate in (Path(sys.executable).with_name("sidekick"), ROOT / ".venv/bin/sidekick"):
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("sidekick")
    if found is None:
        raise SystemExit("no `sidekick` executable found: install the project (pip install -e .) first")
    return found


# ------------------------------------------------------------------------------------------------ the server
@dataclass
class ServerProcess:
    """One ``sidekick serve`` process: its URL and the files its stdout and stderr go to."""

    mode: str
    url: str
    proc: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path
    started_s: float = 0.0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr_tail(self, lines: int = 30) -> str:
        text = self.stderr.read_text(errors="replace") if self.stderr.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> dict[str, Any]:
        """SIGINT, then SIGKILL after 10 s; returns the exit code, whether it was killed and the seconds taken."""
        t0 = time.perf_counter()
        killed = False
        if self.alive():
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                killed = True
                self.proc.kill()
                self.proc.wait()
        return {"returncode": self.proc.returncode, "killed": killed, "stop_s": round(time.perf_counter() - t0, 1)}


def write_config(work: Path, mode: str, max_batch: int | None, settings: Sequence[str] = ()) -> Path:
    """The server's YAML: ``batching`` (and ``max_batch`` when asked, and ``--set KEY=VALUE`` lines); the rest is
    ServeConfig's default."""
    path = work / f"serve-{mode}.yaml"
    lines = [f"batching: {'true' if MODES[mode] else 'false'}"]
    if max_batch is not None:
        lines.append(f"max_batch: {max_batch}")
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep:
            raise SystemExit(f"--set {setting!r}: expected KEY=VALUE (a ServeConfig field)")
        lines.append(f"{key.strip()}: {value.strip()}")
    path.write_text("\n".join(lines) + "\n")
    return path


def start_server(agent: Path, world: Path, mode: str, work: Path, max_batch: int | None,
                 settings: Sequence[str] = ()) -> ServerProcess:
    """Start ``sidekick serve`` on a free port and wait for ``/readyz``; exit non-zero if it dies or stays unready."""
    config = write_config(work, mode, max_batch, settings)
    port = free_port()
    cmd = [sidekick_exe(), "serve", str(agent), "--world", str(world), "--port", str(port), "--config", str(config)]
    t0 = time.perf_counter()
    server = spawn(mode, cmd, port, work, f"server-{mode}")
    server.started_s = round(time.perf_counter() - t0, 1)
    return server


def spawn(name: str, cmd: list[str], port: int, work: Path, stem: str) -> ServerProcess:
    """Run a server command (output in ``work/stem.out|err``) and wait for ``/readyz`` on ``port``; stopped on
    failure."""
    out, err = work / f"{stem}.out", work / f"{stem}.err"
    print(f"[{name}] {' '.join(cmd)}", flush=True)
    with out.open("wb") as fo, err.open("wb") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, cwd=ROOT)
    server = ServerProcess(name, f"http://127.0.0.1:{port}", proc, out, err)
    try:
        wait_ready(server)
    except BaseException:
        server.stop()
        raise
    return server


def wait_ready(server: ServerProcess) -> None:
    end = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(base_url=server.url, timeout=5.0, trust_env=False) as client:
        while True:
            if not server.alive():
                die(server, f"exited with code {server.proc.returncode} before it was ready")
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # not listening yet
            if time.monotonic() > end:
                die(server, f"/readyz was not 200 within {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.25)


def die(server: ServerProcess, why: str) -> None:
    """Print the server's stderr tail and exit non-zero (the caller's ``finally`` stops the process)."""
    print(f"[{server.mode}] the server {why}; its stderr ({server.stderr}) ends with:\n{server.stderr_tail()}",
          file=sys.stderr, flush=True)
    raise SystemExit(1)


def queue_depth(url: str) -> float | None:
    """The engine queue depth gauge from ``GET /metrics`` (None when it cannot be read)."""
    try:
        text = httpx.get(url + "/metrics", timeout=5.0, trust_env=False).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "sidekick_engine_queue_depth":
            return float(value)
    return None


# ------------------------------------------------------------------------------------------------ the load
@dataclass
class Record:
    """One session request as the client saw it (``status`` 0 = no HTTP answer: ``hang`` or ``error``)."""

    status: int
    ms: float
    server_ms: float | None = None
    degraded: bool = False
    reason: str | None = None
    retry_after: str | None = None
    hang: bool = False
    error: str | None = None


@dataclass
class Cell:
    """One closed loop: its concurrency, budget and length, the texts to send and what came back."""

    concurrency: int
    budget_ms: float
    seconds: float
    messages: list[str]
    records: list[Record] = field(default_factory=list)

    @property
    def timeout_s(self) -> float:
        return self.budget_ms / 1000.0 + HANG_SLACK_S


def elapsed_ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


async def session_request(client: httpx.AsyncClient, text: str, budget_ms: float, timeout_s: float) -> Record:
    """POST one session with its first message and read the reply (latency on the client's clock)."""
    start = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            r = await client.post(ROUTE, json={"message": text, "budget_ms": budget_ms})
    except (TimeoutError, httpx.TimeoutException) as e:
        return Record(0, elapsed_ms(start), hang=True, error=repr(e))
    except httpx.HTTPError as e:
        return Record(0, elapsed_ms(start), error=repr(e))
    rec = Record(r.status_code, elapsed_ms(start))
    if r.is_success:
        try:
            body = r.json()
            rec.server_ms, rec.reason = body.get("latency_ms"), body.get("reason")
            rec.degraded = bool(body.get("degraded"))
        except ValueError:
            rec.error = f"{r.status_code} with a body that is not JSON: {r.text[:200]!r}"
    elif r.status_code == 503:
        rec.retry_after = r.headers.get("retry-after")
    else:
        rec.error = f"{r.status_code}: {r.text[:200]}"
    return rec


async def retry_wait(retry_after: str | None, deadline: float) -> None:
    """Wait a 503's ``Retry-After`` seconds (1 s when it is missing or not a number), at most until ``deadline``."""
    try:
        wait = float(retry_after) if retry_after is not None else 1.0
    except ValueError:
        wait = 1.0
    await asyncio.sleep(max(0.0, min(wait, deadline - time.perf_counter())))


def worker_client(url: str, timeout_s: float) -> httpx.AsyncClient:
    """One connection per worker, no proxies from the environment."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits, trust_env=False)


async def run_cell(url: str, cell: Cell) -> float:
    """``cell.concurrency`` workers in a closed loop for ``cell.seconds``; returns the wall seconds (to last reply).

    The workers' clients are made and connected (``GET /healthz``) before the clock starts: making an httpx
    client costs the load generator ~20 ms of CPU (an SSL context), which would otherwise delay the first
    requests of a cell on the client's side and count against the server."""
    stride = max(1, len(cell.messages) // cell.concurrency)
    clients = [worker_client(url, cell.timeout_s) for _ in range(cell.concurrency)]
    await asyncio.gather(*(c.get("/healthz") for c in clients))
    t0 = time.perf_counter()
    deadline = t0 + cell.seconds

    async def worker(w: int, client: httpx.AsyncClient) -> None:
        i = w * stride
        while time.perf_counter() < deadline:
            text = cell.messages[i % len(cell.messages)]
            i += 1
            rec = await session_request(client, text, cell.budget_ms, cell.timeout_s)
            cell.records.append(rec)
            if rec.status == 503:
                await retry_wait(rec.retry_after, deadline)

    try:
        await asyncio.gather(*(worker(w, c) for w, c in enumerate(clients)))
        return time.perf_counter() - t0
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


@dataclass
class ChatRecord:
    """One streamed chat completion: status, TTFT, total time, content chunks and their spread."""

    status: int
    total_ms: float
    ttft_ms: float | None = None
    last_ms: float | None = None  # when the last content chunk came
    chunks: int = 0
    chars: int = 0
    done: bool = False  # saw ``data: [DONE]``
    retry_after: str | None = None
    hang: bool = False
    error: str | None = None


async def read_stream(r: httpx.Response, rec: ChatRecord, start: float) -> None:
    """Parse the SSE lines (``data: {...}``, ``data: [DONE]``) into ``rec``'s chunk counts and times."""
    async for line in r.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            rec.done = True
            return
        choices = json.loads(data).get("choices") or [{}]
        content = (choices[0].get("delta") or {}).get("content")
        if content:
            rec.last_ms = elapsed_ms(start)
            rec.ttft_ms = rec.ttft_ms if rec.ttft_ms is not None else rec.last_ms
            rec.chunks += 1
            rec.chars += len(content)


async def chat_request(client: httpx.AsyncClient, text: str) -> ChatRecord:
    """One streamed ``/v1/chat/completions`` with the raw model, timed chunk by chunk."""
    payload = {"model": MODEL_NAME, "stream": True, "max_tokens": TTFT_MAX_TOKENS, "temperature": 0,
               "messages": [{"role": "user", "content": text}]}
    start = time.perf_counter()
    rec = ChatRecord(0, 0.0)
    try:
        async with asyncio.timeout(TTFT_TIMEOUT_S), client.stream("POST", CHAT_ROUTE, json=payload) as r:
            rec.status = r.status_code
            if r.status_code == 200:
                await read_stream(r, rec, start)
            else:
                rec.retry_after = r.headers.get("retry-after")
                body = await r.aread()
                rec.error = None if r.status_code == 503 else f"{r.status_code}: {body[:200].decode(errors='replace')}"
    except (TimeoutError, httpx.TimeoutException) as e:
        rec.hang, rec.error = True, repr(e)
    except httpx.HTTPError as e:
        rec.error = repr(e)
    except (ValueError, AttributeError, IndexError) as e:  # a chunk that is not the JSON OpenAI sends
        rec.error = f"bad chunk: {e!r}"
    rec.total_ms = elapsed_ms(start)
    return rec


async def run_ttft_cell(url: str, concurrency: int, seconds: float, messages: list[str]) -> tuple[list[ChatRecord],
                                                                                                   float]:
    """Closed loop of streamed chat completions; returns the records and the wall seconds."""
    records: list[ChatRecord] = []
    stride = max(1, len(messages) // concurrency)
    clients = [worker_client(url, TTFT_TIMEOUT_S) for _ in range(concurrency)]  # made before the clock, as run_cell
    await asyncio.gather(*(c.get("/healthz") for c in clients))
    t0 = time.perf_counter()
    deadline = t0 + seconds

    async def worker(w: int, client: httpx.AsyncClient) -> None:
        i = w * stride
        while time.perf_counter() < deadline:
            rec = await chat_request(client, messages[i % len(messages)])
            i += 1
            records.append(rec)
            if rec.status == 503:
                await retry_wait(rec.retry_after, deadline)

    try:
        await asyncio.gather(*(worker(w, c) for w, c in enumerate(clients)))
        return records, time.perf_counter() - t0
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


def warm_up(url: str, messages: Sequence[str], budget_ms: float) -> list[int]:
    """A few unmeasured sequential requests so the first measured one does not pay for lazy init."""
    timeout = budget_ms / 1000.0 + HANG_SLACK_S
    statuses = []
    with httpx.Client(base_url=url, timeout=timeout, trust_env=False) as client:
        for text in messages[:WARMUP_REQUESTS]:
            try:
                statuses.append(client.post(ROUTE, json={"message": text, "budget_ms": budget_ms}).status_code)
            except httpx.HTTPError:
                statuses.append(0)
    return statuses


# ------------------------------------------------------------------------------------------------ summaries
def pct(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if len(values) else None


def share(n: int, of: int) -> float | None:
    """Percent, or None when there is nothing to take a share of."""
    return round(100.0 * n / of, 2) if of else None


def http_outcomes(statuses: Sequence[int], hangs: int, errors: Sequence[str]) -> dict[str, Any]:
    """Counts every cell reports alike: 503 share, other 4xx / 5xx, hangs, connection errors (the first's repr)."""
    return {"rejected_pct": share(sum(s == 503 for s in statuses), len(statuses)),
            "other_5xx": sum(500 <= s < 600 and s != 503 for s in statuses),
            "other_4xx": sum(400 <= s < 500 for s in statuses), "hangs": hangs,
            "errors": len(errors), "first_error": errors[0] if errors else None,
            "statuses": {str(k): v for k, v in sorted(Counter(statuses).items())}}


def summarize_cell(cell: Cell, wall_s: float) -> dict[str, Any]:
    """Budget adherence, latency percentiles, goodput, 503 / degraded shares and failures of one cell."""
    recs, budget = cell.records, cell.budget_ms
    ok = [r for r in recs if 200 <= r.status < 300]
    lat = [r.ms for r in ok]
    within = [r for r in ok if r.ms <= budget]
    rejected = [r for r in recs if r.status == 503]
    degraded = Counter(r.reason or "?" for r in ok if r.degraded)
    bad = [r.error for r in recs if r.error and r.status >= 400 and r.status != 503]
    return {
        "concurrency": cell.concurrency, "budget_ms": budget, "seconds": cell.seconds, "wall_s": round(wall_s, 2),
        "sent": len(recs), "ok": len(ok), "within_pct": share(len(within), len(ok)),
        "late_max_ms": round(max(x - budget for x in lat), 1) if lat else None,
        "late_over_50": sum(x > budget + LATE_SLACK_MS for x in lat),
        "p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95), "p99_ms": pct(lat, 99), "max_ms": pct(lat, 100),
        "server_p99_ms": pct([r.server_ms for r in ok if r.server_ms is not None], 99),
        "goodput": round(sum(not r.degraded for r in within) / wall_s, 3),
        "answered_per_s": round(len(within) / wall_s, 3),
        "rejected_no_retry_after": sum(r.retry_after is None for r in rejected),
        "rejected_p99_ms": pct([r.ms for r in rejected], 99),
        "degraded_pct": share(sum(degraded.values()), len(ok)), "degraded_reasons": dict(degraded.most_common()),
        **http_outcomes([r.status for r in recs], sum(r.hang for r in recs),
                        [r.error for r in recs if r.status == 0 and r.error]),
        "first_bad_reply": bad[0] if bad else None,
    }


def summarize_ttft(records: list[ChatRecord], concurrency: int, wall_s: float) -> dict[str, Any]:
    """TTFT and total percentiles, chunks per reply, chunk size and spread, and whether replies really stream."""
    done = [r for r in records if r.status == 200 and r.done]
    streamed = [r for r in done if r.ttft_ms is not None]
    ttft = [r.ttft_ms for r in streamed if r.ttft_ms is not None]
    spans = [(r.last_ms - r.ttft_ms, r.chunks) for r in streamed if r.last_ms is not None and r.ttft_ms is not None]
    gaps = [span / (n - 1) for span, n in spans if n > 1]
    total = [r.total_ms for r in done]
    gap_p50 = round(float(np.median(gaps)), 3) if gaps else None
    verdict = None if gap_p50 is None else "as decoded" if gap_p50 >= DECODE_GAP_MS else "one burst"
    chunks = sum(r.chunks for r in streamed)
    return {
        "concurrency": concurrency, "wall_s": round(wall_s, 2), "sent": len(records), "ok": len(done),
        "no_content": len(done) - len(streamed), "ttft_p50_ms": pct(ttft, 50), "ttft_p95_ms": pct(ttft, 95),
        "total_p50_ms": pct(total, 50), "total_p95_ms": pct(total, 95),
        "spread_p50_ms": pct([span for span, _ in spans], 50), "gap_p50_ms": gap_p50,
        "chunks_mean": round(chunks / len(streamed), 2) if streamed else None,
        "chars_per_chunk": round(sum(r.chars for r in streamed) / chunks, 1) if chunks else None,
        "streaming": verdict, "unfinished": sum(r.status == 200 and not r.done and not r.error for r in records),
        **http_outcomes([r.status for r in records], sum(r.hang for r in records),
                        [r.error for r in records if r.error and (r.status == 0 or r.status == 200)]),
        "first_bad_reply": next((r.error for r in records if r.error and r.status >= 400), None),
    }


# ------------------------------------------------------------------------------------------------ one server
def bench_server(mode: str, agent: Path, world: Path, args: argparse.Namespace,
                 messages: list[str]) -> dict[str, Any]:
    """Start one server, warm it up, run every session cell and TTFT cell, stop it; everything it measured."""
    server = start_server(agent, world, mode, args.work, args.max_batch, args.set)
    cells: list[dict[str, Any]] = []
    ttft: list[dict[str, Any]] = []
    info: dict[str, Any] = {"mode": mode, "batching": MODES[mode], "url": server.url, "up_s": server.started_s}
    try:
        info["warmup_statuses"] = warm_up(server.url, messages, max(args.budgets))
        print(f"[{mode}] up in {server.started_s:.1f} s at {server.url}, warm-up {info['warmup_statuses']}",
              flush=True)
        for conc in args.concurrency:
            for budget in args.budgets:
                cells.append(measure_cell(server, mode, Cell(conc, budget, args.seconds, messages)))
                time.sleep(CELL_PAUSE_S)
        if args.ttft_concurrency:
            print(TTFT_HEADER, flush=True)
        for conc in args.ttft_concurrency:
            ttft.append(measure_ttft(server, mode, conc, args.seconds, messages))
            time.sleep(CELL_PAUSE_S)
    finally:
        info.update(server.stop())
        info["stderr_tail"] = server.stderr_tail(20).splitlines()
        info["stderr_tracebacks"] = server.stderr.read_text(errors="replace").count("Traceback")
        print(f"[{mode}] stopped in {info['stop_s']:.1f} s (code {info['returncode']}"
              f"{', killed' if info['killed'] else ''}; {info['stderr_tracebacks']} tracebacks in its stderr)",
              flush=True)
    return {"server": info, "cells": cells, "ttft": ttft}


def measure_cell(server: ServerProcess, mode: str, cell: Cell) -> dict[str, Any]:
    if not server.alive():
        die(server, f"exited with code {server.proc.returncode} during the run")
    start = {"queue_at_start": queue_depth(server.url), "load1_at_start": round(os.getloadavg()[0], 2)}
    wall = asyncio.run(run_cell(server.url, cell))
    row = {"mode": mode, **summarize_cell(cell, wall), **start}
    print(fmt_cell(row), flush=True)
    return row


def measure_ttft(server: ServerProcess, mode: str, conc: int, seconds: float, messages: list[str]) -> dict[str, Any]:
    if not server.alive():
        die(server, f"exited with code {server.proc.returncode} during the run")
    start = {"queue_at_start": queue_depth(server.url), "load1_at_start": round(os.getloadavg()[0], 2)}
    records, wall = asyncio.run(run_ttft_cell(server.url, conc, seconds, messages))
    row = {"mode": mode, **summarize_ttft(records, conc, wall), **start}
    print(fmt_ttft(row), flush=True)
    return row


# ------------------------------------------------------------------------------------------------ printing
def num(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def pct_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


CELL_HEADER = (f"{'server':8} {'conc':>4} {'budget':>6} {'sent':>5} {'within':>7} {'late>50':>7} {'p50':>6} "
               f"{'p95':>6} {'p99':>6} {'goodput/s':>9} {'answered/s':>10} {'503':>6} {'degraded':>8} "
               f"{'5xx':>4} {'hangs':>5} {'err':>4} {'q0':>4}  reasons")


def fmt_cell(r: dict[str, Any]) -> str:
    reasons = ", ".join(f"{k} {v}" for k, v in list(r["degraded_reasons"].items())[:3])
    return (f"{r['mode']:8} {r['concurrency']:>4} {r['budget_ms']:>6.0f} {r['sent']:>5} "
            f"{pct_cell(r['within_pct']):>7} {r['late_over_50']:>7} {num(r['p50_ms']):>6} {num(r['p95_ms']):>6} "
            f"{num(r['p99_ms']):>6} {r['goodput']:>9.2f} {r['answered_per_s']:>10.2f} "
            f"{pct_cell(r['rejected_pct']):>6} {pct_cell(r['degraded_pct']):>8} {r['other_5xx']:>4} "
            f"{r['hangs']:>5} {r['errors']:>4} {num(r['queue_at_start']):>4}  {reasons}")


TTFT_HEADER = (f"{'server':8} {'conc':>4} {'replies':>7} {'ttft p50':>8} {'ttft p95':>8} {'total p50':>9} "
               f"{'chunks':>6} {'chars/chunk':>11} {'gap p50':>7} {'503':>6} {'5xx':>4} {'hangs':>5} {'err':>4} "
               f"{'cut':>4} {'q0':>4}  streaming")


def fmt_ttft(r: dict[str, Any]) -> str:
    return (f"{r['mode']:8} {r['concurrency']:>4} {r['ok']:>7} {num(r['ttft_p50_ms']):>8} {num(r['ttft_p95_ms']):>8} "
            f"{num(r['total_p50_ms']):>9} {num(r['chunks_mean'], '.1f'):>6} {num(r['chars_per_chunk'], '.1f'):>11} "
            f"{num(r['gap_p50_ms'], '.2f'):>7} {pct_cell(r['rejected_pct']):>6} {r['other_5xx']:>4} "
            f"{r['hangs']:>5} {r['errors']:>4} {r['unfinished']:>4} {num(r['queue_at_start']):>4}  "
            f"{r['streaming'] or '-'}")


def goodput_ratios(cells: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Batching / none goodput per budget and concurrency (None where the baseline's goodput is 0)."""
    by = {(c["mode"], c["budget_ms"], c["concurrency"]): c["goodput"] for c in cells}
    out: dict[str, dict[str, float | None]] = {}
    for (mode, budget, conc), good in by.items():
        base = by.get(("none", budget, conc))
        if mode == "batching" and base is not None:
            out.setdefault(f"{budget:g}", {})[str(conc)] = round(good / base, 2) if base else None
    return out


def print_tables(cells: list[dict[str, Any]], ttft: list[dict[str, Any]],
                 ratios: dict[str, dict[str, float | None]]) -> None:
    print("\nlatency in ms on the client's clock; within = 2xx replies within budget; goodput = non-degraded "
          "2xx within budget per s")
    print(CELL_HEADER)
    for r in cells:
        print(fmt_cell(r))
    print("err = connection errors (no HTTP answer); q0 = engine queue depth when the cell started (turns cut at "
          "their budget may still be queued)")
    print("\nTTFT: streamed /v1/chat/completions, max_tokens 48; gap = ms between a reply's content chunks; "
          "cut = 200 streams that ended without [DONE]")
    print(TTFT_HEADER)
    for r in ttft:
        print(fmt_ttft(r))
    if ratios:
        good = {(c["mode"], f"{c['budget_ms']:g}", str(c["concurrency"])): c["goodput"] for c in cells}
        print("\ngoodput per s, batching vs none (ratio n/a: none's goodput is 0)")
        print(f"{'budget':>6} {'conc':>4} {'batching':>8} {'none':>6} {'ratio':>7}")
        for budget, per_conc in ratios.items():
            for conc, ratio in per_conc.items():
                text = f"{ratio:.2f}x" if ratio is not None else "n/a"
                on, off = good["batching", budget, conc], good["none", budget, conc]
                print(f"{budget:>6} {conc:>4} {on:>8.2f} {off:>6.2f} {text:>7}")


def headline(cells: list[dict[str, Any]], ttft: list[dict[str, Any]],
             ratios: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    """The acceptance in one object: ratio at c32 per budget, worst within share, late / 5xx / hang totals, TTFT."""
    within = [c["within_pct"] for c in cells if c["within_pct"] is not None]
    ttft_p50: dict[str, dict[str, float | None]] = {}
    for t in ttft:
        ttft_p50.setdefault(t["mode"], {})[str(t["concurrency"])] = t["ttft_p50_ms"]
    return {"goodput_ratio_c32": {b: per["32"] for b, per in ratios.items() if "32" in per},
            "min_within": min(within) if within else None,
            "late_over_50": sum(c["late_over_50"] for c in cells),
            "other_5xx": sum(c["other_5xx"] for c in cells + ttft),
            "hangs": sum(c["hangs"] for c in cells + ttft),
            "ttft_p50_ms": ttft_p50,
            "errors": sum(c["errors"] for c in cells + ttft) + sum(t["unfinished"] for t in ttft)}


# ------------------------------------------------------------------------------------------------ main
def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent", type=Path, default=None, help="agent directory (default: the tiny agent built "
                        "under --work); needs --world")
    parser.add_argument("--world", type=Path, default=None, help="world directory served and whose tasks.jsonl "
                        "is replayed (default: the seeded 2,000-item shopping world under --work); needs --agent")
    parser.add_argument("--quick", action="store_true", help="4 s cells")
    parser.add_argument("--seconds", type=float, default=0, help="seconds per cell (default 12; --quick 4)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16, 32], help="closed-loop workers")
    parser.add_argument("--budgets", type=float, nargs="+", default=[300, 800, 1500], help="budget_ms per request")
    parser.add_argument("--ttft-concurrency", type=int, nargs="*", default=[1, 8], help="workers of the TTFT cells "
                        "(none = skip them)")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES),
                        help="servers, in order: batching (on) and none (the baseline)")
    parser.add_argument("--max-batch", type=int, default=None, help="max_batch in the server YAML (default: "
                        "ServeConfig's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="one more ServeConfig field in both servers' YAML (repeat), e.g. --set gather_ms=0")
    parser.add_argument("--sft-steps", type=int, default=100, help="SFT steps of the default tiny agent")
    parser.add_argument("--work", type=Path, default=ROOT / "runs/bench/serving", help="cached inputs, server "
                        "YAMLs and logs")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/serving.json", help="results file")
    args = parser.parse_args()
    if (args.agent is None) != (args.world is None):
        parser.error("give --agent and --world together (the world must be the one the agent serves), or neither")
    if min(args.concurrency + args.ttft_concurrency, default=1) < 1 or min(args.budgets) <= 0:
        parser.error("--concurrency / --ttft-concurrency must be >= 1 and --budgets > 0")
    args.seconds = args.seconds or (4.0 if args.quick else 12.0)
    return args


def resolve_inputs(args: argparse.Namespace) -> tuple[Path, Path]:
    """``--agent`` / ``--world`` as given, or the cached default world and tiny agent (built on first use)."""
    if args.agent is not None:
        for path, what in ((args.agent / "agent.json", "--agent"), (args.world / "tasks.jsonl", "--world")):
            if not path.is_file():
                raise SystemExit(f"{what}: {path} not found")
        return args.agent.resolve(), args.world.resolve()
    world = ensure_world(args.work, 2000)
    sid = ensure_sid_dir(world, args.work / "sid-2000")
    return ensure_tiny_agent(args.work, world, sid, args.sft_steps, 0).resolve(), world.resolve()


def main() -> None:
    args = parse_args()
    t0 = time.perf_counter()
    args.work.mkdir(parents=True, exist_ok=True)
    agent, world = resolve_inputs(args)
    messages = task_messages(world)
    meta: dict[str, Any] = {"agent": str(agent), "world": str(world), "messages": len(messages),
                            "args": {k: str(v) for k, v in vars(args).items()}, "cpus": os.cpu_count(),
                            "loadavg_start": os.getloadavg(), "machine": platform.machine(),
                            "python": platform.python_version()}
    print(f"agent {agent}\nworld {world} ({len(messages)} task texts)\nservers {args.modes}, concurrency "
          f"{args.concurrency}, budgets {args.budgets} ms, {args.seconds:g} s per cell, TTFT at "
          f"{args.ttft_concurrency}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}", flush=True)
    print(CELL_HEADER, flush=True)
    runs = [bench_server(mode, agent, world, args, messages) for mode in args.modes]
    cells = [c for run in runs for c in run["cells"]]
    ttft = [t for run in runs for t in run["ttft"]]
    ratios = goodput_ratios(cells)
    print_tables(cells, ttft, ratios)
    summary = headline(cells, ttft, ratios)
    meta.update(loadavg_end=os.getloadavg(), elapsed_s=round(time.perf_counter() - t0, 1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "servers": [r["server"] for r in runs], "cells": cells,
                                    "ttft": ttft, "goodput_ratio": ratios, "summary": summary}, indent=2))
    print(f"\nwrote {args.out} ({meta['elapsed_s']:.0f} s in all)")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
