"""A :class:`~harness.protocol.ToolRegistry` exported as an MCP server (Model Context Protocol; extra ``mcp``).

Any MCP client (an IDE agent, another LLM app) then uses an app's tools as our own model does:
``tools/list`` gives each tool's name, description and the JSON schema of
:meth:`ToolRegistry.schemas`; ``tools/call`` runs through :meth:`ToolRegistry.execute`, so arguments
are validated by the tool's pydantic model and every failure is a result, never a crash. A result is
JSON text content (plus ``structuredContent`` when it is an object); an error is an ``isError`` result
whose text names the field (``field 'k': Input should be less than or equal to 20``). A tool that
ends a turn (``respond``, ``ask_user``) returns a :class:`~harness.agent.Final`: it is sent as
``{"ends_turn": true, "reply", "item_ids", "bundles", "actions", "data"}``; pass ``check_final``
(e.g. :func:`turn_grounding`) to refuse finals that name items the catalog cannot back.

The harness knows no apps, so an app supplies the registry and a factory for the context each call
runs against (called once per call; return the same session inside it to keep a cart across calls)::

    pip install 'sidekick[mcp]'

    app = shopping_app(catalog)                  # apps.shopping.agent
    session = SessionState(app="shopping")
    server = mcp_server(app.tools, lambda: TurnContext(app, session, {}, Budget(5000), None),
                        name="sidekick-shopping", check_final=turn_grounding)
    anyio.run(run_stdio, server)                 # serve on stdin / stdout

The ``mcp`` package is imported only when a server is built; without it :func:`mcp_server` raises an
ImportError that says what to install. Tests: ``.venv/bin/python -m pytest tests/harness/test_mcp.py -q``.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic

from pydantic import BaseModel

from harness.agent import Final, Grounder, TurnContext
from harness.protocol import Ctx, ToolCall, ToolRegistry, ToolResult

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

INSTALL_HINT = "the MCP export needs the MCP SDK: pip install 'sidekick[mcp]' (or: pip install 'mcp>=2.0')"


class ToolExport(Generic[Ctx]):
    """The MCP view of a registry, without the SDK: tool definitions and blocking calls (one at a time).

    Calls are serialised by a lock: tool handlers and the contexts they mutate (a session's cart) are
    not thread-safe, and the server runs each call in a worker thread.
    """

    def __init__(self, registry: ToolRegistry[Ctx], context_factory: Callable[[], Ctx], *,
                 check_final: Callable[[Final, Ctx], list[str]] | None = None) -> None:
        self.registry, self.context_factory, self.check_final = registry, context_factory, check_final
        self._lock = threading.Lock()

    def tools(self) -> list[dict[str, Any]]:
        """``[{name, description, inputSchema}]``: the registry's OpenAI schemas in MCP's shape."""
        out = []
        for schema in self.registry.schemas():
            fn = schema["function"]
            out.append({"name": fn["name"], "description": fn["description"], "inputSchema": fn["parameters"]})
        return out

    def call(self, name: str, arguments: dict[str, Any] | None) -> ToolResult:
        """Run one call against a fresh context from the factory. Never raises for what the call does wrong."""
        with self._lock:
            ctx = self.context_factory()
            call = ToolCall(name=name, arguments=arguments or {})
            result = self.registry.execute(call, ctx)
            if result.ok and isinstance(result.content, Final) and self.check_final is not None:
                problems = self.check_final(result.content, ctx)
                if problems:
                    return ToolResult(name=name, call_id=call.id, ok=False,
                                      error="not sent: " + "; ".join(problems[:5]))
            return result


def jsonable(content: Any) -> Any:
    """A tool's return value as plain JSON data (a :class:`Final` as its reply, items, bundles and actions)."""
    if isinstance(content, Final):
        return {"ends_turn": True, "reply": content.reply, "item_ids": content.item_ids,
                "bundles": content.bundles, "actions": content.actions, "data": jsonable(content.data)}
    if isinstance(content, BaseModel):
        return content.model_dump(mode="json")
    if dataclasses.is_dataclass(content) and not isinstance(content, type):
        return jsonable(dataclasses.asdict(content))
    return json.loads(json.dumps(content, ensure_ascii=False, default=_fallback))


def _fallback(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def turn_grounding(final: Final, ctx: TurnContext) -> list[str]:
    """What is wrong with the items a final names (unknown, out of stock, against the constraints): the
    agent loop's rule for :class:`~harness.agent.TurnContext` tools, as a ``check_final``."""
    sid_map = ctx.model.sid.sid_map if ctx.model is not None and ctx.model.sid is not None else None
    grounder = Grounder(ctx.catalog, sid_map, ctx.app.item_check, require_stock=ctx.app.require_stock)
    return grounder.check(final.named_items(), ctx.constraints)[1]


def mcp_server(registry: ToolRegistry[Ctx], context_factory: Callable[[], Ctx], *, name: str = "sidekick",
               version: str = "", instructions: str | None = None,
               check_final: Callable[[Final, Ctx], list[str]] | None = None) -> Server[Any]:
    """A low-level MCP :class:`mcp.server.lowlevel.Server` serving ``registry``'s tools (needs the ``mcp`` extra)."""
    try:
        import anyio
        import mcp.types as types
        from mcp.server.lowlevel import Server
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e

    export = ToolExport(registry, context_factory, check_final=check_final)
    tools = [types.Tool(name=t["name"], description=t["description"], input_schema=t["inputSchema"])
             for t in export.tools()]

    async def list_tools(_: Any, __: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(_: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        result = await anyio.to_thread.run_sync(export.call, params.name, params.arguments)
        if not result.ok:
            return types.CallToolResult(content=[types.TextContent(text=result.error or "failed")], is_error=True)
        payload = jsonable(result.content)
        text = json.dumps(payload, ensure_ascii=False)
        return types.CallToolResult(content=[types.TextContent(text=text)],
                                    structured_content=payload if isinstance(payload, dict) else None)

    return Server(name, version=version, instructions=instructions, on_list_tools=list_tools,
                  on_call_tool=call_tool)


async def run_stdio(server: Server[Any]) -> None:
    """Serve ``server`` over stdin / stdout until the client closes them (how MCP clients launch tools)."""
    try:
        from mcp.server.stdio import stdio_server
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
