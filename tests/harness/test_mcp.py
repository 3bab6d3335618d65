"""The MCP export of a tool registry, driven by the MCP SDK's own client over an in-process connection.

Both connection kinds the SDK offers run: ``legacy`` (initialize handshake, JSON-RPC over memory streams)
and ``auto`` (the modern per-request protocol). The tools are the real shopping tools on a small catalog.

Run: .venv/bin/python -m pytest tests/harness/test_mcp.py -q
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from apps.shopping.agent import shopping_app, shopping_tools
from harness.agent import AppSpec, TurnContext
from harness.budget import Budget
from harness.catalog import Catalog, Item
from harness.mcp import INSTALL_HINT, ToolExport, jsonable, mcp_server, turn_grounding
from harness.session import SessionState

mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed")
from mcp import Client  # noqa: E402
from mcp.types import CallToolResult, TextContent  # noqa: E402

BOOTS = ["Outdoor", "Footwear", "Hiking boots"]
MODES = ["legacy", "auto"]


def _catalog() -> Catalog:
    def item(item_id: str, title: str, price: float, stock: int, colour: str) -> Item:
        return Item(item_id=item_id, title=title, category_path=BOOTS, attributes={"colour": colour}, price=price,
                    stock=stock, rating=4.0)

    return Catalog([item("b1", "Northpeak waterproof hiking boots - Black", 89.99, 5, "black"),
                    item("b2", "Trailco hiking boots, brown", 59.99, 2, "brown"),
                    item("b3", "Summit hiking boots red", 120.0, 0, "red")])


def _context_factory(app: AppSpec) -> tuple[Callable[[], TurnContext], SessionState]:
    """A fresh context per call over one session (so the cart lasts across calls)."""
    session = SessionState(app="shopping", messages=[{"role": "user", "content": "I need hiking boots"}])
    return (lambda: TurnContext(app=app, session=session, constraints={}, budget=Budget(5000), model=None)), session


def _run(mode: str, body: Callable[[Client], Awaitable[None]], **kwargs: Any) -> SessionState:
    app = shopping_app(_catalog())
    factory, session = _context_factory(app)
    server = mcp_server(app.tools, factory, name="sidekick-shopping", **kwargs)

    async def main() -> None:
        async with Client(server, mode=mode) as client:
            await body(client)

    anyio.run(main)
    return session


def _text(result: CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent), result.content
    return result.content[0].text


def _payload(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    return json.loads(_text(result))


@pytest.mark.parametrize("mode", MODES)
def test_lists_the_registrys_tools_with_their_schemas(mode: str) -> None:
    expected = {s["function"]["name"]: s["function"] for s in shopping_tools().schemas()}

    async def body(client: Client) -> None:
        listed = (await client.list_tools()).tools
        assert [t.name for t in listed] == list(expected)  # same names, same order
        for tool in listed:
            assert tool.input_schema == expected[tool.name]["parameters"]
            assert tool.description == expected[tool.name]["description"]

    _run(mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_search_catalog_returns_items_as_json(mode: str) -> None:
    async def body(client: Client) -> None:
        result = await client.call_tool("search_catalog", {"query": "hiking boots"})
        payload = _payload(result)
        assert {card["item_id"] for card in payload["items"]} == {"b1", "b2"}  # b3 is sold out
        assert result.structured_content == payload
        cheap = _payload(await client.call_tool("search_catalog", {"query": "boots", "price_max": 70}))
        assert [card["item_id"] for card in cheap["items"]] == ["b2"]

    _run(mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_bad_arguments_and_unknown_tools_are_error_results(mode: str) -> None:
    async def body(client: Client) -> None:
        too_many = await client.call_tool("search_catalog", {"query": "boots", "k": 50})
        assert too_many.is_error and "field 'k'" in _text(too_many)
        unknown_field = await client.call_tool("search_catalog", {"query": "boots", "colour": "red"})
        assert unknown_field.is_error and "field 'colour'" in _text(unknown_field)
        missing = await client.call_tool("get_item", {})
        assert missing.is_error and "field 'item_id'" in _text(missing)
        unknown = await client.call_tool("delete_catalog", {})
        assert unknown.is_error
        assert "unknown tool 'delete_catalog'; available: find, find_bundle, search_catalog" in _text(unknown)
        handler_error = await client.call_tool("get_item", {"item_id": "nope"})
        assert handler_error.is_error and "unknown item id 'nope'" in _text(handler_error)

    _run(mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_calls_share_the_factorys_session(mode: str) -> None:
    async def body(client: Client) -> None:
        _payload(await client.call_tool("cart_add", {"item_id": "b1"}))
        _payload(await client.call_tool("cart_add", {"item_id": "b1", "quantity": 2}))
        sold_out = await client.call_tool("cart_add", {"item_id": "b3"})
        assert sold_out.is_error and "out of stock" in _text(sold_out)

    assert _run(mode, body).cart == {"b1": 3}


def test_finals_are_sent_as_the_reply_and_item_ids_and_can_be_grounded() -> None:
    async def body(client: Client) -> None:
        final = _payload(await client.call_tool("respond", {"text": "Try these.", "item_ids": ["b1", "b2"]}))
        assert final["ends_turn"] is True and final["reply"] == "Try these." and final["item_ids"] == ["b1", "b2"]
        assert final["actions"] == [{"type": "show_items", "item_ids": ["b1", "b2"]}]
        question = _payload(await client.call_tool("ask_user", {"question": "Which size?"}))
        assert question["reply"] == "Which size?" and question["actions"] == [{"type": "ask_user"}]
        ungrounded = await client.call_tool("respond", {"text": "Buy these.", "item_ids": ["b3", "zz"]})
        assert ungrounded.is_error
        assert "b3 is out of stock" in _text(ungrounded)
        assert "'zz' is not in the catalog" in _text(ungrounded)

    _run("legacy", body, check_final=turn_grounding)


def test_tool_export_without_the_sdk_and_a_clear_error_when_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    app = shopping_app(_catalog())
    factory, _ = _context_factory(app)
    export = ToolExport(app.tools, factory)
    assert [t["name"] for t in export.tools()] == app.tools.names
    result = export.call("search_catalog", {"query": "black boots", "k": 1})
    assert result.ok and jsonable(result.content)["items"][0]["item_id"] == "b1"
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if the extra were not installed
    monkeypatch.setitem(sys.modules, "mcp.types", None)
    with pytest.raises(ImportError, match=r"pip install 'sidekick\[mcp\]'"):
        mcp_server(app.tools, factory)
    assert "sidekick[mcp]" in INSTALL_HINT
