"""Over REST, do the items a shopping reply shows meet what the request text states? Agent vs no-model server.

    python bench/rest_constraints.py --agent runs/demo/cascade-quick/final --logs runs/demo/curated/test
    python bench/rest_constraints.py ... --quick          # the first 100 tasks

Two real ``sidekick serve`` processes on loopback, one after the other, over the same world: the agent, and
the server with no agent (its fallback: BM25 under the request). Each held-out shopping task (bundles
excepted: their constraint is the total) opens a session with its first message, as a frontend sends it
(text only). When the reply asks (an ``ask_user`` action) and the shopper has more to say, the task's answer
(the constraints it held back, in words) goes in as the next turn.

Every item a reply shows is checked against the constraints the shopper has stated so far (the task's
answer key: category, attributes, features, price bounds, in stock; held-back ones count only once said):
``items ok`` = share of shown items meeting all of them; ``replies ok`` = share of replies whose items all
do (replies with no items left out); ``first ok`` = share of first replies with at least one item whose
first item meets them. Also degraded share and reply latency. JSON: bench/results/rest_constraints.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from apps.evaluate import load_tasks  # noqa: E402
from apps.shopping.constraints import hidden_constraints_text, item_matches  # noqa: E402
from bench.serving import ServerProcess, free_port, sidekick_exe, spawn  # noqa: E402
from harness.catalog import Catalog  # noqa: E402
from harness.tasks import Task  # noqa: E402
from sid.build import find_catalog  # noqa: E402


def start(agent: Path | None, world: Path, work: Path, name: str) -> ServerProcess:
    port = free_port()
    cmd = [sidekick_exe(), "serve", *([str(agent)] if agent else []), "--world", str(world), "--port", str(port)]
    return spawn(name, cmd, port, work, name)


def stated(task: Task, answered: bool) -> dict[str, Any]:
    """The constraints the shopper has stated: all once they answered, else without the held-back ones."""
    c = dict(task.constraints)
    if answered or not task.hidden:
        return c
    for key in task.hidden:
        if key == "attributes":
            attrs = {k: v for k, v in (c.get("attributes") or {}).items() if k not in task.hidden["attributes"]}
            c["attributes"] = attrs
        else:
            c.pop(key, None)
    return c


def why_not(item: Any, want: dict[str, Any]) -> str:
    """The first stated constraint ``item`` breaks (for the failure listing)."""
    for key in ("category", "attributes", "features", "price_max", "price_min", "in_stock"):
        if key not in want and key != "in_stock":
            continue
        part = {key: want[key]} if key in want else {}
        if key == "attributes":
            for k, v in (want.get("attributes") or {}).items():
                if not item_matches(item, {"attributes": {k: v}, "in_stock": False}):
                    return f"{k}={v!r} (has {item.attributes.get(k)!r})"
            continue
        if not item_matches(item, {**part, "in_stock": want.get("in_stock", True) if key == "in_stock" else False}):
            return f"{key}={want.get(key, True)!r}"
    return "?"


def run(server: ServerProcess, tasks: list[Task], catalog: Catalog, budget_ms: int,
        failures: list[str] | None = None) -> dict[str, Any]:
    items_ok = items_all = replies_ok = replies = first_ok = firsts = degraded = turns = 0
    by_kind: dict[str, list[int]] = {}
    latency: list[float] = []
    with httpx.Client(base_url=server.url, timeout=30.0, trust_env=False) as client:
        for task in tasks:
            text = next(m.content for m in task.messages if m.role == "user")
            r = client.post("/v1/shopping/sessions", json={"message": text, "budget_ms": budget_ms})
            answered = False
            for turn in range(2):
                if not r.is_success:
                    raise SystemExit(f"{task.task_id}: HTTP {r.status_code} {r.text[:200]}")
                body = r.json()
                turns += 1
                latency.append(float(body.get("latency_ms") or 0.0))
                degraded += bool(body.get("degraded"))
                ids = [i["item_id"] for i in body.get("items") or []]
                want = stated(task, answered)
                ok = [item_matches(catalog[i], want) if i in catalog else False for i in ids]
                items_ok, items_all = items_ok + sum(ok), items_all + len(ok)
                kind = by_kind.setdefault(task.kind, [0, 0])
                kind[0], kind[1] = kind[0] + sum(ok), kind[1] + len(ok)
                if failures is not None:
                    failures.extend(f"{task.task_id} [{task.kind}] {text!r} -> {catalog[i].title!r}: "
                                    f"{why_not(catalog[i], want) if i in catalog else 'unknown item'}"
                                    for i, good in zip(ids, ok, strict=True) if not good)
                if ids:
                    replies, replies_ok = replies + 1, replies_ok + all(ok)
                if turn == 0:
                    firsts += 1
                    first_ok += bool(ok) and ok[0]
                asks = any(a.get("type") == "ask_user" for a in body.get("actions") or [])
                if not (asks and task.hidden) or answered:
                    break
                answered = True
                r = client.post(f"/v1/shopping/sessions/{body['session_id']}/turns",
                                json={"message": hidden_constraints_text(task.hidden), "budget_ms": budget_ms})
    return {"items_ok": items_ok / max(1, items_all), "items": items_all, "replies_ok": replies_ok / max(1, replies),
            "replies": replies, "first_ok": first_ok / max(1, firsts), "degraded": degraded / max(1, turns),
            "latency_p50_ms": statistics.median(latency) if latency else None,
            "latency_p95_ms": sorted(latency)[int(0.95 * (len(latency) - 1))] if latency else None,
            "items_ok_by_kind": {k: round(v[0] / max(1, v[1]), 3) for k, v in sorted(by_kind.items())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agent", type=Path, default=ROOT / "runs/demo/cascade-quick/final")
    ap.add_argument("--logs", type=Path, default=ROOT / "runs/demo/curated/test")
    ap.add_argument("--world", type=Path, default=None, help="the world to serve (default: beside --logs)")
    ap.add_argument("--quick", action="store_true", help="the first 100 tasks")
    ap.add_argument("--budget-ms", type=int, default=3000)
    ap.add_argument("--show", type=int, default=0, help="list the first N agent items that break a constraint")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/rest_constraints.json")
    args = ap.parse_args()
    world = args.world or args.logs.parent
    catalog, _ = Catalog.load(find_catalog(world)[0])
    tasks = [t for t in load_tasks(args.logs) if t.app == "shopping" and t.kind != "bundle"]
    tasks = tasks[:100] if args.quick else tasks
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, agent in (("agent", args.agent), ("no model", None)):
            server = start(agent, world, Path(tmp), name.replace(" ", "-"))
            try:
                t0 = time.perf_counter()
                failures: list[str] | None = [] if agent is not None and args.show else None
                results[name] = run(server, tasks, catalog, args.budget_ms, failures)
                for line in (failures or [])[: args.show]:
                    print("  breaks", line)
                results[name]["seconds"] = round(time.perf_counter() - t0, 1)
            finally:
                server.stop()
    print(f"\n{len(tasks)} tasks (no bundles), budget {args.budget_ms} ms")
    print(f"{'server':<10}{'items ok':>10}{'replies ok':>12}{'first ok':>10}{'degraded':>10}{'p50 ms':>9}{'p95 ms':>9}")
    for name, r in results.items():
        print(f"{name:<10}{r['items_ok']:>10.3f}{r['replies_ok']:>12.3f}{r['first_ok']:>10.3f}{r['degraded']:>10.3f}"
              f"{r['latency_p50_ms']:>9.0f}{r['latency_p95_ms']:>9.0f}")
    print("items ok by kind:", "; ".join(
        f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in r["items_ok_by_kind"].items())
        for name, r in results.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"agent": str(args.agent), "logs": str(args.logs), "tasks": len(tasks),
                                    "budget_ms": args.budget_ms, "results": results}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
