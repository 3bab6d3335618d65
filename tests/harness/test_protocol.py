"""The action protocol: tolerant parsing, OpenAI schemas from pydantic, errors as results.

Run: .venv/bin/python -m pytest tests/harness/test_protocol.py -q
"""

from __future__ import annotations

import json

from pydantic import BaseModel, Field
from transformers import PreTrainedTokenizerFast

from harness.protocol import (
    Tool,
    ToolCall,
    ToolError,
    ToolRegistry,
    assistant_message,
    parse_reply,
    render_call,
    salvage_call,
    tool_schema,
)
from training.chat_template import chat_template


class Price(BaseModel):
    max: float = Field(description="Upper bound.")


class SearchArgs(BaseModel):
    query: str = Field(description="What to look for.")
    k: int = Field(10, ge=1, le=50)
    price: Price | None = None


def _search(args: SearchArgs, ctx: dict[str, int]) -> list[str]:
    if args.query == "boom":
        raise RuntimeError("bug")
    if args.query == "nothing":
        raise ToolError("no results for 'nothing'")
    ctx["calls"] = ctx.get("calls", 0) + 1
    return [args.query] * min(args.k, 2)


REGISTRY: ToolRegistry[dict[str, int]] = ToolRegistry([Tool("search", "Search the catalog.", SearchArgs, _search)])


def test_parse_one_call_with_text() -> None:
    text = 'Let me look.\n<tool_call>\n{"name": "search", "arguments": {"query": "red boots"}}\n</tool_call>'
    parsed = parse_reply(text)
    assert parsed.content == "Let me look."
    assert [(c.name, c.arguments) for c in parsed.calls] == [("search", {"query": "red boots"})]
    assert parsed.problems == []


def test_parse_tolerates_string_arguments_wrapper_trailing_comma_and_unclosed_block() -> None:
    text = ('<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>'
            '<tool_call>{"function": {"name": "b", "arguments": {"y": [1, 2,],}}}</tool_call>'
            '<tool_call>{"name": "c", "arguments": {}}')  # cut by the token cap before </tool_call>
    parsed = parse_reply(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("a", {"x": 1}), ("b", {"y": [1, 2]}), ("c", {})]
    assert parsed.content == ""


def test_parse_turns_garbage_into_problems_not_exceptions() -> None:
    text = ("<tool_call>not json</tool_call><tool_call>[1, 2]</tool_call>"
            '<tool_call>{"arguments": {}}</tool_call><tool_call>{"name": "x", "arguments": 5}</tool_call>')
    parsed = parse_reply(text)
    assert parsed.calls == []
    reasons = [p.reason for p in parsed.problems]
    assert reasons == ["no JSON object", "no JSON object", "missing 'name'", "'arguments' is not a JSON object"]


class PickArgs(BaseModel):
    slots: list[str] = Field(min_length=1)
    budget: float = Field(gt=0)
    colour: str | None = None


PICKS: ToolRegistry[dict[str, int]] = ToolRegistry([
    Tool("search", "Search the catalog.", SearchArgs, _search),
    Tool("pick", "Pick one item per slot.", PickArgs, lambda args, ctx: args.slots)])


def _salvaged(block: str) -> ToolCall | None:
    [problem] = parse_reply(f"<tool_call>{block}</tool_call>").problems
    return salvage_call(problem, PICKS)


def test_salvage_reads_what_a_broken_call_still_says() -> None:
    # a list never closed: its strings up to the next key; then the scalar pairs of the tool's fields
    cut = _salvaged('{"name": "pick", "arguments": {"slots": ["Tent", "Sleeping bag", "budget": 200, "k": 3}}')
    assert cut is not None and cut.name == "pick" and cut.arguments == {"slots": ["Tent", "Sleeping bag"],
                                                                          "budget": 200}
    # a stray string between pairs; the first value of a key wins; unknown keys are left out
    stray = _salvaged('{"name": "search", "arguments": {"query": "boots", "red", "k": 5, "k": 9, "colour": "x"}}')
    assert stray is not None and stray.arguments == {"query": "boots", "k": 5}
    assert _salvaged('{"name": 10}} {"name": 90}}') is None                    # no tool named
    assert _salvaged('{"name": "nope", "arguments": {"query": "x", }') is None   # not a tool
    assert _salvaged('{"name": "pick", "arguments": {"slots": ["Tent", ') is None  # no budget: does not validate


