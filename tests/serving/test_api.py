"""The REST API on a real uvicorn server (loopback, free port) with a briefly trained tiny agent.

Multi-turn shopping sessions, a livestream question, a travel plan, the OpenAI client (plain and streaming,
raw model and agent models), health/metrics/docs, bad input as 4xx naming the field, admin keys.

Run: .venv/bin/python -m pytest tests/serving/test_api.py -q -m integration
"""

from __future__ import annotations

import json
import threading
import time
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
        # a question the reader reads for certain is answered before any model call, and the reply says so
        sure = client.post("/v1/livestream/answer", json={
            "question": "how much is it?", "stream_id": request["stream_id"],
            "ts_offset_s": request.get("ts_offset_s", 0)}).json()
        assert (sure["reason"], sure["degraded"]) == ("sure", False), sure
        assert any(f.endswith(".price") for f in sure["cited_facts"]), sure

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


def test_model_apps_leaves_the_other_apps_to_their_fallback(live_server: ServerFactory, tiny_agent: Path,
                                                             worlds: dict[str, Path]) -> None:
    """model_apps: [shopping] with a model loaded: livestream answers from its fallback (no_model), shopping
    turns still reach the model; a model_apps naming an app not served is a setup error naming it."""
    url, server = live_server(tiny_agent, apps=("shopping", "livestream"), model_apps=["shopping"])
    assert server.model is not None
    assert server.apps["livestream"].loop.model is None and server.apps["shopping"].loop.model is server.model
    task = _first_task(worlds["livestream"])
    request, question = task["constraints"], task["messages"][-1]["content"]
    with httpx.Client(base_url=url, timeout=60) as client:
        answer = client.post("/v1/livestream/answer", json={"question": question, "stream_id": request["stream_id"],
                                                            "ts_offset_s": request.get("ts_offset_s", 0)})
        assert answer.status_code == 200 and answer.json()["degraded"] is True
        assert answer.json()["reason"] == "no_model"
    from apps.serve import ServeSetupError, build_server
    from serving.server import ServeConfig

    with pytest.raises(ServeSetupError, match=r"model_apps names \['travel'\], not served here"):
        build_server(None, [worlds["shopping"]], ServeConfig(model_apps=["travel"]))


def test_cart_routes_without_a_model(live_server: ServerFactory, worlds: dict[str, Path]) -> None:
    """A frontend's add-to-cart / remove buttons: stock-checked, totals summed, unknown ids a 404 naming them."""
    url, _ = live_server(None, apps=("shopping",))
    items = list(_catalog(worlds["shopping"]))
    tracked = next(i for i in items if i.stock is not None and i.stock >= 2 and i.price is not None)
    other = next(i for i in items if i.in_stock and i.price is not None and i.item_id != tracked.item_id)
    with httpx.Client(base_url=url, timeout=30) as client:
        sid = client.post("/v1/shopping/sessions", json={}).json()["session_id"]
        cart = f"/v1/shopping/sessions/{sid}/cart"
        r = client.post(cart, json={"item_id": tracked.item_id})
        assert r.status_code == 200 and r.json()["cart"] == {tracked.item_id: 1}
        r = client.post(cart, json={"item_id": other.item_id, "quantity": 2})
        body = r.json()
        assert body["cart"] == {tracked.item_id: 1, other.item_id: 2}
        assert [c["item_id"] for c in body["items"]] == [tracked.item_id, other.item_id]
        assert body["total"] == pytest.approx(round(tracked.price + 2 * other.price, 2))

        too_many = client.post(cart, json={"item_id": tracked.item_id, "quantity": tracked.stock})  # 1 + stock
        assert too_many.status_code == 422 and f"only {tracked.stock} of {tracked.item_id}" in too_many.json()["detail"]
        unknown = client.post(cart, json={"item_id": "sku-nope"})
        assert unknown.status_code == 404 and "sku-nope" in unknown.json()["detail"]
        assert client.post(cart, json={"item_id": other.item_id, "quantity": 0}).status_code == 422
        assert client.post("/v1/shopping/sessions/nope/cart", json={"item_id": other.item_id}).status_code == 404
        assert client.get(f"/v1/shopping/sessions/{sid}").json()["cart"] == {tracked.item_id: 1, other.item_id: 2}

        r = client.delete(f"{cart}/{other.item_id}")
        assert r.status_code == 200 and r.json()["cart"] == {tracked.item_id: 1}
        assert r.json()["total"] == pytest.approx(tracked.price)
        again = client.delete(f"{cart}/{other.item_id}")
        assert again.status_code == 404 and other.item_id in again.json()["detail"]


