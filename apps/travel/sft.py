"""The travel app's SFT data: the planner fallback's passing plans as served ``respond`` calls (FallbackSft)."""

from __future__ import annotations

from typing import Any

from apps.teacher_sft import FallbackSft
from apps.travel.agent import SYSTEM_PROMPT, TOOLS
from apps.travel.kit import env
from harness.agent import Final
from harness.protocol import ToolCall, ToolRegistry


def tool_schemas() -> list[dict[str, Any]]:
    return ToolRegistry(TOOLS).schemas()


def respond_call(final: Final) -> ToolCall:
    """The fallback's plan as the model should write it: ``respond`` with every stop and the travel mode."""
    plan = final.data.get("itinerary") or {"stops": []}
    stops = [{k: s[k] for k in ("poi_id", "arrive_min", "depart_min")} for s in plan["stops"]]
    return ToolCall(name="respond", arguments={"text": final.reply, "itinerary": stops, "mode": plan.get("mode")},
                    id="call_1")


SOURCE = FallbackSft(SYSTEM_PROMPT, tool_schemas, env, respond_call)
