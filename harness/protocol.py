"""The action protocol between a model and the harness: typed tools, tool calls, results, and a tolerant parser.

Tools are declared with a pydantic model of their arguments; :func:`tool_schema` turns one into the
OpenAI tools JSON schema the chat template lists in the system turn. The model answers with text and
zero or more tool calls in the Qwen2.5 / Hermes format that :mod:`training.chat_template` renders::

    <tool_call>
    {"name": "search_catalog", "arguments": {"query": "red boots"}}
    </tool_call>

:func:`parse_reply` reads them back and never raises: a call whose JSON is broken, unclosed or not an
object becomes a :class:`ParseProblem`, which the loop shows the model as an error observation.
:meth:`ToolRegistry.execute` validates arguments against the tool's model (an error result names the
field), runs the handler, and turns a :class:`ToolError` — or any other exception a handler raises —
into an error :class:`ToolResult`: errors are results too, never an exception that ends the turn.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger(__name__)

TOOL_CALL_START, TOOL_CALL_END = "<tool_call>", "</tool_call>"
_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)

Args = TypeVar("Args", bound=BaseModel)
Ctx = TypeVar("Ctx")


class ToolError(Exception):
    """Raised by a tool handler for a failure the model should see and can act on (bad id, empty result…)."""


class ToolCall(BaseModel):
    """One call the model made: a tool name and its JSON arguments (OpenAI ``function`` shape)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str = Field(default_factory=lambda: "call_" + uuid.uuid4().hex[:12])

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI chat ``tool_calls`` entry (arguments as a JSON string)."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments)}}


class ToolResult(BaseModel):
    """What a call returned. ``ok=False`` results carry ``error``; the model sees both kinds the same way."""

    model_config = ConfigDict(extra="forbid")

    name: str
    call_id: str
    ok: bool
    content: Any = None
    error: str | None = None

    def to_message(self) -> dict[str, Any]:
        """The ``tool`` chat message the template renders inside ``<tool_response>``."""
        body = {"ok": True, "result": self.content} if self.ok else {"ok": False, "error": self.error}
        return {"role": "tool", "tool_call_id": self.call_id, "name": self.name,
                "content": json.dumps(body, ensure_ascii=False, default=str)}


@dataclass(frozen=True)
class ParseProblem:
    """A tool-call block the parser could not read, with why (shown to the model as an error observation)."""

    snippet: str
    reason: str
    raw: str = ""


