"""What the server guarantees whatever the model does: grounding, admission control, timeouts, shared sessions.

The engines here are scripted test models (a model that names items that do not exist, a slow model):
the harness, the batcher, the FastAPI app, uvicorn and redis-server are all real.

Run: .venv/bin/python -m pytest tests/serving/test_guards.py -q -m integration
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

from apps.serve import load_apps
from harness.agent import ModelAccess
from harness.catalog import Catalog, Item
from harness.protocol import render_call
from serving.app import create_app
from serving.background import BackgroundServer
from serving.server import AgentServer, ServeConfig

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def serve_scripted(worlds: dict[str, Path], tiny_agent: Path, scripted: Any
                   ) -> Iterator[Callable[..., tuple[str, AgentServer]]]:
    """``start(replies, delay_s=0, **ServeConfig fields)``: a live shopping server whose model is scripted
    (replies cycled, the tiny agent's tokenizer)."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_agent)
    running: list[BackgroundServer] = []

    def start(replies: Sequence[str], delay_s: float = 0.0, **config: object) -> tuple[str, AgentServer]:
        engine = scripted(replies, delay_s=delay_s, tokenizer=tokenizer, cycle=True)
        model = ModelAccess(engine=engine, tokenizer=tokenizer)
        specs = {name: env.spec for name, env in load_apps([worlds["shopping"]]).items()}
        server = AgentServer(specs, model, ServeConfig.model_validate(config))
        background = BackgroundServer(create_app(server))
        running.append(background)
        return background.start(), server

    yield start
    for background in running:
        background.stop()


def _pick(catalog: Catalog, ok: Callable[[Item], bool]) -> str:
    return next(i.item_id for i in catalog if ok(i))


def test_items_that_fail_grounding_never_reach_the_user(serve_scripted: Callable[..., tuple[str, AgentServer]],
                                                        worlds: dict[str, Path]) -> None:
    catalog = Catalog.load(worlds["shopping"] / "catalog.jsonl")[0]
    sold_out = _pick(catalog, lambda i: not i.in_stock)
    pricey = _pick(catalog, lambda i: i.in_stock and i.price is not None and i.price > 50)
    good = _pick(catalog, lambda i: i.in_stock and i.price is not None and i.price <= 50)
    bad = ["sku-does-not-exist", sold_out, pricey]
    liar = render_call("respond", {"text": "Try these!", "item_ids": bad})
    honest = render_call("respond", {"text": "This one.", "item_ids": [good]})

    url, server = serve_scripted([liar, honest])  # lies once, then names a grounded item
    with httpx.Client(base_url=url, timeout=30) as client:
        body = client.post("/v1/shopping/sessions", json={"message": "a gift", "constraints": {"price_max": 50}}).json()
        assert [c["item_id"] for c in body["items"]] == [good] and body["degraded"] is False
        assert server.apps["shopping"].loop.grounder.failures.total() == 3
        metrics = client.get("/metrics").text
        pattern = r'^sidekick_grounding_failures_total\{app="shopping",reason="[^"]+"\} (\S+)$'
        counted = re.findall(pattern, metrics, re.M)
        assert sum(float(n) for n in counted) == 3.0, metrics

    url, server = serve_scripted([liar])  # never stops lying: the fallback answers, still grounded
    with httpx.Client(base_url=url, timeout=30) as client:
        body = client.post("/v1/shopping/sessions", json={"message": "a gift", "constraints": {"price_max": 50}}).json()
        assert body["degraded"] is True and body["reason"] == "step_limit"
        shown = {c["item_id"] for c in body["items"]} | {c["item_id"] for b in body["bundles"] for c in b}
        assert not shown & set(bad)
        for item_id in shown:
            item = catalog.get(item_id)
            assert item is not None and item.in_stock and item.price is not None and item.price <= 50


def test_a_full_queue_answers_503_with_retry_after_at_once(serve_scripted: Callable[..., tuple[str, AgentServer]]
                                                           ) -> None:
    url, server = serve_scripted(["Here you go."], delay_s=0.4, batching=False)
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.post("/v1/shopping/sessions", json={"message": "warm up"}).status_code == 201  # sets the EMA

        def slow_turn(_: int) -> int:
            with httpx.Client(base_url=url, timeout=60) as c:
                return c.post("/v1/shopping/sessions", json={"message": "boots", "budget_ms": 30_000}).status_code

        with ThreadPoolExecutor(6) as pool:
            queued = [pool.submit(slow_turn, i) for i in range(6)]
            deadline = time.monotonic() + 10
            while server.front is not None and server.front.queue_depth < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            t0 = time.perf_counter()
            refused = client.post("/v1/shopping/sessions", json={"message": "boots", "budget_ms": 300})
            waited_ms = (time.perf_counter() - t0) * 1000
            assert all(f.result() == 201 for f in queued)
    assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1
    assert "exceeds the request's budget" in refused.json()["detail"]
    assert waited_ms < 300  # refused at once, not after the budget ran out


def test_a_turn_past_its_budget_is_cut_in_the_engine_and_answered_in_time(
        serve_scripted: Callable[..., tuple[str, AgentServer]]) -> None:
    url, server = serve_scripted(["too late"], delay_s=3.0)
    engine = server.front.engine if server.front is not None else None
    with httpx.Client(base_url=url, timeout=30) as client:
        t0 = time.perf_counter()
        body = client.post("/v1/shopping/sessions", json={"message": "hiking boots", "budget_ms": 300}).json()
        elapsed_ms = (time.perf_counter() - t0) * 1000
        assert body["degraded"] is True and body["reason"] == "timeout" and body["reply"]
        assert elapsed_ms < 300 + 50, elapsed_ms  # within its budget, not the model's 3 s
        end = time.monotonic() + 2
        while not engine.aborted and time.monotonic() < end:  # type: ignore[union-attr]
            time.sleep(0.01)
        assert len(engine.aborted) == 1  # type: ignore[union-attr]  # the cut reached the engine, which stopped
        metrics = client.get("/metrics").text
    assert re.search(r"^sidekick_engine_aborted_requests_total 1\.0$", metrics, re.M), metrics
    assert re.search(r'^sidekick_turns_total\{app="shopping",within_budget="true"\} 1\.0$', metrics, re.M)
    assert re.search(r'^sidekick_within_budget_ratio\{app="shopping",window="all"\} 1\.0$', metrics, re.M)


def test_sessions_are_shared_between_replicas_through_redis(live_server: Callable[..., tuple[str, AgentServer]],
                                                            redis_url: str) -> None:
    url_a, _ = live_server(None, apps=("shopping",), redis_url=redis_url)
    url_b, _ = live_server(None, apps=("shopping",), redis_url=redis_url)
    with httpx.Client(timeout=30) as client:
        created = client.post(url_a + "/v1/shopping/sessions", json={"message": "a tent"}).json()
        sid = created["session_id"]
        turn = client.post(f"{url_b}/v1/shopping/sessions/{sid}/turns", json={"message": "a cheaper one"})
        assert turn.status_code == 200, turn.text
        view = client.get(f"{url_a}/v1/shopping/sessions/{sid}").json()
        assert view["turns"] == 2


def test_cli_serve_starts_and_reports_bad_directories(worlds: dict[str, Path], tmp_path: Path) -> None:
    bad = subprocess.run([sys.executable, "-m", "apps.cli", "serve", str(tmp_path), "--world", str(worlds["travel"])],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not an agent directory" in bad.stderr and "Traceback" not in bad.stderr
    no_world = subprocess.run([sys.executable, "-m", "apps.cli", "serve", "--world", str(tmp_path)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert no_world.returncode == 2 and "catalog.jsonl" in no_world.stderr

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "apps.cli", "serve", "--world", str(worlds["travel"]), "--port",
                             str(port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.2)
        assert ready.json() == {"ready": True, "apps": ["travel"]}
    finally:
        proc.terminate()
        proc.wait(20)
