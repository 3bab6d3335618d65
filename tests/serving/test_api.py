"""The REST API on a real uvicorn server (loopback, free port) with a briefly trained tiny agent.

Multi-turn shopping sessions, a livestream question, a travel plan, the OpenAI client (plain and streaming,
raw model and agent models), health/metrics/docs, bad input as 4xx naming the field, admin keys.

Run: .venv/bin/python -m pytest tests/serving/test_api.py -q -m integration
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from harness.catalog import Catalog
from serving.server import AgentServer

ServerFactory = Callable[..., tuple[str, AgentServer]]  # the live_server fixture (tests/serving/conftest.py)

pytestmark = pytest.mark.integration


def _catalog(world: Path) -> Catalog:
    return Catalog.load(world / "catalog.jsonl")[0]


def _first_task(world: Path) -> dict[str, Any]:
    with (world / "tasks.jsonl").open() as f:
        task: dict[str, Any] = json.loads(f.readline())
    return task


def test_shopping_session_runs_turns_with_grounded_item_cards(live_server: ServerFactory, tiny_agent: Path,
                                                               worlds: dict[str, Path]) -> None:
    url, _ = live_server(tiny_agent)
    catalog = _catalog(worlds["shopping"])
    with httpx.Client(base_url=url, timeout=60) as client:
        created = client.post("/v1/shopping/sessions", json={"message": "waterproof hiking boots under 100",
                                                              "constraints": {"price_max": 100},
                                                              "budget_ms": 20_000})
        assert created.status_code == 201, created.text
        body = created.json()
        session_id = body["session_id"]
        assert isinstance(body["reply"], str) and body["reply"]
        assert body["latency_ms"] > 0
        second = client.post(f"/v1/shopping/sessions/{session_id}/turns",
                             json={"message": "cheaper please, something in black", "budget_ms": 20_000})
        assert second.status_code == 200, second.text
        for reply in (body, second.json()):
            for card in reply["items"] + [c for b in reply["bundles"] for c in b]:
                item = catalog.get(card["item_id"])
                assert item is not None and item.in_stock, card  # grounded: exists and in stock
                assert item.price is None or item.price <= 100, card  # within the session's constraints
                assert card["title"] == item.title
        view = client.get(f"/v1/shopping/sessions/{session_id}").json()
        assert view["turns"] == 2 and view["constraints"]["price_max"] == 100 and view["messages"] >= 4
        assert client.delete(f"/v1/shopping/sessions/{session_id}").status_code == 204
        gone = client.post(f"/v1/shopping/sessions/{session_id}/turns", json={"message": "hello"})
        assert gone.status_code == 404 and session_id in gone.json()["detail"]


def test_livestream_answer_and_travel_plan(live_server: ServerFactory, tiny_agent: Path,
                                           worlds: dict[str, Path]) -> None:
    url, _ = live_server(tiny_agent)
    task = _first_task(worlds["livestream"])
    request, question = task["constraints"], task["messages"][-1]["content"]
    with httpx.Client(base_url=url, timeout=60) as client:
        answer = client.post("/v1/livestream/answer", json={"question": question, "stream_id": request["stream_id"],
                                                            "ts_offset_s": request.get("ts_offset_s", 0)})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["answer"] and body["latency_ms"] > 0
        catalog = _catalog(worlds["livestream"])
        for fact in body["cited_facts"]:
            assert catalog.get(fact.rpartition(".")[0]) is not None, fact  # facts are <item_id>.<attribute>

        travel = _first_task(worlds["travel"])
        plan = client.post("/v1/travel/plan", json={"request": travel["messages"][-1]["content"],
                                                    "constraints": travel["constraints"]})
        assert plan.status_code == 200, plan.text
        body = plan.json()
        assert body["reply"] and "degraded" in body
        if body["itinerary"] is not None:
            pois = _catalog(worlds["travel"])
            for stop in body["itinerary"]["stops"]:
                assert pois.get(stop["poi_id"]) is not None


def test_openai_client_plain_streaming_and_agent_models(live_server: ServerFactory, tiny_agent: Path) -> None:
    url, _ = live_server(tiny_agent, apps=("shopping",))
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    ids = {m.id for m in client.models.list().data}
    assert ids == {"sidekick", "sidekick:shopping"}
    tools = [{"type": "function", "function": {"name": "lookup", "description": "Look a word up.",
                                               "parameters": {"type": "object",
                                                              "properties": {"word": {"type": "string"}}}}}]
    messages = [{"role": "user", "content": "red hiking boots"}]
    plain = client.chat.completions.create(model="sidekick", messages=messages, tools=tools,  # type: ignore[arg-type]
                                           temperature=0, max_tokens=24)
    choice = plain.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason in {"stop", "length", "tool_calls"}
    assert plain.usage is not None and plain.usage.prompt_tokens > 0 and 0 < plain.usage.completion_tokens <= 24

    chunks = list(client.chat.completions.create(model="sidekick", messages=messages, tools=tools,  # type: ignore[arg-type]
                                                 temperature=0, max_tokens=24, stream=True))
    assert len(chunks) >= 2 and chunks[-1].choices[0].finish_reason == choice.finish_reason
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == (choice.message.content or "")  # greedy: the stream spells the same message

    agent = client.chat.completions.create(model="sidekick:shopping", messages=messages)  # type: ignore[arg-type]
    assert agent.choices[0].message.content
    with pytest.raises(openai.NotFoundError, match="available: sidekick"):
        client.chat.completions.create(model="gpt-4o", messages=messages)  # type: ignore[arg-type]


def test_health_ready_metrics_and_docs(live_server: ServerFactory, tiny_agent: Path) -> None:
    url, _ = live_server(tiny_agent, apps=("shopping",))
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"ready": True, "apps": ["shopping"]}
        client.post("/v1/shopping/sessions", json={"message": "a tent", "budget_ms": 20_000})
        metrics = client.get("/metrics").text
        for name in ("request_latency_seconds_bucket", "turn_latency_seconds_bucket", "engine_queue_depth",
                     "degraded_replies", "grounding_failures", "engine_batch_size_bucket"):
            assert name in metrics, name
        assert client.get("/docs").status_code == 200
        paths = client.get("/openapi.json").json()["paths"]
        assert {"/v1/shopping/sessions", "/v1/livestream/answer", "/v1/travel/plan", "/v1/chat/completions",
                "/v1/models"} <= set(paths)


def test_bad_input_is_a_4xx_naming_the_field(live_server: ServerFactory) -> None:
    url, _ = live_server(None, apps=("shopping",))  # fallback only: the checks come before any model
    with httpx.Client(base_url=url, timeout=30) as client:
        cases = [
            ({"message": ""}, "message"),
            ({"message": "boots", "budget_ms": -5}, "budget_ms"),
            ({"message": "boots", "constraints": {"price_max": "cheap"}}, "price_max"),
            ({"message": "boots", "colour": "red"}, "colour"),
            ({"message": 7}, "message"),
        ]
        for body, field in cases:
            r = client.post("/v1/shopping/sessions", json=body)
            assert r.status_code == 422, (body, r.text)
            assert field in json.dumps(r.json()["detail"]), (body, r.text)
        r = client.post("/v1/shopping/sessions", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422
        r = client.post("/v1/shopping/sessions", content=b"x" * (300 * 1024),
                        headers={"content-type": "application/json"})
        assert r.status_code == 413 and "bytes" in r.json()["detail"]
        r = client.post("/v1/livestream/answer", json={"question": "price?"})
        assert r.status_code == 404 and r.json()["detail"] == "app 'livestream' is not served here; serving: shopping"
        r = client.post("/v1/chat/completions", json={"model": "sidekick", "messages": []})
        assert r.status_code == 422 and "messages" in r.text
        assert client.get("/admin/stats").status_code == 403  # admin off without a key


def test_admin_routes_need_the_key(live_server: ServerFactory, tiny_agent: Path) -> None:
    url, _ = live_server(tiny_agent, apps=("shopping",), api_key="s3cret")
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.get("/admin/stats").status_code == 401
        assert client.get("/admin/stats", headers={"X-API-Key": "wrong"}).status_code == 401
        stats = client.get("/admin/stats", headers={"X-API-Key": "s3cret"})
        assert stats.status_code == 200 and "grounding_failures" in stats.json()
        reloaded = client.post("/admin/reload", headers={"X-API-Key": "s3cret"})
        assert reloaded.status_code == 200 and reloaded.json()["weights_version"] == 1


def test_fallback_only_server_answers_degraded(live_server: ServerFactory, worlds: dict[str, Path]) -> None:
    url, _ = live_server(None, apps=("shopping",))
    catalog = _catalog(worlds["shopping"])
    with httpx.Client(base_url=url, timeout=30) as client:
        r = client.post("/v1/shopping/sessions", json={"message": "hiking boots", "constraints": {"price_max": 80}})
        body = r.json()
        assert r.status_code == 201 and body["degraded"] is True and body["reason"] == "no_model"
        for card in body["items"]:
            item = catalog.get(card["item_id"])
            assert item is not None and item.in_stock and (item.price is None or item.price <= 80)