def test_a_cart_change_during_a_turn_waits_for_it_and_is_kept(live_server: ServerFactory, tiny_agent: Path,
                                                                worlds: dict[str, Path]) -> None:
    """A turn works on a copy of its session and saves it at the end: a cart change made meanwhile must wait for
    the turn, not be overwritten by it (the page keeps its add-to-cart buttons live during a turn)."""
    url, server = live_server(tiny_agent, apps=("shopping",))
    item = next(i for i in _catalog(worlds["shopping"]) if i.in_stock)
    front = server.front
    assert front is not None
    with httpx.Client(base_url=url, timeout=60) as client:
        sid = client.post("/v1/shopping/sessions", json={}).json()["session_id"]
        busy = threading.Thread(target=front._call, args=(lambda: time.sleep(1.0),))
        busy.start()  # the engine is busy for a second, so the turn below is still running when the cart changes
        turn: dict[str, Any] = {}

        def send_turn() -> None:
            r = httpx.post(f"{url}/v1/shopping/sessions/{sid}/turns", timeout=60,
                           json={"message": "hiking boots", "budget_ms": 10000})
            turn.update(at=time.monotonic(), response=r)

        sender = threading.Thread(target=send_turn)
        sender.start()
        time.sleep(0.3)
        r = client.post(f"/v1/shopping/sessions/{sid}/cart", json={"item_id": item.item_id})
        cart_at = time.monotonic()
        sender.join()
        busy.join()
        assert turn["response"].status_code == 200, turn["response"].text
        assert r.status_code == 200 and r.json()["cart"] == {item.item_id: 1}
        assert cart_at >= turn["at"] - 0.05, "the cart change did not wait for the running turn"
        state = client.get(f"/v1/shopping/sessions/{sid}").json()
        assert state["cart"] == {item.item_id: 1} and state["turns"] == 1
        assert len(server.session_locks) == 0  # no lock outlives its users


def test_stream_listing_and_plan_view(live_server: ServerFactory, worlds: dict[str, Path]) -> None:
    """What the page draws: the streams' on-screen windows as the world wrote them, and a plan's stops with
    their places' opening hours and the travel legs between them."""
    from apps.livestream.world import STREAMS_FILE, Stream
    from infra.recordio import read_records

    url, _ = live_server(None, apps=("livestream", "travel"))
    streams = read_records(worlds["livestream"] / STREAMS_FILE, Stream)[0]
    with httpx.Client(base_url=url, timeout=30) as client:
        listed = client.get("/v1/livestream/streams").json()["streams"]
        assert [s["stream_id"] for s in listed] == [s.stream_id for s in streams]
        for view, stream in zip(listed, streams, strict=True):
            assert view["duration_s"] == stream.duration_s
            assert [(p["item_id"], p["start_s"], p["end_s"]) for p in view["products"]] == [
                (i, a, b) for i, (a, b) in zip(stream.item_ids, stream.windows, strict=True)]

        plan = client.post("/v1/travel/plan", json={"request": "a museum and lunch", "constraints": {
            "day": "sat", "start_min": 600, "end_min": 1080, "mode": "walk"}}).json()
        stops, legs = plan["stops"], plan["legs"]
        assert [s["poi_id"] for s in stops] == [s["poi_id"] for s in plan["itinerary"]["stops"]]
        assert len(legs) == len(stops) - 1 >= 1
        pois = _catalog(worlds["travel"])
        for stop in stops:
            assert stop["name"] == pois[stop["poi_id"]].title and stop["opens"] < stop["closes"]
        for leg, a, b in zip(legs, stops, stops[1:], strict=False):
            assert (leg["from_poi"], leg["to_poi"], leg["mode"]) == (a["poi_id"], b["poi_id"], "walk")
            assert (leg["depart_min"], leg["arrive_min"]) == (a["depart_min"], b["arrive_min"])
            assert 0 <= leg["travel_min"] <= leg["arrive_min"] - leg["depart_min"]  # the plan is feasible
        r = client.post("/v1/shopping/sessions", json={})
        assert r.status_code == 404  # shopping is not served here: no cart either


def test_page_and_offline_docs_are_served(live_server: ServerFactory) -> None:
    url, _ = live_server(None, apps=("shopping",))
    with httpx.Client(base_url=url, timeout=30) as client:
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert 'id="panel-shopping"' in page.text
        for asset in ("/ui/app.js", "/ui/style.css"):
            assert client.get(asset).status_code == 200, asset
        for path in ("/docs", "/redoc"):
            html = client.get(path).text
            assert "/docs-assets/" in html and "cdn.jsdelivr" not in html and "fonts.googleapis" not in html, path
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
            assert client.get(f"/docs-assets/{asset}").status_code == 200, asset
        assert "/" not in client.get("/openapi.json").json()["paths"]  # the page is not part of the API


def test_the_agents_measured_model_apps_choose_where_the_model_answers(tiny_agent: Path, worlds: dict[str, Path],
                                                                      tmp_path: Path) -> None:
    """An agent directory's model_apps.json (a several-app cascade's report writes it) is the default model_apps;
    the config's model_apps or follow_measurement=False (--model-app all) win over it; a bad file is named."""
    import shutil

    from apps.serve import ServeSetupError, build_server
    from serving.server import ServeConfig

    agent = tmp_path / "agent"
    shutil.copytree(tiny_agent, agent)
    served = [worlds["shopping"], worlds["livestream"]]

    def answering(config: ServeConfig) -> set[str]:
        server = build_server(agent, served, config)
        return {a for a, s in server.apps.items() if s.loop.model is not None}

    (agent / "model_apps.json").write_text(json.dumps({"model_apps": ["shopping", "travel"], "evidence": {}}))
    assert answering(ServeConfig()) == {"shopping"}  # travel is not served here
    assert answering(ServeConfig(model_apps=["livestream"])) == {"livestream"}
    assert answering(ServeConfig(follow_measurement=False)) == {"shopping", "livestream"}
    (agent / "model_apps.json").write_text('{"apps": ["shopping"]}')
    with pytest.raises(ServeSetupError, match=r"model_apps.json: not a model_apps record"):
        build_server(agent, served, ServeConfig())
