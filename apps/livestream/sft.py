"""The livestream app's SFT data: the rule fallback's correct answers as served ``respond`` calls (``FallbackSft``)."""

from __future__ import annotations

from typing import Any

from apps.livestream.agent import SYSTEM_PROMPT, TOOLS
from apps.livestream.kit import env
from apps.teacher_sft import FallbackSft
from harness.agent import Final
from harness.protocol import ToolCall, ToolRegistry


def tool_schemas() -> list[dict[str, Any]]:
    return ToolRegistry(TOOLS).schemas()


def respond_call(final: Final) -> ToolCall:
    """The fallback's answer as the model should write it: ``respond`` with the facts it cites."""
    cited = [str(f) for f in final.data.get("cited_facts", [])]
    return ToolCall(name="respond", arguments={"answer": final.reply, "cited_facts": cited,
                                               "item_ids": list(final.item_ids)}, id="call_1")


SOURCE = FallbackSft(SYSTEM_PROMPT, tool_schemas, env, respond_call)