def test_plain_text_has_no_calls() -> None:
    parsed = parse_reply("  Hello there.  ")
    assert parsed.content == "Hello there." and parsed.calls == [] and parsed.problems == []


def test_schema_is_openai_shape_with_refs_inlined() -> None:
    schema = tool_schema("search", "Search the catalog.", SearchArgs)
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "search" and fn["description"] == "Search the catalog."
    params = fn["parameters"]
    assert params["required"] == ["query"]
    assert params["properties"]["k"] == {"default": 10, "maximum": 50, "minimum": 1, "type": "integer"}
    assert "$defs" not in json.dumps(params) and "$ref" not in json.dumps(params)
    price = params["properties"]["price"]["anyOf"][0]
    assert price["properties"]["max"]["type"] == "number"


def test_execute_returns_errors_as_results() -> None:
    ctx: dict[str, int] = {}
    ok = REGISTRY.execute(ToolCall(name="search", arguments={"query": "tent", "k": 5}), ctx)
    assert ok.ok and ok.content == ["tent", "tent"] and ctx["calls"] == 1
    unknown = REGISTRY.execute(ToolCall(name="serch", arguments={}), ctx)
    assert not unknown.ok and "unknown tool 'serch'" in (unknown.error or "") and "search" in (unknown.error or "")
    bad = REGISTRY.execute(ToolCall(name="search", arguments={"query": "x", "k": 0}), ctx)
    assert not bad.ok and "field 'k'" in (bad.error or "")
    missing = REGISTRY.execute(ToolCall(name="search", arguments={}), ctx)
    assert "field 'query'" in (missing.error or "")
    tool_error = REGISTRY.execute(ToolCall(name="search", arguments={"query": "nothing"}), ctx)
    assert tool_error.error == "no results for 'nothing'"
    crash = REGISTRY.execute(ToolCall(name="search", arguments={"query": "boom"}), ctx)
    assert crash.error == "internal error in search: RuntimeError"
    message = json.loads(crash.to_message()["content"])
    assert message == {"ok": False, "error": "internal error in search: RuntimeError"}


def test_chat_template_round_trip(chat_tokenizer: PreTrainedTokenizerFast) -> None:
    """What the template renders for an assistant tool call, the parser reads back."""
    tok = chat_tokenizer
    tok.chat_template = chat_template(None)
    calls = [ToolCall(name="search", arguments={"query": "wool socks", "k": 3}),
             ToolCall(name="get_item", arguments={"item_id": "sku-1"})]
    convo = [{"role": "user", "content": "socks"}, assistant_message("Looking.", calls)]
    text = tok.apply_chat_template(convo, tools=REGISTRY.schemas(), tokenize=False)
    assistant = text.split("<|im_start|>assistant\n", 1)[1].removesuffix("<|im_end|>\n")
    parsed = parse_reply(assistant)
    assert parsed.content == "Looking."
    assert [(c.name, c.arguments) for c in parsed.calls] == [(c.name, c.arguments) for c in calls]
    assert parse_reply(render_call("x", {"a": 1})).calls[0].arguments == {"a": 1}


def test_parse_restores_a_missing_opening_tag() -> None:
    text = ('Sure. {"name": "search", "arguments": {"query": "tent"}}\n</tool_call>'
            '<tool_call>{"name": "search", "arguments": {"query": "mat"}}</tool_call> and {"x": 1}</tool_call>')
    parsed = parse_reply(text)
    assert [c.arguments["query"] for c in parsed.calls[:2]] == ["tent", "mat"]
    assert [p.reason for p in parsed.problems] == ["missing 'name'"]  # the third object has no name
    assert parsed.content == "Sure.  and"