@dataclass
class ParsedReply:
    """An assistant message split into its free text and its tool calls."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    problems: list[ParseProblem] = field(default_factory=list)


def _loads_object(raw: str) -> dict[str, Any]:
    """The JSON object in ``raw``, tolerating stray text around it and a trailing comma; raises ValueError."""
    text = raw.strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object")
    body = text[start:end + 1]
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as first:
        try:
            obj = json.loads(re.sub(r",\s*([}\]])", r"\1", body))
        except json.JSONDecodeError:
            raise ValueError(f"invalid JSON: {first.msg} at column {first.colno}") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def _restore_open_tags(text: str) -> str:
    """Put back a missing ``<tool_call>`` before a JSON object that a ``</tool_call>`` closes (small models often
    drop the opening tag): the object starts at the first ``{`` after the previous block or the start."""
    out, pos = [], 0
    for close in re.finditer(re.escape(TOOL_CALL_END), text):
        segment = text[pos:close.start()]
        if TOOL_CALL_START not in segment:
            brace = segment.find("{")
            if brace >= 0:
                segment = segment[:brace] + TOOL_CALL_START + segment[brace:]
        out.append(segment + TOOL_CALL_END)
        pos = close.end()
    out.append(text[pos:])
    return "".join(out)


def parse_reply(text: str) -> ParsedReply:
    """Split model output into free text and tool calls; unreadable calls become problems, never exceptions.

    Accepts ``{"name", "arguments"}`` (arguments an object or a JSON string) and the OpenAI
    ``{"function": {...}}`` wrapper. An unclosed final block (generation cut by a token cap) is read
    as far as it goes.
    """
    calls: list[ToolCall] = []
    problems: list[ParseProblem] = []
    text = _restore_open_tags(text)
    for match in _CALL_BLOCK.finditer(text):
        raw = match.group(1)
        snippet = raw.strip()[:200]
        try:
            obj = _loads_object(raw)
            obj = obj.get("function", obj) if isinstance(obj.get("function"), dict) else obj
            name = obj.get("name")
            if not isinstance(name, str) or not name.strip():
                raise ValueError("missing 'name'")
            args = obj.get("arguments", obj.get("parameters", {}))
            if isinstance(args, str):
                args = _loads_object(args) if args.strip() else {}
            if not isinstance(args, dict):
                raise ValueError("'arguments' is not a JSON object")
            calls.append(ToolCall(name=name.strip(), arguments=args))
        except ValueError as e:
            problems.append(ParseProblem(snippet, str(e), raw))
    content = _CALL_BLOCK.sub("", text).strip()
    return ParsedReply(content=content, calls=calls, problems=problems)


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Resolve local ``$ref``s and drop pydantic's ``title`` noise: small models read flat schemas better."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(dict(defs[node["$ref"].rsplit("/", 1)[-1]]))
            return {k: walk(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out: dict[str, Any] = walk(schema)
    return out


@dataclass(frozen=True)
class Tool(Generic[Args, Ctx]):
    """A tool: its name, what it does (for the model), its argument model and its handler."""

    name: str
    description: str
    args: type[Args]
    handler: Callable[[Args, Ctx], Any]

    def schema(self) -> dict[str, Any]:
        return tool_schema(self.name, self.description, self.args)


def tool_schema(name: str, description: str, args: type[BaseModel]) -> dict[str, Any]:
    """The OpenAI tools entry ``{"type": "function", "function": {name, description, parameters}}`` (a fresh
    copy each call; the JSON schema is built once per tool, since building it costs ~0.4 ms and every model
    call renders every tool)."""
    loaded: dict[str, Any] = json.loads(_schema_json(name, description, args))
    return loaded


@functools.lru_cache(maxsize=1024)
def _schema_json(name: str, description: str, args: type[BaseModel]) -> str:
    params = _inline_refs(args.model_json_schema())
    params.setdefault("properties", {})
    return json.dumps({"type": "function", "function": {"name": name, "description": description,
                                                         "parameters": params}})


def _validation_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(p) for p in e["loc"]) or "arguments"
        parts.append(f"field '{where}': {e['msg']}")
    return "; ".join(parts)


class ToolRegistry(Generic[Ctx]):
    """The tools one app offers, by name; executes calls against a context, errors as results."""

    def __init__(self, tools: Iterable[Tool[Any, Ctx]]) -> None:
        self._tools: dict[str, Tool[Any, Ctx]] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"duplicate tool name {tool.name!r}")
            self._tools[tool.name] = tool

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool[Any, Ctx] | None:
        return self._tools.get(name)

    def schemas(self, only: Iterable[str] | None = None) -> list[dict[str, Any]]:
        keep = set(only) if only is not None else None
        return [t.schema() for t in self._tools.values() if keep is None or t.name in keep]

    def validate(self, call: ToolCall) -> tuple[Tool[Any, Ctx], BaseModel] | ToolResult:
        """The tool and its parsed arguments, or the error result that explains why the call is invalid."""
        tool = self._tools.get(call.name)
        if tool is None:
            return ToolResult(name=call.name, call_id=call.id, ok=False,
                              error=f"unknown tool {call.name!r}; available: {', '.join(self._tools)}")
        try:
            return tool, tool.args.model_validate(call.arguments)
        except ValidationError as e:
            return ToolResult(name=call.name, call_id=call.id, ok=False, error=_validation_message(e))

    def execute(self, call: ToolCall, ctx: Ctx) -> ToolResult:
        """Run one call. Never raises for anything the call or the handler does wrong."""
        checked = self.validate(call)
        if isinstance(checked, ToolResult):
            return checked
        tool, args = checked
        try:
            content = tool.handler(args, ctx)
        except ToolError as e:
            return ToolResult(name=call.name, call_id=call.id, ok=False, error=str(e))
        except Exception as e:  # a bug in a tool must not kill the turn; it is logged and shown as an error
            log.exception("tool %s failed", call.name)
            return ToolResult(name=call.name, call_id=call.id, ok=False,
                              error=f"internal error in {call.name}: {type(e).__name__}")
        return ToolResult(name=call.name, call_id=call.id, ok=True, content=content)


_SALVAGE_NAME = re.compile(r'"name"\s*:\s*"([A-Za-z_]\w*)"')
_SALVAGE_PAIR = re.compile(r'"([A-Za-z_]\w*)"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null|\[[^\]]*\]?)')
_SALVAGE_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def salvage_call(problem: ParseProblem, tools: ToolRegistry[Any]) -> ToolCall | None:
    """What a broken tool call still says, or None: a small model's call cut short or with a stray token
    (``{"name": "find", "arguments": {"category": "Tents", "Running shoes", "price_max": 35}}``). The tool is
    the one it names; its arguments the ``"key": value`` pairs it wrote for that tool's fields (strings,
    numbers, booleans, lists of strings; a list cut short keeps its strings before the first ``key:``),
    first value of a key wins. None unless the call names a known tool and the arguments validate."""
    raw = problem.raw or problem.snippet
    head = _SALVAGE_NAME.search(raw)
    tool = tools.get(head.group(1)) if head else None
    if head is None or tool is None:
        return None
    fields = set(tool.args.model_fields)
    body = raw[head.end():]
    args: dict[str, Any] = {}
    try:
        _salvage_pairs(body, fields, args)
    except ValueError:  # a value that is no JSON after all (a bad escape)
        return None
    call = ToolCall(name=tool.name, arguments=args)
    return call if not isinstance(tools.validate(call), ToolResult) else None


def _salvage_pairs(body: str, fields: set[str], args: dict[str, Any]) -> None:
    pos = 0
    while (m := _SALVAGE_PAIR.search(body, pos)) is not None:
        key, value = m.group(1), m.group(2)
        pos = m.end()
        items: list[Any] = []
        if value.startswith("["):
            for s in _SALVAGE_STRING.finditer(value):
                if body[m.start(2) + s.end():].lstrip().startswith(":"):
                    pos = m.start(2) + s.start()  # a key, not an item: the list was never closed; read on from it
                    break
                items.append(json.loads(f'"{s.group(1)}"'))
        if key in fields and key not in args:
            args[key] = items if value.startswith("[") else json.loads(value)


def problem_result(problem: ParseProblem) -> ToolResult:
    """The error observation for an unreadable tool call."""
    return ToolResult(name="(unparsed)", call_id="call_unparsed", ok=False,
                      error=f"could not read tool call ({problem.reason}): {problem.snippet!r}; "
                            'write <tool_call>{"name": ..., "arguments": {...}}</tool_call>')


def assistant_message(content: str, calls: Iterable[ToolCall]) -> dict[str, Any]:
    """The assistant chat message (OpenAI shape) for the conversation history."""
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    tool_calls = [c.to_openai() for c in calls]
    if tool_calls:
        msg["tool_calls"] = tool_calls
    return msg


def render_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A tool call as the model writes it (what SFT trajectories and scripted test engines emit)."""
    return f'{TOOL_CALL_START}\n{json.dumps({"name": name, "arguments": dict(arguments)})}\n{TOOL_CALL_END}'
